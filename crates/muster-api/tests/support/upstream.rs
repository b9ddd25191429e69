//! The upstream CRDs in `../shared/crds/` (ProvisioningRequest, JobSet), and a checker of
//! objects against their schemas. Shared by the tests of every crate that writes ProvisioningRequests.

#![allow(dead_code, reason = "each test binary uses part of the support module")]

use std::path::PathBuf;

use serde_json::{Value, json};

/// The upstream ProvisioningRequest CRD's v1 schema, or `None` (with a note) where the shared
/// folder is absent.
pub fn upstream_schema() -> Option<Value> {
    crd_schema("autoscaling.x-k8s.io_provisioningrequests.yaml", "v1")
}

/// The schema of `version` in the upstream CRD `file` of `shared/crds/` beside the repository
/// (or of the folder `MUSTER_UPSTREAM_CRDS` names, as the test kit reads it), or `None` (with
/// a note) where the folder is absent.
pub fn crd_schema(file: &str, version: &str) -> Option<Value> {
    let dir = match std::env::var_os("MUSTER_UPSTREAM_CRDS") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/crds"),
    };
    let path = dir.join(file);
    let Ok(text) = std::fs::read_to_string(&path) else {
        eprintln!("skipping: upstream CRD not found at {}", path.display());
        return None;
    };
    let crd: Value = serde_yaml_ng::from_str(&text).ok()?;
    let versions = crd.pointer("/spec/versions")?.as_array()?;
    let served = versions
        .iter()
        .find(|v| v.get("name") == Some(&json!(version)))?;
    served.pointer("/schema/openAPIV3Schema").cloned()
}

/// Checks `value` against an OpenAPI schema: unknown fields, missing required fields, and
/// types. Returns every problem with its path.
pub fn conforms(path: &str, value: &Value, schema: &Value, out: &mut Vec<String>) {
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
