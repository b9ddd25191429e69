//! The visibility API and the commands that read it, on a real control plane: the
//! controller serves it behind the API server (an APIService whose Service points at the
//! controller on loopback), and two users with tokens of their own and different RBAC ask
//! the API and the CLI. Each sees every waiting job's place and size, and names only in the
//! namespaces where they may list GpuJobs; positions follow the controller's decisions as
//! jobs leave and arrive; a user without the reader role is refused by the API server.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Service, ServiceAccount};
use kube::api::{Api, DeleteParams, PostParams};
use muster_api::visibility::{BlockList, ClusterQueueSummaryList, JobStory, PendingJobList};
use muster_api::{ClusterQueue, GpuJob, LocalQueue};
use muster_controller::run::Options;
use muster_controller::visibility_server::VisibilityOptions;
use serde_json::{Value, json};

use crate::support::{Controller, Env, eventually, gpu_job, phase, runs_for};

/// A free loopback port (the controller binds it just after).
pub(crate) fn free_port() -> u16 {
    match std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
        Ok(addr) => addr.port(),
        Err(e) => unreachable!("finding a free port: {e}"),
    }
}

/// Registers the visibility API with the API server, served at `localhost:port`.
pub(crate) async fn register(env: &Env, port: u16) {
    env.apply_all::<k8s_openapi::api::core::v1::Namespace>(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "muster-system"}}))
        .await;
    let services: Api<Service> = env.api("muster-system");
    let service: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "muster-visibility", "namespace": "muster-system"},
        "spec": {"type": "ExternalName", "externalName": "localhost"}}))
    .unwrap_or_else(|e| unreachable!("fixture: {e}"));
    if let Err(e) = services.create(&PostParams::default(), &service).await {
        unreachable!("creating the Service: {e}");
    }
    // The shipped APIService, pointed at the controller's port.
    crate::deploy::apply_documents(
        env,
        &crate::deploy::repo().join("deploy/visibility.yaml"),
        |doc| matches!(doc["kind"].as_str(), Some("ClusterRole")),
    )
    .await;
    let text = std::fs::read_to_string(crate::deploy::repo().join("deploy/visibility.yaml"))
        .unwrap_or_else(|e| unreachable!("reading deploy/visibility.yaml: {e}"));
    let mut api_service = serde_yaml_ng::Deserializer::from_str(&text)
        .filter_map(|d| <Value as serde::Deserialize>::deserialize(d).ok())
        .find(|d| d["kind"] == "APIService")
        .unwrap_or_else(|| unreachable!("deploy/visibility.yaml has no APIService"));
    api_service["spec"]["service"]["port"] = json!(port);
    let resource = kube::discovery::ApiResource {
        group: "apiregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiregistration.k8s.io/v1".into(),
        kind: "APIService".into(),
        plural: "apiservices".into(),
    };
    let api: Api<kube::api::DynamicObject> = Api::all_with(env.client.clone(), &resource);
    let object: kube::api::DynamicObject =
        serde_json::from_value(api_service).unwrap_or_else(|e| unreachable!("the APIService: {e}"));
    if let Err(e) = api.create(&PostParams::default(), &object).await {
        unreachable!("creating the APIService: {e}");
    }
}

/// A user: a ServiceAccount in `namespace` with a token of its own, and a kubeconfig file.
pub(crate) struct User {
    pub(crate) client: kube::Client,
    pub(crate) kubeconfig: PathBuf,
}

