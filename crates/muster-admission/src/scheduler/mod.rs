//! The scheduler: the state admission keeps between cycles (queues, quota usage, node usage,
//! jobs), and the cycle that turns it into decisions.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use foldhash::fast::FixedState;

use muster_api::{ClusterQueue, ClusterQueueSpec, Resources, Validate};
use muster_topology::{BestFit, NoFit, PodSetRequest, Policy};

use crate::cluster::Cluster;
use crate::cohorts::CohortTree;
use crate::decision::{Decision, PendingReason, PodSetPlacement};
use crate::job::{Job, JobId};
use crate::namespaces::selects;
use crate::quota::{Booking, QuotaBook, Shortfall};
use crate::reservation::Reservation;

mod assign;
mod book;
mod cycle;
mod lists;
mod nominate;
mod order;
mod preempt;
mod provisioned;
mod reserve;
mod table;
mod waiting;
pub use waiting::WaitingJob;
mod weigh;

/// How old the reasons [`Scheduler::waiting`] gives may get, seconds: a cycle skipped because
/// nothing changed keeps the last full cycle's reasons, and a full cycle runs at least this
/// often.
pub const REASONS_REFRESH_SECONDS: i64 = 30;

/// Where a job stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobState {
    /// Waiting for admission.
    Pending,
    /// Admitted: holds quota and nodes.
    Admitted(Holding),
    /// Holds quota while capacity is bought for it.
    Provisioning(Holding),
    /// Told to leave (preempted or drained); holds quota and nodes until it is gone.
    Evicting(Holding),
}

/// What an admitted (or provisioning) job holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holding {
    /// The ClusterQueue whose quota it uses.
    pub cluster_queue: String,
    /// When it was admitted, seconds; `None` when that is not known (a job restored from a
    /// status that lost its admission time). Nothing is estimated from an unknown time: such
    /// a job has no expected end, and its work is not weighed against waiting.
    pub since: Option<i64>,
    /// Per pod set: flavor, domain and nodes (no nodes while provisioning).
    pub pod_sets: Vec<PodSetPlacement>,
}

#[derive(Clone, Debug)]
struct Entry {
    job: Arc<Job>,
    /// Its id as the holder indexes keep it: filing and unfiling copy a pointer, not the
    /// string.
    id: SharedId,
    /// Jobs with the same shape (queue, priority, pod sets) fare the same within one cycle;
    /// an index into the scheduler's shape table.
    shape: usize,
    state: JobState,
    /// Its quota usage per pod set (what a release gives back): its shape's, worked out
    /// once per shape.
    usage: Arc<[Resources]>,
    /// What it books while it holds quota (its state's queue and flavors, `usage`), looked up
    /// once when it comes to hold: searches release a holder many times over.
    booking: Option<Arc<Booking>>,
}

impl Entry {
    /// Returns what the entry holds, if anything, to `quota` and `cluster`.
    fn release(&self, quota: &mut QuotaBook, cluster: &mut Cluster) {
        self.release_quota(quota);
        self.release_nodes(cluster);
    }

    /// Returns the nodes the entry holds, if any, to `cluster` (its quota stays booked).
    fn release_nodes(&self, cluster: &mut Cluster) {
        if let JobState::Admitted(h) | JobState::Provisioning(h) | JobState::Evicting(h) =
            &self.state
        {
            for (set, placement) in self.job.pod_sets.iter().zip(&h.pod_sets) {
                cluster.remove_pods(&placement.nodes, &set.requests, |pod| {
                    placement.devices_of(pod)
                });
            }
        }
    }

    /// Returns the quota the entry holds, if any, to `quota` (its nodes stay booked).
    fn release_quota(&self, quota: &mut QuotaBook) {
        if let Some(booking) = &self.booking {
            quota.remove_booking(booking);
        }
    }
}

/// What a job of quota usage `usage` (per pod set) books in `quota` while in `state`: `None`
/// while it holds nothing, or when its queue is not in the book. Made by names, as debug
/// builds check the bookings kept per shape ([`Scheduler::booking_for`]) against it.
fn booking_of(quota: &QuotaBook, state: &JobState, usage: &[Resources]) -> Option<Arc<Booking>> {
    let (JobState::Admitted(h) | JobState::Provisioning(h) | JobState::Evicting(h)) = state else {
        return None;
    };
    let pod_sets = h
        .pod_sets
        .iter()
        .zip(usage)
        .map(|(p, usage)| (p.flavor.as_str(), usage));
    quota.booking(&h.cluster_queue, pod_sets).map(Arc::new)
}

