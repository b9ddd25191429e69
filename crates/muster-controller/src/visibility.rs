//! The answers of the visibility API (see [`muster_api::visibility`]), worked out from the
//! controller's memory: the index and the scheduler the last pass left. Pure and cheap: no
//! request, no write, nothing kept; the same state gives the same answer.
//!
//! Every answer takes the caller's view as a predicate over namespaces (`may_see`): a job in
//! a namespace the caller may not see keeps its place, size, priority and reason kind, and
//! loses its name, namespace, LocalQueue, owner and message; a message of a job the caller
//! sees names the jobs of hidden namespaces as [`HIDDEN`].

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use muster_admission::{Decision, Job, JobState, PendingReason, Scheduler};
use muster_api::gpujob::StartRange;
use muster_api::resources::names::{GPU_SHARE, NVIDIA_GPU};
use muster_api::visibility::{
    API_VERSION, Block, BlockList, ClusterQueueSummary, ClusterQueueSummaryList, CohortSummary,
    CohortUsage, FlavorUsage, ForecastAnswer, HIDDEN, Holder, JobForecast, JobStory, NearestBlock,
    PendingJob, PendingJobList, STORY_AHEAD, STORY_HOLDERS, StoryStep,
};
use muster_api::{Amount, GpuJob, ObjectRef};
use muster_sim::forecast::{Basis, Forecast, Snapshot};

use crate::forecasting::Latest;
use crate::state::State;

/// Which waiting jobs a list is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every ClusterQueue's.
    All,
    /// One ClusterQueue's.
    ClusterQueue(String),
    /// One LocalQueue's (`namespace`, `name`).
    LocalQueue(String, String),
    /// One namespace's.
    Namespace(String),
}

impl Scope {
    fn label(&self) -> String {
        match self {
            Scope::All => "all".to_owned(),
            Scope::ClusterQueue(name) => format!("clusterqueue/{name}"),
            Scope::LocalQueue(ns, name) => format!("localqueue/{ns}/{name}"),
            Scope::Namespace(ns) => format!("namespace/{ns}"),
        }
    }
}

/// Why no answer can be given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unanswered {
    /// No pass has run yet (the controller is starting, or stands by).
    NoPassYet,
    /// The object asked about does not exist.
    NotFound(String),
}

/// Seconds to an API time.
fn time(seconds: i64) -> Option<Time> {
    Timestamp::from_second(seconds).ok().map(Time)
}

fn gpus(amount: Amount) -> f64 {
    #[expect(clippy::cast_precision_loss, reason = "milli-GPUs shown as a number")]
    let milli = amount.milli() as f64;
    milli / 1000.0
}

/// GPUs a job asks for in all, as its quota counts them (a pod asking for part of a GPU
/// counts that part), without building its quota usage.
fn job_gpus(job: &Job) -> f64 {
    let milli = job
        .pod_sets
        .iter()
        .map(|set| {
            let share = set.requests.get(GPU_SHARE);
            let per_pod = if share.is_zero() {
                set.requests.get(NVIDIA_GPU)
            } else {
                share
            };
            per_pod.milli().saturating_mul(u64::from(set.count))
        })
        .fold(0u64, u64::saturating_add);
    gpus(Amount::from_milli(milli))
}

/// One waiting job, as the scheduler lends it (one ClusterQueue's) or gives it (all).
struct Entry<'a> {
    id: Cow<'a, str>,
    job: Option<&'a Job>,
    position: u32,
    reason: Cow<'a, PendingReason>,
    eta: Option<i64>,
}

/// Every waiting job in the scheduler's order.
struct Waiting<'a> {
    scheduler: &'a Scheduler,
    decisions: Vec<Entry<'a>>,
}

