//! What one pass found, for metrics and logs.

use std::collections::BTreeMap;

/// What one pass found, for metrics and logs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// Jobs the cycle considered.
    pub considered: usize,
    /// Jobs settled against the cluster this pass (those whose inputs changed; every job
    /// after a change that every job reads).
    pub settled: usize,
    /// Whether every waiting job's position and reason was read again (else nothing they
    /// depend on moved, and the last pass's stand).
    pub explained: bool,
    /// Why the pass built admission's scheduler afresh (`None`: it brought the one the last
    /// pass left up to the index); the causes are those of the `scheduler_rebuilds` metric.
    pub scheduler_rebuilt: Option<&'static str>,
    /// Admissions.
    pub admitted: usize,
    /// Gangs evicted, by reason.
    pub evicted: BTreeMap<&'static str, usize>,
    /// Jobs preempted.
    pub preempted: usize,
    /// Pending jobs per (ClusterQueue, reason kind); jobs without a queue under "".
    pub pending: BTreeMap<(String, String), i64>,
    /// Seconds from creation to admission, one per admission.
    pub waited: Vec<i64>,
    /// Seconds from creation to all pods Ready, one per gang that became Ready.
    pub to_running: Vec<i64>,
    /// Quota in use: (ClusterQueue, flavor, resource, amount in the resource's units).
    pub usage: Vec<(String, String, String, f64)>,
    /// GPU (or TPU chip) seconds of runs evicted this pass, from admission to eviction: work
    /// thrown away unless the job checkpointed (which the controller cannot see).
    pub lost_gpu_seconds: u64,
    /// GPU (or TPU chip) seconds of runs that succeeded this pass, from admission to the end.
    pub completed_gpu_seconds: u64,
    /// Per job that finished this pass (succeeded or failed), how often it was evicted.
    pub finished_requeues: Vec<i32>,
}