/// A job id shared between the indexes a release order is built from: copying one copies a
/// pointer, not the string.
pub(super) type SharedId = Arc<str>;

/// A job shape's pod sets and its index.
type Shape = (Vec<PodSetRequest>, usize);

/// Quota usage per pod set of a job shape: every job of the shape shares it, and the cycle
/// reads it for every assignment it tries and every queue key it takes.
type ShapeUsage = Arc<[Resources]>;

#[derive(Clone, Debug)]
struct QueueConfig {
    /// Shared: every assignment attempt holds it while it books (no copy per attempt).
    spec: Arc<ClusterQueueSpec>,
    invalid: Option<String>,
}

/// What kept a job from an assignment.
#[derive(Clone, Debug)]
enum Blocked {
    NotCovered {
        pod_set: String,
        resources: Vec<String>,
    },
    Quota(Shortfall),
    /// Quota fits in `flavor`, but the pod set does not fit its nodes.
    Topology {
        no_fit: Box<NoFit>,
        flavor: String,
    },
    Reserved {
        for_job: JobId,
        until: Option<i64>,
    },
}

/// What one cycle remembers while it serves jobs.
#[derive(Default)]
struct CycleState {
    /// StrictFIFO queues whose head could not start: everything behind it waits.
    strict_head: BTreeMap<String, JobId>,
    /// Queues whose first blocked job already tried for a reservation.
    reserved_by: BTreeSet<String>,
    reservations: Vec<Reservation>,
    /// The release timeline and order for reservations, until the next admission.
    release: Option<std::rc::Rc<reserve::ReleaseOrder>>,
    /// The reservation search a preemptor's weighing just made (job, its result), for the
    /// wait that follows to take rather than search again.
    weighed: Option<(JobId, Option<Reservation>)>,
    /// What the cycle holds for nominated preemptors (see [`nominate`]), taken back at its
    /// end.
    holds: Vec<nominate::Hold>,
    /// Shape → the reservations that bound a job of that shape which could not
    /// start, and why. Capacity and quota only shrink within a cycle and reservations only
    /// add constraints, so an identical job bound by at least those reservations fares no
    /// better.
    memo: BTreeMap<MemoKey, Vec<(u64, PendingReason)>>,
    /// Preemption candidates found this cycle, with the epoch they were found in.
    candidates: (u64, preempt::Candidates),
    /// Shape → the shortest expected runtime from which a job of that shape is ruled out by
    /// the memo (`i64::MIN`: any; jobs without a runtime respect every reservation, so they
    /// are ruled out whenever the shape has an entry).
    ruled_out_from: BTreeMap<MemoKey, i64>,
    /// The cycle's decisions depend on the time itself (a preemptor waited because waiting
    /// was cheaper, which changes as time passes): the next cycle must run.
    timed: bool,
    /// Per (borrower, flavor, resource): of the borrower's admitted jobs, the one expected to
    /// end first, for reasons (see [`Scheduler::locate_limit`]). Found once per cycle:
    /// a job admitted later in the cycle that would end sooner is named from the next.
    returning: BTreeMap<ReturningKey, Option<Returning>>,
}

/// The jobs running (admitted, or being evicted) in one ClusterQueue.
#[derive(Clone, Debug, Default)]
struct RunningIn {
    /// Hashed: preemption sorts the candidates it takes from them.
    ids: HashSet<SharedId, FixedState>,
    /// How many of them run at each priority: whether any runs below a preemptor's priority
    /// is known before any job is looked at.
    priorities: BTreeMap<i32, u32>,
}

impl RunningIn {
    /// Whether any of them runs at a priority below `priority`.
    fn any_below(&self, priority: i32) -> bool {
        self.priorities
            .first_key_value()
            .is_some_and(|(lowest, _)| *lowest < priority)
    }
}

/// A job that gives quota back when it ends: its id, expected end and what it gives back.
type Returning = (String, i64, muster_api::Amount);

/// Whose returning job, of what: (borrower, whether it is a cohort, flavor, resource).
type ReturningKey = (String, bool, String, String);

