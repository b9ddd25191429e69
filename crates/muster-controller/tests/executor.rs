//! What the controller sends, against the kube-rs mock API server: the exact sequence of an
//! admission (Service, gated pods, every gate lifted, then the status), retries on conflicts
//! and server errors, an eviction that writes the status before deleting pods, and no write
//! at all from a controller that lost its lease.

mod support;

use muster_api::ObjectRef;
use muster_api::wire::{ADMISSION_GATE, ATTEMPT_LABEL, FINALIZER, JOB_LABEL};
use std::collections::BTreeMap;
use std::time::Duration;

use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use muster_controller::action::JobRead;
use muster_controller::executor::{Executor, Retry, Written};
use muster_controller::plan::{Action, plan};
use muster_controller::state::State;
use muster_controller::workload::{WorkloadPatch, WorkloadRef};
use serde_json::{Value, json};
use support::{at, cluster, job};
use tokio::sync::watch;

/// One request as the server saw it.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    path: String,
    content_type: String,
    body: Value,
}

/// Serves until the client hangs up. `failures` maps a request number (0-based) to the
/// status code to fail it with; pod creates named in `exists` get 409 AlreadyExists, and a
/// read of such a pod returns what was asked for (an earlier try of the same release made
/// it) — or, named `name@node`, the same pod pinned to `node` (another release made it).
/// Every other request succeeds with a plausible object.
async fn serve(
    mut handle: tower_test::mock::Handle<Request<Body>, Response<Body>>,
    failures: BTreeMap<usize, u16>,
    exists: Vec<String>,
) -> Vec<Seen> {
    let mut seen = Vec::new();
    let moved: BTreeMap<String, String> = exists
        .iter()
        .filter_map(|e| e.split_once('@'))
        .map(|(name, node)| (name.to_owned(), node.to_owned()))
        .collect();
    let exists: Vec<String> = exists
        .iter()
        .map(|e| e.split('@').next().unwrap_or_default().to_owned())
        .collect();
    let mut made: BTreeMap<String, Value> = BTreeMap::new();
    while let Some((request, respond)) = handle.next_request().await {
        let method = request.method().to_string();
        let path = request.uri().path().to_owned();
        let content_type = request
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let bytes = request
            .into_body()
            .collect_bytes()
            .await
            .unwrap_or_default();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or_default();
        let name = path.rsplit('/').next().unwrap_or_default().to_owned();
        let (code, reply) = if let Some(code) = failures.get(&seen.len()) {
            let reason = if *code == 409 {
                "Conflict"
            } else {
                "InternalError"
            };
            (
                *code,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                       "reason": reason, "code": code, "message": "try again"}),
            )
        } else if method == "POST"
            && exists.contains(
                &body["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        {
            let name = body["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let mut existing = body.clone();
            if let Some(node) = moved.get(&name) {
                existing["spec"]["nodeSelector"]["kubernetes.io/hostname"] = json!(node);
            }
            made.insert(name, existing);
            (
                409,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                       "reason": "AlreadyExists", "code": 409, "message": "already exists"}),
            )
        } else if method == "GET" && made.contains_key(&name) {
            (200, made[&name].clone())
        } else {
            plausible(&method, &path, &name, &body)
        };
        let response = Response::builder()
            .status(code)
            .body(Body::from(serde_json::to_vec(&reply).unwrap_or_default()))
            .unwrap_or_else(|_| Response::new(Body::from(Vec::new())));
        respond.send_response(response);
        seen.push(Seen {
            method,
            path,
            content_type,
            body,
        });
    }
    seen
}

