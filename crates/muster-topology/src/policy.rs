//! Placement policies: which domain a gang goes to, and how it fills that domain's children.
//!
//! A policy sees *units* — candidate domains, child domains or nodes — each with how many pods
//! of the pod set it can hold. The fitter asks it two things: which single unit should take
//! `need` pods (among those that can), and, when none can, which unit to fill next.

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::shared::{
    DevicePick, DevicePolicy, Fgd, ShareRequest, SharedNode, TaskMix, device_policy,
};

/// One candidate: a domain or a node, and how many pods of the set it can hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unit {
    /// The domain or node index.
    pub id: usize,
    /// Pods of the set it can hold now.
    pub capacity: u32,
    /// Pods of the set it could hold if it were empty; filled in only for policies whose
    /// [`Policy::uses_empty_capacity`] is true (otherwise equal to `capacity`).
    pub empty_capacity: u32,
}

/// A way to choose among units. Ties are broken by the units' order (label value, then name),
/// so every policy is deterministic. A policy is `Send`: the controller keeps its scheduler
/// (and so its policy) from one pass to the next, on whichever thread runs the pass.
pub trait Policy: Send {
    /// The policy's name, as `--policy` takes it.
    fn name(&self) -> &'static str;

    /// Among `units` that can each hold all `need` pods, the one to use.
    fn choose_single(&self, units: &[Unit], need: u32) -> Option<usize>;

    /// When no single unit can hold `need` pods: the unit to fill next.
    fn fill_next(&self, units: &[Unit], need: u32) -> Option<usize>;

    /// Whether the policy reads [`Unit::empty_capacity`] (computing it costs a second pass).
    fn uses_empty_capacity(&self) -> bool {
        false
    }

    /// For a pod asking for part of one GPU, within the domain the policy chose: its node
    /// among `nodes` (what each candidate has free, device by device; ties go to the first in
    /// `order`) and its device. `None` leaves the choice to the fitter: the policy's units,
    /// then the device with the least left that holds the share.
    fn place_share(
        &self,
        nodes: &[SharedNode],
        order: &[usize],
        request: &ShareRequest,
    ) -> Option<DevicePick> {
        let _ = (nodes, order, request);
        None
    }

    /// Whether [`Policy::place_share`] places shares (the fitter then asks it pod by pod).
    fn places_shares(&self) -> bool {
        false
    }

    /// [`Policy::place_share`] for a placement the fitter only weighs (a candidate domain
    /// of [`Policy::scores_gangs`]): nothing is learned from it.
    fn try_share(
        &self,
        nodes: &[SharedNode],
        order: &[usize],
        request: &ShareRequest,
    ) -> Option<DevicePick> {
        self.place_share(nodes, order, request)
    }

    /// Whether the policy chooses the domain of a gang on GPUs tracked one by one itself:
    /// the fitter then places the gang tentatively in every domain that holds it (pod by pod
    /// with [`Policy::try_share`]) and takes the one of least [`Policy::gang_cost`].
    fn scores_gangs(&self) -> bool {
        false
    }

    /// A pod set of `pods` pods, each asking `request`, is being placed on GPUs tracked one by
    /// one (shares and whole GPUs alike): what a policy that scores gangs learns its workload
    /// from. The fitter tells only policies whose [`Policy::scores_gangs`] is true.
    fn observe(&self, request: &ShareRequest, pods: u32) {
        let _ = (request, pods);
    }

    /// What placing a gang costs, from the nodes of its candidate domain before and after
    /// (the same nodes, in the same order); lower is better. `None`: the policy does not
    /// score gangs.
    fn gang_cost(&self, before: &[SharedNode], after: &[SharedNode]) -> Option<f64> {
        let _ = (before, after);
        None
    }
}

/// How many recent share requests a learning FGD policy keeps as its target workload.
const FGD_WINDOW: usize = 1000;
/// How many new share requests a learning FGD policy takes before it works its target
/// workload out again.
const FGD_RELEARN_EVERY: usize = 50;

