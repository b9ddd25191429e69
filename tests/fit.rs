//! `muster fit` end to end: nodes and pods as kubectl prints them, a job, and the answer.

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Output};

fn muster(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| unreachable!("cannot run muster: {e}"))
}

/// `muster fit` on the fixture's nodes, pods and job, with `extra` arguments.
fn fit_with_pods(dir: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "fit",
        "--nodes",
        "nodes.yaml",
        "--pods",
        "pods.yaml",
        "--job",
        "job.yaml",
    ];
    args.extend_from_slice(extra);
    muster(dir, &args)
}

/// 2 blocks × 2 sub-blocks × 4 hosts × 8 GPUs, as `kubectl get nodes -o yaml` prints a List.
fn nodes_yaml() -> String {
    let mut y = String::from("apiVersion: v1\nkind: List\nitems:\n");
    for b in 0..2 {
        for s in 0..2 {
            for h in 0..4 {
                let name = format!("gpu-{b}-{s}-{h}");
                let _ = write!(
                    y,
                    "- apiVersion: v1\n  kind: Node\n  metadata:\n    name: {name}\n    labels:\n      kubernetes.io/hostname: {name}\n      cloud.google.com/gce-topology-block: b-{b}\n      cloud.google.com/gce-topology-subblock: b-{b}-s{s}\n      cloud.google.com/gke-accelerator: nvidia-h100-80gb\n  spec: {{}}\n  status:\n    allocatable: {{cpu: '208', memory: 1872Gi, nvidia.com/gpu: '8', pods: '110'}}\n    conditions:\n    - {{type: Ready, status: 'True'}}\n    nodeInfo: {{futureField: kept-out}}\n"
                );
            }
        }
    }
    y
}

/// Three running 8-GPU pods in block b-0, and one finished one that holds nothing.
fn pods_yaml() -> String {
    let mut y = String::from("apiVersion: v1\nkind: List\nitems:\n");
    for (i, (node, phase)) in [
        ("gpu-0-0-0", "Running"),
        ("gpu-0-0-1", "Running"),
        ("gpu-0-1-0", "Pending"),
        ("gpu-1-0-0", "Succeeded"),
    ]
    .iter()
    .enumerate()
    {
        let _ = write!(
            y,
            "- apiVersion: v1\n  kind: Pod\n  metadata: {{name: other-{i}, namespace: ml}}\n  spec:\n    nodeName: {node}\n    containers:\n    - name: c\n      image: i\n      resources: {{limits: {{nvidia.com/gpu: '8'}}}}\n  status: {{phase: {phase}}}\n"
        );
    }
    y
}

fn job_yaml(count: u32) -> String {
    format!(
        "apiVersion: muster.dev/v1alpha1\nkind: GpuJob\nmetadata: {{name: train, namespace: ml}}\nspec:\n  queueName: q\n  podSets:\n  - name: workers\n    count: {count}\n    topology: {{required: cloud.google.com/gce-topology-block}}\n    template:\n      spec:\n        containers:\n        - name: t\n          image: t\n          resources: {{limits: {{nvidia.com/gpu: 8}}}}\n"
    )
}

fn setup(count: u32) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap_or_else(|e| unreachable!("{e}"));
    for (name, text) in [
        ("nodes.yaml", nodes_yaml()),
        ("pods.yaml", pods_yaml()),
        ("job.yaml", job_yaml(count)),
    ] {
        std::fs::write(dir.path().join(name), text).unwrap_or_else(|e| unreachable!("{e}"));
    }
    dir
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        unreachable!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout))
    })
}

