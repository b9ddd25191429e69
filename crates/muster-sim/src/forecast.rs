//! Start-time ranges for waiting jobs: the cluster as it stands (a [`Snapshot`]) run forward
//! through admission's own cycle many times, each time with every job's runtime drawn from
//! what its family really ran ([`RuntimeModel`]). Where a job starts across the runs gives its
//! range: the 10th, 50th and 90th percentile start.
//!
//! The forward runs follow the simulator's rules: pods start when admitted, a job runs its
//! drawn runtime, an evicted job queues again at once, a job backing off queues again when
//! its backoff ends. Jobs keep arriving as they did shortly before the snapshot (copies of
//! recent submissions at their rate), since a later job of higher priority, or one small
//! enough to backfill, may start first.
//!
//! Each run draws a job's runtime from a sequence seeded by the run's number and the job's
//! name, not by the order jobs start in: two forecasts of the same snapshot with one change
//! (a what-if) see the same draws for the jobs they share, so the difference between them is
//! the change's, not chance's.

pub mod accuracy;
pub mod batches;
pub mod calibration;
mod normal;
mod run;
pub mod runtimes;
#[cfg(test)]
mod tests;
pub mod whatif;

use std::collections::BTreeMap;
use std::sync::Arc;

use muster_admission::{Holding, Job};
use muster_api::{ClusterQueueSpec, CohortSpec, ResourceFlavorSpec, Resources};
use muster_topology::NodeInfo;

pub use self::calibration::Calibration;
pub use self::runtimes::{Basis, FinishedRun, RuntimeModel};

/// A job that holds quota and nodes at the snapshot.
#[derive(Clone, Debug)]
pub struct RunningJob {
    /// The job as admission sees it, shared: every forward run's scheduler holds this one
    /// copy (a flood's snapshot holds thousands).
    pub job: Arc<Job>,
    /// What it holds, and since when (`since`: when it was admitted; unknown counts as now).
    pub holding: Holding,
    /// Its runtime keys, most specific first (see [`FinishedRun::keys`]).
    pub keys: Arc<[String]>,
    /// The batch it was submitted in ([`batches::batches`]), if known.
    pub batch: Option<String>,
    /// Capacity was bought for it from the autoscaler: while its holding names no nodes it
    /// waits for that capacity, which comes when the autoscaler says, so a forward run never
    /// ends it; placed on the capacity that came, it runs like any other job.
    pub provisioning: bool,
}

impl RunningJob {
    /// How long it has run at `now`, seconds (an unknown admission time counts as now);
    /// `None` while it waits for capacity bought for it and holds no nodes: it has not
    /// started.
    pub fn ran_for(&self, now: i64) -> Option<i64> {
        let waits_for_capacity =
            self.provisioning && self.holding.pod_sets.iter().all(|p| p.nodes.is_empty());
        (!waits_for_capacity).then(|| now - self.holding.since.unwrap_or(now).min(now))
    }
}

impl Snapshot {
    /// The same snapshot with copies of its running and waiting jobs of its own, shared
    /// with nothing else.
    #[must_use]
    pub fn with_own_jobs(&self) -> Snapshot {
        let mut own = self.clone();
        for r in &mut own.running {
            r.job = Arc::new((*r.job).clone());
        }
        for w in &mut own.waiting {
            w.job = Arc::new((*w.job).clone());
        }
        own
    }
}

/// A job that waits at the snapshot.
#[derive(Clone, Debug)]
pub struct WaitingJob {
    /// The job as admission sees it, shared as [`RunningJob::job`] is.
    pub job: Arc<Job>,
    /// Its runtime keys, most specific first.
    pub keys: Arc<[String]>,
    /// It backs off until this time and queues only then.
    pub queues_at: Option<i64>,
    /// The batch it was submitted in ([`batches::batches`]), if known.
    pub batch: Option<String>,
}

/// A job submitted shortly before the snapshot: forward runs submit copies of these, at the
/// rate they came in, so that jobs arriving after the snapshot are not left out.
#[derive(Clone, Debug)]
pub struct RecentJob {
    /// The job as admission saw it when it was submitted (often the same copy as a
    /// running or waiting job's).
    pub job: Arc<Job>,
    /// Its runtime keys, most specific first.
    pub keys: Arc<[String]>,
}

