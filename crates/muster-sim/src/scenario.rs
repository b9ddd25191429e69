//! Scenario files: the cluster to simulate, the queue objects an admin would apply, the
//! workload, and the placement policies to compare.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use muster_api::document::MusterObject;
use muster_api::{Amount, ClusterQueueSpec, CohortSpec, ObjectRef, ResourceFlavorSpec};
use muster_topology::NodeInfo;
use serde::Deserialize;
use serde_json::Value;

use self::fleet::nodes;
use crate::trace::{self, TraceJob};

mod fleet;
mod synthetic;
mod workload;

/// A scenario as written in YAML.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scenario {
    /// A name for reports.
    pub name: String,
    /// The nodes.
    pub cluster: ClusterSpec,
    /// ResourceFlavor, ClusterQueue and LocalQueue documents: a path (relative to the scenario
    /// file) or the objects inline.
    pub queues: Queues,
    /// The namespace of every LocalQueue jobs are submitted to. Default `default`.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// The jobs.
    pub workload: Workload,
    /// Placement policies to compare (names as `muster fit --policy` takes). Default best-fit.
    #[serde(default)]
    pub policies: Vec<String>,
    /// Node failures and repairs, and how much work a restarted job keeps.
    #[serde(default)]
    pub failures: Option<FailureSpec>,
    /// How much work a job keeps when it is evicted or restarted: its progress up to the last
    /// checkpoint, taken every this many seconds. Absent: restarts begin from scratch.
    #[serde(default)]
    pub checkpoint_seconds: Option<i64>,
    /// One ClusterQueue and LocalQueue per virtual cluster of a CSV, besides `queues`.
    #[serde(default)]
    pub virtual_clusters: Option<VirtualClustersSpec>,
}

/// One ClusterQueue and one LocalQueue (both named after it) per virtual cluster of a
/// `vc,node num` CSV — the Philly trace's `philly_vc_nodes_heliosartifact.csv` — with
/// `nodes × gpusPerNode` GPUs of nominal quota in `flavor`: hard quotas, unless `cohort`
/// puts them together to lend and borrow, or `cohorts` puts each in a cohort of its own
/// choosing (the departments of a tree that `Cohort` objects in `queues` define).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VirtualClustersSpec {
    /// The CSV, relative to the scenario file.
    pub path: String,
    /// The ResourceFlavor (defined in `queues`) the quota is in.
    pub flavor: String,
    /// GPUs per node.
    pub gpus_per_node: u32,
    /// A cohort for every queue. Default: none (hard quotas).
    #[serde(default)]
    pub cohort: Option<String>,
    /// Virtual cluster → its cohort, for those not in `cohort`. Every name must be a
    /// virtual cluster of the CSV.
    #[serde(default)]
    pub cohorts: BTreeMap<String, String>,
}

/// Node failures: each node fails after an exponentially distributed time with mean
/// `mtbfHours`, is repaired `repairHours` later, and fails again later on.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FailureSpec {
    /// Mean time between failures of one node, hours.
    pub mtbf_hours: f64,
    /// Time to repair, hours.
    pub repair_hours: f64,
    /// The random seed (overridden by `--seed`). Default 1.
    #[serde(default)]
    pub seed: Option<u64>,
}

fn default_namespace() -> String {
    "default".into()
}

/// The simulated nodes.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterSpec {
    /// Node pools.
    pub pools: Vec<PoolSpec>,
}