/// What the server answers a request that neither fails nor finds its object made before: a
/// plausible object of the kind the path names.
fn plausible(method: &str, path: &str, name: &str, body: &Value) -> (u16, Value) {
    if method == "POST" {
        (201, body.clone())
    } else if method == "GET" && path.ends_with("/pods") {
        (
            200,
            json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": []}),
        )
    } else if path.contains("/provisioningrequests/") {
        (
            200,
            json!({"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
                   "metadata": {"name": name, "namespace": "team-a"},
                   "spec": {"provisioningClassName": "queued-provisioning.gke.io",
                            "podSets": []}}),
        )
    } else if path.contains("/podtemplates/") {
        (
            200,
            json!({"apiVersion": "v1", "kind": "PodTemplate",
                   "metadata": {"name": name, "namespace": "team-a"}}),
        )
    } else if path.contains("/services/") {
        (
            200,
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": name, "namespace": "team-a"}}),
        )
    } else if path.contains("/jobsets/") {
        (
            200,
            json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                   "metadata": {"name": name, "namespace": "team-a"},
                   "spec": {"replicatedJobs": []}}),
        )
    } else if path.contains("/jobs/") {
        (
            200,
            json!({"apiVersion": "batch/v1", "kind": "Job",
                   "metadata": {"name": name, "namespace": "team-a"}}),
        )
    } else if path.contains("/gpujobs/") {
        let mut object = serde_json::to_value(job("a", 2, 0)).unwrap_or_default();
        // A status write is a JSON patch: applied to the fixture as the API server would.
        if let Ok(patch) = serde_json::from_value::<json_patch::Patch>(body.clone()) {
            let _ = json_patch::patch(&mut object, &patch);
        }
        (200, object)
    } else {
        (
            200,
            json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": name, "namespace": "team-a"}}),
        )
    }
}

fn executor(client: Client, leading: bool, concurrency: usize) -> (Executor, watch::Sender<bool>) {
    let (tx, rx) = watch::channel(leading);
    let mut executor = Executor::new(client, rx, None);
    executor.gang_concurrency = concurrency;
    executor.retry = Retry {
        attempts: 4,
        base: Duration::from_millis(1),
        max: Duration::from_millis(4),
    };
    executor.gate_retry = Retry {
        attempts: 8,
        base: Duration::from_millis(1),
        max: Duration::from_millis(4),
    };
    (executor, tx)
}

/// The release a fresh cluster gives job `a` of `count` pods.
fn release(count: u32) -> (Action, State) {
    let mut index = cluster(1024, vec![job("a", count, 0)]);
    let pass = plan(&mut index, at(10));
    let action = pass
        .actions
        .into_iter()
        .find(|a| matches!(a, Action::Release { .. }))
        .unwrap_or_else(|| unreachable!("no release"));
    (action, index)
}

async fn run(
    action: &Action,
    failures: BTreeMap<usize, u16>,
    exists: Vec<String>,
    leading: bool,
) -> (Result<usize, String>, Vec<Seen>) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let server = tokio::spawn(serve(handle, failures, exists));
    let (executor, _leader) = executor(Client::new(service, "default"), leading, 1);
    // The job as a pass read it: the fixture, at version 1.
    let read = JobRead::of(&job("a", 2, 0));
    let result = executor
        .execute(action, Some(&read))
        .await
        .map(|w| w.len())
        .map_err(|e| e.to_string());
    drop(executor);
    let seen = server.await.unwrap_or_default();
    (result, seen)
}

fn calls(seen: &[Seen]) -> Vec<(&str, &str)> {
    seen.iter()
        .map(|s| (s.method.as_str(), s.path.as_str()))
        .collect()
}

