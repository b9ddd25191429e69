//! Gates: lifted only once the whole gang exists ([`super::ViolationKind::GateLiftedOnPartialGang`]),
//! and for the whole gang. A release lifts every gate of a gang in one burst, so some pods of
//! an attempt ungated while others keep their gates is a release in flight — for a moment. One
//! that stays half done longer than [`HALF_RELEASED_SECONDS`] is a gang running in part
//! ([`super::ViolationKind::GatesHalfLifted`]).

use std::collections::{BTreeMap, BTreeSet};

use super::{Checker, ViolationKind};

/// How long some pods of one attempt may run ungated while others keep their gates, seconds.
/// A release lifts the gates in one burst of writes; retried through API faults, or finished
/// by a new leader after the old one died mid-burst (the Lease lasts 20 s), it takes seconds,
/// not this long.
pub const HALF_RELEASED_SECONDS: f64 = 30.0;

/// One attempt of a job (`job`, `attempt`).
type Attempt = (String, String);

/// A gang found half released for too long.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct HalfReleased {
    /// The job, `namespace/name`.
    pub(super) job: String,
    /// What was seen: how many pods on each side, since when.
    pub(super) detail: String,
}

/// Since when each attempt is half released, as the pods show it.
#[derive(Debug, Default)]
pub(super) struct Releases {
    /// Attempt → since when (seconds into the run) it is half released, with its pods still
    /// gated and those ungated.
    half: BTreeMap<Attempt, (f64, usize, usize)>,
    /// Attempts already reported.
    reported: BTreeSet<Attempt>,
}

impl Releases {
    /// At `at`, attempt `attempt` of `job` has `gated` live pods still gated and `lifted`
    /// ungated (pods being deleted left out: a release rolled back is no longer under way).
    pub(super) fn observe(
        &mut self,
        job: &str,
        attempt: &str,
        gated: usize,
        lifted: usize,
        at: f64,
    ) -> Option<HalfReleased> {
        let key = (job.to_owned(), attempt.to_owned());
        if gated == 0 || lifted == 0 {
            self.half.remove(&key);
            return None;
        }
        let entry = self.half.entry(key.clone()).or_insert((at, gated, lifted));
        entry.1 = gated;
        entry.2 = lifted;
        let (since, gated, lifted) = *entry;
        self.judge(key, since, gated, lifted, at)
    }

    /// Every attempt half released past the bound at `at` (time passes without events).
    pub(super) fn tick(&mut self, at: f64) -> Vec<HalfReleased> {
        let half: Vec<(Attempt, (f64, usize, usize))> =
            self.half.iter().map(|(k, v)| (k.clone(), *v)).collect();
        half.into_iter()
            .filter_map(|(key, (since, gated, lifted))| self.judge(key, since, gated, lifted, at))
            .collect()
    }

    fn judge(
        &mut self,
        key: Attempt,
        since: f64,
        gated: usize,
        lifted: usize,
        at: f64,
    ) -> Option<HalfReleased> {
        if at - since <= HALF_RELEASED_SECONDS || self.reported.contains(&key) {
            return None;
        }
        let detail = format!(
            "attempt {}: {lifted} pods ungated, {gated} still gated, for {:.1} s (since {since:.1} s)",
            key.1,
            at - since
        );
        self.reported.insert(key.clone());
        Some(HalfReleased { job: key.0, detail })
    }
}

// === impl Checker: whole gangs ===

impl Checker {
    pub(super) fn check_gang(&mut self, job: &str, attempt: &str, pod: &str, at: f64) {
        let seen = self
            .seen
            .get(&(job.to_owned(), attempt.to_owned()))
            .map_or(0, BTreeSet::len);
        match self.gang_size.get(job) {
            Some(&size) => self.judge_lift(job, attempt, pod, seen, size, at),
            None => self.unsized_lifts.push((
                job.to_owned(),
                attempt.to_owned(),
                pod.to_owned(),
                seen,
                at,
            )),
        }
    }

    pub(super) fn resolve_lifts(&mut self, job: &str) {
        let Some(&size) = self.gang_size.get(job) else {
            return;
        };
        let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.unsized_lifts)
            .into_iter()
            .partition(|l| l.0 == job);
        self.unsized_lifts = later;
        for (job, attempt, pod, seen, at) in now {
            self.judge_lift(&job, &attempt, &pod, seen, size, at);
        }
    }

    fn judge_lift(&mut self, job: &str, attempt: &str, pod: &str, seen: usize, size: u32, at: f64) {
        if seen < size as usize {
            self.report(
                ViolationKind::GateLiftedOnPartialGang,
                format!("Pod/{pod}"),
                at,
                format!("gates lifted with {seen} of {size} pods of {job} attempt {attempt} made"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{HALF_RELEASED_SECONDS, Releases};

    #[test]
    fn a_gang_half_released_past_the_bound_is_reported_once() {
        let mut releases = Releases::default();
        // Gates lifted one by one: half released for a moment, then whole.
        assert_eq!(releases.observe("ns/j", "0", 2, 1, 1.0), None);
        assert_eq!(releases.observe("ns/j", "0", 1, 2, 1.2), None);
        assert_eq!(releases.observe("ns/j", "0", 0, 3, 1.3), None);
        assert_eq!(releases.tick(100.0), []);

        // Another stays half released: found by the clock alone, once.
        assert_eq!(releases.observe("ns/k", "1", 1, 1, 10.0), None);
        assert_eq!(releases.tick(10.0 + HALF_RELEASED_SECONDS), []);
        let found = releases.tick(10.0 + HALF_RELEASED_SECONDS + 0.5);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].job, "ns/k");
        assert!(
            found[0].detail.contains("1 pods ungated, 1 still gated"),
            "{found:?}"
        );
        assert_eq!(releases.tick(200.0), []);
        assert_eq!(releases.observe("ns/k", "1", 1, 1, 201.0), None);
    }

    #[test]
    fn a_gang_whose_gated_pods_go_is_no_longer_half_released() {
        let mut releases = Releases::default();
        assert_eq!(releases.observe("ns/j", "0", 1, 1, 0.0), None);
        // The gated pod deleted (a release rolled back): nothing half released remains.
        assert_eq!(releases.observe("ns/j", "0", 0, 1, 5.0), None);
        assert_eq!(releases.tick(100.0), []);
        // Seen half released again later, the bound counts from then.
        assert_eq!(releases.observe("ns/j", "0", 1, 1, 100.0), None);
        assert_eq!(releases.tick(120.0), []);
        assert_eq!(
            releases
                .observe("ns/j", "0", 1, 1, 131.0)
                .map(|h| h.job)
                .as_deref(),
            Some("ns/j")
        );
    }
}
