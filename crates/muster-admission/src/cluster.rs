//! The cluster's nodes, arranged once per ResourceFlavor, with every change journaled so a
//! cycle can try, keep or roll back.
//!
//! A node may carry the labels of more than one flavor. Each flavor has its own
//! [`Topology`], so a pod placed through one flavor is booked in every flavor that holds its
//! node: no GPU is promised twice, whichever flavor promised it first.

use std::collections::BTreeMap;

use muster_api::resource_flavor::HOSTNAME_LABEL;
use muster_api::{ResourceFlavorSpec, Resources};
use muster_topology::{
    Fit, KeepOff, Mark, NoFit, NodeId, NodeInfo, PlaceScratch, PodSetRequest, Policy, Topology,
    place_reusing,
};

/// One flavor: its definition and its nodes.
#[derive(Clone, Debug)]
struct FlavorNodes {
    spec: ResourceFlavorSpec,
    topology: Topology,
}

/// Every flavor's nodes.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    flavors: BTreeMap<String, FlavorNodes>,
    /// What placements work in, kept from one to the next (see [`place_reusing`]).
    scratch: PlaceScratch,
}

/// A point every flavor's journal can roll back to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterMark(Vec<Mark>);

impl Cluster {
    /// Arranges `nodes` under each flavor: a flavor holds the nodes that carry all its
    /// `nodeLabels`, under its topology levels (or just the hostname when it names none).
    pub fn new(
        flavors: impl IntoIterator<Item = (String, ResourceFlavorSpec)>,
        nodes: &[NodeInfo],
    ) -> Cluster {
        let flavors = flavors
            .into_iter()
            .map(|(name, spec)| {
                let levels = if spec.topology_levels.is_empty() {
                    vec![HOSTNAME_LABEL.to_owned()]
                } else {
                    spec.topology_levels.clone()
                };
                let members = nodes
                    .iter()
                    .filter(|n| {
                        spec.node_labels
                            .iter()
                            .all(|(k, v)| n.labels.get(k) == Some(v))
                    })
                    .cloned();
                let topology = Topology::new(levels, members);
                (name, FlavorNodes { spec, topology })
            })
            .collect();
        Cluster {
            flavors,
            scratch: PlaceScratch::default(),
        }
    }

    /// Whether a placement that fails says why in words (on by default; see
    /// [`Topology::set_words_failures`]).
    pub fn set_words_failures(&mut self, on: bool) {
        for f in self.flavors.values_mut() {
            f.topology.set_words_failures(on);
        }
    }

    /// The flavor's definition.
    pub fn flavor(&self, name: &str) -> Option<&ResourceFlavorSpec> {
        self.flavors.get(name).map(|f| &f.spec)
    }

    /// The flavor's nodes.
    pub fn topology(&self, name: &str) -> Option<&Topology> {
        self.flavors.get(name).map(|f| &f.topology)
    }

    /// Books a pod's usage on `node` in every flavor that holds it. Unknown nodes are ignored
    /// (a pod on a node no flavor selects uses nothing Muster hands out).
    pub fn add_usage(&mut self, node: &str, usage: &Resources) {
        for f in self.flavors.values_mut() {
            if let Some(id) = f.topology.node_id(node) {
                f.topology.add_usage(id, usage);
            }
        }
    }

    /// Books a pod of `requests` on `node`, on the GPU `devices` it took, in every flavor
    /// that has the node: [`Cluster::add_usage`] of what the pod uses
    /// ([`crate::PodSetPlacement::usage_of`]), without building it by name.
    pub fn add_pod(&mut self, node: &str, requests: &Resources, devices: &[u32]) {
        for f in self.flavors.values_mut() {
            if let Some(id) = f.topology.node_id(node) {
                f.topology.add_pod(id, requests, devices);
            }
        }
    }

    /// Takes a pod of `requests` on `devices` off `node`: the reverse of
    /// [`Cluster::add_pod`].
    pub fn remove_pod(&mut self, node: &str, requests: &Resources, devices: &[u32]) {
        for f in self.flavors.values_mut() {
            if let Some(id) = f.topology.node_id(node) {
                f.topology.remove_pod(id, requests, devices);
            }
        }
    }

