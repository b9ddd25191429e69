//! `deploy/admission-policy.yaml` on a real API server: a Job labelled for a Muster queue is
//! created suspended and a labelled pod behind Muster's scheduling gate — by the API server's
//! own MutatingAdmissionPolicies, no webhook — while unlabelled ones are left as written; every
//! GpuJob is created with Muster's finalizer, so the controller need not add it.

use std::sync::atomic::{AtomicU32, Ordering};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::PostParams;
use muster_api::GpuJob;
use muster_api::wire::{ADMISSION_GATE, FINALIZER, QUEUE_NAME_LABEL};
use serde_json::{Value, json};

use crate::support::{Env, eventually};

const NAMESPACE: &str = "team-a";

fn job(name: &str, labelled: bool) -> Job {
    let labels = if labelled {
        json!({QUEUE_NAME_LABEL: "training"})
    } else {
        json!({})
    };
    read(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {"suspend": false, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "trainer:1"}]}}}
    }))
}

fn pod(name: &str, labelled: bool, gates: &Value) -> Pod {
    let labels = if labelled {
        json!({QUEUE_NAME_LABEL: "training"})
    } else {
        json!({})
    };
    read(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"schedulingGates": gates,
                 "containers": [{"name": "main", "image": "trainer:1"}]}
    }))
}

fn read<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap_or_else(|e| unreachable!("fixture: {e}"))
}

fn gates(pod: &Pod) -> Vec<String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|g| g.name)
        .collect()
}

/// A control plane with `deploy/admission-policy.yaml` applied as shipped, and the test
/// namespace; `None` (the test skips) without one.
async fn with_policies() -> Option<Env> {
    let env = Env::start(false).await?;
    let out = env.kubectl(&[
        "apply",
        "--server-side",
        "-f",
        "deploy/admission-policy.yaml",
    ]);
    assert!(
        out.status.success(),
        "the shipped policies apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    env.apply_all::<Namespace>(json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": NAMESPACE}}))
        .await;
    Some(env)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labelled_jobs_are_created_suspended_and_labelled_pods_gated() {
    let Some(env) = with_policies().await else {
        return;
    };
    let jobs = env.api::<Job>(NAMESPACE);
    let pods = env.api::<Pod>(NAMESPACE);
    let post = PostParams::default();

    // The API server loads a new policy shortly after it is created: labelled Jobs are made
    // until one comes back suspended. None made before then is ever counted.
    let tries = AtomicU32::new(0);
    let held = eventually("a labelled Job created suspended", 60, || async {
        let name = format!("queued-{}", tries.fetch_add(1, Ordering::Relaxed));
        let made = jobs.create(&post, &job(&name, true)).await.ok()?;
        made.spec
            .and_then(|s| s.suspend)
            .filter(|suspended| *suspended)
            .map(|_| name)
    })
    .await;
    assert!(held.starts_with("queued-"));

    // Without the label nothing changes.
    let free = jobs
        .create(&post, &job("unqueued", false))
        .await
        .unwrap_or_else(|e| unreachable!("creating an unlabelled Job: {e}"));
    assert_eq!(free.spec.and_then(|s| s.suspend), Some(false));

    // A labelled pod waits behind Muster's gate, next to the user's own; a pod that already
    // has the gate gets no second one; an unlabelled pod gets none.
    // Each policy is loaded on its own: labelled pods are made until one comes back gated.
    let made = AtomicU32::new(0);
    let gated = eventually("a labelled pod created behind the gate", 60, || async {
        let name = format!("member-{}", made.fetch_add(1, Ordering::Relaxed));
        let own = json!([{"name": "example.com/own"}]);
        let pod = pods.create(&post, &pod(&name, true, &own)).await.ok()?;
        (gates(&pod).len() > 1).then_some(pod)
    })
    .await;
    assert_eq!(gates(&gated), ["example.com/own", ADMISSION_GATE]);
    let once = pods
        .create(
            &post,
            &pod("already-gated", true, &json!([{"name": ADMISSION_GATE}])),
        )
        .await
        .unwrap_or_else(|e| unreachable!("creating a gated pod: {e}"));
    assert_eq!(gates(&once), [ADMISSION_GATE]);
    let plain = pods
        .create(&post, &pod("plain", false, &json!([])))
        .await
        .unwrap_or_else(|e| unreachable!("creating an unlabelled pod: {e}"));
    assert!(gates(&plain).is_empty(), "{:?}", gates(&plain));
}

fn gpujob(name: &str, finalizers: &[&str]) -> GpuJob {
    read(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "GpuJob",
        "metadata": {"name": name, "finalizers": finalizers},
        "spec": {"queueName": "training", "podSets": [{"name": "main", "count": 1,
            "template": {"spec": {"containers": [{"name": "main", "image": "trainer:1"}]}}}]}
    }))
}

fn finalizers(job: &GpuJob) -> Vec<String> {
    job.metadata.finalizers.clone().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_gpujob_is_created_with_muster_s_finalizer() {
    let Some(env) = with_policies().await else {
        return;
    };
    let jobs = env.api::<GpuJob>(NAMESPACE);
    let post = PostParams::default();
    // GpuJobs are made until the API server has loaded the policy; none made before counts.
    let tries = AtomicU32::new(0);
    let finalized = eventually("a GpuJob created with the finalizer", 60, || async {
        let name = format!("train-{}", tries.fetch_add(1, Ordering::Relaxed));
        let made = jobs.create(&post, &gpujob(&name, &[])).await.ok()?;
        finalizers(&made)
            .iter()
            .any(|f| f == FINALIZER)
            .then_some(made)
    })
    .await;
    assert_eq!(finalizers(&finalized), [FINALIZER]);
    // A job's own finalizers stay, beside Muster's; one that has Muster's gets no second.
    let own = jobs
        .create(&post, &gpujob("own", &["example.com/keep"]))
        .await
        .unwrap_or_else(|e| unreachable!("creating a GpuJob: {e}"));
    assert_eq!(finalizers(&own), ["example.com/keep", FINALIZER]);
    let once = jobs
        .create(&post, &gpujob("once", &[FINALIZER]))
        .await
        .unwrap_or_else(|e| unreachable!("creating a GpuJob: {e}"));
    assert_eq!(finalizers(&once), [FINALIZER]);
}
