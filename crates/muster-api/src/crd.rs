//! The CustomResourceDefinitions of Muster's kinds, generated from the Rust types.
//!
//! kube-derive produces the schemas; this module finishes them for a real API server:
//! CEL rules that a derive cannot express, list types that let the server check unique names,
//! and an embedded `PodTemplateSpec` trimmed of descriptions (the CRD would otherwise exceed
//! what `kubectl apply` can store) and of number formats the server does not know.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::{Value, json};

use crate::{ClusterQueue, Cohort, GpuJob, LocalQueue, ResourceFlavor};

/// Number formats the Kubernetes API server understands; any other is dropped from the schemas.
pub const SUPPORTED_FORMATS: &[&str] = &[
    "int32",
    "int64",
    "float",
    "double",
    "byte",
    "binary",
    "date",
    "date-time",
    "duration",
    "password",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
];

/// A CRD with a file name for `crds/`.
pub struct GeneratedCrd {
    /// The file name in `crds/`, e.g. `muster.dev_gpujobs.yaml`.
    pub file_name: String,
    /// The definition.
    pub crd: CustomResourceDefinition,
}

/// Every Muster CRD, finished and in a fixed order.
pub fn all() -> Result<Vec<GeneratedCrd>, serde_json::Error> {
    [
        finish(&GpuJob::crd(), gpujob_rules)?,
        finish(&ClusterQueue::crd(), cluster_queue_rules)?,
        finish(&Cohort::crd(), cluster_queue_rules)?,
        finish(&LocalQueue::crd(), |_| {})?,
        finish(&ResourceFlavor::crd(), |_| {})?,
    ]
    .into_iter()
    .map(|crd| {
        Ok(GeneratedCrd {
            file_name: format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural),
            crd,
        })
    })
    .collect()
}

/// Applies the finishing touches to the CRD's JSON form.
fn finish(
    crd: &CustomResourceDefinition,
    rules: impl Fn(&mut Value),
) -> Result<CustomResourceDefinition, serde_json::Error> {
    let mut value = serde_json::to_value(crd)?;
    if let Some(versions) = value
        .pointer_mut("/spec/versions")
        .and_then(Value::as_array_mut)
    {
        for version in versions {
            if let Some(schema) = version.pointer_mut("/schema/openAPIV3Schema") {
                rules(schema);
                drop_unsupported_formats(schema);
                integral_bounds(schema);
            }
        }
    }
    serde_json::from_value(value)
}

fn gpujob_rules(root: &mut Value) {
    // A job that has ended holds nothing, so its pod sets are free again. The check of that
    // comes before the comparison of the pod sets because the rule runs on every write of the
    // job, its status writes too: a status write cannot change the spec (the API server keeps
    // the stored one), and the comparison walked the pod sets and their templates' schema on
    // each — a tenth of the API server's CPU for the write of a job's end.
    add_rule(
        root,
        "!has(oldSelf.status) || !has(oldSelf.status.admission) || (has(self.status) && has(self.status.completionTime)) || self.spec.podSets == oldSelf.spec.podSets",
        "spec.podSets cannot change while the job is admitted; suspend the job first, or delete and recreate it",
        Some("spec.podSets"),
    );
    if let Some(spec) = root.pointer_mut("/properties/spec") {
        add_rule(
            spec,
            "!(has(self.priority) && has(self.priorityClassName))",
            "set either priority or priorityClassName, not both",
            None,
        );
    }
    if let Some(pod_sets) = root.pointer_mut("/properties/spec/properties/podSets") {
        list_map(pod_sets, "name");
    }
    if let Some(topology) =
        root.pointer_mut("/properties/spec/properties/podSets/items/properties/topology")
    {
        add_rule(
            topology,
            "(has(self.required) ? 1 : 0) + (has(self.preferred) ? 1 : 0) + (has(self.tpu) ? 1 : 0) <= 1",
            "give at most one of required, preferred or tpu",
            None,
        );
    }
    if let Some(template) =
        root.pointer_mut("/properties/spec/properties/podSets/items/properties/template")
    {
        drop_descriptions(template);
        if let Some(obj) = template.as_object_mut() {
            obj.insert(
                "description".into(),
                json!("The pod template (a core/v1 PodTemplateSpec); Muster adds placement, gates and environment when it creates the pods."),
            );
        }
    }
}

