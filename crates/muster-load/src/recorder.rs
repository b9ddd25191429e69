//! What a load run saw, from the API server's point of view: per job, when it was created,
//! admitted and finished and how often it was evicted; per ClusterQueue, its usage over time,
//! integrated as Kueue's performance recorder does (∫ usage dt over the monitoring window).
//!
//! Pure: events come in with the time they were seen, so the arithmetic is unit-tested.

use std::collections::BTreeMap;
use std::time::Duration;

/// One job's history.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobRecord {
    /// Its class (`small`, `medium`, `large`).
    pub class: String,
    /// When it was created (since the run's start).
    pub created: Option<Duration>,
    /// When it was first seen admitted.
    pub admitted: Option<Duration>,
    /// When it was first seen finished.
    pub finished: Option<Duration>,
    /// Times it went from admitted to not admitted without finishing.
    pub evictions: u32,
    /// When its last pod was first seen bound to a node (the latest pod's binding, so a
    /// gang counts once all its pods are bound).
    pub pods_bound: Option<Duration>,
    /// When its last pod was first seen ended (Succeeded or Failed).
    pub pods_ended: Option<Duration>,
    /// Why it failed, when it ended Failed (its status's reason and message): every job of
    /// a load run is built to succeed, so each of these is something to look into.
    pub failed: Option<String>,
    admitted_now: bool,
    /// Per pod name, when it was first seen bound and first seen ended.
    pods: BTreeMap<String, (Option<Duration>, Option<Duration>)>,
}

/// Where a job's time from admission to finish went, seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FinishSteps {
    /// From its admission seen to its pods bound by kube-scheduler.
    pub to_bound: f64,
    /// From its pods bound to its pods ended (started and run by the kubelet).
    pub to_ended: f64,
    /// From its pods ended to its own status saying it finished.
    pub to_finished: f64,
}

/// One ClusterQueue's usage over time.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QueueRecord {
    /// Nominal quota of the measured resource, milli-units.
    pub nominal_milli: i64,
    /// First and last time its status was seen.
    pub first: Option<Duration>,
    /// See `first`.
    pub last: Option<Duration>,
    /// ∫ usage dt, milli-units × milliseconds.
    pub used_milli_ms: i128,
    /// The highest usage seen, milli-units.
    pub max_usage_milli: i64,
    usage_milli: i64,
}

/// Every job and queue of a run.
#[derive(Clone, Debug, Default)]
pub struct Recorder {
    /// Jobs by `namespace/name`.
    pub jobs: BTreeMap<String, JobRecord>,
    /// Queues by name.
    pub queues: BTreeMap<String, QueueRecord>,
}

impl Recorder {
    /// Job `key` of `class` was created at `at`.
    pub fn created(&mut self, key: &str, class: &str, at: Duration) {
        let job = self.jobs.entry(key.to_owned()).or_default();
        class.clone_into(&mut job.class);
        job.created.get_or_insert(at);
    }

    /// Job `key` was seen at `at`, admitted or not, finished or not.
    pub fn job_seen(&mut self, key: &str, admitted: bool, finished: bool, at: Duration) {
        let job = self.jobs.entry(key.to_owned()).or_default();
        if job.finished.is_some() {
            return;
        }
        if admitted && !job.admitted_now {
            job.admitted.get_or_insert(at);
        }
        if finished {
            job.finished = Some(at);
        } else if job.admitted_now && !admitted {
            job.evictions += 1;
        }
        job.admitted_now = admitted && !finished;
    }

    /// Job `key` was seen ended Failed, `why`; the first sight counts.
    pub fn failed(&mut self, key: &str, why: &str) {
        let job = self.jobs.entry(key.to_owned()).or_default();
        job.failed.get_or_insert_with(|| why.to_owned());
    }

    /// Pod `pod` of job `key` was seen at `at`, bound to a node or not, ended or not. The
    /// job's times are its last pod's first sight of each.
    pub fn pod_seen(&mut self, key: &str, pod: &str, bound: bool, ended: bool, at: Duration) {
        let Some(job) = self.jobs.get_mut(key) else {
            return;
        };
        if job.finished.is_some() {
            return;
        }
        let seen = job.pods.entry(pod.to_owned()).or_default();
        if bound && seen.0.is_none() {
            seen.0 = Some(at);
            job.pods_bound = Some(job.pods_bound.map_or(at, |b| b.max(at)));
        }
        if ended && seen.1.is_none() {
            seen.1 = Some(at);
            job.pods_ended = Some(job.pods_ended.map_or(at, |e| e.max(at)));
        }
    }

