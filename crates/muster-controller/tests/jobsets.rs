//! Labelled JobSets through the controller's passes: the queue entry made and the JobSet held
//! suspended, its child Jobs never queued by themselves, the release written into its
//! replicated Jobs' templates by one JSON patch, each pod pinned by its replica, and an
//! eviction that suspends the JobSet and waits for its gang's pods to be gone before the
//! JobSet is released again.

mod support;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use muster_api::jobset::JobSet;
use muster_api::wire::{ADMISSION_GATE, ATTEMPT_LABEL, JOB_LABEL, POD_SET_LABEL};
use muster_controller::index::ChildJob;
use muster_controller::plan::{Action, plan};
use muster_controller::state::State;
use muster_controller::workload::WorkloadPatch;
use serde_json::{Value, json};
use support::{at, cluster, kinds, land_all, object, status_of};

/// A JobSet of two child Jobs of two 8-GPU pods each, each child Job alone in one block
/// (the exclusive-topology annotation), labelled for the queue.
fn labelled_jobset(suspend: bool) -> JobSet {
    object(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "train", "namespace": "team-a", "uid": "uid-js",
                     "resourceVersion": "1", "labels": {"muster.dev/queue-name": "research"},
                     "annotations": {"alpha.jobset.sigs.k8s.io/exclusive-topology": "example.com/block"}},
        "spec": {"suspend": suspend, "replicatedJobs": [{
            "name": "workers", "replicas": 2,
            "template": {"spec": {
                "parallelism": 2, "completions": 2, "completionMode": "Indexed",
                "template": {"spec": {"restartPolicy": "Never", "containers": [{
                    "name": "main", "image": "trainer:1",
                    "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}}}]},
    }))
}

/// The JobSet with `patch` applied, as the API server would apply it (one version on).
fn patched(jobset: &JobSet, patch: &WorkloadPatch) -> JobSet {
    let mut doc = serde_json::to_value(bumped(jobset)).unwrap_or_default();
    match patch {
        WorkloadPatch::Json(ops) => {
            let ops: json_patch::Patch =
                serde_json::from_value(ops.clone()).unwrap_or_else(|e| unreachable!("{e}"));
            json_patch::patch(&mut doc, &ops).unwrap_or_else(|e| unreachable!("{e}"));
        }
        WorkloadPatch::Merge(body) => json_patch::merge(&mut doc, body),
        WorkloadPatch::Nothing => {}
    }
    object(doc)
}

/// The JobSet one resource version on.
fn bumped(jobset: &JobSet) -> JobSet {
    let mut next = jobset.clone();
    let version: u64 = next
        .metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    next.metadata.resource_version = Some((version + 1).to_string());
    next
}

/// A pod of replica `replica` of the JobSet's child Jobs, completion index `index`, made
/// from the released template: gated, with the gang's labels.
fn child_pod(replica: usize, index: usize, attempt: i32) -> Pod {
    child_pod_of("workers", replica, index, attempt)
}

/// A pod of replica `replica` of the child Jobs of the replicated Job `rj`, completion index
/// `index`, made from the released template (see [`child_pod`]).
fn child_pod_of(rj: &str, replica: usize, index: usize, attempt: i32) -> Pod {
    let child = format!("train-{rj}-{replica}");
    object(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("{child}-{index}-x{attempt}"), "namespace": "team-a",
            "resourceVersion": "1",
            "labels": {
                "batch.kubernetes.io/job-name": child,
                "batch.kubernetes.io/job-completion-index": index.to_string(),
                "jobset.sigs.k8s.io/jobset-name": "train",
                "jobset.sigs.k8s.io/replicatedjob-name": rj,
                "jobset.sigs.k8s.io/job-index": replica.to_string(),
                JOB_LABEL: "jobset-train", POD_SET_LABEL: rj,
                ATTEMPT_LABEL: attempt.to_string(),
            },
            "annotations": {"muster.dev/cluster-queue": "research", "muster.dev/flavor": "h100"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": child,
                                 "uid": format!("uid-{child}"), "controller": true}],
        },
        "spec": {
            "schedulingGates": [{"name": ADMISSION_GATE}],
            "nodeSelector": {"gpu": "h100"},
            "containers": [{"name": "main", "image": "trainer:1",
                            "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
        },
        "status": {"phase": "Pending"},
    }))
}

/// The workload release of the passes at `times`, each pass landed.
fn released_by(
    state: &mut State,
    times: std::ops::Range<i64>,
) -> muster_controller::release::WorkloadRelease {
    let mut release = None;
    for t in times {
        let pass = plan(state, at(t));
        if let Some(Action::Release { gang, .. }) =
            pass.actions.iter().find(|a| a.kind() == "release")
        {
            release = gang.workload.as_deref().cloned();
        }
        land_all(state, &pass.actions, t);
    }
    release.unwrap_or_else(|| unreachable!("never released"))
}

/// The JobSet's four pods as the pins left them, bound and running — but for replica 1's
/// pod 1, which failed.
fn run_pinned(state: &mut State, pins: &[(muster_api::ObjectRef, Value)]) {
    for replica in 0..2 {
        for index in 0..2 {
            let pod = child_pod(replica, index, 0);
            let patch = pins
                .iter()
                .find(|(p, _)| Some(p.name()) == pod.metadata.name.as_deref())
                .map_or(Value::Null, |(_, patch)| patch.clone());
            let mut value = serde_json::to_value(&pod).unwrap_or_default();
            json_patch::merge(&mut value, &patch);
            value["spec"]["nodeName"] =
                patch["spec"]["nodeSelector"]["kubernetes.io/hostname"].clone();
            value["status"]["phase"] = json!(if replica == 1 && index == 1 {
                "Failed"
            } else {
                "Running"
            });
            state.apply(object::<Pod>(value));
        }
    }
}

/// `pod` bound and running, being deleted (a newer version than any the test applied).
fn terminating(pod: Pod) -> Pod {
    let mut value = serde_json::to_value(pod).unwrap_or_default();
    value["metadata"]["resourceVersion"] = json!("9");
    value["metadata"]["deletionTimestamp"] = json!("2026-11-26T00:00:00Z");
    value["spec"]["schedulingGates"] = Value::Null;
    value["spec"]["nodeName"] = json!("n1");
    value["status"]["phase"] = json!("Running");
    object(value)
}

/// The status of the queue entry the tests follow.
fn entry_status(state: &State) -> muster_api::GpuJobStatus {
    status_of(state, "team-a/jobset-train")
}

#[test]
fn a_labelled_jobset_gets_an_entry_is_suspended_and_its_child_jobs_are_never_queued_alone() {
    let mut state = cluster(32, Vec::new());
    state.apply(labelled_jobset(false));
    // A child Job that carries the queue label from its template is the JobSet's.
    let child: Job = object(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "train-workers-0", "namespace": "team-a", "uid": "uid-child",
                     "labels": {"muster.dev/queue-name": "research"},
                     "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2",
                                          "kind": "JobSet", "name": "train", "uid": "uid-js",
                                          "controller": true}]},
        "spec": {"template": {"spec": {"containers": [{"name": "main", "image": "trainer:1"}]}}},
    }));
    state.apply(child);
    let pass = plan(&mut state, at(10));
    assert_eq!(kinds(&pass.actions), ["create_entry", "patch_workload"]);
    let Some(Action::CreateEntry { entry, .. }) = pass.actions.first() else {
        unreachable!("{:#?}", pass.actions)
    };
    assert_eq!(entry.metadata.name.as_deref(), Some("jobset-train"));
    let sets: Vec<(&str, i32)> = entry
        .spec
        .pod_sets
        .iter()
        .map(|s| (s.name.as_str(), s.count))
        .collect();
    assert_eq!(sets, [("workers-0", 2), ("workers-1", 2)]);
    let Some(Action::PatchWorkload {
        workload, patch, ..
    }) = pass.actions.get(1)
    else {
        unreachable!()
    };
    assert_eq!(workload.to_string(), "JobSet team-a/train");
    assert_eq!(*patch.body(), json!({"spec": {"suspend": true}}));
}

