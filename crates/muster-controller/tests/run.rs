//! The whole controller process against the kube-rs mock API server: it lists every kind,
//! reports ready only once every cache is synced, runs a pass, releases the waiting job's gang
//! and writes its status, then writes nothing more while nothing changes, serves metrics, and
//! stops cleanly.

mod support;

use muster_api::wire::JOB_LABEL;
use std::collections::BTreeMap;
use std::time::Duration;

use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use muster_controller::run::{Options, run};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// The list each collection path answers with.
fn lists() -> BTreeMap<&'static str, (&'static str, Vec<Value>)> {
    let value = |v: &dyn erased::Json| v.json();
    BTreeMap::from([
        (
            "/apis/muster.dev/v1alpha1/gpujobs",
            ("GpuJobList", vec![value(&support::job("a", 2, 0))]),
        ),
        (
            "/apis/muster.dev/v1alpha1/clusterqueues",
            ("ClusterQueueList", vec![value(&support::cluster_queue(32))]),
        ),
        (
            "/apis/muster.dev/v1alpha1/localqueues",
            ("LocalQueueList", vec![value(&support::local_queue())]),
        ),
        (
            "/apis/muster.dev/v1alpha1/resourceflavors",
            ("ResourceFlavorList", vec![value(&support::flavor())]),
        ),
        (
            "/apis/muster.dev/v1alpha1/cohorts",
            ("CohortList", Vec::new()),
        ),
        (
            "/api/v1/nodes",
            (
                "NodeList",
                vec![
                    value(&support::node("n1", "b1")),
                    value(&support::node("n2", "b1")),
                ],
            ),
        ),
        ("/api/v1/pods", ("PodList", Vec::new())),
        (
            "/api/v1/namespaces",
            ("NamespaceList", vec![value(&support::namespace("team-a"))]),
        ),
        (
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            ("PriorityClassList", Vec::new()),
        ),
        ("/apis/batch/v1/jobs", ("JobList", Vec::new())),
    ])
}

/// Serializing fixtures of different types through one helper.
mod erased {
    pub trait Json {
        fn json(&self) -> serde_json::Value;
    }
    impl<T: serde::Serialize> Json for T {
        fn json(&self) -> serde_json::Value {
            serde_json::to_value(self).unwrap_or_default()
        }
    }
}

/// Answers lists from `lists` (from `later` for a path's second list on, when it has one:
/// the cluster moved on while the watches lag), holds watches open (never answering), 404s
/// paths it has no list for (such as the ProvisioningRequest probe, unless given), answers
/// the first `failing` lists of a path with 500 (see [`Faults`]), echoes writes; reports every
/// write on `writes`. A job's own path answers with the job as last written, a
/// request's with the request as created, and a namespace's pods (by the job label) with the
/// pods as created and ungated.
async fn api_server(
    mut handle: tower_test::mock::Handle<Request<Body>, Response<Body>>,
    writes: mpsc::UnboundedSender<(String, String)>,
    lists: BTreeMap<&'static str, (&'static str, Vec<Value>)>,
    later: BTreeMap<&'static str, (&'static str, Vec<Value>)>,
    faults: Faults,
) {
    let Faults {
        mut failing,
        mut lost,
        mut rejected,
        mut hung,
        mut late,
    } = faults;
    // Writes never answered, kept so that their callers wait on.
    let mut hanging = Vec::new();
    let mut listed: BTreeMap<String, u32> = BTreeMap::new();
    let mut objects = Objects {
        jobs: jobs_by_name(&lists),
        queue: lists
            .get("/apis/muster.dev/v1alpha1/clusterqueues")
            .and_then(|(_, items)| items.first().cloned())
            .unwrap_or_default(),
        pods: BTreeMap::new(),
        requests: BTreeMap::new(),
    };
    let mut held = Vec::new();
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
        let reply = |code: u16, value: Value| {
            Response::builder()
                .status(code)
                .body(Body::from(serde_json::to_vec(&value).unwrap_or_default()))
                .unwrap_or_else(|_| Response::new(Body::from(Vec::new())))
        };
        if method == "GET" && query.contains("watch=true") {
            held.push(respond);
            continue;
        }
        if method == "GET" && fails(&mut failing, &path) {
            respond.send_response(reply(500, failure(500, "InternalError", "timed out")));
            continue;
        }
        if method == "GET"
            && let Some((code, value)) = objects.read_one(&path, &query)
        {
            respond.send_response(reply(code, value));
            continue;
        }
        if method == "GET" {
            let source = list_of(&mut listed, &path, &lists, &later);
            let response = match source {
                Some((kind, items)) => reply(
                    200,
                    json!({"apiVersion": "v1", "kind": kind,
                           "metadata": {"resourceVersion": "10"}, "items": items}),
                ),
                None => reply(404, failure(404, "NotFound", "not found")),
            };
            respond.send_response(response);
            continue;
        }
        let _ = writes.send((method.clone(), path.clone()));
        if fails(&mut hung, &path) {
            hanging.push(respond);
            continue;
        }
        if fails(&mut rejected, &path) {
            respond.send_response(reply(
                500,
                failure(500, "InternalError", "etcd leader changed"),
            ));
            continue;
        }
        let object = objects.write(&method, &path, body);
        if fails(&mut late, &path) {
            let response = reply(if method == "POST" { 201 } else { 200 }, object);
            tokio::spawn(async move {
                tokio::time::sleep(LATE).await;
                respond.send_response(response);
            });
            continue;
        }
        if fails(&mut lost, &path) {
            respond.send_response(reply(
                500,
                failure(500, "InternalError", "connection reset"),
            ));
            continue;
        }
        respond.send_response(reply(if method == "POST" { 201 } else { 200 }, object));
    }
}

