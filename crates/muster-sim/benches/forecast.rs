//! What a forecast costs: start-time ranges (32 forward runs, on both cores) for every
//! waiting job of a snapshot of `hosts` hosts (8 GPUs each, blocks of 500) and `jobs` jobs,
//! of which those that fit at time 0 run (admitted an hour ago, each announced 1–2 h) and the
//! rest wait. Half the jobs take one GPU, a quarter eight, a fifth 4 × 8 in one block and the
//! rest 16 × 8 in one block; three priorities over ten queues. No history: runtimes are the
//! announced ones, spread by nothing, so every run costs what a learned one does.
//!
//! `kueue_baseline_flood`: one forecast as the controller makes it (one thread) of Kueue's
//! scheduler-performance baseline just after its 15,000 jobs were submitted.
//!
//! Run: `cargo bench -p muster-sim --bench forecast`

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use muster_admission::{Cluster, Decision, Holding, Job, Scheduler};
use muster_api::cluster_queue::{
    FlavorQuotas, PreemptionPolicy, ReclaimWithinCohort, ResourceGroup, ResourceQuota,
    WithinClusterQueue,
};
use muster_api::{Amount, ClusterQueueSpec, ResourceFlavorSpec, Resources};
use muster_sim::forecast::{
    self, Options, RecentJob, RunningJob, RuntimeModel, Snapshot, WaitingJob,
};
use muster_topology::{Constraint, NodeInfo, PodSetRequest};

/// The allocator the `muster` binary ships with (the controller's forecasts and `muster eta`
/// run on it), so that the bench measures what they cost.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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

/// A ClusterQueue of `cohort` with `nominal` of `resource` in `flavor` (and `borrowing` more
/// when set).
fn queue(
    cohort: &str,
    flavor: &str,
    resource: &str,
    nominal: u64,
    borrowing: Option<u64>,
) -> ClusterQueueSpec {
    ClusterQueueSpec {
        cohort: Some(cohort.to_owned()),
        namespace_selector: Some(LabelSelector::default()),
        resource_groups: vec![ResourceGroup {
            covered_resources: vec![resource.to_owned()],
            flavors: vec![FlavorQuotas {
                name: flavor.into(),
                resources: vec![ResourceQuota {
                    name: resource.into(),
                    nominal_quota: Quantity(nominal.to_string()),
                    borrowing_limit: borrowing.map(|b| Quantity(b.to_string())),
                    lending_limit: None,
                }],
            }],
        }],
        ..ClusterQueueSpec::default()
    }
}

