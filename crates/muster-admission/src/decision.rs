//! What one cycle decides, and why a job waits, in terms a person can act on.

use std::fmt::Write as _;

use muster_api::gpujob::PendingReasonKind;
use muster_topology::NoFit;

use crate::job::JobId;
use crate::quota::Shortfall;

/// One decision of a cycle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Start the job now: its quota is booked and every pod has a node.
    Admit(Admitted),
    /// Quota is booked but no existing capacity holds the job: buy it.
    Provision {
        /// The job.
        job: JobId,
        /// The ClusterQueue whose quota it holds.
        cluster_queue: String,
        /// (pod set, flavor), in the job's order.
        flavors: Vec<(String, String)>,
    },
    /// Evict these whole jobs so that `for_job` can run.
    Preempt {
        /// The jobs to evict, in the order chosen.
        victims: Vec<JobId>,
        /// The job that needs their room.
        for_job: JobId,
    },
    /// Evict an admitted job for a reason other than preemption.
    Evict {
        /// The job.
        job: JobId,
        /// Why.
        reason: String,
    },
    /// The job keeps waiting.
    Pending {
        /// The job.
        job: JobId,
        /// 1-based position among its ClusterQueue's waiting jobs (0: not in a queue).
        position: u32,
        /// Why it waits.
        reason: PendingReason,
        /// When it is expected to start, seconds, when the reservation timeline knows.
        eta: Option<i64>,
    },
}

impl Decision {
    /// The job the decision is about (for Preempt, the preemptor).
    pub fn job(&self) -> &str {
        match self {
            Decision::Admit(a) => &a.job,
            Decision::Provision { job, .. }
            | Decision::Evict { job, .. }
            | Decision::Pending { job, .. } => job,
            Decision::Preempt { for_job, .. } => for_job,
        }
    }
}

/// An admission: where every pod goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admitted {
    /// The job.
    pub job: JobId,
    /// The ClusterQueue whose quota it uses.
    pub cluster_queue: String,
    /// One entry per pod set, in the job's order.
    pub pod_sets: Vec<PodSetPlacement>,
    /// Whether any of its quota is borrowed from the cohort.
    pub borrowing: bool,
}

/// Where one pod set goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodSetPlacement {
    /// The pod set.
    pub name: String,
    /// Its flavor.
    pub flavor: String,
    /// The chosen domain as (level, value) pairs, widest first.
    pub domain: Vec<(String, String)>,
    /// The node of each pod, by pod index (empty while provisioning).
    pub nodes: Vec<String>,
    /// The GPU devices each pod takes on its node, by pod index, where the node's GPUs are
    /// tracked one by one (pods asking for part of a GPU); empty otherwise.
    pub devices: Vec<Vec<u32>>,
}

impl PodSetPlacement {
    /// The GPU devices pod `pod` of the set took one by one (none where its node's GPUs are
    /// not tracked so): with the set's requests, what the pod books on its node
    /// ([`PodSetPlacement::usage_of`], as `Cluster::add_pod` books it without building it).
    pub fn devices_of(&self, pod: usize) -> &[u32] {
        self.devices.get(pod).map_or(&[], Vec::as_slice)
    }

    /// What pod `pod` of the set books on its node, given the set's per-pod `requests`: the
    /// requests, with its part of a GPU (or its whole GPUs) on the devices it took. A pod
    /// that took no devices one by one books its requests as they are, borrowed: every pod of
    /// every job that starts or ends is booked through here.
    pub fn usage_of<'r>(
        &self,
        pod: usize,
        requests: &'r muster_api::Resources,
    ) -> std::borrow::Cow<'r, muster_api::Resources> {
        match self.devices.get(pod) {
            Some(devices) if !devices.is_empty() => {
                std::borrow::Cow::Owned(muster_topology::on_devices(requests, devices))
            }
            _ => std::borrow::Cow::Borrowed(requests),
        }
    }
}

