//! Ranges held to what past ranges did: a forecast's 10th–90th percentile range is widened
//! at each end by the margin that would have kept 90 % of past starts from
//! falling beyond that end, so that 80 % fall inside — conformalized quantile ranges with
//! each end calibrated on its own (Romano, Patterson and Candès, 2019).
//!
//! The forward runs miss what they cannot know: jobs submitted after the snapshot that go
//! ahead, jobs of one team that run alike more than any model says, a node that fails. A
//! range that only says what the runs spread over is too narrow. The margin comes from how
//! wrong past ranges were, measured in units of the wait they forecast, so a range made an
//! hour ahead widens by an hour's worth of past error and one made a day ahead by a day's.

use std::collections::VecDeque;

use super::Forecast;

/// The share of past ranges the margin makes hold their job's start.
pub const LEVEL: f64 = 0.8;

/// Past ranges needed before any margin is applied: fewer say too little.
pub const MIN_SCORES: usize = 30;

/// The most recent scores kept: how ranges fared lately says more than how they fared long
/// ago, and memory stays bounded.
pub const KEPT: usize = 2_000;

/// The least wait, seconds, a range's error is measured against: a start forecast for right
/// now is still a pass and a pod start away.
pub const SCALE_FLOOR: i64 = 600;

/// How past ranges fared: how far each start fell before its range's 10th percentile, and
/// how far after its 90th (negative: inside), in units of the wait the range forecast.
#[derive(Clone, Debug, Default)]
pub struct Calibration {
    early: Scores,
    late: Scores,
    /// How far each side's level has moved from [`side_level`] ([`STEP`]): early, late.
    shift: [f64; 2],
}

/// One side's scores, oldest first, and sorted.
#[derive(Clone, Debug, Default)]
struct Scores {
    order: VecDeque<f64>,
    sorted: Vec<f64>,
}

impl Scores {
    fn push(&mut self, score: f64) {
        super::runtimes::keep_last(
            KEPT,
            &mut self.order,
            &mut self.sorted,
            score,
            f64::total_cmp,
        );
    }

    /// The ⌈(n + 1) × `level`⌉-th smallest of these and `extra`; `None` below
    /// [`MIN_SCORES`].
    fn quantile(&self, extra: &[f64], level: f64) -> Option<f64> {
        let n = self.sorted.len() + extra.len();
        if n < MIN_SCORES {
            return None;
        }
        #[expect(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a count far below 2^53"
        )]
        let rank = (((n + 1) as f64) * level).ceil() as usize;
        let at = rank.clamp(1, n) - 1;
        if extra.is_empty() {
            return self.sorted.get(at).copied();
        }
        let mut all: Vec<f64> = self.sorted.iter().chain(extra).copied().collect();
        all.sort_by(f64::total_cmp);
        all.get(at).copied()
    }
}

/// The wait a range made at `made_at` with median `p50` forecast, seconds.
fn scale(made_at: i64, p50: i64) -> i64 {
    (p50 - made_at).max(SCALE_FLOOR)
}

#[expect(clippy::cast_precision_loss, reason = "seconds far below 2^53")]
fn ratio(seconds: i64, scale: i64) -> f64 {
    seconds as f64 / scale as f64
}

/// Each side is held to half the misses [`LEVEL`] allows, so that both together keep it.
fn side_level() -> f64 {
    1.0 - (1.0 - LEVEL) / 2.0
}

/// How far one range given moves its side's level (adaptive conformal inference, Gibbs and
/// Candès, 2021): up by `STEP × 0.9` when its job started beyond that end, down by
/// `STEP × 0.1` when not, so that the level settles where a tenth of the ranges given miss
/// at each end. Margins from past scores hold 80 % only while the future is like the past;
/// on a cluster whose load comes in episodes, ranges given in a busy week miss more than
/// the weeks before them said, and the level rises until they no longer do.
pub const STEP: f64 = 0.002;

/// The most a side's level rises to: the largest score. It never falls below where it
/// started: a range is not narrowed because the ranges given lately held.
const TOP_LEVEL: f64 = 1.0;

