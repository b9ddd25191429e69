//! The shape of Kueue's scheduler-performance baseline
//! (`test/performance/scheduler/configs/baseline/generator.yaml`), as data: cohorts of
//! ClusterQueues, and per queue sets of single-pod jobs created one every interval.

use std::time::Duration;

/// One class of jobs a queue receives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobSet {
    /// The class name (`small`, `medium`, `large`).
    pub class: &'static str,
    /// Jobs of this class per ClusterQueue.
    pub count: u32,
    /// Pause before each creation.
    pub interval: Duration,
    /// How long each job's pod runs.
    pub run_time: Duration,
    /// The job's priority.
    pub priority: i32,
    /// CPUs the pod requests.
    pub cpus: u32,
}

/// The whole workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Baseline {
    /// Cohorts.
    pub cohorts: u32,
    /// ClusterQueues per cohort.
    pub queues_per_cohort: u32,
    /// Each queue's nominal CPU quota.
    pub nominal_cpus: u32,
    /// Each queue's borrowing limit, CPUs.
    pub borrowing_limit_cpus: u32,
    /// The job classes every queue receives, their sets submitted concurrently.
    pub sets: Vec<JobSet>,
    /// Pods per job: 1 in Kueue's baseline; more makes each job a gang of that many pods
    /// sharing its CPUs evenly, so the quota and the work stay the same.
    pub pods_per_job: u32,
}

impl Baseline {
    /// Kueue's baseline: 5 cohorts × 6 queues of 20 CPUs (borrowing up to 100), each queue
    /// receiving 350 small, 100 medium and 50 large jobs — 15,000 jobs.
    pub fn kueue() -> Baseline {
        Baseline {
            cohorts: 5,
            queues_per_cohort: 6,
            nominal_cpus: 20,
            borrowing_limit_cpus: 100,
            sets: vec![
                JobSet {
                    class: "small",
                    count: 350,
                    interval: Duration::from_millis(100),
                    run_time: Duration::from_millis(200),
                    priority: 50,
                    cpus: 1,
                },
                JobSet {
                    class: "medium",
                    count: 100,
                    interval: Duration::from_millis(500),
                    run_time: Duration::from_millis(500),
                    priority: 100,
                    cpus: 5,
                },
                JobSet {
                    class: "large",
                    count: 50,
                    interval: Duration::from_millis(1200),
                    run_time: Duration::from_secs(1),
                    priority: 200,
                    cpus: 20,
                },
            ],
            pods_per_job: 1,
        }
    }

    /// The same workload with every job a gang of `pods` pods (at least 1) sharing its CPUs.
    #[must_use]
    pub fn in_gangs_of(mut self, pods: u32) -> Baseline {
        self.pods_per_job = pods.max(1);
        self
    }

    /// The same shape with every set's count scaled by `factor` (at least one job per set):
    /// a quick run of the same mechanics.
    #[must_use]
    pub fn scaled(mut self, factor: f64) -> Baseline {
        for set in &mut self.sets {
            #[expect(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "a positive count scaled by a small factor"
            )]
            let count = (f64::from(set.count) * factor).round().max(1.0) as u32;
            set.count = count;
        }
        self
    }

    /// Every ClusterQueue: (name, cohort), named as Kueue's generator names them.
    pub fn queues(&self) -> Vec<(String, String)> {
        (0..self.cohorts)
            .flat_map(|c| {
                (0..self.queues_per_cohort)
                    .map(move |q| (format!("cq-0-{q}-cohort-{c}"), format!("cohort-{c}")))
            })
            .collect()
    }

    /// Jobs in all.
    pub fn jobs(&self) -> u32 {
        let per_queue: u32 = self.sets.iter().map(|s| s.count).sum();
        per_queue * self.cohorts * self.queues_per_cohort
    }

    /// CPU-seconds of work in all.
    pub fn work_cpu_seconds(&self) -> f64 {
        let per_queue: f64 = self
            .sets
            .iter()
            .map(|s| f64::from(s.count) * f64::from(s.cpus) * s.run_time.as_secs_f64())
            .sum();
        per_queue * f64::from(self.cohorts * self.queues_per_cohort)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kueues_baseline_is_15000_jobs_on_30_queues() {
        let b = Baseline::kueue();
        assert_eq!(b.jobs(), 15_000);
        assert_eq!(b.queues().len(), 30);
        assert_eq!(b.queues()[7], ("cq-0-1-cohort-1".into(), "cohort-1".into()));
        // 350 × 1 × 0.2 + 100 × 5 × 0.5 + 50 × 20 × 1 = 1,320 CPU-s per queue; 600 CPUs of
        // quota do it in 66 s.
        assert!((b.work_cpu_seconds() / 600.0 - 66.0).abs() < 1e-9);
    }

    #[test]
    fn gangs_keep_the_jobs_and_the_work_and_have_at_least_one_pod() {
        let b = Baseline::kueue().in_gangs_of(4);
        assert_eq!((b.jobs(), b.pods_per_job), (15_000, 4));
        assert!((b.work_cpu_seconds() - Baseline::kueue().work_cpu_seconds()).abs() < 1e-9);
        assert_eq!(Baseline::kueue().in_gangs_of(0).pods_per_job, 1);
    }

    #[test]
    fn a_scaled_run_keeps_at_least_one_job_per_set() {
        let b = Baseline::kueue().scaled(0.001);
        assert_eq!(
            b.sets.iter().map(|s| s.count).collect::<Vec<_>>(),
            [1, 1, 1]
        );
        assert_eq!(Baseline::kueue().scaled(0.1).jobs(), 1_500);
    }
}