#[tokio::test]
async fn an_admission_creates_the_whole_gang_gated_then_opens_every_gate_then_writes_status() {
    let (action, _) = release(2);
    let (result, seen) = run(&action, BTreeMap::new(), Vec::new(), true).await;
    assert_eq!(result, Ok(5), "2 pods created, 2 ungated, 1 job");
    assert_eq!(
        calls(&seen),
        [
            ("POST", "/api/v1/namespaces/team-a/services"),
            ("POST", "/api/v1/namespaces/team-a/pods"),
            ("POST", "/api/v1/namespaces/team-a/pods"),
            ("PATCH", "/api/v1/namespaces/team-a/pods/a-workers-0"),
            ("PATCH", "/api/v1/namespaces/team-a/pods/a-workers-1"),
            (
                "PATCH",
                "/apis/muster.dev/v1alpha1/namespaces/team-a/gpujobs/a/status"
            ),
        ]
    );
    assert_eq!(
        seen[1].body["spec"]["schedulingGates"],
        json!([{"name": ADMISSION_GATE}])
    );
    assert_eq!(seen[3].body, json!({"spec": {"schedulingGates": []}}));
    // The status goes whole, by a JSON patch, so fields left out are removed, and only onto
    // the version of the job the pass read.
    assert_eq!(seen[5].content_type, "application/json-patch+json");
    assert_eq!(
        seen[5].body[0],
        json!({"op": "replace", "path": "/metadata/resourceVersion", "value": "1"})
    );
    assert_eq!(seen[5].body[1]["op"], "add");
    assert_eq!(seen[5].body[1]["path"], "/status");
    let status = &seen[5].body[1]["value"];
    assert_eq!(status["phase"], "Admitted");
    assert_eq!(
        status["admission"]["podSets"][0]["nodes"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
}

#[tokio::test]
async fn conflicts_and_server_errors_are_retried() {
    let (action, _) = release(2);
    // The Service create gets a 500, the first ungate a 409 Conflict, the status a 503.
    let failures = BTreeMap::from([(0, 500), (4, 409), (7, 503)]);
    let (result, seen) = run(&action, failures, Vec::new(), true).await;
    assert_eq!(result, Ok(5));
    assert_eq!(seen.len(), 9);
    assert_eq!(
        calls(&seen)
            .iter()
            .filter(|(m, p)| *m == "POST" && p.ends_with("/services"))
            .count(),
        2
    );
}

/// A gate is lifted through more faults than other writes ride out: with some of the gang's
/// pods free to run, the release finishes as soon as the API server answers again.
#[tokio::test]
async fn lifting_the_gates_rides_out_a_longer_outage_than_other_writes() {
    let (action, _) = release(2);
    // Service, 2 pods; the first ungate fails 6 times (more than `retry`'s 4 attempts).
    let failures: BTreeMap<usize, u16> = (3..9).map(|i| (i, 503)).collect();
    let (result, seen) = run(&action, failures, Vec::new(), true).await;
    assert_eq!(result, Ok(5), "2 pods created, 2 ungated, 1 job");
    let ungates = seen
        .iter()
        .filter(|s| s.method == "PATCH" && s.path.contains("/pods/"))
        .count();
    assert_eq!(ungates, 8, "6 failed tries and 2 lifts");
}

#[tokio::test]
async fn an_interrupted_release_is_finished_not_failed() {
    let (action, _) = release(2);
    let exists = vec!["a".into(), "a-workers-0".into()];
    let (result, seen) = run(&action, BTreeMap::new(), exists, true).await;
    assert_eq!(result, Ok(5), "1 pod created, 1 found, 2 ungated, 1 job");
    // The Service's selector (set again: it may be an earlier attempt's), 2 ungates, 1 job.
    assert_eq!(seen.iter().filter(|s| s.method == "PATCH").count(), 4);
}

#[tokio::test]
async fn a_pod_another_release_of_the_attempt_placed_elsewhere_fails_the_release() {
    let (action, _) = release(2);
    let exists = vec!["a-workers-1@elsewhere".into()];
    let (result, seen) = run(&action, BTreeMap::new(), exists, true).await;
    assert!(
        result
            .as_ref()
            .is_err_and(|e| e.contains("a-workers-1") && e.contains("pinned to elsewhere")),
        "{result:?}"
    );
    // Read, found pinned elsewhere, and never ungated: no gate is lifted, no status written.
    assert!(calls(&seen).contains(&("GET", "/api/v1/namespaces/team-a/pods/a-workers-1")));
    assert!(
        !seen
            .iter()
            .any(|s| s.method == "PATCH" && s.path.contains("/pods/"))
    );
    assert!(!seen.iter().any(|s| s.path.contains("/gpujobs/")));
}

#[tokio::test]
async fn a_pod_the_release_finds_already_made_is_returned_as_written() {
    // A create whose answer was lost on the way back: the pod exists, pinned where this
    // release pins it. The release reads it and returns it with what it wrote, so the pass
    // after it sees the whole gang even while the pods' watch lags.
    let (action, _) = release(1);
    let Action::Release { gang, .. } = &action else {
        unreachable!("a release")
    };
    let node = gang.pods[0]
        .spec
        .as_ref()
        .and_then(|s| s.node_selector.as_ref())
        .and_then(|s| s.get("kubernetes.io/hostname"))
        .cloned()
        .unwrap_or_default();
    let exists = vec![format!("a-workers-0@{node}")];
    let (result, seen) = run(&action, BTreeMap::new(), exists, true).await;
    assert!(calls(&seen).contains(&("GET", "/api/v1/namespaces/team-a/pods/a-workers-0")));
    assert_eq!(result, Ok(2), "the pod found and the job's status");
}

#[tokio::test]
async fn a_persistent_error_gives_up_after_the_retry_budget() {
    let (action, _) = release(2);
    let failures = (0..10).map(|i| (i, 500)).collect();
    let (result, seen) = run(&action, failures, Vec::new(), true).await;
    assert!(result.is_err());
    assert_eq!(seen.len(), 4, "4 attempts at the Service, nothing after");
}

#[tokio::test]
async fn a_controller_that_lost_its_lease_writes_nothing() {
    let (action, _) = release(2);
    let (result, seen) = run(&action, BTreeMap::new(), Vec::new(), false).await;
    assert!(result.is_err_and(|e| e.contains("not the leader")));
    assert!(seen.is_empty());
}

/// The Event of a preemption.
fn preempted() -> muster_controller::plan::Note {
    muster_controller::plan::Note {
        warning: true,
        reason: "Preempted".into(),
        message: "preempted".into(),
    }
}

#[tokio::test]
async fn an_eviction_writes_the_status_before_deleting_pods() {
    let action = Action::Evict {
        job: ObjectRef::new("team-a", "a"),
        status: Box::default(),
        pods: vec![
            ObjectRef::new("team-a", "a-workers-0"),
            ObjectRef::new("team-a", "a-workers-1"),
        ],
        event: preempted(),
        workload: None,
    };
    let (result, seen) = run(&action, BTreeMap::new(), Vec::new(), true).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(
        calls(&seen),
        [
            (
                "PATCH",
                "/apis/muster.dev/v1alpha1/namespaces/team-a/gpujobs/a/status"
            ),
            ("DELETE", "/api/v1/namespaces/team-a/pods/a-workers-0"),
            ("DELETE", "/api/v1/namespaces/team-a/pods/a-workers-1"),
        ]
    );
}

#[tokio::test]
async fn a_queue_entry_s_eviction_writes_the_status_then_suspends_its_job_and_deletes_nothing() {
    let action = Action::Evict {
        job: ObjectRef::new("team-a", "a"),
        status: Box::default(),
        pods: Vec::new(),
        event: preempted(),
        workload: Some(WorkloadRef::job(ObjectRef::new("team-a", "train"))),
    };
    let (result, seen) = run(&action, BTreeMap::new(), Vec::new(), true).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(
        calls(&seen),
        [
            (
                "PATCH",
                "/apis/muster.dev/v1alpha1/namespaces/team-a/gpujobs/a/status"
            ),
            ("PATCH", "/apis/batch/v1/namespaces/team-a/jobs/train"),
        ]
    );
    assert_eq!(seen[1].body, json!({"spec": {"suspend": true}}));
    assert_eq!(seen[1].content_type, "application/merge-patch+json");
}

/// The release of job `a` of `count` pods as the queue entry of Job `team-a/train`: one
/// merge patch of the Job, `ungated` as given.
fn job_release(count: u32, ungated: bool) -> Action {
    let (mut action, _) = release(count);
    if let Action::Release { gang, .. } = &mut action {
        gang.pods.clear();
        gang.workload = Some(Box::new(muster_controller::release::WorkloadRelease {
            workload: WorkloadRef::job(ObjectRef::new("team-a", "train")),
            patch: WorkloadPatch::Merge(json!({"spec": {"suspend": false}})),
            ungated,
        }));
    }
    action
}

#[tokio::test]
async fn a_queue_entry_s_release_patches_its_job_then_writes_the_status_and_its_pins_patch_each_pod()
 {
    let action = job_release(2, false);
    let (result, seen) = run(&action, BTreeMap::new(), Vec::new(), true).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(
        calls(&seen),
        [
            ("PATCH", "/apis/batch/v1/namespaces/team-a/jobs/train"),
            (
                "PATCH",
                "/apis/muster.dev/v1alpha1/namespaces/team-a/gpujobs/a/status"
            ),
        ],
        "no Service, no pod created"
    );
    let pins = Action::PinPods {
        job: ObjectRef::new("team-a", "a"),
        pins: (0..2)
            .map(|i| {
                (
                    ObjectRef::new("team-a", &format!("train-{i}-abcde")),
                    json!({"spec": {"nodeSelector": {"kubernetes.io/hostname": format!("n{i}")}}}),
                )
            })
            .collect(),
    };
    let (result, seen) = run(&pins, BTreeMap::new(), Vec::new(), true).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(
        calls(&seen),
        [
            ("PATCH", "/api/v1/namespaces/team-a/pods/train-0-abcde"),
            ("PATCH", "/api/v1/namespaces/team-a/pods/train-1-abcde"),
        ]
    );
}

#[tokio::test]
async fn an_ungated_release_writes_the_status_before_the_job_and_a_failed_status_releases_nothing()
{
    let action = job_release(1, true);
    let (result, seen) = run(&action, BTreeMap::new(), Vec::new(), true).await;
    assert_eq!(result, Ok(2), "the entry and the Job, both written");
    let status = "/apis/muster.dev/v1alpha1/namespaces/team-a/gpujobs/a/status";
    let job = "/apis/batch/v1/namespaces/team-a/jobs/train";
    let writes: Vec<_> = calls(&seen)
        .into_iter()
        .filter(|(method, _)| *method == "PATCH")
        .collect();
    assert_eq!(writes, [("PATCH", status), ("PATCH", job)]);

    // The status write fails for good: the Job stays suspended.
    let failures = (0..8).map(|i| (i, 500)).collect();
    let (result, seen) = run(&action, failures, Vec::new(), true).await;
    assert!(result.is_err(), "{result:?}");
    assert!(
        !calls(&seen).iter().any(|(_, path)| *path == job),
        "{:?}",
        calls(&seen)
    );
}

#[tokio::test]
async fn a_queue_entry_s_release_that_failed_reads_its_job_back_with_the_entry_and_pods() {
    let action = job_release(1, true);
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let server = tokio::spawn(serve(handle, BTreeMap::new(), Vec::new()));
    let (executor, _leader) = executor(Client::new(service, "default"), true, 1);
    let read = executor.read_back(&action).await;
    drop(executor);
    let seen = server.await.unwrap_or_default();
    let read = read.unwrap_or_else(|e| unreachable!("{e}"));
    assert!(
        read.iter().any(|w| matches!(w, Written::Workload(_))),
        "{read:?}"
    );
    assert_eq!(
        calls(&seen),
        [
            (
                "GET",
                "/apis/muster.dev/v1alpha1/namespaces/team-a/gpujobs/a"
            ),
            ("GET", "/apis/batch/v1/namespaces/team-a/jobs/train"),
            ("GET", "/api/v1/namespaces/team-a/pods"),
        ]
    );
}

#[tokio::test]
async fn a_gang_of_kubernetes_own_gang_api_makes_its_pod_group_before_anything_else() {
    let (mut action, _) = release(2);
    let Action::Release { gang, .. } = &mut action else {
        unreachable!()
    };
    muster_controller::release::join_scheduling_group(gang);
    let (result, seen) = run(&action, BTreeMap::new(), Vec::new(), true).await;
    assert!(result.is_ok(), "{result:?}");
    let calls = calls(&seen);
    assert_eq!(
        calls[0],
        (
            "POST",
            "/apis/scheduling.k8s.io/v1alpha2/namespaces/team-a/podgroups"
        )
    );
    assert_eq!(calls[1], ("POST", "/api/v1/namespaces/team-a/services"));
    assert_eq!(
        seen[0].body["spec"]["schedulingPolicy"]["gang"]["minCount"],
        2
    );
    assert_eq!(
        seen[2].body["spec"]["schedulingGroup"]["podGroupName"],
        seen[0].body["metadata"]["name"]
    );
}

#[tokio::test]
async fn a_jobset_entry_s_release_is_one_json_patch_of_its_jobset_and_its_eviction_a_merge_patch() {
    let (mut action, _) = release(2);
    let Action::Release { gang, .. } = &mut action else {
        unreachable!()
    };
    gang.pods.clear();
    let ops = json!([
        {"op": "test", "path": "/spec/replicatedJobs/0/name", "value": "slice"},
        {"op": "add", "path": "/spec/suspend", "value": false},
    ]);
    gang.workload = Some(Box::new(muster_controller::release::WorkloadRelease {
        workload: WorkloadRef::jobset(ObjectRef::new("team-a", "multislice")),
        patch: WorkloadPatch::Json(ops.clone()),
        ungated: false,
    }));
    let (result, seen) = run(&action, BTreeMap::new(), Vec::new(), true).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(
        calls(&seen)[0],
        (
            "PATCH",
            "/apis/jobset.x-k8s.io/v1alpha2/namespaces/team-a/jobsets/multislice"
        )
    );
    assert_eq!(seen[0].content_type, "application/json-patch+json");
    assert_eq!(seen[0].body, ops);

    let evict = Action::Evict {
        job: ObjectRef::new("team-a", "a"),
        status: Box::default(),
        pods: Vec::new(),
        event: preempted(),
        workload: Some(WorkloadRef::jobset(ObjectRef::new("team-a", "multislice"))),
    };
    let (result, seen) = run(&evict, BTreeMap::new(), Vec::new(), true).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(
        calls(&seen)[1],
        (
            "PATCH",
            "/apis/jobset.x-k8s.io/v1alpha2/namespaces/team-a/jobsets/multislice"
        )
    );
    assert_eq!(seen[1].body, json!({"spec": {"suspend": true}}));
    assert_eq!(seen[1].content_type, "application/merge-patch+json");
}

/// Requests per admitted job, and the time from decision to all gates lifted for a 64-pod
/// gang against the mock server (printed for docs/performance.md; never asserted).
#[tokio::test]
async fn a_64_pod_gang_costs_one_request_per_pod_and_gate_plus_two() {
    let mut index = support::cluster(1024, Vec::new());
    for n in 5..=64 {
        index.apply(support::node(&format!("n{n}"), "b1"));
    }
    let mut big = job("a", 64, 0);
    if let Some(t) = big.spec.pod_sets[0].topology.as_mut() {
        t.required = None;
    }
    index.apply(big);
    let started = std::time::Instant::now();
    let pass = plan(&mut index, at(10));
    let action = pass
        .actions
        .into_iter()
        .find(|a| matches!(a, Action::Release { .. }))
        .unwrap_or_else(|| unreachable!("no release"));
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let server = tokio::spawn(serve(handle, BTreeMap::new(), Vec::new()));
    let (executor, _leader) = executor(Client::new(service, "default"), true, 16);
    let result = executor
        .execute(&action, index.decided_on(&action).as_ref())
        .await;
    let elapsed = started.elapsed();
    drop(executor);
    let seen = server.await.unwrap_or_default();
    assert!(result.is_ok());
    assert_eq!(seen.len(), 1 + 64 + 64 + 1);
    // Every create comes before the first gate is lifted.
    let first_patch = seen.iter().position(|s| s.method == "PATCH").unwrap_or(0);
    assert_eq!(first_patch, 65);
    println!(
        "64-pod gang: {} requests, decision to status written in {:.1} ms",
        seen.len(),
        elapsed.as_secs_f64() * 1000.0
    );
}

#[tokio::test]
async fn a_finalizer_is_added_in_one_apply_and_a_removal_conflict_is_retried_from_a_fresh_read() {
    let action = Action::AddFinalizer {
        job: ObjectRef::new("team-a", "a"),
    };
    // Adding the finalizer is one apply that names only Muster's entry. Removing it reads,
    // patches, and on a conflict reads again before patching again.
    let finalize = Action::Finalize {
        job: ObjectRef::new("team-a", "a"),
        pods: Vec::new(),
    };
    let (result, seen) = run(&action, BTreeMap::new(), Vec::new(), true).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(
        calls(&seen),
        [(
            "PATCH",
            "/apis/muster.dev/v1alpha1/namespaces/team-a/gpujobs/a"
        )]
    );
    assert_eq!(seen[0].body["metadata"]["finalizers"], json!([FINALIZER]));
    let failures = BTreeMap::from([(2, 409)]);
    let (result, seen) = run(&finalize, failures, Vec::new(), true).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(
        calls(&seen),
        [
            ("DELETE", "/api/v1/namespaces/team-a/services/a"),
            (
                "GET",
                "/apis/muster.dev/v1alpha1/namespaces/team-a/gpujobs/a"
            ),
            (
                "PATCH",
                "/apis/muster.dev/v1alpha1/namespaces/team-a/gpujobs/a"
            ),
            (
                "GET",
                "/apis/muster.dev/v1alpha1/namespaces/team-a/gpujobs/a"
            ),
            (
                "PATCH",
                "/apis/muster.dev/v1alpha1/namespaces/team-a/gpujobs/a"
            ),
        ]
    );
    assert_eq!(seen[4].body["metadata"]["finalizers"], json!([]));
}

#[tokio::test]
async fn buying_capacity_creates_templates_then_requests_then_writes_status_and_cleans_up() {
    let templates = vec![muster_provisioning_template("big-1-workers")];
    let requests = vec![muster_provisioning_request("big-1")];
    let action = provision(templates, requests);
    // The request exists from an interrupted attempt: that counts as created.
    let (result, seen) = run(&action, BTreeMap::new(), vec!["big-1".into()], true).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(
        calls(&seen),
        [
            ("POST", "/api/v1/namespaces/team-a/podtemplates"),
            (
                "POST",
                "/apis/autoscaling.x-k8s.io/v1/namespaces/team-a/provisioningrequests"
            ),
            (
                "PATCH",
                "/apis/muster.dev/v1alpha1/namespaces/team-a/gpujobs/a/status"
            ),
        ]
    );
    let cleanup = Action::Unprovision {
        job: ObjectRef::new("team-a", "a"),
        requests: vec![ObjectRef::new("team-a", "big-1")],
        templates: vec![ObjectRef::new("team-a", "big-1-workers")],
    };
    // The template is already gone (404): that counts as deleted. Templates go first.
    let failures = BTreeMap::from([(0, 404)]);
    let (result, seen) = run(&cleanup, failures, Vec::new(), true).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(
        calls(&seen),
        [
            (
                "DELETE",
                "/api/v1/namespaces/team-a/podtemplates/big-1-workers"
            ),
            (
                "DELETE",
                "/apis/autoscaling.x-k8s.io/v1/namespaces/team-a/provisioningrequests/big-1"
            ),
        ]
    );
    // A template that cannot be deleted keeps its request: the request is what a later pass
    // finds (as an orphan) to delete both again.
    let failures = BTreeMap::from([(0, 403)]);
    let (result, seen) = run(&cleanup, failures, Vec::new(), true).await;
    assert!(result.is_err());
    assert!(
        calls(&seen)
            .iter()
            .all(|(_, path)| !path.contains("provisioningrequests")),
        "{:?}",
        calls(&seen)
    );
}

/// Buying capacity for job `a` with these objects.
fn provision(
    templates: Vec<k8s_openapi::api::core::v1::PodTemplate>,
    requests: Vec<muster_api::ProvisioningRequest>,
) -> Action {
    Action::Provision {
        job: ObjectRef::new("team-a", "a"),
        templates,
        requests,
        status: Box::default(),
        event: muster_controller::plan::Note {
            warning: false,
            reason: "Provisioning".into(),
            message: "asked the cluster autoscaler".into(),
        },
    }
}

fn muster_provisioning_template(name: &str) -> k8s_openapi::api::core::v1::PodTemplate {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PodTemplate",
        "metadata": {"name": name, "namespace": "team-a"},
        "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}
    }))
    .unwrap_or_default()
}