impl Calibration {
    /// Nothing known yet.
    pub fn new() -> Calibration {
        Calibration::default()
    }

    /// Past ranges scored.
    pub fn len(&self) -> usize {
        self.late.order.len()
    }

    /// Whether no range has been scored.
    pub fn is_empty(&self) -> bool {
        self.late.order.is_empty()
    }

    /// A range `[p10, p50, p90]` (as the forward runs gave it, before any margin) made at
    /// `made_at` for a job that started at `started`. A range without a 10th percentile
    /// (later than the horizon) is not scored; one without a 90th never started late.
    pub fn record(&mut self, made_at: i64, range: [Option<i64>; 3], started: i64) {
        let [Some(p10), p50, p90] = range else {
            return;
        };
        let scale = scale(made_at, p50.unwrap_or(p10));
        self.early.push(ratio(p10 - started, scale));
        // Without a 90th percentile any start is inside: the most inside a score can be.
        self.late
            .push(p90.map_or(f64::NEG_INFINITY, |p90| ratio(started - p90, scale)));
    }

    /// A range `[p10, p50, p90]` as it was given (margins applied) for a job that started at
    /// `started`: each side's level moves by [`STEP`] towards where a tenth of the ranges
    /// given miss at that end. A range without a 10th percentile is not judged.
    pub fn judge(&mut self, given: [Option<i64>; 3], started: i64) {
        let [Some(p10), _, p90] = given else {
            return;
        };
        let target = 1.0 - side_level();
        for (side, missed) in [started < p10, p90.is_some_and(|p| started > p)]
            .into_iter()
            .enumerate()
        {
            let moved = self.shift[side] + STEP * (f64::from(u8::from(missed)) - target);
            self.shift[side] = moved.clamp(0.0, TOP_LEVEL - side_level());
        }
    }

    /// The late score of a range made at `made_at` whose job still waits at `now`, past the
    /// range's 90th percentile: at least this, whenever it starts. `None` while the job is
    /// not yet late.
    pub fn late(made_at: i64, range: [Option<i64>; 3], now: i64) -> Option<f64> {
        let [Some(p10), p50, Some(p90)] = range else {
            return None;
        };
        (now > p90).then(|| ratio(now - p90, scale(made_at, p50.unwrap_or(p10))))
    }

    /// The margins before the 10th percentile and after the 90th, in units of the forecast
    /// wait, counting besides the jobs that started `late`: the least scores of jobs still
    /// waiting past their range ([`Calibration::late`]). Leaving those out would judge past
    /// ranges by the jobs that started soon, and a range too early would count only once its
    /// job at last started. `None` below [`MIN_SCORES`].
    pub fn margins(&self, late: &[f64]) -> Option<(f64, f64)> {
        // Only ever wider: a range narrowed because the past was kinder than the runs (jobs
        // stopped arriving, say) would miss as soon as it no longer is.
        let level = |side: usize| side_level() + self.shift[side];
        Some((
            self.early.quantile(&[], level(0))?.max(0.0),
            self.late.quantile(late, level(1))?.max(0.0),
        ))
    }

    /// Applies the margins to every range of `forecast` (made at its `now`): the 10th
    /// percentile moves earlier and the 90th later by their margins times the wait each
    /// forecast, never before now. `late`: as [`Calibration::margins`]. Without enough history it
    /// changes nothing.
    pub fn apply(&self, forecast: &mut Forecast, late: &[f64]) {
        let Some((early, after)) = self.margins(late) else {
            return;
        };
        let now = forecast.now;
        for eta in &mut forecast.etas {
            let (Some(p10), Some(p50)) = (eta.p10, eta.p50) else {
                continue;
            };
            #[expect(
                clippy::cast_precision_loss,
                clippy::cast_possible_truncation,
                reason = "seconds far below 2^53; rounded to a second"
            )]
            let by = |margin: f64| (margin * scale(now, p50) as f64).round() as i64;
            eta.p10 = Some((p10 - by(early)).clamp(now, p50));
            eta.p90 = eta.p90.map(|p90| (p90 + by(after)).max(p50));
        }
        forecast.margin = Some((early, after));
    }
}
