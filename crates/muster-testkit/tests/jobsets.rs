//! The fake JobSet controller against the real control plane in `MUSTER_KUBE_BIN`, with
//! kube-controller-manager's Job controller and the fake kubelet running the child Jobs' pods:
//! it makes one suspended child Job per replica, resumes them with the replicated Job's
//! template of the moment, keeps a completed child Job through a suspension, reports counts,
//! and ends the JobSet as its child Jobs end. Without `MUSTER_KUBE_BIN` each test prints one
//! line and passes.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt as _};
use muster_api::jobset::{JOB_INDEX_LABEL, JOBSET_NAME_LABEL, JobSet, REPLICATED_JOB_LABEL};
use muster_testkit::jobsets::FakeJobSetController;
use muster_testkit::kubelet::{EXIT_CODE_ANNOTATION, RUN_ANNOTATION};
use muster_testkit::{
    ClusterOptions, FakeKubelet, FakeNodes, KubeletOptions, NodeSpec, UpstreamCrd, cluster_or_skip,
    eventually,
};
use serde_json::json;

const NS: &str = "default";
const WAIT: Duration = Duration::from_secs(90);

/// A JobSet `name`, suspended: a one-pod `init` whose pod runs for a second and two one-pod
/// `workers` whose pods run for `run_ms` milliseconds.
fn jobset(name: &str, run_ms: u64) -> anyhow::Result<JobSet> {
    let job = |replicas: i32, run_ms: u64| {
        json!({"replicas": replicas, "template": {"spec": {"backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {RUN_ANNOTATION: run_ms.to_string()}},
                "spec": {"restartPolicy": "Never", "containers": [{
                    "name": "main", "image": "registry.k8s.io/pause:3.10"}]}}}}})
    };
    let mut init = job(1, 1_000);
    init["name"] = json!("init");
    let mut workers = job(2, run_ms);
    workers["name"] = json!("workers");
    Ok(serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"suspend": true, "replicatedJobs": [init, workers]},
    }))?)
}

/// The child Jobs of JobSet `name`, by name.
async fn children(client: &Client, name: &str) -> BTreeMap<String, Job> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let selector = format!("{JOBSET_NAME_LABEL}={name}");
    jobs.list(&ListParams::default().labels(&selector))
        .await
        .map(|l| l.items.into_iter().map(|j| (j.name_any(), j)).collect())
        .unwrap_or_default()
}

fn suspended(job: &Job) -> bool {
    job.spec.as_ref().and_then(|s| s.suspend).unwrap_or(false)
}

fn completed(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Complete" && c.status == "True")
        })
}

/// `(replicated Job, active, succeeded)` as the JobSet's status reports them.
fn counts(set: &JobSet) -> Vec<(String, i32, i32)> {
    set.status
        .iter()
        .flat_map(|s| &s.replicated_jobs_status)
        .map(|r| (r.name.clone(), r.active, r.succeeded))
        .collect()
}

