//! The generated CRDs are structural, use only formats the API server knows, keep the embedded
//! pod template, and their CEL rules compile and do what their messages say.

use kube::core::cel::{ScopeContext, Validator, WarningKind, analyze_rule, compile_schema};
use muster_api::crd::{self, SUPPORTED_FORMATS};
use serde_json::{Value, json};

fn schemas() -> Vec<(String, Value)> {
    let crds = crd::all().unwrap_or_default();
    assert_eq!(crds.len(), 5);
    crds.iter()
        .map(|g| {
            let v = serde_json::to_value(&g.crd).unwrap_or_default();
            let schema = v
                .pointer("/spec/versions/0/schema/openAPIV3Schema")
                .cloned()
                .unwrap_or_default();
            (g.crd.spec.names.kind.clone(), schema)
        })
        .collect()
}

/// Collects every structural-schema violation under `schema`.
fn structural_problems(path: &str, schema: &Value, out: &mut Vec<String>) {
    let Some(obj) = schema.as_object() else {
        out.push(format!("{path}: schema is not an object"));
        return;
    };
    for forbidden in [
        "$ref",
        "definitions",
        "$defs",
        "$schema",
        "oneOf",
        "anyOf",
        "allOf",
        "not",
    ] {
        if obj.contains_key(forbidden) {
            out.push(format!("{path}: has {forbidden}"));
        }
    }
    let int_or_string = obj.get("x-kubernetes-int-or-string") == Some(&json!(true));
    let preserve = obj.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
    if !obj.contains_key("type") && !int_or_string && !preserve {
        out.push(format!("{path}: no type"));
    }
    if obj.contains_key("properties") && obj.contains_key("additionalProperties") {
        out.push(format!("{path}: both properties and additionalProperties"));
    }
    if let Some(format) = obj.get("format").and_then(Value::as_str)
        && !SUPPORTED_FORMATS.contains(&format)
    {
        out.push(format!("{path}: unsupported format {format}"));
    }
    if let Some(Value::Object(props)) = obj.get("properties") {
        for (name, child) in props {
            structural_problems(&format!("{path}.{name}"), child, out);
        }
    }
    if let Some(items) = obj.get("items") {
        structural_problems(&format!("{path}[]"), items, out);
    }
    if let Some(extra @ Value::Object(_)) = obj.get("additionalProperties") {
        structural_problems(&format!("{path}{{}}"), extra, out);
    }
}

#[test]
fn schemas_are_structural_with_known_formats() {
    for (kind, schema) in schemas() {
        let mut problems = Vec::new();
        structural_problems(&kind, &schema, &mut problems);
        assert!(problems.is_empty(), "{problems:#?}");
    }
}

#[test]
fn the_pod_template_keeps_its_fields() {
    let (_, job) = schemas().into_iter().next().unwrap_or_default();
    let template = job
        .pointer("/properties/spec/properties/podSets/items/properties/template")
        .cloned()
        .unwrap_or_default();
    for field in [
        "/properties/metadata/properties/labels",
        "/properties/metadata/properties/annotations",
        "/properties/spec/properties/containers/items/properties/resources/properties/limits",
        "/properties/spec/properties/containers/items/properties/env",
        "/properties/spec/properties/tolerations",
        "/properties/spec/properties/affinity/properties/nodeAffinity",
        "/properties/spec/properties/volumes",
    ] {
        assert!(template.pointer(field).is_some(), "template lost {field}");
    }
    // Descriptions inside the template are dropped to keep the CRD small enough to apply.
    assert!(
        !template
            .to_string()
            .contains("\"description\":\"Standard object")
    );
}

#[test]
fn every_cel_rule_compiles_in_scope_and_within_budget() {
    for (kind, schema) in schemas() {
        let compiled = compile_schema(&schema);
        assert!(
            !compiled.has_errors(),
            "{kind}: {:?}",
            compiled.compilation_errors()
        );
        let mut rules = Vec::new();
        collect_rules(&schema, &mut rules);
        for rule in rules {
            let warnings: Vec<_> = analyze_rule(&rule, &compiled, ScopeContext::CrdValidation)
                .into_iter()
                .filter(|w| w.kind != WarningKind::MissingBounds)
                .collect();
            assert!(warnings.is_empty(), "{kind}: {rule}: {warnings:?}");
        }
    }
}

fn collect_rules(schema: &Value, out: &mut Vec<String>) {
    match schema {
        Value::Object(obj) => {
            if let Some(Value::Array(rules)) = obj.get("x-kubernetes-validations") {
                out.extend(
                    rules
                        .iter()
                        .filter_map(|r| r.get("rule")?.as_str().map(str::to_owned)),
                );
            }
            obj.values().for_each(|v| collect_rules(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| collect_rules(v, out)),
        _ => {}
    }
}

fn job(count: i32, topology: &Value, status: &Value) -> Value {
    json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "GpuJob",
        "metadata": {"name": "j", "namespace": "ns"},
        "spec": {"queueName": "q", "podSets": [{
            "name": "w", "count": count, "topology": topology,
            "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}
        }]},
        "status": status
    })
}

fn gpujob_schema() -> Value {
    schemas()
        .into_iter()
        .next()
        .map(|(_, s)| s)
        .unwrap_or_default()
}

#[test]
fn pod_sets_are_immutable_only_while_admitted() {
    let schema = gpujob_schema();
    let v = Validator::new();
    let queued = json!({"phase": "Queued"});
    let admitted = json!({"phase": "Admitted", "admission": {"clusterQueue": "cq", "podSets": []}});
    let block = json!({"required": "b"});
    // Queued: the owner may resize the gang.
    assert!(
        v.validate(
            &schema,
            &job(8, &block, &queued),
            Some(&job(4, &block, &queued))
        )
        .is_ok()
    );
    // Admitted: the pod sets are frozen...
    let err = v.validate(
        &schema,
        &job(8, &block, &admitted),
        Some(&job(4, &block, &admitted)),
    );
    assert!(err.is_err_and(|e| {
        e.to_string()
            .contains("cannot change while the job is admitted")
    }));
    // ...but everything else may still change, and an unchanged update passes.
    assert!(
        v.validate(
            &schema,
            &job(4, &block, &admitted),
            Some(&job(4, &block, &admitted))
        )
        .is_ok()
    );
    // Ended, the job holds nothing: its pod sets may change again.
    let ended = json!({"phase": "Succeeded", "completionTime": "2026-12-07T18:00:12Z",
                       "admission": {"clusterQueue": "cq", "podSets": []}});
    assert!(
        v.validate(
            &schema,
            &job(8, &block, &ended),
            Some(&job(4, &block, &ended))
        )
        .is_ok()
    );
}

#[test]
fn one_topology_constraint_and_one_priority_source() {
    let schema = gpujob_schema();
    let v = Validator::new();
    let two = json!({"required": "b", "preferred": "s"});
    assert!(
        v.validate(&schema, &job(1, &two, &json!({})), None)
            .is_err()
    );
    assert!(
        v.validate(
            &schema,
            &job(1, &json!({"preferred": "s"}), &json!({})),
            None
        )
        .is_ok()
    );
    let mut both = job(1, &json!({}), &json!({}));
    if let Some(spec) = both.pointer_mut("/spec").and_then(Value::as_object_mut) {
        spec.insert("priority".into(), json!(1));
        spec.insert("priorityClassName".into(), json!("high"));
    }
    assert!(v.validate(&schema, &both, None).is_err());
}
