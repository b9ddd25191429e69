//! A preemptor that waits because waiting is cheaper than evicting says so in its status —
//! whom it would evict, until when it waits, and since when — and its wait stays bounded from
//! that first moment when another replica takes over and builds its scheduler afresh.

mod support;

use k8s_openapi::api::core::v1::Pod;
use muster_api::gpujob::{GpuJobStatus, PendingReasonKind};
use muster_api::{ClusterQueue, GpuJob};
use muster_controller::plan::{Action, plan};
use muster_controller::state::State;
use support::{at, cluster, cluster_queue, job, land_all, with_phase};

/// `name` at `priority`, announcing `runtime` seconds.
fn announcing(name: &str, created: i64, priority: i32, runtime: i64) -> GpuJob {
    let mut j = job(name, 2, created);
    j.spec.priority = Some(priority);
    j.spec.expected_runtime_seconds = Some(runtime);
    j
}

/// The cluster's queue (32 GPUs), preempting lower priorities and weighing the wait.
fn preempting_queue() -> ClusterQueue {
    let mut q = cluster_queue(32);
    q.spec.preemption = Some(muster_api::cluster_queue::PreemptionPolicy {
        within_cluster_queue: muster_api::cluster_queue::WithinClusterQueue::LowerPriority,
        ..Default::default()
    });
    q
}

/// The status `actions` write for `key`.
fn written(actions: &[Action], key: &str) -> Option<GpuJobStatus> {
    actions.iter().find_map(|a| match a {
        Action::JobStatus { job, status, .. } if job == key => Some((**status).clone()),
        _ => None,
    })
}

fn evicts(actions: &[Action]) -> Vec<&str> {
    actions
        .iter()
        .filter(|a| matches!(a, Action::Evict { .. }))
        .filter_map(|a| a.job().map(muster_api::ObjectRef::as_str))
        .collect()
}

/// Two low-priority gangs fill both blocks from t=0, announcing 1,500 s; a high-priority gang
/// arrives at t=1,000 and waits, its status written and landed. Also the gangs' pods, as the
/// kubelet reports them.
fn deferred() -> (State, Vec<Pod>) {
    let mut state = cluster(
        32,
        vec![
            announcing("low-1", 0, 0, 1_500),
            announcing("low-2", 1, 0, 1_500),
        ],
    );
    state.apply(preempting_queue());
    let pass = plan(&mut state, at(0));
    land_all(&mut state, &pass.actions, 0);
    // Both gangs run: every pod Ready.
    let mut pods = Vec::new();
    for action in &pass.actions {
        if let Action::Release { gang, .. } = action {
            for pod in &gang.pods {
                pods.push(with_phase(pod.clone(), "Running", true));
            }
        }
    }
    for pod in &pods {
        state.apply(pod.clone());
    }
    let pass = plan(&mut state, at(10));
    land_all(&mut state, &pass.actions, 10);
    state.apply(announcing("high", 1_000, 100, 500));
    let pass = plan(&mut state, at(1_000));
    assert!(evicts(&pass.actions).is_empty(), "{:#?}", pass.actions);
    let status = written(&pass.actions, "team-a/high");
    let reason = status.as_ref().and_then(|s| s.pending_reason.clone());
    let Some(reason) = reason else {
        unreachable!("high's status says why it waits: {:#?}", pass.actions)
    };
    assert_eq!(reason.kind, PendingReasonKind::PreemptionDeferred);
    assert_eq!(reason.since.map(|t| t.0), Some(at(1_000)));
    assert_eq!(reason.eta.map(|t| t.0), Some(at(1_500)));
    let until = (at(2_800).as_second()).to_string();
    assert!(
        reason.message.contains(&format!("t={until}s")),
        "{}",
        reason.message
    );
    land_all(&mut state, &pass.actions, 1_000);
    (state, pods)
}

#[test]
fn a_deferred_preemptor_says_whom_it_would_evict_and_until_when() {
    let (mut state, _) = deferred();
    // Nothing changes while it waits: the same reason, no eviction.
    let pass = plan(&mut state, at(1_200));
    assert!(evicts(&pass.actions).is_empty(), "{:#?}", pass.actions);
    land_all(&mut state, &pass.actions, 1_200);
    // Past their announced end the low gangs are no longer about to leave: one is evicted.
    let pass = plan(&mut state, at(1_501));
    assert_eq!(evicts(&pass.actions).len(), 1, "{:#?}", pass.actions);
}

#[test]
fn a_new_leader_keeps_the_wait_bounded_from_its_first_moment() {
    let (state, pods) = deferred();
    // Another replica's first pass, on what the API server holds: it never saw high choose
    // to wait, yet its status says since when, and that moment stands.
    let mut fresh = cluster(32, Vec::new());
    fresh.apply(preempting_queue());
    for key in ["team-a/low-1", "team-a/low-2", "team-a/high"] {
        if let Some(j) = state.index().job(key) {
            fresh.apply(j.clone());
        }
    }
    for pod in pods {
        fresh.apply(pod);
    }
    let pass = plan(&mut fresh, at(1_100));
    assert!(evicts(&pass.actions).is_empty(), "{:#?}", pass.actions);
    let since = written(&pass.actions, "team-a/high")
        .and_then(|s| s.pending_reason)
        .and_then(|r| r.since)
        .map(|t| t.0);
    assert!(
        since.is_none() || since == Some(at(1_000)),
        "the wait is counted from t=1000, not from the new leader's first pass: {since:?}"
    );
}
