//! `muster-load api-floor`: what each request of a job's life costs this machine's API server,
//! with nothing else running — the floor under every load figure measured on it.
//!
//! It starts a control plane of its own (etcd and kube-apiserver only: nothing binds, runs or
//! watches the pods unless asked to watch) and walks `objects` jobs through the requests that
//! a GpuJob of Kueue's benchmark makes through the API server in a load run, one kind at a
//! time and in the order of a job's life: the load generator's create, Muster's first waiting
//! status, its pod, kube-scheduler's binding and Scheduled Event, Muster's Admitted status,
//! the kubelet's two pod status writes and Muster's end. Each kind runs from one client with
//! a fixed number of requests in flight, and is reported with its rate and the CPU that
//! kube-apiserver and etcd spent on it (read from `/proc` before and after, less what each
//! spends idle over as long), per request. Weighted by a run's requests per job, these say
//! what the API server's share of a job is before any watch sends it anywhere; `--watchers`
//! adds watchers of pods and GpuJobs, as a load run has, to measure what sending costs.

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::{StreamExt as _, TryStreamExt as _, stream};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use muster_api::GpuJob;
use muster_api::wire::{
    ATTEMPT_LABEL, CLUSTER_QUEUE_ANNOTATION, DOMAIN_ANNOTATION, FLAVOR_ANNOTATION, JOB_LABEL,
    POD_INDEX_LABEL, POD_SET_LABEL,
};
use serde::Serialize;
use serde_json::{Value, json};

use muster_testkit::cluster::Component;
use muster_testkit::kubelet::RUN_ANNOTATION;
use muster_testkit::{ClusterOptions, TestCluster};

use crate::process_stats;

/// The namespace the jobs are made in.
const NAMESPACE: &str = "floor";

/// How long each process's idle CPU is read over before the first request.
const IDLE_WINDOW: Duration = Duration::from_secs(5);

/// How to measure.
#[derive(Clone, Debug)]
pub struct FloorOptions {
    /// The control-plane binaries.
    pub kube_bin: PathBuf,
    /// Jobs to walk through their requests.
    pub objects: usize,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Watchers of pods and of GpuJobs (each a watch of each), reading every event.
    pub watchers: usize,
    /// Where to write a CPU profile of kube-apiserver over the first [`PROFILE_WINDOW`] of
    /// each kind (`NN-<kind>.pprof`, for `go tool pprof`); none when unset.
    pub profile: Option<PathBuf>,
}

/// How much of each kind a profile covers: every kind of 5,000 requests takes longer.
pub const PROFILE_WINDOW: Duration = Duration::from_secs(2);

/// What it measured.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Floor {
    /// Jobs walked through their requests.
    pub objects: usize,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Watchers of pods and of GpuJobs.
    pub watchers: usize,
    /// kube-apiserver's CPU seconds a second with nothing asked of it, subtracted from each
    /// kind's.
    pub api_server_idle_cpu: f64,
    /// etcd's, the same.
    pub etcd_idle_cpu: f64,
    /// One row per kind of request, in the order of a job's life.
    pub requests: Vec<RequestCost>,
    /// The API server's and etcd's CPU milliseconds for one job's walk (every row once).
    pub per_job: RequestCost,
    /// Requests that failed (each is retried once before it counts).
    pub errors: usize,
}

/// What one kind of request cost.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestCost {
    /// Verb and resource, as `apiserver_request_total` counts them, and which write it is.
    pub request: String,
    /// Who makes it in a load run.
    pub who: String,
    /// Requests made.
    pub requests: usize,
    /// Requests a second, over all of them.
    pub per_second: f64,
    /// kube-apiserver's CPU milliseconds a request.
    pub api_server_cpu_ms: f64,
    /// etcd's CPU milliseconds a request.
    pub etcd_cpu_ms: f64,
}

/// The processes whose CPU is read, and what each spends idle.
struct Meters {
    client: kube::Client,
    api_server: u32,
    etcd: u32,
    api_server_idle: f64,
    etcd_idle: f64,
}

/// How many profiles `dir` holds: the next one's number.
fn profiles_in(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .filter_map(Result::ok)
            .filter(|e| e.path().extension().is_some_and(|x| x == "pprof"))
            .count()
    })
}

