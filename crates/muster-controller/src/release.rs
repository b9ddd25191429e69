//! The objects that release one admitted gang: a headless Service giving every pod a stable
//! DNS name, and every pod of every pod set, created with the scheduling gate
//! `muster.dev/admission` so that none can start before all exist. Pure: the same job and
//! admission always give byte-identical objects.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, EnvVar, Pod, PodSchedulingGate, PodSchedulingGroup, PodSpec, Service, ServicePort,
    ServiceSpec,
};
use k8s_openapi::api::scheduling::v1alpha2::{
    GangSchedulingPolicy, PodGroup as SchedulingPodGroup, PodGroupSchedulingPolicy, PodGroupSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use muster_admission::{Admitted, PodSetPlacement};
use muster_api::resource_flavor::HOSTNAME_LABEL;
use muster_api::wire::{
    ADMISSION_GATE, ATTEMPT_LABEL, CLUSTER_QUEUE_ANNOTATION, DOMAIN_ANNOTATION, FLAVOR_ANNOTATION,
    GPU_DEVICES_ANNOTATION, JOB_LABEL, POD_INDEX_LABEL, POD_SET_LABEL,
};
use muster_api::{GpuJob, ResourceFlavorSpec};

/// Why a gang's objects cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReleaseError {
    /// The job has no name, namespace or UID (it was not read from the API).
    #[error("the GpuJob has no {0}; release objects only for jobs read from the API server")]
    MissingMetadata(&'static str),
    /// The admission names a pod set the job does not have.
    #[error("the admission places pod set {0}, which the GpuJob does not have")]
    UnknownPodSet(String),
    /// The admission's node list does not match the pod set's count.
    #[error("pod set {pod_set}: the admission places {placed} pods, the job asks for {count}")]
    CountMismatch {
        /// The pod set.
        pod_set: String,
        /// Pods the admission places.
        placed: usize,
        /// Pods the job asks for.
        count: i32,
    },
    /// The admission names a flavor that is not known.
    #[error("pod set {pod_set}: flavor {flavor} is unknown")]
    UnknownFlavor {
        /// The pod set.
        pod_set: String,
        /// The flavor.
        flavor: String,
    },
    /// The pod set's template has no spec.
    #[error("pod set {0}: the template has no spec")]
    NoPodSpec(String),
}

/// Every object of one released gang.
#[derive(Clone, Debug, PartialEq)]
pub struct Gang {
    /// The headless Service (named like the job) that gives each pod a DNS name, for a gang
    /// of two or more pods. A gang of one has none: its one pod needs no peer's name, and is
    /// told its own host name, which its `/etc/hosts` resolves (one create fewer per job).
    pub service: Option<Service>,
    /// Every pod, pod sets in order, indices in order.
    pub pods: Vec<Pod>,
    /// For the queue entry of a Job or JobSet (see [`crate::workload`]): what releases the
    /// workload's own pods instead; the Service and pods above are then empty and not made.
    pub workload: Option<Box<WorkloadRelease>>,
    /// Where the API server serves Kubernetes' own gang API (KEP-4671): the gang PodGroup
    /// its pods name, made before them (see [`join_scheduling_group`]).
    pub scheduling_group: Option<Box<SchedulingPodGroup>>,
}

/// Makes `gang` one of Kubernetes' own gangs as well (KEP-4671, `scheduling.k8s.io/v1alpha2`):
/// a gang PodGroup of every pod, named like the job and attempt (`<job>-<attempt>`) and owned
/// by the job, and each pod naming it in `spec.schedulingGroup`. kube-scheduler, where its
/// `GangScheduling` gate is on, then binds the pods Muster placed all or none. A gang of
/// no pods (a queue entry's, whose pods its workload's controllers make) is left as it is.
pub fn join_scheduling_group(gang: &mut Gang) {
    let Some(first) = gang.pods.first() else {
        return;
    };
    let labels = first.metadata.labels.clone().unwrap_or_default();
    let (Some(job), Some(attempt)) = (labels.get(JOB_LABEL), labels.get(ATTEMPT_LABEL)) else {
        return;
    };
    let name = format!("{job}-{attempt}");
    let group = SchedulingPodGroup {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: first.metadata.namespace.clone(),
            labels: Some(BTreeMap::from([
                (JOB_LABEL.to_owned(), job.clone()),
                (ATTEMPT_LABEL.to_owned(), attempt.clone()),
            ])),
            owner_references: first.metadata.owner_references.clone(),
            ..ObjectMeta::default()
        },
        spec: PodGroupSpec {
            scheduling_policy: PodGroupSchedulingPolicy {
                gang: Some(GangSchedulingPolicy {
                    min_count: i32::try_from(gang.pods.len()).unwrap_or(i32::MAX),
                }),
                ..PodGroupSchedulingPolicy::default()
            },
            ..PodGroupSpec::default()
        },
        status: None,
    };
    for pod in &mut gang.pods {
        if let Some(spec) = pod.spec.as_mut() {
            spec.scheduling_group = Some(PodSchedulingGroup {
                pod_group_name: Some(name.clone()),
            });
        }
    }
    gang.scheduling_group = Some(Box::new(group));
}