    /// Mean seconds per class of each step from admission to finish, over the jobs that
    /// went through all of them: admitted → pods bound, pods bound → pods ended, pods ended
    /// → finished (the job's own status).
    pub fn mean_steps_to_finish(&self) -> BTreeMap<String, FinishSteps> {
        let mut sums: BTreeMap<String, (FinishSteps, u32)> = BTreeMap::new();
        for job in self.jobs.values() {
            let (Some(admitted), Some(bound), Some(ended), Some(finished)) =
                (job.admitted, job.pods_bound, job.pods_ended, job.finished)
            else {
                continue;
            };
            let entry = sums.entry(job.class.clone()).or_default();
            entry.0.to_bound += bound.saturating_sub(admitted).as_secs_f64();
            entry.0.to_ended += ended.saturating_sub(bound).as_secs_f64();
            entry.0.to_finished += finished.saturating_sub(ended).as_secs_f64();
            entry.1 += 1;
        }
        sums.into_iter()
            .map(|(class, (sum, n))| {
                let n = f64::from(n.max(1));
                let mean = FinishSteps {
                    to_bound: sum.to_bound / n,
                    to_ended: sum.to_ended / n,
                    to_finished: sum.to_finished / n,
                };
                (class, mean)
            })
            .collect()
    }

    /// Queue `name` (nominal quota `nominal_milli`) showed `usage_milli` in use at `at`.
    pub fn queue_seen(&mut self, name: &str, nominal_milli: i64, usage_milli: i64, at: Duration) {
        let queue = self.queues.entry(name.to_owned()).or_default();
        queue.nominal_milli = nominal_milli;
        if let Some(last) = queue.last {
            let ms = i128::try_from(at.saturating_sub(last).as_millis()).unwrap_or(i128::MAX);
            queue.used_milli_ms += i128::from(queue.usage_milli) * ms;
        }
        queue.first.get_or_insert(at);
        queue.last = Some(at);
        queue.usage_milli = usage_milli;
        queue.max_usage_milli = queue.max_usage_milli.max(usage_milli);
    }

    /// Jobs created and not yet finished.
    pub fn unfinished(&self) -> usize {
        self.jobs
            .values()
            .filter(|j| j.created.is_some() && j.finished.is_none())
            .count()
    }

    /// Usage as Kueue's recorder computes it for a class of queues: Σ ∫ usage dt over the
    /// window from the first to the last status seen of any queue, divided by the window and
    /// by Σ nominal quota. `None` before two observations.
    pub fn usage_share(&self) -> Option<f64> {
        let first = self.queues.values().filter_map(|q| q.first).min()?;
        let last = self.queues.values().filter_map(|q| q.last).max()?;
        let window_ms = last.saturating_sub(first).as_millis();
        let nominal: i64 = self.queues.values().map(|q| q.nominal_milli).sum();
        let used: i128 = self.queues.values().map(|q| q.used_milli_ms).sum();
        if window_ms == 0 || nominal <= 0 {
            return None;
        }
        #[expect(clippy::cast_precision_loss, reason = "a ratio for a report")]
        Some(used as f64 / window_ms as f64 / nominal as f64)
    }

    /// Mean seconds from creation to admission per class, over the jobs admitted.
    pub fn mean_time_to_admission(&self) -> BTreeMap<String, f64> {
        let mut sums: BTreeMap<String, (f64, u32)> = BTreeMap::new();
        for job in self.jobs.values() {
            if let (Some(created), Some(admitted)) = (job.created, job.admitted) {
                let entry = sums.entry(job.class.clone()).or_default();
                entry.0 += admitted.saturating_sub(created).as_secs_f64();
                entry.1 += 1;
            }
        }
        sums.into_iter()
            .map(|(class, (sum, n))| (class, sum / f64::from(n.max(1))))
            .collect()
    }

