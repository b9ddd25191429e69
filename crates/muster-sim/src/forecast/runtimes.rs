//! How long jobs really run, learned from jobs that finished: per job family, the ratio of
//! what a job ran to what it announced, and what jobs ran outright. A forecast draws every
//! job's runtime from here, many times, so that a start time comes out as a range.
//!
//! Submitters' runtime estimates are known to be poor (most announce far more than they use, a
//! few far less); a point estimate built on them hides that. The model trusts an announcement
//! only as far as the family's history says it should.

use std::collections::{BTreeMap, VecDeque};

use muster_topology::Rng;

use super::batches::Batches;

/// Runs of a family (or of a coarser key) needed before its history is used: fewer say too
/// little about the spread, and the next coarser key answers instead.
pub const MIN_HISTORY: usize = 5;

/// Runs a draw wants to choose among. A job that announced no runtime is drawn from the most
/// specific key with at least this many runs longer than it has already run (for a job that
/// has not started, at least this many runs); one that announced a runtime, from the most
/// specific key with this many runs that announced one. Only where no key has that many does
/// the first with [`MIN_HISTORY`] answer. A draw reads a quantile of those runs: from a
/// handful, every run stands for a fifth of the outcomes, and one long run of a small family
/// sets where each of its jobs that has run long ends. Twenty put the 10th and 90th
/// percentiles between runs.
pub const DRAW_SUPPORT: usize = 20;

/// The most recent runs kept per key: what a family did last month says more about today than
/// what it did last year, and the model's memory stays bounded.
pub const KEPT_PER_KEY: usize = 1_000;

/// The shortest runtime a forecast gives a job, seconds: nothing in a cluster ends sooner than
/// its pods can start and stop.
pub const SHORTEST_RUN: i64 = 1;

/// A job with an announced runtime draws its ratio from the runs of its history whose
/// announcements were nearest its own: this many times the square root of how many there are
/// ([`MIN_HISTORY`] at least; 63 of 1,000). Fewer follow how the ratio changes with the
/// announcement more closely, more give the ratio's spread more runs to go on.
pub const NEIGHBOURS: f64 = 2.0;

/// One finished run, as the model learns from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinishedRun {
    /// Its keys, most specific first (family, then queue, then `""` for every job): the model
    /// answers from the first key with [`MIN_HISTORY`] runs.
    pub keys: Vec<String>,
    /// The runtime it announced, seconds.
    pub announced: Option<i64>,
    /// What it ran, seconds.
    pub ran: i64,
    /// The batch it was submitted in ([`super::batches::batches`]), if known.
    pub batch: Option<String>,
}

/// Which history a job's runtimes are drawn from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Basis {
    /// Its announced runtime times a ratio drawn from `runs` runs of `key` that announced one.
    Ratio {
        /// The key whose history answered.
        key: String,
        /// How many runs that history holds.
        runs: usize,
    },
    /// A runtime drawn from `runs` runs of `key`.
    Duration {
        /// The key whose history answered.
        key: String,
        /// How many runs that history holds.
        runs: usize,
    },
    /// Its announced runtime, taken as exact: no finished run announced one.
    Announced,
    /// Nothing to go on: no announced runtime and no history. Such a job is taken to run past
    /// any horizon, and the forecast says so.
    Unknown,
}

/// The bounded history of one key.
#[derive(Clone, Debug, Default)]
struct History {
    /// (announced, ran ÷ announced) of runs that announced a runtime, oldest first; their
    /// ratios sorted; and the pairs sorted by announcement, for [`History::near`].
    ratios: VecDeque<(i64, f64)>,
    sorted_ratios: Vec<f64>,
    by_announced: Vec<(i64, f64)>,
    /// Runtimes of every run, oldest first, and sorted.
    durations: VecDeque<i64>,
    sorted_durations: Vec<i64>,
    /// Where the last run learned stood among the runs before it (a quantile), for
    /// [`Alike`].
    last_quantile: Option<f64>,
}

