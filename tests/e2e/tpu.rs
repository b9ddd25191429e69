//! A TPU v5p 2x2x4 slice on a real control plane: four hosts of one node pool, one pod per
//! host, TPU worker ids and host names in every pod, and the headless Service selecting
//! exactly the gang's pods.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Pod, Service, Taint};
use kube::api::Api;
use muster_testkit::nodes::{NodeSpec, create_node};
use serde_json::json;

use crate::support::{Env, apply, bound_node, eventually, phase};

/// The value of `name` in the first container's environment.
fn env_of(pod: &Pod, name: &str) -> Option<String> {
    pod.spec
        .as_ref()?
        .containers
        .first()?
        .env
        .as_ref()?
        .iter()
        .find_map(|e| (e.name == name).then(|| e.value.clone().unwrap_or_default()))
}

/// Two pools of TPU v5p hosts (one 2x2x4 of four hosts, one 2x2x2 of two), the flavor, a
/// ClusterQueue `a` with 64 chips and its LocalQueue in `team-a`.
async fn tpu_pools(env: &Env) {
    // Two pools of 4 hosts: one 2x2x4 (the job's shape) and one 2x2x2 (not its shape).
    for (pool, shape, hosts) in [("pool-a", "2x2x4", 4), ("pool-b", "2x2x2", 2)] {
        for host in 0..hosts {
            let spec = NodeSpec::new(format!("{pool}-{host}"))
                .label("cloud.google.com/gke-tpu-accelerator", "tpu-v5p-slice")
                .label("cloud.google.com/gke-tpu-topology", shape)
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
    env.apply_all::<muster_api::ClusterQueue>(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "ClusterQueue", "metadata": {"name": "a"},
        "spec": {"namespaceSelector": {}, "resourceGroups": [{
            "coveredResources": ["google.com/tpu"],
            "flavors": [{"name": "tpu-v5p", "resources": [
                {"name": "google.com/tpu", "nominalQuota": "64"}]}]}]}}))
        .await;
    apply(
        &env.api::<muster_api::LocalQueue>("team-a"),
        json!({"apiVersion": "muster.dev/v1alpha1", "kind": "LocalQueue",
               "metadata": {"name": "a", "namespace": "team-a"}, "spec": {"clusterQueue": "a"}}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v5p_slice_runs_on_one_whole_pool_with_worker_ids_and_host_names() {
    let Some(env) = Env::start(false).await else {
        return;
    };
    tpu_pools(&env).await;
    let controller = env.controller();
    let job = serde_json::from_value(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "GpuJob",
        "metadata": {"name": "jax", "namespace": "team-a"},
        "spec": {"queueName": "a", "podSets": [{"name": "hosts", "count": 4,
            "topology": {"tpu": {"accelerator": "tpu-v5p-slice", "topology": "2x2x4"}},
            "template": {"spec": {"restartPolicy": "Never", "containers": [{
                "name": "jax", "image": "registry.k8s.io/pause:3.10",
                "resources": {"limits": {"google.com/tpu": "4"}}}]}}}]}}))
    .unwrap_or_default();
    env.submit(&job).await;
    env.until_status("team-a", "jax", "Running", 60, |s| phase(s) == "Running")
        .await;

    let pods = env.pods_of("team-a", "jax").await;
    assert_eq!(pods.len(), 4);
    let nodes: BTreeSet<String> = pods.iter().filter_map(bound_node).collect();
    let expected: BTreeSet<String> = (0..4).map(|h| format!("pool-a-{h}")).collect();
    assert_eq!(nodes, expected, "one pod on every host of the 2x2x4 pool");
    let ids: BTreeSet<String> = pods
        .iter()
        .filter_map(|p| env_of(p, "TPU_WORKER_ID"))
        .collect();
    assert_eq!(ids, ["0", "1", "2", "3"].map(str::to_owned).into());
    let hostnames: BTreeSet<String> = pods
        .iter()
        .filter_map(|p| env_of(p, "TPU_WORKER_HOSTNAMES"))
        .collect();
    assert_eq!(hostnames.len(), 1, "every worker sees the same list");
    let list = hostnames.into_iter().next().unwrap_or_default();
    assert_eq!(list.split(',').count(), 4, "{list}");
    for (i, host) in list.split(',').enumerate() {
        assert!(
            host.starts_with(&format!("jax-hosts-{i}.jax.team-a")),
            "{list}"
        );
    }

    // The headless Service selects exactly the gang's pods.
    let services: Api<Service> = env.api("team-a");
    let service = eventually("the gang's Service", 30, || async {
        services.get_opt("jax").await.ok().flatten()
    })
    .await;
    let spec = service.spec.unwrap_or_default();
    assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
    let selector: BTreeMap<String, String> = spec.selector.unwrap_or_default();
    let all: Api<Pod> = env.api("team-a");
    let labels = selector
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let selected = all
        .list(&kube::api::ListParams::default().labels(&labels))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let names = |pods: &[Pod]| -> BTreeSet<String> {
        pods.iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect()
    };
    assert_eq!(names(&selected), names(&pods));
    controller.stop().await;
}
