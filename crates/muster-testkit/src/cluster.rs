//! A real, throw-away Kubernetes control plane on loopback: etcd, kube-apiserver and optionally
//! kube-scheduler and kube-controller-manager, run as child processes from the binaries in
//! `MUSTER_KUBE_BIN`, with Muster's CRDs installed.

use std::ffi::OsString;
use std::future::Future;
use std::io::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::Client;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::time::Instant;

use crate::crds;
use crate::credentials;
use crate::process::{Process, terminate_all};

/// The environment variable naming the folder with `etcd`, `kube-apiserver`, `kube-scheduler`,
/// `kube-controller-manager` and `kubectl`.
pub const BIN_ENV: &str = "MUSTER_KUBE_BIN";

/// The environment variable that, set to `1`, keeps a cluster's folder (data, logs,
/// kubeconfig) after the test for a look.
pub const KEEP_ENV: &str = "MUSTER_KEEP_CLUSTER";

/// The one line printed when a test is skipped for want of the binaries.
pub const SKIP_MESSAGE: &str =
    "skipped: MUSTER_KUBE_BIN is not set (see docs/admins.md#running-the-end-to-end-tests)";

/// How long each component may take to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// How long the components may take to exit after SIGTERM before they are killed.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// How often readiness is checked.
const POLL: Duration = Duration::from_millis(200);

/// How many times a start is tried when a component lost a race for its port.
const START_ATTEMPTS: u32 = 3;

/// An upstream CustomResourceDefinition kept in `shared/crds/` beside the repository, for
/// APIs whose controllers do not run in a test cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpstreamCrd {
    /// The cluster autoscaler's ProvisioningRequest (`autoscaling.x-k8s.io`).
    ProvisioningRequest,
    /// JobSet (`jobset.x-k8s.io`). Its controller does not run: a test that needs child Jobs
    /// makes them as it would.
    JobSet,
}

/// The pieces of a cluster to run besides etcd and kube-apiserver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterOptions {
    /// Run kube-scheduler, which binds pods to nodes (default on).
    pub scheduler: bool,
    /// Run kube-controller-manager with every controller but node lifecycle (default off).
    pub controller_manager: bool,
    /// The upstream CRDs to install from `shared/crds/` (default none).
    pub upstream_crds: &'static [UpstreamCrd],
    /// kube-controller-manager's client rate limit in requests per second (its
    /// `--kube-api-qps`, with a burst of half as much again). `None` keeps Kubernetes' default,
    /// 20 per second with a burst of 30, which bounds how fast the Job controller makes and
    /// finishes Jobs' pods.
    pub controller_manager_qps: Option<u32>,
    /// How many Jobs kube-controller-manager's Job controller syncs at once (its
    /// `--concurrent-job-syncs`). `None` keeps Kubernetes' default, 5: each sync waits on its
    /// API requests, so under load these workers, not the rate limit, bound how fast Jobs'
    /// pods are made and Jobs finished.
    pub controller_manager_job_syncs: Option<u32>,
    /// kube-scheduler's client rate limit in requests per second (its `--kube-api-qps`, with
    /// a burst of twice as much). `None` keeps Kubernetes' default, 50 per second with a burst
    /// of 100: one binding per pod, so it bounds how fast released pods are bound.
    pub scheduler_qps: Option<u32>,
    /// Serve kube-apiserver's Go profiles (`--profiling`, `/debug/pprof/`), for a load run that
    /// asks where the API server's CPU goes (default off).
    pub api_server_profiling: bool,
    /// `--feature-gates` of kube-apiserver, kube-scheduler and kube-controller-manager, e.g.
    /// `GenericWorkload=true,GangScheduling=true` (default none).
    pub feature_gates: &'static str,
    /// kube-apiserver's `--runtime-config`, e.g. `scheduling.k8s.io/v1alpha2=true` to serve an
    /// alpha API (default none).
    pub runtime_config: &'static str,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            scheduler: true,
            controller_manager: false,
            upstream_crds: &[],
            controller_manager_qps: None,
            controller_manager_job_syncs: None,
            scheduler_qps: None,
            api_server_profiling: false,
            feature_gates: "",
            runtime_config: "",
        }
    }
}

/// A control-plane program of a [`TestCluster`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Component {
    /// etcd, the store.
    Etcd,
    /// kube-apiserver.
    ApiServer,
    /// kube-scheduler.
    Scheduler,
    /// kube-controller-manager.
    ControllerManager,
}

impl Component {
    /// The program's file name, which also names its log (`<name>.log`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Etcd => "etcd",
            Self::ApiServer => "kube-apiserver",
            Self::Scheduler => "kube-scheduler",
            Self::ControllerManager => "kube-controller-manager",
        }
    }
}

