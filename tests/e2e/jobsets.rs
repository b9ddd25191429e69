//! A JobSet queued by Muster on a real control plane: a TPU JobSet of two v5p slices waits
//! suspended, is admitted onto two whole node pools, and each pod runs on its host of its
//! slice (pod `c` of replica `r` on the admission's node `r × 4 + c`). The JobSet controller
//! is not available here: the test kit's fake one makes and resumes the child Jobs and
//! reports the JobSet Completed once they are; kube-controller-manager's Job controller makes
//! their pods.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Pod, Taint};
use kube::api::{Api, ListParams};
use muster_api::jobset::{JOB_INDEX_LABEL, JOBSET_NAME_LABEL, JobSet};
use muster_testkit::jobsets::FakeJobSetController;
use muster_testkit::nodes::{NodeSpec, create_node};
use muster_testkit::{ClusterOptions, UpstreamCrd};
use serde_json::{Value, json};

use crate::support::{Env, apply, bound_node, eventually, gated, phase, runs_for};

/// Three pools of four TPU v5p 2x2x4 hosts and the flavor (pools, then hosts).
async fn v5p_pools(env: &Env) {
    for pool in ["pool-a", "pool-b", "pool-c"] {
        for host in 0..4 {
            let spec = NodeSpec::new(format!("{pool}-{host}"))
                .label("cloud.google.com/gke-tpu-accelerator", "tpu-v5p-slice")
                .label("cloud.google.com/gke-tpu-topology", "2x2x4")
                .label("cloud.google.com/gke-nodepool", pool)
                .taint(Taint {
                    key: "google.com/tpu".into(),
                    value: Some("present".into()),
                    effect: "NoSchedule".into(),
                    ..Taint::default()
                })
                .capacity("google.com/tpu", "4")
                .capacity("cpu", "208")
                .capacity("memory", "448Gi");
            if let Err(e) = create_node(&env.client, &spec).await {
                unreachable!("creating TPU host: {e:#}");
            }
        }
    }
    env.apply_all::<k8s_openapi::api::core::v1::Namespace>(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}))
        .await;
    env.apply_all::<muster_api::ResourceFlavor>(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "ResourceFlavor",
        "metadata": {"name": "tpu-v5p"},
        "spec": {"nodeLabels": {"cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice"},
                 "nodeTaints": [{"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"}],
                 "tolerations": [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}],
                 "topologyLevels": ["cloud.google.com/gke-nodepool", "kubernetes.io/hostname"]}}))
    .await;
}

/// A ClusterQueue `a` with `chips` v5p chips and its LocalQueue in `team-a`.
async fn tpu_queue(env: &Env, chips: u32) {
    env.apply_all::<muster_api::ClusterQueue>(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "ClusterQueue", "metadata": {"name": "a"},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": ["google.com/tpu"],
            "flavors": [{"name": "tpu-v5p", "resources": [
                {"name": "google.com/tpu", "nominalQuota": chips.to_string()}]}]}]}}))
        .await;
    apply(
        &env.api::<muster_api::LocalQueue>("team-a"),
        json!({"apiVersion": "muster.dev/v1alpha1", "kind": "LocalQueue",
               "metadata": {"name": "a", "namespace": "team-a"}, "spec": {"clusterQueue": "a"}}),
    )
    .await;
}

/// A JobSet of two v5p 2x2x4 slices as the GKE multi-slice guides write it
/// (`deploy/examples/tpu-jobset.yaml`), created suspended in LocalQueue `a`; each pod runs
/// `ms` milliseconds.
fn multislice(ms: u64) -> Value {
    json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "multislice", "namespace": "team-a",
                     "labels": {"muster.dev/queue-name": "a"}},
        "spec": {"suspend": true, "replicatedJobs": [{
            "name": "slice", "replicas": 2,
            "template": {"spec": {
                "completionMode": "Indexed", "parallelism": 4, "completions": 4,
                "backoffLimit": 0,
                "template": {
                    "metadata": {"annotations": runs_for(ms)},
                    "spec": {
                        "restartPolicy": "Never",
                        "nodeSelector": {"cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice",
                                         "cloud.google.com/gke-tpu-topology": "2x2x4"},
                        "containers": [{"name": "jax", "image": "registry.k8s.io/pause:3.10",
                                        "resources": {"limits": {"google.com/tpu": "4"}}}]}}}}}]}})
}

