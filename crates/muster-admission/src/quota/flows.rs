//! Who lends to whom, now: per queue and cohort, how much of one (flavor, resource) it
//! borrows beyond its own quota and how much of its quota others use. The book stores only
//! what each node takes from its parent; this attributes the pool each cohort gives out to the
//! quota it came from, so that what is lent adds up to what is borrowed.

use super::QuotaBook;

/// One queue's or cohort's part in the lending of one (flavor, resource), now, in
/// milli-units (see [`QuotaBook::flows`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flow<'a> {
    /// The queue's or cohort's name.
    pub name: &'a str,
    /// Whether it is a cohort.
    pub cohort: bool,
    /// What it uses beyond its own quota: for a queue, beyond its nominal quota; for a
    /// cohort, what its subtree takes from its parent beyond its subtree quota.
    pub borrowed: u64,
    /// What others use of its quota: for a queue, of its nominal quota; for a cohort, of its
    /// own quota (what its children lend is counted as theirs).
    pub lent: u64,
}

impl QuotaBook {
    /// Every queue's and cohort's borrowing and lending of (`flavor`, `resource`) now: queues
    /// in the order the book was given them, then cohorts in name order (empty when nothing
    /// has quota for the slot).
    ///
    /// What a cohort gives out comes from its own quota and from what its children offer up
    /// (their idle lendable quota); the part of it in use — by its children's borrowing, and
    /// by whatever its own parent takes of what it offers — is attributed to those sources in
    /// proportion to what each offers, and a child's part on down its subtree the same way.
    /// So lending is attributed nearest first (a department's idle quota serves its own teams
    /// before the rest of the organisation, as the book admits them), and over the whole tree
    /// what is lent equals what is borrowed, up to rounding down of a milli-unit per share.
    pub fn flows(&self, flavor: &str, resource: &str) -> Vec<Flow<'_>> {
        let layout = &self.layout;
        let Some(slot) = layout.slot(flavor, resource) else {
            return Vec::new();
        };
        let nodes = layout.parent.len();
        let subtree = |n: usize| layout.subtree[n][slot];
        let used = |n: usize| self.usage[(n, slot)];
        // What each node takes from its parent beyond its subtree quota, and what it offers
        // up: its idle quota, within what it lends.
        let borrowed: Vec<u64> = (0..nodes)
            .map(|n| match layout.parent[n] {
                Some(_) => used(n).saturating_sub(subtree(n)),
                None => 0,
            })
            .collect();
        let offered: Vec<u64> = (0..nodes)
            .map(|n| match layout.parent[n] {
                Some(_) => {
                    let lendable = subtree(n) - layout.guaranteed[n][slot];
                    lendable.min(subtree(n).saturating_sub(used(n)))
                }
                None => 0,
            })
            .collect();
        // What of each node's offer is in use, settled from the roots down.
        let mut taken = vec![0u64; nodes];
        let mut lent = vec![0u64; nodes];
        let top_down = layout.deepest_first.iter().rev();
        for &c in top_down.filter(|&&n| n >= layout.queue_count) {
            let own = layout.nominal(c, slot);
            let supply = layout.children[c]
                .iter()
                .fold(own, |sum, k| sum.saturating_add(offered[*k]));
            if supply == 0 {
                continue;
            }
            let demand = layout.children[c]
                .iter()
                .fold(0u64, |sum, k| sum.saturating_add(borrowed[*k]));
            let in_use = demand.min(supply).saturating_add(taken[c]).min(supply);
            let share = |part: u64| {
                u64::try_from(u128::from(in_use) * u128::from(part) / u128::from(supply))
                    .unwrap_or(u64::MAX)
            };
            lent[c] = share(own);
            for k in &layout.children[c] {
                taken[*k] = share(offered[*k]);
            }
        }
        // A queue's lending is what its parent takes of its offer.
        lent[..layout.queue_count].copy_from_slice(&taken[..layout.queue_count]);
        (0..nodes)
            .map(|n| Flow {
                name: self.name(n),
                cohort: n >= layout.queue_count,
                borrowed: borrowed[n],
                lent: lent[n],
            })
            .collect()
    }
}
