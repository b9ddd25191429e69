//! Quota: what each ClusterQueue owns per flavor and resource, what it uses, and what its cohort
//! lends and borrows. All amounts are exact milli-units; nothing here is floating point.
//!
//! The model is Kueue's. In a cohort, each queue's nominal quota splits into a *guaranteed*
//! part only it may use (`nominal - lendingLimit`, zero without a lending limit) and a
//! *lendable* part pooled with the cohort. A queue may use its guaranteed part plus whatever is
//! left of the pool, capped by `nominal + borrowingLimit` when a borrowing limit is set. Usage
//! beyond a queue's nominal quota is *borrowed*.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use foldhash::fast::FixedState;

use muster_api::cluster_queue::FairSharing;
use muster_api::{Amount, ClusterQueueSpec, Resources};

/// The limits of one queue on one (flavor, resource).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Limits {
    nominal: u64,
    /// `None`: unlimited.
    borrowing_limit: Option<u64>,
    /// The part of `nominal` pooled with the cohort (all of it without a lending limit).
    lendable: u64,
}

impl Limits {
    fn guaranteed(self) -> u64 {
        self.nominal - self.lendable
    }
}

/// The answer of a quota check for one job in one flavor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QuotaCheck {
    /// Fits within the queue's nominal quota.
    Fits,
    /// Fits, but only by borrowing from the cohort.
    Borrows,
    /// Does not fit: the first resource that is short.
    Short(Shortfall),
}

/// A quota check's verdict alone (see [`QuotaBook::fit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuotaFit {
    /// Fits within the queue's nominal quota.
    Fits,
    /// Fits, but only by borrowing from the cohort.
    Borrows,
    /// Does not fit.
    Short,
}

/// The first resource a check found short, borrowed from the usage checked.
struct Short<'u> {
    resource: &'u str,
    needed: Amount,
    /// Milli-units left of the queue's own nominal quota.
    free: u64,
    /// Milli-units it could still borrow.
    borrowable: u64,
}

/// Why quota does not fit, for one resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shortfall {
    /// The flavor.
    pub flavor: String,
    /// The resource.
    pub resource: String,
    /// What the job (with the queue's usage) needs of it.
    pub needed: Amount,
    /// What is left of the queue's own nominal quota.
    pub free: Amount,
    /// What the queue could still borrow from its cohort.
    pub borrowable: Amount,
}

/// What the queues' specs fix: queues, cohorts, (flavor, resource) slots, limits, pools and
/// weights. Shared, never copied, by every copy of a [`QuotaBook`].
#[derive(Debug, Default)]
struct Layout {
    /// Queue name → number: looked up for every quota change and check, never walked in
    /// order, so hashed (with a fixed seed: the same on every run).
    queues: HashMap<String, usize, FixedState>,
    cohort_of: Vec<Option<usize>>,
    cohorts: Vec<String>,
    /// flavor → resource → slot.
    slots: BTreeMap<String, BTreeMap<String, usize>>,
    slot_count: usize,
    /// Per queue, per slot: limits (`None`: the queue has no quota for it).
    limits: Vec<Vec<Option<Limits>>>,
    /// Per cohort, per slot: Σ lendable.
    pool: Vec<Vec<u64>>,
    /// Per queue: fair-sharing weight in milli-units (`None`: fair sharing not configured).
    weight: Vec<Option<u64>>,
}

impl Layout {
    fn slot(&self, flavor: &str, resource: &str) -> Option<usize> {
        self.slots.get(flavor)?.get(resource).copied()
    }
}

/// Quota and usage of every ClusterQueue, with cohort aggregates kept up to date on every change.
/// A copy (for a tentative what-if) copies only the usage: the layout is shared.
#[derive(Clone, Debug, Default)]
pub struct QuotaBook {
    layout: Arc<Layout>,
    /// Per queue, per slot.
    usage: Grid,
    /// Per cohort, per slot: Σ over members of usage beyond their guaranteed part.
    pool_used: Grid,
}

/// A table of amounts, one row per queue (or cohort) and one column per slot, in one block:
/// a book is copied for every tentative what-if, so a copy is one allocation.
#[derive(Clone, Debug, Default)]
struct Grid {
    width: usize,
    cells: Vec<u64>,
}

impl Grid {
    fn new(rows: usize, width: usize) -> Grid {
        Grid {
            width,
            cells: vec![0; rows * width],
        }
    }
}

impl std::ops::Index<(usize, usize)> for Grid {
    type Output = u64;
    fn index(&self, (row, column): (usize, usize)) -> &u64 {
        &self.cells[row * self.width + column]
    }
}

