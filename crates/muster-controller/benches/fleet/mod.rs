//! The fleet the controller's benches run on: 10,000 GPU nodes in blocks of 500 and 100,000
//! running pods (other teams' work), with any number of waiting GpuJobs in one ClusterQueue,
//! folded into the controller's state as its watches fold them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, Node, NodeCondition, NodeStatus, Pod, PodSpec, PodStatus, ResourceRequirements,
};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use muster_api::{ClusterQueue, GpuJob, LocalQueue, ResourceFlavor};
use muster_controller::plan::plan;
use muster_controller::state::State;

use crate::support::land;

/// The fleet's nodes.
pub const NODES: usize = 10_000;
/// Its running pods, outside any job.
pub const PODS: usize = 100_000;

/// A fleet to build: how many nodes, other teams' pods and waiting jobs, and the runtime
/// each job announces.
#[derive(Clone, Copy, Debug)]
pub struct Fleet {
    /// Nodes of 8 GPUs, 500 to a topology block.
    pub nodes: usize,
    /// Pods of other teams, one GPU each, spread over the nodes.
    pub pods: usize,
    /// Waiting GpuJobs of 1 to 16 pods of 8 GPUs, each in one block.
    pub jobs: usize,
    /// The runtime every job announces, seconds (`None`: none).
    pub runtime: Option<i64>,
}

impl Fleet {
    /// The whole fleet (10,000 nodes, 100,000 pods) with `jobs` waiting jobs that announce
    /// no runtime.
    pub fn with_jobs(jobs: usize) -> Fleet {
        Fleet {
            nodes: NODES,
            pods: PODS,
            jobs,
            runtime: None,
        }
    }
}

fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
        .collect()
}

/// Node `i`: 8 GPUs, in one of 20 blocks, with the labels a GKE H100 node carries.
fn node(i: usize) -> Node {
    let name = format!("gke-a3-pool-{i:05}");
    Node {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some(BTreeMap::from([
                ("kubernetes.io/hostname".to_owned(), name),
                (
                    "cloud.google.com/gke-accelerator".to_owned(),
                    "nvidia-h100-80gb".to_owned(),
                ),
                (
                    "cloud.google.com/gce-topology-block".to_owned(),
                    format!("block-{}", i / 500),
                ),
                (
                    "cloud.google.com/gce-topology-subblock".to_owned(),
                    format!("sub-{}", i / 50),
                ),
                (
                    "cloud.google.com/gke-nodepool".to_owned(),
                    "a3-pool".to_owned(),
                ),
                (
                    "topology.kubernetes.io/zone".to_owned(),
                    "us-central1-a".to_owned(),
                ),
                (
                    "node.kubernetes.io/instance-type".to_owned(),
                    "a3-highgpu-8g".to_owned(),
                ),
            ])),
            ..ObjectMeta::default()
        },
        spec: None,
        status: Some(NodeStatus {
            allocatable: Some(quantities(&[
                ("nvidia.com/gpu", "8"),
                ("cpu", "208"),
                ("memory", "1870Gi"),
                ("pods", "110"),
            ])),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".to_owned(),
                status: "True".to_owned(),
                ..NodeCondition::default()
            }]),
            ..NodeStatus::default()
        }),
    }
}

/// Pod `i`: running on node `i % nodes` with one GPU, as a Deployment's pod looks.
fn pod(i: usize, nodes: usize) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("inference-{i:06}")),
            namespace: Some(format!("team-{}", i % 50)),
            labels: Some(BTreeMap::from([("app".to_owned(), "inference".to_owned())])),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some(format!("gke-a3-pool-{:05}", i % nodes.max(1))),
            containers: vec![Container {
                name: "server".to_owned(),
                image: Some("registry.example/server:1".to_owned()),
                resources: Some(ResourceRequirements {
                    requests: Some(quantities(&[("cpu", "8"), ("memory", "64Gi")])),
                    limits: Some(quantities(&[("nvidia.com/gpu", "1")])),
                    ..ResourceRequirements::default()
                }),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".to_owned()),
            ..PodStatus::default()
        }),
    }
}

