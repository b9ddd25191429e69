//! What-if changes to a snapshot: nodes added or removed, a node drained, a ClusterQueue's
//! quota or borrowing limit changed, a job that does not exist yet submitted. The changed
//! snapshot is forecast like any other; since each job's runtimes are drawn by its name, the
//! jobs both forecasts share see the same draws, and the difference is the change's.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use muster_api::resource_flavor::HOSTNAME_LABEL;
use muster_topology::NodeInfo;

use super::{Snapshot, WaitingJob};

/// One change.
#[derive(Clone, Debug)]
pub enum Change {
    /// `count` nodes of `flavor` join, each a copy of the flavor's first node (labels,
    /// taints, allocatable) under a name of its own, in topology domain `block` of the
    /// flavor's widest level (a new domain when none is given).
    AddNodes {
        /// The ResourceFlavor.
        flavor: String,
        /// How many.
        count: u32,
        /// The value of the flavor's widest topology level for the new nodes.
        block: Option<String>,
    },
    /// The last `count` nodes of `flavor` (of those in `block`, when given) leave; jobs with
    /// a pod on them queue again.
    RemoveNodes {
        /// The ResourceFlavor.
        flavor: String,
        /// How many.
        count: u32,
        /// Only nodes in this domain of the flavor's widest level.
        block: Option<String>,
    },
    /// Node `node` takes no new pods; what runs there runs on.
    Drain {
        /// The node's name.
        node: String,
    },
    /// ClusterQueue `cluster_queue`'s quota of `resource` in `flavor`: a new nominal quota
    /// and/or borrowing limit.
    Quota {
        /// The ClusterQueue.
        cluster_queue: String,
        /// The ResourceFlavor.
        flavor: String,
        /// The resource (`nvidia.com/gpu`).
        resource: String,
        /// The new nominal quota.
        nominal: Option<Quantity>,
        /// The new borrowing limit.
        borrowing_limit: Option<Quantity>,
    },
    /// A job that does not exist yet is submitted now.
    Submit(WaitingJob),
}

/// `snapshot` with `changes` applied in order. Errors: a change that names a flavor, node,
/// ClusterQueue or quota the snapshot lacks, a flavor without a node to copy, or a job name
/// already taken.
pub fn apply(snapshot: &Snapshot, changes: &[Change]) -> Result<Snapshot, String> {
    let mut s = snapshot.clone();
    for change in changes {
        match change {
            Change::AddNodes {
                flavor,
                count,
                block,
            } => add_nodes(&mut s, flavor, *count, block.as_deref())?,
            Change::RemoveNodes {
                flavor,
                count,
                block,
            } => remove_nodes(&mut s, flavor, *count, block.as_deref())?,
            Change::Drain { node } => {
                let n = s
                    .nodes
                    .iter_mut()
                    .find(|n| &n.name == node)
                    .ok_or_else(|| format!("drain: no node {node:?}"))?;
                n.schedulable = false;
            }
            Change::Quota {
                cluster_queue,
                flavor,
                resource,
                nominal,
                borrowing_limit,
            } => {
                let (_, spec) = s
                    .cluster_queues
                    .iter_mut()
                    .find(|(name, _)| name == cluster_queue)
                    .ok_or_else(|| format!("quota: no ClusterQueue {cluster_queue:?}"))?;
                let quota = spec
                    .resource_groups
                    .iter_mut()
                    .flat_map(|g| &mut g.flavors)
                    .filter(|f| &f.name == flavor)
                    .flat_map(|f| &mut f.resources)
                    .find(|r| &r.name == resource)
                    .ok_or_else(|| {
                        format!(
                            "quota: ClusterQueue {cluster_queue} has no quota of {resource} in flavor {flavor}"
                        )
                    })?;
                if let Some(n) = nominal {
                    quota.nominal_quota = n.clone();
                }
                if let Some(b) = borrowing_limit {
                    quota.borrowing_limit = Some(b.clone());
                }
            }
            Change::Submit(job) => {
                let taken = s
                    .running
                    .iter()
                    .map(|r| &r.job.id)
                    .chain(s.waiting.iter().map(|w| &w.job.id))
                    .any(|id| id == &job.job.id);
                if taken {
                    return Err(format!("submit: a job {} exists already", job.job.id));
                }
                let mut job = job.clone();
                std::sync::Arc::make_mut(&mut job.job).created = s.now;
                s.waiting.push(job);
            }
        }
    }
    Ok(s)
}

