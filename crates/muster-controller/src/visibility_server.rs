//! The visibility API's server: an aggregated API behind the Kubernetes API server (the
//! `APIService` `v1alpha1.visibility.muster.dev` in `deploy/`), answering from the
//! controller's memory through [`crate::visibility`].
//!
//! Why aggregated: the API server authenticates the caller whatever their kubeconfig holds
//! (client certificates, tokens, an exec plugin), authorizes the request with the cluster's
//! RBAC before it reaches Muster, and carries it to the controller, so no port-forward,
//! ingress or second set of credentials is needed — `kubectl get --raw` and `muster jobs`
//! work wherever `kubectl` does. The API server forwards the caller's name and groups in
//! request headers over TLS with its front-proxy client certificate; this server trusts
//! those headers only from a connection that presented a certificate signed by the
//! front-proxy CA (`requestheader-client-ca-file` in the `kube-system/
//! extension-apiserver-authentication` ConfigMap) with an allowed name. Which jobs' names a
//! caller sees is then asked of the API server per namespace (a SubjectAccessReview: may
//! this user list GpuJobs there?), cached for [`REVIEW_SECONDS`].
//!
//! Answering costs no write: the state is locked only while an answer is worked out. Each
//! caller may ask [`PER_SECOND`] times a second ([`BURST`] at once); a standby replica
//! answers 503 naming the replica that leads.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Path, State as AxumState};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::{Api, PostParams};
use muster_api::ObjectRef;
use muster_api::visibility::{PREFIX, api_group, resource_list};
use serde::Serialize;
use tokio::sync::watch;

pub use crate::visibility_tls::{FrontProxy, Peer};

use crate::shared::Shared;
use crate::visibility::{Scope, Unanswered};

/// Requests a second each caller may make.
pub const PER_SECOND: f64 = 10.0;
/// Requests a caller may make at once.
pub const BURST: f64 = 20.0;
/// How long an answer of the API server about what a caller may list is kept.
pub const REVIEW_SECONDS: u64 = 30;

/// Where and how the visibility API is served.
#[derive(Clone, Debug)]
pub struct VisibilityOptions {
    /// The address to listen on (HTTPS).
    pub addr: SocketAddr,
    /// The serving certificate and key (PEM files); `None`: a self-signed one made at start
    /// (the APIService then skips verifying it, as `deploy/` does by default).
    pub certificate: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// The pod this replica runs in, labelled [`LEADER_LABEL`] while it leads so that the
    /// visibility Service sends requests to the leader only; `None` outside a pod.
    pub pod: Option<ObjectRef>,
}

/// The label the leading replica puts on its own pod.
pub const LEADER_LABEL: &str = "muster.dev/leader";

/// Keeps [`LEADER_LABEL`] on `pod` while this replica leads, and off while it stands by.
async fn label_leader(client: Client, pod: ObjectRef, mut leader: watch::Receiver<bool>) {
    let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client, pod.namespace());
    loop {
        let leading = *leader.borrow_and_update();
        let value = if leading {
            serde_json::json!("true")
        } else {
            serde_json::Value::Null
        };
        let patch = serde_json::json!({"metadata": {"labels": {LEADER_LABEL: value}}});
        if let Err(e) = api
            .patch(
                pod.name(),
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
        {
            tracing::warn!(error = %e, pod = %pod, "labelling this replica's pod; the visibility Service may miss the leader");
        }
        if leader.changed().await.is_err() {
            return;
        }
    }
}

/// Who sent a request, as the connection and its headers say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The user's name.
    pub user: String,
    /// Their groups.
    pub groups: Vec<String>,
    /// Extra attributes, by key.
    pub extra: BTreeMap<String, Vec<String>>,
}

