//! The job state machine as a table: every row one situation of one job — its status, its
//! pods and their nodes, the writes in flight — and the step a pass must take for it,
//! described by [`Step::describe`]: the phase, each write, and how admission's cycle sees the
//! job.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use muster_admission::{Admitted, PodSetPlacement};
use muster_api::gpujob::{GpuJobPhase, GpuJobStatus, PendingReason, PendingReasonKind};
use muster_api::{
    ClusterQueue, GpuJob, LocalQueue, ObjectRef, ProvisioningRequest, ResourceFlavor,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{InCycle, step};
use crate::holding::holding;
use crate::index::Index;
use crate::ledger::{Busy, Ledger};
use crate::release::gang;
use crate::status;
use muster_api::wire::{ATTEMPT_LABEL, FINALIZER, POD_GROUP_LABEL, WORKLOAD_KIND_LABEL};

pub(crate) const KEY: &str = "team-a/train";

/// The job under test, as a reference.
pub(crate) fn key() -> ObjectRef {
    ObjectRef::new("team-a", "train")
}
/// The pass runs at this second; the job was admitted at `ADMITTED`.
pub(crate) const NOW: i64 = 1_000;
const ADMITTED: i64 = 900;
/// The test clock's zero: 2026-01-01T00:00:00Z.
const EPOCH: i64 = 1_767_225_600;

fn object<T: DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap_or_else(|e| unreachable!("fixture: {e}"))
}

pub(crate) fn time(second: i64) -> Time {
    Time(Timestamp::from_second(EPOCH + second).unwrap_or_default())
}

fn node(name: &str) -> Node {
    object(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "gpu": "h100", "example.com/block": "b1", "kubernetes.io/hostname": name}},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1000Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}]}
    }))
}

fn flavor() -> ResourceFlavor {
    object(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "ResourceFlavor",
        "metadata": {"name": "h100"},
        "spec": {"nodeLabels": {"gpu": "h100"},
                 "topologyLevels": ["example.com/block", "kubernetes.io/hostname"]}
    }))
}

fn cluster_queue() -> ClusterQueue {
    object(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "ClusterQueue",
        "metadata": {"name": "research"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                {"name": "h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "16"}]}]}]}
    }))
}

fn local_queue() -> LocalQueue {
    object(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "LocalQueue",
        "metadata": {"name": "research", "namespace": "team-a"},
        "spec": {"clusterQueue": "research"}
    }))
}

/// Two pods of 8 GPUs in one block, restarted at most once.
fn job() -> GpuJob {
    object(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "GpuJob",
        "metadata": {"name": "train", "namespace": "team-a", "uid": "uid-train",
                     "resourceVersion": "1", "generation": 1,
                     "creationTimestamp": time(0).0.to_string(),
                     "finalizers": [FINALIZER]},
        "spec": {"queueName": "research", "podsReadyTimeoutSeconds": 300, "backoffLimit": 1,
            "podSets": [{"name": "workers", "count": 2,
                "topology": {"required": "example.com/block"},
                "template": {"spec": {"restartPolicy": "Never", "containers": [{
                    "name": "main", "image": "trainer:1",
                    "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}]}
    }))
}

/// The Job `team-a/train` behind an entry ([`World::entry_of_a_job`]), complete.
fn completed_job() -> Job {
    object(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "train", "namespace": "team-a", "uid": "uid-job"},
        "spec": {"template": {"spec": {"containers": []}}},
        "status": {"succeeded": 2, "conditions": [
            {"type": "SuccessCriteriaMet", "status": "True"},
            {"type": "Complete", "status": "True"}]}
    }))
}

/// The Job `team-a/train` behind an entry, `NonIndexed` of one completion, its pod running as
/// its controller last wrote (no condition yet), with `deadline` as its
/// `activeDeadlineSeconds`.
fn one_completion_job(deadline: Option<i64>) -> Job {
    object(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "train", "namespace": "team-a", "uid": "uid-job"},
        "spec": {"completions": 1, "parallelism": 1, "activeDeadlineSeconds": deadline,
                 "template": {"spec": {"containers": []}}},
        "status": {"active": 1}
    }))
}

/// One job's world: the index around it and the ledger.
pub(crate) struct World {
    pub(crate) index: Index,
    pub(crate) ledger: Ledger,
    pub(crate) job: GpuJob,
    pub(crate) pods: Vec<Pod>,
}

