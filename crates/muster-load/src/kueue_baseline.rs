//! `muster-load kueue-baseline`: Kueue's scheduler-performance baseline through the whole
//! system — a real control plane, fake nodes and kubelet, and a release build of
//! `muster controller` as a separate process — measured from the API server's side.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt as _;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use muster_api::quantity::Amount;
use muster_api::wire::{JOB_LABEL, QUEUE_NAME_LABEL};
use muster_api::workload::entry_name;
use muster_api::{ClusterQueue, GpuJob, LocalQueue, ObjectRef, ResourceFlavor};
use serde::Serialize;
use serde_json::json;

use super::api_server_profile;
use super::baseline::{Baseline, JobSet};
use super::process_stats::{self, ProcessStats};
use super::recorder::{FinishSteps, Recorder};
use muster_testkit::kubelet::{FakeKubelet, KubeletOptions, RUN_ANNOTATION};
use muster_testkit::nodes::{NodeSpec, create_nodes};
use muster_testkit::{ClusterOptions, Component, TestCluster};

/// How long a profile of kube-apiserver (`--profile-api-server`) covers.
const PROFILE_LENGTH: Duration = Duration::from_secs(30);

/// The label carrying a job's class.
pub const CLASS_LABEL: &str = "load.muster.dev/class";
/// The label of the run's nodes, which the flavor selects.
const POOL_LABEL: &str = "load.muster.dev/pool";
/// The field manager of the run's own writes.
const MANAGER: &str = "muster-load";

/// How to run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The control-plane binaries.
    pub kube_bin: PathBuf,
    /// Where `summary.json`, `jobs.csv` and the logs go.
    pub out: PathBuf,
    /// The `muster` binary to run as the controller.
    pub muster: PathBuf,
    /// The workload.
    pub baseline: Baseline,
    /// Nodes, 64 CPUs each.
    pub nodes: u32,
    /// Give up after this long.
    pub timeout: Duration,
    /// What each job is submitted as.
    pub workload: Workload,
    /// kube-controller-manager's client rate limit (`--kube-api-qps`); `None` is Kubernetes'
    /// default of 20. Batch Jobs' pods are made and finished through it.
    pub controller_manager_qps: Option<u32>,
    /// How many Jobs kube-controller-manager's Job controller syncs at once
    /// (`--concurrent-job-syncs`); `None` is Kubernetes' default of 5.
    pub controller_manager_job_syncs: Option<u32>,
    /// kube-scheduler's client rate limit (`--kube-api-qps`); `None` is Kubernetes' default
    /// of 50. Every released pod is bound through it.
    pub scheduler_qps: Option<u32>,
    /// Take a 30-second CPU profile of kube-apiserver this long after the first job is
    /// created, into `apiserver.pprof` (read with `go tool pprof`).
    pub profile_api_server: Option<Duration>,
    /// Further arguments for `muster controller` (`--forecast-every 0`, say), after the ones
    /// the run needs.
    pub controller_args: Vec<String>,
}

/// What the run submits each of the baseline's jobs as.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Workload {
    /// A GpuJob.
    #[default]
    GpuJob,
    /// A `batch/v1` Job labelled with its queue and created suspended (as the admission
    /// policy makes it), its pod made by kube-controller-manager's Job controller; measured
    /// on its queue entry, from the Job's creation.
    Job,
}

impl Workload {
    /// Reads `gpujob` or `job`.
    pub fn parse(text: &str) -> anyhow::Result<Workload> {
        match text {
            "gpujob" => Ok(Workload::GpuJob),
            "job" => Ok(Workload::Job),
            other => anyhow::bail!("--workload {other:?}: expected gpujob or job"),
        }
    }

    /// The name `parse` reads.
    pub fn name(self) -> &'static str {
        match self {
            Workload::GpuJob => "gpujob",
            Workload::Job => "job",
        }
    }
}