/// A pool of identical GPU hosts in blocks.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolSpec {
    /// Node names start with it.
    pub name: String,
    /// Labels every node carries (a flavor's `nodeLabels` select them).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Number of blocks.
    pub blocks: u32,
    /// Hosts per block.
    pub hosts_per_block: u32,
    /// Accelerators per host.
    pub gpus_per_host: u32,
    /// The accelerator resource. Default `nvidia.com/gpu`.
    #[serde(default = "default_resource")]
    pub resource: String,
    /// The label naming each node's block. Default `cloud.google.com/gce-topology-block`.
    #[serde(default = "default_block_label")]
    pub block_label: String,
    /// Sub-blocks per block (hosts split evenly among them, in order). Default: none.
    #[serde(default)]
    pub sub_blocks_per_block: Option<u32>,
    /// The label naming each node's sub-block. Default
    /// `cloud.google.com/gce-topology-subblock`.
    #[serde(default = "default_sub_block_label")]
    pub sub_block_label: String,
    /// Other allocatable resources per host (e.g. `cpu: "208"`).
    #[serde(default)]
    pub allocatable: BTreeMap<String, String>,
    /// The pool joins the cluster at this time, seconds (a purchase). Default: from the start.
    #[serde(default)]
    pub added_at: Option<i64>,
    /// The pool leaves the cluster at this time, seconds; its jobs are evicted.
    #[serde(default)]
    pub removed_at: Option<i64>,
    /// A TPU pool: each block is one slice (a GKE node pool) of this accelerator and shape;
    /// the resource becomes `google.com/tpu` and `gpusPerHost` counts chips per host.
    #[serde(default)]
    pub tpu: Option<TpuPoolSpec>,
    /// Capacity the cluster autoscaler can buy rather than nodes that exist: the pool's hosts
    /// are what can be obtained. A ProvisioningRequest buys the hosts one job needs, all in
    /// one block (a compact placement); when no block has that many free, the request waits
    /// at the autoscaler, and fails after `stockoutSeconds`.
    #[serde(default)]
    pub autoscaler: Option<AutoscalerSpec>,
}

/// How the cluster autoscaler answers ProvisioningRequests for one pool.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AutoscalerSpec {
    /// Time from request to capacity, seconds: uniform between `min` and `max`.
    pub latency_seconds: LatencySpec,
    /// How long provisioned capacity waits for the job's pods before the booking lapses.
    /// Default 600.
    #[serde(default = "default_booking")]
    pub booking_seconds: i64,
    /// The capacity is taken back this long after it was provisioned (the class's maximum
    /// run duration); the gang is evicted and queues again. Default: never.
    #[serde(default)]
    pub max_run_seconds: Option<i64>,
    /// How long a request waits in a stockout (no free block) before the autoscaler reports
    /// Failed. Default 1800.
    #[serde(default = "default_stockout")]
    pub stockout_seconds: i64,
    /// The random seed of the latencies (overridden by `--seed`). Default 1.
    #[serde(default)]
    pub seed: Option<u64>,
}

/// A latency range, seconds.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencySpec {
    /// Shortest.
    pub min: i64,
    /// Longest.
    pub max: i64,
}

fn default_booking() -> i64 {
    600
}

fn default_stockout() -> i64 {
    1800
}

/// The slices of a TPU pool.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TpuPoolSpec {
    /// `cloud.google.com/gke-tpu-accelerator`, e.g. `tpu-v5p-slice`.
    pub accelerator: String,
    /// `cloud.google.com/gke-tpu-topology`, e.g. `2x2x4`.
    pub topology: String,
}

fn default_resource() -> String {
    "nvidia.com/gpu".into()
}

fn default_sub_block_label() -> String {
    "cloud.google.com/gce-topology-subblock".into()
}

fn default_block_label() -> String {
    "cloud.google.com/gce-topology-block".into()
}

/// Where the queue objects are.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Queues {
    /// A YAML file of objects, relative to the scenario.
    File(String),
    /// The objects themselves.
    Inline(Vec<Value>),
}

/// The jobs to replay: exactly one of a trace file, a synthetic generator or manifest files.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Workload {
    /// A trace file.
    #[serde(default)]
    pub trace: Option<TraceSpec>,
    /// Generated jobs.
    #[serde(default)]
    pub synthetic: Option<SyntheticSpec>,
    /// Manifest files: GpuJobs, and labelled Jobs and JobSets read as their queue entries.
    #[serde(default)]
    pub manifests: Vec<trace::ManifestSpec>,
}

/// A trace file and its format.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TraceSpec {
    /// `muster`, `philly` or `openb`.
    pub format: String,
    /// Relative to the scenario file.
    pub path: String,
    /// For `philly`: the topology of multi-pod jobs. Default `required:` the pools' block label.
    #[serde(default)]
    pub gang_topology: Option<String>,
    /// Use only the first this many jobs (in file order).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Submit every job to this LocalQueue instead of the trace's (for `philly`: one queue
    /// for all virtual clusters).
    #[serde(default)]
    pub queue: Option<String>,
    /// Announce each job's true duration as its expected runtime (perfect estimates, for
    /// backfill).
    #[serde(default)]
    pub announce_runtime: bool,
    /// Submit the jobs this many times faster (submission times divided by it, durations
    /// kept): a trace whose fleet idles becomes one that queues. Default 1.
    #[serde(default)]
    pub compress_arrivals: Option<u32>,
}

