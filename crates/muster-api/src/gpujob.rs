//! `GpuJob`: a multi-pod job that starts all together or not at all.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use kube::{CustomResource, Resource as _};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How long all pods of an admitted gang may take to become Ready when the job does not say.
pub const DEFAULT_PODS_READY_TIMEOUT_SECONDS: i64 = 600;
/// How many gang restarts a job gets when it does not say.
pub const DEFAULT_BACKOFF_LIMIT: i32 = 3;
/// The most pod sets one job may have.
pub const MAX_POD_SETS: usize = 8;

/// A gang-scheduled job: pod sets that Muster admits, places and releases together.
#[expect(
    clippy::duplicated_attributes,
    reason = "printer columns repeat `type_` by design"
)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "muster.dev",
    version = "v1alpha1",
    kind = "GpuJob",
    plural = "gpujobs",
    shortname = "gj",
    category = "muster",
    namespaced,
    status = "GpuJobStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "A multi-pod GPU or TPU job that Muster holds in a queue until quota and one block of capacity in the right topology exist, then releases all of its pods together.",
    printcolumn(name = "Queue", type_ = "string", json_path = ".spec.queueName"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Position",
        type_ = "integer",
        json_path = ".status.queuePosition"
    ),
    printcolumn(
        name = "ClusterQueue",
        type_ = "string",
        json_path = ".status.admission.clusterQueue"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct GpuJobSpec {
    /// The LocalQueue, in this job's namespace, to submit to.
    pub queue_name: String,
    /// Priority: higher runs first and may preempt lower. Set this or `priorityClassName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// A scheduling.k8s.io PriorityClass whose value is this job's priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// The expected run time in seconds. Optional; backfill and start-time estimates use it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub expected_runtime_seconds: Option<i64>,
    /// All pods must be Ready within this many seconds of admission, else the whole gang is
    /// evicted and requeued. Default 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub pods_ready_timeout_seconds: Option<i64>,
    /// How many times the gang is restarted after a failure before the job is Failed. Default 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub backoff_limit: Option<i32>,
    /// Held by its owner: not queued; an admitted job that is suspended is evicted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
    /// Whether its pods may run on shared GPUs: nodes whose device plugin advertises each GPU
    /// as several `nvidia.com/gpu` replicas (time-slicing or MPS; GKE's
    /// `cloud.google.com/gke-gpu-sharing-strategy` label, or `nvidia.com/gpu.replicas` above
    /// 1). Default false: pods asking for `nvidia.com/gpu` get whole GPUs only.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub accept_shared_gpus: bool,
    /// The groups of identical pods that make up the gang (at most 8).
    #[schemars(length(min = 1, max = 8))]
    pub pod_sets: Vec<PodSet>,
}

/// A group of identical pods.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodSet {
    /// Unique within the job; a DNS label.
    pub name: String,
    /// How many pods.
    #[schemars(range(min = 1))]
    pub count: i32,
    /// Where the pods must (or should) land. None: anywhere the flavor allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<TopologyRequest>,
    /// The pod template; Muster adds placement, gates and environment when it creates the pods.
    pub template: PodTemplateSpec,
    /// Part of one GPU for each pod, a quantity below 1 in whole percent (`500m`, `0.25`,
    /// `10m` steps), for nodes whose GPUs HAMi hands out in parts. Each pod's first container
    /// gets one vGPU (`nvidia.com/gpu: 1`) with that percentage of the GPU's cores and memory
    /// (`nvidia.com/gpucores`, `nvidia.com/gpumem-percentage`), on a device with that much
    /// left; quota counts exactly that part of `nvidia.com/gpu`. The template then asks for
    /// no GPU itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_share: Option<String>,
}

impl PodSet {
    /// The pod set's GPU share in milli-GPU, when `gpuShare` is set and reads as a quantity.
    pub fn gpu_share_milli(&self) -> Option<Result<u64, crate::quantity::QuantityError>> {
        self.gpu_share
            .as_deref()
            .map(|s| crate::quantity::Amount::parse(s).map(crate::quantity::Amount::milli))
    }
}

/// At most one topology constraint for a pod set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopologyRequest {
    /// All pods in one domain of this level (a node label key from the flavor's topology levels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<String>,
    /// The tightest domain possible, starting at this level and climbing when it must.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred: Option<String>,
    /// Whole TPU slices: one pod per host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpu: Option<TpuSliceRequest>,
}

/// A request for whole TPU slices.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TpuSliceRequest {
    /// The GKE accelerator label value, e.g. `tpu-v5p-slice`.
    pub accelerator: String,
    /// The slice shape, e.g. `2x2x4`.
    pub topology: String,
    /// How many slices (each a distinct node pool). Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub slices: Option<i32>,
    /// Accept a rotation of a 3D shape (`4x2x2` for `2x2x4`). 2D shapes never rotate.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_rotation: bool,
}

