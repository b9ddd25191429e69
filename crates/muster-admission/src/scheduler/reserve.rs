//! Reservations for blocked jobs, from the timeline of running jobs' expected ends.

use std::cell::{Ref, RefCell};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use muster_api::Resources;
use muster_topology::{Constraint, NodeId};

use super::{Assignment, Blocked, Holding, JobState, Options, Scheduler, SharedId};
use crate::cluster::ClusterMark;
use crate::job::Job;
use crate::quota::{Booking, QuotaBook, QuotaScope};
use crate::reservation::Reservation;

/// The order in which a reservation search releases jobs, and the quota book as it will be
/// at times on the timeline; good while usage stays as it is (one cycle, until its next
/// admission).
///
/// The order is taken from the scheduler's indexes as far as a search reaches, not whole:
/// every holder of a large fleet is tens of thousands of jobs, a cycle builds an order
/// afresh, and most searches find their answer among the first few hundred to end. Taking
/// more never changes what was taken: the timeline past what is taken is the scheduler's
/// expected ends after the last one taken, in the order they are kept.
pub(super) struct ReleaseOrder {
    /// The time the order was built for: expected ends at or before it are due now.
    now: i64,
    /// Whether jobs past their expected end leave now (see [`Scheduler::release_order`]).
    overdue_leave: bool,
    /// How many holders are on the timeline: jobs due now, then jobs with an expected end.
    known: usize,
    /// How many holders there are in all: the timeline, then jobs without a known end.
    len: usize,
    /// The order as far as taken.
    taken: RefCell<Taken>,
    /// Time → the quota book once every job on the timeline that ends by then is gone, as
    /// far as asked for.
    books: RefCell<BTreeMap<i64, QuotaBook>>,
}

/// The first holders of a release order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Taken {
    /// The timeline's expected ends taken so far: `ends[i]` is when `order[i]` ends.
    pub(super) ends: Vec<i64>,
    /// What each job of the timeline taken so far books: `bookings[i]` is `order[i]`'s (its
    /// entry's booking), as long as `ends`.
    pub(super) bookings: Vec<Option<Arc<Booking>>>,
    /// The holders taken so far: the first `ends.len()` are the timeline's, and once the
    /// whole timeline is taken, every job without a known end follows, by id.
    pub(super) order: Vec<SharedId>,
    /// How many of the first holders end together at the order's `now` (being evicted or,
    /// when they leave, overdue): those are by id, not taken from the expected ends.
    due: usize,
}

/// How many holders a release order takes at least when it must take more. Debug builds take
/// one: what is taken never changes an answer, and every test then walks the order as far as
/// a search reaches, patched by admissions where it is taken and not where it is not (the
/// cycle checks it against a rebuilt one after every admission).
const TAKE_AT_LEAST: usize = if cfg!(debug_assertions) { 1 } else { 64 };

impl ReleaseOrder {
    /// How many holders the order has.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// How many of them are on the timeline (with an end, or due now).
    pub(super) fn known(&self) -> usize {
        self.known
    }

