//! Jobs teams already run, queued by Muster on a real control plane with kube-controller-
//! manager's Job controller making their pods: a labelled Indexed Job waits suspended while
//! quota is short, with its queue entry saying why; then it is released as one block, pod `i`
//! on the `i`-th node of its admission, and finishes when the Job completes. A Job without the
//! label runs untouched beside it; a labelled Job that arrives running is suspended at once; a
//! Job resized while it waits runs at its new size; a Job with no block free buys one.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use muster_api::GpuJob;
use muster_testkit::{ClusterOptions, Component, UpstreamCrd};
use serde_json::{Value, json};

use crate::support::{BLOCK, Env, always, bound_node, eventually, gated, phase, reason, runs_for};

/// A cluster whose Job controller (kube-controller-manager) makes Jobs' pods.
async fn env_with_job_controller() -> Option<Env> {
    Env::start_with(ClusterOptions {
        controller_manager: true,
        ..ClusterOptions::default()
    })
    .await
}

/// An Indexed Job of `pods` pods with `gpus` GPUs each, all in one block, whose pods run
/// `ms` milliseconds and succeed; labelled with LocalQueue `queue` when given.
fn indexed_job(
    name: &str,
    queue: Option<&str>,
    pods: u32,
    gpus: u32,
    ms: u64,
    suspend: bool,
) -> Job {
    let mut annotations = runs_for(ms);
    annotations["muster.dev/topology-required"] = json!(BLOCK);
    let labels = match queue {
        Some(queue) => json!({"muster.dev/queue-name": queue}),
        None => json!({}),
    };
    let limits = if gpus > 0 {
        json!({"nvidia.com/gpu": gpus.to_string()})
    } else {
        json!({})
    };
    let job: Value = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "team-a", "labels": labels},
        "spec": {
            "suspend": suspend,
            "parallelism": pods, "completions": pods, "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {"restartPolicy": "Never", "containers": [{
                    "name": "main", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"limits": limits}}]}}}});
    serde_json::from_value(job).unwrap_or_else(|e| unreachable!("fixture {name}: {e}"))
}

async fn create(env: &Env, job: &Job) {
    let jobs: Api<Job> = env.api("team-a");
    if let Err(e) = jobs.create(&PostParams::default(), job).await {
        unreachable!("creating Job {:?}: {e}", job.metadata.name);
    }
}

/// Job `name`'s owner edits it: a merge patch of `body`.
async fn edit(env: &Env, name: &str, body: &Value) {
    let jobs: Api<Job> = env.api("team-a");
    let patch = kube::api::Patch::Merge(body);
    if let Err(e) = jobs
        .patch(name, &kube::api::PatchParams::default(), &patch)
        .await
    {
        unreachable!("editing Job {name} with {body}: {e}");
    }
}

async fn job(env: &Env, name: &str) -> Option<Job> {
    let jobs: Api<Job> = env.api("team-a");
    jobs.get_opt(name).await.ok().flatten()
}

