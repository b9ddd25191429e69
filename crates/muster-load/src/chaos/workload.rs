//! The chaos run's workload, all drawn from one seed: blocks of 8-GPU nodes, three
//! ClusterQueues that lend and borrow in a two-level cohort tree (with preemption; two of them
//! in a department whose borrowing limit caps what they take together), one ClusterQueue that
//! buys its capacity through ProvisioningRequests, and jobs of 1 to 16 pods in one block at
//! three priorities, some built to fail. About a third of the jobs are labelled `batch/v1`
//! Jobs (queued through the GpuJob Muster makes beside each, run by the Job controller), a
//! fifth labelled JobSets (their child Jobs made by the test kit's JobSet controller, some
//! with a one-pod initializer that finishes first), the rest GpuJobs.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::Client;
use kube::api::Api;
use muster_api::jobset::JobSet;
use muster_api::wire::{QUEUE_NAME_LABEL, TOPOLOGY_REQUIRED_ANNOTATION};
use muster_api::workload::{entry_name, jobset_entry_name};
use muster_api::{ClusterQueue, Cohort, GpuJob, LocalQueue, ObjectRef, ResourceFlavor};
use muster_sim::trace::Rng;
use serde_json::{Value, json};

use muster_testkit::checker::Limits;
use muster_testkit::kubelet::{EXIT_CODE_ANNOTATION, RUN_ANNOTATION};
use muster_testkit::nodes::NodeSpec;

/// The node label the flavors select on.
pub const GPU_LABEL: &str = "chaos.muster.dev/gpu";
/// The node label naming a node's block (the topology level gangs must fit in).
pub const BLOCK_LABEL: &str = "chaos.muster.dev/block";
/// The flavor of the cohort's nodes.
pub const FLAVOR: &str = "h100";
/// The flavor of bought nodes.
pub const BURST_FLAVOR: &str = "h100-burst";
/// The ClusterQueue (and namespace, and LocalQueue) that buys capacity.
pub const BURST_QUEUE: &str = "burst";
/// The root cohort of the lending queues.
pub const COHORT: &str = "research";
/// The department under [`COHORT`] holding two of the lending queues.
pub const DEPARTMENT: &str = "research-vision";
/// GPUs per node.
pub const NODE_GPUS: u32 = 8;
/// Nodes per block.
pub const BLOCK_NODES: u32 = 8;
/// The field manager of the run's own writes.
const MANAGER: &str = "muster-chaos";
/// The share of jobs submitted as labelled `batch/v1` Jobs.
const BATCH_SHARE: f64 = 0.35;
/// Mixed into the seed for the draw of which jobs are batch Jobs, so that every other draw
/// of a seed (sizes, priorities, runtimes, failures) is what it was before batch Jobs joined.
const BATCH_DRAW: u64 = 0xBA7C_4B0B_5EED_0001;
/// The share of the jobs not drawn as batch Jobs that are submitted as labelled JobSets.
const JOBSET_SHARE: f64 = 0.3;
/// Mixed into the seed for the draw of which jobs are JobSets and which of those have an
/// initializer, apart from every other draw (see [`BATCH_DRAW`]).
const JOBSET_DRAW: u64 = 0x0B5E_7D4A_3B5E_ED02;
/// How long a JobSet's initializer pod runs: it is done well before the workers, so that an
/// eviction after it finds a replicated Job whose child Jobs all completed.
const INIT_RUN: Duration = Duration::from_millis(500);
/// The priorities jobs are drawn at; a batch Job's or JobSet's is its template's
/// PriorityClass, `chaos-<priority>`.
const PRIORITIES: [i32; 3] = [0, 100, 1000];

/// What a job is submitted as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobKind {
    /// A GpuJob.
    GpuJob,
    /// A `batch/v1` Job labelled with its queue, created suspended; Muster queues it through
    /// its entry, the GpuJob `job-<name>`.
    BatchJob,
    /// A JobSet labelled with its queue, created suspended; Muster queues it through its
    /// entry, the GpuJob `jobset-<name>`. Its workers are child Jobs of one pod per GPU gang
    /// member; `true`: a replicated Job `init` of one 1-GPU pod comes before them.
    JobSet(bool),
}