/// A generated workload: Poisson arrivals, a weighted mix of sizes, exponential durations.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SyntheticSpec {
    /// How many jobs.
    pub jobs: u32,
    /// Mean arrivals per hour. Default Philly's, 31.5.
    #[serde(default = "philly_arrivals_per_hour")]
    pub arrivals_per_hour: f64,
    /// Jobs per arrival: more than one makes bursts (the rate counts bursts). Default 1.
    #[serde(default)]
    pub burst: Option<u32>,
    /// Mean duration, seconds. Default Philly's, 13,136.
    #[serde(default = "philly_mean_duration")]
    pub mean_duration_seconds: f64,
    /// LocalQueues, chosen uniformly.
    pub queues: Vec<String>,
    /// (GPUs, weight) pairs. Default Philly's job-size mix.
    #[serde(default = "philly_sizes")]
    pub sizes: Vec<SizeWeight>,
    /// Priorities, chosen uniformly. Default `[0]`.
    #[serde(default)]
    pub priorities: Vec<i32>,
    /// Announce each job's true duration as its expected runtime (perfect estimates).
    #[serde(default)]
    pub announce_runtime: bool,
    /// Topology of multi-pod jobs, as in the Muster CSV. Default `required:` the block label.
    #[serde(default)]
    pub gang_topology: Option<String>,
    /// The random seed (overridden by `--seed`). Default 1.
    #[serde(default)]
    pub seed: Option<u64>,
    /// The most GPUs one pod takes; larger jobs are split into equal pods. Default 8.
    #[serde(default)]
    pub max_gpus_per_pod: Option<u64>,
}

/// Philly's arrival rate: 82,247 jobs between 2017-09-04 10:30 and 2017-12-22 08:02.
fn philly_arrivals_per_hour() -> f64 {
    31.5
}

/// Philly's mean job duration, seconds (the per-job projection's mean).
fn philly_mean_duration() -> f64 {
    13_136.0
}

/// Philly's job sizes, per 100,000 jobs, as measured from the per-job projection (the awk
/// command is in `simulations/philly-synthetic.yaml`).
fn philly_sizes() -> Vec<SizeWeight> {
    [
        (1, 93_166),
        (2, 2_210),
        (4, 2_273),
        (8, 1_997),
        (12, 8),
        (16, 241),
        (24, 8),
        (32, 81),
        (64, 7),
        (128, 3),
    ]
    .into_iter()
    .map(|(gpus, weight)| SizeWeight {
        gpus,
        weight,
        duration_seconds: None,
        priority: None,
        gpu_share: None,
        pods: None,
    })
    .collect()
}

/// One entry of a size mix.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SizeWeight {
    /// GPUs of the job.
    pub gpus: u64,
    /// Relative weight.
    pub weight: u32,
    /// A fixed duration for jobs of this size, seconds (instead of the exponential mean).
    #[serde(default)]
    pub duration_seconds: Option<i64>,
    /// A fixed priority for jobs of this size (instead of one of `priorities`).
    #[serde(default)]
    pub priority: Option<i32>,
    /// Part of one GPU per pod (`250m`, below one GPU): jobs of this size are `pods` pods each
    /// asking for that share (as a GpuJob's `gpuShare`), and `gpus` is not used.
    #[serde(default)]
    pub gpu_share: Option<String>,
    /// Pods of a job asking for shares (default 1).
    #[serde(default)]
    pub pods: Option<u32>,
}

impl SizeWeight {
    /// The share in milli-GPU, when `gpuShare` is set; an error naming the fix when it is not
    /// a part of one GPU.
    fn share_milli(&self) -> Result<Option<u64>, String> {
        let Some(text) = &self.gpu_share else {
            return Ok(None);
        };
        match Amount::parse(text).map(Amount::milli) {
            Ok(m) if (1..1000).contains(&m) => Ok(Some(m)),
            _ => Err(format!(
                "gpuShare {text:?} is not a part of one GPU; write e.g. 250m or 0.5"
            )),
        }
    }
}