/// What a run measured (`summary.json`).
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// What each job was submitted as.
    pub workload: Workload,
    /// kube-controller-manager's `--kube-api-qps` when set (Kubernetes' default, 20, when
    /// absent); only batch Jobs go through it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub controller_manager_qps: Option<u32>,
    /// kube-controller-manager's `--concurrent-job-syncs` when set (Kubernetes' default, 5,
    /// when absent); only batch Jobs go through it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub controller_manager_job_syncs: Option<u32>,
    /// kube-scheduler's `--kube-api-qps` when set (Kubernetes' default, 50, when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduler_qps: Option<u32>,
    /// The further arguments the controller was started with (see
    /// [`RunOptions::controller_args`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub controller_args: Vec<String>,
    /// CPU seconds of the control plane's programs over the run, by program (`etcd`,
    /// `kube-apiserver`, `kube-scheduler`, `kube-controller-manager`): what the API requests
    /// cost the machine.
    pub control_plane_cpu_seconds: BTreeMap<String, f64>,
    /// kube-apiserver's CPU milliseconds per request it served over the run (all clients).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_server_cpu_ms_per_request: Option<f64>,
    /// What the machine's CPUs did over the run, stolen time included (none where
    /// `/proc/stat` cannot be read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_cpu: Option<crate::host_cpu::HostCpu>,
    /// Pods per job (each job's CPUs split evenly among them).
    pub pods_per_job: u32,
    /// Jobs created.
    pub jobs: usize,
    /// Jobs that finished within the time-out.
    pub finished: usize,
    /// Of those, jobs that ended Failed (each built to succeed; why is in `jobs.csv`).
    pub failed: usize,
    /// From the first creation to the last finish, seconds.
    pub wall_seconds: f64,
    /// Mean seconds from creation to admission, per class.
    pub time_to_admission_seconds: BTreeMap<String, f64>,
    /// Mean seconds per class from admission to pods bound, to pods ended, to the job's
    /// finish: where the time a job holds its quota goes.
    pub steps_to_finish_seconds: BTreeMap<String, FinishSteps>,
    /// ∫ usage dt over the monitoring window ÷ (window × nominal quota), as Kueue records it.
    pub cluster_queue_usage: f64,
    /// Evictions seen, in all.
    pub evictions: u32,
    /// The controller's user + system CPU seconds over the run.
    pub controller_cpu_seconds: f64,
    /// The controller's peak resident memory, bytes.
    pub controller_peak_rss_bytes: u64,
    /// API requests the controller sent, by HTTP method (its `muster_api_requests_total`).
    pub api_requests: BTreeMap<String, u64>,
    /// The controller's API requests per job created.
    pub api_requests_per_job: f64,
    /// Every request the API server served from the first job's creation to the end, all
    /// clients (the controller, the load generator, kube-scheduler, the kubelet, ...): the
    /// figure Kueue's benchmark kit reports (`apiserver_request_total`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_server_requests: Option<u64>,
    /// [`Summary::api_server_requests`] per job created.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_server_requests_per_job: Option<f64>,
    /// [`Summary::api_server_requests`] by verb and resource (`PUT jobs/status`), all
    /// clients: with the controller's own ([`Summary::api_requests_by_resource`]) it tells
    /// whose the rest are (only the Job controller writes a Job's status or makes a batch
    /// Job's pod, only kube-scheduler binds).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub api_server_requests_by_resource: BTreeMap<String, u64>,
    /// The controller's actions carried out, by kind (its `muster_actions_total`).
    pub actions: BTreeMap<String, u64>,
    /// The controller's API requests by method and resource (`POST pods`), from its
    /// `muster_api_requests_by_resource_total`.
    pub api_requests_by_resource: BTreeMap<String, u64>,
    /// The controller's job status writes by the phase they write (its
    /// `muster_status_writes_total`).
    pub status_writes: BTreeMap<String, u64>,
    /// The controller's waiting jobs' status writes by what they changed (`first`, `reason`,
    /// `figures`; its `muster_waiting_status_writes_total`).
    pub waiting_status_writes: BTreeMap<String, u64>,
    /// Of those, the writes of a new kind of reason by the kind before and after
    /// (`QuotaShort NoTopologyFit`; `none` before: the status showed no reason), from its
    /// `muster_waiting_reason_changes_total`.
    pub waiting_reason_changes: BTreeMap<String, u64>,
    /// Jobs' ends overdue (in flight past their patience, their quota held again) by what
    /// kept them, `permit` or `write` (its `muster_ends_overdue_total`).
    pub ends_overdue: BTreeMap<String, u64>,
    /// Pod status writes of the fake kubelet.
    pub kubelet_writes: u64,
    /// The controller's scheduling passes (its `muster_cycle_duration_seconds_count`).
    pub passes: u64,
    /// Start-time forecasts the controller made over the run (its
    /// `muster_forecast_seconds_count`): they share its CPU with the passes.
    pub forecasts: u64,
    /// Seconds those forecasts took, in all (`muster_forecast_seconds_sum`; each runs on one
    /// core, so about as many CPU-seconds).
    pub forecast_seconds: f64,
    /// Passes that built the admission scheduler afresh, by cause (its
    /// `muster_scheduler_rebuilds_total`).
    pub scheduler_rebuilds: BTreeMap<String, u64>,
    /// CPU-seconds of work the jobs ask for, divided by the nominal quota: the shortest
    /// possible wall time if every queue ran at its nominal quota.
    pub work_seconds_at_nominal: f64,
}