impl std::ops::IndexMut<(usize, usize)> for Grid {
    fn index_mut(&mut self, (row, column): (usize, usize)) -> &mut u64 {
        &mut self.cells[row * self.width + column]
    }
}

impl QuotaBook {
    /// Books every queue's quota. Quantities that do not parse count as zero (validation
    /// rejects such queues before they get here).
    pub fn new<'a>(queues: impl IntoIterator<Item = (&'a str, &'a ClusterQueueSpec)>) -> QuotaBook {
        let mut book = Layout::default();
        let mut rows = 0usize;
        let queues: Vec<(&str, &ClusterQueueSpec)> = queues.into_iter().collect();
        for (_, spec) in &queues {
            for group in &spec.resource_groups {
                for flavor in &group.flavors {
                    for r in &flavor.resources {
                        let next = book.slot_count;
                        let slot = book
                            .slots
                            .entry(flavor.name.clone())
                            .or_default()
                            .entry(r.name.clone())
                            .or_insert(next);
                        if *slot == next {
                            book.slot_count += 1;
                        }
                    }
                }
            }
        }
        let width = book.slot_count;
        let mut cohort_ids: BTreeMap<String, usize> = BTreeMap::new();
        for (name, spec) in &queues {
            let id = book.limits.len();
            book.queues.insert((*name).to_owned(), id);
            let cohort = spec.cohort.as_ref().map(|c| {
                let next = cohort_ids.len();
                *cohort_ids.entry(c.clone()).or_insert(next)
            });
            book.cohort_of.push(cohort);
            let mut limits = vec![None; width];
            for group in &spec.resource_groups {
                for flavor in &group.flavors {
                    for r in &flavor.resources {
                        let Some(slot) = book.slot(&flavor.name, &r.name) else {
                            continue;
                        };
                        let parse =
                            |q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity| {
                                Amount::parse(&q.0).map_or(0, Amount::milli)
                            };
                        let nominal = parse(&r.nominal_quota);
                        limits[slot] = Some(Limits {
                            nominal,
                            borrowing_limit: r.borrowing_limit.as_ref().map(parse),
                            lendable: r
                                .lending_limit
                                .as_ref()
                                .map_or(nominal, |l| parse(l).min(nominal)),
                        });
                    }
                }
            }
            book.limits.push(limits);
            rows += 1;
            book.weight
                .push(spec.fair_sharing.as_ref().map(fair_weight));
        }
        book.cohorts = vec![String::new(); cohort_ids.len()];
        for (name, id) in cohort_ids {
            book.cohorts[id] = name;
        }
        book.pool = vec![vec![0; width]; book.cohorts.len()];
        let pool_used = Grid::new(book.cohorts.len(), width);
        let usage = Grid::new(rows, width);
        for q in 0..book.limits.len() {
            if let Some(c) = book.cohort_of[q] {
                for (slot, l) in book.limits[q].iter().enumerate() {
                    if let Some(l) = l {
                        book.pool[c][slot] = book.pool[c][slot].saturating_add(l.lendable);
                    }
                }
            }
        }
        QuotaBook {
            layout: Arc::new(book),
            usage,
            pool_used,
        }
    }

    fn slot(&self, flavor: &str, resource: &str) -> Option<usize> {
        self.layout.slot(flavor, resource)
    }

    fn queue(&self, name: &str) -> Option<usize> {
        self.layout.queues.get(name).copied()
    }

    /// The number of the queue's cohort, if it has one: equal for queues of one cohort,
    /// cheaper to compare than its name.
    pub(crate) fn cohort_number(&self, queue: &str) -> Option<usize> {
        self.layout.cohort_of[self.queue(queue)?]
    }

    /// Whether `other` books the same usage as this book (debug builds compare books kept
    /// up to date with rebuilt ones).
    #[cfg(debug_assertions)]
    pub(crate) fn same_usage(&self, other: &QuotaBook) -> bool {
        self.usage.cells == other.usage.cells && self.pool_used.cells == other.pool_used.cells
    }

    /// The queue's cohort, if it has one.
    pub fn cohort(&self, queue: &str) -> Option<&str> {
        let q = self.queue(queue)?;
        self.layout.cohort_of[q].map(|c| self.layout.cohorts[c].as_str())
    }

    /// What `queue` could still take of one slot: its guaranteed remainder plus what is left
    /// of the cohort's pool, capped by its borrowing limit.
    fn available(&self, q: usize, slot: usize) -> u64 {
        let Some(l) = self.layout.limits[q][slot] else {
            return 0;
        };
        let used = self.usage[(q, slot)];
        match self.layout.cohort_of[q] {
            None => l.nominal.saturating_sub(used),
            Some(c) => {
                let own = l.guaranteed().saturating_sub(used);
                let pool_left = self.layout.pool[c][slot].saturating_sub(self.pool_used[(c, slot)]);
                let mut available = own.saturating_add(pool_left);
                if let Some(limit) = l.borrowing_limit {
                    available = available.min(l.nominal.saturating_add(limit).saturating_sub(used));
                }
                available
            }
        }
    }

    /// Whether `usage` (a job's, in `flavor`) fits `queue` now: within nominal, by borrowing,
    /// or not at all. Resources the queue has no quota for in this flavor are short.
    pub fn check(&self, queue: &str, flavor: &str, usage: &Resources) -> QuotaCheck {
        match self.measure(queue, flavor, usage) {
            Ok(false) => QuotaCheck::Fits,
            Ok(true) => QuotaCheck::Borrows,
            Err(short) => QuotaCheck::Short(Shortfall {
                flavor: flavor.to_owned(),
                resource: short.resource.to_owned(),
                needed: short.needed,
                free: Amount::from_milli(short.free),
                borrowable: Amount::from_milli(short.borrowable),
            }),
        }
    }

    /// [`QuotaBook::check`]'s verdict without the shortfall: for callers that only choose
    /// (it allocates nothing, and the cycle asks it for every queue's key).
    pub fn fit(&self, queue: &str, flavor: &str, usage: &Resources) -> QuotaFit {
        match self.measure(queue, flavor, usage) {
            Ok(false) => QuotaFit::Fits,
            Ok(true) => QuotaFit::Borrows,
            Err(_) => QuotaFit::Short,
        }
    }

    /// Whether `usage` fits `queue` in `flavor`: `Ok(borrows)`, or the first resource short.
    fn measure<'u>(
        &self,
        queue: &str,
        flavor: &str,
        usage: &'u Resources,
    ) -> Result<bool, Short<'u>> {
        let Some(q) = self.queue(queue) else {
            return Err(Short {
                resource: "",
                needed: Amount::ZERO,
                free: 0,
                borrowable: 0,
            });
        };
        let resources = self.layout.slots.get(flavor);
        let mut borrows = false;
        for (resource, amount) in usage.iter() {
            let need = amount.milli();
            if need == 0 {
                continue;
            }
            let slot = resources.and_then(|r| r.get(resource)).copied();
            let (available, nominal_left) = match slot {
                Some(slot) if self.layout.limits[q][slot].is_some() => {
                    let nominal = self.layout.limits[q][slot].map_or(0, |l| l.nominal);
                    (
                        self.available(q, slot),
                        nominal.saturating_sub(self.usage[(q, slot)]),
                    )
                }
                _ => (0, 0),
            };
            if need > available {
                let free = nominal_left.min(available);
                return Err(Short {
                    resource,
                    needed: amount,
                    free,
                    borrowable: available - free,
                });
            }
            if need > nominal_left {
                borrows = true;
            }
        }
        Ok(borrows)
    }

    /// Per resource of `usage`, how much of it `queue` could not get now (zero when it could).
    pub fn shortfalls(&self, queue: &str, flavor: &str, usage: &Resources) -> Vec<u64> {
        let q = self.queue(queue);
        usage
            .iter()
            .map(|(resource, amount)| {
                let available = match (q, self.slot(flavor, resource)) {
                    (Some(q), Some(slot)) => self.available(q, slot),
                    _ => 0,
                };
                amount.milli().saturating_sub(available)
            })
            .collect()
    }

    /// Books `usage` of `flavor` to `queue`.
    pub fn add(&mut self, queue: &str, flavor: &str, usage: &Resources) {
        self.change(queue, flavor, usage, true);
    }

    /// Releases `usage` of `flavor` from `queue`.
    pub fn remove(&mut self, queue: &str, flavor: &str, usage: &Resources) {
        self.change(queue, flavor, usage, false);
    }

    fn change(&mut self, queue: &str, flavor: &str, usage: &Resources, add: bool) {
        let Some(q) = self.queue(queue) else { return };
        for (resource, amount) in usage.iter() {
            let Some(slot) = self.slot(flavor, resource) else {
                continue;
            };
            let guaranteed = self.layout.limits[q][slot].map_or(0, Limits::guaranteed);
            let before = self.usage[(q, slot)];
            let after = if add {
                before.saturating_add(amount.milli())
            } else {
                before.saturating_sub(amount.milli())
            };
            self.usage[(q, slot)] = after;
            if let Some(c) = self.layout.cohort_of[q] {
                let pooled = &mut self.pool_used[(c, slot)];
                *pooled = pooled
                    .saturating_sub(before.saturating_sub(guaranteed))
                    .saturating_add(after.saturating_sub(guaranteed));
            }
        }
    }

    /// What `queue` uses of (`flavor`, `resource`), and how much of that is borrowed.
    pub fn usage(&self, queue: &str, flavor: &str, resource: &str) -> (Amount, Amount) {
        let (Some(q), Some(slot)) = (self.queue(queue), self.slot(flavor, resource)) else {
            return (Amount::ZERO, Amount::ZERO);
        };
        let used = self.usage[(q, slot)];
        let nominal = self.layout.limits[q][slot].map_or(0, |l| l.nominal);
        (
            Amount::from_milli(used),
            Amount::from_milli(used.saturating_sub(nominal)),
        )
    }

    /// `queue`'s nominal quota of (`flavor`, `resource`); zero where it has none.
    pub fn nominal(&self, queue: &str, flavor: &str, resource: &str) -> Amount {
        let (Some(q), Some(slot)) = (self.queue(queue), self.slot(flavor, resource)) else {
            return Amount::ZERO;
        };
        Amount::from_milli(self.layout.limits[q][slot].map_or(0, |l| l.nominal))
    }

    /// Whether `queue` uses more than its nominal quota of any resource of `flavor`.
    pub fn is_borrowing(&self, queue: &str, flavor: &str) -> bool {
        let Some(q) = self.queue(queue) else {
            return false;
        };
        self.layout.slots.get(flavor).is_some_and(|resources| {
            resources.values().any(|&slot| {
                self.usage[(q, slot)] > self.layout.limits[q][slot].map_or(0, |l| l.nominal)
            })
        })
    }

    /// Whether `queue` uses more than its nominal quota of any resource of any flavor: only
    /// then may a reclaiming queue of its cohort take any of its jobs.
    pub fn is_borrowing_anything(&self, queue: &str) -> bool {
        let Some(q) = self.queue(queue) else {
            return false;
        };
        self.layout.limits[q]
            .iter()
            .enumerate()
            .any(|(slot, l)| self.usage[(q, slot)] > l.map_or(0, |l| l.nominal))
    }

    /// Whether fair sharing is configured for any queue of `queue`'s cohort.
    pub fn fair_sharing(&self, queue: &str) -> bool {
        let Some(c) = self.queue(queue).and_then(|q| self.layout.cohort_of[q]) else {
            return false;
        };
        (0..self.layout.cohort_of.len())
            .any(|q| self.layout.cohort_of[q] == Some(c) && self.layout.weight[q].is_some())
    }

    /// The queue's dominant resource share: the largest, over its resources, of what it borrows
    /// divided by what its cohort pools, per mille, divided by its weight. Weight zero: no
    /// share when not borrowing, the largest share when it is (it borrows last).
    pub fn dominant_share(&self, queue: &str) -> u64 {
        let Some(q) = self.queue(queue) else { return 0 };
        let Some(c) = self.layout.cohort_of[q] else {
            return 0;
        };
        let mut share: u128 = 0;
        for slot in 0..self.usage.width {
            let nominal = self.layout.limits[q][slot].map_or(0, |l| l.nominal);
            let borrowed = self.usage[(q, slot)].saturating_sub(nominal);
            let pool = self.layout.pool[c][slot];
            if borrowed > 0 && pool > 0 {
                share = share.max(u128::from(borrowed) * 1000 / u128::from(pool));
            } else if borrowed > 0 {
                share = share.max(1000);
            }
        }
        let weight = self.layout.weight[q].unwrap_or(1000);
        if weight == 0 {
            return if share > 0 { u64::MAX } else { 0 };
        }
        u64::try_from(share * 1000 / u128::from(weight)).unwrap_or(u64::MAX)
    }

    /// Every queue's (flavor, resource, used, borrowed) with a quota entry, for status.
    pub fn report(&self, queue: &str) -> Vec<(String, String, Amount, Amount)> {
        let Some(q) = self.queue(queue) else {
            return Vec::new();
        };
        self.layout
            .slots
            .iter()
            .flat_map(|(f, resources)| resources.iter().map(move |(r, slot)| (f, r, *slot)))
            .filter(|(_, _, slot)| self.layout.limits[q][*slot].is_some())
            .map(|(f, r, _)| {
                let (used, borrowed) = self.usage(queue, f, r);
                (f.clone(), r.clone(), used, borrowed)
            })
            .collect()
    }

    /// Whether no queue uses anything.
    pub fn is_idle(&self) -> bool {
        self.usage.cells.iter().all(|u| *u == 0) && self.pool_used.cells.iter().all(|u| *u == 0)
    }
}

fn fair_weight(f: &FairSharing) -> u64 {
    f.weight
        .as_ref()
        .map_or(1000, |w| Amount::parse(&w.0).map_or(1000, Amount::milli))
}