/// The loopback ports of a cluster.
#[derive(Clone, Copy, Debug)]
struct Ports {
    api: u16,
    etcd: u16,
    etcd_peer: u16,
}

impl Ports {
    /// Three distinct free ports: each bound on 127.0.0.1:0, read, then released. Another process
    /// may take one before the component binds it: the start is then retried.
    fn pick() -> anyhow::Result<Self> {
        let listeners = (0..3)
            .map(|_| TcpListener::bind("127.0.0.1:0"))
            .collect::<Result<Vec<_>, _>>()
            .context("binding 127.0.0.1:0 to pick a free port")?;
        let mut ports = Vec::with_capacity(3);
        for listener in &listeners {
            ports.push(
                listener
                    .local_addr()
                    .context("reading a bound port")?
                    .port(),
            );
        }
        Ok(Self {
            api: ports[0],
            etcd: ports[1],
            etcd_peer: ports[2],
        })
    }
}

/// Why one start attempt failed, and whether another attempt may do better.
struct StartFailure {
    error: anyhow::Error,
    port_race: bool,
}

impl From<anyhow::Error> for StartFailure {
    fn from(error: anyhow::Error) -> Self {
        Self {
            error,
            port_race: false,
        }
    }
}

/// A running control plane in a fresh temporary folder. Dropping it stops every process (SIGTERM,
/// then SIGKILL after 10 s) and removes the folder, also when a test panics.
pub struct TestCluster {
    processes: Vec<(Component, Process)>,
    dir: Option<TempDir>,
    root: PathBuf,
    bin: PathBuf,
    ports: Ports,
    token: String,
    api_url: String,
    kubeconfig_path: PathBuf,
    client: Client,
    /// kube-controller-manager's `--kube-api-qps`, kept for its restarts.
    controller_manager_qps: Option<u32>,
    /// kube-controller-manager's `--concurrent-job-syncs`, kept for its restarts.
    controller_manager_job_syncs: Option<u32>,
    /// kube-scheduler's `--kube-api-qps`, kept for its restarts.
    scheduler_qps: Option<u32>,
    /// kube-apiserver's `--profiling`, kept for its restarts.
    api_server_profiling: bool,
    /// The components' `--feature-gates` (see [`ClusterOptions::feature_gates`]).
    feature_gates: &'static str,
    /// kube-apiserver's `--runtime-config`.
    runtime_config: &'static str,
}

impl TestCluster {
    /// The folder named by `MUSTER_KUBE_BIN`, if set and not empty.
    pub fn bin_dir() -> Option<PathBuf> {
        std::env::var_os(BIN_ENV)
            .filter(|value| !value.is_empty())
            .map(PathBuf::from)
    }

    /// Starts a cluster; `Ok(None)` after printing [`SKIP_MESSAGE`] to stderr when
    /// `MUSTER_KUBE_BIN` is not set. A failure names the component and ends with the tail of its
    /// log.
    pub async fn start(options: ClusterOptions) -> anyhow::Result<Option<Self>> {
        let Some(bin) = Self::bin_dir() else {
            // Straight to stderr rather than through `eprintln!`, which the test harness
            // captures and shows only for failing tests: a skip should be seen.
            let _ = writeln!(std::io::stderr(), "{SKIP_MESSAGE}");
            return Ok(None);
        };
        Self::start_in(&bin, options).await.map(Some)
    }

    /// Starts a cluster from the binaries in `bin` (for tools that take the folder as an
    /// argument rather than from `MUSTER_KUBE_BIN`).
    pub async fn start_in(bin: &Path, options: ClusterOptions) -> anyhow::Result<Self> {
        for component in [
            Component::Etcd,
            Component::ApiServer,
            Component::Scheduler,
            Component::ControllerManager,
        ] {
            let program = bin.join(component.name());
            anyhow::ensure!(
                program.is_file(),
                "{} is missing: {BIN_ENV} must name a folder with etcd, kube-apiserver, \
                 kube-scheduler and kube-controller-manager",
                program.display()
            );
        }
        let mut attempt = 1;
        loop {
            match Self::start_once(bin, options).await {
                Ok(cluster) => return Ok(cluster),
                Err(failure) if failure.port_race && attempt < START_ATTEMPTS => attempt += 1,
                Err(failure) => {
                    return Err(failure.error.context(format!(
                        "starting a test cluster from {} (attempt {attempt} of \
                         {START_ATTEMPTS}; {KEEP_ENV}=1 keeps its folder)",
                        bin.display()
                    )));
                }
            }
        }
    }