/// Domains as [`BestFit`] chooses them; pods asking for part of a GPU placed by one of the FGD
/// paper's device policies (`packing`, `random`, `fgd`, see [`crate::shared`]), node and
/// device at once. Pods of whole GPUs are placed as by [`BestFit`].
///
/// `fgd` needs the target workload it measures fragmentation against. Given one
/// ([`SharePlacement::fgd`]), it keeps it; by name it learns it: the shapes of the last 1000
/// shares it was asked to place (tentative placements included; in the controller, since its
/// scheduler was last built), worked out again every 50 — the same sequence of placements
/// always gives the same choices.
///
/// `fgd-gang` is `fgd` made gang-aware: the domain of a gang that must share one (a block) is
/// not best fit's but the one where a tentative placement of the whole gang adds least
/// fragmentation, summed over the domain's nodes ([`Policy::gang_cost`]); whole-GPU gangs on
/// tracked GPUs are scored alike (then placed within the domain as by best fit). It learns its
/// target workload from every pod set the fitter is asked to place on tracked GPUs (each
/// attempt counts, as for `fgd`), whole GPUs included, since the fragmentation that hurts a
/// gang queue is often untouched GPUs broken for whole-GPU pods.
pub struct SharePlacement {
    name: &'static str,
    /// `fgd-gang`: gangs' domains scored by the fragmentation they add, the workload learned
    /// from every pod set on tracked GPUs (not only from shares placed).
    gangs: bool,
    state: Mutex<ShareState>,
}

struct ShareState {
    devices: Box<dyn DevicePolicy>,
    /// The target workload `fgd` measures fragmentation against (empty for the others).
    mix: TaskMix,
    /// For a learning `fgd`: the recent shares, and how many arrived since the last relearn.
    learned: Option<(VecDeque<ShareRequest>, usize)>,
}

impl ShareState {
    /// Adds `request` to the learned window, working the target workload out again every
    /// [`FGD_RELEARN_EVERY`] requests (and at the first).
    fn learn(&mut self, request: &ShareRequest) {
        let Some((window, fresh)) = &mut self.learned else {
            return;
        };
        window.push_back(request.clone());
        if window.len() > FGD_WINDOW {
            window.pop_front();
        }
        *fresh += 1;
        if *fresh >= FGD_RELEARN_EVERY || window.len() == 1 {
            let shapes: Vec<ShareRequest> = window.iter().cloned().collect();
            self.mix = TaskMix::from_pods(&shapes, 0.95);
            self.devices = Box::new(Fgd::new(self.mix.clone()));
            *fresh = 0;
        }
    }
}

impl SharePlacement {
    /// Shares placed by device policy `name` (`packing`, `random` drawing from `seed`, or
    /// `fgd` learning its target workload), or `fgd-gang`; `None` for another name.
    pub fn by_name(name: &str, seed: u64) -> Option<SharePlacement> {
        let (name, device, learned, gangs): (&'static str, &str, _, _) = match name {
            "packing" => ("packing", "packing", None, false),
            "random" => ("random", "random", None, false),
            "fgd" => ("fgd", "fgd", Some((VecDeque::new(), 0)), false),
            "fgd-gang" => ("fgd-gang", "fgd", Some((VecDeque::new(), 0)), true),
            _ => return None,
        };
        let devices = device_policy(device, seed, &TaskMix::default())?;
        Some(SharePlacement {
            name,
            gangs,
            state: Mutex::new(ShareState {
                devices,
                mix: TaskMix::default(),
                learned,
            }),
        })
    }

    /// Shares placed by FGD against the target workload `mix`.
    pub fn fgd(mix: TaskMix) -> SharePlacement {
        SharePlacement {
            name: "fgd",
            gangs: false,
            state: Mutex::new(ShareState {
                devices: Box::new(Fgd::new(mix.clone())),
                mix,
                learned: None,
            }),
        }
    }
}

impl std::fmt::Debug for SharePlacement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharePlacement")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Policy for SharePlacement {
    fn name(&self) -> &'static str {
        self.name
    }

    fn choose_single(&self, units: &[Unit], need: u32) -> Option<usize> {
        BestFit.choose_single(units, need)
    }

    fn fill_next(&self, units: &[Unit], need: u32) -> Option<usize> {
        BestFit.fill_next(units, need)
    }

    fn place_share(
        &self,
        nodes: &[SharedNode],
        order: &[usize],
        request: &ShareRequest,
    ) -> Option<DevicePick> {
        if !self.gangs {
            self.state().learn(request);
        }
        self.try_share(nodes, order, request)
    }

    fn places_shares(&self) -> bool {
        true
    }

    fn try_share(
        &self,
        nodes: &[SharedNode],
        order: &[usize],
        request: &ShareRequest,
    ) -> Option<DevicePick> {
        self.state().devices.choose(nodes, order, request)
    }

    fn scores_gangs(&self) -> bool {
        self.gangs
    }

    fn observe(&self, request: &ShareRequest, pods: u32) {
        if self.gangs {
            let mut state = self.state();
            // More than a window's worth would only push out what it just added.
            for _ in 0..usize::try_from(pods).map_or(FGD_WINDOW, |p| p.min(FGD_WINDOW)) {
                state.learn(request);
            }
        }
    }

    fn gang_cost(&self, before: &[SharedNode], after: &[SharedNode]) -> Option<f64> {
        if !self.gangs {
            return None;
        }
        let state = self.state();
        let sum = |nodes: &[SharedNode]| -> f64 {
            nodes.iter().map(|n| n.fragmentation(&state.mix)).sum()
        };
        Some(sum(after) - sum(before))
    }
}

