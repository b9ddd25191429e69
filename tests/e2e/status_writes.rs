//! How a job's status is written, on a real API server: whole (a field left out is removed)
//! and only onto the version of the job the write was decided on.

use kube::Api;
use muster_api::gpujob::{PendingReason, PendingReasonKind};
use muster_api::{GpuJob, GpuJobPhase, GpuJobStatus, ObjectRef};
use muster_controller::action::JobRead;
use muster_controller::executor::{ExecuteError, Executor};
use muster_controller::plan::Action;
use serde_json::json;
use tokio::sync::watch;

use crate::support::{Env, gpu_job, runs_for};

fn write(key: &ObjectRef, status: GpuJobStatus) -> Action {
    Action::JobStatus {
        job: key.clone(),
        status: Box::new(status),
        event: None,
    }
}

/// Writes `status` onto the version `read` of job `key`, and reads the job back: the status
/// as written.
async fn written(
    executor: &Executor,
    jobs: &Api<GpuJob>,
    key: &ObjectRef,
    status: &GpuJobStatus,
    read: &GpuJob,
) -> GpuJob {
    let outcome = executor
        .execute(&write(key, status.clone()), Some(&JobRead::of(read)))
        .await;
    assert!(outcome.is_ok(), "{outcome:?}");
    let Ok(job) = jobs.get(key.name()).await else {
        unreachable!("the job is there")
    };
    assert_eq!(job.status.as_ref(), Some(status));
    job
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_is_written_whole_and_never_over_a_version_it_was_not_decided_on() {
    let Some(env) = Env::start(false).await else {
        return;
    };
    // The queue's namespace; no controller runs, so nothing else writes the job.
    env.h100().await;
    env.queue("a", "team-a", 8, json!({})).await;
    env.submit(&gpu_job("team-a", "w", 1, 8, &runs_for(1000), json!({})))
        .await;
    let jobs = env.api::<GpuJob>("team-a");
    let Ok(first) = jobs.get("w").await else {
        unreachable!("the job was just created")
    };
    let key = ObjectRef::new("team-a", "w");
    let (_leading, leader) = watch::channel(true);
    let executor = Executor::new(env.client.clone(), leader, None);

    let queued = GpuJobStatus {
        phase: Some(GpuJobPhase::Queued),
        queue_position: Some(3),
        pending_reason: Some(PendingReason {
            kind: PendingReasonKind::QuotaShort,
            message: "quota short".into(),
            ..PendingReason::default()
        }),
        ..GpuJobStatus::default()
    };
    let second = written(&executor, &jobs, &key, &queued, &first).await;

    // A status without the position and the reason removes both.
    let bare = GpuJobStatus {
        phase: Some(GpuJobPhase::Queued),
        ..GpuJobStatus::default()
    };
    let third = written(&executor, &jobs, &key, &bare, &second).await;

    // Decided on the first version, whose status has moved on since: refused, not written.
    let stale = GpuJobStatus {
        phase: Some(GpuJobPhase::Failed),
        ..GpuJobStatus::default()
    };
    let refused = executor
        .execute(&write(&key, stale), Some(&JobRead::of(&first)))
        .await;
    assert!(
        matches!(refused, Err(ExecuteError::Superseded { .. })),
        "{refused:?}"
    );
    let Ok(last) = jobs.get("w").await else {
        unreachable!("the job is there")
    };
    assert_eq!(last.status.as_ref(), Some(&bare));
    assert_eq!(
        last.metadata.resource_version, third.metadata.resource_version,
        "nothing written"
    );
}
