//! `ClusterQueue`: quota per flavor, cohorts, ordering, preemption and provisioning.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A pool of quota that LocalQueues submit to.
#[expect(
    clippy::duplicated_attributes,
    reason = "printer columns repeat `type_` by design"
)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "muster.dev",
    version = "v1alpha1",
    kind = "ClusterQueue",
    plural = "clusterqueues",
    shortname = "cq",
    category = "muster",
    status = "ClusterQueueStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "Quota per ResourceFlavor, shared through a cohort, with the rules for ordering, preemption and provisioning of the jobs submitted to it.",
    printcolumn(name = "Cohort", type_ = "string", json_path = ".spec.cohort"),
    printcolumn(
        name = "Strategy",
        type_ = "string",
        json_path = ".spec.queueingStrategy",
        priority = 1
    ),
    printcolumn(name = "Pending", type_ = "integer", json_path = ".status.pendingJobs"),
    printcolumn(
        name = "Admitted",
        type_ = "integer",
        json_path = ".status.admittedJobs"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterQueueSpec {
    /// The cohort this queue lends to and borrows from. None: it neither lends nor borrows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cohort: Option<String>,
    /// Namespaces whose LocalQueues may submit here. Absent: none; `{}`: all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// How the queue orders and passes over jobs. Default BestEffortFIFO.
    #[serde(default)]
    pub queueing_strategy: QueueingStrategy,
    /// Quota: groups of resources, each with its flavors in order of preference.
    #[serde(default)]
    #[schemars(length(max = 16))]
    pub resource_groups: Vec<ResourceGroup>,
    /// When jobs here may preempt others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption: Option<PreemptionPolicy>,
    /// Fair sharing of the cohort's borrowable quota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_sharing: Option<FairSharing>,
    /// How to buy capacity when no existing block can hold a job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning: Option<ProvisioningPolicy>,
    /// Stop admitting (Hold), or stop and evict admitted jobs (HoldAndDrain). Default None.
    #[serde(default)]
    pub stop_policy: StopPolicy,
}

/// How a queue treats a head job that does not fit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum QueueingStrategy {
    /// The head job blocks everything behind it.
    StrictFIFO,
    /// A head job that does not fit is passed over, but it reserves the capacity it will need, and
    /// later jobs run only if they do not delay it (backfill).
    #[default]
    BestEffortFIFO,
}

/// Resources whose quota is assigned together: a pod set gets one flavor for all of them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceGroup {
    /// The resources this group covers, e.g. `[cpu, memory, nvidia.com/gpu]`.
    #[schemars(length(min = 1, max = 16))]
    pub covered_resources: Vec<String>,
    /// The flavors, in order of preference; each lists quota for every covered resource.
    #[schemars(length(min = 1, max = 16))]
    pub flavors: Vec<FlavorQuotas>,
}

/// The quota of one flavor.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlavorQuotas {
    /// The ResourceFlavor's name.
    pub name: String,
    /// One entry per covered resource, in the same order.
    #[schemars(length(min = 1, max = 16))]
    pub resources: Vec<ResourceQuota>,
}

/// Quota of one resource in one flavor.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceQuota {
    /// The resource name.
    pub name: String,
    /// What this queue owns.
    pub nominal_quota: Quantity,
    /// The most this queue may borrow from its cohort beyond its nominal quota. Absent: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrowing_limit: Option<Quantity>,
    /// The most of its nominal quota this queue lends to its cohort. Absent: all of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lending_limit: Option<Quantity>,
}

/// When jobs of this queue may evict others.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreemptionPolicy {
    /// Preempt jobs of this queue with lower priority. Default Never.
    #[serde(default)]
    pub within_cluster_queue: WithinClusterQueue,
    /// Reclaim nominal quota lent to other queues of the cohort. Default Never.
    #[serde(default)]
    pub reclaim_within_cohort: ReclaimWithinCohort,
    /// Wait instead of evicting when the victims would lose more GPU-seconds (GPUs held —
    /// parts of a GPU and MIG slices by what they hold — × time since their admission) than
    /// the preemptor would spend waiting (its GPUs × the time until the capacity it needs
    /// frees, by the runtimes jobs announce). Default true. Only running jobs that announced a
    /// runtime and have not passed it count as about to leave: without that estimate, or
    /// when a victim's admission time is unknown, preemption goes ahead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_when_cheaper: Option<bool>,
    /// The longest a preemptor waits because waiting was cheaper, seconds, counted from the
    /// first cycle it chose to wait; then it evicts. Default 1800. A wait that the release
    /// timeline says would end later than this is not taken at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_wait_when_cheaper_seconds: Option<i64>,
}

impl PreemptionPolicy {
    /// The default of [`PreemptionPolicy::max_wait_when_cheaper_seconds`]: half an hour. On the
    /// simulator's demo (jobs of 1.5 h on average) shorter bounds turn waits that would have
    /// ended into evictions — at 10 minutes up to 7 preemptions of one job and eight times
    /// the work lost — while 30 minutes keeps every job to at most 3 (docs/performance.md,
    /// "Preemption waste").
    pub const DEFAULT_MAX_WAIT_WHEN_CHEAPER_SECONDS: i64 = 1800;

