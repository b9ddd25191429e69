use muster_api::wire::{ADMISSION_GATE, ATTEMPT_LABEL, CLUSTER_QUEUE_ANNOTATION, JOB_LABEL};
use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Node, Pod};
use muster_api::GpuJob;
use serde_json::json;

use super::{Checker, HALF_RELEASED_SECONDS, Limits, ViolationKind};

fn pod(name: &str, attempt: u32, gated: bool, phase: &str, gpus: u32) -> Pod {
    let scheduling_gates = if gated {
        json!([{"name": ADMISSION_GATE}])
    } else {
        json!([])
    };
    let value = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns",
            "labels": {JOB_LABEL: "j", ATTEMPT_LABEL: attempt.to_string()},
            "annotations": {CLUSTER_QUEUE_ANNOTATION: "a"}},
        "spec": {"schedulingGates": scheduling_gates, "containers": [{"name": "main",
            "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]},
        "status": {"phase": phase}});
    match serde_json::from_value(value) {
        Ok(pod) => pod,
        Err(e) => unreachable!("fixture pod: {e}"),
    }
}

#[expect(
    clippy::needless_pass_by_value,
    reason = "fixtures read better with json! inline"
)]
fn job(name: &str, pods: u32, gpus: u32, status: serde_json::Value) -> GpuJob {
    let value = json!({"apiVersion": "muster.dev/v1alpha1", "kind": "GpuJob",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"queueName": "a", "podSets": [{"name": "w", "count": pods,
            "template": {"spec": {"containers": [{"name": "main",
                "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]}}}]},
        "status": status});
    match serde_json::from_value(value) {
        Ok(job) => job,
        Err(e) => unreachable!("fixture job: {e}"),
    }
}

/// A node in `block` whose Ready condition is `ready`, tainted out-of-service or not.
fn node(name: &str, block: &str, ready: &str, out_of_service: bool) -> Node {
    let taints = if out_of_service {
        json!([{"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown",
                "effect": "NoExecute"}])
    } else {
        json!([])
    };
    let value = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"block": block}},
        "spec": {"taints": taints},
        "status": {"conditions": [{"type": "Ready", "status": ready}]}});
    match serde_json::from_value(value) {
        Ok(node) => node,
        Err(e) => unreachable!("fixture node: {e}"),
    }
}

/// `pod` bound to `node`.
fn on(mut pod: Pod, node: &str) -> Pod {
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = Some(node.to_owned());
    }
    pod
}

/// `pod` being deleted.
fn terminating(mut pod: Pod) -> Pod {
    pod.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
    ));
    pod
}

/// `pod` without Muster's labels and annotations, owned by GpuJob `j` only.
fn owned_only(mut pod: Pod) -> Pod {
    pod.metadata.labels = None;
    pod.metadata.annotations = None;
    pod.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "muster.dev/v1alpha1".to_owned(),
            kind: "GpuJob".to_owned(),
            name: "j".to_owned(),
            uid: "uid-j".to_owned(),
            ..Default::default()
        },
    ]);
    pod
}

/// `job`, its pod set required to fit in one `block`.
fn in_one_block(mut job: GpuJob) -> GpuJob {
    for set in &mut job.spec.pod_sets {
        set.topology = Some(muster_api::gpujob::TopologyRequest {
            required: Some("block".to_owned()),
            ..Default::default()
        });
    }
    job
}

fn limits() -> Limits {
    let mut limits = Limits::default();
    limits.queues.insert("a".into(), (Some("c".into()), 16));
    limits.queues.insert("b".into(), (Some("c".into()), 16));
    limits.cohorts.insert("c".into(), 16);
    limits
}

fn kinds(checker: &Checker) -> Vec<ViolationKind> {
    checker.violations().iter().map(|v| v.kind).collect()
}

/// `pod` made by replica `replica` of a JobSet's replicated Job `w`, for completion `index`.
fn of_child_job(mut pod: Pod, replica: u32, index: u32) -> Pod {
    let labels = pod.metadata.labels.get_or_insert_with(Default::default);
    labels.insert(
        muster_api::jobset::REPLICATED_JOB_LABEL.to_owned(),
        "w".to_owned(),
    );
    labels.insert(
        muster_api::jobset::JOB_INDEX_LABEL.to_owned(),
        replica.to_string(),
    );
    labels.insert(
        muster_api::wire::COMPLETION_INDEX_LABEL.to_owned(),
        index.to_string(),
    );
    pod
}

