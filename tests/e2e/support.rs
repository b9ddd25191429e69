//! What every end-to-end test shares: a real control plane of its own with fake nodes and a
//! fake kubelet, the controller (in this process, or as `muster controller` processes), and
//! polling helpers.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use muster_api::{ClusterQueue, GpuJob, GpuJobStatus, LocalQueue, ResourceFlavor};
use muster_controller::run::{Options, run};
use muster_testkit::kubelet::{FakeKubelet, KubeletOptions};
use muster_testkit::nodes::{NodeSpec, create_node};
use muster_testkit::{ClusterOptions, TestCluster, UpstreamCrd};
use serde_json::{Value, json};

/// The field manager of the tests' own writes.
pub const MANAGER: &str = "muster-e2e";
/// The label the tests' nodes of the H100 flavor carry.
pub const GPU_LABEL: &str = "e2e.muster.dev/gpu";
/// The topology level of the tests' H100 blocks.
pub const BLOCK: &str = "example.com/block";

/// A cluster of the test's own, a fake kubelet for its nodes, and a client.
pub struct Env {
    /// The control plane (stopped when the test ends, also when it panics).
    pub cluster: TestCluster,
    /// An admin client.
    pub client: Client,
    /// Plays the kubelet for the fake nodes.
    _kubelet: FakeKubelet,
}

impl Env {
    /// A cluster with Muster's CRDs (and the ProvisioningRequest CRD when `provisioning`),
    /// `None` when no control plane can be started here (the test then passes, having said so).
    pub async fn start(provisioning: bool) -> Option<Env> {
        let options = ClusterOptions {
            upstream_crds: if provisioning {
                &[UpstreamCrd::ProvisioningRequest]
            } else {
                &[]
            },
            ..ClusterOptions::default()
        };
        Env::start_with(options).await
    }

    /// [`Env::start`] with `options` (kube-controller-manager's controllers, say).
    pub async fn start_with(options: ClusterOptions) -> Option<Env> {
        // The controller's logs, when asked for with RUST_LOG.
        if std::env::var_os("RUST_LOG").is_some() {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .with_test_writer()
                .try_init();
        }
        let cluster = match TestCluster::start(options).await {
            Ok(Some(cluster)) => cluster,
            Ok(None) => return None,
            Err(e) => unreachable!("starting the control plane: {e:#}"),
        };
        let client = cluster.client();
        let kubelet = FakeKubelet::start(client.clone(), KubeletOptions::default());
        Some(Env {
            cluster,
            client,
            _kubelet: kubelet,
        })
    }

