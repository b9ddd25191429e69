//! `muster-load chaos`: Muster attacked as a whole. A real control plane, the fake kubelet,
//! several `muster controller` replicas with `--leader-elect` behind a fault-injecting proxy,
//! the kit playing the autoscaler, and a mixed, seeded workload; meanwhile replicas are killed
//! with SIGKILL, nodes die and come back, kube-apiserver and etcd restart, and an independent
//! [`checker`] holds the cluster to its promises from the API server's objects.
//!
//! Everything drawn at random — the workload, the fault sequence, kill and node-death times and
//! targets, the autoscaler's answers — follows `--seed`; the interleaving of processes does not.

pub mod autoscaler;
pub mod bad_input;
pub mod checker;
pub mod proxy;
pub mod replicas;
pub mod workload;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Pod, PodTemplate, Service};
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use muster_api::{Amount, ClusterQueue, GpuJob, ProvisioningRequest};
use muster_sim::trace::Rng;
use serde::Serialize;

use self::autoscaler::{Autoscaler, AutoscalerStats};
use self::bad_input::{BadInputStats, BadKind, BadObject, Verdict};
use self::checker::{Checker, InFlight, JOB_LABEL, Violation, ViolationKind, pod_key};
use self::proxy::{FaultPlan, FaultProxy};
use self::replicas::Replicas;
use self::workload::Workload;
use crate::kubelet::{FakeKubelet, KubeletOptions};
use crate::nodes::{create_nodes, kill_node, repair_node};
use crate::{ClusterOptions, TestCluster};

/// How long a dead node stays dead.
const NODE_DOWN: Duration = Duration::from_secs(20);
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
    /// The mean time between two kills of a replica.
    pub kill_every: Duration,
    /// The mean time between two node deaths.
    pub node_death_every: Duration,
    /// Restart kube-apiserver (at 35 % of the span) and etcd (at 65 %).
    pub restart_control_plane: bool,
    /// Run the same seed without any fault first, for its wall time.
    pub baseline: bool,
    /// Drawn GpuJobs, queues and flavors (valid and not) applied during the run.
    pub bad_objects: usize,
    /// Give up after this long.
    pub timeout: Duration,
}

/// Kills of replicas.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Kills {
    /// In all.
    pub total: u32,
    /// Of the replica holding the Lease.
    pub leader: u32,
    /// Of a standby.
    pub standby: u32,
    /// While a release was in flight (a gang's pods made but not all ungated).
    pub during_release: u32,
    /// While an eviction or restart was in flight (pods of a gang being deleted).
    pub during_eviction: u32,
    /// While a ProvisioningRequest waited for its answer.
    pub during_provisioning: u32,
    /// With none of those in flight.
    pub idle: u32,
}

/// Restarts of processes.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Restarts {
    /// Replica starts after a kill.
    pub replicas: u64,
    /// kube-apiserver restarts.
    pub api_server: u32,
    /// etcd restarts.
    pub etcd: u32,
}

/// What one run measured (`summary.json`).
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChaosSummary {
    /// The seed.
    pub seed: u64,
    /// Whether faults were on (off: the baseline).
    pub faults_on: bool,
    /// Controller replicas.
    pub replicas: usize,
    /// Jobs submitted.
    pub jobs: usize,
    /// Jobs ended, by phase (and reason for Failed).
    pub ends: BTreeMap<String, usize>,
    /// Jobs that had not ended when the run stopped.
    pub unended: usize,
    /// Replica kills.
    pub kills: Kills,
    /// Faults injected by the proxy, by kind.
    pub faults: BTreeMap<String, u64>,
    /// Requests the proxy forwarded.
    pub requests_forwarded: u64,
    /// Requests the proxy could not forward (the API server was down): answered 502.
    pub upstream_unreachable: u64,
    /// Restarts.
    pub restarts: Restarts,
    /// Nodes killed (each repaired after 20 s).
    pub node_deaths: u32,
    /// The autoscaler's work.
    pub autoscaler: AutoscalerStats,
    /// What the drawn objects came to.
    pub bad_input: BadInputStats,
    /// Violations by kind.
    pub violations: BTreeMap<String, usize>,
    /// Every violation, with its object and time.
    pub violation_list: Vec<Violation>,
    /// The checker's relists of pods and jobs (kind, seconds into the run), the watches'
    /// first lists included: a report is read against them.
    pub checker_relists: Vec<(String, f64)>,
    /// Lines of the replicas' logs that report a panic.
    pub panics: usize,
    /// From the first submission to the last job's end, seconds.
    pub wall_seconds: f64,
    /// The same, for the same seed without faults (when run).
    pub baseline_wall_seconds: Option<f64>,
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
        Some(summary.wall_seconds)
    } else {
        None
    };
    let mut summary = run_once(options, &workload, true, &options.out).await?;
    summary.baseline_wall_seconds = baseline;
    write_summary(&options.out, &summary)?;
    Ok(summary)
}

