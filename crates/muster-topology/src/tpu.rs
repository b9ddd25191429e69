//! Whole TPU slices: a multi-host slice is one node pool whose accelerator and topology labels
//! match; it is used whole or not at all, one pod per host.

use std::collections::BTreeMap;

use muster_api::resources::names;
use muster_api::tpu::{ACCELERATOR_LABEL, NODE_POOL_LABEL, Shape, TOPOLOGY_LABEL};

use crate::fit::{NoFit, NoFitKind, Placed, describe, per_node};
use crate::request::{Constraint, PodSetRequest};
use crate::tree::{NodeId, Topology};

/// A slice that could take the pod set: its nodes in name order, and whether its shape is the
/// one asked for (rather than a rotation).
struct Slice {
    name: String,
    nodes: Vec<NodeId>,
    exact: bool,
}

/// Places a TPU pod set on whole free slices; returns the slice pools as the domain.
pub(crate) fn place_slices(
    topo: &Topology,
    req: &PodSetRequest,
    eligible: &[bool],
) -> Result<Placed, NoFit> {
    let Constraint::Tpu {
        accelerator,
        shape,
        slices,
        allow_rotation,
    } = &req.constraint
    else {
        return Ok((Vec::new(), Vec::new(), Vec::new()));
    };
    // Requests are built with a slice count that divides the pod count.
    let hosts = req.count / slices.max(&1);
    // Only per-node room matters here: a slice is whole hosts, never a sum over a domain.
    let dense = topo.dense(&req.requests);
    let room = per_node(eligible, |id| topo.pods_fitting(id, &dense, 1));
    let matches_shape = |labels: &BTreeMap<String, String>| -> Option<bool> {
        if labels.get(ACCELERATOR_LABEL) != Some(accelerator) {
            return None;
        }
        let node_shape = labels.get(TOPOLOGY_LABEL).and_then(|t| Shape::parse(t))?;
        shape
            .matches(&node_shape, *allow_rotation)
            .then(|| node_shape == *shape)
    };

    // Candidate slices: single-host shapes are one node each; multi-host shapes a whole pool.
    let mut pools: BTreeMap<String, (Vec<NodeId>, bool)> = BTreeMap::new();
    for (id, node) in topo.nodes().iter().enumerate() {
        let Some(exact) = matches_shape(&node.info.labels) else {
            continue;
        };
        let key = if hosts == 1 {
            node.info.name.clone()
        } else {
            match node.info.labels.get(NODE_POOL_LABEL) {
                Some(pool) => pool.clone(),
                None => continue,
            }
        };
        let entry = pools.entry(key).or_insert_with(|| (Vec::new(), exact));
        entry.0.push(id);
    }
    let matching = pools.len();
    let mut free: Vec<Slice> = pools
        .into_iter()
        .filter(|(_, (nodes, _))| {
            // Whole: exactly the hosts of the shape, each able to take one pod, none in use.
            u32::try_from(nodes.len()).ok() == Some(hosts)
                && nodes
                    .iter()
                    .all(|n| room[*n] >= 1 && topo.used(*n).get(names::GOOGLE_TPU).is_zero())
        })
        .map(|(name, (nodes, exact))| Slice { name, nodes, exact })
        .collect();
    // Exact shapes first, then by name.
    free.sort_by(|a, b| b.exact.cmp(&a.exact).then_with(|| a.name.cmp(&b.name)));
    let wanted = *slices as usize;
    if free.len() < wanted {
        let message = topo.word(|| {
            let unit = if hosts == 1 {
                "single-host node".to_owned()
            } else {
                format!("node pool of {hosts} hosts")
            };
            format!(
                "needs {wanted} free {accelerator} {shape} slice(s) (each a {unit}) for pods with {}; {} free, {} more match but are partly used, incomplete or not ready",
                describe(&req.requests),
                free.len(),
                matching - free.len()
            )
        });
        return Err(NoFit {
            pod_set: req.name.clone(),
            kind: NoFitKind::NoFreeSlices,
            message,
            needed: req.count,
            best: None,
            total_capacity: u32::try_from(free.len())
                .unwrap_or(u32::MAX)
                .saturating_mul(hosts),
            fragmented: false,
        });
    }
    free.truncate(wanted);
    let label = if hosts == 1 {
        "kubernetes.io/hostname"
    } else {
        NODE_POOL_LABEL
    };
    let domain = free
        .iter()
        .map(|s| (label.to_owned(), s.name.clone()))
        .collect();
    let nodes = free.into_iter().flat_map(|s| s.nodes).collect();
    Ok((domain, nodes, Vec::new()))
}