#[test]
fn a_jobset_is_released_by_one_json_patch_its_replicas_pinned_each_to_its_block_then_restarted_once_its_pods_are_gone()
 {
    let mut state = cluster(32, Vec::new());
    let jobset = labelled_jobset(true);
    state.apply(jobset.clone());
    let release = released_by(&mut state, 10..14);
    assert!(matches!(release.patch, WorkloadPatch::Json(_)));
    let released = patched(&jobset, &release.patch);
    assert_eq!(released.spec.suspend, Some(false));
    state.apply(released.clone());
    let admission = entry_status(&state).admission.unwrap_or_default();
    let blocks: Vec<Vec<String>> = admission.pod_sets.iter().map(|p| p.nodes.clone()).collect();
    assert_eq!(blocks.len(), 2, "{blocks:?}");

    // Every pod of both child Jobs exists: each replica pinned to the nodes of its own pod set.
    for replica in 0..2 {
        for index in 0..2 {
            state.apply(child_pod(replica, index, 0));
        }
    }
    let pass = plan(&mut state, at(14));
    let Some(Action::PinPods { pins, .. }) = pass.actions.iter().find(|a| a.kind() == "pin_pods")
    else {
        unreachable!("{:#?}", pass.actions)
    };
    assert_eq!(pins.len(), 4);
    for (pod, patch) in pins {
        let replica = usize::from(pod.name().starts_with("train-workers-1"));
        let index = usize::from(pod.name().contains("-1-x"));
        assert_eq!(
            patch["spec"]["nodeSelector"]["kubernetes.io/hostname"],
            json!(blocks[replica][index]),
            "{pod}"
        );
        assert_eq!(
            patch["metadata"]["labels"][POD_SET_LABEL],
            json!(format!("workers-{replica}"))
        );
    }
    land_all(&mut state, &pass.actions, 14);
    run_pinned(&mut state, pins);
    // A pod fails: the entry is evicted by suspending the JobSet, no pod deleted by Muster.
    let pass = plan(&mut state, at(15));
    let Some(Action::Evict { pods, workload, .. }) =
        pass.actions.iter().find(|a| a.kind() == "evict")
    else {
        unreachable!("{:#?}", pass.actions)
    };
    assert!(pods.is_empty());
    assert_eq!(
        workload.as_ref().map(ToString::to_string).as_deref(),
        Some("JobSet team-a/train")
    );
    land_all(&mut state, &pass.actions, 15);
    let mut suspended = bumped(&released);
    suspended.spec.suspend = Some(true);
    state.apply(suspended.clone());

    // Its child Jobs' pods are still terminating (Muster's deletes of the old attempt, and
    // the Job controller's, not yet done): neither put back nor released.
    for t in 16..100 {
        let pass = plan(&mut state, at(t));
        let found = kinds(&pass.actions);
        assert!(
            !found.contains(&"release") && !found.contains(&"patch_workload"),
            "at {t}: {:#?}",
            pass.actions
        );
        land_all(&mut state, &pass.actions, t);
        if found.contains(&"delete_pods") {
            // The deletes are accepted; the pods terminate for a while.
            for replica in 0..2 {
                for index in 0..2 {
                    state.apply(terminating(child_pod(replica, index, 0)));
                }
            }
        }
    }
    // Once they are gone, the templates are put back and the JobSet is released again.
    for replica in 0..2 {
        for index in 0..2 {
            state.delete(&terminating(child_pod(replica, index, 0)));
        }
    }
    let mut put_back = false;
    let mut current = suspended;
    let released = (100..700).any(|t| {
        let pass = plan(&mut state, at(t));
        for action in &pass.actions {
            if let Action::PatchWorkload { patch, .. } = action {
                put_back = true;
                current = patched(&current, patch);
                state.apply(current.clone());
            }
        }
        land_all(&mut state, &pass.actions, t);
        kinds(&pass.actions).contains(&"release")
    });
    assert!(
        put_back,
        "the release's labels and gate were taken back first"
    );
    assert!(released, "released again");
}

