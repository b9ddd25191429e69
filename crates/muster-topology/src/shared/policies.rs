//! The device policies: how one pod's node and devices are chosen among shared-GPU nodes —
//! best-fit, packing, random, and fragmentation gradient descent — as Weng et al. define them.

use std::collections::HashMap;

use super::{Devices, GPU_MILLI, ShareRequest, SharedNode, TaskMix, count, float, points};

/// Where a request goes: a node (an index into the nodes given) and its devices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DevicePick {
    /// The node's index.
    pub node: usize,
    /// Its devices.
    pub devices: Devices,
}

/// A way to choose a node and devices for one pod. `order` ranks the nodes for ties (the
/// first wins); every policy is deterministic for a given order (and seed).
pub trait DevicePolicy: Send {
    /// The policy's name.
    fn name(&self) -> &'static str;

    /// Where `request` goes among `nodes`, or `None` when no node holds it.
    fn choose(
        &mut self,
        nodes: &[SharedNode],
        order: &[usize],
        request: &ShareRequest,
    ) -> Option<DevicePick>;
}

/// The node scores a policy gives, computed once per distinct node state.
fn best_by_score<S: Ord + Copy>(
    nodes: &[SharedNode],
    order: &[usize],
    request: &ShareRequest,
    mut score: impl FnMut(&SharedNode) -> Option<(S, Devices)>,
) -> Option<DevicePick> {
    let mut memo: HashMap<(&str, u64, u64, Vec<u32>), Option<S>> = HashMap::new();
    let mut best: Option<(S, usize)> = None;
    for &i in order {
        let node = &nodes[i];
        if !node.fits(request) {
            continue;
        }
        let s = *memo
            .entry(node.shape())
            .or_insert_with(|| score(node).map(|(s, _)| s));
        if let Some(s) = s
            && best.is_none_or(|(b, _)| s > b)
        {
            best = Some((s, i));
        }
    }
    let (_, node) = best?;
    let (_, devices) = score(&nodes[node])?;
    Some(DevicePick { node, devices })
}

/// The paper's best-fit: the node left with the least CPU and GPU share (each normalised by a
/// 128-core, 8-GPU node), scores truncated to whole points and rescaled across the nodes that
/// hold the pod, as the scheduler framework does.
#[derive(Clone, Copy, Debug, Default)]
pub struct DeviceBestFit;

impl DeviceBestFit {
    fn raw(node: &SharedNode, request: &ShareRequest) -> i64 {
        let cpu_left = float(node.cpu_milli.saturating_sub(request.cpu_milli)) / 128_000.0;
        let gpu_left = float(node.free_milli().saturating_sub(request.total_milli())) / 8_000.0;
        let s = 0.5 * cpu_left + 0.5 * gpu_left;
        points((1.0 - s) * 100.0)
    }
}

impl DevicePolicy for DeviceBestFit {
    fn name(&self) -> &'static str {
        "best-fit"
    }

    fn choose(
        &mut self,
        nodes: &[SharedNode],
        order: &[usize],
        request: &ShareRequest,
    ) -> Option<DevicePick> {
        // Rescaling to 0..100 is monotone but merges nearby scores: done as the framework
        // does it, from the range over the nodes that hold the pod.
        let raws: Vec<i64> = order
            .iter()
            .filter(|&&i| nodes[i].fits(request))
            .map(|&i| Self::raw(&nodes[i], request))
            .collect();
        let (min, max) = (raws.iter().min().copied()?, raws.iter().max().copied()?);
        best_by_score(nodes, order, request, |node| {
            let raw = Self::raw(node, request);
            let scaled = if max > min {
                (raw - min) * 100 / (max - min)
            } else {
                0
            };
            Some((scaled, node.best_devices(request)?))
        })
    }
}

/// The paper's GPU packing: shares go onto devices already in use first, then onto nodes
/// already in use, and whole empty nodes are touched last (smaller ones first).
#[derive(Clone, Copy, Debug, Default)]
pub struct DevicePacking;

impl DevicePacking {
    fn score(node: &SharedNode, request: &ShareRequest) -> Option<(i64, Devices)> {
        let devices = tightest_devices(node, request)?;
        if request.gpus == 0 {
            return Some((0, devices));
        }
        let count = count(node.gpus.len());
        let untouched = node.gpus.iter().all(|&g| g == GPU_MILLI);
        let empty_used = super::count(
            devices
                .iter()
                .filter(|&&d| node.gpus[usize::from(d)] == GPU_MILLI)
                .count(),
        );
        let score = if untouched {
            (33 - count).max(count)
        } else if empty_used > 0 {
            (50 - empty_used).max(33)
        } else {
            let free_percent: i64 = devices
                .iter()
                .map(|&d| i64::from(node.gpus[usize::from(d)]) / 10)
                .sum();
            (100 - free_percent / 10).max(50)
        };
        Some((score, devices))
    }
}

impl DevicePolicy for DevicePacking {
    fn name(&self) -> &'static str {
        "packing"
    }

    fn choose(
        &mut self,
        nodes: &[SharedNode],
        order: &[usize],
        request: &ShareRequest,
    ) -> Option<DevicePick> {
        best_by_score(nodes, order, request, |node| Self::score(node, request))
    }
}

