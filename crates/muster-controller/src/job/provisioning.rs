//! The provisioning part of a job's life: it holds quota while the autoscaler provisions a
//! block of capacity for it (see [`crate::provision`] for the requests themselves), then is
//! released onto that capacity — or retries, fails, or gives the capacity up.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use muster_api::gpujob::GpuJobStatus;
use muster_api::{GpuJob, ObjectRef};
use muster_provisioning::state::Next;

use super::{InCycle, Phase, Reading, Step, cut_off, unprovision};
use crate::action::{Action, Note};
use crate::holding::Pods;
use crate::index::Index;
use crate::ledger::Busy;
use crate::provision;
use crate::status;

/// The step of a job whose status says it is provisioning (an admission without nodes and a
/// request), with its pods of the current attempt (`current`, of which `live` are not being
/// deleted).
pub(super) fn step(reading: &Reading<'_>, live: &Pods<'_>) -> Step {
    let Reading {
        index,
        ledger,
        key,
        job,
        status,
        current,
        now,
        ..
    } = *reading;
    let now_s = now.0.as_second();
    let held = provision::holding(status, now_s);
    if !live.is_empty() {
        // A release onto bought capacity was cut off or failed: finish it when the whole gang
        // exists, else roll it back and admit again; the quota stays held meanwhile.
        let step = cut_off(job, key, current, live, Step::new(Phase::Releasing));
        if matches!(step.in_cycle, InCycle::FinishRelease(_)) {
            return step;
        }
        return step.holds_maybe(held, true);
    }
    if !current.is_empty() {
        // The rolled-back pods are still terminating: the next release reuses their names, so
        // it waits for them (holding the quota).
        return Step::new(Phase::Provisioning).holds_maybe(held, true);
    }
    // After a failed release only the admission waits out its backoff; everything else the
    // autoscaler or the owner says still counts.
    let backing_off = ledger.backing_off(key, now_s);
    follow(index, key, job, status, now, backing_off)
}

/// A job waiting for bought capacity: follow the autoscaler.
fn follow(
    index: &Index,
    key: &ObjectRef,
    job: &GpuJob,
    status: &GpuJobStatus,
    now: &Time,
    backing_off: bool,
) -> Step {
    let now_s = now.0.as_second();
    let generation = job.metadata.generation;
    let held = provision::holding(status, now_s);
    let step = Step::new(Phase::Provisioning);
    let Some(policy) = provision::policy(index, status) else {
        // The job's ClusterQueue no longer buys capacity (or is gone): give the request up
        // and queue the job again.
        let next = status::unprovisioned(
            status,
            "ProvisioningStopped",
            "the ClusterQueue no longer buys capacity",
            generation,
            now,
        );
        return step.act(unprovision(job, status)).act(Action::JobStatus {
            job: key.to_owned(),
            status: Box::new(next),
            event: Some(Note::normal(
                "ProvisioningStopped",
                "the job's ClusterQueue no longer buys capacity: the request was given up and the job queues again",
            )),
        });
    };
    let next = if index.provisioning_api() {
        provision::next(index, job, status, policy, now_s)
    } else {
        // Requests cannot be read: nothing is known of this one, so nothing is given up.
        Next::Wait {
            message: "the ProvisioningRequest API (autoscaling.x-k8s.io/v1) is not being watched yet; the request is followed once it is".to_owned(),
        }
    };
    match next {
        Next::Wait { message } => {
            let step = step.holds_maybe(held.clone(), true);
            let next = provision::waiting(status, &message);
            if next == *status {
                return step;
            }
            let mut step = step.act(Action::JobStatus {
                job: key.to_owned(),
                status: Box::new(next),
                event: None,
            });
            // The write keeps the job provisioning: it holds its quota meanwhile.
            if let Some(held) = held {
                step.busy = Some(Busy::Provision(held));
            }
            step
        }
        Next::Admit { .. } if backing_off => step.holds_maybe(held, true),
        Next::Admit { node_selector } => match held {
            // Still holding its quota, the job starts on the capacity before anything else.
            Some(holding) => step.with(InCycle::OnBoughtCapacity {
                holding,
                node_selector,
            }),
            None => step,
        },
        Next::Retry { at, reason } => step.act(unprovision(job, status)).act(Action::JobStatus {
            job: key.to_owned(),
            status: Box::new(provision::retrying(status, &reason, at, now, generation)),
            event: Some(Note::warning("ProvisioningRetry", reason)),
        }),
        Next::Fail { reason } => step.act(unprovision(job, status)).act(Action::JobStatus {
            job: key.to_owned(),
            status: Box::new(status::finished(status, generation, false, &reason, now)),
            event: Some(Note::warning("ProvisioningFailed", reason)),
        }),
        Next::Delete | Next::Revoked { .. } | Next::Nothing | Next::Create { .. } => {
            // Suspended (or nothing left to wait for): give the capacity up, queue again.
            let next = status::unprovisioned(
                status,
                "ProvisioningStopped",
                "the job no longer waits for bought capacity",
                generation,
                now,
            );
            step.act(unprovision(job, status)).act(Action::JobStatus {
                job: key.to_owned(),
                status: Box::new(next),
                event: None,
            })
        }
    }
}