impl Meters {
    /// Meters of `api_server` and `etcd`, with what each spends idle read over
    /// [`IDLE_WINDOW`].
    async fn idle(client: kube::Client, api_server: u32, etcd: u32) -> anyhow::Result<Self> {
        let mut meters = Self {
            client,
            api_server,
            etcd,
            api_server_idle: 0.0,
            etcd_idle: 0.0,
        };
        let (api_before, etcd_before) = meters.read()?;
        tokio::time::sleep(IDLE_WINDOW).await;
        let (api_after, etcd_after) = meters.read()?;
        let seconds = IDLE_WINDOW.as_secs_f64();
        meters.api_server_idle = (api_after - api_before) / seconds;
        meters.etcd_idle = (etcd_after - etcd_before) / seconds;
        Ok(meters)
    }

    fn read(&self) -> anyhow::Result<(f64, f64)> {
        Ok((
            process_stats::read(self.api_server)?.cpu_seconds,
            process_stats::read(self.etcd)?.cpu_seconds,
        ))
    }

    /// Runs `request(i)` for every job, `concurrency` at a time, and says what it cost.
    async fn measure<F, Fut>(
        &self,
        (request, who): (&str, &str),
        options: &FloorOptions,
        errors: &mut usize,
        send: F,
    ) -> anyhow::Result<RequestCost>
    where
        F: Fn(usize) -> Fut,
        Fut: Future<Output = Result<(), kube::Error>>,
    {
        // Let what the previous kind set off (watch sends, etcd's own writes) settle first.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let profile = options.profile.as_ref().map(|dir| {
            let file: String = request
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                .collect();
            let out = dir.join(format!("{:02}-{file}.pprof", profiles_in(dir)));
            let client = self.client.clone();
            tokio::spawn(async move {
                crate::api_server_profile::fetch(&client, PROFILE_WINDOW, &out).await
            })
        });
        let (api_before, etcd_before) = self.read()?;
        let started = Instant::now();
        *errors += run_all(options.objects, options.concurrency.max(1), send).await;
        let took = started.elapsed();
        let (api_after, etcd_after) = self.read()?;
        if let Some(profile) = profile {
            profile
                .await
                .context("the profile's task")?
                .with_context(|| format!("profiling {request}"))?;
        }
        let seconds = took.as_secs_f64();
        let per_request = |cpu: f64, idle: f64| {
            #[expect(clippy::cast_precision_loss, reason = "a count for a report")]
            let count = options.objects.max(1) as f64;
            ((cpu - idle * seconds).max(0.0) * 1000.0) / count
        };
        Ok(RequestCost {
            request: request.to_owned(),
            who: who.to_owned(),
            requests: options.objects,
            per_second: rate(options.objects, took),
            api_server_cpu_ms: per_request(api_after - api_before, self.api_server_idle),
            etcd_cpu_ms: per_request(etcd_after - etcd_before, self.etcd_idle),
        })
    }
}

/// One kind of request of a job's life, as the walk sends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    CreateJob,
    WaitingStatus,
    CreatePod,
    Bind,
    Scheduled,
    AdmittedStatus,
    PodRunning,
    PodSucceeded,
    EndStatus,
}

impl Kind {
    /// Every kind, in the order of a job's life.
    const WALK: [Self; 9] = [
        Self::CreateJob,
        Self::WaitingStatus,
        Self::CreatePod,
        Self::Bind,
        Self::Scheduled,
        Self::AdmittedStatus,
        Self::PodRunning,
        Self::PodSucceeded,
        Self::EndStatus,
    ];

    /// Its verb and resource, and which write it is.
    fn request(self) -> &'static str {
        match self {
            Self::CreateJob => "POST gpujobs",
            Self::WaitingStatus => "PATCH gpujobs/status (first waiting status)",
            Self::CreatePod => "POST pods",
            Self::Bind => "POST pods/binding",
            Self::Scheduled => "POST events (Scheduled)",
            Self::AdmittedStatus => "PATCH gpujobs/status (Admitted)",
            Self::PodRunning => "PATCH pods/status (Running)",
            Self::PodSucceeded => "PATCH pods/status (Succeeded)",
            Self::EndStatus => "PATCH gpujobs/status (Succeeded)",
        }
    }

    /// Who makes it in a load run.
    fn who(self) -> &'static str {
        match self {
            Self::CreateJob => "the load generator",
            Self::WaitingStatus | Self::CreatePod | Self::AdmittedStatus | Self::EndStatus => {
                "Muster"
            }
            Self::Bind | Self::Scheduled => "kube-scheduler",
            Self::PodRunning | Self::PodSucceeded => "the kubelet",
        }
    }
}

