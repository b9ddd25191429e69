//! Scenario tests of `validate()`: each rule, on a job or queue a person would write.

use muster_api::document::MusterObject;
use muster_api::{FieldError, Validate};

fn check(yaml: &str) -> Vec<FieldError> {
    let value: serde_json::Value = match serde_yaml_ng::from_str(yaml) {
        Ok(v) => v,
        Err(e) => unreachable!("fixture is not YAML: {e}"),
    };
    match MusterObject::from_value(value) {
        Ok(object) => object.validate(),
        Err(errors) => errors,
    }
}

fn paths(errors: &[FieldError]) -> Vec<&str> {
    errors.iter().map(|e| e.path.as_str()).collect()
}

const GOOD_JOB: &str = r"
apiVersion: muster.dev/v1alpha1
kind: GpuJob
metadata: {name: train, namespace: team-a}
spec:
  queueName: training
  priority: 10
  podSets:
  - name: workers
    count: 16
    topology: {required: cloud.google.com/gce-topology-block}
    template:
      spec:
        containers:
        - name: trainer
          image: trainer:1
          resources: {limits: {nvidia.com/gpu: 8}}
";

fn job_with(replace: &str, with: &str) -> String {
    assert!(GOOD_JOB.contains(replace), "fixture lacks {replace:?}");
    GOOD_JOB.replace(replace, with)
}

#[test]
fn a_well_formed_job_is_valid() {
    assert_eq!(check(GOOD_JOB), vec![]);
}

#[test]
fn every_error_is_reported_at_once() {
    let yaml = job_with("count: 16", "count: 0")
        .replace("name: workers", "name: Workers")
        .replace("queueName: training", "queueName: ''");
    let errors = check(&yaml);
    assert_eq!(
        paths(&errors),
        vec![
            "spec.queueName",
            "spec.podSets[0].name",
            "spec.podSets[0].count"
        ]
    );
}

#[test]
fn topology_allows_one_constraint() {
    let yaml = job_with(
        "{required: cloud.google.com/gce-topology-block}",
        "{required: a, preferred: b, tpu: {accelerator: tpu-v5p-slice, topology: 2x2x4}}",
    );
    let errors = check(&yaml);
    let topology = errors.iter().find(|e| e.path == "spec.podSets[0].topology");
    assert!(
        topology.is_some_and(|e| e.message.contains("required and preferred and tpu")),
        "{errors:?}"
    );
}

#[test]
fn topology_levels_must_be_label_keys() {
    let errors = check(&job_with(
        "cloud.google.com/gce-topology-block",
        "not a/valid/key",
    ));
    assert_eq!(paths(&errors), vec!["spec.podSets[0].topology.required"]);
}

#[test]
fn tpu_shapes_are_checked_per_generation() {
    let tpu = |acc: &str, shape: &str, count: u32, chips: u32| {
        check(&format!(
            r"
apiVersion: muster.dev/v1alpha1
kind: GpuJob
metadata: {{name: tpu}}
spec:
  queueName: q
  podSets:
  - name: hosts
    count: {count}
    topology: {{tpu: {{accelerator: {acc}, topology: {shape}}}}}
    template:
      spec:
        containers:
        - {{name: c, image: i, resources: {{limits: {{google.com/tpu: {chips}}}}}}}
"
        ))
    };
    assert_eq!(tpu("tpu-v5p-slice", "2x2x4", 4, 4), vec![]);
    assert_eq!(tpu("tpu-v4-podslice", "4x4x4", 16, 4), vec![]);
    assert_eq!(tpu("tpu-v6e-slice", "4x8", 8, 4), vec![]);
    assert_eq!(
        tpu("tpu-v5-lite-podslice", "2x4", 1, 8),
        vec![],
        "single host of 8 chips"
    );
    assert_eq!(tpu("tpu7x", "2x2x1", 1, 4), vec![]);
    let e = tpu("tpu-v5-lite-podslice", "3x3", 3, 4);
    assert_eq!(
        e.iter().map(ToString::to_string).collect::<Vec<_>>(),
        vec![
            "spec.podSets[0].topology.tpu.topology: \"3x3\" is not a valid tpu-v5-lite-podslice shape; valid shapes are 1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16"
        ]
    );
    let e = tpu("tpu-v5p-slice", "2x2x4", 2, 4);
    assert!(e[0].message.ends_with("set count to 4"), "{e:?}");
    let e = tpu("tpu-v5p-slice", "2x2x4", 4, 8);
    assert_eq!(paths(&e), vec!["spec.podSets[0].topology.tpu"]);
    let e = tpu("tpu-v9-imaginary", "2x2", 1, 4);
    assert!(
        e[0].message.contains("tpu-v5p-slice"),
        "lists the known accelerators: {e:?}"
    );
}

#[test]
fn pod_host_names_must_fit_dns() {
    let long = "a".repeat(55);
    let errors = check(&job_with("{name: train,", &format!("{{name: {long},")));
    assert_eq!(paths(&errors), vec!["metadata.name"]);
    assert!(errors[0].message.contains("by 3"), "{errors:?}");
}

