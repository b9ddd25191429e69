//! Step 1 of a pass: every job settled against what the cluster shows, through its state
//! machine ([`crate::job::step`]), and gathered for admission's cycle: writes to make now,
//! jobs that queue, jobs that hold capacity, releases cut short to finish.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use muster_admission::{Admitted, Holding, Job};
use muster_api::gpujob::GpuJobPhase;

use crate::action::Action;
use crate::index::Index;
use crate::job::{self, InCycle};
use crate::ledger::{Busy, Ledger};
use crate::provision;
use crate::summary::Summary;

/// What settling every job found, before admission's cycle.
#[derive(Default)]
pub(crate) struct Settled {
    /// Writes to make, in order.
    pub(crate) actions: Vec<Action>,
    /// Jobs that get an action, and how they count while it is in flight.
    pub(crate) busy: Vec<(String, Busy)>,
    /// Jobs whose finalizer goes on.
    pub(crate) finalizing: Vec<String>,
    /// Jobs that queue.
    pub(crate) submit: Vec<Job>,
    /// Held jobs: (job, holding, provisioning).
    pub(crate) restore: Vec<(Job, Holding, bool)>,
    /// Jobs queued again on capacity bought for them, with the node selectors it needs.
    pub(crate) provisioned: BTreeMap<String, BTreeMap<String, String>>,
    /// Half-done releases to finish.
    pub(crate) releases: Vec<(String, Admitted)>,
}

/// Settles every job of `index` at `now`, counting what it finds in `summary`.
pub(crate) fn settle(index: &Index, ledger: &Ledger, now: &Time, summary: &mut Summary) -> Settled {
    let mut out = Settled::default();
    let now_s = now.0.as_second();
    for key in index.jobs.keys() {
        let Some(step) = job::step(index, ledger, key, now) else {
            continue;
        };
        let admission_job = || {
            let job = &index.jobs[key];
            Job::from_gpujob(job, |c| index.priority_classes.get(c).copied())
        };
        if step.add_finalizer {
            out.actions.push(Action::AddFinalizer { job: key.clone() });
            out.finalizing.push(key.clone());
        }
        if let Some(since) = step.ran_since {
            let job = admission_job();
            for action in &step.actions {
                account(action, &job, since, now_s, summary);
                if let Action::Evict { event, .. } = action {
                    *summary
                        .evicted
                        .entry(reason_key(&event.reason))
                        .or_default() += 1;
                }
            }
        }
        summary.to_running.extend(step.to_running);
        if let Some(busy) = step.busy {
            out.busy.push((key.clone(), busy));
        }
        out.actions.extend(step.actions);
        match step.in_cycle {
            InCycle::Out => {}
            InCycle::Queued => out.submit.push(admission_job()),
            InCycle::Holds {
                holding,
                provisioning,
            } => out.restore.push((admission_job(), holding, provisioning)),
            InCycle::OnBoughtCapacity {
                holding,
                node_selector,
            } => {
                out.restore.push((
                    provision::provisioned_job(admission_job(), &node_selector),
                    holding,
                    true,
                ));
                out.provisioned.insert(key.clone(), node_selector);
            }
            InCycle::FinishRelease(admitted) => out.releases.push((key.clone(), admitted)),
            InCycle::BackingOff { cluster_queue } => {
                *summary
                    .pending
                    .entry((cluster_queue, "Backoff".to_owned()))
                    .or_default() += 1;
            }
        }
    }
    out
}

/// Counts what a run that ends with `action` (an eviction, or the job's last status) cost
/// and delivered: GPU-seconds from its admission at `since` to `now`, lost or completed, and
/// for a finished job how often it was evicted.
pub(crate) fn account(action: &Action, job: &Job, since: i64, now: i64, summary: &mut Summary) {
    let gpu_seconds = job
        .accelerators()
        .saturating_mul(u64::try_from(now.saturating_sub(since)).unwrap_or(0));
    match action {
        Action::Evict { status, .. } => {
            if status.phase == Some(GpuJobPhase::Failed) {
                summary.finished_requeues.push(status.requeue_count);
            } else {
                summary.lost_gpu_seconds += gpu_seconds;
            }
        }
        Action::JobStatus { status, .. } if status.phase == Some(GpuJobPhase::Succeeded) => {
            summary.completed_gpu_seconds += gpu_seconds;
            summary.finished_requeues.push(status.requeue_count);
        }
        _ => {}
    }
}

/// The metric label of an eviction's Event reason.
pub(crate) fn reason_key(reason: &str) -> &'static str {
    match reason {
        "PodsReadyTimeout" => "pods_ready_timeout",
        "GangRestart" => "restart",
        "Preempted" => "preempted",
        "Suspended" => "suspended",
        "BackoffLimitExceeded" => "failed",
        "CapacityRevoked" => "capacity_revoked",
        _ => "other",
    }
}
