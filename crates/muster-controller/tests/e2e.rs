//! End to end against a real API server (kind, or any test cluster): install the CRDs, create
//! nodes with topology labels, a queue and a job, run the controller in-process, and watch it
//! release the gang — gated pods pinned inside one block, gates lifted together, statuses and
//! quota written — then requeue the gang when its pods are not Ready in time (the test's nodes
//! have no kubelet, so they never are).
//!
//! Run: `MUSTER_E2E_KUBECONFIG=$HOME/.kube/config cargo test -p muster-controller --test e2e -- --ignored`

use std::collections::BTreeSet;
use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use muster_api::{ClusterQueue, GpuJob, LocalQueue, ResourceFlavor};
use muster_controller::run::{Options, run};
use serde_json::json;

const NS: &str = "muster-e2e";
const MANAGER: &str = "muster-e2e";

async fn client() -> Client {
    let Ok(path) = std::env::var("MUSTER_E2E_KUBECONFIG") else {
        unreachable!("set MUSTER_E2E_KUBECONFIG to the kubeconfig of a disposable test cluster")
    };
    let config = match kube::config::Kubeconfig::read_from(&path) {
        Ok(file) => {
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await
        }
        Err(e) => unreachable!("reading {path}: {e}"),
    };
    match config.map(Client::try_from) {
        Ok(Ok(client)) => client,
        Ok(Err(e)) => unreachable!("client: {e}"),
        Err(e) => unreachable!("kubeconfig {path}: {e}"),
    }
}