/// Where a job is in its life.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum GpuJobPhase {
    /// Not yet looked at, invalid, or suspended.
    #[default]
    Pending,
    /// Waiting in its queue for quota and capacity.
    Queued,
    /// Quota reserved; capacity is being bought from the cluster autoscaler.
    Provisioning,
    /// Quota and placement granted; pods are being created and released.
    Admitted,
    /// All pods are running.
    Running,
    /// Every pod succeeded.
    Succeeded,
    /// The job failed for good.
    Failed,
}

impl GpuJobPhase {
    /// Whether a job in this phase has ended for good (`Succeeded` or `Failed`): it holds no
    /// quota and no capacity, and nothing of it is released, bought or queued again.
    pub fn has_ended(self) -> bool {
        matches!(self, GpuJobPhase::Succeeded | GpuJobPhase::Failed)
    }
}

/// What Muster knows about a job.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuJobStatus {
    /// The phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<GpuJobPhase>,
    /// Valid, QuotaReserved, Provisioned, Admitted, PodsReady, Evicted, Finished.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The admission: cluster queue, flavors and placement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<Admission>,
    /// 1-based position in the cluster queue while queued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_position: Option<i32>,
    /// Why the job is not running yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_reason: Option<PendingReason>,
    /// How many times the gang was evicted and requeued, for any reason. Pods carry the value
    /// they were released under, so pods of an earlier attempt are never mistaken for the
    /// current gang.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub requeue_count: i32,
    /// How many times the gang was restarted because a pod failed or lost its node; the job
    /// fails when this passes `spec.backoffLimit`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub restart_count: i32,
    /// When the pods were released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the job succeeded or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// The name of the current ProvisioningRequest (the first, when there is one per pod
    /// set), while capacity is being bought and while the gang runs on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_request: Option<String>,
    /// ProvisioningRequests created for the job so far: the attempt number of the current
    /// one, and what retries count against.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub provisioning_attempts: i32,
}

#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_zero(v: &i32) -> bool {
    *v == 0
}

/// Where and how a job was admitted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Admission {
    /// The ClusterQueue whose quota the job uses.
    pub cluster_queue: String,
    /// One entry per pod set, in the order of `spec.podSets`.
    pub pod_sets: Vec<PodSetAssignment>,
}

/// The flavor and placement of one pod set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodSetAssignment {
    /// The pod set's name.
    pub name: String,
    /// The ResourceFlavor.
    pub flavor: String,
    /// The topology levels (node label keys, widest first) that `domains` give values for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub levels: Vec<String>,
    /// The domains, in pod-index order: the first `count` pods go to the first domain, and so on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub domains: Vec<DomainAssignment>,
    /// The node each pod is pinned to, by pod index: what the job holds on the cluster, so
    /// that a restarted controller books exactly these nodes again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
}

/// A run of consecutive pods placed in one domain.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DomainAssignment {
    /// One label value per level.
    pub values: Vec<String>,
    /// How many pods.
    pub count: i32,
}

/// Why a job waits, for machines (`kind`) and for people (`message`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingReason {
    /// The kind of reason.
    pub kind: PendingReasonKind,
    /// What is short, by how much, and what would help.
    pub message: String,
    /// The estimated start, when runtimes are known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta: Option<Time>,
    /// Since when the job waits for this reason, where that bounds the wait: for
    /// `PreemptionDeferred`, when it first chose to wait rather than evict (it evicts
    /// `preemption.maxWaitWhenCheaperSeconds` later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Time>,
    /// When the job is expected to start, as a range, from the controller's latest
    /// start-time forecast (the cluster run forward many times with runtimes drawn from what
    /// jobs really ran). Written with the job's other figures, so it may be older than the
    /// forecast `muster eta` shows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_range: Option<StartRange>,
}

/// When a waiting job is expected to start, as a range: of many forward runs of the cluster
/// from one moment, each with every job's runtime drawn from what its family really ran, the
/// 10th, 50th and 90th percentile start, widened by how far past ranges missed. A bound that
/// is absent lies beyond the forecast's horizon (or is the autoscaler's to say).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StartRange {
    /// The start of the range (10th percentile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub earliest: Option<Time>,
    /// The median start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub likely: Option<Time>,
    /// The end of the range (90th percentile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest: Option<Time>,
    /// When the forecast was made.
    pub as_of: Time,
}