fn admission() -> Admitted {
    Admitted {
        job: KEY.to_owned(),
        cluster_queue: "research".to_owned(),
        pod_sets: vec![PodSetPlacement {
            name: "workers".to_owned(),
            flavor: "h100".to_owned(),
            domain: vec![("example.com/block".to_owned(), "b1".to_owned())],
            nodes: vec!["n1".to_owned(), "n2".to_owned()],
            devices: Vec::new(),
        }],
        borrowing: false,
    }
}

impl World {
    /// A job that has just arrived, on a fleet of two nodes.
    pub(crate) fn new() -> World {
        let mut index = Index::new();
        for name in ["n1", "n2"] {
            index.apply(node(name));
        }
        index.apply(flavor());
        index.apply(cluster_queue());
        index.apply(local_queue());
        World {
            index,
            ledger: Ledger::default(),
            job: job(),
            pods: Vec::new(),
        }
    }

    fn status(&mut self) -> &mut GpuJobStatus {
        self.job.status.get_or_insert_with(GpuJobStatus::default)
    }

    /// The status says admitted (at `ADMITTED`) onto n1 and n2.
    pub(crate) fn admitted(mut self) -> World {
        let current = self.status().clone();
        let next = status::admitted(&current, Some(1), &admission(), &time(ADMITTED));
        self.job.status = next;
        self
    }

    /// The job's status says it ended (written as a finish or an eviction that fails it
    /// writes it: the admission gone).
    pub(crate) fn finished(mut self, succeeded: bool) -> World {
        let current = self.status().clone();
        self.job.status = Some(status::finished(
            &current,
            Some(1),
            succeeded,
            "it ended",
            &time(NOW - 1),
        ));
        self
    }

    /// The gang's pods as released: gated and unbound.
    fn gated(mut self, count: usize) -> World {
        let flavors = BTreeMap::from([("h100".to_owned(), flavor().spec)]);
        let gang = gang(&self.job, &admission(), &flavors).unwrap_or_else(|e| unreachable!("{e}"));
        self.pods = gang.pods.into_iter().take(count).collect();
        self
    }