/// Polls `check` every second until it returns `Some`, for at most `seconds`.
async fn eventually<T, F, Fut>(what: &str, seconds: u64, check: F) -> T
where
    F: Fn() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    for _ in 0..seconds {
        if let Some(value) = check().await {
            return value;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    unreachable!("timed out waiting for {what}")
}

async fn apply<K>(api: &Api<K>, name: &str, value: serde_json::Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = PatchParams::apply(MANAGER).force();
    if let Err(e) = api.patch(name, &params, &Patch::Apply(&value)).await {
        unreachable!("applying {name}: {e}");
    }
}

async fn install_crds(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let generated = muster_api::crd::all().unwrap_or_default();
    for generated in &generated {
        let name = generated.crd.metadata.name.clone().unwrap_or_default();
        let value = serde_json::to_value(&generated.crd).unwrap_or_default();
        apply(&crds, &name, value).await;
        eventually(&format!("CRD {name} established"), 60, || async {
            let crd = crds.get(&name).await.ok()?;
            let established = crd
                .status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            established.then_some(())
        })
        .await;
    }
}

/// A node object with 8 GPUs in `block`, marked Ready (no kubelet backs it).
async fn fake_node(client: &Client, name: &str, block: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    apply(
        &nodes,
        name,
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "muster.dev/e2e": "true", "example.com/block": block}}}),
    )
    .await;
    let status = json!({"apiVersion": "v1", "kind": "Node", "status": {
        "capacity": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi", "pods": "110"},
        "allocatable": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "E2E", "message": "fake",
                        "lastHeartbeatTime": k8s_openapi::jiff::Timestamp::now().to_string(),
                        "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string()}]}});
    let params = PatchParams::apply(MANAGER).force();
    if let Err(e) = nodes
        .patch_status(name, &params, &Patch::Apply(&status))
        .await
    {
        unreachable!("node status: {e}");
    }
}

/// CRDs, a namespace, four fake nodes in two blocks, a flavor, a ClusterQueue with 32 GPUs
/// and a LocalQueue.
async fn setup(client: &Client) {
    install_crds(client).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    apply(
        &namespaces,
        NS,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
    )
    .await;
    for (name, block) in [
        ("muster-e2e-n1", "b1"),
        ("muster-e2e-n2", "b1"),
        ("muster-e2e-n3", "b2"),
        ("muster-e2e-n4", "b2"),
    ] {
        fake_node(client, name, block).await;
    }
    apply(
        &Api::<ResourceFlavor>::all(client.clone()),
        "e2e-h100",
        json!({"apiVersion": "muster.dev/v1alpha1", "kind": "ResourceFlavor",
               "metadata": {"name": "e2e-h100"},
               "spec": {"nodeLabels": {"muster.dev/e2e": "true"},
                        "topologyLevels": ["example.com/block", "kubernetes.io/hostname"]}}),
    )
    .await;
    apply(
        &Api::<ClusterQueue>::all(client.clone()),
        "e2e",
        json!({"apiVersion": "muster.dev/v1alpha1", "kind": "ClusterQueue",
               "metadata": {"name": "e2e"},
               "spec": {"namespaceSelector": {}, "resourceGroups": [{
                   "coveredResources": ["nvidia.com/gpu"],
                   "flavors": [{"name": "e2e-h100", "resources": [
                       {"name": "nvidia.com/gpu", "nominalQuota": "32"}]}]}]}}),
    )
    .await;
    apply(
        &Api::<LocalQueue>::namespaced(client.clone(), NS),
        "e2e",
        json!({"apiVersion": "muster.dev/v1alpha1", "kind": "LocalQueue",
               "metadata": {"name": "e2e", "namespace": NS}, "spec": {"clusterQueue": "e2e"}}),
    )
    .await;
}

/// Two 8-GPU pods that must share a block, with a 20 s pods-ready timeout.
fn train_job() -> GpuJob {
    serde_json::from_value(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "GpuJob",
        "metadata": {"name": "train", "namespace": NS},
        "spec": {"queueName": "e2e", "podsReadyTimeoutSeconds": 20,
            "podSets": [{"name": "workers", "count": 2,
                "topology": {"required": "example.com/block"},
                "template": {"spec": {"restartPolicy": "Never",
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}]}
    }))
    .unwrap_or_default()
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_gang_is_released_together_and_requeued_when_not_ready_in_time() {
    let client = client().await;
    setup(&client).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let controller = tokio::spawn(run(
        client.clone(),
        Options {
            metrics_addr: ([127, 0, 0, 1], 0).into(),
            ..Options::default()
        },
        async move {
            let _ = stopped.await;
        },
    ));

    let jobs: Api<GpuJob> = Api::namespaced(client.clone(), NS);
    let job = train_job();
    let _ = jobs.delete("train", &DeleteParams::default()).await;
    if let Err(e) = jobs.create(&PostParams::default(), &job).await {
        unreachable!("creating the job: {e}");
    }

    // Both pods, ungated, pinned to the two nodes of one block; the job Admitted.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let nodes = eventually("the gang released", 60, || async {
        let list = pods
            .list(&ListParams::default().labels("muster.dev/job-name=train"))
            .await
            .ok()?;
        let released = list.items.len() == 2
            && list.items.iter().all(|p| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.scheduling_gates.as_ref())
                    .is_none_or(Vec::is_empty)
            });
        released.then(|| {
            list.items
                .iter()
                .filter_map(|p| {
                    p.spec
                        .as_ref()?
                        .node_selector
                        .as_ref()?
                        .get("kubernetes.io/hostname")
                        .cloned()
                })
                .collect::<BTreeSet<_>>()
        })
    })
    .await;
    let blocks: BTreeSet<_> = nodes
        .iter()
        .map(|n| n.ends_with('1') || n.ends_with('2'))
        .collect();
    assert_eq!(nodes.len(), 2, "{nodes:?}");
    assert_eq!(blocks.len(), 1, "both pods in one block: {nodes:?}");
    let status = eventually("the job Admitted", 30, || async {
        let status = jobs.get("train").await.ok()?.status?;
        status.admission.is_some().then_some(status)
    })
    .await;
    assert_eq!(
        status.admission.map(|a| a.cluster_queue),
        Some("e2e".into())
    );
    let queue = eventually("the ClusterQueue status", 30, || async {
        let status = Api::<ClusterQueue>::all(client.clone())
            .get("e2e")
            .await
            .ok()?
            .status?;
        (status.admitted_jobs == 1).then_some(status)
    })
    .await;
    assert_eq!(
        queue.flavors_usage[0].resources[0].total,
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("16".into())
    );

    // No kubelet: the pods are never Ready; after 20 s the gang is evicted and requeued.
    eventually(
        "the gang requeued after the pods-ready timeout",
        90,
        || async {
            let status = jobs.get("train").await.ok()?.status?;
            (status.requeue_count >= 1).then_some(())
        },
    )
    .await;

    let _ = stop.send(());
    let _ = controller.await;
    let _ = jobs.delete("train", &DeleteParams::default()).await;
    let _ = namespaces.delete(NS, &DeleteParams::default()).await;
    let node_api: Api<Node> = Api::all(client.clone());
    for n in 1..=4 {
        let _ = node_api
            .delete(&format!("muster-e2e-n{n}"), &DeleteParams::default())
            .await;
    }
}

