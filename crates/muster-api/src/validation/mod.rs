//! Semantic validation: every error in an object at once, each with its field path and the fix.
//!
//! The CRD schemas catch what a schema can (types, enums, minimums). `validate()` catches the
//! rest — names, quantities, TPU shapes, quota layouts — and is what `muster validate` and the
//! controller's `Valid` condition report. It never panics, whatever the input.

mod gpujob;
mod names;
mod queues;

use std::fmt;

pub use names::{
    is_dns1035_label, is_dns1123_label, is_dns1123_subdomain, is_label_value, is_qualified_name,
};

/// One problem in an object: where it is and what to do about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The field, as a path from the object's root: `spec.podSets[0].count`.
    pub path: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// An object Muster can check.
pub trait Validate {
    /// Every semantic error, in field order; empty when the object is valid.
    fn validate(&self) -> Vec<FieldError>;
}

/// Collects errors while walking an object, keeping track of the current field path.
#[derive(Debug, Default)]
pub(crate) struct Errors {
    errors: Vec<FieldError>,
}

impl Errors {
    pub(crate) fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(FieldError {
            path: path.into(),
            message: message.into(),
        });
    }

    pub(crate) fn into_vec(self) -> Vec<FieldError> {
        self.errors
    }

    /// Checks an object's `metadata.name` (or `generateName`) against `rule`.
    pub(crate) fn object_name(
        &mut self,
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
        rule: NameRule,
    ) {
        match (&meta.name, &meta.generate_name) {
            (Some(name), _) => self.name("metadata.name", name, rule),
            (None, Some(_)) => {}
            (None, None) => self.push("metadata.name", "missing; give the object a name"),
        }
    }

    /// Checks a reference to another object by name.
    pub(crate) fn name(&mut self, path: &str, name: &str, rule: NameRule) {
        if name.is_empty() {
            self.push(path, "must not be empty");
            return;
        }
        let (ok, what) = match rule {
            NameRule::Subdomain => (
                is_dns1123_subdomain(name),
                "a DNS subdomain: at most 253 lowercase letters, digits, '-' and '.', starting and ending with a letter or digit",
            ),
            NameRule::Label => (
                is_dns1123_label(name),
                "a DNS label: at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit",
            ),
            NameRule::Dns1035 => (
                is_dns1035_label(name),
                "a DNS-1035 label: at most 63 lowercase letters, digits and '-', starting with a letter and ending with a letter or digit",
            ),
        };
        if !ok {
            self.push(path, format!("{name:?} is not {what}"));
        }
    }

    /// Checks a label key or resource name (`prefix/name`).
    pub(crate) fn qualified_name(&mut self, path: &str, key: &str) {
        if !is_qualified_name(key) {
            self.push(
                path,
                format!(
                    "{key:?} is not a valid label key or resource name; write an optional DNS-subdomain prefix and '/', then up to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit (e.g. cloud.google.com/gce-topology-block)"
                ),
            );
        }
    }

    /// Checks a label value.
    pub(crate) fn label_value(&mut self, path: &str, value: &str) {
        if !is_label_value(value) {
            self.push(
                path,
                format!("{value:?} is not a valid label value; use at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"),
            );
        }
    }
}

/// Which naming rule an object name follows.
#[derive(Clone, Copy, Debug)]
pub(crate) enum NameRule {
    /// DNS-1123 subdomain (most objects).
    Subdomain,
    /// DNS-1123 label.
    Label,
    /// DNS-1035 label (Services, and objects whose names become Service names).
    Dns1035,
}

/// Formats `name[index]` path segments.
pub(crate) fn at(path: &str, field: &str, index: usize) -> String {
    format!("{path}.{field}[{index}]")
}
