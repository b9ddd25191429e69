//! Jobs submitted together run alike: a sweep of one model, the shards of one experiment, a
//! broken input that fails them all. On the Philly trace, jobs of one virtual cluster and
//! size submitted within [`BATCH_GAP`] of each other (a batch) spread a quarter as much, in
//! log-duration, as their family does (0.53 against 2.2). Once a batch's first jobs have
//! finished, or have run for a while, they say more about the rest than the family does.
//!
//! The model: a batch's jobs run `x = μ + σ z` (x the log of the runtime, or of its ratio to
//! the announced runtime for a job that announced one), z standard normal, σ the spread
//! within the family's batches, pooled (every family's, while its own are too few), μ the
//! batch's own and unknown. μ's prior is the family's history (each of its runs one point,
//! drawn in toward their mean as far as σ accounts for); its posterior weighs each point by
//! how likely it makes what the batch showed: the runtimes of its jobs that finished, and
//! that those still running have run as long as they have (a censored run: it says "longer
//! than this", which counts jobs still running rather than only the short ones that are
//! done). Each forward run draws μ once per batch, so a batch's jobs move together in it, and
//! each job's runtime from μ, past what it has already run.

use std::collections::{BTreeMap, VecDeque};

use muster_topology::{Rng, text_seed};

use super::normal;
use super::{RunningJob, Snapshot};

/// Submissions of one family at most this many seconds after the one before are one batch.
pub const BATCH_GAP: i64 = 10;

/// Batches whose finished runs the model keeps: the most recent; older batches have ended.
pub const KEPT_BATCHES: usize = 20_000;

/// Finished runs kept per batch: the first this many say all the rest would.
pub const KEPT_PER_BATCH: usize = 64;

/// Pairs of runs within batches needed before the spread within batches is trusted; until
/// then a batch says nothing and jobs are drawn from their family.
pub const MIN_SPREAD_RUNS: u64 = 30;

/// Batches answer for a family only where the spread within them is at most this share of
/// the family's (in variance): its batches then explain at least the rest.
pub const SHARE_WITHIN: f64 = 0.5;

/// Names every submission's batch. `submissions`: (family, submitted), in the order they were
/// submitted; the answer is in the same order. A batch is named by its family and its first
/// submission: `family@seconds`.
pub fn batches<'a>(submissions: impl IntoIterator<Item = (&'a str, i64)>) -> Vec<String> {
    let mut last: BTreeMap<&str, (i64, String)> = BTreeMap::new();
    let mut out = Vec::new();
    for (family, at) in submissions {
        let name = match last.get_mut(family) {
            Some((previous, name)) if at - *previous <= BATCH_GAP => {
                *previous = at;
                name.clone()
            }
            _ => {
                let name = format!("{family}@{at}");
                last.insert(family, (at, name.clone()));
                name
            }
        };
        out.push(name);
    }
    out
}

/// What batches ran: their finished runs and the spread within them.
#[derive(Clone, Debug, Default)]
pub(super) struct Batches {
    /// Per batch, (ran, announced) of its finished runs, first finished first.
    finished: BTreeMap<String, Vec<(i64, Option<i64>)>>,
    /// Batches in the order first learned, to forget the oldest.
    order: VecDeque<String>,
    /// Per family, the spread within its batches of log runtimes and of log ratios to
    /// announced runtimes (in that order); and the same over every family, for a family
    /// with too few runs in batches to say.
    spreads: BTreeMap<String, [Spread; 2]>,
    all: [Spread; 2],
}

/// A pooled variance within groups: Σ squared deviations from each group's mean, and the
/// degrees of freedom (runs less one per group).
#[derive(Clone, Copy, Debug, Default)]
struct Spread {
    squares: f64,
    freedom: u64,
}