impl History {
    /// Where `run` stands among the runs learned before it, as a quantile in (0, 1): by its
    /// ratio when it announced a runtime, else by its duration. `None` with too little
    /// history to say.
    fn quantile_of(&self, run: &FinishedRun) -> Option<f64> {
        #[expect(
            clippy::cast_precision_loss,
            reason = "counts and runtimes far below 2^53"
        )]
        let (below, n) = match run.announced.filter(|a| *a > 0) {
            Some(a) => {
                let ratio = run.ran as f64 / a as f64;
                let below = self.sorted_ratios.partition_point(|r| *r < ratio);
                (below as f64, self.sorted_ratios.len())
            }
            None => {
                let below = self.sorted_durations.partition_point(|d| *d < run.ran);
                (below as f64, self.sorted_durations.len())
            }
        };
        #[expect(clippy::cast_precision_loss, reason = "counts far below 2^53")]
        (n >= MIN_HISTORY).then(|| (below + 0.5) / (n as f64 + 1.0))
    }

    /// The ratios, sorted, of the runs whose announcements lie nearest `announced` (by
    /// factor, not by difference): [`NEIGHBOURS`] times the square root of the history's
    /// runs, at least [`MIN_HISTORY`]. How wrong an announcement is depends on how large it
    /// is — the longest announcements are, more often than the rest, generous ones — so a
    /// ratio drawn from the whole family would make long announced jobs run too long and
    /// short ones too short, and the sum of a queue's runtimes too long.
    fn near(&self, announced: i64) -> Vec<f64> {
        let runs = &self.by_announced;
        #[expect(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a count far below 2^53"
        )]
        let want = ((NEIGHBOURS * (runs.len() as f64).sqrt()).round() as usize)
            .max(MIN_HISTORY)
            .min(runs.len());
        #[expect(
            clippy::cast_precision_loss,
            reason = "runtimes in seconds are far below 2^53"
        )]
        let distance = |a: i64| ((a.max(1) as f64) / (announced.max(1) as f64)).ln().abs();
        let mid = runs.partition_point(|(a, _)| *a < announced);
        let (mut lo, mut hi) = (mid, mid);
        while hi - lo < want {
            let left = lo.checked_sub(1).map(|i| distance(runs[i].0));
            let right = runs.get(hi).map(|(a, _)| distance(*a));
            match (left, right) {
                (Some(l), Some(r)) if l <= r => lo -= 1,
                (Some(_), None) => lo -= 1,
                (_, Some(_)) => hi += 1,
                (None, None) => break,
            }
        }
        let mut near: Vec<f64> = runs[lo..hi].iter().map(|(_, r)| *r).collect();
        near.sort_by(f64::total_cmp);
        near
    }

    fn add(&mut self, run: &FinishedRun) {
        if let Some(announced) = run.announced.filter(|a| *a > 0) {
            #[expect(
                clippy::cast_precision_loss,
                reason = "runtimes in seconds are far below 2^53"
            )]
            let ratio = run.ran as f64 / announced as f64;
            if self.ratios.len() == KEPT_PER_KEY
                && let Some(oldest) = self.ratios.pop_front()
            {
                remove_sorted(&mut self.sorted_ratios, &oldest.1, f64::total_cmp);
                remove_sorted(&mut self.by_announced, &oldest, by_announcement);
            }
            self.ratios.push_back((announced, ratio));
            insert_sorted(&mut self.sorted_ratios, ratio, f64::total_cmp);
            insert_sorted(&mut self.by_announced, (announced, ratio), by_announcement);
        }
        keep_last(
            KEPT_PER_KEY,
            &mut self.durations,
            &mut self.sorted_durations,
            run.ran,
            i64::cmp,
        );
    }
}

/// The order of [`History::by_announced`]: by announcement, then ratio.
fn by_announcement(x: &(i64, f64), y: &(i64, f64)) -> std::cmp::Ordering {
    x.0.cmp(&y.0).then(x.1.total_cmp(&y.1))
}

/// Takes one `value` out of `sorted`, if it is there.
fn remove_sorted<T>(sorted: &mut Vec<T>, value: &T, cmp: impl Fn(&T, &T) -> std::cmp::Ordering) {
    if let Ok(at) = sorted.binary_search_by(|v| cmp(v, value)) {
        sorted.remove(at);
    }
}