impl<'a> Waiting<'a> {
    /// Every waiting job, or only ClusterQueue `cq`'s when one is named (cheaper: only its
    /// list is read).
    fn of(state: &'a State, cq: Option<&str>) -> Result<Waiting<'a>, Unanswered> {
        let scheduler = state
            .last
            .scheduler
            .scheduler()
            .ok_or(Unanswered::NoPassYet)?;
        let decisions = match cq {
            Some(cq) => scheduler
                .waiting_jobs_in(cq)
                .into_iter()
                .map(|w| Entry {
                    id: Cow::Borrowed(w.job.id.as_str()),
                    job: Some(w.job),
                    position: w.position,
                    reason: w.reason,
                    eta: w.eta,
                })
                .collect(),
            None => scheduler
                .waiting()
                .into_iter()
                .filter_map(|d| match d {
                    Decision::Pending {
                        job,
                        position,
                        reason,
                        eta,
                    } => Some(Entry {
                        job: scheduler.job(&job),
                        id: Cow::Owned(job),
                        position,
                        reason: Cow::Owned(reason),
                        eta,
                    }),
                    _ => None,
                })
                .collect(),
        };
        Ok(Waiting {
            scheduler,
            decisions,
        })
    }

    fn cluster_queue_of(&self, job: &Job) -> Option<String> {
        self.scheduler
            .cluster_queue_of_local_queue(&job.local_queue)
    }
}

/// The flavors ClusterQueue `cq` may give GPUs, in the order tried.
fn gpu_flavors(state: &State, cq: &str) -> Vec<String> {
    state
        .index
        .cluster_queues
        .get(cq)
        .map(|q| {
            q.spec
                .resource_groups
                .iter()
                .filter(|g| g.covered_resources.iter().any(|r| r == NVIDIA_GPU))
                .flat_map(|g| g.flavors.iter().map(|f| f.name.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// The object an entry stands for, as `Kind/name`.
fn owner_of(job: Option<&GpuJob>) -> Option<String> {
    let workload = crate::workload::workload_of(job?)?;
    Some(format!("{}/{}", workload.kind.label(), workload.key.name()))
}

/// `reason`'s message with the jobs of namespaces the caller may not see named [`HIDDEN`].
fn redacted(reason: &PendingReason, may_see: &dyn Fn(&str) -> bool) -> String {
    let mut message = reason.message();
    let named: Vec<&str> = match reason {
        PendingReason::BlockedByQueueHead { head } => vec![head.as_str()],
        PendingReason::CapacityReserved { for_job, .. } => vec![for_job.as_str()],
        PendingReason::Preempting { victims } => victims.iter().map(String::as_str).collect(),
        PendingReason::PreemptionDeferred(d) => d.victims.iter().map(String::as_str).collect(),
        _ => Vec::new(),
    };
    for id in named {
        let namespace = id.split_once('/').map_or("", |(ns, _)| ns);
        if !may_see(namespace) {
            message = message.replace(id, HIDDEN);
        }
    }
    message
}

/// What an answer looks up once and reads for many jobs: each LocalQueue's ClusterQueue,
/// each ClusterQueue's GPU flavors, and the last reason's message (jobs of one shape wait
/// for the same reason, one after the other).
#[derive(Default)]
struct Memo {
    cluster_queue_of: BTreeMap<String, Option<String>>,
    message: Option<(PendingReason, String)>,
}

impl Memo {
    fn cluster_queue(&mut self, waiting: &Waiting<'_>, local_queue: &str) -> Option<String> {
        if let Some(cq) = self.cluster_queue_of.get(local_queue) {
            return cq.clone();
        }
        let cq = waiting.scheduler.cluster_queue_of_local_queue(local_queue);
        self.cluster_queue_of
            .insert(local_queue.to_owned(), cq.clone());
        cq
    }

    /// Each ClusterQueue an answer named, with its GPU flavors.
    fn flavors(&self, state: &State) -> BTreeMap<String, Vec<String>> {
        self.cluster_queue_of
            .values()
            .flatten()
            .map(|cq| (cq.clone(), gpu_flavors(state, cq)))
            .collect()
    }

    fn message(&mut self, reason: &PendingReason, may_see: &dyn Fn(&str) -> bool) -> String {
        if let Some((last, message)) = &self.message
            && last == reason
        {
            return message.clone();
        }
        let message = redacted(reason, may_see);
        self.message = Some((reason.clone(), message.clone()));
        message
    }
}

/// One waiting job as the caller may see it. `lq_position` is its place in its LocalQueue.
fn pending_job(
    state: &State,
    waiting: &Waiting<'_>,
    entry: &Entry<'_>,
    lq_position: u32,
    may_see: &dyn Fn(&str) -> bool,
    memo: &mut Memo,
) -> PendingJob {
    let (id, position, reason, eta) = (&*entry.id, entry.position, &*entry.reason, entry.eta);
    let job = entry.job;
    let cluster_queue = job.and_then(|j| memo.cluster_queue(waiting, &j.local_queue));
    let namespace = id.split_once('/').map_or("", |(ns, _)| ns);
    let visible = may_see(namespace);
    let mut out = PendingJob {
        cluster_queue,
        position,
        pods: job.map_or(0, |j| j.pod_sets.iter().map(|s| s.count).sum()),
        gpus: job.map_or(0.0, job_gpus),
        priority: job.map_or(0, |j| j.priority),
        reason: Cow::Borrowed(reason.kind().as_str()),
        eta: eta.and_then(time),
        start_range: state.forecasting.range_of(id),
        created: job.and_then(|j| time(j.created)),
        ..PendingJob::default()
    };
    if visible {
        let (ns, name) = id.split_once('/').unwrap_or(("", id));
        out.namespace = Some(ns.to_owned());
        out.name = Some(name.to_owned());
        out.local_queue = job.map(|j| {
            j.local_queue
                .split_once('/')
                .map_or(j.local_queue.clone(), |(_, lq)| lq.to_owned())
        });
        out.local_queue_position = Some(lq_position);
        // Only queue entries have an owner, and entries exist only beside the Jobs, JobSets
        // or pod groups they stand for: without any, no job need be looked up.
        let entries = !(state.index.workloads.is_empty()
            && state.index.jobsets.is_empty()
            && state.index.pod_groups.is_empty());
        if entries {
            out.owner = owner_of(state.index.job(id));
        }
        out.message = Some(memo.message(reason, may_see));
    }
    out
}

/// The waiting jobs of `scope`, in order: ClusterQueue by ClusterQueue (name order), each in
/// its queue's order, jobs not in an order (invalid, suspended, no queue, waiting for bought
/// capacity) last. Built whole; [`pending_job_listing`] writes the same list without.
pub fn pending_jobs(
    state: &State,
    scope: &Scope,
    may_see: &dyn Fn(&str) -> bool,
) -> Result<PendingJobList, Unanswered> {
    let listing = pending_job_listing(state, scope, may_see)?;
    Ok(PendingJobList {
        api_version: listing.api_version,
        kind: listing.kind,
        scope: listing.scope,
        as_of: listing.as_of,
        items: listing.items.jobs().collect(),
        hidden: listing.hidden,
        flavors: listing.flavors,
    })
}

/// The waiting jobs of `scope`, as [`pending_jobs`] lists them, with items made one at a
/// time as they are written: a list of 15,000 jobs is never held whole, and what each job
/// needs (its names, its message) is made and freed while the memory is still warm. The
/// order, counts and flavors are worked out here; the items when serialized.
pub fn pending_job_listing<'a>(
    state: &'a State,
    scope: &Scope,
    may_see: &'a dyn Fn(&str) -> bool,
) -> Result<PendingJobList<Listing<'a>>, Unanswered> {
    match scope {
        Scope::ClusterQueue(name) if !state.index.cluster_queues.contains_key(name) => {
            return Err(Unanswered::NotFound(format!("ClusterQueue {name}")));
        }
        Scope::LocalQueue(ns, name)
            if !state
                .index
                .local_queues
                .contains_key(format!("{ns}/{name}").as_str()) =>
        {
            return Err(Unanswered::NotFound(format!("LocalQueue {ns}/{name}")));
        }
        _ => {}
    }
    let cq_scope = match scope {
        Scope::ClusterQueue(name) => Some(name.as_str()),
        _ => None,
    };
    let waiting = Waiting::of(state, cq_scope)?;
    let mut memo = Memo::default();
    // Every job of a LocalQueue is in one ClusterQueue and one namespace, so counting places
    // among the jobs in scope counts them among all the LocalQueue's jobs.
    let mut lq_positions: BTreeMap<&str, u32> = BTreeMap::new();
    let mut ranked = Vec::with_capacity(waiting.decisions.len());
    let mut unranked = Vec::new();
    let mut hidden = 0u32;
    for (at, entry) in waiting.decisions.iter().enumerate() {
        let (id, position, job) = (&*entry.id, entry.position, entry.job);
        let in_scope = match scope {
            Scope::All | Scope::ClusterQueue(_) => true,
            Scope::LocalQueue(ns, name) => {
                job.is_some_and(|j| j.local_queue.split_once('/') == Some((ns.as_str(), name)))
            }
            Scope::Namespace(ns) => id.split_once('/').is_some_and(|(n, _)| n == ns),
        };
        if !in_scope {
            continue;
        }
        let lq_position = if position > 0 {
            let n = lq_positions
                .entry(job.map_or("", |j| j.local_queue.as_str()))
                .or_default();
            *n += 1;
            *n
        } else {
            0
        };
        if !may_see(id.split_once('/').map_or("", |(ns, _)| ns)) {
            hidden += 1;
        }
        // Looked up for every item, in order or not: the list names each one's flavors.
        let cq = job.and_then(|j| memo.cluster_queue(&waiting, &j.local_queue));
        if position > 0 {
            ranked.push((cq, position, at, lq_position));
        } else {
            unranked.push((at, lq_position));
        }
    }
    // The scheduler lists queue by queue in name order already; sorting (a pass over a
    // list already in order) keeps that promise whatever it changes to.
    ranked.sort_by(|a, b| (a.0.as_deref(), a.1).cmp(&(b.0.as_deref(), b.1)));
    let order = ranked
        .into_iter()
        .map(|(_, _, at, lq)| (at, lq))
        .chain(unranked)
        .collect();
    let as_of = time(waiting.scheduler.reasons_as_of());
    let flavors = memo.flavors(state);
    let listing = Listing {
        state,
        waiting,
        order,
        may_see,
        memo: std::cell::RefCell::new(memo),
    };
    Ok(PendingJobList {
        api_version: API_VERSION.to_owned(),
        kind: "PendingJobList".to_owned(),
        scope: scope.label(),
        as_of,
        items: listing,
        hidden,
        flavors,
    })
}

/// The items of a waiting list, in order, each made as it is written (see
/// [`pending_job_listing`]).
pub struct Listing<'a> {
    state: &'a State,
    waiting: Waiting<'a>,
    /// Each item's entry in `waiting` and its place in its LocalQueue.
    order: Vec<(usize, u32)>,
    may_see: &'a dyn Fn(&str) -> bool,
    memo: std::cell::RefCell<Memo>,
}

impl Listing<'_> {
    /// How many jobs it lists.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether it lists none.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Its jobs, in order, made one at a time.
    pub fn jobs(&self) -> impl Iterator<Item = PendingJob> + '_ {
        self.order.iter().map(|&(at, lq_position)| {
            pending_job(
                self.state,
                &self.waiting,
                &self.waiting.decisions[at],
                lq_position,
                self.may_see,
                &mut self.memo.borrow_mut(),
            )
        })
    }
}

impl serde::Serialize for Listing<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = serializer.serialize_seq(Some(self.order.len()))?;
        for job in self.jobs() {
            seq.serialize_element(&job)?;
        }
        seq.end()
    }
}

