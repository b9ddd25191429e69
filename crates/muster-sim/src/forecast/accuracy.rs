//! How good the start-time ranges are, measured: a scenario is replayed once for the truth;
//! at many moments of that replay the state is taken as a [`Snapshot`], its waiting jobs'
//! starts are forecast from what had finished by then (the past only), and each forecast is
//! compared with when the job really started. Two baselines are scored the same way:
//!
//! - **announced** (as Slurm's `squeue --start`): one forward run in which every job runs what
//!   it announced; a job that announced nothing runs the median of every run finished so far.
//! - **position**: the job's place in its ClusterQueue divided by the rate at which that
//!   queue admitted jobs over the last day.
//!
//! A pair is one waiting job at one moment, counted when the job's real wait (admission minus
//! submission) was over `min_wait`. The error of a pair is |forecast start − real start| ÷
//! real wait; a method that gives no start (later than the horizon, or no rate) counts as an
//! infinite error.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::Arc;

use muster_admission::{Holding, JobState, Scheduler};
use muster_api::ObjectRef;

use super::batches::batches;
use super::calibration::Calibration;
use super::runtimes::{FinishedRun, RuntimeModel};
use super::{Options, RecentJob, RunningJob, Snapshot, WaitingJob, forecast};
use crate::engine::{JobRecord, Observer, admission_job, run_observed};
use crate::scenario::Loaded;
use crate::trace::TraceJob;

/// The window over which the position baseline measures a queue's admission rate, seconds.
const RATE_WINDOW: i64 = 24 * 3600;

/// How to check.
#[derive(Clone, Debug)]
pub struct AccuracyOptions {
    /// Seconds between snapshots (from the first submission).
    pub every: i64,
    /// Only jobs whose real wait exceeded this many seconds are scored.
    pub min_wait: i64,
    /// The forecasts' options (samples, seed, horizon, policy, threads).
    pub forecast: Options,
}

/// One scored pair: a waiting job at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pair {
    /// The moment of the snapshot.
    pub moment: i64,
    /// The job's trace id.
    pub job: String,
    /// When it was submitted.
    pub submit: i64,
    /// When it really started (was first admitted).
    pub start: i64,
    /// The forecast's 10th, 50th and 90th percentile start (`None`: past the horizon), with
    /// the margin of the ranges scored before it.
    pub range: [Option<i64>; 3],
    /// The same, as the forward runs spread (no margin).
    pub raw: [Option<i64>; 3],
    /// The announced-runtime baseline's start.
    pub announced: Option<i64>,
    /// The position baseline's start.
    pub position: Option<i64>,
}

impl Pair {
    /// The real wait, seconds.
    pub fn wait(&self) -> i64 {
        self.start - self.submit
    }

    /// |`at` − real start| ÷ real wait; infinite without a start.
    pub fn error(&self, at: Option<i64>) -> f64 {
        at.map_or(f64::INFINITY, |t| {
            #[expect(clippy::cast_precision_loss, reason = "seconds far below 2^53")]
            let e = (t - self.start).abs() as f64 / self.wait().max(1) as f64;
            e
        })
    }

    /// Whether the real start lies within the forecast's 10th–90th percentile range.
    pub fn covered(&self) -> bool {
        let [p10, _, p90] = self.range;
        let after_p10 = p10.is_some_and(|t| t <= self.start);
        let before_p90 = p90.is_none_or(|t| self.start <= t);
        after_p10 && before_p90
    }
}

/// A method's score over every pair.
#[derive(Clone, Debug, PartialEq)]
pub struct Score {
    /// `range` (the forecast's median), `announced` or `position`.
    pub method: &'static str,
    /// Pairs whose real start lay in the 10th–90th percentile range (ranges only).
    pub covered: Option<usize>,
    /// The median relative error (infinite when most pairs had no answer).
    pub median_error: f64,
    /// Pairs the method gave no start for.
    pub no_answer: usize,
}

/// The check's outcome.
#[derive(Clone, Debug)]
pub struct Accuracy {
    /// Snapshots that held a scored job.
    pub moments: usize,
    /// Distinct jobs scored.
    pub jobs: usize,
    /// Every scored pair, by moment then job.
    pub pairs: Vec<Pair>,
    /// Per method: range, announced, position.
    pub scores: Vec<Score>,
}

/// What the replay showed at one moment.
struct Taken {
    moment: i64,
    /// (trace index, what it held).
    running: Vec<(usize, Holding)>,
    /// (trace index, position in its ClusterQueue, ClusterQueue).
    waiting: Vec<(usize, Option<u32>, String)>,
}

