//! Step 1 of a pass: the jobs whose inputs changed settled against what the cluster shows,
//! through their state machine ([`crate::job::step`]), and kept as their seats (see
//! [`crate::seats`]): writes to make now, jobs that queue, jobs that hold capacity, releases
//! cut short to finish.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use muster_admission::{Admitted, Job};
use muster_api::ObjectRef;
use muster_api::gpujob::GpuJobPhase;

use crate::action::Action;
use crate::index::Index;
use crate::job::{self, InCycle};
use crate::ledger::{Busy, Ledger};
use crate::provision;
use crate::seats::{Seat, Seats};
use crate::summary::Summary;

/// What settling the due jobs found, before admission's cycle.
#[derive(Default)]
pub(crate) struct Settled {
    /// Writes to make, in order.
    pub(crate) actions: Vec<Action>,
    /// Jobs that get an action, and how they count while it is in flight.
    pub(crate) busy: Vec<(ObjectRef, Busy)>,
    /// Jobs whose finalizer goes on.
    pub(crate) finalizing: Vec<ObjectRef>,
    /// Jobs queued again on capacity bought for them, with the node selectors it needs.
    pub(crate) provisioned: BTreeMap<ObjectRef, BTreeMap<String, String>>,
    /// Half-done releases to finish.
    pub(crate) releases: Vec<(ObjectRef, Admitted)>,
    /// Jobs whose seat changed as admission sees it (queued, holding, or gone from the
    /// cycle).
    pub(crate) changes: Vec<ObjectRef>,
    /// How many jobs were settled.
    pub(crate) count: usize,
}

/// Settles the jobs in `due` at `now` into `seats`, counting what it finds in `summary`;
/// jobs in `recheck` count as changed whether or not their seats did.
pub(crate) fn settle(
    index: &Index,
    ledger: &Ledger,
    seats: &mut Seats,
    due: &BTreeSet<ObjectRef>,
    recheck: &BTreeSet<ObjectRef>,
    now: &Time,
    summary: &mut Summary,
) -> Settled {
    let mut out = Settled {
        count: due.len(),
        ..Settled::default()
    };
    let now_s = now.0.as_second();
    for key in due {
        let (Some(step), Some(gpujob)) = (job::step(index, ledger, key, now), index.jobs.get(key))
        else {
            if seats.put(key, None, None) || recheck.contains(key) {
                out.changes.push(key.clone());
            }
            continue;
        };
        // Validating and reading a GpuJob is most of what settling it costs; a job settled
        // again at the same generation (its status moved) reads as it did.
        let read_before = seats
            .get(key)
            .and_then(|seat| seat.read_of(gpujob))
            .cloned();
        let admission_job = || {
            read_before
                .clone()
                .unwrap_or_else(|| index.admission_job(key.as_str(), gpujob))
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
        let job = match &step.in_cycle {
            InCycle::Queued | InCycle::Holds { .. } => Some(admission_job()),
            InCycle::OnBoughtCapacity { node_selector, .. } => {
                out.provisioned.insert(key.clone(), node_selector.clone());
                Some(Arc::new(provision::provisioned_job(
                    Arc::unwrap_or_clone(admission_job()),
                    node_selector,
                )))
            }
            InCycle::FinishRelease(admitted) => {
                // The pass holds it once the release is under way.
                out.releases.push((key.clone(), admitted.clone()));
                None
            }
            InCycle::Out | InCycle::BackingOff { .. } => None,
        };
        let in_cycle = match step.in_cycle {
            InCycle::FinishRelease(_) => InCycle::Out,
            // A release in flight holds from its admission, as its status will say once it
            // lands (and as the scheduler that admitted it counts it), not from this pass:
            // a scheduler built afresh must see the same release timeline and the same
            // most recent admissions as the one kept.
            InCycle::Holds {
                mut holding,
                provisioning,
                leaving,
            } => {
                if let Some(at) = ledger.releasing_since(key) {
                    holding.since = Some(at);
                }
                InCycle::Holds {
                    holding,
                    provisioning,
                    leaving,
                }
            }
            other => other,
        };
        let attempt = gpujob.status.as_ref().map_or(0, |s| s.requeue_count);
        let read_at = match in_cycle {
            InCycle::Queued | InCycle::Holds { .. } => gpujob.metadata.generation,
            _ => None,
        };
        let seat = Seat {
            in_cycle,
            job,
            read_at,
            attempt,
        };
        if seats.put(key, Some(seat), step.until) || recheck.contains(key) {
            out.changes.push(key.clone());
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

#[cfg(test)]
mod tests {
    use crate::job::tests::{KEY, NOW, World, key, time};
    /// An ended job is kept without its pod templates (`index::ended`); while its gang still runs
    /// it holds what its pods ask for, read from the job as it arrived whole.
    #[test]
    fn a_failed_job_whose_gang_runs_on_holds_its_whole_gangs_quota() {
        let mut world = World::new().admitted().running().finished(false);
        world.index.apply(world.job.clone());
        for pod in world.pods.drain(..) {
            world.index.apply(pod);
        }
        let kept = world.index.job(KEY).cloned().unwrap_or_default();
        assert!(kept.spec.pod_sets[0].template.spec.is_none());
        let mut seats = crate::seats::Seats::default();
        let due = std::collections::BTreeSet::from([key()]);
        let mut summary = crate::summary::Summary::default();
        let settled = super::settle(
            &world.index,
            &world.ledger,
            &mut seats,
            &due,
            &std::collections::BTreeSet::new(),
            &time(NOW),
            &mut summary,
        );
        assert_eq!(settled.actions.len(), 1, "its pods are deleted");
        let seat = seats.get(KEY).unwrap_or_else(|| unreachable!("a seat"));
        assert!(matches!(seat.in_cycle, crate::job::InCycle::Holds { .. }));
        let held = seat.job.as_ref().unwrap_or_else(|| unreachable!("its job"));
        assert_eq!(held.pod_sets[0].count, 2);
        assert_eq!(held.total_requests().get("nvidia.com/gpu").milli(), 16_000);
        assert!(held.invalid.is_none());
    }
}