/// The kinds of reasons a job waits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum PendingReasonKind {
    /// The job has not been looked at yet.
    #[default]
    NotYetScheduled,
    /// The job's spec is invalid; see the Valid condition.
    InvalidJob,
    /// The LocalQueue or its ClusterQueue does not exist, or does not admit this namespace.
    UnknownQueue,
    /// The ClusterQueue is stopped.
    QueueStopped,
    /// The job is suspended by its owner.
    Suspended,
    /// Not enough quota of some flavor and resource, even with borrowing.
    QuotaShort,
    /// Quota is available but no domain can hold the whole gang.
    NoTopologyFit,
    /// A StrictFIFO queue's head job is waiting, and everything behind it waits too.
    BlockedByQueueHead,
    /// The capacity the job needs is reserved for a higher-priority job.
    CapacityReserved,
    /// Waiting for the cluster autoscaler to provision capacity.
    Provisioning,
    /// Requeued after an eviction; waiting out its backoff.
    Backoff,
    /// It could start by evicting lower-priority jobs, but waiting for running jobs to end
    /// costs less than the work they would lose; it evicts once its ClusterQueue's
    /// `preemption.maxWaitWhenCheaperSeconds` has passed.
    PreemptionDeferred,
    /// Pods of its earlier attempt may still run on a node that stopped reporting (its Ready
    /// condition not True): the gang starts again only once they have ended or are gone (the
    /// pod objects deleted, the Node deleted, or the Node tainted
    /// `node.kubernetes.io/out-of-service`), so two attempts never run at once. `eta`, when
    /// set, is the end of the backoff the gang was evicted with.
    NodeUnreachable,
}

impl PendingReasonKind {
    /// The kind's name, as the API spells it (`QuotaShort`).
    pub fn as_str(self) -> &'static str {
        match self {
            PendingReasonKind::NotYetScheduled => "NotYetScheduled",
            PendingReasonKind::InvalidJob => "InvalidJob",
            PendingReasonKind::UnknownQueue => "UnknownQueue",
            PendingReasonKind::QueueStopped => "QueueStopped",
            PendingReasonKind::Suspended => "Suspended",
            PendingReasonKind::QuotaShort => "QuotaShort",
            PendingReasonKind::NoTopologyFit => "NoTopologyFit",
            PendingReasonKind::BlockedByQueueHead => "BlockedByQueueHead",
            PendingReasonKind::CapacityReserved => "CapacityReserved",
            PendingReasonKind::Provisioning => "Provisioning",
            PendingReasonKind::Backoff => "Backoff",
            PendingReasonKind::PreemptionDeferred => "PreemptionDeferred",
            PendingReasonKind::NodeUnreachable => "NodeUnreachable",
        }
    }
}

/// Condition types set on a GpuJob.
pub mod conditions {
    /// The spec passed validation.
    pub const VALID: &str = "Valid";
    /// Quota is reserved in a ClusterQueue.
    pub const QUOTA_RESERVED: &str = "QuotaReserved";
    /// The ProvisioningRequest for the job's capacity succeeded.
    pub const PROVISIONED: &str = "Provisioned";
    /// Admitted: quota and placement granted.
    pub const ADMITTED: &str = "Admitted";
    /// Every pod of the gang is Ready.
    pub const PODS_READY: &str = "PodsReady";
    /// The gang was evicted (preempted, timed out, restarted).
    pub const EVICTED: &str = "Evicted";
    /// The job succeeded or failed.
    pub const FINISHED: &str = "Finished";
}

impl GpuJob {
    /// The owner reference every object Muster makes for this job carries (its pods, Service,
    /// PodTemplates and ProvisioningRequests): kube's controller reference, which also blocks
    /// the job's deletion in the foreground until the object is gone. `None` while the job has
    /// no name or uid (it was never stored).
    pub fn owner_reference(&self) -> Option<OwnerReference> {
        Some(OwnerReference {
            block_owner_deletion: Some(true),
            ..self.controller_owner_ref(&())?
        })
    }

    /// Whether the job's status says it has ended ([`GpuJobPhase::has_ended`]).
    pub fn has_ended(&self) -> bool {
        self.status
            .as_ref()
            .and_then(|s| s.phase)
            .is_some_and(GpuJobPhase::has_ended)
    }
}

impl GpuJobSpec {
    /// The pods-ready timeout, with its default.
    pub fn pods_ready_timeout(&self) -> i64 {
        self.pods_ready_timeout_seconds
            .unwrap_or(DEFAULT_PODS_READY_TIMEOUT_SECONDS)
    }

    /// The backoff limit, with its default.
    pub fn backoff_limit(&self) -> i32 {
        self.backoff_limit.unwrap_or(DEFAULT_BACKOFF_LIMIT)
    }

    /// The priority the job queues at: `priority` when set, else the value of the
    /// PriorityClass `priorityClassName` names (`class_value` resolves a class; `None`: no
    /// such class), else 0. `Err` names a class that does not exist.
    pub fn priority_with(&self, class_value: impl Fn(&str) -> Option<i32>) -> Result<i32, &str> {
        match (&self.priority, &self.priority_class_name) {
            (Some(priority), _) => Ok(*priority),
            (None, Some(class)) => class_value(class).ok_or(class.as_str()),
            (None, None) => Ok(0),
        }
    }
}

impl TpuSliceRequest {
    /// The number of slices, with its default of one.
    pub fn slices(&self) -> i32 {
        self.slices.unwrap_or(1)
    }
}
