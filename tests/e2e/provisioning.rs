//! Buying a block through ProvisioningRequests on a real control plane, with the test playing
//! the cluster autoscaler: a failed request is retried; a provisioned one starts the gang on
//! the new nodes; revoked capacity requeues the gang, which asks again.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use muster_api::ProvisioningRequest;
use serde_json::json;

use crate::support::{Env, bound_node, eventually, gpu_job, phase};

/// Sets condition `type_` (True) on request `name`, as the autoscaler would.
pub(crate) async fn autoscaler_says(env: &Env, name: &str, type_: &str, message: &str) {
    let requests: Api<ProvisioningRequest> = env.api("team-a");
    let status = json!({"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
        "status": {"conditions": [{"type": type_, "status": "True", "reason": "E2E",
            "message": message,
            "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string()}]}});
    let params = PatchParams::apply("e2e-autoscaler").force();
    if let Err(e) = requests
        .patch_status(name, &params, &Patch::Apply(&status))
        .await
    {
        unreachable!("{type_} on {name}: {e}");
    }
}

/// One block of two 8-GPU nodes and queue `a` of team-a (64 GPUs), which buys capacity
/// through ProvisioningRequests, retried after 1–2 s.
pub(crate) async fn buying_cluster(env: &Env) {
    env.h100().await;
    env.gpu_nodes("b1", &["n1", "n2"]).await;
    env.queue(
        "a",
        "team-a",
        64,
        json!({"provisioning": {"className": "queued-provisioning.gke.io",
            "retry": {"limit": 5, "baseSeconds": 1, "maxSeconds": 2}}}),
    )
    .await;
}

/// Waits for request `name` to exist.
pub(crate) async fn request(env: &Env, name: &str) {
    let requests: Api<ProvisioningRequest> = env.api("team-a");
    eventually(&format!("ProvisioningRequest {name}"), 60, || async {
        requests.get_opt(name).await.ok().flatten().map(|_| ())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_without_a_block_buys_one_retries_a_failure_and_requeues_when_revoked() {
    let Some(env) = Env::start(true).await else {
        return;
    };
    buying_cluster(&env).await;
    let controller = env.controller();
    // Four 8-GPU pods in one block: the cluster's only block has two nodes.
    env.submit(&gpu_job("team-a", "buy", 4, 8, &json!({}), json!({})))
        .await;
    request(&env, "buy-1").await;
    env.until_status("team-a", "buy", "Provisioning", 30, |s| {
        phase(s) == "Provisioning"
    })
    .await;

    // The autoscaler fails the first request: after the backoff, a second one.
    autoscaler_says(&env, "buy-1", "Failed", "stockout in zone").await;
    request(&env, "buy-2").await;

    // The autoscaler provisions a block of four nodes for the second one.
    env.gpu_nodes("b3", &["n5", "n6", "n7", "n8"]).await;
    autoscaler_says(&env, "buy-2", "Provisioned", "capacity is ready").await;
    env.until_status("team-a", "buy", "Running", 60, |s| phase(s) == "Running")
        .await;
    let pods: Vec<Pod> = env.pods_of("team-a", "buy").await;
    assert_eq!(pods.len(), 4);
    for pod in &pods {
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            annotations
                .get("autoscaling.x-k8s.io/consume-provisioning-request")
                .map(String::as_str),
            Some("buy-2")
        );
        let node = bound_node(pod).unwrap_or_default();
        assert!(
            ["n5", "n6", "n7", "n8"].contains(&node.as_str()),
            "on {node}"
        );
    }
    // The failed request is gone.
    let requests: Api<ProvisioningRequest> = env.api("team-a");
    eventually("buy-1 deleted", 30, || async {
        requests
            .get_opt("buy-1")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;

    // The autoscaler takes the capacity back, nodes and all: the gang is evicted and asks
    // again.
    autoscaler_says(&env, "buy-2", "CapacityRevoked", "maintenance").await;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = env.all();
    for name in ["n5", "n6", "n7", "n8"] {
        let _ = nodes
            .delete(name, &kube::api::DeleteParams::default())
            .await;
    }
    let requeued = env
        .until_status("team-a", "buy", "requeued", 60, |s| s.requeue_count >= 1)
        .await;
    assert_ne!(phase(&requeued), "Running");
    request(&env, "buy-3").await;
    controller.stop().await;
}
