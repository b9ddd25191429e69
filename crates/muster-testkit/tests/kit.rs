//! The test kit against the real control plane in `MUSTER_KUBE_BIN`: clusters start, run side by
//! side and leave nothing behind; fake nodes are Ready and schedulable; the fake kubelet runs,
//! ends, fails and removes the pods kube-scheduler binds to them, and reports nothing for the
//! pods of a partitioned node until it heals. Without `MUSTER_KUBE_BIN` each test prints one
//! line and passes.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use muster_testkit::cluster::SKIP_MESSAGE;
use muster_testkit::kubelet::{EXIT_CODE_ANNOTATION, RUN_ANNOTATION};
use muster_testkit::nodes::{
    FAKE_NODE_LABEL, NODE_LEASE_NAMESPACE, NOT_READY_TAINT, UNREACHABLE_TAINT,
};
use muster_testkit::{
    ClusterOptions, Component, FakeKubelet, FakeNodes, KubeletOptions, NodeSpec, TestCluster,
    UpstreamCrd, cluster_or_skip, eventually,
};
use serde_json::json;

const NS: &str = "default";
const WAIT: Duration = Duration::from_secs(60);

/// A pod without a node name, with the given annotations.
fn pod(name: &str, annotations: &[(&str, &str)]) -> anyhow::Result<Pod> {
    let annotations: BTreeMap<&str, &str> = annotations.iter().copied().collect();
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }))?)
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Waits until the pod satisfies `check`, and returns it.
async fn pod_until(
    client: &Client,
    name: &str,
    what: &str,
    check: impl Fn(&Pod) -> bool,
) -> anyhow::Result<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    eventually(&format!("pod {name} {what}"), WAIT, || async {
        pods.get(name).await.ok().filter(|p| check(p))
    })
    .await
}

/// A cluster with the scheduler, `count` fake 8-GPU nodes and a fake kubelet.
async fn with_nodes(client: &Client, count: usize) -> anyhow::Result<(FakeNodes, FakeKubelet)> {
    let nodes = FakeNodes::start(client.clone());
    let specs: Vec<NodeSpec> = (1..=count)
        .map(|i| NodeSpec::new(format!("gpu-{i}")).gpus(8))
        .collect();
    nodes.create_all(&specs).await?;
    let kubelet = FakeKubelet::start(client.clone(), KubeletOptions::default());
    Ok((nodes, kubelet))
}

#[tokio::test]
async fn a_cluster_starts_ready_with_the_crds() -> anyhow::Result<()> {
    let started = Instant::now();
    let cluster = cluster_or_skip!(ClusterOptions::default(), Ok(()));
    eprintln!("cluster ready in {:?}", started.elapsed());
    let request = http::Request::get("/readyz").body(Vec::new())?;
    assert_eq!(cluster.client().request_text(request).await?, "ok");
    let crds: Api<CustomResourceDefinition> = Api::all(cluster.client());
    crds.get("gpujobs.muster.dev").await?;
    crds.get("clusterqueues.muster.dev").await?;
    assert!(cluster.kubeconfig_path().is_file());
    assert!(cluster.log_dir().join("kube-apiserver.log").is_file());
    assert!(cluster.api_url().starts_with("https://127.0.0.1:"));
    assert_eq!(cluster.token().len(), 48);
    assert!(cluster.pid(Component::Scheduler).is_some());
    assert!(cluster.pid(Component::ControllerManager).is_none());
    Ok(())
}

#[tokio::test]
async fn two_clusters_run_at_once_and_apart() -> anyhow::Result<()> {
    let options = ClusterOptions {
        scheduler: false,
        ..ClusterOptions::default()
    };
    if TestCluster::bin_dir().is_none() {
        eprintln!("{SKIP_MESSAGE}");
        return Ok(());
    }
    let (a, b) = tokio::join!(TestCluster::start(options), TestCluster::start(options));
    let (Some(a), Some(b)) = (a?, b?) else {
        return Ok(());
    };
    assert_ne!(a.api_url(), b.api_url());
    let namespaces_a: Api<Namespace> = Api::all(a.client());
    let namespaces_b: Api<Namespace> = Api::all(b.client());
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": "only-in-a"}}))?;
    namespaces_a
        .create(&PostParams::default(), &namespace)
        .await?;
    assert!(namespaces_a.get("only-in-a").await.is_ok());
    assert!(namespaces_b.get("only-in-a").await.is_err());
    Ok(())
}