/// The `Status` a failed request is answered with.
fn failure(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
           "reason": reason, "code": code, "message": message})
}

/// How the mock server misbehaves, by path: how many of the first requests of each.
#[derive(Default)]
struct Faults {
    /// Lists answered 500.
    failing: BTreeMap<&'static str, u32>,
    /// Writes carried out but answered 500, as when the answer is lost on the way back.
    lost: BTreeMap<&'static str, u32>,
    /// Writes answered 500 and not carried out.
    rejected: BTreeMap<&'static str, u32>,
    /// Writes never answered (a partition the client's timeout has not yet given up on).
    hung: BTreeMap<&'static str, u32>,
    /// Writes carried out and answered [`LATE`] later (a slow API server).
    late: BTreeMap<&'static str, u32>,
}

/// How long a late write's answer takes: less than an end is counted on for (5 s).
const LATE: Duration = Duration::from_secs(2);

/// The objects the mock server keeps as they are written, so that a read answers with the
/// last write.
struct Objects {
    /// GpuJobs by name, as listed or last written.
    jobs: BTreeMap<String, Value>,
    /// The listed ClusterQueue: a status write answers with it (spec included).
    queue: Value,
    /// Pods as created, so that a gate removal answers with the whole pod, as a server would.
    pods: BTreeMap<String, Value>,
    /// ProvisioningRequests as created.
    requests: BTreeMap<String, Value>,
}

