//! A small cluster for controller tests: objects as the API server would list them.

#![allow(dead_code, reason = "each test binary uses part of the support module")]

pub mod fleet;
pub mod script;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::jiff::Timestamp;
use muster_api::wire::FINALIZER;
use muster_api::{ClusterQueue, GpuJob, LocalQueue, ProvisioningRequest, ResourceFlavor};
use muster_controller::executor::Written;
use muster_controller::plan::Action;
use muster_controller::state::State;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// The test clock: 2026-01-01T00:00:00Z plus `seconds`.
pub fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_767_225_600 + seconds).unwrap_or_default()
}

pub fn object<T: DeserializeOwned + Default>(value: Value) -> T {
    serde_json::from_value(value).unwrap_or_else(|e| unreachable!("fixture: {e}"))
}

/// A Ready node with 8 GPUs in `block`.
pub fn node(name: &str, block: &str) -> Node {
    object(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "gpu": "h100", "example.com/block": block, "kubernetes.io/hostname": name}},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1000Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}]}
    }))
}

pub fn flavor() -> ResourceFlavor {
    object(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "ResourceFlavor",
        "metadata": {"name": "h100"},
        "spec": {"nodeLabels": {"gpu": "h100"},
                 "topologyLevels": ["example.com/block", "kubernetes.io/hostname"]}
    }))
}

pub fn cluster_queue(gpus: u32) -> ClusterQueue {
    object(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "ClusterQueue",
        "metadata": {"name": "research"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                {"name": "h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus.to_string()}]}]}]}
    }))
}

pub fn local_queue() -> LocalQueue {
    object(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "LocalQueue",
        "metadata": {"name": "research", "namespace": "team-a"},
        "spec": {"clusterQueue": "research"}
    }))
}

pub fn namespace(name: &str) -> Namespace {
    object(json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}}}))
}