/// ServiceAccount `name` in `namespace`, allowed to list GpuJobs there and (when `reader`)
/// to read the visibility API; its token in a client and a kubeconfig.
pub(crate) async fn user(env: &Env, namespace: &str, name: &str, reader: bool) -> User {
    let accounts: Api<ServiceAccount> = env.api(namespace);
    let account: ServiceAccount = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": namespace}}))
    .unwrap_or_else(|e| unreachable!("fixture: {e}"));
    if let Err(e) = accounts.create(&PostParams::default(), &account).await {
        unreachable!("creating ServiceAccount {name}: {e}");
    }
    let subject = json!([{"kind": "ServiceAccount", "name": name, "namespace": namespace}]);
    env.apply_all::<k8s_openapi::api::rbac::v1::ClusterRole>(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "gpujob-lister"},
        "rules": [{"apiGroups": ["muster.dev"], "resources": ["gpujobs"],
                   "verbs": ["get", "list"]}]}))
        .await;
    let bindings: Api<k8s_openapi::api::rbac::v1::RoleBinding> = env.api(namespace);
    let binding = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": format!("{name}-lists-gpujobs"), "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "gpujob-lister"},
        "subjects": subject}))
    .unwrap_or_else(|e| unreachable!("fixture: {e}"));
    if let Err(e) = bindings.create(&PostParams::default(), &binding).await {
        unreachable!("binding {name}: {e}");
    }
    if reader {
        env.apply_all::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": format!("{name}-reads-visibility")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "muster-visibility-reader"},
            "subjects": subject}))
            .await;
    }
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let token = match accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
    {
        Ok(answer) => answer.status.map(|s| s.token).unwrap_or_default(),
        Err(e) => unreachable!("a token for {name}: {e}"),
    };
    let kubeconfig = env.cluster.log_dir().join(format!("{name}.kubeconfig"));
    let config = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": {
            "server": env.cluster.api_url(), "insecure-skip-tls-verify": true}}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": "e2e", "context": {
            "cluster": "e2e", "user": name, "namespace": namespace}}],
        "current-context": "e2e"});
    if let Err(e) = std::fs::write(
        &kubeconfig,
        serde_yaml_ng::to_string(&config).unwrap_or_default(),
    ) {
        unreachable!("writing {}: {e}", kubeconfig.display());
    }
    let file = kube::config::Kubeconfig::read_from(&kubeconfig)
        .unwrap_or_else(|e| unreachable!("reading {}: {e}", kubeconfig.display()));
    let client =
        kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
            .await
            .ok()
            .and_then(|mut c| {
                // A 503 is an answer the tests read, not one to retry for minutes.
                c.default_retry = false;
                kube::Client::try_from(c).ok()
            })
            .unwrap_or_else(|| unreachable!("a client for {name}"));
    User { client, kubeconfig }
}

/// `path` of the visibility API as `user`, or the API server's error.
async fn ask<T: serde::de::DeserializeOwned>(user: &User, path: &str) -> Result<T, kube::Error> {
    let request = http::Request::get(format!("{}{path}", muster_api::visibility::PREFIX))
        .body(Vec::new())
        .unwrap_or_else(|e| unreachable!("request: {e}"));
    user.client.request::<T>(request).await
}

/// Runs `muster` with `args`; its exit code, stdout and stderr. With
/// `MUSTER_TRANSCRIPT_DIR` set, each command and what it printed are also appended to
/// `transcript.txt` there (kubeconfig paths shortened to their file names): the outputs the
/// guides show come from this run.
pub(crate) fn muster(args: &[&str]) -> (i32, String, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap_or_else(|e| unreachable!("running muster: {e}"));
    let (code, out, err) = (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    );
    if let Some(dir) = std::env::var_os("MUSTER_TRANSCRIPT_DIR") {
        let shown: Vec<String> = args
            .iter()
            .map(|a| {
                // A kubeconfig is named by its file; the admin's is called `kubeconfig`.
                Path::new(a)
                    .file_name()
                    .filter(|_| Path::new(a).is_file())
                    .map_or_else(|| (*a).to_owned(), |f| f.to_string_lossy().into_owned())
            })
            .collect();
        let entry = format!("$ muster {}\n{out}{err}(exit {code})\n\n", shown.join(" "));
        let path = Path::new(&dir).join("transcript.txt");
        let mut text = std::fs::read_to_string(&path).unwrap_or_default();
        text.push_str(&entry);
        let _ = std::fs::write(&path, text);
    }
    (code, out, err)
}

