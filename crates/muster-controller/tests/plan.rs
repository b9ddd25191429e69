//! The controller's passes against an index fed like the watches feed it: admissions release
//! whole gangs once, the lifecycle evicts, restarts and finishes gangs, and a controller that
//! restarts mid-release finishes or rolls back what it found.

mod support;

use k8s_openapi::api::core::v1::Pod;
use muster_api::gpujob::{GpuJobPhase, PendingReasonKind};
use muster_api::wire::{ADMISSION_GATE, ATTEMPT_LABEL};
use muster_controller::plan::{Action, plan};
use muster_controller::state::State;
use support::{at, cluster, cluster_queue, job, land_all, with_phase};

fn releases(actions: &[Action]) -> Vec<&Action> {
    actions
        .iter()
        .filter(|a| matches!(a, Action::Release { .. }))
        .collect()
}

/// The status writes and releases among the actions, in order, each as its kind and job.
fn statuses_and_releases(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .filter(|a| matches!(a, Action::Release { .. } | Action::JobStatus { .. }))
        .map(|a| format!("{} {}", a.kind(), a.job().map_or("", |j| j.as_str())))
        .collect()
}

/// The jobs whose status the actions write.
fn statuses_written(actions: &[Action]) -> Vec<&str> {
    actions
        .iter()
        .filter(|a| a.kind() == "job_status")
        .filter_map(|a| a.job().map(muster_api::ObjectRef::as_str))
        .collect()
}

/// The gang a controller releases for job `a` (2 pods) alone on a cluster with `gpus` of
/// quota: what a restarted controller finds half done.
fn released_gang(gpus: u32) -> muster_controller::release::Gang {
    let mut first = cluster(gpus, vec![job("a", 2, 0)]);
    let pass = plan(&mut first, at(10));
    match releases(&pass.actions).first() {
        Some(Action::Release { gang, .. }) => (**gang).clone(),
        _ => unreachable!("a is released: {:?}", pass.actions),
    }
}

fn job_actions<'a>(actions: &'a [Action], key: &str) -> Vec<&'a Action> {
    actions
        .iter()
        .filter(|a| a.job().map(muster_api::ObjectRef::as_str) == Some(key))
        .collect()
}

fn status_of(index: &State, key: &str) -> muster_api::GpuJobStatus {
    index
        .index()
        .job(key)
        .and_then(|j| j.status.clone())
        .unwrap_or_default()
}

/// Sets every current pod of `key` to `phase`/`ready`, as the kubelet would report.
fn report(index: &mut State, released: &Action, phase: &str, ready: bool) {
    let Action::Release { gang, .. } = released else {
        unreachable!("not a release")
    };
    for pod in &gang.pods {
        index.apply(with_phase(pod.clone(), phase, ready));
    }
}

#[test]
fn an_admission_releases_a_whole_gang_once_and_is_booked_while_in_flight() {
    let mut index = cluster(48, vec![job("a", 2, 0), job("b", 2, 1), job("c", 2, 2)]);
    let pass = plan(&mut index, at(10));
    let released = releases(&pass.actions);
    assert_eq!(released.len(), 2, "{:#?}", pass.actions);
    let mut nodes = Vec::new();
    for action in released {
        let Action::Release { gang, status, .. } = action else {
            unreachable!()
        };
        assert_eq!(gang.pods.len(), 2);
        for pod in &gang.pods {
            let spec = pod.spec.clone().unwrap_or_default();
            assert_eq!(
                spec.scheduling_gates.unwrap_or_default()[0].name,
                ADMISSION_GATE
            );
            nodes.push(
                spec.node_selector
                    .unwrap_or_default()
                    .get("kubernetes.io/hostname")
                    .cloned()
                    .unwrap_or_default(),
            );
        }
        assert_eq!(status.phase, Some(GpuJobPhase::Admitted));
    }
    nodes.sort();
    assert_eq!(nodes, ["n1", "n2", "n3", "n4"], "no node is promised twice");
    // c waits; a and b are in flight. A pass now must not release them again.
    let again = plan(&mut index, at(11));
    assert!(releases(&again.actions).is_empty(), "{:#?}", again.actions);
    // Once the writes land, nothing changes: nothing is written.
    land_all(&mut index, &pass.actions, 11);
    land_all(&mut index, &again.actions, 11);
    let settled = plan(&mut index, at(12));
    land_all(&mut index, &settled.actions, 12);
    let quiet = plan(&mut index, at(13));
    assert!(quiet.actions.is_empty(), "{:#?}", quiet.actions);
    let c = status_of(&index, "team-a/c");
    assert_eq!(
        c.pending_reason.clone().map(|r| r.kind),
        Some(PendingReasonKind::NoTopologyFit),
        "{c:#?}"
    );
}

#[test]
fn a_gang_runs_when_every_pod_is_ready_and_succeeds_together() {
    let mut index = cluster(16, vec![job("a", 2, 0), job("b", 2, 1)]);
    let pass = plan(&mut index, at(10));
    land_all(&mut index, &pass.actions, 10);
    let released = releases(&pass.actions)[0].clone();
    report(&mut index, &released, "Running", true);
    let pass = plan(&mut index, at(20));
    let status = status_of(&index, "team-a/a");
    assert_eq!(status.phase, Some(GpuJobPhase::Admitted));
    assert_eq!(pass.summary.to_running, vec![20]);
    land_all(&mut index, &pass.actions, 20);
    assert_eq!(
        status_of(&index, "team-a/a").phase,
        Some(GpuJobPhase::Running)
    );
    report(&mut index, &released, "Succeeded", false);
    let pass = plan(&mut index, at(30));
    // Every pod of a has ended: its quota is free in the pass that writes its end, and b is
    // released into it in that pass, after a's end (the shell sends a release only once the
    // ends in flight when its pass ran have landed: see `run.rs`'s
    // `a_release_into_quota_an_end_frees_goes_out_only_once_the_end_has_landed`).
    assert_eq!(
        statuses_and_releases(&pass.actions),
        ["job_status team-a/a", "release team-a/b"],
        "{:#?}",
        pass.actions
    );
    assert!(
        releases(&plan(&mut index, at(30)).actions).is_empty(),
        "nothing more while the writes are in flight"
    );
    land_all(&mut index, &pass.actions, 30);
    let a = status_of(&index, "team-a/a");
    assert_eq!(a.phase, Some(GpuJobPhase::Succeeded));
    assert!(a.admission.is_none() && a.completion_time.is_some());
    assert_eq!(
        status_of(&index, "team-a/b").phase,
        Some(GpuJobPhase::Admitted)
    );
}

/// An eviction gives its quota up only once it has landed: its gang's pods may still run.
#[test]
fn an_eviction_in_flight_keeps_its_quota_held() {
    let mut index = cluster(16, vec![job("a", 2, 0), job("b", 2, 1)]);
    let pass = plan(&mut index, at(10));
    land_all(&mut index, &pass.actions, 10);
    let released = releases(&pass.actions)[0].clone();
    report(&mut index, &released, "Running", true);
    let running = plan(&mut index, at(20));
    land_all(&mut index, &running.actions, 20);
    let mut suspended = index.index().job("team-a/a").cloned().unwrap_or_default();
    suspended.spec.suspend = true;
    suspended.metadata.resource_version = Some("100".into());
    index.apply(suspended);
    let evicting = plan(&mut index, at(30));
    assert!(
        evicting
            .actions
            .iter()
            .any(|a| matches!(a, Action::Evict { .. })),
        "{:#?}",
        evicting.actions
    );
    assert!(
        releases(&evicting.actions).is_empty(),
        "not in the pass that evicts"
    );
    assert!(
        releases(&plan(&mut index, at(31)).actions).is_empty(),
        "nor while the eviction is in flight"
    );
}

