//! The ledger of writes in flight: what passes of this leadership term have promised and not
//! yet seen land. A pass reads it so that it neither repeats a write under way nor promises
//! the same quota or nodes twice; a landing (see [`crate::state`]) settles its entry.
//!
//! The ledger knows nothing of the cluster: the index holds what the API server shows, the
//! ledger what this replica is about to make it show. Its fields are its own: a pass records
//! a promise, a finalizer, a queue write, a status written or a failed release through the
//! named operations below, and only a landing takes an entry out.

use std::collections::{BTreeMap, BTreeSet};

use muster_admission::{Admitted, Holding};
use muster_api::{GpuJob, ObjectRef};

use crate::action::{Action, JobRead};
use crate::deferred::DeferredStatuses;

/// Writes the controller has started and not yet seen land, kept between the passes of one
/// leadership term.
#[derive(Clone, Debug, Default)]
pub struct Ledger {
    /// What each job's writes in flight promise (see [`Busy`]).
    busy: BTreeMap<ObjectRef, Busy>,
    /// Per job, how many of its actions are in flight: it stays promised until the last one
    /// lands (a pass may send several, such as a finalizer and a release, and the first to
    /// land must not free a job whose release is still being written).
    in_flight: BTreeMap<ObjectRef, u32>,
    /// Jobs whose finalizer is being added.
    finalizing: BTreeSet<ObjectRef>,
    /// Queue statuses being written.
    queues: BTreeSet<QueueWrite>,
    /// When this term last wrote each queue's status (seconds).
    queues_written: BTreeMap<QueueWrite, i64>,
    /// Jobs whose releases failed, and when each tries again.
    failed: BTreeMap<ObjectRef, Failure>,
    /// Waiting jobs whose status this term wrote within the last
    /// [`crate::status::PENDING_REFRESH_SECONDS`], and when.
    refreshed: BTreeMap<ObjectRef, i64>,
    /// Waiting jobs first seen among the shown positions of their ClusterQueue with no
    /// position in their status, and when (see [`crate::status::POSITION_SHOWN_AFTER_SECONDS`]).
    ranked: BTreeMap<ObjectRef, i64>,
    /// The leadership term these writes belong to.
    term: u64,
    /// Status writes of waiting jobs queued for the sender, not yet sent: each such job is
    /// [`Busy::Status`] and counts one write in flight, but promises nothing until it is sent.
    deferred: DeferredStatuses,
    /// Per job with a status write in flight (or queued), the job as the pass that planned
    /// the write read it: the write is made only onto that version.
    reads: BTreeMap<ObjectRef, JobRead>,
    /// Per job with a release in flight, when its admission began (the time its status will
    /// show): the job holds its quota and nodes from then on, in every pass until the
    /// release lands, as it will once it has.
    released_at: BTreeMap<ObjectRef, i64>,
}

/// What is in flight for a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Busy {
    /// A release of this admission: the job holds it meanwhile.
    Release(Admitted),
    /// A status write for a waiting job: it sits out the cycle until the write lands (were it
    /// admitted, its release's status and this write could land out of order). While the write is
    /// queued for the sender and not sent (see [`crate::deferred`]) it holds nothing back:
    /// the job queues and may be admitted, which drops the write.
    Status,
    /// A new ProvisioningRequest being created: the job holds its quota meanwhile.
    Provision(Holding),
    /// The end of a job whose gang has nothing left on its nodes (every pod ended): it holds
    /// nothing from the pass that decides it, so that pass may give its quota to another job
    /// at once. A release or request for capacity goes out only once every such end in
    /// flight when its pass ran has landed, and not at all if one failed (see
    /// [`crate::ends`]): the API server never shows the quota taken twice.
    Ending,
    /// Anything else (eviction, deletion, finalizing): it neither holds nor queues.
    Other,
}

/// A queue status being written: which kind of object, and its key.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum QueueWrite {
    /// A ClusterQueue, by name.
    Cluster(String),
    /// A LocalQueue.
    Local(ObjectRef),
    /// A ResourceFlavor's `Valid` condition, by name.
    Flavor(String),
    /// A Cohort's `Valid` condition, by name.
    Cohort(String),
}