/// `pod` as its kubelet last reported it: bound to the node its pin named, in `phase`.
fn ran_as_pinned(pod: &Pod, pins: &[(muster_api::ObjectRef, Value)], phase: &str) -> Pod {
    let patch = pins
        .iter()
        .find(|(p, _)| Some(p.name()) == pod.metadata.name.as_deref())
        .map_or(Value::Null, |(_, patch)| patch.clone());
    let mut value = serde_json::to_value(pod).unwrap_or_default();
    json_patch::merge(&mut value, &patch);
    value["metadata"]["resourceVersion"] = json!("5");
    value["spec"]["nodeName"] = patch["spec"]["nodeSelector"]["kubernetes.io/hostname"].clone();
    value["status"]["phase"] = json!(phase);
    object(value)
}

/// The pins of the pass at `t`, landed.
fn pinned_at(state: &mut State, t: i64) -> Vec<(muster_api::ObjectRef, Value)> {
    let pass = plan(state, at(t));
    let Some(Action::PinPods { pins, .. }) = pass.actions.iter().find(|a| a.kind() == "pin_pods")
    else {
        unreachable!("{:#?}", pass.actions)
    };
    let pins = pins.clone();
    land_all(state, &pass.actions, t);
    pins
}

/// `jobset` released and its `pods` (attempt 0) pinned; then each in its phase of `ran`,
/// a failure among them evicting the gang at 15, and the JobSet suspended by Muster with the
/// child Jobs its controller reports in `status` (`replicatedJobsStatus`), the pods gone but
/// those that succeeded. The JobSet as it then stands.
fn evicted_after_running(
    state: &mut State,
    jobset: &JobSet,
    pods: &[Pod],
    ran: &[&str],
    status: &Value,
) -> JobSet {
    state.apply(jobset.clone());
    let release = released_by(state, 10..14);
    let released = patched(jobset, &release.patch);
    state.apply(released.clone());
    for pod in pods {
        state.apply(pod.clone());
    }
    let pins = pinned_at(state, 14);
    assert_eq!(pins.len(), pods.len());
    for (pod, phase) in pods.iter().zip(ran) {
        state.apply(ran_as_pinned(pod, &pins, phase));
    }
    let pass = plan(state, at(15));
    assert!(
        kinds(&pass.actions).contains(&"evict"),
        "{:#?}",
        pass.actions
    );
    land_all(state, &pass.actions, 15);
    // The JobSet controller suspends the child Jobs still active and keeps those that
    // completed.
    let suspended: JobSet = object({
        let mut value = serde_json::to_value(bumped(&released)).unwrap_or_default();
        value["spec"]["suspend"] = json!(true);
        value["status"] = json!({"replicatedJobsStatus": status});
        value
    });
    state.apply(suspended.clone());
    // Its pods that had not succeeded are gone (Muster's deletes of the old attempt, and the
    // Job controller's); those that succeeded stay, as their Jobs keep them.
    for (pod, phase) in pods.iter().zip(ran) {
        if *phase != "Succeeded" {
            state.delete(&terminating(pod.clone()));
        }
    }
    suspended
}

