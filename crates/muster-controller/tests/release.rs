//! The objects that release a gang: names, gates, pinning, environment, owner and Service.

use muster_api::wire::{ADMISSION_GATE, GPU_DEVICES_ANNOTATION, JOB_LABEL};
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use muster_admission::{Admitted, PodSetPlacement};
use muster_api::{GpuJob, ResourceFlavorSpec};
use muster_controller::release::{ReleaseError, gang};

fn job(pod_sets: &serde_json::Value) -> GpuJob {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "muster.dev/v1alpha1",
        "kind": "GpuJob",
        "metadata": {"name": "train", "namespace": "team-a", "uid": "u-1"},
        "spec": {"queueName": "research", "podSets": pod_sets}
    }))
    .unwrap_or_default()
}

fn set(name: &str, count: i64, topology: &serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "name": name,
        "count": count,
        "topology": topology,
        "template": {
            "metadata": {"labels": {"app": "trainer"}},
            "spec": {"containers": [{"name": "main", "image": "trainer:1",
                "env": [{"name": "MUSTER_WORLD_SIZE", "value": "stale"}]}]}
        }
    })
}

fn placement(name: &str, flavor: &str, nodes: &[&str]) -> PodSetPlacement {
    PodSetPlacement {
        name: name.into(),
        flavor: flavor.into(),
        domain: Vec::new(),
        nodes: nodes.iter().map(|n| (*n).to_owned()).collect(),
        devices: Vec::new(),
    }
}

fn flavors() -> BTreeMap<String, ResourceFlavorSpec> {
    BTreeMap::from([(
        "h100".to_owned(),
        ResourceFlavorSpec {
            node_labels: BTreeMap::from([("pool".to_owned(), "h100".to_owned())]),
            ..ResourceFlavorSpec::default()
        },
    )])
}

/// The pod's annotation `key`.
fn annotation(pod: &Pod, key: &str) -> Option<String> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key).cloned())
}

fn env(pod: &Pod, name: &str) -> Option<String> {
    pod.spec.as_ref()?.containers[0]
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}

#[test]
fn every_pod_is_gated_pinned_named_and_told_its_peers() {
    let job = job(&serde_json::json!([
        set("launcher", 1, &serde_json::json!(null)),
        set(
            "workers",
            2,
            &serde_json::json!({"required": "cloud.google.com/gce-topology-block"})
        )
    ]));
    let admitted = Admitted {
        job: "team-a/train".into(),
        cluster_queue: "research".into(),
        pod_sets: vec![
            placement("launcher", "h100", &["n0"]),
            placement("workers", "h100", &["n1", "n2"]),
        ],
        borrowing: false,
    };
    let g = match gang(&job, &admitted, &flavors()) {
        Ok(g) => g,
        Err(e) => unreachable!("{e}"),
    };
    let names: Vec<String> = g
        .pods
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert_eq!(
        names,
        ["train-launcher-0", "train-workers-0", "train-workers-1"]
    );
    let w1 = &g.pods[2];
    let spec = w1.spec.clone().unwrap_or_default();
    assert_eq!(
        spec.scheduling_gates
            .map(|g| g.into_iter().map(|g| g.name).collect::<Vec<_>>()),
        Some(vec![ADMISSION_GATE.to_owned()])
    );
    assert_eq!(
        spec.node_selector,
        Some(BTreeMap::from([
            ("kubernetes.io/hostname".to_owned(), "n2".to_owned()),
            ("pool".to_owned(), "h100".to_owned()),
        ]))
    );
    assert_eq!(spec.hostname.as_deref(), Some("train-workers-1"));
    assert_eq!(spec.subdomain.as_deref(), Some("train"));
    assert_eq!(env(w1, "MUSTER_POD_INDEX").as_deref(), Some("1"));
    assert_eq!(env(w1, "MUSTER_POD_SET").as_deref(), Some("workers"));
    assert_eq!(
        env(w1, "MUSTER_WORLD_SIZE").as_deref(),
        Some("3"),
        "Muster's value wins"
    );
    assert_eq!(
        env(w1, "MUSTER_PEER_HOSTS").as_deref(),
        Some(
            "train-launcher-0.train.team-a.svc,train-workers-0.train.team-a.svc,train-workers-1.train.team-a.svc"
        )
    );
    let labels = w1.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("app").map(String::as_str), Some("trainer"));
    assert_eq!(labels.get(JOB_LABEL).map(String::as_str), Some("train"));
    let owner = w1.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(
        owner
            .iter()
            .map(|o| (o.kind.as_str(), o.uid.as_str(), o.controller))
            .collect::<Vec<_>>(),
        [("GpuJob", "u-1", Some(true))]
    );
    let svc = g.service.clone().and_then(|s| s.spec).unwrap_or_default();
    assert_eq!(svc.cluster_ip.as_deref(), Some("None"));
    assert_eq!(svc.publish_not_ready_addresses, Some(true));
    // Same input, same objects.
    assert_eq!(gang(&job, &admitted, &flavors()).ok(), Some(g));
}

