//! `muster-load`: load runs of Muster on a real control plane.
//!
//! `muster-load kueue-baseline --kube-bin DIR --out DIR` reproduces Kueue's
//! scheduler-performance baseline (15,000 single-pod jobs on 30 ClusterQueues in 5 cohorts)
//! through a release build of `muster controller` and writes `summary.json` and `jobs.csv`;
//! `--workload job` submits each job as a labelled batch Job (created suspended, its pod made
//! by kube-controller-manager's Job controller) and measures it on its queue entry;
//! `--against-kueue KIT` first runs Kueue's own benchmark (built by the kueue-bench kit) and
//! writes both runs side by side with their ratios.
//!
//! `muster-load api-floor --kube-bin DIR` measures how fast a fresh API server on this
//! machine takes pod creates and patches, with nothing else running: the floor under the
//! baseline's figures.
//!
//! `muster-load chaos --kube-bin DIR --out DIR --seed N` runs a mixed workload through three
//! `muster controller` replicas while replicas are killed, API requests fail, nodes die and
//! the control plane restarts, and checks every promise of a gang queue from the API server's
//! side; `summary.json` lists the faults and every violation found.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use muster_load::api_floor::{FloorOptions, measure};
use muster_load::baseline::Baseline;
use muster_load::chaos::{self, ChaosOptions};
use muster_load::kueue_baseline::{RunOptions, Workload, run};

