//! What a forecast costs: start-time ranges (32 forward runs, on both cores) for every
//! waiting job of a snapshot of `hosts` hosts (8 GPUs each, blocks of 500) and `jobs` jobs,
//! of which those that fit at time 0 run (admitted an hour ago, each announced 1–2 h) and the
//! rest wait. Half the jobs take one GPU, a quarter eight, a fifth 4 × 8 in one block and the
//! rest 16 × 8 in one block; three priorities over ten queues. No history: runtimes are the
//! announced ones, spread by nothing, so every run costs what a learned one does.
//!
//! Run: `cargo bench -p muster-sim --bench forecast`

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use muster_admission::{Cluster, Decision, Holding, Job, Scheduler};
use muster_api::cluster_queue::{FlavorQuotas, ResourceGroup, ResourceQuota};
use muster_api::{Amount, ClusterQueueSpec, ResourceFlavorSpec, Resources};
use muster_sim::forecast::{self, Options, RunningJob, RuntimeModel, Snapshot, WaitingJob};
use muster_topology::{Constraint, NodeInfo, PodSetRequest};

fn main() {
    divan::main();
}

const GPU: &str = "nvidia.com/gpu";
const BLOCK: &str = "cloud.google.com/gce-topology-block";
const HOST: &str = "kubernetes.io/hostname";
const QUEUES: usize = 10;

/// `jobs × hosts`, as the bench's arguments spell them.
const SIZES: &[&str] = &["10k jobs × 1k hosts", "100k jobs × 10k hosts"];

fn res(pairs: &[(&str, u64)]) -> Resources {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Amount::from_units(*v)))
        .collect()
}

fn nodes(count: u32) -> Vec<NodeInfo> {
    (0..count)
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

fn queue(gpus: u64) -> ClusterQueueSpec {
    ClusterQueueSpec {
        cohort: Some("all".to_owned()),
        namespace_selector: Some(LabelSelector::default()),
        resource_groups: vec![ResourceGroup {
            covered_resources: vec![GPU.to_owned()],
            flavors: vec![FlavorQuotas {
                name: "h100".into(),
                resources: vec![ResourceQuota {
                    name: GPU.into(),
                    nominal_quota: Quantity(gpus.to_string()),
                    borrowing_limit: None,
                    lending_limit: None,
                }],
            }],
        }],
        ..ClusterQueueSpec::default()
    }
}

fn job(i: usize) -> Job {
    let (pods, gpus, constraint) = match i % 20 {
        0..=9 => (1, 1, Constraint::None),
        10..=14 => (1, 8, Constraint::None),
        15..=18 => (4, 8, Constraint::Required(BLOCK.into())),
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
            whole_gpus: false,
        }],
        invalid: None,
        suspended: false,
        provisioned: false,
    }
}

fn size(label: &str) -> (usize, u32) {
    let count = |s: &str| match s {
        "1k" => 1_000,
        "10k" => 10_000,
        _ => 100_000,
    };
    let mut words = label.split_whitespace();
    let jobs = count(words.next().unwrap_or_default());
    let hosts = count(words.nth(2).unwrap_or_default());
    (jobs, u32::try_from(hosts).unwrap_or(u32::MAX))
}

/// The snapshot at time 3,600: what fit at time 0 runs since then, the rest waits.
fn snapshot(label: &str) -> Snapshot {
    let (jobs, hosts) = size(label);
    let flavor = ResourceFlavorSpec {
        node_labels: BTreeMap::from([("pool".to_owned(), "h100".to_owned())]),
        topology_levels: vec![BLOCK.to_owned(), HOST.to_owned()],
        ..ResourceFlavorSpec::default()
    };
    let nodes = nodes(hosts);
    let per_queue = u64::from(hosts) * 8 / u64::try_from(QUEUES).unwrap_or(1);
    let queues: Vec<(String, ClusterQueueSpec)> = (0..QUEUES)
        .map(|q| (format!("q{q:02}"), queue(per_queue)))
        .collect();
    let local: Vec<(String, String)> = (0..QUEUES)
        .map(|q| (format!("ns/q{q:02}"), format!("q{q:02}")))
        .collect();
    let flavors = vec![("h100".to_owned(), flavor)];
    let mut s = Scheduler::new(
        Cluster::new(flavors.clone(), &nodes),
        queues.clone(),
        local.clone(),
    );
    for i in 0..jobs {
        s.submit(job(i));
    }
    let mut admitted = BTreeMap::new();
    for _ in 0..8 {
        let decisions = s.step(0);
        if decisions.is_empty() {
            break;
        }
        for d in decisions {
            if let Decision::Admit(a) = d {
                admitted.insert(a.job.clone(), a);
            }
        }
    }
    let mut running = Vec::new();
    let mut waiting = Vec::new();
    for i in 0..jobs {
        let j = job(i);
        match admitted.remove(&j.id) {
            Some(a) => running.push(RunningJob {
                holding: Holding {
                    cluster_queue: a.cluster_queue,
                    since: Some(0),
                    pod_sets: a.pod_sets,
                },
                job: j,
                keys: vec![String::new()],
                batch: None,
                provisioning: false,
            }),
            None => waiting.push(WaitingJob {
                job: j,
                keys: vec![String::new()],
                queues_at: None,
                batch: None,
            }),
        }
    }
    Snapshot {
        now: 3_600,
        flavors,
        nodes,
        outside_usage: BTreeMap::new(),
        cluster_queues: queues,
        local_queues: local,
        namespaces: BTreeMap::from([("ns".to_owned(), BTreeMap::new())]),
        running,
        waiting,
        recent: Vec::new(),
    }
}

#[divan::bench(args = SIZES, sample_count = 1, sample_size = 1)]
fn every_waiting_job(bencher: divan::Bencher, label: &str) {
    let options = Options {
        threads: 2,
        ..Options::default()
    };
    bencher
        .with_inputs(|| snapshot(label))
        .bench_local_refs(|s| {
            forecast::forecast(s, &RuntimeModel::new(), &options).map_or(0, |f| f.etas.len())
        });
}