#[tokio::test]
async fn a_fake_node_is_ready_schedulable_and_has_a_lease() -> anyhow::Result<()> {
    let cluster = cluster_or_skip!(
        ClusterOptions {
            scheduler: false,
            ..ClusterOptions::default()
        },
        Ok(())
    );
    let nodes = FakeNodes::start(cluster.client());
    let spec = NodeSpec::new("gpu-1")
        .gpus(8)
        .label("example.com/block", "b1");
    nodes.create(&spec).await?;
    let node = Api::<Node>::all(cluster.client()).get("gpu-1").await?;
    assert!(muster_testkit::nodes::is_ready(&node));
    let labels = node.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get(FAKE_NODE_LABEL).map(String::as_str),
        Some("true")
    );
    assert_eq!(
        labels.get("example.com/block").map(String::as_str),
        Some("b1")
    );
    let node_spec = node.spec.clone().unwrap_or_default();
    assert_ne!(node_spec.unschedulable, Some(true));
    assert!(
        node_spec
            .taints
            .unwrap_or_default()
            .iter()
            .all(|t| t.key != NOT_READY_TAINT),
        "{node:?}"
    );
    let allocatable = node.status.and_then(|s| s.allocatable).unwrap_or_default();
    assert_eq!(
        allocatable.get("nvidia.com/gpu").map(|q| q.0.as_str()),
        Some("8")
    );
    Api::<Lease>::namespaced(cluster.client(), NODE_LEASE_NAMESPACE)
        .get("gpu-1")
        .await?;
    assert_eq!(nodes.names(), vec!["gpu-1".to_owned()]);
    Ok(())
}

#[tokio::test]
async fn a_plain_pod_is_bound_by_the_scheduler_runs_and_succeeds() -> anyhow::Result<()> {
    let cluster = cluster_or_skip!(ClusterOptions::default(), Ok(()));
    let client = cluster.client();
    let (_nodes, kubelet) = with_nodes(&client, 2).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    pods.create(
        &PostParams::default(),
        &pod("short", &[(RUN_ANNOTATION, "500")])?,
    )
    .await?;
    let running = pod_until(&client, "short", "Running and Ready", |p| {
        phase(p) == "Running" && ready(p)
    })
    .await?;
    let spec = running.spec.clone().unwrap_or_default();
    assert!(spec.node_name.is_some_and(|n| n.starts_with("gpu-")));
    let status = running.status.clone().unwrap_or_default();
    assert!(status.pod_ip.is_some() && status.host_ip.is_some() && status.start_time.is_some());
    pod_until(&client, "short", "Succeeded", |p| phase(p) == "Succeeded").await?;
    assert!(kubelet.status_writes() >= 2, "{:?}", kubelet.stats());
    Ok(())
}

#[tokio::test]
async fn a_non_zero_exit_code_fails_the_pod() -> anyhow::Result<()> {
    let cluster = cluster_or_skip!(ClusterOptions::default(), Ok(()));
    let client = cluster.client();
    let (_nodes, _kubelet) = with_nodes(&client, 1).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let failing = pod(
        "failing",
        &[(RUN_ANNOTATION, "200"), (EXIT_CODE_ANNOTATION, "3")],
    )?;
    pods.create(&PostParams::default(), &failing).await?;
    let failed = pod_until(&client, "failing", "Failed", |p| phase(p) == "Failed").await?;
    let exit_code = failed
        .status
        .and_then(|s| s.container_statuses)
        .and_then(|c| c.first().cloned())
        .and_then(|c| c.state)
        .and_then(|s| s.terminated)
        .map(|t| t.exit_code);
    assert_eq!(exit_code, Some(3));
    Ok(())
}

