//! What a chaos run measured and found (`summary.json`), and whether it failed.

use std::collections::BTreeMap;

use serde::Serialize;

use super::autoscaler::AutoscalerStats;
use super::bad_input::BadInputStats;
use muster_testkit::checker::Violation;

/// Kills of replicas.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Kills {
    /// In all.
    pub total: u32,
    /// Of the replica holding the Lease.
    pub leader: u32,
    /// Of a standby.
    pub standby: u32,
    /// While a release was in flight (a gang's pods made but not all ungated).
    pub during_release: u32,
    /// While an eviction or restart was in flight (pods of a gang being deleted).
    pub during_eviction: u32,
    /// While a ProvisioningRequest waited for its answer.
    pub during_provisioning: u32,
    /// With none of those in flight.
    pub idle: u32,
}

/// Restarts of processes.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Restarts {
    /// Replica starts after a kill.
    pub replicas: u64,
    /// kube-apiserver restarts.
    pub api_server: u32,
    /// etcd restarts.
    pub etcd: u32,
}

/// What one run measured (`summary.json`).
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChaosSummary {
    /// The seed.
    pub seed: u64,
    /// Whether faults were on (off: the baseline).
    pub faults_on: bool,
    /// Controller replicas.
    pub replicas: usize,
    /// Jobs submitted.
    pub jobs: usize,
    /// Jobs ended, by phase (and reason for Failed).
    pub ends: BTreeMap<String, usize>,
    /// Jobs that had not ended when the run stopped.
    pub unended: usize,
    /// Replica kills.
    pub kills: Kills,
    /// Faults injected by the proxy, by kind.
    pub faults: BTreeMap<String, u64>,
    /// Requests the proxy forwarded.
    pub requests_forwarded: u64,
    /// Requests the proxy could not forward (the API server was down): answered 502.
    pub upstream_unreachable: u64,
    /// Restarts.
    pub restarts: Restarts,
    /// Nodes killed (each repaired after 20 s).
    pub node_deaths: u32,
    /// Nodes partitioned: NotReady (Ready `Unknown`) while their pods run on unseen, until
    /// healed.
    pub partitions: u32,
    /// How long the partitions lasted, in all, seconds.
    pub partition_seconds: f64,
    /// The autoscaler's work.
    pub autoscaler: AutoscalerStats,
    /// What the drawn objects came to.
    pub bad_input: BadInputStats,
    /// Violations by kind.
    pub violations: BTreeMap<String, usize>,
    /// Every violation, with its object and time.
    pub violation_list: Vec<Violation>,
    /// The checker's relists of pods and jobs (kind, seconds into the run), the watches'
    /// first lists included: a report is read against them.
    pub checker_relists: Vec<(String, f64)>,
    /// How long the checker was blind, seconds: from a watch's break to the end of the relist
    /// that followed, the watches' first lists included, over every watch (overlaps counted
    /// once). What changed meanwhile and changed back was never judged.
    pub checker_blind_seconds: f64,
    /// The same, per watch (`Pod`, `GpuJob`, `Node`).
    pub checker_blind_by_kind: BTreeMap<String, f64>,
    /// How long no replica led, seconds, from the start (before the first leader's first
    /// pass) to the end of the checks: from a leader's kill, exit or lost Lease to the next
    /// replica's first pass, as the replicas' logs and their processes' ends show. A
    /// half-released gang's bound counts only the rest. `None` when no log said a replica
    /// led: the bound then counted every second.
    pub leaderless_seconds: Option<f64>,
    /// Lines of the replicas' logs that report a panic.
    pub panics: usize,
    /// From the first submission to the last job's end, seconds.
    pub wall_seconds: f64,
    /// The same, for the same seed without faults (when run).
    pub baseline_wall_seconds: Option<f64>,
    /// The violations of the run without faults (when run): they fail the run as the
    /// faulted run's do.
    pub baseline_violations: Vec<Violation>,
    /// Lines of the replicas' logs reporting a panic in the run without faults.
    pub baseline_panics: usize,
    /// Jobs of the run without faults that had not ended when it stopped.
    pub baseline_unended: usize,
}