/// Where the walk sends its requests.
struct Apis {
    jobs: Api<GpuJob>,
    pods: Api<Pod>,
    events: Api<Event>,
    /// The jobs' UIDs by index, for their pods' owner references (read once they exist).
    uids: Vec<String>,
}

impl Apis {
    /// Sends job `i`'s request of `kind`.
    async fn send(&self, kind: Kind, i: usize) -> Result<(), kube::Error> {
        let create = PostParams::default();
        let as_manager = |manager: &str| PatchParams {
            field_manager: Some(manager.to_owned()),
            ..PatchParams::default()
        };
        let job_status = |status: fn(usize) -> Value| async move {
            let patch = whole_status(&status(i))?;
            self.jobs
                .patch_status(&job_name(i), &as_manager("muster"), &patch)
                .await
                .map(drop)
        };
        let pod_status = |status: fn(usize) -> Value| async move {
            let patch = Patch::Strategic(status(i));
            self.pods
                .patch_status(&pod_name(i), &as_manager("kubelet"), &patch)
                .await
                .map(drop)
        };
        match kind {
            Kind::CreateJob => self.jobs.create(&create, &gpujob(i)?).await.map(drop),
            Kind::WaitingStatus => job_status(waiting_status).await,
            Kind::CreatePod => {
                let uid = self.uids.get(i).map_or("", String::as_str);
                self.pods.create(&create, &pod(i, uid)?).await.map(drop)
            }
            Kind::Bind => self
                .pods
                .create_subresource::<_, Value>("binding", &pod_name(i), &create, &binding(i))
                .await
                .map(drop),
            Kind::Scheduled => self
                .events
                .create(&create, &scheduled_event(i)?)
                .await
                .map(drop),
            Kind::AdmittedStatus => job_status(admitted_status).await,
            Kind::PodRunning => pod_status(pod_running).await,
            Kind::PodSucceeded => pod_status(pod_succeeded).await,
            Kind::EndStatus => job_status(ended_status).await,
        }
    }
}

/// Measures the floor on a fresh control plane.
pub async fn measure(options: &FloorOptions) -> anyhow::Result<Floor> {
    if let Some(dir) = &options.profile {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let cluster = TestCluster::start_in(
        &options.kube_bin,
        ClusterOptions {
            scheduler: false,
            api_server_profiling: options.profile.is_some(),
            ..ClusterOptions::default()
        },
    )
    .await?;
    let client = cluster.client();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?,
        )
        .await
        .context("creating the namespace")?;
    let mut apis = Apis {
        jobs: Api::namespaced(client.clone(), NAMESPACE),
        pods: Api::namespaced(client.clone(), NAMESPACE),
        events: Api::namespaced(client.clone(), NAMESPACE),
        uids: Vec::new(),
    };
    let watching = start_watchers(&client, options.watchers);
    let pid = |component| {
        cluster
            .pid(component)
            .with_context(|| format!("{} is not running", component.name()))
    };
    let meters = Meters::idle(
        client.clone(),
        pid(Component::ApiServer)?,
        pid(Component::Etcd)?,
    )
    .await?;

    let mut errors = 0;
    let mut requests = Vec::new();
    for kind in Kind::WALK {
        if kind == Kind::CreatePod {
            let jobs = apis.jobs.list(&kube::api::ListParams::default()).await;
            let jobs = jobs.context("listing the jobs")?.items;
            let uid = |job: GpuJob| job.metadata.uid.unwrap_or_default();
            let mut uids: Vec<(String, String)> = jobs
                .into_iter()
                .map(|job| (job.metadata.name.clone().unwrap_or_default(), uid(job)))
                .collect();
            uids.sort();
            apis.uids = (0..options.objects)
                .map(|i| {
                    let name = job_name(i);
                    uids.binary_search_by(|(n, _)| n.cmp(&name))
                        .map_or_else(|_| String::new(), |at| uids[at].1.clone())
                })
                .collect();
        }
        let apis = &apis;
        let cost = meters
            .measure((kind.request(), kind.who()), options, &mut errors, |i| {
                apis.send(kind, i)
            })
            .await?;
        requests.push(cost);
    }
    for watch in watching {
        watch.abort();
    }
    let per_job = RequestCost {
        request: "one job's walk (every row once)".to_owned(),
        who: String::new(),
        requests: requests.len(),
        per_second: 0.0,
        api_server_cpu_ms: requests.iter().map(|r| r.api_server_cpu_ms).sum(),
        etcd_cpu_ms: requests.iter().map(|r| r.etcd_cpu_ms).sum(),
    };
    Ok(Floor {
        objects: options.objects,
        concurrency: options.concurrency.max(1),
        watchers: options.watchers,
        api_server_idle_cpu: meters.api_server_idle,
        etcd_idle_cpu: meters.etcd_idle,
        requests,
        per_job,
        errors,
    })
}

