//! `muster-load chaos`: Muster attacked as a whole. A real control plane, the fake kubelet,
//! several `muster controller` replicas with `--leader-elect` behind a fault-injecting proxy,
//! the kit playing the autoscaler, and a mixed, seeded workload; meanwhile replicas are killed
//! with SIGKILL, nodes die and come back, nodes are cut off by network partitions (NotReady
//! while their pods run on) and heal, API answers come late, kube-apiserver and etcd restart,
//! and an independent [`checker`] holds the cluster to its promises from the API server's
//! objects.
//!
//! Everything drawn at random — the workload, the fault sequence, kill, node-death and
//! partition times and targets, the autoscaler's answers — follows `--seed`; the interleaving
//! of processes does not.

pub mod autoscaler;
pub mod bad_input;
mod faults;
mod leadership;
mod leftovers;
pub mod replicas;
mod summary;
mod watches;
pub mod workload;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use k8s_openapi::api::batch::v1::Job;
use kube::Client;
use kube::api::{Api, PostParams};
use muster_api::GpuJob;
use muster_api::jobset::JobSet;
use tokio::task::JoinHandle;

pub use self::summary::{ChaosSummary, Kills, Restarts};

use self::autoscaler::Autoscaler;
use self::bad_input::{BadObject, Verdict};
use self::faults::Chaos;
use self::leftovers::{Stage, delete_jobs, wait_clean};
use self::replicas::Replicas;
use self::watches::{watch_jobs, watch_nodes, watch_pods};
use self::workload::{JobKind, Workload};
use muster_testkit::checker::{Checker, ViolationKind};
use muster_testkit::jobsets::FakeJobSetController;
use muster_testkit::kubelet::{FakeKubelet, KubeletOptions};
use muster_testkit::nodes::create_nodes;
use muster_testkit::proxy::{FaultPlan, FaultProxy};
use muster_testkit::{ClusterOptions, TestCluster, UpstreamCrd};

/// A broken promise found outside the checker's fold: its kind, object and detail.
type Found = (ViolationKind, String, String);

/// How long the run waits, after the last job ended and again after the jobs were deleted,
/// for the cluster to be left clean.
const CLEANUP: Duration = Duration::from_secs(120);

/// How to run.
#[derive(Clone, Debug)]
pub struct ChaosOptions {
    /// The control-plane binaries.
    pub kube_bin: PathBuf,
    /// Where `summary.json` and the logs go.
    pub out: PathBuf,
    /// The `muster` binary.
    pub muster: PathBuf,
    /// The seed of everything random.
    pub seed: u64,
    /// Jobs to submit.
    pub jobs: usize,
    /// Over how long they arrive.
    pub span: Duration,
    /// Blocks of 8 nodes of 8 GPUs.
    pub blocks: u32,
    /// Controller replicas.
    pub replicas: usize,
    /// The share of API requests answered with a fault.
    pub fault_rate: f64,
    /// The share of API requests answered correctly but 1–5 s late (a watch: its events
    /// delivered late).
    pub slow_rate: f64,
    /// The mean time between two kills of a replica.
    pub kill_every: Duration,
    /// The mean time between two node deaths.
    pub node_death_every: Duration,
    /// The mean time between two partitions of a node.
    pub partition_every: Duration,
    /// The mean time a partition lasts (each lasts half to one and a half times it).
    pub partition_for: Duration,
    /// Restart kube-apiserver (at 35 % of the span) and etcd (at 65 %).
    pub restart_control_plane: bool,
    /// Run the same seed without any fault first, for its wall time.
    pub baseline: bool,
    /// Drawn GpuJobs, queues and flavors (valid and not) applied during the run.
    pub bad_objects: usize,
    /// Give up after this long.
    pub timeout: Duration,
}

/// Runs the chaos run (after the fault-free baseline, when asked) and writes
/// `summary.json` into `options.out`.
pub async fn run(options: &ChaosOptions) -> anyhow::Result<ChaosSummary> {
    std::fs::create_dir_all(&options.out)
        .with_context(|| format!("creating {}", options.out.display()))?;
    let workload = Workload::generate(options.seed, options.jobs, options.span, options.blocks);
    let baseline = if options.baseline {
        let out = options.out.join("baseline");
        std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
        let summary = run_once(options, &workload, false, &out).await?;
        write_summary(&out, &summary)?;
        Some(summary)
    } else {
        None
    };
    let summary = run_once(options, &workload, true, &options.out)
        .await?
        .with_baseline(baseline.as_ref());
    write_summary(&options.out, &summary)?;
    Ok(summary)
}

