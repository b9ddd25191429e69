//! Load runs through the whole system: a real control plane, fake nodes and kubelet, and
//! `muster controller` as a separate process, measured from the API server's side.

pub mod admission_policy;
pub mod against_kueue;
pub mod api_floor;
pub mod api_server_profile;
pub mod baseline;
pub mod chaos;
pub mod host_cpu;
pub mod kueue_baseline;
pub mod process_stats;
pub mod recorder;

use anyhow::Context as _;
use kube::api::{Api, Patch, PatchParams};

/// Server-side applies `value` as `name` with field manager `manager` (forcing ownership).
pub async fn apply<K>(
    api: &Api<K>,
    manager: &str,
    name: &str,
    value: serde_json::Value,
) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(
        name,
        &PatchParams::apply(manager).force(),
        &Patch::Apply(&value),
    )
    .await
    .with_context(|| format!("applying {name}"))?;
    Ok(())
}
