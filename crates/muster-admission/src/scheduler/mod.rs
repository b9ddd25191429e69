//! The scheduler: the state admission keeps between cycles (queues, quota usage, node usage,
//! jobs), and the cycle that turns it into decisions.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use muster_api::cluster_queue::{QueueingStrategy, StopPolicy};
use muster_api::{ClusterQueue, ClusterQueueSpec, Resources, Validate};
use muster_topology::{BestFit, NoFit, PodSetRequest, Policy};

use crate::cluster::Cluster;
use crate::decision::{Admitted, Decision, PendingReason, PodSetPlacement};
use crate::job::{Job, JobId, quota_usage};
use crate::namespaces::selects;
use crate::quota::{QuotaBook, QuotaCheck, Shortfall};
use crate::reservation::Reservation;

mod assign;
mod nominate;
mod order;
mod preempt;
mod provisioned;
mod reserve;
mod waiting;
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
    /// Jobs with the same shape (queue, priority, pod sets) fare the same within one cycle;
    /// an index into the scheduler's shape table.
    shape: usize,
    state: JobState,
    /// Its quota usage per pod set (what a release gives back), worked out once.
    usage: Vec<Resources>,
}

impl Entry {
    /// Returns what the entry holds, if anything, to `quota` and `cluster`.
    fn release(&self, quota: &mut QuotaBook, cluster: &mut Cluster) {
        if let JobState::Admitted(h) | JobState::Provisioning(h) | JobState::Evicting(h) =
            &self.state
        {
            for ((set, usage), placement) in
                self.job.pod_sets.iter().zip(&self.usage).zip(&h.pod_sets)
            {
                quota.remove(&h.cluster_queue, &placement.flavor, usage);
                for (pod, node) in placement.nodes.iter().enumerate() {
                    cluster.remove_usage(node, &placement.usage_of(pod, &set.requests));
                }
            }
        }
    }

    /// Returns the quota the entry holds, if any, to `quota` (its nodes stay booked).
    fn release_quota(&self, quota: &mut QuotaBook) {
        if let JobState::Admitted(h) | JobState::Provisioning(h) | JobState::Evicting(h) =
            &self.state
        {
            for (usage, placement) in self.usage.iter().zip(&h.pod_sets) {
                quota.remove(&h.cluster_queue, &placement.flavor, usage);
            }
        }
    }
}

/// A job id shared between the indexes a release order is built from: copying one copies a
/// pointer, not the string.
pub(super) type SharedId = Arc<str>;

/// A job shape's pod sets and its index.
type Shape = (Vec<PodSetRequest>, usize);

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
}

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
    fn ruled_out(&self, queued: &waiting::Queued) -> bool {
        self.ruled_out_from
            .get(&queued.shape)
            .is_some_and(|from| queued.job.expected_runtime.is_none_or(|r| r >= *from))
    }
}

/// A queue head's place in the cycle's order: (borrows, dominant share, priority, creation,
/// UID, id).
type HeadKey = (bool, u64, std::cmp::Reverse<i32>, i64, String, String);

/// A job shape (which includes its queue).
type MemoKey = usize;