/// Who lends to whom per (flavor, resource), over the whole tree, by (whether a cohort, name):
/// a ClusterQueue and a Cohort may share a name.
type FlowsBySlot<'a> =
    BTreeMap<(&'a str, &'a str), BTreeMap<(bool, &'a str), muster_admission::Flow<'a>>>;

fn flows_by_slot(quota: &muster_admission::QuotaBook) -> FlowsBySlot<'_> {
    quota
        .slots()
        .map(|(flavor, resource)| {
            let by_name = quota
                .flows(flavor, resource)
                .into_iter()
                .map(|f| ((f.cohort, f.name), f))
                .collect();
            ((flavor, resource), by_name)
        })
        .collect()
}

/// Every cohort of the book's trees: its parent, and what it borrows and lends per slot.
fn cohort_summaries(
    quota: &muster_admission::QuotaBook,
    flows: &FlowsBySlot<'_>,
) -> Vec<CohortSummary> {
    quota
        .cohorts()
        .map(|(name, parent)| CohortSummary {
            name: name.to_owned(),
            parent: parent.map(str::to_owned),
            usage: flows
                .iter()
                .filter_map(|((flavor, resource), by_name)| {
                    let f = by_name.get(&(true, name))?;
                    Some(CohortUsage {
                        flavor: (*flavor).to_owned(),
                        resource: (*resource).to_owned(),
                        borrowed: gpus(Amount::from_milli(f.borrowed)),
                        lent: gpus(Amount::from_milli(f.lent)),
                    })
                })
                .collect(),
        })
        .collect()
}