impl Objects {
    /// Carries a write out; the object to answer with.
    fn write(&mut self, method: &str, path: &str, body: Value) -> Value {
        if path.contains("/gpujobs/") {
            let name = path
                .split("/gpujobs/")
                .nth(1)
                .and_then(|rest| rest.split('/').next())
                .unwrap_or_default();
            let mut job = self.jobs.get(name).cloned().unwrap_or_default();
            job["status"] = support::status_write(&body).1;
            job["metadata"]["resourceVersion"] = json!("11");
            self.jobs.insert(name.to_owned(), job.clone());
            job
        } else if path.contains("/clusterqueues/") {
            let mut queue = self.queue.clone();
            queue["status"] = support::status_write(&body).1;
            queue
        } else if path.contains("/localqueues/") {
            let mut queue = serde_json::to_value(support::local_queue()).unwrap_or_default();
            queue["status"] = support::status_write(&body).1;
            queue
        } else if path.contains("/resourceflavors/") {
            let mut flavor = serde_json::to_value(support::flavor()).unwrap_or_default();
            flavor["status"] = support::status_write(&body).1;
            flavor
        } else if method == "PATCH" {
            let name = path.rsplit('/').next().unwrap_or_default();
            let mut pod = self.pods.get(name).cloned().unwrap_or_else(|| {
                json!({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": name, "namespace": "team-a"}})
            });
            pod["spec"]["schedulingGates"] = json!([]);
            pod["metadata"]["resourceVersion"] = json!("12");
            self.pods.insert(name.to_owned(), pod.clone());
            pod
        } else {
            let name = body["metadata"]["name"].as_str().unwrap_or_default();
            if path.ends_with("/pods") {
                self.pods.insert(name.to_owned(), body.clone());
            }
            if path.ends_with("/provisioningrequests") {
                self.requests.insert(name.to_owned(), body.clone());
            }
            body
        }
    }

    /// A read of one object by its own path (a job, a ProvisioningRequest), or of a namespace's
    /// pods by the job label: the answer, from the objects as last written; `None` for any other
    /// path.
    fn read_one(&self, path: &str, query: &str) -> Option<(u16, Value)> {
        let found = |object: Option<&Value>| match object {
            Some(object) => (200, object.clone()),
            None => (404, failure(404, "NotFound", "not found")),
        };
        if let Some(name) = path
            .strip_prefix("/apis/muster.dev/v1alpha1/namespaces/team-a/gpujobs/")
            .filter(|n| !n.contains('/'))
        {
            return Some(found(self.jobs.get(name)));
        }
        if let Some(name) = path
            .strip_prefix("/apis/autoscaling.x-k8s.io/v1/namespaces/team-a/provisioningrequests/")
        {
            return Some(found(self.requests.get(name)));
        }
        if path != "/api/v1/namespaces/team-a/pods" {
            return None;
        }
        // `labelSelector=muster.dev/job-name=<job>` (URL-encoded `=` and `/`).
        let job = query
            .split("job-name%3D")
            .nth(1)
            .map(|rest| rest.split('&').next().unwrap_or_default())
            .unwrap_or_default();
        let items: Vec<Value> = self
            .pods
            .values()
            .filter(|p| p["metadata"]["labels"][JOB_LABEL] == json!(job))
            .cloned()
            .collect();
        Some((
            200,
            json!({"apiVersion": "v1", "kind": "PodList",
                   "metadata": {"resourceVersion": "13"}, "items": items}),
        ))
    }
}

/// The list to answer `path`'s next list with: from `later` from its second list on, when it
/// has one there.
fn list_of<'a>(
    listed: &mut BTreeMap<String, u32>,
    path: &str,
    lists: &'a BTreeMap<&'static str, (&'static str, Vec<Value>)>,
    later: &'a BTreeMap<&'static str, (&'static str, Vec<Value>)>,
) -> Option<&'a (&'static str, Vec<Value>)> {
    let times = listed.entry(path.to_owned()).or_default();
    *times += 1;
    match later.get(path) {
        Some(list) if *times > 1 => Some(list),
        _ => lists.get(path),
    }
}

/// The listed GpuJobs by name: a status write answers with the job (spec included).
fn jobs_by_name(
    lists: &BTreeMap<&'static str, (&'static str, Vec<Value>)>,
) -> BTreeMap<String, Value> {
    lists
        .get("/apis/muster.dev/v1alpha1/gpujobs")
        .map(|(_, items)| {
            items
                .iter()
                .map(|j| {
                    (
                        j["metadata"]["name"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                        j.clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `path` is a queue's or a flavor's (their statuses are written as passes go).
fn queue_or_flavor(path: &str) -> bool {
    path.contains("queues/") || path.contains("/resourceflavors/")
}

/// Whether this request of `path` is one of its first failing ones (counted down).
fn fails(failing: &mut BTreeMap<&'static str, u32>, path: &str) -> bool {
    match failing.get_mut(path) {
        Some(left) if *left > 0 => {
            *left -= 1;
            true
        }
        _ => false,
    }
}

/// A controller running against the mock API server.
struct Started {
    /// Every write the server saw: (method, path).
    writes: mpsc::UnboundedReceiver<(String, String)>,
    /// The metrics server's port.
    port: u16,
    /// Stops the controller.
    stop: tokio::sync::oneshot::Sender<()>,
    controller: tokio::task::JoinHandle<anyhow::Result<()>>,
}

/// Starts the controller (passes every 50 ms) against a mock server answering `lists`.
async fn start(lists: BTreeMap<&'static str, (&'static str, Vec<Value>)>) -> Started {
    start_faulty(lists, Faults::default()).await
}

/// [`start`], with later lists of some paths answered from `later` (see [`api_server`]).
async fn start_moved_on(
    lists: BTreeMap<&'static str, (&'static str, Vec<Value>)>,
    later: BTreeMap<&'static str, (&'static str, Vec<Value>)>,
) -> Started {
    start_with(lists, later, Faults::default()).await
}

/// [`start`], with the server misbehaving as `faults` say.
async fn start_faulty(
    lists: BTreeMap<&'static str, (&'static str, Vec<Value>)>,
    faults: Faults,
) -> Started {
    start_with(lists, BTreeMap::new(), faults).await
}

/// [`start`], with the cluster moving on under `later` and the server misbehaving as
/// `faults` say.
async fn start_with(
    lists: BTreeMap<&'static str, (&'static str, Vec<Value>)>,
    later: BTreeMap<&'static str, (&'static str, Vec<Value>)>,
    faults: Faults,
) -> Started {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let (writes_tx, writes) = mpsc::unbounded_channel();
    tokio::spawn(api_server(handle, writes_tx, lists, later, faults));
    let port = free_port().await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let controller = tokio::spawn(run(
        Client::new(service, "default"),
        Options {
            metrics_addr: ([127, 0, 0, 1], port).into(),
            debounce: Duration::from_millis(10),
            tick: Duration::from_millis(50),
            ..Options::default()
        },
        async move {
            let _ = stopped.await;
        },
    ));
    Started {
        writes,
        port,
        stop,
        controller,
    }
}

/// The writes that come until none has come for a second; fails if writes still come at
/// `deadline`.
async fn until_quiet(
    writes: &mut mpsc::UnboundedReceiver<(String, String)>,
    deadline: tokio::time::Instant,
) -> Vec<(String, String)> {
    let mut seen = Vec::new();
    loop {
        match tokio::time::timeout_at(deadline, async {
            tokio::time::timeout(Duration::from_secs(1), writes.recv()).await
        })
        .await
        {
            Ok(Ok(Some(write))) => seen.push(write),
            Ok(Err(_)) => return seen,
            _ => unreachable!("still writing at the deadline: {seen:?}"),
        }
    }
}

/// Every write from the first (however long it takes to come, up to `deadline`) until none
/// has come for a second (see [`until_quiet`]).
async fn from_first_until_quiet(
    writes: &mut mpsc::UnboundedReceiver<(String, String)>,
    deadline: tokio::time::Instant,
) -> Vec<(String, String)> {
    let first = tokio::time::timeout_at(deadline, writes.recv()).await;
    let mut seen: Vec<(String, String)> = first.ok().flatten().into_iter().collect();
    seen.extend(until_quiet(writes, deadline).await);
    seen
}

/// A free local port for the metrics server.
async fn free_port() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await;
    listener
        .and_then(|l| l.local_addr())
        .map_or(18080, |a| a.port())
}

/// `GET path` over plain HTTP/1.0: (status line, body).
async fn get(port: u16, path: &str) -> (String, String) {
    let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return (String::new(), String::new());
    };
    let request = format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return (String::new(), String::new());
    }
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text).await;
    let status = text.lines().next().unwrap_or_default().to_owned();
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned();
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_syncs_admits_releases_and_stops() {
    let Started {
        mut writes,
        port,
        stop,
        controller,
    } = start(lists()).await;

    // Every write the first passes make, until the job's status lands.
    let mut seen: Vec<(String, String)> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !seen
        .iter()
        .any(|(m, p)| m == "PATCH" && p.ends_with("/gpujobs/a/status"))
    {
        match tokio::time::timeout_at(deadline, writes.recv()).await {
            Ok(Some(write)) => seen.push(write),
            _ => unreachable!("no release within 20 s; writes so far: {seen:?}"),
        }
    }
    let pods = |m: &str| {
        seen.iter()
            .filter(|(method, p)| method == m && p.starts_with("/api/v1/namespaces/team-a/pods"))
            .count()
    };
    assert_eq!((pods("POST"), pods("PATCH")), (2, 2), "{seen:?}");
    let first_ungate = seen
        .iter()
        .position(|(m, p)| m == "PATCH" && p.contains("/pods/"));
    let last_create = seen
        .iter()
        .rposition(|(m, p)| m == "POST" && p.ends_with("/pods"));
    assert!(
        last_create < first_ungate,
        "every pod exists before a gate opens: {seen:?}"
    );

    // Then the controller goes quiet: passes keep running (every 50 ms), but with nothing
    // changed they write nothing. At most the flavor's and the queues' statuses and the
    // release's Event may still be landing.
    let after = until_quiet(&mut writes, deadline).await;
    assert!(
        after
            .iter()
            .all(|(m, p)| (m == "PATCH" && queue_or_flavor(p))
                || (m == "POST" && p.ends_with("/events"))),
        "{after:?}"
    );
    // Each of those at most once: the flavor's, the two queues' statuses, the Event.
    let distinct: std::collections::BTreeSet<&(String, String)> = after.iter().collect();
    assert_eq!(distinct.len(), after.len(), "{after:?}");
    assert!(after.len() <= 4, "{after:?}");

    let (status, _) = get(port, "/readyz").await;
    assert!(status.contains("200"), "{status}");
    let (_, metrics) = get(port, "/metrics").await;
    assert!(
        metrics.contains("muster_admission_attempts_total{result=\"admitted\"} 1"),
        "{metrics}"
    );

    let _ = stop.send(());
    let finished = tokio::time::timeout(Duration::from_secs(20), controller).await;
    assert!(
        matches!(finished, Ok(Ok(Ok(())))),
        "the controller stops cleanly"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_without_a_block_gets_a_provisioning_request_once_the_api_is_served() {
    buys_capacity(BTreeMap::new()).await;
}

/// A probe of the ProvisioningRequest API that fails (500) says nothing about whether it is
/// served: the controller asks again and buys capacity as soon as it answers, instead of
/// taking the API for missing until the next minute's probe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_probe_of_the_provisioning_api_is_asked_again_not_taken_for_missing() {
    buys_capacity(BTreeMap::from([(
        "/apis/autoscaling.x-k8s.io/v1/provisioningrequests",
        1,
    )]))
    .await;
}

/// A job that needs more than the cluster's one block: one request is made (the first
/// `failing` lists of a path answered 500), asked once, and no pod.
async fn buys_capacity(failing: BTreeMap<&'static str, u32>) {
    let Started {
        mut writes,
        stop,
        controller,
        ..
    } = start_faulty(
        buying(),
        Faults {
            failing,
            ..Faults::default()
        },
    )
    .await;
    // Every write from the first (a failed probe is asked again a little later) until the
    // controller has been quiet for a second.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let seen = from_first_until_quiet(&mut writes, deadline).await;
    assert_eq!(
        job_writes(&seen),
        buying_writes(1),
        "one request, asked once, and no pod: {seen:?}"
    );
    let _ = stop.send(());
    let finished = tokio::time::timeout(Duration::from_secs(20), controller).await;
    assert!(matches!(finished, Ok(Ok(Ok(())))));
}

/// A request for capacity whose status write the API server carries out but whose answers
/// are lost, on every retry: the write fails, yet the job is provisioning and its request
/// exists. The controller reads both back, so the job keeps its quota and its request, and
/// no status built from the view before (queued, backing off) goes over the one the API
/// server shows. Without the read-back the job would write a backoff over its provisioning
/// status and its request would be deleted as an orphan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_for_capacity_whose_answer_is_lost_is_read_back() {
    let lost = BTreeMap::from([(
        "/apis/muster.dev/v1alpha1/namespaces/team-a/gpujobs/big/status",
        5,
    )]);
    let Started {
        mut writes,
        stop,
        controller,
        ..
    } = start_faulty(
        buying(),
        Faults {
            lost,
            ..Faults::default()
        },
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let seen = from_first_until_quiet(&mut writes, deadline).await;
    assert_eq!(job_writes(&seen), buying_writes(5), "{seen:?}");
    let _ = stop.send(());
    let _ = controller.await;
}

/// The writes of `seen` that are about jobs (not queues, flavors or Events).
fn job_writes(seen: &[(String, String)]) -> Vec<(String, String)> {
    seen.iter()
        .filter(|(_, p)| !queue_or_flavor(p) && !p.ends_with("/events"))
        .cloned()
        .collect()
}

/// What buying capacity for `big` writes: its PodTemplate, its request, and its status
/// (`status_attempts` times).
fn buying_writes(status_attempts: usize) -> Vec<(String, String)> {
    let write = |m: &str, p: &str| (m.to_owned(), p.to_owned());
    let mut writes = vec![
        write("POST", "/api/v1/namespaces/team-a/podtemplates"),
        write(
            "POST",
            "/apis/autoscaling.x-k8s.io/v1/namespaces/team-a/provisioningrequests",
        ),
    ];
    writes.extend(std::iter::repeat_n(
        write(
            "PATCH",
            "/apis/muster.dev/v1alpha1/namespaces/team-a/gpujobs/big/status",
        ),
        status_attempts,
    ));
    writes
}

/// [`lists`] with one job, `big`, that needs more than the cluster's one block, in a queue
/// that buys capacity.
fn buying() -> BTreeMap<&'static str, (&'static str, Vec<Value>)> {
    let value = |v: &dyn erased::Json| v.json();
    let mut lists = lists();
    // 4 pods of 8 GPUs in one block: more than the two nodes hold; the queue buys capacity.
    lists.insert(
        "/apis/muster.dev/v1alpha1/gpujobs",
        ("GpuJobList", vec![value(&support::job("big", 4, 0))]),
    );
    let mut queue = value(&support::cluster_queue(32));
    queue["spec"]["provisioning"] = json!({"className": "queued-provisioning.gke.io"});
    lists.insert(
        "/apis/muster.dev/v1alpha1/clusterqueues",
        ("ClusterQueueList", vec![queue]),
    );
    lists.insert(
        "/apis/autoscaling.x-k8s.io/v1/provisioningrequests",
        ("ProvisioningRequestList", Vec::new()),
    );
    // Muster's PodTemplates are watched with the requests.
    lists.insert("/api/v1/podtemplates", ("PodTemplateList", Vec::new()));
    lists
}

