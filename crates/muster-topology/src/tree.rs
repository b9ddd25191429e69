//! The domain tree of one flavor's nodes, with free capacity kept per node and per domain.
//!
//! Domains are stored in an arena: index 0 is the root (the whole flavor), then one domain per
//! distinct label-value path at each level, widest first; a parent always has a smaller index
//! than its children, so one reverse pass aggregates anything bottom-up. Changing one node's usage
//! touches only its ancestors: O(depth). Every change is journaled, so a scheduling cycle can
//! place tentatively and roll back to any earlier mark exactly.

use std::collections::BTreeMap;

use muster_api::Resources;

use crate::node::NodeInfo;

/// Index of a domain in the arena.
pub type DomainId = usize;
/// Index of a node in the arena.
pub type NodeId = usize;

/// One domain: the set of nodes sharing the same label values down to its level.
#[derive(Clone, Debug)]
pub struct Domain {
    /// 0 for the root; `i + 1` for the level `levels[i]`.
    pub depth: usize,
    /// The label value at this level (empty for the root, and for nodes lacking the label).
    pub value: String,
    /// The enclosing domain; `None` for the root.
    pub parent: Option<DomainId>,
    /// Child domains, in label-value order.
    pub children: Vec<DomainId>,
    /// Nodes directly in this domain (only in domains of the last level), in name order.
    pub nodes: Vec<NodeId>,
    /// Free capacity: the sum of each node's free capacity under this domain.
    pub free: Resources,
}

/// A node with its usage.
#[derive(Clone, Debug)]
pub struct NodeState {
    /// What the node is.
    pub info: NodeInfo,
    /// What bound pods use on it (may exceed allocatable: pods Muster did not place).
    pub used: Resources,
    /// Its domain at the last level.
    pub domain: DomainId,
}

impl NodeState {
    /// Allocatable minus used, never below zero.
    pub fn free(&self) -> Resources {
        let mut free = self.info.allocatable.clone();
        free.saturating_sub_all(&self.used);
        free
    }
}

/// A point in the journal to roll back to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark(usize);

#[derive(Clone, Debug)]
enum Change {
    Added(NodeId, Resources),
    Removed(NodeId, Resources),
}

/// The nodes of one flavor arranged by topology levels.
#[derive(Clone, Debug)]
pub struct Topology {
    levels: Vec<String>,
    domains: Vec<Domain>,
    nodes: Vec<NodeState>,
    by_name: BTreeMap<String, NodeId>,
    journal: Vec<Change>,
}

impl Topology {
    /// Builds the tree of `nodes` under `levels` (node label keys, widest first). Nodes are
    /// ordered by name, so the same nodes in any order give the same tree.
    pub fn new(levels: Vec<String>, nodes: impl IntoIterator<Item = NodeInfo>) -> Topology {
        let mut infos: Vec<NodeInfo> = nodes.into_iter().collect();
        infos.sort_by(|a, b| a.name.cmp(&b.name));
        infos.dedup_by(|a, b| a.name == b.name);

        // Group by the label-value path; BTreeMap keeps paths (and so domain ids) in order.
        let mut paths: BTreeMap<Vec<String>, Vec<NodeInfo>> = BTreeMap::new();
        for info in infos {
            let path = levels
                .iter()
                .map(|l| info.labels.get(l).cloned().unwrap_or_default())
                .collect();
            paths.entry(path).or_default().push(info);
        }

        let root = Domain {
            depth: 0,
            value: String::new(),
            parent: None,
            children: Vec::new(),
            nodes: Vec::new(),
            free: Resources::new(),
        };
        let mut topo = Topology {
            levels,
            domains: vec![root],
            nodes: Vec::new(),
            by_name: BTreeMap::new(),
            journal: Vec::new(),
        };
        // Domains by (parent, value), created breadth-first per path so parents come first.
        let mut index: BTreeMap<(DomainId, String), DomainId> = BTreeMap::new();
        for (path, infos) in paths {
            let mut at = 0;
            for (depth, value) in path.into_iter().enumerate() {
                at = match index.get(&(at, value.clone())) {
                    Some(id) => *id,
                    None => {
                        let id = topo.domains.len();
                        topo.domains.push(Domain {
                            depth: depth + 1,
                            value: value.clone(),
                            parent: Some(at),
                            children: Vec::new(),
                            nodes: Vec::new(),
                            free: Resources::new(),
                        });
                        topo.domains[at].children.push(id);
                        index.insert((at, value), id);
                        id
                    }
                };
            }
            for info in infos {
                let id = topo.nodes.len();
                topo.by_name.insert(info.name.clone(), id);
                topo.domains[at].nodes.push(id);
                topo.nodes.push(NodeState {
                    info,
                    used: Resources::new(),
                    domain: at,
                });
            }
        }
        for id in 0..topo.nodes.len() {
            let free = topo.nodes[id].free();
            topo.for_ancestors(id, |d| d.free.add_all(&free));
        }
        topo
    }