/// What a scenario cannot be run with.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The scenario or queue file is not valid.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A trace row is malformed.
    #[error(transparent)]
    Trace(#[from] trace::TraceError),
}

/// A scenario ready to run: nodes, queue objects, jobs.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The scenario.
    pub scenario: Scenario,
    /// Every node.
    pub nodes: Vec<NodeInfo>,
    /// ResourceFlavors by name.
    pub flavors: Vec<(String, ResourceFlavorSpec)>,
    /// ClusterQueues by name.
    pub cluster_queues: Vec<(String, ClusterQueueSpec)>,
    /// Cohorts by name: the tree the ClusterQueues lend and borrow through (cohorts the
    /// queues name without an object are roots without quota of their own).
    pub cohorts: Vec<(String, CohortSpec)>,
    /// LocalQueues: (`namespace/name`, ClusterQueue).
    pub local_queues: Vec<(String, String)>,
    /// The jobs, by submission time then id.
    pub jobs: Vec<TraceJob>,
    /// `--seed`, when given.
    pub seed: Option<u64>,
}

fn read(path: &Path) -> Result<String, ScenarioError> {
    std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
        path: path.display().to_string(),
        source,
    })
}

impl Loaded {
    /// Reads `path` and everything it names. `seed` overrides a synthetic workload's seed.
    pub fn from_file(path: &Path, seed: Option<u64>) -> Result<Loaded, ScenarioError> {
        let text = read(path)?;
        let invalid = |message: String| ScenarioError::Invalid {
            path: path.display().to_string(),
            message,
        };
        let scenario: Scenario =
            serde_yaml_ng::from_str(&text).map_err(|e| invalid(e.to_string()))?;
        let dir: PathBuf = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let (objects, objects_path) = match &scenario.queues {
            Queues::Inline(values) => (values.clone(), path.to_path_buf()),
            Queues::File(file) => {
                let file = dir.join(file);
                let text = read(&file)?;
                let mut values = Vec::new();
                for document in serde_yaml_ng::Deserializer::from_str(&text) {
                    let value =
                        Value::deserialize(document).map_err(|e| ScenarioError::Invalid {
                            path: file.display().to_string(),
                            message: e.to_string(),
                        })?;
                    if !value.is_null() {
                        values.push(value);
                    }
                }
                (values, file)
            }
        };
        let mut loaded = Loaded {
            seed,
            nodes: nodes(&scenario.cluster).map_err(&invalid)?,
            flavors: Vec::new(),
            cluster_queues: Vec::new(),
            cohorts: Vec::new(),
            local_queues: Vec::new(),
            jobs: Vec::new(),
            scenario,
        };
        loaded
            .read_objects(objects)
            .map_err(|message| ScenarioError::Invalid {
                path: objects_path.display().to_string(),
                message,
            })?;
        if let Some(vcs) = loaded.scenario.virtual_clusters.clone() {
            loaded.add_virtual_clusters(&dir, &vcs)?;
        }
        if loaded.cluster_queues.is_empty() {
            return Err(ScenarioError::Invalid {
                path: objects_path.display().to_string(),
                message: "no ClusterQueue: the queue objects (or virtualClusters) must define at least one".into(),
            });
        }
        if let Some(message) = loaded.cohort_problem() {
            return Err(ScenarioError::Invalid {
                path: objects_path.display().to_string(),
                message,
            });
        }
        loaded.jobs = loaded.workload(path, seed)?;
        loaded
            .jobs
            .sort_by(|a, b| (a.submit, &a.id).cmp(&(b.submit, &b.id)));
        Ok(loaded)
    }

