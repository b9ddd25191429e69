//! One admission cycle over 100,000 pending jobs in 30 ClusterQueues (three cohorts of ten) on
//! a 10,000-node fleet: how long the cycle takes and how many decisions per second it makes.
//!
//! Run: `cargo bench -p muster-admission --bench cycle`

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use muster_admission::{Cluster, Decision, Job, Scheduler};
use muster_api::cluster_queue::{FlavorQuotas, ResourceGroup, ResourceQuota};
use muster_api::{Amount, ClusterQueueSpec, ResourceFlavorSpec, Resources};
use muster_topology::{Constraint, NodeInfo, PodSetRequest};

fn main() {
    divan::main();
}

const GPU: &str = "nvidia.com/gpu";
const BLOCK: &str = "cloud.google.com/gce-topology-block";
const HOST: &str = "kubernetes.io/hostname";
const QUEUES: usize = 30;
const JOBS: usize = 100_000;

fn res(pairs: &[(&str, u64)]) -> Resources {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Amount::from_units(*v)))
        .collect()
}

/// 20 blocks of 500 hosts with 8 GPUs each.
fn nodes() -> Vec<NodeInfo> {
    (0..10_000u32)
        .map(|i| {
            let name = format!("gpu-{i:05}");
            NodeInfo {
                name: name.clone(),
                labels: BTreeMap::from([
                    ("pool".to_owned(), "h100".to_owned()),
                    (BLOCK.to_owned(), format!("b{:02}", i / 500)),
                    (HOST.to_owned(), name),
                ]),
                taints: Vec::new(),
                allocatable: res(&[(GPU, 8), ("pods", 110)]),
                schedulable: true,
            }
        })
        .collect()
}

fn queue(cohort: usize) -> ClusterQueueSpec {
    ClusterQueueSpec {
        cohort: Some(format!("cohort-{cohort}")),
        namespace_selector: Some(LabelSelector::default()),
        resource_groups: vec![ResourceGroup {
            covered_resources: vec![GPU.to_owned()],
            flavors: vec![FlavorQuotas {
                name: "h100".into(),
                resources: vec![ResourceQuota {
                    name: GPU.into(),
                    nominal_quota: Quantity("2000".into()),
                    borrowing_limit: None,
                    lending_limit: None,
                }],
            }],
        }],
        ..ClusterQueueSpec::default()
    }
}

/// Job `i`: a mix of 1-GPU, 8-GPU, 4 × 8-GPU and 16 × 8-GPU (one block) jobs, three
/// priorities, spread over the queues.
fn job(i: usize) -> Job {
    let (pods, gpus, constraint) = match i % 10 {
        0..=3 => (1, 1, Constraint::None),
        4..=6 => (1, 8, Constraint::None),
        7..=8 => (4, 8, Constraint::Required(BLOCK.into())),
        _ => (16, 8, Constraint::Required(BLOCK.into())),
    };
    Job {
        id: format!("ns/job-{i:06}"),
        uid: format!("uid-{i:06}"),
        local_queue: format!("ns/q{:02}", i % QUEUES),
        priority: i32::try_from(i % 3).unwrap_or(0),
        created: i64::try_from(i).unwrap_or(0),
        expected_runtime: Some(3600 + i64::try_from(i % 7).unwrap_or(0) * 600),
        pod_sets: vec![PodSetRequest {
            name: "workers".into(),
            count: pods,
            requests: res(&[(GPU, gpus), ("pods", 1)]),
            node_selector: BTreeMap::new(),
            affinity: Vec::new(),
            tolerations: Vec::new(),
            constraint,
        }],
        invalid: None,
        suspended: false,
        provisioned: false,
    }
}

fn scheduler() -> Scheduler {
    let flavor = ResourceFlavorSpec {
        node_labels: BTreeMap::from([("pool".to_owned(), "h100".to_owned())]),
        topology_levels: vec![BLOCK.to_owned(), HOST.to_owned()],
        ..ResourceFlavorSpec::default()
    };
    let cluster = Cluster::new([("h100".to_owned(), flavor)], &nodes());
    let mut s = Scheduler::new(
        cluster,
        (0..QUEUES).map(|q| (format!("q{q:02}"), queue(q % 3))),
        (0..QUEUES).map(|q| (format!("ns/q{q:02}"), format!("q{q:02}"))),
    );
    for i in 0..JOBS {
        s.submit(job(i));
    }
    s
}

/// The first cycle: every job pending, the fleet empty. Counts decisions per second.
#[divan::bench(sample_count = 5, sample_size = 1)]
fn first_cycle_100k_jobs_30_queues_10k_nodes(bencher: divan::Bencher) {
    bencher
        .counter(divan::counter::ItemsCount::new(JOBS))
        .with_inputs(scheduler)
        .bench_local_refs(|s| {
            let decisions = s.cycle(0);
            let admitted = decisions
                .iter()
                .filter(|d| matches!(d, Decision::Admit(_)))
                .count();
            assert!(admitted > 0 && decisions.len() == JOBS);
            admitted
        });
}

/// A later cycle: the fleet as the first cycle left it, nothing changed (every job is
/// re-examined and still waits, or was admitted before).
#[divan::bench(sample_count = 5, sample_size = 1)]
fn steady_cycle_100k_jobs_30_queues_10k_nodes(bencher: divan::Bencher) {
    bencher
        .with_inputs(|| {
            let mut s = scheduler();
            s.cycle(0);
            s
        })
        .bench_local_refs(|s| s.cycle(1).len());
}