    /// The topology levels, widest first.
    pub fn levels(&self) -> &[String] {
        &self.levels
    }

    /// Every domain; index 0 is the root.
    pub fn domains(&self) -> &[Domain] {
        &self.domains
    }

    /// Every node, in name order.
    pub fn nodes(&self) -> &[NodeState] {
        &self.nodes
    }

    /// The node with this name.
    pub fn node_id(&self, name: &str) -> Option<NodeId> {
        self.by_name.get(name).copied()
    }

    /// The label values from the root down to `domain`.
    pub fn path(&self, domain: DomainId) -> Vec<String> {
        let mut values = Vec::new();
        let mut at = Some(domain);
        while let Some(id) = at {
            if id != 0 {
                values.push(self.domains[id].value.clone());
            }
            at = self.domains[id].parent;
        }
        values.reverse();
        values
    }

    /// Records that a pod using `usage` now runs on `node`.
    pub fn add_usage(&mut self, node: NodeId, usage: &Resources) {
        self.change(node, usage, true);
        self.journal.push(Change::Added(node, usage.clone()));
    }

    /// Records that a pod using `usage` left `node`.
    pub fn remove_usage(&mut self, node: NodeId, usage: &Resources) {
        self.change(node, usage, false);
        self.journal.push(Change::Removed(node, usage.clone()));
    }

    /// The current point in the journal.
    pub fn mark(&self) -> Mark {
        Mark(self.journal.len())
    }

    /// Undoes every change since `mark`, restoring the exact state at that point.
    pub fn rollback(&mut self, mark: Mark) {
        while self.journal.len() > mark.0 {
            match self.journal.pop() {
                Some(Change::Added(node, usage)) => self.change(node, &usage, false),
                Some(Change::Removed(node, usage)) => self.change(node, &usage, true),
                None => break,
            }
        }
    }

    /// Forgets the journal (the changes stay): call between cycles to bound its size.
    pub fn commit(&mut self) {
        self.journal.clear();
    }

    fn change(&mut self, node: NodeId, usage: &Resources, add: bool) {
        let before = self.nodes[node].free();
        if add {
            self.nodes[node].used.add_all(usage);
        } else {
            self.nodes[node].used.saturating_sub_all(usage);
        }
        let after = self.nodes[node].free();
        // Each domain's free is a sum that includes this node's old free exactly, so the
        // subtraction below never saturates and the update is exact.
        self.for_ancestors(node, |d| {
            d.free.saturating_sub_all(&before);
            d.free.add_all(&after);
        });
    }

    fn for_ancestors(&mut self, node: NodeId, mut f: impl FnMut(&mut Domain)) {
        let mut at = Some(self.nodes[node].domain);
        while let Some(id) = at {
            f(&mut self.domains[id]);
            at = self.domains[id].parent;
        }
    }
}
