//! The objects that ask for capacity: names, templates with the flavor's placement, one
//! request per pod set for GKE's Dynamic Workload Scheduler, and requests that fit the
//! upstream CRD in `../shared/crds/` or `$MUSTER_UPSTREAM_CRDS` (skipped with a note when
//! absent).

#[path = "../../muster-api/tests/support/upstream.rs"]
mod upstream;

use muster_api::wire::ADMISSION_GATE;
use std::collections::BTreeMap;

use muster_api::cluster_queue::ProvisioningPolicy;
use muster_api::{GpuJob, ResourceFlavorSpec};
use muster_provisioning::objects::{BuildError, consume_annotations, objects, request_names};
use serde_json::json;

fn job() -> GpuJob {
    serde_json::from_value(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "GpuJob",
        "metadata": {"name": "train", "namespace": "team-a", "uid": "u-1"},
        "spec": {"queueName": "q", "podSets": [
            {"name": "leader", "count": 1, "template": {"spec": {
                "schedulingGates": [{"name": ADMISSION_GATE}],
                "containers": [{"name": "l", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}},
            {"name": "workers", "count": 15, "template": {"spec": {
                "nodeSelector": {"team": "a"},
                "containers": [{"name": "w", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}
        ]}
    }))
    .unwrap_or_default()
}

fn flavors() -> BTreeMap<String, ResourceFlavorSpec> {
    let spec: ResourceFlavorSpec = serde_json::from_value(json!({
        "nodeLabels": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    }))
    .unwrap_or_default();
    BTreeMap::from([("leader".into(), spec.clone()), ("workers".into(), spec)])
}

fn policy(class: &str) -> ProvisioningPolicy {
    ProvisioningPolicy {
        class_name: class.into(),
        parameters: BTreeMap::from([("maxRunDurationSeconds".into(), "86400".into())]),
        ..ProvisioningPolicy::default()
    }
}

#[test]
fn dws_gets_one_request_per_pod_set_and_other_classes_one_for_the_job() {
    let dws = objects(&job(), 2, &flavors(), &policy("queued-provisioning.gke.io"))
        .unwrap_or_else(|e| unreachable!("{e}"));
    let names: Vec<_> = dws
        .requests
        .iter()
        .filter_map(|r| r.metadata.name.clone())
        .collect();
    assert_eq!(names, ["train-2-leader", "train-2-workers"]);
    assert_eq!(
        request_names("queued-provisioning.gke.io", &job(), 2),
        names
    );
    assert_eq!(dws.requests[1].spec.pod_sets[0].count, 15);
    let atomic = "best-effort-atomic-scale-up.autoscaling.x-k8s.io";
    let one =
        objects(&job(), 2, &flavors(), &policy(atomic)).unwrap_or_else(|e| unreachable!("{e}"));
    assert_eq!(one.requests.len(), 1);
    assert_eq!(one.requests[0].metadata.name.as_deref(), Some("train-2"));
    assert_eq!(one.requests[0].spec.pod_sets.len(), 2);
    assert_eq!(
        one.requests[0]
            .spec
            .parameters
            .get("maxRunDurationSeconds")
            .map(String::as_str),
        Some("86400")
    );
    assert_eq!(request_names(atomic, &job(), 2), ["train-2"]);
}

#[test]
fn templates_carry_the_flavors_placement_and_no_gate() {
    let built = objects(&job(), 1, &flavors(), &policy("queued-provisioning.gke.io"))
        .unwrap_or_else(|e| unreachable!("{e}"));
    assert_eq!(built.templates.len(), 2);
    let workers = &built.templates[1];
    assert_eq!(workers.metadata.name.as_deref(), Some("train-1-workers"));
    let spec = workers
        .template
        .as_ref()
        .and_then(|t| t.spec.clone())
        .unwrap_or_default();
    let selector = spec.node_selector.unwrap_or_default();
    assert_eq!(selector.get("team").map(String::as_str), Some("a"));
    assert_eq!(
        selector
            .get("cloud.google.com/gke-accelerator")
            .map(String::as_str),
        Some("nvidia-h100-80gb")
    );
    assert_eq!(spec.tolerations.map(|t| t.len()), Some(1));
    let leader = built.templates[0]
        .template
        .as_ref()
        .and_then(|t| t.spec.clone());
    assert!(
        leader.is_some_and(|s| s.scheduling_gates.is_none()),
        "the autoscaler must see the pods"
    );
    for owner in built
        .templates
        .iter()
        .map(|t| &t.metadata)
        .chain(built.requests.iter().map(|r| &r.metadata))
        .map(|m| m.owner_references.clone().unwrap_or_default())
    {
        assert_eq!(owner[0].kind, "GpuJob");
        assert_eq!(owner[0].uid, "u-1");
    }
    // The same inputs give the same objects.
    assert_eq!(
        objects(&job(), 1, &flavors(), &policy("queued-provisioning.gke.io")),
        Ok(built)
    );
}

#[test]
fn a_job_not_read_from_the_api_or_without_flavors_is_refused() {
    let mut unnamed = job();
    unnamed.metadata.uid = None;
    assert_eq!(
        objects(&unnamed, 1, &flavors(), &policy("x.example.com")),
        Err(BuildError::MissingMetadata("metadata.uid"))
    );
    let mut partial = flavors();
    partial.remove("workers");
    assert_eq!(
        objects(&job(), 1, &partial, &policy("x.example.com")),
        Err(BuildError::NoFlavor("workers".into()))
    );
}

#[test]
fn pods_consume_their_request() {
    let a = consume_annotations("train-1-workers", "queued-provisioning.gke.io");
    assert_eq!(
        a.get("autoscaling.x-k8s.io/consume-provisioning-request")
            .map(String::as_str),
        Some("train-1-workers")
    );
    assert_eq!(
        a.get("autoscaling.x-k8s.io/provisioning-class-name")
            .map(String::as_str),
        Some("queued-provisioning.gke.io")
    );
}

#[test]
fn requests_fit_the_upstream_schema() {
    let Some(schema) = upstream::upstream_schema() else {
        return;
    };
    for class in [
        "queued-provisioning.gke.io",
        "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
        "check-capacity.autoscaling.x-k8s.io",
    ] {
        let built =
            objects(&job(), 3, &flavors(), &policy(class)).unwrap_or_else(|e| unreachable!("{e}"));
        for request in &built.requests {
            let value = serde_json::to_value(request).unwrap_or_default();
            let mut problems = Vec::new();
            upstream::conforms("", &value, &schema, &mut problems);
            assert!(problems.is_empty(), "{class}: {problems:#?}");
            // And it reads back as it was written.
            let back: muster_api::ProvisioningRequest =
                serde_json::from_value(value.clone()).unwrap_or_default();
            assert_eq!(&back, request);
        }
    }
}