fn write_summary(out: &Path, summary: &ChaosSummary) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(summary).context("encoding the summary")?;
    std::fs::write(out.join("summary.json"), json + "\n").context("writing summary.json")
}

/// A run's moving parts, started.
struct Harness {
    cluster: TestCluster,
    client: Client,
    proxy: FaultProxy,
    replicas: Replicas,
    first_starts: u64,
    checker: Arc<Mutex<Checker>>,
    watches: [JoinHandle<()>; 3],
    autoscaler: Autoscaler,
    generator: JoinHandle<anyhow::Result<()>>,
    bad_input: JoinHandle<Vec<(BadObject, Verdict)>>,
    start: Instant,
    /// The same moment by the wall clock, which the replicas' logs are stamped with.
    started_at: k8s_openapi::jiff::Timestamp,
    _kubelet: FakeKubelet,
    _jobset_controller: FakeJobSetController,
}

impl Harness {
    /// A cluster with the workload's queues and nodes, the kubelet, the proxy, the replicas,
    /// the checker's watches, the autoscaler and the job submitter.
    async fn start(
        options: &ChaosOptions,
        workload: &Workload,
        faults_on: bool,
        out: &Path,
    ) -> anyhow::Result<Harness> {
        let cluster = TestCluster::start_in(
            &options.kube_bin,
            // kube-controller-manager plays what a real cluster has: the garbage collector
            // and the pod garbage collector (pods bound to nodes that are gone, or
            // terminating on nodes tainted out-of-service); the taint eviction controller
            // deletes pods from nodes that stay unreachable past their tolerations.
            ClusterOptions {
                upstream_crds: &[UpstreamCrd::ProvisioningRequest, UpstreamCrd::JobSet],
                controller_manager: true,
                ..ClusterOptions::default()
            },
        )
        .await?;
        let client = cluster.client();
        workload.apply_queues(&client).await?;
        create_nodes(&client, &workload.nodes()).await?;
        // The JobSet controller a cluster that queues JobSets runs.
        let jobset_controller = FakeJobSetController::start(client.clone());
        let kubelet = FakeKubelet::start(
            client.clone(),
            KubeletOptions {
                max_start_delay: Duration::from_millis(300),
                max_in_flight: 64,
                ..KubeletOptions::default()
            },
        );
        let proxy = FaultProxy::start(
            client.clone(),
            FaultPlan {
                seed: options.seed,
                rate: options.fault_rate,
                slow_rate: options.slow_rate,
                ..FaultPlan::default()
            },
        )
        .await?;
        proxy.set_faults(faults_on);
        let kubeconfig = out.join("proxy.kubeconfig");
        std::fs::write(&kubeconfig, proxy.kubeconfig()).context("writing proxy.kubeconfig")?;
        let mut replicas = Replicas::new(&options.muster, &kubeconfig, out, options.replicas);
        replicas.start_all()?;
        let first_starts = replicas.starts();
        let start = Instant::now();
        let started_at = k8s_openapi::jiff::Timestamp::now();
        let checker = Arc::new(Mutex::new(Checker::new(
            workload.limits(),
            workload.meant_to_fail(),
        )));
        let watches = [
            tokio::spawn(watch_pods(client.clone(), Arc::clone(&checker), start)),
            tokio::spawn(watch_jobs(client.clone(), Arc::clone(&checker), start)),
            tokio::spawn(watch_nodes(client.clone(), Arc::clone(&checker), start)),
        ];
        let autoscaler = Autoscaler::start(client.clone(), options.seed);
        let generator = tokio::spawn(submit(client.clone(), workload.clone(), start));
        let drawn = if faults_on {
            bad_input::generate(options.seed, options.bad_objects)
        } else {
            Vec::new()
        };
        let bad_input = tokio::spawn(bad_input::apply_all(
            client.clone(),
            drawn,
            options.span,
            start,
            Arc::clone(&checker),
        ));
        Ok(Harness {
            cluster,
            client,
            proxy,
            replicas,
            first_starts,
            checker,
            watches,
            autoscaler,
            generator,
            bad_input,
            start,
            started_at,
            _kubelet: kubelet,
            _jobset_controller: jobset_controller,
        })
    }

