//! `muster dashboard`: a read-only page of the live cluster — queues and cohorts with their
//! use, borrowing and lending as bars, the waiting list with positions, reasons and ETAs, one
//! job's timeline, and the topology with each GPU coloured by the job holding it — served on
//! the user's own machine and refreshed every two seconds without a reload.
//!
//! Why here and not in the controller: every answer it shows comes from the visibility API
//! with the user's own kubeconfig, so the API server authenticates and authorizes the user
//! exactly as for `muster jobs` — no second login, no endpoint exposed in the cluster, and
//! each user sees only the names their RBAC allows. The page itself is served on loopback
//! only, to a browser that presents the session's random token (from the URL printed at
//! start, then a cookie), and only under the host name it was printed with, so neither
//! another local user nor a web page in the same browser can read it.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use muster_api::visibility::{BlockList, ClusterQueueSummaryList, JobStory};

use super::live::{Connection, client, get as ask};

/// The page.
const PAGE: &str = include_str!("dashboard.html");

/// The cookie that carries the session's token.
const COOKIE: &str = "muster_dashboard";

/// Arguments of `muster dashboard`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    connection: Connection,
    /// Where to serve the page: a loopback address (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:8008")]
    address: SocketAddr,
}

/// What the page's requests share.
struct Dashboard {
    client: kube::Client,
    token: String,
    /// `host:port` the page was printed with; requests naming another host are refused.
    hosts: Vec<String>,
}

/// A random token of 32 hex digits from the operating system.
fn token() -> anyhow::Result<String> {
    use std::io::Read as _;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("reading /dev/urandom for the session token")?;
    Ok(bytes.iter().fold(String::new(), |mut hex, b| {
        use std::fmt::Write as _;
        let _ = write!(hex, "{b:02x}");
        hex
    }))
}

/// Serves the dashboard until Ctrl-C.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    if !args.address.ip().is_loopback() {
        anyhow::bail!(
            "--address {}: the dashboard serves loopback only (127.0.0.1 or [::1]); reach it from \
             elsewhere through an SSH tunnel",
            args.address
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let client = client(&args.connection).await?;
        let listener = tokio::net::TcpListener::bind(args.address)
            .await
            .with_context(|| format!("listening on {}", args.address))?;
        let local = listener.local_addr().context("the listening address")?;
        let token = token()?;
        let port = local.port();
        let dashboard = Arc::new(Dashboard {
            client,
            token: token.clone(),
            hosts: vec![
                format!("{}:{port}", local.ip()),
                format!("localhost:{port}"),
                format!("[::1]:{port}"),
            ],
        });
        println!("Muster dashboard: http://{local}/?token={token}  (Ctrl-C to stop)");
        let app = axum::Router::new()
            .route("/", get(page))
            .route("/api/clusterqueues", get(cluster_queues))
            .route("/api/jobs", get(jobs))
            .route("/api/blocks", get(blocks))
            .route("/api/story/{namespace}/{name}", get(story))
            .with_state(dashboard);
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
            .context("serving the dashboard")?;
        Ok(ExitCode::SUCCESS)
    })
}

/// Whether a request may be answered: it names the host the page was printed with, and
/// carries the session's token (cookie, or `token` in the query).
fn allowed(dashboard: &Dashboard, headers: &HeaderMap, query_token: Option<&str>) -> bool {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    if !dashboard.hosts.iter().any(|h| h == host) {
        return false;
    }
    if query_token == Some(dashboard.token.as_str()) {
        return true;
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|c| c.to_str().ok())
        .flat_map(|c| c.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .any(|(name, value)| name == COOKIE && value == dashboard.token)
}

fn refused() -> Response {
    (
        StatusCode::FORBIDDEN,
        "open the address muster dashboard printed, with its token",
    )
        .into_response()
}

/// The `token` parameter of a query string.
fn query_token(uri: &Uri) -> Option<&str> {
    uri.query()?
        .split('&')
        .find_map(|pair| pair.strip_prefix("token="))
}

async fn page(State(dashboard): State<Arc<Dashboard>>, uri: Uri, headers: HeaderMap) -> Response {
    let token = query_token(&uri);
    if !allowed(&dashboard, &headers, token) {
        return refused();
    }
    if token.is_some() {
        // The token moves from the address bar to a cookie only this origin sends.
        let cookie = format!(
            "{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/",
            dashboard.token
        );
        let mut response = Redirect::to("/").into_response();
        if let Ok(value) = header::HeaderValue::from_str(&cookie) {
            response.headers_mut().insert(header::SET_COOKIE, value);
        }
        return response;
    }
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        PAGE,
    )
        .into_response()
}