fn muster_provisioning_request(name: &str) -> muster_api::ProvisioningRequest {
    serde_json::from_value(json!({
        "apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"provisioningClassName": "queued-provisioning.gke.io",
                 "podSets": [{"podTemplateRef": {"name": "big-1-workers"}, "count": 4}]}
    }))
    .unwrap_or_default()
}

#[tokio::test]
async fn a_new_attempt_points_the_existing_service_at_its_own_pods() {
    let (action, _) = release(2);
    // The Service of an earlier attempt exists.
    let (result, seen) = run(&action, BTreeMap::new(), vec!["a".to_owned()], true).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(
        calls(&seen)[..2],
        [
            ("POST", "/api/v1/namespaces/team-a/services"),
            ("PATCH", "/api/v1/namespaces/team-a/services/a"),
        ]
    );
    assert_eq!(
        seen[1].body,
        json!({"spec": {"selector": {JOB_LABEL: "a", ATTEMPT_LABEL: "0"}}})
    );
    assert_eq!(
        seen[0].body["spec"]["selector"][ATTEMPT_LABEL], "0",
        "a fresh Service selects only the current attempt too"
    );
}

#[tokio::test]
async fn a_template_left_by_a_cut_off_attempt_is_replaced() {
    let action = provision(
        vec![muster_provisioning_template("big-1-workers")],
        vec![muster_provisioning_request("big-1")],
    );
    let (result, seen) = run(&action, BTreeMap::new(), vec!["big-1-workers".into()], true).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(
        calls(&seen)[..3],
        [
            ("POST", "/api/v1/namespaces/team-a/podtemplates"),
            (
                "DELETE",
                "/api/v1/namespaces/team-a/podtemplates/big-1-workers"
            ),
            ("POST", "/api/v1/namespaces/team-a/podtemplates"),
        ]
    );
}