/// A finish whose status write was lost (the leader that sent it died, or it failed): the
/// job still shows admitted, so a new leader writes its end again before any release into its
/// quota.
#[test]
fn a_finish_that_did_not_land_is_written_again_before_a_release_into_its_quota() {
    let mut index = cluster(16, vec![job("a", 2, 0), job("b", 2, 1)]);
    let pass = plan(&mut index, at(10));
    land_all(&mut index, &pass.actions, 10);
    let released = releases(&pass.actions)[0].clone();
    report(&mut index, &released, "Succeeded", false);
    let finish = plan(&mut index, at(20));
    assert!(
        matches!(
            job_actions(&finish.actions, "team-a/a").as_slice(),
            [Action::JobStatus { .. }]
        ),
        "{:#?}",
        finish.actions
    );
    // A new leader, from what the API server holds: a admitted, its pods ended.
    let mut restarted = cluster(
        16,
        vec![
            index.index().job("team-a/a").cloned().unwrap_or_default(),
            job("b", 2, 1),
        ],
    );
    let Action::Release { gang, .. } = &released else {
        unreachable!()
    };
    for pod in &gang.pods {
        restarted.apply(with_phase(pod.clone(), "Succeeded", false));
    }
    // Its pods have all ended, so the new leader writes a's end again and releases b after
    // it in the same pass (sent only once the end has landed).
    let again = plan(&mut restarted, at(40));
    assert_eq!(
        statuses_and_releases(&again.actions),
        ["job_status team-a/a", "release team-a/b"],
        "{:#?}",
        again.actions
    );
}

#[test]
fn pods_not_ready_in_time_evict_the_gang_and_requeue_it_with_backoff() {
    let mut index = cluster(32, vec![job("a", 2, 0)]);
    let pass = plan(&mut index, at(10));
    land_all(&mut index, &pass.actions, 10);
    let released = releases(&pass.actions)[0].clone();
    report(&mut index, &released, "Pending", false);
    assert!(job_actions(&plan(&mut index, at(300)).actions, "team-a/a").is_empty());
    let pass = plan(&mut index, at(311));
    let evictions: Vec<_> = pass
        .actions
        .iter()
        .filter(|a| matches!(a, Action::Evict { .. }))
        .collect();
    assert_eq!(evictions.len(), 1, "{:#?}", pass.actions);
    let Action::Evict { status, pods, .. } = evictions[0] else {
        unreachable!()
    };
    assert_eq!(pods.len(), 2);
    assert_eq!(status.requeue_count, 1);
    assert!(status.admission.is_none());
    let reason = status.pending_reason.clone().unwrap_or_default();
    assert_eq!(reason.kind, PendingReasonKind::Backoff);
    assert_eq!(reason.eta.map(|t| t.0), Some(at(311 + 30)));
    land_all(&mut index, &pass.actions, 311);
    let waiting = plan(&mut index, at(320));
    assert!(releases(&waiting.actions).is_empty());
    assert_eq!(
        waiting
            .summary
            .pending
            .get(&("research".to_owned(), "Backoff".to_owned())),
        Some(&1),
        "counted under its ClusterQueue: {:?}",
        waiting.summary.pending
    );
    let pass = plan(&mut index, at(342));
    let released = releases(&pass.actions);
    assert_eq!(released.len(), 1);
    let Action::Release { gang, .. } = released[0] else {
        unreachable!()
    };
    let labels = gang.pods[0].metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get(ATTEMPT_LABEL).map(String::as_str), Some("1"));
}

#[test]
fn evicted_and_finished_runs_are_counted_in_gpu_seconds() {
    // Two gangs of 2 pods × 8 GPUs, both admitted at 10.
    let mut index = cluster(32, vec![job("a", 2, 0), job("b", 2, 1)]);
    let pass = plan(&mut index, at(10));
    land_all(&mut index, &pass.actions, 10);
    let released = releases(&pass.actions);
    assert_eq!(released.len(), 2);
    let (a, b) = (released[0].clone(), released[1].clone());
    report(&mut index, &a, "Running", true);
    report(&mut index, &b, "Pending", false);
    let pass = plan(&mut index, at(20));
    land_all(&mut index, &pass.actions, 20);
    report(&mut index, &a, "Succeeded", false);
    let pass = plan(&mut index, at(70));
    assert_eq!(
        pass.summary.completed_gpu_seconds,
        16 * 60,
        "a: 16 GPUs, 10 to 70"
    );
    assert_eq!(pass.summary.finished_requeues, vec![0]);
    assert_eq!(pass.summary.lost_gpu_seconds, 0);
    land_all(&mut index, &pass.actions, 70);
    // b's pods never become Ready: evicted at 311, its run thrown away.
    let pass = plan(&mut index, at(311));
    assert_eq!(
        pass.summary.lost_gpu_seconds,
        16 * 301,
        "{:#?}",
        pass.actions
    );
    assert!(pass.summary.finished_requeues.is_empty(), "b queues again");
}

#[test]
fn a_failed_pod_restarts_the_whole_gang_until_the_backoff_limit() {
    let mut index = cluster(32, vec![job("a", 2, 0)]);
    let pass = plan(&mut index, at(10));
    land_all(&mut index, &pass.actions, 10);
    let released = releases(&pass.actions)[0].clone();
    report(&mut index, &released, "Running", true);
    let Action::Release { gang, .. } = &released else {
        unreachable!()
    };
    index.apply(with_phase(gang.pods[1].clone(), "Failed", false));
    let pass = plan(&mut index, at(20));
    let Some(Action::Evict { status, event, .. }) = job_actions(&pass.actions, "team-a/a")
        .into_iter()
        .find(|a| matches!(a, Action::Evict { .. }))
    else {
        unreachable!("no eviction: {:#?}", pass.actions)
    };
    assert_eq!((status.restart_count, status.requeue_count), (1, 1));
    assert_eq!(event.reason, "GangRestart");
    land_all(&mut index, &pass.actions, 20);
    // Readmitted at once (a restart is not a timeout), and fails again: backoffLimit is 1.
    let pass = plan(&mut index, at(21));
    land_all(&mut index, &pass.actions, 21);
    let released = releases(&pass.actions)[0].clone();
    let Action::Release { gang, .. } = &released else {
        unreachable!()
    };
    index.apply(with_phase(gang.pods[0].clone(), "Failed", false));
    let pass = plan(&mut index, at(30));
    land_all(&mut index, &pass.actions, 30);
    let status = status_of(&index, "team-a/a");
    assert_eq!(status.phase, Some(GpuJobPhase::Failed));
    assert!(status.admission.is_none());
    assert!(
        plan(&mut index, at(31))
            .actions
            .iter()
            .all(|a| a.job().map(muster_api::ObjectRef::as_str) != Some("team-a/a"))
    );
}

#[test]
fn suspending_an_admitted_job_evicts_it() {
    let mut index = cluster(32, vec![job("a", 2, 0)]);
    let pass = plan(&mut index, at(10));
    land_all(&mut index, &pass.actions, 10);
    let mut a = index.index().job("team-a/a").cloned().unwrap_or_default();
    a.spec.suspend = true;
    a.metadata.resource_version = Some("100".into());
    index.apply(a);
    let pass = plan(&mut index, at(20));
    let Some(Action::Evict { status, .. }) = job_actions(&pass.actions, "team-a/a").first() else {
        unreachable!("{:#?}", pass.actions)
    };
    assert_eq!(
        status.pending_reason.clone().map(|r| r.kind),
        Some(PendingReasonKind::Suspended)
    );
}