fn cluster_queue_rules(root: &mut Value) {
    let group = "/properties/spec/properties/resourceGroups";
    if let Some(covered) = root.pointer_mut(&format!("{group}/items/properties/coveredResources")) {
        set_field(covered, "x-kubernetes-list-type", json!("set"));
    }
    if let Some(flavors) = root.pointer_mut(&format!("{group}/items/properties/flavors")) {
        list_map(flavors, "name");
    }
    if let Some(resources) = root.pointer_mut(&format!(
        "{group}/items/properties/flavors/items/properties/resources"
    )) {
        list_map(resources, "name");
    }
}

/// Adds a CEL rule to a schema node.
fn add_rule(schema: &mut Value, rule: &str, message: &str, field_path: Option<&str>) {
    let Some(obj) = schema.as_object_mut() else {
        return;
    };
    let mut entry = json!({ "rule": rule, "message": message });
    if let (Some(path), Some(e)) = (field_path, entry.as_object_mut()) {
        e.insert("fieldPath".into(), json!(format!(".{path}")));
        e.insert("reason".into(), json!("FieldValueForbidden"));
    }
    let rules = obj
        .entry("x-kubernetes-validations")
        .or_insert_with(|| json!([]));
    if let Some(list) = rules.as_array_mut() {
        list.push(entry);
    }
}

/// Marks a list as a map keyed by `key`, so the server rejects duplicate keys.
fn list_map(schema: &mut Value, key: &str) {
    set_field(schema, "x-kubernetes-list-type", json!("map"));
    set_field(schema, "x-kubernetes-list-map-keys", json!([key]));
}

fn set_field(schema: &mut Value, field: &str, value: Value) {
    if let Some(obj) = schema.as_object_mut() {
        obj.insert(field.into(), value);
    }
}

/// Removes `description` from a schema node and everything under it.
fn drop_descriptions(schema: &mut Value) {
    walk(schema, &mut |obj| {
        obj.remove("description");
    });
}

/// Removes `format` values the API server does not know (schemars writes `uint32` and the like).
fn drop_unsupported_formats(schema: &mut Value) {
    walk(schema, &mut |obj| {
        let unsupported = obj
            .get("format")
            .and_then(Value::as_str)
            .is_some_and(|f| !SUPPORTED_FORMATS.contains(&f));
        if unsupported {
            obj.remove("format");
        }
    });
}

/// Writes whole-number bounds as integers (`minimum: 1`, not `1.0`), as hand-written CRDs do.
fn integral_bounds(schema: &mut Value) {
    walk(schema, &mut |obj| {
        for key in ["minimum", "maximum"] {
            let whole = obj
                .get(key)
                .and_then(Value::as_f64)
                .filter(|v| v.fract() == 0.0 && v.abs() < 9.0e15);
            if let Some(v) = whole {
                #[expect(
                    clippy::cast_possible_truncation,
                    reason = "checked whole and within i64 above"
                )]
                obj.insert(key.into(), json!(v as i64));
            }
        }
    });
}

/// Visits every schema object under `schema` (properties, items, additionalProperties and the
/// rest), but never the *names* inside `properties`.
fn walk(schema: &mut Value, f: &mut impl FnMut(&mut serde_json::Map<String, Value>)) {
    match schema {
        Value::Object(obj) => {
            f(obj);
            for (key, child) in obj.iter_mut() {
                if key == "properties" {
                    if let Value::Object(props) = child {
                        for prop in props.values_mut() {
                            walk(prop, f);
                        }
                    }
                } else if key != "x-kubernetes-validations" && key != "enum" && key != "default" {
                    walk(child, f);
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                walk(item, f);
            }
        }
        _ => {}
    }
}