impl QueueWrite {
    /// The queue status `action` writes, if it writes one.
    pub(crate) fn of(action: &Action) -> Option<QueueWrite> {
        match action {
            Action::ClusterQueueStatus { name, .. } => Some(QueueWrite::Cluster(name.clone())),
            Action::LocalQueueStatus { key, .. } => Some(QueueWrite::Local(key.clone())),
            Action::FlavorStatus { name, .. } => Some(QueueWrite::Flavor(name.clone())),
            Action::CohortStatus { name, .. } => Some(QueueWrite::Cohort(name.clone())),
            _ => None,
        }
    }
}

/// A job's failed releases (or requests for capacity): it waits until `retry_at`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Failure {
    /// How many in a row.
    pub(crate) failures: u32,
    /// When the job tries again (seconds).
    pub(crate) retry_at: i64,
    /// The last error, shown in the job's status.
    pub(crate) error: String,
}

/// How long a job's first sight among the shown positions is remembered, seconds: past
/// [`crate::status::POSITION_SHOWN_AFTER_SECONDS`] and a refresh interval, so a job whose
/// position write was queued behind others is not held back again.
const RANKED_KEPT_SECONDS: i64 =
    crate::status::POSITION_SHOWN_AFTER_SECONDS + 4 * crate::status::PENDING_REFRESH_SECONDS;

impl Ledger {
    /// A ledger for leadership term `term`, with nothing in flight.
    pub(crate) fn for_term(term: u64) -> Ledger {
        Ledger {
            term,
            ..Ledger::default()
        }
    }

    /// The leadership term these writes belong to.
    pub(crate) fn term(&self) -> u64 {
        self.term
    }

    // --- Promises: what a job's writes in flight stand for.

    /// What `job`'s writes in flight promise: `None` when none is, or only a status write
    /// queued and not yet sent (a pass may replace or drop it, as nothing has gone out).
    pub(crate) fn promised(&self, job: &str) -> Option<&Busy> {
        self.busy
            .get(job)
            .filter(|b| !(matches!(b, Busy::Status) && self.deferred.contains(job)))
    }

    /// Whether a write for `job` is under way (see [`Ledger::promised`]).
    pub(crate) fn is_busy(&self, job: &str) -> bool {
        self.promised(job).is_some()
    }

    /// Whether `job` has any write promised, sent or queued.
    pub(crate) fn has_any_write(&self, job: &str) -> bool {
        self.busy.contains_key(job)
    }

    /// Records that this pass's writes for `job` promise `busy`, in place of any earlier
    /// promise of the pass.
    pub(crate) fn promise(&mut self, job: ObjectRef, busy: Busy) {
        self.busy.insert(job, busy);
    }

    /// Records `busy` for `job` unless a write already promises something for it.
    pub(crate) fn promise_unless_busy(&mut self, job: ObjectRef, busy: Busy) {
        self.busy.entry(job).or_insert(busy);
    }

    /// `job`'s end in flight ([`Busy::Ending`]) holds its quota again, as an end that was not
    /// decided early does ([`Busy::Other`]); whether it was such an end.
    pub(crate) fn end_overdue(&mut self, job: &ObjectRef) -> bool {
        match self.busy.get_mut(job) {
            Some(busy @ Busy::Ending) => {
                *busy = Busy::Other;
                true
            }
            _ => false,
        }
    }

    /// When the admission of `job`'s release in flight began, if a release is in flight
    /// (the time its status will show).
    pub(crate) fn releasing_since(&self, job: &str) -> Option<i64> {
        match self.busy.get(job) {
            Some(Busy::Release(_)) => self.released_at.get(job).copied(),
            _ => None,
        }
    }

    /// Whether `job` has any write in flight or promised.
    pub(crate) fn touches(&self, job: &str) -> bool {
        self.busy.contains_key(job) || self.in_flight.contains_key(job)
    }