impl CycleState {
    /// Remembers that a job of `shape`, respecting the reservations in `mask`, cannot start
    /// for `reason` this cycle.
    fn remember(&mut self, shape: MemoKey, mask: u64, reason: PendingReason, now: i64) {
        // A job respects reservation i when it would not finish before it starts: with
        // runtime r, when now + r > until, i.e. r >= until - now + 1. It respects all of
        // `mask` from the largest such bound.
        let from = self
            .reservations
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1u64 << (i % 64)) != 0)
            .filter_map(|(_, r)| r.until)
            .map(|t| t.saturating_sub(now).saturating_add(1))
            .max()
            .unwrap_or(i64::MIN);
        let known = self.ruled_out_from.entry(shape).or_insert(i64::MAX);
        *known = (*known).min(from);
        self.memo.entry(shape).or_default().push((mask, reason));
    }

    /// Whether the memo already answers `queued` (an identical job failed respecting no more
    /// reservations than it must).
    fn ruled_out(&self, queued: &lists::Queued) -> bool {
        self.ruled_out_from
            .get(&queued.shape)
            .is_some_and(|from| queued.runtime.is_none_or(|r| r >= *from))
    }
}

/// A queue head's place in the cycle's order: (borrows, fair-sharing standing, priority,
/// creation, UID, id), the strings borrowed from the job the key is taken from.
type HeadKey<'a> = (
    bool,
    crate::quota::Standing,
    std::cmp::Reverse<i32>,
    i64,
    &'a str,
    &'a str,
);

/// A job shape (which includes its queue).
type MemoKey = usize;

/// Flavors and placements for a whole job.
#[derive(Clone, Debug)]
struct Assignment {
    pod_sets: Vec<PodSetPlacement>,
    borrowing: bool,
    /// Quota usage per flavor.
    usage: BTreeMap<String, Resources>,
    /// The same usage as the quota book books it for the job's queue, when the job is known
    /// as it is (see [`Scheduler::booking_for`]): an admission books it, and reservations
    /// weigh it, in arithmetic alone.
    booking: Option<Arc<Booking>>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Options {
    /// Find nodes too (not only quota).
    place: bool,
    /// Accept only flavors that fit without borrowing.
    no_borrow: bool,
}

/// Admission's state and its scheduling cycle. Pure: every input comes through its methods
/// (including the time), every output is a [`Decision`].
pub struct Scheduler {
    cluster: Cluster,
    quota: QuotaBook,
    queues: BTreeMap<String, QueueConfig>,
    /// The cohorts Cohort objects define: parents, quota, limits, and what is wrong.
    cohorts: CohortTree,
    local_queues: BTreeMap<String, String>,
    jobs: table::JobTable,
    /// Namespace labels, for ClusterQueues' namespace selectors (unknown: no labels).
    namespaces: BTreeMap<String, BTreeMap<String, String>>,
    /// Every job shape seen (LocalQueue, priority, pod sets) with its index, by LocalQueue
    /// and priority: a queue and priority hold a handful of shapes, compared in place.
    shapes: BTreeMap<(String, i32), Vec<Shape>>,
    /// Per shape (its index): quota usage per pod set.
    shape_usage: Vec<ShapeUsage>,
    /// Per shape: its pod sets under the flavors they were tried in.
    flavored: assign::Flavored,
    /// Per shape: its pod sets' quota usages, prepared for the queue and flavors tried.
    prepared: assign::PreparedUsages,
    /// Per shape: what a job of it books with its pod sets in the flavors it was admitted
    /// to ([`Scheduler::booking_for`]).
    bookings: book::Bookings,
    /// Preemptors waiting for their victims to leave, with what they counted on.
    nominations: BTreeMap<JobId, nominate::Nomination>,
    /// Preemptors waiting because waiting was cheaper than evicting (see [`weigh`]), with
    /// the time each chose to wait first (their wait is bounded from then) and when that
    /// bound ends, as its last weighing found.
    deferred: BTreeMap<JobId, (i64, i64)>,
    policy: Box<dyn Policy>,
    /// Jobs that hold capacity (every state but pending). Hashed: every admission and every
    /// end files a job here, and walks that tell what they find sort it.
    holders: HashSet<SharedId, FixedState>,
    /// Of those, the ones holding quota while capacity is bought for them. These four sets
    /// hold shared ids: every reservation search's release order copies all of them.
    provisioning: BTreeSet<SharedId>,
    /// Of those, the ones told to leave.
    evicting: BTreeSet<SharedId>,
    /// Admitted jobs with an expected runtime: (expected end, job), with what the job books
    /// (its entry's booking), so that a reservation search takes the timeline's jobs off the
    /// quota book without looking each one up.
    ends: BTreeMap<(i64, SharedId), Option<Arc<Booking>>>,
    /// Admitted jobs without one.
    unending: BTreeSet<SharedId>,
    /// Admitted and evicting jobs per ClusterQueue: the jobs preemption may pick from.
    /// Hashed within a queue: preemption sorts the candidates it takes from them.
    running_in: BTreeMap<String, RunningIn>,
    /// Waiting jobs per ClusterQueue, in queue order.
    lists: lists::Lists,
    /// What the last cycle that ran found about waiting jobs.
    found: waiting::Found,
    /// Counts changes from outside (jobs, nodes, namespaces).
    generation: u64,
    /// Counts changes of any job's state or of quota held for a preemptor (what cached
    /// preemption candidates depend on).
    epoch: u64,
    /// After a cycle that changed nothing: the generation it saw and the time until which
    /// the same inputs give the same decisions.
    quiet: Option<(u64, i64)>,
    /// Cycles that ran in full (not skipped as quiet).
    cycles_run: u64,
    /// A book whose usage a reservation's check overwrites with its own before booking the
    /// tried job into it ([`crate::reservation::Reservation::would_delay`]): kept between
    /// checks so that each copies usage into cells it already has instead of allocating a
    /// book. Holds nothing between checks.
    scratch_quota: QuotaBook,
    /// Whether an admission's decision carries its pod sets' placements (nodes, domain,
    /// devices) or only the job and its queue ([`Scheduler::admissions_by_job_alone`]).
    placements_told: bool,
    /// Whether the scheduler says why jobs wait ([`Scheduler::reasons_untold`]).
    reasons_told: bool,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("queues", &self.queues.len())
            .field("jobs", &self.jobs.len())
            .field("policy", &self.policy.name())
            .finish_non_exhaustive()
    }
}