fn names(list: &PendingJobList) -> Vec<String> {
    list.items
        .iter()
        .map(muster_api::visibility::PendingJob::display_name)
        .collect()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_users_see_the_waiting_list_each_as_their_rbac_allows_through_api_and_cli() {
    let Some(env) = Env::start(false).await else {
        return;
    };
    env.h100().await;
    env.gpu_nodes("b1", &["n1", "n2"]).await;
    shared_queue(&env).await;
    let port = free_port();
    let controller = Controller::start(
        env.client.clone(),
        Options {
            visibility: Some(VisibilityOptions {
                addr: ([127, 0, 0, 1], port).into(),
                certificate: None,
                pod: None,
            }),
            ..Options::default()
        },
    );
    register(&env, port).await;
    let alice = user(&env, "team-a", "alice", true).await;
    let bob = user(&env, "team-b", "bob", true).await;
    let carol = user(&env, "team-a", "carol", false).await;

    // team-a/first runs; b1, a2, b3 wait behind it in that order.
    env.submit(&gpu_job(
        "team-a",
        "first",
        1,
        8,
        &runs_for(600_000),
        json!({}),
    ))
    .await;
    env.until_status("team-a", "first", "admitted", 60, |s| {
        matches!(phase(s).as_str(), "Admitted" | "Running")
    })
    .await;
    for (ns, name) in [("team-b", "b1"), ("team-a", "a2"), ("team-b", "b3")] {
        // Creation times have a resolution of a second.
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        env.submit(&gpu_job(ns, name, 1, 8, &runs_for(600_000), json!({})))
            .await;
    }

    // The API, as each user: every place, names only where they may list GpuJobs.
    let hidden = muster_api::visibility::HIDDEN;
    let as_alice = eventually("alice sees three waiting jobs", 60, || async {
        let list: PendingJobList = ask(&alice, "/clusterqueues/shared/pendingjobs")
            .await
            .ok()?;
        (list.items.len() == 3).then_some(list)
    })
    .await;
    assert_eq!(names(&as_alice), [hidden, "team-a/a2", hidden]);
    assert_eq!(
        as_alice
            .items
            .iter()
            .map(|j| j.position)
            .collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(as_alice.hidden, 2);
    assert_eq!(as_alice.items[1].local_queue_position, Some(1));
    assert!(
        as_alice.items[0].message.is_none(),
        "no message of bob's job"
    );
    assert!(
        as_alice
            .items
            .iter()
            .all(|j| (j.gpus - 8.0).abs() < 1e-9 && j.pods == 1)
    );
    let as_bob: PendingJobList = ask(&bob, "/clusterqueues/shared/pendingjobs")
        .await
        .unwrap_or_else(|e| unreachable!("bob asks: {e}"));
    assert_eq!(names(&as_bob), ["team-b/b1", hidden, "team-b/b3"]);
    assert_eq!(as_bob.items[2].local_queue_position, Some(2));

    stories_agree(&alice, &carol).await;

    cli_agrees(&env, &alice, &bob, &carol);

    // The running job leaves: b1 is admitted, and the list moves up by one.
    let jobs: Api<GpuJob> = env.api("team-a");
    if let Err(e) = jobs.delete("first", &DeleteParams::default()).await {
        unreachable!("deleting first: {e}");
    }
    env.until_status("team-b", "b1", "admitted", 90, |s| {
        matches!(phase(s).as_str(), "Admitted" | "Running")
    })
    .await;
    let after = eventually("the list moves up", 60, || async {
        let list: PendingJobList = ask(&alice, "/clusterqueues/shared/pendingjobs")
            .await
            .ok()?;
        (list.items.len() == 2).then_some(list)
    })
    .await;
    assert_eq!(names(&after), ["team-a/a2", hidden]);
    assert_eq!(
        after.items.iter().map(|j| j.position).collect::<Vec<_>>(),
        [1, 2]
    );
    controller.stop().await;
}

/// `muster` with each user's kubeconfig says what the API says: the waiting list with
/// names hidden, a story, a refusal, the queues and the blocks; and so does `kubectl muster`.
fn cli_agrees(env: &Env, alice: &User, bob: &User, carol: &User) {
    let hidden = muster_api::visibility::HIDDEN;
    // The CLI says the same, with each user's kubeconfig.
    let (code, out, err) = muster(&[
        "jobs",
        "--kubeconfig",
        path(&alice.kubeconfig),
        "--cluster-queue",
        "shared",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("team-a/a2") && out.contains(hidden) && !out.contains("b3"),
        "{out}"
    );
    assert!(
        out.contains("2 of these jobs are in namespaces where you may not list GpuJobs"),
        "{out}"
    );
    let (code, out, err) = muster(&["explain", "a2", "--kubeconfig", path(&alice.kubeconfig)]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("position 2 in ClusterQueue shared, 1 in LocalQueue a"),
        "{out}"
    );
    assert!(
        out.contains("team-a/first in shared: 8 GPUs of h100"),
        "{out}"
    );
    let (code, _, err) = muster(&[
        "explain",
        "b1",
        "-n",
        "team-b",
        "--kubeconfig",
        path(&alice.kubeconfig),
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("not found"), "{err}");
    let (code, _, err) = muster(&["queues", "--kubeconfig", path(&carol.kubeconfig)]);
    assert_eq!(code, 1);
    assert!(
        err.contains("forbidden") && err.contains("muster-visibility-reader"),
        "{err}"
    );
    let (code, out, err) = muster(&[
        "queues",
        "-o",
        "json",
        "--kubeconfig",
        path(&bob.kubeconfig),
    ]);
    assert_eq!(code, 0, "{err}");
    let queues: ClusterQueueSummaryList =
        serde_json::from_str(&out).unwrap_or_else(|e| unreachable!("{e}: {out}"));
    let shared = &queues.items[0];
    assert_eq!((shared.waiting, shared.admitted), (3, 1), "{shared:?}");
    assert_eq!(muster_api_gpus(shared.usage[0].used), "8");
    let (code, out, err) = muster(&[
        "blocks",
        "-o",
        "json",
        "--kubeconfig",
        path(&bob.kubeconfig),
    ]);
    assert_eq!(code, 0, "{err}");
    let blocks: BlockList =
        serde_json::from_str(&out).unwrap_or_else(|e| unreachable!("{e}: {out}"));
    let b1 = blocks
        .items
        .iter()
        .find(|b| b.path == ["b1"])
        .unwrap_or_else(|| unreachable!("no block b1: {out}"));
    assert_eq!(
        (b1.gpus, b1.free_gpus, b1.largest_free_on_a_node),
        (16.0, 8.0, 8.0)
    );
    assert_eq!(
        b1.jobs.get(hidden),
        Some(&8.0),
        "bob does not see alice's job by name"
    );

    tables_read_well(alice, bob);
    // An admin holds the queue and lets it go again.
    let admin = path(env.cluster.kubeconfig_path());
    let (code, out, err) = muster(&["stop", "shared", "--kubeconfig", admin]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "clusterqueue/shared stopped (admitted jobs keep running)\n"
    );
    let (code, out, err) = muster(&["resume", "shared", "--kubeconfig", admin]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "clusterqueue/shared resumed\n");
    let (code, _, err) = muster(&["stop", "shared", "--kubeconfig", path(&alice.kubeconfig)]);
    assert_eq!(code, 1);
    assert!(err.contains("forbidden"), "{err}");
    plugin_agrees(env, alice);
}

/// A number of GPUs as a string, so that tests compare no floats.
fn muster_api_gpus(n: f64) -> String {
    format!("{n}")
}

/// One ClusterQueue of 8 GPUs, `shared`, and a LocalQueue in each team's namespace on it.
pub(crate) async fn shared_queue(env: &Env) {
    env.apply_all::<ClusterQueue>(json!({"apiVersion": "muster.dev/v1alpha1",
        "kind": "ClusterQueue", "metadata": {"name": "shared"},
        "spec": {"namespaceSelector": {},
            "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                {"name": "h100", "resources": [{"name": "nvidia.com/gpu",
                                                "nominalQuota": "8"}]}]}]}}))
        .await;
    for (ns, lq) in [("team-a", "a"), ("team-b", "b")] {
        let api: Api<LocalQueue> = env.api(ns);
        let queue = serde_json::from_value(json!({"apiVersion": "muster.dev/v1alpha1",
            "kind": "LocalQueue", "metadata": {"name": lq, "namespace": ns},
            "spec": {"clusterQueue": "shared"}}))
        .unwrap_or_else(|e| unreachable!("fixture: {e}"));
        if let Err(e) = api.create(&PostParams::default(), &queue).await {
            unreachable!("LocalQueue {ns}/{lq}: {e}");
        }
    }
}