#[test]
fn a_restarted_controller_finishes_a_whole_release_exactly_once() {
    // The first controller created both pods, still gated, and died before the status.
    let mut first = cluster(32, vec![job("a", 2, 0)]);
    let pass = plan(&mut first, at(10));
    let released = releases(&pass.actions)[0].clone();
    let Action::Release { gang, .. } = &released else {
        unreachable!()
    };
    let mut restarted = cluster(32, vec![job("a", 2, 0)]);
    restarted.relist_begin::<Pod>();
    for pod in &gang.pods {
        restarted.apply(pod.clone());
    }
    restarted.relist_done::<Pod>();
    let pass = plan(&mut restarted, at(20));
    let finished = releases(&pass.actions);
    assert_eq!(finished.len(), 1, "{:#?}", pass.actions);
    let Action::Release {
        gang: again,
        status,
        ..
    } = finished[0]
    else {
        unreachable!()
    };
    assert_eq!(again.pods, gang.pods, "the same pods, on the same nodes");
    assert!(status.admission.is_some());
    assert!(releases(&plan(&mut restarted, at(21)).actions).is_empty());
    land_all(&mut restarted, &pass.actions, 21);
    let pass = plan(&mut restarted, at(22));
    assert!(releases(&pass.actions).is_empty());
    assert_eq!(
        status_of(&restarted, "team-a/a").phase,
        Some(GpuJobPhase::Admitted)
    );
}

#[test]
fn a_restarted_controller_rolls_back_a_half_created_gang() {
    let gang = released_gang(32);
    let mut restarted = cluster(32, vec![job("a", 2, 0)]);
    restarted.apply(gang.pods[0].clone());
    let pass = plan(&mut restarted, at(20));
    let deletes: Vec<_> = job_actions(&pass.actions, "team-a/a")
        .into_iter()
        .filter_map(|a| match a {
            Action::DeletePods { pods, .. } => Some(pods.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(deletes, [vec!["team-a/a-workers-0"]]);
    assert!(releases(&pass.actions).is_empty());
    land_all(&mut restarted, &pass.actions, 20);
    assert_eq!(releases(&plan(&mut restarted, at(21)).actions).len(), 1);
}

/// A release rolled back keeps its queue's quota until its pods are being deleted: another
/// gang released into that quota in the same pass would run beside pods that still run.
#[test]
fn a_rolled_back_release_holds_its_quota_until_its_pods_are_deleted() {
    let gang = released_gang(16);
    // A new leader finds a's first pod (8 GPUs) and b, which wants the whole quota (16).
    let mut restarted = cluster(16, vec![job("a", 2, 0), job("b", 2, 1)]);
    restarted.apply(gang.pods[0].clone());
    let rollback = plan(&mut restarted, at(20));
    assert!(
        matches!(
            job_actions(&rollback.actions, "team-a/a").as_slice(),
            [Action::DeletePods { .. }]
        ),
        "{:#?}",
        rollback.actions
    );
    assert!(
        releases(&rollback.actions).is_empty(),
        "{:#?}",
        rollback.actions
    );
    // The delete is still in flight: a's pod still runs and still takes the quota.
    let waiting = plan(&mut restarted, at(21));
    assert!(
        releases(&waiting.actions).is_empty(),
        "{:#?}",
        waiting.actions
    );
    land_all(&mut restarted, &rollback.actions, 21);
    land_all(&mut restarted, &waiting.actions, 21);
    let after = plan(&mut restarted, at(22));
    assert_eq!(releases(&after.actions).len(), 1, "{:#?}", after.actions);
}

/// An eviction whose status landed before its pods' deletes: the pods still run, so the job
/// holds its quota until they are being deleted, whatever its status says.
#[test]
fn pods_of_an_evicted_attempt_hold_the_quota_until_they_are_deleted() {
    let gang = released_gang(16);
    let mut a = job("a", 2, 0);
    a.status = Some(muster_api::GpuJobStatus {
        requeue_count: 1,
        ..Default::default()
    });
    let mut found = cluster(16, vec![a, job("b", 2, 1)]);
    for pod in &gang.pods {
        found.apply(with_phase(pod.clone(), "Running", true));
    }
    let pass = plan(&mut found, at(20));
    assert!(releases(&pass.actions).is_empty(), "{:#?}", pass.actions);
    let again = plan(&mut found, at(21));
    assert!(releases(&again.actions).is_empty(), "{:#?}", again.actions);
    land_all(&mut found, &pass.actions, 21);
    assert_eq!(releases(&plan(&mut found, at(22)).actions).len(), 1);
}

/// Another writer (a replica that also thought it led) wrote the job's admission, but its
/// gang stayed half released: one pod missing, the other still gated. A controller that finds
/// it finishes the release at once — the same pods on the same nodes, gates lifted — instead
/// of waiting out the pods-ready timeout or spending a restart.
#[test]
fn an_admitted_gang_left_gated_by_another_writer_is_finished_at_once() {
    let mut first = cluster(32, vec![job("a", 2, 0)]);
    let pass = plan(&mut first, at(10));
    let Action::Release { gang, status, .. } = releases(&pass.actions)[0].clone() else {
        unreachable!()
    };
    let mut found = cluster(32, vec![job("a", 2, 0)]);
    let mut admitted = found.index().job("team-a/a").cloned().unwrap_or_default();
    admitted.status = Some(*status);
    found.apply(admitted);
    found.apply(gang.pods[0].clone());
    let pass = plan(&mut found, at(11));
    let finished = releases(&pass.actions);
    assert_eq!(finished.len(), 1, "{:#?}", pass.actions);
    let Action::Release { gang: again, .. } = finished[0] else {
        unreachable!()
    };
    assert_eq!(again.pods, gang.pods, "the same pods, on the same nodes");
    assert!(
        !pass
            .actions
            .iter()
            .any(|a| matches!(a, Action::Evict { .. } | Action::DeletePods { .. })),
        "{:#?}",
        pass.actions
    );
    land_all(&mut found, &pass.actions, 11);
    assert_eq!(status_of(&found, "team-a/a").restart_count, 0);
    assert!(releases(&plan(&mut found, at(12)).actions).is_empty());
}

#[test]
fn pods_of_an_earlier_attempt_are_deleted_before_the_job_runs_again() {
    let gang = released_gang(32);
    // The status says attempt 1 (an eviction was written), the pods are attempt 0.
    let mut a = job("a", 2, 0);
    a.status = Some(muster_api::GpuJobStatus {
        requeue_count: 1,
        ..Default::default()
    });
    let mut restarted = cluster(32, vec![a]);
    for pod in &gang.pods {
        restarted.apply(with_phase(pod.clone(), "Running", true));
    }
    let pass = plan(&mut restarted, at(20));
    assert!(matches!(
        job_actions(&pass.actions, "team-a/a").as_slice(),
        [Action::DeletePods { pods, .. }] if pods.len() == 2
    ));
    assert!(releases(&pass.actions).is_empty());
}

#[test]
fn deleting_a_job_removes_its_pods_before_its_finalizer() {
    let mut index = cluster(32, vec![job("a", 2, 0)]);
    let pass = plan(&mut index, at(10));
    land_all(&mut index, &pass.actions, 10);
    let mut a = index.index().job("team-a/a").cloned().unwrap_or_default();
    a.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(15)));
    a.metadata.resource_version = Some("100".into());
    index.apply(a);
    let pass = plan(&mut index, at(20));
    assert!(matches!(
        job_actions(&pass.actions, "team-a/a").as_slice(),
        [Action::Finalize { pods, .. }] if pods.len() == 2
    ));
}

#[test]
fn jobs_without_the_finalizer_get_it() {
    let mut a = job("a", 1, 0);
    a.metadata.finalizers = None;
    let mut index = cluster(32, vec![a]);
    let pass = plan(&mut index, at(10));
    assert!(
        pass.actions
            .iter()
            .any(|x| matches!(x, Action::AddFinalizer { job } if job == "team-a/a"))
    );
    let again = plan(&mut index, at(11));
    assert!(
        !again
            .actions
            .iter()
            .any(|x| matches!(x, Action::AddFinalizer { .. })),
        "asked once while in flight"
    );
}

#[test]
fn a_waiting_job_gets_the_finalizer_only_with_its_release() {
    // Quota for one 2-pod gang: a runs, b waits.
    let (mut a, mut b) = (job("a", 2, 0), job("b", 2, 1));
    a.metadata.finalizers = None;
    b.metadata.finalizers = None;
    let mut index = cluster(16, vec![a, b]);
    let pass = plan(&mut index, at(10));
    let finalized: Vec<&str> = pass
        .actions
        .iter()
        .filter(|x| matches!(x, Action::AddFinalizer { .. }))
        .filter_map(|a| a.job().map(muster_api::ObjectRef::as_str))
        .collect();
    assert_eq!(finalized, ["team-a/a"], "b waits: nothing to clean up yet");
    land_all(&mut index, &pass.actions, 10);
    report(
        &mut index,
        &releases(&pass.actions)[0].clone(),
        "Succeeded",
        false,
    );
    // b is released in the pass that writes a's end.
    let pass = plan(&mut index, at(20));
    assert!(
        job_actions(&pass.actions, "team-a/b")
            .iter()
            .any(|x| matches!(x, Action::AddFinalizer { .. })),
        "b's release brings its finalizer: {:#?}",
        pass.actions
    );
}

#[test]
fn a_release_that_fails_is_retried_with_backoff_and_says_why() {
    let mut index = cluster(32, vec![job("a", 2, 0)]);
    let pass = plan(&mut index, at(10));
    let release = releases(&pass.actions)[0].clone();
    index.landed(
        &release,
        Err("creating pod a-workers-0: forbidden".into()),
        at(10).as_second(),
    );
    let pass = plan(&mut index, at(11));
    assert!(releases(&pass.actions).is_empty(), "{:#?}", pass.actions);
    let Some(Action::JobStatus { status, .. }) = job_actions(&pass.actions, "team-a/a")
        .into_iter()
        .find(|a| matches!(a, Action::JobStatus { .. }))
    else {
        unreachable!("{:#?}", pass.actions)
    };
    let reason = status.pending_reason.clone().unwrap_or_default();
    assert_eq!(reason.kind, PendingReasonKind::Backoff);
    assert!(reason.message.contains("forbidden"), "{}", reason.message);
    land_all(&mut index, &pass.actions, 11);
    assert_eq!(releases(&plan(&mut index, at(31)).actions).len(), 1);
}

#[test]
fn a_restarted_gang_waits_for_its_old_pods_to_go_then_gets_new_pod_names() {
    let mut index = cluster(32, vec![job("a", 2, 0)]);
    let pass = plan(&mut index, at(10));
    land_all(&mut index, &pass.actions, 10);
    let Action::Release { gang, .. } = releases(&pass.actions)[0].clone() else {
        unreachable!()
    };
    report(
        &mut index,
        &releases(&pass.actions)[0].clone(),
        "Running",
        true,
    );
    index.apply(with_phase(gang.pods[0].clone(), "Failed", false));
    let pass = plan(&mut index, at(20));
    // The eviction lands, but the old pods linger, terminating on their nodes.
    let evict: Vec<Action> = pass
        .actions
        .iter()
        .filter(|a| matches!(a, Action::Evict { .. }))
        .cloned()
        .collect();
    let Some(Action::Evict { status, .. }) = evict.first() else {
        unreachable!("{:#?}", pass.actions)
    };
    let mut a = index.index().job("team-a/a").cloned().unwrap_or_default();
    a.status = Some((**status).clone());
    a.metadata.resource_version = Some("50".into());
    index.apply(a);
    for pod in &gang.pods {
        let mut pod = with_phase(pod.clone(), "Running", false);
        pod.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(20)));
        index.apply(pod);
    }
    index.landed(&evict[0], Ok(Vec::new()), at(20).as_second());
    // Two attempts of one job never run at once: nothing is released while they terminate.
    let pass = plan(&mut index, at(21));
    assert!(releases(&pass.actions).is_empty(), "{:#?}", pass.actions);
    land_all(&mut index, &pass.actions, 21);
    for pod in &gang.pods {
        index.delete(pod);
    }
    let pass = plan(&mut index, at(22));
    let released = releases(&pass.actions);
    assert_eq!(released.len(), 1, "{:#?}", pass.actions);
    let Action::Release { gang: again, .. } = released[0] else {
        unreachable!()
    };
    let names: Vec<_> = again
        .pods
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert_eq!(names, ["a-workers-0-a1", "a-workers-1-a1"]);
    let hosts: Vec<_> = again
        .pods
        .iter()
        .filter_map(|p| p.spec.as_ref().and_then(|s| s.hostname.clone()))
        .collect();
    assert_eq!(hosts, ["a-workers-0", "a-workers-1"], "stable DNS names");
}