impl Scheduler {
    /// A scheduler over `cluster` with these ClusterQueues (name, spec) and LocalQueues
    /// (`namespace/name`, ClusterQueue), placing with best fit.
    pub fn new(
        cluster: Cluster,
        cluster_queues: impl IntoIterator<Item = (String, ClusterQueueSpec)>,
        local_queues: impl IntoIterator<Item = (String, String)>,
    ) -> Scheduler {
        let queues: BTreeMap<String, QueueConfig> = cluster_queues
            .into_iter()
            .map(|(name, spec)| {
                let errors = ClusterQueue::new(&name, spec.clone()).validate();
                let invalid = errors
                    .first()
                    .map(|e| format!("ClusterQueue {name} is invalid: {}: {}", e.path, e.message));
                (
                    name,
                    QueueConfig {
                        spec: Arc::new(spec),
                        invalid,
                    },
                )
            })
            .collect();
        let quota = QuotaBook::new(
            queues
                .iter()
                .filter(|(_, q)| q.invalid.is_none())
                .map(|(n, q)| (n.as_str(), &*q.spec)),
        );
        Scheduler {
            cluster,
            quota,
            queues,
            cohorts: CohortTree::default(),
            local_queues: local_queues.into_iter().collect(),
            jobs: table::JobTable::default(),
            namespaces: BTreeMap::new(),
            shapes: BTreeMap::new(),
            shape_usage: Vec::new(),
            flavored: assign::Flavored::default(),
            prepared: assign::PreparedUsages::default(),
            bookings: book::Bookings::default(),
            nominations: BTreeMap::new(),
            deferred: BTreeMap::new(),
            policy: Box::new(BestFit),
            holders: HashSet::default(),
            running_in: BTreeMap::new(),
            provisioning: BTreeSet::new(),
            evicting: BTreeSet::new(),
            ends: BTreeMap::new(),
            unending: BTreeSet::new(),
            lists: lists::Lists::default(),
            found: waiting::Found::default(),
            generation: 0,
            epoch: 0,
            quiet: None,
            cycles_run: 0,
            scratch_quota: QuotaBook::default(),
            placements_told: true,
            reasons_told: true,
        }
    }

    /// Places with `policy` instead of best fit.
    #[must_use]
    pub fn with_policy(mut self, policy: Box<dyn Policy>) -> Scheduler {
        self.policy = policy;
        self
    }

