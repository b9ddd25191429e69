//! Reading any Muster object from its JSON (or YAML) form, with field paths on every error.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::validation::{FieldError, Validate};
use crate::{API_VERSION, ClusterQueue, Cohort, GpuJob, LocalQueue, ResourceFlavor};

/// One object of any Muster kind.
#[derive(Clone, Debug)]
pub enum MusterObject {
    /// A GpuJob.
    GpuJob(Box<GpuJob>),
    /// A ClusterQueue.
    ClusterQueue(Box<ClusterQueue>),
    /// A Cohort.
    Cohort(Box<Cohort>),
    /// A LocalQueue.
    LocalQueue(Box<LocalQueue>),
    /// A ResourceFlavor.
    ResourceFlavor(Box<ResourceFlavor>),
}

/// The kinds [`MusterObject`] reads.
pub const KINDS: &[&str] = &[
    "GpuJob",
    "ClusterQueue",
    "Cohort",
    "LocalQueue",
    "ResourceFlavor",
];

impl MusterObject {
    /// Reads an object, dispatching on `apiVersion` and `kind`. Unknown fields are errors (the
    /// API server would drop them, so a typo would silently change the object's meaning).
    pub fn from_value(value: Value) -> Result<MusterObject, Vec<FieldError>> {
        let api_version = value
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let kind = value
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if api_version != API_VERSION {
            let message = if api_version.is_empty() {
                format!("missing; Muster objects have apiVersion: {API_VERSION}")
            } else {
                format!("{api_version:?} is not Muster's API; use {API_VERSION}")
            };
            return Err(vec![FieldError {
                path: "apiVersion".into(),
                message,
            }]);
        }
        match kind.as_str() {
            "GpuJob" => read(value).map(|o| MusterObject::GpuJob(Box::new(o))),
            "ClusterQueue" => read(value).map(|o| MusterObject::ClusterQueue(Box::new(o))),
            "Cohort" => read(value).map(|o| MusterObject::Cohort(Box::new(o))),
            "LocalQueue" => read(value).map(|o| MusterObject::LocalQueue(Box::new(o))),
            "ResourceFlavor" => read(value).map(|o| MusterObject::ResourceFlavor(Box::new(o))),
            _ => Err(vec![FieldError {
                path: "kind".into(),
                message: format!(
                    "{kind:?} is not a Muster kind; use one of {}",
                    KINDS.join(", ")
                ),
            }]),
        }
    }

    /// The kind.
    pub fn kind(&self) -> &'static str {
        match self {
            MusterObject::GpuJob(_) => "GpuJob",
            MusterObject::ClusterQueue(_) => "ClusterQueue",
            MusterObject::Cohort(_) => "Cohort",
            MusterObject::LocalQueue(_) => "LocalQueue",
            MusterObject::ResourceFlavor(_) => "ResourceFlavor",
        }
    }

    /// The object's name, when it has one.
    pub fn name(&self) -> Option<&str> {
        let meta = match self {
            MusterObject::GpuJob(o) => &o.metadata,
            MusterObject::ClusterQueue(o) => &o.metadata,
            MusterObject::Cohort(o) => &o.metadata,
            MusterObject::LocalQueue(o) => &o.metadata,
            MusterObject::ResourceFlavor(o) => &o.metadata,
        };
        meta.name.as_deref()
    }
}

impl Validate for MusterObject {
    fn validate(&self) -> Vec<FieldError> {
        match self {
            MusterObject::GpuJob(o) => o.validate(),
            MusterObject::ClusterQueue(o) => o.validate(),
            MusterObject::Cohort(o) => o.validate(),
            MusterObject::LocalQueue(o) => o.validate(),
            MusterObject::ResourceFlavor(o) => o.validate(),
        }
    }
}

/// Deserializes `value` as `T`, reporting the path of a type error and of every unknown field.
pub fn read<T: DeserializeOwned>(value: Value) -> Result<T, Vec<FieldError>> {
    let mut unknown = Vec::new();
    let result: Result<T, _> = serde_path_to_error::deserialize(serde_ignored::Deserializer::new(
        value,
        &mut |path: serde_ignored::Path<'_>| unknown.push(path.to_string()),
    ));
    let mut errors: Vec<FieldError> = unknown
        .into_iter()
        // The type and version are read above; `status` is written by the controller and read
        // back. Neither is ever an error to carry.
        .filter(|p| p != "apiVersion" && p != "kind" && p != "status" && !p.starts_with("status."))
        .map(|path| FieldError {
            message: "unknown field; check its spelling against the API reference (the API server would drop it)".into(),
            path: js_path(&path),
        })
        .collect();
    match result {
        Ok(object) if errors.is_empty() => Ok(object),
        Ok(_) => Err(errors),
        Err(err) => {
            errors.insert(0, type_error(err));
            Err(errors)
        }
    }
}

/// Deserializes `value` as `T`, reporting the path of a type error but ignoring unknown fields:
/// for objects of other APIs (nodes, pods) that a newer server may extend.
pub fn read_lenient<T: DeserializeOwned>(value: Value) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(value).map_err(type_error)
}

/// A deserialization error as a field error at the path where it happened.
fn type_error(err: serde_path_to_error::Error<serde_json::Error>) -> FieldError {
    let path = err.path().to_string();
    FieldError {
        path: if path == "." {
            "(root)".into()
        } else {
            js_path(&path)
        },
        message: plain_words(&err.into_inner().to_string()),
    }
}

/// serde names Rust types in its messages; users write YAML.
fn plain_words(message: &str) -> String {
    message
        .replace("expected i32", "expected an integer")
        .replace("expected i64", "expected an integer")
        .replace("expected a boolean", "expected true or false")
}

/// serde's paths write list indices as `.0`; Kubernetes writes `[0]`.
fn js_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for (i, segment) in path.split('.').enumerate() {
        if !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit()) {
            out.push('[');
            out.push_str(segment);
            out.push(']');
        } else {
            if i > 0 {
                out.push('.');
            }
            out.push_str(segment);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_use_brackets() {
        assert_eq!(js_path("spec.podSets.0.count"), "spec.podSets[0].count");
        assert_eq!(js_path("spec"), "spec");
    }

    #[test]
    fn type_errors_name_the_field() {
        let v = json!({
            "apiVersion": "muster.dev/v1alpha1", "kind": "GpuJob",
            "metadata": {"name": "j"},
            "spec": {"queueName": "q", "podSets": [{"name": "w", "count": "two", "template": {}}]}
        });
        let errs = MusterObject::from_value(v).err().unwrap_or_default();
        assert_eq!(
            errs.first().map(|e| e.path.as_str()),
            Some("spec.podSets[0].count")
        );
    }

    #[test]
    fn unknown_fields_are_reported() {
        let v = json!({
            "apiVersion": "muster.dev/v1alpha1", "kind": "LocalQueue",
            "metadata": {"name": "q"},
            "spec": {"clusterQueue": "cq", "clusterQeue": "typo"}
        });
        let errs = MusterObject::from_value(v).err().unwrap_or_default();
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].path, "spec.clusterQeue");
    }

    #[test]
    fn wrong_api_and_kind() {
        let v = json!({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue"});
        let errs = MusterObject::from_value(v).err().unwrap_or_default();
        assert_eq!(errs[0].path, "apiVersion");
        let v = json!({"apiVersion": "muster.dev/v1alpha1", "kind": "Workload"});
        let errs = MusterObject::from_value(v).err().unwrap_or_default();
        assert_eq!(errs[0].path, "kind");
    }
}
