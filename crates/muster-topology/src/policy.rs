//! Placement policies: which domain a gang goes to, and how it fills that domain's children.
//!
//! A policy sees *units* — candidate domains, child domains or nodes — each with how many pods
//! of the pod set it can hold. The fitter asks it two things: which single unit should take
//! `need` pods (among those that can), and, when none can, which unit to fill next.

/// One candidate: a domain or a node, and how many pods of the set it can hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unit {
    /// The domain or node index.
    pub id: usize,
    /// Pods of the set it can hold now.
    pub capacity: u32,
}

/// A way to choose among units. Ties are broken by the units' order (label value, then name),
/// so every policy is deterministic.
pub trait Policy {
    /// The policy's name, as `--policy` takes it.
    fn name(&self) -> &'static str;

    /// Among `units` that can each hold all `need` pods, the one to use.
    fn choose_single(&self, units: &[Unit], need: u32) -> Option<usize>;

    /// When no single unit can hold `need` pods: the unit to fill next.
    fn fill_next(&self, units: &[Unit], need: u32) -> Option<usize>;
}

/// Default: the tightest unit that holds the pods, so large holes survive for the next big gang;
/// when none does, the largest first (fewest units, neighbours close together).
#[derive(Clone, Copy, Debug, Default)]
pub struct BestFit;

impl Policy for BestFit {
    fn name(&self) -> &'static str {
        "best-fit"
    }

    fn choose_single(&self, units: &[Unit], need: u32) -> Option<usize> {
        position_min_by_key(units, |u| (u.capacity >= need).then_some(u.capacity))
    }

    fn fill_next(&self, units: &[Unit], _need: u32) -> Option<usize> {
        largest(units)
    }
}

/// Spread: the least-loaded unit that holds the pods (most room left), spreading gangs over the
/// fleet; when none does, the largest first.
#[derive(Clone, Copy, Debug, Default)]
pub struct Spread;

impl Policy for Spread {
    fn name(&self) -> &'static str {
        "spread"
    }

    fn choose_single(&self, units: &[Unit], need: u32) -> Option<usize> {
        position_min_by_key(units, |u| {
            (u.capacity >= need).then_some(u32::MAX - u.capacity)
        })
    }

    fn fill_next(&self, units: &[Unit], _need: u32) -> Option<usize> {
        largest(units)
    }
}

/// The policies by name, for `--policy`.
pub fn by_name(name: &str) -> Option<Box<dyn Policy>> {
    match name {
        "best-fit" => Some(Box::new(BestFit)),
        "spread" => Some(Box::new(Spread)),
        _ => None,
    }
}

/// The names `by_name` knows.
pub const POLICY_NAMES: &[&str] = &["best-fit", "spread"];

fn largest(units: &[Unit]) -> Option<usize> {
    position_min_by_key(units, |u| (u.capacity > 0).then_some(u32::MAX - u.capacity))
}

/// The first position whose key is smallest, skipping units whose key is `None`.
fn position_min_by_key(units: &[Unit], key: impl Fn(&Unit) -> Option<u32>) -> Option<usize> {
    let mut best: Option<(usize, u32)> = None;
    for (i, u) in units.iter().enumerate() {
        if let Some(k) = key(u)
            && best.is_none_or(|(_, b)| k < b)
        {
            best = Some((i, k));
        }
    }
    best.map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn units(caps: &[u32]) -> Vec<Unit> {
        caps.iter()
            .enumerate()
            .map(|(id, c)| Unit { id, capacity: *c })
            .collect()
    }

    #[test]
    fn best_fit_takes_the_tightest_that_holds() {
        assert_eq!(BestFit.choose_single(&units(&[16, 9, 12, 8]), 9), Some(1));
        assert_eq!(BestFit.choose_single(&units(&[4, 5]), 9), None);
        assert_eq!(BestFit.fill_next(&units(&[4, 5, 5]), 9), Some(1));
    }

    #[test]
    fn spread_takes_the_roomiest() {
        assert_eq!(Spread.choose_single(&units(&[16, 9, 16, 8]), 9), Some(0));
    }
}
