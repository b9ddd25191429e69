//! What a placement answers: where every pod of a gang goes ([`Fit`]), or why it cannot go
//! anywhere now ([`NoFit`]), and the words its explanations share.

use std::fmt::Write as _;

use muster_api::Resources;
use muster_api::resources::names;

use crate::tree::NodeId;

/// Where every pod of a gang goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fit {
    /// One entry per pod set, in the gang's order.
    pub pod_sets: Vec<PodSetFit>,
}

/// Where one pod set goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodSetFit {
    /// The pod set.
    pub name: String,
    /// The chosen domain as (level, value) pairs, widest first; empty for the whole flavor.
    pub domain: Vec<(String, String)>,
    /// The node of each pod, by pod index.
    pub nodes: Vec<String>,
    /// The GPU devices each pod takes on its node, by pod index: empty where the node's GPUs
    /// are not tracked one by one ([`crate::NodeInfo::gpu_devices`]).
    pub devices: Vec<Vec<u32>>,
}

/// Why a gang cannot be placed now, in terms a person can act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoFit {
    /// The pod set that could not be placed.
    pub pod_set: String,
    /// The kind of failure.
    pub kind: NoFitKind,
    /// The whole explanation.
    pub message: String,
    /// Pods needed.
    pub needed: u32,
    /// The best candidate domain (or slice) and how many pods it could hold.
    pub best: Option<(String, u32)>,
    /// How many pods the flavor's nodes could hold in all, ignoring the constraint.
    pub total_capacity: u32,
    /// Enough capacity exists in all, but not in one place: fragmentation.
    pub fragmented: bool,
}

/// Kinds of [`NoFit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NoFitKind {
    /// No node passes the pod set's selectors, affinity, taints and readiness.
    NoEligibleNodes,
    /// The constraint names a level that is not one of the flavor's topology levels.
    UnknownLevel,
    /// Capacity exists in all, but no domain of the required level holds the whole set.
    NoDomainFits,
    /// The flavor's nodes lack the capacity, constraint or not.
    NotEnoughCapacity,
    /// Not enough whole, free TPU slices of the shape.
    NoFreeSlices,
}

impl NoFitKind {
    /// A stable, machine-readable name.
    pub fn as_str(self) -> &'static str {
        match self {
            NoFitKind::NoEligibleNodes => "NoEligibleNodes",
            NoFitKind::UnknownLevel => "UnknownLevel",
            NoFitKind::NoDomainFits => "NoDomainFits",
            NoFitKind::NotEnoughCapacity => "NotEnoughCapacity",
            NoFitKind::NoFreeSlices => "NoFreeSlices",
        }
    }
}

/// Where a pod set goes: its domain, each pod's node, and — when the policy chose them — each
/// pod's GPU devices (empty: the fitter picks them as it books).
pub(crate) type Placed = (Vec<(String, String)>, Vec<NodeId>, Vec<Vec<u32>>);

/// `fits(node)` for every node the pod set may use (`eligible`, by node id), zero for the others.
pub(crate) fn per_node(eligible: &[bool], fits: impl Fn(NodeId) -> u32) -> Vec<u32> {
    eligible
        .iter()
        .enumerate()
        .map(|(id, ok)| if *ok { fits(id) } else { 0 })
        .collect()
}

/// Shows a pod's requests, leaving out the pod slot itself.
pub(crate) fn describe(requests: &Resources) -> String {
    // Written as `Resources`' own display writes the requests without the pod count, without
    // building that copy first: a placement that fails says this for every job it tries.
    let mut out = String::from("{");
    let shown = requests
        .iter()
        .filter(|(name, amount)| *name != names::PODS && !amount.is_zero());
    for (i, (name, amount)) in shown.enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{name}: {}", amount.format_for(name));
    }
    out.push_str("} each");
    out
}

#[cfg(test)]
mod tests {
    use muster_api::{Amount, Resources};

    use super::describe;

    #[test]
    fn a_pods_requests_are_shown_as_resources_show_them_without_the_pod_slot() {
        let mut requests = Resources::new();
        requests.set("nvidia.com/gpu", Amount::from_units(8));
        requests.set("pods", Amount::from_units(1));
        requests.set("cpu", Amount::from_milli(1_500));
        requests.set("memory", Amount::from_units(64 << 30));
        let mut shown = requests.clone();
        shown.set("pods", Amount::ZERO);
        assert_eq!(describe(&requests), format!("{shown} each"));
        assert_eq!(describe(&Resources::new()), "{} each");
    }
}