/// The pods of Job `name`, by the Job controller's label.
async fn job_pods(env: &Env, name: &str) -> Vec<Pod> {
    let pods: Api<Pod> = env.api("team-a");
    pods.list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={name}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

fn completion_index(pod: &Pod) -> Option<usize> {
    pod.metadata
        .labels
        .as_ref()?
        .get("batch.kubernetes.io/job-completion-index")?
        .parse()
        .ok()
}

fn suspended(job: &Job) -> bool {
    job.spec.as_ref().and_then(|s| s.suspend).unwrap_or(false)
}

fn condition(job: &Job, type_: &str) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_indexed_job_waits_for_quota_then_runs_as_one_block_pod_i_on_node_i() {
    let Some(env) = env_with_job_controller().await else {
        return;
    };
    env.h100().await;
    env.gpu_nodes("b1", &["n1", "n2", "n3", "n4"]).await;
    env.gpu_nodes("b2", &["n5", "n6"]).await;
    env.queue("a", "team-a", 16, json!({})).await;
    let controller = env.controller();

    // Created suspended, as the admission policy (or the team) makes it; and a Job without
    // the label beside it.
    create(&env, &indexed_job("train", Some("a"), 4, 8, 3_000, true)).await;
    create(&env, &indexed_job("plain", None, 2, 0, 1_000, false)).await;

    // Its queue entry waits for quota, saying so where GpuJobs say it; the Job stays
    // suspended and has no pods.
    let waiting = env
        .until_status("team-a", "job-train", "waiting for quota", 60, |s| {
            reason(s) == "QuotaShort"
        })
        .await;
    let message = waiting.pending_reason.clone().unwrap_or_default().message;
    assert!(
        message.contains("32"),
        "the reason gives the numbers: {message}"
    );
    let held = job(&env, "train").await.unwrap_or_default();
    assert!(suspended(&held), "held suspended while it waits");
    assert!(job_pods(&env, "train").await.is_empty());

    // The Job without the label runs to completion untouched: never suspended, no entry,
    // none of Muster's labels on its pods.
    let plain = eventually("the unlabelled Job completes", 60, || async {
        job(&env, "plain")
            .await
            .filter(|j| condition(j, "Complete"))
    })
    .await;
    assert!(!suspended(&plain));
    let entries: Api<GpuJob> = env.api("team-a");
    assert!(entries.get_opt("job-plain").await.ok().flatten().is_none());
    let template_labels = plain
        .spec
        .and_then(|s| s.template.metadata)
        .and_then(|m| m.labels)
        .unwrap_or_default();
    assert!(
        !template_labels.keys().any(|k| k.starts_with("muster.dev/")),
        "{template_labels:?}"
    );

    // Quota enough: the gang is released as one block, pod i on the admission's i-th node.
    env.queue("a", "team-a", 32, json!({})).await;
    let admitted = env
        .until_status("team-a", "job-train", "admitted", 60, |s| {
            s.admission.is_some()
        })
        .await;
    let nodes = admitted.admission.clone().unwrap_or_default().pod_sets[0]
        .nodes
        .clone();
    assert_eq!(nodes.len(), 4);
    let pods = eventually("the Job's four pods bound, no gate left", 90, || async {
        let pods = job_pods(&env, "train").await;
        (pods.len() == 4 && pods.iter().all(|p| bound_node(p).is_some() && !gated(p)))
            .then_some(pods)
    })
    .await;
    for pod in &pods {
        let index = completion_index(pod).unwrap_or(usize::MAX);
        assert_eq!(
            bound_node(pod).as_deref(),
            nodes.get(index).map(String::as_str)
        );
    }
    let blocks: std::collections::BTreeSet<bool> = nodes
        .iter()
        .map(|n| ["n1", "n2", "n3", "n4"].contains(&n.as_str()))
        .collect();
    assert_eq!(blocks.len(), 1, "one block: {nodes:?}");

    // The Job completes; its entry says so and gives the quota back.
    let done = env
        .until_status("team-a", "job-train", "Succeeded", 90, |s| {
            phase(s) == "Succeeded"
        })
        .await;
    assert!(done.admission.is_none(), "{done:?}");
    assert!(condition(
        &job(&env, "train").await.unwrap_or_default(),
        "Complete"
    ));
    // Its entry was never written anew: the Job as the API server returns it reads as the
    // entry recorded it, through release and completion.
    let entry = entries.get("job-train").await.ok().unwrap_or_default();
    assert_eq!(entry.metadata.generation, Some(1), "{:?}", entry.spec);
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_of_one_completion_goes_to_its_node_as_made_and_never_grows_while_it_runs() {
    let Some(env) = env_with_job_controller().await else {
        return;
    };
    env.h100().await;
    env.gpu_nodes("b1", &["n1", "n2"]).await;
    env.queue("a", "team-a", 16, json!({})).await;
    let controller = env.controller();

    let mut solo = indexed_job("solo", Some("a"), 1, 8, 15_000, true);
    if let Some(spec) = solo.spec.as_mut() {
        spec.completion_mode = Some("NonIndexed".to_owned());
    }
    create(&env, &solo).await;
    let admitted = env
        .until_status("team-a", "job-solo", "admitted", 60, |s| {
            s.admission.is_some()
        })
        .await;
    let nodes = admitted.admission.clone().unwrap_or_default().pod_sets[0]
        .nodes
        .clone();
    assert_eq!(nodes.len(), 1);
    // With no peer to wait for, the Job's template names the node and carries no gate.
    let pod = eventually(
        "the Job's pod bound to the admission's node",
        90,
        || async {
            job_pods(&env, "solo")
                .await
                .into_iter()
                .find(|p| bound_node(p).is_some())
        },
    )
    .await;
    assert_eq!(bound_node(&pod), nodes.first().cloned());
    assert!(!gated(&pod));
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("muster.dev/pod-index").map(String::as_str),
        Some("0")
    );
    let managers: Vec<String> = pod
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        !managers.iter().any(|m| m == "muster"),
        "Muster never wrote the pod: {managers:?}"
    );

    // Its owner raises its parallelism while it runs: one completion is all it has, so its
    // controller makes no second pod that could start without quota.
    edit(&env, "solo", &json!({"spec": {"parallelism": 3}})).await;
    always("one pod of the Job at most", 5, || async {
        match job_pods(&env, "solo").await.len() {
            0 | 1 => Ok(()),
            n => Err(format!("{n} pods")),
        }
    })
    .await;

    let done = env
        .until_status("team-a", "job-solo", "Succeeded", 90, |s| {
            phase(s) == "Succeeded"
        })
        .await;
    assert!(done.admission.is_none(), "{done:?}");
    assert_eq!(job_pods(&env, "solo").await.len(), 1);
    // Its pod's success was the Job's: the entry may finish before the Job controller marks
    // the Job complete, and then leaves the Job to it, never suspending it.
    let complete = eventually("the Job complete", 60, || async {
        job(&env, "solo").await.filter(|j| condition(j, "Complete"))
    })
    .await;
    assert!(!suspended(&complete), "{:?}", complete.spec);
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_resized_while_it_waits_is_read_again_and_runs_at_its_new_size() {
    let Some(env) = env_with_job_controller().await else {
        return;
    };
    env.h100().await;
    env.gpu_nodes("b1", &["n1", "n2", "n3", "n4"]).await;
    env.queue("a", "team-a", 16, json!({})).await;
    let controller = env.controller();
    create(&env, &indexed_job("train", Some("a"), 4, 8, 1_000, true)).await;
    env.until_status("team-a", "job-train", "waiting for quota", 60, |s| {
        reason(s) == "QuotaShort"
    })
    .await;
    // Its owner halves it (an Indexed Job's completions may follow its parallelism).
    edit(
        &env,
        "train",
        &json!({"spec": {"parallelism": 2, "completions": 2}}),
    )
    .await;
    let admitted = env
        .until_status("team-a", "job-train", "admitted at its new size", 60, |s| {
            s.admission.is_some()
        })
        .await;
    assert_eq!(
        admitted.admission.unwrap_or_default().pod_sets[0]
            .nodes
            .len(),
        2
    );
    env.until_status("team-a", "job-train", "Succeeded", 90, |s| {
        phase(s) == "Succeeded"
    })
    .await;
    assert_eq!(job_pods(&env, "train").await.len(), 2);
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_labelled_job_that_arrives_running_is_suspended_then_queued() {
    let Some(env) = env_with_job_controller().await else {
        return;
    };
    env.h100().await;
    env.gpu_nodes("b1", &["n1", "n2"]).await;
    env.queue("a", "team-a", 0, json!({})).await;
    let controller = env.controller();

    // No admission policy here: the Job arrives unsuspended, and the Job controller may
    // start its pods before Muster sees it.
    create(&env, &indexed_job("eager", Some("a"), 2, 8, 2_000, false)).await;
    eventually("the Job suspended", 60, || async {
        job(&env, "eager").await.filter(suspended)
    })
    .await;
    let waiting = env
        .until_status("team-a", "job-eager", "waiting for quota", 60, |s| {
            reason(s) == "QuotaShort"
        })
        .await;
    assert!(waiting.admission.is_none());
    eventually("its early pods gone", 60, || async {
        job_pods(&env, "eager")
            .await
            .iter()
            .all(|p| p.metadata.deletion_timestamp.is_some() || bound_node(p).is_none())
            .then_some(())
    })
    .await;

    // Queued like any other: given quota, it runs whole and completes.
    env.queue("a", "team-a", 16, json!({})).await;
    env.until_status("team-a", "job-eager", "Succeeded", 120, |s| {
        phase(s) == "Succeeded"
    })
    .await;
    assert!(condition(
        &job(&env, "eager").await.unwrap_or_default(),
        "Complete"
    ));
    controller.stop().await;
}

/// Block `b1` of `nodes`, queue `a` with their GPUs as quota and preemption of lower
/// priorities within it, and the Job `train` of one 8-GPU pod per node, each running `ms`,
/// queued, admitted and Running under the controller returned.
async fn train_running_where_it_may_be_preempted(
    env: &Env,
    nodes: &[&str],
    ms: u64,
) -> crate::support::Controller {
    let pods = u32::try_from(nodes.len()).unwrap_or(u32::MAX);
    env.h100().await;
    env.gpu_nodes("b1", nodes).await;
    env.queue(
        "a",
        "team-a",
        8 * pods,
        json!({"preemption": {"withinClusterQueue": "LowerPriority"}}),
    )
    .await;
    let controller = env.controller();
    create(env, &indexed_job("train", Some("a"), pods, 8, ms, true)).await;
    env.until_status("team-a", "job-train", "Running", 90, |s| {
        phase(s) == "Running"
    })
    .await;
    controller
}

/// Whether a pod may still run: not finished and not being deleted.
fn live(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    pod.metadata.deletion_timestamp.is_none() && !matches!(phase, Some("Succeeded" | "Failed"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preempted_indexed_job_is_suspended_its_quota_freed_after_its_pods_then_it_completes() {
    let Some(env) = env_with_job_controller().await else {
        return;
    };
    let controller =
        train_running_where_it_may_be_preempted(&env, &["n1", "n2", "n3", "n4"], 12_000).await;

    // A higher-priority gang needs half the quota: the Job is evicted whole.
    env.submit(&crate::support::gpu_job(
        "team-a",
        "urgent",
        2,
        8,
        &runs_for(2_000),
        json!({"priority": 100}),
    ))
    .await;
    // Until the urgent gang runs, no pod of it is bound while a pod of the Job may still run.
    eventually(
        "the urgent gang running, never beside the Job's pods",
        90,
        || async {
            let urgent = env.pods_of("team-a", "urgent").await;
            let bound = urgent.iter().filter(|p| bound_node(p).is_some()).count();
            if bound > 0 {
                let running: Vec<String> = job_pods(&env, "train")
                    .await
                    .iter()
                    .filter(|p| live(p) && bound_node(p).is_some())
                    .filter_map(|p| p.metadata.name.clone())
                    .collect();
                assert!(
                    running.is_empty(),
                    "urgent pods bound while the Job's pods run: {running:?}"
                );
            }
            (bound == 2).then_some(())
        },
    )
    .await;
    let evicted = env.status("team-a", "job-train").await.unwrap_or_default();
    assert!(evicted.requeue_count >= 1, "{evicted:?}");
    assert!(
        suspended(&job(&env, "train").await.unwrap_or_default()) || evicted.admission.is_some(),
        "suspended until readmitted"
    );

    // The urgent gang ends; the Job is admitted again, runs whole and completes.
    env.until_status("team-a", "urgent", "Succeeded", 60, |s| {
        phase(s) == "Succeeded"
    })
    .await;
    let done = env
        .until_status("team-a", "job-train", "Succeeded", 120, |s| {
            phase(s) == "Succeeded"
        })
        .await;
    assert!(done.requeue_count >= 1);
    assert!(condition(
        &job(&env, "train").await.unwrap_or_default(),
        "Complete"
    ));
    controller.stop().await;
}

/// A Job evicted while its Job controller lags (here: is stopped) is not failed by the
/// eviction: the Job controller counts a pod deleted under it before it succeeded as a
/// failure, and this Job's `backoffLimit` is 0. Muster leaves the pods of the ended attempt
/// to the Job controller, which deletes them uncounted once it sees the Job suspended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_evicted_while_its_job_controller_lags_keeps_its_backoff_limit_and_completes() {
    let Some(mut env) = env_with_job_controller().await else {
        return;
    };
    // Its pod runs 45 s: long enough that the Job controller, once back, deletes it rather
    // than it ending by itself while kube-controller-manager is stopped.
    let controller = train_running_where_it_may_be_preempted(&env, &["n1"], 45_000).await;

    if let Err(e) = env.cluster.stop(Component::ControllerManager).await {
        unreachable!("stopping kube-controller-manager: {e:#}");
    }
    env.submit(&crate::support::gpu_job(
        "team-a",
        "urgent",
        1,
        8,
        &runs_for(2_000),
        json!({"priority": 100}),
    ))
    .await;
    eventually("the evicted Job suspended", 60, || async {
        suspended(&job(&env, "train").await.unwrap_or_default()).then_some(())
    })
    .await;
    always(
        "the ended attempt's pod left to the Job controller",
        5,
        || async {
            let deleted: Vec<String> = job_pods(&env, "train")
                .await
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_some())
                .filter_map(|p| p.metadata.name.clone())
                .collect();
            if deleted.is_empty() {
                Ok(())
            } else {
                Err(format!("deleted under the Job controller: {deleted:?}"))
            }
        },
    )
    .await;
    if let Err(e) = env.cluster.start_again(Component::ControllerManager).await {
        unreachable!("starting kube-controller-manager again: {e:#}");
    }

    env.until_status("team-a", "urgent", "Succeeded", 90, |s| {
        phase(s) == "Succeeded"
    })
    .await;
    let done = env
        .until_status("team-a", "job-train", "finished", 120, |s| {
            matches!(phase(s).as_str(), "Succeeded" | "Failed")
        })
        .await;
    assert_eq!(phase(&done), "Succeeded", "{done:?}");
    assert!(done.requeue_count >= 1, "{done:?}");
    let train = job(&env, "train").await.unwrap_or_default();
    assert!(condition(&train, "Complete"), "{:?}", train.status);
    assert_eq!(
        train.status.as_ref().and_then(|s| s.failed).unwrap_or(0),
        0,
        "{:?}",
        train.status
    );
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_node_under_a_running_indexed_job_restarts_its_gang_on_healthy_nodes() {
    let Some(env) = env_with_job_controller().await else {
        return;
    };
    env.h100().await;
    env.gpu_nodes("b1", &["n1", "n2", "n3"]).await;
    env.queue("a", "team-a", 24, json!({})).await;
    let controller = env.controller();
    // Pods that run long; a pod lost with its node counts as one failure of the Job's own.
    let mut train = indexed_job("train", Some("a"), 2, 8, 600_000, true);
    if let Some(spec) = train.spec.as_mut() {
        spec.backoff_limit = Some(6);
    }
    create(&env, &train).await;
    env.until_status("team-a", "job-train", "Running", 90, |s| {
        phase(s) == "Running"
    })
    .await;
    let victim = job_pods(&env, "train")
        .await
        .iter()
        .find_map(bound_node)
        .unwrap_or_default();
    if let Err(e) = muster_testkit::nodes::kill_node(&env.client, &victim).await {
        unreachable!("killing node {victim}: {e:#}");
    }
    env.until_status("team-a", "job-train", "restarted", 60, |s| {
        s.restart_count >= 1
    })
    .await;
    let nodes = eventually("the new attempt running on healthy nodes", 120, || async {
        let status = env.status("team-a", "job-train").await?;
        if phase(&status) != "Running" {
            return None;
        }
        let nodes: Vec<String> = job_pods(&env, "train")
            .await
            .iter()
            .filter(|p| live(p))
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .filter_map(bound_node)
            .collect();
        (nodes.len() == 2).then_some(nodes)
    })
    .await;
    assert!(!nodes.contains(&victim), "{nodes:?} avoid {victim}");
    controller.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_labelled_job_without_a_block_buys_one_and_its_pods_consume_the_request() {
    let Some(env) = Env::start_with(ClusterOptions {
        controller_manager: true,
        upstream_crds: &[UpstreamCrd::ProvisioningRequest],
        ..ClusterOptions::default()
    })
    .await
    else {
        return;
    };
    crate::provisioning::buying_cluster(&env).await;
    let controller = env.controller();
    // Four 8-GPU pods in one block: the cluster's only block has two nodes.
    create(&env, &indexed_job("train", Some("a"), 4, 8, 1_000, true)).await;
    crate::provisioning::request(&env, "job-train-1").await;
    assert!(suspended(&job(&env, "train").await.unwrap_or_default()));
    // The test, as the autoscaler, provisions a block of four nodes.
    env.gpu_nodes("b3", &["n5", "n6", "n7", "n8"]).await;
    crate::provisioning::autoscaler_says(&env, "job-train-1", "Provisioned", "capacity is ready")
        .await;
    let pods = eventually("the Job's four pods bound, no gate left", 90, || async {
        let pods = job_pods(&env, "train").await;
        (pods.len() == 4 && pods.iter().all(|p| bound_node(p).is_some() && !gated(p)))
            .then_some(pods)
    })
    .await;
    for pod in &pods {
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            annotations
                .get("autoscaling.x-k8s.io/consume-provisioning-request")
                .map(String::as_str),
            Some("job-train-1")
        );
        let node = bound_node(pod).unwrap_or_default();
        assert!(
            ["n5", "n6", "n7", "n8"].contains(&node.as_str()),
            "on {node}"
        );
    }
    env.until_status("team-a", "job-train", "Succeeded", 90, |s| {
        phase(s) == "Succeeded"
    })
    .await;
    controller.stop().await;
}