/// One job to submit.
#[derive(Clone, Debug, PartialEq)]
pub struct JobDef {
    /// Namespace (also its LocalQueue's and ClusterQueue's name).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// When to submit it, from the start of the run.
    pub at: Duration,
    /// Pods in the gang.
    pub pods: u32,
    /// GPUs per pod.
    pub gpus: u32,
    /// Priority: 0, 100 or 1000.
    pub priority: i32,
    /// How long each pod runs.
    pub run: Duration,
    /// Every pod exits 1: the job must end Failed.
    pub fails: bool,
    /// What it is submitted as.
    pub kind: JobKind,
}

impl JobDef {
    /// `namespace/name` of the GpuJob the checker judges: the job itself, or a batch Job's
    /// or JobSet's queue entry.
    pub fn key(&self) -> String {
        let name = match self.kind {
            JobKind::GpuJob => self.name.clone(),
            JobKind::BatchJob => entry_name(&self.name),
            JobKind::JobSet(_) => jobset_entry_name(&self.name),
        };
        ObjectRef::new(&self.namespace, &name).into_string()
    }

    /// The pod annotations the fake kubelet runs a pod by: how long, and how it exits.
    fn pod_annotations(&self) -> Value {
        let mut annotations = json!({RUN_ANNOTATION: self.run.as_millis().to_string()});
        if self.fails {
            annotations[EXIT_CODE_ANNOTATION] = json!("1");
        }
        annotations
    }

    /// How many pod failures the job takes before it fails: one for a job built to fail (its
    /// second failure ends it), else enough that the run's node deaths never end it.
    fn backoff_limit(&self) -> i32 {
        if self.fails { 1 } else { 20 }
    }

    /// The GpuJob (a [`JobKind::GpuJob`]).
    pub fn object(&self) -> anyhow::Result<GpuJob> {
        let annotations = self.pod_annotations();
        serde_json::from_value(json!({
            "apiVersion": "muster.dev/v1alpha1", "kind": "GpuJob",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {"queueName": self.namespace, "priority": self.priority,
                "backoffLimit": self.backoff_limit(),
                "podSets": [{"name": "workers", "count": self.pods,
                    "topology": {"required": BLOCK_LABEL},
                    "template": {"metadata": {"annotations": annotations},
                        "spec": {"restartPolicy": "Never", "containers": [{
                            "name": "main", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"limits": {"nvidia.com/gpu": self.gpus.to_string()}}}]}}}]}}))
        .with_context(|| format!("building job {}", self.key()))
    }

    /// The labelled Job (a [`JobKind::BatchJob`]): created suspended, as a team creates one
    /// for Muster; one pod per completion, all at once (Indexed when more than one, so that
    /// pod `i` goes to the admission's `i`-th node), in one block, at the priority of its
    /// template's PriorityClass.
    pub fn batch_job(&self) -> anyhow::Result<Job> {
        let mut annotations = self.pod_annotations();
        annotations[TOPOLOGY_REQUIRED_ANNOTATION] = json!(BLOCK_LABEL);
        let mode = if self.pods > 1 {
            "Indexed"
        } else {
            "NonIndexed"
        };
        serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": self.name, "namespace": self.namespace,
                         "labels": {QUEUE_NAME_LABEL: self.namespace}},
            "spec": {"suspend": true, "parallelism": self.pods, "completions": self.pods,
                "completionMode": mode, "backoffLimit": self.backoff_limit(),
                "template": {"metadata": {"annotations": annotations},
                    "spec": {"restartPolicy": "Never",
                        "priorityClassName": priority_class(self.priority),
                        "containers": [{
                            "name": "main", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"limits": {"nvidia.com/gpu": self.gpus.to_string()}}}]}}}}))
        .with_context(|| format!("building Job {}/{}", self.namespace, self.name))
    }
}