#[tokio::test]
async fn killing_a_node_fails_its_pods_and_holds_new_ones() -> anyhow::Result<()> {
    let cluster = cluster_or_skip!(ClusterOptions::default(), Ok(()));
    let client = cluster.client();
    let (nodes, _kubelet) = with_nodes(&client, 1).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    pods.create(&PostParams::default(), &pod("forever", &[])?)
        .await?;
    pod_until(&client, "forever", "Running", |p| phase(p) == "Running").await?;
    nodes.kill("gpu-1").await?;
    let lost = pod_until(&client, "forever", "Failed", |p| phase(p) == "Failed").await?;
    assert_eq!(
        lost.status.and_then(|s| s.reason).as_deref(),
        Some("NodeLost")
    );

    // A pod bound to the NotReady node waits, and starts once the node is repaired.
    let mut late = pod("late", &[])?;
    if let Some(spec) = late.spec.as_mut() {
        spec.node_name = Some("gpu-1".into());
    }
    pods.create(&PostParams::default(), &late).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(phase(&pods.get("late").await?), "Pending");
    nodes.repair("gpu-1").await?;
    pod_until(&client, "late", "Running", |p| phase(p) == "Running").await?;
    Ok(())
}

#[tokio::test]
async fn a_partitioned_node_runs_its_pods_unseen_until_it_heals() -> anyhow::Result<()> {
    let cluster = cluster_or_skip!(ClusterOptions::default(), Ok(()));
    let client = cluster.client();
    let (nodes, kubelet) = with_nodes(&client, 1).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    for (name, annotations) in [
        ("steady", vec![]),
        ("doomed", vec![]),
        ("short", vec![(RUN_ANNOTATION, "4000")]),
    ] {
        pods.create(&PostParams::default(), &pod(name, &annotations)?)
            .await?;
        pod_until(&client, name, "Running", |p| phase(p) == "Running").await?;
    }
    nodes.partition("gpu-1").await?;
    let node = Api::<Node>::all(client.clone()).get("gpu-1").await?;
    let ready = node
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready");
    assert_eq!(ready.map(|c| c.status).as_deref(), Some("Unknown"));
    let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
    assert!(
        taints
            .iter()
            .any(|t| t.key == UNREACHABLE_TAINT && t.effect == "NoExecute"),
        "{taints:?}"
    );

    // Cut off: a deleted pod stays Terminating, a pod whose run time passes stays Running, and
    // the kubelet writes nothing.
    let writes = kubelet.stats();
    pods.delete("doomed", &DeleteParams::default()).await?;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let doomed = pods.get("doomed").await?;
    assert!(doomed.metadata.deletion_timestamp.is_some());
    assert_eq!(phase(&doomed), "Running");
    assert_eq!(phase(&pods.get("short").await?), "Running");
    assert_eq!(phase(&pods.get("steady").await?), "Running");
    assert_eq!(kubelet.stats().status_writes, writes.status_writes);
    assert_eq!(kubelet.stats().deletions, writes.deletions);

    // Healed: the deletion is confirmed, the pod whose time came ends, the other runs on.
    nodes.heal("gpu-1").await?;
    eventually("pod doomed gone", WAIT, || async {
        pods.get_opt("doomed")
            .await
            .ok()
            .and_then(|p| p.is_none().then_some(()))
    })
    .await?;
    pod_until(&client, "short", "Succeeded", |p| phase(p) == "Succeeded").await?;
    assert_eq!(phase(&pods.get("steady").await?), "Running");
    Ok(())
}

#[tokio::test]
async fn a_deleted_running_pod_disappears() -> anyhow::Result<()> {
    let cluster = cluster_or_skip!(ClusterOptions::default(), Ok(()));
    let client = cluster.client();
    let (_nodes, kubelet) = with_nodes(&client, 1).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    pods.create(&PostParams::default(), &pod("doomed", &[])?)
        .await?;
    pod_until(&client, "doomed", "Running", |p| phase(p) == "Running").await?;
    pods.delete("doomed", &DeleteParams::default()).await?;
    eventually("pod doomed gone", WAIT, || async {
        pods.get_opt("doomed")
            .await
            .ok()
            .and_then(|p| p.is_none().then_some(()))
    })
    .await?;
    assert!(kubelet.stats().deletions >= 1);
    Ok(())
}

