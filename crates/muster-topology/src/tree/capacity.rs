//! How many pods of one request shape every node and every domain can take, kept current on
//! every usage change so that a placement does not recount the whole fleet.
//!
//! A scheduling cycle places many jobs of few shapes (the same per-pod request, count and
//! selector). The first placement of a shape counts every node once; after that, each change
//! of a node's usage updates the node and its ancestors in every kept shape: O(depth) per
//! shape, instead of O(nodes) per placement.

use std::sync::Arc;

use super::NodeId;
use crate::dense::DenseRequest;

/// How many shapes a topology keeps before it drops the oldest.
pub(crate) const CAPACITY_INDEX_LIMIT: usize = 16;

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
}

impl CapacityIndex {
    /// Sets `node`'s capacity to `pods`, updating the sums of `ancestors` (its domains, the
    /// last-level one first). Each sum includes the node's old value exactly, so the update
    /// is exact.
    pub(crate) fn set(&mut self, node: NodeId, pods: u32, ancestors: &[usize]) {
        let old = self.node[node];
        if old == pods {
            return;
        }
        self.node[node] = pods;
        for &d in ancestors {
            self.domain[d] = self.domain[d] - old + pods;
        }
    }
}