#[test]
fn a_running_gang_keeps_its_quota_while_a_status_write_is_in_flight() {
    // Quota for one 2-pod gang; nodes for two.
    let mut index = cluster(16, vec![job("a", 2, 0)]);
    let pass = plan(&mut index, at(10));
    land_all(&mut index, &pass.actions, 10);
    report(
        &mut index,
        &releases(&pass.actions)[0].clone(),
        "Running",
        true,
    );
    // This pass writes a's PodsReady; the write is still in flight when b arrives.
    let pass = plan(&mut index, at(20));
    assert!(
        job_actions(&pass.actions, "team-a/a")
            .iter()
            .any(|a| matches!(a, Action::JobStatus { .. })),
        "{:#?}",
        pass.actions
    );
    index.apply(job("b", 2, 21));
    let pass = plan(&mut index, at(22));
    assert!(
        releases(&pass.actions).is_empty(),
        "b must not get a's quota while a's write is in flight: {:#?}",
        pass.actions
    );
}

#[test]
fn an_admission_at_the_head_of_a_long_queue_rewrites_the_positions_shown_once_per_refresh() {
    let shown = muster_controller::status::SHOWN_POSITIONS;
    let waiting = shown + 50;
    // 24 GPUs of quota: three single-pod jobs run, the rest wait in order of creation.
    let jobs = (0..waiting + 3)
        .map(|i| job(&format!("j{i:03}"), 1, i64::from(i)))
        .collect();
    let mut index = cluster(24, jobs);
    let refresh = muster_controller::status::PENDING_REFRESH_SECONDS;
    // The first pass writes every waiting job's status; the next ones have nothing to add.
    for t in [1, 2, 3] {
        let pass = plan(&mut index, at(t));
        land_all(&mut index, &pass.actions, t);
    }
    let t0 = 3;
    let position =
        |index: &State, i: u32| status_of(index, &format!("team-a/j{i:03}")).queue_position;
    assert_eq!(position(&index, 3), Some(1));
    assert_eq!(position(&index, 2 + shown), Some(shown.cast_signed()));
    assert_eq!(
        position(&index, 3 + shown),
        None,
        "beyond the shown positions"
    );
    assert!(plan(&mut index, at(t0 + 1)).actions.is_empty(), "settled");
    // More quota: the head starts, and everyone behind it moves up one place. The same
    // reason with new figures waits for the refresh interval where the status was written
    // within it: the admission's pass writes no waiting job's status.
    index.apply(support::cluster_queue(32));
    let pass = plan(&mut index, at(t0 + 2));
    assert_eq!(releases(&pass.actions).len(), 1);
    assert_eq!(statuses_written(&pass.actions), Vec::<&str>::new());
    land_all(&mut index, &pass.actions, t0 + 2);
    assert_eq!(position(&index, 4), Some(2), "shown a little late");
    // Once the interval is over, the shown positions move, and only those: the jobs that
    // stay shown. The one that moves into them is shown its position once it has stayed
    // there a while.
    let later = 1 + refresh;
    let pass = plan(&mut index, at(later));
    assert_eq!(
        statuses_written(&pass.actions).len(),
        shown as usize - 1,
        "{} waiting jobs",
        waiting - 1
    );
    land_all(&mut index, &pass.actions, later);
    assert!(
        plan(&mut index, at(later + 1)).actions.is_empty(),
        "settled"
    );
    assert_eq!(position(&index, 4), Some(1));
    assert_eq!(position(&index, 3 + shown), None, "new among the shown");
    let due = later + muster_controller::status::POSITION_SHOWN_AFTER_SECONDS;
    assert!(
        statuses_written(&plan(&mut index, at(due - 1)).actions).is_empty(),
        "not yet"
    );
    let pass = plan(&mut index, at(due));
    assert_eq!(
        statuses_written(&pass.actions),
        [format!("team-a/j{:03}", 3 + shown).as_str()]
    );
    land_all(&mut index, &pass.actions, due);
    assert_eq!(position(&index, 3 + shown), Some(shown.cast_signed()));
    assert_eq!(position(&index, 4 + shown), None);
    assert_eq!(
        status_of(&index, &format!("team-a/j{:03}", 4 + shown))
            .pending_reason
            .map(|r| r.kind),
        Some(PendingReasonKind::QuotaShort),
        "far back, a job still says why it waits"
    );
}