/// Takes the replay's state every `every` seconds.
struct Taker<'a> {
    index: &'a BTreeMap<String, usize>,
    cluster_queues: Vec<String>,
    next: i64,
    every: i64,
    taken: Vec<Taken>,
}

impl Observer for Taker<'_> {
    fn next(&self) -> Option<i64> {
        Some(self.next)
    }

    fn observe(&mut self, moment: i64, s: &Scheduler, _records: &[JobRecord]) {
        self.next = moment + self.every;
        let mut positions = BTreeMap::new();
        for cq in &self.cluster_queues {
            for w in s.waiting_jobs_in(cq) {
                positions.insert(w.job.id.as_str(), (w.position, cq.as_str()));
            }
        }
        let mut running = Vec::new();
        let mut waiting = Vec::new();
        for (job, state) in s.jobs_with_states() {
            let Some(&i) = self.index.get(&job.id) else {
                continue;
            };
            match state {
                JobState::Admitted(h) => running.push((i, h.clone())),
                JobState::Pending => {
                    let (position, cq) = positions
                        .get(job.id.as_str())
                        .map_or((None, ""), |(p, q)| (Some(*p), *q));
                    waiting.push((i, position, cq.to_owned()));
                }
                JobState::Provisioning(_) | JobState::Evicting(_) => {}
            }
        }
        if waiting.is_empty() {
            return;
        }
        self.taken.push(Taken {
            moment,
            running,
            waiting,
        });
    }
}

/// The runtime keys of a trace job: its queue and size, its queue, every job.
pub fn trace_keys(job: &TraceJob) -> Vec<String> {
    let gpus = job.gpus().max(1).next_power_of_two();
    vec![
        format!("{}/{gpus}-gpu", job.queue),
        job.queue.clone(),
        String::new(),
    ]
}

/// What had happened by a moment of the replay, learned as the moments pass: the runtime
/// model, every finished run's duration (for the announced baseline's median) and every
/// admission (for the position baseline's rates).
struct Past<'a> {
    loaded: &'a Loaded,
    records: &'a [JobRecord],
    /// Finished jobs in the order they ended.
    finished: Vec<usize>,
    learned: usize,
    model: RuntimeModel,
    durations: Vec<i64>,
    /// (admission time, job), in time order.
    admissions: Vec<(i64, usize)>,
    /// LocalQueue (`namespace/name`) → ClusterQueue.
    queue_of: BTreeMap<String, String>,
    first: i64,
    /// Every trace job's batch ([`batches`]).
    batch: Vec<String>,
}

/// Every trace job's batch: submissions of one family (its first runtime key) close together.
fn trace_batches(jobs: &[TraceJob]) -> Vec<String> {
    let families: Vec<String> = jobs.iter().map(|j| trace_keys(j).swap_remove(0)).collect();
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&i| (jobs[i].submit, i));
    let named = batches(
        order
            .iter()
            .map(|&i| (families[i].as_str(), jobs[i].submit)),
    );
    let mut batch = vec![String::new(); jobs.len()];
    for (&i, name) in order.iter().zip(named) {
        batch[i] = name;
    }
    batch
}

impl<'a> Past<'a> {
    fn new(loaded: &'a Loaded, records: &'a [JobRecord]) -> Past<'a> {
        let mut finished: Vec<usize> = (0..records.len())
            .filter(|&i| records[i].end.is_some())
            .collect();
        finished.sort_by_key(|&i| (records[i].end, i));
        let mut admissions: Vec<(i64, usize)> = records
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.admit.map(|a| (a, i)))
            .collect();
        admissions.sort_unstable();
        Past {
            loaded,
            records,
            finished,
            learned: 0,
            model: RuntimeModel::new(),
            durations: Vec::new(),
            admissions,
            queue_of: loaded.local_queues.iter().cloned().collect(),
            first: loaded.jobs.first().map_or(0, |j| j.submit),
            batch: trace_batches(&loaded.jobs),
        }
    }

    /// Learns every run that ended by `moment`.
    fn advance(&mut self, moment: i64) {
        while let Some(&i) = self.finished.get(self.learned)
            && self.records[i].end.is_some_and(|e| e <= moment)
        {
            let job = &self.loaded.jobs[i];
            self.model.learn(&FinishedRun {
                keys: trace_keys(job),
                announced: job.expected_runtime,
                ran: job.duration,
                batch: Some(self.batch[i].clone()),
            });
            let at = self.durations.partition_point(|d| *d < job.duration);
            self.durations.insert(at, job.duration);
            self.learned += 1;
        }
    }

    /// The median of the runs finished so far.
    fn median_duration(&self) -> Option<i64> {
        self.durations.get(self.durations.len() / 2).copied()
    }

    /// Per ClusterQueue, admissions over the last [`RATE_WINDOW`] before `moment` (or since
    /// the first submission), and that window's length.
    fn rates(&self, moment: i64) -> (BTreeMap<&str, i64>, i64) {
        let window_start = (moment - RATE_WINDOW).max(self.first);
        let from = self.admissions.partition_point(|(a, _)| *a <= window_start);
        let to = self.admissions.partition_point(|(a, _)| *a <= moment);
        let namespace = &self.loaded.scenario.namespace;
        let mut admitted: BTreeMap<&str, i64> = BTreeMap::new();
        for &(_, i) in &self.admissions[from..to] {
            let lq = ObjectRef::new(namespace, &self.loaded.jobs[i].queue).into_string();
            if let Some(cq) = self.queue_of.get(&lq) {
                *admitted.entry(cq.as_str()).or_default() += 1;
            }
        }
        (admitted, (moment - window_start).max(1))
    }
}

