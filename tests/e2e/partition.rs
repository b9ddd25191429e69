//! A running gang's node is partitioned: NotReady (Ready `Unknown`, as the node lifecycle
//! controller writes it once heartbeats stop) while its pod runs on unseen. Muster restarts
//! the gang, but never runs the new attempt beside the old pod: it waits until the pod is
//! gone — the partition heals and the kubelet confirms its deletion — or until an admin says
//! the machine is down (the `node.kubernetes.io/out-of-service` taint), and meanwhile says
//! why it waits, in the job's status and a Warning event.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};
use muster_api::wire::{ATTEMPT_LABEL, OUT_OF_SERVICE_TAINT};
use muster_testkit::nodes::{heal_node, partition_node};
use serde_json::json;

use crate::support::{Env, always, bound_node, eventually, gpu_job, phase, reason};

fn attempt(pod: &Pod) -> &str {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(ATTEMPT_LABEL))
        .map_or("", String::as_str)
}

fn pod_phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

/// A two-pod gang of 8 GPUs each running on three nodes of one block; returns the node of
/// one of its pods, partitioned, and that pod's name once the gang was restarted.
async fn partition_a_running_gang(env: &Env) -> (String, String) {
    env.h100().await;
    env.gpu_nodes("b1", &["n1", "n2", "n3"]).await;
    env.queue("a", "team-a", 24, json!({})).await;
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
    let (victim, stranded) = pods
        .iter()
        .find_map(|p| Some((bound_node(p)?, p.metadata.name.clone()?)))
        .unwrap_or_default();
    if let Err(e) = partition_node(&env.client, &victim).await {
        unreachable!("partitioning node {victim}: {e:#}");
    }
    env.until_status("team-a", "train", "restarted", 60, |s| s.restart_count >= 1)
        .await;
    (victim, stranded)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_node_holds_the_restart_until_its_pod_is_gone_and_says_why() {
    let Some(env) = Env::start(false).await else {
        return;
    };
    let controller = env.controller();
    let (victim, stranded) = partition_a_running_gang(&env).await;

    // A restart writes the status first and deletes the old pods next: until that delete is
    // asked for, too, no pod of a new attempt may exist.
    eventually("the stranded pod's deletion asked for", 30, || async {
        let pods = env.pods_of("team-a", "train").await;
        let attempts: BTreeSet<&str> = pods.iter().map(attempt).collect();
        assert!(attempts.len() <= 1, "pods of attempts {attempts:?} at once");
        pods.iter()
            .find(|p| p.metadata.name.as_deref() == Some(stranded.as_str()))
            .filter(|p| p.metadata.deletion_timestamp.is_some())
            .map(|_| ())
    })
    .await;
    // The old pod runs on, Terminating and unseen; no pod of a new attempt exists meanwhile.
    always("one attempt at a time", 15, || async {
        let pods = env.pods_of("team-a", "train").await;
        let old = pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(stranded.as_str()));
        match old {
            Some(p) if p.metadata.deletion_timestamp.is_some() && pod_phase(p) == "Running" => {}
            other => return Err(format!("the partitioned pod is not running on: {other:?}")),
        }
        let attempts: BTreeSet<&str> = pods.iter().map(attempt).collect();
        if attempts.len() > 1 {
            return Err(format!("pods of attempts {attempts:?} at once"));
        }
        Ok(())
    })
    .await;

    // Past the bound, the status and a Warning event say which pod, which node, and the fix.
    let waiting = env
        .until_status("team-a", "train", "says it waits on the node", 90, |s| {
            reason(s) == "NodeUnreachable"
        })
        .await;
    let message = waiting
        .pending_reason
        .map(|r| r.message)
        .unwrap_or_default();
    for needle in [
        victim.as_str(),
        stranded.as_str(),
        "Ready Unknown",
        "out-of-service",
    ] {
        assert!(message.contains(needle), "{needle}: {message}");
    }
    let events: Api<Event> = env.api("team-a");
    eventually("a NodeUnreachable Warning event", 30, || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("NodeUnreachable")
                    && e.type_.as_deref() == Some("Warning")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("train")
            })
            .then_some(())
    })
    .await;
    assert!(
        env.pods_of("team-a", "train")
            .await
            .iter()
            .all(|p| attempt(p) == "0"),
        "no new attempt while the old pod may run"
    );

    // The partition heals: the kubelet removes the pod deleted meanwhile, and only then does
    // the gang start again.
    if let Err(e) = heal_node(&env.client, &victim).await {
        unreachable!("healing node {victim}: {e:#}");
    }
    eventually("the new attempt running whole, alone", 90, || async {
        let status = env.status("team-a", "train").await?;
        let pods = env.pods_of("team-a", "train").await;
        let running = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && pod_phase(p) == "Running")
            .count();
        (phase(&status) == "Running" && running == 2 && pods.iter().all(|p| attempt(p) != "0"))
            .then_some(())
    })
    .await;
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_out_of_service_taint_lets_the_gang_restart_past_a_partitioned_node() {
    let Some(env) = Env::start(false).await else {
        return;
    };
    let controller = env.controller();
    let (victim, stranded) = partition_a_running_gang(&env).await;

    // An admin knows the machine is off, and says so.
    let nodes: Api<Node> = env.all();
    let node = match nodes.get(&victim).await {
        Ok(node) => node,
        Err(e) => unreachable!("reading node {victim}: {e}"),
    };
    let mut taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
    taints.push(
        serde_json::from_value(json!({
        "key": OUT_OF_SERVICE_TAINT, "value": "nodeshutdown",
        "effect": "NoExecute"}))
        .unwrap_or_default(),
    );
    let patch = json!({"spec": {"taints": taints}});
    if let Err(e) = nodes
        .patch(&victim, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        unreachable!("tainting node {victim}: {e}");
    }

    // The gang runs again on the other nodes, while the old pod's object still lingers (no
    // pod garbage collector runs here): the taint alone let it go.
    let nodes_used = eventually("the new attempt running on the other nodes", 90, || async {
        let status = env.status("team-a", "train").await?;
        let pods = env.pods_of("team-a", "train").await;
        let new: Vec<String> = pods
            .iter()
            .filter(|p| attempt(p) != "0" && pod_phase(p) == "Running")
            .filter_map(bound_node)
            .collect();
        (phase(&status) == "Running" && new.len() == 2).then_some(new)
    })
    .await;
    assert!(
        !nodes_used.contains(&victim),
        "{nodes_used:?} avoid {victim}"
    );
    let pods: Api<Pod> = env.api("team-a");
    assert!(
        pods.get_opt(&stranded).await.ok().flatten().is_some(),
        "the old pod is still there, Terminating on the tainted node"
    );
    controller.stop().await;
}
