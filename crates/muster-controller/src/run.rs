//! The controller process: watches feed the [`State`]'s index, the leader's scheduling loop plans
//! passes and hands their actions to the [`Executor`], and an HTTP server answers probes and
//! metrics.
//!
//! Standbys watch too, so their caches are warm when they win the lease. The loop runs only
//! while this replica leads and every required cache is synced; the executor checks the lease
//! before every request.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, PodTemplate};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::scheduling::v1alpha2::PodGroup as SchedulingPodGroup;
use kube::Client;
use kube::api::{Api, ListParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::watcher::{self, Event};
use muster_api::jobset::JobSet;
use muster_api::{ClusterQueue, Cohort, GpuJob, LocalQueue, ProvisioningRequest, ResourceFlavor};
use serde::de::DeserializeOwned;
use tokio::sync::{Semaphore, watch};

use crate::executor::Executor;
use crate::index::{BatchJob, ChildJob, Indexed, Kind};
use crate::lean::Lean;
use crate::metrics::{ApiRequests, Metrics};
use crate::plan::plan;
pub use crate::shared::Shared;
use crate::state::State;

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Manage GpuJobs and LocalQueues of this namespace only (nodes, pods and cluster-wide
    /// objects are still watched everywhere: capacity is cluster-wide).
    pub namespace_scope: Option<String>,
    /// Where `/metrics`, `/livez` and `/readyz` are served.
    pub metrics_addr: SocketAddr,
    /// Run the loop only while holding the Lease.
    pub leader_elect: bool,
    /// The Lease's namespace.
    pub lease_namespace: String,
    /// The Lease's name.
    pub lease_name: String,
    /// This replica's identity in the Lease: unique per process (see [`lease_identity`]).
    pub identity: String,
    /// Wait this long after a change before a pass, so a burst of events makes one pass.
    pub debounce: Duration,
    /// A pass at least this often (timeouts and backoffs expire without events).
    pub tick: Duration,
    /// Actions in flight at once.
    pub write_concurrency: usize,
    /// How gangs are placed: one of [`muster_topology::POLICY_NAMES`] (`best-fit` by
    /// default; `packing`, `random` and `fgd` also choose the node and GPU device of each pod
    /// that asks for part of a GPU).
    pub placement_policy: String,
    /// Counts the API requests of the client given to [`run`] when it was built with
    /// [`ApiRequests::client`] (exported as `muster_api_requests_total`).
    pub api_requests: ApiRequests,
    /// Where the visibility API is served; `None`: it is not.
    pub visibility: Option<crate::visibility_server::VisibilityOptions>,
    /// How long a new job waits before its first status is written, when it still waits
    /// then (see [`crate::status::FIRST_STATUS_AFTER_SECONDS`]).
    pub first_status_after: Duration,
    /// How often the leader forecasts every waiting job's start (see
    /// [`crate::forecasting`]), at most: after a forecast that took long the next waits three
    /// times as long as it took; zero: never (no ranges in statuses, `muster eta` and
    /// `muster whatif` answer that forecasts are off).
    pub forecast_every: Duration,
}

/// How long a pass waits after a change by default, milliseconds ([`Options::debounce`]).
pub const DEBOUNCE_MS: u64 = 200;

impl Default for Options {
    fn default() -> Options {
        Options {
            namespace_scope: None,
            metrics_addr: SocketAddr::from(([0, 0, 0, 0], 8080)),
            leader_elect: false,
            lease_namespace: "default".to_owned(),
            lease_name: "muster-controller".to_owned(),
            identity: lease_identity(None),
            debounce: Duration::from_millis(DEBOUNCE_MS),
            tick: Duration::from_secs(5),
            write_concurrency: 32,
            placement_policy: "best-fit".to_owned(),
            api_requests: ApiRequests::default(),
            visibility: None,
            first_status_after: Duration::from_secs(
                crate::status::FIRST_STATUS_AFTER_SECONDS.unsigned_abs(),
            ),
            forecast_every: Duration::from_secs(60),
        }
    }
}

/// A Lease identity unique to this process: `base_suffix`, where `base` names where it runs
/// (the pod name, else the host name) and `suffix` is random per process, as client-go does.
///
/// Two replicas must never share an identity: the lease manager takes a Lease held under its
/// own identity as its own, so two processes started with the same name (two operators running
/// the controller from their machines, or two processes on one host) would both lead and
/// release the same gangs.
pub fn lease_identity(base: Option<&str>) -> String {
    use std::hash::{BuildHasher as _, Hasher as _};
    let base = base
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .unwrap_or("muster");
    // RandomState is seeded from the operating system's randomness once per process; the
    // process id and the time keep two processes apart even if that seeding were weak.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    if let Ok(elapsed) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        hasher.write_u128(elapsed.as_nanos());
    }
    format!("{base}_{:016x}", hasher.finish())
}

