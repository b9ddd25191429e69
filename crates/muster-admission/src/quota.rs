//! Quota: what each ClusterQueue owns per flavor and resource, what it uses, and what the
//! cohort tree lends and borrows. All amounts are exact milli-units; nothing here is floating
//! point.
//!
//! ClusterQueues and cohorts are the nodes of trees: a queue's parent is its cohort, a
//! cohort's is the cohort its `Cohort` object names (see [`crate::CohortTree`]). Per
//! (flavor, resource), a node's *subtree quota* is its own nominal quota plus what each child
//! lends it; a node with a parent keeps a *guaranteed* part of its subtree quota that only
//! its subtree may use (`subtree - lendingLimit`, zero without a lending limit) and lends the
//! rest up. A node may use its guaranteed remainder plus what its parent could still give
//! it, capped by its borrowing limit: at most `borrowingLimit` beyond what it lends up. What a
//! node uses beyond its guaranteed part is stored in its parent, and so on up to the root,
//! which can give out at most its subtree quota. Usage of a queue beyond its nominal quota
//! is *borrowed*.
//!
//! With one level (flat cohorts with no quota of their own) this is Kueue's model: each
//! queue's nominal quota splits into a guaranteed part only it may use and a lendable part
//! pooled with the cohort.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use foldhash::fast::FixedState;

use muster_api::cluster_queue::{FairSharing, ResourceGroup};
use muster_api::{Amount, ClusterQueueSpec, Resources};

use crate::cohorts::CohortTree;

mod flows;
mod idle_limits;

pub use flows::Flow;

/// The limits of one queue or cohort on one (flavor, resource).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Limits {
    /// Its own quota (for a cohort: on top of what its children lend it).
    nominal: u64,
    /// The most it may take from its parent beyond what it lends up; `None`: unlimited.
    borrowing_limit: Option<u64>,
    /// The most of its subtree quota it lends up; `None`: all of it.
    lending_limit: Option<u64>,
    /// Where in the spec the entry is: (resource group, flavor, resource) indices.
    at: (usize, usize, usize),
}

impl Limits {
    /// The entry's path in the spec, `spec.resourceGroups[g].flavors[f].resources[r]`.
    fn field(&self) -> String {
        let (g, f, r) = self.at;
        format!("spec.resourceGroups[{g}].flavors[{f}].resources[{r}]")
    }
}

/// How many levels of a cohort tree, from the top, fair sharing tells apart: deeper levels
/// are ordered as if their shares were equal.
pub(crate) const STANDING_LEVELS: usize = 8;

/// A queue's fair-sharing standing ([`QuotaBook::standing`]). Compared in order, two queues
/// are first told apart where their paths from the top of the tree part — by the shares of
/// the two sibling subtrees there, as hierarchical fair sharing judges a subtree against its
/// siblings — and with one level (flat cohorts) by their own shares.
pub(crate) type Standing = [u64; STANDING_LEVELS];

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

/// A usage in one flavor for one queue, its names looked up ([`QuotaBook::prepare`]).
#[derive(Clone, Debug)]
pub(crate) struct PreparedUsage {
    /// The queue's number; `None`: no such queue, so nothing fits.
    queue: Option<usize>,
    /// Per resource asked for (none of zero): its slot (`None`: no quota anywhere for it in
    /// the flavor) and the amount in milli-units.
    needs: Vec<(Option<usize>, u64)>,
}

/// What a holder books, its names looked up once ([`QuotaBook::booking`]): its queue's number
/// and, per resource of every pod set with quota anywhere in the pod set's flavor, the slot
/// and the amount in milli-units, in the order a change by names would book them. A holder
/// is released many times over in reservation and preemption searches; this way each
/// release is arithmetic alone. Valid for the book it was made from and every copy of it (a
/// book with other queues or cohorts numbers them afresh: its holders' bookings are made
/// again, see `Scheduler::with_cohorts`).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Booking {
    queue: usize,
    /// The root of the queue's cohort tree, if it is in one (see [`QuotaBook::tree_number`]).
    tree: Option<usize>,
    amounts: Vec<(usize, u64)>,
}

/// The quota a check for one queue reads: its own and its cohort tree's
/// ([`QuotaBook::scope`]). Valid for the book it was taken from and every copy of it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QuotaScope {
    queue: usize,
    tree: Option<usize>,
}

impl QuotaScope {
    /// Whether what `booking` holds is quota a check for the scope's queue reads.
    pub(crate) fn covers(self, booking: &Booking) -> bool {
        self.shares_with(QuotaScope {
            queue: booking.queue,
            tree: booking.tree,
        })
    }

    /// Whether the two scopes' queues read each other's quota: one queue, or one cohort
    /// tree.
    pub(crate) fn shares_with(self, other: QuotaScope) -> bool {
        other.queue == self.queue || (self.tree.is_some() && other.tree == self.tree)
    }
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
    /// Where, up the cohort tree, borrowing stops: `None` when the queue is in no cohort,
    /// and from [`QuotaBook::check`], which leaves it to whoever tells the job (it checks
    /// far more often than anyone is told): see [`QuotaBook::limit`].
    pub limit: Option<Box<Limit>>,
}

/// A child of a cohort that uses more than the quota within it (see [`Limit::Pool`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Borrower {
    /// The queue's or cohort's name.
    pub name: String,
    /// Whether it is a cohort (a ClusterQueue and a Cohort may share a name).
    pub cohort: bool,
    /// How much more than the quota within it it uses.
    pub borrowed: Amount,
}