/// `kubectl muster jobs`, through a link named `kubectl-muster` on the `PATH`, answers as
/// `muster jobs` does (when the control plane's directory has a kubectl).
fn plugin_agrees(env: &Env, alice: &User) {
    let hidden = muster_api::visibility::HIDDEN;
    // As a kubectl plugin, through a link named kubectl-muster.
    if let Some(kubectl) = muster_testkit::TestCluster::bin_dir()
        .map(|d| d.join("kubectl"))
        .filter(|k| k.exists())
    {
        let plugins = env.cluster.log_dir().join("plugins");
        let _ = std::fs::create_dir_all(&plugins);
        let link = plugins.join("kubectl-muster");
        let _ = std::fs::remove_file(&link);
        if let Err(e) = std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_muster"), &link) {
            unreachable!("linking kubectl-muster: {e}");
        }
        let path_var = format!(
            "{}:{}",
            plugins.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let output = std::process::Command::new(kubectl)
            .args([
                "muster",
                "jobs",
                "--kubeconfig",
                path(&alice.kubeconfig),
                "-q",
                "a",
            ])
            .env("PATH", path_var)
            .output()
            .unwrap_or_else(|e| unreachable!("kubectl muster: {e}"));
        let out = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(out.contains("a2") && !out.contains(hidden), "{out}");
    }
}