/// Two processes started alike (same pod or host name, or none) must not share a Lease
/// identity: the lease manager takes a Lease held under its own identity as its own, so both
/// would lead and release the same gangs.
#[test]
fn every_process_gets_its_own_lease_identity() {
    use muster_controller::run::lease_identity;
    let (a, b) = (
        lease_identity(Some("ops-laptop")),
        lease_identity(Some("ops-laptop")),
    );
    assert_ne!(a, b);
    assert!(a.starts_with("ops-laptop_"), "{a}");
    let (c, d) = (lease_identity(None), lease_identity(Some("  ")));
    assert_ne!(c, d);
    assert!(
        c.starts_with("muster_") && d.starts_with("muster_"),
        "{c} {d}"
    );
    assert_ne!(Options::default().identity, Options::default().identity);
}

/// A replica that becomes leader while its watches lag: its caches show two queued jobs, but
/// the API server already has `b` admitted with its gang running (a leader that died moments
/// ago released it). The new leader reads jobs and pods afresh before its first pass, so it
/// never releases `a` into the quota and nodes `b` holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_reads_jobs_and_pods_afresh_before_its_first_pass() {
    use muster_controller::plan::{Action, plan};
    // What the dead leader did: release b, with the whole quota (16 GPUs on n1 and n2).
    let mut before = support::cluster(16, vec![support::job("b", 2, 1)]);
    let pass = plan(&mut before, support::at(5));
    let Some(Action::Release { gang, status, .. }) = pass
        .actions
        .iter()
        .find(|a| matches!(a, Action::Release { .. }))
        .cloned()
    else {
        unreachable!("b is released: {:?}", pass.actions)
    };
    let mut b = support::job("b", 2, 1);
    b.status = Some(*status);
    b.metadata.resource_version = Some("9".to_owned());
    let value = |v: &dyn erased::Json| v.json();
    let running: Vec<Value> = gang
        .pods
        .iter()
        .map(|p| value(&support::with_phase(p.clone(), "Running", true)))
        .collect();
    let mut stale = lists();
    stale.insert(
        "/apis/muster.dev/v1alpha1/gpujobs",
        (
            "GpuJobList",
            vec![
                value(&support::job("a", 2, 0)),
                value(&support::job("b", 2, 1)),
            ],
        ),
    );
    stale.insert(
        "/apis/muster.dev/v1alpha1/clusterqueues",
        ("ClusterQueueList", vec![value(&support::cluster_queue(16))]),
    );
    let fresh = BTreeMap::from([
        (
            "/apis/muster.dev/v1alpha1/gpujobs",
            (
                "GpuJobList",
                vec![value(&support::job("a", 2, 0)), value(&b)],
            ),
        ),
        ("/api/v1/pods", ("PodList", running)),
    ]);
    let Started {
        mut writes,
        stop,
        controller,
        ..
    } = start_moved_on(stale, fresh).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let seen = until_quiet(&mut writes, deadline).await;
    assert!(
        !seen
            .iter()
            .any(|(m, p)| m == "POST" && p.ends_with("/pods")),
        "a was released beside b's running gang: {seen:?}"
    );
    let _ = stop.send(());
    let _ = controller.await;
}