/// Every ClusterQueue's figures, from the last pass's scheduler: quota and use per flavor
/// and resource, what it lends, and its waiting and admitted counts.
pub fn cluster_queues(state: &State) -> Result<ClusterQueueSummaryList, Unanswered> {
    let scheduler = state
        .last
        .scheduler
        .scheduler()
        .ok_or(Unanswered::NoPassYet)?;
    let quota = scheduler.quota();
    let mut waiting: BTreeMap<String, u32> = BTreeMap::new();
    for decision in scheduler.waiting() {
        if let Decision::Pending { job, position, .. } = decision {
            let cq = scheduler
                .job(&job)
                .and_then(|j| scheduler.cluster_queue_of_job(j));
            if let (Some(cq), true) = (cq, position > 0) {
                *waiting.entry(cq).or_default() += 1;
            }
        }
    }
    let mut admitted: BTreeMap<&str, u32> = BTreeMap::new();
    for (_, job_state) in scheduler.holders_with_states() {
        if let JobState::Admitted(h) | JobState::Provisioning(h) | JobState::Evicting(h) = job_state
        {
            *admitted.entry(h.cluster_queue.as_str()).or_default() += 1;
        }
    }
    let flows = flows_by_slot(quota);
    let reports: BTreeMap<&str, Vec<(String, String, Amount, Amount)>> = state
        .index
        .cluster_queues
        .keys()
        .map(|name| (name.as_str(), quota.report(name)))
        .collect();
    let mut items = Vec::new();
    for (name, queue) in &state.index.cluster_queues {
        let cohort = quota.cohort(name).map(str::to_owned);
        let usage = reports
            .get(name.as_str())
            .into_iter()
            .flatten()
            .map(|(flavor, resource, used, borrowed)| {
                let nominal = quota.nominal(name, flavor, resource);
                let lent = flows
                    .get(&(flavor.as_str(), resource.as_str()))
                    .and_then(|by_name| by_name.get(&(false, name.as_str())))
                    .map_or(0, |f| f.lent);
                FlavorUsage {
                    flavor: flavor.clone(),
                    resource: resource.clone(),
                    nominal: gpus(nominal),
                    used: gpus(*used),
                    borrowed: gpus(*borrowed),
                    lent: gpus(Amount::from_milli(lent)),
                }
            })
            .collect();
        items.push(ClusterQueueSummary {
            name: name.clone(),
            cohort,
            ancestors: quota
                .ancestors(name)
                .into_iter()
                .map(str::to_owned)
                .collect(),
            stop_policy: format!("{:?}", queue.spec.stop_policy),
            waiting: waiting.get(name).copied().unwrap_or(0),
            admitted: admitted.get(name.as_str()).copied().unwrap_or(0),
            usage,
            problem: scheduler.queue_problem(name).map(str::to_owned),
        });
    }
    let cohorts = cohort_summaries(quota, &flows);
    Ok(ClusterQueueSummaryList {
        api_version: API_VERSION.to_owned(),
        kind: "ClusterQueueSummaryList".to_owned(),
        items,
        cohorts,
    })
}