/// A job of one pod set of `count` pods, each asking for `amount` of `resource`.
fn one_set_job(
    id: String,
    local_queue: String,
    (count, resource, amount): (u32, &str, u64),
    constraint: Constraint,
) -> Job {
    Job {
        uid: format!("uid-{id}"),
        id,
        local_queue,
        priority: 0,
        created: 0,
        expected_runtime: None,
        pod_sets: vec![PodSetRequest {
            name: "workers".into(),
            count,
            requests: res(&[(resource, amount), ("pods", 1)]),
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

fn job(i: usize) -> Job {
    let (pods, gpus, constraint) = match i % 20 {
        0..=9 => (1, 1, Constraint::None),
        10..=14 => (1, 8, Constraint::None),
        15..=18 => (4, 8, Constraint::Required(BLOCK.into())),
        _ => (16, 8, Constraint::Required(BLOCK.into())),
    };
    Job {
        priority: i32::try_from(i % 3).unwrap_or(0),
        created: i64::try_from(i).unwrap_or(0),
        expected_runtime: Some(3600 + i64::try_from(i % 7).unwrap_or(0) * 600),
        ..one_set_job(
            format!("ns/job-{i:06}"),
            format!("ns/q{:02}", i % QUEUES),
            (pods, GPU, gpus),
            constraint,
        )
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
    let per_queue = u64::from(hosts) * 8 / u64::try_from(QUEUES).unwrap_or(1);
    let queues: Vec<(String, ClusterQueueSpec)> = (0..QUEUES)
        .map(|q| {
            (
                format!("q{q:02}"),
                queue("all", "h100", GPU, per_queue, None),
            )
        })
        .collect();
    let local: Vec<(String, String)> = (0..QUEUES)
        .map(|q| (format!("ns/q{q:02}"), format!("q{q:02}")))
        .collect();
    let fleet = Fleet {
        flavors: vec![("h100".to_owned(), flavor)],
        nodes: nodes(hosts),
        queues,
        local,
    };
    settle(fleet, (0..jobs).map(job), 3_600)
}

/// A cluster's nodes and queue objects.
struct Fleet {
    flavors: Vec<(String, ResourceFlavorSpec)>,
    nodes: Vec<NodeInfo>,
    queues: Vec<(String, ClusterQueueSpec)>,
    local: Vec<(String, String)>,
}

/// The snapshot at `now` of `jobs` submitted to `fleet` at time 0: what admission took then
/// runs since, the rest waits.
fn settle(fleet: Fleet, jobs: impl Iterator<Item = Job> + Clone, now: i64) -> Snapshot {
    let Fleet {
        flavors,
        nodes,
        queues,
        local,
    } = fleet;
    let mut s = Scheduler::new(
        Cluster::new(flavors.clone(), &nodes),
        queues.clone(),
        local.clone(),
    );
    for j in jobs.clone() {
        s.submit(j);
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
    for j in jobs {
        match admitted.remove(&j.id) {
            Some(a) => running.push(RunningJob {
                holding: Holding {
                    cluster_queue: a.cluster_queue,
                    since: Some(0),
                    pod_sets: a.pod_sets,
                },
                job: Arc::new(j),
                keys: vec![String::new()].into(),
                batch: None,
                provisioning: false,
            }),
            None => waiting.push(WaitingJob {
                job: Arc::new(j),
                keys: vec![String::new()].into(),
                queues_at: None,
                batch: None,
            }),
        }
    }
    Snapshot {
        now,
        flavors,
        nodes,
        outside_usage: BTreeMap::new(),
        cluster_queues: queues,
        cohorts: Vec::new(),
        local_queues: local,
        namespaces: BTreeMap::from([("ns".to_owned(), BTreeMap::new())]),
        running,
        waiting,
        recent: Vec::new(),
    }
}

/// Kueue's scheduler-performance baseline as a forecast sees it a few seconds in: 5 cohorts
/// of 6 ClusterQueues (20 CPUs nominal, 100 more borrowable, lower priorities preempted in
/// the queue, lent quota reclaimed from anyone), 12 nodes of 64 CPUs, and per queue 350 small
/// (1 CPU, priority 50), 100 medium (5 CPUs, 100) and 50 large (20 CPUs, 200) one-pod jobs,
/// all submitted at once. Announced runtimes of 5, 8 and 12 s stand for what the controller
/// learns such jobs really hold their quota for (their pods run 0.2–1 s).
fn kueue_flood() -> Snapshot {
    let pool = BTreeMap::from([("pool".to_owned(), "cpu".to_owned())]);
    let nodes = (0..12)
        .map(|i| NodeInfo {
            name: format!("node-{i:02}"),
            labels: pool.clone(),
            taints: Vec::new(),
            allocatable: res(&[("cpu", 64), ("pods", 110)]),
            schedulable: true,
        })
        .collect();
    let queue = |cohort: usize| ClusterQueueSpec {
        preemption: Some(PreemptionPolicy {
            within_cluster_queue: WithinClusterQueue::LowerPriority,
            reclaim_within_cohort: ReclaimWithinCohort::Any,
            wait_when_cheaper: None,
            max_wait_when_cheaper_seconds: None,
        }),
        ..queue(&format!("cohort-{cohort}"), "default", "cpu", 20, Some(100))
    };
    let names: Vec<String> = (0..5)
        .flat_map(|c| (0..6).map(move |q| format!("cq-{q}-cohort-{c}")))
        .collect();
    let fleet = Fleet {
        flavors: vec![(
            "default".to_owned(),
            ResourceFlavorSpec {
                node_labels: pool,
                ..ResourceFlavorSpec::default()
            },
        )],
        nodes,
        queues: names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), queue(i / 6)))
            .collect(),
        local: names
            .iter()
            .map(|n| (format!("ns/{n}"), n.clone()))
            .collect(),
    };
    // (class, jobs per queue, CPUs, priority, announced runtime in seconds).
    let classes = [
        ("small", 350, 1, 50, 5),
        ("medium", 100, 5, 100, 8),
        ("large", 50, 20, 200, 12),
    ];
    let jobs = names.into_iter().flat_map(move |cq| {
        classes
            .into_iter()
            .flat_map(move |(class, count, cpus, priority, runtime)| {
                let cq = cq.clone();
                (0..count).map(move |n| Job {
                    priority,
                    created: i64::from(n),
                    expected_runtime: Some(runtime),
                    ..one_set_job(
                        format!("ns/{cq}-{class}-{n:03}"),
                        format!("ns/{cq}"),
                        (1, "cpu", cpus),
                        Constraint::None,
                    )
                })
            })
    });
    let mut snapshot = settle(fleet, jobs.clone(), 5);
    // Every job was submitted moments ago: the forward runs have copies of them arrive, at
    // 15,000 per six hours, as the controller's do.
    snapshot.recent = jobs
        .map(|job| RecentJob {
            job: Arc::new(job),
            keys: vec![String::new()].into(),
        })
        .collect();
    snapshot
}

/// Forecasts every waiting job of `snapshot` with no history (announced runtimes); returns
/// how many ranges it gave, for the bench to keep.
fn waiting_jobs_forecast(snapshot: &Snapshot, options: &Options) -> usize {
    forecast::forecast(snapshot, &RuntimeModel::new(), options).map_or(0, |f| f.etas.len())
}

#[divan::bench(args = SIZES, sample_count = 1, sample_size = 1)]
fn every_waiting_job(bencher: divan::Bencher, label: &str) {
    let options = Options {
        threads: 2,
        ..Options::default()
    };
    bencher
        .with_inputs(|| snapshot(label))
        .bench_local_refs(|s| waiting_jobs_forecast(s, &options));
}

/// What one forecast of the controller costs on Kueue's baseline (see [`kueue_flood`]): 32
/// forward runs on one thread, as the controller makes them.
#[divan::bench(sample_count = 1, sample_size = 1)]
fn kueue_baseline_flood(bencher: divan::Bencher) {
    let options = Options {
        threads: 1,
        ..Options::default()
    };
    bencher
        .with_inputs(kueue_flood)
        .bench_local_refs(|s| waiting_jobs_forecast(s, &options));
}

/// One forward run on one thread, of the 10k × 1k snapshot and of the flood: the unit the
/// forecasts above repeat 32 times. Its instructions can be counted, the same on every run
/// of one binary, where wall time on this kind of machine moves by more than most changes:
/// `valgrind --tool=callgrind --toggle-collect='muster_sim::forecast::run::forward'
/// target/release/deps/forecast-<hash> --bench one_forward_run`.
#[divan::bench(args = ["10k jobs × 1k hosts", "kueue flood"], sample_count = 1, sample_size = 1)]
fn one_forward_run(bencher: divan::Bencher, label: &str) {
    let options = Options {
        threads: 1,
        samples: 1,
        ..Options::default()
    };
    bencher
        .with_inputs(|| {
            if label == "kueue flood" {
                kueue_flood()
            } else {
                snapshot(label)
            }
        })
        .bench_local_refs(|s| waiting_jobs_forecast(s, &options));
}

/// One forward run of the 100k × 10k snapshot, on one thread: what the speed target's 32
/// runs each cost, counted the same way as [`one_forward_run`] (`--bench
/// scale_forward_run`; a few minutes under callgrind).
#[divan::bench(sample_count = 1, sample_size = 1)]
fn scale_forward_run(bencher: divan::Bencher) {
    let options = Options {
        threads: 1,
        samples: 1,
        ..Options::default()
    };
    bencher
        .with_inputs(|| snapshot(SIZES[1]))
        .bench_local_refs(|s| waiting_jobs_forecast(s, &options));
}