/// Keeps one kind's cache: folds every watch event into the index and wakes the loop.
async fn watch_kind<K>(api: Api<K>, shared: Arc<Shared>)
where
    K: Indexed + DeserializeOwned,
{
    watch_selected(api, watcher::Config::default(), shared).await;
}

/// [`watch_kind`] for the objects `config` selects.
async fn watch_selected<K>(api: Api<K>, config: watcher::Config, shared: Arc<Shared>)
where
    K: Indexed + DeserializeOwned,
{
    // Nothing Muster reads is in an object's managed fields, often its largest part: passed
    // over as the events are parsed, the index never holds them.
    let stream = watcher::watcher(crate::lean::lean(&api), config).default_backoff();
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Init) => shared.state().relist_begin::<K>(),
            Ok(Event::InitApply(Lean(object)) | Event::Apply(Lean(object))) => {
                shared.state().apply(object);
            }
            Ok(Event::Delete(Lean(object))) => shared.state().delete(&object),
            Ok(Event::InitDone) => {
                shared.state().relist_done::<K>();
                tracing::info!(kind = ?K::KIND, "cache synced");
            }
            Err(e) => {
                tracing::warn!(kind = ?K::KIND, error = %e, "watch failed; retrying");
                shared.metrics.action("watch", false);
            }
        }
        shared.wake.notify_one();
    }
}

fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Starts a watch per kind. ProvisioningRequests are watched once their API answers.
async fn start_watches(client: &Client, options: &Options, shared: &Arc<Shared>) {
    let ns = options.namespace_scope.as_deref();
    let s = || Arc::clone(shared);
    tokio::spawn(watch_kind(scoped::<GpuJob>(client, ns), s()));
    tokio::spawn(watch_kind(scoped::<LocalQueue>(client, ns), s()));
    tokio::spawn(watch_kind(Api::<ClusterQueue>::all(client.clone()), s()));
    tokio::spawn(watch_kind(Api::<ResourceFlavor>::all(client.clone()), s()));
    tokio::spawn(watch_kind(Api::<Cohort>::all(client.clone()), s()));
    tokio::spawn(watch_kind(Api::<Node>::all(client.clone()), s()));
    tokio::spawn(watch_kind(Api::<Pod>::all(client.clone()), s()));
    tokio::spawn(watch_kind(Api::<Namespace>::all(client.clone()), s()));
    tokio::spawn(watch_kind(Api::<PriorityClass>::all(client.clone()), s()));
    // Only Jobs labelled with a queue are Muster's; no other Job is ever read.
    let labelled = watcher::Config::default().labels(muster_api::wire::QUEUE_NAME_LABEL);
    tokio::spawn(watch_selected(
        scoped::<BatchJob>(client, ns),
        labelled,
        s(),
    ));
    // The first probes are awaited, so that a served API is expected before the first pass.
    let requests: Api<ProvisioningRequest> = scoped(client, ns);
    let start_requests = {
        let client = client.clone();
        let ns = ns.map(str::to_owned);
        move |requests, shared| watch_provisioning(&client, ns.as_deref(), requests, shared)
    };
    when_served(
        requests,
        "ProvisioningRequests",
        "is the autoscaling.x-k8s.io CRD installed?); no capacity is bought until they are",
        start_requests,
        s(),
    )
    .await;
    let jobsets: Api<JobSet> = scoped(client, ns);
    when_served(
        jobsets,
        "JobSets",
        "is the jobset.x-k8s.io CRD installed?); no JobSet is queued until they are",
        watch_jobsets,
        s(),
    )
    .await;
    let groups: Api<SchedulingPodGroup> = scoped(client, ns);
    when_served(
        groups,
        "scheduling.k8s.io/v1alpha2 PodGroups",
        "Kubernetes 1.36 serves them with the GenericWorkload feature gate and --runtime-config=scheduling.k8s.io/v1alpha2=true); pods that name one are not queued until they are",
        watch_scheduling_groups,
        s(),
    )
    .await;
}