async fn suspend(jobsets: &Api<JobSet>, name: &str, suspend: bool) -> anyhow::Result<()> {
    let patch = json!({"spec": {"suspend": suspend}});
    jobsets
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// The pod template a worker child Job was resumed with carries the replicated Job's of the
/// moment: its shorter run, node and toleration.
fn assert_resumed_with_release(template: k8s_openapi::api::core::v1::PodTemplateSpec) {
    let run = template
        .metadata
        .and_then(|m| m.annotations)
        .and_then(|a| a.get(RUN_ANNOTATION).cloned());
    assert_eq!(run.as_deref(), Some("1000"));
    let spec = template.spec.unwrap_or_default();
    let node = spec
        .node_selector
        .and_then(|s| s.get("kubernetes.io/hostname").cloned());
    assert_eq!(node.as_deref(), Some("node-1"));
    let tolerated: Vec<Option<String>> = spec
        .tolerations
        .unwrap_or_default()
        .into_iter()
        .map(|t| t.key)
        .collect();
    assert_eq!(tolerated, [Some("example.com/reserved".to_owned())]);
}

/// A cluster with the Job controller, the JobSet CRD and its fake controller, one fake node
/// and a fake kubelet.
macro_rules! cluster_with_jobsets {
    () => {{
        let cluster = cluster_or_skip!(
            ClusterOptions {
                controller_manager: true,
                upstream_crds: &[UpstreamCrd::JobSet],
                ..ClusterOptions::default()
            },
            Ok(())
        );
        let client = cluster.client();
        let nodes = FakeNodes::start(client.clone());
        nodes.create_all(&[NodeSpec::new("node-1")]).await?;
        let kubelet = FakeKubelet::start(client.clone(), KubeletOptions::default());
        let controller = FakeJobSetController::start(client.clone());
        (cluster, client, nodes, kubelet, controller)
    }};
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_jobs_are_made_suspended_resumed_with_the_template_and_kept_once_completed()
-> anyhow::Result<()> {
    let (_cluster, client, _nodes, _kubelet, _controller) = cluster_with_jobsets!();
    let jobsets: Api<JobSet> = Api::namespaced(client.clone(), NS);
    // Workers run long at first: they are still running when the JobSet is suspended.
    jobsets
        .create(&PostParams::default(), &jobset("train", 600_000)?)
        .await?;

    // Suspended: one child Job per replica, suspended, labelled and owned; no pod.
    let made = eventually("three suspended child Jobs", WAIT, || async {
        let jobs = children(&client, "train").await;
        (jobs.len() == 3 && jobs.values().all(suspended)).then_some(jobs)
    })
    .await?;
    let names: Vec<&str> = made.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        ["train-init-0", "train-workers-0", "train-workers-1"]
    );
    let worker = &made["train-workers-1"];
    assert_eq!(
        worker
            .labels()
            .get(REPLICATED_JOB_LABEL)
            .map(String::as_str),
        Some("workers")
    );
    assert_eq!(
        worker.labels().get(JOB_INDEX_LABEL).map(String::as_str),
        Some("1")
    );
    let owner = worker.owner_references().first().map(|o| o.kind.as_str());
    assert_eq!(owner, Some("JobSet"));

    // Let go: init completes, the workers run, and the counts say so.
    suspend(&jobsets, "train", false).await?;
    eventually("init completed, two workers active", WAIT, || async {
        let set = jobsets.get("train").await.ok()?;
        (counts(&set) == [("init".into(), 0, 1), ("workers".into(), 2, 0)]).then_some(())
    })
    .await?;

    // Suspended again with a shorter run, a node and a toleration in the workers' template
    // (what a queue writes on release): the running workers are suspended, the completed
    // init is left as it is.
    suspend(&jobsets, "train", true).await?;
    let pod = "/spec/replicatedJobs/1/template/spec/template";
    let patch = json!([
        {"op": "replace",
         "path": format!("{pod}/metadata/annotations/{}", RUN_ANNOTATION.replace('/', "~1")),
         "value": "1000"},
        {"op": "add", "path": format!("{pod}/spec/nodeSelector"),
         "value": {"kubernetes.io/hostname": "node-1"}},
        {"op": "add", "path": format!("{pod}/spec/tolerations"),
         "value": [{"key": "example.com/reserved", "operator": "Exists"}]}]);
    jobsets
        .patch(
            "train",
            &PatchParams::default(),
            &Patch::<()>::Json(serde_json::from_value(patch)?),
        )
        .await?;
    let held = eventually("the workers suspended", WAIT, || async {
        let jobs = children(&client, "train").await;
        let workers = ["train-workers-0", "train-workers-1"].map(|n| jobs.get(n));
        workers
            .iter()
            .all(|j| j.is_some_and(suspended))
            .then_some(jobs)
    })
    .await?;
    let init = held.get("train-init-0");
    assert!(
        init.is_some_and(|j| !suspended(j) && completed(j)),
        "{init:?}"
    );

    // Let go again: the workers resume with the template of the moment and complete, and
    // so does the JobSet.
    suspend(&jobsets, "train", false).await?;
    let done = eventually("the JobSet Completed", WAIT, || async {
        let set = jobsets.get("train").await.ok()?;
        let status = set.status.as_ref()?;
        (status.terminal_state.as_deref() == Some("Completed")).then_some(set)
    })
    .await?;
    assert_eq!(
        counts(&done),
        [("init".into(), 0, 1), ("workers".into(), 0, 2)]
    );
    let jobs = children(&client, "train").await;
    let resumed = jobs
        .get("train-workers-0")
        .and_then(|j| j.spec.as_ref())
        .map(|s| s.template.clone());
    assert_resumed_with_release(resumed.unwrap_or_default());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_child_job_fails_the_jobset_and_its_active_child_jobs_are_deleted()
-> anyhow::Result<()> {
    let (_cluster, client, _nodes, _kubelet, _controller) = cluster_with_jobsets!();
    let jobsets: Api<JobSet> = Api::namespaced(client.clone(), NS);
    // Init fails at once; the workers would run for ten minutes.
    let mut set = jobset("broken", 600_000)?;
    let annotations = set.spec.replicated_jobs[0]
        .template
        .spec
        .as_mut()
        .and_then(|s| s.template.metadata.as_mut())
        .and_then(|m| m.annotations.as_mut());
    if let Some(annotations) = annotations {
        annotations.insert(RUN_ANNOTATION.into(), "500".into());
        annotations.insert(EXIT_CODE_ANNOTATION.into(), "1".into());
    }
    set.spec.suspend = Some(false);
    jobsets.create(&PostParams::default(), &set).await?;
    let failed = eventually("the JobSet Failed", WAIT, || async {
        let set = jobsets.get("broken").await.ok()?;
        let status = set.status.as_ref()?;
        (status.terminal_state.as_deref() == Some("Failed")).then_some(set)
    })
    .await?;
    let condition: Vec<(String, String)> = failed
        .status
        .iter()
        .flat_map(|s| &s.conditions)
        .map(|c| (c.type_.clone(), c.status.clone()))
        .collect();
    assert_eq!(condition, [("Failed".into(), "True".into())]);
    eventually("the running workers deleted", WAIT, || async {
        let jobs = children(&client, "broken").await;
        jobs.keys().eq(["broken-init-0"]).then_some(())
    })
    .await?;
    Ok(())
}
