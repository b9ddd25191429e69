//! The controller's Prometheus metrics (OpenMetrics text on `/metrics`).

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

use crate::summary::Summary;

/// Label pairs.
pub type Labels = Vec<(String, String)>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Every metric the controller exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Jobs a cycle tried to admit, by result (`admitted`, `pending`).
    pub admission_attempts: Family<Labels, Counter>,
    /// Seconds per scheduling pass (snapshot, cycle, planning).
    pub cycle_seconds: Histogram,
    /// Jobs waiting, by ClusterQueue and reason.
    pub pending_jobs: Family<Labels, Gauge>,
    /// Quota in use, by ClusterQueue, flavor and resource (in the resource's units).
    pub quota_usage: Family<Labels, Gauge<f64, AtomicU64>>,
    /// Seconds from a job's creation to its admission.
    pub time_to_admission: Histogram,
    /// Seconds from a job's creation to all its pods Ready.
    pub time_to_running: Histogram,
    /// Gangs evicted, by reason.
    pub evictions: Family<Labels, Counter>,
    /// Jobs preempted.
    pub preemptions: Counter,
    /// Passes that built admission's scheduler afresh instead of bringing the kept one up to
    /// date (see `kept`): a change of queues, flavors, nodes or namespaces, or a job whose
    /// state moved other than by arriving, waiting or leaving.
    pub scheduler_rebuilds: Family<Labels, Counter>,
    /// Jobs passes settled against the cluster (those whose inputs changed).
    pub jobs_settled: Counter,
    /// Failed API requests (after retries), by action.
    pub api_errors: Family<Labels, Counter>,
    /// Actions carried out, by kind and result (`ok`, `error`, or `not_sent`: a release whose
    /// pass counted on a job's end that did not land, see `ends`).
    pub actions: Family<Labels, Counter>,
    /// Job status writes carried out, by the phase they write (`pending`, `queued`,
    /// `admitted`, `running`, `succeeded`, `failed`; a release's status counts as `admitted`).
    pub status_writes: Family<Labels, Counter>,
    /// Waiting jobs' status writes carried out (phase `pending` or `queued`), by what changed:
    /// `first` (the job had no status), `reason` (a new kind of reason), `figures` (the same
    /// reason, its position, message or ETA moved).
    pub waiting_status_writes: Family<Labels, Counter>,
    /// Of those, the writes of a new kind of reason, by the kind the status showed before
    /// (`from`; `none` when it showed none, as after an admission) and the kind written
    /// (`to`): which ways of waiting turn into which, and how often.
    pub waiting_reason_changes: Family<Labels, Counter>,
    /// Jobs' ends still in flight after `ends::PATIENCE`, held again, by what kept each:
    /// `permit` (its write had not been sent, the writes ahead of it held every permit) or
    /// `write` (sent and not yet answered).
    pub ends_overdue: Family<Labels, Counter>,
    /// API requests sent, by HTTP method (counted by the client, see [`ApiRequests`]).
    pub api_requests: ApiRequests,
    /// Waiting jobs' status writes queued and not yet sent (see [`crate::deferred`]).
    pub deferred_status_writes: Gauge,
    /// GPU-seconds of runs evicted (preempted, timed out, restarted, drained), from
    /// admission to eviction.
    pub gpu_seconds_lost: Counter,
    /// GPU-seconds of runs that succeeded, from admission to the end.
    pub gpu_seconds_completed: Counter,
    /// Per finished job, how often it was evicted before.
    pub job_evictions: Histogram,
    /// Visibility API requests, by route and HTTP status code.
    pub visibility_requests: Family<Labels, Counter>,
    /// Seconds the controller spent working out each visibility API answer (the state
    /// locked), without the authorization asked of the API server.
    pub visibility_seconds: Histogram,
    /// Seconds each start-time forecast took to make (the state unlocked).
    pub forecast_seconds: Histogram,
}

/// API requests the controller's client sent, by HTTP method, and by method and resource:
/// the work per job that the API server (and its write rate) pays for. Cheap to clone; clones
/// count together.
#[derive(Clone, Debug, Default)]
pub struct ApiRequests(Family<Labels, Counter>, Family<Labels, Counter>);