#[tokio::test]
async fn a_restarted_apiserver_and_etcd_keep_the_data() -> anyhow::Result<()> {
    let mut cluster = cluster_or_skip!(
        ClusterOptions {
            scheduler: false,
            ..ClusterOptions::default()
        },
        Ok(())
    );
    let namespaces: Api<Namespace> = Api::all(cluster.client());
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": "kept"}}))?;
    namespaces
        .create(&PostParams::default(), &namespace)
        .await?;
    let before = cluster.pid(Component::ApiServer);
    cluster.restart_apiserver().await?;
    assert_ne!(cluster.pid(Component::ApiServer), before);
    namespaces.get("kept").await?;
    cluster.restart_etcd().await?;
    namespaces.get("kept").await?;
    Ok(())
}

#[tokio::test]
async fn dropping_the_cluster_stops_every_process_and_removes_its_folder() -> anyhow::Result<()> {
    let cluster = cluster_or_skip!(
        ClusterOptions {
            scheduler: true,
            controller_manager: true,
            upstream_crds: &[UpstreamCrd::ProvisioningRequest],
            controller_manager_qps: Some(50),
            controller_manager_job_syncs: Some(20),
            scheduler_qps: Some(100),
            api_server_profiling: true,
            feature_gates: "GenericWorkload=true",
            runtime_config: "scheduling.k8s.io/v1alpha2=true",
        },
        Ok(())
    );
    Api::<CustomResourceDefinition>::all(cluster.client())
        .get("provisioningrequests.autoscaling.x-k8s.io")
        .await?;
    // kube-scheduler runs with the rate asked for.
    let scheduler = cluster
        .pid(muster_testkit::Component::Scheduler)
        .ok_or_else(|| anyhow::anyhow!("kube-scheduler is not running"))?;
    let args = std::fs::read_to_string(format!("/proc/{scheduler}/cmdline"))?;
    assert!(
        args.split('\0').any(|a| a == "--kube-api-qps=100")
            && args.split('\0').any(|a| a == "--kube-api-burst=200"),
        "{args:?}"
    );
    // Profiling on: kube-apiserver serves its Go profiles.
    let goroutines = cluster
        .client()
        .request_text(http::Request::get("/debug/pprof/goroutine?debug=1").body(Vec::new())?)
        .await?;
    assert!(
        goroutines.starts_with("goroutine profile"),
        "{}",
        goroutines.lines().next().unwrap_or_default()
    );
    // kube-controller-manager logs the flags it runs with.
    let log = std::fs::read_to_string(cluster.log_dir().join("kube-controller-manager.log"))?;
    for flag in [
        r#"--kube-api-qps="50""#,
        r#"--kube-api-burst="75""#,
        r#"--concurrent-job-syncs="20""#,
        "--feature-gates=",
    ] {
        assert!(log.contains(flag), "{flag} not in its flags");
    }
    assert!(log.contains("GenericWorkload=true"), "its feature gates");
    // The alpha API asked for is served.
    let served = cluster
        .client()
        .list_api_group_resources("scheduling.k8s.io/v1alpha2")
        .await?;
    assert!(
        served.resources.iter().any(|r| r.name == "podgroups"),
        "{:?}",
        served.resources
    );
    let pids: Vec<u32> = [
        Component::Etcd,
        Component::ApiServer,
        Component::Scheduler,
        Component::ControllerManager,
    ]
    .into_iter()
    .filter_map(|c| cluster.pid(c))
    .collect();
    assert_eq!(pids.len(), 4);
    let dir = cluster.dir().to_path_buf();
    let stopping = Instant::now();
    drop(cluster);
    eprintln!("cluster stopped in {:?}", stopping.elapsed());
    for pid in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} still there"
        );
    }
    assert!(!dir.exists(), "{} still there", dir.display());
    Ok(())
}