/// Why a job waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PendingReason {
    /// The job cannot be admitted as written.
    InvalidJob(String),
    /// `spec.suspend` is set.
    Suspended,
    /// Its LocalQueue or ClusterQueue does not exist or is invalid.
    UnknownQueue(String),
    /// The ClusterQueue's stopPolicy holds admissions.
    QueueStopped {
        /// The queue.
        cluster_queue: String,
    },
    /// No resource group of the ClusterQueue covers everything a pod set requests.
    NotCovered {
        /// The queue.
        cluster_queue: String,
        /// The pod set.
        pod_set: String,
        /// The requested resources no single group covers.
        resources: Vec<String>,
    },
    /// Not enough quota in any flavor; the first flavor's shortfall.
    QuotaShort(Shortfall),
    /// Quota fits, but no placement exists in any flavor with quota.
    NoTopologyFit(Box<NoFit>),
    /// The StrictFIFO head waits, and so does everything behind it.
    BlockedByQueueHead {
        /// The head.
        head: JobId,
    },
    /// It would fit, but only on capacity or quota reserved for an earlier blocked job, and it
    /// would not finish before that job's reservation.
    CapacityReserved {
        /// The job holding the reservation.
        for_job: JobId,
        /// When the reservation starts, if the timeline knows.
        until: Option<i64>,
    },
    /// Lower-priority jobs are being evicted to make room for it.
    Preempting {
        /// The jobs being evicted.
        victims: Vec<JobId>,
    },
    /// The autoscaler provisioned capacity for the job, which keeps its quota, but the gang
    /// does not fit on it yet (typically its nodes are still joining).
    AwaitingProvisionedNodes(Box<NoFit>),
    /// It could start by evicting `victims`, but waiting for running jobs to end costs less
    /// than the work the victims would lose; it evicts them at `until` if it is still blocked.
    PreemptionDeferred(Box<Deferral>),
}

/// Why and until when a preemptor waits rather than evicts (see
/// [`PendingReason::PreemptionDeferred`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deferral {
    /// The jobs it would evict.
    pub victims: Vec<JobId>,
    /// GPU-seconds of work the victims would lose (GPUs held × time since admission), in
    /// thousandths of a GPU-second.
    pub lost_milli: u64,
    /// GPU-seconds waiting costs it (its GPUs × the time until it is expected to start), in
    /// thousandths.
    pub waiting_milli: u64,
    /// When the release timeline frees what it needs, seconds.
    pub starts: i64,
    /// When it chose to wait first, seconds.
    pub since: i64,
    /// When it stops waiting and evicts, seconds: `since` plus its ClusterQueue's
    /// `preemption.maxWaitWhenCheaperSeconds`.
    pub until: i64,
}

impl PendingReason {
    /// The API's kind for this reason.
    pub fn kind(&self) -> PendingReasonKind {
        match self {
            PendingReason::InvalidJob(_) => PendingReasonKind::InvalidJob,
            PendingReason::Suspended => PendingReasonKind::Suspended,
            PendingReason::UnknownQueue(_) => PendingReasonKind::UnknownQueue,
            PendingReason::QueueStopped { .. } => PendingReasonKind::QueueStopped,
            PendingReason::NotCovered { .. } | PendingReason::QuotaShort(_) => {
                PendingReasonKind::QuotaShort
            }
            PendingReason::NoTopologyFit(_) => PendingReasonKind::NoTopologyFit,
            PendingReason::BlockedByQueueHead { .. } => PendingReasonKind::BlockedByQueueHead,
            PendingReason::CapacityReserved { .. } => PendingReasonKind::CapacityReserved,
            PendingReason::Preempting { .. } => PendingReasonKind::NotYetScheduled,
            PendingReason::AwaitingProvisionedNodes(_) => PendingReasonKind::Provisioning,
            PendingReason::PreemptionDeferred(_) => PendingReasonKind::PreemptionDeferred,
        }
    }