/// Alice's story of her job: who is ahead (hidden), who holds the quota (hers, by name);
/// bob's job is not hers to read; carol, without the reader role, is refused by the API
/// server before Muster is asked.
async fn stories_agree(alice: &User, carol: &User) {
    let hidden = muster_api::visibility::HIDDEN;
    let story: JobStory = ask(alice, "/namespaces/team-a/gpujobs/a2/story")
        .await
        .unwrap_or_else(|e| unreachable!("alice's story: {e}"));
    assert_eq!(story.ahead_count, 1);
    assert_eq!(story.ahead[0].display_name(), hidden);
    assert_eq!(story.holders.len(), 1, "{story:?}");
    assert_eq!(story.holders[0].job, "team-a/first");
    let theirs = ask::<JobStory>(alice, "/namespaces/team-b/gpujobs/b1/story").await;
    assert!(
        matches!(&theirs, Err(kube::Error::Api(s)) if s.code == 404),
        "bob's job is not alice's to read: {theirs:?}"
    );
    // Without the reader role the API server refuses before Muster is asked.
    let refused = ask::<PendingJobList>(carol, "/clusterqueues/shared/pendingjobs").await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 403),
        "{refused:?}"
    );
}

/// The tables, as people read them (the guides show these outputs).
fn tables_read_well(alice: &User, bob: &User) {
    let hidden = muster_api::visibility::HIDDEN;
    let (code, out, err) = muster(&["queues", "--kubeconfig", path(&bob.kubeconfig)]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("COHORT") && out.contains("shared"), "{out}");
    let (code, out, err) = muster(&[
        "blocks",
        "-o",
        "wide",
        "--kubeconfig",
        path(&alice.kubeconfig),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("team-a/first=8"), "{out}");
    let (code, out, err) = muster(&[
        "jobs",
        "-A",
        "-o",
        "wide",
        "--kubeconfig",
        path(&bob.kubeconfig),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("team-b/b3") && out.contains(hidden), "{out}");
}

/// Only the replica that leads answers: a standby that is asked (here the APIService points
/// at it) answers 503 naming the replica that leads, and the CLI says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_asked_names_the_replica_that_leads() {
    let Some(env) = Env::start(false).await else {
        return;
    };
    env.h100().await;
    shared_queue(&env).await;
    let logs = env.cluster.log_dir();
    let kubeconfig = env.cluster.kubeconfig_path();
    let (first, second) = (free_port(), free_port());
    let leader = crate::support::MusterProcess::start(
        kubeconfig,
        &[
            "--leader-elect",
            "--visibility-addr",
            &format!("127.0.0.1:{first}"),
        ],
        logs.join("muster-1.log"),
    );
    eventually("the first replica leads", 60, || async {
        leader.leads().then_some(())
    })
    .await;
    let standby = crate::support::MusterProcess::start(
        kubeconfig,
        &[
            "--leader-elect",
            "--visibility-addr",
            &format!("127.0.0.1:{second}"),
        ],
        logs.join("muster-2.log"),
    );
    eventually("the standby serves the visibility API", 60, || async {
        standby
            .log()
            .contains("serving the visibility API")
            .then_some(())
    })
    .await;
    register(&env, second).await;
    let alice = user(&env, "team-a", "alice", true).await;
    let leader_id = leader
        .identity()
        .unwrap_or_else(|| unreachable!("no identity in {}", leader.log()));
    let message = eventually("the standby's answer", 60, || async {
        match ask::<ClusterQueueSummaryList>(&alice, "/clusterqueues").await {
            Err(kube::Error::Api(status))
                if status.code == 503 && status.message.contains("stands by") =>
            {
                Some(status.message)
            }
            _ => None,
        }
    })
    .await;
    assert!(message.contains(&leader_id), "{message}");
    let (code, _, err) = muster(&["queues", "--kubeconfig", path(&alice.kubeconfig)]);
    assert_eq!(code, 1);
    assert!(
        err.contains("stands by") && err.contains(&leader_id),
        "{err}"
    );
    assert!(!standby.leads());
}
