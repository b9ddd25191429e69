//! Cohort limits that can never bind: a lending limit above all the quota in the cohort's
//! subtree, or quota and limits for a (flavor, resource) that no ClusterQueue under the cohort
//! can use. Such a limit is most likely a mistake — a typo in a flavor's name, a limit meant
//! for another level — so it is reported on the Cohort, naming the field and the fix; the
//! tree works as written (the limit simply never binds).

use std::collections::BTreeMap;

use muster_api::Amount;

use super::Layout;

impl Layout {
    /// Per cohort with a limit that can never bind, the first such, as a message naming the
    /// field and the fix. Needs the settled tree (subtree quotas and children).
    pub(super) fn idle_limits(&self) -> BTreeMap<String, String> {
        let nodes = self.parent.len();
        // Whether any queue under each node (or the node itself, a queue) has an entry for
        // each slot: children are deeper, so settle the deepest first.
        let mut usable = vec![vec![false; self.slot_count]; nodes];
        for (q, row) in usable.iter_mut().enumerate().take(self.queue_count) {
            for (slot, cell) in row.iter_mut().enumerate() {
                *cell = self.limits[q][slot].is_some();
            }
        }
        let cohorts = self
            .deepest_first
            .iter()
            .filter(|&&n| n >= self.queue_count);
        for &c in cohorts {
            let row: Vec<bool> = (0..self.slot_count)
                .map(|slot| self.children[c].iter().any(|k| usable[*k][slot]))
                .collect();
            usable[c] = row;
        }
        let slot_names: BTreeMap<usize, (&str, &str)> = self
            .slots
            .iter()
            .flat_map(|(f, rs)| rs.iter().map(move |(r, s)| (*s, (f.as_str(), r.as_str()))))
            .collect();
        let mut problems = BTreeMap::new();
        for (c, usable) in usable.iter().enumerate().skip(self.queue_count) {
            let name = &self.cohorts[c - self.queue_count];
            for (slot, limits) in self.limits[c].iter().enumerate() {
                let (Some(limits), Some((flavor, resource))) = (limits, slot_names.get(&slot))
                else {
                    continue;
                };
                let field = limits.field();
                let problem = if usable[slot] {
                    let within = self.subtree[c][slot];
                    limits.lending_limit.filter(|l| *l > within).map(|l| {
                        let (l, within) = (
                            Amount::from_milli(l).format_for(resource),
                            Amount::from_milli(within).format_for(resource),
                        );
                        format!(
                            "{field}.lendingLimit: {l} is more than the {within} of {resource} in flavor {flavor} within cohort {name} (its own quota and what its members lend it), so it never binds; lower it to at most {within} or remove it"
                        )
                    })
                } else {
                    Some(format!(
                        "{field}: no ClusterQueue under cohort {name} has quota for {resource} in flavor {flavor}, so this quota and its limits never apply; name a flavor and resource its queues use, or remove the entry"
                    ))
                };
                if let Some(problem) = problem {
                    problems.entry(name.clone()).or_insert(problem);
                }
            }
        }
        problems
    }
}