/// `text` read as a `T` (its default if it does not read).
pub fn yaml<T: serde::de::DeserializeOwned + Default>(text: &str) -> T {
    serde_yaml_ng::from_str(text).unwrap_or_default()
}

/// Waiting job `i`, announcing `runtime` seconds when given.
pub fn job(i: usize, runtime: Option<i64>) -> GpuJob {
    yaml(&format!(
        r#"
apiVersion: muster.dev/v1alpha1
kind: GpuJob
metadata: {{name: job-{i:04}, namespace: team-a, uid: u-{i}, resourceVersion: "1", creationTimestamp: "2026-01-01T00:00:{:02}Z", finalizers: [muster.dev/gang]}}
spec:
  queueName: research
  expectedRuntimeSeconds: {}
  podSets:
  - name: workers
    count: {}
    topology: {{required: cloud.google.com/gce-topology-block}}
    template: {{spec: {{containers: [{{name: main, image: trainer, resources: {{limits: {{nvidia.com/gpu: "8"}}}}}}]}}}}
"#,
        i % 60,
        runtime.map_or_else(|| "null".to_owned(), |r| r.to_string()),
        1 + i % 16
    ))
}

/// The fleet's index with every cache synced.
pub fn fleet(fleet: Fleet) -> State {
    let mut index = State::new();
    index.relist_begin::<Node>();
    for i in 0..fleet.nodes {
        index.apply(node(i));
    }
    index.relist_done::<Node>();
    index.relist_begin::<Pod>();
    for i in 0..fleet.pods {
        index.apply(pod(i, fleet.nodes));
    }
    index.relist_done::<Pod>();
    index.relist_begin::<ResourceFlavor>();
    index.apply(yaml::<ResourceFlavor>(
        "apiVersion: muster.dev/v1alpha1\nkind: ResourceFlavor\nmetadata: {name: h100}\nspec:\n  nodeLabels: {cloud.google.com/gke-accelerator: nvidia-h100-80gb}\n  topologyLevels: [cloud.google.com/gce-topology-block, cloud.google.com/gce-topology-subblock, kubernetes.io/hostname]\n",
    ));
    index.relist_done::<ResourceFlavor>();
    index.relist_begin::<ClusterQueue>();
    index.apply(yaml::<ClusterQueue>(
        "apiVersion: muster.dev/v1alpha1\nkind: ClusterQueue\nmetadata: {name: research}\nspec:\n  namespaceSelector: {}\n  resourceGroups:\n  - coveredResources: [nvidia.com/gpu]\n    flavors:\n    - name: h100\n      resources: [{name: nvidia.com/gpu, nominalQuota: \"80000\"}]\n",
    ));
    index.relist_done::<ClusterQueue>();
    index.relist_begin::<LocalQueue>();
    index.apply(yaml::<LocalQueue>(
        "apiVersion: muster.dev/v1alpha1\nkind: LocalQueue\nmetadata: {name: research, namespace: team-a}\nspec: {clusterQueue: research}\n",
    ));
    index.relist_done::<LocalQueue>();
    index.relist_begin::<k8s_openapi::api::core::v1::Namespace>();
    index.relist_done::<k8s_openapi::api::core::v1::Namespace>();
    index.relist_begin::<PriorityClass>();
    index.relist_done::<PriorityClass>();
    index.relist_begin::<GpuJob>();
    for i in 0..fleet.jobs {
        index.apply(job(i, fleet.runtime));
    }
    index.relist_done::<GpuJob>();
    index
}

/// The fleet after passes whose writes all landed, until one had nothing to write: what the
/// loop holds when nothing has happened for a while.
pub fn settled(fleet: Fleet, now: Timestamp) -> State {
    let mut index = self::fleet(fleet);
    for _ in 0..5 {
        let pass = plan(&mut index, now);
        for action in &pass.actions {
            land(&mut index, action, now.as_second());
        }
        if pass.actions.is_empty() {
            break;
        }
    }
    index
}
