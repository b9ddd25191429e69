//! Fractional GPUs on a real control plane: HAMi nodes (their GPUs registered in HAMi's node
//! annotation), jobs asking for part of one GPU, quota counted in milli-GPU, and each share pod
//! created with its vGPU and pinned to the UUID of the device Muster counted it on. The fake
//! nodes advertise HAMi's core and memory percentages as plain extended resources, so that
//! kube-scheduler binds the pods as HAMi's extender would.

use muster_api::wire::GPU_DEVICES_ANNOTATION;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use muster_testkit::nodes::{NodeSpec, create_node};
use serde_json::json;

use crate::support::{Env, apply, bound_node, phase, reason};

/// Two HAMi nodes of two GPUs each (10 vGPUs per GPU); `hami-0` registers its GPUs' UUIDs.
async fn hami_nodes(env: &Env) {
    for node in ["hami-0", "hami-1"] {
        let spec = NodeSpec::new(node)
            .label("pool", "hami")
            .label("gpu", "on")
            .label("nvidia.com/gpu.count", "2")
            .capacity("nvidia.com/gpu", "20")
            .capacity("nvidia.com/gpucores", "200")
            .capacity("nvidia.com/gpumem-percentage", "200")
            .capacity("cpu", "32")
            .capacity("memory", "128Gi");
        if let Err(e) = create_node(&env.client, &spec).await {
            unreachable!("creating {node}: {e:#}");
        }
    }
    let nodes: Api<Node> = env.all();
    let register =
        "GPU-0000-a,10,24576,100,NVIDIA-L4,0,true:GPU-0000-b,10,24576,100,NVIDIA-L4,0,true:";
    let patch = json!({"metadata": {"annotations": {"hami.io/node-nvidia-register": register}}});
    if let Err(e) = nodes
        .patch("hami-0", &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        unreachable!("annotating hami-0: {e}");
    }
    env.apply_all::<k8s_openapi::api::core::v1::Namespace>(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-s"}}))
        .await;
    env.apply_all::<muster_api::ResourceFlavor>(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "ResourceFlavor",
        "metadata": {"name": "hami"}, "spec": {"nodeLabels": {"pool": "hami"}}}))
        .await;
    // One GPU of quota: 1000 milli-GPU of shares.
    env.apply_all::<muster_api::ClusterQueue>(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "ClusterQueue", "metadata": {"name": "s"},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": ["nvidia.com/gpu", "cpu"],
            "flavors": [{"name": "hami", "resources": [
                {"name": "nvidia.com/gpu", "nominalQuota": "1"},
                {"name": "cpu", "nominalQuota": "64"}]}]}]}}))
        .await;
    apply(
        &env.api::<muster_api::LocalQueue>("team-s"),
        json!({"apiVersion": "muster.dev/v1alpha1", "kind": "LocalQueue",
               "metadata": {"name": "s", "namespace": "team-s"}, "spec": {"clusterQueue": "s"}}),
    )
    .await;
}

fn share_job(name: &str, pods: u32, share: &str) -> muster_api::GpuJob {
    serde_json::from_value(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "GpuJob",
        "metadata": {"name": name, "namespace": "team-s"},
        "spec": {"queueName": "s", "podSets": [{"name": "servers", "count": pods,
            "gpuShare": share,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{
                "name": "server", "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "1"}}}]}}}]}}))
    .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shares_run_on_hami_nodes_within_quota_pinned_to_their_devices() {
    let Some(env) = Env::start(false).await else {
        return;
    };
    hami_nodes(&env).await;
    let controller = env.controller();
    // 2 × 300m and 1 × 400m: the whole GPU of quota. Then 100m more: over it.
    env.submit(&share_job("pair", 2, "300m")).await;
    env.until_status("team-s", "pair", "Running", 60, |s| phase(s) == "Running")
        .await;
    env.submit(&share_job("single", 1, "400m")).await;
    env.until_status("team-s", "single", "Running", 60, |s| phase(s) == "Running")
        .await;
    env.submit(&share_job("extra", 1, "100m")).await;
    env.until_status("team-s", "extra", "waiting on quota", 60, |s| {
        reason(s) == "QuotaShort"
    })
    .await;

    let mut pods = env.pods_of("team-s", "pair").await;
    pods.extend(env.pods_of("team-s", "single").await);
    assert_eq!(pods.len(), 3);
    assert!(
        pods.iter()
            .any(|p| bound_node(p).as_deref() == Some("hami-0")),
        "best fit puts the first gang on hami-0, whose UUIDs are known"
    );
    for pod in &pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        let limits: BTreeMap<String, String> = pod
            .spec
            .as_ref()
            .and_then(|s| s.containers[0].resources.as_ref())
            .and_then(|r| r.limits.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0))
            .collect();
        assert_eq!(
            limits.get("nvidia.com/gpu").map(String::as_str),
            Some("1"),
            "{name}"
        );
        let percent = if name.starts_with("single") {
            "40"
        } else {
            "30"
        };
        assert_eq!(
            limits.get("nvidia.com/gpucores").map(String::as_str),
            Some(percent),
            "{name}"
        );
        let device = annotations.get(GPU_DEVICES_ANNOTATION).cloned();
        assert!(
            matches!(device.as_deref(), Some("0" | "1")),
            "{name}: {device:?}"
        );
        // Pods on hami-0 are pinned to the UUID of their device; hami-1 registers none.
        let node = bound_node(pod).unwrap_or_default();
        let pin = annotations.get("nvidia.com/use-gpuuuid").cloned();
        if node == "hami-0" {
            let uuid = if device.as_deref() == Some("0") {
                "GPU-0000-a"
            } else {
                "GPU-0000-b"
            };
            assert_eq!(pin.as_deref(), Some(uuid), "{name}");
        } else {
            assert_eq!(pin, None, "{name} on {node}");
        }
    }
    controller.stop().await;
}