/// A gang of one pod has no gate and no Service: its release is the pod and the status (an
/// Event aside), with no request to lift a gate; the pod is told its own host name.
#[tokio::test]
async fn a_gang_of_one_is_released_without_a_gate_to_lift_or_a_service() {
    let (action, _) = release(1);
    let (result, seen) = run(&action, BTreeMap::new(), Vec::new(), true).await;
    assert!(result.is_ok(), "{result:?}");
    let writes: Vec<(&str, &str)> = calls(&seen)
        .into_iter()
        .filter(|(_, path)| !path.contains("/events"))
        .collect();
    assert_eq!(
        writes,
        [
            ("POST", "/api/v1/namespaces/team-a/pods"),
            (
                "PATCH",
                "/apis/muster.dev/v1alpha1/namespaces/team-a/gpujobs/a/status"
            ),
        ]
    );
    let gang = match &action {
        Action::Release { gang, .. } => gang,
        other => unreachable!("release(1) is a release: {other:?}"),
    };
    assert!(gang.service.is_none());
    let spec = gang.pods[0].spec.clone().unwrap_or_default();
    assert_eq!(spec.subdomain, None);
    let env = spec.containers[0].env.clone().unwrap_or_default();
    let peers = env.iter().find(|e| e.name == "MUSTER_PEER_HOSTS");
    assert_eq!(
        peers.and_then(|e| e.value.as_deref()),
        spec.hostname.as_deref()
    );
}