/// A release whose status write the API server carries out but whose answers are lost, on
/// every retry: the write fails, yet the job is admitted and its gang exists. The controller
/// reads the job and its pods back before the next pass, so `b` is not released into the
/// quota and nodes `a` holds, and `a` is not taken for broken (its pods missing) and evicted.
/// Without the read-back both would happen: until its watch brings the change the job looks
/// queued, holding nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_answer_is_lost_is_read_back_before_the_quota_is_given_again() {
    let value = |v: &dyn erased::Json| v.json();
    let mut lists = lists();
    // Room for one gang of two 8-GPU pods, in quota and on the nodes; `a` is older.
    lists.insert(
        "/apis/muster.dev/v1alpha1/gpujobs",
        (
            "GpuJobList",
            vec![
                value(&support::job("a", 2, 0)),
                value(&support::job("b", 2, 1)),
            ],
        ),
    );
    lists.insert(
        "/apis/muster.dev/v1alpha1/clusterqueues",
        ("ClusterQueueList", vec![value(&support::cluster_queue(16))]),
    );
    // Every attempt the executor makes (see `Retry::default`).
    let lost = BTreeMap::from([(A_STATUS, 5)]);
    let Started {
        mut writes,
        stop,
        controller,
        ..
    } = start_faulty(
        lists,
        Faults {
            lost,
            ..Faults::default()
        },
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let seen = until_quiet(&mut writes, deadline).await;
    let count = |method: &str, path: &str| {
        seen.iter()
            .filter(|(m, p)| m == method && p.as_str() == path)
            .count()
    };
    assert_eq!(
        count("POST", "/api/v1/namespaces/team-a/pods"),
        2,
        "only a's two pods are created, never b's: {seen:?}"
    );
    assert!(
        !seen.iter().any(|(m, _)| m == "DELETE"),
        "a is not evicted: {seen:?}"
    );
    // Only the release's attempts write a's status: no status built from the view before the
    // read-back (queued, backing off) goes over the admission the API server shows.
    assert_eq!(count("PATCH", A_STATUS), 5, "{seen:?}");
    let _ = stop.send(());
    let _ = controller.await;
}

