//! How many pods of one request shape every node and every domain can take, kept current on
//! every usage change so that a placement does not recount the whole fleet.
//!
//! A scheduling cycle places many jobs of few shapes (the same per-pod request, count and
//! selector). The first placement of a shape counts every node once; after that, a node whose
//! usage changed is counted again, with its ancestors' sums updated, when the shape is next
//! placed: O(depth) per changed node, instead of O(nodes) per placement. Each shape keeps its
//! own changed nodes, so a shape not placed for a while is brought up to date only when it is,
//! once per node however often the node changed meanwhile.
//!
//! Beside the counts, each domain with more than [`ROOM_BITS_FROM`] units under it (its nodes
//! in a domain of the last level, its children in any other) keeps one bit per unit telling
//! whether that unit has room for a pod. In a busy fleet most units are full: a placement that
//! splits pods over a block of five hundred hosts finds the few with room by their bits
//! instead of reading every host's count. Fewer units are read as fast as their bits, so
//! smaller domains keep none, and a fleet without a large domain pays nothing for them.

use std::sync::Arc;

use super::{Domain, DomainId, NodeId, StaleNodes};
use crate::dense::DenseRequest;

/// How many shapes a topology keeps before it drops the oldest.
pub(crate) const CAPACITY_INDEX_LIMIT: usize = 16;

/// The fewest units under a domain for it to keep room bits: one word's worth.
pub(crate) const ROOM_BITS_FROM: usize = 64;

/// A unit whose domain keeps no room bits.
const UNTRACKED: u32 = u32::MAX;

/// Where each node's and each domain's room bit is: the same for every shape of one topology.
#[derive(Debug, Default)]
pub(crate) struct RoomLayout {
    /// Per node: its position among its domain's nodes, or [`UNTRACKED`].
    node_slot: Vec<u32>,
    /// Per domain: its position among its parent's children, or [`UNTRACKED`] (the root).
    domain_slot: Vec<u32>,
    /// Per domain: the first word of its bits; then, last, the number of words in all. A
    /// domain that keeps none has as many words as units: none.
    base: Vec<usize>,
    /// Whether any domain keeps room bits.
    any: bool,
}

impl RoomLayout {
    /// The layout of `domains` (as the topology's arena holds them) over `nodes` nodes.
    pub(crate) fn new(domains: &[Domain], nodes: usize) -> RoomLayout {
        let mut node_slot = vec![UNTRACKED; nodes];
        let mut domain_slot = vec![UNTRACKED; domains.len()];
        let mut base = Vec::with_capacity(domains.len() + 1);
        let mut words = 0;
        let slot = |i: usize| u32::try_from(i).unwrap_or(UNTRACKED);
        for d in domains {
            base.push(words);
            let units = d.nodes.len().max(d.children.len());
            if units <= ROOM_BITS_FROM {
                continue;
            }
            words += units.div_ceil(64);
            for (i, &n) in d.nodes.iter().enumerate() {
                node_slot[n] = slot(i);
            }
            for (i, &c) in d.children.iter().enumerate() {
                domain_slot[c] = slot(i);
            }
        }
        base.push(words);
        RoomLayout {
            node_slot,
            domain_slot,
            base,
            any: words > 0,
        }
    }

    /// The room bits of `node` and `domain` counts (every domain's parent from `domains`).
    fn bits(&self, domains: &[Domain], node: &[u32], domain: &[u32]) -> Vec<u64> {
        let mut room = vec![0u64; self.base.last().copied().unwrap_or(0)];
        for (id, d) in domains.iter().enumerate() {
            if self.base[id] == self.base[id + 1] {
                continue;
            }
            for (i, &n) in d.nodes.iter().enumerate() {
                if node[n] > 0 {
                    room[self.base[id] + i / 64] |= 1 << (i % 64);
                }
            }
            for (i, &c) in d.children.iter().enumerate() {
                if domain[c] > 0 {
                    room[self.base[id] + i / 64] |= 1 << (i % 64);
                }
            }
        }
        room
    }

    /// Flips the bit of unit `slot` of `domain`, if the domain keeps bits.
    fn flip(&self, room: &mut [u64], domain: DomainId, slot: u32) {
        if slot != UNTRACKED {
            let slot = slot as usize;
            room[self.base[domain] + slot / 64] ^= 1 << (slot % 64);
        }
    }

    /// The bits of `domain`'s units; `None` when it keeps none.
    pub(crate) fn words<'a>(&self, room: &'a [u64], domain: DomainId) -> Option<&'a [u64]> {
        match (self.base.get(domain), self.base.get(domain + 1)) {
            (Some(&from), Some(&to)) if from < to => room.get(from..to),
            _ => None,
        }
    }
}

/// Pod capacity of one request shape, per node and per domain.
#[derive(Clone, Debug)]
pub(crate) struct CapacityIndex {
    /// Which nodes the shape may use.
    pub(crate) eligible: Arc<[bool]>,
    /// The per-pod request.
    pub(crate) request: DenseRequest,
    /// Pods per node (zero where not eligible).
    pub(crate) node: Vec<u32>,
    /// Pods per domain: the sum over its nodes.
    pub(crate) domain: Vec<u32>,
    /// Per domain, a bit per unit under it with room for a pod, laid out by the topology's
    /// [`RoomLayout`].
    pub(crate) room: Vec<u64>,
    /// Nodes changed since the counts were last brought up to date.
    pub(crate) stale: StaleNodes,
}

impl CapacityIndex {
    /// The index of `node` and `domain` counts, with their room bits.
    pub(crate) fn new(
        eligible: Arc<[bool]>,
        request: DenseRequest,
        node: Vec<u32>,
        domain: Vec<u32>,
        (layout, domains): (&RoomLayout, &[Domain]),
    ) -> CapacityIndex {
        let room = layout.bits(domains, &node, &domain);
        CapacityIndex {
            eligible,
            request,
            node,
            domain,
            room,
            stale: StaleNodes::default(),
        }
    }

    /// Sets `node`'s capacity to `pods`, updating the sums of `ancestors` (its domains, the
    /// last-level one first) and the room bits of those that came to have room or lost it.
    /// Each sum includes the node's old value exactly, so the update is exact.
    #[inline]
    pub(crate) fn set(
        &mut self,
        node: NodeId,
        pods: u32,
        ancestors: &[DomainId],
        layout: &RoomLayout,
    ) {
        let old = self.node[node];
        if old == pods {
            return;
        }
        self.node[node] = pods;
        for &d in ancestors {
            self.domain[d] = self.domain[d] - old + pods;
        }
        if !layout.any || (old == 0) == (pods == 0) {
            // The node neither filled nor emptied: nor did any domain over it.
            return;
        }
        // The node came to have room (or lost it), and so did each of its domains whose sum
        // is now all of the node's (or nothing), up to the first that is not: a domain's sum
        // is at least any unit's under it, so none above that one changed either.
        let now = if old == 0 { pods } else { 0 };
        if let Some(&leaf) = ancestors.first() {
            layout.flip(&mut self.room, leaf, layout.node_slot[node]);
        }
        for pair in ancestors.windows(2) {
            let (d, parent) = (pair[0], pair[1]);
            if self.domain[d] != now {
                break;
            }
            layout.flip(&mut self.room, parent, layout.domain_slot[d]);
        }
    }
}
