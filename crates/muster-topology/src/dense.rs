//! A fleet's resources as dense vectors: the registry of every resource name its nodes have
//! (the index of every vector), a node's allocatable amounts and a pod's requests in
//! milli-units against it, and how many pods of one request fit in what is left. The tree keeps
//! its free capacity in these vectors so that a pass over every node reads memory in order.

use muster_api::Resources;
use muster_api::resources::names;

use crate::node::NodeInfo;

/// A pod's requests against a topology's resource registry: (resource index, milli-units).
/// `None` when it asks for a resource no node has.
pub type DenseRequest = Option<Vec<(usize, u64)>>;

/// One milli-unit amount of a whole GPU device.
pub(crate) const DEVICE_MILLI: u64 = 1000;

/// What a pod of `requests` books on a node where it took `devices` (see
/// [`crate::Topology::device_choice`]): its part of one GPU ([`names::GPU_SHARE`]) on that device, or
/// each whole device. Without devices, `requests` as they are.
pub fn on_devices(requests: &Resources, devices: &[u32]) -> Resources {
    let mut usage = requests.clone();
    if devices.is_empty() {
        return usage;
    }
    let share = requests.get(names::GPU_SHARE);
    usage.set(names::GPU_SHARE, muster_api::Amount::ZERO);
    let each = if share.is_zero() {
        muster_api::Amount::from_milli(DEVICE_MILLI)
    } else {
        share
    };
    for d in devices {
        usage.add(&names::gpu_device(*d), each);
    }
    usage
}

/// How many pods fit when each takes `request` and `free(k)` is left of resource `k`, at most
/// `cap`. Divides only when a resource is short of `cap` pods' worth: most nodes are either
/// full or roomy, and the division dominated the per-node pass.
pub(crate) fn pods_within(request: &DenseRequest, cap: u32, free: impl Fn(usize) -> u64) -> u32 {
    let Some(request) = request else { return 0 };
    let mut fit = u64::from(cap);
    for &(k, milli) in request {
        let left = free(k);
        if left < milli.saturating_mul(fit) {
            fit = left / milli;
            if fit == 0 {
                return 0;
            }
        }
    }
    u32::try_from(fit).unwrap_or(cap)
}

/// Every resource of `nodes`, sorted: what any node has allocatable, and the per-device
/// resources and [`names::GPU_SHARE`] when some node's GPUs are tracked one by one; with the
/// most devices any node has.
pub(crate) fn registry<'a>(
    nodes: impl Iterator<Item = &'a NodeInfo> + Clone,
) -> (Vec<String>, u32) {
    let most_devices = nodes.clone().map(NodeInfo::gpu_devices).max().unwrap_or(0);
    let mut resources: Vec<String> = nodes
        .flat_map(|n| n.allocatable.iter().map(|(name, _)| name.to_owned()))
        .collect();
    if most_devices > 0 {
        resources.push(names::GPU_SHARE.to_owned());
        resources.extend((0..most_devices).map(names::gpu_device));
    }
    resources.sort();
    resources.dedup();
    (resources, most_devices)
}

/// What `info` (with `devices` tracked GPU devices) has of `resource`, milli-units: one GPU of
/// each of its tracked devices, all of them as [`names::GPU_SHARE`], and else its allocatable
/// amount.
pub(crate) fn allocatable(info: &NodeInfo, devices: u32, resource: &str) -> u64 {
    if devices == 0 {
        return info.allocatable.get(resource).milli();
    }
    if resource == names::GPU_SHARE {
        return u64::from(devices) * DEVICE_MILLI;
    }
    match resource
        .strip_prefix(names::GPU_DEVICE_PREFIX)
        .and_then(|d| d.parse::<u32>().ok())
    {
        Some(d) if d < devices => DEVICE_MILLI,
        Some(_) => 0,
        None => info.allocatable.get(resource).milli(),
    }
}