/// Answers with `answer`, or the visibility API's error as a 502 with its message.
fn json<T: serde::Serialize>(answer: anyhow::Result<T>) -> Response {
    match answer.and_then(|a| serde_json::to_string(&a).context("writing JSON")) {
        Ok(text) => (
            [
                (header::CONTENT_TYPE, "application/json"),
                (header::CACHE_CONTROL, "no-store"),
            ],
            text,
        )
            .into_response(),
        Err(e) => (StatusCode::BAD_GATEWAY, format!("{e:#}")).into_response(),
    }
}

async fn cluster_queues(State(dashboard): State<Arc<Dashboard>>, headers: HeaderMap) -> Response {
    if !allowed(&dashboard, &headers, None) {
        return refused();
    }
    json(ask::<ClusterQueueSummaryList>(&dashboard.client, "/clusterqueues").await)
}

async fn jobs(State(dashboard): State<Arc<Dashboard>>, headers: HeaderMap) -> Response {
    if !allowed(&dashboard, &headers, None) {
        return refused();
    }
    json(super::jobs::every_queue(&dashboard.client).await)
}

async fn blocks(State(dashboard): State<Arc<Dashboard>>, headers: HeaderMap) -> Response {
    if !allowed(&dashboard, &headers, None) {
        return refused();
    }
    json(ask::<BlockList>(&dashboard.client, "/blocks").await)
}

async fn story(
    State(dashboard): State<Arc<Dashboard>>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if !allowed(&dashboard, &headers, None) {
        return refused();
    }
    json(
        ask::<JobStory>(
            &dashboard.client,
            &format!("/namespaces/{namespace}/gpujobs/{name}/story"),
        )
        .await,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dashboard() -> Dashboard {
        let config = kube::Config::new("https://127.0.0.1:1".parse().unwrap_or_default());
        Dashboard {
            client: kube::Client::try_from(config).unwrap_or_else(|e| unreachable!("{e}")),
            token: "t0k3n".to_owned(),
            hosts: vec!["127.0.0.1:8008".to_owned(), "localhost:8008".to_owned()],
        }
    }

    fn headers(pairs: &[(header::HeaderName, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(k.clone(), header::HeaderValue::from_static(v));
        }
        map
    }

    #[tokio::test]
    async fn only_the_printed_host_with_the_session_token_is_answered() {
        let d = dashboard();
        let host = (header::HOST, "127.0.0.1:8008");
        assert!(allowed(
            &d,
            &headers(std::slice::from_ref(&host)),
            Some("t0k3n")
        ));
        assert!(allowed(
            &d,
            &headers(&[
                host.clone(),
                (header::COOKIE, "a=b; muster_dashboard=t0k3n")
            ]),
            None
        ));
        assert!(
            !allowed(&d, &headers(std::slice::from_ref(&host)), None),
            "no token"
        );
        assert!(
            !allowed(&d, &headers(&[host]), Some("guess")),
            "a wrong token"
        );
        // A page of another site that made its name resolve to 127.0.0.1 names its own host.
        assert!(!allowed(
            &d,
            &headers(&[
                (header::HOST, "evil.example:8008"),
                (header::COOKIE, "muster_dashboard=t0k3n")
            ]),
            Some("t0k3n")
        ));
    }
}