/// Puts `value` into `sorted` where it belongs.
fn insert_sorted<T>(sorted: &mut Vec<T>, value: T, cmp: impl Fn(&T, &T) -> std::cmp::Ordering) {
    let at = sorted.partition_point(|v| cmp(v, &value).is_lt());
    sorted.insert(at, value);
}

/// Appends `value` to `order` (oldest first) and `sorted`, dropping the oldest once `kept`
/// are kept: a bounded window of recent values that can be drawn from by rank.
pub(super) fn keep_last<T: Copy>(
    kept: usize,
    order: &mut VecDeque<T>,
    sorted: &mut Vec<T>,
    value: T,
    cmp: impl Fn(&T, &T) -> std::cmp::Ordering,
) {
    if order.len() == kept
        && let Some(oldest) = order.pop_front()
        && let Ok(at) = sorted.binary_search_by(|v| cmp(v, &oldest))
    {
        sorted.remove(at);
    }
    order.push_back(value);
    let at = sorted.partition_point(|v| cmp(v, &value).is_lt());
    sorted.insert(at, value);
}

/// The entry at `quantile` (in (0, 1]) of the entries of `sorted` past `floor` (those for
/// which `floor` is false), or `None` when there are none.
fn pick_above<T: Copy>(sorted: &[T], floor: impl Fn(&T) -> bool, quantile: f64) -> Option<T> {
    let from = sorted.partition_point(floor);
    let above = &sorted[from..];
    #[expect(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a quantile in (0, 1] of a length far below 2^53"
    )]
    let at = ((quantile.clamp(0.0, 1.0) * above.len() as f64) as usize).min(above.len().max(1) - 1);
    above.get(at).copied()
}

/// How alike consecutive runs of one family are: the rank correlation of each run's quantile
/// within its family with the quantile of the family's run before it, pooled over families.
/// Jobs a team submits together tend to run alike (a sweep of one model, a broken input that
/// fails them all); forward runs draw a family's jobs this much alike.
#[derive(Clone, Copy, Debug, Default)]
struct Alike {
    /// Σ (u_before − ½)(u − ½) over consecutive pairs.
    sum: f64,
    pairs: u64,
}

/// Consecutive pairs needed before [`Alike`] is trusted; until then runs are drawn
/// independently.
const MIN_PAIRS: u64 = 30;

impl Alike {
    /// The correlation, in [0, 1]: 12 × the mean product (the variance of a uniform quantile
    /// is 1/12). Negative estimates count as 0.
    #[expect(clippy::cast_precision_loss, reason = "counts far below 2^53")]
    fn correlation(self) -> f64 {
        if self.pairs < MIN_PAIRS {
            return 0.0;
        }
        (12.0 * self.sum / self.pairs as f64).clamp(0.0, 1.0)
    }
}

/// What every family ran, learned from finished runs.
#[derive(Clone, Debug, Default)]
pub struct RuntimeModel {
    histories: BTreeMap<String, History>,
    batches: Batches,
    alike: Alike,
    mode: Mode,
}

/// Whether a model learns, or is the baseline that trusts announcements.
#[derive(Clone, Copy, Debug, Default)]
enum Mode {
    /// Runtimes are drawn from what runs really ran.
    #[default]
    Learned,
    /// Announced runtimes are exact; a job that announced none runs `otherwise` (the
    /// baseline a Slurm-style estimate makes). Nothing is learned.
    AnnouncedOnly { otherwise: Option<i64> },
}

impl RuntimeModel {
    /// A model that knows nothing yet.
    pub fn new() -> RuntimeModel {
        RuntimeModel::default()
    }

    /// A model that takes every announced runtime as exact and gives a job that announced
    /// none `otherwise` (or, without it, an unknown runtime): one point, no spread. The
    /// baseline the forecasts are measured against, as `squeue --start` estimates.
    pub fn announced_only(otherwise: Option<i64>) -> RuntimeModel {
        RuntimeModel {
            mode: Mode::AnnouncedOnly { otherwise },
            ..RuntimeModel::default()
        }
    }