impl RunOptions {
    /// Notes in `summary` how the run was set up: the control plane's rates that applied to
    /// its workload, and the controller's further arguments.
    fn note_in(&self, summary: &mut Summary) {
        let batch = self.workload == Workload::Job;
        summary.controller_manager_qps = self.controller_manager_qps.filter(|_| batch);
        summary.controller_manager_job_syncs = self.controller_manager_job_syncs.filter(|_| batch);
        summary.scheduler_qps = self.scheduler_qps;
        summary.controller_args.clone_from(&self.controller_args);
    }
}

/// Runs the baseline and writes `summary.json` and `jobs.csv` into `options.out`.
pub async fn run(options: &RunOptions) -> anyhow::Result<Summary> {
    std::fs::create_dir_all(&options.out)
        .with_context(|| format!("creating {}", options.out.display()))?;
    // Batch Jobs need the Job controller (kube-controller-manager) to make their pods.
    let cluster_options = ClusterOptions {
        controller_manager: options.workload == Workload::Job,
        controller_manager_qps: options.controller_manager_qps,
        controller_manager_job_syncs: options.controller_manager_job_syncs,
        scheduler_qps: options.scheduler_qps,
        api_server_profiling: options.profile_api_server.is_some(),
        ..ClusterOptions::default()
    };
    let cluster = TestCluster::start_in(&options.kube_bin, cluster_options).await?;
    let client = cluster.client();
    setup(&client, &options.baseline, options.nodes, options.workload).await?;
    let kubelet = FakeKubelet::start(
        client.clone(),
        KubeletOptions {
            max_start_delay: Duration::from_millis(50),
            max_in_flight: 64,
            ..KubeletOptions::default()
        },
    );
    let mut controller = Controller::start(
        &options.muster,
        &options.controller_args,
        &cluster,
        &options.out,
    )?;
    controller.wait_ready(Duration::from_secs(120)).await?;

    let served_before = api_server_requests(&client).await;
    let control_plane_before = control_plane_cpu(&cluster);
    let host_before = crate::host_cpu::read();
    let start = Instant::now();
    let profile = options.profile_api_server.map(|after| {
        let (client, out) = (client.clone(), options.out.join("apiserver.pprof"));
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            if let Err(e) = api_server_profile::fetch(&client, PROFILE_LENGTH, &out).await {
                eprintln!("no kube-apiserver profile: {e:#}");
            }
        })
    });
    let recorder = Arc::new(Mutex::new(Recorder::default()));
    let watches = [
        tokio::spawn(watch_jobs(client.clone(), Arc::clone(&recorder), start)),
        tokio::spawn(watch_queues(client.clone(), Arc::clone(&recorder), start)),
        tokio::spawn(watch_pods(client.clone(), Arc::clone(&recorder), start)),
    ];
    let generated = generate(
        &client,
        &options.baseline,
        options.workload,
        &recorder,
        start,
    )
    .await;
    let deadline = start + options.timeout;
    loop {
        let left = recorder
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .unfinished();
        if left == 0 || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // One more moment for the queues' last status (usage back to zero).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cost = controller.stats()?;
    let metrics = controller.metrics().await.unwrap_or_default();
    let served_after = api_server_requests(&client).await;
    let control_plane_after = control_plane_cpu(&cluster);
    let host_after = crate::host_cpu::read();
    if let Some(profile) = profile {
        profile.abort();
    }
    for watch in watches {
        watch.abort();
    }
    let kubelet_writes = kubelet.status_writes();
    controller.stop();
    generated?;

    let recorder = recorder
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let mut summary = summarize(&recorder, &options.baseline, cost, &metrics, kubelet_writes);
    summary.workload = options.workload;
    summary.host_cpu = crate::host_cpu::between(host_before, host_after);
    add_server_costs(
        &mut summary,
        served_before.zip(served_after),
        &control_plane_before,
        &control_plane_after,
    );
    options.note_in(&mut summary);
    write_reports(&options.out, &summary, &recorder)?;
    Ok(summary)
}

