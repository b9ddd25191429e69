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

use std::collections::BTreeMap;

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

mod policies;

pub use self::policies::{
    DEVICE_POLICY_NAMES, DeviceBestFit, DevicePacking, DevicePick, DevicePolicy, DeviceRandom, Fgd,
    device_policy,
};

#[cfg(test)]
mod tests;
