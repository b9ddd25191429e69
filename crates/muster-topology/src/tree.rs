//! The domain tree of one flavor's nodes, with free capacity kept per node and per domain.
//!
//! Domains are stored in an arena: index 0 is the root (the whole flavor), then one domain per
//! distinct label-value path at each level, widest first; a parent always has a smaller index
//! than its children, so one reverse pass aggregates anything bottom-up. Changing one node's usage
//! touches only its ancestors: O(depth). Every change is journaled, so a scheduling cycle can
//! place tentatively and roll back to any earlier mark exactly.

mod capacity;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use foldhash::fast::FixedState;
use muster_api::Resources;
use muster_api::resources::names;

use self::capacity::{CAPACITY_INDEX_LIMIT, CapacityIndex, RoomLayout};
use crate::dense::{DEVICE_MILLI, DenseRequest, allocatable, pods_within, registry};
use crate::labels::LabelIndex;
use crate::node::NodeInfo;
use crate::request::{Eligibility, PodSetRequest};

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
    /// Free capacity, milli-units per resource of the topology's registry: the sum of each
    /// node's free capacity under this domain.
    free: Vec<u64>,
}

impl Domain {
    /// A domain with nothing under it yet, of a registry of `width` resources.
    fn empty(depth: usize, value: String, parent: Option<DomainId>, width: usize) -> Domain {
        Domain {
            depth,
            value,
            parent,
            children: Vec::new(),
            nodes: Vec::new(),
            free: vec![0; width],
        }
    }
}

/// A node in the tree.
#[derive(Clone, Debug)]
pub struct NodeState {
    /// What the node is.
    pub info: NodeInfo,
    /// Its domain at the last level.
    pub domain: DomainId,
}

/// A point in the journal to roll back to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark(usize);

/// The pod requests a [`Topology::fill`] keeps off a node, resolved against one topology's
/// resource registry ([`Topology::keep_off`]): (resource index, milli-units) per request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeepOff(Vec<Vec<(usize, u64)>>);

/// One journaled change of a node's usage. Its amounts, (resource index, milli-units), are
/// in the topology's journal of amounts from `from` up to the next change's: every pod of
/// every placement, release and reservation search is a change, and one buffer for all of
/// them costs no allocation each.
#[derive(Clone, Copy, Debug)]
struct Change {
    node: NodeId,
    added: bool,
    from: usize,
}

/// The nodes of one flavor arranged by topology levels.
#[derive(Clone, Debug)]
pub struct Topology {
    levels: Vec<String>,
    /// Every resource any node has allocatable, by name; the index of the dense vectors.
    resources: Vec<String>,
    domains: Vec<Domain>,
    /// Domain ids by depth.
    by_depth: Vec<Vec<DomainId>>,
    nodes: Vec<NodeState>,
    /// Allocatable, `width` milli-unit amounts per node (registry order), node after node.
    /// Amounts live in two flat arrays rather than in each node so that the capacity pass over
    /// every node reads memory in order.
    alloc: Vec<u64>,
    /// What bound pods use (may exceed allocatable: pods Muster did not place), laid out as
    /// `alloc`.
    used: Vec<u64>,
    width: usize,
    /// Node ids by name: only ever looked up, never walked, so its order cannot show; hashed
    /// with foldhash (a fixed seed) rather than SipHash, as every booking by name asks it.
    by_name: HashMap<String, NodeId, FixedState>,
    journal: Vec<Change>,
    /// The amounts of the journal's changes, change after change.
    journal_amounts: Vec<(usize, u64)>,
    /// Scratch space for a node's domains while a change updates the capacity indexes.
    ancestors: Vec<DomainId>,
    labels: LabelIndex,
    /// Pod capacity of the request shapes placed most recently, kept current: each counted
    /// again for the nodes changed since it was last read (its own stale nodes) when a
    /// placement next reads it.
    capacities: Vec<CapacityIndex>,
    /// Where the capacity indexes keep each node's and domain's room bit (fixed once the
    /// domains are).
    room_layout: Arc<RoomLayout>,
    /// Node eligibility per [`Eligibility`], in the order first asked for (a handful in
    /// practice: compared in place, they cost less to find than a spelled-out key).
    eligible: Vec<(Eligibility, Arc<[bool]>)>,
    /// Registry indices of the per-device resources ([`names::GPU_DEVICE_PREFIX`]), device 0
    /// first: as many as the node with the most tracked GPUs has; empty when no node's GPUs
    /// are tracked one by one ([`NodeInfo::gpu_devices`]).
    devices: Vec<usize>,
    /// Registry index of [`names::GPU_SHARE`] (set when `devices` is not empty).
    share: Option<usize>,
    /// Registry index of `nvidia.com/gpu`.
    gpu: Option<usize>,
    /// Whether a placement that fails says why in words ([`NoFit::message`]); what kind of
    /// failure it is, and the figures, are told either way.
    ///
    /// [`NoFit::message`]: crate::NoFit::message
    words_failures: bool,
}