impl ApiRequests {
    /// Counts one request with `method` to `path`.
    pub fn count(&self, method: &http::Method, path: &str) {
        self.0
            .get_or_create(&labels(&[("method", method.as_str())]))
            .inc();
        self.1
            .get_or_create(&labels(&[
                ("method", method.as_str()),
                ("resource", &resource_of(path)),
            ]))
            .inc();
    }

    /// Requests counted so far with `method`.
    pub fn get(&self, method: &str) -> u64 {
        self.0.get_or_create(&labels(&[("method", method)])).get()
    }

    /// A client for `config` whose every request is counted here, without kube's own retry
    /// layer: the executor retries each write itself and checks the Lease before every
    /// attempt, and a retry below that check could land a write after this replica lost the
    /// Lease. Watches back off and relist on their own.
    pub fn client(&self, mut config: kube::Config) -> Result<kube::Client, kube::Error> {
        config.default_retry = false;
        let requests = self.clone();
        let counting =
            tower::util::MapRequestLayer::new(move |request: http::Request<kube::client::Body>| {
                requests.count(request.method(), request.uri().path());
                request
            });
        Ok(kube::client::ClientBuilder::try_from(config)?
            .with_layer(&counting)
            .build())
    }
}

/// The resource a request's `path` addresses, with its subresource: `pods`,
/// `gpujobs/status`, `events`; `other` for a path that names none.
pub fn resource_of(path: &str) -> String {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    // /api/v1/... or /apis/<group>/<version>/...; then namespaces/<ns>/ when namespaced.
    let mut rest = match parts.first() {
        Some(&"api") => parts.get(2..).unwrap_or_default(),
        Some(&"apis") => parts.get(3..).unwrap_or_default(),
        _ => return "other".to_owned(),
    };
    if rest.first() == Some(&"namespaces") && rest.len() > 2 {
        rest = &rest[2..];
    }
    match rest {
        [] => "other".to_owned(),
        [resource] | [resource, _] => (*resource).to_owned(),
        [resource, _, sub, ..] => format!("{resource}/{sub}"),
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A fresh registry with every metric registered under the `muster` prefix.
    pub fn new() -> Metrics {
        Metrics::counting(ApiRequests::default())
    }

    /// [`Metrics::new`], exporting `api_requests` as `muster_api_requests_total`.
    pub fn counting(api_requests: ApiRequests) -> Metrics {
        let mut registry = Registry::with_prefix("muster");
        let waits = || Histogram::new(exponential_buckets(1.0, 2.0, 18));
        let metrics = Metrics {
            admission_attempts: Family::default(),
            cycle_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            pending_jobs: Family::default(),
            quota_usage: Family::default(),
            time_to_admission: waits(),
            time_to_running: waits(),
            evictions: Family::default(),
            preemptions: Counter::default(),
            scheduler_rebuilds: Family::default(),
            jobs_settled: Counter::default(),
            api_errors: Family::default(),
            actions: Family::default(),
            status_writes: Family::default(),
            waiting_status_writes: Family::default(),
            waiting_reason_changes: Family::default(),
            ends_overdue: Family::default(),
            api_requests,
            deferred_status_writes: Gauge::default(),
            gpu_seconds_lost: Counter::default(),
            gpu_seconds_completed: Counter::default(),
            job_evictions: Histogram::new([0.0, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0]),
            visibility_requests: Family::default(),
            visibility_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 16)),
            forecast_seconds: Histogram::new(exponential_buckets(0.01, 2.0, 16)),
            registry: Registry::default(),
        };
        registry.register(
            "admission_attempts",
            "Jobs a scheduling cycle tried to admit, by result",
            metrics.admission_attempts.clone(),
        );
        registry.register(
            "deferred_status_writes",
            "Waiting jobs' status writes queued and not yet sent",
            metrics.deferred_status_writes.clone(),
        );
        registry.register(
            "cycle_duration_seconds",
            "Seconds per scheduling pass",
            metrics.cycle_seconds.clone(),
        );
        registry.register(
            "pending_jobs",
            "Jobs waiting, by ClusterQueue and reason",
            metrics.pending_jobs.clone(),
        );
        registry.register(
            "quota_usage",
            "Quota in use, by ClusterQueue, flavor and resource",
            metrics.quota_usage.clone(),
        );
        registry.register(
            "time_to_admission_seconds",
            "Seconds from a job's creation to its admission",
            metrics.time_to_admission.clone(),
        );
        registry.register(
            "time_to_running_seconds",
            "Seconds from a job's creation to all of its pods Ready",
            metrics.time_to_running.clone(),
        );
        metrics.register_outcomes(&mut registry);
        registry.register(
            "api_errors",
            "API requests that failed after retries, by action",
            metrics.api_errors.clone(),
        );
        metrics.register_writes(&mut registry);
        Metrics {
            registry,
            ..metrics
        }
    }

    /// Registers what the controller wrote: actions, status writes, API requests.
    fn register_writes(&self, registry: &mut Registry) {
        registry.register(
            "actions",
            "Actions carried out, by kind and result",
            self.actions.clone(),
        );
        registry.register(
            "status_writes",
            "Job status writes carried out, by the phase they write",
            self.status_writes.clone(),
        );
        registry.register(
            "waiting_status_writes",
            "Waiting jobs' status writes carried out, by what changed (first, reason, figures)",
            self.waiting_status_writes.clone(),
        );
        registry.register(
            "waiting_reason_changes",
            "Waiting jobs' status writes of a new kind of reason, by the kind before and after",
            self.waiting_reason_changes.clone(),
        );
        registry.register(
            "ends_overdue",
            "Jobs' ends in flight past their patience, by what kept them (permit, write)",
            self.ends_overdue.clone(),
        );
        registry.register(
            "api_requests",
            "API requests sent, by HTTP method",
            self.api_requests.0.clone(),
        );
        registry.register(
            "api_requests_by_resource",
            "API requests sent, by HTTP method and resource (`pods`, `gpujobs/status`, ...)",
            self.api_requests.1.clone(),
        );
    }

    /// Registers what passes did to jobs: evictions, preemptions, GPU-seconds, rebuilds.
    fn register_outcomes(&self, registry: &mut Registry) {
        registry.register(
            "gpu_seconds_lost",
            "GPU-seconds of evicted runs, from admission to eviction (work lost unless checkpointed)",
            self.gpu_seconds_lost.clone(),
        );
        registry.register(
            "gpu_seconds_completed",
            "GPU-seconds of runs that succeeded, from admission to the end",
            self.gpu_seconds_completed.clone(),
        );
        registry.register(
            "job_evictions",
            "Per finished job, how often it was evicted before it finished",
            self.job_evictions.clone(),
        );
        registry.register(
            "evictions",
            "Gangs evicted, by reason",
            self.evictions.clone(),
        );
        registry.register("preemptions", "Jobs preempted", self.preemptions.clone());
        registry.register(
            "visibility_requests",
            "Visibility API requests, by route and status code",
            self.visibility_requests.clone(),
        );
        registry.register(
            "visibility_answer_seconds",
            "Seconds spent working out each visibility API answer and writing its JSON, with the state locked",
            self.visibility_seconds.clone(),
        );
        registry.register(
            "forecast_seconds",
            "Seconds each start-time forecast of every waiting job took to make, off the state's lock",
            self.forecast_seconds.clone(),
        );
        registry.register(
            "scheduler_rebuilds",
            "Passes that built the admission scheduler afresh, by cause",
            self.scheduler_rebuilds.clone(),
        );
        registry.register(
            "jobs_settled",
            "Jobs passes settled against the cluster (those whose inputs changed)",
            self.jobs_settled.clone(),
        );
    }

    /// Records what one pass found.
    pub fn observe(&self, summary: &Summary, seconds: f64) {
        self.cycle_seconds.observe(seconds);
        if let Some(cause) = summary.scheduler_rebuilt {
            self.scheduler_rebuilds
                .get_or_create(&labels(&[("cause", cause)]))
                .inc();
        }
        self.jobs_settled
            .inc_by(u64::try_from(summary.settled).unwrap_or(u64::MAX));
        let admitted = u64::try_from(summary.admitted).unwrap_or(u64::MAX);
        self.admission_attempts
            .get_or_create(&labels(&[("result", "admitted")]))
            .inc_by(admitted);
        let considered = u64::try_from(summary.considered).unwrap_or(u64::MAX);
        self.admission_attempts
            .get_or_create(&labels(&[("result", "pending")]))
            .inc_by(considered.saturating_sub(admitted));
        self.pending_jobs.clear();
        for ((queue, reason), n) in &summary.pending {
            self.pending_jobs
                .get_or_create(&labels(&[("cluster_queue", queue), ("reason", reason)]))
                .set(*n);
        }
        self.quota_usage.clear();
        for (queue, flavor, resource, amount) in &summary.usage {
            self.quota_usage
                .get_or_create(&labels(&[
                    ("cluster_queue", queue),
                    ("flavor", flavor),
                    ("resource", resource),
                ]))
                .set(*amount);
        }
        for waited in &summary.waited {
            #[expect(clippy::cast_precision_loss, reason = "seconds fit an f64 exactly")]
            self.time_to_admission.observe(*waited as f64);
        }
        for waited in &summary.to_running {
            #[expect(clippy::cast_precision_loss, reason = "seconds fit an f64 exactly")]
            self.time_to_running.observe(*waited as f64);
        }
        for (reason, n) in &summary.evicted {
            self.evictions
                .get_or_create(&labels(&[("reason", reason)]))
                .inc_by(u64::try_from(*n).unwrap_or(u64::MAX));
        }
        self.preemptions
            .inc_by(u64::try_from(summary.preempted).unwrap_or(u64::MAX));
        self.gpu_seconds_lost.inc_by(summary.lost_gpu_seconds);
        self.gpu_seconds_completed
            .inc_by(summary.completed_gpu_seconds);
        for requeues in &summary.finished_requeues {
            self.job_evictions.observe(f64::from(*requeues));
        }
    }

    /// Records an action's outcome.
    /// Counts a job status write carried out that writes `phase`.
    pub fn status_write(&self, phase: &str) {
        self.status_writes
            .get_or_create(&labels(&[("phase", phase)]))
            .inc();
    }

    /// Counts a waiting job's status write carried out, by what it changed (see
    /// [`Metrics::waiting_status_writes`]).
    pub fn waiting_status_write(&self, change: &str) {
        self.waiting_status_writes
            .get_or_create(&labels(&[("change", change)]))
            .inc();
    }

    /// Counts a waiting job's status write that changed its kind of reason from `from` to
    /// `to` (see [`Metrics::waiting_reason_changes`]).
    pub fn waiting_reason_change(&self, from: &str, to: &str) {
        self.waiting_reason_changes
            .get_or_create(&labels(&[("from", from), ("to", to)]))
            .inc();
    }

    /// Counts a job's end overdue while at `stage` (see [`Metrics::ends_overdue`]).
    pub fn end_overdue(&self, stage: &str) {
        self.ends_overdue
            .get_or_create(&labels(&[("stage", stage)]))
            .inc();
    }

    /// Counts an action carried out.
    pub fn action(&self, kind: &str, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.actions
            .get_or_create(&labels(&[("kind", kind), ("result", result)]))
            .inc();
        if !ok {
            self.api_errors
                .get_or_create(&labels(&[("action", kind)]))
                .inc();
        }
    }

    /// Counts an action of `kind` that was never sent (see `ends`): no API request failed.
    pub fn action_not_sent(&self, kind: &str) {
        self.actions
            .get_or_create(&labels(&[("kind", kind), ("result", "not_sent")]))
            .inc();
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::resource_of;

    #[test]
    fn a_request_path_names_its_resource_and_subresource() {
        let cases = [
            ("/api/v1/namespaces/team-a/pods", "pods"),
            ("/api/v1/namespaces/team-a/pods/p-0", "pods"),
            (
                "/apis/muster.dev/v1alpha1/namespaces/team-a/gpujobs/a/status",
                "gpujobs/status",
            ),
            ("/apis/events.k8s.io/v1/namespaces/team-a/events", "events"),
            (
                "/apis/muster.dev/v1alpha1/clusterqueues/cq/status",
                "clusterqueues/status",
            ),
            ("/api/v1/nodes", "nodes"),
            ("/api/v1/namespaces", "namespaces"),
            ("/api/v1/namespaces/team-a", "namespaces"),
            ("/healthz", "other"),
        ];
        for (path, resource) in cases {
            assert_eq!(resource_of(path), resource, "{path}");
        }
    }
}
