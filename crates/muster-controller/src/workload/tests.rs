//! The queue entry of a Job, its patches and what a Job's conditions say.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
use muster_admission::PodSetPlacement;
use muster_api::ResourceFlavorSpec;
use muster_api::wire::{ADMISSION_GATE, JOB_LABEL, QUEUE_NAME_LABEL, WORKLOAD_KIND_LABEL};
use serde_json::{Value, json};

use super::*;
use crate::index::BatchJobStatus;

/// A Job as the index reads it from JSON the API server sent.
fn read_back(value: &Value) -> BatchJob {
    serde_json::from_str(&value.to_string()).unwrap_or_else(|e| unreachable!("{e}"))
}

/// An Indexed Job of 4 one-GPU pods as the API server stores it: defaulted, with the Job
/// controller's template labels, the user's own node selector, toleration and gate.
fn stored_job(suspend: bool) -> BatchJob {
    read_back(&json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train", "namespace": "team-a", "uid": "uid-1",
            "labels": {QUEUE_NAME_LABEL: "research"},
        },
        "spec": {
            "suspend": suspend,
            "parallelism": 4, "completions": 4, "completionMode": "Indexed",
            "template": {
                "metadata": {"labels": {
                    "batch.kubernetes.io/job-name": "train",
                    "batch.kubernetes.io/controller-uid": "uid-1",
                }},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"team": "a"},
                    "tolerations": [{"key": "team-a", "operator": "Exists"}],
                    "schedulingGates": [{"name": "example.com/quota"}],
                    "containers": [{
                        "name": "worker", "image": "trainer:1",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }],
                },
            },
        },
    }))
}

fn h100() -> ResourceFlavorSpec {
    ResourceFlavorSpec {
        node_labels: BTreeMap::from([("gpu".to_owned(), "h100".to_owned())]),
        tolerations: vec![Toleration {
            key: Some("nvidia.com/gpu".to_owned()),
            operator: Some("Exists".to_owned()),
            ..Toleration::default()
        }],
        ..ResourceFlavorSpec::default()
    }
}

fn placed() -> PodSetPlacement {
    PodSetPlacement {
        name: "main".to_owned(),
        flavor: "h100".to_owned(),
        domain: Vec::new(),
        nodes: (0..4).map(|i| format!("node-{i}")).collect(),
        devices: Vec::new(),
    }
}

/// Entry `job-train` of queue `research` placed as `pod_set` on `flavor`, attempt `attempt`.
fn placement<'a>(
    pod_set: &'a PodSetPlacement,
    flavor: &'a ResourceFlavorSpec,
    attempt: i32,
) -> Placement<'a> {
    Placement {
        entry: "job-train",
        cluster_queue: "research",
        pod_set,
        flavor,
        attempt,
    }
}

fn entry() -> GpuJob {
    entry_for(&stored_job(true)).unwrap_or_else(|e| unreachable!("{e:?}"))
}

#[test]
fn a_job_s_entry_is_named_after_it_owned_by_it_and_reads_as_admission_sees_it() {
    let entry = entry();
    assert_eq!(entry.metadata.name.as_deref(), Some("job-train"));
    assert_eq!(entry.metadata.namespace.as_deref(), Some("team-a"));
    let owner = &entry.metadata.owner_references.clone().unwrap_or_default()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("Job", "train", "uid-1")
    );
    assert_eq!(owner.controller, Some(true));
    assert_eq!(owner.block_owner_deletion, Some(true));
    assert_eq!(
        entry
            .metadata
            .labels
            .clone()
            .unwrap_or_default()
            .get(WORKLOAD_KIND_LABEL),
        Some(&"Job".to_owned())
    );
    assert_eq!(entry.spec.queue_name, "research");
    assert_eq!(entry.spec.pod_sets.len(), 1);
    assert_eq!(entry.spec.pod_sets[0].count, 4);
    assert_eq!(
        workload_of(&entry),
        Some(WorkloadRef::job(ObjectRef::new("team-a", "train")))
    );
    assert!(is_entry_of(&entry, &stored_job(true)));
    let mut again = stored_job(true);
    again.metadata.uid = Some("uid-2".to_owned());
    assert!(
        !is_entry_of(&entry, &again),
        "a Job made again is another Job"
    );
}

