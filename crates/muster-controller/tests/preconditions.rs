//! A job's status is written only onto the version its pass read, against a mock API server
//! that keeps the job and enforces `resourceVersion` preconditions as the real one does: a
//! conflict caused by Muster's own finalizer is written onto the new version, an answer lost
//! on the way back is not written twice, and a job that changed in what the write was decided
//! on (its spec, another writer's status) is not written over: the controller reads it again
//! and the next pass decides from what it shows.

mod support;

use muster_api::wire::FINALIZER;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use muster_api::GpuJob;
use muster_controller::action::JobRead;
use muster_controller::executor::{ExecuteError, Executor, Retry};
use muster_controller::plan::{Action, plan};
use muster_controller::state::State;
use serde_json::{Value, json};
use support::{at, cluster, job};
use tokio::sync::watch;

/// What the mock server holds and saw.
#[derive(Default)]
struct Server {
    /// The job, as the API server has it.
    job: Value,
    /// Pods as created (gates lifted by the ungating patches).
    pods: Vec<Value>,
    /// Every request: method, path, body.
    seen: Vec<(String, String, Value)>,
    /// Carry the next status write out but answer 500, as if the answer were lost.
    lose_next_status: bool,
}

fn reply(code: u16, value: &Value) -> Response<Body> {
    Response::builder()
        .status(code)
        .body(Body::from(serde_json::to_vec(value).unwrap_or_default()))
        .unwrap_or_else(|_| Response::new(Body::from(Vec::new())))
}

fn failure(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
           "code": code, "message": reason})
}