/// What the API server served over the run (`served`: its requests by verb and resource
/// before and after) and what the control plane's programs spent (CPU seconds before and
/// after, by program).
fn add_server_costs(
    summary: &mut Summary,
    served: Option<(BTreeMap<String, u64>, BTreeMap<String, u64>)>,
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
) {
    summary.control_plane_cpu_seconds = after
        .iter()
        .filter_map(|(name, after)| Some((name.clone(), after - before.get(name)?)))
        .collect();
    let Some((first, last)) = served else {
        return;
    };
    summary.api_server_requests_by_resource = last
        .iter()
        .map(|(key, n)| {
            let before = first.get(key).copied().unwrap_or(0);
            (key.clone(), n.saturating_sub(before))
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    let served: u64 = summary.api_server_requests_by_resource.values().sum();
    summary.api_server_requests = Some(served);
    #[expect(clippy::cast_precision_loss, reason = "ratios for a report")]
    {
        summary.api_server_requests_per_job = Some(served as f64 / summary.jobs.max(1) as f64);
        summary.api_server_cpu_ms_per_request = summary
            .control_plane_cpu_seconds
            .get(Component::ApiServer.name())
            .filter(|_| served > 0)
            .map(|cpu| cpu * 1000.0 / served as f64);
    }
}

/// CPU seconds so far of each control-plane program running, by its name.
fn control_plane_cpu(cluster: &TestCluster) -> BTreeMap<String, f64> {
    [
        Component::Etcd,
        Component::ApiServer,
        Component::Scheduler,
        Component::ControllerManager,
    ]
    .into_iter()
    .filter_map(|component| {
        let stats = process_stats::read(cluster.pid(component)?).ok()?;
        Some((component.name().to_owned(), stats.cpu_seconds))
    })
    .collect()
}

fn summarize(
    recorder: &Recorder,
    baseline: &Baseline,
    cost: ProcessStats,
    metrics: &str,
    kubelet_writes: u64,
) -> Summary {
    let api_requests = counter(metrics, "muster_api_requests_total", "method");
    let actions = counter(metrics, "muster_actions_total", "kind");
    let jobs = recorder.jobs.len();
    let total: u64 = api_requests.values().sum();
    #[expect(clippy::cast_precision_loss, reason = "ratios for a report")]
    let per_job = total as f64 / jobs.max(1) as f64;
    Summary {
        workload: Workload::default(),
        controller_manager_qps: None,
        controller_manager_job_syncs: None,
        scheduler_qps: None,
        controller_args: Vec::new(),
        control_plane_cpu_seconds: BTreeMap::new(),
        api_server_cpu_ms_per_request: None,
        host_cpu: None,
        pods_per_job: baseline.pods_per_job,
        jobs,
        finished: recorder
            .jobs
            .values()
            .filter(|j| j.finished.is_some())
            .count(),
        failed: recorder
            .jobs
            .values()
            .filter(|j| j.failed.is_some())
            .count(),
        wall_seconds: recorder.wall().map_or(0.0, |d| d.as_secs_f64()),
        time_to_admission_seconds: recorder.mean_time_to_admission(),
        steps_to_finish_seconds: recorder.mean_steps_to_finish(),
        cluster_queue_usage: recorder.usage_share().unwrap_or(0.0),
        evictions: recorder.jobs.values().map(|j| j.evictions).sum(),
        controller_cpu_seconds: cost.cpu_seconds,
        controller_peak_rss_bytes: cost.peak_rss_bytes,
        api_requests,
        api_requests_per_job: per_job,
        api_server_requests: None,
        api_server_requests_per_job: None,
        api_server_requests_by_resource: BTreeMap::new(),
        actions,
        api_requests_by_resource: series(metrics, "muster_api_requests_by_resource_total"),
        status_writes: counter(metrics, "muster_status_writes_total", "phase"),
        waiting_status_writes: counter(metrics, "muster_waiting_status_writes_total", "change"),
        waiting_reason_changes: series(metrics, "muster_waiting_reason_changes_total"),
        ends_overdue: counter(metrics, "muster_ends_overdue_total", "stage"),
        kubelet_writes,
        passes: gauge(metrics, "muster_cycle_duration_seconds_count"),
        forecasts: gauge(metrics, "muster_forecast_seconds_count"),
        forecast_seconds: value(metrics, "muster_forecast_seconds_sum"),
        scheduler_rebuilds: counter(metrics, "muster_scheduler_rebuilds_total", "cause"),
        work_seconds_at_nominal: baseline.work_cpu_seconds()
            / f64::from(baseline.nominal_cpus * baseline.cohorts * baseline.queues_per_cohort),
    }
}

/// `text` as one CSV field: quoted, its quotes doubled, when it holds a comma, a quote or a
/// line break (RFC 4180).
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}

fn write_reports(out: &Path, summary: &Summary, recorder: &Recorder) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(summary).context("encoding the summary")?;
    std::fs::write(out.join("summary.json"), json + "\n").context("writing summary.json")?;
    let ms = |d: Option<Duration>| d.map_or(String::new(), |d| d.as_millis().to_string());
    let mut csv = String::from(
        "job,class,created_ms,admitted_ms,pods_bound_ms,pods_ended_ms,finished_ms,evictions,failed\n",
    );
    for (key, job) in &recorder.jobs {
        let _ = writeln!(
            csv,
            "{key},{},{},{},{},{},{},{},{}",
            job.class,
            ms(job.created),
            ms(job.admitted),
            ms(job.pods_bound),
            ms(job.pods_ended),
            ms(job.finished),
            job.evictions,
            csv_field(job.failed.as_deref().unwrap_or_default()),
        );
    }
    std::fs::write(out.join("jobs.csv"), csv).context("writing jobs.csv")
}