#[test]
fn a_gpujob_that_is_no_entry_names_no_workload() {
    let mut plain = entry();
    plain.metadata.labels = None;
    assert_eq!(workload_of(&plain), None);
}

#[test]
fn a_job_without_a_uid_is_not_queued() {
    let mut job = stored_job(true);
    job.metadata.uid = None;
    let errors = entry_for(&job).err().unwrap_or_default();
    assert_eq!(errors[0].path, "metadata.uid");
}

#[test]
fn the_release_adds_the_flavor_the_gate_and_the_gang_to_the_user_s_template_and_unsuspends() {
    let (entry, job, placed, flavor) = (entry(), stored_job(true), placed(), h100());
    let placement = placement(&placed, &flavor, 2);
    let patch = template_patch(&entry, &job, Some(&placement), false);
    assert_eq!(patch["spec"]["suspend"], json!(false));
    let spec = &patch["spec"]["template"]["spec"];
    assert_eq!(spec["nodeSelector"], json!({"team": "a", "gpu": "h100"}));
    assert_eq!(
        spec["tolerations"],
        json!([{"key": "team-a", "operator": "Exists"}, {"key": "nvidia.com/gpu", "operator": "Exists"}])
    );
    assert_eq!(
        spec["schedulingGates"],
        json!([{"name": "example.com/quota"}, {"name": ADMISSION_GATE}])
    );
    let labels = &patch["spec"]["template"]["metadata"]["labels"];
    assert_eq!(labels[JOB_LABEL], json!("job-train"));
    assert_eq!(labels["muster.dev/attempt"], json!("2"));
    assert_eq!(labels["batch.kubernetes.io/job-name"], json!("train"));
    let annotations = &patch["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(annotations["muster.dev/cluster-queue"], json!("research"));
    assert_eq!(annotations["muster.dev/flavor"], json!("h100"));
}

/// The Job of [`stored_job`] with one pod: `completions` and `completionMode` as given.
fn one_pod_job(completions: Option<i32>, mode: &str) -> BatchJob {
    let mut job = stored_job(true);
    job.spec.parallelism = Some(1);
    job.spec.completions = completions;
    job.spec.completion_mode = Some(mode.to_owned());
    job
}

#[test]
fn a_job_that_never_runs_two_pods_is_pinned_in_its_template_without_the_gate_and_put_back_whole() {
    let job = one_pod_job(Some(1), "NonIndexed");
    assert!(never_more_than_one_pod(&job));
    let entry = entry_for(&job).unwrap_or_else(|e| unreachable!("{e:?}"));
    let (placed, flavor) = (
        PodSetPlacement {
            nodes: vec!["node-7".to_owned()],
            ..placed()
        },
        h100(),
    );
    let placement = placement(&placed, &flavor, 0);
    assert_eq!(placement.pin_for(&job), Some("node-7"));
    let patch = template_patch(&entry, &job, Some(&placement), false);
    let spec = &patch["spec"]["template"]["spec"];
    assert_eq!(
        spec["nodeSelector"],
        json!({"team": "a", "gpu": "h100", "kubernetes.io/hostname": "node-7"})
    );
    assert_eq!(
        spec["schedulingGates"],
        json!([{"name": "example.com/quota"}]),
        "only the user's own gate: the pod needs no pin"
    );
    let labels = &patch["spec"]["template"]["metadata"]["labels"];
    assert_eq!(labels["muster.dev/pod-index"], json!("0"));
    assert_eq!(labels["muster.dev/pod-set"], json!("main"));
    let mut released = serde_json::to_value(&job).unwrap_or_default();
    json_patch::merge(&mut released, &patch);
    let released = read_back(&released);
    assert!(template_is(&entry, &released, Some(&placement)));
    assert!(!release_missing(&released, 0), "released: not suspended");
    let mut back = serde_json::to_value(&released).unwrap_or_default();
    json_patch::merge(&mut back, &template_patch(&entry, &released, None, true));
    let back = read_back(&back);
    assert!(template_is(&entry, &back, None));
    let selector = back.spec.template.node_selector.unwrap_or_default();
    assert_eq!(
        selector,
        BTreeMap::from([("team".to_owned(), "a".to_owned())]),
        "the node is no longer asked for once the Job is held again"
    );
}

#[test]
fn a_job_that_may_grow_while_it_runs_is_released_behind_the_gate_even_as_one_pod() {
    // An Indexed Job's completions may be raised with its parallelism, and a Job without
    // completions runs as many pods as its parallelism: pods added while it runs must wait
    // behind the gate, not start on the node with no quota behind them.
    for job in [
        one_pod_job(Some(1), "Indexed"),
        one_pod_job(None, "NonIndexed"),
    ] {
        assert!(!never_more_than_one_pod(&job));
        let entry = entry_for(&job).unwrap_or_else(|e| unreachable!("{e:?}"));
        let placed = PodSetPlacement {
            nodes: vec!["node-7".to_owned()],
            ..placed()
        };
        let flavor = h100();
        let placement = placement(&placed, &flavor, 0);
        assert_eq!(placement.pin_for(&job), None);
        let patch = template_patch(&entry, &job, Some(&placement), false);
        let spec = &patch["spec"]["template"]["spec"];
        assert_eq!(
            spec["schedulingGates"],
            json!([{"name": "example.com/quota"}, {"name": ADMISSION_GATE}])
        );
        assert_eq!(spec["nodeSelector"], json!({"team": "a", "gpu": "h100"}));
    }
}

#[test]
fn a_suspended_job_without_this_attempt_s_release_is_missing_it() {
    let job = one_pod_job(Some(1), "NonIndexed");
    let entry = entry_for(&job).unwrap_or_else(|e| unreachable!("{e:?}"));
    assert!(release_missing(&job, 0), "never released");
    let placed = PodSetPlacement {
        nodes: vec!["node-7".to_owned()],
        ..placed()
    };
    let flavor = h100();
    let mut released = serde_json::to_value(&job).unwrap_or_default();
    json_patch::merge(
        &mut released,
        &template_patch(&entry, &job, Some(&placement(&placed, &flavor, 0)), false),
    );
    // Its owner suspends it after the release landed: it carries the release.
    json_patch::merge(&mut released, &json!({"spec": {"suspend": true}}));
    let released = read_back(&released);
    assert!(!release_missing(&released, 0));
    assert!(release_missing(&released, 1), "another attempt's release");
}

#[test]
fn putting_the_template_back_removes_everything_the_release_added_and_only_that() {
    let (entry, placed, flavor) = (entry(), placed(), h100());
    let placement = placement(&placed, &flavor, 0);
    let mut released = serde_json::to_value(stored_job(true)).unwrap_or_default();
    json_patch::merge(
        &mut released,
        &template_patch(&entry, &stored_job(true), Some(&placement), false),
    );
    let released = read_back(&released);
    assert!(template_is(&entry, &released, Some(&placement)));
    assert!(!template_is(&entry, &released, None));
    let mut back = serde_json::to_value(&released).unwrap_or_default();
    json_patch::merge(&mut back, &template_patch(&entry, &released, None, true));
    let back = read_back(&back);
    assert!(template_is(&entry, &back, None));
    let mut template = back.spec.template.template().unwrap_or_default();
    // An empty map is no map to the API server (Go's `omitempty`).
    if let Some(meta) = template.metadata.as_mut()
        && meta.annotations.as_ref().is_some_and(BTreeMap::is_empty)
    {
        meta.annotations = None;
    }
    assert_eq!(
        Ok(template),
        stored_job(true).spec.template.template(),
        "the template is the user's again, byte for byte"
    );
    assert!(is_suspended(&back));
}

#[test]
fn a_pin_keeps_the_user_s_gates_and_numbers_the_pod_in_its_pod_set() {
    let patch = pin_patch(&entry().spec.pod_sets[0], "node-3", 3);
    assert_eq!(
        patch,
        json!({
            "metadata": {"labels": {"muster.dev/pod-index": "3", "muster.dev/pod-set": "main"}},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": "node-3"},
                "schedulingGates": [{"name": "example.com/quota"}],
            },
        })
    );
}