    /// Every job the ledger names — promised, in flight, finalizing or backing off — once
    /// or more: they settle again at the next pass, whatever lands meanwhile. A job whose
    /// only write is a status queued for the sender and not sent is left out: that write
    /// promises nothing ([`Ledger::promised`]), so the job settles as if it had none, and
    /// once the sender takes the write the job is promised and named again. (A deep queue's
    /// waiting statuses can stand queued by the thousand, and settling each of them every
    /// pass was most of what passes settled in a run of 15,000 batch Jobs.)
    ///
    /// Every pass walks it twice, and while thousands of waiting jobs' first statuses are
    /// queued (a flood of submissions) nearly all of `busy` is such jobs: the maps are walked
    /// side by side in key order, one comparison a step, instead of searched per job (which
    /// took 11.5 % of the controller's CPU samples as 15,000 batch Jobs arrived: see
    /// docs/performance.md, "the ledger walked in key order").
    pub(crate) fn jobs(&self) -> impl Iterator<Item = &ObjectRef> {
        let (mut queued, mut flying) = (
            Beside::new(self.deferred.queued()),
            Beside::new(&self.in_flight),
        );
        let busy = self.busy.iter().filter_map(move |(job, busy)| {
            let only = only_queued(Some(busy), queued.at(job).is_some(), flying.at(job));
            (!only).then_some(job)
        });
        // A job in flight and busy was named (or not) with the busy; in flight alone, it
        // is named: only a busy job's write can be only queued.
        let mut busy_too = Beside::new(&self.busy);
        let flying_alone = self
            .in_flight
            .keys()
            .filter(move |job| busy_too.at(job).is_none());
        let named = busy
            .chain(self.failed.keys())
            .chain(&self.finalizing)
            .chain(flying_alone);
        #[cfg(debug_assertions)]
        self.check_named(named.clone());
        named
    }

