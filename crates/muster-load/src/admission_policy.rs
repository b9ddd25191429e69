//! Installs the admission policy Muster ships for GpuJobs (`deploy/admission-policy.yaml`,
//! `muster-finalize-gpujobs`: every GpuJob is created with Muster's finalizer), as an
//! installation following the admin guide has it, and waits until the API server applies it.
//! Load runs measure the controller as it is deployed: without the policy the controller adds
//! the finalizer itself, one request per job.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use muster_api::GpuJob;
use muster_api::wire::FINALIZER;
use serde_json::json;

/// The policies Muster ships, as `deploy/` has them.
const SHIPPED: &str = include_str!("../../../deploy/admission-policy.yaml");
/// The policy (and its binding) that puts the finalizer on GpuJobs.
const POLICY: &str = "muster-finalize-gpujobs";
/// Where the probe job is made.
const PROBE_NAMESPACE: &str = "muster-load-probe";

/// Installs the GpuJob finalizer policy and its binding from the shipped file, then waits
/// (at most `timeout`) until a GpuJob is created with the finalizer.
pub async fn install_finalizer_policy(client: &Client, timeout: Duration) -> anyhow::Result<()> {
    let params = PatchParams::apply("muster-load").force();
    let mut installed = 0;
    for document in serde_yaml_ng::Deserializer::from_str(SHIPPED) {
        let value: serde_json::Value = serde::Deserialize::deserialize(document)
            .context("reading deploy/admission-policy.yaml")?;
        if value["metadata"]["name"] != POLICY {
            continue;
        }
        match value["kind"].as_str() {
            Some("MutatingAdmissionPolicy") => {
                Api::<MutatingAdmissionPolicy>::all(client.clone())
                    .patch(POLICY, &params, &Patch::Apply(&value))
                    .await
                    .context("applying the GpuJob finalizer policy")?;
            }
            Some("MutatingAdmissionPolicyBinding") => {
                Api::<MutatingAdmissionPolicyBinding>::all(client.clone())
                    .patch(POLICY, &params, &Patch::Apply(&value))
                    .await
                    .context("applying the GpuJob finalizer policy's binding")?;
            }
            _ => continue,
        }
        installed += 1;
    }
    anyhow::ensure!(
        installed == 2,
        "deploy/admission-policy.yaml has no {POLICY} policy and binding"
    );
    wait_applied(client, timeout).await
}

/// Creates probe GpuJobs until one comes back with the finalizer (the API server loads a new
/// policy shortly after it is made), removing each probe again.
async fn wait_applied(client: &Client, timeout: Duration) -> anyhow::Result<()> {
    Api::<Namespace>::all(client.clone())
        .patch(
            PROBE_NAMESPACE,
            &PatchParams::apply("muster-load").force(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": PROBE_NAMESPACE}})),
        )
        .await
        .context("making the probe namespace")?;
    let jobs = Api::<GpuJob>::namespaced(client.clone(), PROBE_NAMESPACE);
    let deadline = Instant::now() + timeout;
    for attempt in 0u32.. {
        let name = format!("probe-{attempt}");
        let probe: GpuJob = serde_json::from_value(json!({
            "apiVersion": "muster.dev/v1alpha1", "kind": "GpuJob",
            "metadata": {"name": name},
            "spec": {"queueName": "none", "podSets": [{"name": "main", "count": 1,
                "template": {"spec": {"containers": [{"name": "main", "image": "probe"}]}}}]}
        }))
        .context("building the probe GpuJob")?;
        let made = jobs
            .create(&PostParams::default(), &probe)
            .await
            .context("creating a probe GpuJob")?;
        let finalized = made
            .metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|f| f == FINALIZER));
        // Nothing runs the probe: take the finalizer off again and delete it.
        jobs.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .context("clearing a probe's finalizers")?;
        jobs.delete(&name, &DeleteParams::default())
            .await
            .context("deleting a probe GpuJob")?;
        if finalized {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the API server did not apply {POLICY} within {timeout:?} (is admissionregistration.k8s.io/v1 MutatingAdmissionPolicy served?)"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}