#[test]
fn a_job_ends_by_its_conditions() {
    let with = |type_: &str, status: &str| {
        let mut job = stored_job(false);
        job.status = serde_json::from_value(json!({"conditions": [{
            "type": type_, "status": status, "message": "Job has reached the specified backoff limit",
        }]}))
        .unwrap_or_default();
        job.finished()
    };
    assert_eq!(with("Complete", "True").map(|f| f.0), Some(true));
    let failed = with("Failed", "True").unwrap_or_default();
    assert!(
        !failed.0 && failed.1.contains("backoff limit"),
        "{failed:?}"
    );
    assert_eq!(with("SuccessCriteriaMet", "True").map(|f| f.0), Some(true));
    assert_eq!(with("FailureTarget", "True").map(|f| f.0), Some(false));
    assert_eq!(with("Complete", "False"), None);
    assert_eq!(with("Suspended", "True"), None);
    assert_eq!(stored_job(false).finished(), None);
}

#[test]
fn a_suspended_job_may_still_have_pods_until_its_controller_resets_its_start_time() {
    let status = |v: Value| {
        let mut job = stored_job(true);
        job.status = serde_json::from_value(v).unwrap_or_default();
        may_have_pods(&job)
    };
    assert!(!status(json!({})), "never started");
    assert!(status(json!({"startTime": "2026-11-26T00:00:00Z"})));
    assert!(status(
        json!({"active": 2, "startTime": "2026-11-26T00:00:00Z",
        "conditions": [{"type": "Suspended", "status": "True"}]})
    ));
    // Said suspended, pods gone, but the start time not yet reset: the API server still
    // refuses a change of the template.
    assert!(status(
        json!({"active": 0, "startTime": "2026-11-26T00:00:00Z",
        "conditions": [{"type": "Suspended", "status": "True"}]})
    ));
    assert!(!status(
        json!({"active": 0, "conditions": [{"type": "Suspended", "status": "True"}]})
    ));
}

