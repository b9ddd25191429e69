//! `muster-load api-floor`: how fast this machine's API server takes writes, with nothing
//! else running — the floor under every load figure measured on it.
//!
//! It starts a control plane of its own (etcd and kube-apiserver only: nothing binds or
//! watches the pods), creates pods shaped like the gangs Muster releases (gated, one
//! container, requests), then patches each one's labels, both from one client with a fixed
//! number of requests in flight, and reports the rate of each.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::{StreamExt as _, stream};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use muster_api::wire::{ADMISSION_GATE, JOB_LABEL};
use serde::Serialize;
use serde_json::json;

use muster_testkit::{ClusterOptions, TestCluster};

/// How to measure.
#[derive(Clone, Debug)]
pub struct FloorOptions {
    /// The control-plane binaries.
    pub kube_bin: PathBuf,
    /// Pods to create (and then patch).
    pub objects: usize,
    /// Requests in flight at once.
    pub concurrency: usize,
}

/// What it measured.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Floor {
    /// Pods created.
    pub objects: usize,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Creates per second, over all of them.
    pub creates_per_second: f64,
    /// Label patches per second, over all of them.
    pub patches_per_second: f64,
    /// Requests that failed (each is retried once before it counts).
    pub errors: usize,
}

/// Measures the floor on a fresh control plane.
pub async fn measure(options: &FloorOptions) -> anyhow::Result<Floor> {
    let cluster = TestCluster::start_in(
        &options.kube_bin,
        ClusterOptions {
            scheduler: false,
            ..ClusterOptions::default()
        },
    )
    .await?;
    let client = cluster.client();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "floor"}}))?,
        )
        .await
        .context("creating the namespace")?;
    let pods: Arc<Api<Pod>> = Arc::new(Api::namespaced(client, "floor"));
    let concurrency = options.concurrency.max(1);

    let started = Instant::now();
    let create_errors = run_all(options.objects, concurrency, |i| {
        let pods = Arc::clone(&pods);
        async move {
            pods.create(&PostParams::default(), &pod(i))
                .await
                .map(|_| ())
        }
    })
    .await;
    let creating = started.elapsed();

    let started = Instant::now();
    let patch_errors = run_all(options.objects, concurrency, |i| {
        let pods = Arc::clone(&pods);
        async move {
            let patch = json!({"metadata": {"labels": {"floor.muster.dev/patched": "true"}}});
            pods.patch(&name(i), &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
        }
    })
    .await;
    let patching = started.elapsed();

    Ok(Floor {
        objects: options.objects,
        concurrency,
        creates_per_second: rate(options.objects, creating),
        patches_per_second: rate(options.objects, patching),
        errors: create_errors + patch_errors,
    })
}

/// Runs `request(i)` for every `i` below `count`, `concurrency` at a time, retrying a failed
/// one once; returns how many failed twice.
async fn run_all<F, Fut>(count: usize, concurrency: usize, request: F) -> usize
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<(), kube::Error>>,
{
    stream::iter(0..count)
        .map(|i| {
            let first = request(i);
            let again = &request;
            async move {
                if first.await.is_ok() {
                    return 0;
                }
                usize::from(again(i).await.is_err())
            }
        })
        .buffer_unordered(concurrency)
        .fold(0, |failed, f| async move { failed + f })
        .await
}

fn rate(count: usize, took: Duration) -> f64 {
    #[expect(clippy::cast_precision_loss, reason = "a rate for a report")]
    let count = count as f64;
    count / took.as_secs_f64().max(f64::EPSILON)
}

fn name(i: usize) -> String {
    format!("floor-{i:06}")
}

/// A pod like one of a released gang: gated, so that nothing would bind it.
fn pod(i: usize) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name(i), "labels": {JOB_LABEL: format!("job-{i}")}},
        "spec": {
            "schedulingGates": [{"name": ADMISSION_GATE}],
            "containers": [{
                "name": "main", "image": "trainer:1",
                "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}
            }]
        }
    }))
    .unwrap_or_default()
}