impl Server {
    fn version(&self) -> u64 {
        self.job["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    /// The job, one version on.
    fn bump(&mut self) -> Value {
        let next = self.version() + 1;
        self.job["metadata"]["resourceVersion"] = json!(next.to_string());
        self.job.clone()
    }

    fn answer(&mut self, method: &str, path: &str, query: &str, body: Value) -> (u16, Value) {
        let job_path = path.contains("/gpujobs/");
        match (method, job_path) {
            ("PATCH", true) if path.ends_with("/status") => {
                let (wanted, status) = support::status_write(&body);
                if wanted.is_some_and(|v| v != self.version().to_string()) {
                    return (409, failure(409, "Conflict"));
                }
                self.job["status"] = status;
                let job = self.bump();
                if std::mem::take(&mut self.lose_next_status) {
                    return (500, failure(500, "InternalError"));
                }
                (200, job)
            }
            ("PATCH", true) => {
                self.job["metadata"]["finalizers"] = json!([FINALIZER]);
                (200, self.bump())
            }
            ("GET", true) => (200, self.job.clone()),
            ("GET", false) if query.contains("labelSelector") => (
                200,
                json!({"apiVersion": "v1", "kind": "PodList",
                       "metadata": {"resourceVersion": "50"}, "items": self.pods}),
            ),
            ("POST", false) if path.ends_with("/pods") => {
                self.pods.push(body.clone());
                (201, body)
            }
            ("PATCH", false) => {
                let name = path.rsplit('/').next().unwrap_or_default();
                let pod = self
                    .pods
                    .iter_mut()
                    .find(|p| p["metadata"]["name"] == json!(name));
                match pod {
                    Some(pod) => {
                        pod["spec"]["schedulingGates"] = json!([]);
                        (200, pod.clone())
                    }
                    None => (404, failure(404, "NotFound")),
                }
            }
            _ => (201, body),
        }
    }
}

/// An executor against a mock server holding `job`; the server's state to look at after.
fn start(job: &GpuJob) -> (Executor, Arc<Mutex<Server>>, watch::Sender<bool>) {
    let server = Arc::new(Mutex::new(Server {
        job: serde_json::to_value(job).unwrap_or_default(),
        ..Server::default()
    }));
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let shared = Arc::clone(&server);
    tokio::spawn(async move {
        while let Some((request, respond)) = handle.next_request().await {
            let method = request.method().to_string();
            let path = request.uri().path().to_owned();
            let query = request.uri().query().unwrap_or_default().to_owned();
            let bytes = request
                .into_body()
                .collect_bytes()
                .await
                .unwrap_or_default();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or_default();
            let mut server = shared.lock().unwrap_or_else(PoisonError::into_inner);
            let (code, value) = server.answer(&method, &path, &query, body.clone());
            server.seen.push((method, path, body));
            respond.send_response(reply(code, &value));
        }
    });
    let (tx, rx) = watch::channel(true);
    let mut executor = Executor::new(Client::new(service, "default"), rx, None);
    executor.retry = Retry {
        attempts: 4,
        base: Duration::from_millis(1),
        max: Duration::from_millis(4),
    };
    (executor, server, tx)
}

/// The job-status writes and job reads the server saw: (method, the resourceVersion the
/// write was conditional on).
fn job_requests(server: &Mutex<Server>) -> Vec<(String, Option<String>)> {
    let server = server.lock().unwrap_or_else(PoisonError::into_inner);
    server
        .seen
        .iter()
        .filter(|(_, path, _)| path.contains("/gpujobs/"))
        .map(|(method, path, body)| {
            let version = if path.ends_with("/status") {
                support::status_write(body).0
            } else {
                body["metadata"]["resourceVersion"]
                    .as_str()
                    .map(str::to_owned)
            };
            let what = if path.ends_with("/status") {
                format!("{method} status")
            } else {
                format!("{method} job")
            };
            (what, version)
        })
        .collect()
}

fn request(what: &str, version: Option<&str>) -> (String, Option<String>) {
    (what.to_owned(), version.map(str::to_owned))
}

/// A pass over a cluster holding `a` (two pods): its release, and the state it was planned in.
fn released(a: GpuJob) -> (Action, State) {
    let mut state = cluster(32, vec![a]);
    let pass = plan(&mut state, at(10));
    let release = pass
        .actions
        .into_iter()
        .find(|a| matches!(a, Action::Release { .. }))
        .unwrap_or_else(|| unreachable!("no release"));
    (release, state)
}

#[tokio::test]
async fn a_job_whose_only_change_is_muster_s_finalizer_is_written_onto_the_new_version() {
    let (release, state) = released(job("a", 2, 0));
    let read = state.decided_on(&release);
    assert_eq!(
        read.as_ref().and_then(|r| r.resource_version.as_deref()),
        Some("1")
    );
    let (executor, server, _leader) = start(&job("a", 2, 0));
    // The finalizer lands first (sent alone, as it was before the run loop chained it).
    let finalizer = Action::AddFinalizer {
        job: muster_api::ObjectRef::new("team-a", "a"),
    };
    assert!(executor.execute(&finalizer, None).await.is_ok());
    let result = executor.execute(&release, read.as_ref()).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(
        job_requests(&server),
        [
            request("PATCH job", None),
            request("PATCH status", Some("1")),
            request("GET job", None),
            request("PATCH status", Some("2")),
        ]
    );
    // Given the version the finalizer's answer carries, the write needs no second try.
    let (executor, server, _leader) = start(&job("a", 2, 0));
    let Ok(written) = executor.execute(&finalizer, None).await else {
        unreachable!("the finalizer is added")
    };
    let Some(muster_controller::executor::Written::Job(after)) = written.first() else {
        unreachable!("the job comes back")
    };
    let read = read.map(|r| r.at_version_of(after));
    assert!(executor.execute(&release, read.as_ref()).await.is_ok());
    assert_eq!(
        job_requests(&server),
        [
            request("PATCH job", None),
            request("PATCH status", Some("2"))
        ]
    );
}

#[tokio::test]
async fn a_status_write_whose_answer_was_lost_is_not_made_twice() {
    let (release, state) = released(job("a", 2, 0));
    let (executor, server, _leader) = start(&job("a", 2, 0));
    server
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .lose_next_status = true;
    let result = executor
        .execute(&release, state.decided_on(&release).as_ref())
        .await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(
        job_requests(&server),
        [
            request("PATCH status", Some("1")),
            request("PATCH status", Some("1")),
            request("GET job", None),
        ],
        "the retry meets the write it repeats, and the read finds it made"
    );
}

/// The user edited a waiting job (one pod now) while the controller's watch lagged: the
/// release made for two pods writes no admission over the new spec; read back, the next pass
/// rolls the two pods back, and once the failed release's backoff is over, one is released.
#[tokio::test]
async fn a_job_whose_spec_changed_since_it_was_read_is_read_again_and_decided_again() {
    let (release, mut state) = released(job("a", 2, 0));
    let mut edited = job("a", 1, 0);
    edited.metadata.generation = Some(2);
    edited.metadata.resource_version = Some("7".into());
    let (executor, server, _leader) = start(&edited);
    let result = executor
        .execute(&release, state.decided_on(&release).as_ref())
        .await;
    assert!(
        matches!(result, Err(ExecuteError::Superseded { .. })),
        "{result:?}"
    );
    assert_eq!(
        server.lock().unwrap_or_else(PoisonError::into_inner).job["status"],
        Value::Null,
        "no admission written over the new spec"
    );
    let read = executor.read_back(&release).await.unwrap_or_default();
    state.read_back(read);
    state.landed(&release, result.map_err(|e| e.to_string()), 11);
    let again = plan(&mut state, at(12));
    let deleted: Vec<&Vec<muster_api::ObjectRef>> = again
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::DeletePods { pods, .. } => Some(pods),
            _ => None,
        })
        .collect();
    assert_eq!(
        deleted,
        [&vec![
            muster_api::ObjectRef::new("team-a", "a-workers-0"),
            muster_api::ObjectRef::new("team-a", "a-workers-1")
        ]],
        "{:#?}",
        again.actions
    );
    support::land_all(&mut state, &again.actions, 12);
    let then = plan(&mut state, at(40));
    let pods: Vec<usize> = then
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Release { gang, .. } => Some(gang.pods.len()),
            _ => None,
        })
        .collect();
    assert_eq!(pods, [1], "{:#?}", then.actions);
}

/// Another writer (a leader whose write was delayed, or the one after it) evicted the job
/// after this pass read it running: the pass's status, which still names the admission, is
/// not written over the eviction.
#[tokio::test]
async fn a_status_another_writer_changed_is_not_written_over() {
    let (release, _) = released(job("a", 2, 0));
    let Action::Release { status, .. } = &release else {
        unreachable!("a release")
    };
    let mut running = job("a", 2, 0);
    running.status = Some((**status).clone());
    let read = JobRead::of(&running);
    let mut evicted = running.clone();
    evicted.metadata.resource_version = Some("9".into());
    if let Some(s) = evicted.status.as_mut() {
        s.admission = None;
        s.requeue_count += 1;
    }
    let (executor, server, _leader) = start(&evicted);
    let mut pods_ready = (**status).clone();
    pods_ready.restart_count += 1;
    let write = Action::JobStatus {
        job: muster_api::ObjectRef::new("team-a", "a"),
        status: Box::new(pods_ready),
        event: None,
    };
    let result = executor.execute(&write, Some(&read)).await;
    assert!(
        matches!(result, Err(ExecuteError::Superseded { .. })),
        "{result:?}"
    );
    assert_eq!(
        job_requests(&server),
        [request("PATCH status", Some("1")), request("GET job", None)]
    );
    let server = server.lock().unwrap_or_else(PoisonError::into_inner);
    assert_eq!(server.job["status"]["admission"], Value::Null);
}
