//! The visibility API, group `visibility.muster.dev`, version `v1alpha1`: what the controller
//! knows about queues, waiting jobs and free capacity, served from its memory behind the
//! Kubernetes API server (an aggregated API) and read by `muster queues`, `muster jobs`,
//! `muster explain`, `muster blocks` and the dashboard.
//!
//! Nothing here is stored: every answer is worked out from the controller's last pass when it
//! is asked. A caller sees every waiting job's position, size and reason kind; the name,
//! namespace, LocalQueue, owner and message only of jobs in namespaces where they may list
//! GpuJobs (see [`PendingJob::name`]).
//!
//! Paths, under `/apis/visibility.muster.dev/v1alpha1`:
//! - `clusterqueues`: every ClusterQueue's figures ([`ClusterQueueSummaryList`]);
//! - `pendingjobs`: every ClusterQueue's waiting jobs, queue by queue ([`PendingJobList`]);
//! - `clusterqueues/{name}/pendingjobs`: one ClusterQueue's, in order;
//! - `namespaces/{ns}/localqueues/{name}/pendingjobs`: a LocalQueue's;
//! - `namespaces/{ns}/pendingjobs`: a namespace's;
//! - `namespaces/{ns}/gpujobs/{name}/story`: one job's story ([`JobStory`]);
//! - `blocks`: free capacity per flavor and topology domain ([`BlockList`]);
//! - `forecast`: every waiting job's start-time range from the latest forecast
//!   ([`ForecastAnswer`]); with what-if parameters (see [`whatif`]), the cluster changed and
//!   forecast again, beside the forecast as it stands.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

/// The API group.
pub const GROUP: &str = "visibility.muster.dev";
/// The API version.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` as written in answers.
pub const API_VERSION: &str = "visibility.muster.dev/v1alpha1";
/// Where the group's paths begin.
pub const PREFIX: &str = "/apis/visibility.muster.dev/v1alpha1";

/// One waiting job.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingJob {
    /// The GpuJob's name; `None` when the caller may not list GpuJobs in its namespace, and
    /// so for `namespace`, `local_queue`, `owner` and `message`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its LocalQueue's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_queue: Option<String>,
    /// Its ClusterQueue, when its LocalQueue names one that exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_queue: Option<String>,
    /// 1-based position among its ClusterQueue's waiting jobs, as admission takes them; 0:
    /// not in a queue's order (invalid, suspended, no queue, waiting for bought capacity).
    pub position: u32,
    /// 1-based position among its LocalQueue's waiting jobs (0: not in order); `None` when
    /// hidden.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_queue_position: Option<u32>,
    /// Pods in all its pod sets.
    pub pods: u32,
    /// GPUs in all (whole GPUs; parts of GPUs as fractions).
    pub gpus: f64,
    /// Its priority.
    pub priority: i32,
    /// The object it stands for when Muster made it (`Job/train`, `JobSet/sweep`,
    /// `PodGroup/x`); `None` for a GpuJob a team wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Why it waits: a `PendingReasonKind`.
    pub reason: std::borrow::Cow<'static, str>,
    /// The whole explanation, with its numbers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When it is expected to start, when admission's reservation timeline knows.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "rfc3339"
    )]
    pub eta: Option<Time>,
    /// When it is expected to start, as a range, from the controller's latest start-time
    /// forecast (see [`JobForecast`]); `None` before the first forecast, or when the job
    /// came after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_range: Option<crate::gpujob::StartRange>,
    /// When it was submitted.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "rfc3339"
    )]
    pub created: Option<Time>,
}

/// Writes `time` as Kubernetes writes a `Time` (`2026-01-02T03:04:05Z`, to the second),
/// without formatting through a pattern: a list of 15,000 jobs writes 30,000 of them.
#[expect(
    clippy::ref_option,
    reason = "serde's serialize_with passes the field by reference"
)]
fn rfc3339<S: serde::Serializer>(time: &Option<Time>, serializer: S) -> Result<S::Ok, S::Error> {
    let Some(time) = time else {
        return serializer.serialize_none();
    };
    let seconds = time.0.as_second();
    let (days, rest) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    if !(0..=9999).contains(&year) {
        // Outside four-digit years, as the API's own formatter writes them.
        return serializer.serialize_some(time);
    }
    let mut text = [0u8; 20];
    let digits = |buffer: &mut [u8], mut value: i64| {
        for byte in buffer.iter_mut().rev() {
            *byte = b'0' + u8::try_from(value % 10).unwrap_or(0);
            value /= 10;
        }
    };
    digits(&mut text[0..4], year);
    text[4] = b'-';
    digits(&mut text[5..7], month);
    text[7] = b'-';
    digits(&mut text[8..10], day);
    text[10] = b'T';
    digits(&mut text[11..13], rest / 3600);
    text[13] = b':';
    digits(&mut text[14..16], rest / 60 % 60);
    text[16] = b':';
    digits(&mut text[17..19], rest % 60);
    text[19] = b'Z';
    serializer.serialize_str(std::str::from_utf8(&text).unwrap_or_default())
}