/// Starts the watch of `scheduling.k8s.io` PodGroups labelled with a queue (KEP-4671), and
/// makes the index wait for it before the next pass.
fn watch_scheduling_groups(groups: Api<SchedulingPodGroup>, shared: Arc<Shared>) {
    shared.state().expect_kind(Kind::SchedulingPodGroup);
    let labelled = watcher::Config::default().labels(muster_api::wire::QUEUE_NAME_LABEL);
    tokio::spawn(watch_selected(groups, labelled, shared));
}

/// Starts `start` (the watches of an optional API) once `api` answers: at once when the
/// first probes find it served, else from a background probe (see [`watch_when_served`]).
/// `what` names the objects and `hint` says, after "not served (", what to check and what
/// waits meanwhile.
async fn when_served<K, F>(
    api: Api<K>,
    what: &'static str,
    hint: &'static str,
    start: F,
    shared: Arc<Shared>,
) where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    F: FnOnce(Api<K>, Arc<Shared>) + Send + 'static,
{
    let mut answer = served(&api).await;
    // An API server that fails the probe (busy, restarting, a load balancer timing out) has
    // not said the API is missing: ask again before deciding.
    for _ in 0..PROBE_RETRIES {
        if answer != Served::Unknown {
            break;
        }
        tokio::time::sleep(PROBE_RETRY).await;
        answer = served(&api).await;
    }
    match answer {
        Served::Yes => start(api, shared),
        Served::No => {
            tracing::warn!("{what} are not served ({hint}");
            tokio::spawn(watch_when_served(api, what, start, shared));
        }
        Served::Unknown => {
            tracing::warn!(
                "the {what} API did not answer; it is probed again, and waits on it until it answers"
            );
            tokio::spawn(watch_when_served(api, what, start, shared));
        }
    }
}

/// Starts the watches of JobSets labelled with a queue and of JobSets' child Jobs (the
/// completions they keep, see [`ChildJob`]), and makes the index wait for both before the
/// next pass.
fn watch_jobsets(jobsets: Api<JobSet>, shared: Arc<Shared>) {
    {
        let mut state = shared.state();
        state.expect_kind(Kind::JobSet);
        state.expect_kind(Kind::ChildJob);
    }
    let children: Api<ChildJob> = match jobsets.namespace() {
        Some(ns) => Api::namespaced(jobsets.clone().into_client(), ns),
        None => Api::all(jobsets.clone().into_client()),
    };
    let labelled = watcher::Config::default().labels(muster_api::wire::QUEUE_NAME_LABEL);
    tokio::spawn(watch_selected(jobsets, labelled, Arc::clone(&shared)));
    let of_jobsets = watcher::Config::default().labels(muster_api::jobset::JOBSET_NAME_LABEL);
    tokio::spawn(watch_selected(children, of_jobsets, shared));
}

/// Starts the watches of ProvisioningRequests and of the PodTemplates they name (Muster's,
/// selected by their job label), and makes the index wait for both before the next pass.
fn watch_provisioning(
    client: &Client,
    namespace: Option<&str>,
    requests: Api<ProvisioningRequest>,
    shared: Arc<Shared>,
) {
    {
        let mut state = shared.state();
        state.expect_kind(Kind::ProvisioningRequest);
        state.expect_kind(Kind::PodTemplate);
    }
    let templates: Api<PodTemplate> = scoped(client, namespace);
    let selected = watcher::Config::default().labels(muster_api::wire::JOB_LABEL);
    tokio::spawn(watch_selected(templates, selected, Arc::clone(&shared)));
    tokio::spawn(watch_kind(requests, shared));
}