    /// One attempt: a new folder, new ports, every component started and ready.
    async fn start_once(bin: &Path, options: ClusterOptions) -> Result<Self, StartFailure> {
        let dir = tempfile::Builder::new()
            .prefix("muster-testkit-")
            .tempdir()
            .context("creating the cluster's folder")?;
        let root = dir.path().to_path_buf();
        for sub in ["pki", "logs", "etcd"] {
            std::fs::create_dir_all(root.join(sub))
                .with_context(|| format!("creating {}", root.join(sub).display()))?;
        }
        let token = credentials::random_token();
        credentials::write_token_file(&root.join("pki/tokens.csv"), &token)?;
        credentials::write_front_proxy(&root.join("pki"))?;
        credentials::write_service_account_keys(
            &root.join("pki/sa.key"),
            &root.join("pki/sa.pub"),
        )?;
        let ports = Ports::pick()?;
        let api_url = format!("https://127.0.0.1:{}", ports.api);
        let kubeconfig = credentials::kubeconfig(&api_url, &token);
        let kubeconfig_path = root.join("kubeconfig");
        std::fs::write(&kubeconfig_path, &kubeconfig)
            .with_context(|| format!("writing {}", kubeconfig_path.display()))?;
        let client = client_from(&kubeconfig).await?;
        let mut cluster = Self {
            processes: Vec::new(),
            dir: Some(dir),
            root,
            bin: bin.to_path_buf(),
            ports,
            token,
            api_url,
            kubeconfig_path,
            client,
            controller_manager_qps: options.controller_manager_qps,
            controller_manager_job_syncs: options.controller_manager_job_syncs,
            scheduler_qps: options.scheduler_qps,
            api_server_profiling: options.api_server_profiling,
            feature_gates: options.feature_gates,
            runtime_config: options.runtime_config,
        };

        cluster.spawn(Component::Etcd)?;
        cluster.wait_ready(Component::Etcd).await?;
        cluster.spawn(Component::ApiServer)?;
        cluster.wait_ready(Component::ApiServer).await?;
        if options.scheduler {
            cluster.spawn(Component::Scheduler)?;
            cluster.wait_ready(Component::Scheduler).await?;
        }
        if options.controller_manager {
            cluster.spawn(Component::ControllerManager)?;
            cluster.wait_ready(Component::ControllerManager).await?;
        }
        crds::install_muster_crds(&cluster.client).await?;
        for crd in options.upstream_crds {
            match crd {
                UpstreamCrd::ProvisioningRequest => {
                    crds::install_provisioning_crd(&cluster.client).await?;
                }
                UpstreamCrd::JobSet => crds::install_jobset_crd(&cluster.client).await?,
            }
        }
        Ok(cluster)
    }

    /// A client for the admin user (TLS verification off: the certificate is self-generated).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The kubeconfig file of the admin user, e.g. for `muster controller --kubeconfig`.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// The API server's URL, `https://127.0.0.1:<port>`.
    pub fn api_url(&self) -> &str {
        &self.api_url
    }

    /// The admin user's bearer token (group `system:masters`).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The folder with each component's log, `<component>.log`.
    pub fn log_dir(&self) -> PathBuf {
        self.root.join("logs")
    }

    /// The cluster's folder (data, certificates, logs, kubeconfig).
    pub fn dir(&self) -> &Path {
        &self.root
    }

    /// The process id of a running component.
    pub fn pid(&self, component: Component) -> Option<u32> {
        self.processes
            .iter()
            .find(|(c, _)| *c == component)
            .and_then(|(_, process)| process.pid())
    }

    /// Stops kube-apiserver (SIGTERM) and starts it again on the same port; returns when it is
    /// ready.
    pub async fn restart_apiserver(&mut self) -> anyhow::Result<()> {
        self.restart(Component::ApiServer).await
    }

    /// Stops etcd (SIGTERM) and starts it again on the same ports and data; returns when etcd is
    /// healthy and kube-apiserver ready again.
    pub async fn restart_etcd(&mut self) -> anyhow::Result<()> {
        self.restart(Component::Etcd).await?;
        self.wait_ready(Component::ApiServer)
            .await
            .map_err(|failure| failure.error)
    }

    /// Stops a component (SIGTERM, then SIGKILL after 10 s) and starts it again with the same
    /// flags; returns when it is ready.
    pub async fn restart(&mut self, component: Component) -> anyhow::Result<()> {
        self.stop(component).await?;
        self.start_again(component).await
    }

    /// Stops a component (SIGTERM, then SIGKILL after 10 s) and leaves it stopped: the
    /// cluster as it is while that component is down or slow to catch up.
    pub async fn stop(&mut self, component: Component) -> anyhow::Result<()> {
        self.process_mut(component)?.terminate(STOP_GRACE).await;
        Ok(())
    }