    /// Debug builds check [`Ledger::jobs`] against the rule it walks: a job is named when it
    /// is busy, failed, finalizing or in flight, unless all it has is a queued status write.
    #[cfg(debug_assertions)]
    fn check_named<'a>(&'a self, named: impl Iterator<Item = &'a ObjectRef>) {
        let named: BTreeSet<&ObjectRef> = named.collect();
        let by_rule: BTreeSet<&ObjectRef> = self
            .busy
            .keys()
            .filter(|job| !self.only_queued(job))
            .chain(self.failed.keys())
            .chain(&self.finalizing)
            .chain(self.in_flight.keys().filter(|job| !self.only_queued(job)))
            .collect();
        debug_assert_eq!(
            named, by_rule,
            "the ledger's walk names other jobs than its rule"
        );
    }

    /// Whether all the ledger has of `job`'s writes is a status write queued for the sender
    /// and not sent.
    #[cfg(debug_assertions)]
    fn only_queued(&self, job: &str) -> bool {
        only_queued(
            self.busy.get(job),
            self.deferred.contains(job),
            self.in_flight.get(job),
        )
    }

    // --- Finalizers.

    /// Records that `job`'s finalizer is being added; `false` when it already was.
    pub(crate) fn finalize(&mut self, job: &ObjectRef) -> bool {
        self.finalizing.insert(job.clone())
    }

    /// Whether `job`'s finalizer is being added.
    pub(crate) fn is_finalizing(&self, job: &str) -> bool {
        self.finalizing.contains(job)
    }

    // --- Queue statuses.

    /// Records that a queue status is being written at `now`.
    pub(crate) fn write_queue(&mut self, queue: QueueWrite, now: i64) {
        self.queues_written.insert(queue.clone(), now);
        self.queues.insert(queue);
    }

    /// Whether `queue`'s figures may be written again at `now`: this term has not written
    /// its status within [`crate::status::QUEUE_FIGURES_EVERY_SECONDS`].
    pub(crate) fn queue_figures_due(&self, queue: &QueueWrite, now: i64) -> bool {
        self.queues_written
            .get(queue)
            .is_none_or(|at| now - at >= crate::status::QUEUE_FIGURES_EVERY_SECONDS)
    }

    /// When `queue`'s figures may next be written (see [`Ledger::queue_figures_due`]).
    pub(crate) fn queue_figures_due_at(&self, queue: &QueueWrite) -> Option<i64> {
        self.queues_written
            .get(queue)
            .map(|at| at + crate::status::QUEUE_FIGURES_EVERY_SECONDS)
    }

    /// Whether `queue`'s status is being written.
    pub(crate) fn is_writing_queue(&self, queue: &QueueWrite) -> bool {
        self.queues.contains(queue)
    }

    /// Whether no queue status is being written.
    pub(crate) fn queues_idle(&self) -> bool {
        self.queues.is_empty()
    }

    // --- Waiting jobs' statuses.

    /// Forgets the status writes made a refresh interval or more before `now`; whether any
    /// was (a waiting job whose status was written lately may be written again now).
    pub(crate) fn expire_refreshes(&mut self, now: i64) -> bool {
        let before = self.refreshed.len();
        self.refreshed
            .retain(|_, at| now - *at < crate::status::PENDING_REFRESH_SECONDS);
        // A job ranked this long ago has been shown its position, or left the head (admitted,
        // deleted, passed by): its entry only matters for its first seconds there.
        self.ranked.retain(|_, at| now - *at < RANKED_KEPT_SECONDS);
        self.refreshed.len() != before
    }

    /// Whether `job`, among the shown positions of its queue with no position in its status,
    /// has been there long enough to be shown it (see
    /// [`crate::status::POSITION_SHOWN_AFTER_SECONDS`]). The first time it is asked, the job
    /// starts its wait and is held back until then like a new job's first status, so that
    /// a pass comes when it falls due.
    pub(crate) fn position_due(&mut self, job: &ObjectRef, now: i64) -> bool {
        let since = *self.ranked.entry(job.clone()).or_insert(now);
        let due = since + crate::status::POSITION_SHOWN_AFTER_SECONDS;
        if now >= due {
            return true;
        }
        self.write_first_status_at(job, due);
        false
    }

    /// Holds back a new job's first status until `due` (seconds): the job counts as
    /// refreshed until then, and its expiry makes the pass that comes at or after `due`
    /// explain the waiting jobs again (see [`Ledger::expire_refreshes`]).
    pub(crate) fn write_first_status_at(&mut self, job: &ObjectRef, due: i64) {
        self.refreshed
            .entry(job.clone())
            .or_insert(due - crate::status::PENDING_REFRESH_SECONDS);
    }

    /// Whether this term wrote `job`'s status within a refresh interval of `now`.
    pub(crate) fn refreshed_lately(&self, job: &str, now: i64) -> bool {
        self.refreshed
            .get(job)
            .is_some_and(|at| now - at < crate::status::PENDING_REFRESH_SECONDS)
    }

    /// A waiting job's status write of this pass, written at `now`: it replaces the write
    /// queued for the job in its turn, or is given back to send, the job promised
    /// [`Busy::Status`] meanwhile (the sender may queue it: see [`Ledger::defer`]).
    pub(crate) fn status_written(
        &mut self,
        job: ObjectRef,
        action: Action,
        now: i64,
    ) -> Option<Action> {
        self.refreshed.insert(job.clone(), now);
        let action = self.deferred.replace(&job, action)?;
        self.busy.insert(job, Busy::Status);
        Some(action)
    }

    /// Whether a status write of `job` is queued and not yet sent.
    pub(crate) fn is_queued(&self, job: &str) -> bool {
        self.deferred.contains(job)
    }

    /// How many status writes are queued and not yet sent.
    pub(crate) fn queued(&self) -> usize {
        self.deferred.len()
    }

    /// Drops the queued status write of `job`, if any, with its count in flight.
    pub(crate) fn drop_deferred(&mut self, job: &str) {
        if !self.deferred.drop_job(job) {
            return;
        }
        let left = self.in_flight.get_mut(job).map_or(0, |n| {
            *n = n.saturating_sub(1);
            *n
        });
        if left == 0 {
            self.in_flight.remove(job);
            self.reads.remove(job);
        }
        if matches!(self.busy.get(job), Some(Busy::Status)) {
            self.busy.remove(job);
        }
    }

    /// Queued status writes whose job has since got another write, or is gone, are dropped:
    /// the other write carries the whole status, and a gone job has none.
    pub(crate) fn drop_superseded(&mut self, jobs: &BTreeMap<ObjectRef, Box<GpuJob>>) {
        // Queued jobs in key order, `busy` walked beside them (see `jobs`).
        let mut busy = Beside::new(&self.busy);
        let superseded: Vec<ObjectRef> = self
            .deferred
            .jobs()
            .filter(|j| !matches!(busy.at(j), Some(Busy::Status)) || !jobs.contains_key(*j))
            .cloned()
            .collect();
        for job in superseded {
            self.drop_deferred(&job);
        }
    }

    /// Queues a waiting job's status write for the sender (see [`crate::deferred`]) instead
    /// of sending it now: the one kind of write that may wait, as it starts, stops and frees
    /// nothing. Gives back any other action, to send now.
    pub(crate) fn defer(&mut self, action: Action) -> Option<Action> {
        let Action::JobStatus { job, .. } = &action else {
            return Some(action);
        };
        if !matches!(self.busy.get(job), Some(Busy::Status)) {
            return Some(action);
        }
        let job = job.clone();
        if self.deferred.contains(&job) {
            // The write queued before is replaced and will never land: it no longer counts
            // as in flight.
            if let Some(n) = self.in_flight.get_mut(&job) {
                *n = n.saturating_sub(1);
            }
        }
        self.deferred.put(&job, action);
        None
    }

    /// The oldest queued status write, to send now: its job is promised as written to until
    /// it lands.
    pub(crate) fn next_deferred(&mut self) -> Option<Action> {
        let (job, action) = self.deferred.pop()?;
        self.busy.insert(job, Busy::Status);
        Some(action)
    }

    // --- Failed releases.

    /// Records a failed release (or request for capacity): the job waits
    /// `10 s × 2^failures` (at most 10 minutes), with the error in its status, and tries again.
    pub(crate) fn fail_release(&mut self, key: &ObjectRef, now: i64, error: String) {
        let failures = self.failed.get(key).map_or(0, |f| f.failures) + 1;
        let delay = (10i64 << failures.min(6)).min(600);
        self.failed.insert(
            key.to_owned(),
            Failure {
                failures,
                retry_at: now + delay,
                error,
            },
        );
    }

    /// `job`'s failed releases, if its last one failed.
    pub(crate) fn failure(&self, job: &str) -> Option<&Failure> {
        self.failed.get(job)
    }

    /// Whether `job` waits out the backoff of a failed release at `now`.
    pub(crate) fn backing_off(&self, job: &str, now: i64) -> bool {
        self.failed.get(job).is_some_and(|f| f.retry_at > now)
    }

    // --- Sending and landing.

    /// Counts every job action of a pass as in flight until it lands, and keeps the version
    /// of `jobs` each status write was decided on.
    pub(crate) fn sent(&mut self, actions: &[Action], jobs: &BTreeMap<ObjectRef, Box<GpuJob>>) {
        for action in actions {
            if let Some(job) = action.job() {
                *self.in_flight.entry(job.to_owned()).or_default() += 1;
                if let (true, Some(read)) = (action.writes_job_status(), jobs.get(job)) {
                    self.reads.insert(job.to_owned(), JobRead::of(read));
                }
                if let Action::Release { status, .. } = action
                    && let Some(at) = crate::holding::admitted_at(status)
                {
                    self.released_at.insert(job.to_owned(), at);
                }
            }
        }
    }

    /// The version of the job `action` is about that the pass planning it read, when the
    /// action writes the job's status.
    pub(crate) fn read_for(&self, action: &Action) -> Option<&JobRead> {
        action
            .job()
            .filter(|_| action.writes_job_status())
            .and_then(|job| self.reads.get(job))
    }

    /// Settles the bookkeeping of `action`, which landed (`ok`) or failed at `now`: once a
    /// job's last action in flight has landed it is free for the next pass; a failed release
    /// or request for capacity waits with backoff (its half-made objects are finished or
    /// rolled back by the next pass).
    pub(crate) fn landed(&mut self, action: &Action, outcome: Result<(), String>, now: i64) {
        self.unsent(action);
        match outcome {
            Ok(()) => {
                if let Action::Release { job, .. } = action {
                    self.failed.remove(job);
                }
            }
            Err(error) => {
                if let Action::Release { job, .. } | Action::Provision { job, .. } = action {
                    self.fail_release(job, now, error);
                }
            }
        }
    }

    /// Settles the bookkeeping of `action`, which was never sent (a release whose pass
    /// counted on an end that did not land: see [`crate::ends`]): it is out of flight, and
    /// no failure is counted against its job.
    pub(crate) fn unsent(&mut self, action: &Action) {
        if let Some(job) = action.job() {
            let left = self.in_flight.get_mut(job).map_or(0, |n| {
                *n = n.saturating_sub(1);
                *n
            });
            if left == 0 {
                self.in_flight.remove(job);
                self.busy.remove(job);
                self.reads.remove(job);
                self.released_at.remove(job);
            }
        }
        if let Action::AddFinalizer { job } = action {
            self.finalizing.remove(job);
        }
        if let Some(queue) = QueueWrite::of(action) {
            self.queues.remove(&queue);
        }
    }
}

