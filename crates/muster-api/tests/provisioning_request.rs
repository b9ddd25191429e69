//! Muster's hand-written ProvisioningRequest types against the upstream CRD in
//! `../shared/crds/`: objects of that schema round-trip, and what Muster writes fits the schema.

use std::path::PathBuf;

use muster_api::ProvisioningRequest;
use serde_json::{Value, json};

/// The upstream CRD's v1 schema, or `None` (with a note) where the shared folder is absent.
fn upstream_schema() -> Option<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/crds/autoscaling.x-k8s.io_provisioningrequests.yaml");
    let Ok(text) = std::fs::read_to_string(&path) else {
        eprintln!("skipping: upstream CRD not found at {}", path.display());
        return None;
    };
    let crd: Value = serde_yaml_ng::from_str(&text).ok()?;
    let versions = crd.pointer("/spec/versions")?.as_array()?;
    let v1 = versions
        .iter()
        .find(|v| v.get("name") == Some(&json!("v1")))?;
    v1.pointer("/schema/openAPIV3Schema").cloned()
}

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

/// Checks `value` against an OpenAPI schema: unknown fields, missing required fields, and
/// types. Returns every problem with its path.
fn conforms(path: &str, value: &Value, schema: &Value, out: &mut Vec<String>) {
    let ty = schema.get("type").and_then(Value::as_str).unwrap_or("");
    match (ty, value) {
        ("object", Value::Object(obj)) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let extra = schema.get("additionalProperties");
            for (key, child) in obj {
                match (props.and_then(|p| p.get(key)), extra) {
                    (Some(s), _) | (None, Some(s)) => {
                        conforms(&format!("{path}.{key}"), child, s, out);
                    }
                    (None, None) if props.is_some() => {
                        out.push(format!("{path}.{key}: not in the schema"));
                    }
                    (None, None) => {}
                }
            }
            for req in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(name) = req.as_str().filter(|n| !obj.contains_key(*n)) {
                    out.push(format!("{path}.{name}: required but missing"));
                }
            }
        }
        ("array", Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                conforms(
                    &format!("{path}[{i}]"),
                    item,
                    schema.get("items").unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        ("string", Value::String(_))
        | ("integer", Value::Number(_))
        | ("boolean", Value::Bool(_))
        | ("", _) => {}
        (ty, v) => out.push(format!("{path}: expected {ty}, found {v}")),
    }
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