#[test]
fn a_finished_job_is_kept_without_its_template_and_a_running_one_whole() {
    let mut running = stored_job(false);
    running.status = BatchJobStatus {
        active: Some(4),
        ..BatchJobStatus::default()
    };
    assert_eq!(running.clone().slimmed(), running);
    let mut done = running;
    done.status = serde_json::from_value(json!({
        "succeeded": 4, "uncountedTerminatedPods": {},
        "conditions": [{"type": "Complete", "status": "True"}],
    }))
    .unwrap_or_default();
    let kept = done.clone().slimmed();
    assert_eq!(
        kept.finished(),
        done.finished(),
        "it still reads as finished"
    );
    assert_eq!(kept.metadata, done.metadata);
    assert_eq!(
        kept.spec.template.template(),
        Ok(PodTemplateSpec::default())
    );
    assert_eq!(kept.spec.parallelism, Some(4));
    assert_eq!(
        kept.spec.template,
        crate::index::KeptTemplate::default(),
        "nothing is released into a finished Job, nor put back"
    );
}

#[test]
fn an_untaken_release_is_read_only_from_a_pinned_template_of_the_evicted_attempt() {
    let job = one_pod_job(Some(1), "NonIndexed");
    let entry = entry_for(&job).unwrap_or_else(|e| unreachable!("{e:?}"));
    let flavor = h100();
    let released_with = |placed: &PodSetPlacement, suspend: bool| {
        let placement = placement(placed, &flavor, 0);
        let mut released = serde_json::to_value(&job).unwrap_or_default();
        json_patch::merge(
            &mut released,
            &template_patch(&entry, &job, Some(&placement), false),
        );
        released["spec"]["suspend"] = json!(suspend);
        read_back(&released)
    };
    let pinned = PodSetPlacement {
        nodes: vec!["node-7".to_owned()],
        ..placed()
    };
    // Suspended, nothing recorded: held until ten seconds after the eviction.
    let held = untaken_release(&released_with(&pinned, true), 0, 100, 105);
    assert_eq!(
        held.as_ref().map(|r| (r.node.as_deref(), r.until)),
        Some((Some("node-7"), Some(100 + UNTAKEN_RELEASE_SECONDS)))
    );
    assert_eq!(
        untaken_release(&released_with(&pinned, true), 0, 100, 110),
        None
    );
    // Another attempt's template, or a Job still running (not yet suspended again: held with
    // no end until it is).
    assert_eq!(
        untaken_release(&released_with(&pinned, true), 1, 100, 105),
        None
    );
    let running = untaken_release(&released_with(&pinned, false), 0, 100, 500);
    assert_eq!(running.map(|r| r.until), Some(None));
    // A gated release (no node to pin to: capacity being bought): its pods wait behind the
    // gate, and nothing is held.
    let gated = released_with(
        &PodSetPlacement {
            nodes: Vec::new(),
            ..placed()
        },
        true,
    );
    assert_eq!(untaken_release(&gated, 0, 100, 105), None);
}