/// Installs the upstream ProvisioningRequest CRD from `../shared/crds/`, or says why not.
async fn install_provisioning_crd(client: &Client) -> bool {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/crds/autoscaling.x-k8s.io_provisioningrequests.yaml");
    let Ok(text) = std::fs::read_to_string(&path) else {
        eprintln!("skipping: upstream CRD not found at {}", path.display());
        return false;
    };
    let value: serde_json::Value = serde_yaml_ng::from_str(&text).unwrap_or_default();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    apply(&crds, "provisioningrequests.autoscaling.x-k8s.io", value).await;
    true
}

#[tokio::test]
#[ignore = "needs cluster"]
async fn a_job_without_a_block_buys_one_and_starts_on_the_new_nodes() {
    let client = client().await;
    setup(&client).await;
    if !install_provisioning_crd(&client).await {
        return;
    }
    apply(
        &Api::<ClusterQueue>::all(client.clone()),
        "e2e",
        json!({"apiVersion": "muster.dev/v1alpha1", "kind": "ClusterQueue",
               "metadata": {"name": "e2e"},
               "spec": {"namespaceSelector": {}, "resourceGroups": [{
                   "coveredResources": ["nvidia.com/gpu"],
                   "flavors": [{"name": "e2e-h100", "resources": [
                       {"name": "nvidia.com/gpu", "nominalQuota": "64"}]}]}],
                   "provisioning": {"className": "queued-provisioning.gke.io"}}}),
    )
    .await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let controller = tokio::spawn(run(
        client.clone(),
        Options {
            metrics_addr: ([127, 0, 0, 1], 0).into(),
            ..Options::default()
        },
        async move {
            let _ = stopped.await;
        },
    ));
    // Four pods in one block: the test's blocks have two nodes.
    let jobs: Api<GpuJob> = Api::namespaced(client.clone(), NS);
    let mut job = train_job();
    job.metadata.name = Some("buy".into());
    job.spec.pod_sets[0].count = 4;
    let _ = jobs.delete("buy", &DeleteParams::default()).await;
    if let Err(e) = jobs.create(&PostParams::default(), &job).await {
        unreachable!("creating the job: {e}");
    }
    let requests: Api<muster_api::ProvisioningRequest> = Api::namespaced(client.clone(), NS);
    eventually("the ProvisioningRequest", 60, || async {
        requests.get("buy-1").await.ok().map(|_| ())
    })
    .await;
    // The test plays the autoscaler: four nodes in a new block, then Provisioned=True.
    for n in 5..=8 {
        fake_node(&client, &format!("muster-e2e-n{n}"), "b3").await;
    }
    let status = json!({"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
        "status": {"conditions": [{"type": "Provisioned", "status": "True", "reason": "E2E",
            "message": "capacity is ready",
            "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string()}]}});
    if let Err(e) = requests
        .patch_status(
            "buy-1",
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&status),
        )
        .await
    {
        unreachable!("setting Provisioned: {e}");
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let consumed = eventually("the gang on the new nodes", 60, || async {
        let list = pods
            .list(&ListParams::default().labels("muster.dev/job-name=buy"))
            .await
            .ok()?;
        (list.items.len() == 4).then_some(list.items)
    })
    .await;
    for pod in consumed {
        let annotations = pod.metadata.annotations.unwrap_or_default();
        assert_eq!(
            annotations
                .get("autoscaling.x-k8s.io/consume-provisioning-request")
                .map(String::as_str),
            Some("buy-1")
        );
        let node = pod
            .spec
            .and_then(|s| s.node_selector)
            .and_then(|s| s.get("kubernetes.io/hostname").cloned())
            .unwrap_or_default();
        let index: u32 = node.trim_start_matches("muster-e2e-n").parse().unwrap_or(0);
        assert!((5..=8).contains(&index), "placed on {node}");
    }
    let _ = stop.send(());
    let _ = controller.await;
    let _ = jobs.delete("buy", &DeleteParams::default()).await;
    let node_api: Api<Node> = Api::all(client.clone());
    for n in 5..=8 {
        let _ = node_api
            .delete(&format!("muster-e2e-n{n}"), &DeleteParams::default())
            .await;
    }
}