/// The pairs so far, and how the ranges of those whose job has started fared.
#[derive(Default)]
struct Scored {
    pairs: Vec<Pair>,
    calibration: Calibration,
    /// Pairs whose job had not started at the last moment: (start, pair).
    unstarted: BinaryHeap<Reverse<(i64, usize)>>,
}

impl Scored {
    /// Scores the ranges of every pair whose job started by `moment`.
    fn catch_up(&mut self, moment: i64) {
        while let Some(&Reverse((start, k))) = self.unstarted.peek()
            && start <= moment
        {
            self.unstarted.pop();
            let pair = &self.pairs[k];
            self.calibration.record(pair.moment, pair.raw, start);
            self.calibration.judge(pair.range, start);
        }
    }

    /// `raw` with the margins of past ranges, counting jobs still waiting past theirs.
    fn calibrated(&self, raw: &super::Forecast) -> super::Forecast {
        let late: Vec<f64> = self
            .unstarted
            .iter()
            .filter_map(|Reverse((_, k))| {
                Calibration::late(self.pairs[*k].moment, self.pairs[*k].raw, raw.now)
            })
            .collect();
        let mut ranges = raw.clone();
        self.calibration.apply(&mut ranges, &late);
        ranges
    }

    fn add(&mut self, pair: Pair) {
        self.unstarted.push(Reverse((pair.start, self.pairs.len())));
        self.pairs.push(pair);
    }
}

/// Whether the check can replay `loaded` with `options`, or why not.
fn replayable(loaded: &Loaded, options: &AccuracyOptions) -> Result<(), String> {
    let pools = &loaded.scenario.cluster.pools;
    if loaded.scenario.failures.is_some()
        || pools
            .iter()
            .any(|p| p.autoscaler.is_some() || p.added_at.is_some() || p.removed_at.is_some())
    {
        return Err("the accuracy check replays scenarios without `failures`, pools' `addedAt`/`removedAt` or `autoscaler`; remove them".into());
    }
    if options.every <= 0 {
        return Err(format!(
            "snapshots every {} s: give a positive interval",
            options.every
        ));
    }
    Ok(())
}