/// Deep in a queue, a job whose status says its capacity is reserved for an earlier job and
/// which now waits for quota is waiting its turn either way: the change is written like new
/// figures (not at all that far back). One whose status says something else is rewritten.
#[test]
fn a_deep_job_flipping_between_quota_short_and_capacity_reserved_is_not_rewritten() {
    let shown = muster_controller::status::SHOWN_POSITIONS;
    let refresh = muster_controller::status::PENDING_REFRESH_SECONDS;
    // 24 GPUs of quota: three single-pod jobs run, the rest wait for quota.
    let jobs = (0..shown + 13)
        .map(|i| job(&format!("j{i:03}"), 1, i64::from(i)))
        .collect();
    let mut index = cluster(24, jobs);
    for t in [1, 2, 3] {
        let pass = plan(&mut index, at(t));
        land_all(&mut index, &pass.actions, t);
    }
    let said = |kind: &str, i: u32, index: &mut State| {
        let key = format!("team-a/j{i:03}");
        let mut job = index
            .index()
            .job(&key)
            .cloned()
            .unwrap_or_else(|| unreachable!("{key}"));
        let status = job.status.get_or_insert_with(Default::default);
        status.pending_reason = Some(support::object(serde_json::json!({
            "kind": kind, "message": "said by an earlier pass"})));
        index.apply(job);
    };
    let (reserved, stopped) = (shown + 8, shown + 9);
    said("CapacityReserved", reserved, &mut index);
    said("QueueStopped", stopped, &mut index);
    let later = 4 + refresh;
    let pass = plan(&mut index, at(later));
    let written = statuses_written(&pass.actions);
    assert!(
        !written.contains(&format!("team-a/j{reserved:03}").as_str()),
        "{written:?}"
    );
    assert!(
        written.contains(&format!("team-a/j{stopped:03}").as_str()),
        "{written:?}"
    );
}

/// A job whose status says another way of waiting its turn than the one it now has (here
/// an eviction's "not yet scheduled") is told where it stands at once, position included;
/// only a job whose status already says its reason waits to be shown its position.
#[test]
fn a_requeued_job_at_the_head_is_told_its_reason_and_position_at_once() {
    // 8 GPUs: one single-pod job runs, the requeued one waits first in line.
    let mut requeued = job("b", 1, 1);
    requeued.status = Some(support::object(serde_json::json!({
        "phase": "Queued", "requeueCount": 1,
        "pendingReason": {"kind": "NotYetScheduled",
                          "message": "preempted to make room for team-b/reclaim"}})));
    let mut index = cluster(8, vec![job("a", 1, 0), requeued]);
    let pass = plan(&mut index, at(2));
    assert_eq!(releases(&pass.actions).len(), 1);
    assert!(
        statuses_written(&pass.actions).contains(&"team-a/b"),
        "{:#?}",
        pass.actions
    );
    land_all(&mut index, &pass.actions, 2);
    let status = status_of(&index, "team-a/b");
    assert_eq!(
        (status.pending_reason.map(|r| r.kind), status.queue_position),
        (Some(PendingReasonKind::QuotaShort), Some(1))
    );
}

#[test]
fn a_job_stays_held_until_every_write_of_its_pass_has_landed() {
    // A new job without its finalizer: the pass adds the finalizer and releases the gang.
    let mut fresh = job("a", 2, 0);
    fresh.metadata.finalizers = None;
    let mut index = cluster(16, vec![fresh, job("b", 2, 1)]);
    let pass = plan(&mut index, at(10));
    let kinds: Vec<&str> = job_actions(&pass.actions, "team-a/a")
        .iter()
        .map(|a| a.kind())
        .collect();
    assert_eq!(kinds, ["add_finalizer", "release"]);
    // The finalizer lands first; the release is still in flight.
    land_all(&mut index, &pass.actions[..1], 10);
    for t in [11, 12] {
        let pass = plan(&mut index, at(t));
        assert!(
            job_actions(&pass.actions, "team-a/a").is_empty(),
            "t={t}: {:#?}",
            pass.actions
        );
        assert!(
            releases(&pass.actions).is_empty(),
            "a's quota and nodes are still promised: {:#?}",
            pass.actions
        );
    }
    // The release lands: a runs, b still waits.
    land_all(&mut index, &pass.actions[1..], 13);
    assert_eq!(
        status_of(&index, "team-a/a").phase,
        Some(GpuJobPhase::Admitted)
    );
    let pass = plan(&mut index, at(14));
    assert!(releases(&pass.actions).is_empty(), "{:#?}", pass.actions);
}

#[test]
fn a_write_of_an_earlier_leadership_term_never_frees_a_job_of_the_current_one() {
    let mut index = cluster(16, vec![job("a", 2, 0)]);
    let old_term = index.term();
    let first = plan(&mut index, at(10));
    assert_eq!(releases(&first.actions).len(), 1);
    // The Lease is lost and won again while that release is still being written.
    index.start_term();
    let second = plan(&mut index, at(11));
    assert_eq!(
        releases(&second.actions).len(),
        1,
        "the new term starts afresh"
    );
    // The old term's release lands now: the new term's release is still in flight.
    for action in &first.actions {
        index.landed_in(old_term, action, Ok(Vec::new()), at(12).as_second());
    }
    let third = plan(&mut index, at(13));
    assert!(
        job_actions(&third.actions, "team-a/a").is_empty(),
        "{:#?}",
        third.actions
    );
}

