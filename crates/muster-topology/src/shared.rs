//! Shared GPUs at device level: every GPU of a node has [`GPU_MILLI`] milli-GPU, and a pod asks
//! for whole GPUs or for a share of one (Alibaba's trace: `gpu_milli` < 1000 with one GPU).
//!
//! - [`SharedNode`] keeps each device's free share, so two pods of 600 never share one GPU and a
//!   whole-GPU pod only takes a device with nothing on it. [`SharedNode::take`] and
//!   [`SharedNode::give_back`] are exact inverses.
//! - [`TaskMix`] is the target workload: pod shapes and how often each comes.
//! - [`SharedNode::fragmentation`] is the fragmentation measure of Weng et al., "Beware of
//!   Fragmentation" (USENIX ATC'23): the free GPU share a typical task could not use.
//! - [`DevicePolicy`] chooses a node and its devices: [`DeviceBestFit`], [`DevicePacking`],
//!   [`DeviceRandom`] and [`Fgd`] (fragmentation gradient descent), as that paper defines them.
//!
//! Pure and synchronous: no I/O, no clock; randomness comes from a seed.

use std::collections::{BTreeMap, HashMap};

/// One whole GPU, in milli-GPU.
pub const GPU_MILLI: u32 = 1000;

/// Why a request or a change of a node is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShareError {
    /// A share of a GPU must be between 1 and 1000 milli.
    #[error("gpu_milli must be between 1 and {GPU_MILLI} for a pod with GPUs, got {0}")]
    MilliOutOfRange(u32),
    /// Only a single GPU can be shared.
    #[error("a share of a GPU (gpu_milli {milli} < {GPU_MILLI}) needs num_gpu 1, got {gpus}")]
    SharedMany {
        /// GPUs asked for.
        gpus: u32,
        /// Milli-GPU asked for per GPU.
        milli: u32,
    },
    /// A pod without GPUs asks for a share.
    #[error("gpu_milli must be 0 for a pod without GPUs, got {0}")]
    MilliWithoutGpus(u32),
    /// The devices given do not fit the request on the node.
    #[error("devices {devices:?} do not hold the request on node {node}")]
    DevicesDoNotFit {
        /// The node.
        node: String,
        /// The device indices.
        devices: Vec<u8>,
    },
    /// Giving back more than a device holds.
    #[error("giving back devices {devices:?} of node {node} would free more than was taken")]
    OverRelease {
        /// The node.
        node: String,
        /// The device indices.
        devices: Vec<u8>,
    },
}

/// What one pod asks of a node with shared GPUs.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShareRequest {
    /// Milli-CPU.
    pub cpu_milli: u64,
    /// Memory, MiB.
    pub memory_mib: u64,
    /// GPUs: 0 for a CPU-only pod, 1 for a share of one GPU.
    gpus: u32,
    /// Milli-GPU on each of its GPUs: 1000 for whole GPUs.
    gpu_milli: u32,
    /// GPU models it accepts; empty: any.
    pub models: Vec<String>,
}

impl ShareRequest {
    /// A request, checked: `gpu_milli` is per GPU, in 1..=1000 when `gpus` > 0 (less than
    /// 1000 only with one GPU), 0 without GPUs.
    pub fn new(
        cpu_milli: u64,
        memory_mib: u64,
        gpus: u32,
        gpu_milli: u32,
        models: Vec<String>,
    ) -> Result<ShareRequest, ShareError> {
        if gpus == 0 && gpu_milli != 0 {
            return Err(ShareError::MilliWithoutGpus(gpu_milli));
        }
        if gpus > 0 && !(1..=GPU_MILLI).contains(&gpu_milli) {
            return Err(ShareError::MilliOutOfRange(gpu_milli));
        }
        if gpus > 1 && gpu_milli < GPU_MILLI {
            return Err(ShareError::SharedMany {
                gpus,
                milli: gpu_milli,
            });
        }
        Ok(ShareRequest {
            cpu_milli,
            memory_mib,
            gpus,
            gpu_milli,
            models,
        })
    }

    /// GPUs asked for.
    pub fn gpus(&self) -> u32 {
        self.gpus
    }

    /// Milli-GPU asked for on each GPU.
    pub fn gpu_milli(&self) -> u32 {
        self.gpu_milli
    }

    /// Milli-GPU asked for in all.
    pub fn total_milli(&self) -> u64 {
        u64::from(self.gpus) * u64::from(self.gpu_milli)
    }

    /// Whether it asks for a share of one GPU rather than whole ones.
    pub fn is_share(&self) -> bool {
        self.gpus == 1 && self.gpu_milli < GPU_MILLI
    }

    /// Whether a GPU of `model` is one it accepts.
    pub fn accepts(&self, model: &str) -> bool {
        self.models.is_empty() || self.models.iter().any(|m| m == model)
    }
}