    /// A model learned from `runs`, in the order they finished.
    pub fn learned<'a>(runs: impl IntoIterator<Item = &'a FinishedRun>) -> RuntimeModel {
        let mut model = RuntimeModel::new();
        for run in runs {
            model.learn(run);
        }
        model
    }

    /// Learns one finished run (under each of its keys).
    pub fn learn(&mut self, run: &FinishedRun) {
        if run.ran <= 0 || matches!(self.mode, Mode::AnnouncedOnly { .. }) {
            return;
        }
        if let Some(family) = run.keys.first() {
            let history = self.histories.entry(family.clone()).or_default();
            if let Some(u) = history.quantile_of(run) {
                if let Some(before) = history.last_quantile {
                    self.alike.sum += (before - 0.5) * (u - 0.5);
                    self.alike.pairs += 1;
                }
                history.last_quantile = Some(u);
            }
        }
        for key in &run.keys {
            self.histories.entry(key.clone()).or_default().add(run);
        }
        if let (Some(batch), Some(family)) = (&run.batch, run.keys.first()) {
            self.batches.learn(batch, family, run.ran, run.announced);
        }
    }

    /// What batches ran.
    pub(super) fn batches(&self) -> &Batches {
        &self.batches
    }

    /// The history that answers for a job with `keys` that announced `announced`, as points
    /// on the batch model's scale: whether it is ratios to announced runtimes, and the log of
    /// every ratio or runtime. `None` when no history answers.
    pub(super) fn batch_prior(
        &self,
        keys: &[String],
        announced: Option<i64>,
    ) -> Option<(bool, Vec<f64>)> {
        // A batch is of one family: its μ's prior is the family's own runs once there are
        // any to go on, however few.
        let (key, ratio) = match self.basis_from(keys, announced, MIN_HISTORY) {
            Basis::Ratio { key, .. } => (key, true),
            Basis::Duration { key, .. } => (key, false),
            Basis::Announced | Basis::Unknown => return None,
        };
        let history = self.histories.get(&key)?;
        let points = if ratio {
            history
                .sorted_ratios
                .iter()
                .filter(|r| **r > 0.0)
                .map(|r| r.ln())
                .collect()
        } else {
            #[expect(
                clippy::cast_precision_loss,
                reason = "runtimes in seconds are far below 2^53"
            )]
            history
                .sorted_durations
                .iter()
                .filter(|d| **d > 0)
                .map(|d| (*d as f64).ln())
                .collect()
        };
        Some((ratio, points))
    }

    /// How alike the runtimes of one family's consecutive runs have been, from 0 (no more
    /// than chance) to 1 (the same quantile every time); 0 until enough runs are learned.
    pub fn correlation(&self) -> f64 {
        self.alike.correlation()
    }

    /// Which history answers for a job with `keys` that announced `announced` and has not
    /// started: the first key with [`DRAW_SUPPORT`] runs, else the first with
    /// [`MIN_HISTORY`].
    pub fn basis(&self, keys: &[String], announced: Option<i64>) -> Basis {
        self.basis_from(keys, announced, DRAW_SUPPORT)
    }

    /// [`RuntimeModel::basis`], from the first key with `least` runs (else [`MIN_HISTORY`]).
    fn basis_from(&self, keys: &[String], announced: Option<i64>, least: usize) -> Basis {
        if let Mode::AnnouncedOnly { otherwise } = self.mode {
            return if announced.or(otherwise).is_some() {
                Basis::Announced
            } else {
                Basis::Unknown
            };
        }
        // The first key with runs enough to choose among, else the first with any to go on.
        let first = |enough: &dyn Fn(&History) -> usize| {
            let with = |least: usize| {
                keys.iter().find_map(|k| {
                    let n = self.histories.get(k).map_or(0, enough);
                    (n >= least).then(|| (k.clone(), n))
                })
            };
            with(least).or_else(|| with(MIN_HISTORY))
        };
        match announced.filter(|a| *a > 0) {
            Some(_) => match first(&|h| h.sorted_ratios.len()) {
                Some((key, runs)) => Basis::Ratio { key, runs },
                None => Basis::Announced,
            },
            None => match first(&|h| h.sorted_durations.len()) {
                Some((key, runs)) => Basis::Duration { key, runs },
                None => Basis::Unknown,
            },
        }
    }

    /// The histories of `keys` from `key` on, most specific first.
    fn coarser_from<'k>(
        &'k self,
        keys: &'k [String],
        key: &str,
    ) -> impl Iterator<Item = &'k History> + 'k {
        let from = keys.iter().position(|k| k == key).unwrap_or(keys.len());
        keys[from..].iter().filter_map(|k| self.histories.get(k))
    }

    /// Draws a job's whole runtime, seconds, given that it has already run `elapsed` seconds
    /// (0 for a job that has not started): [`RuntimeModel::at_quantile`] at a quantile drawn
    /// from `rng`.
    pub fn draw(
        &self,
        keys: &[String],
        announced: Option<i64>,
        elapsed: i64,
        rng: &mut Rng,
    ) -> Option<i64> {
        let quantile = rng.unit();
        let beyond = rng.unit();
        self.at_quantile(keys, announced, elapsed, quantile, beyond)
    }

    /// A job's whole runtime, seconds, at `quantile` (in (0, 1]) of its history's runs longer
    /// than the `elapsed` seconds it has already run (0 for a job that has not started). A
    /// job that has run longer than every run of its history is given as long again as the
    /// fraction `beyond` of what it has run (a job that has run long tends to run longer
    /// still). `None`: [`Basis::Unknown`].
    pub fn at_quantile(
        &self,
        keys: &[String],
        announced: Option<i64>,
        elapsed: i64,
        quantile: f64,
        beyond: f64,
    ) -> Option<i64> {
        let elapsed = elapsed.max(0);
        // From the first key with any runs to go on: which of it and the keys after it has
        // runs enough depends on how long the job has run.
        let drawn = match self.basis_from(keys, announced, MIN_HISTORY) {
            Basis::Ratio { key, .. } => {
                // The first key with runs enough to choose among ([`DRAW_SUPPORT`]).
                let history = self
                    .coarser_from(keys, &key)
                    .find(|h| h.sorted_ratios.len() >= DRAW_SUPPORT)
                    .unwrap_or_else(|| &self.histories[&key]);
                let announced = announced.unwrap_or(1);
                #[expect(
                    clippy::cast_precision_loss,
                    reason = "runtimes in seconds are far below 2^53"
                )]
                let (a, e) = (announced as f64, elapsed as f64);
                // Nearest announcements first; a job that has run longer than any of those
                // would falls back on the family's every run.
                pick_above(&history.near(announced), |r| a * r <= e, quantile)
                    .or_else(|| pick_above(&history.sorted_ratios, |r| a * r <= e, quantile))
                    .map(|r| round(a * r))
            }
            Basis::Duration { key, .. } => {
                // A job that has run a while is drawn from a coarser key when its own has
                // few runs as long: see [`DRAW_SUPPORT`].
                let sorted = self
                    .coarser_from(keys, &key)
                    .map(|h| &h.sorted_durations)
                    .find(|d| d.len() - d.partition_point(|d| *d <= elapsed) >= DRAW_SUPPORT)
                    .unwrap_or_else(|| &self.histories[&key].sorted_durations);
                pick_above(sorted, |d| *d <= elapsed, quantile)
            }
            Basis::Announced => announced
                .filter(|a| *a > 0)
                .or(match self.mode {
                    Mode::AnnouncedOnly { otherwise } => otherwise,
                    Mode::Learned => None,
                })
                .filter(|a| *a > elapsed),
            Basis::Unknown => return None,
        };
        if matches!(self.mode, Mode::AnnouncedOnly { .. }) {
            // As a scheduler that trusts announcements would: an overdue job ends now.
            return Some(drawn.unwrap_or(elapsed + SHORTEST_RUN));
        }
        Some(
            drawn
                .unwrap_or_else(|| elapsed + round(elapsed_f64(elapsed) * beyond))
                .max(elapsed + SHORTEST_RUN),
        )
    }
}

#[expect(
    clippy::cast_precision_loss,
    reason = "runtimes in seconds are far below 2^53"
)]
fn elapsed_f64(elapsed: i64) -> f64 {
    elapsed as f64
}

#[expect(
    clippy::cast_possible_truncation,
    reason = "runtimes in seconds are far below i64's range; rounded to a second"
)]
fn round(seconds: f64) -> i64 {
    seconds.round() as i64
}