    /// Job `id`, just admitted, joins the order where a rebuilt order would have it: on the
    /// timeline at its expected end `end` (after `now`), or among the jobs without a known
    /// end, by id. Where the order is not taken that far, nothing is to be done: the job is
    /// among the scheduler's expected ends (or holders without one) already, and is taken
    /// from there in its place. The quota books asked for so far stay: `add` books the job's
    /// usage into each that it is still running at (before `end`), which is what a rebuilt
    /// book holds. In one that is at or past its end, a rebuild would book it and release
    /// it again. `false` (nothing changed) when `end` is not after `now`: it would sort among
    /// the jobs due now, and the caller rebuilds.
    pub(super) fn admitted(
        &mut self,
        (id, booking): (&str, Option<&Arc<Booking>>),
        end: Option<i64>,
        now: i64,
        add: impl Fn(&mut QuotaBook),
    ) -> bool {
        let id: SharedId = Arc::from(id);
        let taken = self.taken.get_mut();
        let whole_timeline = taken.ends.len() == self.known;
        match end {
            Some(end) if end <= now => return false,
            Some(end) => {
                // The timeline is sorted by (end, id): bisect what is taken of it. A job
                // past the last one taken is taken in its turn.
                let (mut at, mut past) = (0, taken.ends.len());
                while at < past {
                    let mid = at + (past - at) / 2;
                    if (taken.ends[mid], &taken.order[mid]) < (end, &id) {
                        at = mid + 1;
                    } else {
                        past = mid;
                    }
                }
                if at < taken.ends.len() || whole_timeline {
                    taken.ends.insert(at, end);
                    taken.bookings.insert(at, booking.cloned());
                    taken.order.insert(at, id);
                }
                self.known += 1;
            }
            None => {
                if taken.order.len() == self.len {
                    let known = taken.ends.len();
                    let at = known + taken.order[known..].partition_point(|o| *o < id);
                    taken.order.insert(at, id);
                }
            }
        }
        self.len += 1;
        for (t, book) in self.books.get_mut().iter_mut() {
            if end.is_none_or(|end| end > *t) {
                add(book);
            }
        }
        true
    }

    /// The whole order as it stands, taken from `s` without changing what this order has
    /// taken (for debug builds to compare with a rebuilt one).
    #[cfg(debug_assertions)]
    pub(super) fn whole(&self, s: &Scheduler) -> Taken {
        let copy = ReleaseOrder {
            now: self.now,
            overdue_leave: self.overdue_leave,
            known: self.known,
            len: self.len,
            taken: RefCell::new(self.taken.borrow().clone()),
            books: RefCell::new(BTreeMap::new()),
        };
        s.take_order(&copy, copy.len);
        copy.taken.into_inner()
    }

    /// What is taken so far (for debug builds: a prefix of the whole order).
    #[cfg(debug_assertions)]
    pub(super) fn taken(&self) -> Taken {
        self.taken.borrow().clone()
    }

    /// The quota books asked for so far, by time (for debug builds to compare with rebuilt
    /// ones).
    #[cfg(debug_assertions)]
    pub(super) fn books(&self) -> Vec<(i64, QuotaBook)> {
        self.books
            .borrow()
            .iter()
            .map(|(t, b)| (*t, b.clone()))
            .collect()
    }
}

impl Taken {
    /// Whether `self` is where `whole` starts.
    #[cfg(debug_assertions)]
    pub(super) fn starts(&self, whole: &Taken) -> bool {
        whole.ends.starts_with(&self.ends)
            && whole.bookings.starts_with(&self.bookings)
            && whole.order.starts_with(&self.order)
            && self.due == whole.due
    }
}

impl Scheduler {
    /// The quota book at time `t`: today's, less every job on `release`'s timeline that ends
    /// by then. Reservations in one cycle mostly start at the same few times (jobs admitted
    /// together end together), so each book is built once, from the latest earlier one.
    pub(super) fn book_at(&self, release: &ReleaseOrder, t: i64) -> QuotaBook {
        let mut books = release.books.borrow_mut();
        if let Some(book) = books.get(&t) {
            return book.clone();
        }
        let (from, mut book) = match books.range(..t).next_back() {
            Some((from, book)) => (Some(*from), book.clone()),
            None => (None, self.quota.clone()),
        };
        self.take_timeline_until(release, t);
        let taken = release.taken.borrow();
        let start = from.map_or(0, |f| taken.ends.partition_point(|end| *end <= f));
        for (k, end) in taken.ends.iter().enumerate().skip(start) {
            if *end > t {
                break;
            }
            debug_assert_eq!(
                taken.bookings[k],
                self.jobs
                    .get(&taken.order[k])
                    .and_then(|e| e.booking.clone()),
                "the booking kept beside {}'s end is its entry's",
                taken.order[k]
            );
            if let Some(booking) = taken.bookings[k].as_deref() {
                book.remove_booking(booking);
            }
        }
        books.insert(t, book.clone());
        book
    }