/// The pods of the JobSet's child Jobs.
async fn jobset_pods(env: &Env, name: &str) -> Vec<Pod> {
    let pods: Api<Pod> = env.api("team-a");
    pods.list(&ListParams::default().labels(&format!("{JOBSET_NAME_LABEL}={name}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

fn label(pod: &Pod, key: &str) -> Option<usize> {
    pod.metadata.labels.as_ref()?.get(key)?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tpu_jobset_of_two_slices_takes_two_whole_pools_pod_c_of_slice_r_on_its_host() {
    let Some(env) = Env::start_with(ClusterOptions {
        controller_manager: true,
        upstream_crds: &[UpstreamCrd::JobSet],
        ..ClusterOptions::default()
    })
    .await
    else {
        return;
    };
    // Quota for one slice only at first: the JobSet waits, suspended, without child Jobs.
    v5p_pools(&env).await;
    tpu_queue(&env, 16).await;
    let controller = env.controller();
    let jobsets: Api<JobSet> = env.api("team-a");
    apply(&jobsets, multislice(3_000)).await;
    let fake_controller = FakeJobSetController::start(env.client.clone());
    let waiting = env
        .until_status(
            "team-a",
            "jobset-multislice",
            "waiting for quota",
            60,
            |s| s.pending_reason.is_some(),
        )
        .await;
    let message = waiting.pending_reason.unwrap_or_default().message;
    assert!(
        message.contains("32"),
        "the reason gives the numbers: {message}"
    );
    let held = jobsets.get("multislice").await.ok().unwrap_or_default();
    assert_eq!(held.spec.suspend, Some(true), "held while it waits");
    assert!(jobset_pods(&env, "multislice").await.is_empty());

    // Quota for both: admitted as one gang of two slices, then released.
    tpu_queue(&env, 32).await;
    let admitted = env
        .until_status("team-a", "jobset-multislice", "admitted", 60, |s| {
            s.admission.is_some()
        })
        .await;
    let nodes = admitted.admission.unwrap_or_default().pod_sets[0]
        .nodes
        .clone();
    assert_eq!(nodes.len(), 8, "{nodes:?}");
    let pods = eventually("the eight pods bound, no gate left", 120, || async {
        let pods = jobset_pods(&env, "multislice").await;
        (pods.len() == 8 && pods.iter().all(|p| bound_node(p).is_some() && !gated(p)))
            .then_some(pods)
    })
    .await;
    let mut pools = BTreeMap::<usize, BTreeSet<String>>::new();
    for pod in &pods {
        let replica = label(pod, JOB_INDEX_LABEL).unwrap_or(usize::MAX);
        let index = label(pod, "batch.kubernetes.io/job-completion-index").unwrap_or(usize::MAX);
        let node = bound_node(pod).unwrap_or_default();
        assert_eq!(
            Some(&node),
            nodes.get(replica * 4 + index),
            "pod {index} of slice {replica} on its host"
        );
        let pool = node
            .rsplit_once('-')
            .map(|(p, _)| p.to_owned())
            .unwrap_or_default();
        pools.entry(replica).or_default().insert(pool);
    }
    assert_eq!(pools.len(), 2, "{pools:?}");
    assert!(
        pools.values().all(|p| p.len() == 1),
        "each slice one whole pool: {pools:?}"
    );
    let distinct: BTreeSet<&String> = pools.values().flatten().collect();
    assert_eq!(distinct.len(), 2, "two pools: {pools:?}");

    // The child Jobs complete, the JobSet says so, and so does its entry.
    let done = env
        .until_status("team-a", "jobset-multislice", "Succeeded", 120, |s| {
            phase(s) == "Succeeded"
        })
        .await;
    assert!(done.admission.is_none(), "{done:?}");
    drop(fake_controller);
    controller.stop().await;
}