    /// Whether every job was submitted and has ended.
    fn all_ended(&self) -> bool {
        self.generator.is_finished()
            && self.bad_input.is_finished()
            && self
                .checker
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .unended()
                == 0
    }
}

async fn run_once(
    options: &ChaosOptions,
    workload: &Workload,
    faults_on: bool,
    out: &Path,
) -> anyhow::Result<ChaosSummary> {
    let mut h = Harness::start(options, workload, faults_on, out).await?;
    let start = h.start;
    let mut chaos = Chaos::new(options, start, faults_on);
    let node_names: Vec<String> = workload.nodes().into_iter().map(|n| n.name).collect();
    let deadline = start + options.timeout;
    let mut ended_at = None;
    while Instant::now() < deadline {
        if h.all_ended() {
            ended_at = Some(start.elapsed());
            break;
        }
        if faults_on {
            chaos.step(options, &mut h, &node_names).await?;
        }
        h.checker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .tick(start.elapsed().as_secs_f64());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The end: every replica back, every node repaired and every partition healed, then the
    // cluster must come clean of live work; then the jobs are deleted, and nothing of them
    // may be left.
    chaos.end(&h.client).await;
    h.replicas.start_all()?;
    let mut found = wait_clean(&h.client, workload, Stage::Ended, Instant::now() + CLEANUP).await;
    let (drawn, failed) = own_tasks(&mut h).await;
    found.extend(failed);
    let (bad_stats, misjudged) = bad_input::judge_all(&h.client, &drawn).await;
    found.extend(misjudged);
    delete_jobs(&h.client, workload).await;
    found.extend(
        wait_clean(
            &h.client,
            workload,
            Stage::Deleted,
            Instant::now() + CLEANUP,
        )
        .await,
    );
    let at = start.elapsed().as_secs_f64();
    let mut checker = h.checker.lock().unwrap_or_else(PoisonError::into_inner);
    for (kind, object, detail) in found {
        checker.report(kind, object, at, detail);
    }
    for (from, to) in leadership::spells(
        out,
        h.replicas.count(),
        h.replicas.stops(),
        h.started_at,
        at,
    ) {
        checker.led(from, to);
    }
    checker.finish(at);
    for watch in &h.watches {
        watch.abort();
    }
    let panics = h
        .replicas
        .logs()
        .lines()
        .filter(|l| l.contains("panicked"))
        .count();
    chaos.restarts.replicas = h.replicas.starts() - h.first_starts;
    let mut violations = BTreeMap::new();
    for v in checker.violations() {
        *violations.entry(format!("{:?}", v.kind)).or_default() += 1;
    }
    let ends = checker.ends();
    Ok(ChaosSummary {
        seed: options.seed,
        faults_on,
        replicas: options.replicas,
        jobs: workload.jobs.len(),
        unended: workload
            .jobs
            .len()
            .saturating_sub(ends.values().sum::<usize>()),
        ends,
        kills: chaos.kills,
        faults: h.proxy.faults(),
        requests_forwarded: h.proxy.forwarded(),
        upstream_unreachable: h.proxy.upstream_errors(),
        restarts: chaos.restarts,
        node_deaths: chaos.node_deaths,
        partitions: chaos.partitions,
        partition_seconds: chaos.partition_seconds,
        autoscaler: h.autoscaler.stats(),
        bad_input: bad_stats,
        violations,
        violation_list: checker.violations().to_vec(),
        checker_relists: checker.relists().to_vec(),
        checker_blind_seconds: checker.blind_seconds(),
        checker_blind_by_kind: checker.blind_by_kind(),
        leaderless_seconds: checker.leaderless_seconds(at),
        panics,
        wall_seconds: ended_at.unwrap_or_else(|| start.elapsed()).as_secs_f64(),
        ..ChaosSummary::default()
    })
}

/// What the run's own tasks came to: the drawn objects applied, and a
/// [`ViolationKind::HarnessFailed`] for each task that failed — one that failed left its part
/// undone or unchecked.
async fn own_tasks(h: &mut Harness) -> (Vec<(BadObject, Verdict)>, Vec<Found>) {
    let (drawn, failed) = applied(&mut h.bad_input).await;
    let mut found: Vec<Found> = failed.into_iter().collect();
    if !h.generator.is_finished() {
        // Only when the run timed out: jobs it never submitted went unchecked.
        h.generator.abort();
    }
    if let Err(failed) = outcome("submitting the jobs", &mut h.generator)
        .await
        .and_then(|submitted| {
            submitted.map_err(|e| harness_failed("submitting the jobs", &format!("{e:#}")))
        })
    {
        found.push(failed);
    }
    for (watch, kind) in h.watches.iter().zip(["Pod", "GpuJob", "Node"]) {
        if watch.is_finished() {
            found.push(harness_failed(
                &format!("the checker's {kind} watch"),
                "ended before the run did",
            ));
        }
    }
    (drawn, found)
}

/// The drawn objects the bad-input task applied, with their verdicts; when the task failed
/// (a panic), none, and a [`ViolationKind::HarnessFailed`]: the objects it applied are then
/// not judged, and the run must not pass as though they were.
async fn applied(
    task: &mut JoinHandle<Vec<(BadObject, Verdict)>>,
) -> (Vec<(BadObject, Verdict)>, Option<Found>) {
    match outcome("applying the drawn objects", task).await {
        Ok(drawn) => (drawn, None),
        Err(failed) => (Vec::new(), Some(failed)),
    }
}

/// What a task of the run itself came to, once it has ended (waited for when not): its
/// result, or — when it panicked or was cancelled — a [`ViolationKind::HarnessFailed`],
/// since what it was to do or check was left undone.
async fn outcome<T>(what: &str, task: &mut JoinHandle<T>) -> Result<T, Found> {
    task.await.map_err(|e| {
        let how = match e.try_into_panic() {
            Ok(payload) => {
                let message = payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|m| (*m).to_owned()))
                    .unwrap_or_default();
                format!("panicked: {message}")
            }
            Err(_) => "was cancelled".to_owned(),
        };
        harness_failed(what, &how)
    })
}