    /// Whether a preemptor waits when that costs less than evicting (see
    /// [`PreemptionPolicy::wait_when_cheaper`]).
    pub fn waits_when_cheaper(&self) -> bool {
        self.wait_when_cheaper.unwrap_or(true)
    }

    /// The longest a preemptor waits because waiting was cheaper, seconds, with its default
    /// (see [`PreemptionPolicy::max_wait_when_cheaper_seconds`]).
    pub fn max_wait_when_cheaper(&self) -> i64 {
        self.max_wait_when_cheaper_seconds
            .unwrap_or(Self::DEFAULT_MAX_WAIT_WHEN_CHEAPER_SECONDS)
            .max(0)
    }
}

/// Preemption inside one ClusterQueue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum WithinClusterQueue {
    /// Never preempt.
    #[default]
    Never,
    /// Preempt jobs with lower priority.
    LowerPriority,
}

/// Reclaiming lent quota from the cohort.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ReclaimWithinCohort {
    /// Never reclaim.
    #[default]
    Never,
    /// Reclaim from borrowing jobs with lower priority.
    LowerPriority,
    /// Reclaim from any borrowing job.
    Any,
}

/// The queue's weight in the cohort's fair sharing.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FairSharing {
    /// A non-negative weight (a quantity, so `0.5` works). Default 1. Zero: borrows last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<Quantity>,
}

/// How to buy capacity through ProvisioningRequests.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProvisioningPolicy {
    /// The ProvisioningRequest class, e.g. `queued-provisioning.gke.io`.
    pub class_name: String,
    /// Class parameters, e.g. `maxRunDurationSeconds`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 100))]
    pub parameters: BTreeMap<String, String>,
    /// Only jobs that request one of these resources provision. Empty: every job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub managed_resources: Vec<String>,
    /// Retries after a failed or expired request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// When to buy capacity: `WhenNoFit` (default) only when today's nodes cannot hold the
    /// gang; `Always` for every job (fresh capacity per job, as with DWS flex-start).
    #[serde(default, skip_serializing_if = "is_default")]
    pub mode: ProvisioningMode,
    /// What happens to a running gang whose capacity is taken back (`CapacityRevoked`, e.g.
    /// the class's maximum run duration was reached): `Requeue` (default) or `Fail`.
    #[serde(default, skip_serializing_if = "is_default")]
    pub on_capacity_revoked: RevokedPolicy,
    /// Node selectors the pods get from the request's `provisioningClassDetails`: node label
    /// key → detail key (e.g. a reservation or node-pool name the autoscaler reports).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 20))]
    pub node_selector_from_details: BTreeMap<String, String>,
    /// Whether a job that is waiting for capacity may also preempt running work. Default
    /// false: it waits for the autoscaler and evicts nobody.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preempt_while_provisioning: bool,
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// When a ClusterQueue buys capacity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ProvisioningMode {
    /// Only when no existing block holds the gang.
    #[default]
    WhenNoFit,
    /// For every job that requests a managed resource.
    Always,
}

/// What happens when provisioned capacity is taken back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum RevokedPolicy {
    /// Evict the gang and queue it again.
    #[default]
    Requeue,
    /// Evict the gang and fail the job.
    Fail,
}

/// Exponential backoff for provisioning retries.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryPolicy {
    /// Retries before the job fails. Default 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub limit: Option<i32>,
    /// The first backoff, doubled on each retry. Default 60.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub base_seconds: Option<i64>,
    /// The longest backoff. Default 1800.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_seconds: Option<i64>,
}

/// Whether the queue admits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum StopPolicy {
    /// Admit as usual.
    #[default]
    None,
    /// Admit nothing new; admitted jobs keep running.
    Hold,
    /// Admit nothing new and evict admitted jobs.
    HoldAndDrain,
}

/// What the controller reports about a ClusterQueue.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterQueueStatus {
    /// Jobs waiting.
    #[serde(default)]
    pub pending_jobs: i32,
    /// Jobs holding quota (admitted or provisioning).
    #[serde(default)]
    pub admitted_jobs: i32,
    /// Quota in use per flavor and resource.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flavors_usage: Vec<FlavorUsage>,
    /// Active and other conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// Usage of one flavor.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FlavorUsage {
    /// The flavor.
    pub name: String,
    /// Usage per resource.
    pub resources: Vec<ResourceUsage>,
}

/// Usage of one resource.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceUsage {
    /// The resource.
    pub name: String,
    /// In use by admitted jobs.
    pub total: Quantity,
    /// The part of `total` borrowed from the cohort.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrowed: Option<Quantity>,
}

impl RetryPolicy {
    /// Default retry limit.
    pub const DEFAULT_LIMIT: i32 = 3;
    /// Default first backoff.
    pub const DEFAULT_BASE_SECONDS: i64 = 60;
    /// Default longest backoff.
    pub const DEFAULT_MAX_SECONDS: i64 = 1800;
}