    /// How many admitted jobs are past their expected end at `now`.
    pub(super) fn overdue(&self, now: i64) -> usize {
        self.ends
            .range(..(now.saturating_add(1), SharedId::from("")))
            .count()
    }

    /// The order in which a reservation search releases jobs: admitted jobs with their
    /// expected end, soonest first, then by id, with jobs being evicted (and, when
    /// `overdue_leave`, jobs past their expected end) due now; then every other job that
    /// holds capacity (no known end), by id. A reservation counts jobs past their expected
    /// end as leaving now (`overdue_leave`: what they hold is as good as free, so nothing may
    /// start there that would outlast them); a preemptor weighing whether to wait does not
    /// (a job that overran what it announced says nothing about when it ends, and waiting on
    /// it could last for ever), and counts them among the jobs of unknown end. Only the jobs
    /// due now are taken at once; the rest as a search reaches them ([`Scheduler::take_order`]).
    pub(super) fn release_order(&self, now: i64, overdue_leave: bool) -> ReleaseOrder {
        let overdue = self.overdue(now);
        // Jobs being evicted are looked up for their booking; those past their end carry it.
        let mut due: Vec<(SharedId, Option<Arc<Booking>>)> = self
            .evicting
            .iter()
            .map(|id| {
                let booking = self.jobs.get(id).and_then(|e| e.booking.clone());
                (Arc::clone(id), booking)
            })
            .collect();
        if overdue_leave {
            due.extend(
                self.ends
                    .iter()
                    .take(overdue)
                    .map(|((_, id), booking)| (Arc::clone(id), booking.clone())),
            );
        }
        // Ids are unique: an unstable sort by them is the order.
        due.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let (due, bookings): (Vec<SharedId>, Vec<Option<Arc<Booking>>>) = due.into_iter().unzip();
        let on_timeline = self.evicting.len() + self.ends.len();
        let known = if overdue_leave {
            on_timeline
        } else {
            on_timeline - overdue
        };
        let taken = Taken {
            ends: vec![now; due.len()],
            bookings,
            due: due.len(),
            order: due,
        };
        ReleaseOrder {
            now,
            overdue_leave,
            known,
            len: on_timeline + self.provisioning.len() + self.unending.len(),
            taken: RefCell::new(taken),
            books: RefCell::new(BTreeMap::new()),
        }
    }

