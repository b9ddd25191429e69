//! `muster controller`: run Muster on a Kubernetes cluster.

use std::io::IsTerminal as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use muster_controller::run::{Options, run as run_controller};

/// Where the service account's namespace is mounted in a pod.
const POD_NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Arguments of `muster controller`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Kubeconfig to use (default: the in-cluster service account, else $KUBECONFIG or
    /// ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Manage the GpuJobs and LocalQueues of this namespace only.
    #[arg(long, value_name = "NAMESPACE")]
    namespace_scope: Option<String>,
    /// Address of /metrics, /livez and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_addr: SocketAddr,
    /// Schedule only while holding the Lease (run several replicas for high availability).
    #[arg(long)]
    leader_elect: bool,
    /// Namespace of the Lease (default: the pod's own namespace, else `default`).
    #[arg(long)]
    lease_namespace: Option<String>,
    /// Name of the Lease.
    #[arg(long, default_value = "muster-controller")]
    lease_name: String,
    /// Writes in flight at once.
    #[arg(long, default_value_t = 32)]
    write_concurrency: usize,
    /// Threads that read watch events and send writes (passes and forecasts run on threads
    /// of their own). 0: one per CPU.
    #[arg(long, value_name = "N", default_value_t = 0)]
    io_threads: usize,
    /// How gangs are placed: best-fit, spread, fragmentation-aware, or packing, random, fgd
    /// or fgd-gang (which also choose the node and GPU device of each pod asking for part of a
    /// GPU; fgd-gang also chooses a gang's block by the fragmentation it adds).
    #[arg(long, default_value = "best-fit", value_parser = clap::builder::PossibleValuesParser::new(muster_topology::POLICY_NAMES))]
    placement_policy: String,
    /// Address of the visibility API (HTTPS, reached through the API server's APIService
    /// v1alpha1.visibility.muster.dev).
    #[arg(long, default_value = "0.0.0.0:8443")]
    visibility_addr: SocketAddr,
    /// Serve no visibility API.
    #[arg(long)]
    no_visibility: bool,
    /// The visibility API's serving certificate (PEM; default: one made at start and signed
    /// by itself).
    #[arg(long, requires = "visibility_key")]
    visibility_cert: Option<PathBuf>,
    /// Its private key (PEM).
    #[arg(long, requires = "visibility_cert")]
    visibility_key: Option<PathBuf>,
    /// Seconds a new job waits before its first status (why it waits) is written; one
    /// admitted sooner gets no waiting status at all, saving a write. `muster jobs` and
    /// `muster explain` answer meanwhile. 0 writes it at once.
    #[arg(long, value_name = "SECONDS", default_value_t = muster_controller::status::FIRST_STATUS_AFTER_SECONDS.unsigned_abs())]
    first_status_after: u64,
    /// Seconds between two start-time forecasts of every waiting job (the ranges in job
    /// statuses, `muster eta`, `muster whatif`); each runs the cluster forward 32 times on one
    /// core beside the passes. 0 turns forecasts off.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    forecast_every: u64,
    /// Milliseconds a pass waits after a change, so that a burst of events makes one pass.
    /// Under a steady stream the passes are spaced by their own length as well (the next
    /// waits at least as long as the last took), whatever this is.
    #[arg(long, value_name = "MS", default_value_t = muster_controller::run::DEBOUNCE_MS)]
    debounce_ms: u64,
}

/// Runs the controller until SIGTERM or Ctrl-C.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    init_logging();
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if args.io_threads > 0 {
        runtime.worker_threads(args.io_threads);
    }
    let runtime = runtime
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let api_requests = muster_controller::metrics::ApiRequests::default();
        let client = client(args.kubeconfig.as_ref(), &api_requests).await?;
        // Where this replica runs, made unique per process: a pod name is unique, but two
        // processes outside a cluster may share a host name, or have neither.
        let base = std::env::var("POD_NAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .ok()
            .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok());
        let identity = muster_controller::run::lease_identity(base.as_deref());
        let lease_namespace = args
            .lease_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .or_else(|| std::fs::read_to_string(POD_NAMESPACE_FILE).ok())
            .map_or_else(|| "default".to_owned(), |ns| ns.trim().to_owned());
        let options = Options {
            namespace_scope: args.namespace_scope.clone(),
            metrics_addr: args.metrics_addr,
            leader_elect: args.leader_elect,
            lease_namespace,
            lease_name: args.lease_name.clone(),
            identity,
            write_concurrency: args.write_concurrency,
            placement_policy: args.placement_policy.clone(),
            api_requests,
            visibility: (!args.no_visibility).then(|| {
                muster_controller::visibility_server::VisibilityOptions {
                    addr: args.visibility_addr,
                    certificate: args
                        .visibility_cert
                        .clone()
                        .zip(args.visibility_key.clone()),
                    pod: std::env::var("POD_NAME")
                        .ok()
                        .zip(std::env::var("POD_NAMESPACE").ok())
                        .map(|(name, ns)| muster_api::ObjectRef::new(&ns, &name)),
                }
            }),
            first_status_after: std::time::Duration::from_secs(args.first_status_after),
            forecast_every: std::time::Duration::from_secs(args.forecast_every),
            debounce: std::time::Duration::from_millis(args.debounce_ms),
            ..Options::default()
        };
        tracing::info!(?options, "starting");
        run_controller(client, options, shutdown_signal()).await
    })?;
    Ok(ExitCode::SUCCESS)
}

async fn client(
    kubeconfig: Option<&PathBuf>,
    requests: &muster_controller::metrics::ApiRequests,
) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await
                .with_context(|| format!("using kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("no in-cluster service account and no usable kubeconfig")?,
    };
    requests
        .client(config)
        .context("building the Kubernetes client")
}

/// Resolves on SIGTERM (how Kubernetes stops a pod) or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
    tracing::info!("shutting down");
}

/// Structured logs: JSON when stderr is not a terminal (in a pod), text otherwise; the level
/// from `RUST_LOG` (default `info`).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if std::io::stderr().is_terminal() {
        builder.init();
    } else {
        builder.json().init();
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    /// `muster controller`'s arguments alone.
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: super::Args,
    }

    #[test]
    fn the_wait_after_a_change_is_the_library_s_unless_given_in_milliseconds()
    -> Result<(), clap::Error> {
        let default = Cli::try_parse_from(["controller"])?;
        assert_eq!(
            std::time::Duration::from_millis(default.args.debounce_ms),
            super::Options::default().debounce
        );
        let given = Cli::try_parse_from(["controller", "--debounce-ms", "50"])?;
        assert_eq!(given.args.debounce_ms, 50);
        assert!(Cli::try_parse_from(["controller", "--debounce-ms", "-1"]).is_err());
        Ok(())
    }
}