/// When only the figures of waiting jobs move (here the quota left), the jobs whose position
/// is shown are rewritten once the refresh interval has passed; jobs further back keep the
/// message of their last new reason, so a deep queue costs no write per job per event.
#[test]
fn new_figures_rewrite_only_the_jobs_whose_position_is_shown() {
    let shown = muster_controller::status::SHOWN_POSITIONS;
    let refresh = muster_controller::status::PENDING_REFRESH_SECONDS;
    // 24 GPUs: one 2-pod gang (16) runs, the rest wait with 8 left.
    let jobs = (0..shown + 21)
        .map(|i| job(&format!("j{i:03}"), 2, i64::from(i)))
        .collect();
    let mut index = cluster(24, jobs);
    for t in [1, 2, 3 + refresh] {
        let pass = plan(&mut index, at(t));
        land_all(&mut index, &pass.actions, t);
    }
    assert!(
        plan(&mut index, at(4 + refresh)).actions.is_empty(),
        "settled"
    );
    // 28 GPUs: 12 left, still not enough; every waiting job's message would change.
    index.apply(support::cluster_queue(28));
    let later = 5 + 2 * refresh;
    let pass = plan(&mut index, at(later));
    let written = statuses_written(&pass.actions);
    assert_eq!(written.len(), shown as usize, "{written:?}");
    land_all(&mut index, &pass.actions, later);
    let message = |i: u32| {
        status_of(&index, &format!("team-a/j{i:03}"))
            .pending_reason
            .map(|r| r.message)
            .unwrap_or_default()
    };
    assert!(message(1).contains("12 of its own left"), "{}", message(1));
    assert!(
        message(shown + 5).contains("8 of its own left"),
        "{}",
        message(shown + 5)
    );
}

#[test]
fn a_job_admitted_while_its_status_write_is_in_flight_is_released_once_it_lands() {
    // No quota yet: the job waits, and its first pending status goes out.
    let mut index = cluster(0, vec![job("a", 2, 0)]);
    let first = plan(&mut index, at(10));
    let written = job_actions(&first.actions, "team-a/a");
    assert!(
        matches!(written[..], [Action::JobStatus { .. }]),
        "{written:#?}"
    );
    // Quota arrives while that write is still in flight: the cycle admits the job, but the
    // pass cannot release it yet (two writes of one job could land out of order).
    index.apply(cluster_queue(16));
    let second = plan(&mut index, at(11));
    assert!(releases(&second.actions).is_empty());
    // The status lands: the job, still waiting as far as the cluster shows, is released.
    land_all(&mut index, &first.actions, 12);
    let third = plan(&mut index, at(13));
    assert_eq!(
        releases(&third.actions)
            .iter()
            .filter_map(|a| a.job())
            .collect::<Vec<_>>(),
        ["team-a/a"]
    );
}

/// Passes a second apart from `t` until one writes nothing (everything the cluster shows is
/// settled), each landing: the time after the last, and the releases made.
fn settle_from(index: &mut State, mut t: i64) -> (i64, Vec<Action>) {
    let mut released = Vec::new();
    loop {
        let pass = plan(index, at(t));
        land_all(index, &pass.actions, t);
        released.extend(releases(&pass.actions).into_iter().cloned());
        t += 1;
        if pass.actions.is_empty() {
            return (t, released);
        }
        assert!(t < 20, "passes never settle: {:#?}", pass.actions);
    }
}

#[test]
fn a_pass_settles_only_the_jobs_whose_inputs_changed() {
    let mut index = cluster(32, vec![job("a", 2, 0), job("b", 2, 1), job("c", 2, 2)]);
    let (t, released) = settle_from(&mut index, 10);
    assert_eq!(released.len(), 2, "a and b fit, c waits");
    let quiet = plan(&mut index, at(t));
    assert!(quiet.actions.is_empty());
    assert_eq!(quiet.summary.settled, 0);
    assert!(!quiet.summary.explained);
    // The counts it reports are the last pass's, not empty.
    assert_eq!(quiet.summary.considered, 1);
    assert_eq!(
        quiet.summary.pending.values().sum::<i64>(),
        1,
        "{:?}",
        quiet.summary.pending
    );
    // One gang's pods become Ready: that job alone is settled, and its Running written.
    report(&mut index, &released[0], "Running", true);
    let pass = plan(&mut index, at(t + 1));
    assert_eq!(pass.summary.settled, 1);
    let job = released[0].job().map_or("", muster_api::ObjectRef::as_str);
    assert!(
        matches!(
            job_actions(&pass.actions, job)[..],
            [Action::JobStatus { .. }]
        ),
        "{:#?}",
        pass.actions
    );
}

/// Under a stream of events, passes come a few hundred milliseconds apart: waiting jobs are
/// explained at most once per second, and what moved in a pass that did not explain is
/// explained by the next pass in a later second, even when nothing moves then.
#[test]
fn waiting_jobs_are_explained_at_most_once_a_second_and_a_skipped_explanation_is_owed() {
    let mut index = cluster(32, vec![job("a", 2, 0), job("b", 2, 1), job("c", 2, 2)]);
    let (t, released) = settle_from(&mut index, 10);
    assert_eq!(released.len(), 2, "a and b fit, c waits");
    // A gang turns Ready: the job is settled, and the waiting job explained.
    report(&mut index, &released[0], "Running", true);
    let first = plan(&mut index, at(t));
    assert_eq!(first.summary.settled, 1);
    assert!(first.summary.explained);
    land_all(&mut index, &first.actions, t);
    // The other turns Ready within the same second: settled, but not explained again.
    report(&mut index, &released[1], "Running", true);
    let second = plan(&mut index, at(t));
    assert!(second.summary.settled >= 1);
    assert!(!second.summary.explained, "twice in one second");
    assert_eq!(
        second.summary.pending.values().sum::<i64>(),
        1,
        "the last explanation's counts stand: {:?}",
        second.summary.pending
    );
    land_all(&mut index, &second.actions, t);
    // The next second's pass explains what it owes, with nothing new.
    let owed = plan(&mut index, at(t + 1));
    assert!(owed.summary.explained, "the owed explanation");
    let after = plan(&mut index, at(t + 2));
    assert!(!after.summary.explained, "nothing owed, nothing moved");
}

#[test]
fn quiet_passes_explain_waiting_jobs_again_within_the_refresh_interval() {
    let mut index = cluster(32, vec![job("a", 2, 0), job("b", 2, 1), job("c", 2, 2)]);
    let mut t = 10;
    let mut last_explained = t;
    loop {
        let pass = plan(&mut index, at(t));
        land_all(&mut index, &pass.actions, t);
        if pass.summary.explained {
            last_explained = t;
        }
        t += 1;
        if pass.actions.is_empty() {
            break;
        }
        assert!(t < 20, "passes never settle");
    }
    // Nothing happens from here on: passes stay quiet, but never for longer than the
    // interval after which a waiting job's reason is worked out again.
    let refresh = muster_admission::REASONS_REFRESH_SECONDS;
    let mut quiet = 0;
    for now in t..t + 3 * refresh {
        let pass = plan(&mut index, at(now));
        assert!(pass.actions.is_empty(), "at {now}: {:#?}", pass.actions);
        if pass.summary.explained {
            last_explained = now;
        } else {
            quiet += 1;
            assert!(
                now - last_explained < refresh,
                "at {now}: reasons last read at {last_explained}"
            );
        }
    }
    assert!(quiet > refresh, "only {quiet} quiet passes");
}

#[test]
fn the_placement_policy_is_one_the_fitter_knows() {
    for name in muster_topology::POLICY_NAMES {
        assert!(State::with_placement_policy(name).is_ok(), "{name}");
    }
    let unknown = State::with_placement_policy("tightest")
        .err()
        .unwrap_or_default();
    assert!(
        unknown.contains("tightest") && unknown.contains("fgd"),
        "{unknown}"
    );
}