/// Year, month and day of the `days`-th day since 1970-01-01 (proleptic Gregorian; Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

impl PendingJob {
    /// `namespace/name`, or `(hidden)`.
    pub fn display_name(&self) -> String {
        match (&self.namespace, &self.name) {
            (Some(ns), Some(name)) => format!("{ns}/{name}"),
            _ => HIDDEN.to_owned(),
        }
    }
}

/// How a job the caller may not see by name is shown.
pub const HIDDEN: &str = "(hidden)";

/// Waiting jobs in order: a ClusterQueue's, a LocalQueue's or a namespace's.
///
/// `I` is how the items are held: a `Vec` when read, or (in the controller) a sequence that
/// makes each job as it is written, so a list of many thousand jobs is never built whole.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingJobList<I = Vec<PendingJob>> {
    /// [`API_VERSION`].
    pub api_version: String,
    /// `PendingJobList`.
    pub kind: String,
    /// What was asked about: `clusterqueue/NAME`, `localqueue/NS/NAME` or `namespace/NS`.
    pub scope: String,
    /// When admission last worked the reasons out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub as_of: Option<Time>,
    /// The jobs, ClusterQueue by ClusterQueue in name order, each in queue order (jobs not in
    /// an order last).
    pub items: I,
    /// How many of `items` are hidden.
    pub hidden: u32,
    /// Per ClusterQueue of the items, the flavors it may give their GPUs, in the order tried.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub flavors: BTreeMap<String, Vec<String>>,
}

/// One flavor's quota and use of one resource in a ClusterQueue.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FlavorUsage {
    /// The flavor.
    pub flavor: String,
    /// The resource (`nvidia.com/gpu`, `cpu`, …).
    pub resource: String,
    /// Its nominal quota.
    pub nominal: f64,
    /// What its admitted jobs use, borrowed part included.
    pub used: f64,
    /// What it uses beyond its nominal quota, borrowed from its cohort.
    pub borrowed: f64,
    /// Of its nominal quota, what other queues of its cohort tree use now: the cohorts give
    /// out their own quota and their members' idle lendable quota in proportion to what each
    /// offers, nearest first (so what is lent adds up to what queues borrow).
    pub lent: f64,
}

/// One cohort's lending of one flavor and resource.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CohortUsage {
    /// The flavor.
    pub flavor: String,
    /// The resource.
    pub resource: String,
    /// What its subtree takes from its parent beyond all the quota within it.
    pub borrowed: f64,
    /// Of its own quota (not its members'), what is in use by queues under it or elsewhere.
    pub lent: f64,
}

/// One cohort of the tree: where it hangs and what it lends and borrows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CohortSummary {
    /// Its name.
    pub name: String,
    /// Its parent cohort.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Per flavor and resource that anything has quota for.
    pub usage: Vec<CohortUsage>,
}

/// One ClusterQueue's figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterQueueSummary {
    /// Its name.
    pub name: String,
    /// Its cohort.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cohort: Option<String>,
    /// The cohorts above it, nearest first: its cohort, that cohort's parent, up to the root
    /// of its tree (empty without a cohort).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ancestors: Vec<String>,
    /// Its stop policy (`None`, `Hold`, `HoldAndDrain`).
    pub stop_policy: String,
    /// Jobs waiting in its order.
    pub waiting: u32,
    /// Jobs admitted (holding its quota).
    pub admitted: u32,
    /// Per flavor and resource with quota.
    pub usage: Vec<FlavorUsage>,
    /// Why it admits nothing, when it is invalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// Every ClusterQueue's figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterQueueSummaryList {
    /// [`API_VERSION`].
    pub api_version: String,
    /// `ClusterQueueSummaryList`.
    pub kind: String,
    /// The queues, in name order.
    pub items: Vec<ClusterQueueSummary>,
    /// Every cohort: those the queues name and those Cohort objects define, in name order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cohorts: Vec<CohortSummary>,
}