    /// Takes the pods of one pod set off their nodes, in every flavor that has them: pod `i`
    /// of `requests` from `nodes[i]`, on the GPU devices `devices(i)` ([`Cluster::remove_pod`]
    /// of each, with the requests resolved once per flavor: [`Topology::remove_pods`]).
    pub fn remove_pods<'d>(
        &mut self,
        nodes: &'d [String],
        requests: &Resources,
        devices: impl Fn(usize) -> &'d [u32],
    ) {
        for f in self.flavors.values_mut() {
            let pods = nodes
                .iter()
                .enumerate()
                .map(|(pod, node)| (node.as_str(), devices(pod)));
            f.topology.remove_pods(pods, requests);
        }
    }

    /// Releases a pod's usage on `node` in every flavor that holds it.
    pub fn remove_usage(&mut self, node: &str, usage: &Resources) {
        for f in self.flavors.values_mut() {
            if let Some(id) = f.topology.node_id(node) {
                f.topology.remove_usage(id, usage);
            }
        }
    }

    /// Marks the node named `node` schedulable or not in every flavor that holds it.
    pub fn set_schedulable(&mut self, node: &str, schedulable: bool) {
        for f in self.flavors.values_mut() {
            if let Some(id) = f.topology.node_id(node) {
                f.topology.set_schedulable(id, schedulable);
            }
        }
    }

    /// The ids of the nodes named `names` in flavor `flavor`'s topology, in order; names it
    /// does not hold are left out.
    pub fn node_ids(&self, flavor: &str, names: &[String]) -> Vec<NodeId> {
        self.flavors.get(flavor).map_or_else(Vec::new, |f| {
            names
                .iter()
                .filter_map(|name| f.topology.node_id(name))
                .collect()
        })
    }

    /// Takes everything still free on the `reserved` nodes (each a flavor with ids in its
    /// topology, as [`Cluster::node_ids`] gives them), in every flavor, in order: used to
    /// keep a job whose pod sets are `keep_off` off capacity reserved for others. A node
    /// whose free resources already hold no pod of any of those sets is left as it is:
    /// filling it would change nothing a placement reads, and it would cost a journaled
    /// change per node for every job a cycle tries. The sets' requests are resolved once
    /// per flavor for all of it: most reserved nodes have no room, and comparing names was
    /// most of what a fill cost.
    pub fn fill<'a>(
        &mut self,
        reserved: impl IntoIterator<Item = (&'a str, &'a [NodeId])>,
        keep_off: &[PodSetRequest],
    ) {
        let requests: Vec<&Resources> = keep_off.iter().map(|set| &set.requests).collect();
        let shared = self.flavors.len() > 1;
        let mut resolved: Vec<(&str, KeepOff)> = Vec::new();
        for (flavor, nodes) in reserved {
            let Some(f) = self.flavors.get_mut(flavor) else {
                continue;
            };
            let at = match resolved.iter().position(|(name, _)| *name == flavor) {
                Some(at) => at,
                None => {
                    resolved.push((flavor, f.topology.keep_off(&requests)));
                    resolved.len() - 1
                }
            };
            let keep_off = &resolved[at].1;
            let mut taken_on = Vec::new();
            for &id in nodes {
                let Some(taken) = f.topology.fill(id, keep_off) else {
                    continue;
                };
                if shared {
                    let name = f.topology.nodes()[id].info.name.clone();
                    taken_on.push((name, f.topology.resources_of(&taken)));
                }
            }
            // Book the same amounts in the other flavors that hold the nodes.
            for (node, taken) in &taken_on {
                for (name, other) in &mut self.flavors {
                    if name != flavor
                        && let Some(id) = other.topology.node_id(node)
                    {
                        other.topology.add_usage(id, taken);
                    }
                }
            }
        }
    }

    /// Makes `nodes` of `flavor` full, whatever is released from them later (the nodes a
    /// preemptor counted on); returns what it added per node, for [`Cluster::remove_usage`]
    /// to take away again.
    pub fn block(&mut self, flavor: &str, nodes: &[String]) -> Vec<(String, Resources)> {
        let mut added = Vec::with_capacity(nodes.len());
        for node in nodes {
            let whole = self.flavors.get(flavor).and_then(|f| {
                let id = f.topology.node_id(node)?;
                let mut whole = f.topology.used(id);
                whole.add_all(&f.topology.free(id));
                Some(whole)
            });
            if let Some(whole) = whole {
                self.add_usage(node, &whole);
                added.push((node.clone(), whole));
            }
        }
        added
    }

    /// Places one pod set in `flavor` (the request already carries the flavor's labels and
    /// tolerations) and books its pods in every flavor.
    pub fn place(
        &mut self,
        flavor: &str,
        req: &PodSetRequest,
        policy: &dyn Policy,
    ) -> Option<Result<Fit, NoFit>> {
        let f = self.flavors.get_mut(flavor)?;
        let result = place_reusing(
            &mut f.topology,
            std::slice::from_ref(req),
            policy,
            &mut self.scratch,
        );
        if let Ok(fit) = &result {
            // The flavor that placed booked its own nodes; book the others that share them.
            for (name, other) in &mut self.flavors {
                if name == flavor {
                    continue;
                }
                for set in &fit.pod_sets {
                    for (pod, node) in set.nodes.iter().enumerate() {
                        if let Some(id) = other.topology.node_id(node) {
                            let devices = set.devices.get(pod).map_or(&[][..], Vec::as_slice);
                            other.topology.add_pod(id, &req.requests, devices);
                        }
                    }
                }
            }
        }
        Some(result)
    }

    /// The current point of every journal.
    pub fn mark(&self) -> ClusterMark {
        ClusterMark(self.flavors.values().map(|f| f.topology.mark()).collect())
    }

    /// Undoes every change since `mark`.
    pub fn rollback(&mut self, mark: &ClusterMark) {
        for (f, m) in self.flavors.values_mut().zip(&mark.0) {
            f.topology.rollback(*m);
        }
    }

    /// Forgets the journals (the changes stay).
    pub fn commit(&mut self) {
        for f in self.flavors.values_mut() {
            f.topology.commit();
        }
    }
}

/// A flavor-independent pod set under `flavor`: its node labels join the selector and its
/// tolerations join the pod's.
pub fn with_flavor(req: &PodSetRequest, flavor: &ResourceFlavorSpec) -> PodSetRequest {
    let mut req = req.clone();
    req.node_selector.extend(flavor.node_labels.clone());
    req.tolerations.extend(flavor.tolerations.iter().cloned());
    req
}