fn harness_failed(what: &str, how: &str) -> Found {
    (
        ViolationKind::HarnessFailed,
        format!("Harness/{what}"),
        format!("{what}: {how}"),
    )
}

/// Submits every job at its time, as a GpuJob, a labelled Job or a labelled JobSet, retrying
/// through API server restarts.
async fn submit(client: Client, workload: Workload, start: Instant) -> anyhow::Result<()> {
    for job in &workload.jobs {
        tokio::time::sleep_until((start + job.at).into()).await;
        match job.kind {
            JobKind::GpuJob => {
                let api: Api<GpuJob> = Api::namespaced(client.clone(), &job.namespace);
                create(&api, &job.object()?).await;
            }
            JobKind::BatchJob => {
                let api: Api<Job> = Api::namespaced(client.clone(), &job.namespace);
                create(&api, &job.batch_job()?).await;
            }
            JobKind::JobSet(_) => {
                let api: Api<JobSet> = Api::namespaced(client.clone(), &job.namespace);
                create(&api, &job.jobset()?).await;
            }
        }
    }
    Ok(())
}

/// Creates `object`, again until the API server takes it (or has it already).
async fn create<K>(api: &Api<K>, object: &K)
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    loop {
        match api.create(&PostParams::default(), object).await {
            Ok(_) => break,
            Err(kube::Error::Api(e)) if e.code == 409 => break,
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{ViolationKind, applied, bad_input, outcome};

    #[tokio::test]
    async fn a_task_of_the_run_that_panicked_is_a_violation_not_an_empty_result() {
        let mut task = tokio::spawn(async {
            let drawn: Vec<u32> = Vec::new();
            assert!(!drawn.is_empty(), "a task of the run that breaks");
            drawn
        });
        let found = outcome("applying the drawn objects", &mut task).await;
        assert!(
            matches!(&found, Err((ViolationKind::HarnessFailed, _, detail))
                if detail.contains("panicked: a task of the run that breaks")),
            "{found:?}"
        );
        let mut fine = tokio::spawn(async { vec![1_u32] });
        assert_eq!(outcome("applying", &mut fine).await, Ok(vec![1]));
    }

    #[tokio::test]
    async fn a_panic_applying_the_drawn_objects_fails_the_run_rather_than_skip_their_judging() {
        let mut task = tokio::spawn(async {
            let drawn = bad_input::generate(1, 2);
            assert!(drawn.is_empty(), "the drawn objects' task breaks");
            Vec::new()
        });
        let (drawn, failed) = applied(&mut task).await;
        assert!(drawn.is_empty());
        assert!(
            matches!(&failed, Some((ViolationKind::HarnessFailed, object, _))
                if object == "Harness/applying the drawn objects"),
            "{failed:?}"
        );
    }
}