/// The status a release writes, written alone.
fn status_write_of_a_release() -> Action {
    let (action, _) = release(1);
    let Action::Release { job, status, .. } = action else {
        unreachable!("a release")
    };
    Action::JobStatus {
        job,
        status,
        event: None,
    }
}

/// A write retried after a transient error is not sent again once leadership has changed
/// hands in between, even when this replica leads again by then: the new term plans from what
/// the API server shows, and a write planned in the old term could land over the new term's
/// (a status of a job that has ended since, say).
#[tokio::test]
async fn a_retry_is_not_sent_when_leadership_flipped_since_the_action_began() {
    let status_write = status_write_of_a_release();
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let (executor, leader) = executor(Client::new(service, "default"), true, 1);
    let server = tokio::spawn(async move {
        let mut requests = 0;
        while let Some((_, respond)) = handle.next_request().await {
            requests += 1;
            // Leadership is lost and won back while the first attempt is answered.
            leader.send_replace(false);
            leader.send_replace(true);
            let reply = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                               "reason": "InternalError", "code": 500, "message": "try again"});
            let response = Response::builder()
                .status(500)
                .body(Body::from(serde_json::to_vec(&reply).unwrap_or_default()))
                .unwrap_or_else(|_| Response::new(Body::from(Vec::new())));
            respond.send_response(response);
        }
        requests
    });
    let result = executor.execute(&status_write, None).await;
    drop(executor);
    assert!(
        result
            .as_ref()
            .is_err_and(|e| e.to_string().contains("not the leader")),
        "{result:?}"
    );
    assert_eq!(
        server.await.unwrap_or_default(),
        1,
        "sent once, not retried"
    );
}

/// A write handed over and held back (a release waiting for jobs' ends to land) belongs to the
/// leadership of the pass that made it: lost and won back before it goes, it is not sent at
/// all, as the new term plans from what the API server shows.
#[tokio::test]
async fn a_write_held_back_is_not_sent_when_leadership_flipped_since_it_was_handed_over() {
    let status_write = status_write_of_a_release();
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let (executor, leader) = executor(Client::new(service, "default"), true, 1);
    let server = tokio::spawn(async move {
        let mut requests = 0;
        while let Some((_, respond)) = handle.next_request().await {
            requests += 1;
            respond.send_response(Response::new(Body::from(Vec::new())));
        }
        requests
    });
    let handed_over = executor.begun();
    leader.send_replace(false);
    leader.send_replace(true);
    let result = handed_over.execute_begun(&status_write, None).await;
    drop((executor, handed_over));
    assert!(
        result
            .as_ref()
            .is_err_and(|e| e.to_string().contains("not the leader")),
        "{result:?}"
    );
    assert_eq!(server.await.unwrap_or_default(), 0, "never sent");
}