/// The cluster at one moment, as admission sees it.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// The moment, seconds.
    pub now: i64,
    /// ResourceFlavors (name, spec).
    pub flavors: Vec<(String, ResourceFlavorSpec)>,
    /// Every node; one that is not schedulable takes no new pods.
    pub nodes: Vec<NodeInfo>,
    /// Per node, what pods outside any job the snapshot holds use there (pods of other
    /// schedulers, daemons): it stays booked through every forward run.
    pub outside_usage: BTreeMap<String, Resources>,
    /// ClusterQueues (name, spec).
    pub cluster_queues: Vec<(String, ClusterQueueSpec)>,
    /// Cohorts (name, spec): the tree the ClusterQueues lend and borrow through.
    pub cohorts: Vec<(String, CohortSpec)>,
    /// LocalQueues (`namespace/name`, ClusterQueue).
    pub local_queues: Vec<(String, String)>,
    /// Namespaces and their labels.
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
    /// Jobs holding quota and nodes.
    pub running: Vec<RunningJob>,
    /// Jobs waiting, in any order (admission orders them).
    pub waiting: Vec<WaitingJob>,
    /// Jobs submitted in the [`Options::arrivals_window`] before `now`, in any state.
    pub recent: Vec<RecentJob>,
}

/// How to forecast.
#[derive(Clone, Debug)]
pub struct Options {
    /// Forward runs; percentiles come from these.
    pub samples: u32,
    /// Seeds the runtime draws.
    pub seed: u64,
    /// How far ahead to run, seconds: a job not started by then is "later than the horizon".
    /// Runs look at most about 136 years ahead (`u32::MAX - 1` seconds), however far this
    /// says.
    pub horizon: i64,
    /// The placement policy (the controller's is best fit).
    pub policy: String,
    /// Threads to run samples on (1: this one). The answer does not depend on it.
    pub threads: usize,
    /// How alike the runtimes of one family's jobs are within a forward run, from 0 (each
    /// job drawn on its own) to 1 (every job of the family at the same quantile of its
    /// history); `None`: as alike as the model learned ([`RuntimeModel::correlation`]). Jobs
    /// submitted together by one team tend to run alike; drawing them independently when
    /// they do makes ranges too narrow.
    pub correlation: Option<f64>,
    /// Jobs keep arriving during a forward run as they did over this many seconds before the
    /// snapshot ([`Snapshot::recent`]): at that rate, each a copy of one of them, for as long
    /// again after the snapshot (the rate says nothing about later). 0: none arrive, and a
    /// range says when a job starts if nothing is submitted that goes ahead.
    pub arrivals_window: i64,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            samples: 32,
            seed: 1,
            horizon: 30 * 24 * 3600,
            policy: "best-fit".to_owned(),
            threads: 1,
            correlation: None,
            arrivals_window: 6 * 3600,
        }
    }
}

/// When a waiting job starts, across the forward runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Eta {
    /// The job (`namespace/name`).
    pub job: String,
    /// The 10th, 50th and 90th percentile start, seconds; `None`: later than the horizon.
    pub p10: Option<i64>,
    /// The median start.
    pub p50: Option<i64>,
    /// The 90th percentile start.
    pub p90: Option<i64>,
    /// Runs in which it started within the horizon.
    pub started: u32,
    /// Runs in which admission bought capacity for it from the autoscaler instead: when that
    /// capacity comes is the autoscaler's to say, and those runs count as not started.
    pub buys_capacity: u32,
    /// Where its own runtime comes from.
    pub basis: Basis,
}

/// A forecast: one [`Eta`] per waiting job, in the snapshot's order of waiting jobs.
#[derive(Clone, Debug, PartialEq)]
pub struct Forecast {
    /// The snapshot's moment.
    pub now: i64,
    /// Forward runs made.
    pub samples: u32,
    /// Per waiting job.
    pub etas: Vec<Eta>,
    /// Jobs (running or waiting) with neither an announced runtime nor history: they run past
    /// the horizon in every run, so what waits behind them starts later than it will.
    pub unknown_runtimes: usize,
    /// The margins past ranges gave these ranges before their 10th and after their 90th
    /// percentile ([`Calibration::apply`]), in units of the wait each forecast; `None`: the
    /// ranges are the forward runs' own spread.
    pub margin: Option<(f64, f64)>,
}

