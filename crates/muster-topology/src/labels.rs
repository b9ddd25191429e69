//! Node labels as small integers: the eligibility pass checks a selector against every node,
//! and comparing numbers in one contiguous array is far cheaper than following each node's
//! label strings around the heap.

use std::collections::BTreeMap;

/// Every node's labels, interned: one symbol table for keys and values, and each node's
/// (key, value) pairs sorted by key symbol, node after node.
#[derive(Clone, Debug, Default)]
pub(crate) struct LabelIndex {
    symbols: BTreeMap<String, u32>,
    pairs: Vec<(u32, u32)>,
    /// Where each node's pairs start in `pairs`; one more entry than nodes.
    start: Vec<usize>,
}

impl LabelIndex {
    pub(crate) fn new() -> LabelIndex {
        LabelIndex {
            start: vec![0],
            ..LabelIndex::default()
        }
    }

    /// Adds the next node's labels.
    pub(crate) fn push_node(&mut self, labels: &BTreeMap<String, String>) {
        let from = self.pairs.len();
        for (key, value) in labels {
            let pair = (self.intern(key), self.intern(value));
            self.pairs.push(pair);
        }
        self.pairs[from..].sort_unstable();
        self.start.push(self.pairs.len());
    }

    fn intern(&mut self, s: &str) -> u32 {
        if let Some(id) = self.symbols.get(s) {
            return *id;
        }
        // More distinct strings than u32 can count cannot occur in a real cluster; saturating
        // keeps the index total without a panic path.
        let id = u32::try_from(self.symbols.len()).unwrap_or(u32::MAX);
        self.symbols.insert(s.to_owned(), id);
        id
    }

    /// `selector` as symbol pairs, or `None` when some key or value is on no node (so no node
    /// matches).
    pub(crate) fn resolve(&self, selector: &BTreeMap<String, String>) -> Option<Vec<(u32, u32)>> {
        selector
            .iter()
            .map(|(k, v)| Some((*self.symbols.get(k)?, *self.symbols.get(v)?)))
            .collect()
    }

    /// Whether node `node` carries every pair of `selector`.
    pub(crate) fn has_all(&self, node: usize, selector: &[(u32, u32)]) -> bool {
        let pairs = &self.pairs[self.start[node]..self.start[node + 1]];
        selector.iter().all(|(key, value)| {
            pairs
                .binary_search_by_key(key, |(k, _)| *k)
                .is_ok_and(|i| pairs[i].1 == *value)
        })
    }
}