#[test]
fn tpu_workers_know_their_slice() {
    let job = job(&serde_json::json!([set(
        "hosts",
        4,
        &serde_json::json!({"tpu": {"accelerator": "tpu-v5p-slice", "topology": "2x2x2", "slices": 2}})
    )]));
    let admitted = Admitted {
        job: "team-a/train".into(),
        cluster_queue: "research".into(),
        pod_sets: vec![placement("hosts", "h100", &["a0", "a1", "b0", "b1"])],
        borrowing: false,
    };
    let g = gang(&job, &admitted, &flavors()).unwrap_or_else(|e| unreachable!("{e}"));
    let third = &g.pods[2];
    assert_eq!(env(third, "TPU_WORKER_ID").as_deref(), Some("0"));
    assert_eq!(
        env(third, "TPU_WORKER_HOSTNAMES").as_deref(),
        Some("train-hosts-2.train.team-a.svc,train-hosts-3.train.team-a.svc")
    );
}

#[test]
fn an_admission_that_does_not_match_the_job_is_refused() {
    let job = job(&serde_json::json!([set(
        "workers",
        2,
        &serde_json::json!(null)
    )]));
    let short = Admitted {
        job: "team-a/train".into(),
        cluster_queue: "research".into(),
        pod_sets: vec![placement("workers", "h100", &["n1"])],
        borrowing: false,
    };
    assert_eq!(
        gang(&job, &short, &flavors()).err(),
        Some(ReleaseError::CountMismatch {
            pod_set: "workers".into(),
            placed: 1,
            count: 2
        })
    );
    let unknown = Admitted {
        pod_sets: vec![placement("workers", "a100", &["n1", "n2"])],
        ..short
    };
    assert!(matches!(
        gang(&job, &unknown, &flavors()),
        Err(ReleaseError::UnknownFlavor { .. })
    ));
}

#[test]
fn a_gang_of_one_needs_no_gate_and_a_gang_of_two_gates_every_pod() {
    use muster_controller::release::is_gated;
    let admitted = |nodes: &[&str]| Admitted {
        job: "team-a/train".into(),
        cluster_queue: "research".into(),
        pod_sets: vec![placement("workers", "h100", nodes)],
        borrowing: false,
    };
    let one = gang(
        &job(&serde_json::json!([set(
            "workers",
            1,
            &serde_json::Value::Null
        )])),
        &admitted(&["n1"]),
        &flavors(),
    );
    let two = gang(
        &job(&serde_json::json!([set(
            "workers",
            2,
            &serde_json::Value::Null
        )])),
        &admitted(&["n1", "n2"]),
        &flavors(),
    );
    let (Ok(one), Ok(two)) = (one, two) else {
        unreachable!("both gangs build")
    };
    assert!(!is_gated(&one.pods[0]));
    assert_eq!(
        one.pods[0]
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.clone()),
        None
    );
    assert!(two.pods.iter().all(is_gated));
}