impl ChaosSummary {
    /// The faulted run's summary with what the run without faults (`baseline`, when run)
    /// found: its wall time, and every violation, panic and unended job, each of which fails
    /// the run as one of the faulted run's does.
    #[must_use]
    pub fn with_baseline(self, baseline: Option<&ChaosSummary>) -> ChaosSummary {
        let Some(baseline) = baseline else {
            return self;
        };
        ChaosSummary {
            baseline_wall_seconds: Some(baseline.wall_seconds),
            baseline_violations: baseline.violation_list.clone(),
            baseline_panics: baseline.panics,
            baseline_unended: baseline.unended,
            ..self
        }
    }

    /// Why the run failed, if it did: a violation, a panic in a replica or a job that never
    /// ended, in the faulted run or the run without faults.
    pub fn failures(&self) -> Option<String> {
        let mut found = Vec::new();
        let mut count = |what: &str, n: usize| {
            if n > 0 {
                found.push(format!("{n} {what}"));
            }
        };
        count("violations", self.violation_list.len());
        count("panics", self.panics);
        count("jobs never ended", self.unended);
        count("violations without faults", self.baseline_violations.len());
        count("panics without faults", self.baseline_panics);
        count("jobs never ended without faults", self.baseline_unended);
        (!found.is_empty()).then(|| found.join(", "))
    }

    /// One line for a person: wall time, what was done to the cluster, what was found.
    pub fn headline(&self) -> String {
        let faults: u64 = self.faults.values().sum();
        format!(
            "wall {:.0} s (without faults {}); {} kills, {} node deaths, {} partitions \
             ({:.0} s), {faults} proxy faults; {} violations ({} without faults), {} panics; \
             checker blind {:.1} s over {} relists",
            self.wall_seconds,
            self.baseline_wall_seconds
                .map_or_else(|| "not run".to_owned(), |w| format!("{w:.0} s")),
            self.kills.total,
            self.node_deaths,
            self.partitions,
            self.partition_seconds,
            self.violation_list.len(),
            self.baseline_violations.len(),
            self.panics + self.baseline_panics,
            self.checker_blind_seconds,
            self.checker_relists.len(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::ChaosSummary;
    use muster_testkit::checker::{Violation, ViolationKind};

    fn violation() -> Violation {
        Violation {
            kind: ViolationKind::TwoAttemptsLive,
            object: "GpuJob/ns/j".to_owned(),
            at_seconds: 1.0,
            detail: String::new(),
        }
    }

    #[test]
    fn a_violation_without_faults_fails_the_run_as_one_with_faults_does() {
        let clean = ChaosSummary::default();
        assert_eq!(clean.clone().with_baseline(Some(&clean)).failures(), None);
        let faulted = ChaosSummary {
            violation_list: vec![violation()],
            ..ChaosSummary::default()
        };
        assert!(faulted.failures().is_some());
        let baseline = ChaosSummary {
            violation_list: vec![violation()],
            wall_seconds: 12.0,
            ..ChaosSummary::default()
        };
        let combined = clean.with_baseline(Some(&baseline));
        assert_eq!(combined.baseline_wall_seconds, Some(12.0));
        assert_eq!(
            combined.failures().as_deref(),
            Some("1 violations without faults")
        );
    }

    #[test]
    fn panics_and_jobs_that_never_ended_fail_the_run() {
        let panicked = ChaosSummary {
            panics: 1,
            ..ChaosSummary::default()
        };
        assert!(panicked.failures().is_some());
        let unended = ChaosSummary {
            unended: 3,
            ..ChaosSummary::default()
        };
        assert_eq!(unended.failures().as_deref(), Some("3 jobs never ended"));
        let baseline = ChaosSummary {
            unended: 1,
            ..ChaosSummary::default()
        };
        assert!(
            ChaosSummary::default()
                .with_baseline(Some(&baseline))
                .failures()
                .is_some()
        );
    }
}