/// Replays `loaded` with the forecast's policy and scores the forecasts. `progress(done,
/// total)` is called after each scored moment. Errors: a scenario with node failures, pools
/// that come and go, or capacity to buy (the snapshots do not carry those yet), or an
/// unknown policy.
pub fn evaluate(
    loaded: &Loaded,
    options: &AccuracyOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Accuracy, String> {
    replayable(loaded, options)?;
    let namespace = loaded.scenario.namespace.clone();
    let index: BTreeMap<String, usize> = loaded
        .jobs
        .iter()
        .enumerate()
        .map(|(i, j)| (ObjectRef::new(&namespace, &j.id).into_string(), i))
        .collect();
    let mut taker = Taker {
        index: &index,
        cluster_queues: loaded
            .cluster_queues
            .iter()
            .map(|(n, _)| n.clone())
            .collect(),
        next: loaded.jobs.first().map_or(0, |j| j.submit) + options.every,
        every: options.every,
        taken: Vec::new(),
    };
    let truth = run_observed(
        loaded,
        &options.forecast.policy,
        &mut |_, _| {},
        Some(&mut taker),
    )?;
    let records = &truth.records;
    let counts = |i: usize, moment: i64| {
        records[i]
            .admit
            .is_some_and(|a| a > moment && a - records[i].submit > options.min_wait)
    };
    let moments: Vec<Taken> = taker
        .taken
        .into_iter()
        .filter(|t| t.waiting.iter().any(|(i, _, _)| counts(*i, t.moment)))
        .collect();
    let mut past = Past::new(loaded, records);
    let mut scored = Scored::default();
    for (done, t) in moments.iter().enumerate() {
        past.advance(t.moment);
        scored.catch_up(t.moment);
        let snapshot = snapshot_at(
            loaded,
            &namespace,
            t,
            options.forecast.arrivals_window,
            &past.batch,
        );
        let raw = forecast(&snapshot, &past.model, &options.forecast)?;
        let ranges = scored.calibrated(&raw);
        let announced = forecast(
            &snapshot,
            &RuntimeModel::announced_only(past.median_duration()),
            &Options {
                samples: 1,
                threads: 1,
                arrivals_window: 0,
                ..options.forecast.clone()
            },
        )?;
        let (admitted, window) = past.rates(t.moment);
        for (k, (i, position, cq)) in t.waiting.iter().enumerate() {
            if !counts(*i, t.moment) {
                continue;
            }
            let rate = admitted.get(cq.as_str()).copied().unwrap_or(0);
            // `p` jobs go first, at `rate` per `window`.
            let position = position
                .filter(|_| rate > 0)
                .map(|p| t.moment + i64::from(p) * window / rate);
            let eta = &ranges.etas[k];
            let r = &raw.etas[k];
            scored.add(Pair {
                moment: t.moment,
                job: loaded.jobs[*i].id.clone(),
                submit: records[*i].submit,
                start: records[*i].admit.unwrap_or_default(),
                range: [eta.p10, eta.p50, eta.p90],
                raw: [r.p10, r.p50, r.p90],
                announced: announced.etas[k].p50,
                position,
            });
        }
        progress(done + 1, moments.len());
    }
    let pairs = scored.pairs;
    let jobs = pairs
        .iter()
        .map(|p| p.job.as_str())
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    Ok(Accuracy {
        moments: moments.len(),
        jobs,
        scores: vec![
            score("range", &pairs, |p| p.range[1], true),
            score("announced", &pairs, |p| p.announced, false),
            score("position", &pairs, |p| p.position, false),
        ],
        pairs,
    })
}

/// The replay's state `t` as a forecast's snapshot.
fn snapshot_at(
    loaded: &Loaded,
    namespace: &str,
    t: &Taken,
    window: i64,
    batch: &[String],
) -> Snapshot {
    let from = loaded
        .jobs
        .partition_point(|j| j.submit < t.moment - window);
    let to = loaded.jobs.partition_point(|j| j.submit < t.moment);
    Snapshot {
        now: t.moment,
        flavors: loaded.flavors.clone(),
        nodes: loaded.nodes.clone(),
        outside_usage: BTreeMap::new(),
        cluster_queues: loaded.cluster_queues.clone(),
        cohorts: loaded.cohorts.clone(),
        local_queues: loaded.local_queues.clone(),
        namespaces: BTreeMap::from([(namespace.to_owned(), BTreeMap::new())]),
        running: t
            .running
            .iter()
            .map(|(i, holding)| RunningJob {
                job: Arc::new(admission_job(&loaded.jobs[*i], namespace)),
                holding: holding.clone(),
                keys: trace_keys(&loaded.jobs[*i]).into(),
                batch: Some(batch[*i].clone()),
                provisioning: false,
            })
            .collect(),
        waiting: t
            .waiting
            .iter()
            .map(|(i, _, _)| WaitingJob {
                job: Arc::new(admission_job(&loaded.jobs[*i], namespace)),
                keys: trace_keys(&loaded.jobs[*i]).into(),
                queues_at: None,
                batch: Some(batch[*i].clone()),
            })
            .collect(),
        recent: loaded.jobs[from..to]
            .iter()
            .map(|j| RecentJob {
                job: Arc::new(admission_job(j, namespace)),
                keys: trace_keys(j).into(),
            })
            .collect(),
    }
}

fn score(
    method: &'static str,
    pairs: &[Pair],
    at: impl Fn(&Pair) -> Option<i64>,
    range: bool,
) -> Score {
    let mut errors: Vec<f64> = pairs.iter().map(|p| p.error(at(p))).collect();
    errors.sort_by(f64::total_cmp);
    Score {
        method,
        covered: range.then(|| pairs.iter().filter(|p| p.covered()).count()),
        median_error: if errors.is_empty() {
            f64::NAN
        } else {
            errors[(errors.len() - 1) / 2]
        },
        no_answer: pairs.iter().filter(|p| at(p).is_none()).count(),
    }
}