impl JobDef {
    /// The labelled JobSet (a [`JobKind::JobSet`]): created suspended; its workers two child
    /// Jobs of half the gang each when it is of an even number of pods (one otherwise), each
    /// Indexed, in one block; with an initializer, a replicated Job `init` of one short 1-GPU
    /// pod in a block of its own. No restarts: a child Job that fails fails the JobSet.
    pub fn jobset(&self) -> anyhow::Result<JobSet> {
        let mut annotations = self.pod_annotations();
        annotations[TOPOLOGY_REQUIRED_ANNOTATION] = json!(BLOCK_LABEL);
        let replicas = if self.pods.is_multiple_of(2) { 2 } else { 1 };
        let per_job = self.pods / replicas;
        let template = |annotations: &Value, pods: u32, gpus: u32| {
            json!({"spec": {"parallelism": pods, "completions": pods,
                "completionMode": "Indexed", "backoffLimit": self.backoff_limit(),
                "template": {"metadata": {"annotations": annotations},
                    "spec": {"restartPolicy": "Never",
                        "priorityClassName": priority_class(self.priority),
                        "containers": [{
                            "name": "main", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]}}}})
        };
        let mut replicated = Vec::new();
        if self.kind == JobKind::JobSet(true) {
            let init = json!({RUN_ANNOTATION: INIT_RUN.as_millis().to_string(),
                              TOPOLOGY_REQUIRED_ANNOTATION: BLOCK_LABEL});
            replicated
                .push(json!({"name": "init", "replicas": 1, "template": template(&init, 1, 1)}));
        }
        replicated.push(json!({"name": "workers", "replicas": replicas,
            "template": template(&annotations, per_job, self.gpus)}));
        serde_json::from_value(json!({
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": self.name, "namespace": self.namespace,
                         "labels": {QUEUE_NAME_LABEL: self.namespace}},
            "spec": {"suspend": true, "replicatedJobs": replicated}}))
        .with_context(|| format!("building JobSet {}/{}", self.namespace, self.name))
    }
}

/// The PriorityClass of a batch Job of `priority`.
fn priority_class(priority: i32) -> String {
    format!("chaos-{priority}")
}

/// A ClusterQueue of the run.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueDef {
    /// Its name, its namespace's and its LocalQueue's.
    pub name: String,
    /// The cohort, if it lends and borrows.
    pub cohort: Option<String>,
    /// Nominal GPUs.
    pub nominal: u32,
    /// GPUs it may borrow.
    pub borrowing: u32,
    /// Whether it buys capacity through ProvisioningRequests.
    pub provisioning: bool,
}

/// A Cohort object of the run.
#[derive(Clone, Debug, PartialEq)]
pub struct CohortDef {
    /// Its name.
    pub name: String,
    /// Its parent cohort.
    pub parent: Option<String>,
    /// GPUs it may take from its parent beyond what it lends (its borrowing limit).
    pub borrowing: Option<u32>,
}

/// Everything a run creates.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    /// Blocks of [`BLOCK_NODES`] nodes in the cohort's flavor.
    pub blocks: u32,
    /// The Cohorts, parents first.
    pub cohorts: Vec<CohortDef>,
    /// The ClusterQueues.
    pub queues: Vec<QueueDef>,
    /// The jobs, by submission time.
    pub jobs: Vec<JobDef>,
}

impl Workload {
    /// `jobs` jobs arriving over `span` (Poisson), on `blocks` blocks, from `seed`.
    pub fn generate(seed: u64, jobs: usize, span: Duration, blocks: u32) -> Workload {
        let mut rng = Rng::new(seed);
        let mut kinds = Rng::new(seed ^ BATCH_DRAW);
        let mut sets = Rng::new(seed ^ JOBSET_DRAW);
        let share = blocks * BLOCK_NODES * NODE_GPUS / 3;
        // team-0 and team-1 in the department, team-2 beside it at the root: the department
        // takes at most half a share of team-2's quota, though each team alone may borrow that.
        let cohorts = vec![
            CohortDef {
                name: COHORT.to_owned(),
                parent: None,
                borrowing: None,
            },
            CohortDef {
                name: DEPARTMENT.to_owned(),
                parent: Some(COHORT.to_owned()),
                borrowing: Some(share / 2),
            },
        ];
        let mut queues: Vec<QueueDef> = (0..3)
            .map(|i| QueueDef {
                name: format!("team-{i}"),
                cohort: Some(if i < 2 { DEPARTMENT } else { COHORT }.to_owned()),
                nominal: share,
                borrowing: share / 2,
                provisioning: false,
            })
            .collect();
        queues.push(QueueDef {
            name: BURST_QUEUE.to_owned(),
            cohort: None,
            nominal: 2 * BLOCK_NODES * NODE_GPUS,
            borrowing: 0,
            provisioning: true,
        });
        #[expect(clippy::cast_precision_loss, reason = "a mean gap in seconds")]
        let gap = span.as_secs_f64() / jobs.max(1) as f64;
        let mut at = 0.0;
        let jobs = (0..jobs)
            .map(|index| {
                at += rng.exponential(gap);
                let namespace = if rng.unit() <= 0.15 {
                    BURST_QUEUE.to_owned()
                } else {
                    format!("team-{}", rng.next_u64() % 3)
                };
                let (pods, gpus) = gang(&mut rng);
                let priority = match rng.unit() {
                    p if p <= 0.6 => PRIORITIES[0],
                    p if p <= 0.9 => PRIORITIES[1],
                    _ => PRIORITIES[2],
                };
                let run = Duration::from_millis(2_000 + rng.next_u64() % 13_000);
                let fails = rng.unit() <= 0.03;
                let kind = if kinds.unit() <= BATCH_SHARE {
                    JobKind::BatchJob
                } else if sets.unit() <= JOBSET_SHARE {
                    JobKind::JobSet(sets.unit() <= 0.5)
                } else {
                    JobKind::GpuJob
                };
                JobDef {
                    namespace,
                    name: format!("j-{index:05}"),
                    at: Duration::from_secs_f64(at),
                    pods,
                    gpus,
                    priority,
                    run,
                    fails,
                    kind,
                }
            })
            .collect();
        Workload {
            blocks,
            cohorts,
            queues,
            jobs,
        }
    }