/// Nodes, the flavor, and per ClusterQueue its namespace and LocalQueue; for batch Jobs, a
/// PriorityClass per job class (a Job's priority is its pod template's class).
async fn setup(
    client: &Client,
    baseline: &Baseline,
    nodes: u32,
    workload: Workload,
) -> anyhow::Result<()> {
    if workload == Workload::Job {
        for set in &baseline.sets {
            let name = priority_class(set);
            apply(
                &Api::<PriorityClass>::all(client.clone()),
                &name,
                json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                       "metadata": {"name": name}, "value": set.priority,
                       "preemptionPolicy": "Never"}),
            )
            .await?;
        }
    }
    let specs: Vec<NodeSpec> = (0..nodes)
        .map(|i| {
            NodeSpec::new(format!("load-{i}"))
                .label(POOL_LABEL, "cpu")
                .capacity("cpu", "64")
                .capacity("memory", "256Gi")
                .capacity("pods", "1000")
        })
        .collect();
    create_nodes(client, &specs).await?;
    crate::admission_policy::install_finalizer_policy(client, Duration::from_secs(60)).await?;
    apply(
        &Api::<ResourceFlavor>::all(client.clone()),
        "rf",
        json!({"apiVersion": "muster.dev/v1alpha1", "kind": "ResourceFlavor",
               "metadata": {"name": "rf"},
               "spec": {"nodeLabels": {POOL_LABEL: "cpu"},
                        "topologyLevels": ["kubernetes.io/hostname"]}}),
    )
    .await?;
    for (name, cohort) in baseline.queues() {
        apply(
            &Api::<Namespace>::all(client.clone()),
            &name,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
        )
        .await?;
        apply(
            &Api::<ClusterQueue>::all(client.clone()),
            &name,
            json!({"apiVersion": "muster.dev/v1alpha1", "kind": "ClusterQueue",
                "metadata": {"name": name},
                "spec": {"cohort": cohort,
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": name}},
                    "preemption": {"reclaimWithinCohort": "Any",
                                   "withinClusterQueue": "LowerPriority"},
                    "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{
                        "name": "rf", "resources": [{"name": "cpu",
                            "nominalQuota": baseline.nominal_cpus.to_string(),
                            "borrowingLimit": baseline.borrowing_limit_cpus.to_string()}]}]}]}}),
        )
        .await?;
        apply(
            &Api::<LocalQueue>::namespaced(client.clone(), &name),
            &name,
            json!({"apiVersion": "muster.dev/v1alpha1", "kind": "LocalQueue",
                   "metadata": {"name": name, "namespace": name},
                   "spec": {"clusterQueue": name}}),
        )
        .await?;
    }
    Ok(())
}

/// Applies `value` as the run's field manager.
async fn apply<K>(api: &Api<K>, name: &str, value: serde_json::Value) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    super::apply(api, MANAGER, name, value).await
}

/// Creates every job, each queue's sets concurrently, each set one job per interval (the
/// pause comes before each creation, as in Kueue's generator).
async fn generate(
    client: &Client,
    baseline: &Baseline,
    workload: Workload,
    recorder: &Arc<Mutex<Recorder>>,
    start: Instant,
) -> anyhow::Result<()> {
    let mut tasks = Vec::new();
    let pods_per_job = baseline.pods_per_job;
    for (queue, _) in baseline.queues() {
        for (index, set) in baseline.sets.iter().enumerate() {
            let (client, recorder) = (client.clone(), Arc::clone(recorder));
            let (queue, set) = (queue.clone(), set.clone());
            tasks.push(tokio::spawn(async move {
                let at = Generated {
                    queue: &queue,
                    index,
                    set: &set,
                    pods: pods_per_job,
                    recorder: &recorder,
                    start,
                };
                generate_set(&client, &at, workload).await
            }));
        }
    }
    for task in tasks {
        task.await.context("a generator task stopped")??;
    }
    Ok(())
}

/// One set of one queue's jobs, as a generator task makes them.
struct Generated<'a> {
    queue: &'a str,
    index: usize,
    set: &'a JobSet,
    /// Pods per job, the job's CPUs split evenly among them.
    pods: u32,
    recorder: &'a Mutex<Recorder>,
    start: Instant,
}

/// The PriorityClass of a batch Job of `set`.
fn priority_class(set: &JobSet) -> String {
    format!("load-{}", set.class)
}