/// The status of job `team-a/a`, the job these tests release or end first: where its
/// Admitted status or its end is written.
const A_STATUS: &str = "/apis/muster.dev/v1alpha1/namespaces/team-a/gpujobs/a/status";

/// The lists of a cluster of four 8-GPU nodes in two blocks and a ClusterQueue of `gpus`,
/// where `a` was admitted onto one block (16 GPUs) and its pods have since ended, and
/// `waiting` (name, creation second) each want a block of their own.
fn lists_with_an_ended_gang(
    gpus: u32,
    waiting: &[(&str, i64)],
) -> BTreeMap<&'static str, (&'static str, Vec<Value>)> {
    use muster_controller::plan::{Action, plan};
    let value = |v: &dyn erased::Json| v.json();
    let mut world = support::cluster(gpus, vec![support::job("a", 2, 0)]);
    let pass = plan(&mut world, support::at(10));
    support::land_all(&mut world, &pass.actions, 10);
    let Some(Action::Release { gang, .. }) = pass.actions.iter().find(|a| a.kind() == "release")
    else {
        unreachable!("a is released: {:#?}", pass.actions)
    };
    let a = world.index().job("team-a/a").cloned().unwrap_or_default();
    let ended: Vec<Value> = gang
        .pods
        .iter()
        .map(|pod| value(&support::with_phase(pod.clone(), "Succeeded", false)))
        .collect();
    let mut jobs = vec![value(&a)];
    jobs.extend(
        waiting
            .iter()
            .map(|(name, created)| value(&support::job(name, 2, *created))),
    );
    let mut lists = lists();
    lists.insert("/apis/muster.dev/v1alpha1/gpujobs", ("GpuJobList", jobs));
    lists.insert(
        "/apis/muster.dev/v1alpha1/clusterqueues",
        (
            "ClusterQueueList",
            vec![value(&support::cluster_queue(gpus))],
        ),
    );
    lists.insert(
        "/api/v1/nodes",
        (
            "NodeList",
            [("n1", "b1"), ("n2", "b1"), ("n3", "b2"), ("n4", "b2")]
                .iter()
                .map(|(n, b)| value(&support::node(n, b)))
                .collect(),
        ),
    );
    lists.insert("/api/v1/pods", ("PodList", ended));
    lists
}