/// How many distinct eligibility vectors a topology keeps before it starts over (each costs one
/// byte per node).
const ELIGIBILITY_CACHE_LIMIT: usize = 256;

/// The units of one domain with room for a pod of one shape ([`Topology::with_room`]), in the
/// domain's order: the set bits of its words, lowest first.
pub(crate) struct WithRoom<'a> {
    words: &'a [u64],
    units: &'a [usize],
    /// The word being read, and its bits not yet given.
    word: usize,
    left: u64,
}

impl WithRoom<'_> {
    /// How many units have room.
    pub(crate) fn how_many(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }
}

impl Iterator for WithRoom<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        while self.left == 0 {
            self.word += 1;
            self.left = *self.words.get(self.word)?;
        }
        let bit = self.left.trailing_zeros() as usize;
        self.left &= self.left - 1;
        self.units.get(self.word * 64 + bit).copied()
    }
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

        let (resources, most_devices) = registry(paths.values().flatten());
        let width = resources.len();
        let node_count = paths.values().map(Vec::len).sum::<usize>();
        let root = Domain::empty(0, String::new(), None, width);
        let mut topo = Topology {
            by_depth: vec![Vec::new(); levels.len() + 1],
            levels,
            resources,
            domains: vec![root],
            nodes: Vec::with_capacity(node_count),
            alloc: Vec::with_capacity(node_count * width),
            used: Vec::new(),
            width,
            by_name: HashMap::default(),
            journal: Vec::new(),
            journal_amounts: Vec::new(),
            ancestors: Vec::new(),
            labels: LabelIndex::new(),
            capacities: Vec::new(),
            room_layout: Arc::default(),
            eligible: Vec::new(),
            devices: Vec::new(),
            share: None,
            gpu: None,
            words_failures: true,
        };
        topo.devices = (0..most_devices)
            .filter_map(|d| topo.resource_index(&names::gpu_device(d)))
            .collect();
        topo.share = topo.resource_index(names::GPU_SHARE);
        topo.gpu = topo.resource_index(names::NVIDIA_GPU);
        // Domains by (parent, value), created breadth-first per path so parents come first.
        let mut index: BTreeMap<(DomainId, String), DomainId> = BTreeMap::new();
        for (path, infos) in paths {
            let mut at = 0;
            for (depth, value) in path.into_iter().enumerate() {
                at = match index.get(&(at, value.clone())) {
                    Some(id) => *id,
                    None => {
                        let id = topo.domains.len();
                        topo.domains
                            .push(Domain::empty(depth + 1, value.clone(), Some(at), width));
                        topo.domains[at].children.push(id);
                        index.insert((at, value), id);
                        id
                    }
                };
            }
            for info in infos {
                let id = topo.nodes.len();
                topo.by_name.insert(info.name.clone(), id);
                topo.labels.push_node(&info.labels);
                topo.domains[at].nodes.push(id);
                let devices = info.gpu_devices();
                topo.alloc.extend(
                    topo.resources
                        .iter()
                        .map(|r| allocatable(&info, devices, r)),
                );
                topo.nodes.push(NodeState { info, domain: at });
            }
        }
        topo.domains.shrink_to_fit();
        topo.room_layout = Arc::new(RoomLayout::new(&topo.domains, topo.nodes.len()));
        for id in 0..topo.domains.len() {
            let depth = topo.domains[id].depth;
            topo.by_depth[depth].push(id);
        }
        topo.used = vec![0; topo.alloc.len()];
        for id in 0..topo.nodes.len() {
            let alloc = topo.alloc[id * width..(id + 1) * width].to_vec();
            topo.for_ancestors(id, |d| {
                for (f, a) in d.free.iter_mut().zip(&alloc) {
                    *f = f.saturating_add(*a);
                }
            });
        }
        topo
    }

    /// The domains at `depth` (0: the root; `i + 1`: level `i`).
    pub fn domains_at_depth(&self, depth: usize) -> &[DomainId] {
        self.by_depth.get(depth).map_or(&[], Vec::as_slice)
    }

    /// `requests` against this topology's resource registry.
    pub fn dense(&self, requests: &Resources) -> DenseRequest {
        requests
            .iter()
            .map(|(name, amount)| Some((self.resource_index(name)?, amount.milli())))
            .collect()
    }

    fn resource_index(&self, name: &str) -> Option<usize> {
        self.resources
            .binary_search_by(|r| r.as_str().cmp(name))
            .ok()
    }

    /// How many pods needing `request` fit on `node` now, at most `cap`.
    pub fn pods_fitting(&self, node: NodeId, request: &DenseRequest, cap: u32) -> u32 {
        let fit = pods_within(request, cap, |k| self.free_of(node, k));
        if fit == 0 || self.devices.is_empty() {
            return fit;
        }
        fit.min(self.device_bound(node, request, |k| self.free_of(node, k)))
    }

    /// How many pods needing `request` would fit on `node` if it were empty, at most `cap`.
    pub fn pods_fitting_empty(&self, node: NodeId, request: &DenseRequest, cap: u32) -> u32 {
        let alloc = &self.alloc[node * self.width..];
        let fit = pods_within(request, cap, |k| alloc[k]);
        if fit == 0 || self.devices.is_empty() {
            return fit;
        }
        fit.min(self.device_bound(node, request, |k| alloc[k]))
    }

    /// The GPU devices of `node` tracked one by one (those with an allocatable amount: a
    /// node's devices are numbered from 0).
    fn tracked_devices(&self, node: NodeId) -> &[usize] {
        let count = self
            .devices
            .iter()
            .take_while(|&&k| self.alloc[node * self.width + k] > 0)
            .count();
        &self.devices[..count]
    }

    /// How many pods of `request` the GPU devices of `node` hold, given each device's `free`
    /// amount: per device, as many shares as fit whole in what it has left (two 600m pods
    /// never share one GPU); or, for pods of whole GPUs, as many as the untouched devices
    /// make up. `u32::MAX` for a node whose devices are not tracked or a request of no GPU.
    fn device_bound(
        &self,
        node: NodeId,
        request: &DenseRequest,
        free: impl Fn(usize) -> u64,
    ) -> u32 {
        let Some(request) = request else { return 0 };
        let devices = self.tracked_devices(node);
        if devices.is_empty() {
            return u32::MAX;
        }
        let amount = |index: Option<usize>| {
            index.and_then(|i| request.iter().find(|(k, _)| *k == i).map(|(_, m)| *m))
        };
        if let Some(share) = amount(self.share).filter(|s| *s > 0) {
            let pods: u64 = devices.iter().map(|&k| free(k) / share).sum();
            return u32::try_from(pods).unwrap_or(u32::MAX);
        }
        match amount(self.gpu).filter(|g| *g > 0) {
            Some(gpus) => {
                let whole = gpus.div_ceil(DEVICE_MILLI);
                let untouched = devices
                    .iter()
                    .filter(|&&k| free(k) == self.alloc[node * self.width + k])
                    .count() as u64;
                u32::try_from(untouched / whole).unwrap_or(u32::MAX)
            }
            None => u32::MAX,
        }
    }

    /// The devices a pod of `requests` takes on `node` (what it books there with them is
    /// [`crate::on_devices`], as [`Topology::add_pod`] books it): for part of a GPU, the device
    /// with the least left that holds it (ties to the lowest index); for whole GPUs, the
    /// untouched devices with the lowest indices. None on a node whose devices are not
    /// tracked, or for a pod of no GPU. `None` when the devices cannot hold the pod.
    pub fn device_choice(&self, node: NodeId, requests: &Resources) -> Option<Vec<u32>> {
        let devices = self.tracked_devices(node);
        if devices.is_empty() {
            return Some(Vec::new());
        }
        let free = |d: usize| self.free_of(node, devices[d]);
        let share = requests.get(names::GPU_SHARE).milli();
        let chosen: Vec<usize> = if share > 0 {
            let best = (0..devices.len())
                .filter(|&d| free(d) >= share)
                .min_by_key(|&d| (free(d), d))?;
            vec![best]
        } else {
            let whole = requests
                .get(names::NVIDIA_GPU)
                .milli()
                .div_ceil(DEVICE_MILLI);
            let whole = usize::try_from(whole).ok()?;
            if whole == 0 {
                return Some(Vec::new());
            }
            let untouched: Vec<usize> = (0..devices.len())
                .filter(|&d| free(d) == DEVICE_MILLI)
                .take(whole)
                .collect();
            if untouched.len() < whole {
                return None;
            }
            untouched
        };
        Some(
            chosen
                .into_iter()
                .filter_map(|d| u32::try_from(d).ok())
                .collect(),
        )
    }

    /// Whether a placement that fails words its reason ([`crate::NoFit::message`]; on by
    /// default). Off, the message is left empty and everything else about the failure is
    /// the same: for callers that read only whether and where pods fit, such as a
    /// forecast's forward runs, which fail tens of thousands of placements and read none of
    /// their messages.
    pub fn set_words_failures(&mut self, on: bool) {
        self.words_failures = on;
    }

    /// `message()` where this topology words failures ([`Topology::set_words_failures`]),
    /// else nothing: the words are built only for a reader.
    pub(crate) fn word(&self, message: impl FnOnce() -> String) -> String {
        if self.words_failures {
            message()
        } else {
            String::new()
        }
    }

    /// Whether any node's GPUs are tracked one by one (pods asking for part of a GPU can fit
    /// nowhere else).
    pub fn tracks_devices(&self) -> bool {
        !self.devices.is_empty()
    }

    /// What is left of each tracked GPU device of `node`, milli-GPU, device 0 first.
    pub fn device_free(&self, node: NodeId) -> Vec<u64> {
        self.tracked_devices(node)
            .iter()
            .map(|&k| self.free_of(node, k))
            .collect()
    }

    /// Which nodes pods of `req` may use at all (readiness, selectors, affinity, taints), by node
    /// id. Eligibility does not depend on usage, so it is computed once per distinct selector,
    /// affinity and tolerations and kept for the topology's lifetime: the many jobs of a queue
    /// that share a flavor pay for the label checks once.
    pub fn eligibility(&mut self, req: &PodSetRequest) -> Arc<[bool]> {
        if let Some((_, known)) = self.eligible.iter().find(|(e, _)| req.has_eligibility(e)) {
            return Arc::clone(known);
        }
        let selector = self.labels.resolve(&req.node_selector);
        let computed: Arc<[bool]> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(id, n)| {
                selector.as_ref().is_some_and(|selector| {
                    n.info.schedulable
                        && self.labels.has_all(id, selector)
                        && req.accepts_affinity_and_taints(&n.info)
                })
            })
            .collect();
        if self.eligible.len() >= ELIGIBILITY_CACHE_LIMIT {
            self.eligible.clear();
        }
        self.eligible
            .push((req.eligibility(), Arc::clone(&computed)));
        computed
    }

    /// The index of `req`'s capacity per node and per domain (`eligible` as from
    /// [`Topology::eligibility`]), built on first use and kept current on every change.
    /// `request` is `req`'s requests resolved by [`Topology::dense`], which a placement does
    /// once for the index and every pod it books.
    pub(crate) fn capacity_index(
        &mut self,
        request: &DenseRequest,
        eligible: &Arc<[bool]>,
    ) -> usize {
        // Capacities are not capped at the pod set's count: how much room a node or domain has
        // beyond the count is what lets best fit find the tightest one (and spread the
        // emptiest), even for one-pod sets.
        // One eligibility is one `Arc` from the cache above, so a shape is its eligibility's
        // `Arc` and its dense request.
        if let Some(i) = self
            .capacities
            .iter()
            .position(|c| Arc::ptr_eq(&c.eligible, eligible) && c.request == *request)
        {
            self.refresh_capacity(i);
            return i;
        }
        let node: Vec<u32> = (0..self.nodes.len())
            .map(|id| {
                if eligible.get(id).copied().unwrap_or(false) {
                    self.pods_fitting(id, request, u32::MAX)
                } else {
                    0
                }
            })
            .collect();
        let domain = self.sum_domains(&node);
        if self.capacities.len() >= CAPACITY_INDEX_LIMIT {
            self.capacities.remove(0);
        }
        self.capacities.push(CapacityIndex::new(
            Arc::clone(eligible),
            request.clone(),
            node,
            domain,
            (&self.room_layout, &self.domains),
        ));
        self.capacities.len() - 1
    }

    /// Counts again, in capacity index `index`, the pods that fit on each node changed since
    /// it was last read: it is then what a change-by-change update would have made it (a
    /// count, a domain's sum and a room bit follow from the node's free resources alone,
    /// whatever the changes in between). Each index keeps its own stale nodes: a try fills
    /// reserved nodes and rolls them back, a reservation search books and rolls back pods on
    /// the same nodes many times, and an index is counted again only for the nodes changed
    /// since it was last read, once each however often they changed, and only when a
    /// placement of its shape reads it — not every index at every placement.
    fn refresh_capacity(&mut self, index: usize) {
        let Some(c) = self.capacities.get_mut(index) else {
            return;
        };
        if c.stale.is_empty() {
            return;
        }
        let mut stale = std::mem::take(&mut c.stale);
        let mut ancestors = std::mem::take(&mut self.ancestors);
        for node in stale.drain() {
            let c = &self.capacities[index];
            if !c.eligible.get(node).copied().unwrap_or(false) {
                continue;
            }
            let pods = self.pods_fitting(node, &c.request, u32::MAX);
            ancestors.clear();
            let mut at = Some(self.nodes[node].domain);
            while let Some(id) = at {
                ancestors.push(id);
                at = self.domains[id].parent;
            }
            self.capacities[index].set(node, pods, &ancestors, &self.room_layout);
        }
        self.capacities[index].stale = stale;
        self.ancestors = ancestors;
    }

    /// A capacity index by the number [`Topology::capacity_index`] gave, as it was made
    /// current then: only a placement reads one, between asking for it and booking its pods.
    pub(crate) fn capacity(&self, index: usize) -> (&[u32], &[u32]) {
        debug_assert!(
            self.capacities
                .get(index)
                .is_none_or(|c| c.stale.is_empty()),
            "a capacity index read before a refresh"
        );
        self.capacities
            .get(index)
            .map_or((&[], &[]), |c| (c.node.as_slice(), c.domain.as_slice()))
    }

    /// The units under `domain` (its nodes in a domain of the last level, else its child
    /// domains) with room for a pod of capacity index `index`'s shape, in the domain's order,
    /// and how many there are, read from the index's room bits: in a busy fleet most units are
    /// full, and this never looks at them. `None` for a domain that keeps no room bits (one of
    /// few units: reading their counts costs as little).
    pub(crate) fn with_room(&self, index: usize, domain: DomainId) -> Option<WithRoom<'_>> {
        debug_assert!(
            self.capacities
                .get(index)
                .is_none_or(|c| c.stale.is_empty()),
            "room bits read before a refresh"
        );
        let words = self
            .room_layout
            .words(&self.capacities.get(index)?.room, domain)?;
        let d = self.domains.get(domain)?;
        let units = if d.children.is_empty() {
            &d.nodes
        } else {
            &d.children
        };
        Some(WithRoom {
            words,
            units,
            word: 0,
            left: words.first().copied().unwrap_or(0),
        })
    }

    /// Sums per-node pod counts into every domain.
    pub(crate) fn sum_domains(&self, node: &[u32]) -> Vec<u32> {
        let mut domain = vec![0u32; self.domains.len()];
        for (id, n) in self.nodes.iter().enumerate() {
            domain[n.domain] = domain[n.domain].saturating_add(node[id]);
        }
        // Children come after parents in the arena: one reverse pass sums bottom-up.
        for id in (1..domain.len()).rev() {
            if let Some(parent) = self.domains[id].parent {
                domain[parent] = domain[parent].saturating_add(domain[id]);
            }
        }
        domain
    }

    /// What bound pods use on `node`.
    pub fn used(&self, node: NodeId) -> Resources {
        self.to_resources(&self.used[node * self.width..(node + 1) * self.width])
    }

    /// Allocatable minus used on `node`, never below zero.
    pub fn free(&self, node: NodeId) -> Resources {
        self.to_resources(
            &(0..self.width)
                .map(|k| self.free_of(node, k))
                .collect::<Vec<_>>(),
        )
    }

    /// The free capacity under `domain`: the sum of its nodes' free capacity.
    pub fn domain_free(&self, domain: DomainId) -> Resources {
        self.to_resources(&self.domains[domain].free)
    }

    fn to_resources(&self, dense: &[u64]) -> Resources {
        self.resources
            .iter()
            .zip(dense)
            .map(|(name, milli)| (name.clone(), muster_api::Amount::from_milli(*milli)))
            .collect()
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

    /// Marks `node` ready and schedulable or not (a node failing, being repaired, cordoned
    /// or joining). A cluster change, not a tentative one: it is not journaled. Node
    /// eligibility and the kept capacity indexes depend on it, so they are dropped and
    /// rebuilt on the next placement.
    pub fn set_schedulable(&mut self, node: NodeId, schedulable: bool) {
        let Some(n) = self.nodes.get_mut(node) else {
            return;
        };
        if n.info.schedulable != schedulable {
            n.info.schedulable = schedulable;
            self.eligible.clear();
            self.capacities.clear();
        }
    }

    /// Every node under `domain`, in arena order.
    pub fn nodes_under(&self, domain: DomainId) -> Vec<NodeId> {
        let mut out = Vec::new();
        let mut stack = vec![domain];
        while let Some(id) = stack.pop() {
            let Some(d) = self.domains.get(id) else {
                continue;
            };
            out.extend(&d.nodes);
            stack.extend(d.children.iter().rev());
        }
        out
    }

    /// The domain at `depth` whose label value is `value`, if any.
    pub fn domain_by_value(&self, depth: usize, value: &str) -> Option<DomainId> {
        self.domains_at_depth(depth)
            .iter()
            .copied()
            .find(|&id| self.domains[id].value == value)
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

    /// Records that a pod using `usage` now runs on `node`. Resources no node has are ignored:
    /// they can never be free, so they never change a placement.
    pub fn add_usage(&mut self, node: NodeId, usage: &Resources) {
        self.journal_change(node, usage, true);
    }

    /// `requests` as [`Topology::fill`] compares them with a node's free resources: each
    /// request's amounts against this topology's resource registry, resolved once for every
    /// node a fill looks at. A request for a resource no node has never has room, so it is
    /// left out.
    pub fn keep_off(&self, requests: &[&Resources]) -> KeepOff {
        KeepOff(requests.iter().filter_map(|r| self.dense(r)).collect())
    }

    /// Takes everything still free on `node` when it has room for one pod of any of
    /// `keep_off` (compared resource by resource as a node's free resources are, devices
    /// aside), and returns what it took; `None` when the node has no room for any of them and
    /// stays as it is. Journaled like [`Topology::add_usage`]. The dense twin of reading
    /// [`Topology::free`] and adding it back as usage, without building either by name: a
    /// cycle fills every reserved node for every job it tries, and most of them have no room.
    pub fn fill(&mut self, node: NodeId, keep_off: &KeepOff) -> Option<Vec<(usize, u64)>> {
        if node >= self.nodes.len() {
            return None;
        }
        let room = keep_off.0.iter().any(|request| {
            request
                .iter()
                .all(|&(k, milli)| self.free_of(node, k) >= milli)
        });
        if !room {
            return None;
        }
        let free: Vec<(usize, u64)> = (0..self.width)
            .map(|k| (k, self.free_of(node, k)))
            .collect();
        self.change(node, &free, true);
        self.journal.push(Change {
            node,
            added: true,
            from: self.journal_amounts.len(),
        });
        self.journal_amounts.extend_from_slice(&free);
        Some(free)
    }

    /// `usage` (dense, as [`Topology::fill`] returns it) by resource name.
    pub fn resources_of(&self, usage: &[(usize, u64)]) -> Resources {
        usage
            .iter()
            .filter_map(|&(k, milli)| {
                Some((
                    self.resources.get(k)?.clone(),
                    muster_api::Amount::from_milli(milli),
                ))
            })
            .collect()
    }

    /// Records that a pod using `usage` left `node`.
    pub fn remove_usage(&mut self, node: NodeId, usage: &Resources) {
        self.journal_change(node, usage, false);
    }

    /// Records that a pod of `requests` now runs on `node` on the GPU `devices` it took (none
    /// where GPUs are not tracked one by one): [`Topology::add_usage`] of
    /// [`crate::on_devices`]`(requests, devices)`, without building that usage by name. Every
    /// pod of every job that starts, and of every release a reservation search tries, is
    /// booked through here.
    pub fn add_pod(&mut self, node: NodeId, requests: &Resources, devices: &[u32]) {
        self.journal_pod(node, requests, devices, true);
    }

    /// [`Topology::add_pod`] of a pod that took no GPU devices one by one, with its requests
    /// as [`Topology::dense`] resolved them: a placement resolves a pod set's requests once for
    /// all its pods. Only for requests that resolved (`Some`): `None` (a resource no node has)
    /// books nothing here, where `add_pod` would book the resources the registry knows, so a
    /// caller holding `None` books through `add_pod`.
    pub(crate) fn add_pod_dense(&mut self, node: NodeId, request: &DenseRequest) {
        let from = self.journal_amounts.len();
        if let Some(amounts) = request {
            self.journal_amounts.extend_from_slice(amounts);
        }
        self.apply_journaled(node, from, true);
    }

    /// Takes pods of one pod set's `requests` off their nodes, each given by name with the GPU
    /// devices it took ([`Topology::remove_pod`] of each; a name the topology does not hold is
    /// passed over). A job's end takes every pod of a set off at once: the requests are
    /// resolved by name for the first pod that took no devices one by one, and the others
    /// copy what it journaled.
    pub fn remove_pods<'p>(
        &mut self,
        pods: impl IntoIterator<Item = (&'p str, &'p [u32])>,
        requests: &Resources,
    ) {
        // Where the amounts of the first pod without devices are in the journal's buffer.
        let mut resolved: Option<(usize, usize)> = None;
        for (name, devices) in pods {
            let Some(node) = self.node_id(name) else {
                continue;
            };
            let from = self.journal_amounts.len();
            match resolved {
                Some((first, past)) if devices.is_empty() => {
                    self.journal_amounts.extend_from_within(first..past);
                    self.apply_journaled(node, from, false);
                }
                _ => {
                    self.journal_pod(node, requests, devices, false);
                    if devices.is_empty() {
                        resolved = Some((from, self.journal_amounts.len()));
                    }
                }
            }
        }
    }

    /// Records that a pod of `requests` on `devices` left `node`: the reverse of
    /// [`Topology::add_pod`].
    pub fn remove_pod(&mut self, node: NodeId, requests: &Resources, devices: &[u32]) {
        self.journal_pod(node, requests, devices, false);
    }

    /// [`Topology::journal_change`] of what a pod of `requests` on `devices` uses: its
    /// requests, but for its share of a GPU when it took devices, and each device's part.
    fn journal_pod(&mut self, node: NodeId, requests: &Resources, devices: &[u32], added: bool) {
        let from = self.journal_amounts.len();
        for (name, amount) in requests.iter() {
            if !devices.is_empty() && name == names::GPU_SHARE {
                continue;
            }
            if let Some(k) = self.resource_index(name) {
                self.journal_amounts.push((k, amount.milli()));
            }
        }
        if !devices.is_empty() {
            let share = requests.get(names::GPU_SHARE).milli();
            let each = if share == 0 { DEVICE_MILLI } else { share };
            for &d in devices {
                // Every device up to the most any node has is registered, in order.
                let k = match usize::try_from(d).ok().and_then(|d| self.devices.get(d)) {
                    Some(&k) => Some(k),
                    None => self.resource_index(&names::gpu_device(d)),
                };
                if let Some(k) = k {
                    self.journal_amounts.push((k, each));
                }
            }
        }
        self.apply_journaled(node, from, added);
    }

    /// Adds (or takes off) `usage` on `node` and journals it: its known resources are
    /// resolved into the journal's amounts, and the change reads them from there.
    fn journal_change(&mut self, node: NodeId, usage: &Resources, added: bool) {
        let from = self.journal_amounts.len();
        for (name, amount) in usage.iter() {
            if let Some(k) = self.resource_index(name) {
                self.journal_amounts.push((k, amount.milli()));
            }
        }
        self.apply_journaled(node, from, added);
    }

    /// Adds (or takes off) on `node` the amounts the journal's buffer holds from `from` on,
    /// and journals the change: every booking resolves its amounts into the buffer first.
    fn apply_journaled(&mut self, node: NodeId, from: usize, added: bool) {
        let amounts = std::mem::take(&mut self.journal_amounts);
        self.change(node, &amounts[from..], added);
        self.journal_amounts = amounts;
        self.journal.push(Change { node, added, from });
    }

    /// The current point in the journal.
    pub fn mark(&self) -> Mark {
        Mark(self.journal.len())
    }

    /// Undoes every change since `mark`, restoring the exact state at that point.
    pub fn rollback(&mut self, mark: Mark) {
        let mut amounts = std::mem::take(&mut self.journal_amounts);
        while self.journal.len() > mark.0 {
            let Some(c) = self.journal.pop() else {
                break;
            };
            self.change(c.node, &amounts[c.from..], !c.added);
            amounts.truncate(c.from);
        }
        self.journal_amounts = amounts;
    }

    /// Forgets the journal (the changes stay): call between cycles to bound its size.
    pub fn commit(&mut self) {
        self.journal.clear();
        self.journal_amounts.clear();
    }

    fn change(&mut self, node: NodeId, usage: &[(usize, u64)], add: bool) {
        for &(k, milli) in usage {
            let before = self.free_of(node, k);
            let used = &mut self.used[node * self.width + k];
            *used = if add {
                used.saturating_add(milli)
            } else {
                used.saturating_sub(milli)
            };
            let after = self.free_of(node, k);
            // Each domain's free is a sum that includes this node's old free exactly, so the
            // subtraction never saturates and the update is exact.
            self.for_ancestors(node, |d| d.free[k] = d.free[k] - before + after);
        }
        let count = self.nodes.len();
        for c in &mut self.capacities {
            c.stale.mark(node, count);
        }
    }

    fn free_of(&self, node: NodeId, k: usize) -> u64 {
        let at = node * self.width + k;
        self.alloc[at].saturating_sub(self.used[at])
    }

    fn for_ancestors(&mut self, node: NodeId, mut f: impl FnMut(&mut Domain)) {
        let mut at = Some(self.nodes[node].domain);
        while let Some(id) = at {
            f(&mut self.domains[id]);
            at = self.domains[id].parent;
        }
    }
}