    /// Runs kubectl (the one beside the control plane's binaries, else the one on `PATH`)
    /// against this cluster from the repository's root; its output.
    pub fn kubectl(&self, args: &[&str]) -> std::process::Output {
        let kubectl = TestCluster::bin_dir()
            .map(|d| d.join("kubectl"))
            .filter(|k| k.exists())
            .unwrap_or_else(|| std::path::PathBuf::from("kubectl"));
        std::process::Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(self.cluster.kubeconfig_path())
            .args(args)
            .current_dir(std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."))
            .output()
            .unwrap_or_else(|e| unreachable!("kubectl: {e}"))
    }

    /// `api` of this cluster, namespaced.
    pub fn api<K>(&self, namespace: &str) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// `api` of this cluster, cluster-wide.
    pub fn all<K>(&self) -> Api<K>
    where
        K: kube::Resource,
        K::DynamicType: Default,
    {
        Api::all(self.client.clone())
    }

    /// Runs the controller in this process until the returned handle is stopped or dropped.
    pub fn controller(&self) -> Controller {
        Controller::start(self.client.clone(), Options::default())
    }

    /// Nodes `names` with 8 GPUs each in `block`, labelled for the H100 flavor.
    pub async fn gpu_nodes(&self, block: &str, names: &[&str]) {
        for name in names {
            let spec = NodeSpec::new(*name)
                .label(GPU_LABEL, "h100")
                .label(BLOCK, block)
                .capacity("nvidia.com/gpu", "8")
                .capacity("cpu", "64")
                .capacity("memory", "512Gi");
            if let Err(e) = create_node(&self.client, &spec).await {
                unreachable!("creating node {name}: {e:#}");
            }
        }
    }

    /// The H100 flavor (blocks of [`BLOCK`]), and namespaces `team-a` and `team-b`.
    pub async fn h100(&self) {
        for ns in ["team-a", "team-b"] {
            self.apply_all::<Namespace>(json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns}}))
                .await;
        }
        self.apply_all::<ResourceFlavor>(json!({
            "apiVersion": "muster.dev/v1alpha1", "kind": "ResourceFlavor",
            "metadata": {"name": "h100"},
            "spec": {"nodeLabels": {GPU_LABEL: "h100"},
                     "topologyLevels": [BLOCK, "kubernetes.io/hostname"]}}))
            .await;
    }

    /// A ClusterQueue `name` with `gpus` of H100 quota and `extra` merged into its spec, and a
    /// LocalQueue `name` in `namespace` pointing at it.
    pub async fn queue(&self, name: &str, namespace: &str, gpus: u32, extra: Value) {
        let mut spec = json!({
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                {"name": "h100", "resources": [{"name": "nvidia.com/gpu",
                                                "nominalQuota": gpus.to_string()}]}]}]});
        merge(&mut spec, extra);
        self.apply_all::<ClusterQueue>(json!({"apiVersion": "muster.dev/v1alpha1",
            "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}))
            .await;
        let local: Api<LocalQueue> = self.api(namespace);
        apply(
            &local,
            json!({"apiVersion": "muster.dev/v1alpha1", "kind": "LocalQueue",
                   "metadata": {"name": name, "namespace": namespace},
                   "spec": {"clusterQueue": name}}),
        )
        .await;
    }

    /// Server-side applies a cluster-scoped object.
    pub async fn apply_all<K>(&self, value: Value)
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
        K::DynamicType: Default,
    {
        apply(&self.all::<K>(), value).await;
    }

    /// Creates a GpuJob.
    pub async fn submit(&self, job: &GpuJob) {
        let namespace = job.metadata.namespace.clone().unwrap_or_default();
        let jobs: Api<GpuJob> = self.api(&namespace);
        if let Err(e) = jobs.create(&PostParams::default(), job).await {
            unreachable!("creating GpuJob {:?}: {e}", job.metadata.name);
        }
    }

    /// The status of GpuJob `namespace/name` (default when it has none).
    pub async fn status(&self, namespace: &str, name: &str) -> Option<GpuJobStatus> {
        let jobs: Api<GpuJob> = self.api(namespace);
        jobs.get(name)
            .await
            .ok()
            .map(|j| j.status.unwrap_or_default())
    }

    /// Waits until GpuJob `namespace/name`'s status satisfies `check`, for at most `seconds`;
    /// a time-out shows the last status seen.
    pub async fn until_status(
        &self,
        namespace: &str,
        name: &str,
        what: &str,
        seconds: u64,
        check: impl Fn(&GpuJobStatus) -> bool,
    ) -> GpuJobStatus {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
        loop {
            let status = self.status(namespace, name).await;
            if let Some(status) = status.as_ref().filter(|s| check(s)) {
                return status.clone();
            }
            if tokio::time::Instant::now() >= deadline {
                unreachable!(
                    "timed out after {seconds} s waiting for {namespace}/{name}: {what}; last status: {}",
                    serde_json::to_string_pretty(&status).unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The pods of GpuJob `name` in `namespace`.
    pub async fn pods_of(&self, namespace: &str, name: &str) -> Vec<Pod> {
        let pods: Api<Pod> = self.api(namespace);
        pods.list(&ListParams::default().labels(&format!("muster.dev/job-name={name}")))
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    }
}

/// The phase of a job's status, as the API shows it (`"Running"`, …).
pub fn phase(status: &GpuJobStatus) -> String {
    status
        .phase
        .as_ref()
        .and_then(|p| serde_json::to_value(p).ok())
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The pending reason's kind, as the API shows it (`"QuotaShort"`, …).
pub fn reason(status: &GpuJobStatus) -> String {
    status
        .pending_reason
        .as_ref()
        .and_then(|r| serde_json::to_value(r.kind).ok())
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// The controller running in this process.
pub struct Controller {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Controller {
    /// Starts it with `options` (metrics on a free loopback port).
    pub fn start(client: Client, options: Options) -> Controller {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        // The tests wait for waiting jobs' reasons: each is written 5 s after the job's
        // creation rather than the default's 30 (the plan tests cover the default).
        let options = Options {
            metrics_addr: ([127, 0, 0, 1], 0).into(),
            first_status_after: Duration::from_secs(5),
            ..options
        };
        let task = tokio::spawn(run(client, options, async move {
            let _ = stopped.await;
        }));
        Controller {
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Stops it and waits until it has.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(20), task).await;
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Team a's gang `own` (2 × 8 GPUs, in `team-a`, with `extra` in its spec) runs, then its
/// gang `borrowed` (the same) runs on quota it borrows; returns `borrowed`'s pod names.
pub async fn team_a_runs_its_own_gang_then_a_borrowed_one(env: &Env, extra: Value) -> Vec<String> {
    for name in ["own", "borrowed"] {
        env.submit(&gpu_job("team-a", name, 2, 8, &json!({}), extra.clone()))
            .await;
        env.until_status("team-a", name, "Running", 60, |s| phase(s) == "Running")
            .await;
    }
    let pods: Vec<String> = env
        .pods_of("team-a", "borrowed")
        .await
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert_eq!(pods.len(), 2, "borrowed's gang is whole");
    pods
}

/// Team b's gang `reclaim` (2 × 8 GPUs, in `team-b`) takes back the quota team a's gang
/// `borrowed` (in `team-a`, with pods `borrowed_pods`) borrows: `reclaim` runs, and
/// `borrowed` is evicted whole — requeued, told why it waits, every one of its pods deleted.
pub async fn team_b_reclaims_the_borrowed_gang(env: &Env, borrowed_pods: &[String]) {
    env.submit(&gpu_job("team-b", "reclaim", 2, 8, &json!({}), json!({})))
        .await;
    env.until_status("team-b", "reclaim", "Running", 90, |s| {
        phase(s) == "Running"
    })
    .await;
    let evicted = env
        .until_status("team-a", "borrowed", "requeued", 30, |s| {
            s.requeue_count >= 1 && s.admission.is_none()
        })
        .await;
    assert!(
        matches!(
            reason(&evicted).as_str(),
            "QuotaShort" | "NoTopologyFit" | "Backoff"
        ),
        "{evicted:?}"
    );
    let pods: Api<Pod> = env.api("team-a");
    for name in borrowed_pods {
        eventually(&format!("victim pod {name} gone"), 30, || async {
            pods.get_opt(name).await.ok()?.is_none().then_some(())
        })
        .await;
    }
}

/// Keeps the test that loads the machine most (the chaos run: two replicas, a faulty proxy,
/// control-plane restarts) apart from the tests that hold the controller's timing to a
/// forecast: on two cores, a chaos run beside one delays the controller's passes by seconds.
/// A file lock, so that it holds between test processes (nextest) as well as between the
/// threads of one (cargo test); released when the returned file is dropped.
pub async fn apart_from_load() -> std::fs::File {
    let path = std::env::temp_dir().join("muster-e2e-apart-from-load.lock");
    let taken = tokio::task::spawn_blocking(move || {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)?;
        file.lock()?;
        Ok::<_, std::io::Error>(file)
    })
    .await;
    match taken {
        Ok(Ok(file)) => file,
        Ok(Err(e)) => unreachable!("the lock that keeps timed tests apart from load: {e}"),
        Err(e) => unreachable!("waiting for the lock that keeps timed tests apart: {e}"),
    }
}

/// Polls `check` every 250 ms until it returns `Some`, for at most `seconds`.
pub async fn eventually<T, F, Fut>(what: &str, seconds: u64, check: F) -> T
where
    F: Fn() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() >= deadline {
            unreachable!("timed out after {seconds} s waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Checks `check` every 250 ms for `seconds` and fails as soon as it does not hold.
pub async fn always<F, Fut>(what: &str, seconds: u64, check: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    while tokio::time::Instant::now() < deadline {
        if let Err(e) = check().await {
            unreachable!("{what} stopped holding: {e}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Server-side applies `value` (named by its metadata) through `api`.
pub async fn apply<K>(api: &Api<K>, value: Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = value["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let params = PatchParams::apply(MANAGER).force();
    if let Err(e) = api.patch(&name, &params, &Patch::Apply(&value)).await {
        unreachable!("applying {name}: {e}");
    }
}

/// Merges object `extra` into object `into`, key by key (objects recursively).
pub fn merge(into: &mut Value, extra: Value) {
    match (into, extra) {
        (Value::Object(into), Value::Object(extra)) => {
            for (k, v) in extra {
                merge(into.entry(k).or_insert(Value::Null), v);
            }
        }
        (into, extra) => *into = extra,
    }
}

/// A GpuJob of `count` pods with `gpus` GPUs each in one H100 block; `annotations` go on the
/// pod template (the fake kubelet reads how a pod behaves from them); `extra` merges into the
/// spec.
pub fn gpu_job(
    namespace: &str,
    name: &str,
    count: u32,
    gpus: u32,
    annotations: &Value,
    extra: Value,
) -> GpuJob {
    let mut spec = json!({
        "queueName": queue_of(namespace),
        "podSets": [{"name": "workers", "count": count,
            "topology": {"required": BLOCK},
            "template": {"metadata": {"annotations": annotations},
                "spec": {"restartPolicy": "Never", "containers": [{
                "name": "main", "image": "registry.k8s.io/pause:3.10",
                "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]}}}]});
    merge(&mut spec, extra);
    match serde_json::from_value(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "GpuJob",
        "metadata": {"name": name, "namespace": namespace}, "spec": spec}))
    {
        Ok(job) => job,
        Err(e) => unreachable!("fixture {name}: {e}"),
    }
}

/// The LocalQueue the tests' jobs in `namespace` use: named like the namespace's queue.
fn queue_of(namespace: &str) -> &'static str {
    match namespace {
        "team-b" => "b",
        _ => "a",
    }
}

/// Pod annotations for the fake kubelet: the pod runs `ms` milliseconds, then succeeds.
pub fn runs_for(ms: u64) -> Value {
    json!({"testkit.muster.dev/run-ms": ms.to_string()})
}

/// Pod annotations for the fake kubelet: the pod runs and is never Ready.
pub fn never_ready() -> Value {
    json!({"testkit.muster.dev/never-ready": "true"})
}

/// The node a pod was bound to by the scheduler.
pub fn bound_node(pod: &Pod) -> Option<String> {
    pod.spec.as_ref()?.node_name.clone()
}

/// Whether a pod still carries any scheduling gate.
pub fn gated(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty())
}

/// A `muster controller` process (the binary under test), its logs in a file.
pub struct MusterProcess {
    child: std::process::Child,
    log: std::path::PathBuf,
}

impl MusterProcess {
    /// Starts `muster controller --kubeconfig KUBECONFIG ARGS…` with neither `POD_NAME` nor
    /// `HOSTNAME` in its environment (as when an operator runs it outside a pod), logging to
    /// `log`.
    pub fn start(kubeconfig: &std::path::Path, args: &[&str], log: std::path::PathBuf) -> Self {
        let file = match std::fs::File::create(&log) {
            Ok(f) => f,
            Err(e) => unreachable!("creating {}: {e}", log.display()),
        };
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_muster"))
            .arg("controller")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--metrics-addr", "127.0.0.1:0"])
            .args(
                // Any free port, unless the test names one.
                (!args.contains(&"--visibility-addr"))
                    .then_some(["--visibility-addr", "127.0.0.1:0"])
                    .into_iter()
                    .flatten(),
            )
            .args(
                // Waiting jobs' reasons 5 s after their creation, as for the in-process
                // controller, unless the test says.
                (!args.contains(&"--first-status-after"))
                    .then_some(["--first-status-after", "5"])
                    .into_iter()
                    .flatten(),
            )
            .args(args)
            .env_remove("POD_NAME")
            .env_remove("HOSTNAME")
            .env("RUST_LOG", "info")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(file)
            .spawn();
        match child {
            Ok(child) => MusterProcess { child, log },
            Err(e) => unreachable!("starting muster: {e}"),
        }
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether it has said it leads.
    pub fn leads(&self) -> bool {
        self.log().contains("leading: scheduling")
    }

    /// Its identity in the Lease, as it logged it when starting (`identity: "…"` in its
    /// options, quoted once more in a JSON log line); `None` until it has.
    pub fn identity(&self) -> Option<String> {
        let log = self.log();
        let rest = &log[log.find("identity: ")? + "identity: ".len()..];
        let rest = rest.trim_start_matches(['\\', '"']);
        let end = rest.find(['\\', '"'])?;
        Some(rest[..end].to_owned()).filter(|id| !id.is_empty())
    }

    /// `kill -9`.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for MusterProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
