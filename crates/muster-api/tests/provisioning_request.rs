//! Muster's hand-written ProvisioningRequest types against the upstream CRD in
//! `../shared/crds/`: objects of that schema round-trip, and what Muster writes fits the schema.

mod support;

use muster_api::ProvisioningRequest;
use serde_json::{Value, json};
use support::upstream::{conforms, upstream_schema};

/// A ProvisioningRequest using every field of the v1 schema, as the autoscaler would leave it.
fn full_object() -> Value {
    json!({
        "apiVersion": "autoscaling.x-k8s.io/v1",
        "kind": "ProvisioningRequest",
        "metadata": {"name": "train-1", "namespace": "team-a"},
        "spec": {
            "provisioningClassName": "queued-provisioning.gke.io",
            "parameters": {"maxRunDurationSeconds": "86400"},
            "podSets": [{"podTemplateRef": {"name": "train-1-workers"}, "count": 16}]
        },
        "status": {
            "conditions": [{
                "type": "Provisioned", "status": "True", "reason": "Provisioned",
                "message": "capacity is ready", "lastTransitionTime": "2026-01-02T03:04:05Z",
                "observedGeneration": 1
            }],
            "provisioningClassDetails": {"ResizeRequestName": "rr-123"}
        }
    })
}

#[test]
fn upstream_objects_round_trip() {
    if upstream_schema().is_none() {
        return;
    }
    let original = full_object();
    let typed: ProvisioningRequest = match serde_json::from_value(original.clone()) {
        Ok(t) => t,
        Err(e) => unreachable!("upstream object does not read: {e}"),
    };
    let back = serde_json::to_value(&typed).unwrap_or_default();
    assert_eq!(back, original);
}

#[test]
fn what_muster_writes_fits_the_upstream_schema() {
    let Some(schema) = upstream_schema() else {
        return;
    };
    let mut problems = Vec::new();
    conforms("", &full_object(), &schema, &mut problems);
    assert!(problems.is_empty(), "{problems:#?}");

    // A request as Muster builds it, from the types, with no status.
    let mut built = ProvisioningRequest::new(
        "train-2",
        muster_api::ProvisioningRequestSpec {
            provisioning_class_name: "best-effort-atomic-scale-up.autoscaling.x-k8s.io".into(),
            pod_sets: vec![muster_api::provisioning_request::ProvisioningPodSet {
                pod_template_ref: muster_api::provisioning_request::Reference {
                    name: "train-2-w".into(),
                },
                count: 4,
            }],
            parameters: std::collections::BTreeMap::new(),
        },
    );
    built.metadata.namespace = Some("team-a".into());
    let value = serde_json::to_value(&built).unwrap_or_default();
    let mut problems = Vec::new();
    conforms("", &value, &schema, &mut problems);
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn every_upstream_field_is_known() {
    let Some(schema) = upstream_schema() else {
        return;
    };
    let object = full_object();
    for section in ["spec", "status"] {
        let fields = schema
            .pointer(&format!("/properties/{section}/properties"))
            .and_then(Value::as_object)
            .map(|p| p.keys().cloned().collect::<Vec<_>>())
            .unwrap_or_default();
        assert!(!fields.is_empty());
        for field in fields {
            assert!(
                object.pointer(&format!("/{section}/{field}")).is_some(),
                "upstream {section}.{field} is not covered by Muster's types"
            );
        }
    }
}