    /// The gang's pods ungated, bound, and in these phases (Ready where `ready`).
    fn pods(self, phases: &[(&str, bool)]) -> World {
        let mut world = self.gated(phases.len());
        for (pod, (phase, ready)) in world.pods.iter_mut().zip(phases) {
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
                "conditions": [{"type": "Ready", "status": if *ready { "True" } else { "False" }}]
            })));
        }
        world
    }

    /// The gang's pods ungated but not yet bound (pinned to their nodes by selector).
    fn unbound(mut self) -> World {
        self = self.gated(2);
        for pod in &mut self.pods {
            if let Some(spec) = pod.spec.as_mut() {
                spec.scheduling_gates = None;
            }
            pod.status = Some(object(json!({"phase": "Pending"})));
        }
        self
    }

    pub(crate) fn running(self) -> World {
        self.pods(&[("Running", true), ("Running", true)])
    }

    /// Pod `i` is not bound yet (still pinned to its node by selector).
    fn unbind(mut self, i: usize) -> World {
        if let Some(spec) = self.pods[i].spec.as_mut() {
            spec.node_name = None;
        }
        self
    }

    /// Pod `i` is pinned to node `node` (its hostname node selector).
    fn pinned_to(mut self, i: usize, node: &str) -> World {
        if let Some(selector) = self.pods[i]
            .spec
            .as_mut()
            .and_then(|s| s.node_selector.as_mut())
        {
            selector.insert("kubernetes.io/hostname".to_owned(), node.to_owned());
        }
        self
    }

    /// Pod `i` has a deletion timestamp.
    fn deleting(mut self, i: usize) -> World {
        self.pods[i].metadata.deletion_timestamp = Some(time(NOW - 1));
        self
    }

    /// The pods belong to attempt `attempt` (the status's requeue count is another).
    fn attempt(mut self, attempt: i32) -> World {
        for pod in &mut self.pods {
            if let Some(labels) = pod.metadata.labels.as_mut() {
                labels.insert(ATTEMPT_LABEL.to_owned(), attempt.to_string());
            }
        }
        self
    }

    fn with_status(mut self, change: impl FnOnce(&mut GpuJobStatus)) -> World {
        change(self.status());
        self
    }

    fn with_job(mut self, change: impl FnOnce(&mut GpuJob)) -> World {
        change(&mut self.job);
        self
    }

    /// The job is the queue entry of the batch Job `team-a/train`.
    fn entry_of_a_job(mut self) -> World {
        self.job.metadata.labels = Some(BTreeMap::from([(
            WORKLOAD_KIND_LABEL.to_owned(),
            "Job".to_owned(),
        )]));
        self.job.metadata.owner_references = Some(vec![object(json!({
            "apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "uid-job",
            "controller": true
        }))]);
        self
    }

    /// The job is the queue entry of a one-pod Job: a gang of one, admitted onto n1 when
    /// admitted.
    fn entry_of_a_one_pod_job(mut self) -> World {
        self = self.entry_of_a_job();
        self.job.spec.pod_sets[0].count = 1;
        if let Some(admission) = self.status().admission.as_mut() {
            admission.pod_sets[0].nodes.truncate(1);
        }
        self
    }

    /// The job is the queue entry of the pod group `team-a/train`.
    fn entry_of_a_pod_group(mut self) -> World {
        self.job.metadata.labels = Some(BTreeMap::from([
            (WORKLOAD_KIND_LABEL.to_owned(), "PodGroup".to_owned()),
            (POD_GROUP_LABEL.to_owned(), "train".to_owned()),
        ]));
        self
    }

    /// The index holds `workload` (the Job behind the entry).
    fn with_workload(mut self, workload: Job) -> World {
        self.index.apply(workload);
        self
    }

    fn busy(mut self, busy: Busy) -> World {
        self.ledger.promise(key(), busy);
        self
    }

    /// A status write of the job queued for the sender, not yet sent.
    fn status_queued(mut self) -> World {
        self.ledger.promise(key(), Busy::Status);
        let write = crate::action::Action::JobStatus {
            job: key(),
            status: Box::default(),
            event: None,
        };
        assert!(
            self.ledger.defer(write).is_none(),
            "a waiting job's status is queued"
        );
        self
    }

    /// Two releases failed; the second's backoff (40 s) ends at `retry_at`.
    fn failed_release(mut self, retry_at: i64) -> World {
        let error = || "pods are forbidden".to_owned();
        self.ledger
            .fail_release(&key(), EPOCH + retry_at - 80, error());
        self.ledger
            .fail_release(&key(), EPOCH + retry_at - 40, error());
        self
    }

    /// The ClusterQueue buys capacity (one retry) and ProvisioningRequests are watched.
    fn buying(mut self) -> World {
        let mut queue = cluster_queue();
        queue.spec.provisioning = Some(object(json!({
            "className": "queued-provisioning.gke.io",
            "retry": {"limit": 1, "baseSeconds": 60, "maxSeconds": 60},
            "nodeSelectorFromDetails": {"cloud.google.com/gke-nodepool": "NodePoolName"}
        })));
        self.index.apply(queue);
        self.index.relist_begin::<ProvisioningRequest>();
        self.index.relist_done::<ProvisioningRequest>();
        self
    }

    /// The status: provisioning, attempt `attempt` (quota held, no nodes, a request named).
    fn provisioning(self, attempt: i32) -> World {
        self.with_status(|s| {
            s.admission = Some(muster_api::gpujob::Admission {
                cluster_queue: "research".to_owned(),
                pod_sets: vec![muster_api::gpujob::PodSetAssignment {
                    name: "workers".to_owned(),
                    flavor: "h100".to_owned(),
                    ..Default::default()
                }],
            });
            s.phase = Some(GpuJobPhase::Provisioning);
            s.provisioning_request = Some(format!("train-workers-{attempt}"));
            s.provisioning_attempts = attempt;
        })
    }

    /// The autoscaler answers the current attempt's requests with `conditions`.
    fn autoscaler_says(mut self, conditions: &[&str]) -> World {
        let policy = self
            .index
            .cluster_queues
            .get("research")
            .and_then(|q| q.spec.provisioning.clone())
            .unwrap_or_else(|| unreachable!("buying() first"));
        let attempt = u32::try_from(self.status().provisioning_attempts).unwrap_or(0);
        for key in crate::provision::request_keys(&self.job, &policy, attempt) {
            let (namespace, name) = key.split_once('/').unwrap_or_default();
            let request: ProvisioningRequest = object(json!({
                "apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"provisioningClassName": policy.class_name, "podSets": []},
                "status": {
                    "conditions": conditions.iter().map(|c| json!({
                        "type": c, "status": "True", "reason": "R", "message": format!("{c} says so"),
                        "lastTransitionTime": time(NOW - 10).0.to_string()})).collect::<Vec<_>>(),
                    "provisioningClassDetails": {"NodePoolName": "dws-pool-1"}}
            }));
            self.index.apply(request);
        }
        self
    }

    /// Node `name` stopped reporting at `since`: its Ready condition is Unknown, as the node
    /// lifecycle controller writes it, with the taints it adds.
    fn unreachable(mut self, name: &str, since: i64) -> World {
        let mut node = node(name);
        node.status = Some(object(json!({
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1000Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                            "lastTransitionTime": time(since).0.to_string()}]})));
        node.spec = Some(object(json!({"taints": [
            {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]})));
        self.index.apply(node);
        self
    }

    /// Node `name`, unreachable since long ago, is tainted out-of-service: an admin says the
    /// machine is down.
    fn out_of_service(mut self, name: &str) -> World {
        let mut node = node(name);
        node.status = Some(object(json!({
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1000Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "Unknown",
                            "lastTransitionTime": time(0).0.to_string()}]})));
        node.spec = Some(object(json!({"taints": [
            {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
            {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown",
             "effect": "NoExecute"}]})));
        self.index.apply(node);
        self
    }

    /// Node `name` is cordoned, and Ready.
    fn cordoned(mut self, name: &str) -> World {
        let mut node = node(name);
        node.spec = Some(object(json!({"unschedulable": true})));
        self.index.apply(node);
        self
    }

    /// Pod `i` was made by another release of the same attempt: pinned to n3, in block b2.
    fn placed_elsewhere(mut self, i: usize) -> World {
        let pod = &mut self.pods[i];
        if let Some(selector) = pod.spec.as_mut().and_then(|s| s.node_selector.as_mut()) {
            selector.insert("kubernetes.io/hostname".to_owned(), "n3".to_owned());
        }
        if let Some(annotations) = pod.metadata.annotations.as_mut() {
            annotations.insert(
                muster_api::wire::DOMAIN_ANNOTATION.to_owned(),
                "example.com/block=b2".to_owned(),
            );
        }
        self
    }

    /// Pod `i` is gone.
    fn without(mut self, i: usize) -> World {
        self.pods.remove(i);
        self
    }

    fn node_gone(mut self, name: &str) -> World {
        self.index.nodes.remove(name);
        self
    }

    /// The step at `NOW`.
    fn step(mut self) -> super::Step {
        self.index.apply(self.job.clone());
        for pod in self.pods.drain(..) {
            self.index.apply(pod);
        }
        step(&self.index, &self.ledger, &key(), &time(NOW)).unwrap_or_else(|| unreachable!("job"))
    }
}