    /// The whole explanation.
    pub fn message(&self) -> String {
        match self {
            PendingReason::InvalidJob(why) => format!("the job is invalid: {why}"),
            PendingReason::Suspended => {
                "spec.suspend is true; set it to false to queue the job".into()
            }
            PendingReason::UnknownQueue(why) => why.clone(),
            PendingReason::QueueStopped { cluster_queue } => {
                format!("ClusterQueue {cluster_queue} has a stopPolicy that holds admissions")
            }
            PendingReason::NotCovered {
                cluster_queue,
                pod_set,
                resources,
            } => format!(
                "pod set {pod_set} requests {}, which no single resource group of ClusterQueue {cluster_queue} covers; add them to a group's coveredResources",
                resources.join(", ")
            ),
            PendingReason::QuotaShort(s) => {
                let mut m = format!(
                    "not enough quota for {} in flavor {}: the job needs {}",
                    s.resource,
                    s.flavor,
                    s.needed.format_for(&s.resource)
                );
                let _ = write!(
                    m,
                    "; the ClusterQueue has {} of its own left and can borrow {}",
                    s.free.format_for(&s.resource),
                    s.borrowable.format_for(&s.resource)
                );
                if let Some(limit) = &s.limit {
                    limit_message(&mut m, limit, &s.resource);
                }
                m
            }
            PendingReason::NoTopologyFit(no_fit) => no_fit.message.clone(),
            PendingReason::BlockedByQueueHead { head } => {
                format!("the ClusterQueue is StrictFIFO and its head, {head}, cannot start yet")
            }
            PendingReason::CapacityReserved { for_job, until } => match until {
                Some(t) => format!(
                    "it would use capacity reserved for {for_job} from t={t}s and would not finish by then"
                ),
                None => format!(
                    "it would use capacity reserved for {for_job}, which waits for that capacity to drain"
                ),
            },
            PendingReason::Preempting { victims } => {
                format!("evicting {} to make room", victims.join(", "))
            }
            PendingReason::AwaitingProvisionedNodes(no_fit) => format!(
                "the autoscaler provisioned the capacity; waiting for its nodes to hold the gang ({})",
                no_fit.message
            ),
            PendingReason::PreemptionDeferred(d) => format!(
                "waiting rather than evicting {}: they would lose {} GPU-seconds of work, waiting until t={}s for running jobs to end costs {}; evicts them at t={}s if still blocked (preemption.maxWaitWhenCheaperSeconds)",
                d.victims.join(", "),
                gpu_seconds(d.lost_milli),
                d.starts,
                gpu_seconds(d.waiting_milli),
                d.until
            ),
        }
    }
}

/// The level of the cohort tree that stops a queue borrowing more, in words.
fn limit_message(m: &mut String, limit: &crate::quota::Limit, resource: &str) {
    match limit {
        crate::quota::Limit::BorrowingLimit {
            node,
            cohort,
            limit,
        } => {
            let limit = limit.format_for(resource);
            // A queue's own limit reads as part of its shortfall; a cohort's names the cohort.
            let _ = if *cohort {
                write!(
                    m,
                    "; cohort {node} may take at most {limit} beyond what it lends (its borrowingLimit)"
                )
            } else {
                write!(m, " (its borrowingLimit, {limit}, holds it)")
            };
        }
        crate::quota::Limit::Pool {
            cohort,
            pool,
            left,
            borrowers,
            returns,
        } => {
            let _ = write!(
                m,
                "; cohort {cohort} has {} of the {} it gives out left",
                left.format_for(resource),
                pool.format_for(resource)
            );
            for (i, b) in borrowers.iter().enumerate() {
                let kind = if b.cohort { "cohort" } else { "ClusterQueue" };
                let amount = b.borrowed.format_for(resource);
                let _ = if i == 0 {
                    write!(m, ": {kind} {} uses {amount} beyond its own quota", b.name)
                } else {
                    write!(m, ", {kind} {} {amount}", b.name)
                };
            }
            if let Some((job, end, amount)) = returns {
                let _ = write!(
                    m,
                    "; {} come back when {job} ends (expected at t={end}s)",
                    amount.format_for(resource)
                );
            }
        }
    }
}

/// Thousandths of a GPU-second as whole GPU-seconds, rounded, for people to read.
fn gpu_seconds(milli: u64) -> u64 {
    milli.saturating_add(500) / 1000
}
