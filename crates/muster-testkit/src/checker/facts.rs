//! What the checker keeps of a pod and a node, read from the objects the API server shows.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};
use muster_api::ObjectRef;
use muster_api::jobset::{JOB_INDEX_LABEL, REPLICATED_JOB_LABEL};
use muster_api::wire::{
    ATTEMPT_LABEL, CLUSTER_QUEUE_ANNOTATION, COMPLETION_INDEX_LABEL, JOB_LABEL,
    OUT_OF_SERVICE_TAINT, POD_SET_LABEL,
};

use super::GPU;

/// One pod of a job, as last seen.
#[derive(Clone, Debug)]
pub(super) struct PodFact {
    /// Its job, `namespace/name`.
    pub(super) job: String,
    pub(super) attempt: String,
    pub(super) pod_set: String,
    pub(super) gated: bool,
    /// Not ended, and not bound to a node that no longer exists or is out of service.
    pub(super) live: bool,
    pub(super) node: Option<String>,
    pub(super) terminating: bool,
    /// The ClusterQueue whose quota it uses: its annotation's, else its job's.
    pub(super) queue: Option<String>,
    /// Where `queue` comes from.
    pub(super) queue_source: QueueSource,
    pub(super) gpus: i64,
    /// For a pod of a JobSet's child Job: the completion it runs.
    pub(super) completion: Option<Completion>,
}

impl PodFact {
    /// Whether its GPUs count against its queue's quota: live, not being deleted, and free
    /// to be bound — a pod behind a scheduling gate can run nowhere until the gate is lifted.
    pub(super) fn uses_quota(&self) -> bool {
        self.live && !self.terminating && !self.gated
    }
}

/// The completion a pod of a JobSet's child Job runs, and whether it succeeded.
#[derive(Clone, Debug)]
pub(super) struct Completion {
    /// Its replicated Job, replica and completion index (its labels').
    pub(super) of: (String, String, String),
    /// The pod's phase is Succeeded.
    pub(super) succeeded: bool,
}

/// Where a pod's ClusterQueue comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum QueueSource {
    /// Its `muster.dev/cluster-queue` annotation.
    Annotation,
    /// It has none: the ClusterQueue its job's status last named (none before that).
    Job,
}

/// A node, as last seen.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct NodeFact {
    pub(super) labels: BTreeMap<String, String>,
    /// Tainted [`OUT_OF_SERVICE_TAINT`].
    pub(super) out_of_service: bool,
}

/// `namespace/name` of a pod.
pub fn pod_key(pod: &Pod) -> Option<String> {
    Some(format!(
        "{}/{}",
        pod.metadata.namespace.as_deref()?,
        pod.metadata.name.as_deref()?
    ))
}

/// The job a pod belongs to (`namespace/name`): the one its job label names, else the
/// GpuJob its owner reference names. `None` for a pod of no job.
fn job_of(pod: &Pod) -> Option<String> {
    let namespace = pod.metadata.namespace.as_deref()?;
    let labelled = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(JOB_LABEL))
        .cloned();
    let owned = || {
        pod.metadata
            .owner_references
            .as_ref()?
            .iter()
            .find_map(|o| {
                (o.kind == "GpuJob" && o.api_version.split('/').next() == Some(muster_api::GROUP))
                    .then(|| o.name.clone())
            })
    };
    Some(ObjectRef::new(namespace, &labelled.or_else(owned)?).into_string())
}

pub(super) fn pod_fact(pod: &Pod) -> Option<PodFact> {
    let job = job_of(pod)?;
    let label = |key: &str| {
        pod.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(key))
            .cloned()
            .unwrap_or_default()
    };
    let spec = pod.spec.as_ref();
    let gated = spec
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty());
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    let queue = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CLUSTER_QUEUE_ANNOTATION))
        .cloned();
    Some(PodFact {
        job,
        attempt: label(ATTEMPT_LABEL),
        pod_set: label(POD_SET_LABEL),
        gated,
        live: !matches!(phase, Some("Succeeded" | "Failed")),
        node: spec.and_then(|s| s.node_name.clone()),
        terminating: pod.metadata.deletion_timestamp.is_some(),
        queue_source: if queue.is_some() {
            QueueSource::Annotation
        } else {
            QueueSource::Job
        },
        queue,
        gpus: spec_gpus(spec),
        completion: match (
            label(REPLICATED_JOB_LABEL),
            label(JOB_INDEX_LABEL),
            label(COMPLETION_INDEX_LABEL),
        ) {
            (rj, replica, index) if !rj.is_empty() && !replica.is_empty() && !index.is_empty() => {
                Some(Completion {
                    of: (rj, replica, index),
                    succeeded: phase == Some("Succeeded"),
                })
            }
            _ => None,
        },
    })
}

pub(super) fn node_fact(node: &Node) -> Option<(String, NodeFact)> {
    let name = node.metadata.name.clone()?;
    let out_of_service = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == OUT_OF_SERVICE_TAINT));
    Some((
        name,
        NodeFact {
            labels: node.metadata.labels.clone().unwrap_or_default(),
            out_of_service,
        },
    ))
}

pub(super) fn template_gpus(template: &k8s_openapi::api::core::v1::PodTemplateSpec) -> i64 {
    spec_gpus(template.spec.as_ref())
}

/// The GPUs of a pod spec's containers.
fn spec_gpus(spec: Option<&k8s_openapi::api::core::v1::PodSpec>) -> i64 {
    spec.map_or(0, |s| {
        s.containers
            .iter()
            .map(|c| container_gpus(c.resources.as_ref()))
            .sum()
    })
}

/// A container's GPUs: its request, else its limit (whole GPUs only).
fn container_gpus(resources: Option<&k8s_openapi::api::core::v1::ResourceRequirements>) -> i64 {
    let Some(resources) = resources else { return 0 };
    resources
        .requests
        .as_ref()
        .and_then(|r| r.get(GPU))
        .or_else(|| resources.limits.as_ref().and_then(|l| l.get(GPU)))
        .and_then(|q| q.0.parse::<i64>().ok())
        .unwrap_or(0)
}