/// Creates one set of one queue's jobs, one per interval, as `workload` says: GpuJobs, or
/// labelled batch Jobs recorded under their queue entries' names.
async fn generate_set(
    client: &Client,
    at: &Generated<'_>,
    workload: Workload,
) -> anyhow::Result<()> {
    let Generated {
        queue,
        index,
        set,
        pods,
        recorder,
        start,
    } = *at;
    anyhow::ensure!(
        pods == 1 || workload == Workload::GpuJob,
        "jobs of more than one pod are made as GpuJobs only"
    );
    let cpu = format!("{}m", set.cpus * 1000 / pods.max(1));
    let template = json!({
        "metadata": {"annotations": {RUN_ANNOTATION: set.run_time.as_millis().to_string()}},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "main", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": cpu}}}]}});
    for i in 0..set.count {
        tokio::time::sleep(set.interval).await;
        let name = format!("{}-{index}-{i}-0", set.class);
        let created = start.elapsed();
        let recorded = match workload {
            Workload::GpuJob => {
                let job: GpuJob = serde_json::from_value(json!({
                    "apiVersion": "muster.dev/v1alpha1", "kind": "GpuJob",
                    "metadata": {"name": name, "namespace": queue,
                                 "labels": {CLASS_LABEL: set.class}},
                    "spec": {"queueName": queue, "priority": set.priority, "podSets": [{
                        "name": "main", "count": pods, "template": template}]}}))
                .context("building a job")?;
                Api::<GpuJob>::namespaced(client.clone(), queue)
                    .create(&PostParams::default(), &job)
                    .await
                    .with_context(|| format!("creating {queue}/{name}"))?;
                name
            }
            Workload::Job => {
                let mut template = template.clone();
                template["spec"]["priorityClassName"] = json!(priority_class(set));
                let job: Job = serde_json::from_value(json!({
                    "apiVersion": "batch/v1", "kind": "Job",
                    "metadata": {"name": name, "namespace": queue,
                                 "labels": {CLASS_LABEL: set.class, QUEUE_NAME_LABEL: queue}},
                    "spec": {"suspend": true, "parallelism": 1, "completions": 1,
                             "backoffLimit": 0, "template": template}}))
                .context("building a Job")?;
                Api::<Job>::namespaced(client.clone(), queue)
                    .create(&PostParams::default(), &job)
                    .await
                    .with_context(|| format!("creating Job {queue}/{name}"))?;
                entry_name(&name)
            }
        };
        recorder
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .created(
                ObjectRef::new(queue, &recorded).as_str(),
                set.class,
                created,
            );
    }
    Ok(())
}

async fn watch_jobs(client: Client, recorder: Arc<Mutex<Recorder>>, start: Instant) {
    let api: Api<GpuJob> = Api::all(client);
    // Backed off: a watch that fails (the API server restarting or gone) must not spin.
    let mut events =
        std::pin::pin!(watcher::watcher(api, watcher::Config::default()).default_backoff());
    while let Some(event) = events.next().await {
        let Ok(watcher::Event::Apply(job) | watcher::Event::InitApply(job)) = event else {
            continue;
        };
        let key = format!(
            "{}/{}",
            job.metadata.namespace.as_deref().unwrap_or_default(),
            job.metadata.name.as_deref().unwrap_or_default()
        );
        let status = job.status.unwrap_or_default();
        if status.phase == Some(muster_api::GpuJobPhase::Failed) {
            let finished = status
                .conditions
                .iter()
                .find(|c| c.type_ == muster_api::gpujob::conditions::FINISHED);
            let why = finished.map_or_else(
                || "no Finished condition".to_owned(),
                |c| format!("{}: {}", c.reason, c.message),
            );
            recorder
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .failed(&key, &why);
        }
        let admitted = status.admission.is_some();
        let finished = status.phase.is_some_and(muster_api::GpuJobPhase::has_ended);
        recorder
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .job_seen(&key, admitted, finished, start.elapsed());
    }
}

/// Pods by the job they belong to (their [`JOB_LABEL`], the GpuJob's name for either
/// workload): when each was bound and when it ended.
async fn watch_pods(client: Client, recorder: Arc<Mutex<Recorder>>, start: Instant) {
    let api: Api<Pod> = Api::all(client);
    let config = watcher::Config::default().labels(JOB_LABEL);
    let mut events = std::pin::pin!(watcher::watcher(api, config).default_backoff());
    while let Some(event) = events.next().await {
        let Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) = event else {
            continue;
        };
        let Some(job) = pod.metadata.labels.as_ref().and_then(|l| l.get(JOB_LABEL)) else {
            continue;
        };
        let key = format!(
            "{}/{job}",
            pod.metadata.namespace.as_deref().unwrap_or_default()
        );
        let bound = pod.spec.as_ref().is_some_and(|s| s.node_name.is_some());
        let ended = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Succeeded" || p == "Failed");
        recorder
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pod_seen(
                &key,
                pod.metadata.name.as_deref().unwrap_or_default(),
                bound,
                ended,
                start.elapsed(),
            );
    }
}

async fn watch_queues(client: Client, recorder: Arc<Mutex<Recorder>>, start: Instant) {
    let api: Api<ClusterQueue> = Api::all(client);
    // Backed off: a watch that fails (the API server restarting or gone) must not spin.
    let mut events =
        std::pin::pin!(watcher::watcher(api, watcher::Config::default()).default_backoff());
    while let Some(event) = events.next().await {
        let Ok(watcher::Event::Apply(queue) | watcher::Event::InitApply(queue)) = event else {
            continue;
        };
        let milli = |q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity| {
            Amount::parse(&q.0).map_or(0, |a| i64::try_from(a.milli()).unwrap_or(i64::MAX))
        };
        let nominal = queue
            .spec
            .resource_groups
            .iter()
            .flat_map(|g| &g.flavors)
            .flat_map(|f| &f.resources)
            .find(|r| r.name == "cpu")
            .map_or(0, |r| milli(&r.nominal_quota));
        let usage = queue
            .status
            .as_ref()
            .into_iter()
            .flat_map(|s| &s.flavors_usage)
            .flat_map(|f| &f.resources)
            .filter(|r| r.name == "cpu")
            .map(|r| milli(&r.total))
            .sum();
        let name = queue.metadata.name.unwrap_or_default();
        recorder
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .queue_seen(&name, nominal, usage, start.elapsed());
    }
}

/// The `muster controller` process under test.
struct Controller {
    child: std::process::Child,
    metrics: std::net::SocketAddr,
}

impl Controller {
    fn start(
        muster: &Path,
        args: &[String],
        cluster: &TestCluster,
        out: &Path,
    ) -> anyhow::Result<Controller> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .context("picking a port for the controller's metrics")?
            .port();
        let metrics = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let log =
            std::fs::File::create(out.join("controller.log")).context("creating controller.log")?;
        let child = std::process::Command::new(muster)
            .arg("controller")
            .arg("--kubeconfig")
            .arg(cluster.kubeconfig_path())
            .arg("--metrics-addr")
            .arg(metrics.to_string())
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", muster.display()))?;
        Ok(Controller { child, metrics })
    }

    async fn wait_ready(&mut self, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                anyhow::bail!("the controller exited ({status}); see controller.log");
            }
            if get(self.metrics, "/readyz")
                .await
                .is_ok_and(|r| r.starts_with("HTTP/1.1 200") || r.starts_with("HTTP/1.0 200"))
            {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the controller was not ready in time"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn stats(&self) -> anyhow::Result<ProcessStats> {
        process_stats::read(self.child.id())
    }

    /// Its `/metrics` text.
    async fn metrics(&self) -> anyhow::Result<String> {
        get(self.metrics, "/metrics").await
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Every request the API server has served so far, by verb and resource (its
/// `apiserver_request_total`, summed over the other labels: `POST pods`, `PUT jobs/status`),
/// or `None` when its metrics cannot be read.
async fn api_server_requests(client: &Client) -> Option<BTreeMap<String, u64>> {
    let request = http::Request::get("/metrics").body(Vec::new()).ok()?;
    let text = client.request_text(request).await.ok()?;
    Some(requests_by_resource(&text))
}

/// `apiserver_request_total` in `text`, summed by verb and resource (and subresource).
fn requests_by_resource(text: &str) -> BTreeMap<String, u64> {
    let mut served: BTreeMap<String, f64> = BTreeMap::new();
    for line in text.lines() {
        let Some((labels, tail)) = line
            .strip_prefix("apiserver_request_total{")
            .and_then(|r| r.split_once('}'))
        else {
            continue;
        };
        let Ok(count) = tail.trim().parse::<f64>() else {
            continue;
        };
        // `name="value",…`: these labels' values hold no quotes or commas.
        let pairs: BTreeMap<&str, &str> = labels
            .split(',')
            .filter_map(|pair| {
                let (name, value) = pair.split_once('=')?;
                Some((name.trim(), value.trim_matches('"')))
            })
            .collect();
        let label = |name: &str| pairs.get(name).copied();
        let (verb, resource) = (
            label("verb").unwrap_or("?"),
            label("resource").unwrap_or(""),
        );
        let key = match label("subresource").filter(|s| !s.is_empty()) {
            Some(sub) => format!("{verb} {resource}/{sub}"),
            None => format!("{verb} {resource}"),
        };
        *served.entry(key).or_default() += count;
    }
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "counts, exported as floats"
    )]
    served
        .into_iter()
        .map(|(key, n)| (key, n.round() as u64))
        .collect()
}

/// Every series of counter `name` in `text`, keyed by its label values in order, joined by a
/// space (`POST pods`).
fn series(text: &str, name: &str) -> BTreeMap<String, u64> {
    let prefix = format!("{name}{{");
    let mut values = BTreeMap::new();
    for line in text.lines() {
        let Some((labels, tail)) = line.strip_prefix(&prefix).and_then(|r| r.split_once('}'))
        else {
            continue;
        };
        let Some(count) = tail.trim().parse::<u64>().ok() else {
            continue;
        };
        let key: Vec<&str> = labels.split('"').skip(1).step_by(2).collect();
        *values.entry(key.join(" ")).or_default() += count;
    }
    values
}

/// The value of the unlabelled series `name` in `text` (0 when absent).
fn gauge(text: &str, name: &str) -> u64 {
    text.lines()
        .filter_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .find_map(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0)
}

/// The value of the unlabelled series `name` in `text` as a real number (0 when absent).
fn value(text: &str, name: &str) -> f64 {
    text.lines()
        .filter_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .find_map(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0)
}

fn counter(text: &str, name: &str, label: &str) -> BTreeMap<String, u64> {
    let prefix = format!("{name}{{{label}=\"");
    let mut values = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(&prefix) else {
            continue;
        };
        let Some((value_of_label, tail)) = rest.split_once('"') else {
            continue;
        };
        let Some(count) = tail.rsplit(' ').next().and_then(|v| v.parse::<u64>().ok()) else {
            continue;
        };
        *values.entry(value_of_label.to_owned()).or_default() += count;
    }
    values
}