/// A pod set with `gpuShare`: each pod's first container gets one HAMi vGPU with the share in
/// percent of cores and memory, and the pod names the device Muster counted it on, so that a
/// restarted controller books the same device.
#[test]
fn a_share_pod_gets_its_vgpu_and_names_its_device() {
    let mut workers = set("workers", 2, &serde_json::json!(null));
    workers["gpuShare"] = serde_json::json!("250m");
    let job = job(&serde_json::json!([workers]));
    let mut placed = placement("workers", "h100", &["n1", "n1"]);
    placed.devices = vec![vec![0], vec![3]];
    let admitted = Admitted {
        job: "team-a/train".into(),
        cluster_queue: "research".into(),
        pod_sets: vec![placed],
        borrowing: false,
    };
    let g = match gang(&job, &admitted, &flavors()) {
        Ok(g) => g,
        Err(e) => unreachable!("{e}"),
    };
    let devices: Vec<Option<String>> = g
        .pods
        .iter()
        .map(|p| annotation(p, GPU_DEVICES_ANNOTATION))
        .collect();
    assert_eq!(devices, [Some("0".to_owned()), Some("3".to_owned())]);
    let limits: BTreeMap<String, String> = g.pods[0]
        .spec
        .as_ref()
        .and_then(|s| s.containers[0].resources.as_ref())
        .and_then(|r| r.limits.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    assert_eq!(
        limits,
        BTreeMap::from([
            ("nvidia.com/gpu".to_owned(), "1".to_owned()),
            ("nvidia.com/gpucores".to_owned(), "25".to_owned()),
            ("nvidia.com/gpumem-percentage".to_owned(), "25".to_owned()),
        ])
    );
}

/// HAMi registers a node's GPUs in a node annotation (legacy `:`-joined entries or JSON); a
/// share pod is pinned to the UUID of the device Muster counted it on, so HAMi binds its vGPU
/// there. Unknown nodes and devices the node does not list are left to HAMi.
#[test]
fn share_pods_are_pinned_to_the_uuid_of_their_device() {
    use muster_controller::hami::{USE_GPU_UUID_ANNOTATION, device_uuids, pin_devices};
    let legacy = "GPU-aaa,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:GPU-bbb,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:";
    assert_eq!(device_uuids(legacy), ["GPU-aaa", "GPU-bbb"]);
    let json = r#"[{"id":"GPU-ccc","count":10,"devmem":81920},{"id":"GPU-ddd","count":10}]"#;
    assert_eq!(device_uuids(json), ["GPU-ccc", "GPU-ddd"]);
    assert!(device_uuids("[not json").is_empty());
    assert!(device_uuids("").is_empty());

    let mut workers = set("workers", 3, &serde_json::json!(null));
    workers["gpuShare"] = serde_json::json!("500m");
    let job = job(&serde_json::json!([workers]));
    let mut placed = placement("workers", "h100", &["n1", "n1", "n2"]);
    placed.devices = vec![vec![1], vec![7], vec![0]];
    let admitted = Admitted {
        job: "team-a/train".into(),
        cluster_queue: "research".into(),
        pod_sets: vec![placed],
        borrowing: false,
    };
    let mut g = match gang(&job, &admitted, &flavors()) {
        Ok(g) => g,
        Err(e) => unreachable!("{e}"),
    };
    let n1 = device_uuids(legacy);
    pin_devices(&mut g.pods, |node| (node == "n1").then_some(n1.as_slice()));
    let pins: Vec<Option<String>> = g
        .pods
        .iter()
        .map(|p| annotation(p, USE_GPU_UUID_ANNOTATION))
        .collect();
    // Device 7 is not among n1's two; n2's devices are unknown.
    assert_eq!(pins, [Some("GPU-bbb".to_owned()), None, None]);
}

#[test]
fn a_gang_joins_one_scheduling_pod_group_of_all_its_pods_owned_by_the_job() {
    let job = job(&serde_json::json!([set(
        "workers",
        2,
        &serde_json::json!({})
    )]));
    let admitted = Admitted {
        job: "team-a/train".to_owned(),
        cluster_queue: "research".to_owned(),
        pod_sets: vec![placement("workers", "h100", &["n1", "n2"])],
        borrowing: false,
    };
    let mut g = gang(&job, &admitted, &flavors()).unwrap_or_else(|e| unreachable!("{e}"));
    muster_controller::release::join_scheduling_group(&mut g);
    let group = g.scheduling_group.clone().unwrap_or_else(|| unreachable!());
    assert_eq!(group.metadata.name.as_deref(), Some("train-0"));
    assert_eq!(
        group.spec.scheduling_policy.gang.map(|g| g.min_count),
        Some(2)
    );
    let owners = group.metadata.owner_references.unwrap_or_default();
    assert!(
        owners
            .iter()
            .any(|o| o.kind == "GpuJob" && o.name == "train")
    );
    for pod in &g.pods {
        let named = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_group.as_ref())
            .and_then(|s| s.pod_group_name.as_deref());
        assert_eq!(named, Some("train-0"));
    }
    // A queue entry's gang has no pods of its own: nothing to join.
    let mut empty = g.clone();
    empty.pods.clear();
    empty.scheduling_group = None;
    muster_controller::release::join_scheduling_group(&mut empty);
    assert!(empty.scheduling_group.is_none());
}