/// The devices with the least free share that hold the request, fewest-free first (lowest
/// index among equals): where a request lands when a policy packs devices.
fn tightest_devices(node: &SharedNode, request: &ShareRequest) -> Option<Devices> {
    if !node.fits(request) {
        return None;
    }
    let mut holding: Vec<(u32, u8)> = node
        .gpus
        .iter()
        .enumerate()
        .filter(|&(_, &g)| g >= request.gpu_milli)
        .filter_map(|(i, &g)| Some((g, u8::try_from(i).ok()?)))
        .collect();
    holding.sort_unstable();
    let devices: Devices = holding
        .into_iter()
        .take(request.gpus as usize)
        .map(|(_, d)| d)
        .collect();
    (devices.len() == request.gpus as usize).then_some(devices)
}

/// Any node that holds the pod, uniformly at random, and random devices on it (seeded).
#[derive(Clone, Debug)]
pub struct DeviceRandom {
    rng: crate::Rng,
}

impl DeviceRandom {
    /// A random policy drawing from `seed`.
    pub fn new(seed: u64) -> DeviceRandom {
        DeviceRandom {
            rng: crate::Rng::new(seed),
        }
    }
}

impl DevicePolicy for DeviceRandom {
    fn name(&self) -> &'static str {
        "random"
    }

    fn choose(
        &mut self,
        nodes: &[SharedNode],
        order: &[usize],
        request: &ShareRequest,
    ) -> Option<DevicePick> {
        let feasible: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&i| nodes[i].fits(request))
            .collect();
        if feasible.is_empty() {
            return None;
        }
        let node = feasible[self.rng.below(feasible.len())];
        let mut holding: Devices = nodes[node]
            .gpus
            .iter()
            .enumerate()
            .filter(|&(_, &g)| g >= request.gpu_milli)
            .filter_map(|(i, _)| u8::try_from(i).ok())
            .collect();
        let mut devices = Devices::new();
        for _ in 0..request.gpus {
            let k = self.rng.below(holding.len());
            devices.push(holding.swap_remove(k));
        }
        devices.sort_unstable();
        Some(DevicePick { node, devices })
    }
}

/// Fragmentation gradient descent: the node (and device) whose fragmentation against the
/// target workload grows least — or falls most — when the pod lands there. Scores are the
/// paper's: the change in milli-GPU through a sigmoid, truncated to whole points.
#[derive(Clone, Debug)]
pub struct Fgd {
    mix: TaskMix,
}

impl Fgd {
    /// FGD against the target workload `mix`.
    pub fn new(mix: TaskMix) -> Fgd {
        Fgd { mix }
    }

    /// The score of `request` on `devices` of `node`, whose fragmentation is `before`.
    fn score_on(
        &self,
        node: &SharedNode,
        before: f64,
        request: &ShareRequest,
        devices: &[u8],
    ) -> Option<i64> {
        let mut after = node.clone();
        after.take(request, devices).ok()?;
        let gain = (before - after.fragmentation(&self.mix)) / 1000.0;
        Some(points(100.0 / (1.0 + (-gain).exp())))
    }

    fn score(&self, node: &SharedNode, request: &ShareRequest) -> Option<(i64, Devices)> {
        let before = node.fragmentation(&self.mix);
        if request.is_share() {
            // Every device that holds the share is tried; the best wins, the lowest index
            // among equals.
            let mut best: Option<(i64, u8)> = None;
            for (i, &free) in node.gpus.iter().enumerate() {
                let Ok(d) = u8::try_from(i) else { break };
                if free < request.gpu_milli {
                    continue;
                }
                let s = self.score_on(node, before, request, &[d])?;
                if best.is_none_or(|(b, _)| s > b) {
                    best = Some((s, d));
                }
            }
            let (s, d) = best?;
            return Some((s, vec![d]));
        }
        let devices = tightest_devices(node, request)?;
        let s = self.score_on(node, before, request, &devices)?;
        // Whole devices are all alike: the lowest-index empty ones are taken.
        Some((s, node.best_devices(request)?))
    }
}

impl DevicePolicy for Fgd {
    fn name(&self) -> &'static str {
        "fgd"
    }

    fn choose(
        &mut self,
        nodes: &[SharedNode],
        order: &[usize],
        request: &ShareRequest,
    ) -> Option<DevicePick> {
        let this = &*self;
        best_by_score(nodes, order, request, |node| this.score(node, request))
    }
}

/// The device policies by name: `best-fit`, `packing`, `random` (drawing from `seed`), and
/// `fgd` (against `mix`).
pub fn device_policy(name: &str, seed: u64, mix: &TaskMix) -> Option<Box<dyn DevicePolicy>> {
    match name {
        "best-fit" => Some(Box::new(DeviceBestFit)),
        "packing" => Some(Box::new(DevicePacking)),
        "random" => Some(Box::new(DeviceRandom::new(seed))),
        "fgd" => Some(Box::new(Fgd::new(mix.clone()))),
        _ => None,
    }
}

/// The names [`device_policy`] takes.
pub const DEVICE_POLICY_NAMES: [&str; 4] = ["best-fit", "packing", "random", "fgd"];