/// A count or an amount of milli-GPU as a float: all are far below 2^52, so exact.
#[expect(
    clippy::cast_precision_loss,
    reason = "counts and milli-GPU are far below 2^52"
)]
fn float(v: u64) -> f64 {
    v as f64
}

/// A score truncated to whole points, as the scheduler framework the paper's policies ran in
/// keeps scores (which merges near scores into ties, broken by node order).
#[expect(
    clippy::cast_possible_truncation,
    reason = "scores are whole points between 0 and 100, truncated on purpose"
)]
fn points(score: f64) -> i64 {
    score as i64
}

/// A small count as an `i64`.
fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Device indices on one node (a node has at most 255 GPUs).
pub type Devices = Vec<u8>;

/// A node with its free CPU, memory and per-device free GPU share.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SharedNode {
    /// The node's name.
    pub name: String,
    /// Its GPU model ("" for a node without GPUs).
    pub model: String,
    /// Free milli-CPU.
    pub cpu_milli: u64,
    /// Free memory, MiB.
    pub memory_mib: u64,
    /// Free milli-GPU per device.
    gpus: Vec<u32>,
}

impl SharedNode {
    /// An empty node with `gpus` devices of `model` (at most 255).
    pub fn new(
        name: impl Into<String>,
        model: impl Into<String>,
        cpu_milli: u64,
        memory_mib: u64,
        gpus: u8,
    ) -> SharedNode {
        SharedNode::with_free(
            name,
            model,
            cpu_milli,
            memory_mib,
            &vec![GPU_MILLI; usize::from(gpus)],
        )
    }

    /// A node whose devices have `free` milli-GPU left each (at most 1000 each, at most 255
    /// devices): a view of a node part of whose GPUs are in use.
    pub fn with_free(
        name: impl Into<String>,
        model: impl Into<String>,
        cpu_milli: u64,
        memory_mib: u64,
        free: &[u32],
    ) -> SharedNode {
        SharedNode {
            name: name.into(),
            model: model.into(),
            cpu_milli,
            memory_mib,
            gpus: free.iter().take(255).map(|f| (*f).min(GPU_MILLI)).collect(),
        }
    }

    /// Free milli-GPU of each device.
    pub fn devices(&self) -> &[u32] {
        &self.gpus
    }

    /// Free milli-GPU in all.
    pub fn free_milli(&self) -> u64 {
        self.gpus.iter().map(|&g| u64::from(g)).sum()
    }

    /// Milli-GPU in all when empty.
    pub fn capacity_milli(&self) -> u64 {
        u64::from(GPU_MILLI) * self.gpus.len() as u64
    }

    /// Whether `request` fits, whatever the devices chosen.
    pub fn fits(&self, request: &ShareRequest) -> bool {
        if self.cpu_milli < request.cpu_milli || self.memory_mib < request.memory_mib {
            return false;
        }
        if request.gpus == 0 {
            return true;
        }
        request.accepts(&self.model) && self.devices_holding(request.gpu_milli) >= request.gpus
    }