/// The level of a cohort tree that keeps a queue from borrowing more (see
/// [`Shortfall::limit`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Limit {
    /// A queue's or cohort's `borrowingLimit`: its subtree takes `limit` from its parent
    /// beyond what it lends, already or with this job.
    BorrowingLimit {
        /// The queue or cohort whose limit it is.
        node: String,
        /// Whether it is a cohort.
        cohort: bool,
        /// The limit.
        limit: Amount,
    },
    /// No borrowing limit on the way up binds: the top of the tree has only `left` of the
    /// `pool` it gives out (its own quota and what its children lend).
    Pool {
        /// The cohort at the top of the tree.
        cohort: String,
        /// What it gives out.
        pool: Amount,
        /// What of that is not in use.
        left: Amount,
        /// Its children that use more than the quota within them, most first (at most
        /// three): whose jobs' ends give quota back.
        borrowers: Vec<Borrower>,
        /// Of the first borrower's admitted jobs, the one expected to end first: its id, its
        /// expected end (seconds) and what it holds of the resource. Filled in by the
        /// scheduler, which knows the jobs; `None` when none has an announced runtime.
        returns: Option<(String, i64, Amount)>,
    },
}

/// What the queues' and cohorts' specs fix: the nodes (queues first, then cohorts), the
/// tree, (flavor, resource) slots, limits, subtree quotas and weights. Shared, never copied,
/// by every copy of a [`QuotaBook`].
#[derive(Debug, Default)]
struct Layout {
    /// Queue name → node number: looked up for every quota change and check, never walked
    /// in order, so hashed (with a fixed seed: the same on every run).
    queues: HashMap<String, usize, FixedState>,
    /// Queue names by node number.
    queue_names: Vec<String>,
    /// Cohort names, in name order; cohort `i` is node `queue_count + i`.
    cohorts: Vec<String>,
    /// How many queues there are: nodes `0..queue_count` are queues.
    queue_count: usize,
    /// Per node: its parent (a queue's cohort, a cohort's parent cohort).
    parent: Vec<Option<usize>>,
    /// Per node: the root of its tree (itself for a root).
    root: Vec<usize>,
    /// Per node: edges up to its root.
    depth: Vec<u32>,
    /// Per node: its children, in node order.
    children: Vec<Vec<usize>>,
    /// Per root of a cohort tree: the queues in the tree, in node order (empty for every
    /// other node).
    tree_queues: Vec<Vec<usize>>,
    /// Every node, deepest first (node order within a depth): children come before their
    /// parent, so sums up the tree settle in one pass, and the reverse settles down it.
    deepest_first: Vec<usize>,
    /// flavor → resource → slot.
    slots: BTreeMap<String, BTreeMap<String, usize>>,
    slot_count: usize,
    /// Per node, per slot: limits (`None`: no quota entry; a queue without one cannot use
    /// the slot, a cohort without one only passes on what its children lend).
    limits: Vec<Vec<Option<Limits>>>,
    /// Per node, per slot: its own quota plus what its children lend it.
    subtree: Vec<Vec<u64>>,
    /// Per node, per slot: the part of `subtree` it does not lend up (all of it at a root).
    guaranteed: Vec<Vec<u64>>,
    /// Per cohort with a limit that can never bind, what is wrong (see `idle_limits`).
    idle_limits: BTreeMap<String, String>,
    /// Per node: fair-sharing weight in milli-units (`None`: fair sharing not configured).
    weight: Vec<Option<u64>>,
    /// Per node: whether any of its children sets a fair-sharing weight, so that they share
    /// what it gives out fairly.
    fair: Vec<bool>,
}

impl Layout {
    fn slot(&self, flavor: &str, resource: &str) -> Option<usize> {
        self.slots.get(flavor)?.get(resource).copied()
    }

    /// The slots `groups` give quota for, numbered as they are first seen.
    fn add_slots(&mut self, groups: &[ResourceGroup]) {
        for group in groups {
            for flavor in &group.flavors {
                for r in &flavor.resources {
                    let next = self.slot_count;
                    let slot = self
                        .slots
                        .entry(flavor.name.clone())
                        .or_default()
                        .entry(r.name.clone())
                        .or_insert(next);
                    if *slot == next {
                        self.slot_count += 1;
                    }
                }
            }
        }
    }

    /// Per slot, the limits `groups` set. Quantities that do not parse count as zero
    /// (validation rejects such objects before they get here).
    fn limits_of(&self, groups: &[ResourceGroup]) -> Vec<Option<Limits>> {
        let parse = |q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity| {
            Amount::parse(&q.0).map_or(0, Amount::milli)
        };
        let mut limits = vec![None; self.slot_count];
        for (g, group) in groups.iter().enumerate() {
            for (f, flavor) in group.flavors.iter().enumerate() {
                for (i, r) in flavor.resources.iter().enumerate() {
                    if let Some(slot) = self.slot(&flavor.name, &r.name) {
                        limits[slot] = Some(Limits {
                            nominal: parse(&r.nominal_quota),
                            borrowing_limit: r.borrowing_limit.as_ref().map(parse),
                            lending_limit: r.lending_limit.as_ref().map(parse),
                            at: (g, f, i),
                        });
                    }
                }
            }
        }
        limits
    }

    /// Node `n`'s nominal quota of `slot` (zero where it has no entry).
    fn nominal(&self, n: usize, slot: usize) -> u64 {
        self.limits[n][slot].map_or(0, |l| l.nominal)
    }

