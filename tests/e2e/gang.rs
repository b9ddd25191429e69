//! Gangs on a real control plane, bound by the real kube-scheduler: released whole inside one
//! block, run to completion, quota handed on; waits with reasons; cohort borrowing and reclaim;
//! priority preemption of whole gangs.

use std::collections::BTreeSet;

use kube::api::Api;
use muster_api::ClusterQueue;
use serde_json::json;

use crate::support::{
    Env, bound_node, eventually, gated, gpu_job, phase, reason, runs_for,
    team_a_runs_its_own_gang_then_a_borrowed_one, team_b_reclaims_the_borrowed_gang,
};

/// The block each test node is in: nodes `n1`, `n2` in `b1`; `n3`, `n4` in `b2`.
fn block_of(node: &str) -> &'static str {
    if node == "n1" || node == "n2" {
        "b1"
    } else {
        "b2"
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_gang_runs_together_then_hands_its_quota_to_the_next_job() {
    let Some(env) = Env::start(false).await else {
        return;
    };
    env.h100().await;
    env.gpu_nodes("b1", &["n1", "n2"]).await;
    env.gpu_nodes("b2", &["n3", "n4"]).await;
    env.queue("a", "team-a", 16, json!({})).await;
    let controller = env.controller();

    // Long enough for its Running status (written once the gang has been Ready 5 s) and for
    // the next job's first status (written once it has waited 10 s) to show.
    env.submit(&gpu_job(
        "team-a",
        "first",
        2,
        8,
        &runs_for(20_000),
        json!({}),
    ))
    .await;

    // The whole gang is bound, both pods inside one block, no gate left.
    let nodes = eventually("first's gang bound", 60, || async {
        let pods = env.pods_of("team-a", "first").await;
        let nodes: Vec<String> = pods.iter().filter_map(bound_node).collect();
        (pods.len() == 2 && nodes.len() == 2 && !pods.iter().any(gated)).then_some(nodes)
    })
    .await;
    let blocks: BTreeSet<_> = nodes.iter().map(|n| block_of(n)).collect();
    assert_eq!(blocks.len(), 1, "one block: {nodes:?}");
    // Submitted now (creation times have a resolution of a second, and jobs created in the
    // same second are ordered by UID).
    env.submit(&gpu_job(
        "team-a",
        "second",
        2,
        8,
        &runs_for(1_000),
        json!({}),
    ))
    .await;

    // The second job waits for quota, saying so; the first runs, then succeeds.
    let waiting = env
        .until_status("team-a", "second", "waiting for quota", 30, |s| {
            reason(s) == "QuotaShort"
        })
        .await;
    assert!(
        env.pods_of("team-a", "second").await.is_empty(),
        "{waiting:?}"
    );
    env.until_status("team-a", "first", "Running", 30, |s| phase(s) == "Running")
        .await;
    let done = env
        .until_status("team-a", "first", "Succeeded", 60, |s| {
            phase(s) == "Succeeded"
        })
        .await;
    assert!(done.admission.is_none() || done.completion_time.is_some());

    // Its quota goes to the second job, which runs to the end too; the queue is empty again.
    env.until_status("team-a", "second", "Succeeded", 60, |s| {
        phase(s) == "Succeeded"
    })
    .await;
    let queues: Api<ClusterQueue> = env.all();
    eventually("queue a's usage back to zero", 30, || async {
        let status = queues.get("a").await.ok()?.status?;
        (status.admitted_jobs == 0
            && status
                .flavors_usage
                .iter()
                .flat_map(|f| &f.resources)
                .all(|r| r.total.0 == "0"))
        .then_some(())
    })
    .await;
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn borrowing_reclaim_and_priority_preemption_move_whole_gangs() {
    let Some(env) = Env::start(false).await else {
        return;
    };
    env.h100().await;
    env.gpu_nodes("b1", &["n1", "n2"]).await;
    env.gpu_nodes("b2", &["n3", "n4"]).await;
    let cohort = json!({"cohort": "ml", "preemption": {
        "reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}});
    env.queue("a", "team-a", 16, cohort.clone()).await;
    env.queue("b", "team-b", 16, cohort).await;
    let controller = env.controller();

    // Team a uses its own 16 GPUs and borrows team b's idle 16.
    let borrowed_pods =
        team_a_runs_its_own_gang_then_a_borrowed_one(&env, json!({"priority": 10})).await;

    // Team b wants its quota back: the borrowing gang is evicted whole and requeued.
    team_b_reclaims_the_borrowed_gang(&env, &borrowed_pods).await;

    // A higher-priority job of team a preempts team a's own lower-priority gang.
    env.submit(&gpu_job(
        "team-a",
        "urgent",
        2,
        8,
        &json!({}),
        json!({"priority": 100}),
    ))
    .await;
    env.until_status("team-a", "urgent", "Running", 90, |s| phase(s) == "Running")
        .await;
    let victim = env
        .until_status("team-a", "own", "preempted", 30, |s| {
            s.requeue_count >= 1 && s.admission.is_none()
        })
        .await;
    assert_ne!(phase(&victim), "Running");
    // Team b's gang was never touched.
    let reclaim = env.status("team-b", "reclaim").await.unwrap_or_default();
    assert_eq!(
        (phase(&reclaim).as_str(), reclaim.requeue_count),
        ("Running", 0)
    );
    controller.stop().await;
}