/// Forecasts every waiting job's start. Errors: an unknown policy.
pub fn forecast(
    snapshot: &Snapshot,
    model: &RuntimeModel,
    options: &Options,
) -> Result<Forecast, String> {
    if muster_topology::by_name(&options.policy).is_none() {
        return Err(format!(
            "unknown policy {:?}; use one of {}",
            options.policy,
            muster_topology::POLICY_NAMES.join(", ")
        ));
    }
    let samples: Vec<u32> = (0..options.samples.max(1)).collect();
    let threads = options.threads.clamp(1, samples.len());
    // Each sample is independent; chunks keep their order, so the answer is the same for any
    // number of threads.
    let chunk = samples.len().div_ceil(threads);
    let batches = &batches::BatchDraws::new(model.batches(), snapshot, |keys, announced| {
        model.batch_prior(keys, announced)
    });
    let shared = threads == 1;
    let starts: Vec<run::Starts> = std::thread::scope(|scope| {
        let handles: Vec<_> = samples
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    // Every forward run's scheduler holds the snapshot's jobs, counting each
                    // hold on the job's shared count: threads sharing them would pass those
                    // counts' cache lines between cores at every hold (10k × 1k on two
                    // threads: 12.3 s against 9.4 s with a copy each). One copy per thread.
                    let own = (!shared).then(|| snapshot.with_own_jobs());
                    let snapshot = own.as_ref().unwrap_or(snapshot);
                    let start = run::Start::new(snapshot, options);
                    part.iter()
                        .map(|&i| run::forward(snapshot, &start, model, batches, options, i))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    let count = u32::try_from(starts.len()).unwrap_or(u32::MAX);
    let etas = snapshot
        .waiting
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let mut at: Vec<Option<i64>> =
                starts.iter().map(|s| s.start(i, snapshot.now)).collect();
            // `None` (not within the horizon) sorts after every time.
            at.sort_by_key(|t| (t.is_none(), *t));
            let started = u32::try_from(at.iter().flatten().count()).unwrap_or(u32::MAX);
            let buys_capacity =
                u32::try_from(starts.iter().filter(|s| s.bought[i]).count()).unwrap_or(u32::MAX);
            Eta {
                job: w.job.id.clone(),
                p10: range_end(&at, 10, false),
                p50: percentile(&at, 50),
                p90: range_end(&at, 90, true),
                started,
                buys_capacity,
                basis: model.basis(&w.keys, w.job.expected_runtime),
            }
        })
        .collect();
    let unknown_runtimes = snapshot
        .running
        .iter()
        .map(|r| (&r.keys, r.job.expected_runtime))
        .chain(
            snapshot
                .waiting
                .iter()
                .map(|w| (&w.keys, w.job.expected_runtime)),
        )
        .filter(|(keys, announced)| model.basis(keys, *announced) == Basis::Unknown)
        .count();
    Ok(Forecast {
        now: snapshot.now,
        samples: count,
        etas,
        unknown_runtimes,
        margin: None,
    })
}

/// An end of the range, the `p`th percentile of when the job starts, from `sorted` (the
/// runs' starts, ascending, `None` last): the ⌊p (n + 1) / 100⌋-th of n for the lower end
/// (`upper` false), the ⌈p (n + 1) / 100⌉-th for the upper, within the first and the last.
/// The real start is not one of the runs but, were the model right, one more like them; one
/// more draw falls below the k-th smallest of n with chance k / (n + 1), so these ranks keep
/// it below the lower end and above the upper with at most `p` % and `100 − p` % chance.
/// The nearest ranks (4th and 29th of 32) would hold it only 25 / 33 = 76 % of the time,
/// however good the model.
fn range_end(sorted: &[Option<i64>], p: usize, upper: bool) -> Option<i64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let scaled = p * (n + 1);
    let rank = if upper {
        scaled.div_ceil(100)
    } else {
        scaled / 100
    };
    sorted[rank.clamp(1, n) - 1]
}

/// The nearest-rank `p`th percentile of `sorted` (ascending, `None` last).
fn percentile(sorted: &[Option<i64>], p: usize) -> Option<i64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank - 1]
}
