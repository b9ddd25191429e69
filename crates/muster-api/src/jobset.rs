//! The JobSet API's `JobSet` (`jobset.x-k8s.io/v1alpha2`), written by hand with the fields
//! Muster reads: its replicated Jobs, whether it is suspended, and how it ended. Fields Muster
//! does not read are not kept (Muster never writes a whole JobSet back).

use k8s_openapi::api::batch::v1::JobTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The annotation (on the JobSet or a replicated Job's template) naming a node label: each
/// child Job runs alone in one domain of that label.
pub const EXCLUSIVE_TOPOLOGY_ANNOTATION: &str = "alpha.jobset.sigs.k8s.io/exclusive-topology";

/// Label the JobSet controller puts on each child Job and its pods: the replicated Job it was
/// made from.
pub const REPLICATED_JOB_LABEL: &str = "jobset.sigs.k8s.io/replicatedjob-name";

/// Label the JobSet controller puts on each child Job and its pods: which replica of its
/// replicated Job it is (`0..replicas`).
pub const JOB_INDEX_LABEL: &str = "jobset.sigs.k8s.io/job-index";

/// Label the JobSet controller puts on each child Job and its pods: the JobSet's name.
pub const JOBSET_NAME_LABEL: &str = "jobset.sigs.k8s.io/jobset-name";

/// A group of Jobs that run as one workload, such as the slices of a multi-slice TPU run.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "jobset.x-k8s.io",
    version = "v1alpha2",
    kind = "JobSet",
    plural = "jobsets",
    namespaced,
    status = "JobSetStatus",
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct JobSetSpec {
    /// The Jobs to make, each `replicas` times.
    #[serde(default)]
    pub replicated_jobs: Vec<ReplicatedJob>,
    /// Whether the JobSet is held: no child Job runs pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    /// What the JobSet does when a child Job fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_policy: Option<FailurePolicy>,
}

/// A JobSet's answer to a failed child Job: fail, or restart every child Job afresh.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailurePolicy {
    /// How many times the JobSet restarts its child Jobs before it fails (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_restarts: Option<i32>,
    /// Answers to particular failures, first match applies.
    #[serde(default)]
    pub rules: Vec<FailurePolicyRule>,
}

/// One rule of a JobSet's failure policy (only its action is read).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailurePolicyRule {
    /// `FailJobSet`, `RestartJobSet`, `RestartJobSetAndIgnoreMaxRestarts` or `RecreateJob`.
    #[serde(default)]
    pub action: String,
}

/// One Job template of a JobSet and how many Jobs are made of it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicatedJob {
    /// Unique within the JobSet; part of each child Job's name.
    pub name: String,
    /// How many Jobs (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// The Job each replica is made from.
    pub template: JobTemplateSpec,
}

impl ReplicatedJob {
    /// How many Jobs are made of it.
    pub fn replicas(&self) -> i32 {
        self.replicas.unwrap_or(1)
    }
}

/// How a JobSet is doing, as the JobSet controller reports it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobSetStatus {
    /// `Completed`, `Failed`, `Suspended`, `StartupPolicyCompleted`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// `Completed` or `Failed` once the JobSet has ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal_state: Option<String>,
    /// How the child Jobs of each replicated Job are doing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicated_jobs_status: Vec<ReplicatedJobStatus>,
}

/// How the child Jobs of one replicated Job are doing.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicatedJobStatus {
    /// The replicated Job.
    pub name: String,
    /// Child Jobs with at least one pod active (running or pending).
    #[serde(default)]
    pub active: i32,
    /// Child Jobs that completed.
    #[serde(default)]
    pub succeeded: i32,
}

impl JobSet {
    /// How many child Jobs of the replicated Job `rj` are left to run: its replicas less
    /// those that completed. The JobSet controller keeps a completed child Job through a
    /// suspension and resumes only the others, so a JobSet suspended after some of its
    /// child Jobs completed (an eviction) runs, once let go, only the rest: their pods are
    /// all the gang it will make. A JobSet that never ran (a manifest, a new JobSet) has
    /// all its replicas left.
    pub fn replicas_left(&self, rj: &ReplicatedJob) -> i32 {
        if self
            .spec
            .replicated_jobs
            .iter()
            .all(|r| r.replicas() > 0 && self.succeeded(r) >= r.replicas())
        {
            // Finishing: see [`JobSet::is_done`].
            return rj.replicas();
        }
        let replicas = rj.replicas();
        replicas - self.succeeded(rj).clamp(0, replicas.max(0))
    }

    /// Child Jobs of the replicated Job `rj` that completed, as the status says.
    fn succeeded(&self, rj: &ReplicatedJob) -> i32 {
        self.status
            .as_ref()
            .and_then(|s| s.replicated_jobs_status.iter().find(|r| r.name == rj.name))
            .map_or(0, |r| r.succeeded)
    }

    /// Whether the replicated Job `rj` is done: it has replicas, all of them completed, and
    /// some other replicated Job has child Jobs left. Its child Jobs make no pod again, so it
    /// is no part of what the JobSet still queues for, and its template is no longer
    /// Muster's to write. (A JobSet all of whose child Jobs completed is about to be marked
    /// `Completed` by its controller; until then it reads as a JobSet that never ran.)
    pub fn is_done(&self, rj: &ReplicatedJob) -> bool {
        rj.replicas() > 0 && self.replicas_left(rj) == 0
    }
}