#[test]
fn a_jobset_gang_is_whole_with_the_completions_an_earlier_attempt_ran() {
    // Two child Jobs of two pods: attempt 0 ran replica 1's completion 0 to success; its Job
    // makes completion 1 alone in attempt 1.
    let lift = |earlier: &str| {
        let mut checker = Checker::new(limits(), BTreeSet::new());
        checker.job(&job("j", 4, 1, json!({})), 0.0);
        checker.pod(&of_child_job(pod("old", 0, false, earlier, 1), 1, 0), 1.0);
        let now = [(0, 0), (0, 1), (1, 1)];
        for (replica, index) in now {
            let name = format!("p{replica}{index}");
            checker.pod(
                &of_child_job(pod(&name, 1, true, "Pending", 1), replica, index),
                2.0,
            );
        }
        for (replica, index) in now {
            let name = format!("p{replica}{index}");
            checker.pod(
                &of_child_job(pod(&name, 1, false, "Pending", 1), replica, index),
                3.0,
            );
        }
        kinds(&checker)
    };
    assert_eq!(lift("Succeeded"), []);
    // A completion that failed is made again: three pods are not the gang.
    assert_eq!(lift("Failed")[0], ViolationKind::GateLiftedOnPartialGang);
}

#[test]
fn a_gate_lifted_before_the_whole_gang_exists_is_a_violation() {
    let mut checker = Checker::new(limits(), BTreeSet::new());
    checker.job(&job("j", 2, 1, json!({})), 0.0);
    checker.pod(&pod("p0", 0, true, "Pending", 1), 1.0);
    checker.pod(&pod("p0", 0, false, "Pending", 1), 2.0);
    assert_eq!(kinds(&checker), [ViolationKind::GateLiftedOnPartialGang]);

    let mut whole = Checker::new(limits(), BTreeSet::new());
    whole.pod(&pod("p0", 0, true, "Pending", 1), 1.0);
    whole.pod(&pod("p1", 0, true, "Pending", 1), 1.0);
    whole.pod(&pod("p0", 0, false, "Pending", 1), 2.0);
    whole.pod(&pod("p1", 0, false, "Pending", 1), 2.0);
    // The job is seen after its pods: the lifts are judged then.
    whole.job(&job("j", 2, 1, json!({})), 3.0);
    assert_eq!(kinds(&whole), []);
}

#[test]
fn pods_of_two_attempts_live_at_once_are_a_violation_once() {
    let mut checker = Checker::new(limits(), BTreeSet::new());
    checker.job(&job("j", 1, 1, json!({})), 0.0);
    checker.pod(&pod("p0", 0, false, "Running", 1), 1.0);
    checker.pod(&pod("q0", 1, true, "Pending", 1), 2.0);
    checker.pod(&pod("q0", 1, true, "Pending", 1), 2.5);
    assert_eq!(kinds(&checker), [ViolationKind::TwoAttemptsLive]);

    let mut clean = Checker::new(limits(), BTreeSet::new());
    clean.job(&job("j", 1, 1, json!({})), 0.0);
    clean.pod(&pod("p0", 0, false, "Running", 1), 1.0);
    clean.pod(&pod("p0", 0, false, "Failed", 1), 2.0);
    clean.pod(&pod("q0", 1, true, "Pending", 1), 3.0);
    clean.pod_gone("ns/p0");
    clean.pod(&pod("q0", 1, false, "Running", 1), 4.0);
    assert_eq!(kinds(&clean), []);
}

