//! Reading nodes, pods and pod sets: what counts as schedulable, what holds capacity, and how a
//! flavor and node affinity shape where pods may go.

use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};
use muster_api::{Amount, PodSet};
use muster_topology::{
    Constraint, Mismatch, NodeInfo, PodSetRequest, RequestError, Topology, pod_usage, tolerated,
};

fn yaml<T: serde::de::DeserializeOwned>(text: &str) -> T {
    serde_yaml_ng::from_str(text).unwrap_or_else(|e| unreachable!("fixture: {e}"))
}

const NODE: &str = "
metadata: {name: n1, labels: {pool: a, zone: z1, rank: '7'}}
spec: {taints: [{key: gpu, value: 'yes', effect: NoSchedule}]}
status:
  allocatable: {cpu: '8', nvidia.com/gpu: '8', pods: '110'}
  conditions: [{type: Ready, status: 'True'}]
";

#[test]
fn nodes_are_schedulable_only_when_ready_and_uncordoned() {
    let info = NodeInfo::from_node(&yaml::<Node>(NODE)).unwrap_or_default();
    assert!(info.schedulable);
    assert_eq!(
        info.allocatable.get("nvidia.com/gpu"),
        Amount::from_units(8)
    );
    let cordoned = NodeInfo::from_node(&yaml::<Node>(
        &NODE.replace("spec: {", "spec: {unschedulable: true, "),
    ));
    assert_eq!(cordoned.map(|n| n.schedulable), Ok(false));
    let not_ready = NodeInfo::from_node(&yaml::<Node>(
        &NODE.replace("status: 'True'", "status: 'False'"),
    ));
    assert_eq!(not_ready.map(|n| n.schedulable), Ok(false));
    let bad = NodeInfo::from_node(&yaml::<Node>(&NODE.replace("cpu: '8'", "cpu: eight")));
    assert!(bad.is_err_and(|e| e.to_string().contains("node n1: status.allocatable.cpu")));
}

#[test]
fn only_bound_unfinished_pods_hold_capacity() {
    let pod = |node: &str, phase: &str| {
        yaml::<Pod>(&format!(
            "metadata: {{name: p, namespace: ns}}\nspec:\n  {node}\n  containers: [{{name: c, resources: {{limits: {{nvidia.com/gpu: '2'}}}}}}]\nstatus: {{phase: {phase}}}\n"
        ))
    };
    let running = pod_usage(&pod("nodeName: n1", "Running")).unwrap_or_default();
    let (node, usage) = running.unwrap_or_default();
    assert_eq!(node, "n1");
    assert_eq!(usage.get("nvidia.com/gpu"), Amount::from_units(2));
    assert_eq!(usage.get("pods"), Amount::from_units(1));
    assert_eq!(pod_usage(&pod("nodeName: n1", "Succeeded")), Ok(None));
    assert_eq!(pod_usage(&pod("nodeName: n1", "Failed")), Ok(None));
    assert_eq!(
        pod_usage(&pod("schedulerName: default", "Pending")),
        Ok(None)
    );
}

const POD_SET: &str = "
name: w
count: 4
template:
  spec:
    nodeSelector: {zone: z1}
    affinity:
      nodeAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
          nodeSelectorTerms:
          - matchExpressions: [{key: rank, operator: Gt, values: ['5']}, {key: pool, operator: NotIn, values: [b]}]
    containers: [{name: c, image: i, resources: {limits: {nvidia.com/gpu: '8'}}}]
";

#[test]
fn a_flavor_adds_its_labels_and_tolerations() {
    let node = NodeInfo::from_node(&yaml::<Node>(NODE)).unwrap_or_default();
    let set: PodSet = yaml(POD_SET);
    let bare = PodSetRequest::from_pod_set(&set, None).unwrap_or_else(|e| unreachable!("{e}"));
    assert_eq!(
        bare.node_mismatch(&node),
        Some(Mismatch::Taint("gpu".into()))
    );
    let flavor = yaml::<muster_api::ResourceFlavorSpec>(
        "nodeLabels: {pool: a}\ntolerations: [{key: gpu, operator: Equal, value: 'yes', effect: NoSchedule}]",
    );
    let req =
        PodSetRequest::from_pod_set(&set, Some(&flavor)).unwrap_or_else(|e| unreachable!("{e}"));
    assert_eq!(req.node_mismatch(&node), None);
    assert_eq!(req.requests.get("pods"), Amount::from_units(1));
    let other_pool = yaml::<muster_api::ResourceFlavorSpec>("nodeLabels: {pool: b}");
    let req = PodSetRequest::from_pod_set(&set, Some(&other_pool))
        .unwrap_or_else(|e| unreachable!("{e}"));
    assert_eq!(req.node_mismatch(&node), Some(Mismatch::Selector));
}