/// One topology domain of a flavor, or one host.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Block {
    /// The flavor.
    pub flavor: String,
    /// The topology level (a node label key; the last is the host).
    pub level: String,
    /// The label values from the widest level down to this one.
    pub path: Vec<String>,
    /// Ready, schedulable nodes under it.
    pub nodes: u32,
    /// GPUs allocatable on them.
    pub gpus: f64,
    /// GPUs free on them.
    pub free_gpus: f64,
    /// The most GPUs free on any one node under it: a pod asking for more fits on none.
    pub largest_free_on_a_node: f64,
    /// What runs there: per job the caller may see, GPUs it holds under this domain;
    /// hidden jobs are summed under [`HIDDEN`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub jobs: BTreeMap<String, f64>,
}

/// Free capacity per flavor and topology domain.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockList {
    /// [`API_VERSION`].
    pub api_version: String,
    /// `BlockList`.
    pub kind: String,
    /// Flavor by flavor in name order; within one, domains depth first (a domain, then what
    /// is under it), so a table reads as a tree.
    pub items: Vec<Block>,
}

/// Where a job that does not fit came nearest to fitting.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NearestBlock {
    /// The pod set that did not fit.
    pub pod_set: String,
    /// Pods it needs in one domain.
    pub pods_needed: u32,
    /// The domain (or slice) that could hold the most of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// How many it could hold.
    pub pods_fitting: u32,
    /// How many the flavor's nodes could hold in all, ignoring the topology constraint.
    pub pods_fitting_anywhere: u32,
    /// Enough capacity exists in all, but not in one place.
    pub fragmented: bool,
}

/// An admitted job that holds what a waiting job needs: quota of its ClusterQueue or cohort,
/// in a flavor the waiting job may use.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Holder {
    /// `namespace/name`, or [`HIDDEN`].
    pub job: String,
    /// Its ClusterQueue.
    pub cluster_queue: String,
    /// The flavor of its GPUs.
    pub flavor: String,
    /// GPUs it holds.
    pub gpus: f64,
    /// When it was admitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Time>,
    /// When it is expected to end, when it said how long it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_end: Option<Time>,
}

/// One step of a job's life, from its status conditions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoryStep {
    /// When.
    pub time: Time,
    /// The condition (`Admitted`, `PodsReady`, `Evicted`, …).
    #[serde(rename = "type")]
    pub type_: String,
    /// `True` or `False`.
    pub status: String,
    /// Its reason.
    pub reason: String,
    /// Its message.
    pub message: String,
}

/// One job's story: where it stands, each step so far, and for a waiting job what it waits
/// for — the nearest block and what it lacks, the jobs ahead of it and those holding what it
/// needs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobStory {
    /// [`API_VERSION`].
    pub api_version: String,
    /// `JobStory`.
    pub kind: String,
    /// `namespace/name`.
    pub job: String,
    /// Its phase (`Pending`, `Admitted`, `Running`, …).
    pub phase: String,
    /// Where it stands, when it waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<PendingJob>,
    /// The flavors its ClusterQueue may give its GPUs, in the order tried.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flavors: Vec<String>,
    /// Where it came nearest to fitting, when it waits for room.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nearest: Option<NearestBlock>,
    /// The jobs ahead of it in its ClusterQueue, in order (at most [`STORY_AHEAD`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ahead: Vec<PendingJob>,
    /// How many jobs are ahead of it in all.
    pub ahead_count: u32,
    /// The admitted jobs holding quota it could use, those expected to end first first (at
    /// most [`STORY_HOLDERS`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<Holder>,
    /// Each step so far, oldest first.
    pub steps: Vec<StoryStep>,
}

/// How many jobs ahead a story lists.
pub const STORY_AHEAD: usize = 20;
/// How many holders a story lists.
pub const STORY_HOLDERS: usize = 20;

/// The group's discovery document: the resources the aggregated API serves.
pub fn resource_list() -> serde_json::Value {
    // Lists answer `list` (the API server authorizes a path without a name as a list);
    // subresources of a named object answer `get`.
    let resource = |name: &str, kind: &str, namespaced: bool| {
        let verb = if name.contains('/') { "get" } else { "list" };
        serde_json::json!({
            "name": name, "singularName": "", "namespaced": namespaced, "kind": kind,
            "verbs": [verb]
        })
    };
    serde_json::json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": API_VERSION,
        "resources": [
            resource("clusterqueues", "ClusterQueueSummary", false),
            resource("clusterqueues/pendingjobs", "PendingJobList", false),
            resource("localqueues/pendingjobs", "PendingJobList", true),
            resource("pendingjobs", "PendingJobList", true),
            resource("gpujobs/story", "JobStory", true),
            resource("blocks", "BlockList", false),
            resource("forecast", "Forecast", false),
        ]
    })
}