/// The release of the Job or JobSet behind a queue entry: its templates patched and the
/// workload unsuspended in one write. The gang's pods, once its controllers have made them
/// all, are let go by the entry's step (`Action::PinPods`) — unless the release is
/// `ungated`.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadRelease {
    /// The workload.
    pub workload: crate::workload::WorkloadRef,
    /// The patch (see [`crate::workload::template_patch`] and
    /// [`crate::workload::jobset::release_patch`]).
    pub patch: crate::workload::WorkloadPatch,
    /// The template is pinned to the node instead of gated (a Job that never runs more than
    /// one pod: see [`crate::workload::never_more_than_one_pod`]), so its pod runs as soon as
    /// its controller makes it. The entry's status is then written before the patch: a
    /// status write that fails leaves the Job suspended, not running on an admission nobody
    /// recorded.
    pub ungated: bool,
}

/// The host name of pod `index` of `pod_set` in `job` (validation keeps it within 63
/// characters): the same on every attempt, so peers find each other under stable DNS names.
pub fn pod_name(job: &str, pod_set: &str, index: usize) -> String {
    format!("{job}-{pod_set}-{index}")
}

/// The object name of that pod on `attempt` (the job's `requeueCount`): the host name, with
/// `-a<attempt>` after the first attempt, so a new gang never collides with pods of an
/// earlier one that are still terminating (on a lost node they may stay so for long).
pub fn pod_object_name(job: &str, pod_set: &str, index: usize, attempt: &str) -> String {
    let host = pod_name(job, pod_set, index);
    if attempt == "0" {
        host
    } else {
        format!("{host}-a{attempt}")
    }
}

/// What every object of one gang shares.
struct Context {
    name: String,
    namespace: String,
    cluster_queue: String,
    attempt: String,
    owner: OwnerReference,
    /// Host names of every pod, in order: the peers every pod is told about.
    hosts: Vec<String>,
}

impl Context {
    fn host(&self, pod_set: &str, index: usize) -> String {
        format!(
            "{}.{}.{}.svc",
            pod_name(&self.name, pod_set, index),
            self.name,
            self.namespace
        )
    }
}

