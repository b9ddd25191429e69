//! The fill experiment of Weng et al., "Beware of Fragmentation" (USENIX ATC'23), on shared
//! GPUs: pods drawn from a trace arrive one by one and never leave, until the GPU share they
//! ask for reaches a target share of the fleet's GPUs (130 % in the paper). After each arrival
//! the GPU allocation and the fragmentation are read; a row per whole percent of arrived load
//! gives the curve a policy is judged by.
//!
//! The protocol, as the paper's simulator runs it:
//! - the trace's pods, shuffled by the seed, arrive first; then pods drawn from the trace with
//!   replacement, until the next one would take the asked share over the target;
//! - nodes equal for a policy are told apart by a seeded random order of the fleet;
//! - FGD's target workload is the trace's most common pod shapes covering 95 % of its pods;
//! - a pod that fits nowhere counts as arrived and is not placed;
//! - allocation is placed milli-GPU over the fleet's, fragmentation the summed node
//!   fragmentation over the fleet's milli-GPU; the value at a whole percent x is the mean over
//!   the arrivals whose arrived share rounds to x.
//!
//! Pure: nodes and pods in, rows out.

use std::fmt::Write as _;

use muster_topology::shared::{ShareRequest, SharedNode, TaskMix, device_policy};

use crate::trace::Rng;

/// The fill experiment's published allocation on openb's default pod list and GPU node
/// list (percent of the fleet's GPUs at 100, 110, 120 and 130 % arrived load, mean of seeds
/// 42 to 51), from the authors' artifact (`experiments/analysis/expected_results`) of Weng et
/// al., USENIX ATC'23.
pub const PAPER: [(&str, [(f64, f64); 4]); 4] = [
    (
        "fgd",
        [
            (100.0, 95.23),
            (110.0, 95.30),
            (120.0, 95.35),
            (130.0, 95.39),
        ],
    ),
    (
        "best-fit",
        [
            (100.0, 92.86),
            (110.0, 92.94),
            (120.0, 93.00),
            (130.0, 93.08),
        ],
    ),
    (
        "packing",
        [
            (100.0, 91.78),
            (110.0, 91.86),
            (120.0, 91.92),
            (130.0, 92.00),
        ],
    ),
    (
        "random",
        [
            (100.0, 86.30),
            (110.0, 86.88),
            (120.0, 87.28),
            (130.0, 87.47),
        ],
    ),
];

/// How to run the experiment.
#[derive(Clone, Debug)]
pub struct FillOptions {
    /// Arrivals stop before the asked GPU share passes this percent of the fleet's GPUs.
    pub target_percent: u32,
    /// The share of the trace's pods FGD's target workload covers (0 to 1).
    pub coverage: f64,
}

impl Default for FillOptions {
    fn default() -> Self {
        FillOptions {
            target_percent: 130,
            coverage: 0.95,
        }
    }
}

/// One point of a curve: at `arrived_percent` of the fleet's GPUs asked for, the share
/// allocated and the share fragmented (both percent of the fleet's GPUs).
#[derive(Clone, Debug, PartialEq)]
pub struct FillRow {
    /// The policy.
    pub policy: String,
    /// GPUs asked for so far, percent of the fleet's (whole).
    pub arrived_percent: u32,
    /// GPUs allocated, percent of the fleet's.
    pub allocated_percent: f64,
    /// Free GPU share that the target workload could not use, percent of the fleet's GPUs.
    pub fragmented_percent: f64,
}

/// Why an experiment cannot run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FillError {
    /// The fleet has no GPUs.
    #[error("the node list has no GPUs")]
    NoGpus,
    /// The trace has no pod asking for GPUs.
    #[error("the pod list has no pod that asks for GPUs")]
    NoGpuPods,
    /// An unknown policy.
    #[error("unknown policy {0:?}; known: {known}", known = muster_topology::shared::DEVICE_POLICY_NAMES.join(", "))]
    UnknownPolicy(String),
}

/// One arrival's reading: (arrived, allocated, fragmented), milli-GPU.
type Reading = (u64, u64, f64);

/// Runs the experiment for `policy` with `seed`: a row per whole percent from 0 to the target.
pub fn fill(
    nodes: &[SharedNode],
    pods: &[ShareRequest],
    policy: &str,
    seed: u64,
    options: &FillOptions,
) -> Result<Vec<FillRow>, FillError> {
    let capacity: u64 = nodes.iter().map(SharedNode::capacity_milli).sum();
    if capacity == 0 {
        return Err(FillError::NoGpus);
    }
    if !pods.iter().any(|p| p.total_milli() > 0) {
        return Err(FillError::NoGpuPods);
    }
    let mix = TaskMix::from_pods(pods, options.coverage);
    let mut chooser = device_policy(policy, seed, &mix)
        .ok_or_else(|| FillError::UnknownPolicy(policy.to_owned()))?;
    let mut rng = Rng::new(seed);
    let order = shuffled((0..nodes.len()).collect(), &mut rng);
    let arrivals = arrivals(pods, capacity, options.target_percent, &mut rng);

    let mut nodes = nodes.to_vec();
    let mut fragmentation: Vec<f64> = nodes.iter().map(|n| n.fragmentation(&mix)).collect();
    let mut fragmented: f64 = fragmentation.iter().sum();
    let (mut arrived, mut allocated) = (0u64, 0u64);
    let mut readings: Vec<Reading> = Vec::with_capacity(arrivals.len());
    for &i in &arrivals {
        let pod = &pods[i];
        arrived += pod.total_milli();
        if let Some(pick) = chooser.choose(&nodes, &order, pod) {
            let node = &mut nodes[pick.node];
            if node.take(pod, &pick.devices).is_ok() {
                allocated += pod.total_milli();
                let now = node.fragmentation(&mix);
                fragmented += now - fragmentation[pick.node];
                fragmentation[pick.node] = now;
            }
        }
        readings.push((arrived, allocated, fragmented));
    }
    Ok(rows(policy, &readings, capacity, options.target_percent))
}