/// Nodes marked since they were last drained, each once, in the order first marked.
#[derive(Clone, Debug, Default)]
pub(crate) struct StaleNodes {
    nodes: Vec<NodeId>,
    /// Per node: whether it is in `nodes` (as long as the topology's nodes, once any is
    /// marked).
    marked: Vec<bool>,
}

impl StaleNodes {
    /// Marks `node` of a topology of `node_count` nodes.
    fn mark(&mut self, node: NodeId, node_count: usize) {
        if self.marked.len() != node_count {
            self.marked.resize(node_count, false);
        }
        if let Some(marked) = self.marked.get_mut(node)
            && !*marked
        {
            *marked = true;
            self.nodes.push(node);
        }
    }

    fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The marked nodes, unmarked as they are taken.
    fn drain(&mut self) -> impl Iterator<Item = NodeId> + '_ {
        let marked = &mut self.marked;
        self.nodes.drain(..).inspect(move |&node| {
            if let Some(m) = marked.get_mut(node) {
                *m = false;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use muster_api::{Amount, Resources};

    use super::Topology;
    use crate::request::{Constraint, PodSetRequest};
    use crate::{NodeInfo, Rng};

    fn gpus(n: u64) -> Resources {
        [("nvidia.com/gpu".to_owned(), Amount::from_units(n))]
            .into_iter()
            .collect()
    }

    /// 300 nodes of 8 GPUs in three blocks of unequal size (one of 200: its units span
    /// four words of bits), under `levels` of "block" and, optionally, "host".
    fn fleet(levels: &[&str]) -> Topology {
        let nodes = (0..300).map(|i| NodeInfo {
            name: format!("n{i:03}"),
            labels: BTreeMap::from([
                (
                    "block".to_owned(),
                    format!("b{}", usize::from(i >= 200) + usize::from(i >= 250)),
                ),
                ("host".to_owned(), format!("n{i:03}")),
            ]),
            taints: Vec::new(),
            allocatable: gpus(8),
            schedulable: true,
        });
        Topology::new(levels.iter().map(|l| (*l).to_owned()).collect(), nodes)
    }

    /// A pod booked by its requests resolved once (`add_pod_dense`) leaves every node and
    /// domain as booking it by name (`add_pod`) does, and rolls back the same way.
    #[test]
    fn a_pod_booked_by_number_is_booked_as_by_name() {
        let (mut by_name, mut by_number) = (fleet(&["block", "host"]), fleet(&["block", "host"]));
        let requests = gpus(3);
        let dense = by_number.dense(&requests);
        assert!(dense.is_some());
        let (name_mark, number_mark) = (by_name.mark(), by_number.mark());
        for node in [0, 1, 1, 250, 299] {
            by_name.add_pod(node, &requests, &[]);
            by_number.add_pod_dense(node, &dense);
        }
        let same = |a: &Topology, b: &Topology| {
            (0..a.nodes().len()).all(|n| a.free(n) == b.free(n))
                && (0..a.domains().len()).all(|d| a.domain_free(d) == b.domain_free(d))
        };
        assert!(same(&by_name, &by_number));
        assert_eq!(by_name.free(1), gpus(2));
        by_name.rollback(name_mark);
        by_number.rollback(number_mark);
        assert!(same(&by_name, &by_number));
        assert_eq!(by_number.free(1), gpus(8));
    }

    /// What the room bits say of every domain equals what its units' counts say, after every
    /// change, rollback and commit, for every kept shape.
    #[test]
    fn room_bits_follow_the_counts_through_changes_and_rollbacks() {
        for levels in [&["block"][..], &["block", "host"][..]] {
            let mut topo = fleet(levels);
            let mut rng = Rng::new(7);
            let requests: Vec<PodSetRequest> = [1, 3, 8]
                .iter()
                .map(|&g| PodSetRequest {
                    name: "p".to_owned(),
                    count: 1,
                    requests: gpus(g),
                    node_selector: BTreeMap::new(),
                    affinity: Vec::new(),
                    tolerations: Vec::new(),
                    constraint: Constraint::None,
                    whole_gpus: false,
                })
                .collect();
            let shapes = |topo: &mut Topology| -> Vec<usize> {
                requests
                    .iter()
                    .map(|req| {
                        let eligible = topo.eligibility(req);
                        topo.capacity_index(&topo.dense(&req.requests), &eligible)
                    })
                    .collect()
            };
            shapes(&mut topo);
            let mut used = vec![0u64; 300];
            let mut kept = 0;
            for step in 0..3_000 {
                let mark = topo.mark();
                for _ in 0..rng.below(20) {
                    let node = rng.below(300);
                    if rng.below(2) == 0 && used[node] < 8 {
                        let g = 1 + rng.below(usize::try_from(8 - used[node]).unwrap_or(1)) as u64;
                        topo.add_usage(node, &gpus(g));
                        used[node] += g;
                    } else if used[node] > 0 {
                        topo.remove_usage(node, &gpus(used[node]));
                        used[node] = 0;
                    }
                }
                if step % 3 == 0 {
                    topo.rollback(mark);
                    used = (0..300)
                        .map(|n| topo.used(n).get("nvidia.com/gpu").milli() / 1000)
                        .collect();
                } else {
                    topo.commit();
                }
                // A placement asks for its index, which counts the changed nodes again: the
                // counts are then those of the nodes as they are.
                for (index, req) in shapes(&mut topo).into_iter().zip(&requests) {
                    let (node, domain) = topo.capacity(index);
                    let dense = topo.dense(&req.requests);
                    let counted: Vec<u32> = (0..300)
                        .map(|n| topo.pods_fitting(n, &dense, u32::MAX))
                        .collect();
                    assert_eq!(node, counted.as_slice(), "levels {levels:?}, step {step}");
                    assert_eq!(domain, topo.sum_domains(&counted).as_slice());
                    for (id, d) in topo.domains().iter().enumerate() {
                        let expected: Vec<usize> = if d.children.is_empty() {
                            d.nodes.iter().copied().filter(|&n| node[n] > 0).collect()
                        } else {
                            d.children
                                .iter()
                                .copied()
                                .filter(|&c| domain[c] > 0)
                                .collect()
                        };
                        let Some(with_room) = topo.with_room(index, id) else {
                            // Only a domain of more than one word's units keeps bits.
                            assert!(d.nodes.len().max(d.children.len()) <= 64, "domain {id}");
                            continue;
                        };
                        assert_eq!(with_room.how_many(), expected.len());
                        let found: Vec<usize> = with_room.collect();
                        assert_eq!(
                            found, expected,
                            "levels {levels:?}, step {step}, domain {id}"
                        );
                        kept += 1;
                    }
                }
            }
            // The block of 200 (and, under hosts, the block's 200 hosts) kept bits each time.
            assert!(kept >= 3_000, "levels {levels:?}: {kept}");
        }
    }
}