/// The caller of a request from a front-proxy connection: `None` unless `peer` presented an
/// allowed certificate and a user header names someone.
pub fn caller(front: &FrontProxy, peer: &Peer, headers: &HeaderMap) -> Option<Caller> {
    let name = peer.proxy_name.as_ref()?;
    if !front.allowed_names.is_empty() && !front.allowed_names.iter().any(|n| n == name) {
        return None;
    }
    let user = front
        .username_headers
        .iter()
        .find_map(|h| headers.get(h.as_str()))
        .and_then(|v| v.to_str().ok())
        .filter(|u| !u.is_empty())?
        .to_owned();
    let groups = front
        .group_headers
        .iter()
        .flat_map(|h| headers.get_all(h.as_str()))
        .filter_map(|v| v.to_str().ok())
        .map(str::to_owned)
        .collect();
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in headers {
        let lower = name.as_str().to_ascii_lowercase();
        for prefix in &front.extra_prefixes {
            let prefix = prefix.to_ascii_lowercase();
            if let (Some(key), Ok(value)) = (lower.strip_prefix(&prefix), value.to_str()) {
                extra
                    .entry(key.to_owned())
                    .or_default()
                    .push(value.to_owned());
            }
        }
    }
    Some(Caller {
        user,
        groups,
        extra,
    })
}

/// Per caller, a bucket of requests ([`PER_SECOND`], [`BURST`]).
#[derive(Debug, Default)]
struct RateLimits {
    buckets: BTreeMap<String, (f64, Instant)>,
}