impl SharePlacement {
    /// The policy's state. A poisoned lock only means an earlier placement panicked mid-way;
    /// the state is still whole (each field is replaced, never half-updated).
    fn state(&self) -> std::sync::MutexGuard<'_, ShareState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
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

/// Fragmentation-aware: keep untouched units whole for the next large gang. Among units that
/// hold the pods, prefer ones already partly in use (whose room is a hole left by earlier work),
/// then the tightest; when none holds them, fill partly used units first, largest first.
#[derive(Clone, Copy, Debug, Default)]
pub struct FragmentationAware;

impl Policy for FragmentationAware {
    fn name(&self) -> &'static str {
        "fragmentation-aware"
    }

    fn choose_single(&self, units: &[Unit], need: u32) -> Option<usize> {
        position_min_by_key(units, |u| {
            (u.capacity >= need)
                .then_some(untouched(u) * (u32::MAX / 2) + u.capacity.min(u32::MAX / 2 - 1))
        })
    }

    fn fill_next(&self, units: &[Unit], _need: u32) -> Option<usize> {
        position_min_by_key(units, |u| {
            (u.capacity > 0).then_some(
                untouched(u) * (u32::MAX / 2)
                    + (u32::MAX / 2 - 1 - u.capacity.min(u32::MAX / 2 - 1)),
            )
        })
    }

    fn uses_empty_capacity(&self) -> bool {
        true
    }
}

/// 1 when nothing of the unit is in use, else 0.
fn untouched(u: &Unit) -> u32 {
    u32::from(u.capacity >= u.empty_capacity)
}

/// The policies by name, for `--policy`.
pub fn by_name(name: &str) -> Option<Box<dyn Policy>> {
    match name {
        "best-fit" => Some(Box::new(BestFit)),
        "spread" => Some(Box::new(Spread)),
        "fragmentation-aware" => Some(Box::new(FragmentationAware)),
        // The share policies draw (`random`) from a fixed seed: runs repeat.
        other => SharePlacement::by_name(other, SHARE_SEED).map(|p| Box::new(p) as Box<dyn Policy>),
    }
}

/// The seed of the `random` share policy that [`by_name`] builds.
pub const SHARE_SEED: u64 = 42;

/// The names `by_name` knows.
pub const POLICY_NAMES: &[&str] = &[
    "best-fit",
    "spread",
    "fragmentation-aware",
    "packing",
    "random",
    "fgd",
    "fgd-gang",
];

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
            .map(|(id, c)| Unit {
                id,
                capacity: *c,
                empty_capacity: *c,
            })
            .collect()
    }

    #[test]
    fn best_fit_takes_the_tightest_that_holds() {
        assert_eq!(BestFit.choose_single(&units(&[16, 9, 12, 8]), 9), Some(1));
        assert_eq!(BestFit.choose_single(&units(&[4, 5]), 9), None);
        assert_eq!(BestFit.fill_next(&units(&[4, 5, 5]), 9), Some(1));
    }

    #[test]
    fn fragmentation_aware_fills_holes_before_breaking_whole_units() {
        let mut u = units(&[4, 6, 12]);
        u[1].empty_capacity = 16; // partly used
        assert_eq!(
            BestFit.choose_single(&u, 4),
            Some(0),
            "best fit breaks the small whole unit"
        );
        assert_eq!(FragmentationAware.choose_single(&u, 4), Some(1));
        assert_eq!(FragmentationAware.fill_next(&u, 20), Some(1));
    }

    #[test]
    fn spread_takes_the_roomiest() {
        assert_eq!(Spread.choose_single(&units(&[16, 9, 16, 8]), 9), Some(0));
    }
}