    /// Starts a component [`TestCluster::stop`] stopped, with the same flags; returns when
    /// it is ready.
    pub async fn start_again(&mut self, component: Component) -> anyhow::Result<()> {
        self.process_mut(component)?.start()?;
        self.wait_ready(component)
            .await
            .map_err(|failure| failure.error)
    }

    fn process_mut(&mut self, component: Component) -> anyhow::Result<&mut Process> {
        self.processes
            .iter_mut()
            .find(|(c, _)| *c == component)
            .map(|(_, process)| process)
            .with_context(|| format!("{} was not started in this cluster", component.name()))
    }

    /// Starts a component with its flags.
    fn spawn(&mut self, component: Component) -> anyhow::Result<()> {
        let process = Process::spawn(
            component.name(),
            self.bin.join(component.name()),
            self.args(component),
            self.log_dir().join(format!("{}.log", component.name())),
        )?;
        self.processes.push((component, process));
        Ok(())
    }

    /// The command-line flags of a component.
    fn args(&self, component: Component) -> Vec<OsString> {
        let root = self.root.display();
        let etcd_url = format!("http://127.0.0.1:{}", self.ports.etcd);
        let peer_url = format!("http://127.0.0.1:{}", self.ports.etcd_peer);
        let kubeconfig = format!("--kubeconfig={}", self.kubeconfig_path.display());
        let mut args: Vec<String> = match component {
            Component::Etcd => vec![
                "--name=muster-testkit".into(),
                format!("--data-dir={root}/etcd"),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=muster-testkit={peer_url}"),
                "--initial-cluster-state=new".into(),
                "--unsafe-no-fsync".into(),
                "--quota-backend-bytes=2147483648".into(),
                "--log-level=warn".into(),
            ],
            Component::ApiServer => vec![
                format!("--etcd-servers={etcd_url}"),
                "--bind-address=127.0.0.1".into(),
                "--advertise-address=127.0.0.1".into(),
                format!("--secure-port={}", self.ports.api),
                format!("--cert-dir={root}/pki"),
                format!("--token-auth-file={root}/pki/tokens.csv"),
                // The front proxy: how the API server forwards requests to aggregated APIs
                // (Muster's visibility API), naming the caller in headers.
                format!("--requestheader-client-ca-file={root}/pki/front-proxy-ca.crt"),
                format!(
                    "--requestheader-allowed-names={}",
                    credentials::FRONT_PROXY_CLIENT
                ),
                "--requestheader-username-headers=X-Remote-User".into(),
                "--requestheader-group-headers=X-Remote-Group".into(),
                "--requestheader-extra-headers-prefix=X-Remote-Extra-".into(),
                format!("--proxy-client-cert-file={root}/pki/front-proxy-client.crt"),
                format!("--proxy-client-key-file={root}/pki/front-proxy-client.key"),
                "--authorization-mode=RBAC".into(),
                "--service-account-issuer=https://kubernetes.default.svc".into(),
                format!("--service-account-key-file={root}/pki/sa.pub"),
                format!("--service-account-signing-key-file={root}/pki/sa.key"),
                "--service-cluster-ip-range=10.0.0.0/24".into(),
                "--endpoint-reconciler-type=none".into(),
                "--shutdown-watch-termination-grace-period=2s".into(),
                "--disable-admission-plugins=ServiceAccount".into(),
                "--allow-privileged=true".into(),
                format!("--profiling={}", self.api_server_profiling),
                "--v=1".into(),
            ],
            Component::Scheduler => {
                let mut args = vec![
                    kubeconfig,
                    "--leader-elect=false".into(),
                    "--secure-port=0".into(),
                    "--v=1".into(),
                ];
                if let Some(qps) = self.scheduler_qps {
                    args.push(format!("--kube-api-qps={qps}"));
                    args.push(format!("--kube-api-burst={}", qps.saturating_mul(2)));
                }
                args
            }
            Component::ControllerManager => {
                let mut args = vec![
                    kubeconfig,
                    "--leader-elect=false".into(),
                    "--secure-port=0".into(),
                    "--controllers=*,-node-lifecycle-controller".into(),
                    "--use-service-account-credentials=false".into(),
                    format!("--service-account-private-key-file={root}/pki/sa.key"),
                    format!("--root-ca-file={root}/pki/apiserver.crt"),
                    "--service-cluster-ip-range=10.0.0.0/24".into(),
                    "--v=1".into(),
                ];
                if let Some(qps) = self.controller_manager_qps {
                    args.push(format!("--kube-api-qps={qps}"));
                    args.push(format!("--kube-api-burst={}", qps.saturating_mul(3) / 2));
                }
                if let Some(syncs) = self.controller_manager_job_syncs {
                    args.push(format!("--concurrent-job-syncs={syncs}"));
                }
                args
            }
        };
        if component != Component::Etcd && !self.feature_gates.is_empty() {
            args.push(format!("--feature-gates={}", self.feature_gates));
        }
        if component == Component::ApiServer && !self.runtime_config.is_empty() {
            args.push(format!("--runtime-config={}", self.runtime_config));
        }
        args.into_iter().map(OsString::from).collect()
    }