    /// The jobs built to fail.
    pub fn meant_to_fail(&self) -> BTreeSet<String> {
        self.jobs
            .iter()
            .filter(|j| j.fails)
            .map(JobDef::key)
            .collect()
    }

    /// The quota limits the checker holds the cluster to: per cohort, the nominal quotas
    /// under it plus its borrowing limit (at a root, the nominal quotas alone; a cohort below
    /// one without a borrowing limit is held only by its ancestors).
    pub fn limits(&self) -> Limits {
        let mut limits = Limits::default();
        for cohort in &self.cohorts {
            if let Some(parent) = &cohort.parent {
                limits.parents.insert(cohort.name.clone(), parent.clone());
            }
        }
        for queue in &self.queues {
            limits.queues.insert(
                queue.name.clone(),
                (
                    queue.cohort.clone(),
                    i64::from(queue.nominal + queue.borrowing),
                ),
            );
        }
        for cohort in &self.cohorts {
            let within: i64 = self
                .queues
                .iter()
                .filter(|q| {
                    q.cohort
                        .as_deref()
                        .is_some_and(|c| limits.cohort_path(c).contains(&cohort.name))
                })
                .map(|q| i64::from(q.nominal))
                .sum();
            let cap = match (&cohort.parent, cohort.borrowing) {
                (None, _) => Some(within),
                (Some(_), Some(borrowing)) => Some(within + i64::from(borrowing)),
                (Some(_), None) => None,
            };
            if let Some(cap) = cap {
                limits.cohorts.insert(cohort.name.clone(), cap);
            }
        }
        limits
    }

    /// The cohort's nodes: `b{block}-n{node}`.
    pub fn nodes(&self) -> Vec<NodeSpec> {
        (0..self.blocks)
            .flat_map(|b| (0..BLOCK_NODES).map(move |n| (b, n)))
            .map(|(b, n)| gpu_node(&format!("b{b}-n{n}"), FLAVOR, &format!("b{b}")))
            .collect()
    }

    /// The PriorityClasses of batch Jobs, the namespaces, flavors, Cohorts, ClusterQueues
    /// and LocalQueues.
    pub async fn apply_queues(&self, client: &Client) -> anyhow::Result<()> {
        for priority in PRIORITIES {
            let name = priority_class(priority);
            // Never preempting: which pods go is Muster's to decide, not kube-scheduler's.
            apply(
                &Api::<PriorityClass>::all(client.clone()),
                &name,
                json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                       "metadata": {"name": name}, "value": priority,
                       "preemptionPolicy": "Never"}),
            )
            .await?;
        }
        for cohort in &self.cohorts {
            apply(
                &Api::<Cohort>::all(client.clone()),
                &cohort.name,
                cohort_object(cohort),
            )
            .await?;
        }
        for (flavor, gpu) in [(FLAVOR, FLAVOR), (BURST_FLAVOR, BURST_FLAVOR)] {
            apply(
                &Api::<ResourceFlavor>::all(client.clone()),
                flavor,
                json!({"apiVersion": "muster.dev/v1alpha1", "kind": "ResourceFlavor",
                    "metadata": {"name": flavor},
                    "spec": {"nodeLabels": {GPU_LABEL: gpu},
                             "topologyLevels": [BLOCK_LABEL, "kubernetes.io/hostname"]}}),
            )
            .await?;
        }
        for queue in &self.queues {
            apply(
                &Api::<Namespace>::all(client.clone()),
                &queue.name,
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": queue.name}}),
            )
            .await?;
            apply(
                &Api::<ClusterQueue>::all(client.clone()),
                &queue.name,
                cluster_queue(queue),
            )
            .await?;
            apply(
                &Api::<LocalQueue>::namespaced(client.clone(), &queue.name),
                &queue.name,
                json!({"apiVersion": "muster.dev/v1alpha1", "kind": "LocalQueue",
                       "metadata": {"name": queue.name, "namespace": queue.name},
                       "spec": {"clusterQueue": queue.name}}),
            )
            .await?;
        }
        Ok(())
    }
}