    /// From the first creation to the last finish.
    pub fn wall(&self) -> Option<Duration> {
        let first = self.jobs.values().filter_map(|j| j.created).min()?;
        let last = self.jobs.values().filter_map(|j| j.finished).max()?;
        Some(last.saturating_sub(first))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(seconds: f64) -> Duration {
        Duration::from_secs_f64(seconds)
    }

    #[test]
    fn a_job_is_admitted_once_evicted_once_and_finished_once() {
        let mut r = Recorder::default();
        r.created("ns/a", "small", s(1.0));
        r.job_seen("ns/a", false, false, s(1.5));
        r.job_seen("ns/a", true, false, s(3.0));
        r.job_seen("ns/a", false, false, s(4.0)); // evicted
        r.job_seen("ns/a", true, false, s(6.0)); // admitted again: the first time counts
        r.job_seen("ns/a", false, true, s(7.0));
        r.job_seen("ns/a", false, true, s(9.0)); // seen finished again
        let job = &r.jobs["ns/a"];
        assert_eq!(
            (job.admitted, job.finished, job.evictions),
            (Some(s(3.0)), Some(s(7.0)), 1)
        );
        assert!((r.mean_time_to_admission()["small"] - 2.0).abs() < 1e-9);
        assert_eq!(r.wall(), Some(s(6.0)));
        assert_eq!(r.unfinished(), 0);
    }

    #[test]
    fn a_failed_job_keeps_why_it_first_failed() {
        let mut r = Recorder::default();
        r.created("ns/a", "small", s(0.0));
        r.created("ns/b", "small", s(0.0));
        r.failed("ns/a", "Failed: BackoffLimitExceeded");
        r.failed("ns/a", "Failed: seen again");
        assert_eq!(
            r.jobs["ns/a"].failed.as_deref(),
            Some("Failed: BackoffLimitExceeded")
        );
        assert_eq!(r.jobs["ns/b"].failed, None);
    }

    #[test]
    fn a_jobs_steps_to_finish_end_at_its_last_pod() {
        let mut r = Recorder::default();
        r.created("ns/a", "large", s(0.0));
        r.job_seen("ns/a", true, false, s(1.0));
        r.pod_seen("ns/a", "p0", true, false, s(2.0));
        r.pod_seen("ns/a", "p1", false, false, s(2.5));
        r.pod_seen("ns/a", "p1", true, false, s(3.0)); // the second pod bound later
        r.pod_seen("ns/a", "p0", true, false, s(4.0)); // seen bound again: the first counts
        r.pod_seen("ns/a", "p0", true, true, s(6.0));
        r.pod_seen("ns/a", "p1", true, true, s(7.0));
        r.pod_seen("ns/a", "p1", true, true, s(8.0));
        r.job_seen("ns/a", false, true, s(10.0));
        r.pod_seen("ns/a", "p2", true, true, s(12.0)); // after the finish: ignored
        r.pod_seen("ns/other", "q", true, true, s(1.0)); // no such job: ignored
        let steps = r.mean_steps_to_finish()["large"];
        assert_eq!(
            (steps.to_bound, steps.to_ended, steps.to_finished),
            (2.0, 4.0, 3.0)
        );
        assert!(!r.jobs.contains_key("ns/other"));
    }

    #[test]
    fn usage_is_integrated_over_the_window_and_divided_by_nominal() {
        let mut r = Recorder::default();
        // Queue a (nominal 20) uses 20 for 10 s, then 0; queue b (nominal 20) uses 10 for 20 s.
        r.queue_seen("a", 20_000, 20_000, s(0.0));
        r.queue_seen("b", 20_000, 10_000, s(0.0));
        r.queue_seen("a", 20_000, 0, s(10.0));
        r.queue_seen("b", 20_000, 0, s(20.0));
        // (20 × 10 + 10 × 20) / 20 s window / 40 nominal = 0.5
        assert!(r.usage_share().is_some_and(|u| (u - 0.5).abs() < 1e-9));
        assert_eq!(r.queues["a"].max_usage_milli, 20_000);
    }

    #[test]
    fn no_share_before_a_window_exists() {
        let mut r = Recorder::default();
        assert_eq!(r.usage_share(), None);
        r.queue_seen("a", 20_000, 5_000, s(1.0));
        assert_eq!(r.usage_share(), None);
    }
}