/// A gang whose pods have all ended gives its quota up in the pass that writes its end, and
/// a gang released into that quota in the same pass goes out only once the end has landed.
/// Here every attempt at `a`'s end fails and writes nothing: `b`'s release is not sent, since
/// the API server still shows `a` admitted; the next pass writes the end again and releases
/// `b` after it. Released beside a failed end, `b` would show admitted with `a`, 32 GPUs of 16.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_into_quota_an_end_frees_goes_out_only_once_the_end_has_landed() {
    // `a` admitted onto two 8-GPU nodes, its pods since ended; `b` wants the same 16 GPUs.
    let lists = lists_with_an_ended_gang(16, &[("b", 1)]);
    let (seen, landed) = writes_around_a_rejected_end(lists).await;
    let b_writes: Vec<usize> = seen
        .iter()
        .enumerate()
        .filter(|(_, (_, p))| {
            p.contains("/gpujobs/b") || p.contains("/pods") || p.contains("/services")
        })
        .map(|(i, _)| i)
        .collect();
    assert!(
        seen.iter()
            .any(|(m, p)| m == "POST" && p == "/api/v1/namespaces/team-a/pods"),
        "b is released once a's end has landed: {seen:?}"
    );
    assert!(
        b_writes.iter().all(|i| *i > landed),
        "nothing of b's release goes out before a's end has landed: {seen:?}"
    );
}

/// Runs the controller on `lists` (see [`lists_with_an_ended_gang`]) with every attempt the
/// executor makes at `a`'s first end rejected (five: see `Retry::default`), until it has been
/// quiet for a second: the writes seen, and where the end that landed (the sixth) is among
/// them.
async fn writes_around_a_rejected_end(
    lists: BTreeMap<&'static str, (&'static str, Vec<Value>)>,
) -> (Vec<(String, String)>, usize) {
    let Started {
        mut writes,
        stop,
        controller,
        ..
    } = start_faulty(
        lists,
        Faults {
            rejected: BTreeMap::from([(A_STATUS, 5)]),
            ..Faults::default()
        },
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    let seen = from_first_until_quiet(&mut writes, deadline).await;
    let _ = stop.send(());
    let _ = controller.await;
    let ends: Vec<usize> = seen
        .iter()
        .enumerate()
        .filter(|(_, (m, p))| m == "PATCH" && p == A_STATUS)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        ends.len(),
        6,
        "five rejected attempts, then the end again: {seen:?}"
    );
    (seen, ends[5])
}

/// A request for capacity takes quota as a release does, so one made into quota an end frees
/// waits for that end to land as well. Here `a`'s quota (16 GPUs of 32, its pods ended) is
/// freed in the pass that writes its end, and `big` (4 × 8 GPUs, more than a block holds)
/// then fits the queue's quota and buys its block; every attempt at `a`'s first end fails.
/// Nothing of `big`'s request may go out before `a`'s end has landed: the API server would
/// show `a` admitted and `big` provisioning, 48 GPUs of 32.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_for_capacity_into_quota_an_end_frees_goes_out_only_once_the_end_has_landed() {
    let value = |v: &dyn erased::Json| v.json();
    let mut lists = lists_with_an_ended_gang(32, &[]);
    if let Some((_, jobs)) = lists.get_mut("/apis/muster.dev/v1alpha1/gpujobs") {
        jobs.push(value(&support::job("big", 4, 1)));
    }
    if let Some((_, queues)) = lists.get_mut("/apis/muster.dev/v1alpha1/clusterqueues") {
        for queue in queues {
            queue["spec"]["provisioning"] = json!({"className": "queued-provisioning.gke.io"});
        }
    }
    lists.insert(
        "/apis/autoscaling.x-k8s.io/v1/provisioningrequests",
        ("ProvisioningRequestList", Vec::new()),
    );
    lists.insert("/api/v1/podtemplates", ("PodTemplateList", Vec::new()));
    let (seen, landed) = writes_around_a_rejected_end(lists).await;
    let buying: Vec<usize> = seen
        .iter()
        .enumerate()
        .filter(|(_, (m, p))| {
            m == "POST" && (p.ends_with("/provisioningrequests") || p.ends_with("/podtemplates"))
        })
        .map(|(i, _)| i)
        .collect();
    assert!(
        !buying.is_empty(),
        "big buys its block once a's end has landed: {seen:?}"
    );
    assert!(
        buying.iter().all(|i| *i > landed),
        "nothing of big's request goes out before a's end has landed: {seen:?}"
    );
}

