//! What a gang asks for: per pod set, a count, per-pod requests, where its pods may go, and one
//! topology constraint.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, Taint, Toleration};
use muster_api::resources::{ResourceError, names, pod_requests};
use muster_api::tpu::Shape;
use muster_api::{Amount, PodSet, ResourceFlavorSpec, Resources, TpuSliceRequest};

use crate::node::NodeInfo;

/// The topology constraint of one pod set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Constraint {
    /// Anywhere the flavor allows.
    None,
    /// All pods in one domain of this level.
    Required(String),
    /// The tightest domain possible, starting at this level and climbing.
    Preferred(String),
    /// Whole TPU slices, one pod per host.
    Tpu {
        /// The accelerator label value.
        accelerator: String,
        /// The slice shape.
        shape: Shape,
        /// How many slices.
        slices: u32,
        /// Whether a permutation of a 3D shape is acceptable.
        allow_rotation: bool,
    },
}

/// One pod set of a gang, ready to place.
#[derive(Clone, Debug, PartialEq)]
pub struct PodSetRequest {
    /// The pod set's name.
    pub name: String,
    /// How many pods.
    pub count: u32,
    /// What each pod needs on its node, including one of `pods`.
    pub requests: Resources,
    /// Node labels every pod requires (the template's nodeSelector plus the flavor's labels).
    pub node_selector: BTreeMap<String, String>,
    /// Required node affinity: a node must match at least one term (when there are any).
    pub affinity: Vec<NodeSelectorTerm>,
    /// Tolerations (the template's plus the flavor's).
    pub tolerations: Vec<Toleration>,
    /// The topology constraint.
    pub constraint: Constraint,
    /// Whether the pods need whole GPUs: they never go to nodes whose GPUs are time-shared
    /// replicas ([`NodeInfo::shares_gpus`]). True for pods asking for `nvidia.com/gpu` unless
    /// their job accepts shared GPUs.
    pub whole_gpus: bool,
}

/// The parts of a [`PodSetRequest`] that decide which nodes it may use: the node selector,
/// the required node affinity, the tolerations and whether it needs whole GPUs.
#[derive(Clone, Debug, PartialEq)]
pub struct Eligibility {
    /// Node labels every pod requires.
    pub node_selector: BTreeMap<String, String>,
    /// Required node affinity terms.
    pub affinity: Vec<NodeSelectorTerm>,
    /// Tolerations.
    pub tolerations: Vec<Toleration>,
    /// Whether nodes with time-shared GPUs are ruled out.
    pub whole_gpus: bool,
}

/// A pod set that cannot be turned into a request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The template has no pod spec.
    #[error("pod set {0}: the template has no spec")]
    NoPodSpec(String),
    /// A request is not a quantity.
    #[error("pod set {pod_set}: {source}")]
    Resources {
        /// The pod set.
        pod_set: String,
        /// The bad quantity.
        source: ResourceError,
    },
    /// The count is below one.
    #[error("pod set {0}: count must be at least 1")]
    Count(String),
    /// The TPU request is not a known shape (validation says why).
    #[error("pod set {0}: the TPU request is not a valid slice; run `muster validate` on the job")]
    Tpu(String),
    /// `gpuShare` is not a part of one GPU (validation says why).
    #[error("pod set {0}: gpuShare is not a part of one GPU; run `muster validate` on the job")]
    GpuShare(String),
}

/// Whether pods of per-pod `requests` need whole GPUs, so never go to time-shared replicas:
/// they ask for `nvidia.com/gpu` and not for a share of one (a share only fits nodes whose
/// devices are tracked, never time-sliced ones). Admission relaxes it for jobs that accept
/// shared GPUs.
pub fn needs_whole_gpus(requests: &Resources) -> bool {
    !requests.get(names::NVIDIA_GPU).is_zero() && requests.get(names::GPU_SHARE).is_zero()
}

impl PodSetRequest {
    /// Builds the request of one GpuJob pod set under a flavor.
    pub fn from_pod_set(
        set: &PodSet,
        flavor: Option<&ResourceFlavorSpec>,
    ) -> Result<Self, RequestError> {
        let spec = set
            .template
            .spec
            .as_ref()
            .ok_or_else(|| RequestError::NoPodSpec(set.name.clone()))?;
        let mut requests = pod_requests(spec).map_err(|source| RequestError::Resources {
            pod_set: set.name.clone(),
            source,
        })?;
        requests.add(names::PODS, Amount::from_units(1));
        let count = u32::try_from(set.count)
            .ok()
            .filter(|c| *c > 0)
            .ok_or_else(|| RequestError::Count(set.name.clone()))?;
        let mut node_selector = spec.node_selector.clone().unwrap_or_default();
        let mut tolerations = spec.tolerations.clone().unwrap_or_default();
        if let Some(flavor) = flavor {
            node_selector.extend(flavor.node_labels.clone());
            tolerations.extend(flavor.tolerations.iter().cloned());
        }
        let affinity = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map(|s| s.node_selector_terms.clone())
            .unwrap_or_default();
        let constraint = match set.topology.as_ref() {
            Some(t) => match (&t.tpu, &t.required, &t.preferred) {
                (Some(tpu), _, _) => tpu_constraint(&set.name, tpu, count)?,
                (None, Some(level), _) => Constraint::Required(level.clone()),
                (None, None, Some(level)) => Constraint::Preferred(level.clone()),
                (None, None, None) => Constraint::None,
            },
            None => Constraint::None,
        };
        if let Some(share) = set.gpu_share_milli() {
            // One vGPU per pod on its node, and the share on one of the node's devices.
            let milli = share
                .ok()
                .filter(|m| (1..1000).contains(m))
                .ok_or_else(|| RequestError::GpuShare(set.name.clone()))?;
            requests.set(names::NVIDIA_GPU, Amount::from_units(1));
            requests.set(names::GPU_SHARE, Amount::from_milli(milli));
        }
        let whole_gpus = needs_whole_gpus(&requests);
        Ok(PodSetRequest {
            name: set.name.clone(),
            count,
            requests,
            node_selector,
            affinity,
            tolerations,
            constraint,
            whole_gpus,
        })
    }

