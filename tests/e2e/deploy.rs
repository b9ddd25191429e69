//! `deploy/` on a real API server: the namespace and RBAC apply, and the controller running as
//! its ServiceAccount (through impersonation) elects itself, releases a gang, keeps a job
//! waiting on quota, buys capacity through a ProvisioningRequest and holds a labelled batch Job
//! in a queue entry of its own without one Forbidden.

use std::path::{Path, PathBuf};

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::{ApiResource, Discovery, Scope};
use muster_api::ProvisioningRequest;
use muster_testkit::{ClusterOptions, UpstreamCrd};
use serde_json::{Value, json};

use crate::support::{Env, MANAGER, MusterProcess, eventually, gpu_job, phase, reason, runs_for};

pub(crate) fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Applies every document of `file` (server-side), whatever its kind.
async fn apply_file(env: &Env, file: &Path) {
    apply_documents(env, file, |_| true).await;
}

/// Applies the documents of `file` that `keep` (server-side), whatever their kind.
pub(crate) async fn apply_documents(env: &Env, file: &Path, keep: impl Fn(&Value) -> bool) {
    let text = std::fs::read_to_string(file)
        .unwrap_or_else(|e| unreachable!("reading {}: {e}", file.display()));
    let discovery = match Discovery::new(env.client.clone()).run().await {
        Ok(d) => d,
        Err(e) => unreachable!("discovery: {e}"),
    };
    for document in serde_yaml_ng::Deserializer::from_str(&text) {
        let value: Value = match serde::Deserialize::deserialize(document) {
            Ok(v) => v,
            Err(e) => unreachable!("{}: {e}", file.display()),
        };
        if value.is_null() || !keep(&value) {
            continue;
        }
        let (group, version) = match value["apiVersion"]
            .as_str()
            .unwrap_or_default()
            .split_once('/')
        {
            Some((g, v)) => (g.to_owned(), v.to_owned()),
            None => (
                String::new(),
                value["apiVersion"].as_str().unwrap_or_default().to_owned(),
            ),
        };
        let kind = value["kind"].as_str().unwrap_or_default();
        let Some((resource, caps)) = discovery
            .groups()
            .filter(|g| g.name() == group)
            .flat_map(|g| g.versioned_resources(&version))
            .find(|(r, _)| r.kind == kind)
        else {
            unreachable!("{kind} is not served");
        };
        let resource: ApiResource = resource;
        let name = value["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let api: Api<DynamicObject> = match (caps.scope, value["metadata"]["namespace"].as_str()) {
            (Scope::Namespaced, Some(ns)) => {
                Api::namespaced_with(env.client.clone(), ns, &resource)
            }
            _ => Api::all_with(env.client.clone(), &resource),
        };
        if let Err(e) = api
            .patch(
                &name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&value),
            )
            .await
        {
            unreachable!("applying {kind} {name} from {}: {e}", file.display());
        }
    }
}

/// A kubeconfig that acts as `deploy/`'s ServiceAccount.
fn service_account_kubeconfig(env: &Env, path: &Path) {
    let config = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": {
            "server": env.cluster.api_url(), "insecure-skip-tls-verify": true}}],
        "users": [{"name": "muster", "user": {
            "token": env.cluster.token(),
            "as": "system:serviceaccount:muster-system:muster-controller",
            "as-groups": ["system:serviceaccounts", "system:serviceaccounts:muster-system",
                          "system:authenticated"]}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "muster"}}],
        "current-context": "e2e"});
    let text = serde_yaml_ng::to_string(&config).unwrap_or_default();
    if let Err(e) = std::fs::write(path, text) {
        unreachable!("writing {}: {e}", path.display());
    }
}

