//! Builders shared by the admission tests: fleets, flavors, queues, jobs, and a driver that
//! carries decisions out the way the controller and the simulator do.

#![allow(dead_code, reason = "each test file uses its own subset")]

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use muster_admission::{Cluster, Decision, Job, Scheduler};
use muster_api::cluster_queue::{
    FlavorQuotas, PreemptionPolicy, QueueingStrategy, ResourceGroup, ResourceQuota,
};
use muster_api::{Amount, ClusterQueueSpec, ResourceFlavorSpec, Resources};
use muster_topology::{Constraint, NodeInfo, PodSetRequest};

pub const GPU: &str = "nvidia.com/gpu";
pub const BLOCK: &str = "cloud.google.com/gce-topology-block";
pub const HOST: &str = "kubernetes.io/hostname";

pub fn res(pairs: &[(&str, u64)]) -> Resources {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Amount::from_units(*v)))
        .collect()
}

/// `blocks` blocks of `hosts` hosts with 8 GPUs each, labelled for flavor `pool`.
pub fn fleet(pool: &str, blocks: usize, hosts: usize) -> Vec<NodeInfo> {
    let mut nodes = Vec::new();
    for b in 0..blocks {
        for h in 0..hosts {
            let name = format!("{pool}-b{b}-h{h:02}");
            nodes.push(NodeInfo {
                name: name.clone(),
                labels: BTreeMap::from([
                    ("pool".to_owned(), pool.to_owned()),
                    (BLOCK.to_owned(), format!("{pool}-b{b}")),
                    (HOST.to_owned(), name),
                ]),
                taints: Vec::new(),
                allocatable: res(&[(GPU, 8), ("cpu", 200), ("pods", 110)]),
                schedulable: true,
            });
        }
    }
    nodes
}

pub fn flavor(pool: &str) -> (String, ResourceFlavorSpec) {
    (
        pool.to_owned(),
        ResourceFlavorSpec {
            node_labels: BTreeMap::from([("pool".to_owned(), pool.to_owned())]),
            topology_levels: vec![BLOCK.to_owned(), HOST.to_owned()],
            ..ResourceFlavorSpec::default()
        },
    )
}

/// Quota of one resource: (name, nominal, borrowing limit, lending limit).
pub type Q<'a> = (&'a str, u64, Option<u64>, Option<u64>);

pub fn cq(cohort: Option<&str>, flavors: &[(&str, &[Q])]) -> ClusterQueueSpec {
    let covered: Vec<String> = flavors
        .first()
        .map(|(_, qs)| qs.iter().map(|q| q.0.to_owned()).collect())
        .unwrap_or_default();
    let quantity = |n: u64| Quantity(n.to_string());
    ClusterQueueSpec {
        cohort: cohort.map(str::to_owned),
        namespace_selector: Some(LabelSelector::default()),
        resource_groups: vec![ResourceGroup {
            covered_resources: covered,
            flavors: flavors
                .iter()
                .map(|(name, qs)| FlavorQuotas {
                    name: (*name).to_owned(),
                    resources: qs
                        .iter()
                        .map(|(r, nominal, borrow, lend)| ResourceQuota {
                            name: (*r).to_owned(),
                            nominal_quota: quantity(*nominal),
                            borrowing_limit: borrow.map(quantity),
                            lending_limit: lend.map(quantity),
                        })
                        .collect(),
                })
                .collect(),
        }],
        ..ClusterQueueSpec::default()
    }
}

pub fn strict(mut spec: ClusterQueueSpec) -> ClusterQueueSpec {
    spec.queueing_strategy = QueueingStrategy::StrictFIFO;
    spec
}

pub fn preempting(mut spec: ClusterQueueSpec, policy: PreemptionPolicy) -> ClusterQueueSpec {
    spec.preemption = Some(policy);
    spec
}