#[test]
fn quota_quantities_and_limits() {
    let errors = check(
        r#"
apiVersion: muster.dev/v1alpha1
kind: ClusterQueue
metadata: {name: cq}
spec:
  cohort: all
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h100
      resources:
      - {name: nvidia.com/gpu, nominalQuota: "16", lendingLimit: "17", borrowingLimit: "-1"}
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h100
      resources:
      - {name: nvidia.com/gpu, nominalQuota: "8"}
  provisioning:
    className: queued-provisioning.gke.io
    retry: {baseSeconds: 600, maxSeconds: 60}
"#,
    );
    assert_eq!(
        paths(&errors),
        vec![
            "spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit",
            "spec.resourceGroups[0].flavors[0].resources[0].lendingLimit",
            "spec.resourceGroups[1].coveredResources[0]",
            "spec.resourceGroups[1].flavors[0].name",
            "spec.provisioning.retry.maxSeconds",
        ],
        "{errors:#?}"
    );
}

#[test]
fn a_cohort_lends_what_its_subtree_has_but_only_with_a_parent_to_lend_to() {
    let cohort = |parent: &str, lending: &str| {
        format!(
            r#"
apiVersion: muster.dev/v1alpha1
kind: Cohort
metadata: {{name: ml}}
spec:
  {parent}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h100
      resources:
      - {{name: nvidia.com/gpu, nominalQuota: "8", lendingLimit: "{lending}", borrowingLimit: "4"}}
"#
        )
    };
    // More than its own 8: it lends what its teams lend it too.
    assert_eq!(check(&cohort("parent: org", "24")), Vec::new());
    let errors = check(&cohort("", "24"));
    assert_eq!(
        paths(&errors),
        vec![
            "spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit",
            "spec.resourceGroups[0].flavors[0].resources[0].lendingLimit",
        ],
        "{errors:#?}"
    );
    assert!(errors[0].message.contains("set spec.parent"), "{errors:#?}");
    let errors = check(&cohort("parent: ml", "-1"));
    assert_eq!(
        paths(&errors),
        vec![
            "spec.parent",
            "spec.resourceGroups[0].flavors[0].resources[0].lendingLimit",
        ],
        "{errors:#?}"
    );
}

#[test]
fn namespace_selectors_use_known_operators() {
    let errors = check(
        r"
apiVersion: muster.dev/v1alpha1
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector:
    matchExpressions:
    - {key: team, operator: In}
    - {key: team, operator: Equals, values: [a]}
    - {key: team, operator: Exists, values: [a]}
",
    );
    assert_eq!(
        paths(&errors),
        vec![
            "spec.namespaceSelector.matchExpressions[0].values",
            "spec.namespaceSelector.matchExpressions[1].operator",
            "spec.namespaceSelector.matchExpressions[2].values",
        ]
    );
}

#[test]
fn local_queues_and_flavors() {
    let errors = check(
        "apiVersion: muster.dev/v1alpha1\nkind: LocalQueue\nmetadata: {name: q}\nspec: {clusterQueue: ''}\n",
    );
    assert_eq!(paths(&errors), vec!["spec.clusterQueue"]);
    let errors = check(
        r"
apiVersion: muster.dev/v1alpha1
kind: ResourceFlavor
metadata: {name: f}
spec:
  nodeLabels: {cloud.google.com/gke-accelerator: nvidia-h100-80gb}
  nodeTaints: [{key: nvidia.com/gpu, effect: Sometimes}]
  topologyLevels: [cloud.google.com/gce-topology-block, cloud.google.com/gce-topology-block]
",
    );
    assert_eq!(
        paths(&errors),
        vec!["spec.nodeTaints[0].effect", "spec.topologyLevels[1]"]
    );
}

#[test]
fn objects_without_names_are_invalid() {
    let errors = check(
        "apiVersion: muster.dev/v1alpha1\nkind: LocalQueue\nmetadata: {}\nspec: {clusterQueue: cq}\n",
    );
    assert_eq!(paths(&errors), vec!["metadata.name"]);
    let errors = check(
        "apiVersion: muster.dev/v1alpha1\nkind: LocalQueue\nmetadata: {generateName: q-}\nspec: {clusterQueue: cq}\n",
    );
    assert_eq!(errors, vec![]);
}

#[test]
fn a_gpu_share_is_part_of_one_gpu_in_whole_percent_and_the_template_asks_no_gpu() {
    let share = |value: &str| {
        job_with(
            "    count: 16\n",
            &format!("    count: 16\n    gpuShare: {value}\n"),
        )
        .replace(
            "resources: {limits: {nvidia.com/gpu: 8}}",
            "resources: {limits: {cpu: 2}}",
        )
    };
    assert_eq!(check(&share("250m")), vec![]);
    assert_eq!(check(&share("'0.5'")), vec![]);
    for (value, says) in [
        ("'0'", "is zero"),
        ("'1'", "one GPU or more"),
        ("1500m", "one GPU or more"),
        ("333m", "use 330m or 340m"),
        ("half", "is not a quantity"),
    ] {
        let errors = check(&share(value));
        assert_eq!(paths(&errors), ["spec.podSets[0].gpuShare"], "{value}");
        assert!(
            errors[0].message.contains(says),
            "{value}: {}",
            errors[0].message
        );
    }
    let asks_gpu = job_with("    count: 16\n", "    count: 16\n    gpuShare: 500m\n");
    let errors = check(&asks_gpu);
    assert_eq!(paths(&errors), ["spec.podSets[0].template"]);
    assert!(
        errors[0].message.contains("nvidia.com/gpu"),
        "{}",
        errors[0].message
    );
}