impl Spread {
    /// Adds `x` to a group that held `before`.
    fn add(&mut self, before: &[f64], x: f64) {
        if before.is_empty() {
            return;
        }
        #[expect(clippy::cast_precision_loss, reason = "a count below 64")]
        let n = before.len() as f64;
        let mean = before.iter().sum::<f64>() / n;
        let after = mean + (x - mean) / (n + 1.0);
        self.squares += (x - mean) * (x - after);
        self.freedom += 1;
    }

    /// The standard deviation, once [`MIN_SPREAD_RUNS`] pairs are in.
    #[expect(clippy::cast_precision_loss, reason = "counts far below 2^53")]
    fn sd(self) -> Option<f64> {
        (self.freedom >= MIN_SPREAD_RUNS)
            .then(|| (self.squares / self.freedom as f64).sqrt())
            .filter(|sd| *sd > 0.0)
    }
}

/// The log runtime, or log ratio to `announced` when `ratio`; `None`: a run that cannot be
/// put on that scale (no announcement for a ratio, nothing ran).
fn scaled(ran: i64, announced: Option<i64>, ratio: bool) -> Option<f64> {
    #[expect(
        clippy::cast_precision_loss,
        reason = "runtimes in seconds are far below 2^53"
    )]
    let log = |s: i64| (s > 0).then(|| (s as f64).ln());
    if ratio {
        Some(log(ran)? - log(announced?)?)
    } else {
        log(ran)
    }
}

impl Batches {
    /// Learns a finished run of `batch`, of `family`.
    pub(super) fn learn(&mut self, batch: &str, family: &str, ran: i64, announced: Option<i64>) {
        if !self.finished.contains_key(batch) {
            if self.order.len() == KEPT_BATCHES
                && let Some(oldest) = self.order.pop_front()
            {
                self.finished.remove(&oldest);
            }
            self.order.push_back(batch.to_owned());
        }
        let runs = self.finished.entry(batch.to_owned()).or_default();
        if runs.len() >= KEPT_PER_BATCH {
            return;
        }
        let own = self.spreads.entry(family.to_owned()).or_default();
        for (scale, ratio) in [false, true].into_iter().enumerate() {
            if let Some(x) = scaled(ran, announced, ratio) {
                let before: Vec<f64> = runs
                    .iter()
                    .filter_map(|(r, a)| scaled(*r, *a, ratio))
                    .collect();
                own[scale].add(&before, x);
                self.all[scale].add(&before, x);
            }
        }
        runs.push((ran, announced));
    }

    /// The spread within `family`'s batches on one scale (`ratio`): its own once it has
    /// [`MIN_SPREAD_RUNS`], else every family's.
    fn sd(&self, family: &str, ratio: bool) -> Option<f64> {
        let scale = usize::from(ratio);
        self.spreads
            .get(family)
            .and_then(|s| s[scale].sd())
            .or_else(|| self.all[scale].sd())
    }
}

/// One batch's μ after what it showed: points (sorted) and running sums of their weights.
#[derive(Clone, Debug)]
struct Posterior {
    points: Vec<f64>,
    cum: Vec<f64>,
    /// On the ratio scale (the family's basis is the ratio to announced runtimes).
    ratio: bool,
    /// The spread of a job's runtime about μ, on that scale.
    sd: f64,
    /// Its jobs that had finished, and that were running, at the snapshot.
    finished: usize,
    running: usize,
}

/// A batch's runtime keys and announced runtime (its first job's), and its running jobs.
type Members<'a> = (&'a [String], Option<i64>, Vec<&'a RunningJob>);

/// Every batch of a snapshot that has shown something, ready to draw from.
#[derive(Clone, Debug, Default)]
pub(super) struct BatchDraws {
    posteriors: BTreeMap<String, Posterior>,
}