/// Flavors and placements for a whole job.
#[derive(Clone, Debug)]
struct Assignment {
    pod_sets: Vec<PodSetPlacement>,
    borrowing: bool,
    /// Quota usage per flavor.
    usage: BTreeMap<String, Resources>,
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
    local_queues: BTreeMap<String, String>,
    jobs: BTreeMap<JobId, Entry>,
    /// Namespace labels, for ClusterQueues' namespace selectors (unknown: no labels).
    namespaces: BTreeMap<String, BTreeMap<String, String>>,
    /// Every job shape seen (LocalQueue, priority, pod sets) with its index, by LocalQueue
    /// and priority: a queue and priority hold a handful of shapes, compared in place.
    shapes: BTreeMap<(String, i32), Vec<Shape>>,
    /// How many shapes there are.
    shape_count: usize,
    /// Preemptors waiting for their victims to leave, with what they counted on.
    nominations: BTreeMap<JobId, nominate::Nomination>,
    /// Preemptors waiting because waiting was cheaper than evicting (see [`weigh`]), with
    /// the time each chose to wait first (their wait is bounded from then) and when that
    /// bound ends, as its last weighing found.
    deferred: BTreeMap<JobId, (i64, i64)>,
    policy: Box<dyn Policy>,
    /// Jobs that hold capacity (every state but pending).
    holders: BTreeSet<JobId>,
    /// Of those, the ones holding quota while capacity is bought for them. These four sets
    /// hold shared ids: every reservation search's release order copies all of them.
    provisioning: BTreeSet<SharedId>,
    /// Of those, the ones told to leave.
    evicting: BTreeSet<SharedId>,
    /// Admitted jobs with an expected runtime: (expected end, job).
    ends: BTreeSet<(i64, SharedId)>,
    /// Admitted jobs without one.
    unending: BTreeSet<SharedId>,
    /// Admitted and evicting jobs per ClusterQueue: the jobs preemption may pick from.
    running_in: BTreeMap<String, BTreeSet<JobId>>,
    /// Waiting jobs per ClusterQueue, in queue order.
    lists: waiting::Lists,
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
            local_queues: local_queues.into_iter().collect(),
            jobs: BTreeMap::new(),
            namespaces: BTreeMap::new(),
            shapes: BTreeMap::new(),
            shape_count: 0,
            nominations: BTreeMap::new(),
            deferred: BTreeMap::new(),
            policy: Box::new(BestFit),
            holders: BTreeSet::new(),
            running_in: BTreeMap::new(),
            provisioning: BTreeSet::new(),
            evicting: BTreeSet::new(),
            ends: BTreeSet::new(),
            unending: BTreeSet::new(),
            lists: waiting::Lists::default(),
            found: waiting::Found::default(),
            generation: 0,
            epoch: 0,
            quiet: None,
            cycles_run: 0,
        }
    }

    /// Places with `policy` instead of best fit.
    #[must_use]
    pub fn with_policy(mut self, policy: Box<dyn Policy>) -> Scheduler {
        self.policy = policy;
        self
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
        self.lists = waiting::Lists::default();
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

    /// Files a holder under its state's index (provisioning, evicting, expected end).
    fn file(&mut self, id: &str, job: &Job, state: &JobState) {
        match state {
            JobState::Provisioning(_) => {
                self.provisioning.insert(Arc::from(id));
            }
            JobState::Evicting(h) => {
                self.evicting.insert(Arc::from(id));
                self.file_running(id, &h.cluster_queue);
            }
            JobState::Admitted(h) => {
                match expected_end(job, h) {
                    Some(end) => {
                        self.ends.insert((end, Arc::from(id)));
                    }
                    None => {
                        self.unending.insert(Arc::from(id));
                    }
                }
                self.file_running(id, &h.cluster_queue);
            }
            JobState::Pending => {}
        }
    }

    fn file_running(&mut self, id: &str, cq: &str) {
        match self.running_in.get_mut(cq) {
            Some(ids) => {
                ids.insert(id.to_owned());
            }
            None => {
                self.running_in
                    .insert(cq.to_owned(), BTreeSet::from([id.to_owned()]));
            }
        }
    }

    fn unfile_running(&mut self, id: &str, cq: &str) {
        if let Some(ids) = self.running_in.get_mut(cq) {
            ids.remove(id);
            if ids.is_empty() {
                self.running_in.remove(cq);
            }
        }
    }

    /// Takes a holder out of its state's index.
    fn unfile(&mut self, id: &str, job: &Job, state: &JobState) {
        match state {
            JobState::Provisioning(_) => {
                self.provisioning.remove(id);
            }
            JobState::Evicting(h) => {
                self.evicting.remove(id);
                self.unfile_running(id, &h.cluster_queue);
            }
            JobState::Admitted(h) => {
                match expected_end(job, h) {
                    Some(end) => {
                        self.ends.remove(&(end, Arc::from(id)));
                    }
                    None => {
                        self.unending.remove(id);
                    }
                }
                self.unfile_running(id, &h.cluster_queue);
            }
            JobState::Pending => {}
        }
    }

    /// Lists a waiting job in its ClusterQueue, if it can queue there.
    fn enlist(&mut self, job: Arc<Job>, shape: usize) {
        if job.invalid.is_some() || job.suspended {
            return;
        }
        if let Ok(cq) = self.cluster_queue_of(&job) {
            self.lists.insert(&cq, waiting::Queued { job, shape });
        }
    }

    /// Sets a job's state, keeping the holders and the waiting lists in step.
    fn set_state(&mut self, id: &str, state: JobState) {
        let Some(entry) = self.jobs.get_mut(id) else {
            return;
        };
        let was_pending = entry.state == JobState::Pending;
        let pending = state == JobState::Pending;
        self.epoch += 1;
        let old = std::mem::replace(&mut entry.state, state);
        let (job, shape) = (Arc::clone(&entry.job), entry.shape);
        self.unfile(id, &job, &old);
        let state = self.jobs.get(id).map(|e| e.state.clone());
        if let Some(state) = state {
            self.file(id, &job, &state);
        }
        if pending {
            self.holders.remove(id);
            if !was_pending {
                self.enlist(job, shape);
            }
        } else {
            self.holders.insert(id.to_owned());
            self.deferred.remove(id);
            if was_pending {
                self.lists.remove(&job);
            }
        }
    }

    /// Adds a pending job, or replaces a pending job of the same id. A job that holds
    /// capacity keeps its state; only its definition is updated.
    pub fn submit(&mut self, job: Job) {
        let shape = self.shape_of(&job);
        self.generation += 1;
        let (state, old_job) = match self.jobs.remove(&job.id) {
            Some(old) => {
                if old.state == JobState::Pending {
                    self.lists.remove(&old.job);
                }
                (old.state, Some(old.job))
            }
            None => (JobState::Pending, None),
        };
        let job = Arc::new(job);
        let id = job.id.clone();
        if let Some(old) = &old_job {
            self.unfile(&id, old, &state);
        }
        self.file(&id, &job, &state);
        if state == JobState::Pending {
            self.holders.remove(&id);
            self.enlist(Arc::clone(&job), shape);
        } else {
            self.holders.insert(id.clone());
        }
        let usage = job.pod_sets.iter().map(quota_usage).collect();
        self.jobs.insert(
            id,
            Entry {
                job,
                shape,
                state,
                usage,
            },
        );
    }

    /// The index of `job`'s shape (its LocalQueue, priority and pod sets), a new one if no job
    /// had it before.
    fn shape_of(&mut self, job: &Job) -> usize {
        let key = (job.local_queue.clone(), job.priority);
        let known = self.shapes.entry(key).or_default();
        if let Some((_, shape)) = known.iter().find(|(sets, _)| *sets == job.pod_sets) {
            return *shape;
        }
        let shape = self.shape_count;
        self.shape_count += 1;
        known.push((job.pod_sets.clone(), shape));
        shape
    }

    /// Records a job admitted before this scheduler existed (a restart): books its quota and
    /// nodes. Node usage given to the [`Cluster`] must not already count its pods.
    pub fn restore(&mut self, job: Job, holding: Holding, provisioning: bool) {
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
        self.release_all(id);
        self.deferred.remove(id);
        if let Some(old) = self.jobs.remove(id) {
            self.lists.remove(&old.job);
            self.holders.remove(id);
            self.unfile(id, &old.job, &old.state);
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

    /// The nodes, for changes from outside (pods Muster does not manage starting or ending).
    pub fn cluster_mut(&mut self) -> &mut Cluster {
        self.generation += 1;
        &mut self.cluster
    }

    /// Every job id with its state, in id order.
    pub fn jobs(&self) -> impl Iterator<Item = (&str, &JobState)> {
        self.jobs.iter().map(|(id, e)| (id.as_str(), &e.state))
    }

    fn hold(&mut self, id: &str, holding: &Holding) {
        let Some(job) = self.jobs.get(id).map(|e| Arc::clone(&e.job)) else {
            return;
        };
        for (set, placement) in job.pod_sets.iter().zip(&holding.pod_sets) {
            self.quota
                .add(&holding.cluster_queue, &placement.flavor, &quota_usage(set));
            for (pod, node) in placement.nodes.iter().enumerate() {
                self.cluster
                    .add_usage(node, &placement.usage_of(pod, &set.requests));
            }
        }
    }

    fn release_all(&mut self, id: &str) {
        if let Some(entry) = self.jobs.get(id) {
            entry.release(&mut self.quota, &mut self.cluster);
        }
    }

    /// The ClusterQueue a job is queued in, if its LocalQueue leads to a valid one that admits
    /// its namespace.
    pub fn cluster_queue_of_job(&self, job: &Job) -> Option<String> {
        self.cluster_queue_of(job).ok()
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
        let Some(cq) = self.local_queues.get(&job.local_queue) else {
            return Err(format!(
                "LocalQueue {} does not exist; create it or set spec.queueName to an existing one",
                job.local_queue
            ));
        };
        match self.queues.get(cq) {
            None => Err(format!(
                "LocalQueue {} points at ClusterQueue {cq}, which does not exist",
                job.local_queue
            )),
            Some(q) => match &q.invalid {
                Some(why) => Err(why.clone()),
                None => {
                    let namespace = job.local_queue.split('/').next().unwrap_or_default();
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

    /// How many cycles ran in full, not skipped as quiet (see [`Scheduler::step`]). While it
    /// stays the same, [`Scheduler::waiting`] gives the same answer: nothing a waiting job's
    /// position or reason depends on has changed. A caller that keeps what `waiting` gave
    /// can skip asking again.
    pub fn cycles_run(&self) -> u64 {
        self.cycles_run
    }

    /// One scheduling cycle at time `now` (seconds) with every waiting job's explanation:
    /// [`Scheduler::step`]'s decisions, then [`Scheduler::waiting`]. Costs what waits (one
    /// decision per waiting job); a caller that needs only what changed calls `step`.
    pub fn cycle(&mut self, now: i64) -> Vec<Decision> {
        let mut out = self.step(now);
        out.extend(self.waiting());
        out
    }

    /// One scheduling cycle at time `now` (seconds): the decisions that change something —
    /// admit, provision, preempt, evict — applied to the scheduler's state before it returns
    /// (so the next cycle, or one that runs while the caller is still carrying them out,
    /// cannot promise the same quota or nodes twice). Why the others wait:
    /// [`Scheduler::waiting`].
    ///
    /// A cycle costs what it must look at, not what waits. Each ClusterQueue's jobs are kept
    /// in order between cycles; within a cycle, once a job shape has failed, every later job
    /// of that shape that respects the same reservations is passed over without a look (it
    /// would fail the same way). And after a cycle that changed nothing, the next one returns
    /// at once unless something came in from outside (a job, a finish, a node), time reached
    /// the first moment at which the same inputs could decide differently (a running job's
    /// expected end, a job being evicted, a preemptor that waits because waiting was
    /// cheaper), or the reasons are [`REASONS_REFRESH_SECONDS`] old. A skipped cycle decides
    /// exactly what a full one would; only the wording of a reason may lag (time alone can
    /// make a job respect a reservation it would have finished before, which changes the
    /// figures it is told but never lets it start).
    pub fn step(&mut self, now: i64) -> Vec<Decision> {
        if let Some((generation, until)) = self.quiet
            && generation == self.generation
            && now < until
            && now < self.found.now.saturating_add(REASONS_REFRESH_SECONDS)
        {
            return Vec::new();
        }
        self.cycles_run += 1;
        let nominated_before: Vec<JobId> = self.nominations.keys().cloned().collect();
        let mut out = Vec::new();
        self.drain_stopped(&mut out);
        self.start_provisioned(now, &mut out);
        let mut state = CycleState::default();
        // Preemptors first: what they evicted for is theirs.
        let (nominated, positions) = self.serve_nominated(now, &mut state, &mut out);

        let lists = std::mem::take(&mut self.lists);
        let mut walk = order::Walk::new(&lists.by_queue, &positions, &self.quota, self.shape_count);
        while let Some(next) = self.next_job(&mut walk, &state, &nominated) {
            let job = Arc::clone(&next.queued.job);
            let before = out.len();
            self.serve(next.cq, &job, next.position, now, &mut state, &mut out);
            walk.served(&next);
            if out[before..].iter().any(|d| {
                matches!(
                    d,
                    Decision::Admit(_)
                        | Decision::Provision { .. }
                        | Decision::Pending {
                            reason: PendingReason::Preempting { .. },
                            ..
                        }
                )
            }) {
                // Usage changed (or was held for a preemptor): shares, borrowing and the
                // release timeline may have too.
                walk.usage_changed(next.cq);
                state.release = None;
            }
        }
        self.release_holds(&mut state);
        self.cluster.commit();
        self.lists = lists;
        self.settle_cycle(now, out, state, &nominated_before)
    }

    /// The end of a cycle: waiting jobs come off the lists when they start, what the cycle
    /// found about the rest is kept for [`Scheduler::waiting`], and, when it changed
    /// nothing, how long the next may be skipped. Returns the decisions that change
    /// something.
    fn settle_cycle(
        &mut self,
        now: i64,
        out: Vec<Decision>,
        state: CycleState,
        nominated_before: &[JobId],
    ) -> Vec<Decision> {
        let gone: Vec<Arc<Job>> = out
            .iter()
            .filter_map(|d| match d {
                Decision::Admit(a) => self.jobs.get(&a.job),
                Decision::Provision { job, .. } => self.jobs.get(job),
                _ => None,
            })
            .map(|e| Arc::clone(&e.job))
            .collect();
        self.lists.remove_all(gone.iter().map(AsRef::as_ref));
        let mut found = waiting::Found {
            now,
            untils: state.reservations.iter().map(|r| r.until).collect(),
            memo: state.memo,
            strict_head: state.strict_head,
            ..waiting::Found::default()
        };
        let mut decisions = Vec::new();
        for d in out {
            match d {
                Decision::Pending {
                    job,
                    position,
                    reason,
                    eta,
                } => {
                    if position == 1
                        && let Some(cq) = self.lists.queue_of(&job)
                    {
                        found.heads.insert(cq.to_owned(), reason.clone());
                    }
                    found.served.insert(job, (reason, eta));
                }
                other => decisions.push(other),
            }
        }
        self.found = found;
        let changed = !decisions.is_empty() || !self.nominations.keys().eq(nominated_before.iter());
        self.quiet = if changed || state.timed {
            None
        } else {
            Some((self.generation, self.decisions_hold_until(now)))
        };
        decisions
    }

    /// The first time at which the same inputs could decide differently than at `now`: when
    /// a running job reaches its expected end (the release timeline, and so reservations,
    /// move from then on), or at once while a job is being evicted (it is on the timeline at
    /// `now`).
    fn decisions_hold_until(&self, now: i64) -> i64 {
        if !self.evicting.is_empty() {
            return now;
        }
        self.ends
            .first()
            .map_or(i64::MAX, |(end, _)| (*end).max(now))
    }

    /// Decides for one job, the next in the cycle's order.
    fn serve(
        &mut self,
        cq: &str,
        job: &Arc<Job>,
        position: u32,
        now: i64,
        state: &mut CycleState,
        out: &mut Vec<Decision>,
    ) {
        let pending = |reason, eta| waiting(job, position, reason, eta);
        let Some(spec) = self.queues.get(cq).map(|q| &q.spec) else {
            return;
        };
        if spec.stop_policy != StopPolicy::None {
            out.push(pending(
                PendingReason::QueueStopped {
                    cluster_queue: cq.to_owned(),
                },
                None,
            ));
            return;
        }
        if let Some(head) = state.strict_head.get(cq) {
            out.push(pending(
                PendingReason::BlockedByQueueHead { head: head.clone() },
                None,
            ));
            return;
        }
        let strict = spec.queueing_strategy == QueueingStrategy::StrictFIFO;
        let ends = job.expected_runtime.map(|r| now.saturating_add(r));
        let respected = state
            .reservations
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.ends_before(ends))
            .fold(0u64, |mask, (i, _)| mask | (1u64 << (i % 64)));
        let key = self.jobs.get(&job.id).map_or(usize::MAX, |e| e.shape);
        let known = state.memo.get(&key).and_then(|seen| {
            seen.iter()
                .find(|(mask, _)| mask & !respected == 0)
                .map(|(_, reason)| reason)
        });
        if let Some(reason) = known {
            if strict {
                state.strict_head.insert(cq.to_owned(), job.id.clone());
            }
            out.push(pending(reason.clone(), None));
            return;
        }
        if self.provisions_always(cq)
            && let Some(d) = self.provision(cq, job, now)
        {
            // Fresh capacity for every job: it does not take today's nodes.
            out.push(d);
            return;
        }
        let opts = Options {
            place: true,
            no_borrow: false,
        };
        let blocked = match self.try_assign(cq, job, opts, &state.reservations, now) {
            Ok(assignment) => {
                for r in &mut state.reservations {
                    r.admitted(&self.quota, cq, &assignment.usage, ends);
                }
                self.admit(cq, job, assignment, now, out);
                return;
            }
            Err(blocked) => blocked,
        };
        if strict {
            state.strict_head.insert(cq.to_owned(), job.id.clone());
        }
        self.on_blocked(
            cq,
            job,
            position,
            now,
            blocked,
            (key, respected),
            state,
            out,
        );
    }

    /// A job that cannot start as things are: provision, preempt, or wait (taking the
    /// queue's reservation when it is the first to be blocked).
    #[expect(
        clippy::too_many_arguments,
        reason = "the cycle's context, passed down once"
    )]
    fn on_blocked(
        &mut self,
        cq: &str,
        job: &Arc<Job>,
        position: u32,
        now: i64,
        blocked: Blocked,
        key: (MemoKey, u64),
        state: &mut CycleState,
        out: &mut Vec<Decision>,
    ) {
        let pending = |reason, eta| waiting(job, position, reason, eta);
        // A queue that buys capacity waits for it rather than evicting running work, unless
        // it allows preemption while provisioning: then preemption is tried first.
        let preempt_first = self
            .queues
            .get(cq)
            .and_then(|q| q.spec.provisioning.as_ref())
            .is_some_and(|p| p.preempt_while_provisioning);
        if let Blocked::Topology { .. } = &blocked
            && !preempt_first
            && let Some(d) = self.provision(cq, job, now)
        {
            out.push(d);
            state.strict_head.remove(cq);
            return;
        }
        let deferred_since = self.deferred.remove(&job.id);
        let mut deferral = None;
        if let Some((victims, leaving, assignment)) =
            self.preempt(cq, job, &state.reservations, now, &mut state.candidates)
        {
            deferral = self.weigh(
                cq,
                job,
                &victims,
                &leaving,
                &blocked,
                deferred_since.map(|(since, _)| since),
                now,
                state,
            );
            if deferral.is_none() {
                self.evict_for(job, &victims, &leaving, out);
                self.nominate(cq, job, &victims, &assignment, state);
                out.push(pending(PendingReason::Preempting { victims }, None));
                return;
            }
        }
        if let Some(d) = &deferral {
            self.deferred.insert(job.id.clone(), (d.since, d.until));
        }
        if let Blocked::Topology { .. } = &blocked
            && preempt_first
            && let Some(d) = self.provision(cq, job, now)
        {
            out.push(d);
            state.strict_head.remove(cq);
            return;
        }
        let reservable = matches!(blocked, Blocked::Quota(_) | Blocked::Topology { .. });
        let reservation =
            if reservable && !state.reserved_by.contains(cq) && state.reservations.len() < 64 {
                state.reserved_by.insert(cq.to_owned());
                match state.weighed.take() {
                    Some((weighed, found)) if weighed == job.id => Some(found),
                    _ => {
                        let release = std::rc::Rc::clone(state.release.get_or_insert_with(|| {
                            std::rc::Rc::new(self.release_order(now, true))
                        }));
                        Some(self.reserve(cq, job, &blocked, now, &release))
                    }
                }
            } else {
                None
            };
        let reason = blocked_reason(cq, blocked);
        let mut eta = None;
        match reservation {
            Some(Some(r)) => {
                eta = r.until;
                state.reservations.push(r);
            }
            // The first blocked job of its queue, with nothing to reserve: a later identical
            // job may still make the reservation, so it is not remembered.
            Some(None) => {}
            None => {
                // What an identical job would be told: why it cannot start, not this job's
                // own weighing.
                let (key, respected) = key;
                state.remember(key, respected, reason.clone(), now);
            }
        }
        match deferral {
            // Its start as the weighing sees it: only jobs about to leave free capacity.
            Some(d) => {
                let starts = d.starts;
                out.push(pending(
                    PendingReason::PreemptionDeferred(Box::new(d)),
                    Some(starts),
                ));
            }
            None => out.push(pending(reason, eta)),
        }
    }

    /// Whether `job` could start in `cq` only by borrowing: some pod set has no flavor with
    /// room within the queue's nominal quota, but one with room in the cohort.
    fn needs_borrowing(&self, cq: &str, job: &Job) -> bool {
        let Some(spec) = self.queues.get(cq).map(|q| &q.spec) else {
            return false;
        };
        let mut borrows = false;
        for set in &job.pod_sets {
            let usage = quota_usage(set);
            // The flavors assignment would try: those of the group covering the pod set.
            let Some(group) = assign::covering_group(spec, &usage) else {
                return false;
            };
            let checks: Vec<QuotaCheck> = group
                .flavors
                .iter()
                .map(|f| self.quota.check(cq, &f.name, &usage))
                .collect();
            if checks.contains(&QuotaCheck::Fits) {
                continue;
            }
            if checks.contains(&QuotaCheck::Borrows) {
                borrows = true;
            } else {
                return false;
            }
        }
        borrows
    }

    /// HoldAndDrain: every job holding a stopped queue's quota is evicted.
    fn drain_stopped(&mut self, out: &mut Vec<Decision>) {
        let draining: Vec<String> = self
            .queues
            .iter()
            .filter(|(_, q)| q.spec.stop_policy == StopPolicy::HoldAndDrain)
            .map(|(n, _)| n.clone())
            .collect();
        if draining.is_empty() {
            return;
        }
        let holders: Vec<JobId> = self.holders.iter().cloned().collect();
        for id in holders {
            let Some(entry) = self.jobs.get(&id) else {
                continue;
            };
            if let JobState::Admitted(h) | JobState::Provisioning(h) = entry.state.clone()
                && draining.contains(&h.cluster_queue)
            {
                out.push(Decision::Evict {
                    job: id.clone(),
                    reason: format!(
                        "ClusterQueue {} has stopPolicy HoldAndDrain",
                        h.cluster_queue
                    ),
                });
                self.set_state(&id, JobState::Evicting(h));
            }
        }
    }

    fn admit(
        &mut self,
        cq: &str,
        job: &Job,
        assignment: Assignment,
        now: i64,
        out: &mut Vec<Decision>,
    ) {
        for (flavor, usage) in &assignment.usage {
            self.quota.add(cq, flavor, usage);
        }
        let holding = Holding {
            cluster_queue: cq.to_owned(),
            since: Some(now),
            pod_sets: assignment.pod_sets.clone(),
        };
        self.set_state(&job.id, JobState::Admitted(holding));
        out.push(Decision::Admit(Admitted {
            job: job.id.clone(),
            cluster_queue: cq.to_owned(),
            pod_sets: assignment.pod_sets,
            borrowing: assignment.borrowing,
        }));
    }

    /// Whether `cq` buys fresh capacity for every job (`mode: Always`).
    fn provisions_always(&self, cq: &str) -> bool {
        self.queues
            .get(cq)
            .and_then(|q| q.spec.provisioning.as_ref())
            .is_some_and(|p| p.mode == muster_api::cluster_queue::ProvisioningMode::Always)
    }

    /// Quota fits but no nodes do: when the queue provisions for this job, book its quota and
    /// decide to buy capacity.
    fn provision(&mut self, cq: &str, job: &Job, now: i64) -> Option<Decision> {
        if job.provisioned {
            return None;
        }
        let policy = self.queues.get(cq)?.spec.provisioning.clone()?;
        if !policy.managed_resources.is_empty() {
            let total = job.total_requests();
            if !policy
                .managed_resources
                .iter()
                .any(|r| !total.get(r).is_zero())
            {
                return None;
            }
        }
        let assignment = self
            .try_assign(
                cq,
                job,
                Options {
                    place: false,
                    no_borrow: false,
                },
                &[],
                now,
            )
            .ok()?;
        for (flavor, usage) in &assignment.usage {
            self.quota.add(cq, flavor, usage);
        }
        let flavors = assignment
            .pod_sets
            .iter()
            .map(|p| (p.name.clone(), p.flavor.clone()))
            .collect();
        self.set_state(
            &job.id,
            JobState::Provisioning(Holding {
                cluster_queue: cq.to_owned(),
                since: Some(now),
                pod_sets: assignment.pod_sets,
            }),
        );
        Some(Decision::Provision {
            job: job.id.clone(),
            cluster_queue: cq.to_owned(),
            flavors,
        })
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

/// When an admitted job is expected to end: its admission plus the runtime it announced, when
/// both are known.
fn expected_end(job: &Job, holding: &Holding) -> Option<i64> {
    Some(holding.since?.saturating_add(job.expected_runtime?))
}