/// `deploy/`'s namespace and RBAC, the visibility API's included (its APIService would
/// point at a Service with no pod here, so it is left out).
async fn apply_shipped_rbac(env: &Env) {
    apply_file(env, &repo().join("deploy/namespace.yaml")).await;
    apply_file(env, &repo().join("deploy/rbac.yaml")).await;
    apply_documents(env, &repo().join("deploy/visibility.yaml"), |doc| {
        doc["kind"]
            .as_str()
            .is_some_and(|k| k.starts_with("ClusterRole") || k.starts_with("RoleBinding"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_rbac_is_enough_for_every_flow() {
    let Some(env) = Env::start(true).await else {
        return;
    };
    apply_shipped_rbac(&env).await;
    env.h100().await;
    env.gpu_nodes("b1", &["n1", "n2"]).await;
    env.queue(
        "a",
        "team-a",
        48,
        json!({"provisioning": {"className": "queued-provisioning.gke.io"}}),
    )
    .await;
    let kubeconfig = env.cluster.log_dir().join("service-account.kubeconfig");
    service_account_kubeconfig(&env, &kubeconfig);
    let controller = MusterProcess::start(
        &kubeconfig,
        &["--leader-elect", "--lease-namespace", "muster-system"],
        env.cluster.log_dir().join("muster.log"),
    );

    // A gang runs to the end.
    env.submit(&gpu_job(
        "team-a",
        "fits",
        2,
        8,
        &runs_for(2_000),
        json!({}),
    ))
    .await;
    env.until_status("team-a", "fits", "Succeeded", 90, |s| {
        phase(s) == "Succeeded"
    })
    .await;
    // Three pods in one block of two nodes: the queue buys a block, holding 24 of its 48
    // GPUs; a job that would overrun the rest waits, saying why.
    env.submit(&gpu_job("team-a", "big", 3, 8, &json!({}), json!({})))
        .await;
    let requests: Api<ProvisioningRequest> = env.api("team-a");
    eventually("big's ProvisioningRequest", 60, || async {
        requests.get_opt("big-1").await.ok().flatten().map(|_| ())
    })
    .await;
    env.submit(&gpu_job("team-a", "over", 4, 8, &json!({}), json!({})))
        .await;
    env.until_status("team-a", "over", "waiting for quota", 30, |s| {
        reason(s) == "QuotaShort"
    })
    .await;
    env.gpu_nodes("b2", &["n3", "n4", "n5"]).await;
    let status = json!({"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
        "status": {"conditions": [{"type": "Provisioned", "status": "True", "reason": "E2E",
            "message": "ready", "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string()}]}});
    if let Err(e) = requests
        .patch_status(
            "big-1",
            &PatchParams::apply("e2e-autoscaler").force(),
            &Patch::Apply(&status),
        )
        .await
    {
        unreachable!("Provisioned: {e}");
    }
    env.until_status("team-a", "big", "Running", 60, |s| phase(s) == "Running")
        .await;
    // A labelled batch Job created running, bigger than the queue: its queue entry is made
    // and waits, and the Job is suspended.
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = env.api("team-a");
    let job: k8s_openapi::api::batch::v1::Job = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "labelled", "namespace": "team-a",
                     "labels": {"muster.dev/queue-name": "a"}},
        "spec": {"parallelism": 8, "completions": 8, "completionMode": "Indexed",
            "template": {"spec": {"restartPolicy": "Never", "containers": [{
                "name": "main", "image": "registry.k8s.io/pause:3.10",
                "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}}))
    .unwrap_or_else(|e| unreachable!("fixture: {e}"));
    if let Err(e) = jobs.create(&kube::api::PostParams::default(), &job).await {
        unreachable!("creating the labelled Job: {e}");
    }
    env.until_status("team-a", "job-labelled", "waiting for quota", 60, |s| {
        reason(s) == "QuotaShort"
    })
    .await;
    eventually("the labelled Job suspended", 60, || async {
        jobs.get("labelled")
            .await
            .ok()
            .filter(|j| j.spec.as_ref().and_then(|s| s.suspend) == Some(true))
            .map(|_| ())
    })
    .await;

    let log = controller.log();
    let forbidden: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("Forbidden") || l.contains("forbidden"))
        .collect();
    assert!(forbidden.is_empty(), "{forbidden:#?}");
    assert!(controller.leads(), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crds_install_and_examples_apply_with_kubectl() {
    let Some(env) = Env::start_with(ClusterOptions {
        upstream_crds: &[UpstreamCrd::JobSet],
        ..ClusterOptions::default()
    })
    .await
    else {
        return;
    };
    let run = |args: &[&str]| {
        let out = env.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&["apply", "--server-side", "--force-conflicts", "-f", "crds/"]);
    run(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "-f",
        "crds/",
    ]);
    run(&["apply", "--server-side", "-f", "deploy/examples/admin.yaml"]);
    // The MIG pool's and the HAMi pool's own namespaces, queues and jobs.
    for pool in [
        "deploy/examples/h100-mig-pool.yaml",
        "deploy/examples/hami-share-job.yaml",
    ] {
        run(&["apply", "--server-side", "-f", pool]);
    }
    // A labelled batch Job, JobSet or pod group is an object of another API: its API server
    // takes it as shipped (the JobSet's with the upstream CRD).
    for job in [
        "deploy/examples/gpu-block-job.yaml",
        "deploy/examples/tpu-v5p-job.yaml",
        "deploy/examples/indexed-job.yaml",
        "deploy/examples/tpu-jobset.yaml",
        "deploy/examples/pod-group.yaml",
    ] {
        run(&["apply", "--server-side", "--dry-run=server", "-f", job]);
    }
}