/// An end that hangs (its write never answered, as under a partition) holds back the
/// releases that counted on it for a few seconds, not for as long as it hangs: they are not
/// sent, and the passes after hold the ended job's quota and nodes again, as for any write
/// in flight that gives quota up, and release what fits beside it. Here `a` (16 GPUs, its pods
/// ended) frees its quota in the first pass, which admits both `b` and `c` into 32; both wait
/// for `a`'s end, give up, and the next passes release `b` alone, onto the other block,
/// while `a` still holds. Without the bound on the wait nothing would ever be released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_that_hangs_holds_back_releases_for_seconds_and_then_holds_its_own_quota() {
    let lists = lists_with_an_ended_gang(32, &[("b", 1), ("c", 2)]);
    let Started {
        mut writes,
        stop,
        controller,
        ..
    } = start_faulty(
        lists,
        Faults {
            hung: BTreeMap::from([(A_STATUS, 1)]),
            ..Faults::default()
        },
    )
    .await;
    // Until a gang is released and a second more, or 30 s (the bound on the wait is 5).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut seen: Vec<(String, String)> = Vec::new();
    let pods = "/api/v1/namespaces/team-a/pods";
    let mut until = deadline;
    while let Ok(Some(write)) = tokio::time::timeout_at(until, writes.recv()).await {
        seen.push(write);
        let created = seen
            .iter()
            .filter(|(m, p)| m == "POST" && p == pods)
            .count();
        if created >= 2 && until == deadline {
            until = tokio::time::Instant::now() + Duration::from_secs(1);
        }
    }
    let count = |method: &str, path: &str| {
        seen.iter()
            .filter(|(m, p)| m == method && p.as_str() == path)
            .count()
    };
    assert_eq!(count("PATCH", A_STATUS), 1, "a's end hangs: {seen:?}");
    assert_eq!(
        count("POST", pods),
        2,
        "one gang of two is released beside a, which holds its 16 GPUs again: {seen:?}"
    );
    assert!(
        seen.iter().any(|(m, p)| m == "PATCH"
            && p == "/apis/muster.dev/v1alpha1/namespaces/team-a/gpujobs/b/status"),
        "the older job, b, is the one released: {seen:?}"
    );
    // Stopped, the controller would wait out its drain for the hung write.
    let _ = stop.send(());
    controller.abort();
}

/// A release waiting for a job's end when the controller is told to stop is never sent, even
/// when the end lands during the stop's drain: the loop has stopped, and the Lease is given up
/// next, so another replica may be leading by the time it would go out. Here `b` waits for
/// `a`'s end, which is answered 2 s late; the controller is stopped as the end goes out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_waiting_for_an_end_is_not_sent_once_the_controller_stops() {
    let lists = lists_with_an_ended_gang(16, &[("b", 1)]);
    let Started {
        mut writes,
        stop,
        controller,
        ..
    } = start_faulty(
        lists,
        Faults {
            late: BTreeMap::from([(A_STATUS, 1)]),
            ..Faults::default()
        },
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut seen: Vec<(String, String)> = Vec::new();
    while let Ok(Some(write)) = tokio::time::timeout_at(deadline, writes.recv()).await {
        let end = write.0 == "PATCH" && write.1 == A_STATUS;
        seen.push(write);
        if end {
            break;
        }
    }
    assert!(
        seen.iter().any(|(m, p)| m == "PATCH" && p == A_STATUS),
        "a's end goes out: {seen:?}"
    );
    let _ = stop.send(());
    // The drain waits for the end to land (2 s), not for its 10 s bound.
    let stopped = tokio::time::timeout(Duration::from_secs(9), controller).await;
    while let Ok(write) = writes.try_recv() {
        seen.push(write);
    }
    assert!(
        stopped.is_ok(),
        "the controller stops once a's end has landed: {seen:?}"
    );
    assert!(
        !seen
            .iter()
            .any(|(m, p)| m == "POST" && p == "/api/v1/namespaces/team-a/pods"),
        "b's release is not sent after the stop: {seen:?}"
    );
}

/// A forecast's forward runs take only CPU time nothing else wants: the thread they run on is
/// set aside at the lowest priority, and the thread that set it aside keeps its own.
#[tokio::test]
async fn work_set_aside_runs_at_the_lowest_priority_and_leaves_the_caller_alone() {
    use muster_controller::run::{ASIDE_NICE, aside};
    use rustix::process::getpriority_process;
    let before = getpriority_process(None);
    let inside = match aside("aside-test", || getpriority_process(None)) {
        Ok(answer) => answer.await.ok(),
        Err(_) => None,
    };
    assert_eq!(inside, Some(Ok(ASIDE_NICE)));
    assert_eq!(getpriority_process(None), before);
}