/// The mean curve of several runs of one policy (each a row per whole percent).
pub fn mean(runs: &[Vec<FillRow>]) -> Vec<FillRow> {
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    first
        .iter()
        .map(|row| {
            let same: Vec<&FillRow> = runs
                .iter()
                .filter_map(|r| r.iter().find(|x| x.arrived_percent == row.arrived_percent))
                .collect();
            let k = float(same.len() as u64);
            FillRow {
                policy: row.policy.clone(),
                arrived_percent: row.arrived_percent,
                allocated_percent: same.iter().map(|x| x.allocated_percent).sum::<f64>() / k,
                fragmented_percent: same.iter().map(|x| x.fragmented_percent).sum::<f64>() / k,
            }
        })
        .collect()
}

/// `fill.csv`: `policy,arrived_percent,allocated_percent,fragmented_percent`.
pub fn csv(rows: &[FillRow]) -> String {
    let mut out = String::from("policy,arrived_percent,allocated_percent,fragmented_percent\n");
    for r in rows {
        let _ = writeln!(
            out,
            "{},{},{:.2},{:.2}",
            r.policy, r.arrived_percent, r.allocated_percent, r.fragmented_percent
        );
    }
    out
}

/// The order of arrival (indices into `pods`): every pod shuffled, then pods drawn with
/// replacement while the GPU share asked stays within `target_percent` of `capacity`.
fn arrivals(
    pods: &[ShareRequest],
    capacity: u64,
    target_percent: u32,
    rng: &mut Rng,
) -> Vec<usize> {
    let limit = capacity * u64::from(target_percent) / 100;
    let mut order = Vec::new();
    let mut asked = 0u64;
    for i in shuffled((0..pods.len()).collect(), rng) {
        if asked + pods[i].total_milli() > limit {
            return order;
        }
        asked += pods[i].total_milli();
        order.push(i);
    }
    loop {
        let i = rng.below(pods.len());
        if asked + pods[i].total_milli() > limit {
            return order;
        }
        asked += pods[i].total_milli();
        order.push(i);
    }
}

/// `items` in a seeded random order (Fisher–Yates).
fn shuffled(mut items: Vec<usize>, rng: &mut Rng) -> Vec<usize> {
    for i in (1..items.len()).rev() {
        let j = rng.below(i + 1);
        items.swap(i, j);
    }
    items
}

/// A count or milli-GPU as a float: all are far below 2^52, so exact.
#[expect(
    clippy::cast_precision_loss,
    reason = "milli-GPU and counts are far below 2^52"
)]
fn float(v: u64) -> f64 {
    v as f64
}

/// A row per whole percent: the mean of the readings whose arrived share rounds to it (the
/// last value again when none does, as a curve holds it; the curve ends at the last arrival).
fn rows(policy: &str, readings: &[Reading], capacity: u64, target_percent: u32) -> Vec<FillRow> {
    let percent = |milli: f64| milli * 100.0 / float(capacity);
    // The whole percent `milli` rounds to (halves up).
    let whole = |milli: u64| (milli * 200 + capacity) / (2 * capacity);
    let mut sums: Vec<(f64, f64, u32)> = vec![(0.0, 0.0, 0); target_percent as usize + 1];
    for &(arrived, allocated, fragmented) in readings {
        let slot = usize::try_from(whole(arrived))
            .ok()
            .and_then(|x| sums.get_mut(x));
        if let Some(slot) = slot {
            slot.0 += percent(float(allocated));
            slot.1 += percent(fragmented);
            slot.2 += 1;
        }
    }
    let last_arrival = readings.last().map_or(0, |r| whole(r.0));
    let mut out = Vec::with_capacity(sums.len());
    let mut last = (0.0, readings.first().map_or(0.0, |r| percent(r.2)));
    for (x, (allocated, fragmented, count)) in (0u32..).zip(sums) {
        if u64::from(x) > last_arrival {
            break;
        }
        if count > 0 {
            last = (allocated / f64::from(count), fragmented / f64::from(count));
        }
        out.push(FillRow {
            policy: policy.to_owned(),
            arrived_percent: x,
            allocated_percent: last.0,
            fragmented_percent: last.1,
        });
    }
    out
}

#[cfg(test)]
mod tests;