/// What a probe of an optional API found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Served {
    /// It answered a list.
    Yes,
    /// The API server says there is no such resource (404): the CRD is not installed.
    No,
    /// Any other failure: nothing is known.
    Unknown,
}

/// Whether an optional API answers.
async fn served<K>(api: &Api<K>) -> Served
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.list(&ListParams::default().limit(1)).await {
        Ok(_) => Served::Yes,
        Err(kube::Error::Api(status)) if status.code == 404 => Served::No,
        Err(e) => {
            tracing::debug!(error = %e, "probing an optional API");
            Served::Unknown
        }
    }
}

/// How often an optional API is probed again while it is not served.
const PROBE_EVERY: Duration = Duration::from_secs(60);

/// How often it is probed while probes fail without an answer.
const PROBE_RETRY: Duration = Duration::from_secs(2);

/// Probes at start-up before a failing API is left to the background probe.
const PROBE_RETRIES: u32 = 5;

/// Starts `start` once `api` answers, probing every [`PROBE_EVERY`] while it is not served
/// (a CRD may be installed after Muster) and every [`PROBE_RETRY`] while probes fail.
async fn watch_when_served<K, F>(api: Api<K>, what: &'static str, start: F, shared: Arc<Shared>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    F: FnOnce(Api<K>, Arc<Shared>),
{
    let mut wait = PROBE_RETRY;
    loop {
        tokio::time::sleep(wait).await;
        match served(&api).await {
            Served::Yes => {
                tracing::info!("{what} are served now: watching them");
                start(api, shared);
                return;
            }
            Served::No => wait = PROBE_EVERY,
            Served::Unknown => wait = PROBE_RETRY,
        }
    }
}

/// Leadership: a channel that holds whether this replica may write (see [`crate::leadership`]),
/// and the task that gives the Lease up once every receiver is gone.
fn leadership(
    client: &Client,
    options: &Options,
) -> (watch::Receiver<bool>, tokio::task::JoinHandle<()>) {
    if !options.leader_elect {
        let (tx, rx) = watch::channel(true);
        // The sender lives as long as the process: without election this replica leads.
        let keep = tokio::spawn(async move {
            tx.closed().await;
        });
        return (rx, keep);
    }
    crate::leadership::start(
        client.clone(),
        crate::leadership::LeaseParams {
            namespace: options.lease_namespace.clone(),
            name: options.lease_name.clone(),
            identity: options.identity.clone(),
        },
    )
}

/// Runs the controller until `shutdown` resolves.
pub async fn run(
    client: Client,
    options: Options,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let mut state = State::with_placement_policy(&options.placement_policy)
        .map_err(|e| anyhow::anyhow!("--placement-policy: {e}"))?;
    state.set_first_status_after(
        i64::try_from(options.first_status_after.as_secs()).unwrap_or(i64::MAX),
    );
    let shared = Arc::new(Shared {
        metrics: Metrics::counting(options.api_requests.clone()),
        state: Mutex::new(state),
        ..Shared::default()
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let http = tokio::spawn(serve(
        options.metrics_addr,
        Arc::clone(&shared),
        stop_rx.clone(),
    ));
    start_watches(&client, &options, &shared).await;
    let (leader, lease) = leadership(&client, &options);
    let visibility = options.visibility.clone().map(|visibility| {
        let lease_name = options
            .leader_elect
            .then(|| (options.lease_namespace.clone(), options.lease_name.clone()));
        tokio::spawn(crate::visibility_server::serve(
            visibility,
            client.clone(),
            Arc::clone(&shared),
            leader.clone(),
            lease_name,
            stop_rx.clone(),
        ))
    });
    if !options.forecast_every.is_zero() {
        tokio::spawn(forecaster(
            Arc::clone(&shared),
            leader.clone(),
            options.forecast_every,
            stop_rx.clone(),
        ));
    }
    let reporter = Reporter {
        controller: "muster".to_owned(),
        instance: Some(options.identity.clone()),
    };
    let executor = Executor::new(
        client.clone(),
        leader.clone(),
        Some(Recorder::new(client.clone(), reporter)),
    );
    scheduling_loop(&shared, &client, executor, leader, &options, stop_rx).await;
    // Every holder of the leadership channel is gone now: the lease manager gives the Lease
    // up, so that a standby takes over at once rather than after the Lease expires.
    if tokio::time::timeout(Duration::from_secs(5), lease)
        .await
        .is_err()
    {
        tracing::warn!(
            "the Lease was not given up within 5 s; a standby takes over when it expires"
        );
    }
    let _ = http.await;
    if let Some(visibility) = visibility {
        let _ = tokio::time::timeout(Duration::from_secs(5), visibility).await;
    }
    Ok(())
}

async fn scheduling_loop(
    shared: &Arc<Shared>,
    client: &Client,
    executor: Executor,
    mut leader: watch::Receiver<bool>,
    options: &Options,
    mut stop: watch::Receiver<bool>,
) {
    let permits = Arc::new(Semaphore::new(options.write_concurrency.max(1)));
    let sender = tokio::spawn(crate::writes::send_deferred(
        Arc::clone(shared),
        executor.clone(),
        leader.clone(),
        Arc::clone(&permits),
        (options.write_concurrency / 4).max(1),
        stop.clone(),
    ));
    let mut tick = tokio::time::interval(options.tick);
    let mut leading = false;
    // How long the last pass planned, and when it ended.
    let (mut last_pass, mut last_end) = (Duration::ZERO, Instant::now());
    loop {
        tokio::select! {
            () = shared.wake.notified() => tokio::time::sleep(options.debounce).await,
            _ = tick.tick() => {}
            _ = leader.changed() => {}
            _ = stop.changed() => break,
        }
        // Passes take at most half of the loop's time: under a steady stream of events (a
        // deep queue's status writes landing, pods starting) the next pass waits at least as
        // long as the last one took, so the events it folds in are many per pass.
        tokio::time::sleep_until((last_end + last_pass).into()).await;
        if !*leader.borrow() {
            if leading {
                tracing::warn!("lost the lease: no more writes");
            }
            leading = false;
            continue;
        }
        let started = Instant::now();
        if !leading && !catch_up(shared, client, options.namespace_scope.as_deref()).await {
            continue;
        }
        // Taken before the pass reads the state: what this pass's releases wait for, and
        // the ends in flight too long to be counted on any more.
        let ends = shared.ends.before_pass();
        // The pass's writes belong to the leadership it is planned under: after any change
        // of it, even one this replica wins back, none of them is sent.
        let in_term = executor.begun();
        let (term, actions) = {
            let mut state = shared.state();
            // First, whatever this pass does: no pass waits for these ends any more, so
            // their jobs must hold their quota from now on.
            for (job, stage) in &ends.overdue {
                if state.end_overdue(job, *stage) {
                    shared.metrics.end_overdue(stage.label());
                }
            }
            if !state.index().ready() {
                continue;
            }
            if !leading {
                // Writes promised under an earlier term may never have landed: start from
                // what the API server shows.
                state.start_term();
                tracing::info!("leading: scheduling");
                leading = true;
            }
            let pass = plan(&mut state, k8s_openapi::jiff::Timestamp::now());
            shared
                .metrics
                .observe(&pass.summary, started.elapsed().as_secs_f64());
            if pass.summary.admitted > 0 || !pass.summary.evicted.is_empty() {
                tracing::info!(
                    admitted = pass.summary.admitted,
                    evicted = ?pass.summary.evicted,
                    preempted = pass.summary.preempted,
                    actions = pass.actions.len(),
                    scheduler_rebuilt = pass.summary.scheduler_rebuilt.unwrap_or("no"),
                    "pass"
                );
            }
            let actions = route(shared, &mut state, pass.actions);
            // The jobs whose ends gave their quota up early: releases wait for those.
            let early = actions
                .iter()
                .filter_map(|(action, _)| action.job())
                .filter(|job| state.frees_early(job.as_str()))
                .cloned()
                .collect();
            (state.term(), (actions, early))
        };
        last_pass = started.elapsed();
        // Each unit of writes holds a permit until it has landed: the next pass comes once
        // this one's writes are under way, so it folds in their landings rather than
        // running beside them (see docs/performance.md: passes that did not wait cost more
        // CPU and time at 15,000 jobs). A release that waits for jobs' ends to land takes
        // its permit once they have (see `writes::send_pass`).
        crate::writes::send_pass(shared, &in_term, &permits, term, actions, ends.waits_for).await;
        last_end = Instant::now();
    }
    let _ = sender.await;
    // Let writes in flight finish (each is idempotent, so a cut one is finished later).
    let all = u32::try_from(options.write_concurrency.max(1)).unwrap_or(u32::MAX);
    let drained = tokio::time::timeout(Duration::from_secs(10), permits.acquire_many(all)).await;
    // Releases still waiting for jobs' ends to land are not sent after the loop stopped.
    // Closed while the drain still holds every permit: given back first, they would go
    // straight to a release whose end landed during the drain (tokio's semaphore hands
    // freed permits to its waiters), and that release would go out as the Lease is given up.
    permits.close();
    drop(drained);
}

/// How many times as long as the last forecast took the forecaster waits before the next:
/// forecasts take at most a quarter of one core, however large the fleet.
const FORECAST_IDLE_FACTOR: u32 = 3;

/// Forecasts every waiting job's start every `every` while this replica leads and a pass
/// has run: gathered under the state's lock, made without it on a thread set [`aside`] at
/// the lowest priority (a large fleet's forecast takes seconds to minutes of one core), kept
/// for the passes and the visibility API. After a forecast that took long, the next waits
/// [`FORECAST_IDLE_FACTOR`] times as long as it took, when that is longer than `every`.
async fn forecaster(
    shared: Arc<Shared>,
    leader: watch::Receiver<bool>,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut wait = Duration::ZERO;
    loop {
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = stop.changed() => return,
        }
        // Until this replica leads and a pass has run, look again each second: the first
        // forecast comes soon after.
        wait = every.min(Duration::from_secs(1));
        if !*leader.borrow() {
            continue;
        }
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        let input = {
            let mut state = shared.state();
            if !state.index().ready() || state.last.scheduler.scheduler().is_none() {
                continue;
            }
            state.gather_forecast_input(now)
        };
        wait = every;
        let started = Instant::now();
        let made = match aside("forecast", move || {
            crate::forecasting::make(input, crate::forecasting::live_options())
        }) {
            Ok(made) => made
                .await
                .map_err(|_| "its thread ended without an answer".to_owned()),
            Err(e) => Err(format!("no thread to make it on: {e}")),
        };
        let took = started.elapsed();
        match made {
            Ok(Ok(mut latest)) => {
                latest.took_millis = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
                wait = every.max(took * FORECAST_IDLE_FACTOR);
                shared.metrics.forecast_seconds.observe(took.as_secs_f64());
                tracing::debug!(
                    jobs = latest.forecast.etas.len(),
                    took_ms = latest.took_millis,
                    "forecast made"
                );
                shared.state().keep_forecast(latest);
            }
            Ok(Err(e)) => tracing::warn!("no start-time forecast: {e}"),
            Err(e) => tracing::error!("the start-time forecast stopped: {e}"),
        }
    }
}

/// How much work set [`aside`] raises its thread's nice value: from the usual 0 to 19, the
/// lowest priority (the kernel caps it there), so that a forecast's forward runs take only
/// CPU time that the passes, the writes and whatever shares the host (an API server on a
/// small control plane) leave. On a busy host forecasts then take longer and, by
/// [`FORECAST_IDLE_FACTOR`], come less often; admissions never wait for them.
pub const ASIDE_NICE: i32 = 19;

/// Runs `work` on a thread of its own (named `name`), its nice value raised by
/// [`ASIDE_NICE`]; its answer comes through the receiver. Linux keeps a nice value per
/// thread, so only that thread's priority falls. A thread that may not lower its priority (a
/// seccomp profile forbidding it, say) runs at the priority it has: slower forecasts are no
/// reason to have none.
pub fn aside<T, F>(name: &str, work: F) -> std::io::Result<tokio::sync::oneshot::Receiver<T>>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (send, receive) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            if let Err(e) = rustix::process::nice(ASIDE_NICE) {
                tracing::debug!(error = %e, "work set aside runs at the controller's priority");
            }
            // The caller may have stopped meanwhile; then nobody wants the answer.
            let _ = send.send(work());
        })?;
    Ok(receive)
}