/// Free GPUs per flavor and topology domain, down to each node, with the jobs that hold GPUs
/// there: so a user sees why 16 GPUs free in all do not hold a 16-GPU gang that needs one
/// block.
pub fn blocks(state: &State, may_see: &dyn Fn(&str) -> bool) -> Result<BlockList, Unanswered> {
    let scheduler = state
        .last
        .scheduler
        .scheduler()
        .ok_or(Unanswered::NoPassYet)?;
    let cluster = scheduler.cluster();
    // GPUs each admitted job holds per node.
    let mut on_node: BTreeMap<&str, BTreeMap<String, u64>> = BTreeMap::new();
    for (job, job_state) in scheduler.jobs_with_states() {
        let (JobState::Admitted(h) | JobState::Evicting(h)) = job_state else {
            continue;
        };
        let namespace = job.id.split_once('/').map_or("", |(ns, _)| ns);
        let shown = if may_see(namespace) {
            job.id.clone()
        } else {
            HIDDEN.to_owned()
        };
        for (placement, request) in h.pod_sets.iter().zip(&job.pod_sets) {
            let per_pod = request.requests.get(NVIDIA_GPU).milli();
            for node in &placement.nodes {
                let held = on_node
                    .entry(node.as_str())
                    .or_default()
                    .entry(shown.clone())
                    .or_default();
                *held = held.saturating_add(per_pod);
            }
        }
    }
    let mut items = Vec::new();
    for flavor in state.index.flavors.keys() {
        let Some(topology) = cluster.topology(flavor) else {
            continue;
        };
        let levels = topology.levels();
        let mut stack: Vec<usize> = topology
            .domains()
            .first()
            .map(|root| root.children.iter().rev().copied().collect())
            .unwrap_or_default();
        while let Some(id) = stack.pop() {
            let domain = &topology.domains()[id];
            let nodes: Vec<usize> = topology
                .nodes_under(id)
                .into_iter()
                .filter(|n| topology.nodes()[*n].info.schedulable)
                .collect();
            let mut block = Block {
                flavor: flavor.clone(),
                level: levels
                    .get(domain.depth.saturating_sub(1))
                    .cloned()
                    .unwrap_or_default(),
                path: topology.path(id),
                ..Block::default()
            };
            fill_block(&mut block, topology, &nodes, &on_node);
            items.push(block);
            // Below the last level, the nodes themselves (unless the last level is the host).
            let last = domain.depth == levels.len();
            let by_host = levels
                .last()
                .is_some_and(|l| l == muster_api::resource_flavor::HOSTNAME_LABEL);
            if last && !by_host {
                for &node in &domain.nodes {
                    let mut host = Block {
                        flavor: flavor.clone(),
                        level: muster_api::resource_flavor::HOSTNAME_LABEL.to_owned(),
                        path: {
                            let mut p = topology.path(id);
                            p.push(topology.nodes()[node].info.name.clone());
                            p
                        },
                        ..Block::default()
                    };
                    let schedulable = topology.nodes()[node].info.schedulable;
                    let only: Vec<usize> = if schedulable { vec![node] } else { Vec::new() };
                    fill_block(&mut host, topology, &only, &on_node);
                    items.push(host);
                }
            }
            stack.extend(domain.children.iter().rev().copied());
        }
    }
    Ok(BlockList {
        api_version: API_VERSION.to_owned(),
        kind: "BlockList".to_owned(),
        items,
    })
}