/// The group's entry in discovery (`/apis/visibility.muster.dev`).
pub fn api_group() -> serde_json::Value {
    let version = serde_json::json!({"groupVersion": API_VERSION, "version": VERSION});
    serde_json::json!({
        "kind": "APIGroup", "apiVersion": "v1", "name": GROUP,
        "versions": [version], "preferredVersion": version
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_written_as_the_api_writes_them() {
        // Every few hours over 1970 to 2100, leap days and year ends included.
        let mut seconds = -86_400_i64;
        while seconds < 4_102_444_800 {
            let time = k8s_openapi::jiff::Timestamp::from_second(seconds).map(Time);
            let job = PendingJob {
                created: time.ok(),
                ..PendingJob::default()
            };
            let ours = serde_json::to_value(&job).unwrap_or_default()["created"].clone();
            let theirs = serde_json::to_value(&job.created).unwrap_or_default();
            assert_eq!(ours, theirs, "{seconds}");
            seconds += 3 * 3600 + 17 * 60 + 13;
        }
    }
}

/// One waiting job's start, as a forecast sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobForecast {
    /// The job's name; `None` when the caller may not list GpuJobs in its namespace (so for
    /// `namespace` too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its ClusterQueue, when its LocalQueue names one that exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_queue: Option<String>,
    /// GPUs in all its pod sets.
    pub gpus: f64,
    /// When it starts: the range (10th, 50th, 90th percentile start).
    pub range: crate::gpujob::StartRange,
    /// Of the forward runs, in how many it started within the horizon.
    pub started: u32,
    /// In how many capacity was bought for it from the autoscaler instead (when that comes
    /// is the autoscaler's to say).
    pub buys_capacity: u32,
    /// Where its runtime comes from: `ratio of KEY (N runs)`, `durations of KEY (N runs)`,
    /// `announced` (taken as exact: no history yet) or `unknown` (runs past the horizon).
    pub runtime_basis: String,
    /// In a what-if: the range as the cluster stands, without the changes; `None` for a job
    /// the what-if submits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<crate::gpujob::StartRange>,
}

/// The answer of `forecast`: the latest start-time forecast, or a what-if's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForecastAnswer {
    /// `visibility.muster.dev/v1alpha1`.
    pub api_version: String,
    /// `Forecast`.
    pub kind: String,
    /// When the snapshot it runs forward from was taken.
    pub as_of: Time,
    /// Forward runs made.
    pub samples: u32,
    /// How far ahead they ran, seconds: a bound past it is absent.
    pub horizon_seconds: i64,
    /// How long the forecast took, milliseconds.
    pub took_millis: u64,
    /// How far past ranges widened these, before and after, in units of each job's forecast
    /// wait; `None`: too few past ranges have been settled yet to say, and the ranges are
    /// the forward runs' own spread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub margin: Option<[f64; 2]>,
    /// Finished runs the runtime model learned from since the leading replica started (it keeps
    /// the last 1,000 per family, queue and overall).
    pub history: u32,
    /// Jobs running or waiting with neither an announced runtime nor history: they run past
    /// the horizon in every forward run, so what waits behind them is later than it will be.
    pub unknown_runtimes: u32,
    /// The what-if's changes, as read (empty: the forecast as the cluster stands).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<String>,
    /// Every waiting job, in order of its likely start.
    pub items: Vec<JobForecast>,
    /// Of `items`, how many are shown without their names and namespaces: jobs in
    /// namespaces where the caller may not list GpuJobs.
    pub hidden: u32,
}

/// The what-if parameters of `forecast`, as query parameters (each may repeat; changes apply
/// in this order: nodes added, nodes removed, drains, quotas, the submitted job).
pub mod whatif {
    /// `addNodes=FLAVOR:COUNT[:BLOCK]`: COUNT nodes like the flavor's first node, in topology
    /// block BLOCK of its widest level (a new block when left out).
    pub const ADD_NODES: &str = "addNodes";
    /// `removeNodes=FLAVOR:COUNT[:BLOCK]`: the flavor's last COUNT nodes (of BLOCK) leave; what
    /// runs on them queues again.
    pub const REMOVE_NODES: &str = "removeNodes";
    /// `drain=NODE`: the node takes no new pods.
    pub const DRAIN: &str = "drain";
    /// `quota=CLUSTERQUEUE:FLAVOR:RESOURCE:NOMINAL[:BORROWINGLIMIT]` (either may be empty to
    /// keep it).
    pub const QUOTA: &str = "quota";
    /// `submit=JSON`: a GpuJob, as JSON, submitted now.
    pub const SUBMIT: &str = "submit";
}