/// A pass's actions: waiting jobs' statuses queued for the deferred sender (woken when any
/// is queued); the rest returned to go now, each status write with the version of its job it
/// was decided on.
fn route(
    shared: &Shared,
    state: &mut State,
    actions: Vec<crate::action::Action>,
) -> Vec<(crate::action::Action, Option<crate::action::JobRead>)> {
    let mut now_actions = Vec::with_capacity(actions.len());
    for action in actions {
        if let Some(action) = state.defer(action) {
            let read = state.decided_on(&action);
            now_actions.push((action, read));
        }
    }
    let queued = state.deferred_len();
    shared
        .metrics
        .deferred_status_writes
        .set(i64::try_from(queued).unwrap_or(i64::MAX));
    if queued > 0 {
        shared.deferred_wake.notify_one();
    }
    now_actions
}

/// Before a replica's first pass as leader: a standby's caches may lag the API server (a
/// watch cut and backing off), so the jobs and pods are read afresh and folded in (a copy
/// never replaces a newer one), and the first pass never gives away quota that a gang
/// admitted moments ago already holds. False when the caches are not synced yet or the read
/// failed: the replica does not lead on a view it could not bring up to date.
async fn catch_up(shared: &Arc<Shared>, client: &Client, namespace: Option<&str>) -> bool {
    if !shared.state().index().ready() {
        return false;
    }
    match fresh_view(client, namespace).await {
        Ok((jobs, pods, workloads)) => {
            let mut state = shared.state();
            for job in jobs {
                state.apply(job);
            }
            for pod in pods {
                state.apply(pod);
            }
            for workload in workloads {
                state.apply(workload);
            }
            true
        }
        Err(e) => {
            tracing::warn!(error = %e, "reading jobs and pods before leading failed; trying again");
            false
        }
    }
}

