//! Objects as the controller reads them from the API server: parsed with their managed fields
//! passed over unread.
//!
//! Every object the API server returns carries `metadata.managedFields`, the record of which
//! client set which field, often the largest part of a pod or a job and nothing Muster reads.
//! Parsed, each entry's `fieldsV1` becomes a tree of JSON maps, only to be dropped: that was
//! about a seventh of the controller's CPU on a run of 15,000 one-pod jobs (its watch events
//! and the objects its status writes and pod creations return). [`Lean`] parses an object
//! with those entries skipped as JSON is skipped, nothing allocated; the rest of the object
//! is parsed as its own type parses it. An object read through [`Lean`] has
//! `managed_fields: None`, as the index kept them before.

use std::borrow::Cow;
use std::fmt;

use kube::api::Api;
use kube::core::{DynamicResourceScope, ObjectMeta, Resource};
use serde::de::value::{BorrowedStrDeserializer, StrDeserializer};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

/// `K`, parsed without its managed fields (see the module's docs). Its API paths are `K`'s.
#[derive(Clone, Debug, PartialEq)]
pub struct Lean<K>(pub K);

impl<K> Lean<K> {
    /// The object.
    pub fn into_inner(self) -> K {
        self.0
    }
}

/// The same API as `api` (its kind and namespace), reading objects through [`Lean`].
pub fn lean<K>(api: &Api<K>) -> Api<Lean<K>>
where
    K: Resource + Clone,
    K::DynamicType: Default,
{
    let dynamic = K::DynamicType::default();
    let namespace = api.namespace().map(str::to_owned);
    let client = api.clone().into_client();
    match namespace {
        Some(namespace) => Api::namespaced_with(client, &namespace, &dynamic),
        None => Api::all_with(client, &dynamic),
    }
}

impl<K: Resource> Resource for Lean<K> {
    type DynamicType = K::DynamicType;
    // Whether `K` is namespaced is `K`'s to say at compile time; [`lean`] builds the API from
    // one that already chose, so the wrapper only needs its paths.
    type Scope = DynamicResourceScope;

    fn kind(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::version(dt)
    }

    fn api_version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::api_version(dt)
    }

    fn plural(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn url_path(dt: &Self::DynamicType, namespace: Option<&str>) -> String {
        K::url_path(dt, namespace)
    }

    fn meta(&self) -> &ObjectMeta {
        self.0.meta()
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.0.meta_mut()
    }
}

impl<K: serde::Serialize> serde::Serialize for Lean<K> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de, K: de::Deserialize<'de>> de::Deserialize<'de> for Lean<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        K::deserialize(Skipping {
            inner: deserializer,
            at: At::Object,
        })
        .map(Lean)
    }
}

/// Where in the object a map being read is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum At {
    /// The object itself: its `metadata` is read as [`At::Metadata`].
    Object,
    /// Its metadata: `managedFields` is skipped.
    Metadata,
}

impl At {
    /// What a value under `key` of a map here is read as, if it is read by this module at all.
    fn below(self, key: &str) -> Option<At> {
        (self == At::Object && key == "metadata").then_some(At::Metadata)
    }

    /// Whether the entry under `key` of a map here is skipped.
    fn skips(self, key: &str) -> bool {
        self == At::Metadata && key == "managedFields"
    }
}

/// A deserializer of a value at `at`: hands its visitor maps that skip what `at` skips.
struct Skipping<D> {
    inner: D,
    at: At,
}

