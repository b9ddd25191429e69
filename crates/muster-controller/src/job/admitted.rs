//! The admitted part of a job's life: its status holds an admission, and its gang's health —
//! Running, Succeeded, Starting, timed out, broken — or a revocation of its bought capacity,
//! or its suspension decides the next step.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use muster_admission::Holding;
use muster_api::gpujob::GpuJobStatus;
use muster_api::{GpuJob, ObjectRef};

use super::{InCycle, Phase, Reading, Step, entry, unprovision};
use crate::action::{Action, Note};
use crate::holding::{Pods, seconds, unfinished_release};
use crate::index::Index;
use crate::lifecycle::{Health, health, requeue_at};
use crate::provision;
use crate::status::{self, Eviction};

/// An admitted job (its status holds an admission): its gang's health decides.
#[allow(clippy::too_many_lines)]
pub(super) fn step(reading: &Reading<'_>, held: Holding, live: &Pods<'_>) -> Step {
    let Reading {
        index,
        key,
        job,
        status,
        current,
        now,
        workload,
        ..
    } = *reading;
    let now_s = now.0.as_second();
    let generation = job.metadata.generation;
    let is_entry = crate::workload::workload_of(job).is_some();
    // Places of a JobSet that an earlier attempt completed: they get no pod.
    let done = entry::completed_before(index, key, workload, status.requeue_count);
    if is_entry
        && let Some(pins) = entry::pins(
            index,
            key,
            job,
            workload,
            &held,
            status.requeue_count,
            &done,
        )
    {
        // The Job controller has made the whole gang behind the gate: let it go, holding the
        // admission meanwhile.
        return Step::new(Phase::Releasing)
            .act(Action::PinPods {
                job: key.clone(),
                pins,
            })
            .holds(held, false);
    }
    if let Some(admitted) = unfinished_release(job, key, &held, current) {
        // The status says admitted, yet gated pods remain and nothing is in flight: a release
        // that another writer cut short (a replica that lost the Lease, a pod deleted under
        // it). Finish it now rather than let the gang wait out its pods-ready timeout or spend
        // a restart.
        return Step::new(Phase::Releasing).with(InCycle::FinishRelease(admitted));
    }
    let expected = held
        .pod_sets
        .iter()
        .map(|p| p.nodes.len())
        .sum::<usize>()
        .saturating_sub(done.len());
    let timeout = job
        .spec
        .pods_ready_timeout_seconds
        .unwrap_or(muster_api::gpujob::DEFAULT_PODS_READY_TIMEOUT_SECONDS);
    let placed: Vec<String> = held
        .pod_sets
        .iter()
        .flat_map(|p| p.nodes.iter().cloned())
        .collect();
    // An admission time that is unknown starts no pods-ready timeout: a gang that never
    // became Ready is still restarted when a pod fails or loses its node.
    let since = held.since.unwrap_or(now_s);
    // A pod group's failed pod is not made again by anyone: it does not break the gang, whose
    // run ends once every pod has (`entry::finished`).
    let group = crate::workload::workload_of(job)
        .is_some_and(|w| w.kind == crate::workload::WorkloadKind::PodGroup);
    let survivors: Pods<'_>;
    let (judged, expected) = if group {
        survivors = current
            .iter()
            .copied()
            .filter(|(_, p)| p.phase != crate::index::PodPhase::Failed)
            .collect();
        let failed = current.len() - survivors.len();
        (&survivors, expected.saturating_sub(failed))
    } else {
        (current, expected)
    };
    let gang_health = if is_entry && judged.len() < expected {
        // The Job controller is still making the entry's pods: missing ones are not lost.
        let deadline = since.saturating_add(timeout);
        if now_s >= deadline {
            Health::TimedOut
        } else {
            Health::Starting { deadline }
        }
    } else {
        health(expected, &placed, judged, index, since, timeout, now_s)
    };
    let all_pods: Vec<ObjectRef> = current.iter().map(|(k, _)| (*k).clone()).collect();
    let evict = |eviction: Eviction| {
        let note = if matches!(eviction, Eviction::Suspended) {
            Note::normal(eviction.reason(), eviction.message())
        } else {
            Note::warning(eviction.reason(), eviction.message())
        };
        entry::evict(
            job,
            key,
            status::evicted(status, generation, &eviction, now),
            all_pods.clone(),
            note,
        )
    };
    let mut deadline = match gang_health {
        Health::Starting { deadline } => Some(deadline),
        _ => None,
    };
    // An admission whose Job still looks unreleased is given back once the release has had
    // time to show (see `entry::release_missing`); until then the pass wakes for it.
    let unreleased = is_entry && entry::release_missing(workload, &held, status.requeue_count);
    let release_due = since.saturating_add(entry::RELEASE_LANDS_WITHIN_SECONDS);
    if unreleased && now_s < release_due {
        deadline = Some(deadline.map_or(release_due, |d| d.min(release_due)));
    }
    // When every pod of the gang was Ready, as their Ready conditions say.
    let ready_at = if live.iter().all(|(_, p)| p.ready_since.is_some()) {
        live.iter().filter_map(|(_, p)| p.ready_since).max()
    } else {
        None
    };
    let phase = match gang_health {
        Health::Running => Phase::Running,
        Health::Succeeded => Phase::Finishing,
        Health::Broken { .. } => Phase::Restarting,
        Health::Starting { .. } | Health::TimedOut => Phase::Releasing,
    };
    let (phase, action) = if let Some((policy, message)) = revoked(index, job, status) {
        // Requeued like a failed request: after the provisioning backoff, and only while the
        // job's requests stay within retry.limit + 1 (a gang longer than the capacity's
        // maximum run does not buy capacity for ever).
        use muster_provisioning::state::{out_of_requests, retry_limit};
        let attempts = provision::attempts(status);
        let limit = retry_limit(policy.retry.as_ref());
        let fail = policy.on_capacity_revoked == muster_api::cluster_queue::RevokedPolicy::Fail;
        let action = if fail || out_of_requests(policy.retry.as_ref(), attempts) {
            let why = if fail {
                format!("the autoscaler took the capacity back: {message}")
            } else {
                format!(
                    "the autoscaler took the capacity back: {message}; gave up after {attempts} requests (retry.limit is {limit})"
                )
            };
            entry::evict(
                job,
                key,
                status::finished(status, generation, false, &why, now),
                all_pods.clone(),
                Note::warning("CapacityRevoked", why),
            )
        } else {
            let retry_at = now_s.saturating_add(muster_provisioning::state::backoff(
                policy.retry.as_ref(),
                attempts,
            ));
            evict(Eviction::CapacityRevoked { message, retry_at })
        };
        (Phase::Evicting, Some(action))
    } else if unreleased && now_s >= release_due {
        // Its status was written, its Job's release was not: the quota goes back at once
        // rather than after the pods-ready timeout, and the job queues again.
        let why = "the admission was recorded but its Job was never released (the patch that unsuspends it did not land); the job queues again".to_owned();
        (Phase::Evicting, Some(evict(Eviction::Other(why))))
    } else if job.spec.suspend {
        (Phase::Evicting, Some(evict(Eviction::Suspended)))
    } else {
        let action = match gang_health {
            // An entry's workload says when it is done (its pods may come and go until
            // then), but for a Job that has succeeded once its pod has.
            Health::Succeeded if is_entry && !entry::succeeds_with_its_pods(workload) => None,
            Health::Succeeded => {
                let message = if is_entry {
                    "the Job's one pod succeeded"
                } else {
                    "every pod succeeded"
                };
                Some(Action::JobStatus {
                    job: key.to_owned(),
                    status: Box::new(status::finished(status, generation, true, message, now)),
                    event: Some(Note::normal("Succeeded", message)),
                })
            }
            Health::TimedOut => Some(evict(Eviction::PodsReadyTimeout {
                retry_at: requeue_at(now_s, status.requeue_count),
            })),
            Health::Broken { cause } => {
                let limit = job
                    .spec
                    .backoff_limit
                    .unwrap_or(muster_api::gpujob::DEFAULT_BACKOFF_LIMIT);
                if status.restart_count >= limit {
                    let message = format!(
                        "{cause}; the gang was restarted {} times and spec.backoffLimit is {limit}",
                        status.restart_count
                    );
                    Some(entry::evict(
                        job,
                        key,
                        status::finished(status, generation, false, &message, now),
                        live.iter().map(|(k, _)| (*k).clone()).collect(),
                        Note::warning("BackoffLimitExceeded", message),
                    ))
                } else {
                    Some(evict(Eviction::Restart { cause }))
                }
            }
            Health::Running => {
                // A gang's Running status is written once it has run a while (see
                // [`status::RUNNING_STATUS_AFTER_SECONDS`]): one that ends sooner goes
                // straight to its end. The PodsReady condition says when the gang was Ready.
                let due = ready_at.map(|t| t.saturating_add(status::RUNNING_STATUS_AFTER_SECONDS));
                let since = ready_at.map_or_else(
                    || now.clone(),
                    |t| Time(k8s_openapi::jiff::Timestamp::from_second(t).unwrap_or(now.0)),
                );
                if let Some(due) = due.filter(|d| *d > now_s && status.start_time.is_none()) {
                    deadline = Some(due);
                    None
                } else {
                    status::running(status, generation, &since).map(|s| Action::JobStatus {
                        job: key.to_owned(),
                        status: Box::new(s),
                        event: Some(Note::normal("PodsReady", "every pod of the gang is Ready")),
                    })
                }
            }
            Health::Starting { .. } => None,
        };
        (phase, action)
    };
    let mut step = Step::new(phase);
    let Some(action) = action else {
        step.until = deadline;
        return step.holds(held, false);
    };
    let mut step = Step {
        ran_since: held.since,
        ..step
    };
    // A Running update keeps the admission; everything else gives it up.
    let keeps = matches!(&action, Action::JobStatus { status, .. } if status.admission.is_some());
    if step.phase == Phase::Running && keeps && status.start_time.is_none() {
        let created = job
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(now_s, seconds);
        step.to_running = Some(ready_at.unwrap_or(now_s).min(now_s) - created);
    }
    // A gang all of whose pods succeeded leaves nothing on its nodes: its end frees its
    // quota in this pass (see `Busy::Ending`).
    let ends = step.phase == Phase::Finishing
        && matches!(&action, Action::JobStatus { status, .. }
            if status.phase == Some(muster_api::GpuJobPhase::Succeeded));
    let step = if ends {
        step.end(action)
    } else {
        step.act(action)
    };
    if keeps {
        step.holds(held, false)
    } else if status.provisioning_request.is_some() {
        // The gang leaves its bought capacity: give the requests back.
        step.act(unprovision(job, status))
    } else {
        step
    }
}

/// The capacity a gang runs on was taken back by the autoscaler: its queue's policy and what
/// the autoscaler said.
fn revoked<'a>(
    index: &'a Index,
    job: &GpuJob,
    status: &GpuJobStatus,
) -> Option<(&'a muster_api::cluster_queue::ProvisioningPolicy, String)> {
    let policy =
        provision::policy(index, status).filter(|_| status.provisioning_request.is_some())?;
    match provision::observed(index, job, policy, provision::attempts(status)) {
        muster_provisioning::state::Observed::CapacityRevoked { message } => {
            Some((policy, message))
        }
        _ => None,
    }
}
