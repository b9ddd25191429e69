//! A gang that goes wrong on a real control plane: pods not Ready in time evict the whole gang
//! and requeue it with backoff; a node that dies restarts the whole gang elsewhere.

use std::collections::BTreeSet;

use serde_json::json;

use crate::support::{Env, bound_node, eventually, gpu_job, never_ready, phase, reason};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_not_ready_in_time_evict_the_gang_and_requeue_it_with_backoff() {
    let Some(env) = Env::start(false).await else {
        return;
    };
    env.h100().await;
    env.gpu_nodes("b1", &["n1", "n2"]).await;
    env.queue("a", "team-a", 16, json!({})).await;
    let controller = env.controller();
    env.submit(&gpu_job(
        "team-a",
        "stuck",
        2,
        8,
        &never_ready(),
        json!({"podsReadyTimeoutSeconds": 8}),
    ))
    .await;
    let first: BTreeSet<String> = eventually("the gang bound", 60, || async {
        let pods = env.pods_of("team-a", "stuck").await;
        (pods.len() == 2 && pods.iter().all(|p| bound_node(p).is_some())).then(|| {
            pods.iter()
                .filter_map(|p| p.metadata.name.clone())
                .collect()
        })
    })
    .await;
    let evicted = env
        .until_status("team-a", "stuck", "evicted after the timeout", 60, |s| {
            s.requeue_count == 1
        })
        .await;
    assert_eq!(reason(&evicted), "Backoff", "{evicted:?}");
    assert!(
        evicted
            .pending_reason
            .as_ref()
            .is_some_and(|r| r.eta.is_some()),
        "a backoff says when it ends: {evicted:?}"
    );
    // Every pod of the first attempt goes; the next attempt comes after the backoff.
    eventually("the first attempt's pods gone", 30, || async {
        let pods = env.pods_of("team-a", "stuck").await;
        pods.iter()
            .all(|p| !first.contains(p.metadata.name.as_deref().unwrap_or_default()))
            .then_some(())
    })
    .await;
    env.until_status("team-a", "stuck", "admitted again", 90, |s| {
        s.requeue_count == 1 && s.admission.is_some()
    })
    .await;
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_node_restarts_the_whole_gang_on_healthy_nodes() {
    let Some(env) = Env::start(false).await else {
        return;
    };
    env.h100().await;
    env.gpu_nodes("b1", &["n1", "n2", "n3"]).await;
    env.queue("a", "team-a", 24, json!({})).await;
    let controller = env.controller();
    env.submit(&gpu_job(
        "team-a",
        "train",
        2,
        8,
        &json!({}),
        json!({"backoffLimit": 3}),
    ))
    .await;
    env.until_status("team-a", "train", "Running", 60, |s| phase(s) == "Running")
        .await;
    let pods = env.pods_of("team-a", "train").await;
    let victim = pods.iter().find_map(bound_node).unwrap_or_default();
    if let Err(e) = muster_testkit::nodes::kill_node(&env.client, &victim).await {
        unreachable!("killing node {victim}: {e:#}");
    }
    let restarted = env
        .until_status("team-a", "train", "restarted", 60, |s| s.restart_count >= 1)
        .await;
    assert!(restarted.restart_count >= 1);
    // The new attempt runs whole, on nodes that are alive.
    let nodes = eventually("the new attempt running", 90, || async {
        let status = env.status("team-a", "train").await?;
        if phase(&status) != "Running" {
            return None;
        }
        let pods = env.pods_of("team-a", "train").await;
        let live: Vec<_> = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .filter_map(bound_node)
            .collect();
        (live.len() == 2).then_some(live)
    })
    .await;
    assert!(!nodes.contains(&victim), "{nodes:?} avoid {victim}");
    controller.stop().await;
}