    /// This scheduler without its jobs kept in id order: every job that comes or goes then
    /// costs a hash instead of an insertion among all the others' ids, and the walks in id
    /// order ([`Scheduler::jobs`], [`Scheduler::jobs_with_states`], [`Scheduler::waiting`]) sort the
    /// ids each time, giving the same. For schedulers that run cycles but are seldom walked,
    /// such as a forecast's forward runs (copies keep the choice).
    #[must_use]
    pub fn without_id_order(mut self) -> Scheduler {
        self.jobs.forget_order();
        self
    }

    /// This scheduler with admissions told by job alone: a [`Decision::Admit`] then names the
    /// job, its ClusterQueue and whether it borrows, with no pod sets (the scheduler's own
    /// holding keeps them: [`Scheduler::state`]), which saves a copy of every
    /// admission's nodes. For callers that read only who was admitted, such as a forecast's
    /// forward runs (copies keep the choice).
    #[must_use]
    pub fn admissions_by_job_alone(mut self) -> Scheduler {
        self.placements_told = false;
        self
    }

    /// This scheduler with the reasons jobs wait left untold: a cycle decides exactly what it
    /// would otherwise (admissions, preemptions, provisioning, reservations, evictions), but
    /// it words no reason, neither its own nor a failed placement's, and keeps none for
    /// [`Scheduler::waiting`], which then has no reason to give and must not be asked. For
    /// callers that read only the decisions that change something, such as a forecast's
    /// forward runs: each cycle leaves thousands of jobs waiting, and the words and their
    /// bookkeeping were about a twentieth of a run (copies keep the choice).
    #[must_use]
    pub fn reasons_untold(mut self) -> Scheduler {
        self.reasons_told = false;
        self.cluster.set_words_failures(false);
        self
    }

    /// A copy of this scheduler, every job, queue, node and what each holds, that places
    /// with `policy`: a policy may carry what it learned from the placements it made, which
    /// a copy cannot share, so the caller hands it one (a fresh one of the same name gives a
    /// copy of a scheduler that has placed nothing yet). What a simulation that starts many
    /// runs from one state copies, instead of building that state again for each.
    #[must_use]
    pub fn copy_with_policy(&self, policy: Box<dyn Policy>) -> Scheduler {
        Scheduler {
            cluster: self.cluster.clone(),
            quota: self.quota.clone(),
            queues: self.queues.clone(),
            cohorts: self.cohorts.clone(),
            local_queues: self.local_queues.clone(),
            jobs: self.jobs.clone(),
            namespaces: self.namespaces.clone(),
            shapes: self.shapes.clone(),
            shape_usage: self.shape_usage.clone(),
            flavored: self.flavored.clone(),
            prepared: self.prepared.clone(),
            bookings: self.bookings.clone(),
            nominations: self.nominations.clone(),
            deferred: self.deferred.clone(),
            policy,
            holders: self.holders.clone(),
            provisioning: self.provisioning.clone(),
            evicting: self.evicting.clone(),
            ends: self.ends.clone(),
            unending: self.unending.clone(),
            running_in: self.running_in.clone(),
            lists: self.lists.clone(),
            found: self.found.clone(),
            generation: self.generation,
            epoch: self.epoch,
            quiet: self.quiet,
            cycles_run: self.cycles_run,
            scratch_quota: QuotaBook::default(),
            placements_told: self.placements_told,
            reasons_told: self.reasons_told,
        }
    }

    /// Lends and borrows through the cohort `tree` (cohorts with parents, quota of their own
    /// and limits at every edge) rather than through flat cohorts. The quota the jobs
    /// already admitted hold is booked again in the new tree.
    #[must_use]
    pub fn with_cohorts(mut self, tree: CohortTree) -> Scheduler {
        self.quota = QuotaBook::with_cohorts(
            self.queues
                .iter()
                .filter(|(_, q)| q.invalid.is_none())
                .map(|(n, q)| (n.as_str(), &*q.spec)),
            &tree,
        );
        // The new book numbers queues and slots afresh: every holder's booking is made again,
        // and every prepared usage.
        self.prepared = assign::PreparedUsages::default();
        self.bookings = book::Bookings::default();
        let holders: Vec<SharedId> = self.holders.iter().cloned().collect();
        for id in holders {
            let Some(e) = self.jobs.get(&id) else {
                continue;
            };
            let (JobState::Admitted(h) | JobState::Provisioning(h) | JobState::Evicting(h)) =
                &e.state
            else {
                continue;
            };
            let (shape, cq) = (e.shape, h.cluster_queue.clone());
            let flavors: Vec<String> = h.pod_sets.iter().map(|p| p.flavor.clone()).collect();
            // The timeline keeps the booking beside an admitted job's expected end.
            let end = match &e.state {
                JobState::Admitted(h) => book::expected_end(&e.job, h),
                _ => None,
            };
            let booking = self.booking_for(shape, &cq, flavors.iter().map(String::as_str));
            if let Some(kept) = end.and_then(|end| self.ends.get_mut(&(end, Arc::clone(&id)))) {
                kept.clone_from(&booking);
            }
            if let Some(e) = self.jobs.get_mut(&id) {
                debug_assert_eq!(
                    booking,
                    booking_of(&self.quota, &e.state, &e.usage),
                    "the booking kept for {id}'s shape is the one made by names"
                );
                if let Some(booking) = &booking {
                    self.quota.add_booking(booking);
                }
                e.booking = booking;
            }
        }
        self.cohorts = tree;
        self.generation += 1;
        self.quiet = None;
        self
    }