impl BatchDraws {
    /// The posteriors of the batches of `snapshot`'s jobs, from what `batches` ran. `prior`
    /// gives, for a job's runtime keys and announced runtime, the scale its family's history
    /// is on (true: ratios to announced runtimes) and that history as points on it; `None`:
    /// no history answers for it.
    pub(super) fn new(
        batches: &Batches,
        snapshot: &Snapshot,
        prior: impl Fn(&[String], Option<i64>) -> Option<(bool, Vec<f64>)>,
    ) -> BatchDraws {
        let mut draws = BatchDraws::default();
        // Per batch: its family's keys and announcement (from its first job), and its
        // running jobs.
        let mut members: BTreeMap<&str, Members<'_>> = BTreeMap::new();
        for r in &snapshot.running {
            if let Some(b) = &r.batch {
                members
                    .entry(b)
                    .or_insert((&r.keys, r.job.expected_runtime, Vec::new()))
                    .2
                    .push(r);
            }
        }
        for w in &snapshot.waiting {
            if let Some(b) = &w.batch {
                members
                    .entry(b)
                    .or_insert((&w.keys, w.job.expected_runtime, Vec::new()));
            }
        }
        for (batch, (keys, announced, running)) in members {
            let Some((ratio, points)) = prior(keys, announced) else {
                continue;
            };
            let Some(sd) = keys.first().and_then(|f| batches.sd(f, ratio)) else {
                continue;
            };
            if points.is_empty() {
                continue;
            }
            // The family's runs spread as its batches' μ do plus the spread within a batch:
            // μ's prior is their points drawn in toward their mean by as much. Where batches
            // explain less than half of the family's spread (jobs submitted close together
            // by chance, not as one experiment), they say too little to answer for it.
            #[expect(clippy::cast_precision_loss, reason = "a count below 2^53")]
            let n = points.len() as f64;
            let mean = points.iter().sum::<f64>() / n;
            let variance = points.iter().map(|p| (p - mean).powi(2)).sum::<f64>() / n;
            if sd * sd > SHARE_WITHIN * variance {
                continue;
            }
            let shrink = (1.0 - sd * sd / variance).max(0.0).sqrt();
            let points: Vec<f64> = points.iter().map(|p| mean + shrink * (p - mean)).collect();
            let finished: Vec<f64> = batches
                .finished
                .get(batch)
                .into_iter()
                .flatten()
                .filter_map(|(ran, a)| scaled(*ran, *a, ratio))
                .collect();
            let censored: Vec<f64> = running
                .iter()
                .filter_map(|r| {
                    let ran = r.ran_for(snapshot.now)?;
                    scaled(ran.max(1), r.job.expected_runtime, ratio)
                })
                .collect();
            if finished.is_empty() && censored.is_empty() {
                continue;
            }
            if let Some(cum) = posterior(&points, &finished, &censored, sd) {
                draws.posteriors.insert(
                    batch.to_owned(),
                    Posterior {
                        points,
                        cum,
                        ratio,
                        sd,
                        finished: finished.len(),
                        running: censored.len(),
                    },
                );
            }
        }
        draws
    }

    /// Draws the runtime, seconds, of a job of `batch` that announced `announced` and has run
    /// `elapsed` (0: not started; `running`: it is one of the batch's running jobs at the
    /// snapshot), in a forward run whose μ for the batch lies at `mu` (in (0, 1]) of its
    /// posterior ([`mu_draw`]), at the job's own `quantile` (the caller keeps it past what the
    /// job has run). `None`: the batch showed nothing beyond this job itself, so its family
    /// answers instead.
    pub(super) fn draw(
        &self,
        batch: &str,
        announced: Option<i64>,
        elapsed: i64,
        running: bool,
        mu: f64,
        quantile: f64,
    ) -> Option<i64> {
        let p = self.posteriors.get(batch)?;
        if p.finished + p.running <= usize::from(running) {
            return None;
        }
        let sd = p.sd;
        let unit = if p.ratio {
            announced.filter(|a| *a > 0)?
        } else {
            1
        };
        #[expect(
            clippy::cast_precision_loss,
            reason = "runtimes in seconds are far below 2^53"
        )]
        let (unit, floor) = (unit as f64, (elapsed.max(1) as f64));
        let mu = weighted_index(&p.cum, mu).map(|i| p.points[i])?;
        // z past what the job has run: its chance of lying beyond, split by the quantile.
        let past = (floor / unit).ln();
        let from = if elapsed > 0 {
            normal::ln_survival((past - mu) / sd)
        } else {
            0.0
        };
        let tail = from.exp() * (1.0 - quantile).max(1e-12);
        let z = -normal::quantile(tail);
        let x = (mu + sd * z).min(MAX_LN_SECONDS);
        #[expect(
            clippy::cast_possible_truncation,
            reason = "capped far below i64's range; rounded to a second"
        )]
        let ran = (x.exp() * unit).round() as i64;
        Some(ran)
    }
}