    /// What decides which nodes this pod set may use (capacity aside): two requests with
    /// the same eligibility accept exactly the same nodes.
    pub fn eligibility(&self) -> Eligibility {
        Eligibility {
            node_selector: self.node_selector.clone(),
            affinity: self.affinity.clone(),
            tolerations: self.tolerations.clone(),
            whole_gpus: self.whole_gpus,
        }
    }

    /// Whether this request's eligibility is `other` (compared in place, without a copy).
    pub fn has_eligibility(&self, other: &Eligibility) -> bool {
        self.node_selector == other.node_selector
            && self.affinity == other.affinity
            && self.tolerations == other.tolerations
            && self.whole_gpus == other.whole_gpus
    }

    /// Whether `node` passes the required node affinity, has only taints the pods tolerate and
    /// has whole GPUs if the pods need them (the checks after readiness and the selector).
    pub(crate) fn accepts_affinity_and_taints(&self, node: &NodeInfo) -> bool {
        (self.affinity.is_empty() || self.affinity.iter().any(|t| term_matches(t, &node.labels)))
            && node.taints.iter().all(|t| tolerated(t, &self.tolerations))
            && !(self.whole_gpus && node.shares_gpus())
    }

    /// Why a node cannot take any pod of this set, or `None` when it can (capacity aside).
    pub fn node_mismatch(&self, node: &NodeInfo) -> Option<Mismatch> {
        if !node.schedulable {
            return Some(Mismatch::NotSchedulable);
        }
        if self
            .node_selector
            .iter()
            .any(|(k, v)| node.labels.get(k) != Some(v))
        {
            return Some(Mismatch::Selector);
        }
        if !self.affinity.is_empty() && !self.affinity.iter().any(|t| term_matches(t, &node.labels))
        {
            return Some(Mismatch::Affinity);
        }
        if let Some(taint) = node
            .taints
            .iter()
            .find(|t| !tolerated(t, &self.tolerations))
        {
            return Some(Mismatch::Taint(taint.key.clone()));
        }
        if self.whole_gpus && node.shares_gpus() {
            return Some(Mismatch::SharedGpus);
        }
        None
    }
}

/// A TPU slice constraint, checked as far as placement depends on it: a known accelerator and
/// shape, and a pod count that splits evenly over the slices (one pod per host).
fn tpu_constraint(
    name: &str,
    tpu: &TpuSliceRequest,
    count: u32,
) -> Result<Constraint, RequestError> {
    let invalid = || RequestError::Tpu(name.to_owned());
    let accelerator = muster_api::tpu::accelerator(&tpu.accelerator).ok_or_else(invalid)?;
    let shape = accelerator.shape(&tpu.topology).map_err(|_| invalid())?;
    let slices = u32::try_from(tpu.slices())
        .ok()
        .filter(|s| *s > 0 && count.is_multiple_of(*s))
        .ok_or_else(invalid)?;
    Ok(Constraint::Tpu {
        accelerator: tpu.accelerator.clone(),
        shape,
        slices,
        allow_rotation: tpu.allow_rotation,
    })
}

/// Why a node is not a candidate.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mismatch {
    /// Not Ready, or cordoned.
    NotSchedulable,
    /// Lacks a required label (node selector or flavor label).
    Selector,
    /// Matches no required node-affinity term.
    Affinity,
    /// Has a taint (key given) the pods do not tolerate.
    Taint(String),
    /// Its GPUs are time-shared replicas and the pods need whole GPUs.
    SharedGpus,
}

fn term_matches(term: &NodeSelectorTerm, labels: &BTreeMap<String, String>) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or_default();
    // A term with no expressions matches nothing, as in Kubernetes.
    !exprs.is_empty() && exprs.iter().all(|e| requirement_matches(e, labels))
}

fn requirement_matches(req: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let value = labels.get(&req.key);
    let values = req.values.as_deref().unwrap_or_default();
    match req.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), Some(bound)) = (
                value.and_then(|v| v.parse::<i64>().ok()),
                values.first().and_then(|b| b.parse::<i64>().ok()),
            ) else {
                return false;
            };
            if req.operator == "Gt" {
                v > bound
            } else {
                v < bound
            }
        }
        _ => false,
    }
}

/// Whether `tolerations` tolerate `taint`. PreferNoSchedule taints never block.
pub fn tolerated(taint: &Taint, tolerations: &[Toleration]) -> bool {
    if taint.effect == "PreferNoSchedule" {
        return true;
    }
    tolerations.iter().any(|t| {
        let effect_ok = t
            .effect
            .as_deref()
            .is_none_or(|e| e.is_empty() || e == taint.effect);
        let key = t.key.as_deref().unwrap_or_default();
        let key_ok = key.is_empty() || key == taint.key;
        let value_ok = match t.operator.as_deref().unwrap_or("Equal") {
            "Exists" => true,
            _ => {
                !key.is_empty()
                    && t.value.as_deref().unwrap_or_default()
                        == taint.value.as_deref().unwrap_or_default()
            }
        };
        effect_ok && key_ok && value_ok
    })
}