    /// Takes `release`'s order at least `k` holders far (or whole), more when it must take
    /// any: a search that reaches past what is taken mostly goes on. Returns what is taken.
    pub(super) fn take_order<'r>(&self, release: &'r ReleaseOrder, k: usize) -> Ref<'r, Taken> {
        let k = k.min(release.len);
        if release.taken.borrow().order.len() < k {
            let mut taken = release.taken.borrow_mut();
            let want = k.max(taken.order.len() * 2).max(TAKE_AT_LEAST);
            let timeline_want = want.min(release.known);
            self.take_timeline(release, &mut taken, |taken| {
                taken.ends.len() >= timeline_want
            });
            if want > release.known && taken.order.len() < release.len {
                // The jobs without a known end, by id: bought capacity's, those without a
                // runtime and, unless they leave, those past it.
                let overdue = if release.overdue_leave {
                    0
                } else {
                    self.overdue(release.now)
                };
                let mut rest: Vec<SharedId> = self
                    .provisioning
                    .iter()
                    .chain(&self.unending)
                    .chain(self.ends.keys().take(overdue).map(|(_, id)| id))
                    .cloned()
                    .collect();
                rest.sort();
                taken.order.extend(rest);
            }
        }
        release.taken.borrow()
    }

    /// Takes `release`'s timeline up to the first job that ends after `t` (or whole).
    fn take_timeline_until(&self, release: &ReleaseOrder, t: i64) {
        let mut taken = release.taken.borrow_mut();
        let mut want = taken.ends.len().max(TAKE_AT_LEAST);
        while taken.ends.len() < release.known && taken.ends.last().is_none_or(|end| *end <= t) {
            want = want.saturating_mul(2);
            self.take_timeline(release, &mut taken, |taken| taken.ends.len() >= want);
        }
    }

    /// Takes expected ends onto `taken`'s timeline, in order, until `enough` (or the
    /// timeline is whole): after the jobs due now, the scheduler's expected ends after the
    /// release order's time, from the one after the last taken.
    fn take_timeline(
        &self,
        release: &ReleaseOrder,
        taken: &mut Taken,
        enough: impl Fn(&Taken) -> bool,
    ) {
        if taken.ends.len() >= release.known || enough(taken) {
            return;
        }
        let from = if taken.ends.len() > taken.due {
            let last = taken.ends.len() - 1;
            Bound::Excluded((taken.ends[last], taken.order[last].clone()))
        } else {
            Bound::Included((release.now.saturating_add(1), SharedId::from("")))
        };
        for ((end, id), booking) in self.ends.range((from, Bound::Unbounded)) {
            taken.ends.push(*end);
            taken.bookings.push(booking.clone());
            taken.order.push(id.clone());
            if enough(taken) {
                break;
            }
        }
    }

    pub(super) fn holding_of(&self, id: &str) -> Option<(Arc<Job>, Holding)> {
        let e = self.jobs.get(id)?;
        match &e.state {
            JobState::Admitted(h) | JobState::Provisioning(h) | JobState::Evicting(h) => {
                Some((Arc::clone(&e.job), h.clone()))
            }
            JobState::Pending => None,
        }
    }

    /// Releases `ids` tentatively: their quota and, with `nodes`, their nodes (the caller
    /// restores the cluster mark and the quota book).
    pub(super) fn release_tentatively<S: AsRef<str>>(&mut self, ids: &[S], nodes: bool) {
        for id in ids {
            if let Some(e) = self.jobs.get(id.as_ref()) {
                if nodes {
                    e.release(&mut self.quota, &mut self.cluster);
                } else {
                    e.release_quota(&mut self.quota);
                }
            }
        }
    }

    /// Releases `ids` tentatively for a search whose checks read the quota of `scope` (see
    /// [`QuotaBook::scope`]): their nodes, and the quota of those it covers (no other quota
    /// is read). The caller restores the cluster mark and the quota book.
    fn release_for<S: AsRef<str>>(&mut self, scope: Option<QuotaScope>, ids: &[S]) {
        for id in ids {
            if let Some(e) = self.jobs.get(id.as_ref()) {
                if holds_quota_of(e, scope) {
                    e.release_quota(&mut self.quota);
                }
                e.release_nodes(&mut self.cluster);
            }
        }
    }

    /// Whether `job` fits once `ids` are gone; the assignment if so. Changes nothing. Without
    /// `opts.place` no check reads the nodes, so only the quota `ids` hold is released.
    pub(super) fn fits_without<S: AsRef<str>>(
        &mut self,
        cq: &str,
        job: &Job,
        ids: &[S],
        opts: Options,
        now: i64,
        reservations: &[Reservation],
    ) -> Option<Assignment> {
        let mark = self.cluster.mark();
        let book = self.quota.clone();
        self.release_tentatively(ids, opts.place);
        let result = self.try_assign(cq, job, opts, reservations, now).ok();
        self.cluster.rollback(&mark);
        self.quota = book;
        result
    }

    /// The reservation of a blocked job: the earliest point on the release timeline at which
    /// it fits, the nodes and quota it would take then. Jobs are released in timeline order
    /// (jobs without a known runtime last) and the job is tried after 1, 2, 4, … releases, then
    /// by bisection between the last failure and the first success: releasing more never
    /// hurts, and each release is paid for once, however many tries follow. When it fits only
    /// once jobs without a known runtime end, it reserves the most promising domain (or the
    /// quota it owns) with no time. When it would not fit even with everything released,
    /// there is nothing to reserve.
    pub(super) fn reserve(
        &mut self,
        cq: &str,
        job: &Job,
        blocked: &Blocked,
        now: i64,
        release: &ReleaseOrder,
    ) -> Option<Reservation> {
        let known = release.known();
        // Not before its queue's quota allows: a cheap search that never touches the nodes.
        let floor = self.first_quota_prefix(cq, job, release, now)?;
        let (k, assignment) = self.first_fitting_prefix(cq, job, release, known, now, floor)?;
        let (until, assignment) = if k <= known {
            let until = if k == 0 {
                now
            } else {
                self.take_order(release, k).ends[k - 1]
            };
            (Some(until), Some(assignment))
        } else {
            (None, None)
        };
        let book_at = match until {
            Some(t) => self.book_at(release, t),
            None => self.quota.clone(),
        };
        let (nodes, need) = match assignment {
            Some(a) => (
                a.pod_sets
                    .iter()
                    .map(|p| (p.flavor.clone(), self.cluster.node_ids(&p.flavor, &p.nodes)))
                    .collect(),
                a.usage.into_iter().collect(),
            ),
            None => {
                let (nodes, mut need) = self.fallback_reservation(job, blocked);
                // Without a time, only quota the queue owns is held: quota the job would
                // borrow belongs to queues that may want it back at any moment.
                let nominal = Options {
                    place: false,
                    no_borrow: true,
                };
                let all = self.take_order(release, release.len());
                if self
                    .fits_without(cq, job, &all.order, nominal, now, &[])
                    .is_none()
                {
                    need.clear();
                }
                if nodes.is_empty() && need.is_empty() {
                    return None;
                }
                (nodes, need)
            }
        };
        Some(Reservation {
            job: job.id.clone(),
            scope: self.quota.scope(cq),
            until,
            nodes,
            need: need
                .iter()
                .map(|(flavor, usage)| self.quota.prepare(cq, flavor, usage))
                .collect(),
            book_at,
        })
    }

    /// The smallest `k` such that `job`'s quota fits once the first `k` jobs of `order` are
    /// gone — a lower bound of where it fits at all, found without touching the nodes: only
    /// the releases of jobs that share quota with `cq` (its own and its cohort tree's) can change
    /// the answer, so only after those is it asked again. `None` when the quota does not fit
    /// even with all of them gone. Changes nothing.
    fn first_quota_prefix(
        &mut self,
        cq: &str,
        job: &Job,
        release: &ReleaseOrder,
        now: i64,
    ) -> Option<usize> {
        let opts = Options {
            place: false,
            no_borrow: false,
        };
        if self.try_assign(cq, job, opts, &[], now).is_ok() {
            return Some(0);
        }
        let saved = self.quota.clone();
        let scope = self.quota.scope(cq);
        let mut found = None;
        for i in 0..release.len() {
            let id = self.take_order(release, i + 1).order[i].clone();
            // Another tree's quota is never read for `cq`: releasing it would change nothing.
            let Some(e) = self.jobs.get(&id).filter(|e| holds_quota_of(e, scope)) else {
                continue;
            };
            e.release_quota(&mut self.quota);
            if self.try_assign(cq, job, opts, &[], now).is_ok() {
                found = Some(i + 1);
                break;
            }
        }
        self.quota = saved;
        found
    }

    /// The smallest `k` (from `floor` on: below it the job is known not to fit) such that
    /// `job` fits once the first `k` jobs of `order` are gone, with its assignment then;
    /// `None` when it fits not even with all of them gone. Past the first `exact` jobs only
    /// whether it fits matters, not where: once it is known not to fit within them, the `k`
    /// returned is some prefix past them that fits. Changes nothing.
    fn first_fitting_prefix(
        &mut self,
        cq: &str,
        job: &Job,
        release: &ReleaseOrder,
        exact: usize,
        now: i64,
        floor: usize,
    ) -> Option<(usize, Assignment)> {
        let opts = Options {
            place: true,
            no_borrow: false,
        };
        let start = (self.cluster.mark(), self.quota.clone());
        let scope = self.quota.scope(cq);
        // The last prefix known not to fit, with the state after releasing it: every prefix
        // below `floor`, whose last one is released first.
        let below = floor.saturating_sub(1).min(release.len());
        self.release_for(scope, &self.take_order(release, below).order[..below]);
        let mut lo: (usize, ClusterMark, QuotaBook) =
            (below, self.cluster.mark(), self.quota.clone());
        let mut released = below;
        let mut found: Option<(usize, Assignment)> = None;
        let mut step = 1;
        // Gallop: release up to 1, 2, 4, … jobs until the job fits.
        while found.is_none() && released < release.len() {
            let target = (released + step).min(release.len());
            step *= 2;
            self.release_for(
                scope,
                &self.take_order(release, target).order[released..target],
            );
            released = target;
            match self.try_in_place(cq, job, opts, now) {
                Some(a) => found = Some((target, a)),
                None => lo = (target, self.cluster.mark(), self.quota.clone()),
            }
        }
        let Some(mut hi) = found else {
            self.cluster.rollback(&start.0);
            self.quota = start.1;
            return None;
        };
        // Bisect between the last failure and the first success, while it can end within
        // the first `exact`.
        while hi.0 > lo.0 + 1 && lo.0 < exact {
            self.cluster.rollback(&lo.1);
            self.quota = lo.2.clone();
            let mid = lo.0 + (hi.0 - lo.0) / 2;
            self.release_for(scope, &self.take_order(release, mid).order[lo.0..mid]);
            match self.try_in_place(cq, job, opts, now) {
                Some(a) => hi = (mid, a),
                None => lo = (mid, self.cluster.mark(), self.quota.clone()),
            }
        }
        self.cluster.rollback(&start.0);
        self.quota = start.1;
        Some(hi)
    }

    /// `try_assign` without leaving the placement behind.
    fn try_in_place(&mut self, cq: &str, job: &Job, opts: Options, now: i64) -> Option<Assignment> {
        let mark = self.cluster.mark();
        let result = self.try_assign(cq, job, opts, &[], now).ok();
        self.cluster.rollback(&mark);
        result
    }

    /// Without a known time, reserve the best candidate domain of the failing pod set (so it
    /// drains) or, when quota is what is short, the quota it needs.
    #[expect(
        clippy::type_complexity,
        reason = "two parallel lists, named at the call site"
    )]
    pub(super) fn fallback_reservation(
        &self,
        job: &Job,
        blocked: &Blocked,
    ) -> (Vec<(String, Vec<NodeId>)>, Vec<(String, Resources)>) {
        match blocked {
            Blocked::Topology { no_fit, flavor } => {
                let mut nodes = Vec::new();
                let set = job.pod_sets.iter().find(|s| s.name == no_fit.pod_set);
                let level = set.and_then(|s| match &s.constraint {
                    Constraint::Required(l) | Constraint::Preferred(l) => Some(l.clone()),
                    _ => None,
                });
                if let (Some(topo), Some(level), Some((value, _))) =
                    (self.cluster.topology(flavor), level, &no_fit.best)
                    && let Some(depth) = topo.levels().iter().position(|l| *l == level)
                    && let Some(domain) = topo.domain_by_value(depth + 1, value)
                {
                    nodes.push((flavor.clone(), topo.nodes_under(domain)));
                }
                let need = vec![(flavor.clone(), job.total_requests())];
                (nodes, need)
            }
            Blocked::Quota(short) => (
                Vec::new(),
                vec![(short.flavor.clone(), job.total_requests())],
            ),
            _ => (Vec::new(), Vec::new()),
        }
    }
}

/// Whether holder `e` holds quota a check of `scope` reads (none without a scope: a queue
/// the book does not know reads no quota).
fn holds_quota_of(e: &super::Entry, scope: Option<QuotaScope>) -> bool {
    scope.is_some_and(|s| e.booking.as_deref().is_some_and(|b| s.covers(b)))
}