    /// The cohort tree, as checked: each cohort's parent and what is wrong with any.
    pub fn cohorts(&self) -> &CohortTree {
        &self.cohorts
    }

    /// Sets the labels of a namespace (ClusterQueues admit LocalQueues by their namespace's
    /// labels; a namespace never set has none).
    pub fn set_namespace(&mut self, name: &str, labels: BTreeMap<String, String>) {
        if self.namespaces.get(name) == Some(&labels) {
            return;
        }
        self.namespaces.insert(name.to_owned(), labels);
        self.generation += 1;
        // Which ClusterQueue admits a waiting job may have changed: list them all again.
        self.lists = lists::Lists::default();
        let waiting: Vec<(Arc<Job>, usize)> = self
            .jobs
            .values()
            .filter(|e| e.state == JobState::Pending)
            .map(|e| (Arc::clone(&e.job), e.shape))
            .collect();
        for (job, shape) in waiting {
            self.enlist(job, shape);
        }
    }

    /// Adds a pending job, or replaces a pending job of the same id. A job that holds
    /// capacity keeps its state; only its definition is updated.
    pub fn submit(&mut self, job: impl Into<Arc<Job>>) {
        let job: Arc<Job> = job.into();
        let shape = self.shape_of(&job);
        self.generation += 1;
        let (state, old_job, shared) = match self.jobs.remove(&job.id) {
            Some(old) => {
                if old.state == JobState::Pending {
                    self.lists.remove(&old.job);
                }
                (old.state, Some(old.job), old.id)
            }
            None => (JobState::Pending, None, SharedId::from(job.id.as_str())),
        };
        if let Some(old) = &old_job {
            self.unfile(&shared, old, &state);
        }
        let usage = Arc::clone(&self.shape_usage[shape]);
        let booking = self.booking_in(shape, &state);
        debug_assert_eq!(
            booking,
            booking_of(&self.quota, &state, &usage),
            "the booking kept for {}'s shape is the one made by names",
            job.id
        );
        self.file(&shared, &job, &state, booking.as_ref());
        if state == JobState::Pending {
            self.holders.remove(job.id.as_str());
            self.enlist(Arc::clone(&job), shape);
        } else {
            self.holders.insert(Arc::clone(&shared));
        }
        self.jobs.insert(Entry {
            job,
            id: shared,
            shape,
            state,
            usage,
            booking,
        });
    }

    /// Records a job admitted before this scheduler existed (a restart): books its quota and
    /// nodes. Node usage given to the [`Cluster`] must not already count its pods.
    pub fn restore(&mut self, job: impl Into<Arc<Job>>, holding: Holding, provisioning: bool) {
        let job: Arc<Job> = job.into();
        let id = job.id.clone();
        self.submit(job);
        self.hold(&id, &holding);
        let state = if provisioning {
            JobState::Provisioning(holding)
        } else {
            JobState::Admitted(holding)
        };
        self.set_state(&id, state);
    }

    /// The job finished or was deleted: releases what it held and forgets it.
    pub fn finish(&mut self, id: &str) {
        self.generation += 1;
        self.deferred.remove(id);
        if let Some(old) = self.jobs.remove(id) {
            old.release(&mut self.quota, &mut self.cluster);
            self.lists.remove(&old.job);
            self.holders.remove(id);
            self.unfile(&old.id, &old.job, &old.state);
        }
    }