/// The passes from 16 on until one releases the JobSet again, each landed and every patch
/// of the JobSet applied: the pass's time, the JobSet as it then stands, and the release.
fn released_again(
    state: &mut State,
    mut current: JobSet,
) -> (i64, JobSet, muster_controller::release::WorkloadRelease) {
    for t in 16..700 {
        let pass = plan(state, at(t));
        let mut release = None;
        for action in &pass.actions {
            match action {
                Action::PatchWorkload { patch, .. } => {
                    current = patched(&current, patch);
                    state.apply(current.clone());
                }
                Action::Release { gang, .. } => release = gang.workload.as_deref().cloned(),
                _ => {}
            }
        }
        land_all(state, &pass.actions, t);
        if let Some(release) = release {
            return (t, current, release);
        }
    }
    unreachable!("never released again")
}

/// The entry's pod sets, names and counts.
fn entry_sets(state: &State) -> Vec<(String, i32)> {
    state
        .index()
        .job("team-a/jobset-train")
        .map(|e| {
            e.spec
                .pod_sets
                .iter()
                .map(|s| (s.name.clone(), s.count))
                .collect()
        })
        .unwrap_or_default()
}

/// The exclusive-topology JobSet released and run: replica 0's child Job completes, replica
/// 1's pod of index 0 ends in `index_0` and its pod of index 1 fails. Evicted, it is released
/// again at the time returned. With `collected`, the pods that succeeded are gone before
/// that (their nodes taken back by the autoscaler, the pod garbage collector deleted them),
/// and only the child Jobs count their completions.
fn released_after_replica_0(state: &mut State, index_0: &str, collected: bool) -> i64 {
    let pods: Vec<Pod> = (0..2)
        .flat_map(|replica| (0..2).map(move |index| child_pod(replica, index, 0)))
        .collect();
    let ran = ["Succeeded", "Succeeded", index_0, "Failed"];
    let suspended = evicted_after_running(
        state,
        &labelled_jobset(true),
        &pods,
        &ran,
        &json!([{"name": "workers", "succeeded": 1, "active": 0}]),
    );
    if collected {
        for (pod, phase) in pods.iter().zip(ran) {
            if phase == "Succeeded" {
                state.delete(&terminating(pod.clone()));
            }
        }
        state.apply(child_job(0, "0-1"));
        let replica_1 = if index_0 == "Succeeded" { "0" } else { "" };
        state.apply(child_job(1, replica_1));
    }
    released_again(state, suspended).0
}