    /// Works out every node's depth and root, then subtree quotas and guaranteed parts from
    /// the deepest nodes up (a node's subtree is complete once all its children, which are
    /// deeper, have lent to it).
    fn settle_tree(&mut self) {
        let nodes = self.parent.len();
        self.depth = vec![0; nodes];
        self.root = (0..nodes).collect();
        for n in 0..nodes {
            let mut at = n;
            let mut depth = 0;
            // The tree is checked for cycles before it gets here; the bound is a guard.
            while let Some(p) = self.parent[at]
                && depth <= nodes
            {
                at = p;
                depth += 1;
            }
            self.depth[n] = u32::try_from(depth).unwrap_or(u32::MAX);
            self.root[n] = at;
        }
        self.children = vec![Vec::new(); nodes];
        for n in 0..nodes {
            if let Some(p) = self.parent[n] {
                self.children[p].push(n);
            }
        }
        self.fair = vec![false; nodes];
        for n in 0..nodes {
            if let Some(p) = self.parent[n]
                && self.weight[n].is_some()
            {
                self.fair[p] = true;
            }
        }
        self.deepest_first = (0..nodes).collect();
        let depth = &self.depth;
        self.deepest_first
            .sort_by_key(|n| std::cmp::Reverse(depth[*n]));
        self.subtree = (0..nodes)
            .map(|n| (0..self.slot_count).map(|s| self.nominal(n, s)).collect())
            .collect();
        self.guaranteed = vec![vec![0; self.slot_count]; nodes];
        for i in 0..nodes {
            let n = self.deepest_first[i];
            for slot in 0..self.slot_count {
                let subtree = self.subtree[n][slot];
                let guaranteed = match self.parent[n] {
                    None => subtree,
                    Some(_) => self.limits[n][slot]
                        .and_then(|l| l.lending_limit)
                        .map_or(0, |l| subtree.saturating_sub(l)),
                };
                self.guaranteed[n][slot] = guaranteed;
                if let Some(p) = self.parent[n] {
                    self.subtree[p][slot] =
                        self.subtree[p][slot].saturating_add(subtree - guaranteed);
                }
            }
        }
    }
}

/// Quota and usage of every ClusterQueue, with what each cohort gives out kept up to date on
/// every change. A copy (for a tentative what-if) copies only the usage: the layout is shared.
#[derive(Clone, Debug, Default)]
pub struct QuotaBook {
    layout: Arc<Layout>,
    /// Per node, per slot: a queue's usage; a cohort's is what its children use beyond their
    /// guaranteed parts.
    usage: Grid,
}