/// `block`'s figures from its schedulable `nodes`.
fn fill_block(
    block: &mut Block,
    topology: &muster_topology::Topology,
    nodes: &[usize],
    on_node: &BTreeMap<&str, BTreeMap<String, u64>>,
) {
    let mut total = 0u64;
    let mut free = 0u64;
    let mut largest = 0u64;
    let mut jobs: BTreeMap<String, u64> = BTreeMap::new();
    for &node in nodes {
        let state = &topology.nodes()[node];
        total = total.saturating_add(state.info.allocatable.get(NVIDIA_GPU).milli());
        let node_free = topology.free(node).get(NVIDIA_GPU).milli();
        free = free.saturating_add(node_free);
        largest = largest.max(node_free);
        for (job, held) in on_node.get(state.info.name.as_str()).into_iter().flatten() {
            let sum = jobs.entry(job.clone()).or_default();
            *sum = sum.saturating_add(*held);
        }
    }
    block.nodes = u32::try_from(nodes.len()).unwrap_or(u32::MAX);
    block.gpus = gpus(Amount::from_milli(total));
    block.free_gpus = gpus(Amount::from_milli(free));
    block.largest_free_on_a_node = gpus(Amount::from_milli(largest));
    block.jobs = jobs
        .into_iter()
        .map(|(job, milli)| (job, gpus(Amount::from_milli(milli))))
        .collect();
}