/// A node of `flavor` with [`NODE_GPUS`] GPUs in `block`.
pub fn gpu_node(name: &str, flavor: &str, block: &str) -> NodeSpec {
    NodeSpec::new(name)
        .label(GPU_LABEL, flavor)
        .label(BLOCK_LABEL, block)
        .capacity("nvidia.com/gpu", NODE_GPUS.to_string())
        .capacity("cpu", "64")
        .capacity("memory", "512Gi")
        .capacity("pods", "110")
}

/// Pods and GPUs per pod: at most one block (64 GPUs).
fn gang(rng: &mut Rng) -> (u32, u32) {
    let pods = match rng.next_u64() % 10 {
        0..=3 => 1,
        4 | 5 => 2,
        6 | 7 => 4,
        8 => 8,
        _ => 16,
    };
    let choices: &[u32] = if pods == 16 {
        &[1, 2, 4]
    } else {
        &[1, 2, 4, 8]
    };
    let gpus = choices[usize::try_from(rng.next_u64() % choices.len() as u64).unwrap_or(0)];
    (pods, gpus)
}

fn cohort_object(cohort: &CohortDef) -> Value {
    let mut spec = json!({});
    if let Some(parent) = &cohort.parent {
        spec["parent"] = json!(parent);
    }
    if let Some(borrowing) = cohort.borrowing {
        spec["resourceGroups"] = json!([{"coveredResources": ["nvidia.com/gpu"],
            "flavors": [{"name": FLAVOR, "resources": [{"name": "nvidia.com/gpu",
                "nominalQuota": "0", "borrowingLimit": borrowing.to_string()}]}]}]);
    }
    json!({"apiVersion": "muster.dev/v1alpha1", "kind": "Cohort",
        "metadata": {"name": cohort.name}, "spec": spec})
}

fn cluster_queue(queue: &QueueDef) -> Value {
    let flavor = if queue.provisioning {
        BURST_FLAVOR
    } else {
        FLAVOR
    };
    let mut resource = json!({"name": "nvidia.com/gpu", "nominalQuota": queue.nominal.to_string()});
    if queue.cohort.is_some() {
        resource["borrowingLimit"] = json!(queue.borrowing.to_string());
    }
    let mut spec = json!({
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": queue.name}},
        "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
        "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"],
            "flavors": [{"name": flavor, "resources": [resource]}]}]});
    if let Some(cohort) = &queue.cohort {
        spec["cohort"] = json!(cohort);
    }
    if queue.provisioning {
        spec["provisioning"] = json!({"className": "queued-provisioning.gke.io",
            "retry": {"limit": 5, "baseSeconds": 1, "maxSeconds": 4}});
    }
    json!({"apiVersion": "muster.dev/v1alpha1", "kind": "ClusterQueue",
        "metadata": {"name": queue.name}, "spec": spec})
}

