//! How much each queue and cohort lent and borrowed over a run: the quota book's account of
//! who lends to whom ([`muster_admission::QuotaBook::flows`]), integrated over virtual time.

use std::collections::BTreeMap;

use muster_admission::QuotaBook;

use crate::scenario::Loaded;

/// The accelerator resources whose lending is counted.
const ACCELERATORS: [&str; 2] = ["nvidia.com/gpu", "google.com/tpu"];

/// One queue's or cohort's lending over a run, in milli-GPU-seconds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lending {
    /// Whether it is a cohort.
    pub cohort: bool,
    /// Its cohort (a queue's) or parent cohort (a cohort's).
    pub parent: Option<String>,
    /// Milli-GPU-seconds of its quota others used.
    pub lent: u128,
    /// Milli-GPU-seconds it used beyond its own quota.
    pub borrowed: u128,
}

/// Integrates the book's flows between instants: what held from one instant holds until the
/// next.
pub(super) struct Ledger {
    /// The (flavor, resource) slots counted; empty when no queue is in a cohort, so that
    /// runs with hard quotas pay nothing.
    slots: Vec<(String, &'static str)>,
    /// When the flows in `now` began.
    since: i64,
    /// Per node: (lent, borrowed) milli-units from `since` on.
    now: BTreeMap<String, (bool, u64, u64)>,
    totals: BTreeMap<String, Lending>,
}

impl Ledger {
    pub(super) fn new(loaded: &Loaded) -> Ledger {
        let shared = loaded
            .cluster_queues
            .iter()
            .any(|(_, q)| q.cohort.is_some());
        let slots = if shared {
            loaded
                .flavors
                .iter()
                .flat_map(|(f, _)| ACCELERATORS.iter().map(move |r| (f.clone(), *r)))
                .collect()
        } else {
            Vec::new()
        };
        // Every node of a tree, with its parent, so that the whole tree is reported.
        let mut totals = BTreeMap::new();
        if shared {
            let parents = loaded
                .cohorts
                .iter()
                .map(|(name, spec)| (name.clone(), true, spec.parent.clone()));
            let queues = loaded
                .cluster_queues
                .iter()
                .filter_map(|(name, q)| Some((name.clone(), false, Some(q.cohort.clone()?))));
            for (name, cohort, parent) in parents.chain(queues) {
                if let Some(p) = &parent {
                    totals.entry(p.clone()).or_insert(Lending {
                        cohort: true,
                        ..Lending::default()
                    });
                }
                totals.insert(
                    name,
                    Lending {
                        cohort,
                        parent,
                        ..Lending::default()
                    },
                );
            }
        }
        Ledger {
            slots,
            since: 0,
            now: BTreeMap::new(),
            totals,
        }
    }

    /// Counts the flows since the last instant up to `time`, then takes the book's flows
    /// from `time` on.
    pub(super) fn record(&mut self, time: i64, book: &QuotaBook) {
        if self.slots.is_empty() {
            return;
        }
        let dt = u128::try_from(time - self.since).unwrap_or(0);
        for (name, (cohort, lent, borrowed)) in &self.now {
            let total = self.totals.entry(name.clone()).or_default();
            total.cohort = *cohort;
            total.lent += u128::from(*lent) * dt;
            total.borrowed += u128::from(*borrowed) * dt;
        }
        self.since = time;
        for entry in self.now.values_mut() {
            (entry.1, entry.2) = (0, 0);
        }
        for (flavor, resource) in &self.slots {
            for flow in book.flows(flavor, resource) {
                if flow.lent == 0 && flow.borrowed == 0 && !self.now.contains_key(flow.name) {
                    continue;
                }
                let entry = self
                    .now
                    .entry(flow.name.to_owned())
                    .or_insert((flow.cohort, 0, 0));
                entry.1 += flow.lent;
                entry.2 += flow.borrowed;
            }
        }
    }

    /// Per queue in a cohort and per cohort, its totals.
    pub(super) fn finish(self) -> BTreeMap<String, Lending> {
        self.totals
    }
}
