//! The controller's index at fleet scale: 10,000 GPU nodes and 100,000 running pods (other
//! teams' work), plus 1,000 waiting GpuJobs. Measures how long folding in the watch events
//! takes, how long one scheduling pass over that index takes, and — printed before the
//! benches — how much memory the index holds per node and per pod.
//!
//! Run: `cargo bench -p muster-controller --bench index`

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
// What the API server holds once a write succeeded, folded in as the executor folds it: the
// tests' helper.
#[path = "../tests/support/mod.rs"]
mod support;
use support::land;

const NODES: usize = 10_000;
const PODS: usize = 100_000;
const JOBS: usize = 1_000;

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

/// Pod `i`: running on node `i % NODES` with one GPU, as a Deployment's pod looks.
fn pod(i: usize) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("inference-{i:06}")),
            namespace: Some(format!("team-{}", i % 50)),
            labels: Some(BTreeMap::from([("app".to_owned(), "inference".to_owned())])),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some(format!("gke-a3-pool-{:05}", i % NODES)),
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

fn yaml<T: serde::de::DeserializeOwned + Default>(text: &str) -> T {
    serde_yaml_ng::from_str(text).unwrap_or_default()
}

fn job(i: usize) -> GpuJob {
    yaml(&format!(
        r#"
apiVersion: muster.dev/v1alpha1
kind: GpuJob
metadata: {{name: job-{i:04}, namespace: team-a, uid: u-{i}, resourceVersion: "1", creationTimestamp: "2026-01-01T00:00:{:02}Z", finalizers: [muster.dev/gang]}}
spec:
  queueName: research
  podSets:
  - name: workers
    count: {}
    topology: {{required: cloud.google.com/gce-topology-block}}
    template: {{spec: {{containers: [{{name: main, image: trainer, resources: {{limits: {{nvidia.com/gpu: "8"}}}}}}]}}}}
"#,
        i % 60,
        1 + i % 16
    ))
}

/// The fleet's index with every cache synced.
fn fleet(jobs: usize) -> State {
    let mut index = State::new();
    index.relist_begin::<Node>();
    for i in 0..NODES {
        index.apply(node(i));
    }
    index.relist_done::<Node>();
    index.relist_begin::<Pod>();
    for i in 0..PODS {
        index.apply(pod(i));
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
    for i in 0..jobs {
        index.apply(job(i));
    }
    index.relist_done::<GpuJob>();
    index
}

/// Resident memory of this process, bytes (Linux; 0 elsewhere).
fn resident() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4096)
}

fn main() {
    // Memory first, in a process that has built nothing else yet.
    let before = resident();
    let index = fleet(0);
    let after = resident();
    let bytes = after.saturating_sub(before);
    let objects = u64::try_from(NODES + PODS).unwrap_or(1);
    println!(
        "index of {NODES} nodes and {PODS} pods: {} MB resident ({} bytes per object)",
        bytes / 100_000 / 10,
        bytes / objects
    );
    drop(index);
    // The steady pass below is meant to keep the scheduler: say so if it does not.
    let now = Timestamp::from_second(1_767_225_700).unwrap_or_default();
    let mut index = settled_fleet(JOBS, now);
    let steady = plan(&mut index, now);
    println!(
        "steady pass: {} actions, scheduler {} (kept, or why rebuilt), {} jobs settled, waiting jobs {}",
        steady.actions.len(),
        steady.summary.scheduler_rebuilt.unwrap_or("kept"),
        steady.summary.settled,
        if steady.summary.explained {
            "explained again"
        } else {
            "not explained again"
        }
    );
    drop(index);
    divan::main();
}

/// The fleet with `jobs` waiting jobs after passes whose writes all landed, until one had
/// nothing to write: what the loop holds when nothing has happened for a while.
fn settled_fleet(jobs: usize, now: Timestamp) -> State {
    let mut index = fleet(jobs);
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

/// Folding in 10,000 node and 100,000 pod watch events.
#[divan::bench(sample_count = 5)]
fn fold_in_fleet_events() -> State {
    fleet(0)
}

/// One scheduling pass: rebuild admission's view from the index, run a cycle over 1,000
/// waiting jobs, plan the writes.
#[divan::bench(sample_count = 5)]
fn one_pass(bencher: divan::Bencher) {
    bencher
        .with_inputs(|| fleet(JOBS))
        .bench_local_values(|mut index| {
            plan(
                &mut index,
                Timestamp::from_second(1_767_225_700).unwrap_or_default(),
            )
        });
}

/// A pass after earlier ones whose writes all landed, until one had nothing to write, with
/// 1,000 and with 15,000 waiting jobs: the loop's usual pass when nothing happened in between
/// (its timer fires every few seconds). The arrangement of nodes per flavor is cached, the
/// scheduler the last pass left is kept, no job is settled again and no waiting job is
/// explained again.
#[divan::bench(args = [JOBS, 15_000], sample_count = 5)]
fn steady_pass(bencher: divan::Bencher, jobs: usize) {
    let now = Timestamp::from_second(1_767_225_700).unwrap_or_default();
    bencher
        .with_inputs(|| settled_fleet(jobs, now))
        .bench_local_refs(|index| plan(index, now));
}

/// The same, after one new job arrived: that job is settled and submitted, a cycle runs,
/// and every waiting job's position and reason is read again (their statuses need no write).
#[divan::bench(args = [JOBS, 15_000], sample_count = 5)]
fn pass_after_one_arrival(bencher: divan::Bencher, jobs: usize) {
    let now = Timestamp::from_second(1_767_225_700).unwrap_or_default();
    bencher
        .with_inputs(|| {
            let mut index = settled_fleet(jobs, now);
            index.apply(job(jobs));
            index
        })
        .bench_local_refs(|index| plan(index, now));
}

/// The visibility API's answer for a ClusterQueue of 1,000 and of 15,000 waiting jobs, from
/// the state the loop holds after a pass, written as the JSON the controller sends: what it
/// spends per `muster jobs` or dashboard refresh, all with the state locked (the order, then
/// each job made as it is written). No request, no write.
#[divan::bench(args = [JOBS, 15_000], sample_count = 5)]
fn waiting_list(bencher: divan::Bencher, jobs: usize) {
    let now = Timestamp::from_second(1_767_225_700).unwrap_or_default();
    let scope = muster_controller::visibility::Scope::ClusterQueue("research".to_owned());
    bencher
        .with_inputs(|| settled_fleet(jobs, now))
        .bench_local_refs(|state| {
            let list = muster_controller::visibility::pending_job_listing(state, &scope, &|_| true);
            assert_eq!(list.as_ref().map(|l| l.items.len()).ok(), Some(jobs));
            serde_json::to_string(&list.ok()).map(|json| json.len())
        });
}

/// Gathering what a start-time forecast is made from, for 1,000 and 15,000 waiting jobs on the
/// fleet: the part of a forecast that holds the state's lock (the snapshot of every node, queue
/// and held or waiting job copied; finished runs learned; ranges scored). The forward runs
/// themselves go without the lock (see muster-sim's `forecast` bench).
#[divan::bench(args = [JOBS, 15_000], sample_count = 5)]
fn gather_forecast_input(bencher: divan::Bencher, jobs: usize) {
    let now = Timestamp::from_second(1_767_225_700).unwrap_or_default();
    bencher
        .with_inputs(|| settled_fleet(jobs, now))
        .bench_local_refs(|state| state.gather_forecast_input(now.as_second()));
}