    /// The job was evicted (or its provisioning failed): releases what it held and queues it
    /// again.
    pub fn requeue(&mut self, id: &str) {
        self.generation += 1;
        self.release_all(id);
        self.set_state(id, JobState::Pending);
    }

    /// Capacity bought for a provisioning job is ready: `job` is its definition narrowed to
    /// that capacity (node selectors, tolerations) with [`Job::provisioned`] set. The job keeps
    /// holding its quota; the next cycle starts it there, before any waiting job, or says why
    /// it cannot yet. Returns false (and changes nothing) unless the job is provisioning.
    pub fn capacity_ready(&mut self, job: Job) -> bool {
        if !matches!(self.state(&job.id), Some(JobState::Provisioning(_))) {
            return false;
        }
        self.submit(Job {
            provisioned: true,
            ..job
        });
        true
    }

    /// A job's state.
    pub fn state(&self, id: &str) -> Option<&JobState> {
        self.jobs.get(id).map(|e| &e.state)
    }

    /// The job, as submitted.
    pub fn job(&self, id: &str) -> Option<&Job> {
        self.jobs.get(id).map(|e| e.job.as_ref())
    }

    /// The quota book (usage per queue, flavor and resource).
    pub fn quota(&self) -> &QuotaBook {
        &self.quota
    }

    /// The nodes of every flavor, with usage.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The nodes, for changes from outside (pods Muster does not manage starting or ending,
    /// nodes cordoned or back). Not for other flavors: the scheduler keeps its jobs' pod
    /// sets under the flavors it was built with, so a cluster of other flavors needs a new
    /// scheduler.
    pub fn cluster_mut(&mut self) -> &mut Cluster {
        self.generation += 1;
        &mut self.cluster
    }

    /// Every job id with its state, in id order.
    pub fn jobs(&self) -> impl Iterator<Item = (&str, &JobState)> {
        self.jobs.iter().map(|(id, e)| (id, &e.state))
    }

    /// Every job with its state, by id: what [`Scheduler::jobs`] and [`Scheduler::job`] give
    /// together, without a lookup per job.
    pub fn jobs_with_states(&self) -> impl Iterator<Item = (&Job, &JobState)> {
        self.jobs.values().map(|e| (e.job.as_ref(), &e.state))
    }

    /// The jobs that hold capacity (admitted, provisioning or being evicted) with their
    /// states, in no order to rely on: for counts and sums over the few jobs that hold,
    /// without a walk over every job.
    pub fn holders_with_states(&self) -> impl Iterator<Item = (&Job, &JobState)> {
        self.holders
            .iter()
            .filter_map(|id| self.jobs.get(id))
            .map(|e| (e.job.as_ref(), &e.state))
    }

    /// How many jobs each LocalQueue (`namespace/name`) has, in every state (LocalQueues
    /// with none are left out), in no order to rely on. Kept as jobs come and go: reading
    /// it costs one step per LocalQueue.
    pub fn jobs_per_local_queue(&self) -> impl Iterator<Item = (&str, usize)> {
        self.jobs.per_local_queue()
    }

    /// The ClusterQueue a job is queued in, if its LocalQueue leads to a valid one that admits
    /// its namespace.
    pub fn cluster_queue_of_job(&self, job: &Job) -> Option<String> {
        self.cluster_queue_of(job).ok()
    }

    /// The ClusterQueue the jobs of LocalQueue `local_queue` (`namespace/name`) are queued
    /// in, if it leads to a valid one that admits its namespace: the same for every job of
    /// that LocalQueue (see [`Scheduler::cluster_queue_of_job`]).
    pub fn cluster_queue_of_local_queue(&self, local_queue: &str) -> Option<String> {
        self.cluster_queue_for(local_queue).ok()
    }

    /// Why ClusterQueue `name` cannot admit anything (its first validation error), if it
    /// cannot; `None` for a valid queue or one the scheduler does not know.
    pub fn queue_problem(&self, name: &str) -> Option<&str> {
        self.queues.get(name).and_then(|q| q.invalid.as_deref())
    }

    /// Whether the scheduler knows ClusterQueue `name`.
    pub fn has_queue(&self, name: &str) -> bool {
        self.queues.contains_key(name)
    }

    /// The ClusterQueue a job's LocalQueue submits to, or why there is none.
    fn cluster_queue_of(&self, job: &Job) -> Result<String, String> {
        self.cluster_queue_for(&job.local_queue)
    }