/// Builds the Service and pods of `job` as `admitted` places them. `flavors` resolves the
/// flavors the admission names (their node labels and tolerations join every pod).
pub fn gang(
    job: &GpuJob,
    admitted: &Admitted,
    flavors: &BTreeMap<String, ResourceFlavorSpec>,
) -> Result<Gang, ReleaseError> {
    let meta =
        |field: Option<&String>, what| field.cloned().ok_or(ReleaseError::MissingMetadata(what));
    let name = meta(job.metadata.name.as_ref(), "metadata.name")?;
    let mut ctx = Context {
        namespace: meta(job.metadata.namespace.as_ref(), "metadata.namespace")?,
        owner: job
            .owner_reference()
            .ok_or(ReleaseError::MissingMetadata("metadata.uid"))?,
        name,
        cluster_queue: admitted.cluster_queue.clone(),
        attempt: job
            .status
            .as_ref()
            .map_or(0, |s| s.requeue_count)
            .to_string(),
        hosts: Vec::new(),
    };
    let members: Vec<(String, usize)> = admitted
        .pod_sets
        .iter()
        .flat_map(|p| (0..p.nodes.len()).map(move |i| (p.name.clone(), i)))
        .collect();
    ctx.hosts = match members.as_slice() {
        // A gang of one has no Service: it is told its own host name, which the kubelet's
        // `/etc/hosts` resolves.
        [(set, i)] => vec![pod_name(&ctx.name, set, *i)],
        _ => members.iter().map(|(set, i)| ctx.host(set, *i)).collect(),
    };
    let mut pods = Vec::with_capacity(ctx.hosts.len());
    for placement in &admitted.pod_sets {
        let set = job
            .spec
            .pod_sets
            .iter()
            .find(|s| s.name == placement.name)
            .ok_or_else(|| ReleaseError::UnknownPodSet(placement.name.clone()))?;
        if usize::try_from(set.count).ok() != Some(placement.nodes.len()) {
            return Err(ReleaseError::CountMismatch {
                pod_set: set.name.clone(),
                placed: placement.nodes.len(),
                count: set.count,
            });
        }
        let flavor = flavors
            .get(&placement.flavor)
            .ok_or_else(|| ReleaseError::UnknownFlavor {
                pod_set: set.name.clone(),
                flavor: placement.flavor.clone(),
            })?;
        if set.template.spec.is_none() {
            return Err(ReleaseError::NoPodSpec(set.name.clone()));
        }
        for (index, node) in placement.nodes.iter().enumerate() {
            pods.push(pod(&ctx, set, placement, flavor, index, node));
        }
    }
    Ok(Gang {
        service: (ctx.hosts.len() > 1).then(|| service(&ctx)),
        pods,
        workload: None,
        scheduling_group: None,
    })
}

/// Whether `pod` carries Muster's admission gate (every pod of a gang of two or more is
/// created with it; a gang of one is not).
pub fn is_gated(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|gates| gates.iter().any(|g| g.name == ADMISSION_GATE))
}

pub use crate::index::pinned_node;

