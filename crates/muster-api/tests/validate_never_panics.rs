//! Property: `validate()` never panics, whatever a user (or a fuzzer) writes.

use muster_api::Validate;
use muster_api::document::MusterObject;
use proptest::prelude::*;
use serde_json::{Value, json};

/// Any short string, with a bias toward the tricky ones.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,12}",
        Just(String::new()),
        Just("2x2x4".to_owned()),
        Just("tpu-v5p-slice".to_owned()),
        Just("tpu-v5-lite-podslice".to_owned()),
        Just("cloud.google.com/gce-topology-block".to_owned()),
        "[0-9x]{0,9}",
        "-?[0-9]{0,25}(\\.[0-9]{0,5})?(m|k|Ki|Gi|Ei|e[0-9]{1,3}|E-?[0-9]{1,2})?",
    ]
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i32>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-3i32..10).prop_map(Value::from),
        text().prop_map(Value::from),
    ]
}

fn resources() -> impl Strategy<Value = Value> {
    proptest::collection::btree_map(
        prop_oneof![
            Just("nvidia.com/gpu".to_owned()),
            Just("google.com/tpu".to_owned()),
            Just("cpu".to_owned()),
            text()
        ],
        text(),
        0..4,
    )
    .prop_map(|m| json!(m))
}

fn pod_set() -> impl Strategy<Value = Value> {
    (text(), number(), text(), text(), number(), any::<bool>(), resources(), resources(), 0u8..4).prop_map(
        |(name, count, accelerator, shape, slices, rotate, requests, limits, pick)| {
            let topology = match pick {
                0 => json!(null),
                1 => json!({"required": accelerator}),
                2 => json!({"tpu": {"accelerator": accelerator, "topology": shape, "slices": slices, "allowRotation": rotate}}),
                _ => json!({"required": shape, "preferred": accelerator, "tpu": {"accelerator": accelerator, "topology": shape}}),
            };
            json!({
                "name": name, "count": count, "topology": topology,
                "template": {"spec": {
                    "containers": [{"name": name, "image": shape, "resources": {"requests": requests, "limits": limits}}],
                    "initContainers": [{"name": "init", "restartPolicy": "Always", "resources": {"limits": limits}}]
                }}
            })
        },
    )
}

fn gpu_job() -> impl Strategy<Value = Value> {
    (text(), text(), number(), number(), proptest::collection::vec(pod_set(), 0..10)).prop_map(
        |(name, queue, priority, timeout, pod_sets)| {
            json!({
                "apiVersion": "muster.dev/v1alpha1", "kind": "GpuJob",
                "metadata": {"name": name},
                "spec": {"queueName": queue, "priority": priority, "podsReadyTimeoutSeconds": timeout, "podSets": pod_sets}
            })
        },
    )
}

/// Resource groups of any text: what a ClusterQueue and a Cohort both hold.
fn resource_group() -> impl Strategy<Value = Value> {
    let quota = (text(), text(), text(), text())
        .prop_map(|(name, n, b, l)| json!({"name": name, "nominalQuota": n, "borrowingLimit": b, "lendingLimit": l}));
    let flavor = (text(), proptest::collection::vec(quota, 0..3))
        .prop_map(|(name, r)| json!({"name": name, "resources": r}));
    (
        proptest::collection::vec(text(), 0..3),
        proptest::collection::vec(flavor, 0..3),
    )
        .prop_map(|(c, f)| json!({"coveredResources": c, "flavors": f}))
}

fn cluster_queue() -> impl Strategy<Value = Value> {
    (text(), proptest::option::of(text()), proptest::collection::vec(resource_group(), 0..3), number(), number()).prop_map(
        |(name, cohort, groups, base, max)| {
            json!({
                "apiVersion": "muster.dev/v1alpha1", "kind": "ClusterQueue",
                "metadata": {"name": name},
                "spec": {"cohort": cohort, "resourceGroups": groups,
                         "provisioning": {"className": name, "retry": {"baseSeconds": base, "maxSeconds": max}}}
            })
        },
    )
}

fn cohort() -> impl Strategy<Value = Value> {
    (text(), proptest::option::of(text()), proptest::collection::vec(resource_group(), 0..3), text()).prop_map(
        |(name, parent, groups, weight)| {
            json!({
                "apiVersion": "muster.dev/v1alpha1", "kind": "Cohort",
                "metadata": {"name": name},
                "spec": {"parent": parent, "resourceGroups": groups, "fairSharing": {"weight": weight}}
            })
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn gpu_jobs(job in gpu_job()) {
        if let Ok(object) = MusterObject::from_value(job) {
            for error in object.validate() {
                prop_assert!(!error.path.is_empty() && !error.message.is_empty());
            }
        }
    }

    #[test]
    fn cohorts(cohort in cohort()) {
        if let Ok(object) = MusterObject::from_value(cohort) {
            for error in object.validate() {
                prop_assert!(!error.path.is_empty() && !error.message.is_empty());
            }
        }
    }

    #[test]
    fn cluster_queues(cq in cluster_queue()) {
        if let Ok(object) = MusterObject::from_value(cq) {
            let _ = object.validate();
        }
    }
}