/// Forwards `deserialize_*` methods to the inner deserializer, the visitor wrapped.
macro_rules! forward {
    ($($method:ident ( $($arg:ident : $ty:ty),* );)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, D::Error> {
                self.inner.$method($($arg,)* Wrapped { inner: visitor, at: self.at })
            }
        )*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Skipping<D> {
    type Error = D::Error;

    forward! {
        deserialize_any();
        deserialize_bool();
        deserialize_i8();
        deserialize_i16();
        deserialize_i32();
        deserialize_i64();
        deserialize_i128();
        deserialize_u8();
        deserialize_u16();
        deserialize_u32();
        deserialize_u64();
        deserialize_u128();
        deserialize_f32();
        deserialize_f64();
        deserialize_char();
        deserialize_str();
        deserialize_string();
        deserialize_bytes();
        deserialize_byte_buf();
        deserialize_option();
        deserialize_unit();
        deserialize_unit_struct(name: &'static str);
        deserialize_newtype_struct(name: &'static str);
        deserialize_seq();
        deserialize_tuple(len: usize);
        deserialize_tuple_struct(name: &'static str, len: usize);
        deserialize_map();
        deserialize_struct(name: &'static str, fields: &'static [&'static str]);
        deserialize_enum(name: &'static str, variants: &'static [&'static str]);
        deserialize_identifier();
        deserialize_ignored_any();
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

/// A visitor of a value at `at`: what it is given is what the inner visitor is given, a map
/// (or the value inside an option) read as at `at`.
struct Wrapped<V> {
    inner: V,
    at: At,
}

/// Forwards `visit_*` methods that take a plain value to the inner visitor.
macro_rules! forward_values {
    ($($method:ident ( $ty:ty );)*) => {
        $(
            fn $method<E: de::Error>(self, v: $ty) -> Result<Self::Value, E> {
                self.inner.$method(v)
            }
        )*
    };
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrapped<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.expecting(f)
    }

    forward_values! {
        visit_bool(bool);
        visit_i64(i64);
        visit_i128(i128);
        visit_u64(u64);
        visit_u128(u128);
        visit_f64(f64);
        visit_char(char);
        visit_str(&str);
        visit_borrowed_str(&'de str);
        visit_string(String);
        visit_bytes(&[u8]);
        visit_borrowed_bytes(&'de [u8]);
        visit_byte_buf(Vec<u8>);
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.inner.visit_some(Skipping {
            inner: d,
            at: self.at,
        })
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.inner.visit_newtype_struct(Skipping {
            inner: d,
            at: self.at,
        })
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_map(Entries {
            inner: map,
            at: self.at,
            next: None,
        })
    }

    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<Self::Value, A::Error> {
        self.inner.visit_enum(data)
    }
}

/// A map at `at`: the entries `at` skips are passed over; the value of an entry read at a
/// deeper place (`next`, from its key) is read as there.
struct Entries<A> {
    inner: A,
    at: At,
    next: Option<At>,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Entries<A> {
    type Error = A::Error;

    fn next_key_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, A::Error> {
        while let Some(Key(key)) = self.inner.next_key::<Key<'de>>()? {
            if self.at.skips(&key) {
                self.inner.next_value::<IgnoredAny>()?;
                continue;
            }
            self.next = self.at.below(&key);
            return match key {
                Cow::Borrowed(key) => seed
                    .deserialize(BorrowedStrDeserializer::<A::Error>::new(key))
                    .map(Some),
                Cow::Owned(key) => seed
                    .deserialize(StrDeserializer::<A::Error>::new(&key))
                    .map(Some),
            };
        }
        Ok(None)
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        match self.next.take() {
            Some(at) => self.inner.next_value_seed(Below { inner: seed, at }),
            None => self.inner.next_value_seed(seed),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

/// A value read as at `at`.
struct Below<S> {
    inner: S,
    at: At,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Below<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.inner.deserialize(Skipping {
            inner: d,
            at: self.at,
        })
    }
}

/// A map's key, borrowed from the input when it can be (no escapes in it).
struct Key<'de>(Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }

            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }

            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use kube::core::WatchEvent;
    use muster_api::GpuJob;

    use super::Lean;
    use crate::index::BatchJob;

    const MANAGED: &str = r#"[{"manager":"kubelet","operation":"Update","apiVersion":"v1",
        "time":"2026-12-01T10:00:00Z","fieldsType":"FieldsV1","subresource":"status",
        "fieldsV1":{"f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{".":{},"f:status":{}}},
        "f:phase":{}}}}]"#;

    fn pod_json(metadata_extra: &str) -> String {
        format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"p","namespace":"ns",
            "labels":{{"managedFields":"kept","app":"a"}},{metadata_extra}
            "resourceVersion":"7"}},"spec":{{"containers":[{{"name":"c","image":"i",
            "resources":{{"requests":{{"nvidia.com/gpu":"1"}}}}}}]}},
            "status":{{"phase":"Running"}}}}"#
        )
    }

    #[test]
    fn a_pod_is_read_whole_but_for_its_managed_fields() {
        let text = pod_json(&format!(r#""managedFields":{MANAGED},"#));
        let whole: Pod = serde_json::from_str(&text).unwrap_or_else(|e| unreachable!("{e}"));
        assert!(whole.metadata.managed_fields.is_some());
        let Lean(lean) =
            serde_json::from_str::<Lean<Pod>>(&text).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(lean.metadata.managed_fields, None);
        let mut expected = whole;
        expected.metadata.managed_fields = None;
        assert_eq!(lean, expected);
        // A label that happens to be named like the skipped field is a label, kept.
        assert_eq!(
            lean.metadata.labels.unwrap_or_default()["managedFields"],
            "kept"
        );
    }

    #[test]
    fn keys_with_escapes_and_fields_in_any_order_read_the_same() {
        // `\u0061pp` is `app`: a key that cannot be borrowed from the input.
        let text = format!(
            r#"{{"status":{{"phase":"Pending"}},"metadata":{{"managedFields":{MANAGED},
            "n\u0061me":"p","annotations":{{"\u0061":"b"}}}},"kind":"Pod","apiVersion":"v1"}}"#
        );
        let Lean(lean) =
            serde_json::from_str::<Lean<Pod>>(&text).unwrap_or_else(|e| unreachable!("{e}"));
        let mut whole: Pod = serde_json::from_str(&text).unwrap_or_else(|e| unreachable!("{e}"));
        whole.metadata.managed_fields = None;
        assert_eq!(lean, whole);
        assert_eq!(lean.metadata.name.as_deref(), Some("p"));
    }

    #[test]
    fn watch_events_and_lists_of_custom_resources_are_read_lean() {
        let job = format!(
            r#"{{"apiVersion":"muster.dev/v1alpha1","kind":"GpuJob","metadata":{{"name":"j",
            "namespace":"ns","managedFields":{MANAGED}}},"spec":{{"queueName":"q",
            "podSets":[{{"name":"w","count":2,"template":{{"spec":{{"containers":[{{"name":"c",
            "image":"i"}}]}}}}}}]}}}}"#
        );
        let event = format!(r#"{{"type":"MODIFIED","object":{job}}}"#);
        let whole: WatchEvent<GpuJob> =
            serde_json::from_str(&event).unwrap_or_else(|e| unreachable!("{e}"));
        let lean: WatchEvent<Lean<GpuJob>> =
            serde_json::from_str(&event).unwrap_or_else(|e| unreachable!("{e}"));
        let (WatchEvent::Modified(mut whole), WatchEvent::Modified(Lean(lean))) = (whole, lean)
        else {
            unreachable!("not a modification");
        };
        assert!(whole.metadata.managed_fields.is_some());
        whole.metadata.managed_fields = None;
        assert_eq!(
            serde_json::to_value(&lean).unwrap_or_else(|e| unreachable!("{e}")),
            serde_json::to_value(&whole).unwrap_or_else(|e| unreachable!("{e}"))
        );
        // The object before its tag: the event is buffered first, and read the same.
        let late_tag = format!(r#"{{"object":{job},"type":"ADDED"}}"#);
        let lean: WatchEvent<Lean<GpuJob>> =
            serde_json::from_str(&late_tag).unwrap_or_else(|e| unreachable!("{e}"));
        let WatchEvent::Added(Lean(late)) = lean else {
            unreachable!("not an addition");
        };
        assert_eq!(late.metadata.managed_fields, None);
        assert_eq!(late.spec.pod_sets[0].count, 2);
        let list = format!(r#"{{"metadata":{{}},"items":[{job},{job}]}}"#);
        let list: kube::core::ObjectList<Lean<GpuJob>> =
            serde_json::from_str(&list).unwrap_or_else(|e| unreachable!("{e}"));
        assert!(
            list.items
                .iter()
                .all(|j| j.0.metadata.managed_fields.is_none() && j.0.spec.queue_name == "q")
        );
    }

    #[test]
    fn a_labelled_job_is_read_lean_with_its_template_kept_as_sent() {
        let job = format!(
            r#"{{"apiVersion":"batch/v1","kind":"Job","metadata":{{"name":"train",
            "namespace":"ns","managedFields":{MANAGED}}},"spec":{{"parallelism":2,
            "template":{{"metadata":{{"labels":{{"app":"a"}}}},"spec":{{"containers":[{{"name":"c",
            "image":"i","resources":{{"requests":{{"nvidia.com/gpu":"1"}}}}}}]}}}}}},
            "status":{{"active":1}}}}"#
        );
        let event = format!(r#"{{"type":"MODIFIED","object":{job}}}"#);
        let lean: WatchEvent<Lean<BatchJob>> =
            serde_json::from_str(&event).unwrap_or_else(|e| unreachable!("{e}"));
        let WatchEvent::Modified(Lean(lean)) = lean else {
            unreachable!("not a modification");
        };
        assert_eq!(lean.metadata.managed_fields, None);
        assert_eq!(
            (lean.spec.parallelism, lean.status.active),
            (Some(2), Some(1))
        );
        let template = lean
            .spec
            .template
            .template()
            .unwrap_or_else(|e| unreachable!("{e:?}"));
        let containers = template.spec.map(|s| s.containers).unwrap_or_default();
        assert_eq!(containers[0].image.as_deref(), Some("i"));
        let list = format!(r#"{{"metadata":{{}},"items":[{job},{job}]}}"#);
        let list: kube::core::ObjectList<Lean<BatchJob>> =
            serde_json::from_str(&list).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(list.items.len(), 2);
        // An object before its type is buffered before it is read, and a template's text
        // cannot be taken from what was buffered: an error, not a Job read wrong.
        let late_tag = format!(r#"{{"object":{job},"type":"ADDED"}}"#);
        assert!(serde_json::from_str::<WatchEvent<Lean<BatchJob>>>(&late_tag).is_err());
    }

    #[test]
    fn a_malformed_object_is_an_error_as_it_was() {
        for bad in [
            r#"{"apiVersion":"v1","kind":"Pod","metadata":"p"}"#,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"managedFields":[{"manager":}]}}"#,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":7}}"#,
            "[1, 2]",
        ] {
            let whole = serde_json::from_str::<Pod>(bad).map(|_| ());
            let lean = serde_json::from_str::<Lean<Pod>>(bad).map(|_| ());
            assert!(lean.is_err(), "{bad}");
            if bad.contains("manager\":}") {
                continue;
            }
            assert_eq!(
                lean.err()
                    .unwrap_or_else(|| unreachable!("{bad}"))
                    .to_string(),
                whole
                    .err()
                    .unwrap_or_else(|| unreachable!("{bad}"))
                    .to_string(),
                "{bad}"
            );
        }
    }

    #[tokio::test]
    async fn its_api_is_its_kinds() {
        let client = || {
            let config = kube::Config::new(
                "https://127.0.0.1:1"
                    .parse()
                    .unwrap_or_else(|e| unreachable!("{e}")),
            );
            kube::Client::try_from(config).unwrap_or_else(|e| unreachable!("{e}"))
        };
        let pods: kube::Api<Pod> = kube::Api::namespaced(client(), "team");
        assert_eq!(super::lean(&pods).resource_url(), pods.resource_url());
        let all: kube::Api<GpuJob> = kube::Api::all(client());
        assert_eq!(super::lean(&all).resource_url(), all.resource_url());
        let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client());
        assert_eq!(super::lean(&nodes).resource_url(), "/api/v1/nodes");
    }
}
