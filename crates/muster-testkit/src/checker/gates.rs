//! Gates: lifted only once the whole gang exists ([`super::ViolationKind::GateLiftedOnPartialGang`]),
//! and for the whole gang. A release lifts every gate of a gang in one burst, so some pods of
//! an attempt ungated while others keep their gates is a release in flight — for a moment. One
//! that stays half done for longer than [`HALF_RELEASED_SECONDS`] while some replica of the
//! controller leads is a gang running in part ([`super::ViolationKind::GatesHalfLifted`]). Only
//! a leader can finish a release, so time without one does not count (a run told nothing of
//! leadership counts every second).

use std::collections::{BTreeMap, BTreeSet};

use super::{Checker, ViolationKind};

/// How long some pods of one attempt may run ungated while others keep their gates, seconds
/// while some replica leads. A release lifts the gates in one burst of writes; retried
/// through API faults, or finished by a new leader's first pass after the old one died
/// mid-burst, it takes seconds, not this long.
pub const HALF_RELEASED_SECONDS: f64 = 30.0;

/// One attempt of a job (`job`, `attempt`).
type Attempt = (String, String);

/// A gang found half released for too long.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct HalfReleased {
    /// The job, `namespace/name`.
    pub(super) job: String,
    /// When it was judged, seconds into the run.
    pub(super) at: f64,
    /// What was seen: how many pods on each side, since when, how long with a leader.
    pub(super) detail: String,
}

/// An attempt seen half released from `since` (seconds into the run), with its pods still
/// gated and those ungated when last seen.
#[derive(Clone, Copy, Debug)]
struct Span {
    since: f64,
    gated: usize,
    lifted: usize,
}