/// A plain HTTP/1.0 GET of `path` on `addr`: the response, head and body.
async fn get(addr: std::net::SocketAddr, path: &str) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    Ok(response)
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_api_server_s_requests_are_summed_by_verb_and_resource() {
        let text = r#"# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="batch",resource="jobs",scope="resource",subresource="status",verb="PUT",version="v1"} 7
apiserver_request_total{code="409",component="apiserver",dry_run="",group="batch",resource="jobs",scope="resource",subresource="status",verb="PUT",version="v1"} 2
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="",verb="POST",version="v1"} 3
apiserver_request_total_other{verb="GET"} 100
"#;
        let served = super::requests_by_resource(text);
        assert_eq!(
            served,
            std::collections::BTreeMap::from([
                ("POST pods".to_owned(), 3),
                ("PUT jobs/status".to_owned(), 9),
            ])
        );
    }

    use super::{counter, csv_field, gauge, series};

    #[test]
    fn a_csv_field_with_a_comma_or_a_quote_is_quoted() {
        assert_eq!(csv_field("BackoffLimitExceeded"), "BackoffLimitExceeded");
        assert_eq!(
            csv_field("Failed: pod a, then b"),
            "\"Failed: pod a, then b\""
        );
        assert_eq!(csv_field("said \"no\""), "\"said \"\"no\"\"\"");
    }

    #[test]
    fn counters_are_summed_by_their_first_label() {
        let text = "# TYPE muster_actions counter\n\
            muster_actions_total{kind=\"release\",result=\"ok\"} 7\n\
            muster_actions_total{kind=\"release\",result=\"error\"} 2\n\
            muster_actions_total{kind=\"job_status\",result=\"ok\"} 5\n\
            muster_api_requests_total{method=\"POST\"} 11\n# EOF\n";
        let actions = counter(text, "muster_actions_total", "kind");
        let by_resource = series(
            "muster_api_requests_by_resource_total{method=\"POST\",resource=\"pods\"} 3\n\
             muster_api_requests_by_resource_total{method=\"PATCH\",resource=\"gpujobs/status\"} 4\n",
            "muster_api_requests_by_resource_total",
        );
        assert_eq!(by_resource.get("POST pods"), Some(&3));
        assert_eq!(by_resource.get("PATCH gpujobs/status"), Some(&4));
        assert_eq!(actions.get("release"), Some(&9));
        assert_eq!(actions.get("job_status"), Some(&5));
        let requests = counter(text, "muster_api_requests_total", "method");
        assert_eq!(
            requests.into_iter().collect::<Vec<_>>(),
            [("POST".to_owned(), 11)]
        );
    }

    #[test]
    fn an_unlabelled_series_is_read_by_its_exact_name() {
        let text = "muster_cycle_duration_seconds_sum 3.5\n\
            muster_cycle_duration_seconds_count 42\n\
            muster_cycle_duration_seconds_count_other 7\n";
        assert_eq!(gauge(text, "muster_cycle_duration_seconds_count"), 42);
        assert_eq!(gauge(text, "muster_absent"), 0);
    }
}