    /// How many devices have at least `milli` free.
    fn devices_holding(&self, milli: u32) -> u32 {
        let n = self.gpus.iter().filter(|&&g| g >= milli).count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// The devices a request takes under the usual choice: a share goes on the device with the
    /// least free share that holds it (the lowest index among equals), whole GPUs on the
    /// lowest-index empty devices. `None` when it does not fit.
    pub fn best_devices(&self, request: &ShareRequest) -> Option<Devices> {
        if !self.fits(request) {
            return None;
        }
        if request.gpus == 0 {
            return Some(Devices::new());
        }
        if request.is_share() {
            let (index, _) = self
                .gpus
                .iter()
                .enumerate()
                .filter(|&(_, &free)| free >= request.gpu_milli)
                .min_by_key(|&(i, &free)| (free, i))?;
            return Some(vec![u8::try_from(index).ok()?]);
        }
        let devices: Devices = self
            .gpus
            .iter()
            .enumerate()
            .filter(|&(_, &free)| free >= request.gpu_milli)
            .take(request.gpus as usize)
            .filter_map(|(i, _)| u8::try_from(i).ok())
            .collect();
        (devices.len() == request.gpus as usize).then_some(devices)
    }

    /// Takes `request` onto `devices` (one per GPU asked for, distinct).
    pub fn take(&mut self, request: &ShareRequest, devices: &[u8]) -> Result<(), ShareError> {
        let refused = || ShareError::DevicesDoNotFit {
            node: self.name.clone(),
            devices: devices.to_vec(),
        };
        if !self.fits(request) || devices.len() != request.gpus as usize {
            return Err(refused());
        }
        for (k, &d) in devices.iter().enumerate() {
            let free = self.gpus.get(usize::from(d)).copied();
            if devices[..k].contains(&d) || free.is_none_or(|free| free < request.gpu_milli) {
                return Err(refused());
            }
        }
        for &d in devices {
            self.gpus[usize::from(d)] -= request.gpu_milli;
        }
        self.cpu_milli -= request.cpu_milli;
        self.memory_mib -= request.memory_mib;
        Ok(())
    }

    /// Gives back what [`SharedNode::take`] took: the node is exactly as before.
    pub fn give_back(&mut self, request: &ShareRequest, devices: &[u8]) -> Result<(), ShareError> {
        let refused = || ShareError::OverRelease {
            node: self.name.clone(),
            devices: devices.to_vec(),
        };
        if devices.len() != request.gpus as usize {
            return Err(refused());
        }
        for (k, &d) in devices.iter().enumerate() {
            let free = self.gpus.get(usize::from(d)).copied();
            if devices[..k].contains(&d)
                || free.is_none_or(|free| free + request.gpu_milli > GPU_MILLI)
            {
                return Err(refused());
            }
        }
        for &d in devices {
            self.gpus[usize::from(d)] += request.gpu_milli;
        }
        self.cpu_milli += request.cpu_milli;
        self.memory_mib += request.memory_mib;
        Ok(())
    }

    /// The free GPU share that a task of shape `task` could not use here, in milli-GPU (the
    /// paper's per-task fragmentation): all of it when the task cannot run on this node at all
    /// (too little CPU, too few devices with room, a model it does not accept, or a task
    /// without GPUs), else the devices whose free share is too small for it. Memory is not
    /// counted, as in the paper.
    pub fn fragmentation_for(&self, task: &ShareRequest) -> u64 {
        let free = self.free_milli();
        if task.gpus == 0 || !task.accepts(&self.model) || self.cpu_milli < task.cpu_milli {
            return free;
        }
        if self.devices_holding(task.gpu_milli) < task.gpus {
            return free;
        }
        self.gpus
            .iter()
            .filter(|&&g| g < task.gpu_milli)
            .map(|&g| u64::from(g))
            .sum()
    }

    /// The node's fragmentation against a target workload: each task shape's
    /// [`SharedNode::fragmentation_for`] weighted by how often it comes, in milli-GPU.
    pub fn fragmentation(&self, mix: &TaskMix) -> f64 {
        if self.gpus.is_empty() {
            return 0.0;
        }
        mix.tasks
            .iter()
            .map(|(task, weight)| weight * float(self.fragmentation_for(task)))
            .sum()
    }

    /// The node's state as a key: nodes with equal keys place every request alike (up to
    /// which device is which).
    fn shape(&self) -> (&str, u64, u64, Vec<u32>) {
        let mut gpus = self.gpus.clone();
        gpus.sort_unstable();
        (&self.model, self.cpu_milli, self.memory_mib, gpus)
    }
}

/// A task shape: milli-CPU, GPUs, milli-GPU per GPU, models accepted.
type Shape = (u64, u32, u32, Vec<String>);

/// A target workload: task shapes and the share of tasks of each (summing to 1).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskMix {
    /// Shapes with their weights.
    pub tasks: Vec<(ShareRequest, f64)>,
}

impl TaskMix {
    /// The most common shapes among `pods` (by CPU, GPUs, share and models; memory is not
    /// part of a shape), most common first, until they cover `coverage` (0 to 1) of the pods,
    /// their weights scaled to sum to 1. Shapes equally common keep the order of their first
    /// pod.
    pub fn from_pods(pods: &[ShareRequest], coverage: f64) -> TaskMix {
        // Shape → (pods of it, index of its first pod).
        let mut counts: BTreeMap<Shape, (usize, usize)> = BTreeMap::new();
        for (i, pod) in pods.iter().enumerate() {
            let key = (pod.cpu_milli, pod.gpus, pod.gpu_milli, pod.models.clone());
            counts.entry(key).or_insert((0, i)).0 += 1;
        }
        let mut shapes: Vec<_> = counts.into_iter().collect();
        shapes.sort_by_key(|(_, (count, first))| (std::cmp::Reverse(*count), *first));
        let total = float(pods.len().max(1) as u64);
        let mut kept = Vec::new();
        let mut covered = 0usize;
        for ((cpu_milli, gpus, gpu_milli, models), (count, _)) in shapes {
            if float(covered as u64) / total >= coverage {
                break;
            }
            covered += count;
            let task = ShareRequest {
                cpu_milli,
                memory_mib: 0,
                gpus,
                gpu_milli,
                models,
            };
            kept.push((task, float(count as u64)));
        }
        let sum: f64 = kept.iter().map(|(_, w)| w).sum();
        for (_, w) in &mut kept {
            *w /= sum.max(1.0);
        }
        TaskMix { tasks: kept }
    }
}

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
        let empty_used = super::shared::count(
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

#[cfg(test)]
mod tests;