/// A gang restarted (attempt 1 queued) while pod 1 of attempt 0, on n2, still terminates:
/// pod 0 on n1 is gone.
fn restarted_around(world: World) -> World {
    world
        .running()
        .attempt(0)
        .deleting(1)
        .without(0)
        .with_status(|s| {
            s.requeue_count = 1;
            s.phase = Some(GpuJobPhase::Queued);
        })
}

/// The status once the pass that saw the gang Ready wrote Running (at 950).
fn running_written(s: &mut GpuJobStatus) {
    s.phase = Some(GpuJobPhase::Running);
    s.start_time = Some(time(950));
    crate::status::set_condition(
        &mut s.conditions,
        muster_api::gpujob::conditions::PODS_READY,
        true,
        "PodsReady",
        "every pod of the gang is Ready",
        Some(1),
        &time(950),
    );
}

fn backoff(until: i64) -> PendingReason {
    PendingReason {
        start_range: None,
        kind: PendingReasonKind::Backoff,
        message: "waits".to_owned(),
        eta: Some(time(until)),
        since: None,
    }
}

#[test]
#[allow(clippy::too_many_lines, reason = "a table: one row per situation")]
fn every_situation_gives_its_step() {
    let rows: Vec<(&str, World, &str)> = vec![
        // Waiting.
        ("a new job queues", World::new(), "Waiting · queued"),
        (
            "a requeued job waits out its backoff",
            World::new().with_status(|s| s.pending_reason = Some(backoff(NOW + 60))),
            "Waiting · backing off",
        ),
        (
            "a backoff that has passed queues again",
            World::new().with_status(|s| s.pending_reason = Some(backoff(NOW - 1))),
            "Waiting · queued",
        ),
        (
            "a failed release backs off, its reason written",
            World::new().failed_release(NOW + 40),
            "Waiting · JobStatus(Queued, ReleaseFailed) · out",
        ),
        (
            "a failed release's backoff over: it queues",
            World::new().failed_release(NOW - 1),
            "Waiting · queued",
        ),
        // Writes in flight.
        (
            "its release is in flight: it holds the admission",
            World::new().busy(Busy::Release(admission())),
            "Releasing · holds",
        ),
        (
            "a status write in flight: it sits out the cycle until the write lands",
            World::new().busy(Busy::Status),
            "Waiting · out",
        ),
        (
            "a queued status write holds nothing back",
            World::new().status_queued(),
            "Waiting · queued",
        ),
        (
            "an eviction in flight: it holds what its status says until it lands",
            World::new().admitted().running().busy(Busy::Other),
            "Releasing · holds",
        ),
        (
            "the end of a gang whose pods all ended, in flight: it holds nothing meanwhile",
            World::new()
                .admitted()
                .pods(&[("Succeeded", false), ("Succeeded", false)])
                .busy(Busy::Ending),
            "Finishing · out",
        ),
        // Releasing and running.
        (
            "released, pods not Ready yet: it holds and waits",
            World::new()
                .admitted()
                .pods(&[("Running", true), ("Pending", false)]),
            "Releasing · holds",
        ),
        (
            "every pod Ready: Running is written",
            World::new().admitted().running(),
            "Running · JobStatus(Running, PodsReady) · holds",
        ),
        (
            "Running already written: nothing to do",
            World::new()
                .admitted()
                .running()
                .with_status(running_written),
            "Running · holds",
        ),
        (
            "not Ready within podsReadyTimeoutSeconds: evicted and requeued",
            World::new()
                .admitted()
                .pods(&[("Running", true), ("Pending", false)])
                .with_job(|j| j.spec.pods_ready_timeout_seconds = Some(60)),
            "Releasing · Evict(PodsReadyTimeout) · holds",
        ),
        (
            "every pod succeeded: Succeeded is written, the quota free at once (releases into it wait for the write)",
            World::new()
                .admitted()
                .pods(&[("Succeeded", false), ("Succeeded", false)]),
            "Finishing · JobStatus(Succeeded, Succeeded) · out",
        ),
        // Restarting.
        (
            "a pod of a running gang fails: the whole gang restarts",
            World::new()
                .admitted()
                .pods(&[("Running", true), ("Failed", false)]),
            "Restarting · Evict(GangRestart) · holds",
        ),
        (
            "a pod's node is gone: the gang restarts",
            World::new().admitted().running().node_gone("n2"),
            "Restarting · Evict(GangRestart) · holds",
        ),
        (
            "released, its pods not yet bound: it holds while they start",
            World::new().admitted().unbound(),
            "Releasing · holds",
        ),
        (
            "a node the gang was placed on is gone before its pods were bound: it restarts",
            World::new().admitted().unbound().node_gone("n2"),
            "Restarting · Evict(GangRestart) · holds",
        ),
        (
            "a node the gang was placed on stops reporting before its pods were bound: it restarts",
            World::new()
                .admitted()
                .unbound()
                .unreachable("n2", NOW - 60),
            "Restarting · Evict(GangRestart) · holds",
        ),
        (
            "a node the gang was placed on stopped reporting a moment ago: its pods wait for it",
            World::new()
                .admitted()
                .unbound()
                .unreachable("n2", NOW - 10),
            "Releasing · holds",
        ),
        (
            "a node the gang was placed on is cordoned before its pods were bound: it restarts",
            World::new().admitted().unbound().cordoned("n1"),
            "Restarting · Evict(GangRestart) · holds",
        ),
        (
            "a pod succeeded on a node that is then cordoned, another pinned there unbound: it restarts",
            World::new()
                .admitted()
                .pods(&[("Succeeded", false), ("Pending", false)])
                .unbind(1)
                .pinned_to(1, "n1")
                .cordoned("n1"),
            "Restarting · Evict(GangRestart) · holds",
        ),
        (
            "a pod succeeded and its node stops reporting while another pod is unbound: it holds",
            World::new()
                .admitted()
                .pods(&[("Succeeded", false), ("Pending", false)])
                .unbind(1)
                .unreachable("n1", NOW - 60),
            "Releasing · holds",
        ),
        (
            "a pod of a running gang is deleted: the gang restarts",
            World::new().admitted().running().deleting(1),
            "Restarting · Evict(GangRestart) · holds",
        ),
        (
            "a pod fails after backoffLimit restarts: the job fails",
            World::new()
                .admitted()
                .pods(&[("Running", true), ("Failed", false)])
                .with_status(|s| s.restart_count = 1),
            "Restarting · Evict(BackoffLimitExceeded) · holds",
        ),
        (
            "pods of an earlier attempt are left: they are deleted first",
            World::new()
                .running()
                .attempt(0)
                .with_status(|s| s.requeue_count = 1),
            "Restarting · delete_pods · holds",
        ),
        (
            "a Job's entry, pods of an earlier attempt left: its Job's controller deletes them",
            World::new()
                .running()
                .attempt(0)
                .with_status(|s| s.requeue_count = 1)
                .entry_of_a_job(),
            "Waiting · holds",
        ),
        (
            "a pod group's entry, pods of an earlier attempt left: deleted, as a GpuJob's",
            World::new()
                .running()
                .attempt(0)
                .with_status(|s| s.requeue_count = 1)
                .entry_of_a_pod_group(),
            "Restarting · delete_pods · holds",
        ),
        (
            "a Job's entry whose Job completed on a pod of an earlier attempt: it succeeds",
            World::new()
                .pods(&[("Succeeded", false), ("Succeeded", false)])
                .attempt(0)
                .with_status(|s| s.requeue_count = 1)
                .entry_of_a_job()
                .with_workload(completed_job()),
            "Finishing · JobStatus(Succeeded, Succeeded) · out",
        ),
        (
            "a one-completion Job's entry whose pod succeeded: it succeeds before its Job says so",
            World::new()
                .admitted()
                .pods(&[("Succeeded", false)])
                .entry_of_a_one_pod_job()
                .with_workload(one_completion_job(None)),
            "Finishing · JobStatus(Succeeded, Succeeded) · out",
        ),
        (
            "the same with an active deadline, which its Job's controller may find passed: it waits for the Job",
            World::new()
                .admitted()
                .pods(&[("Succeeded", false)])
                .entry_of_a_one_pod_job()
                .with_workload(one_completion_job(Some(600))),
            "Finishing · holds",
        ),
        // Evicting.
        (
            "a suspended job gives its admission up",
            World::new()
                .admitted()
                .running()
                .with_job(|j| j.spec.suspend = true),
            "Evicting · Evict(Suspended) · holds",
        ),
        (
            "evicted, its pods still terminating: it holds nodes through them, not quota",
            World::new().running().deleting(0).deleting(1),
            "Evicting · out",
        ),
        (
            "requeued, pods of its earlier attempt still terminating: it is not released again",
            World::new()
                .running()
                .attempt(0)
                .deleting(0)
                .deleting(1)
                .with_status(|s| s.requeue_count = 1),
            "Evicting · out",
        ),
        (
            "requeued, its earlier pods terminating on a node that is gone: it queues",
            World::new()
                .running()
                .attempt(0)
                .deleting(0)
                .deleting(1)
                .node_gone("n1")
                .node_gone("n2")
                .with_status(|s| s.requeue_count = 1),
            "Waiting · queued",
        ),
        // Partitions: a node stops reporting while its pods may still run.
        (
            "a running gang's node stops reporting: the gang restarts",
            World::new().admitted().running().unreachable("n2", NOW - 5),
            "Restarting · Evict(GangRestart) · holds",
        ),
        (
            "restarted, an old pod terminating on a node that stopped reporting: it waits",
            restarted_around(World::new().unreachable("n2", NOW - 10)),
            "Evicting · out",
        ),
        (
            "restarted, an old pod on a node silent for over a minute: status and a warning say so",
            restarted_around(World::new().unreachable("n2", NOW - 61)),
            "Evicting · JobStatus(Queued, NodeUnreachable) · out",
        ),
        (
            "restarted, an old pod on a node tainted out-of-service: it queues",
            restarted_around(World::new().out_of_service("n2")),
            "Waiting · queued",
        ),
        (
            "restarted, an old pod terminating on a cordoned node that reports: it waits",
            restarted_around(World::new().cordoned("n2")),
            "Evicting · out",
        ),
        (
            "rolled back, its own pods on a node silent for long: status and a warning say so",
            World::new()
                .running()
                .deleting(0)
                .deleting(1)
                .unreachable("n1", NOW - 120)
                .unreachable("n2", NOW - 120)
                .with_status(|s| s.phase = Some(GpuJobPhase::Queued)),
            "Evicting · JobStatus(Queued, NodeUnreachable) · out",
        ),
        (
            "the old pods gone, the backoff it was evicted with still running: it backs off",
            World::new().with_status(|s| {
                s.pending_reason = Some(PendingReason {
                    start_range: None,
                    kind: PendingReasonKind::NodeUnreachable,
                    ..backoff(NOW + 60)
                });
            }),
            "Waiting · backing off",
        ),
        // Releases cut short.
        (
            "admitted, the gang gated (a replica died mid-release): the release is finished",
            World::new().admitted().gated(2),
            "Releasing · finish release",
        ),
        (
            "admitted, one pod made, one missing: the release is finished",
            World::new().admitted().gated(1),
            "Releasing · finish release",
        ),
        (
            "a whole gang made but the status never written: the release is finished",
            World::new().gated(2),
            "Releasing · finish release",
        ),
        (
            "half a gang made, the status never written: it is rolled back",
            World::new().gated(1),
            "Releasing · delete_pods · holds",
        ),
        (
            "a whole gang without the status, made by two releases in two blocks: rolled back",
            World::new().gated(2).placed_elsewhere(1),
            "Releasing · delete_pods · holds",
        ),
        (
            "a release onto bought capacity cut off, its pods from two releases: rolled back",
            World::new()
                .buying()
                .provisioning(1)
                .autoscaler_says(&["Provisioned"])
                .gated(2)
                .placed_elsewhere(1),
            "Releasing · delete_pods · holds quota",
        ),
        (
            "a gang without the status, a pod deleted under it: it is rolled back",
            World::new().gated(2).deleting(1),
            "Releasing · delete_pods · holds",
        ),
        (
            "admitted, a gated gang of a suspended job: evicted instead of finished",
            World::new()
                .admitted()
                .gated(2)
                .with_job(|j| j.spec.suspend = true),
            "Evicting · Evict(Suspended) · holds",
        ),
        // Finished and deleted.
        (
            "succeeded: nothing more",
            World::new().with_status(|s| s.phase = Some(GpuJobPhase::Succeeded)),
            "Succeeded · out",
        ),
        (
            "failed: nothing more",
            World::new().with_status(|s| s.phase = Some(GpuJobPhase::Failed)),
            "Failed · out",
        ),
        (
            "failed, its pods still running (the eviction stopped after its status): they go, held until gone",
            World::new().admitted().running().finished(false),
            "Failed · delete_pods · holds",
        ),
        (
            "failed, its pods already leaving or ended: none deleted again, and what is being deleted holds nothing",
            World::new()
                .admitted()
                .pods(&[("Failed", false), ("Running", true)])
                .deleting(1)
                .finished(false),
            "Failed · out",
        ),
        (
            "succeeded, every pod succeeded and kept: none deleted, nothing held",
            World::new()
                .admitted()
                .pods(&[("Succeeded", false), ("Succeeded", false)])
                .finished(true),
            "Succeeded · out",
        ),
        (
            "deleted: its pods are removed, then the finalizer",
            World::new()
                .admitted()
                .running()
                .with_job(|j| j.metadata.deletion_timestamp = Some(time(NOW - 5))),
            "Deleted · finalize · holds",
        ),
        (
            "deleted without Muster's finalizer: nothing to clean up",
            World::new().with_job(|j| {
                j.metadata.deletion_timestamp = Some(time(NOW - 5));
                j.metadata.finalizers = None;
            }),
            "Deleted · out",
        ),
        (
            "admitted by an older version, without the finalizer: it gets one",
            World::new()
                .admitted()
                .running()
                .with_job(|j| j.metadata.finalizers = None)
                .with_status(running_written),
            "Running · AddFinalizer · holds",
        ),
        (
            "a waiting job gets no finalizer before its release",
            World::new().with_job(|j| j.metadata.finalizers = None),
            "Waiting · queued",
        ),
        // Provisioning.
        (
            "provisioning, the autoscaler has not answered: it holds quota and says so",
            World::new().buying().provisioning(1).autoscaler_says(&[]),
            "Provisioning · JobStatus(Provisioning) · holds quota",
        ),
        (
            "provisioning, capacity provisioned: placed on it first, holding its quota",
            World::new()
                .buying()
                .provisioning(1)
                .autoscaler_says(&["Provisioned"]),
            "Provisioning · on bought capacity",
        ),
        (
            "capacity provisioned, but its release failed lately: it holds quota and waits",
            World::new()
                .buying()
                .provisioning(1)
                .autoscaler_says(&["Provisioned"])
                .failed_release(NOW + 30),
            "Provisioning · holds quota",
        ),
        (
            "the request failed, a retry is left: requests given up, retried after backoff",
            World::new()
                .buying()
                .provisioning(1)
                .autoscaler_says(&["Failed"]),
            "Provisioning · unprovision · JobStatus(Queued, ProvisioningRetry) · holds quota",
        ),
        (
            "the request failed past retry.limit: the job fails",
            World::new()
                .buying()
                .provisioning(2)
                .autoscaler_says(&["Failed"]),
            "Provisioning · unprovision · JobStatus(Failed, ProvisioningFailed) · holds quota",
        ),
        (
            "a suspended job waiting for capacity gives the request up",
            World::new()
                .buying()
                .provisioning(1)
                .autoscaler_says(&[])
                .with_job(|j| j.spec.suspend = true),
            "Provisioning · unprovision · JobStatus(Queued) · holds quota",
        ),
        (
            "a release onto bought capacity cut off with every pod made: it is finished",
            World::new()
                .buying()
                .provisioning(1)
                .autoscaler_says(&["Provisioned"])
                .gated(2),
            "Releasing · finish release",
        ),
        (
            "a release onto bought capacity cut off half made: rolled back, quota still held",
            World::new()
                .buying()
                .provisioning(1)
                .autoscaler_says(&["Provisioned"])
                .gated(1),
            "Releasing · delete_pods · holds quota",
        ),
        (
            "a gang on bought capacity the autoscaler takes back: evicted, requests given back",
            World::new()
                .buying()
                .admitted()
                .running()
                .with_status(|s| {
                    s.provisioning_request = Some("train-workers-1".to_owned());
                    s.provisioning_attempts = 1;
                })
                .autoscaler_says(&["Provisioned", "CapacityRevoked"]),
            "Evicting · Evict(CapacityRevoked) · unprovision · holds",
        ),
        (
            "provisioning, its ClusterQueue no longer buys capacity: the request is given up",
            World::new().provisioning(1),
            "Provisioning · unprovision · JobStatus(Queued, ProvisioningStopped) · holds quota",
        ),
    ];
    let mut wrong = Vec::new();
    for (situation, world, expected) in rows {
        let got = world.step().describe();
        if got != expected {
            wrong.push(format!(
                "{situation}:\n  expected {expected}\n  got      {got}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_held_job_holds_what_its_status_and_pods_say() {
    let step = World::new()
        .admitted()
        .pods(&[("Running", true), ("Pending", false)])
        .step();
    let expected = holding(&admission(), EPOCH + ADMITTED);
    assert_eq!(
        step.in_cycle,
        InCycle::Holds {
            holding: expected,
            provisioning: false,
            leaving: None,
        }
    );
}

#[test]
fn a_gang_that_becomes_ready_counts_its_time_to_running() {
    let step = World::new().admitted().running().step();
    assert_eq!(step.to_running, Some(NOW));
    assert_eq!(step.ran_since, Some(EPOCH + ADMITTED));
}

#[test]
fn a_restart_counts_the_run_it_ends() {
    let step = World::new()
        .admitted()
        .pods(&[("Running", true), ("Failed", false)])
        .step();
    assert_eq!(step.ran_since, Some(EPOCH + ADMITTED));
    assert_eq!(step.to_running, None);
}

#[test]
fn a_wait_on_an_unreachable_node_names_pods_node_time_and_fix_once() {
    // Within the bound: it waits, and is settled again when the bound passes.
    let early = restarted_around(World::new().unreachable("n2", NOW - 10)).step();
    assert_eq!(early.until, Some(EPOCH + NOW - 10 + 60));
    assert!(early.actions.is_empty());

    let world = restarted_around(World::new().unreachable("n2", NOW - 61));
    let job = world.job.clone();
    let step = world.step();
    let Some(crate::action::Action::JobStatus {
        status,
        event: Some(event),
        ..
    }) = step.actions.first()
    else {
        unreachable!("a status write with an event: {}", step.describe());
    };
    let reason = status.pending_reason.clone().unwrap_or_default();
    assert_eq!(reason.kind, PendingReasonKind::NodeUnreachable);
    for needle in [
        "node n2",
        "Ready Unknown",
        "since 2026-01-01T00:15:39Z",
        "train-workers-1",
        "delete its Node",
        "node.kubernetes.io/out-of-service",
    ] {
        assert!(
            reason.message.contains(needle),
            "{needle}: {}",
            reason.message
        );
    }
    assert!(
        !reason.message.contains("train-workers-0"),
        "{}",
        reason.message
    );
    assert!(event.warning && event.reason == "NodeUnreachable");
    assert_eq!(event.message, reason.message);

    // Once the status says so, nothing more is written.
    let mut again = restarted_around(World::new().unreachable("n2", NOW - 61));
    again.job = GpuJob {
        status: Some((**status).clone()),
        ..job
    };
    assert_eq!(again.step().describe(), "Evicting · out");
}