/// The GpuJobs (in `namespace`, or everywhere), pods and labelled batch Jobs as the API
/// server has them now: a consistent read, as fresh as the moment it is made. The Jobs come
/// too because a queue entry's Admitted status beside a copy of its Job from before the
/// release would read as a release that never landed.
async fn fresh_view(
    client: &Client,
    namespace: Option<&str>,
) -> Result<(Vec<GpuJob>, Vec<Pod>, Vec<BatchJob>), kube::Error> {
    let jobs = scoped::<GpuJob>(client, namespace)
        .list(&ListParams::default())
        .await?
        .items;
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let labelled = ListParams::default().labels(muster_api::wire::QUEUE_NAME_LABEL);
    let workloads = crate::lean::lean(&scoped::<BatchJob>(client, namespace))
        .list(&labelled)
        .await?
        .items
        .into_iter()
        .map(Lean::into_inner)
        .collect();
    Ok((jobs, pods, workloads))
}

/// `/metrics`, `/livez` and `/readyz` until `stop`.
async fn serve(addr: SocketAddr, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    use axum::http::{StatusCode, header};
    use axum::routing::get;
    let metrics = {
        let shared = Arc::clone(&shared);
        move || {
            let shared = Arc::clone(&shared);
            async move {
                (
                    [(
                        header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    shared.metrics.encode(),
                )
            }
        }
    };
    let ready = {
        let shared = Arc::clone(&shared);
        move || {
            let shared = Arc::clone(&shared);
            async move {
                if shared.state().index().ready() {
                    (StatusCode::OK, "ready")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "caches not synced")
                }
            }
        }
    };
    let app = axum::Router::new()
        .route("/metrics", get(metrics))
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(ready));
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(%addr, error = %e, "cannot serve metrics");
            return;
        }
    };
    let graceful = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(graceful)
        .await
    {
        tracing::error!(error = %e, "metrics server failed");
    }
}