    /// Waits until a component is ready, or fails with its log's tail if it exits or times out.
    async fn wait_ready(&mut self, component: Component) -> Result<(), StartFailure> {
        let client = self.client.clone();
        let etcd_port = self.ports.etcd;
        match component {
            Component::Etcd => {
                self.poll(component, "did not report healthy on /health", || {
                    etcd_healthy(etcd_port)
                })
                .await
            }
            Component::ApiServer => {
                self.poll(component, "did not answer ok on /readyz", || {
                    apiserver_ready(client.clone())
                })
                .await?;
                let namespaces: Api<Namespace> = Api::all(client);
                self.poll(component, "did not create the default namespace", || {
                    let namespaces = namespaces.clone();
                    async move { namespaces.get("default").await.is_ok() }
                })
                .await
            }
            // No health endpoint with --secure-port=0: it must still run a moment after starting.
            Component::Scheduler => {
                tokio::time::sleep(Duration::from_millis(300)).await;
                self.poll(component, "did not start", || async { true })
                    .await
            }
            // Its service-account controller creating default/default shows it works.
            Component::ControllerManager => {
                let accounts: Api<ServiceAccount> = Api::namespaced(client, "default");
                self.poll(
                    component,
                    "did not create the default service account",
                    || {
                        let accounts = accounts.clone();
                        async move { accounts.get("default").await.is_ok() }
                    },
                )
                .await
            }
        }
    }

    /// Calls `check` until it is true, while the component's process runs, for at most
    /// [`READY_TIMEOUT`].
    async fn poll<F, Fut>(
        &mut self,
        component: Component,
        what: &str,
        mut check: F,
    ) -> Result<(), StartFailure>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = bool>,
    {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let process = self.process_mut(component)?;
            if let Some(status) = process.exited() {
                return Err(StartFailure {
                    error: process.exit_error(status, "while starting"),
                    port_race: process.lost_a_port_race(),
                });
            }
            if check().await {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let process = self.process_mut(component)?;
                return Err(StartFailure {
                    error: process.not_ready_error(&format!("{what} within {READY_TIMEOUT:?}")),
                    port_race: false,
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        // etcd last: kube-apiserver stops slowly while its store is gone, and etcd while clients
        // hold connections.
        let (mut store, mut rest): (Vec<_>, Vec<_>) = self
            .processes
            .drain(..)
            .partition(|(component, _)| *component == Component::Etcd);
        terminate_all(&mut rest, STOP_GRACE);
        terminate_all(&mut store, STOP_GRACE);
        let keep = std::env::var(KEEP_ENV).is_ok_and(|value| value == "1");
        if let Some(dir) = self.dir.take() {
            if keep {
                let path = dir.keep();
                eprintln!(
                    "kept the test cluster's folder {} ({KEEP_ENV}=1; logs in logs/, kubeconfig in kubeconfig)",
                    path.display()
                );
            } else if let Err(e) = dir.close() {
                eprintln!("removing the test cluster's folder: {e}");
            }
        }
    }
}

/// A client from kubeconfig text.
async fn client_from(kubeconfig: &str) -> anyhow::Result<Client> {
    let file = Kubeconfig::from_yaml(kubeconfig).context("parsing the kubeconfig")?;
    let config = kube::Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .context("loading the kubeconfig")?;
    Client::try_from(config).context("building a client")
}

/// Whether etcd answers `{"health":"true"}` on `/health`.
async fn etcd_healthy(port: u16) -> bool {
    let check = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        stream
            .write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        Ok::<_, std::io::Error>(response.contains("\"health\":\"true\""))
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), check).await,
        Ok(Ok(true))
    )
}

/// Whether kube-apiserver answers `ok` on `/readyz`.
async fn apiserver_ready(client: Client) -> bool {
    let Ok(request) = http::Request::get("/readyz").body(Vec::new()) else {
        return false;
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(5), client.request_text(request)).await,
        Ok(Ok(text)) if text.trim() == "ok"
    )
}
