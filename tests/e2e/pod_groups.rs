//! A pod group queued by Muster on a real control plane: plain pods labelled
//! `muster.dev/pod-group` (as an operator would make them) wait behind Muster's gate until
//! the whole group exists, then are admitted as one gang and let go together, each pinned to
//! a node of one block; the group's entry ends when every pod has.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1alpha2::PodGroup as SchedulingPodGroup;
use kube::api::{Api, ListParams, PostParams};
use muster_api::GpuJob;
use serde_json::json;

use crate::support::{BLOCK, Env, always, bound_node, eventually, gated, gpu_job, phase, runs_for};

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

/// Pod `name` naming the `scheduling.k8s.io` PodGroup `group` (KEP-4671), with the queue
/// label and Muster's gate, 8 GPUs, in one block.
fn scheduled_pod(name: &str, group: &str) -> Pod {
    let mut value = serde_json::to_value(group_pod(name, group, 0, 60_000)).unwrap_or_default();
    if let Some(labels) = value["metadata"]["labels"].as_object_mut() {
        labels.remove("muster.dev/pod-group");
        labels.remove("muster.dev/pod-group-size");
    }
    value["spec"]["schedulingGroup"] = json!({"podGroupName": group});
    serde_json::from_value(value).unwrap_or_else(|e| unreachable!("fixture {name}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_gang_gates_on_a_labelled_pod_group_of_four_is_admitted_and_bound_all_or_nothing()
{
    let Some(env) = Env::start_with(muster_testkit::ClusterOptions {
        feature_gates: "GenericWorkload=true,GangScheduling=true",
        runtime_config: "scheduling.k8s.io/v1alpha2=true",
        ..muster_testkit::ClusterOptions::default()
    })
    .await
    else {
        return;
    };
    env.h100().await;
    env.gpu_nodes("b1", &["n1", "n2", "n3", "n4"]).await;
    env.gpu_nodes("b2", &["n5", "n6"]).await;
    env.queue("a", "team-a", 64, json!({})).await;
    let controller = env.controller();
    let groups: Api<SchedulingPodGroup> = env.api("team-a");
    let group: SchedulingPodGroup = serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "team-a",
                     "labels": {"muster.dev/queue-name": "a"}},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}}}))
    .unwrap_or_else(|e| unreachable!("fixture: {e}"));
    if let Err(e) = groups.create(&PostParams::default(), &group).await {
        unreachable!("creating the PodGroup: {e}");
    }
    let pods: Api<Pod> = env.api("team-a");
    for i in 0..4 {
        let pod = scheduled_pod(&format!("train-{i}"), "train");
        if let Err(e) = pods.create(&PostParams::default(), &pod).await {
            unreachable!("creating pod {i}: {e}");
        }
    }
    let admitted = env
        .until_status("team-a", "pods-train", "admitted", 60, |s| {
            s.admission.is_some()
        })
        .await;
    let nodes: BTreeSet<String> = admitted.admission.unwrap_or_default().pod_sets[0]
        .nodes
        .iter()
        .cloned()
        .collect();
    let bound = eventually("the four pods bound together", 90, || async {
        let all = group_pods_of(&pods, "train").await;
        let bound: BTreeSet<String> = all.iter().filter_map(bound_node).collect();
        (all.len() == 4 && bound.len() == 4 && all.iter().all(|p| !gated(p))).then_some(bound)
    })
    .await;
    assert_eq!(bound, nodes, "on the admission's nodes");
    // kube-scheduler scheduled them as one gang.
    let scheduled = eventually("the PodGroup says it was scheduled", 30, || async {
        let group = groups.get("train").await.ok()?;
        group
            .status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "PodGroupScheduled" && c.status == "True")
    })
    .await;
    eprintln!("PodGroupScheduled: {:?}", scheduled.reason);

    // Muster's own gang, a GpuJob of two pods, is released through a gang PodGroup of its own:
    // made before its pods, owned by the job, named by each pod, and scheduled as one.
    env.submit(&gpu_job(
        "team-a",
        "solo",
        2,
        8,
        &runs_for(60_000),
        json!({}),
    ))
    .await;
    let made = eventually("the GpuJob's PodGroup, scheduled", 90, || async {
        let group = groups.get("solo-0").await.ok()?;
        let scheduled = group
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .any(|c| c.type_ == "PodGroupScheduled" && c.status == "True");
        scheduled.then_some(group)
    })
    .await;
    let gang = made.spec.scheduling_policy.gang.map(|g| g.min_count);
    assert_eq!(gang, Some(2));
    let owner = made.metadata.owner_references.unwrap_or_default();
    assert!(
        owner.iter().any(|o| o.kind == "GpuJob" && o.name == "solo"),
        "{owner:?}"
    );
    let solo = env.pods_of("team-a", "solo").await;
    assert_eq!(solo.len(), 2);
    for pod in &solo {
        let named = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_group.as_ref())
            .and_then(|g| g.pod_group_name.clone());
        assert_eq!(named.as_deref(), Some("solo-0"));
        assert!(bound_node(pod).is_some());
    }
    controller.stop().await;
}

/// The pods that name the `scheduling.k8s.io` PodGroup `group`.
async fn group_pods_of(pods: &Api<Pod>, group: &str) -> Vec<Pod> {
    pods.list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.scheduling_group.as_ref())
                .and_then(|g| g.pod_group_name.as_deref())
                == Some(group)
        })
        .collect()
}