/// Replica `replica`'s child Job of the JobSet, its `status.completedIndexes` `completed`.
fn child_job(replica: usize, completed: &str) -> ChildJob {
    let name = format!("train-workers-{replica}");
    object(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "team-a", "resourceVersion": "3",
                     "uid": format!("uid-{name}"),
                     "labels": {"jobset.sigs.k8s.io/jobset-name": "train",
                                "jobset.sigs.k8s.io/replicatedjob-name": "workers",
                                "jobset.sigs.k8s.io/job-index": replica.to_string()},
                     "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2",
                                          "kind": "JobSet", "name": "train", "uid": "uid-js",
                                          "controller": true}]},
        "spec": {"suspend": true, "completions": 2, "parallelism": 2,
                 "completionMode": "Indexed"},
        "status": {"completedIndexes": completed},
    }))
}

#[test]
fn a_jobset_evicted_after_one_child_job_succeeded_is_queued_and_released_for_the_others_alone() {
    let mut state = cluster(32, Vec::new());
    // Replica 0's child Job completes; a pod of replica 1 fails.
    let t = released_after_replica_0(&mut state, "Running", false);
    // The entry asks for the child Job left, one block, and the admission places it.
    assert_eq!(
        entry_sets(&state),
        [("workers-0".to_owned(), 2)],
        "the entry counts the child Jobs left"
    );
    let status = entry_status(&state);
    let admission = status.admission.unwrap_or_default();
    assert_eq!(admission.pod_sets.len(), 1, "{admission:?}");
    let block = admission.pod_sets[0].nodes.clone();
    assert_eq!(block.len(), 2);
    // Replica 1's pods of the new attempt are the whole gang: let go on that block.
    for index in 0..2 {
        state.apply(child_pod(1, index, status.requeue_count));
    }
    let pins = pinned_at(&mut state, t + 1);
    assert_eq!(pins.len(), 2);
    for (pod, patch) in &pins {
        let index = usize::from(pod.name().contains("-1-x"));
        assert!(pod.name().starts_with("train-workers-1"), "{pod}");
        assert_eq!(
            patch["spec"]["nodeSelector"]["kubernetes.io/hostname"],
            json!(block[index]),
            "{pod}"
        );
        assert_eq!(
            patch["metadata"]["labels"][POD_SET_LABEL],
            json!("workers-0")
        );
    }
}