/// A table of amounts, one row per node (queue or cohort) and one column per slot, in one block:
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
    /// Books every queue's quota, with flat cohorts (those the queues name, without quota of
    /// their own). Quantities that do not parse count as zero (validation rejects such queues
    /// before they get here).
    pub fn new<'a>(queues: impl IntoIterator<Item = (&'a str, &'a ClusterQueueSpec)>) -> QuotaBook {
        QuotaBook::with_cohorts(queues, &CohortTree::default())
    }

    /// Books every queue's quota within the cohort `tree`: the cohorts it defines with their
    /// parents, quota and limits, and those the queues name without an object as roots with
    /// no quota of their own.
    pub fn with_cohorts<'a>(
        queues: impl IntoIterator<Item = (&'a str, &'a ClusterQueueSpec)>,
        tree: &CohortTree,
    ) -> QuotaBook {
        let queues: Vec<(&str, &ClusterQueueSpec)> = queues.into_iter().collect();
        let mut layout = Layout::default();
        for (_, spec) in &queues {
            layout.add_slots(&spec.resource_groups);
        }
        for node in tree.nodes.values() {
            if let Some(spec) = &node.spec {
                layout.add_slots(&spec.resource_groups);
            }
        }
        let mut cohorts: Vec<String> = tree.nodes.keys().cloned().collect();
        cohorts.extend(queues.iter().filter_map(|(_, spec)| spec.cohort.clone()));
        cohorts.sort_unstable();
        cohorts.dedup();
        let q = queues.len();
        layout.queue_count = q;
        let cohort_node = |name: &str| cohorts.binary_search_by(|c| c.as_str().cmp(name)).ok();
        for (i, (name, spec)) in queues.iter().enumerate() {
            layout.queues.insert((*name).to_owned(), i);
            layout.queue_names.push((*name).to_owned());
            layout
                .parent
                .push(spec.cohort.as_deref().and_then(cohort_node).map(|c| q + c));
            let limits = layout.limits_of(&spec.resource_groups);
            layout.limits.push(limits);
            layout
                .weight
                .push(spec.fair_sharing.as_ref().map(fair_weight));
        }
        for name in &cohorts {
            let node = tree.nodes.get(name);
            let spec = node.and_then(|n| n.spec.as_deref());
            layout.parent.push(
                node.and_then(|n| n.parent.as_deref())
                    .and_then(cohort_node)
                    .map(|c| q + c),
            );
            let limits = spec.map_or_else(
                || vec![None; layout.slot_count],
                |s| layout.limits_of(&s.resource_groups),
            );
            layout.limits.push(limits);
            layout
                .weight
                .push(spec.and_then(|s| s.fair_sharing.as_ref()).map(fair_weight));
        }
        layout.cohorts = cohorts;
        layout.settle_tree();
        layout.tree_queues = vec![Vec::new(); layout.parent.len()];
        for q in 0..layout.queue_count {
            if layout.parent[q].is_some() {
                let root = layout.root[q];
                layout.tree_queues[root].push(q);
            }
        }
        layout.idle_limits = layout.idle_limits();
        let usage = Grid::new(layout.parent.len(), layout.slot_count);
        QuotaBook {
            layout: Arc::new(layout),
            usage,
        }
    }

    fn slot(&self, flavor: &str, resource: &str) -> Option<usize> {
        self.layout.slot(flavor, resource)
    }

    /// The queue's number in this book, for what is asked of it by number; `None` for a queue
    /// the book does not hold.
    pub(crate) fn queue(&self, name: &str) -> Option<usize> {
        self.layout.queues.get(name).copied()
    }

    /// The number of the root of the queue's cohort tree, if it is in a cohort: equal for
    /// queues that lend to and borrow from each other (however far apart in the tree),
    /// cheaper to compare than names.
    pub(crate) fn tree_number(&self, queue: &str) -> Option<usize> {
        self.scope(queue)?.tree
    }

    /// The queues of `queue`'s cohort tree, itself among them, in node order: those that
    /// lend to and borrow from it. None when it is in no cohort.
    pub(crate) fn queues_sharing(&self, queue: &str) -> impl Iterator<Item = &str> {
        let layout = &self.layout;
        let queues: &[usize] = match self.queue(queue) {
            Some(q) if layout.parent[q].is_some() => &layout.tree_queues[layout.root[q]],
            _ => &[],
        };
        queues.iter().map(|&q| layout.queue_names[q].as_str())
    }

    /// How many edges lead up from queue `from` to the nearest cohort it shares with queue
    /// `to` (1 for queues of one cohort); `None` when they share none. Reclaiming takes from
    /// the nearest queues first.
    pub(crate) fn distance(&self, from: &str, to: &str) -> Option<u32> {
        let (mut a, mut b) = (self.queue(from)?, self.queue(to)?);
        let layout = &self.layout;
        if layout.parent[a].is_none() || layout.root[a] != layout.root[b] {
            return None;
        }
        let mut up = 0;
        while layout.depth[a] > layout.depth[b] {
            a = layout.parent[a]?;
            up += 1;
        }
        while layout.depth[b] > layout.depth[a] {
            b = layout.parent[b]?;
        }
        while a != b {
            a = layout.parent[a]?;
            b = layout.parent[b]?;
            up += 1;
        }
        Some(up)
    }

    /// Whether `other` books the same usage as this book (debug builds compare books kept
    /// up to date with rebuilt ones).
    #[cfg(debug_assertions)]
    pub(crate) fn same_usage(&self, other: &QuotaBook) -> bool {
        self.usage.cells == other.usage.cells
    }

    /// The queue's cohort, if it has one.
    pub fn cohort(&self, queue: &str) -> Option<&str> {
        let q = self.queue(queue)?;
        self.layout.parent[q].map(|c| self.layout.cohorts[c - self.layout.queue_count].as_str())
    }

    /// What is wrong with `cohort`'s quota entries when one of its limits can never bind: a
    /// lending limit above all the quota within it, or quota for a (flavor, resource) no
    /// queue under it can use. The message names the field and the fix; the tree works as
    /// written.
    pub fn limit_problem(&self, cohort: &str) -> Option<&str> {
        self.layout.idle_limits.get(cohort).map(String::as_str)
    }

    /// The cohorts of the book's trees, in name order, each with its parent.
    pub fn cohorts(&self) -> impl Iterator<Item = (&str, Option<&str>)> {
        let layout = &self.layout;
        layout.cohorts.iter().enumerate().map(|(i, name)| {
            let parent = layout.parent[layout.queue_count + i].map(|p| self.name(p));
            (name.as_str(), parent)
        })
    }

    /// The (flavor, resource) slots anything has quota for, in name order.
    pub fn slots(&self) -> impl Iterator<Item = (&str, &str)> {
        self.layout
            .slots
            .iter()
            .flat_map(|(f, rs)| rs.keys().map(move |r| (f.as_str(), r.as_str())))
    }

    /// Whether `queue` is `node` or under it (`node` a cohort when `cohort`, else a queue).
    pub fn is_under(&self, queue: &str, node: &str, cohort: bool) -> bool {
        let mut at = self.queue(queue);
        while let Some(n) = at {
            if (n >= self.layout.queue_count) == cohort && self.name(n) == node {
                return true;
            }
            at = self.layout.parent[n];
        }
        false
    }

    /// The chain of cohorts above the queue, nearest first (empty without a cohort).
    pub fn ancestors(&self, queue: &str) -> Vec<&str> {
        let mut out = Vec::new();
        let mut at = self.queue(queue).and_then(|q| self.layout.parent[q]);
        while let Some(c) = at {
            out.push(self.layout.cohorts[c - self.layout.queue_count].as_str());
            at = self.layout.parent[c];
        }
        out
    }

    /// What node `n` could still take of one slot: its guaranteed remainder plus what its
    /// parent could still give it, capped by its borrowing limit; at a root, what is left of
    /// its subtree quota.
    fn available(&self, n: usize, slot: usize) -> u64 {
        let layout = &self.layout;
        let used = self.usage[(n, slot)];
        let Some(parent) = layout.parent[n] else {
            return layout.subtree[n][slot].saturating_sub(used);
        };
        let guaranteed = layout.guaranteed[n][slot];
        let own = guaranteed.saturating_sub(used);
        let mut from_parent = self.available(parent, slot);
        if let Some((_, room)) = self.borrowing_room(n, slot) {
            from_parent = from_parent.min(room);
        }
        own.saturating_add(from_parent)
    }

    /// Node `n`'s borrowing limit on one slot and how much more it may store in its parent
    /// under it: what it lends up, plus the limit, less what it already stores there. `None`
    /// where it has no borrowing limit.
    fn borrowing_room(&self, n: usize, slot: usize) -> Option<(u64, u64)> {
        let layout = &self.layout;
        let limit = layout.limits[n][slot].and_then(|l| l.borrowing_limit)?;
        let guaranteed = layout.guaranteed[n][slot];
        let lent = layout.subtree[n][slot] - guaranteed;
        let stored = self.usage[(n, slot)].saturating_sub(guaranteed);
        Some((limit, lent.saturating_add(limit).saturating_sub(stored)))
    }

    /// What `queue` could still take of one slot (zero where it has no quota entry).
    fn available_to_queue(&self, q: usize, slot: usize) -> u64 {
        if self.layout.limits[q][slot].is_none() {
            return 0;
        }
        self.available(q, slot)
    }

    /// Node `n`'s name.
    fn name(&self, n: usize) -> &str {
        let layout = &self.layout;
        if n < layout.queue_count {
            &layout.queue_names[n]
        } else {
            &layout.cohorts[n - layout.queue_count]
        }
    }

    /// Where, up `queue`'s cohort tree, borrowing of (`flavor`, `resource`) stops: the first
    /// node on the way up whose borrowing limit caps what it may take, or else the top of the
    /// tree, with what is left of its pool and who uses it.
    pub fn limit(&self, queue: &str, flavor: &str, resource: &str) -> Option<Limit> {
        let layout = &self.layout;
        let (mut n, slot) = (self.queue(queue)?, self.slot(flavor, resource)?);
        layout.parent[n]?;
        while let Some(parent) = layout.parent[n] {
            if let Some((limit, room)) = self.borrowing_room(n, slot)
                && room < self.available(parent, slot)
            {
                return Some(Limit::BorrowingLimit {
                    node: self.name(n).to_owned(),
                    cohort: n >= layout.queue_count,
                    limit: Amount::from_milli(limit),
                });
            }
            n = parent;
        }
        let mut borrowers: Vec<(u64, usize)> = layout.children[n]
            .iter()
            .map(|&k| {
                (
                    self.usage[(k, slot)].saturating_sub(layout.subtree[k][slot]),
                    k,
                )
            })
            .filter(|(borrowed, _)| *borrowed > 0)
            .collect();
        borrowers.sort_by_key(|&(borrowed, k)| (std::cmp::Reverse(borrowed), k));
        let pool = layout.subtree[n][slot];
        Some(Limit::Pool {
            cohort: self.name(n).to_owned(),
            pool: Amount::from_milli(pool),
            left: Amount::from_milli(pool.saturating_sub(self.usage[(n, slot)])),
            borrowers: borrowers
                .into_iter()
                .take(3)
                .map(|(borrowed, k)| Borrower {
                    name: self.name(k).to_owned(),
                    cohort: k >= layout.queue_count,
                    borrowed: Amount::from_milli(borrowed),
                })
                .collect(),
            returns: None,
        })
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
                limit: None,
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

    /// [`QuotaBook::fit`] of a usage whose names were looked up once ([`QuotaBook::prepare`]):
    /// the same verdict, in arithmetic alone.
    pub(crate) fn fit_prepared(&self, prepared: &PreparedUsage) -> QuotaFit {
        let Some(q) = prepared.queue else {
            return QuotaFit::Short;
        };
        let mut borrows = false;
        for &(slot, need) in &prepared.needs {
            let (available, nominal_left) = self.room(q, slot);
            if need > available {
                return QuotaFit::Short;
            }
            if need > nominal_left {
                borrows = true;
            }
        }
        if borrows {
            QuotaFit::Borrows
        } else {
            QuotaFit::Fits
        }
    }

    /// `usage` in `flavor` for `queue`, with its queue's and slots' numbers looked up, for
    /// [`QuotaBook::fit_prepared`]: valid while the book's queues and quotas stay as they are
    /// (usage may change).
    pub(crate) fn prepare(&self, queue: &str, flavor: &str, usage: &Resources) -> PreparedUsage {
        let resources = self.layout.slots.get(flavor);
        PreparedUsage {
            queue: self.queue(queue),
            needs: usage
                .iter()
                .filter(|(_, amount)| amount.milli() > 0)
                .map(|(resource, amount)| {
                    let slot = resources.and_then(|r| r.get(resource)).copied();
                    (slot, amount.milli())
                })
                .collect(),
        }
    }

    /// What queue `q` could still take of `slot` (none where it has no quota entry), and how
    /// much of it is left within its nominal quota.
    fn room(&self, q: usize, slot: Option<usize>) -> (u64, u64) {
        match slot {
            Some(slot) if self.layout.limits[q][slot].is_some() => {
                let nominal = self.layout.limits[q][slot].map_or(0, |l| l.nominal);
                (
                    self.available_to_queue(q, slot),
                    nominal.saturating_sub(self.usage[(q, slot)]),
                )
            }
            _ => (0, 0),
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
            let (available, nominal_left) = self.room(q, slot);
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

    /// Whether `queue` is shorter of some resource of `usage` (in `flavor`) in this book than
    /// in `other`, a book of the same queues: how much of it the queue could not get now is
    /// larger here. A reservation asks it of its book with and without a job that would
    /// start before it, for every job a cycle tries while it binds, in its prepared form
    /// ([`QuotaBook::shorter_than_prepared`]); this by-name form is what the tests hold that
    /// one to.
    #[cfg(test)]
    pub(crate) fn shorter_than(
        &self,
        other: &QuotaBook,
        queue: &str,
        flavor: &str,
        usage: &Resources,
    ) -> bool {
        let Some(q) = self.queue(queue) else {
            return false;
        };
        let Some(resources) = self.layout.slots.get(flavor) else {
            return false;
        };
        usage.iter().any(|(resource, amount)| {
            resources.get(resource).is_some_and(|&slot| {
                let short = |book: &QuotaBook| {
                    amount
                        .milli()
                        .saturating_sub(book.available_to_queue(q, slot))
                };
                short(self) > short(other)
            })
        })
    }

    /// [`QuotaBook::shorter_than`] for a usage prepared by [`QuotaBook::prepare`] (its
    /// queue, flavor and resources looked up once, in this book or one with its layout): the
    /// same answer in arithmetic alone.
    pub(crate) fn shorter_than_prepared(
        &self,
        other: &QuotaBook,
        prepared: &PreparedUsage,
    ) -> bool {
        let Some(q) = prepared.queue else {
            return false;
        };
        // A resource asked for in a zero amount is short in neither book; `prepare` leaves
        // those out.
        prepared.needs.iter().any(|&(slot, need)| {
            slot.is_some_and(|slot| {
                let short =
                    |book: &QuotaBook| need.saturating_sub(book.available_to_queue(q, slot));
                short(self) > short(other)
            })
        })
    }

    /// Makes this book a copy of `other` (its layout shared, its usage copied), reusing the
    /// usage's cells where there are enough: what a check that books into a throwaway copy
    /// again and again uses instead of a fresh clone each time.
    pub(crate) fn copy_from(&mut self, other: &QuotaBook) {
        if !Arc::ptr_eq(&self.layout, &other.layout) {
            self.layout = Arc::clone(&other.layout);
        }
        self.usage.width = other.usage.width;
        self.usage.cells.clone_from(&other.usage.cells);
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
        // The layout is shared and never changes: a handle of its own frees the book to change.
        let layout = Arc::clone(&self.layout);
        let resources = layout.slots.get(flavor);
        for (resource, amount) in usage.iter() {
            let Some(&slot) = resources.and_then(|r| r.get(resource)) else {
                continue;
            };
            self.change_slot(q, slot, amount.milli(), add);
        }
    }

    /// What a holder of `pod_sets` (per pod set: its flavor and quota usage) in `queue`
    /// books, for [`QuotaBook::add_booking`] and [`QuotaBook::remove_booking`]; `None` when
    /// the book has no such queue (a change by names then books nothing either).
    pub(crate) fn booking<'f, 'u>(
        &self,
        queue: &str,
        pod_sets: impl IntoIterator<Item = (&'f str, &'u Resources)>,
    ) -> Option<Booking> {
        let QuotaScope { queue, tree } = self.scope(queue)?;
        let mut amounts = Vec::new();
        for (flavor, usage) in pod_sets {
            let resources = self.layout.slots.get(flavor);
            for (resource, amount) in usage.iter() {
                // A zero amount changes no usage: leaving it out changes nothing.
                if let Some(&slot) = resources.and_then(|r| r.get(resource))
                    && amount.milli() > 0
                {
                    amounts.push((slot, amount.milli()));
                }
            }
        }
        Some(Booking {
            queue,
            tree,
            amounts,
        })
    }

    /// Books what `booking` holds: the same as adding each of its pod sets' usage by names.
    pub(crate) fn add_booking(&mut self, booking: &Booking) {
        for &(slot, milli) in &booking.amounts {
            self.change_slot(booking.queue, slot, milli, true);
        }
    }

    /// Releases what `booking` holds: the same as removing each of its pod sets' usage by
    /// names.
    pub(crate) fn remove_booking(&mut self, booking: &Booking) {
        for &(slot, milli) in &booking.amounts {
            self.change_slot(booking.queue, slot, milli, false);
        }
    }

    /// The quota a check for `queue` reads; `None` when the book has no such queue.
    pub(crate) fn scope(&self, queue: &str) -> Option<QuotaScope> {
        let q = self.queue(queue)?;
        Some(QuotaScope {
            queue: q,
            tree: self.layout.parent[q].map(|_| self.layout.root[q]),
        })
    }

    /// Moves queue `q`'s usage of `slot` by `by` milli-units, and its cohorts' above it.
    fn change_slot(&mut self, q: usize, slot: usize, by: u64, add: bool) {
        let (mut n, mut by, mut add) = (q, by, add);
        // Up the tree: each node stores in its parent what it uses beyond its guaranteed
        // part, so the parent's usage moves by how much that changed.
        loop {
            let before = self.usage[(n, slot)];
            let after = if add {
                before.saturating_add(by)
            } else {
                before.saturating_sub(by)
            };
            self.usage[(n, slot)] = after;
            let Some(parent) = self.layout.parent[n] else {
                break;
            };
            let guaranteed = self.layout.guaranteed[n][slot];
            let (was, is) = (
                before.saturating_sub(guaranteed),
                after.saturating_sub(guaranteed),
            );
            if was == is {
                break;
            }
            (n, by, add) = (parent, was.abs_diff(is), is > was);
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

    /// Whether fair sharing is configured for any queue or cohort that shares `queue`'s
    /// cohort with it.
    pub fn fair_sharing(&self, queue: &str) -> bool {
        self.queue(queue)
            .and_then(|q| self.layout.parent[q])
            .is_some_and(|c| self.layout.fair[c])
    }

    /// The queue's dominant resource share: the largest, over its resources, of what it borrows
    /// divided by what its cohort has to give out (its own quota and what its members lend),
    /// per mille, divided by its weight. Weight zero: no share when not borrowing, the
    /// largest share when it is (it borrows last).
    pub fn dominant_share(&self, queue: &str) -> u64 {
        self.queue(queue).map_or(0, |q| self.node_share(q))
    }

    /// Node `n`'s dominant share among its siblings: the largest, over resources, of what it
    /// takes from its parent beyond its subtree quota divided by the parent's subtree quota,
    /// per mille, divided by its weight (see [`QuotaBook::dominant_share`]); 0 at a root.
    fn node_share(&self, n: usize) -> u64 {
        let layout = &self.layout;
        let Some(parent) = layout.parent[n] else {
            return 0;
        };
        let mut share: u128 = 0;
        for slot in 0..self.usage.width {
            let borrowed = self.usage[(n, slot)].saturating_sub(layout.subtree[n][slot]);
            let pool = layout.subtree[parent][slot];
            if borrowed > 0 && pool > 0 {
                share = share.max(u128::from(borrowed) * 1000 / u128::from(pool));
            } else if borrowed > 0 {
                share = share.max(1000);
            }
        }
        let weight = layout.weight[n].unwrap_or(1000);
        if weight == 0 {
            return if share > 0 { u64::MAX } else { 0 };
        }
        u64::try_from(share * 1000 / u128::from(weight)).unwrap_or(u64::MAX)
    }

    /// The queue's fair-sharing standing (see [`Standing`]): per level from the top of its
    /// tree down to the queue, the dominant share of the node on its path among its
    /// siblings, where those siblings share fairly (0 where none of them sets a weight).
    pub(crate) fn standing(&self, queue: &str) -> Standing {
        self.queue(queue)
            .map_or([0; STANDING_LEVELS], |q| self.standing_of(q))
    }

    /// [`QuotaBook::standing`] of the queue numbered `q` in this book
    /// ([`QuotaBook::queue`]): a cycle takes it for every key of every queue of a
    /// cohort after each admission there, and has the number at hand.
    pub(crate) fn standing_of(&self, q: usize) -> Standing {
        let mut standing = [0; STANDING_LEVELS];
        let layout = &self.layout;
        // Up from the queue: a node `depth` edges below the root stands at level `depth - 1`.
        let mut at = q;
        while let Some(parent) = layout.parent[at] {
            let level = usize::try_from(layout.depth[at]).unwrap_or(usize::MAX) - 1;
            if level < STANDING_LEVELS && layout.fair[parent] {
                standing[level] = self.node_share(at);
            }
            at = parent;
        }
        standing
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
        self.usage.cells.iter().all(|u| *u == 0)
    }
}

fn fair_weight(f: &FairSharing) -> u64 {
    f.weight
        .as_ref()
        .map_or(1000, |w| Amount::parse(&w.0).map_or(1000, Amount::milli))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use muster_api::cluster_queue::{FlavorQuotas, ResourceGroup, ResourceQuota};
    use muster_api::{Amount, ClusterQueueSpec, Resources};

    use super::QuotaBook;

    const GPU: &str = "nvidia.com/gpu";

    fn quota(
        name: &str,
        nominal: u64,
        borrowing: Option<u64>,
        lending: Option<u64>,
    ) -> ResourceQuota {
        let quantity = |n: u64| Quantity(n.to_string());
        ResourceQuota {
            name: name.to_owned(),
            nominal_quota: quantity(nominal),
            borrowing_limit: borrowing.map(quantity),
            lending_limit: lending.map(quantity),
        }
    }

    fn spec(cohort: Option<&str>, flavors: Vec<FlavorQuotas>) -> ClusterQueueSpec {
        ClusterQueueSpec {
            cohort: cohort.map(str::to_owned),
            resource_groups: vec![ResourceGroup {
                covered_resources: vec![GPU.to_owned(), "cpu".to_owned()],
                flavors,
            }],
            ..ClusterQueueSpec::default()
        }
    }

    fn usage(pairs: &[(&str, u64)]) -> Resources {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Amount::from_units(*v)))
            .collect()
    }

    /// Three queues: two in cohort "all" with two flavors between them (limits on borrowing
    /// and lending), one in no cohort.
    fn three_queues() -> [(&'static str, ClusterQueueSpec); 3] {
        let h100 = |gpu: ResourceQuota, cpu: ResourceQuota| FlavorQuotas {
            name: "h100".into(),
            resources: vec![gpu, cpu],
        };
        [
            (
                "a",
                spec(
                    Some("all"),
                    vec![
                        h100(
                            quota(GPU, 8, Some(4), Some(2)),
                            quota("cpu", 64, None, None),
                        ),
                        FlavorQuotas {
                            name: "a100".into(),
                            resources: vec![quota(GPU, 4, None, None)],
                        },
                    ],
                ),
            ),
            (
                "b",
                spec(
                    Some("all"),
                    vec![h100(
                        quota(GPU, 8, None, None),
                        quota("cpu", 16, Some(8), None),
                    )],
                ),
            ),
            (
                "c",
                spec(
                    None,
                    vec![h100(quota(GPU, 2, None, None), quota("cpu", 8, None, None))],
                ),
            ),
        ]
    }

    #[test]
    fn a_prepared_usage_fits_as_the_named_one_does() {
        let specs = three_queues();
        let mut book = QuotaBook::new(specs.iter().map(|(n, s)| (*n, s)));
        let mut usages = Vec::new();
        for gpus in 0..=14 {
            for cpus in [0, 8, 40, 90] {
                usages.push(usage(&[(GPU, gpus), ("cpu", cpus)]));
            }
        }
        usages.push(usage(&[(GPU, 1), ("example.com/fpga", 1)]));
        usages.push(usage(&[("example.com/fpga", 0)]));
        // Usage moves between the checks: what was lent, borrowed and used changes.
        let steps = [
            ("b", "h100", 3),
            ("a", "h100", 9),
            ("b", "h100", 6),
            ("a", "a100", 4),
            ("c", "h100", 2),
        ];
        for (queue, flavor, gpus) in steps {
            book.add(queue, flavor, &usage(&[(GPU, gpus), ("cpu", gpus * 4)]));
            for queue in ["a", "b", "c", "nobody"] {
                for flavor in ["h100", "a100", "none"] {
                    for u in &usages {
                        let prepared = book.prepare(queue, flavor, u);
                        assert_eq!(
                            book.fit_prepared(&prepared),
                            book.fit(queue, flavor, u),
                            "{queue} {flavor} {u:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_book_copied_into_another_is_what_a_clone_is_whatever_that_one_held() {
        let specs = three_queues();
        let mut source = QuotaBook::new(specs.iter().map(|(n, s)| (*n, s)));
        source.add("a", "h100", &usage(&[(GPU, 9), ("cpu", 30)]));
        source.add("b", "h100", &usage(&[(GPU, 5)]));
        // A book of another layout (one queue, fewer cells) and one of this layout whose
        // usage differs: both become the source's copy, and changing it leaves the source be.
        let lone = [specs[2].clone()];
        let mut other_layout = QuotaBook::new(lone.iter().map(|(n, s)| (*n, s)));
        other_layout.add("c", "h100", &usage(&[(GPU, 2)]));
        let mut same_layout = source.clone();
        same_layout.add("a", "a100", &usage(&[(GPU, 3)]));
        for mut copy in [other_layout, same_layout, QuotaBook::default()] {
            copy.copy_from(&source);
            for queue in ["a", "b", "c"] {
                assert_eq!(copy.report(queue), source.report(queue), "{queue}");
            }
            copy.add("b", "h100", &usage(&[(GPU, 4)]));
            assert_ne!(copy.report("b"), source.report("b"));
            assert_eq!(source.usage("b", "h100", GPU).0, Amount::from_units(5));
        }
    }

    #[test]
    fn a_booking_moves_usage_as_the_named_changes_do() {
        let specs = three_queues();
        let mut by_names = QuotaBook::new(specs.iter().map(|(n, s)| (*n, s)));
        let mut by_booking = by_names.clone();
        // Holders of one or two pod sets: within nominal quota, borrowing, over every limit,
        // of resources and flavors without quota, of zero amounts.
        let holders: Vec<(&str, Vec<(&str, Resources)>)> = vec![
            ("a", vec![("h100", usage(&[(GPU, 6), ("cpu", 40)]))]),
            ("b", vec![("h100", usage(&[(GPU, 9), ("cpu", 20)]))]),
            (
                "a",
                vec![
                    ("h100", usage(&[(GPU, 4), ("example.com/fpga", 2)])),
                    ("a100", usage(&[(GPU, 3), ("cpu", 0)])),
                ],
            ),
            ("c", vec![("h100", usage(&[(GPU, 5), ("cpu", 1)]))]),
            ("b", vec![("none", usage(&[(GPU, 1)]))]),
            ("a", vec![("a100", usage(&[(GPU, 30)]))]),
        ];
        let bookings: Vec<_> = holders
            .iter()
            .filter_map(|(queue, sets)| by_names.booking(queue, sets.iter().map(|(f, u)| (*f, u))))
            .collect();
        assert_eq!(bookings.len(), holders.len(), "every queue is in the book");
        assert!(
            by_names
                .booking("nobody", [("h100", &usage(&[(GPU, 1)]))])
                .is_none()
        );
        // Add them all, take some away (twice over, past what is held), add again.
        let steps = [0, 1, 2, 3, 4, 5].map(|i| (i, true)).into_iter().chain([
            (1, false),
            (5, false),
            (0, false),
            (0, false),
            (1, true),
        ]);
        for (i, add) in steps {
            let (queue, sets) = &holders[i];
            for (flavor, u) in sets {
                if add {
                    by_names.add(queue, flavor, u);
                } else {
                    by_names.remove(queue, flavor, u);
                }
            }
            if add {
                by_booking.add_booking(&bookings[i]);
            } else {
                by_booking.remove_booking(&bookings[i]);
            }
            assert!(
                by_names.same_usage(&by_booking),
                "after holder {i} (add: {add})"
            );
        }
        // A check for a queue reads its own quota and its cohort tree's: a and b share
        // cohort "all", c is in none.
        for ((queue, _), booking) in holders.iter().zip(&bookings) {
            for other in ["a", "b", "c"] {
                let shared = *queue == other || (*queue != "c" && other != "c");
                let scope = by_names.scope(other);
                assert_eq!(
                    scope.is_some_and(|s| s.covers(booking)),
                    shared,
                    "{queue} {other}"
                );
            }
        }
        assert!(by_names.scope("nobody").is_none());
    }

    #[test]
    fn a_book_is_shorter_only_where_a_queue_could_get_less() {
        let specs = three_queues();
        let empty = QuotaBook::new(specs.iter().map(|(n, s)| (*n, s)));
        // Queue b borrows 8 GPUs of the cohort's 10 to lend: a keeps its own 6 and can
        // borrow 2 more, not the 6 it could before.
        let mut busy = empty.clone();
        busy.add("b", "h100", &usage(&[(GPU, 8)]));
        let short_in_busy = |need: &Resources, queue: &str, flavor: &str| {
            let by_names = (
                busy.shorter_than(&empty, queue, flavor, need),
                empty.shorter_than(&busy, queue, flavor, need),
            );
            // Prepared once, the same answer in either direction.
            let prepared = empty.prepare(queue, flavor, need);
            assert_eq!(
                (
                    busy.shorter_than_prepared(&empty, &prepared),
                    empty.shorter_than_prepared(&busy, &prepared),
                ),
                by_names,
                "{queue} {flavor} {need}"
            );
            by_names
        };
        assert_eq!(
            short_in_busy(&usage(&[(GPU, 10)]), "a", "h100"),
            (true, false)
        );
        assert_eq!(
            short_in_busy(&usage(&[(GPU, 8)]), "a", "h100"),
            (false, false)
        );
        // Short in both, by the same: not shorter.
        assert_eq!(
            short_in_busy(&usage(&[(GPU, 30)]), "c", "h100"),
            (false, false)
        );
        // Names the book does not know are as short in one book as in the other.
        for (queue, flavor, need) in [
            ("nobody", "h100", usage(&[(GPU, 10)])),
            ("a", "none", usage(&[(GPU, 10)])),
            ("a", "h100", usage(&[("example.com/fpga", 10)])),
        ] {
            assert_eq!(
                short_in_busy(&need, queue, flavor),
                (false, false),
                "{queue} {flavor}"
            );
        }
        // One resource short is enough.
        assert_eq!(
            short_in_busy(&usage(&[("cpu", 1), (GPU, 10)]), "a", "h100"),
            (true, false)
        );
    }
}