#[test]
fn a_gang_that_fits_goes_to_the_block_with_room() {
    let dir = setup(6);
    let out = fit_with_pods(dir.path(), &["-o", "json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&out);
    assert_eq!(v["fit"], true);
    // b-0 has 5 free hosts (3 busy), so the 6-pod gang goes to b-1.
    assert_eq!(
        v["podSets"][0]["domain"]["cloud.google.com/gce-topology-block"],
        "b-1"
    );
    assert_eq!(v["podSets"][0]["pods"].as_array().map(Vec::len), Some(6));
    assert_eq!(
        v["podSets"][0]["pods"][0],
        serde_json::json!({"index": 0, "node": "gpu-1-0-0"})
    );
}

#[test]
fn an_indexed_batch_job_is_placed_as_its_gang() {
    let dir = setup(6);
    let job = "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: train\n  namespace: ml\n  labels: {muster.dev/queue-name: q}\nspec:\n  suspend: true\n  completionMode: Indexed\n  parallelism: 6\n  completions: 6\n  template:\n    metadata:\n      annotations: {muster.dev/topology-required: cloud.google.com/gce-topology-block}\n    spec:\n      restartPolicy: Never\n      containers:\n      - name: t\n        image: t\n        resources: {limits: {nvidia.com/gpu: 8}}\n";
    std::fs::write(dir.path().join("batch-job.yaml"), job).unwrap_or_else(|e| unreachable!("{e}"));
    let out = muster(
        dir.path(),
        &[
            "fit",
            "--nodes",
            "nodes.yaml",
            "--pods",
            "pods.yaml",
            "--job",
            "batch-job.yaml",
            "-o",
            "json",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&out);
    // As the GpuJob of the same gang: b-0 has 5 free hosts, so the 6 pods go to b-1.
    assert_eq!(
        v["podSets"][0]["domain"]["cloud.google.com/gce-topology-block"],
        "b-1"
    );
    assert_eq!(v["podSets"][0]["pods"].as_array().map(Vec::len), Some(6));
    // Without the queue label it is not Muster's: the error names the label.
    let unlabelled = job.replace("  labels: {muster.dev/queue-name: q}\n", "");
    std::fs::write(dir.path().join("batch-job.yaml"), unlabelled)
        .unwrap_or_else(|e| unreachable!("{e}"));
    let out = muster(
        dir.path(),
        &["fit", "--nodes", "nodes.yaml", "--job", "batch-job.yaml"],
    );
    assert_ne!(out.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("metadata.labels[muster.dev/queue-name]"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_gang_that_does_not_fit_gets_the_reason() {
    let dir = setup(10);
    let out = fit_with_pods(dir.path(), &["-o", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let v = json(&out);
    assert_eq!(v["fit"], false);
    assert_eq!(v["reason"]["kind"], "NoDomainFits");
    let message = v["reason"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("the best, b-1, has room for 8") && message.contains("room for 13"),
        "{message}"
    );
    let text = fit_with_pods(dir.path(), &[]);
    assert!(String::from_utf8_lossy(&text.stdout).starts_with("does not fit: needs 10 pods"));
}

#[test]
fn a_flavor_selects_nodes_and_sets_levels() {
    let dir = setup(4);
    std::fs::write(
        dir.path().join("flavor.yaml"),
        "apiVersion: muster.dev/v1alpha1\nkind: ResourceFlavor\nmetadata: {name: a100}\nspec:\n  nodeLabels: {cloud.google.com/gke-accelerator: nvidia-a100-80gb}\n  topologyLevels: [cloud.google.com/gce-topology-block, kubernetes.io/hostname]\n",
    )
    .unwrap_or_else(|e| unreachable!("{e}"));
    let out = muster(
        dir.path(),
        &[
            "fit",
            "--nodes",
            "nodes.yaml",
            "--job",
            "job.yaml",
            "--flavor",
            "flavor.yaml",
            "-o",
            "json",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json(&out)["reason"]["kind"], "NoEligibleNodes");
}

#[test]
fn bad_input_exits_2() {
    let dir = setup(0);
    let out = muster(
        dir.path(),
        &["fit", "--nodes", "nodes.yaml", "--job", "job.yaml"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("spec.podSets[0].count"));
    let out = muster(
        dir.path(),
        &["fit", "--nodes", "missing.yaml", "--job", "job.yaml"],
    );
    assert_eq!(out.status.code(), Some(2));
}