/// A job of `count` pods with 8 GPUs each, in one block, created at `at(created)`.
pub fn job(name: &str, count: u32, created: i64) -> GpuJob {
    object(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "GpuJob",
        "metadata": {"name": name, "namespace": "team-a", "uid": format!("uid-{name}"),
                     "resourceVersion": "1", "generation": 1,
                     "creationTimestamp": at(created).to_string(),
                     "finalizers": [FINALIZER]},
        "spec": {"queueName": "research", "podsReadyTimeoutSeconds": 300, "backoffLimit": 1,
            "podSets": [{"name": "workers", "count": count,
                "topology": {"required": "example.com/block"},
                "template": {"spec": {"restartPolicy": "Never", "containers": [{
                    "name": "main", "image": "trainer:1",
                    "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}]}
    }))
}

/// A cluster of two blocks of two 8-GPU nodes, one queue with `gpus` of quota, and `jobs`.
pub fn cluster(gpus: u32, jobs: Vec<GpuJob>) -> State {
    let mut index = State::new();
    // These tests read a waiting job's status from the first pass on.
    index.set_first_status_after(0);
    index.relist_begin::<GpuJob>();
    for j in jobs {
        index.apply(j);
    }
    index.relist_done::<GpuJob>();
    index.relist_begin::<Node>();
    for (n, b) in [("n1", "b1"), ("n2", "b1"), ("n3", "b2"), ("n4", "b2")] {
        index.apply(node(n, b));
    }
    index.relist_done::<Node>();
    index.relist_begin::<ResourceFlavor>();
    index.apply(flavor());
    index.relist_done::<ResourceFlavor>();
    index.relist_begin::<ClusterQueue>();
    index.apply(cluster_queue(gpus));
    index.relist_done::<ClusterQueue>();
    index.relist_begin::<muster_api::Cohort>();
    index.relist_done::<muster_api::Cohort>();
    index.relist_begin::<LocalQueue>();
    index.apply(local_queue());
    index.relist_done::<LocalQueue>();
    index.relist_begin::<Namespace>();
    index.apply(namespace("team-a"));
    index.relist_done::<Namespace>();
    index.relist_begin::<Pod>();
    index.relist_done::<Pod>();
    index.relist_begin::<k8s_openapi::api::scheduling::v1::PriorityClass>();
    index.relist_done::<k8s_openapi::api::scheduling::v1::PriorityClass>();
    index.relist_begin::<k8s_openapi::api::batch::v1::Job>();
    index.relist_done::<k8s_openapi::api::batch::v1::Job>();
    index
}

/// A pod as the kubelet reports it: `phase`, Ready or not, bound to its pinned node.
pub fn with_phase(mut pod: Pod, phase: &str, ready: bool) -> Pod {
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_selector.as_ref())
        .and_then(|s| s.get("kubernetes.io/hostname"))
        .cloned();
    if let Some(spec) = pod.spec.as_mut() {
        spec.scheduling_gates = None;
        spec.node_name = node;
    }
    pod.status = Some(object(json!({
        "phase": phase,
        "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]
    })));
    pod
}

/// How an action's writes end, as the executor reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Landing {
    /// Every request succeeded.
    Landed,
    /// The first request failed: nothing was written.
    Failed,
    /// Carried out whole, but the answer was lost: the executor reports a failure and reads
    /// back what was written.
    AnswerLost,
    /// Stopped before the job's status (a release: every pod made and ungated, no status; a
    /// request for capacity: the requests made, no status; an eviction: the status written,
    /// no pod deleted); the executor reads back what was written.
    CutShort,
    /// A release stopped after its first pod (still gated); anything else as `Failed`.
    Partial,
}

/// What the API server holds after `action` succeeded, folded in the way the executor folds
/// its responses (deleted pods are gone at once).
pub fn land(index: &mut State, action: &Action, now: i64) {
    land_as(index, action, Landing::Landed, now);
}

/// `action` ends as `landing` says: what it wrote is folded in (as a response, or as the
/// executor's read-back after a failure), what it deleted is gone, and the ledger learns
/// the outcome.
pub fn land_as(index: &mut State, action: &Action, landing: Landing, now: i64) {
    // A write to a job deleted meanwhile fails there (404): what went before it stays.
    let gone = action.job().is_some_and(|j| index.index().job(j).is_none())
        && (action.writes_job_status() || matches!(action, Action::AddFinalizer { .. }));
    let landing = match landing {
        Landing::Landed | Landing::AnswerLost if gone => Landing::CutShort,
        other => other,
    };
    let (written, deleted) = match landing {
        Landing::Landed | Landing::AnswerLost => carried_out(index, action),
        Landing::CutShort => cut_short(index, action),
        Landing::Partial => match action {
            Action::Release { gang, .. } => {
                let first = gang
                    .pods
                    .first()
                    .cloned()
                    .map(|p| Written::Pod(Box::new(p)));
                (first.into_iter().collect(), Vec::new())
            }
            _ => (Vec::new(), Vec::new()),
        },
        Landing::Failed => (Vec::new(), Vec::new()),
    };
    if landing == Landing::Landed {
        index.landed(action, Ok(written), now);
    } else {
        index.read_back(written);
        index.landed(action, Err(format!("{landing:?}")), now);
    }
    for key in deleted {
        let (ns, name) = key.split_once('/').unwrap_or_default();
        let mut pod = Pod::default();
        pod.metadata.namespace = Some(ns.to_owned());
        pod.metadata.name = Some(name.to_owned());
        index.delete(&pod);
    }
}

/// `job` as the index holds it, one resource version on; `None` when it is gone.
fn bumped(index: &State, key: &str) -> Option<GpuJob> {
    let mut j = index.index().job(key).cloned()?;
    let rv: u64 = j
        .metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    j.metadata.resource_version = Some((rv + 1).to_string());
    Some(j)
}

/// `job` one version on with `status`, as a status write returns it.
fn with_status(index: &State, key: &str, status: &muster_api::GpuJobStatus) -> Vec<Written> {
    bumped(index, key)
        .map(|mut j| {
            j.status = Some(status.clone());
            Written::Job(Box::new(j))
        })
        .into_iter()
        .collect()
}

/// The gang's pods as created, with their gates lifted when `ungated`.
fn pods_written(gang: &muster_controller::release::Gang, ungated: bool) -> Vec<Written> {
    gang.pods
        .iter()
        .map(|pod| {
            let mut pod = pod.clone();
            if let (Some(spec), true) = (pod.spec.as_mut(), ungated) {
                spec.scheduling_gates = Some(Vec::new());
            }
            Written::Pod(Box::new(pod))
        })
        .collect()
}

/// The Job a queue entry's release patches, as the API server returns it: the merge patch
/// applied, at the version the index holds (a version the test applies next replaces it).
fn released_job(index: &State, gang: &muster_controller::release::Gang) -> Option<Written> {
    let release = gang.workload.as_ref()?;
    let muster_controller::workload::WorkloadPatch::Merge(patch) = &release.patch else {
        return None;
    };
    if release.workload.kind != muster_controller::workload::WorkloadKind::Job {
        return None;
    }
    let job = index.index().workload(release.workload.key.as_str())?;
    let mut value = serde_json::to_value(job).ok()?;
    json_patch::merge(&mut value, patch);
    // Read from text, as the API server's answer is: the index keeps the template's text.
    let job = serde_json::from_str(&value.to_string()).ok()?;
    Some(Written::Workload(Box::new(job)))
}

/// The objects `action` writes before its job's status, and the pods it deletes after it
/// (see [`Landing::CutShort`]).
fn cut_short(index: &State, action: &Action) -> (Vec<Written>, Vec<muster_api::ObjectRef>) {
    match action {
        Action::Release { gang, .. } => (pods_written(gang, true), Vec::new()),
        Action::Provision { requests, .. } => (
            requests
                .iter()
                .map(|r| Written::Request(Box::new(r.clone())))
                .collect(),
            Vec::new(),
        ),
        Action::Evict { job, status, .. } => (with_status(index, job, status), Vec::new()),
        _ => (Vec::new(), Vec::new()),
    }
}

/// Everything `action` writes and deletes; objects only the watch would show (queue
/// statuses, a finalized job's deletion, deleted requests) are applied to `index` here.
fn carried_out(index: &mut State, action: &Action) -> (Vec<Written>, Vec<muster_api::ObjectRef>) {
    let mut written = Vec::new();
    let mut deleted: Vec<muster_api::ObjectRef> = Vec::new();
    match action {
        Action::Release {
            job, gang, status, ..
        } => {
            written = pods_written(gang, true);
            written.extend(with_status(index, job, status));
            written.extend(released_job(index, gang));
        }
        Action::Evict {
            job, status, pods, ..
        } => {
            written = with_status(index, job, status);
            deleted.clone_from(pods);
        }
        Action::JobStatus { job, status, .. } => written = with_status(index, job, status),
        Action::DeletePods { pods, .. } => deleted.clone_from(pods),
        Action::AddFinalizer { job } => {
            if let Some(mut j) = bumped(index, job) {
                j.metadata.finalizers = Some(vec![FINALIZER.into()]);
                written.push(Written::Job(Box::new(j)));
            }
        }
        Action::Finalize { job, pods } => {
            deleted.clone_from(pods);
            if let Some(j) = index.index().job(job).cloned() {
                index.delete(&j);
            }
        }
        Action::ClusterQueueStatus { name, status } => {
            let mut q: ClusterQueue = index
                .index()
                .cluster_queue(name)
                .cloned()
                .unwrap_or_default();
            q.status = Some(status.clone());
            index.apply(q);
        }
        Action::Provision {
            job,
            requests,
            status,
            ..
        } => {
            written = with_status(index, job, status);
            for r in requests {
                written.push(Written::Request(Box::new(r.clone())));
            }
        }
        Action::Unprovision { requests, .. } => {
            for key in requests {
                let (ns, name) = key.split_once('/').unwrap_or_default();
                let mut r = ProvisioningRequest::default();
                r.metadata.namespace = Some(ns.to_owned());
                r.metadata.name = Some(name.to_owned());
                index.delete(&r);
            }
        }
        Action::LocalQueueStatus { key, status } => {
            let mut q: LocalQueue = index
                .index()
                .local_queue(key)
                .cloned()
                .unwrap_or_else(local_queue);
            q.status = Some(status.clone());
            index.apply(q);
        }
        Action::FlavorStatus { name, status } => {
            let mut f = index.index().flavor(name).cloned().unwrap_or_default();
            f.status = Some(status.clone());
            index.apply(f);
        }
        Action::CohortStatus { name, status } => {
            let mut c = index.index().cohort(name).cloned().unwrap_or_default();
            c.status = Some(status.clone());
            index.apply(c);
        }
        Action::CreateEntry { entry, .. } => {
            let mut made = (**entry).clone();
            made.metadata.uid = Some(format!(
                "uid-{}",
                made.metadata.name.clone().unwrap_or_default()
            ));
            made.metadata.resource_version = Some("1".into());
            made.metadata.generation = Some(1);
            written.push(Written::Job(Box::new(made)));
        }
        Action::UpdateEntry { job, spec } => {
            if let Some(mut entry) = bumped(index, job.as_str()) {
                entry.spec = (**spec).clone();
                entry.metadata.generation = entry.metadata.generation.map(|g| g + 1);
                written.push(Written::Job(Box::new(entry)));
            }
        }
        // The Job and its pods are the test's to change, as its controller, the API server
        // and the kubelet would.
        Action::PatchWorkload { .. } | Action::PinPods { .. } => {}
    }
    (written, deleted)
}

pub fn land_all(index: &mut State, actions: &[Action], now: i64) {
    for action in actions {
        land(index, action, now);
    }
}

/// The kinds of the job actions of a pass (queue statuses aside).
#[allow(dead_code, reason = "not every test file reads kinds")]
pub fn kinds(actions: &[Action]) -> Vec<&'static str> {
    actions
        .iter()
        .filter(|a| a.job().is_some())
        .map(Action::kind)
        .collect()
}

/// The status of job `key` (`namespace/name`) as the state holds it (default when none).
#[allow(dead_code, reason = "not every test file reads entries")]
pub fn status_of(state: &State, key: &str) -> muster_api::GpuJobStatus {
    state
        .index()
        .job(key)
        .and_then(|j| j.status.clone())
        .unwrap_or_default()
}

/// What a status write (the JSON patch Muster sends) carries: the resourceVersion it is
/// conditional on, if any, and the whole status it writes (`Null` when it writes none).
pub fn status_write(body: &Value) -> (Option<String>, Value) {
    let ops = body.as_array().map(Vec::as_slice).unwrap_or_default();
    let value_at = |path: &str| {
        ops.iter()
            .find(|op| op["path"] == path)
            .map(|op| op["value"].clone())
    };
    let version = value_at("/metadata/resourceVersion").and_then(|v| v.as_str().map(str::to_owned));
    (version, value_at("/status").unwrap_or_default())
}
