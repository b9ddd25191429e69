//! The fleet changing under a run: nodes failing at random and being repaired, and pools
//! joining or leaving at the times the scenario sets.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use muster_admission::Scheduler;

use super::Books;
use crate::scenario::Loaded;

/// Node failures and repairs in virtual time.
pub(super) struct Failures {
    rng: crate::trace::Rng,
    mtbf: f64,
    repair: i64,
    /// (time, node index) of coming failures.
    breakdowns: BinaryHeap<Reverse<(i64, usize)>>,
    /// (time, node index) of coming repairs.
    repairs: BinaryHeap<Reverse<(i64, usize)>>,
}

impl Failures {
    pub(super) fn new(loaded: &Loaded) -> Failures {
        let spec = loaded.scenario.failures.as_ref();
        let mut f = Failures {
            rng: crate::trace::Rng::new(loaded.seed.or(spec.and_then(|s| s.seed)).unwrap_or(1)),
            mtbf: spec.map_or(0.0, |s| s.mtbf_hours * 3600.0),
            #[expect(
                clippy::cast_possible_truncation,
                reason = "hours to seconds, far below 2^63"
            )]
            repair: spec
                .map_or(0, |s| (s.repair_hours * 3600.0).ceil() as i64)
                .max(1),
            breakdowns: BinaryHeap::new(),
            repairs: BinaryHeap::new(),
        };
        if f.mtbf > 0.0 {
            for node in 0..loaded.nodes.len() {
                let at = f.after(0);
                f.breakdowns.push(Reverse((at, node)));
            }
        }
        f
    }

    /// A failure time after `now`.
    pub(super) fn after(&mut self, now: i64) -> i64 {
        #[expect(
            clippy::cast_possible_truncation,
            reason = "virtual seconds stay far below 2^63"
        )]
        let gap = self.rng.exponential(self.mtbf).ceil().max(1.0) as i64;
        now.saturating_add(gap)
    }

    pub(super) fn next_failure(&self) -> Option<i64> {
        self.breakdowns.peek().map(|Reverse((t, _))| *t)
    }

    pub(super) fn next_repair(&self) -> Option<i64> {
        self.repairs.peek().map(|Reverse((t, _))| *t)
    }

    /// Fails and repairs the nodes due at `now`. A failed node's jobs restart (whole gangs,
    /// from their last checkpoint), and the node is not schedulable until it is repaired.
    /// Returns the number of events.
    pub(super) fn apply(
        &mut self,
        now: i64,
        s: &mut Scheduler,
        books: &mut Books,
        nodes: &[muster_topology::NodeInfo],
    ) -> u64 {
        let mut count = 0;
        // Repairs first: a node repaired and failing at the same instant ends up failed.
        while let Some(Reverse((t, node))) = self.repairs.peek().copied()
            && t == now
        {
            self.repairs.pop();
            count += 1;
            let info = &nodes[node];
            books.failed.remove(&info.name);
            if !books.absent.contains(&info.name) {
                s.cluster_mut().set_schedulable(&info.name, true);
            }
            let at = self.after(now);
            self.breakdowns.push(Reverse((at, node)));
        }
        while let Some(Reverse((t, node))) = self.breakdowns.peek().copied()
            && t == now
        {
            self.breakdowns.pop();
            count += 1;
            let info = &nodes[node];
            if books.absent.contains(&info.name) {
                // Not in the cluster: it cannot fail; it may once it is (back).
                let at = self.after(now);
                self.breakdowns.push(Reverse((at, node)));
                continue;
            }
            books.failed.insert(info.name.clone());
            books.take_down(s, info, now, true);
            self.repairs
                .push(Reverse((now.saturating_add(self.repair), node)));
        }
        count
    }
}

/// Pools joining or leaving the cluster during the run. Nodes are known from the start; a node
/// outside the cluster is not schedulable, so nothing is placed on it.
pub(super) struct Changes {
    /// (time, node index, joins).
    events: BinaryHeap<Reverse<(i64, usize, bool)>>,
}

impl Changes {
    pub(super) fn new(loaded: &Loaded, s: &mut Scheduler, books: &mut Books) -> Changes {
        let mut events = BinaryHeap::new();
        let mut at = 0;
        for pool in &loaded.scenario.cluster.pools {
            let count = usize::try_from(u64::from(pool.blocks) * u64::from(pool.hosts_per_block))
                .unwrap_or(0);
            for node in at..at + count {
                let Some(info) = loaded.nodes.get(node) else {
                    continue;
                };
                if let Some(t) = pool.added_at.filter(|t| *t > 0) {
                    s.cluster_mut().set_schedulable(&info.name, false);
                    books.absent.insert(info.name.clone());
                    events.push(Reverse((t, node, true)));
                }
                if let Some(t) = pool.removed_at {
                    events.push(Reverse((t, node, false)));
                }
            }
            at += count;
        }
        Changes { events }
    }

    pub(super) fn next(&self) -> Option<i64> {
        self.events.peek().map(|Reverse((t, _, _))| *t)
    }

    /// Adds and removes the nodes due at `now`; returns the number of events.
    pub(super) fn apply(
        &mut self,
        now: i64,
        s: &mut Scheduler,
        books: &mut Books,
        nodes: &[muster_topology::NodeInfo],
    ) -> u64 {
        let mut count = 0;
        while let Some(Reverse((t, node, joins))) = self.events.peek().copied()
            && t == now
        {
            self.events.pop();
            count += 1;
            let info = &nodes[node];
            if joins {
                if books.absent.remove(&info.name) && !books.failed.contains(&info.name) {
                    s.cluster_mut().set_schedulable(&info.name, true);
                }
            } else if books.absent.insert(info.name.clone()) {
                books.take_down(s, info, now, false);
            }
        }
        count
    }
}