#[test]
fn live_pods_over_a_queue_or_cohort_quota_are_a_violation_per_excursion() {
    let mut checker = Checker::new(limits(), BTreeSet::new());
    checker.job(&job("j", 3, 8, json!({})), 0.0);
    for name in ["p0", "p1", "p2"] {
        checker.pod(&pod(name, 0, true, "Pending", 8), 1.0);
    }
    checker.pod(&pod("p0", 0, false, "Pending", 8), 1.0);
    checker.pod(&pod("p1", 0, false, "Pending", 8), 1.0);
    assert_eq!(kinds(&checker), []);
    checker.pod(&pod("p2", 0, false, "Pending", 8), 1.0);
    assert_eq!(
        kinds(&checker),
        [ViolationKind::PodsOverQuota, ViolationKind::PodsOverQuota],
        "{:?}",
        checker.violations()
    );
    checker.pod(&pod("p2", 0, false, "Pending", 8), 1.5);
    assert_eq!(checker.violations().len(), 2, "one excursion, one report");
    checker.pod_gone("ns/p2");
    checker.pod(&pod("p3", 0, false, "Pending", 8), 2.0);
    assert_eq!(checker.violations().len(), 4, "a second excursion");
}

#[test]
fn pods_over_what_an_ancestor_cohort_allows_are_a_violation_of_that_cohort() {
    // a may hold 32 and its cohort c 32, but c's parent r only 16.
    let mut limits = Limits::default();
    limits.queues.insert("a".into(), (Some("c".into()), 32));
    limits.cohorts.insert("c".into(), 32);
    limits.cohorts.insert("r".into(), 16);
    limits.parents.insert("c".into(), "r".into());
    let mut checker = Checker::new(limits, BTreeSet::new());
    checker.job(&job("j", 3, 8, json!({})), 0.0);
    for name in ["p0", "p1", "p2"] {
        checker.pod(&pod(name, 0, true, "Pending", 8), 1.0);
    }
    checker.pod(&pod("p0", 0, false, "Pending", 8), 1.0);
    checker.pod(&pod("p1", 0, false, "Pending", 8), 1.0);
    assert_eq!(kinds(&checker), []);
    checker.pod(&pod("p2", 0, false, "Pending", 8), 1.0);
    let objects: Vec<&str> = checker
        .violations()
        .iter()
        .map(|v| v.object.as_str())
        .collect();
    assert_eq!(objects, ["Cohort/r"]);
    // The report names every member queue's holders.
    assert_eq!(
        checker.violations()[0].detail,
        "24 GPUs in use, 16 allowed; a uses 24, held by ns/j@0 unadmitted=24"
    );
}

#[test]
fn gated_pods_use_no_quota_until_their_gates_are_lifted() {
    // A workload controller may make pods from a release already evicted: behind the gate
    // they can run nowhere, and are deleted before anything lifts it.
    let mut checker = Checker::new(limits(), BTreeSet::new());
    checker.job(&job("j", 3, 8, json!({})), 0.0);
    for name in ["p0", "p1", "p2"] {
        checker.pod(&pod(name, 0, true, "Pending", 8), 1.0);
    }
    assert_eq!(kinds(&checker), []);
    checker.pod(&pod("p0", 0, false, "Pending", 8), 2.0);
    checker.pod(&pod("p1", 0, false, "Pending", 8), 2.0);
    assert_eq!(kinds(&checker), []);
    checker.pod(&pod("p2", 0, false, "Pending", 8), 2.0);
    assert_eq!(
        kinds(&checker),
        [ViolationKind::PodsOverQuota, ViolationKind::PodsOverQuota],
        "{:?}",
        checker.violations()
    );
}

#[test]
fn admitted_jobs_over_quota_are_a_violation() {
    let mut checker = Checker::new(limits(), BTreeSet::new());
    let admitted = json!({"phase": "Admitted",
        "admission": {"clusterQueue": "a", "podSets": []}});
    checker.job(&job("j", 2, 8, admitted.clone()), 0.0);
    assert_eq!(kinds(&checker), []);
    checker.job(&job("k", 1, 8, admitted), 1.0);
    assert!(kinds(&checker).contains(&ViolationKind::AdmittedOverQuota));
    // The report names each holder's phase, attempt and since when it shows admitted.
    let detail = checker
        .violations()
        .iter()
        .map(|v| v.detail.clone())
        .collect::<String>();
    assert!(
        detail.contains("=16 (Admitted@0 since 0.0 s)")
            && detail.contains("=8 (Admitted@0 since 1.0 s)"),
        "{detail}"
    );
    // A job that ended no longer counts.
    let mut ended = Checker::new(limits(), BTreeSet::new());
    ended.job(
        &job(
            "j",
            2,
            8,
            json!({"phase": "Admitted", "admission": {"clusterQueue": "a", "podSets": []}}),
        ),
        0.0,
    );
    ended.job(
        &job(
            "j",
            2,
            8,
            json!({"phase": "Succeeded", "admission": {"clusterQueue": "a", "podSets": []}}),
        ),
        1.0,
    );
    ended.job(
        &job(
            "k",
            2,
            8,
            json!({"phase": "Admitted", "admission": {"clusterQueue": "a", "podSets": []}}),
        ),
        2.0,
    );
    assert_eq!(kinds(&ended), []);
}

