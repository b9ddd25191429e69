//! A pod group queued by Muster on a real control plane: plain pods labelled
//! `muster.dev/pod-group` (as an operator would make them) wait behind Muster's gate until
//! the whole group exists, then are admitted as one gang and let go together, each pinned to
//! a node of one block; the group's entry ends when every pod has.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use muster_api::GpuJob;
use serde_json::json;

use crate::support::{BLOCK, Env, always, bound_node, eventually, gated, phase, runs_for};

/// Pod `name` of group `group` of `size`, 8 GPUs, created behind Muster's gate (as the
/// admission policy makes it), required in one block, running `ms` milliseconds.
fn group_pod(name: &str, group: &str, size: u32, ms: u64) -> Pod {
    let mut annotations = runs_for(ms);
    annotations["muster.dev/topology-required"] = json!(BLOCK);
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a",
                     "labels": {"muster.dev/queue-name": "a", "muster.dev/pod-group": group,
                                "muster.dev/pod-group-size": size.to_string()},
                     "annotations": annotations},
        "spec": {"restartPolicy": "Never",
                 "schedulingGates": [{"name": "muster.dev/admission"}],
                 "containers": [{"name": "worker", "image": "registry.k8s.io/pause:3.10",
                                 "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}))
    .unwrap_or_else(|e| unreachable!("fixture {name}: {e}"))
}

async fn group_pods(env: &Env, group: &str) -> Vec<Pod> {
    let pods: Api<Pod> = env.api("team-a");
    pods.list(&ListParams::default().labels(&format!("muster.dev/pod-group={group}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_group_of_four_waits_for_its_last_pod_then_is_released_together_in_one_block() {
    let Some(env) = Env::start(false).await else {
        return;
    };
    env.h100().await;
    env.gpu_nodes("b1", &["n1", "n2", "n3"]).await;
    env.gpu_nodes("b2", &["n4", "n5", "n6", "n7"]).await;
    env.queue("a", "team-a", 64, json!({})).await;
    let controller = env.controller();
    let pods: Api<Pod> = env.api("team-a");
    for i in 0..3 {
        let pod = group_pod(&format!("ray-{i}"), "ray", 4, 3_000);
        if let Err(e) = pods.create(&PostParams::default(), &pod).await {
            unreachable!("creating pod {i}: {e}");
        }
    }

    // Three of four: no entry, every pod still gated.
    let entries: Api<GpuJob> = env.api("team-a");
    always(
        "three of four pods wait, gated, without an entry",
        5,
        || async {
            if entries.get_opt("pods-ray").await.ok().flatten().is_some() {
                return Err("an entry was made".to_owned());
            }
            let pods = group_pods(&env, "ray").await;
            match pods.iter().find(|p| !gated(p)) {
                Some(pod) => Err(format!("pod {:?} lost its gate", pod.metadata.name)),
                None => Ok(()),
            }
        },
    )
    .await;

    // The fourth: admitted as one gang of four, all let go together in one block.
    let last = group_pod("ray-3", "ray", 4, 3_000);
    if let Err(e) = pods.create(&PostParams::default(), &last).await {
        unreachable!("creating the last pod: {e}");
    }
    let admitted = env
        .until_status("team-a", "pods-ray", "admitted", 60, |s| {
            s.admission.is_some()
        })
        .await;
    let nodes = admitted.admission.unwrap_or_default().pod_sets[0]
        .nodes
        .clone();
    let released = eventually("the four pods bound, no gate left", 90, || async {
        let pods = group_pods(&env, "ray").await;
        (pods.len() == 4 && pods.iter().all(|p| bound_node(p).is_some() && !gated(p)))
            .then_some(pods)
    })
    .await;
    let bound: BTreeSet<String> = released.iter().filter_map(bound_node).collect();
    assert_eq!(bound.len(), 4, "one pod per node: {bound:?}");
    assert_eq!(
        bound,
        nodes.iter().cloned().collect::<BTreeSet<_>>(),
        "on the admission's nodes"
    );
    assert!(
        bound
            .iter()
            .all(|n| ["n4", "n5", "n6", "n7"].contains(&n.as_str())),
        "the one block with room for four: {bound:?}"
    );

    // Every pod succeeds: so does the group's entry, and it holds nothing.
    let done = env
        .until_status("team-a", "pods-ray", "Succeeded", 90, |s| {
            phase(s) == "Succeeded"
        })
        .await;
    assert!(done.admission.is_none(), "{done:?}");
    controller.stop().await;
}