impl RateLimits {
    /// Whether `user` may ask now.
    fn allow(&mut self, user: &str, now: Instant) -> bool {
        if self.buckets.len() > 10_000 {
            // Forget buckets full again rather than grow without end.
            self.buckets
                .retain(|_, (_, at)| now.duration_since(*at).as_secs_f64() * PER_SECOND < BURST);
        }
        let (tokens, at) = self.buckets.entry(user.to_owned()).or_insert((BURST, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * PER_SECOND).min(BURST);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The API server's answers about who may list GpuJobs where, kept for [`REVIEW_SECONDS`].
#[derive(Debug, Default)]
struct Reviews {
    /// (caller, namespace; "" for every namespace) → (allowed, when asked).
    answers: BTreeMap<(String, String), (bool, Instant)>,
}

/// What the server shares between requests.
struct Server {
    shared: Arc<Shared>,
    client: Client,
    front: FrontProxy,
    leader: watch::Receiver<bool>,
    lease: Option<(String, String)>,
    limits: Mutex<RateLimits>,
    reviews: Mutex<Reviews>,
    /// One what-if is worked out at a time: each runs the whole cluster forward many times.
    what_if: tokio::sync::Semaphore,
}

/// A Kubernetes `Status` failure.
fn status(code: StatusCode, reason: &str, message: &str) -> Response {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code.as_u16()
    });
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// An answer written as JSON, or why it could not be.
struct Json(serde_json::Result<String>);

impl Json {
    fn of<T: Serialize>(value: &T) -> Json {
        Json(serde_json::to_string(value))
    }
}

impl Json {
    fn response(self) -> Response {
        match self.0 {
            Ok(text) => ([(header::CONTENT_TYPE, "application/json")], text).into_response(),
            Err(e) => status(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                &e.to_string(),
            ),
        }
    }
}

fn json<T: Serialize>(value: &T) -> Response {
    Json::of(value).response()
}

/// The waiting list of `scope` as JSON, written as it is made (see
/// [`crate::visibility::pending_job_listing`]).
fn waiting_list(
    state: &crate::state::State,
    scope: &Scope,
    may_see: &dyn Fn(&str) -> bool,
) -> Result<Json, Unanswered> {
    crate::visibility::pending_job_listing(state, scope, may_see).map(|list| Json::of(&list))
}

impl Server {
    /// The caller, after the checks every request passes: through the front proxy, within
    /// its rate, and this replica leads. The response to send otherwise.
    async fn admit(
        &self,
        peer: &Peer,
        headers: &HeaderMap,
        route: &str,
    ) -> Result<Caller, Response> {
        let Some(caller) = caller(&self.front, peer, headers) else {
            self.count(route, StatusCode::UNAUTHORIZED);
            return Err(status(
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                "the visibility API answers only requests forwarded by the Kubernetes API server: \
                 use kubectl get --raw /apis/visibility.muster.dev/v1alpha1/... or muster jobs",
            ));
        };
        let allowed = self
            .limits
            .lock()
            .map_or(true, |mut l| l.allow(&caller.user, Instant::now()));
        if !allowed {
            self.count(route, StatusCode::TOO_MANY_REQUESTS);
            let mut response = status(
                StatusCode::TOO_MANY_REQUESTS,
                "TooManyRequests",
                &format!(
                    "at most {PER_SECOND} requests a second per user ({BURST} at once); try again in a second"
                ),
            );
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            return Err(response);
        }
        if !*self.leader.borrow() {
            self.count(route, StatusCode::SERVICE_UNAVAILABLE);
            let leader = self.leader_name().await;
            let mut response = status(
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailable",
                &format!(
                    "this replica stands by and has no queue to show; {leader} leads: ask again"
                ),
            );
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            return Err(response);
        }
        Ok(caller)
    }

    /// Who holds the Lease, as the API server says.
    async fn leader_name(&self) -> String {
        let Some((namespace, name)) = &self.lease else {
            return "another replica".to_owned();
        };
        let api: Api<Lease> = Api::namespaced(self.client.clone(), namespace);
        match api.get(name).await {
            Ok(lease) => lease
                .spec
                .and_then(|s| s.holder_identity)
                .map_or_else(|| "no replica".to_owned(), |h| format!("replica {h}")),
            Err(_) => "another replica".to_owned(),
        }
    }

    fn count(&self, route: &str, code: StatusCode) {
        self.shared
            .metrics
            .visibility_requests
            .get_or_create(&vec![
                ("route".to_owned(), route.to_owned()),
                ("code".to_owned(), code.as_u16().to_string()),
            ])
            .inc();
    }

    /// The namespaces of the controller's jobs where `caller` may list GpuJobs.
    async fn visible_namespaces(&self, caller: &Caller) -> BTreeSet<String> {
        let namespaces: BTreeSet<String> = {
            let state = self.shared.state();
            state
                .index()
                .jobs
                .keys()
                .map(|k| k.namespace().to_owned())
                .collect()
        };
        self.visible(caller, namespaces).await
    }

    /// The namespaces among `namespaces` where `caller` may list GpuJobs: all of them when
    /// they may list GpuJobs everywhere.
    async fn visible(&self, caller: &Caller, namespaces: BTreeSet<String>) -> BTreeSet<String> {
        if self.allowed(caller, "").await {
            return namespaces;
        }
        let mut out = BTreeSet::new();
        for ns in namespaces {
            if self.allowed(caller, &ns).await {
                out.insert(ns);
            }
        }
        out
    }

    /// Whether `caller` may list GpuJobs in `namespace` ("" for every namespace), from the
    /// cache or a SubjectAccessReview. A review that fails counts as not allowed.
    async fn allowed(&self, caller: &Caller, namespace: &str) -> bool {
        let key = (
            format!("{}\u{0}{}", caller.user, caller.groups.join(",")),
            namespace.to_owned(),
        );
        let fresh = Duration::from_secs(REVIEW_SECONDS);
        if let Ok(reviews) = self.reviews.lock()
            && let Some((allowed, at)) = reviews.answers.get(&key)
            && at.elapsed() < fresh
        {
            return *allowed;
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(caller.user.clone()),
                groups: Some(caller.groups.clone()),
                extra: (!caller.extra.is_empty()).then(|| caller.extra.clone()),
                resource_attributes: Some(ResourceAttributes {
                    group: Some(muster_api::GROUP.to_owned()),
                    resource: Some("gpujobs".to_owned()),
                    verb: Some("list".to_owned()),
                    namespace: (!namespace.is_empty()).then(|| namespace.to_owned()),
                    ..ResourceAttributes::default()
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let allowed = match api.create(&PostParams::default(), &review).await {
            Ok(answer) => answer.status.is_some_and(|s| s.allowed),
            Err(e) => {
                tracing::warn!(error = %e, user = %caller.user, namespace, "a SubjectAccessReview failed: names hidden");
                return false;
            }
        };
        if let Ok(mut reviews) = self.reviews.lock() {
            if reviews.answers.len() > 100_000 {
                reviews.answers.retain(|_, (_, at)| at.elapsed() < fresh);
            }
            reviews.answers.insert(key, (allowed, Instant::now()));
        }
        allowed
    }

    /// A request of `route`: admitted (see [`Server::admit`]), then answered with `answer`.
    async fn respond(
        &self,
        peer: &Peer,
        headers: &HeaderMap,
        route: &str,
        answer: impl Fn(&crate::state::State, &dyn Fn(&str) -> bool) -> Result<Json, Unanswered>,
    ) -> Response {
        match self.admit(peer, headers, route).await {
            Ok(caller) => self.answer(&caller, route, answer).await,
            Err(response) => response,
        }
    }

    /// Answers `route` for `caller` with `answer`, which works from the state and the
    /// namespaces the caller may see and writes its JSON (under the state's lock, as a long
    /// list is written while it is made: see [`crate::visibility::pending_job_listing`]);
    /// times the work and counts the request.
    async fn answer(
        &self,
        caller: &Caller,
        route: &str,
        answer: impl Fn(&crate::state::State, &dyn Fn(&str) -> bool) -> Result<Json, Unanswered>,
    ) -> Response {
        let visible = self.visible_namespaces(caller).await;
        let may_see = |ns: &str| visible.contains(ns);
        let started = Instant::now();
        let result = {
            let state = self.shared.state();
            answer(&state, &may_see)
        };
        self.shared
            .metrics
            .visibility_seconds
            .observe(started.elapsed().as_secs_f64());
        let (code, response) = match result {
            Ok(Json(Err(e))) => (StatusCode::INTERNAL_SERVER_ERROR, Json(Err(e)).response()),
            Ok(answer) => (StatusCode::OK, answer.response()),
            Err(Unanswered::NoPassYet) => (
                StatusCode::SERVICE_UNAVAILABLE,
                status(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "ServiceUnavailable",
                    "the controller has not finished its first pass: ask again in a few seconds",
                ),
            ),
            Err(Unanswered::NotFound(what)) => (
                StatusCode::NOT_FOUND,
                status(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    &format!("{what} not found"),
                ),
            ),
        };
        self.count(route, code);
        response
    }
}

/// The server as handlers take it.
type ServerRef = Arc<Server>;

async fn discovery_group(ConnectInfo(peer): ConnectInfo<Peer>) -> Response {
    // Discovery is asked by the API server's own controllers too, without a user header:
    // a front-proxy connection is enough.
    if peer.proxy_name.is_none() {
        return status(StatusCode::UNAUTHORIZED, "Unauthorized", "front proxy only");
    }
    json(&api_group())
}

async fn discovery_resources(ConnectInfo(peer): ConnectInfo<Peer>) -> Response {
    if peer.proxy_name.is_none() {
        return status(StatusCode::UNAUTHORIZED, "Unauthorized", "front proxy only");
    }
    json(&resource_list())
}

async fn cluster_queues(
    AxumState(server): AxumState<ServerRef>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
) -> Response {
    server
        .respond(&peer, &headers, "clusterqueues", |state, _| {
            crate::visibility::cluster_queues(state).map(|a| Json::of(&a))
        })
        .await
}

async fn cluster_queue_pending(
    AxumState(server): AxumState<ServerRef>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    let scope = Scope::ClusterQueue(name);
    server
        .respond(
            &peer,
            &headers,
            "clusterqueues/pendingjobs",
            |state, may_see| waiting_list(state, &scope, may_see),
        )
        .await
}

async fn all_pending(
    AxumState(server): AxumState<ServerRef>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
) -> Response {
    server
        .respond(&peer, &headers, "pendingjobs", |state, may_see| {
            waiting_list(state, &Scope::All, may_see)
        })
        .await
}

async fn local_queue_pending(
    AxumState(server): AxumState<ServerRef>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let scope = Scope::LocalQueue(namespace, name);
    server
        .respond(
            &peer,
            &headers,
            "localqueues/pendingjobs",
            |state, may_see| waiting_list(state, &scope, may_see),
        )
        .await
}

async fn namespace_pending(
    AxumState(server): AxumState<ServerRef>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(namespace): Path<String>,
    headers: HeaderMap,
) -> Response {
    let scope = Scope::Namespace(namespace);
    server
        .respond(&peer, &headers, "pendingjobs", |state, may_see| {
            waiting_list(state, &scope, may_see)
        })
        .await
}

async fn job_story(
    AxumState(server): AxumState<ServerRef>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let key = ObjectRef::new(&namespace, &name);
    server
        .respond(&peer, &headers, "gpujobs/story", |state, may_see| {
            crate::visibility::story(state, &key, may_see).map(|a| Json::of(&a))
        })
        .await
}

async fn blocks(
    AxumState(server): AxumState<ServerRef>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
) -> Response {
    server
        .respond(&peer, &headers, "blocks", |state, may_see| {
            crate::visibility::blocks(state, may_see).map(|a| Json::of(&a))
        })
        .await
}

/// The latest start-time forecast; with what-if parameters, the cluster changed and forecast
/// again (one what-if at a time, worked out off the state's lock and off the runtime's
/// workers).
async fn forecast(
    AxumState(server): AxumState<ServerRef>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    headers: HeaderMap,
) -> Response {
    const ROUTE: &str = "forecast";
    let caller = match server.admit(&peer, &headers, ROUTE).await {
        Ok(caller) => caller,
        Err(response) => return response,
    };
    let visible = server.visible_namespaces(&caller).await;
    let may_see = |ns: &str| visible.contains(ns);
    let refuse = |code: StatusCode, reason: &str, message: &str| {
        server.count(ROUTE, code);
        status(code, reason, message)
    };
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let (latest, what) = {
        let state = server.shared.state();
        let Some(latest) = state.forecasting.latest() else {
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailable",
                "the controller has not made its first start-time forecast yet (or forecasts \
                 are off: --forecast-every 0): ask again in a minute",
            );
        };
        match crate::forecasting::whatif::parse(query.as_deref().unwrap_or(""), state.index(), now)
        {
            Ok(what) => (latest, what),
            Err(message) => return refuse(StatusCode::BAD_REQUEST, "BadRequest", &message),
        }
    };
    if what.is_empty() {
        server.count(ROUTE, StatusCode::OK);
        return json(&crate::visibility::forecast(&latest, None, &may_see));
    }
    let Ok(_permit) = server.what_if.try_acquire() else {
        let mut response = refuse(
            StatusCode::TOO_MANY_REQUESTS,
            "TooManyRequests",
            "another what-if is being worked out; ask again when it is done",
        );
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("5"));
        return response;
    };
    let started = Instant::now();
    let worked = {
        let latest = latest.clone();
        let what = what.clone();
        tokio::task::spawn_blocking(move || crate::forecasting::whatif::run(&latest, &what)).await
    };
    server
        .shared
        .metrics
        .visibility_seconds
        .observe(started.elapsed().as_secs_f64());
    match worked {
        Ok(Ok((snapshot, forecast))) => {
            server.count(ROUTE, StatusCode::OK);
            json(&crate::visibility::forecast(
                &latest,
                Some((&snapshot, &forecast, &what.described)),
                &may_see,
            ))
        }
        Ok(Err(message)) => refuse(StatusCode::BAD_REQUEST, "BadRequest", &message),
        Err(e) => refuse(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            &format!("the what-if stopped: {e}"),
        ),
    }
}

/// An empty OpenAPI document: the API server's aggregator asks every aggregated API for one
/// (and logs an error each minute without it); the answers' types are documented in
/// `muster_api::visibility`.
async fn openapi(ConnectInfo(peer): ConnectInfo<Peer>, uri: axum::http::Uri) -> Response {
    if peer.proxy_name.is_none() {
        return status(StatusCode::UNAUTHORIZED, "Unauthorized", "front proxy only");
    }
    let document = if uri.path().starts_with("/openapi/v3") {
        serde_json::json!({"paths": {}})
    } else {
        serde_json::json!({
            "swagger": "2.0",
            "info": {"title": muster_api::visibility::GROUP, "version": muster_api::visibility::VERSION},
            "paths": {}
        })
    };
    json(&document)
}

async fn not_found(ConnectInfo(peer): ConnectInfo<Peer>) -> Response {
    if peer.proxy_name.is_none() {
        return status(StatusCode::UNAUTHORIZED, "Unauthorized", "front proxy only");
    }
    status(
        StatusCode::NOT_FOUND,
        "NotFound",
        "no such path in visibility.muster.dev/v1alpha1",
    )
}

/// The router of the visibility API.
fn router(server: ServerRef) -> axum::Router {
    axum::Router::new()
        .route("/apis/visibility.muster.dev", get(discovery_group))
        .route(PREFIX, get(discovery_resources))
        .route(&format!("{PREFIX}/clusterqueues"), get(cluster_queues))
        .route(
            &format!("{PREFIX}/clusterqueues/{{name}}/pendingjobs"),
            get(cluster_queue_pending),
        )
        .route(
            &format!("{PREFIX}/namespaces/{{namespace}}/localqueues/{{name}}/pendingjobs"),
            get(local_queue_pending),
        )
        .route(
            &format!("{PREFIX}/namespaces/{{namespace}}/pendingjobs"),
            get(namespace_pending),
        )
        .route(
            &format!("{PREFIX}/namespaces/{{namespace}}/gpujobs/{{name}}/story"),
            get(job_story),
        )
        .route(&format!("{PREFIX}/pendingjobs"), get(all_pending))
        .route(&format!("{PREFIX}/blocks"), get(blocks))
        .route(&format!("{PREFIX}/forecast"), get(forecast))
        .route("/openapi/v2", get(openapi))
        .route("/openapi/v3", get(openapi))
        .fallback(not_found)
        .with_state(server)
}

/// Serves the visibility API until `stop` turns true. Logs and returns when it cannot
/// (no front-proxy CA, no certificate, the address taken): the controller goes on without it.
pub(crate) async fn serve(
    options: VisibilityOptions,
    client: Client,
    shared: Arc<Shared>,
    leader: watch::Receiver<bool>,
    lease: Option<(String, String)>,
    mut stop: watch::Receiver<bool>,
) {
    let front = match FrontProxy::read(&client).await {
        Ok(front) => front,
        Err(e) => {
            tracing::error!("the visibility API is off: {e:#}");
            return;
        }
    };
    let tls = match crate::visibility_tls::server_config(&front, options.certificate.as_ref()) {
        Ok(tls) => tls,
        Err(e) => {
            tracing::error!("the visibility API is off: {e:#}");
            return;
        }
    };
    let listener = match crate::visibility_tls::TlsListener::bind(options.addr, tls).await {
        Ok(listener) => listener,
        Err(e) => {
            tracing::error!(
                "the visibility API is off: listening on {}: {e}",
                options.addr
            );
            return;
        }
    };
    tracing::info!(addr = %options.addr, "serving the visibility API");
    if let Some(pod) = options.pod.clone() {
        tokio::spawn(label_leader(client.clone(), pod, leader.clone()));
    }
    let server = Arc::new(Server {
        shared,
        client,
        front,
        leader,
        lease,
        limits: Mutex::new(RateLimits::default()),
        reviews: Mutex::new(Reviews::default()),
        what_if: tokio::sync::Semaphore::new(1),
    });
    let app = router(server).into_make_service_with_connect_info::<Peer>();
    let _ = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn front() -> FrontProxy {
        FrontProxy {
            ca_pem: String::new(),
            allowed_names: vec!["front-proxy-client".to_owned()],
            username_headers: vec!["X-Remote-User".to_owned()],
            group_headers: vec!["X-Remote-Group".to_owned()],
            extra_prefixes: vec!["X-Remote-Extra-".to_owned()],
        }
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(*k, header::HeaderValue::from_static(v));
        }
        map
    }

    #[test]
    fn only_an_allowed_front_proxy_certificate_makes_the_headers_count() {
        let h = headers(&[
            ("x-remote-user", "alice"),
            ("x-remote-group", "team-a"),
            ("x-remote-group", "system:authenticated"),
            ("x-remote-extra-scopes", "read"),
        ]);
        let addr: SocketAddr = ([127, 0, 0, 1], 1).into();
        let direct = Peer {
            addr,
            proxy_name: None,
        };
        assert_eq!(caller(&front(), &direct, &h), None, "no certificate");
        let stranger = Peer {
            addr,
            proxy_name: Some("someone-else".to_owned()),
        };
        assert_eq!(caller(&front(), &stranger, &h), None, "a name not allowed");
        let proxy = Peer {
            addr,
            proxy_name: Some("front-proxy-client".to_owned()),
        };
        let who = caller(&front(), &proxy, &h);
        assert_eq!(
            who,
            Some(Caller {
                user: "alice".to_owned(),
                groups: vec!["team-a".to_owned(), "system:authenticated".to_owned()],
                extra: BTreeMap::from([("scopes".to_owned(), vec!["read".to_owned()])]),
            })
        );
        assert_eq!(
            caller(&front(), &proxy, &headers(&[("x-remote-group", "g")])),
            None,
            "no user"
        );
    }

    #[test]
    fn a_caller_over_their_rate_is_refused_until_the_bucket_refills() {
        let mut limits = RateLimits::default();
        let start = Instant::now();
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "20"
        )]
        let burst = BURST as usize;
        for _ in 0..burst {
            assert!(limits.allow("alice", start));
        }
        assert!(!limits.allow("alice", start));
        assert!(limits.allow("bob", start), "each caller has their own");
        assert!(limits.allow("alice", start + Duration::from_millis(150)));
    }
}
