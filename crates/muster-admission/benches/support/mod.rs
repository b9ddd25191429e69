//! The fleet, queues and jobs the admission benches run on.

#![allow(dead_code, reason = "each bench uses its own subset")]

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use muster_admission::{Cluster, CohortTree, Job, Scheduler};
use muster_api::cluster_queue::{FlavorQuotas, ResourceGroup, ResourceQuota};
use muster_api::{Amount, ClusterQueueSpec, CohortSpec, ResourceFlavorSpec, Resources};
use muster_topology::{Constraint, NodeInfo, PodSetRequest};

const GPU: &str = "nvidia.com/gpu";
const BLOCK: &str = "cloud.google.com/gce-topology-block";
const HOST: &str = "kubernetes.io/hostname";
/// ClusterQueues (three cohorts of ten).
pub const QUEUES: usize = 30;

fn res(pairs: &[(&str, u64)]) -> Resources {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Amount::from_units(*v)))
        .collect()
}

/// `count` hosts with 8 GPUs each, in blocks of 500 (or fewer hosts, one block).
pub fn nodes(count: u32) -> Vec<NodeInfo> {
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

fn queue(cohort: usize) -> ClusterQueueSpec {
    queue_in(&format!("cohort-{cohort}"), 2000)
}

/// A ClusterQueue in `cohort` with `gpus` of nominal quota.
fn queue_in(cohort: &str, gpus: u64) -> ClusterQueueSpec {
    ClusterQueueSpec {
        cohort: Some(cohort.to_owned()),
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

/// Job `i`: a mix of 1-GPU, 8-GPU, 4 × 8-GPU and 16 × 8-GPU (one block) jobs, three
/// priorities, spread over the queues.
pub fn job(i: usize) -> Job {
    job_of(i, QUEUES)
}

/// Job `i` of the mix, spread over `queues` queues.
fn job_of(i: usize, queues: usize) -> Job {
    let (pods, gpus, constraint) = match i % 10 {
        0..=3 => (1, 1, Constraint::None),
        4..=6 => (1, 8, Constraint::None),
        7..=8 => (4, 8, Constraint::Required(BLOCK.into())),
        _ => (16, 8, Constraint::Required(BLOCK.into())),
    };
    Job {
        id: format!("ns/job-{i:06}"),
        uid: format!("uid-{i:06}"),
        local_queue: format!("ns/q{:02}", i % queues),
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

/// How the 100 ClusterQueues of [`scheduler_100_queues`] share quota.
#[derive(Clone, Copy, Debug)]
pub enum Sharing {
    /// All in one flat cohort.
    Flat,
    /// A three-level tree: an organisation of 5 departments of 4 teams of 5 queues.
    Tree,
}

/// A scheduler over `hosts` hosts with `jobs` jobs submitted, none admitted yet, in 100
/// ClusterQueues that share the fleet's GPUs equally, as `sharing` says.
pub fn scheduler_100_queues(jobs: usize, hosts: u32, sharing: Sharing) -> Scheduler {
    const COUNT: usize = 100;
    let gpus = u64::from(hosts) * 8 / 100;
    let team = |q: usize| format!("team-{}", q / 5);
    let queues = (0..COUNT).map(|q| {
        let cohort = match sharing {
            Sharing::Flat => "org".to_owned(),
            Sharing::Tree => team(q),
        };
        (format!("q{q:02}"), queue_in(&cohort, gpus))
    });
    let tree = match sharing {
        Sharing::Flat => CohortTree::default(),
        Sharing::Tree => {
            let under = |parent: String| CohortSpec {
                parent: Some(parent),
                ..CohortSpec::default()
            };
            let departments = (0..5).map(|d| (format!("dept-{d}"), under("org".to_owned())));
            let teams = (0..20).map(|t| (format!("team-{t}"), under(format!("dept-{}", t / 4))));
            CohortTree::new(
                std::iter::once(("org".to_owned(), CohortSpec::default()))
                    .chain(departments)
                    .chain(teams),
            )
        }
    };
    let mut s = Scheduler::new(
        fleet(hosts),
        queues,
        (0..COUNT).map(|q| (format!("ns/q{q:02}"), format!("q{q:02}"))),
    )
    .with_cohorts(tree);
    for i in 0..jobs {
        s.submit(job_of(i, COUNT));
    }
    s
}

/// The fleet of `hosts` hosts as one flavor.
fn fleet(hosts: u32) -> Cluster {
    let flavor = ResourceFlavorSpec {
        node_labels: BTreeMap::from([("pool".to_owned(), "h100".to_owned())]),
        topology_levels: vec![BLOCK.to_owned(), HOST.to_owned()],
        ..ResourceFlavorSpec::default()
    };
    Cluster::new([("h100".to_owned(), flavor)], &nodes(hosts))
}

/// A scheduler over `hosts` hosts with `jobs` jobs submitted, none admitted yet.
pub fn scheduler(jobs: usize, hosts: u32) -> Scheduler {
    let mut s = Scheduler::new(
        fleet(hosts),
        (0..QUEUES).map(|q| (format!("q{q:02}"), queue(q % 3))),
        (0..QUEUES).map(|q| (format!("ns/q{q:02}"), format!("q{q:02}"))),
    );
    for i in 0..jobs {
        s.submit(job(i));
    }
    s
}