#[test]
fn node_affinity_operators() {
    let set: PodSet = yaml(POD_SET);
    let mut req = PodSetRequest::from_pod_set(&set, None).unwrap_or_else(|e| unreachable!("{e}"));
    req.tolerations.push(Toleration {
        operator: Some("Exists".into()),
        ..Toleration::default()
    });
    let node = |labels: &str| {
        NodeInfo::from_node(&yaml::<Node>(
            &NODE.replace("{pool: a, zone: z1, rank: '7'}", labels),
        ))
        .unwrap_or_default()
    };
    assert_eq!(
        req.node_mismatch(&node("{pool: a, zone: z1, rank: '7'}")),
        None
    );
    assert_eq!(
        req.node_mismatch(&node("{pool: a, zone: z1, rank: '3'}")),
        Some(Mismatch::Affinity)
    );
    assert_eq!(
        req.node_mismatch(&node("{pool: b, zone: z1, rank: '7'}")),
        Some(Mismatch::Affinity)
    );
    assert_eq!(
        req.node_mismatch(&node("{zone: z1, rank: x}")),
        Some(Mismatch::Affinity)
    );
}

#[test]
fn tolerations_follow_kubernetes() {
    let taint = |effect: &str| Taint {
        key: "gpu".into(),
        value: Some("yes".into()),
        effect: effect.into(),
        time_added: None,
    };
    let tol = |key: &str, op: &str, value: &str, effect: &str| Toleration {
        key: Some(key.into()),
        operator: Some(op.into()),
        value: Some(value.into()),
        effect: Some(effect.into()),
        ..Toleration::default()
    };
    assert!(tolerated(&taint("PreferNoSchedule"), &[]));
    assert!(!tolerated(&taint("NoSchedule"), &[]));
    assert!(tolerated(
        &taint("NoSchedule"),
        &[tol("gpu", "Equal", "yes", "NoSchedule")]
    ));
    assert!(!tolerated(
        &taint("NoSchedule"),
        &[tol("gpu", "Equal", "no", "NoSchedule")]
    ));
    assert!(!tolerated(
        &taint("NoExecute"),
        &[tol("gpu", "Exists", "", "NoSchedule")]
    ));
    assert!(
        tolerated(&taint("NoExecute"), &[tol("", "Exists", "", "")]),
        "an empty key with Exists tolerates everything"
    );
}

#[test]
fn tpu_pod_counts_must_split_evenly_over_slices() {
    let set: PodSet = yaml(
        "name: h\ncount: 6\ntopology: {tpu: {accelerator: tpu-v5p-slice, topology: 2x2x4, slices: 4}}\ntemplate: {spec: {containers: [{name: c, image: i}]}}",
    );
    assert!(matches!(
        PodSetRequest::from_pod_set(&set, None),
        Err(RequestError::Tpu(_))
    ));
    let set: PodSet = yaml(
        "name: h\ncount: 8\ntopology: {tpu: {accelerator: tpu-v5p-slice, topology: 2x2x4, slices: 2}}\ntemplate: {spec: {containers: [{name: c, image: i}]}}",
    );
    let req = PodSetRequest::from_pod_set(&set, None).map(|r| r.constraint);
    assert!(matches!(req, Ok(Constraint::Tpu { slices: 2, .. })));
}

#[test]
fn removing_usage_restores_the_node_and_its_domains() {
    let node = NodeInfo::from_node(&yaml::<Node>(NODE)).unwrap_or_default();
    let mut topo = Topology::new(vec!["zone".into()], [node]);
    let before = (topo.free(0), topo.domain_free(0), topo.domain_free(1));
    let usage: muster_api::Resources = [("nvidia.com/gpu".to_owned(), Amount::from_units(3))]
        .into_iter()
        .collect();
    topo.add_usage(0, &usage);
    assert_eq!(
        topo.domain_free(1).get("nvidia.com/gpu"),
        Amount::from_units(5)
    );
    topo.remove_usage(0, &usage);
    assert_eq!(
        (topo.free(0), topo.domain_free(0), topo.domain_free(1)),
        before
    );
}
