//! Installing CustomResourceDefinitions: Muster's own, generated from `muster_api`, and the
//! upstream ProvisioningRequest and JobSet kept in the shared folder beside the repository
//! (or wherever [`UPSTREAM_CRDS_ENV`] names).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};

use crate::wait::eventually;

/// The field manager of everything the kit applies.
pub(crate) const MANAGER: &str = "muster-testkit";

/// How long a CRD may take to become Established.
const ESTABLISHED_TIMEOUT: Duration = Duration::from_secs(60);

/// The variable naming the folder of the upstream CRDs, for a checkout that is not beside
/// `shared/` (a clone elsewhere, a CI workspace).
pub const UPSTREAM_CRDS_ENV: &str = "MUSTER_UPSTREAM_CRDS";

/// The folder of the upstream CRDs: [`UPSTREAM_CRDS_ENV`] when set and not empty, else
/// `shared/crds/` beside the repository.
pub fn upstream_crds_dir() -> PathBuf {
    match std::env::var_os(UPSTREAM_CRDS_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/crds"),
    }
}

/// Where the upstream ProvisioningRequest CRD is kept (see [`upstream_crds_dir`]).
pub fn provisioning_crd_path() -> PathBuf {
    upstream_crds_dir().join("autoscaling.x-k8s.io_provisioningrequests.yaml")
}

/// Applies Muster's CRDs (server-side apply) and waits until each is Established.
pub async fn install_muster_crds(client: &Client) -> anyhow::Result<()> {
    let generated = muster_api::crd::all().context("generating Muster's CRDs")?;
    let mut crds = Vec::with_capacity(generated.len());
    for generated in generated {
        crds.push(serde_json::to_value(&generated.crd).context("serializing a CRD")?);
    }
    install(client, crds).await
}

/// Where the upstream JobSet CRD is kept (see [`upstream_crds_dir`]).
pub fn jobset_crd_path() -> PathBuf {
    upstream_crds_dir().join("jobset.x-k8s.io_jobsets.yaml")
}

/// Applies the upstream ProvisioningRequest CRD from [`provisioning_crd_path`] and waits until it
/// is Established.
pub async fn install_provisioning_crd(client: &Client) -> anyhow::Result<()> {
    install_upstream(client, "ProvisioningRequest", &provisioning_crd_path()).await
}

/// Applies the upstream JobSet CRD from [`jobset_crd_path`] and waits until it is Established.
pub async fn install_jobset_crd(client: &Client) -> anyhow::Result<()> {
    install_upstream(client, "JobSet", &jobset_crd_path()).await
}

/// Applies the upstream CRD of `kind` kept at `path`.
async fn install_upstream(client: &Client, kind: &str, path: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "the {kind} CRD is not at {} (expected in shared/crds/ beside the repository; \
             set {UPSTREAM_CRDS_ENV} to the folder that holds it)",
            path.display()
        )
    })?;
    let value: serde_json::Value =
        serde_yaml_ng::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    install(client, vec![value]).await
}

/// Applies each CRD, then waits for all of them to be Established.
async fn install(client: &Client, crds: Vec<serde_json::Value>) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(MANAGER).force();
    let mut names = Vec::with_capacity(crds.len());
    for crd in crds {
        let name = crd
            .pointer("/metadata/name")
            .and_then(serde_json::Value::as_str)
            .context("a CRD without metadata.name")?
            .to_owned();
        api.patch(&name, &params, &Patch::Apply(&crd))
            .await
            .with_context(|| format!("applying CRD {name}"))?;
        names.push(name);
    }
    for name in names {
        eventually(
            &format!("CRD {name} to be Established"),
            ESTABLISHED_TIMEOUT,
            || async {
                let crd = api.get(&name).await.ok()?;
                crd.status?
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
                    .then_some(())
            },
        )
        .await?;
    }
    Ok(())
}
