//! The reference to a namespaced object — a job, a pod, a LocalQueue, a
//! ProvisioningRequest, a PodTemplate — that every index, ledger, log and decision of Muster
//! keys it by: its namespace and name, written `namespace/name`.
//!
//! The written form is defined here once. An [`ObjectRef`] orders as its written form does, so
//! a map keyed by references iterates in the same order as one keyed by their strings.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// A namespaced object's namespace and name (see the module docs). It compares, orders and
/// hashes as its written form, so a map keyed by references is read with a `&str` key.
#[derive(Clone, Debug)]
pub struct ObjectRef {
    /// `namespace/name`: equality, ordering and hashing go by it.
    key: String,
    /// Where the `/` is in `key`.
    slash: usize,
}

impl ObjectRef {
    /// The object `name` in `namespace`.
    pub fn new(namespace: &str, name: &str) -> ObjectRef {
        ObjectRef {
            key: format!("{namespace}/{name}"),
            slash: namespace.len(),
        }
    }

    /// The object `meta` describes (an empty namespace when it names none: a cluster-scoped
    /// object, or one not yet defaulted).
    pub fn of(meta: &ObjectMeta) -> ObjectRef {
        ObjectRef::new(
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default(),
        )
    }

    /// Reads a written reference, `namespace/name`; an error saying what it should be.
    /// Names never contain `/`, so the first one splits.
    pub fn parse(key: &str) -> Result<ObjectRef, String> {
        match key.split_once('/') {
            Some((namespace, name)) if !name.contains('/') => Ok(ObjectRef::new(namespace, name)),
            _ => Err(format!("{key:?} is not a namespace/name reference")),
        }
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.key[..self.slash]
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.key[self.slash + 1..]
    }

    /// The written form, `namespace/name`.
    pub fn as_str(&self) -> &str {
        &self.key
    }

    /// The written form, owned.
    pub fn into_string(self) -> String {
        self.key
    }
}

impl PartialEq for ObjectRef {
    fn eq(&self, other: &ObjectRef) -> bool {
        self.key == other.key
    }
}

impl Eq for ObjectRef {}

/// A reference equals its written form.
impl PartialEq<str> for ObjectRef {
    fn eq(&self, other: &str) -> bool {
        self.key == other
    }
}

/// A reference equals its written form.
impl PartialEq<&str> for ObjectRef {
    fn eq(&self, other: &&str) -> bool {
        self.key == *other
    }
}

impl PartialOrd for ObjectRef {
    fn partial_cmp(&self, other: &ObjectRef) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ObjectRef {
    fn cmp(&self, other: &ObjectRef) -> std::cmp::Ordering {
        self.key.cmp(&other.key)
    }
}

impl std::hash::Hash for ObjectRef {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.key.hash(state);
    }
}

impl std::borrow::Borrow<str> for ObjectRef {
    fn borrow(&self) -> &str {
        &self.key
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key)
    }
}

impl From<ObjectRef> for String {
    fn from(reference: ObjectRef) -> String {
        reference.key
    }
}

impl std::ops::Deref for ObjectRef {
    type Target = str;
    /// A reference reads as its written form wherever a key is read, as a `String` reads as
    /// a `str`.
    fn deref(&self) -> &str {
        &self.key
    }
}

impl AsRef<str> for ObjectRef {
    fn as_ref(&self) -> &str {
        &self.key
    }
}

#[cfg(test)]
mod tests {
    use super::ObjectRef;

    #[test]
    fn a_reference_reads_back_what_it_writes() {
        let r = ObjectRef::new("team-a", "train-1");
        assert_eq!(r.as_str(), "team-a/train-1");
        assert_eq!((r.namespace(), r.name()), ("team-a", "train-1"));
        assert_eq!(ObjectRef::parse("team-a/train-1"), Ok(r));
        let cluster_scoped = ObjectRef::new("", "h100");
        assert_eq!(cluster_scoped.as_str(), "/h100");
        assert_eq!(ObjectRef::parse("/h100"), Ok(cluster_scoped));
    }

    #[test]
    fn a_key_without_one_slash_is_refused() {
        for bad in ["train-1", "a/b/c", ""] {
            let error = ObjectRef::parse(bad).err().unwrap_or_default();
            assert!(error.contains("namespace/name"), "{bad}: {error}");
        }
    }

    #[test]
    fn references_order_as_their_written_form() {
        let mut refs = [
            ObjectRef::new("team-a", "x"),
            ObjectRef::new("team-a-b", "y"),
            ObjectRef::new("team-a", "x-1"),
            ObjectRef::new("team", "z"),
        ];
        let mut keys: Vec<String> = refs.iter().map(ToString::to_string).collect();
        refs.sort();
        keys.sort();
        assert_eq!(
            refs.iter().map(ToString::to_string).collect::<Vec<_>>(),
            keys
        );
    }
}