/// Starts `count` watchers of the namespace's pods and as many of its GpuJobs, each reading
/// every event as a controller's watch would.
fn start_watchers(client: &kube::Client, count: usize) -> Vec<tokio::task::JoinHandle<()>> {
    let mut handles = Vec::with_capacity(count * 2);
    for _ in 0..count {
        let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
        handles.push(tokio::spawn(async move {
            let _ = watcher(pods, watcher::Config::default())
                .try_for_each(|_| async { Ok(()) })
                .await;
        }));
        let jobs: Api<GpuJob> = Api::namespaced(client.clone(), NAMESPACE);
        handles.push(tokio::spawn(async move {
            let _ = watcher(jobs, watcher::Config::default())
                .try_for_each(|_| async { Ok(()) })
                .await;
        }));
    }
    handles
}

/// Runs `request(i)` for every `i` below `count`, `concurrency` at a time, retrying a failed
/// one once; returns how many failed twice.
async fn run_all<F, Fut>(count: usize, concurrency: usize, request: F) -> usize
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<(), kube::Error>>,
{
    stream::iter(0..count)
        .map(|i| {
            let first = request(i);
            let again = &request;
            async move {
                if first.await.is_ok() {
                    return 0;
                }
                usize::from(again(i).await.is_err())
            }
        })
        .buffer_unordered(concurrency)
        .fold(0, |failed, f| async move { failed + f })
        .await
}

fn rate(count: usize, took: Duration) -> f64 {
    #[expect(clippy::cast_precision_loss, reason = "a rate for a report")]
    let count = count as f64;
    count / took.as_secs_f64().max(f64::EPSILON)
}

fn job_name(i: usize) -> String {
    format!("small-0-{i}-0")
}

fn pod_name(i: usize) -> String {
    format!("{}-main-0-a0", job_name(i))
}

fn node_name(i: usize) -> String {
    format!("node-{:03}", i % 256)
}

/// Turns a `kube::Error`-free builder failure into one a request can return.
fn built<T>(what: &str, value: Value) -> Result<T, kube::Error>
where
    T: serde::de::DeserializeOwned,
{
    serde_json::from_value(value)
        .map_err(|e| kube::Error::Service(format!("building {what}: {e}").into()))
}

