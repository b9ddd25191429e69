//! Nodes as the fitter sees them, and the usage of the pods bound to them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use muster_api::Resources;
use muster_api::resources::{ResourceError, names, pod_requests};

/// What the fitter needs to know about one node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeInfo {
    /// The node's name.
    pub name: String,
    /// Its labels (topology levels, flavor labels, TPU pool and shape).
    pub labels: BTreeMap<String, String>,
    /// Its taints.
    pub taints: Vec<Taint>,
    /// What pods may use in all.
    pub allocatable: Resources,
    /// Ready and not cordoned: new pods may land here.
    pub schedulable: bool,
}

/// GKE's GPU sharing strategy label (`time-sharing` or `mps`): the node's `nvidia.com/gpu` are
/// shared replicas, not whole GPUs.
pub const GKE_GPU_SHARING_STRATEGY: &str = "cloud.google.com/gke-gpu-sharing-strategy";
/// GKE's label for how many containers share one GPU.
pub const GKE_MAX_SHARED_CLIENTS: &str = "cloud.google.com/gke-max-shared-clients-per-gpu";
/// The NVIDIA GPU operator's label for time-slicing replicas per GPU (set by GPU feature
/// discovery when the device plugin's sharing config has replicas).
pub const NVIDIA_GPU_REPLICAS: &str = "nvidia.com/gpu.replicas";

/// HAMi's node label (`gpu: "on"`): HAMi's device plugin hands this node's GPUs out in parts
/// (a vGPU with a percentage of one GPU's cores and memory).
pub const HAMI_NODE_LABEL: &str = "gpu";
/// GPU feature discovery's label for how many physical GPUs a node has.
pub const NVIDIA_GPU_COUNT: &str = "nvidia.com/gpu.count";
/// The most GPU devices per node Muster tracks one by one; a node claiming more is counted
/// whole.
pub const MAX_GPU_DEVICES: u32 = 64;

/// A node or pod object the fitter cannot read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// A node has no name.
    #[error("a node has no metadata.name")]
    UnnamedNode,
    /// A node's allocatable amount is not a quantity.
    #[error("node {node}: status.allocatable.{source}")]
    Allocatable {
        /// The node.
        node: String,
        /// The bad quantity.
        source: ResourceError,
    },
    /// A pod's requests are not quantities.
    #[error("pod {pod}: {source}")]
    PodRequests {
        /// `namespace/name`.
        pod: String,
        /// The bad quantity.
        source: ResourceError,
    },
}

impl NodeInfo {
    /// Whether the node's GPUs are shared: its device plugin advertises each GPU as several
    /// `nvidia.com/gpu` replicas (time-slicing or MPS), by GKE's sharing labels or the NVIDIA
    /// operator's replica count above 1. Pods that need whole GPUs never go there.
    pub fn shares_gpus(&self) -> bool {
        let above_one = |key: &str| {
            self.labels
                .get(key)
                .and_then(|v| v.trim().parse::<u32>().ok())
                .is_some_and(|n| n > 1)
        };
        self.labels
            .get(GKE_GPU_SHARING_STRATEGY)
            .is_some_and(|v| !v.trim().is_empty())
            || above_one(GKE_MAX_SHARED_CLIENTS)
            || above_one(NVIDIA_GPU_REPLICAS)
    }

    /// How many GPU devices of this node Muster tracks one by one, for pods asking for part
    /// of a GPU: the node's physical GPU count (`nvidia.com/gpu.count`) when HAMi hands its
    /// GPUs out in parts (`gpu: "on"`), else 0 (its GPUs are counted whole, as
    /// `nvidia.com/gpu`).
    pub fn gpu_devices(&self) -> u32 {
        if self.labels.get(HAMI_NODE_LABEL).map(String::as_str) != Some("on") {
            return 0;
        }
        self.labels
            .get(NVIDIA_GPU_COUNT)
            .and_then(|v| v.trim().parse::<u32>().ok())
            .filter(|n| *n <= MAX_GPU_DEVICES)
            .unwrap_or(0)
    }

    /// Reads a Kubernetes Node as `kubectl get nodes -o yaml` returns it.
    pub fn from_node(node: &Node) -> Result<NodeInfo, InputError> {
        let name = node.metadata.name.clone().ok_or(InputError::UnnamedNode)?;
        let status = node.status.as_ref();
        let allocatable = match status.and_then(|s| s.allocatable.as_ref()) {
            Some(list) => {
                Resources::from_quantities(list).map_err(|source| InputError::Allocatable {
                    node: name.clone(),
                    source,
                })?
            }
            None => Resources::new(),
        };
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .is_some_and(|c| c.status == "True");
        let spec = node.spec.as_ref();
        let cordoned = spec.and_then(|s| s.unschedulable).unwrap_or(false);
        Ok(NodeInfo {
            name,
            labels: node.metadata.labels.clone().unwrap_or_default(),
            taints: spec.and_then(|s| s.taints.clone()).unwrap_or_default(),
            allocatable,
            schedulable: ready && !cordoned,
        })
    }
}

/// The node a pod is bound to and what it uses there, or `None` for a pod that holds nothing:
/// not yet bound, or finished.
pub fn pod_usage(pod: &Pod) -> Result<Option<(String, Resources)>, InputError> {
    let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
        return Ok(None);
    };
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return Ok(None);
    }
    let Some(spec) = &pod.spec else {
        return Ok(None);
    };
    let mut usage = pod_requests(spec).map_err(|source| InputError::PodRequests {
        pod: format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            pod.metadata.name.as_deref().unwrap_or("?")
        ),
        source,
    })?;
    usage.add(names::PODS, muster_api::Amount::from_units(1));
    Ok(Some((node, usage)))
}