#[derive(Debug, Parser)]
#[command(
    name = "muster-load",
    about = "Load runs of Muster on a real control plane"
)]
enum Command {
    /// Kueue's scheduler-performance baseline through `muster controller`.
    KueueBaseline(BaselineArgs),
    /// Kill -9 of replicas, API faults, node deaths and control-plane restarts under a mixed
    /// workload, with an independent invariant checker.
    Chaos {
        /// The control-plane binaries; default $MUSTER_KUBE_BIN.
        #[arg(long, env = "MUSTER_KUBE_BIN")]
        kube_bin: PathBuf,
        /// Where summary.json and the replicas' logs go.
        #[arg(long)]
        out: PathBuf,
        /// The muster binary (default: the workspace's release build, built if missing).
        #[arg(long)]
        muster: Option<PathBuf>,
        /// The seed of the workload, the faults and the kills.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Jobs to submit.
        #[arg(long, default_value_t = 1000)]
        jobs: usize,
        /// Seconds over which the jobs arrive.
        #[arg(long, default_value_t = 480)]
        span: u64,
        /// Blocks of 8 nodes with 8 GPUs each.
        #[arg(long, default_value_t = 6)]
        blocks: u32,
        /// Controller replicas.
        #[arg(long, default_value_t = 3)]
        replicas: usize,
        /// Share of API requests answered with a fault.
        #[arg(long, default_value_t = 0.1)]
        fault_rate: f64,
        /// Share of the other API requests answered correctly but 1–5 s late (a watch: each
        /// of its events late).
        #[arg(long, default_value_t = 0.05)]
        slow_rate: f64,
        /// Mean seconds between two kills of a replica.
        #[arg(long, default_value_t = 15.0)]
        kill_every: f64,
        /// Mean seconds between two node deaths.
        #[arg(long, default_value_t = 30.0)]
        node_death_every: f64,
        /// Mean seconds between two partitions of a node (NotReady while its pods run on).
        #[arg(long, default_value_t = 60.0)]
        partition_every: f64,
        /// Mean seconds a partition lasts (each lasts half to one and a half times it).
        #[arg(long, default_value_t = 90.0)]
        partition_for: f64,
        /// Do not restart kube-apiserver and etcd mid-run.
        #[arg(long)]
        no_control_plane_restarts: bool,
        /// Skip the fault-free run of the same seed.
        #[arg(long)]
        no_baseline: bool,
        /// Drawn GpuJobs, queues and flavors (valid and not) applied during the run.
        #[arg(long, default_value_t = 200)]
        bad_objects: usize,
        /// Give up on a run after this many seconds.
        #[arg(long, default_value_t = 3600)]
        timeout: u64,
    },
    /// What each request of a job's life costs this machine's API server (rate, and
    /// kube-apiserver's and etcd's CPU a request), with nothing else running.
    ApiFloor {
        /// The control-plane binaries; default $MUSTER_KUBE_BIN.
        #[arg(long, env = "MUSTER_KUBE_BIN")]
        kube_bin: PathBuf,
        /// Jobs to walk through their requests (each kind is sent this many times).
        #[arg(long, default_value_t = 5000)]
        objects: usize,
        /// Requests in flight at once (the controller's default write concurrency).
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        /// Watchers of pods and of GpuJobs to keep open (a load run has a few of each).
        #[arg(long, default_value_t = 0)]
        watchers: usize,
        /// Write a CPU profile of kube-apiserver over the first two seconds of each kind into
        /// this directory (for `go tool pprof`); the profiler's own cost is then in the figures.
        #[arg(long)]
        profile: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    match main_inner() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("muster-load: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Runs `work` to its end, or until Ctrl-C or SIGTERM — which drops it, and with it any
/// control plane and controller it started. Tasks still running afterwards (watches, the
/// kubelet) are not waited for.
fn until_interrupted<T>(
    work: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let result = runtime.block_on(async {
        tokio::select! {
            result = work => result,
            () = interrupted() => anyhow::bail!("interrupted"),
        }
    });
    runtime.shutdown_timeout(Duration::from_secs(5));
    result
}

/// The options of `muster-load kueue-baseline`.
#[derive(Debug, clap::Args)]
struct BaselineArgs {
    /// The control-plane binaries (etcd, kube-apiserver, kube-scheduler, ...); default
    /// $MUSTER_KUBE_BIN.
    #[arg(long, env = "MUSTER_KUBE_BIN")]
    kube_bin: PathBuf,
    /// Where summary.json, jobs.csv and controller.log go.
    #[arg(long)]
    out: PathBuf,
    /// The muster binary (default: the workspace's release build, built if missing).
    #[arg(long)]
    muster: Option<PathBuf>,
    /// Scale every job set's count by this factor (1 is Kueue's baseline).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Make every job a gang of this many pods, sharing its CPUs evenly (1 is Kueue's
    /// baseline; GpuJobs only): the quota and the work stay the same, the pods multiply.
    #[arg(long, default_value_t = 1)]
    pods_per_job: u32,
    /// Nodes of 64 CPUs to run the pods on.
    #[arg(long, default_value_t = 12)]
    nodes: u32,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 1800)]
    timeout: u64,
    /// Submit each job as a GpuJob (`gpujob`) or as a labelled batch Job (`job`, its pod
    /// made by kube-controller-manager's Job controller).
    #[arg(long, default_value = "gpujob")]
    workload: String,
    /// kube-controller-manager's client rate limit, requests per second (its
    /// `--kube-api-qps`, burst half as much again); default Kubernetes' own, 20. Batch
    /// Jobs' pods are made and finished through it.
    #[arg(long)]
    controller_manager_qps: Option<u32>,
    /// How many Jobs kube-controller-manager's Job controller syncs at once (its
    /// `--concurrent-job-syncs`); default Kubernetes' own, 5. Each sync waits on its API
    /// requests, so under load these workers bound how fast batch Jobs start and finish.
    #[arg(long)]
    controller_manager_job_syncs: Option<u32>,
    /// kube-scheduler's client rate limit, requests per second (its `--kube-api-qps`, burst
    /// twice as much); default Kubernetes' own, 50. Every released pod is bound through it.
    #[arg(long)]
    scheduler_qps: Option<u32>,
    /// Take a 30-second CPU profile of kube-apiserver this many seconds after the first job
    /// is created, into OUT/apiserver.pprof (read it with `go tool pprof`).
    #[arg(long)]
    profile_api_server: Option<u64>,
    /// Kueue's own benchmark, built by the kueue-bench kit into this directory (its
    /// `run.sh`): run it first (into OUT/kueue), then Muster (into OUT/muster), one after the
    /// other, and write both side by side with their ratios (OUT/comparison.md).
    #[arg(long)]
    against_kueue: Option<PathBuf>,
    /// A further argument for `muster controller`, after the ones the run needs (repeat it:
    /// `--controller-arg=--forecast-every --controller-arg=0`).
    #[arg(long = "controller-arg", allow_hyphen_values = true)]
    controller_args: Vec<String>,
}

fn main_inner() -> anyhow::Result<()> {
    match Command::parse() {
        Command::KueueBaseline(args) => kueue_baseline(args),
        Command::Chaos {
            kube_bin,
            out,
            muster,
            seed,
            jobs,
            span,
            blocks,
            replicas,
            fault_rate,
            slow_rate,
            kill_every,
            node_death_every,
            partition_every,
            partition_for,
            no_control_plane_restarts,
            no_baseline,
            bad_objects,
            timeout,
        } => {
            let muster = match muster {
                Some(path) => path,
                None => release_build()?,
            };
            let options = ChaosOptions {
                kube_bin,
                out,
                muster,
                seed,
                jobs,
                span: Duration::from_secs(span),
                blocks,
                replicas,
                fault_rate,
                slow_rate,
                kill_every: Duration::from_secs_f64(kill_every.max(0.1)),
                node_death_every: Duration::from_secs_f64(node_death_every.max(0.1)),
                partition_every: Duration::from_secs_f64(partition_every.max(0.1)),
                partition_for: Duration::from_secs_f64(partition_for.max(0.0)),
                restart_control_plane: !no_control_plane_restarts,
                baseline: !no_baseline,
                bad_objects,
                timeout: Duration::from_secs(timeout),
            };
            let summary = until_interrupted(chaos::run(&options))?;
            println!(
                "{}",
                serde_json::to_string_pretty(&summary).context("encoding the summary")?
            );
            eprintln!("wrote {}", options.out.join("summary.json").display());
            eprintln!("{}", summary.headline());
            match summary.failures() {
                Some(failures) => anyhow::bail!("{failures}"),
                None => Ok(()),
            }
        }
        Command::ApiFloor {
            kube_bin,
            objects,
            concurrency,
            watchers,
            profile,
        } => {
            let options = FloorOptions {
                kube_bin,
                objects,
                concurrency,
                watchers,
                profile,
            };
            let floor = until_interrupted(measure(&options))?;
            println!(
                "{}",
                serde_json::to_string_pretty(&floor).context("encoding the figures")?
            );
            Ok(())
        }
    }
}

fn kueue_baseline(args: BaselineArgs) -> anyhow::Result<()> {
    let BaselineArgs {
        kube_bin,
        out,
        muster,
        scale,
        pods_per_job,
        nodes,
        timeout,
        workload,
        controller_manager_qps,
        controller_manager_job_syncs,
        scheduler_qps,
        profile_api_server,
        against_kueue,
        controller_args,
    } = args;
    let workload = Workload::parse(&workload)?;
    let muster = match muster {
        Some(path) => path,
        None => release_build()?,
    };
    let kueue = match &against_kueue {
        Some(kit) => {
            anyhow::ensure!(
                (scale - 1.0).abs() < f64::EPSILON && pods_per_job == 1,
                "--against-kueue runs Kueue's baseline as it is: leave --scale and --pods-per-job at 1"
            );
            let dir = out.join("kueue");
            eprintln!("running Kueue's benchmark into {}", dir.display());
            Some(muster_load::against_kueue::run_kueue(kit, &dir)?)
        }
        None => None,
    };
    let out = if kueue.is_some() {
        out.join("muster")
    } else {
        out
    };
    let options = RunOptions {
        kube_bin,
        out,
        muster,
        baseline: Baseline::kueue().scaled(scale).in_gangs_of(pods_per_job),
        nodes,
        timeout: Duration::from_secs(timeout),
        workload,
        controller_manager_qps,
        controller_manager_job_syncs,
        scheduler_qps,
        profile_api_server: profile_api_server.map(Duration::from_secs),
        controller_args,
    };
    let summary = until_interrupted(run(&options))?;
    println!(
        "{}",
        serde_json::to_string_pretty(&summary).context("encoding the summary")?
    );
    eprintln!("wrote {}", options.out.join("summary.json").display());
    if let Some(kueue) = &kueue {
        let table = muster_load::against_kueue::table(kueue, &summary);
        let path = options.out.join("../comparison.md");
        std::fs::write(&path, &table).with_context(|| format!("writing {}", path.display()))?;
        println!("{table}");
        eprintln!("wrote {}", path.display());
    }
    anyhow::ensure!(
        summary.finished == summary.jobs,
        "only {} of {} jobs finished",
        summary.finished,
        summary.jobs
    );
    Ok(())
}

/// The workspace's release `muster`, built (`cargo build --release -p muster`) first so that
/// it is never stale.
fn release_build() -> anyhow::Result<PathBuf> {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut build =
        std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    build
        .args(["build", "--release", "--locked", "-p", "muster"])
        .current_dir(&workspace);
    // `cargo run` hands its program variables of its own (CARGO_PKG_*, CARGO_MANIFEST_DIR, a
    // longer LD_LIBRARY_PATH); a build that saw them would not match the build `cargo run`
    // made, and each would rebuild the other's dependencies every time.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy().into_owned();
        let ours = name.starts_with("CARGO_")
            && !["CARGO_HOME", "CARGO_TARGET_DIR"].contains(&name.as_str())
            && !name.starts_with("CARGO_BUILD_")
            && !name.starts_with("CARGO_REGISTRIES_");
        if ours || name == "LD_LIBRARY_PATH" {
            build.env_remove(&name);
        }
    }
    let status = build
        .status()
        .context("running cargo build --release -p muster")?;
    anyhow::ensure!(status.success(), "cargo build --release -p muster failed");
    Ok(workspace.join("target/release/muster"))
}

/// Resolves on Ctrl-C or SIGTERM.
async fn interrupted() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}