/// Job `key`'s story (see [`JobStory`]); `None` when no such job exists or the caller may
/// not see it.
pub fn story(
    state: &State,
    key: &ObjectRef,
    may_see: &dyn Fn(&str) -> bool,
) -> Result<JobStory, Unanswered> {
    let missing = || Unanswered::NotFound(format!("GpuJob {key}"));
    if !may_see(key.namespace()) {
        return Err(missing());
    }
    let gpujob = state.index.jobs.get(key).ok_or_else(missing)?;
    let status = gpujob.status.clone().unwrap_or_default();
    let mut steps: Vec<StoryStep> = status
        .conditions
        .iter()
        .map(|c| StoryStep {
            time: c.last_transition_time.clone(),
            type_: c.type_.clone(),
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
        })
        .collect();
    steps.sort_by(|a, b| a.time.0.cmp(&b.time.0).then_with(|| a.type_.cmp(&b.type_)));
    let mut story = JobStory {
        api_version: API_VERSION.to_owned(),
        kind: "JobStory".to_owned(),
        job: key.to_string(),
        phase: status
            .phase
            .map_or_else(|| "Pending".to_owned(), |p| format!("{p:?}")),
        steps,
        ..JobStory::default()
    };
    let Ok(waiting) = Waiting::of(state, None) else {
        return Ok(story);
    };
    let mut memo = Memo::default();
    let Some(at) = waiting
        .decisions
        .iter()
        .position(|e| &*e.id == key.as_str())
    else {
        return Ok(story);
    };
    let entry = &waiting.decisions[at];
    let (position, job) = (&entry.position, entry.job);
    let lq_position = job.map_or(0, |j| {
        let lq = &j.local_queue;
        u32::try_from(
            waiting.decisions[..=at]
                .iter()
                .filter(|e| e.position > 0 && e.job.is_some_and(|o| &o.local_queue == lq))
                .count(),
        )
        .unwrap_or(0)
    });
    story.waiting = Some(pending_job(
        state,
        &waiting,
        entry,
        lq_position,
        may_see,
        &mut memo,
    ));
    story.nearest = match &*entry.reason {
        PendingReason::NoTopologyFit(no_fit) | PendingReason::AwaitingProvisionedNodes(no_fit) => {
            Some(NearestBlock {
                pod_set: no_fit.pod_set.clone(),
                pods_needed: no_fit.needed,
                domain: no_fit.best.as_ref().map(|(d, _)| d.clone()),
                pods_fitting: no_fit.best.as_ref().map_or(0, |(_, n)| *n),
                pods_fitting_anywhere: no_fit.total_capacity,
                fragmented: no_fit.fragmented,
            })
        }
        _ => None,
    };
    let cq = job.and_then(|j| waiting.cluster_queue_of(j));
    if *position > 1 {
        story.ahead_count = position - 1;
        story.ahead = ahead(
            state,
            &waiting,
            cq.as_deref(),
            *position,
            may_see,
            &mut memo,
        );
    }
    if let Some(cq) = cq {
        story.flavors = gpu_flavors(state, &cq);
        story.holders = holders(state, waiting.scheduler, &cq, may_see);
    }
    Ok(story)
}

/// The first [`STORY_AHEAD`] jobs ahead of `position` in ClusterQueue `cq`, in order.
fn ahead(
    state: &State,
    waiting: &Waiting<'_>,
    cq: Option<&str>,
    position: u32,
    may_see: &dyn Fn(&str) -> bool,
    memo: &mut Memo,
) -> Vec<PendingJob> {
    waiting
        .decisions
        .iter()
        .filter(|e| {
            e.position > 0
                && e.position < position
                && e.job.and_then(|o| waiting.cluster_queue_of(o)).as_deref() == cq
        })
        .take(STORY_AHEAD)
        .map(|e| {
            let mut job = pending_job(state, waiting, e, 0, may_see, memo);
            // A place in another team's LocalQueue says nothing to this reader.
            job.local_queue_position = None;
            job
        })
        .collect()
}

/// The admitted jobs holding GPUs of a flavor `cq` may use, in `cq` or its cohort: those
/// expected to end first first (unknown ends last), at most [`STORY_HOLDERS`].
fn holders(
    state: &State,
    scheduler: &Scheduler,
    cq: &str,
    may_see: &dyn Fn(&str) -> bool,
) -> Vec<Holder> {
    let flavors = gpu_flavors(state, cq);
    let cohort = scheduler.quota().cohort(cq).map(str::to_owned);
    let mut out: Vec<(Option<i64>, Holder)> = Vec::new();
    for (job, job_state) in scheduler.jobs_with_states() {
        let JobState::Admitted(h) = job_state else {
            continue;
        };
        let related = h.cluster_queue == cq
            || (cohort.is_some()
                && scheduler.quota().cohort(&h.cluster_queue) == cohort.as_deref());
        if !related {
            continue;
        }
        for (placement, request) in h.pod_sets.iter().zip(&job.pod_sets) {
            if !flavors.contains(&placement.flavor) {
                continue;
            }
            let held = muster_admission::quota_usage(request).get(NVIDIA_GPU);
            if held == Amount::ZERO {
                continue;
            }
            let namespace = job.id.split_once('/').map_or("", |(ns, _)| ns);
            let end = h
                .since
                .zip(job.expected_runtime)
                .map(|(s, r)| s.saturating_add(r));
            out.push((
                end,
                Holder {
                    job: if may_see(namespace) {
                        job.id.clone()
                    } else {
                        HIDDEN.to_owned()
                    },
                    cluster_queue: h.cluster_queue.clone(),
                    flavor: placement.flavor.clone(),
                    gpus: gpus(held),
                    since: h.since.and_then(time),
                    expected_end: end.and_then(time),
                },
            ));
        }
    }
    out.sort_by(|a, b| {
        let key = |e: &Option<i64>| e.unwrap_or(i64::MAX);
        key(&a.0)
            .cmp(&key(&b.0))
            .then_with(|| a.1.job.cmp(&b.1.job))
    });
    out.into_iter()
        .take(STORY_HOLDERS)
        .map(|(_, h)| h)
        .collect()
}