/// A JobSet of an initializer (one pod) and three one-pod worker Jobs, 8 GPUs a pod, each
/// replicated Job one pod set (no exclusive topology), labelled for the queue and suspended.
fn pipeline() -> JobSet {
    let one_pod = |name: &str, replicas: i32| {
        json!({"name": name, "replicas": replicas, "template": {"spec": {
            "parallelism": 1, "completions": 1, "completionMode": "Indexed",
            "template": {"spec": {"restartPolicy": "Never", "containers": [{
                "name": "main", "image": "trainer:1",
                "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}}})
    };
    object(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "train", "namespace": "team-a", "uid": "uid-js",
                     "resourceVersion": "1", "labels": {"muster.dev/queue-name": "research"}},
        "spec": {"suspend": true, "replicatedJobs": [one_pod("init", 1), one_pod("workers", 3)]},
    }))
}

#[test]
fn a_jobset_released_again_leaves_a_completed_replicated_job_be_and_places_the_replicas_left_on_the_nodes_held()
 {
    let mut state = cluster(32, Vec::new());
    let pods = [
        child_pod_of("init", 0, 0, 0),
        child_pod_of("workers", 0, 0, 0),
        child_pod_of("workers", 1, 0, 0),
        child_pod_of("workers", 2, 0, 0),
    ];
    // The initializer and worker 1 complete; worker 2 fails.
    let suspended = evicted_after_running(
        &mut state,
        &pipeline(),
        &pods,
        &["Succeeded", "Running", "Succeeded", "Failed"],
        &json!([{"name": "init", "succeeded": 1, "active": 0},
                {"name": "workers", "succeeded": 1, "active": 0}]),
    );
    let (t, current, release) = released_again(&mut state, suspended);
    // Every template was put back first; the release writes the workers' alone.
    assert!(
        current.spec.replicated_jobs.iter().all(|rj| {
            rj.template
                .spec
                .as_ref()
                .and_then(|s| s.template.metadata.as_ref())
                .and_then(|m| m.labels.as_ref())
                .is_none_or(|l| !l.contains_key(JOB_LABEL))
        }),
        "{current:#?}"
    );
    let WorkloadPatch::Json(ops) = &release.patch else {
        unreachable!("{:?}", release.patch)
    };
    let paths: Vec<&str> = ops
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|op| op["path"].as_str())
        .collect();
    assert!(
        paths
            .iter()
            .all(|p| !p.starts_with("/spec/replicatedJobs/0/")),
        "{paths:?}"
    );
    assert!(
        paths
            .iter()
            .any(|p| p.starts_with("/spec/replicatedJobs/1/")),
        "{paths:?}"
    );
    assert_eq!(entry_sets(&state), [("workers".to_owned(), 2)]);
    let status = entry_status(&state);
    let nodes = status.admission.unwrap_or_default().pod_sets[0]
        .nodes
        .clone();
    assert_eq!(nodes.len(), 2);
    // Workers 0 and 2 are the whole gang: worker 0 takes its own position, worker 2 the one
    // left.
    let attempt = status.requeue_count;
    for replica in [0, 2] {
        state.apply(child_pod_of("workers", replica, 0, attempt));
    }
    let placed: Vec<(String, Value)> = pinned_at(&mut state, t + 1)
        .iter()
        .map(|(pod, patch)| {
            (
                pod.name().to_owned(),
                patch["spec"]["nodeSelector"]["kubernetes.io/hostname"].clone(),
            )
        })
        .collect();
    assert_eq!(
        placed,
        [
            (format!("train-workers-0-0-x{attempt}"), json!(nodes[0])),
            (format!("train-workers-2-0-x{attempt}"), json!(nodes[1])),
        ]
    );
}

#[test]
fn a_jobset_whose_child_job_completed_part_of_its_pods_is_released_with_their_places_left_empty() {
    let mut state = cluster(32, Vec::new());
    // Replica 0's child Job completes; of replica 1's, index 0 succeeds and index 1 fails.
    let t = released_after_replica_0(&mut state, "Succeeded", false);
    runs_with_index_0_left_empty(&mut state, t);
}

#[test]
fn the_completions_a_child_job_counts_keep_their_places_empty_after_their_pods_were_deleted() {
    let mut state = cluster(32, Vec::new());
    // As above, but the pods that succeeded are deleted before the JobSet is released
    // again: replica 1's Job still counts index 0 completed, and makes no pod for it.
    let t = released_after_replica_0(&mut state, "Succeeded", true);
    runs_with_index_0_left_empty(&mut state, t);
}

/// Replica 1's child Job, released again at `t` after its index 0 succeeded, makes index 1
/// alone: the gang is whole with it, and it goes to its own place; index 0's stays empty.
/// Running and Ready, it is the whole gang: the entry runs, and past its pods-ready timeout
/// nothing is missing.
fn runs_with_index_0_left_empty(state: &mut State, t: i64) {
    assert_eq!(entry_sets(state), [("workers-0".to_owned(), 2)]);
    let status = entry_status(state);
    let block = status.admission.clone().unwrap_or_default().pod_sets[0]
        .nodes
        .clone();
    let attempt = status.requeue_count;
    let pod = child_pod(1, 1, attempt);
    state.apply(pod.clone());
    let pins = pinned_at(state, t + 1);
    assert_eq!(pins.len(), 1, "{pins:?}");
    assert_eq!(pins[0].0.name(), format!("train-workers-1-1-x{attempt}"));
    assert_eq!(
        pins[0].1["spec"]["nodeSelector"]["kubernetes.io/hostname"],
        json!(block[1])
    );
    let mut value = serde_json::to_value(ran_as_pinned(&pod, &pins, "Running")).unwrap_or_default();
    value["spec"]["schedulingGates"] = Value::Null;
    value["status"]["conditions"] = json!([{"type": "Ready", "status": "True",
        "lastTransitionTime": at(t + 1).to_string()}]);
    state.apply(object::<Pod>(value));
    for now in t + 2..t + 700 {
        let pass = plan(state, at(now));
        assert!(
            !kinds(&pass.actions).contains(&"evict"),
            "at {now}: {:#?}",
            pass.actions
        );
        land_all(state, &pass.actions, now);
    }
    assert_eq!(
        entry_status(state).phase,
        Some(muster_api::gpujob::GpuJobPhase::Running)
    );
}
