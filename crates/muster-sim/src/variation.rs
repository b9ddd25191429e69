//! Variations of a loaded scenario for what-if runs: the same cluster, queues and jobs, with
//! one thing changed that the scenario file fixes — how wrong the runtimes jobs announce are,
//! or how ClusterQueues weigh preempting against waiting.

use crate::scenario::Loaded;
use crate::trace::Rng;

impl Loaded {
    /// Makes every announced runtime wrong by up to `error` of itself (0.5: anywhere from half
    /// to one and a half times the true runtime), drawn uniformly per job from `seed` in
    /// submission order; the jobs still run for their true duration. Jobs that announce no
    /// runtime are left as they are. An announced runtime is at least one second.
    ///
    /// Submitters' estimates are known to be poor; a rule that trusts them (backfill, and
    /// whether a preemptor waits for a job about to end) has to stay sound when they are.
    pub fn misannounce_runtimes(&mut self, error: f64, seed: u64) -> Result<(), String> {
        if !(0.0..1.0).contains(&error) {
            return Err(format!(
                "runtime error {error} must be at least 0 and below 1 (0.5: announced runtimes off by up to ±50 %)"
            ));
        }
        let mut rng = Rng::new(seed);
        for job in &mut self.jobs {
            let Some(announced) = job.expected_runtime else {
                continue;
            };
            let factor = 1.0 + error * (2.0 * rng.unit() - 1.0);
            #[expect(
                clippy::cast_precision_loss,
                clippy::cast_possible_truncation,
                reason = "runtimes in seconds are far below 2^53; rounded to a second"
            )]
            let wrong = (announced as f64 * factor).round() as i64;
            job.expected_runtime = Some(wrong.max(1));
        }
        Ok(())
    }

    /// Gives every job an announced runtime wrong by a known distribution: its true duration
    /// times a factor drawn log-uniformly between `low` and `high` per job, from `seed` in
    /// submission order (0.5 and 4: from half to four times the truth, as often under as over
    /// by the same ratio around their geometric mean, 1.41). The jobs still run their true
    /// duration. A forecast that learns how wrong announcements are is measured against
    /// workloads made this way.
    pub fn announce_off_by(&mut self, low: f64, high: f64, seed: u64) -> Result<(), String> {
        if !(low > 0.0 && low <= high && high.is_finite()) {
            return Err(format!(
                "announced-runtime factors {low}..{high}: give 0 < LOW ≤ HIGH (0.5:4 announces from half to four times the true runtime)"
            ));
        }
        let mut rng = Rng::new(seed);
        let (ln_low, ln_high) = (low.ln(), high.ln());
        for job in &mut self.jobs {
            let factor = (ln_low + (ln_high - ln_low) * rng.unit()).exp();
            #[expect(
                clippy::cast_precision_loss,
                clippy::cast_possible_truncation,
                reason = "runtimes in seconds are far below 2^53; rounded to a second"
            )]
            let announced = (job.duration as f64 * factor).round() as i64;
            job.expected_runtime = Some(announced.max(1));
        }
        Ok(())
    }

    /// Sets `preemption.waitWhenCheaper` (when `wait` is given) and
    /// `preemption.maxWaitWhenCheaperSeconds` (when `max_wait` is) on every ClusterQueue that
    /// preempts; queues without a preemption policy are left alone.
    pub fn set_preemption_waits(&mut self, wait: Option<bool>, max_wait: Option<i64>) {
        for (_, spec) in &mut self.cluster_queues {
            if let Some(p) = spec.preemption.as_mut() {
                if let Some(wait) = wait {
                    p.wait_when_cheaper = Some(wait);
                }
                if let Some(max) = max_wait {
                    p.max_wait_when_cheaper_seconds = Some(max);
                }
            }
        }
    }
}