/// A new job is told why it waits only once it has waited
/// [`muster_controller::status::FIRST_STATUS_AFTER_SECONDS`]: one admitted sooner gets one
/// status write (its admission), not two. The pass that comes when the wait is up writes it,
/// though nothing else moved.
#[test]
fn a_new_job_s_first_pending_status_waits_until_it_has_waited_a_while() {
    let after = muster_controller::status::FIRST_STATUS_AFTER_SECONDS;
    // Quota for one 2-pod gang: a runs, b waits.
    let mut index = cluster(16, vec![job("a", 2, 0), job("b", 2, 1)]);
    index.set_first_status_after(after);
    let first = plan(&mut index, at(2));
    land_all(&mut index, &first.actions, 2);
    assert_eq!(releases(&first.actions).len(), 1);
    assert!(statuses_written(&first.actions).is_empty(), "{first:#?}");
    let mut written_at = None;
    for t in 3..=1 + after {
        let pass = plan(&mut index, at(t));
        land_all(&mut index, &pass.actions, t);
        if statuses_written(&pass.actions).contains(&"team-a/b") {
            written_at = Some(t);
            break;
        }
    }
    assert_eq!(written_at, Some(1 + after));
    let b = status_of(&index, "team-a/b");
    assert_eq!(b.phase, Some(GpuJobPhase::Queued), "{b:#?}");
    assert!(b.pending_reason.is_some(), "{b:#?}");
}

/// Sets every pod of `released` Running and Ready since `at(ready_at)`, as a kubelet reports.
fn report_ready_since(index: &mut State, released: &Action, ready_at: i64) {
    let Action::Release { gang, .. } = released else {
        unreachable!("not a release")
    };
    for pod in &gang.pods {
        let mut pod = support::with_phase(pod.clone(), "Running", true);
        if let Some(status) = pod.status.as_mut() {
            status.conditions = Some(vec![k8s_openapi::api::core::v1::PodCondition {
                type_: "Ready".to_owned(),
                status: "True".to_owned(),
                last_transition_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    at(ready_at),
                )),
                ..Default::default()
            }]);
        }
        index.apply(pod);
    }
}

/// A gang's Running status is written once it has been Ready for
/// [`muster_controller::status::RUNNING_STATUS_AFTER_SECONDS`], dated when it was Ready; a
/// gang that ends sooner goes from Admitted straight to Succeeded, one write.
#[test]
fn a_gang_s_running_status_waits_until_it_has_run_a_while_and_a_short_one_never_gets_one() {
    let after = muster_controller::status::RUNNING_STATUS_AFTER_SECONDS;
    let mut index = cluster(32, vec![job("long", 2, 0), job("short", 2, 1)]);
    let pass = plan(&mut index, at(10));
    land_all(&mut index, &pass.actions, 10);
    let released = releases(&pass.actions);
    assert_eq!(released.len(), 2, "{:#?}", pass.actions);
    let (long, short) = (released[0].clone(), released[1].clone());
    report_ready_since(&mut index, &long, 11);
    report_ready_since(&mut index, &short, 11);
    let mut running_written = None;
    for t in 12..=11 + after {
        if t == 13 {
            report(&mut index, &short, "Succeeded", false);
        }
        let pass = plan(&mut index, at(t));
        land_all(&mut index, &pass.actions, t);
        for key in statuses_written(&pass.actions) {
            let status = status_of(&index, key);
            match key {
                "team-a/long" => {
                    assert_eq!(status.phase, Some(GpuJobPhase::Running), "{status:#?}");
                    running_written = Some(t);
                }
                "team-a/short" => {
                    assert_eq!(status.phase, Some(GpuJobPhase::Succeeded), "{status:#?}");
                }
                other => unreachable!("{other}"),
            }
        }
    }
    assert_eq!(running_written, Some(11 + after));
    let long = status_of(&index, "team-a/long");
    let ready = long
        .conditions
        .iter()
        .find(|c| c.type_ == muster_api::gpujob::conditions::PODS_READY)
        .map(|c| c.last_transition_time.0);
    assert_eq!(ready, Some(at(11)), "dated when the gang was Ready");
    assert_eq!(
        status_of(&index, "team-a/short").phase,
        Some(GpuJobPhase::Succeeded)
    );
}

/// A queue whose figures alone moved (a job more waiting) is rewritten at most every
/// [`muster_controller::status::QUEUE_FIGURES_EVERY_SECONDS`], by a later pass even when
/// nothing else happens by then.
#[test]
fn a_queue_s_new_figures_wait_for_their_interval() {
    let every = muster_controller::status::QUEUE_FIGURES_EVERY_SECONDS;
    let queue_writes = |actions: &[Action]| {
        actions
            .iter()
            .filter(|a| a.kind() == "cluster_queue_status")
            .count()
    };
    let mut index = cluster(16, vec![job("a", 2, 0)]);
    let pass = plan(&mut index, at(10));
    assert_eq!(queue_writes(&pass.actions), 1, "{:#?}", pass.actions);
    land_all(&mut index, &pass.actions, 10);
    index.apply(job("b", 2, 11));
    let mut written = None;
    for t in 11..=10 + every {
        let pass = plan(&mut index, at(t));
        land_all(&mut index, &pass.actions, t);
        if queue_writes(&pass.actions) > 0 {
            let pending = pass.actions.iter().find_map(|a| match a {
                Action::ClusterQueueStatus { status, .. } => Some(status.pending_jobs),
                _ => None,
            });
            written = Some((t, pending));
            break;
        }
    }
    assert_eq!(written, Some((10 + every, Some(1))));
}

/// A waiting job is read from its GpuJob once per generation: its status moving does not
/// have it validated again, but an edit of its spec (a new generation) is read, and what the
/// job now asks for is what it is told.
#[test]
fn an_edited_waiting_job_is_read_again_at_its_new_generation() {
    let mut index = cluster(8, vec![job("a", 1, 0), job("b", 1, 1)]);
    let first = plan(&mut index, at(10));
    land_all(&mut index, &first.actions, 10);
    let settled = plan(&mut index, at(11));
    land_all(&mut index, &settled.actions, 11);
    let kind = |index: &State| status_of(index, "team-a/b").pending_reason.map(|r| r.kind);
    assert_eq!(kind(&index), Some(PendingReasonKind::QuotaShort));
    // b now asks for a LocalQueue that does not exist.
    let mut edited = index.index().job("team-a/b").cloned().unwrap_or_default();
    edited.spec.queue_name = "nowhere".into();
    edited.metadata.generation = Some(2);
    edited.metadata.resource_version = Some("9".into());
    index.apply(edited);
    let pass = plan(&mut index, at(12));
    land_all(&mut index, &pass.actions, 12);
    assert_eq!(
        kind(&index),
        Some(PendingReasonKind::UnknownQueue),
        "{:#?}",
        pass.actions
    );
}

/// A ClusterQueue `name` with `gpus` of quota, and its LocalQueue of the same name in
/// `team-a`.
fn queue_pair(name: &str, gpus: u32) -> (muster_api::ClusterQueue, muster_api::LocalQueue) {
    let mut cq = cluster_queue(gpus);
    cq.metadata.name = Some(name.to_owned());
    let mut lq = support::local_queue();
    lq.metadata.name = Some(name.to_owned());
    name.clone_into(&mut lq.spec.cluster_queue);
    (cq, lq)
}