/// The longest runtime a batch draws, as a log of seconds (about 30 years): draws past the
/// horizon all mean the same, and the exponent stays finite.
const MAX_LN_SECONDS: f64 = 20.7;

/// μ's posterior over `points` (the prior's, one per run of the family, sorted: the
/// history's order, which neither the logarithm nor drawing in toward the mean changes) given
/// the batch's `finished` runs and its `censored` ones (ran at least that), on one scale with
/// spread `sd`: the running sums of the points' weights. `None` when no point makes what was
/// seen possible at all.
fn posterior(points: &[f64], finished: &[f64], censored: &[f64], sd: f64) -> Option<Vec<f64>> {
    let logs: Vec<f64> = points
        .iter()
        .map(|m| {
            finished
                .iter()
                .map(|x| normal::ln_density((x - m) / sd))
                .chain(censored.iter().map(|y| normal::ln_survival((y - m) / sd)))
                .sum::<f64>()
        })
        .collect();
    let top = logs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !top.is_finite() {
        return None;
    }
    let mut cum = Vec::with_capacity(points.len() + 1);
    let mut total = 0.0;
    cum.push(total);
    for l in &logs {
        total += (l - top).exp();
        cum.push(total);
    }
    Some(cum)
}

/// Where μ of `batch` lies in its posterior, in the forward run seeded `seed`: one uniform
/// draw per batch and run.
pub(super) fn mu_draw(seed: u64, batch: &str) -> f64 {
    Rng::new(text_seed(batch) ^ seed.rotate_left(29)).unit()
}

/// Of the entries whose weights sum, for the first `i`, to `cum[i]` (`cum[0]` = 0, one more
/// sum than entries), the first at which the running weight reaches `quantile` (in (0, 1])
/// of the whole; `None` when there are none.
fn weighted_index(cum: &[f64], quantile: f64) -> Option<usize> {
    let n = cum.len().checked_sub(1).filter(|n| *n > 0)?;
    let target = quantile.clamp(0.0, 1.0) * cum[n];
    // Sums never fall: a search.
    Some(cum[1..].partition_point(|c| *c < target).min(n - 1))
}

#[cfg(test)]
mod tests {
    use super::{Batches, KEPT_BATCHES, KEPT_PER_BATCH, batches};

    #[test]
    fn a_batch_is_a_familys_submissions_each_close_to_the_one_before() {
        let named = batches([
            ("a", 0),
            ("b", 3),
            ("a", 5),
            ("a", 14),
            ("b", 20),
            ("a", 30),
        ]);
        assert_eq!(named, ["a@0", "b@3", "a@0", "a@0", "b@20", "a@30"]);
    }

    #[test]
    fn what_batches_ran_stays_bounded() {
        let mut b = Batches::default();
        for i in 0..=KEPT_BATCHES {
            b.learn(&format!("f@{i}"), "f", 100, None);
        }
        assert_eq!(b.finished.len(), KEPT_BATCHES);
        assert!(!b.finished.contains_key("f@0"));
        for _ in 0..=KEPT_PER_BATCH {
            b.learn("f@1", "f", 100, None);
        }
        assert_eq!(b.finished["f@1"].len(), KEPT_PER_BATCH);
    }
}