/// Applies `value` as `name` with the run's field manager.
async fn apply<K>(api: &Api<K>, name: &str, value: Value) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    crate::apply(api, MANAGER, name, value).await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{BLOCK_LABEL, JobDef, JobKind, Workload};
    use muster_api::workload::{entry_name, jobset_entry_name};
    use muster_api::{ObjectRef, Validate as _};

    /// The GpuJob Muster queues `job` as: the job itself, or read from the batch Job or
    /// JobSet as the controller reads it, named as its queue entry.
    fn entry_of(job: &JobDef) -> anyhow::Result<muster_api::GpuJob> {
        match job.kind {
            JobKind::GpuJob => job.object(),
            // Read as Muster reads a labelled Job: its queue entry, which must be valid,
            // in one block, of the job's size, priority and name.
            JobKind::BatchJob => job.batch_job().and_then(|j| {
                assert_eq!(j.spec.as_ref().and_then(|s| s.suspend), Some(true));
                muster_api::workload::job_as_gpujob(&j)
                    .map_err(|e| anyhow::anyhow!("{e:?}"))
                    .map(|mut entry| {
                        entry.metadata.name = Some(entry_name(&job.name));
                        entry
                    })
            }),
            // A JobSet too, its workers the last pod set.
            JobKind::JobSet(_) => job.jobset().and_then(|j| {
                assert_eq!(j.spec.suspend, Some(true));
                muster_api::workload::jobset_as_gpujob(&j)
                    .map_err(|e| anyhow::anyhow!("{e:?}"))
                    .map(|mut entry| {
                        entry.metadata.name = Some(jobset_entry_name(&job.name));
                        entry
                    })
            }),
        }
    }

    #[test]
    fn a_seed_gives_one_workload_of_valid_jobs_that_fit_a_block() {
        let a = Workload::generate(7, 300, Duration::from_secs(60), 6);
        assert_eq!(a, Workload::generate(7, 300, Duration::from_secs(60), 6));
        assert_ne!(a, Workload::generate(8, 300, Duration::from_secs(60), 6));
        assert!(a.jobs.iter().any(|j| j.fails));
        assert!(a.jobs.iter().any(|j| j.namespace == "burst"));
        let batch = a
            .jobs
            .iter()
            .filter(|j| j.kind == JobKind::BatchJob)
            .count();
        assert!((70..=140).contains(&batch), "{batch} of 300 batch Jobs");
        let jobsets: Vec<bool> = a
            .jobs
            .iter()
            .filter_map(|j| match j.kind {
                JobKind::JobSet(init) => Some(init),
                _ => None,
            })
            .collect();
        assert!(
            (30..=90).contains(&jobsets.len()),
            "{} of 300 JobSets",
            jobsets.len()
        );
        assert!(jobsets.iter().any(|init| *init) && jobsets.iter().any(|init| !init));
        for job in &a.jobs {
            assert!(job.pods * job.gpus <= 64, "{job:?}");
            let object = entry_of(job);
            assert!(object.is_ok(), "{job:?}: {object:?}");
            if let Ok(object) = object {
                assert_eq!(object.validate(), [], "{job:?}");
                assert_eq!(
                    ObjectRef::new(
                        &job.namespace,
                        object.metadata.name.as_deref().unwrap_or_default()
                    )
                    .into_string(),
                    job.key()
                );
                let sets = &object.spec.pod_sets;
                let counts: Vec<i32> = sets.iter().map(|s| s.count).collect();
                let pods = i32::try_from(job.pods).unwrap_or(0);
                let expected = if job.kind == JobKind::JobSet(true) {
                    vec![1, pods]
                } else {
                    vec![pods]
                };
                assert_eq!(counts, expected, "{job:?}");
                for set in sets {
                    assert_eq!(
                        set.topology.as_ref().and_then(|t| t.required.as_deref()),
                        Some(BLOCK_LABEL),
                        "{job:?}"
                    );
                }
                if job.kind == JobKind::GpuJob {
                    assert_eq!(object.spec.priority, Some(job.priority));
                } else {
                    assert_eq!(
                        object.spec.priority_class_name.as_deref(),
                        Some(format!("chaos-{}", job.priority).as_str())
                    );
                }
            }
        }
        // The batch draw leaves every other draw of the seed as it was.
        let mut plain = a.clone();
        for job in &mut plain.jobs {
            job.kind = JobKind::GpuJob;
        }
        let again = Workload::generate(7, 300, Duration::from_secs(60), 6);
        assert_eq!(
            again
                .jobs
                .iter()
                .map(|j| (&j.name, j.at, j.pods, j.gpus, j.priority, j.run, j.fails))
                .collect::<Vec<_>>(),
            plain
                .jobs
                .iter()
                .map(|j| (&j.name, j.at, j.pods, j.gpus, j.priority, j.run, j.fails))
                .collect::<Vec<_>>()
        );
        let limits = a.limits();
        assert_eq!(limits.cohorts.get("research"), Some(&384));
        assert_eq!(limits.cohorts.get("research-vision"), Some(&(256 + 64)));
        assert_eq!(
            limits.cohort_path("research-vision"),
            ["research-vision", "research"]
        );
        for cohort in &a.cohorts {
            let object: Result<muster_api::Cohort, _> =
                serde_json::from_value(super::cohort_object(cohort));
            assert!(object.is_ok_and(|o| o.validate().is_empty()), "{cohort:?}");
        }
    }
}