fn write_summary(out: &Path, summary: &ChaosSummary) -> anyhow::Result<()> {
    let json = serde_json::to_string_pretty(summary).context("encoding the summary")?;
    std::fs::write(out.join("summary.json"), json + "\n").context("writing summary.json")
}

/// What the kill loop chose, for the summary.
struct Chaos {
    rng: Rng,
    kills: Kills,
    restarts: Restarts,
    node_deaths: u32,
    next_kill: Instant,
    next_node_death: Instant,
    /// Replicas to start again, and when.
    revive: Vec<(Instant, usize)>,
    /// Nodes to repair, and when.
    repair: Vec<(Instant, String)>,
    api_server_at: Option<Instant>,
    etcd_at: Option<Instant>,
}

/// A run's moving parts, started.
struct Harness {
    cluster: TestCluster,
    client: Client,
    proxy: FaultProxy,
    replicas: Replicas,
    first_starts: u64,
    checker: Arc<Mutex<Checker>>,
    watches: [tokio::task::JoinHandle<()>; 3],
    autoscaler: Autoscaler,
    generator: tokio::task::JoinHandle<anyhow::Result<()>>,
    bad_input: tokio::task::JoinHandle<Vec<(BadObject, Verdict)>>,
    start: Instant,
    _kubelet: FakeKubelet,
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
            // and the pod garbage collector (pods bound to nodes that are gone).
            ClusterOptions {
                provisioning_crd: true,
                controller_manager: true,
                ..ClusterOptions::default()
            },
        )
        .await?;
        let client = cluster.client();
        workload.apply_queues(&client).await?;
        create_nodes(&client, &workload.nodes()).await?;
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
        let bad_input = tokio::spawn(apply_bad_input(
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
            _kubelet: kubelet,
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
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The end: every replica back and every node repaired, then the cluster must come clean
    // of live work; then the jobs are deleted, and nothing of them may be left.
    for (_, node) in std::mem::take(&mut chaos.repair) {
        let _ = repair_node(&h.client, &node).await;
    }
    h.replicas.start_all()?;
    let mut leftovers =
        wait_clean(&h.client, workload, Stage::Ended, Instant::now() + CLEANUP).await;
    let drawn = (&mut h.bad_input).await.unwrap_or_default();
    let (bad_stats, misjudged) = judge_bad_input(&h.client, &drawn).await;
    leftovers.extend(misjudged);
    delete_jobs(&h.client, workload).await;
    leftovers.extend(
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
    for (kind, object, detail) in leftovers {
        checker.report(kind, object, at, detail);
    }
    checker.finish(at);
    for watch in &h.watches {
        watch.abort();
    }
    h.generator.abort();
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
        unended: workload.jobs.len() - ends.values().sum::<usize>(),
        ends,
        kills: chaos.kills,
        faults: h.proxy.faults(),
        requests_forwarded: h.proxy.forwarded(),
        upstream_unreachable: h.proxy.upstream_errors(),
        restarts: chaos.restarts,
        node_deaths: chaos.node_deaths,
        autoscaler: h.autoscaler.stats(),
        bad_input: bad_stats,
        violations,
        violation_list: checker.violations().to_vec(),
        checker_relists: checker.relists().to_vec(),
        panics,
        wall_seconds: ended_at.unwrap_or_else(|| start.elapsed()).as_secs_f64(),
        baseline_wall_seconds: None,
    })
}