/// A GpuJob as Kueue's benchmark's small class makes it in a load run.
fn gpujob(i: usize) -> Result<GpuJob, kube::Error> {
    built(
        "a GpuJob",
        json!({
            "apiVersion": "muster.dev/v1alpha1", "kind": "GpuJob",
            "metadata": {"name": job_name(i), "namespace": NAMESPACE,
                         "labels": {"kueue-baseline.muster.dev/class": "small"}},
            "spec": {"queueName": "lq", "priority": 50, "podSets": [{
                "name": "main", "count": 1, "template": {
                    "metadata": {"annotations": {RUN_ANNOTATION: "200"}},
                    "spec": {"restartPolicy": "Never", "containers": [{
                        "name": "main", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": "1"}}}]}}}]}}),
    )
}

/// A status written whole, as Muster writes every status (one JSON patch, `add /status`).
fn whole_status(status: &Value) -> Result<Patch<Value>, kube::Error> {
    let ops = built(
        "a status patch",
        json!([{"op": "add", "path": "/status", "value": status}]),
    )?;
    Ok(Patch::Json(ops))
}

fn valid_condition() -> Value {
    json!({"type": "Valid", "status": "True", "reason": "Valid",
           "message": "the job is valid", "lastTransitionTime": "2026-12-07T18:00:00Z"})
}

/// A job's first waiting status: its position and why it waits.
fn waiting_status(i: usize) -> Value {
    json!({"phase": "Queued", "conditions": [valid_condition()],
           "queuePosition": i + 1,
           "pendingReason": {"kind": "QuotaShort",
               "message": "cq-3 has 0 of cpu left of its nominal 20 and may borrow 0 from cohort cohort-1: 1 short"},
           "requeueCount": 0, "restartCount": 0, "provisioningAttempts": 0})
}

/// A job's status once admitted: where it runs.
fn admitted_status(i: usize) -> Value {
    json!({"phase": "Admitted",
           "conditions": [valid_condition(),
               {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                "message": "quota reserved in cq-3", "lastTransitionTime": "2026-12-07T18:00:10Z"},
               {"type": "Admitted", "status": "True", "reason": "Admitted",
                "message": "admitted by cq-3 on flavor default", "lastTransitionTime": "2026-12-07T18:00:10Z"}],
           "admission": {"clusterQueue": "cq-3", "podSets": [{
               "name": "main", "flavor": "default", "nodes": [node_name(i)]}]},
           "requeueCount": 0, "restartCount": 0, "provisioningAttempts": 0,
           "startTime": "2026-12-07T18:00:10Z"})
}

/// A job's status once it ended.
fn ended_status(i: usize) -> Value {
    let mut status = admitted_status(i);
    status["phase"] = json!("Succeeded");
    status["completionTime"] = json!("2026-12-07T18:00:12Z");
    if let Some(conditions) = status["conditions"].as_array_mut() {
        conditions.push(
            json!({"type": "Finished", "status": "True", "reason": "Succeeded",
            "message": "every pod succeeded", "lastTransitionTime": "2026-12-07T18:00:12Z"}),
        );
    }
    status
}

/// The pod Muster releases for a job of one pod: pinned to its node, owned by its job.
fn pod(i: usize, owner_uid: &str) -> Result<Pod, kube::Error> {
    let job = job_name(i);
    let env: Vec<Value> = [
        ("MUSTER_JOB_NAME", job.clone()),
        ("MUSTER_POD_SET", "main".to_owned()),
        ("MUSTER_POD_INDEX", "0".to_owned()),
        ("MUSTER_WORLD_SIZE", "1".to_owned()),
        ("MUSTER_PEER_HOSTS", format!("{}.{job}", pod_name(i))),
    ]
    .into_iter()
    .map(|(name, value)| json!({"name": name, "value": value}))
    .collect();
    built(
        "a pod",
        json!({
            "metadata": {
                "name": pod_name(i),
                "labels": {JOB_LABEL: job, POD_SET_LABEL: "main", POD_INDEX_LABEL: "0",
                           ATTEMPT_LABEL: "a0"},
                "annotations": {RUN_ANNOTATION: "200", CLUSTER_QUEUE_ANNOTATION: "cq-3",
                                FLAVOR_ANNOTATION: "default", DOMAIN_ANNOTATION: ""},
                "ownerReferences": [{"apiVersion": "muster.dev/v1alpha1", "kind": "GpuJob",
                    "name": job_name(i), "uid": owner_uid, "controller": true,
                    "blockOwnerDeletion": true}]},
            "spec": {
                "restartPolicy": "Never",
                "hostname": pod_name(i),
                "nodeSelector": {"kubernetes.io/hostname": node_name(i)},
                "containers": [{
                    "name": "main", "image": "registry.k8s.io/pause:3.10", "env": env,
                    "resources": {"requests": {"cpu": "1"}}}]}}),
    )
}

/// What kube-scheduler posts to bind a pod.
fn binding(i: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod_name(i)},
           "target": {"apiVersion": "v1", "kind": "Node", "name": node_name(i)}})
}

/// kube-scheduler's Event for a bound pod.
fn scheduled_event(i: usize) -> Result<Event, kube::Error> {
    built(
        "an Event",
        json!({
            "metadata": {"name": format!("{}.scheduled", pod_name(i)), "namespace": NAMESPACE},
            "eventTime": "2026-12-07T18:00:10.000000Z",
            "reportingController": "default-scheduler", "reportingInstance": "default-scheduler-1",
            "action": "Binding", "reason": "Scheduled", "type": "Normal",
            "note": format!("Successfully assigned {NAMESPACE}/{} to {}", pod_name(i), node_name(i)),
            "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": NAMESPACE,
                          "name": pod_name(i)}}),
    )
}

fn pod_conditions(ready: &str, time: &str) -> Value {
    json!([
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-07T18:00:10Z"},
        {"type": "Initialized", "status": "True", "lastTransitionTime": time},
        {"type": "ContainersReady", "status": ready, "lastTransitionTime": time},
        {"type": "Ready", "status": ready, "lastTransitionTime": time}])
}

/// The kubelet's write when the pod's container runs.
fn pod_running(i: usize) -> Value {
    json!({"status": {
        "phase": "Running", "hostIP": "10.0.0.1", "podIP": format!("10.1.{}.{}", i / 250 % 250, i % 250),
        "startTime": "2026-12-07T18:00:11Z",
        "conditions": pod_conditions("True", "2026-12-07T18:00:11Z"),
        "containerStatuses": [{"name": "main", "ready": true, "restartCount": 0,
            "image": "registry.k8s.io/pause:3.10", "imageID": "", "started": true,
            "state": {"running": {"startedAt": "2026-12-07T18:00:11Z"}}}]}})
}

/// The kubelet's write when the pod's container has exited.
fn pod_succeeded(_: usize) -> Value {
    json!({"status": {
        "phase": "Succeeded",
        "conditions": pod_conditions("False", "2026-12-07T18:00:12Z"),
        "containerStatuses": [{"name": "main", "ready": false, "restartCount": 0,
            "image": "registry.k8s.io/pause:3.10", "imageID": "", "started": false,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                "startedAt": "2026-12-07T18:00:11Z", "finishedAt": "2026-12-07T18:00:12Z"}}}]}})
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every object the floor sends is one the API types read: a field renamed in Muster's
    /// types or a mistyped literal here fails this, not a measurement.
    #[test]
    fn the_objects_a_job_walks_through_are_well_formed() -> anyhow::Result<()> {
        let job = gpujob(7)?;
        assert_eq!(job.metadata.name.as_deref(), Some("small-0-7-0"));
        for status in [waiting_status(7), admitted_status(7), ended_status(7)] {
            let read: muster_api::GpuJobStatus = serde_json::from_value(status.clone())?;
            assert_eq!(serde_json::to_value(&read)?["phase"], status["phase"]);
        }
        let read: muster_api::GpuJobStatus = serde_json::from_value(ended_status(7))?;
        let nodes = read.admission.map(|a| a.pod_sets[0].nodes.clone());
        assert_eq!(nodes, Some(vec![node_name(7)]));
        assert!(read.completion_time.is_some());
        let pinned = pod(7, "uid-7")?
            .spec
            .and_then(|spec| spec.node_selector)
            .and_then(|s| s.get("kubernetes.io/hostname").cloned());
        assert_eq!(pinned, Some(node_name(7)));
        for status in [pod_running(7), pod_succeeded(7)] {
            let read: k8s_openapi::api::core::v1::PodStatus =
                serde_json::from_value(status["status"].clone())?;
            assert!(read.phase.is_some());
        }
        assert_eq!(scheduled_event(7)?.reason.as_deref(), Some("Scheduled"));
        assert!(matches!(
            whole_status(&waiting_status(7)),
            Ok(Patch::Json(_))
        ));
        let _: kube::api::DynamicObject = serde_json::from_value(binding(7))?;
        assert_eq!(Kind::WALK.len(), 9);
        assert_eq!(Kind::WALK[0].who(), "the load generator");
        Ok(())
    }
}
