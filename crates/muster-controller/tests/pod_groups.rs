//! Pod groups through the controller's passes: nothing until the group is whole, then one
//! entry, a release that writes nothing and pins that let every pod go; a failed pod ends
//! the group once the others have ended instead of restarting it; an eviction deletes the
//! pods (nobody can suspend them).

mod support;

use k8s_openapi::api::core::v1::Pod;
use muster_api::gpujob::GpuJobPhase;
use muster_api::wire::ADMISSION_GATE;
use muster_controller::plan::{Action, plan};
use muster_controller::state::State;
use muster_controller::workload::WorkloadPatch;
use serde_json::{Value, json};
use support::{at, cluster, kinds, land_all, object, status_of};

/// Pod `i` of group `ray` of `size` pods of 8 GPUs each, in one block, behind the gate.
fn group_pod(i: usize, size: usize) -> Pod {
    object(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("ray-{i}"), "namespace": "team-a",
                     "uid": format!("uid-ray-{i}"), "resourceVersion": "1",
                     "labels": {"muster.dev/queue-name": "research", "muster.dev/pod-group": "ray",
                                "muster.dev/pod-group-size": size.to_string()},
                     "annotations": {"muster.dev/topology-required": "example.com/block"}},
        "spec": {"schedulingGates": [{"name": ADMISSION_GATE}],
                 "containers": [{"name": "main", "image": "ray:2",
                                 "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
        "status": {"phase": "Pending"},
    }))
}

/// The status of the queue entry the tests follow.
fn entry_status(state: &State) -> muster_api::GpuJobStatus {
    status_of(state, "team-a/pods-ray")
}

/// The passes at `times`, each landed, with every pin applied to its pod (one version on,
/// still Pending) as the API server would: the pins, by pod name.
fn passes_pinning(
    state: &mut State,
    times: std::ops::Range<i64>,
    size: usize,
) -> Vec<(String, Value)> {
    let mut pinned = Vec::new();
    for t in times {
        let pass = plan(state, at(t));
        land_all(state, &pass.actions, t);
        for action in &pass.actions {
            if let Action::Release { gang, .. } = action {
                let release = gang.workload.as_deref().unwrap_or_else(|| unreachable!());
                assert_eq!(release.patch, WorkloadPatch::Nothing, "nothing to write");
            }
            let Action::PinPods { pins, .. } = action else {
                continue;
            };
            for (key, patch) in pins {
                let i: usize = key.name().trim_start_matches("ray-").parse().unwrap_or(0);
                let mut value = serde_json::to_value(group_pod(i, size)).unwrap_or_default();
                json_patch::merge(&mut value, patch);
                value["metadata"]["resourceVersion"] = json!("2");
                state.apply(object::<Pod>(value));
                pinned.push((key.name().to_owned(), patch.clone()));
            }
        }
    }
    pinned
}

/// Two pods admitted and let go: each as its pin left it, bound, in `phases`' phase, one
/// version on.
fn admitted_and_running(state: &mut State, phases: [&str; 2]) -> Vec<(String, Value)> {
    state.apply(group_pod(0, 2));
    state.apply(group_pod(1, 2));
    let pins = passes_pinning(state, 10..16, 2);
    assert_eq!(pins.len(), 2, "both pods pinned, once");
    for (i, phase) in phases.iter().enumerate() {
        let patch = &pins[i].1;
        let mut value = serde_json::to_value(group_pod(i, 2)).unwrap_or_default();
        json_patch::merge(&mut value, patch);
        value["metadata"]["resourceVersion"] = json!("3");
        value["spec"]["nodeName"] = patch["spec"]["nodeSelector"]["kubernetes.io/hostname"].clone();
        value["status"]["phase"] = json!(phase);
        state.apply(object::<Pod>(value));
    }
    pins
}

#[test]
fn nothing_happens_until_the_group_is_whole_then_one_entry_is_made_and_every_pod_let_go() {
    let mut state = cluster(32, Vec::new());
    state.apply(group_pod(0, 2));
    for t in 0..5 {
        let pass = plan(&mut state, at(t));
        assert!(kinds(&pass.actions).is_empty(), "{:#?}", pass.actions);
        land_all(&mut state, &pass.actions, t);
    }
    state.apply(group_pod(1, 2));
    let pass = plan(&mut state, at(5));
    assert_eq!(kinds(&pass.actions), ["create_entry"]);
    land_all(&mut state, &pass.actions, 5);
    let pinned: Vec<(String, Value)> = passes_pinning(&mut state, 6..10, 2)
        .into_iter()
        .map(|(pod, patch)| {
            (
                pod,
                patch["spec"]["nodeSelector"]["kubernetes.io/hostname"].clone(),
            )
        })
        .collect();
    let nodes = entry_status(&state).admission.unwrap_or_default().pod_sets[0]
        .nodes
        .clone();
    assert_eq!(pinned.len(), 2, "{pinned:?}");
    for (i, (pod, node)) in pinned.iter().enumerate() {
        assert_eq!(pod, &format!("ray-{i}"));
        assert_eq!(node, &json!(nodes[i]));
    }
}

#[test]
fn a_failed_pod_does_not_restart_the_group_which_fails_once_every_pod_has_ended() {
    let mut state = cluster(32, Vec::new());
    let pins = admitted_and_running(&mut state, ["Running", "Failed"]);
    for t in 16..40 {
        let pass = plan(&mut state, at(t));
        assert!(
            !kinds(&pass.actions).contains(&"evict"),
            "at {t}: {:#?}",
            pass.actions
        );
        land_all(&mut state, &pass.actions, t);
    }
    assert!(
        entry_status(&state).admission.is_some(),
        "still holds its quota"
    );
    // The other pod ends: the group has failed, naming the pod.
    let mut value = serde_json::to_value(group_pod(0, 2)).unwrap_or_default();
    json_patch::merge(&mut value, &pins[0].1);
    value["metadata"]["resourceVersion"] = json!("4");
    value["spec"]["nodeName"] = json!("n1");
    value["status"]["phase"] = json!("Succeeded");
    state.apply(object::<Pod>(value));
    let pass = plan(&mut state, at(40));
    land_all(&mut state, &pass.actions, 40);
    let status = entry_status(&state);
    assert_eq!(status.phase, Some(GpuJobPhase::Failed), "{status:#?}");
    let said = status
        .conditions
        .iter()
        .map(|c| c.message.clone())
        .collect::<Vec<_>>()
        .join("; ");
    assert!(said.contains("ray-1"), "{said}");
}

#[test]
fn an_evicted_group_s_pods_are_deleted_as_nobody_can_suspend_them() {
    let mut state = cluster(32, Vec::new());
    admitted_and_running(&mut state, ["Running", "Running"]);
    // Never Ready: the pods-ready timeout evicts the gang.
    let evicted = (16..2_000).find_map(|t| {
        let pass = plan(&mut state, at(t));
        let found = pass.actions.iter().find_map(|a| match a {
            Action::Evict { pods, workload, .. } => Some((pods.len(), workload.clone())),
            _ => None,
        });
        land_all(&mut state, &pass.actions, t);
        found
    });
    assert_eq!(
        evicted,
        Some((2, None)),
        "both pods deleted, nothing suspended"
    );
}