/// The node labels of `flavor` (its nodes carry all of them) and its widest topology level,
/// where a block is named (none when its only level is the hostname).
fn flavor_of(
    s: &Snapshot,
    flavor: &str,
) -> Result<(BTreeMap<String, String>, Option<String>), String> {
    let (_, spec) = s
        .flavors
        .iter()
        .find(|(name, _)| name == flavor)
        .ok_or_else(|| format!("no ResourceFlavor {flavor:?}"))?;
    let level = spec
        .topology_levels
        .first()
        .filter(|level| *level != HOSTNAME_LABEL)
        .cloned();
    Ok((spec.node_labels.clone(), level))
}

/// Whether `node` carries all of `labels`.
fn carries(node: &NodeInfo, labels: &BTreeMap<String, String>) -> bool {
    labels.iter().all(|(k, v)| node.labels.get(k) == Some(v))
}

fn add_nodes(
    s: &mut Snapshot,
    flavor: &str,
    count: u32,
    block: Option<&str>,
) -> Result<(), String> {
    let (labels, level) = flavor_of(s, flavor)?;
    let template = s.nodes.iter().find(|n| carries(n, &labels)).cloned();
    let template = template.ok_or_else(|| {
        format!("add nodes: flavor {flavor} has no node to copy labels and capacity from")
    })?;
    let block = block.map_or_else(|| format!("{flavor}-whatif"), str::to_owned);
    for i in 0..count {
        let mut name = format!("{flavor}-whatif-{i}");
        let mut k = 0;
        while s.nodes.iter().any(|n| n.name == name) {
            k += 1;
            name = format!("{flavor}-whatif-{i}-{k}");
        }
        let mut labels: BTreeMap<String, String> = template.labels.clone();
        labels.insert(HOSTNAME_LABEL.to_owned(), name.clone());
        if let Some(level) = &level {
            labels.insert(level.clone(), block.clone());
        }
        s.nodes.push(NodeInfo {
            name,
            labels,
            schedulable: true,
            ..template.clone()
        });
    }
    Ok(())
}

fn remove_nodes(
    s: &mut Snapshot,
    flavor: &str,
    count: u32,
    block: Option<&str>,
) -> Result<(), String> {
    let (labels, level) = flavor_of(s, flavor)?;
    let mut candidates = Vec::new();
    for (i, n) in s.nodes.iter().enumerate() {
        let in_block = match (block, &level) {
            (Some(b), Some(level)) => n.labels.get(level).map(String::as_str) == Some(b),
            (Some(b), None) => {
                return Err(format!(
                    "remove nodes: flavor {flavor} has no topology level to find block {b} in"
                ));
            }
            (None, _) => true,
        };
        if in_block && carries(n, &labels) {
            candidates.push(i);
        }
    }
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    if candidates.len() < count {
        return Err(format!(
            "remove nodes: flavor {flavor}{} has {} nodes, not {count}",
            block.map_or_else(String::new, |b| format!(" in block {b}")),
            candidates.len()
        ));
    }
    let gone: Vec<String> = candidates[candidates.len() - count..]
        .iter()
        .map(|&i| s.nodes[i].name.clone())
        .collect();
    s.nodes.retain(|n| !gone.contains(&n.name));
    // Jobs with a pod on a node that left queue again, now.
    let (stay, evicted): (Vec<_>, Vec<_>) =
        std::mem::take(&mut s.running).into_iter().partition(|r| {
            !r.holding
                .pod_sets
                .iter()
                .any(|p| p.nodes.iter().any(|n| gone.contains(n)))
        });
    s.running = stay;
    s.waiting.extend(evicted.into_iter().map(|r| WaitingJob {
        job: r.job,
        keys: r.keys,
        queues_at: None,
        batch: r.batch,
    }));
    Ok(())
}
