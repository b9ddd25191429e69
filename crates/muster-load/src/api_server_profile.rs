//! kube-apiserver's Go CPU profile (`/debug/pprof/profile`), for a control plane started with
//! `api_server_profiling`: the file `go tool pprof` reads.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use kube::Client;

/// Fetches a CPU profile of the next `seconds` from kube-apiserver into `out`.
pub async fn fetch(client: &Client, seconds: Duration, out: &Path) -> anyhow::Result<()> {
    let request = http::Request::get(format!(
        "/debug/pprof/profile?seconds={}",
        seconds.as_secs().max(1)
    ))
    .body(kube::client::Body::empty())
    .context("building the profile request")?;
    let response = client
        .send(request)
        .await
        .context("asking for the profile")?;
    anyhow::ensure!(
        response.status().is_success(),
        "kube-apiserver answered {}",
        response.status()
    );
    let bytes = response
        .into_body()
        .collect_bytes()
        .await
        .context("reading the profile")?;
    std::fs::write(out, &bytes).with_context(|| format!("writing {}", out.display()))
}