/// A job of `pods` pods with `gpus` GPUs each (and nothing else), in LocalQueue `ns/<queue>`.
pub fn job(id: &str, queue: &str, priority: i32, created: i64, pods: u32, gpus: u64) -> Job {
    job_of(id, queue, priority, created, pods, GPU, gpus)
}

/// A job of `pods` pods with `amount` of `resource` each.
pub fn job_of(
    id: &str,
    queue: &str,
    priority: i32,
    created: i64,
    pods: u32,
    resource: &str,
    amount: u64,
) -> Job {
    Job {
        id: format!("ns/{id}"),
        uid: format!("uid-{id}"),
        local_queue: format!("ns/{queue}"),
        priority,
        created,
        expected_runtime: None,
        pod_sets: vec![PodSetRequest {
            name: "workers".into(),
            count: pods,
            requests: res(&[(resource, amount), ("pods", 1)]),
            node_selector: BTreeMap::new(),
            affinity: Vec::new(),
            tolerations: Vec::new(),
            constraint: Constraint::None,
            whole_gpus: false,
        }],
        invalid: None,
        suspended: false,
        provisioned: false,
    }
}

pub fn in_one_block(mut job: Job) -> Job {
    job.pod_sets[0].constraint = Constraint::Required(BLOCK.to_owned());
    job
}

pub fn runs_for(mut job: Job, seconds: i64) -> Job {
    job.expected_runtime = Some(seconds);
    job
}

/// A scheduler over `nodes` with the given flavors and ClusterQueues; every ClusterQueue `q`
/// gets a LocalQueue `ns/q`.
pub fn scheduler(
    nodes: &[NodeInfo],
    flavors: Vec<(String, ResourceFlavorSpec)>,
    queues: Vec<(&str, ClusterQueueSpec)>,
) -> Scheduler {
    let cluster = Cluster::new(flavors, nodes);
    let locals: Vec<(String, String)> = queues
        .iter()
        .map(|(n, _)| (format!("ns/{n}"), (*n).to_owned()))
        .collect();
    Scheduler::new(
        cluster,
        queues.into_iter().map(|(n, s)| (n.to_owned(), s)),
        locals,
    )
}

/// Runs one cycle and carries out its evictions at once (as if the pods left immediately).
pub fn cycle(s: &mut Scheduler, now: i64) -> Vec<Decision> {
    let decisions = s.cycle(now);
    requeue_victims(s, &decisions);
    decisions
}

/// [`cycle`] by [`Scheduler::step`]: the decisions that change something, no waiting job.
pub fn step(s: &mut Scheduler, now: i64) -> Vec<Decision> {
    let decisions = s.step(now);
    requeue_victims(s, &decisions);
    decisions
}

/// Carries out the evictions among `decisions` at once: their jobs wait again.
fn requeue_victims(s: &mut Scheduler, decisions: &[Decision]) {
    for d in decisions {
        match d {
            Decision::Preempt { victims, .. } => {
                for v in victims {
                    s.requeue(v);
                }
            }
            Decision::Evict { job, .. } => s.requeue(job),
            _ => {}
        }
    }
}

pub fn admitted(decisions: &[Decision]) -> Vec<String> {
    decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Admit(a) => Some(a.job.trim_start_matches("ns/").to_owned()),
            _ => None,
        })
        .collect()
}

pub fn preempted(decisions: &[Decision]) -> Vec<String> {
    decisions
        .iter()
        .filter_map(|d| match d {
            Decision::Preempt { victims, .. } => Some(victims.clone()),
            _ => None,
        })
        .flatten()
        .map(|v| v.trim_start_matches("ns/").to_owned())
        .collect()
}

pub fn reason_of<'a>(
    decisions: &'a [Decision],
    id: &str,
) -> Option<&'a muster_admission::PendingReason> {
    let id = format!("ns/{id}");
    decisions.iter().find_map(|d| match d {
        Decision::Pending { job, reason, .. } if *job == id => Some(reason),
        _ => None,
    })
}