/// The answer of `forecast`: `latest` as it stands, or — given a what-if's changed snapshot,
/// forecast and changes — the what-if's ranges with `latest`'s beside them. Jobs in namespaces
/// the caller may not list GpuJobs in are shown without names.
pub fn forecast(
    latest: &Latest,
    what_if: Option<(&Snapshot, &Forecast, &[String])>,
    may_see: &dyn Fn(&str) -> bool,
) -> ForecastAnswer {
    let (snapshot, forecast, changes) = match what_if {
        Some((snapshot, forecast, changes)) => (snapshot, forecast, changes.to_vec()),
        None => (&latest.snapshot, &latest.forecast, Vec::new()),
    };
    let local_queues: BTreeMap<&str, &str> = snapshot
        .local_queues
        .iter()
        .map(|(lq, cq)| (lq.as_str(), cq.as_str()))
        .collect();
    let known_queues: BTreeSet<&str> = snapshot
        .cluster_queues
        .iter()
        .map(|(name, _)| name.as_str())
        .collect();
    let mut hidden = 0;
    let mut items: Vec<JobForecast> = snapshot
        .waiting
        .iter()
        .zip(&forecast.etas)
        .map(|(w, eta)| {
            let (namespace, name) = w.job.id.split_once('/').unwrap_or(("", &w.job.id));
            let visible = may_see(namespace);
            hidden += u32::from(!visible);
            JobForecast {
                name: visible.then(|| name.to_owned()),
                namespace: visible.then(|| namespace.to_owned()),
                cluster_queue: local_queues
                    .get(w.job.local_queue.as_str())
                    .filter(|cq| known_queues.contains(*cq))
                    .map(|cq| (*cq).to_owned()),
                gpus: job_gpus(&w.job),
                range: crate::forecasting::range(forecast.now, [eta.p10, eta.p50, eta.p90]),
                started: eta.started,
                buys_capacity: eta.buys_capacity,
                runtime_basis: basis(&eta.basis),
                before: what_if.and_then(|_| latest.range_of(&w.job.id)),
            }
        })
        .collect();
    // By likely start, then by the end of the range; beyond the horizon last.
    let key = |r: &StartRange| {
        let second = |t: &Option<Time>| t.as_ref().map_or(i64::MAX, |t| t.0.as_second());
        (second(&r.likely), second(&r.latest), second(&r.earliest))
    };
    items.sort_by_key(|j| key(&j.range));
    ForecastAnswer {
        api_version: API_VERSION.to_owned(),
        kind: "Forecast".to_owned(),
        as_of: time(forecast.now).unwrap_or(Time(Timestamp::UNIX_EPOCH)),
        samples: forecast.samples,
        horizon_seconds: latest.options.horizon,
        took_millis: latest.took_millis,
        margin: forecast.margin.map(|(before, after)| [before, after]),
        history: u32::try_from(latest.history).unwrap_or(u32::MAX),
        unknown_runtimes: u32::try_from(forecast.unknown_runtimes).unwrap_or(u32::MAX),
        changes,
        items,
        hidden,
    }
}

/// Where a job's runtime comes from, as the answer writes it.
fn basis(basis: &Basis) -> String {
    let key = |k: &str| {
        if k.is_empty() {
            "every job".to_owned()
        } else {
            k.to_owned()
        }
    };
    match basis {
        Basis::Ratio { key: k, runs } => format!("ratio to announced, {} ({runs} runs)", key(k)),
        Basis::Duration { key: k, runs } => format!("durations, {} ({runs} runs)", key(k)),
        Basis::Announced => "announced".to_owned(),
        Basis::Unknown => "unknown".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_names_the_jobs_of_hidden_namespaces_as_hidden() {
        let reason = PendingReason::BlockedByQueueHead {
            head: "team-b/secret-run".to_owned(),
        };
        let shown = redacted(&reason, &|ns| ns == "team-a");
        assert!(!shown.contains("secret-run"), "{shown}");
        assert!(shown.contains(HIDDEN), "{shown}");
        let mine = PendingReason::BlockedByQueueHead {
            head: "team-a/mine".to_owned(),
        };
        assert!(redacted(&mine, &|ns| ns == "team-a").contains("team-a/mine"));
    }
}