/// A fleet of many queues whose figures all move costs at most the figure budget's writes a
/// second, and every queue is still refreshed in turn: those written longest ago first.
#[test]
fn many_queues_share_the_figure_budget_and_each_is_refreshed_in_turn() {
    let per_second = muster_controller::status::QUEUE_FIGURE_WRITES_PER_SECOND;
    let at_once = muster_controller::status::FIGURE_WRITES_AT_ONCE;
    let names: Vec<String> = (0..60).map(|i| format!("q{i:02}")).collect();
    let mut index = cluster(16, vec![]);
    for name in &names {
        let (cq, lq) = queue_pair(name, 8);
        index.apply(cq);
        index.apply(lq);
    }
    // Every queue's conditions are written at once, whatever the budget.
    let first = plan(&mut index, at(10));
    land_all(&mut index, &first.actions, 10);
    let queue_writes = |actions: &[Action]| -> Vec<String> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::ClusterQueueStatus { name, .. } => Some(format!("cq/{name}")),
                Action::LocalQueueStatus { key, .. } => Some(format!("lq/{key}")),
                _ => None,
            })
            .collect()
    };
    assert!(queue_writes(&first.actions).len() >= 2 * names.len());
    // Then a job more waits in every queue every ten seconds: each queue's figures move,
    // 120 statuses due every ten seconds against a budget of a few a second, for as long as
    // the budget takes to write every queue twice.
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_precision_loss,
        reason = "a few hundred seconds"
    )]
    let span = (4.0 * names.len() as f64 / per_second).ceil() as i64 + 10;
    let mut written = std::collections::BTreeMap::<String, Vec<i64>>::new();
    let mut total = 0usize;
    let mut n = 0;
    for t in 11..=10 + span {
        if t % 10 == 1 {
            for name in &names {
                let mut waiting = job(&format!("j{n:05}"), 4, t);
                waiting.spec.queue_name = name.clone();
                index.apply(waiting);
                n += 1;
            }
        }
        let pass = plan(&mut index, at(t));
        land_all(&mut index, &pass.actions, t);
        for queue in queue_writes(&pass.actions) {
            written.entry(queue).or_default().push(t);
            total += 1;
        }
        #[expect(clippy::cast_precision_loss, reason = "a few hundred writes")]
        let bound = at_once + per_second * (t - 10) as f64;
        #[expect(clippy::cast_precision_loss, reason = "a few hundred writes")]
        let so_far = total as f64;
        assert!(so_far <= bound, "{total} queue writes by {t}");
    }
    assert_eq!(written.len(), 2 * names.len(), "every queue refreshed");
    // Each was refreshed again and again, none starved: at least twice.
    let fewest = written.values().map(Vec::len).min().unwrap_or(0);
    assert!(fewest >= 2, "{written:?}");
}

/// Many waiting jobs shown their positions, whose figures all move at once, are rewritten
/// within the figure budget: a burst, then a few a second, each job in turn.
#[test]
fn the_figures_of_many_shown_positions_are_written_within_the_budget() {
    let per_second = muster_controller::status::JOB_FIGURE_WRITES_PER_SECOND;
    let at_once = muster_controller::status::FIGURE_WRITES_AT_ONCE;
    let refresh = muster_controller::status::PENDING_REFRESH_SECONDS;
    let names: Vec<String> = (0..12).map(|i| format!("q{i:02}")).collect();
    let mut index = cluster(16, vec![]);
    let mut n = 0;
    for name in &names {
        let (cq, lq) = queue_pair(name, 8);
        index.apply(cq);
        index.apply(lq);
        // Five waiting jobs in each, all shown their positions.
        for _ in 0..5 {
            let mut waiting = job(&format!("j{n:05}"), 2, 0);
            waiting.spec.queue_name = name.clone();
            index.apply(waiting);
            n += 1;
        }
    }
    let mut t = 1;
    while t < 3 * refresh {
        let pass = plan(&mut index, at(t));
        land_all(&mut index, &pass.actions, t);
        t += 1;
    }
    // Quota moves in every queue: each waiting job's figures (quota left) change.
    for name in &names {
        index.apply(queue_pair(name, 12).0);
    }
    let start = t;
    let mut rewritten = std::collections::BTreeSet::<String>::new();
    let mut total = 0usize;
    while t < start + refresh {
        let pass = plan(&mut index, at(t));
        land_all(&mut index, &pass.actions, t);
        for action in &pass.actions {
            if let Action::JobStatus { job, .. } = action {
                rewritten.insert(job.to_string());
                total += 1;
            }
        }
        #[expect(clippy::cast_precision_loss, reason = "a few dozen writes")]
        let bound = at_once + per_second * (t - start) as f64;
        #[expect(clippy::cast_precision_loss, reason = "a few dozen writes")]
        let so_far = total as f64;
        assert!(so_far <= bound, "{total} job figure writes by {t}");
        t += 1;
    }
    // 60 jobs, 20 at once and two a second: all rewritten within the refresh interval.
    assert_eq!(rewritten.len(), n, "{rewritten:?}");
}

#[test]
fn a_queue_borrows_its_cohorts_own_quota_and_a_cohort_with_a_missing_parent_is_told_why() {
    let cohort = |name: &str, spec: serde_json::Value| -> muster_api::Cohort {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "muster.dev/v1alpha1", "kind": "Cohort",
            "metadata": {"name": name}, "spec": spec}))
        .unwrap_or_default()
    };
    let gpus = |n: u32| {
        serde_json::json!({"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"],
            "flavors": [{"name": "h100", "resources": [
                {"name": "nvidia.com/gpu", "nominalQuota": n.to_string()}]}]}]})
    };
    // The queue has no quota of its own; its cohort ml none yet either.
    let mut index = cluster(0, vec![job("a", 2, 0)]);
    let mut queue = cluster_queue(0);
    queue.spec.cohort = Some("ml".to_owned());
    index.apply(queue);
    index.apply(cohort("ml", gpus(0)));
    let first = plan(&mut index, at(10));
    assert!(releases(&first.actions).is_empty());
    land_all(&mut index, &first.actions, 11);
    // Only the Cohort changes: ml now holds 16 GPUs, which the queue may use.
    index.apply(cohort("ml", gpus(16)));
    index.apply(cohort("stray", serde_json::json!({"parent": "nowhere"})));
    // A department whose lending limit is more than all it holds: told, and still works.
    let mut lends = gpus(4);
    lends["resourceGroups"][0]["flavors"][0]["resources"][0]["lendingLimit"] = "64".into();
    lends["parent"] = "org".into();
    index.apply(cohort("org", serde_json::json!({})));
    index.apply(cohort("infra", lends));
    let mut web = cluster_queue(4);
    web.metadata.name = Some("web".to_owned());
    web.spec.cohort = Some("infra".to_owned());
    index.apply(web);
    let pass = plan(&mut index, at(20));
    assert_eq!(releases(&pass.actions).len(), 1, "{:#?}", pass.actions);
    let valid = |name: &str| {
        pass.actions.iter().find_map(|a| match a {
            Action::CohortStatus { name: n, status } if n == name => status
                .conditions
                .iter()
                .find(|c| c.type_ == "Valid")
                .map(|c| (c.status.clone(), c.message.clone(), c.reason.clone())),
            _ => None,
        })
    };
    assert_eq!(valid("ml").map(|v| v.0), Some("True".to_owned()));
    let (status, message, reason) = valid("stray").unwrap_or_default();
    assert_eq!((status.as_str(), reason.as_str()), ("False", "InvalidSpec"));
    assert!(
        message.contains("spec.parent") && message.contains("create a Cohort named nowhere"),
        "{message}"
    );
    let (status, message, reason) = valid("infra").unwrap_or_default();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "LimitNeverBinds")
    );
    assert!(
        message.starts_with("spec.resourceGroups[0].flavors[0].resources[0].lendingLimit: 64 is more than the 8 of nvidia.com/gpu in flavor h100 within cohort infra"),
        "{message}"
    );
    assert_eq!(valid("org").map(|v| v.0), Some("True".to_owned()));
}
