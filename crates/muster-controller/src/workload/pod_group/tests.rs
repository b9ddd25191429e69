//! A pod group's entry and its pins.

use serde_json::json;

use super::*;
use muster_api::wire::{POD_GROUP_SIZE_LABEL, QUEUE_NAME_LABEL};

fn pod(name: &str, size: usize, behind_gate: bool) -> Pod {
    let gates = if behind_gate {
        json!([{"name": ADMISSION_GATE}, {"name": "example.com/other"}])
    } else {
        json!([])
    };
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a", "uid": format!("uid-{name}"),
                     "labels": {QUEUE_NAME_LABEL: "research", POD_GROUP_LABEL: "ray",
                                POD_GROUP_SIZE_LABEL: size.to_string()}},
        "spec": {"schedulingGates": gates,
                 "tolerations": [{"key": "team-a", "operator": "Exists"}],
                 "containers": [{"name": "worker", "image": "ray:2",
                                 "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}))
    .unwrap_or_else(|e| unreachable!("{e}"))
}

fn group(pods: Vec<Pod>) -> PodGroup {
    PodGroup {
        pods: pods
            .into_iter()
            .map(|p| (ObjectRef::of(&p.metadata), p))
            .collect(),
        declared: None,
    }
}

/// Pod `name` that names the `scheduling.k8s.io` PodGroup `ray` (KEP-4671) and carries no
/// size label of its own.
fn scheduled_pod(name: &str) -> Pod {
    let mut pod = pod(name, 0, true);
    if let Some(labels) = pod.metadata.labels.as_mut() {
        labels.remove(POD_GROUP_LABEL);
        labels.remove(POD_GROUP_SIZE_LABEL);
    }
    let mut value = serde_json::to_value(pod).unwrap_or_default();
    value["spec"]["schedulingGroup"] = json!({"podGroupName": "ray"});
    serde_json::from_value(value).unwrap_or_else(|e| unreachable!("{e}"))
}

#[test]
fn pods_naming_a_scheduling_pod_group_are_whole_at_its_gang_size_and_wait_for_it_before() {
    let mut g = group((0..2).map(|i| scheduled_pod(&format!("ray-{i}"))).collect());
    assert!(!g.is_whole(), "no PodGroup seen: they wait for it");
    g.declared = Some(3);
    assert!(!g.is_whole(), "two of three");
    g.declared = Some(2);
    assert!(g.is_whole());
    let entry = g.entry("ray").unwrap_or_else(|e| unreachable!("{e:?}"));
    assert_eq!(entry.spec.pod_sets[0].count, 2);
    assert_eq!(entry.metadata.name.as_deref(), Some("pods-ray"));
}

fn additions() -> Additions {
    Additions {
        labels: BTreeMap::from([
            (JOB_LABEL.to_owned(), "pods-ray".to_owned()),
            (ATTEMPT_LABEL.to_owned(), "0".to_owned()),
        ]),
        annotations: BTreeMap::from([("muster.dev/flavor".to_owned(), "h100".to_owned())]),
        node_labels: BTreeMap::from([("gpu".to_owned(), "h100".to_owned())]),
        tolerations: vec![Toleration {
            key: Some("nvidia.com/gpu".to_owned()),
            operator: Some("Exists".to_owned()),
            ..Toleration::default()
        }],
        pin: None,
    }
}

#[test]
fn a_group_is_whole_once_its_size_of_gated_pods_exists_and_its_entry_is_owned_by_each() {
    let mut pods: Vec<Pod> = (0..3).map(|i| pod(&format!("ray-{i}"), 4, true)).collect();
    // A pod created without the gate is not the group's to hold.
    pods.push(pod("ray-3", 4, false));
    assert!(!group(pods.clone()).is_whole());
    pods.push(pod("ray-4", 4, true));
    let whole = group(pods);
    assert!(whole.is_whole());
    let entry = whole.entry("ray").unwrap_or_else(|e| unreachable!("{e:?}"));
    assert_eq!(entry.metadata.name.as_deref(), Some("pods-ray"));
    assert_eq!(entry.spec.pod_sets[0].count, 4);
    let owners: Vec<&str> = entry
        .metadata
        .owner_references
        .iter()
        .flatten()
        .map(|o| o.name.as_str())
        .collect();
    assert_eq!(owners, ["ray-0", "ray-1", "ray-2", "ray-4"]);
    assert_eq!(
        super::super::workload_of(&entry),
        Some(super::super::WorkloadRef::pod_group(ObjectRef::new(
            "team-a", "ray"
        )))
    );
    assert!(!whole.edited_since("ray", &entry));
}

#[test]
fn each_pin_adds_the_flavor_beside_the_pod_s_own_and_lifts_only_muster_s_gate() {
    let pods: Vec<Pod> = (0..2).map(|i| pod(&format!("ray-{i}"), 2, true)).collect();
    let g = group(pods);
    let nodes = ["n1".to_owned(), "n2".to_owned()];
    let pins = pins(&g, "pods-ray", 0, &nodes, &additions()).unwrap_or_else(|| unreachable!());
    assert_eq!(pins.len(), 2);
    let (first, patch) = &pins[0];
    assert_eq!(first.name(), "ray-0");
    assert_eq!(
        patch["spec"]["nodeSelector"],
        json!({"gpu": "h100", "kubernetes.io/hostname": "n1"})
    );
    assert_eq!(
        patch["spec"]["schedulingGates"],
        json!([{"name": "example.com/other"}])
    );
    assert_eq!(
        patch["spec"]["tolerations"],
        json!([{"key": "team-a", "operator": "Exists"},
               {"key": "nvidia.com/gpu", "operator": "Exists"}])
    );
    assert_eq!(patch["metadata"]["labels"][JOB_LABEL], json!("pods-ray"));
    assert_eq!(patch["metadata"]["labels"][POD_INDEX_LABEL], json!("0"));
    // One pod short: nothing is let go.
    let short = group(vec![pod("ray-0", 2, true)]);
    assert_eq!(pins_of(&short, &nodes), None);
}

fn pins_of(g: &PodGroup, nodes: &[String]) -> Option<Vec<(ObjectRef, Value)>> {
    pins(g, "pods-ray", 0, nodes, &additions())
}

#[test]
fn a_pin_that_landed_keeps_its_place_and_only_the_rest_are_pinned() {
    let mut first = pod("ray-0", 2, true);
    let nodes = ["n1".to_owned(), "n2".to_owned()];
    // ray-1 was let go onto n2 (position 1) before a failure cut the burst short.
    let mut done = pod("ray-1", 2, false);
    done.metadata.labels.get_or_insert_default().extend([
        (JOB_LABEL.to_owned(), "pods-ray".to_owned()),
        (ATTEMPT_LABEL.to_owned(), "0".to_owned()),
        (POD_INDEX_LABEL.to_owned(), "1".to_owned()),
    ]);
    first.metadata.name = Some("ray-9".to_owned());
    let pins = pins_of(&group(vec![first, done]), &nodes).unwrap_or_else(|| unreachable!());
    assert_eq!(pins.len(), 1);
    assert_eq!(pins[0].0.name(), "ray-9");
    assert_eq!(
        pins[0].1["spec"]["nodeSelector"]["kubernetes.io/hostname"],
        json!("n1")
    );
    // Every place taken: nothing more to pin.
    let mut both = pod("ray-0", 2, false);
    both.metadata.labels.get_or_insert_default().extend([
        (JOB_LABEL.to_owned(), "pods-ray".to_owned()),
        (ATTEMPT_LABEL.to_owned(), "0".to_owned()),
        (POD_INDEX_LABEL.to_owned(), "0".to_owned()),
    ]);
    let mut other = pod("ray-1", 2, false);
    other.metadata.labels = both.metadata.labels.clone();
    if let Some(l) = other.metadata.labels.as_mut() {
        l.insert(POD_INDEX_LABEL.to_owned(), "1".to_owned());
    }
    assert_eq!(pins_of(&group(vec![both, other]), &nodes), None);
}