fn secs(seconds: f64) -> Duration {
    Duration::from_secs_f64(seconds.clamp(0.0, 1e6))
}

impl Chaos {
    fn new(options: &ChaosOptions, start: Instant, faults_on: bool) -> Chaos {
        let mut rng = Rng::new(options.seed ^ 0xC4A0_5C4A_05C4_A05C);
        let next_kill = start + secs(rng.exponential(options.kill_every.as_secs_f64()));
        let next_node_death = start + secs(rng.exponential(options.node_death_every.as_secs_f64()));
        let restarts = faults_on && options.restart_control_plane;
        Chaos {
            rng,
            kills: Kills::default(),
            restarts: Restarts::default(),
            node_deaths: 0,
            next_kill,
            next_node_death,
            revive: Vec::new(),
            repair: Vec::new(),
            api_server_at: restarts.then(|| start + options.span.mul_f64(0.35)),
            etcd_at: restarts.then(|| start + options.span.mul_f64(0.65)),
        }
    }

    /// One turn of the chaos loop: whatever fell due.
    async fn step(
        &mut self,
        options: &ChaosOptions,
        h: &mut Harness,
        nodes: &[String],
    ) -> anyhow::Result<()> {
        let chaos = self;
        let client = h.client.clone();
        let (cluster, replicas) = (&mut h.cluster, &mut h.replicas);
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut chaos.revive)
            .into_iter()
            .partition(|(at, _)| *at <= now);
        chaos.revive = later;
        for (_, i) in due {
            replicas.start(i)?;
        }
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut chaos.repair)
            .into_iter()
            .partition(|(at, _)| *at <= now);
        chaos.repair = later;
        for (_, node) in due {
            if repair_node(&client, &node).await.is_err() {
                chaos.repair.push((now + Duration::from_secs(1), node));
            }
        }
        if chaos.api_server_at.is_some_and(|at| at <= now) {
            chaos.api_server_at = None;
            cluster.restart_apiserver().await?;
            chaos.restarts.api_server += 1;
        }
        if chaos.etcd_at.is_some_and(|at| at <= now) {
            chaos.etcd_at = None;
            cluster.restart_etcd().await?;
            chaos.restarts.etcd += 1;
        }
        if chaos.next_node_death <= now {
            chaos.next_node_death = now
                + secs(
                    chaos
                        .rng
                        .exponential(options.node_death_every.as_secs_f64()),
                );
            let down: HashSet<&String> = chaos.repair.iter().map(|(_, n)| n).collect();
            let pick =
                usize::try_from(chaos.rng.next_u64() % nodes.len().max(1) as u64).unwrap_or(0);
            if let Some(node) = nodes.get(pick).filter(|n| !down.contains(n))
                && kill_node(&client, node).await.is_ok()
            {
                chaos.node_deaths += 1;
                chaos.repair.push((now + NODE_DOWN, node.clone()));
            }
        }
        if chaos.next_kill <= now {
            kill(chaos, options, &client, replicas, &h.checker, &h.autoscaler).await;
        }
        Ok(())
    }
}

