//! The objects that ask for capacity: one PodTemplate per pod set (the pod set's template
//! with its flavor's node labels and tolerations) and the ProvisioningRequest(s) that count
//! them, all owned by the GpuJob so they go when it goes. Pure: the same job and attempt give
//! byte-identical objects.
//!
//! Names: the request of attempt `n` of job `train` is `train-n`. GKE's Dynamic Workload
//! Scheduler (`queued-provisioning.gke.io`) takes one pod set per request, so a job with
//! several pod sets gets one request per pod set, `train-n-<podSet>`, each all-or-nothing on
//! its own; the job starts when every one is provisioned. Templates are `train-n-<podSet>`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PodTemplate, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use muster_api::cluster_queue::ProvisioningPolicy;
use muster_api::provisioning_request::{
    ProvisioningPodSet, ProvisioningRequestSpec, Reference, annotations,
};
use muster_api::wire::JOB_LABEL;
use muster_api::{GpuJob, ProvisioningRequest, ResourceFlavorSpec};

/// GKE's Dynamic Workload Scheduler class: one pod set per request.
pub const QUEUED_PROVISIONING: &str = "queued-provisioning.gke.io";

/// Why the objects cannot be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BuildError {
    /// The job was not read from the API server (no name, namespace or UID).
    MissingMetadata(&'static str),
    /// A pod set has no flavor in the assignment.
    NoFlavor(String),
}

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BuildError::MissingMetadata(field) => write!(
                f,
                "the GpuJob has no {field}; build provisioning objects only for jobs read from the API server"
            ),
            BuildError::NoFlavor(set) => write!(f, "pod set {set} has no flavor assigned"),
        }
    }
}

impl std::error::Error for BuildError {}

/// Whether `class` takes one pod set per request.
pub fn one_pod_set_per_request(class: &str) -> bool {
    class == QUEUED_PROVISIONING
}

/// The name of the request for `pod_set` in attempt `attempt` of `job`, given how many pod
/// sets the job has.
pub fn request_name(
    class: &str,
    job: &str,
    attempt: u32,
    pod_set: &str,
    pod_sets: usize,
) -> String {
    if one_pod_set_per_request(class) && pod_sets > 1 {
        format!("{job}-{attempt}-{pod_set}")
    } else {
        format!("{job}-{attempt}")
    }
}

/// The names of every request of attempt `attempt`, in pod-set order, without repeats.
pub fn request_names(class: &str, job: &GpuJob, attempt: u32) -> Vec<String> {
    let name = job.metadata.name.clone().unwrap_or_default();
    let sets = job.spec.pod_sets.len();
    let mut names: Vec<String> = Vec::new();
    for set in &job.spec.pod_sets {
        let n = request_name(class, &name, attempt, &set.name, sets);
        if !names.contains(&n) {
            names.push(n);
        }
    }
    names
}

/// The name of the PodTemplate of `pod_set` in attempt `attempt` of `job`.
pub fn template_name(job: &str, attempt: u32, pod_set: &str) -> String {
    format!("{job}-{attempt}-{pod_set}")
}

/// The annotations that make a pod consume the capacity of `request` (of `class`).
pub fn consume_annotations(request: &str, class: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (annotations::CONSUME.to_owned(), request.to_owned()),
        (annotations::CLASS_NAME.to_owned(), class.to_owned()),
    ])
}

/// What to create for one attempt.
#[derive(Clone, Debug, PartialEq)]
pub struct Objects {
    /// One per pod set, in order.
    pub templates: Vec<PodTemplate>,
    /// One, or one per pod set for `queued-provisioning.gke.io`.
    pub requests: Vec<ProvisioningRequest>,
}

/// The PodTemplates and ProvisioningRequest(s) of attempt `attempt` for `job`, whose pod sets
/// got `flavors` (pod set → its flavor's spec), under the queue's `policy`.
pub fn objects(
    job: &GpuJob,
    attempt: u32,
    flavors: &BTreeMap<String, ResourceFlavorSpec>,
    policy: &ProvisioningPolicy,
) -> Result<Objects, BuildError> {
    let meta =
        |field: Option<&String>, what| field.cloned().ok_or(BuildError::MissingMetadata(what));
    let name = meta(job.metadata.name.as_ref(), "metadata.name")?;
    let namespace = meta(job.metadata.namespace.as_ref(), "metadata.namespace")?;
    let owner = job
        .owner_reference()
        .ok_or(BuildError::MissingMetadata("metadata.uid"))?;
    let object_meta = |object_name: String| ObjectMeta {
        name: Some(object_name),
        namespace: Some(namespace.clone()),
        labels: Some(BTreeMap::from([(JOB_LABEL.to_owned(), name.clone())])),
        owner_references: Some(vec![owner.clone()]),
        ..ObjectMeta::default()
    };
    let sets = job.spec.pod_sets.len();
    let mut templates = Vec::with_capacity(sets);
    let mut requests: Vec<ProvisioningRequest> = Vec::new();
    for set in &job.spec.pod_sets {
        let flavor = flavors
            .get(&set.name)
            .ok_or_else(|| BuildError::NoFlavor(set.name.clone()))?;
        let mut template: PodTemplateSpec = set.template.clone();
        let spec = template.spec.get_or_insert_with(Default::default);
        let mut selector = spec.node_selector.take().unwrap_or_default();
        selector.extend(flavor.node_labels.clone());
        spec.node_selector = Some(selector);
        let mut tolerations = spec.tolerations.take().unwrap_or_default();
        tolerations.extend(flavor.tolerations.iter().cloned());
        spec.tolerations = (!tolerations.is_empty()).then_some(tolerations);
        // The autoscaler simulates these pods: Muster's gate must not hide them from it.
        spec.scheduling_gates = None;
        let template_name = template_name(&name, attempt, &set.name);
        templates.push(PodTemplate {
            metadata: object_meta(template_name.clone()),
            template: Some(template),
        });
        let pod_set = ProvisioningPodSet {
            pod_template_ref: Reference {
                name: template_name,
            },
            count: set.count,
        };
        let request = request_name(&policy.class_name, &name, attempt, &set.name, sets);
        match requests
            .iter_mut()
            .find(|r| r.metadata.name.as_deref() == Some(request.as_str()))
        {
            Some(existing) => existing.spec.pod_sets.push(pod_set),
            None => requests.push(ProvisioningRequest {
                metadata: object_meta(request),
                spec: ProvisioningRequestSpec {
                    provisioning_class_name: policy.class_name.clone(),
                    pod_sets: vec![pod_set],
                    parameters: policy.parameters.clone(),
                },
                status: None,
            }),
        }
    }
    Ok(Objects {
        templates,
        requests,
    })
}