/// Pod `index` of `set`, placed by `placement`, pinned to `node`.
fn pod(
    ctx: &Context,
    set: &muster_api::PodSet,
    placement: &PodSetPlacement,
    flavor: &ResourceFlavorSpec,
    index: usize,
    node: &str,
) -> Pod {
    let placed = placement.nodes.len();
    let name = pod_name(&ctx.name, &set.name, index);
    let object_name = pod_object_name(&ctx.name, &set.name, index, &ctx.attempt);
    let mut env = vec![
        env_var("MUSTER_JOB_NAME", &ctx.name),
        env_var("MUSTER_POD_SET", &set.name),
        env_var("MUSTER_POD_INDEX", &index.to_string()),
        env_var("MUSTER_WORLD_SIZE", &ctx.hosts.len().to_string()),
        env_var("MUSTER_PEER_HOSTS", &ctx.hosts.join(",")),
    ];
    if let Some(tpu) = set.topology.as_ref().and_then(|t| t.tpu.as_ref()) {
        // Each slice is its own TPU world: worker ids and host names within it.
        let slices = usize::try_from(tpu.slices().max(1)).unwrap_or(1);
        let per_slice = (placed / slices).max(1);
        let slice = index / per_slice;
        let slice_hosts: Vec<String> = (slice * per_slice..((slice + 1) * per_slice).min(placed))
            .map(|i| ctx.host(&set.name, i))
            .collect();
        env.push(env_var("TPU_WORKER_ID", &(index % per_slice).to_string()));
        env.push(env_var("TPU_WORKER_HOSTNAMES", &slice_hosts.join(",")));
    }
    let mut spec: PodSpec = set.template.spec.clone().unwrap_or_default();
    if let Some(Ok(share)) = set.gpu_share_milli() {
        crate::hami::give_vgpu(&mut spec, share);
    }
    for container in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        add_env(container, &env);
    }
    let mut selector = spec.node_selector.take().unwrap_or_default();
    selector.extend(flavor.node_labels.clone());
    selector.insert(HOSTNAME_LABEL.to_owned(), node.to_owned());
    spec.node_selector = Some(selector);
    let mut tolerations = spec.tolerations.take().unwrap_or_default();
    tolerations.extend(flavor.tolerations.iter().cloned());
    spec.tolerations = (!tolerations.is_empty()).then_some(tolerations);
    let mut gates = spec.scheduling_gates.take().unwrap_or_default();
    if ctx.hosts.len() > 1 {
        // A gang of one is whole as soon as its pod exists: it needs no gate, and saves the
        // request that would lift it.
        gates.push(PodSchedulingGate {
            name: ADMISSION_GATE.to_owned(),
        });
    }
    spec.scheduling_gates = (!gates.is_empty()).then_some(gates);
    spec.hostname = Some(name.clone());
    // The Service's name, which a gang of one does not have.
    spec.subdomain = (ctx.hosts.len() > 1).then(|| ctx.name.clone());
    let template_meta = set.template.metadata.clone().unwrap_or_default();
    let mut labels = template_meta.labels.unwrap_or_default();
    labels.insert(JOB_LABEL.to_owned(), ctx.name.clone());
    labels.insert(POD_SET_LABEL.to_owned(), set.name.clone());
    labels.insert(POD_INDEX_LABEL.to_owned(), index.to_string());
    labels.insert(ATTEMPT_LABEL.to_owned(), ctx.attempt.clone());
    // The admission travels with every pod, so that a controller that restarts before the
    // job's status is written can finish (or roll back) the release from the pods alone.
    let mut annotations = template_meta.annotations.unwrap_or_default();
    annotations.insert(
        CLUSTER_QUEUE_ANNOTATION.to_owned(),
        ctx.cluster_queue.clone(),
    );
    annotations.insert(FLAVOR_ANNOTATION.to_owned(), placement.flavor.clone());
    annotations.insert(
        DOMAIN_ANNOTATION.to_owned(),
        format_domain(&placement.domain),
    );
    if let Some(devices) = placement.devices.get(index).filter(|d| !d.is_empty()) {
        annotations.insert(
            GPU_DEVICES_ANNOTATION.to_owned(),
            crate::hami::format_devices(devices),
        );
    }
    Pod {
        metadata: ObjectMeta {
            name: Some(object_name),
            namespace: Some(ctx.namespace.clone()),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![ctx.owner.clone()]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// The headless Service that gives every pod of the gang a DNS name.
fn service(ctx: &Context) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(ctx.name.clone()),
            namespace: Some(ctx.namespace.clone()),
            labels: Some(BTreeMap::from([(JOB_LABEL.to_owned(), ctx.name.clone())])),
            owner_references: Some(vec![ctx.owner.clone()]),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_owned()),
            // Only the current attempt: pods of an earlier one may still be terminating under
            // the same host names, and must not answer for them.
            selector: Some(BTreeMap::from([
                (JOB_LABEL.to_owned(), ctx.name.clone()),
                (ATTEMPT_LABEL.to_owned(), ctx.attempt.clone()),
            ])),
            // Peers must resolve each other before they are Ready: rendezvous comes first.
            publish_not_ready_addresses: Some(true),
            ports: Some(vec![ServicePort {
                name: Some("rendezvous".to_owned()),
                port: 29500,
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

fn env_var(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        value_from: None,
    }
}

/// Adds `env` to a container, replacing variables of the same names (Muster's values win:
/// they describe the gang as placed).
fn add_env(container: &mut Container, env: &[EnvVar]) {
    let mut vars = container.env.take().unwrap_or_default();
    vars.retain(|v| !env.iter().any(|e| e.name == v.name));
    vars.extend(env.iter().cloned());
    container.env = Some(vars);
}

pub use muster_api::wire::{format_domain, parse_domain};