/// The rule of [`Ledger::only_queued`], from what the ledger holds of one job: what it is
/// busy with, whether a status write is queued for it, and how many writes it has in flight
/// (the queued one among them). Searched per job or walked in key order, one rule.
fn only_queued(busy: Option<&Busy>, queued: bool, in_flight: Option<&u32>) -> bool {
    queued && matches!(busy, Some(Busy::Status)) && in_flight.is_none_or(|n| *n <= 1)
}

/// A map walked beside keys that come in ascending order: [`Beside::at`] finds each key's
/// value by stepping forward from the last key asked for, one comparison a step, where a
/// search from the root takes one a level.
#[derive(Clone)]
struct Beside<'a, K, V> {
    entries: std::iter::Peekable<std::collections::btree_map::Iter<'a, K, V>>,
}

impl<'a, K: Ord, V> Beside<'a, K, V> {
    fn new(map: &'a BTreeMap<K, V>) -> Self {
        Beside {
            entries: map.iter().peekable(),
        }
    }

    /// `key`'s value, if the map holds it. Keys must be asked for in ascending order: an
    /// earlier key than the last one asked for is not found.
    fn at(&mut self, key: &K) -> Option<&'a V> {
        while let Some((k, v)) = self.entries.peek() {
            match (*k).cmp(key) {
                std::cmp::Ordering::Less => {
                    self.entries.next();
                }
                std::cmp::Ordering::Equal => return Some(*v),
                std::cmp::Ordering::Greater => return None,
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use muster_api::ObjectRef;

    use super::Ledger;
    use crate::action::Action;

    fn status_of(job: &ObjectRef) -> Action {
        Action::JobStatus {
            job: job.clone(),
            status: Box::default(),
            event: None,
        }
    }

    /// A pass writes `actions` for `job`, the first its status write, which the run loop
    /// queues for the sender.
    fn write_queued(ledger: &mut Ledger, job: &ObjectRef, mut actions: Vec<Action>) {
        let written = ledger.status_written(job.clone(), status_of(job), 0);
        assert!(written.is_some());
        actions.splice(0..0, written);
        ledger.sent(&actions, &BTreeMap::new());
        for action in actions {
            if let Some(action) = ledger.defer(action) {
                assert!(!matches!(action, Action::JobStatus { .. }));
            }
        }
    }

    #[test]
    fn a_map_walked_beside_ascending_keys_finds_each_key_s_value_and_only_it() {
        let map = BTreeMap::from([(2, 'b'), (4, 'd'), (6, 'f')]);
        let mut beside = super::Beside::new(&map);
        let found: Vec<Option<char>> = [1, 2, 3, 4, 4, 7]
            .iter()
            .map(|k| beside.at(k).copied())
            .collect();
        assert_eq!(found, [None, Some('b'), None, Some('d'), Some('d'), None]);
        // Past the end nothing is found, not even a key the map holds.
        assert_eq!(beside.at(&6), None);
    }

    #[test]
    fn a_job_whose_only_write_is_a_queued_status_is_named_once_the_sender_takes_it() {
        let mut ledger = Ledger::for_term(1);
        let (queued, also) = (ObjectRef::new("ns", "queued"), ObjectRef::new("ns", "also"));
        write_queued(&mut ledger, &queued, Vec::new());
        // A queued status beside another write in flight: named for the other.
        write_queued(
            &mut ledger,
            &also,
            vec![Action::AddFinalizer { job: also.clone() }],
        );
        assert!(ledger.is_queued(&queued) && ledger.is_queued(&also));
        assert!(!ledger.is_busy(&queued));
        let named: Vec<&ObjectRef> = ledger.jobs().collect();
        assert!(!named.contains(&&queued), "{named:?}");
        assert!(named.contains(&&also), "{named:?}");
        // The sender takes the oldest write: its job is promised, and named, until it lands.
        let sent = ledger.next_deferred();
        assert!(matches!(&sent, Some(Action::JobStatus { job, .. }) if *job == queued));
        assert!(ledger.is_busy(&queued));
        assert!(ledger.jobs().any(|job| *job == queued));
        if let Some(sent) = sent {
            ledger.landed(&sent, Ok(()), 1);
        }
        assert!(!ledger.jobs().any(|job| *job == queued));
    }
}