/// Since when each attempt is half released, as the pods show it, and the spans that ended
/// after longer than the bound (judged once it is known when a replica led).
#[derive(Debug, Default)]
pub(super) struct Releases {
    /// Attempts half released now.
    half: BTreeMap<Attempt, Span>,
    /// Spans over by `.2`, longer than the bound by the clock: not yet judged.
    ended: Vec<(Attempt, Span, f64)>,
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
    ) {
        let key = (job.to_owned(), attempt.to_owned());
        if gated == 0 || lifted == 0 {
            if let Some(span) = self.half.remove(&key)
                && at - span.since > HALF_RELEASED_SECONDS
            {
                self.ended.push((key, span, at));
            }
            return;
        }
        let span = self.half.entry(key).or_insert(Span {
            since: at,
            gated,
            lifted,
        });
        span.gated = gated;
        span.lifted = lifted;
    }

    /// Every attempt half released, up to `at`, for longer than the bound of the time
    /// `led(from, to)` says some replica led; each reported once. Spans that ended are judged
    /// and let go; those still open are judged up to `at` and kept.
    pub(super) fn judge(&mut self, at: f64, led: impl Fn(f64, f64) -> f64) -> Vec<HalfReleased> {
        let ended = std::mem::take(&mut self.ended);
        let open: Vec<(Attempt, Span, f64)> = self
            .half
            .iter()
            .filter(|(_, span)| at - span.since > HALF_RELEASED_SECONDS)
            .map(|(key, span)| (key.clone(), *span, at))
            .collect();
        let mut found = Vec::new();
        for (key, span, until) in ended.into_iter().chain(open) {
            let leading = led(span.since, until);
            if leading <= HALF_RELEASED_SECONDS || self.reported.contains(&key) {
                continue;
            }
            let Span {
                since,
                gated,
                lifted,
            } = span;
            let detail = format!(
                "attempt {}: {lifted} pods ungated, {gated} still gated, for {:.1} s (since {since:.1} s), {leading:.1} s of it with a replica leading",
                key.1,
                until - since
            );
            self.reported.insert(key.clone());
            found.push(HalfReleased {
                job: key.0,
                at: until,
                detail,
            });
        }
        found
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
        let done = self.done_before(job, attempt);
        if seen + done < size as usize {
            let earlier = if done > 0 {
                format!(" (and {done} completions done by earlier attempts)")
            } else {
                String::new()
            };
            self.report(
                ViolationKind::GateLiftedOnPartialGang,
                format!("Pod/{pod}"),
                at,
                format!(
                    "gates lifted with {seen} of {size} pods of {job} attempt {attempt} made{earlier}"
                ),
            );
        }
    }

    /// The completions of `job`'s JobSet child Jobs that pods of earlier attempts than
    /// `attempt` ran to success, of child Jobs this attempt has pods of. Such a Job keeps
    /// its completed indexes and makes no pod for them again: their places in the gang stay
    /// empty, and the gang is whole without them.
    fn done_before(&self, job: &str, attempt: &str) -> usize {
        let key = (job.to_owned(), attempt.to_owned());
        let running: BTreeSet<(&str, &str)> = self
            .seen
            .get(&key)
            .into_iter()
            .flatten()
            .filter_map(|pod| self.pods.get(pod)?.completion.as_ref())
            .map(|c| (c.of.0.as_str(), c.of.1.as_str()))
            .collect();
        if running.is_empty() {
            return 0;
        }
        self.pods
            .values()
            .filter(|p| p.job == job && p.attempt != attempt)
            .filter_map(|p| p.completion.as_ref())
            .filter(|c| c.succeeded && running.contains(&(c.of.0.as_str(), c.of.1.as_str())))
            .map(|c| &c.of)
            .collect::<BTreeSet<_>>()
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::{HALF_RELEASED_SECONDS, Releases};

    /// Every second counts: no replica was ever said to lead or not.
    fn always(from: f64, to: f64) -> f64 {
        to - from
    }

    fn jobs(found: &[super::HalfReleased]) -> Vec<&str> {
        found.iter().map(|h| h.job.as_str()).collect()
    }

    #[test]
    fn a_gang_half_released_past_the_bound_is_reported_once() {
        let mut releases = Releases::default();
        // Gates lifted one by one: half released for a moment, then whole.
        releases.observe("ns/j", "0", 2, 1, 1.0);
        releases.observe("ns/j", "0", 1, 2, 1.2);
        releases.observe("ns/j", "0", 0, 3, 1.3);
        assert!(releases.judge(100.0, always).is_empty());

        // Another stays half released: found by the clock alone, once.
        releases.observe("ns/k", "1", 1, 1, 10.0);
        assert!(
            releases
                .judge(10.0 + HALF_RELEASED_SECONDS, always)
                .is_empty()
        );
        let found = releases.judge(10.0 + HALF_RELEASED_SECONDS + 0.5, always);
        assert_eq!(jobs(&found), ["ns/k"]);
        assert!(
            found[0].detail.contains("1 pods ungated, 1 still gated"),
            "{found:?}"
        );
        assert!(releases.judge(200.0, always).is_empty());
        releases.observe("ns/k", "1", 0, 2, 201.0);
        assert!(releases.judge(300.0, always).is_empty());
    }

    #[test]
    fn a_gang_whose_gated_pods_go_is_no_longer_half_released() {
        let mut releases = Releases::default();
        releases.observe("ns/j", "0", 1, 1, 0.0);
        // The gated pod deleted (a release rolled back): nothing half released remains.
        releases.observe("ns/j", "0", 0, 1, 5.0);
        assert!(releases.judge(100.0, always).is_empty());
        // Seen half released again later, the bound counts from then.
        releases.observe("ns/j", "0", 1, 1, 100.0);
        assert!(releases.judge(120.0, always).is_empty());
        assert_eq!(jobs(&releases.judge(131.0, always)), ["ns/j"]);
    }

    #[test]
    fn only_time_with_a_leader_counts_against_the_bound() {
        // A replica led until 20 s and again from 60 s.
        let led = |from: f64, to: f64| {
            super::super::spells::covered([(0.0, 20.0), (60.0, 1000.0)], from, to)
        };
        let mut releases = Releases::default();
        // Half released from 10 s to 70 s: 60 s by the clock, 20 s with a leader.
        releases.observe("ns/j", "0", 15, 1, 10.0);
        releases.observe("ns/j", "0", 0, 16, 70.0);
        // Half released from 50 s and still at 100 s: 40 s with a leader.
        releases.observe("ns/k", "0", 1, 1, 50.0);
        let found = releases.judge(100.0, led);
        assert_eq!(jobs(&found), ["ns/k"], "{found:?}");
        assert!(
            found[0]
                .detail
                .contains("40.0 s of it with a replica leading"),
            "{found:?}"
        );
        // Judged the same with every second counted, the first is reported as well.
        let mut releases = Releases::default();
        releases.observe("ns/j", "0", 15, 1, 10.0);
        releases.observe("ns/j", "0", 0, 16, 70.0);
        assert_eq!(jobs(&releases.judge(100.0, always)), ["ns/j"]);
    }
}