    /// The first thing wrong with the scenario's cohort tree, naming the Cohort: a parent
    /// that does not exist, a cycle, an invalid spec, or a limit that can never bind. The
    /// controller reports these on the Cohort and goes on; an experiment on a tree other
    /// than the one written would mislead, so a scenario stops.
    fn cohort_problem(&self) -> Option<String> {
        let tree = muster_admission::CohortTree::new(self.cohorts.clone());
        // The tree's problems name their cohort already.
        if let Some((_, problem)) = tree.problems().next() {
            return Some(problem.to_owned());
        }
        // The reports key queues and cohorts by name alone.
        if let Some((name, _)) = self
            .cohorts
            .iter()
            .find(|(c, _)| self.cluster_queues.iter().any(|(q, _)| q == c))
        {
            return Some(format!(
                "Cohort {name} has the name of a ClusterQueue; the simulator's reports list both by name, so rename one"
            ));
        }
        let book = muster_admission::QuotaBook::with_cohorts(
            self.cluster_queues.iter().map(|(n, q)| (n.as_str(), q)),
            &tree,
        );
        self.cohorts.iter().find_map(|(name, _)| {
            book.limit_problem(name)
                .map(|problem| format!("Cohort {name}: {problem}"))
        })
    }

    /// A ClusterQueue and a LocalQueue per virtual cluster of `spec`'s CSV.
    fn add_virtual_clusters(
        &mut self,
        dir: &Path,
        spec: &VirtualClustersSpec,
    ) -> Result<(), ScenarioError> {
        let file = dir.join(&spec.path);
        let text = read(&file)?;
        let file = file.display().to_string();
        if !self.flavors.iter().any(|(name, _)| *name == spec.flavor) {
            return Err(ScenarioError::Invalid {
                path: file,
                message: format!(
                    "virtualClusters.flavor {} is not a ResourceFlavor of the queue objects",
                    spec.flavor
                ),
            });
        }
        let clusters = trace::read_virtual_clusters(&file, &text)?;
        if let Some(unknown) = spec
            .cohorts
            .keys()
            .find(|vc| !clusters.iter().any(|(name, _)| name == *vc))
        {
            return Err(ScenarioError::Invalid {
                path: file,
                message: format!(
                    "virtualClusters.cohorts names {unknown}, which is not a virtual cluster of this file; use one of its `vc` column's names"
                ),
            });
        }
        for (vc, nodes) in clusters {
            let gpus = u64::from(nodes) * u64::from(spec.gpus_per_node);
            let cohort = spec.cohorts.get(&vc).or(spec.cohort.as_ref());
            let value = serde_json::json!({
                "cohort": cohort,
                "namespaceSelector": {},
                "resourceGroups": [{
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [{
                        "name": spec.flavor,
                        "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus.to_string()}]
                    }]
                }]
            });
            let queue: ClusterQueueSpec =
                serde_json::from_value(value).map_err(|e| ScenarioError::Invalid {
                    path: file.clone(),
                    message: e.to_string(),
                })?;
            self.cluster_queues.push((vc.clone(), queue));
            self.local_queues.push((
                ObjectRef::new(&self.scenario.namespace, &vc).into_string(),
                vc,
            ));
        }
        Ok(())
    }

    fn read_objects(&mut self, objects: Vec<Value>) -> Result<(), String> {
        for (i, value) in objects.into_iter().enumerate() {
            let object = MusterObject::from_value(value).map_err(|errors| {
                let first = errors
                    .first()
                    .map(|e| format!("{}: {}", e.path, e.message))
                    .unwrap_or_default();
                format!("object {}: {first}", i + 1)
            })?;
            match object {
                MusterObject::ResourceFlavor(f) => {
                    self.flavors
                        .push((f.metadata.name.clone().unwrap_or_default(), f.spec));
                }
                MusterObject::ClusterQueue(q) => self
                    .cluster_queues
                    .push((q.metadata.name.clone().unwrap_or_default(), q.spec)),
                MusterObject::Cohort(c) => self
                    .cohorts
                    .push((c.metadata.name.clone().unwrap_or_default(), c.spec)),
                MusterObject::LocalQueue(q) => {
                    let namespace = q
                        .metadata
                        .namespace
                        .clone()
                        .unwrap_or_else(|| self.scenario.namespace.clone());
                    self.local_queues.push((
                        format!(
                            "{namespace}/{}",
                            q.metadata.name.clone().unwrap_or_default()
                        ),
                        q.spec.cluster_queue,
                    ));
                }
                MusterObject::GpuJob(_) => {
                    return Err(format!(
                        "object {}: GpuJobs do not belong in the queue objects; put jobs in the workload",
                        i + 1
                    ));
                }
            }
        }
        Ok(())
    }
}