/// Kills a replica: waits up to 5 s for a release, eviction or provisioning step to be in
/// flight, then kills the leader (three times in five) or a random running replica, and
/// schedules its restart 1 to 8 s later.
async fn kill(
    chaos: &mut Chaos,
    options: &ChaosOptions,
    client: &Client,
    replicas: &mut Replicas,
    checker: &Mutex<Checker>,
    autoscaler: &Autoscaler,
) {
    let wanted = Instant::now() + Duration::from_secs(5);
    let mut busy = (InFlight::default(), 0);
    while Instant::now() < wanted {
        busy = (
            checker
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .in_flight(),
            autoscaler.unanswered(),
        );
        if busy.0.releases + busy.0.evictions + busy.1 > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let now = Instant::now();
    chaos.next_kill = now + secs(chaos.rng.exponential(options.kill_every.as_secs_f64()));
    let leader = Replicas::leader(client).await;
    let running = replicas.running_ones();
    let aim_at_leader = chaos.rng.unit() <= 0.6;
    let pick = usize::try_from(chaos.rng.next_u64() % running.len().max(1) as u64).unwrap_or(0);
    let target = match leader {
        Some(l) if aim_at_leader && running.contains(&l) => l,
        _ => match running.get(pick) {
            Some(&r) => r,
            None => return,
        },
    };
    replicas.kill(target);
    let restart = Duration::from_millis(1_000 + chaos.rng.next_u64() % 7_000);
    chaos.revive.push((now + restart, target));
    let kills = &mut chaos.kills;
    kills.total += 1;
    if leader == Some(target) {
        kills.leader += 1;
    } else {
        kills.standby += 1;
    }
    let (flight, provisioning) = busy;
    if flight.releases > 0 {
        kills.during_release += 1;
    }
    if flight.evictions > 0 {
        kills.during_eviction += 1;
    }
    if provisioning > 0 {
        kills.during_provisioning += 1;
    }
    if flight.releases + flight.evictions + provisioning == 0 {
        kills.idle += 1;
    }
    tracing::info!(
        replica = target,
        leader = leader == Some(target),
        "killed a replica"
    );
}

/// Applies the drawn objects evenly over `span`, each once (retried while the API server
/// cannot be reached); drawn jobs the API server stored are judged by [`judge_bad_input`],
/// not by the checker's end-of-run rules.
async fn apply_bad_input(
    client: Client,
    drawn: Vec<BadObject>,
    span: Duration,
    start: Instant,
    checker: Arc<Mutex<Checker>>,
) -> Vec<(BadObject, Verdict)> {
    let mut out = Vec::with_capacity(drawn.len());
    #[expect(clippy::cast_precision_loss, reason = "spacing in seconds")]
    let gap = span.as_secs_f64() / drawn.len().max(1) as f64;
    for (i, object) in drawn.into_iter().enumerate() {
        #[expect(clippy::cast_precision_loss, reason = "spacing in seconds")]
        let at = start + secs(gap * i as f64);
        tokio::time::sleep_until(at.into()).await;
        if object.kind == BadKind::GpuJob {
            checker
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .judge_elsewhere(format!("{}/{}", bad_input::NAMESPACE, object.name));
        }
        for _ in 0..60 {
            match bad_input::apply(&client, &object).await {
                Ok(verdict) => {
                    out.push((object, verdict));
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    }
    out
}

/// Reads every stored drawn object back and judges what the controller made of it.
async fn judge_bad_input(
    client: &Client,
    drawn: &[(BadObject, Verdict)],
) -> (BadInputStats, Vec<(ViolationKind, String, String)>) {
    let mut stats = BadInputStats::default();
    let mut found = Vec::new();
    for (object, verdict) in drawn {
        *stats.drawn.entry(format!("{:?}", object.kind)).or_default() += 1;
        match verdict {
            Verdict::Refused(_) => stats.refused += 1,
            Verdict::Valid => stats.valid += 1,
            Verdict::Invalid(_) => stats.invalid += 1,
            Verdict::Unreadable(_) => stats.unreadable += 1,
        }
        // Conditions may lag a pass behind: a few looks before a verdict.
        let mut problem = None;
        for _ in 0..10 {
            problem = bad_input::judge(client, object, verdict).await;
            if problem.is_none() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        if let Some(problem) = problem {
            let kind = match verdict {
                Verdict::Unreadable(_) => ViolationKind::Unreadable,
                Verdict::Valid => ViolationKind::ValidReportedInvalid,
                _ => ViolationKind::InvalidNotReported,
            };
            let field = if object.field.is_empty() {
                "no field changed".to_owned()
            } else {
                format!(
                    "{} = {}",
                    object.field,
                    pointer(&object.value, &object.field)
                )
            };
            found.push((
                kind,
                format!("{:?}/{}", object.kind, object.name),
                format!("{field}: {problem}"),
            ));
        }
    }
    (stats, found)
}

/// The value at JSON `pointer` in `value`, as JSON text.
fn pointer(value: &serde_json::Value, pointer: &str) -> String {
    value
        .pointer(pointer)
        .map_or_else(|| "(unset)".to_owned(), ToString::to_string)
}

/// Submits every job at its time, retrying through API server restarts.
async fn submit(client: Client, workload: Workload, start: Instant) -> anyhow::Result<()> {
    for job in &workload.jobs {
        tokio::time::sleep_until((start + job.at).into()).await;
        let object = job.object()?;
        let api: Api<GpuJob> = Api::namespaced(client.clone(), &job.namespace);
        loop {
            match api.create(&PostParams::default(), &object).await {
                Ok(_) => break,
                Err(kube::Error::Api(e)) if e.code == 409 => break,
                Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    }
    Ok(())
}

/// What the checker hears from one watch: a whole list (the watch's start, or a relist after
/// it restarted past what the API server still remembers, as after the API server's
/// restart), a change, or a deletion.
enum Heard<K> {
    Listed(Vec<K>),
    Changed(K),
    Gone(K),
}

/// Watches `api` for the run, telling `hear` (with the checker locked and the seconds into
/// the run) each thing heard. A list is handed over whole, so that the checker judges it as
/// one moment of the cluster.
async fn watch_whole<K>(
    api: Api<K>,
    config: watcher::Config,
    checker: Arc<Mutex<Checker>>,
    start: Instant,
    hear: impl Fn(&mut Checker, Heard<K>, f64),
) where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let mut events = std::pin::pin!(watcher::watcher(api, config).default_backoff());
    let mut relist: Option<Vec<K>> = None;
    while let Some(event) = events.next().await {
        let Ok(event) = event else { continue };
        let heard = match event {
            watcher::Event::Init => {
                relist = Some(Vec::new());
                continue;
            }
            watcher::Event::InitApply(object) => {
                relist.get_or_insert_with(Vec::new).push(object);
                continue;
            }
            watcher::Event::InitDone => Heard::Listed(relist.take().unwrap_or_default()),
            watcher::Event::Apply(object) => Heard::Changed(object),
            watcher::Event::Delete(object) => Heard::Gone(object),
        };
        let at = start.elapsed().as_secs_f64();
        hear(
            &mut checker.lock().unwrap_or_else(PoisonError::into_inner),
            heard,
            at,
        );
    }
}

async fn watch_pods(client: Client, checker: Arc<Mutex<Checker>>, start: Instant) {
    let config = watcher::Config::default().labels(JOB_LABEL);
    watch_whole(
        Api::<Pod>::all(client),
        config,
        checker,
        start,
        |c, heard, at| match heard {
            Heard::Listed(pods) => c.relist(&pods, at),
            Heard::Changed(pod) => c.pod(&pod, at),
            Heard::Gone(pod) => {
                if let Some(key) = pod_key(&pod) {
                    c.pod_gone(&key);
                }
            }
        },
    )
    .await;
}

async fn watch_nodes(client: Client, checker: Arc<Mutex<Checker>>, start: Instant) {
    let api: Api<k8s_openapi::api::core::v1::Node> = Api::all(client);
    let config = watcher::Config::default();
    watch_whole(api, config, checker, start, |c, heard, _| match heard {
        Heard::Listed(nodes) => {
            c.nodes_listed(nodes.into_iter().filter_map(|n| n.metadata.name).collect());
        }
        Heard::Changed(node) => {
            if let Some(name) = node.metadata.name.as_deref() {
                c.node_seen(name);
            }
        }
        Heard::Gone(node) => {
            if let Some(name) = node.metadata.name.as_deref() {
                c.node_gone(name);
            }
        }
    })
    .await;
}

async fn watch_jobs(client: Client, checker: Arc<Mutex<Checker>>, start: Instant) {
    let config = watcher::Config::default();
    watch_whole(
        Api::<GpuJob>::all(client),
        config,
        checker,
        start,
        |c, heard, at| match heard {
            Heard::Listed(jobs) => c.jobs_listed(&jobs, at),
            Heard::Changed(job) => c.job(&job, at),
            Heard::Gone(job) => {
                if let (Some(namespace), Some(name)) = (&job.metadata.namespace, &job.metadata.name)
                {
                    c.job_gone(&format!("{namespace}/{name}"));
                }
            }
        },
    )
    .await;
}

/// What the end of a run checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Every job ended: no live pod, no PodTemplate or ProvisioningRequest, every
    /// ClusterQueue's usage and admitted count at zero.
    Ended,
    /// Every job deleted: none of them, their pods or Services is left either.
    Deleted,
}

/// Waits until `stage` holds, or until `deadline`; returns what is still wrong then.
async fn wait_clean(
    client: &Client,
    workload: &Workload,
    stage: Stage,
    deadline: Instant,
) -> Vec<(ViolationKind, String, String)> {
    loop {
        let found = leftovers(client, workload, stage).await;
        if found.is_empty() || Instant::now() >= deadline {
            return found;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Deletes every GpuJob of the workload's namespaces, as their users would.
async fn delete_jobs(client: &Client, workload: &Workload) {
    for queue in &workload.queues {
        let api: Api<GpuJob> = Api::namespaced(client.clone(), &queue.name);
        for _ in 0..10 {
            if api
                .delete_collection(&kube::api::DeleteParams::default(), &ListParams::default())
                .await
                .is_ok()
            {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

async fn leftovers(
    client: &Client,
    workload: &Workload,
    stage: Stage,
) -> Vec<(ViolationKind, String, String)> {
    let mut found = Vec::new();
    let namespaces: BTreeSet<&str> = workload.queues.iter().map(|q| q.name.as_str()).collect();
    for namespace in namespaces {
        let names = |kind: &str, list: Result<Vec<(String, bool)>, kube::Error>| match list {
            Ok(names) => names
                .into_iter()
                .filter(|(_, live)| *live || stage == Stage::Deleted)
                .map(|(n, _)| {
                    (
                        ViolationKind::LeftBehind,
                        format!("{kind}/{namespace}/{n}"),
                        format!("{stage:?}"),
                    )
                })
                .collect::<Vec<_>>(),
            Err(e) => vec![(
                ViolationKind::LeftBehind,
                format!("{kind}/{namespace}"),
                format!("could not list: {e}"),
            )],
        };
        found.extend(names("Pod", list::<Pod>(client, namespace, live_pod).await));
        found.extend(names(
            "PodTemplate",
            list::<PodTemplate>(client, namespace, |_| true).await,
        ));
        found.extend(names(
            "ProvisioningRequest",
            list::<ProvisioningRequest>(client, namespace, |_| true).await,
        ));
        found.extend(names(
            "Service",
            list::<Service>(client, namespace, |_| false).await,
        ));
        found.extend(names(
            "GpuJob",
            list::<GpuJob>(client, namespace, |_| false).await,
        ));
    }
    let queues: Api<ClusterQueue> = Api::all(client.clone());
    match queues.list(&ListParams::default()).await {
        Ok(list) => {
            for queue in list {
                let name = queue.metadata.name.clone().unwrap_or_default();
                let status = queue.status.unwrap_or_default();
                let used: Vec<String> = status
                    .flavors_usage
                    .iter()
                    .flat_map(|f| f.resources.iter().map(move |r| (f, r)))
                    .filter(|(_, r)| Amount::parse(&r.total.0).map_or(true, |a| a.milli() != 0))
                    .map(|(f, r)| format!("{}/{}={}", f.name, r.name, r.total.0))
                    .collect();
                if !used.is_empty() || status.admitted_jobs != 0 {
                    found.push((
                        ViolationKind::UsageNotZero,
                        format!("ClusterQueue/{name}"),
                        format!(
                            "admittedJobs {}, usage [{}]",
                            status.admitted_jobs,
                            used.join(", ")
                        ),
                    ));
                }
            }
        }
        Err(e) => found.push((
            ViolationKind::UsageNotZero,
            "ClusterQueue".to_owned(),
            format!("could not list: {e}"),
        )),
    }
    found
}

/// A pod that has not ended.
fn live_pod(pod: &Pod) -> bool {
    !matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// The names of the objects of kind `K` in `namespace`, each with whether it counts while
/// the jobs still exist (`live`).
async fn list<K>(
    client: &Client,
    namespace: &str,
    live: fn(&K) -> bool,
) -> Result<Vec<(String, bool)>, kube::Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    Ok(api
        .list(&ListParams::default())
        .await?
        .into_iter()
        .filter_map(|o| Some((o.meta().name.clone()?, live(&o))))
        .collect())
}