#[test]
fn a_job_that_ends_twice_or_comes_back_is_a_violation() {
    let mut checker = Checker::new(limits(), BTreeSet::new());
    let done = |at: &str| {
        json!({"phase": "Succeeded", "completionTime": at,
            "conditions": [{"type": "Finished", "status": "True", "reason": "Succeeded",
                "message": "", "lastTransitionTime": at}]})
    };
    checker.job(&job("j", 1, 1, done("2026-01-01T00:00:00Z")), 1.0);
    checker.job(&job("j", 1, 1, done("2026-01-01T00:00:00Z")), 2.0);
    assert_eq!(kinds(&checker), []);
    checker.job(&job("j", 1, 1, json!({"phase": "Running"})), 3.0);
    checker.job(&job("j", 1, 1, done("2026-01-01T00:01:00Z")), 4.0);
    assert_eq!(
        kinds(&checker),
        [ViolationKind::EndedTwice, ViolationKind::EndedTwice]
    );
}

#[test]
fn the_end_reports_jobs_that_never_ended_or_failed_unexpectedly() {
    let failed = |reason: &str| {
        json!({"phase": "Failed", "completionTime": "2026-01-01T00:00:00Z",
            "conditions": [{"type": "Finished", "status": "True", "reason": reason,
                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]})
    };
    let mut checker = Checker::new(limits(), BTreeSet::from(["ns/meant".to_owned()]));
    checker.job(&job("waiting", 1, 1, json!({"phase": "Queued"})), 0.0);
    checker.job(&job("meant", 1, 1, failed("BackoffLimitExceeded")), 0.0);
    checker.job(&job("broke", 1, 1, failed("BackoffLimitExceeded")), 0.0);
    checker.finish(9.0);
    let found: Vec<(ViolationKind, &str)> = checker
        .violations()
        .iter()
        .map(|v| (v.kind, v.object.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            (ViolationKind::UnexpectedFailure, "GpuJob/ns/broke"),
            (ViolationKind::NeverEnded, "GpuJob/ns/waiting"),
        ]
    );
    assert_eq!(checker.ends().get("Failed/BackoffLimitExceeded"), Some(&2));
}

#[test]
fn a_relist_judges_gate_lifts_only_once_every_listed_pod_is_known() {
    let mut checker = Checker::new(limits(), BTreeSet::new());
    checker.job(&job("j", 2, 1, json!({})), 0.0);
    checker.pod(&pod("old", 0, true, "Pending", 1), 0.5);
    checker.pod(&pod("old1", 0, true, "Pending", 1), 0.5);
    // Created and ungated while the watch was cut: first seen whole, in one relist.
    checker.relist(
        &[
            pod("p0", 1, false, "Running", 1),
            pod("p1", 1, false, "Running", 1),
        ],
        1.0,
    );
    assert_eq!(kinds(&checker), [], "{:?}", checker.violations());
    // The pods missing from the relist are gone: attempt 0 no longer counts as live.
    assert_eq!(checker.pod_keys_live(), ["ns/p0", "ns/p1"]);
}

#[test]
fn pods_being_deleted_hold_no_quota() {
    let mut checker = Checker::new(limits(), BTreeSet::new());
    // Gangs of one, so that only quota is judged.
    checker.job(&job("j", 1, 8, json!({})), 0.0);
    checker.pod(&pod("p0", 0, false, "Running", 8), 1.0);
    checker.pod(&pod("p1", 0, false, "Running", 8), 1.0);
    let mut leaving = pod("p1", 0, false, "Running", 8);
    leaving.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
    checker.pod(&leaving, 2.0);
    checker.pod(&pod("p2", 0, false, "Running", 8), 3.0);
    assert_eq!(kinds(&checker), [], "{:?}", checker.violations());
    checker.pod(&pod("p3", 0, false, "Running", 8), 4.0);
    assert!(kinds(&checker).contains(&ViolationKind::PodsOverQuota));
}

#[test]
fn a_pod_on_a_node_that_is_gone_is_lost_not_live() {
    let bound = |name: &str, attempt: u32, node: &str| {
        let mut p = pod(name, attempt, false, "Running", 1);
        if let Some(spec) = p.spec.as_mut() {
            spec.node_name = Some(node.to_owned());
        }
        p
    };
    let mut checker = Checker::new(limits(), BTreeSet::new());
    checker.nodes_listed(&[
        node("n1", "b1", "True", false),
        node("n2", "b1", "True", false),
    ]);
    checker.job(&job("j", 1, 1, json!({})), 0.0);
    checker.pod(&bound("p0", 0, "n1"), 1.0);
    checker.node_gone("n1");
    // The gang restarted elsewhere while the lost pod's object lingers.
    checker.pod(&bound("q0", 1, "n2"), 2.0);
    checker.pod(&bound("p0", 0, "n1"), 3.0);
    assert_eq!(kinds(&checker), [], "{:?}", checker.violations());
    // On a node that exists, the same is two attempts at once.
    checker.pod(&bound("r0", 2, "n2"), 4.0);
    assert_eq!(kinds(&checker), [ViolationKind::TwoAttemptsLive]);
}

/// A relist of jobs is one moment of the cluster: folded job by job in name order, a job
/// admitted since the watch was cut (`j`) would count beside one that ended since (`k`),
/// though the API server never showed both admitted.
#[test]
fn a_relist_of_jobs_is_judged_whole() {
    let admitted = json!({"phase": "Admitted",
        "admission": {"clusterQueue": "a", "podSets": []}});
    let succeeded = json!({"phase": "Succeeded",
        "admission": {"clusterQueue": "a", "podSets": []}});
    let mut checker = Checker::new(limits(), BTreeSet::new());
    checker.job(&job("k", 2, 8, admitted.clone()), 0.0);
    checker.jobs_listed(
        &[job("j", 2, 8, admitted.clone()), job("k", 2, 8, succeeded)],
        1.0,
    );
    assert_eq!(kinds(&checker), [], "{:?}", checker.violations());
    // Over quota once the whole list is in: one report.
    checker.jobs_listed(
        &[
            job("j", 2, 8, admitted.clone()),
            job("m", 1, 8, admitted.clone()),
        ],
        2.0,
    );
    // The queue's and its cohort's.
    let objects = |checker: &Checker| -> Vec<String> {
        checker
            .violations()
            .iter()
            .map(|v| v.object.clone())
            .collect()
    };
    assert_eq!(objects(&checker), ["ClusterQueue/a", "Cohort/c"]);
    // A job the relist no longer lists holds nothing: the excursion ends, and the next one
    // is reported again.
    checker.jobs_listed(&[job("j", 2, 8, admitted.clone())], 3.0);
    checker.job(&job("n", 1, 8, admitted), 4.0);
    assert_eq!(objects(&checker).len(), 4, "{:?}", checker.violations());
}

/// A relist of pods is judged whole too: a restarted gang's pods (attempt 1) listed before
/// the pods of attempt 0 that ended since are not two attempts live, nor over quota.
#[test]
fn a_relist_of_pods_judges_quota_and_attempts_whole() {
    let mut checker = Checker::new(limits(), BTreeSet::new());
    checker.job(&job("j", 2, 8, json!({})), 0.0);
    checker.relist(
        &[
            pod("p0", 0, false, "Running", 8),
            pod("p1", 0, false, "Running", 8),
        ],
        1.0,
    );
    checker.relist(
        &[
            pod("q0", 1, false, "Running", 8),
            pod("q1", 1, false, "Running", 8),
            pod("p0", 0, false, "Failed", 8),
            pod("p1", 0, false, "Failed", 8),
        ],
        2.0,
    );
    assert_eq!(kinds(&checker), [], "{:?}", checker.violations());
    // Both attempts live once the whole list is in: judged then.
    checker.relist(
        &[
            pod("q0", 1, false, "Running", 8),
            pod("q1", 1, false, "Running", 8),
            pod("r0", 2, false, "Running", 8),
            pod("r1", 2, false, "Running", 8),
        ],
        3.0,
    );
    assert_eq!(
        kinds(&checker),
        [
            ViolationKind::TwoAttemptsLive,
            ViolationKind::PodsOverQuota,
            ViolationKind::PodsOverQuota
        ],
        "{:?}",
        checker.violations()
    );
}

/// What the checker hears, in order, in the table below.
enum Heard {
    Job(Box<GpuJob>),
    Pod(Box<Pod>),
    Nodes(Vec<Node>),
    Node(Box<Node>),
    PodGone(&'static str),
    /// Time passes to this second, and half-released gangs are judged.
    Tick,
}

/// A row of the table: the situation, what the checker hears (each at its second), and the
/// violations it must find.
type Row = (&'static str, Vec<(f64, Heard)>, Vec<ViolationKind>);

/// The judgements of a partitioned node, half-released gangs, gangs split across domains and
/// pods known by their owner only: one row per situation, the events heard (each at its
/// second) and the violations they must give.
#[test]
#[allow(clippy::too_many_lines, reason = "a table: one row per situation")]
fn every_situation_gives_its_violations() {
    use Heard::{Nodes, PodGone, Tick};
    use ViolationKind::{GatesHalfLifted, PodsOverQuota, SplitAcrossDomains, TwoAttemptsLive};
    let heard_job = |job: GpuJob| Heard::Job(Box::new(job));
    let heard_pod = |pod: Pod| Heard::Pod(Box::new(pod));
    let heard_node = |node: Node| Heard::Node(Box::new(node));
    let fleet = || {
        Nodes(vec![
            node("n1", "b1", "True", false),
            node("n2", "b1", "True", false),
            node("n3", "b2", "True", false),
        ])
    };
    let bound = |name, attempt, node_name| on(pod(name, attempt, false, "Running", 1), node_name);
    let late = HALF_RELEASED_SECONDS + 1.0;
    // A gang of two whose pod set requires one block, both pods made and still gated.
    let made_in_one_block = || {
        vec![
            (0.0, fleet()),
            (0.0, heard_job(in_one_block(job("j", 2, 1, json!({}))))),
            (0.5, heard_pod(pod("p0", 0, true, "Pending", 1))),
            (0.5, heard_pod(pod("p1", 0, true, "Pending", 1))),
        ]
        .into_iter()
    };
    let rows: Vec<Row> = vec![
        // Partitions: a pod on a node that stopped reporting may still run.
        (
            "a restarted gang beside its old pod terminating on a partitioned node",
            vec![
                (0.0, fleet()),
                (0.0, heard_job(job("j", 1, 1, json!({})))),
                (1.0, heard_pod(bound("p0", 0, "n1"))),
                (2.0, heard_node(node("n1", "b1", "Unknown", false))),
                (3.0, heard_pod(terminating(bound("p0", 0, "n1")))),
                (4.0, heard_pod(bound("q0", 1, "n2"))),
            ],
            vec![TwoAttemptsLive],
        ),
        (
            "a restarted gang once the partitioned node is tainted out-of-service",
            vec![
                (0.0, fleet()),
                (0.0, heard_job(job("j", 1, 1, json!({})))),
                (1.0, heard_pod(bound("p0", 0, "n1"))),
                (2.0, heard_node(node("n1", "b1", "Unknown", false))),
                (3.0, heard_pod(terminating(bound("p0", 0, "n1")))),
                (4.0, heard_node(node("n1", "b1", "Unknown", true))),
                (5.0, heard_pod(bound("q0", 1, "n2"))),
                (6.0, heard_pod(terminating(bound("p0", 0, "n1")))),
            ],
            vec![],
        ),
        (
            "a restarted gang once the old pod's object is gone",
            vec![
                (0.0, fleet()),
                (0.0, heard_job(job("j", 1, 1, json!({})))),
                (1.0, heard_pod(terminating(bound("p0", 0, "n1")))),
                (2.0, PodGone("ns/p0")),
                (3.0, heard_pod(bound("q0", 1, "n2"))),
            ],
            vec![],
        ),
        // Half-released gangs.
        (
            "a gang whose gates stay lifted for some pods only, past the bound",
            vec![
                (0.0, heard_job(job("j", 2, 1, json!({})))),
                (1.0, heard_pod(pod("p0", 0, true, "Pending", 1))),
                (1.0, heard_pod(pod("p1", 0, true, "Pending", 1))),
                (2.0, heard_pod(pod("p0", 0, false, "Pending", 1))),
                (2.0 + late, Tick),
            ],
            vec![GatesHalfLifted],
        ),
        (
            "a gang whose gates are lifted one by one within the bound",
            vec![
                (0.0, heard_job(job("j", 2, 1, json!({})))),
                (1.0, heard_pod(pod("p0", 0, true, "Pending", 1))),
                (1.0, heard_pod(pod("p1", 0, true, "Pending", 1))),
                (2.0, heard_pod(pod("p0", 0, false, "Pending", 1))),
                (5.0, heard_pod(pod("p1", 0, false, "Pending", 1))),
                (5.0 + late, Tick),
            ],
            vec![],
        ),
        // Topology.
        (
            "pods of one attempt bound in two blocks the pod set requires one of",
            made_in_one_block()
                .chain([
                    (1.0, heard_pod(bound("p0", 0, "n1"))),
                    (1.0, heard_pod(bound("p1", 0, "n3"))),
                ])
                .collect(),
            vec![SplitAcrossDomains],
        ),
        (
            "pods of one attempt bound in one block",
            made_in_one_block()
                .chain([
                    (1.0, heard_pod(bound("p0", 0, "n1"))),
                    (1.0, heard_pod(bound("p1", 0, "n2"))),
                ])
                .collect(),
            vec![],
        ),
        (
            "an attempt rolled back in one block and released again in another",
            made_in_one_block()
                .chain([
                    (1.0, heard_pod(bound("p0", 0, "n1"))),
                    (1.0, heard_pod(bound("p1", 0, "n2"))),
                    (2.0, heard_pod(terminating(bound("p0", 0, "n1")))),
                    (2.0, heard_pod(terminating(bound("p1", 0, "n2")))),
                    (3.0, PodGone("ns/p0")),
                    (3.0, PodGone("ns/p1")),
                    (4.0, heard_pod(pod("p0", 0, true, "Pending", 1))),
                    (4.0, heard_pod(pod("p1", 0, true, "Pending", 1))),
                    (5.0, heard_pod(bound("p1", 0, "n3"))),
                    (5.5, heard_pod(bound("p0", 0, "n3"))),
                ])
                .collect(),
            vec![],
        ),
        (
            "an attempt released again in another block while a pod of it still runs",
            made_in_one_block()
                .chain([
                    (1.0, heard_pod(bound("p0", 0, "n1"))),
                    (1.0, heard_pod(bound("p1", 0, "n2"))),
                    (3.0, PodGone("ns/p1")),
                    (5.0, heard_pod(bound("p1", 0, "n3"))),
                ])
                .collect(),
            vec![SplitAcrossDomains],
        ),
        (
            "pods in two blocks of a pod set that requires none",
            vec![
                (0.0, fleet()),
                (0.0, heard_job(job("j", 2, 1, json!({})))),
                (0.5, heard_pod(pod("p0", 0, true, "Pending", 1))),
                (0.5, heard_pod(pod("p1", 0, true, "Pending", 1))),
                (1.0, heard_pod(bound("p0", 0, "n1"))),
                (1.0, heard_pod(bound("p1", 0, "n3"))),
            ],
            vec![],
        ),
        // Pods known by their owner only.
        (
            "pods without Muster's labels count against their job's queue",
            vec![
                (
                    0.0,
                    heard_job(job(
                        "j",
                        3,
                        8,
                        json!({"phase": "Admitted",
                            "admission": {"clusterQueue": "a", "podSets": []}}),
                    )),
                ),
                (0.5, heard_pod(owned_only(pod("p0", 0, true, "Pending", 8)))),
                (0.5, heard_pod(owned_only(pod("p1", 0, true, "Pending", 8)))),
                (0.5, heard_pod(owned_only(pod("p2", 0, true, "Pending", 8)))),
                (
                    1.0,
                    heard_pod(owned_only(pod("p0", 0, false, "Running", 8))),
                ),
                (
                    1.0,
                    heard_pod(owned_only(pod("p1", 0, false, "Running", 8))),
                ),
                (
                    1.0,
                    heard_pod(owned_only(pod("p2", 0, false, "Running", 8))),
                ),
            ],
            vec![PodsOverQuota, PodsOverQuota],
        ),
        (
            "pods without Muster's labels seen before their job's admission",
            vec![
                (0.0, heard_job(job("j", 3, 8, json!({})))),
                (0.5, heard_pod(owned_only(pod("p0", 0, true, "Pending", 8)))),
                (0.5, heard_pod(owned_only(pod("p1", 0, true, "Pending", 8)))),
                (0.5, heard_pod(owned_only(pod("p2", 0, true, "Pending", 8)))),
                (
                    1.0,
                    heard_pod(owned_only(pod("p0", 0, false, "Running", 8))),
                ),
                (
                    1.0,
                    heard_pod(owned_only(pod("p1", 0, false, "Running", 8))),
                ),
                (
                    1.0,
                    heard_pod(owned_only(pod("p2", 0, false, "Running", 8))),
                ),
                (
                    2.0,
                    heard_job(job(
                        "j",
                        3,
                        8,
                        json!({"phase": "Admitted",
                            "admission": {"clusterQueue": "a", "podSets": []}}),
                    )),
                ),
            ],
            vec![PodsOverQuota, PodsOverQuota],
        ),
    ];
    let mut wrong = Vec::new();
    for (situation, heard, expected) in rows {
        let mut checker = Checker::new(limits(), BTreeSet::new());
        for (at, event) in heard {
            match event {
                Heard::Job(j) => checker.job(&j, at),
                Heard::Pod(p) => checker.pod(&p, at),
                Nodes(n) => checker.nodes_listed(&n),
                Heard::Node(n) => checker.node_seen(&n),
                PodGone(key) => checker.pod_gone(key),
                Tick => {
                    checker.tick(at);
                    checker.judge_releases(at);
                }
            }
        }
        let got: Vec<ViolationKind> = kinds(&checker)
            .into_iter()
            .filter(|k| *k != ViolationKind::AdmittedOverQuota)
            .collect();
        if got != expected {
            wrong.push(format!(
                "{situation}:\n  expected {expected:?}\n  got      {:?}",
                checker.violations()
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn blind_spells_are_summed_per_watch_and_over_all() {
    let mut checker = Checker::new(limits(), BTreeSet::new());
    checker.blind("Pod", 0.0, 0.5);
    checker.blind("Pod", 100.0, 104.0);
    checker.blind("GpuJob", 101.0, 103.0);
    assert!((checker.blind_seconds() - 4.5).abs() < 1e-9);
    assert!((checker.blind_by_kind()["GpuJob"] - 2.0).abs() < 1e-9);
}

#[test]
fn a_gang_half_released_while_no_replica_led_is_not_held_against_the_bound() {
    let half_released = |checker: &mut Checker| {
        checker.job(&job("j", 2, 1, json!({})), 0.0);
        checker.pod(&pod("p0", 0, true, "Pending", 1), 1.0);
        checker.pod(&pod("p1", 0, true, "Pending", 1), 1.0);
        checker.pod(&pod("p0", 0, false, "Pending", 1), 2.0);
        checker.pod(&pod("p1", 0, false, "Pending", 1), 80.0);
    };
    let half = |checker: &Checker| {
        kinds(checker)
            .into_iter()
            .filter(|k| *k == ViolationKind::GatesHalfLifted)
            .count()
    };
    // 78 s half released by the clock, 23 s of it with a leader: within the bound.
    let mut led = Checker::new(limits(), BTreeSet::new());
    led.led(0.0, 10.0);
    led.led(65.0, 200.0);
    half_released(&mut led);
    led.finish(100.0);
    assert_eq!(half(&led), 0, "{:?}", led.violations());
    assert_eq!(led.leaderless_seconds(100.0), Some(55.0));
    // Told nothing of leadership, every second counts.
    let mut untold = Checker::new(limits(), BTreeSet::new());
    half_released(&mut untold);
    untold.finish(100.0);
    assert_eq!(half(&untold), 1, "{:?}", untold.violations());
    assert_eq!(untold.leaderless_seconds(100.0), None);
}