    /// The ClusterQueue LocalQueue `local_queue` (`namespace/name`) submits to, or why
    /// there is none.
    fn cluster_queue_for(&self, local_queue: &str) -> Result<String, String> {
        let Some(cq) = self.local_queues.get(local_queue) else {
            return Err(format!(
                "LocalQueue {local_queue} does not exist; create it or set spec.queueName to an existing one"
            ));
        };
        match self.queues.get(cq) {
            None => Err(format!(
                "LocalQueue {local_queue} points at ClusterQueue {cq}, which does not exist"
            )),
            Some(q) => match &q.invalid {
                Some(why) => Err(why.clone()),
                None => {
                    let namespace = local_queue.split('/').next().unwrap_or_default();
                    let empty = BTreeMap::new();
                    let labels = self.namespaces.get(namespace).unwrap_or(&empty);
                    if selects(q.spec.namespace_selector.as_ref(), labels) {
                        Ok(cq.clone())
                    } else {
                        Err(format!(
                            "ClusterQueue {cq}'s namespaceSelector does not admit namespace {namespace}; ask an admin to include it"
                        ))
                    }
                }
            },
        }
    }
}

impl Scheduler {
    /// How far along the expected ends a reason looks for a borrower's job: the search is
    /// per blocked job shape, so it is bounded; past it, the reason names no job.
    const RETURNING_SEARCH: usize = 1024;

    /// A quota shortfall of ClusterQueue `cq` names the level of its cohort tree that stops
    /// it borrowing more and, when that is the tree's pool, of its first borrower's admitted
    /// jobs the one expected to end first and what it gives back. Worked out here, once per
    /// job told, rather than in every quota check.
    fn locate_limit(&self, cq: &str, reason: &mut PendingReason, state: &mut CycleState, now: i64) {
        let PendingReason::QuotaShort(short) = reason else {
            return;
        };
        if short.limit.is_none() {
            short.limit = self
                .quota
                .limit(cq, &short.flavor, &short.resource)
                .map(Box::new);
        }
        let Some(limit) = short.limit.as_deref_mut() else {
            return;
        };
        let crate::quota::Limit::Pool {
            borrowers, returns, ..
        } = limit
        else {
            return;
        };
        let Some(borrower) = borrowers.first() else {
            return;
        };
        let key = (
            borrower.name.clone(),
            borrower.cohort,
            short.flavor.clone(),
            short.resource.clone(),
        );
        if let Some(found) = state.returning.get(&key) {
            returns.clone_from(found);
            return;
        }
        // Jobs past their expected end are left out: when they go is anyone's guess.
        *returns = self
            .ends
            .range((now, SharedId::from(""))..)
            .take(Self::RETURNING_SEARCH)
            .find_map(|((end, id), _)| {
                let entry = self.jobs.get(id)?;
                let JobState::Admitted(h) = &entry.state else {
                    return None;
                };
                if !self
                    .quota
                    .is_under(&h.cluster_queue, &borrower.name, borrower.cohort)
                {
                    return None;
                }
                let held = h
                    .pod_sets
                    .iter()
                    .zip(&*entry.usage)
                    .filter(|(p, _)| p.flavor == short.flavor)
                    .map(|(_, usage)| usage.get(&short.resource).milli())
                    .sum::<u64>();
                // What comes back to the pool: the job's holding, within what the borrower
                // takes beyond its own quota (the rest is its own).
                let back = held.min(borrower.borrowed.milli());
                (back > 0).then(|| (id.to_string(), *end, muster_api::Amount::from_milli(back)))
            });
        state.returning.insert(key, returns.clone());
    }
}

/// The decision that `job`, at `position` in its queue, keeps waiting.
fn waiting(job: &Job, position: u32, reason: PendingReason, eta: Option<i64>) -> Decision {
    Decision::Pending {
        job: job.id.clone(),
        position,
        reason,
        eta,
    }
}

fn blocked_reason(cq: &str, blocked: Blocked) -> PendingReason {
    match blocked {
        Blocked::NotCovered { pod_set, resources } => PendingReason::NotCovered {
            cluster_queue: cq.to_owned(),
            pod_set,
            resources,
        },
        Blocked::Quota(s) => PendingReason::QuotaShort(s),
        Blocked::Topology { no_fit, .. } => PendingReason::NoTopologyFit(no_fit),
        Blocked::Reserved { for_job, until } => PendingReason::CapacityReserved { for_job, until },
    }
}
