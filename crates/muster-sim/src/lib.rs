//! Muster's simulator: replays a workload through exactly the admission and placement code the
//! controller runs, in virtual time.
//!
//! - [`scenario`]: scenario files — the cluster, the queue objects, the workload, the policies.
//! - [`trace`]: workload adapters (Muster CSV, Philly) and a synthetic generator.
//! - [`fill`]: the FGD paper's fill experiment on shared GPUs (`fill.csv`).
//! - [`engine`]: the discrete-event loop around `muster_admission::Scheduler::cycle`.
//! - [`forecast`]: start-time ranges for waiting jobs from a snapshot of the cluster, with
//!   runtimes learned from finished jobs, and how accurate they are on a replayed trace.
//! - [`report`]: `jobs.csv`, `summary.json`, policy comparisons and the text summary.
//! - [`plots`]: SVG plots of allocation, queue length and wait times.
//! - `variation`: what-if changes to a loaded scenario (runtimes announced wrongly,
//!   preemption settings), as [`scenario::Loaded`] methods.

mod autoscaler;
pub mod engine;
pub mod fill;
pub mod forecast;
pub mod page;
pub mod plots;
pub mod report;
pub mod scenario;
pub mod trace;
mod variation;
