//! A fault-injecting HTTP proxy between the controllers and the API server.
//!
//! The controllers talk plain HTTP to the proxy on loopback; the proxy forwards each request
//! over the cluster's own client (TLS, admin credentials) and, for a seeded share of requests,
//! answers in a way a real API server or load balancer sometimes does instead:
//!
//! - a `409 Conflict`, `429 Too Many Requests` (with `Retry-After`), `500` or `504` without
//!   forwarding the request;
//! - a connection dropped before the request is forwarded, or after it was carried out (the
//!   write landed, the answer is lost);
//! - a request carried out and then held past the client's patience before the connection
//!   drops (a time-out);
//! - a watch stream cut after a few seconds (ended cleanly or broken).
//!
//! And for another seeded share of requests, an answer that is right but late: a request
//! forwarded and answered as the API server answered it, 1–5 s later; a watch whose events
//! each arrive late by a drawn delay (the order kept).
//!
//! Which request gets which fault follows one seeded sequence in arrival order; the arrival
//! order itself depends on the controllers' timing.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::Context as _;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use http_body::{Body as HttpBody, Frame, SizeHint};
use kube::Client;
use muster_topology::Rng;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The largest request body forwarded (the API server's own limit is 3 MiB).
const MAX_REQUEST_BYTES: usize = 16 << 20;

/// How the proxy misbehaves.
#[derive(Clone, Debug)]
pub struct FaultPlan {
    /// The seed of the fault sequence.
    pub seed: u64,
    /// The share of requests answered with a fault (0.1: one in ten).
    pub rate: f64,
    /// How long a timed-out request is held before its connection drops.
    pub hold: Duration,
    /// The shortest and longest life of a watch stream before it is cut.
    pub watch_life: (Duration, Duration),
    /// The share of the requests that draw no fault answered late (0.05: one in twenty).
    pub slow_rate: f64,
    /// The shortest and longest delay of a late answer, or of each event of a late watch.
    pub slow: (Duration, Duration),
}

impl Default for FaultPlan {
    fn default() -> Self {
        Self {
            seed: 1,
            rate: 0.1,
            hold: Duration::from_secs(10),
            watch_life: (Duration::from_secs(5), Duration::from_secs(60)),
            slow_rate: 0.05,
            slow: (Duration::from_secs(1), Duration::from_secs(5)),
        }
    }
}

/// A kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// `409 Conflict`, not forwarded (writes only).
    Conflict,
    /// `429 Too Many Requests` with `Retry-After: 1`, not forwarded.
    TooManyRequests,
    /// `500 Internal Server Error`, not forwarded.
    InternalError,
    /// `504 Gateway Timeout`, not forwarded.
    GatewayTimeout,
    /// Forwarded, then held for [`FaultPlan::hold`], then the connection drops.
    Timeout,
    /// The connection drops before the request is forwarded.
    DroppedBefore,
    /// The request is carried out, then the connection drops before the answer.
    DroppedAfter,
    /// A watch stream cut short.
    WatchCut,
    /// Forwarded and answered correctly, but late.
    SlowAnswer,
    /// A watch stream whose events each arrive late.
    SlowWatch,
}

impl Fault {
    /// The name in `summary.json`.
    pub fn name(self) -> &'static str {
        match self {
            Fault::Conflict => "conflict409",
            Fault::TooManyRequests => "tooManyRequests429",
            Fault::InternalError => "internalError500",
            Fault::GatewayTimeout => "gatewayTimeout504",
            Fault::Timeout => "timeout",
            Fault::DroppedBefore => "droppedBeforeForwarding",
            Fault::DroppedAfter => "droppedAfterForwarding",
            Fault::WatchCut => "watchCut",
            Fault::SlowAnswer => "slowAnswer",
            Fault::SlowWatch => "slowWatch",
        }
    }

    /// Picks a fault for a request from one random draw in [0, 1): writes can get any kind
    /// but [`Fault::WatchCut`]; reads never get a conflict.
    fn pick(write: bool, draw: f64) -> Fault {
        // Cumulative weights, out of 100.
        let table: &[(f64, Fault)] = if write {
            &[
                (20.0, Fault::Conflict),
                (35.0, Fault::TooManyRequests),
                (50.0, Fault::InternalError),
                (65.0, Fault::GatewayTimeout),
                (75.0, Fault::Timeout),
                (85.0, Fault::DroppedBefore),
                (100.0, Fault::DroppedAfter),
            ]
        } else {
            &[
                (20.0, Fault::TooManyRequests),
                (40.0, Fault::InternalError),
                (60.0, Fault::GatewayTimeout),
                (70.0, Fault::Timeout),
                (85.0, Fault::DroppedBefore),
                (100.0, Fault::DroppedAfter),
            ]
        };
        let at = draw * 100.0;
        table
            .iter()
            .find(|(upto, _)| at < *upto)
            .map_or(Fault::DroppedAfter, |(_, fault)| *fault)
    }
}

/// What the proxy drew for one request.
struct Draw {
    fault: Option<Fault>,
    /// How long a watch stream lives before it is cut.
    life: Duration,
    /// How late a slow answer, or each event of a slow watch, comes.
    delay: Duration,
}

/// What the proxy has done so far.
#[derive(Debug, Default)]
struct Counts {
    forwarded: AtomicU64,
    upstream_errors: AtomicU64,
    faults: Mutex<BTreeMap<Fault, u64>>,
}

struct Inner {
    client: Client,
    plan: FaultPlan,
    rng: Mutex<Rng>,
    enabled: AtomicBool,
    counts: Counts,
}

impl Inner {
    /// The fault for the next request, if any; for a watch, how long its stream lives; and
    /// how late a slow answer (or each event of a slow watch) comes.
    fn next(&self, write: bool, watch: bool) -> Draw {
        let mut rng = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
        let (faulty, kind, life) = (rng.unit(), rng.unit(), rng.unit());
        let (slow, delay) = (rng.unit(), rng.unit());
        drop(rng);
        let within = |(shortest, longest): (Duration, Duration), draw: f64| {
            shortest + longest.saturating_sub(shortest).mul_f64(draw.min(1.0))
        };
        let life = within(self.plan.watch_life, life);
        let delay = within(self.plan.slow, delay);
        let none = Draw {
            fault: None,
            life,
            delay,
        };
        if !self.enabled.load(Ordering::Relaxed) {
            return none;
        }
        if faulty > self.plan.rate {
            // No fault: maybe late.
            let late = (slow < self.plan.slow_rate).then_some(if watch {
                Fault::SlowWatch
            } else {
                Fault::SlowAnswer
            });
            return Draw {
                fault: late,
                ..none
            };
        }
        let fault = Fault::pick(write, kind.min(0.999_999));
        // A watch is cut later rather than answered with a time-out or a lost answer: both
        // look the same to a watcher as a cut stream.
        let fault = match fault {
            Fault::Timeout | Fault::DroppedAfter if watch => Fault::WatchCut,
            other => other,
        };
        Draw {
            fault: Some(fault),
            ..none
        }
    }

    fn count(&self, fault: Fault) {
        *self
            .counts
            .faults
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(fault)
            .or_default() += 1;
    }
}

/// A running proxy; dropping it stops it.
pub struct FaultProxy {
    addr: SocketAddr,
    inner: Arc<Inner>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port forwarding through `client`.
    pub async fn start(client: Client, plan: FaultPlan) -> anyhow::Result<FaultProxy> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the fault proxy")?;
        let addr = listener.local_addr().context("reading the proxy's port")?;
        let inner = Arc::new(Inner {
            client,
            rng: Mutex::new(Rng::new(plan.seed)),
            plan,
            enabled: AtomicBool::new(true),
            counts: Counts::default(),
        });
        let router = axum::Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&inner));
        let stop = CancellationToken::new();
        let shutdown = stop.clone();
        let task = tokio::spawn(async move {
            let served = axum::serve(listener, router)
                .with_graceful_shutdown(async move { shutdown.cancelled().await })
                .await;
            if let Err(e) = served {
                tracing::error!(error = %e, "the fault proxy stopped");
            }
        });
        Ok(FaultProxy {
            addr,
            inner,
            stop,
            task,
        })
    }

    /// The proxy's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Turns faults on or off (requests are forwarded either way).
    pub fn set_faults(&self, on: bool) {
        self.inner.enabled.store(on, Ordering::Relaxed);
    }

    /// Faults injected so far, by kind name.
    pub fn faults(&self) -> BTreeMap<String, u64> {
        self.inner
            .counts
            .faults
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(fault, n)| (fault.name().to_owned(), *n))
            .collect()
    }

    /// Requests forwarded so far (faulty or not).
    pub fn forwarded(&self) -> u64 {
        self.inner.counts.forwarded.load(Ordering::Relaxed)
    }

    /// Requests the API server could not be reached for (answered 502).
    pub fn upstream_errors(&self) -> u64 {
        self.inner.counts.upstream_errors.load(Ordering::Relaxed)
    }

    /// A kubeconfig that points at the proxy, without credentials (the proxy adds its own).
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: proxy\n  cluster:\n    server: http://{}\n\
             users:\n- name: proxy\n  user: {{}}\ncontexts:\n- name: proxy\n  context:\n    cluster: proxy\n    user: proxy\n\
             current-context: proxy\n",
            self.addr
        )
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.cancel();
        self.task.abort();
    }
}

async fn handle(State(proxy): State<Arc<Inner>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let write = parts.method != Method::GET && parts.method != Method::HEAD;
    let watch = parts
        .uri
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    let Draw { fault, life, delay } = proxy.next(write, watch);
    if let Some(fault) = fault {
        proxy.count(fault);
    }
    match fault {
        Some(Fault::Conflict) => return status(StatusCode::CONFLICT, "Conflict"),
        Some(Fault::TooManyRequests) => {
            let mut response = status(StatusCode::TOO_MANY_REQUESTS, "TooManyRequests");
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return response;
        }
        Some(Fault::InternalError) => {
            return status(StatusCode::INTERNAL_SERVER_ERROR, "InternalError");
        }
        Some(Fault::GatewayTimeout) => return status(StatusCode::GATEWAY_TIMEOUT, "Timeout"),
        Some(Fault::DroppedBefore) => return broken(),
        _ => {}
    }
    let Ok(bytes) = axum::body::to_bytes(body, MAX_REQUEST_BYTES).await else {
        return status(StatusCode::BAD_REQUEST, "BadRequest");
    };
    let mut upstream = http::Request::builder().method(parts.method.clone()).uri(
        parts
            .uri
            .path_and_query()
            .map_or("/", http::uri::PathAndQuery::as_str),
    );
    for (name, value) in &parts.headers {
        if [header::CONTENT_TYPE, header::ACCEPT, header::USER_AGENT].contains(name) {
            upstream = upstream.header(name, value);
        }
    }
    let Ok(upstream) = upstream.body(kube::client::Body::from(bytes.to_vec())) else {
        return status(StatusCode::BAD_REQUEST, "BadRequest");
    };
    proxy.counts.forwarded.fetch_add(1, Ordering::Relaxed);
    let answer = match proxy.client.send(upstream).await {
        Ok(answer) => answer,
        Err(e) => {
            proxy.counts.upstream_errors.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(error = %e, "the API server did not answer the proxy");
            return status(StatusCode::BAD_GATEWAY, "ServiceUnavailable");
        }
    };
    match fault {
        Some(Fault::DroppedAfter) => return broken(),
        Some(Fault::Timeout) => {
            tokio::time::sleep(proxy.plan.hold).await;
            return broken();
        }
        // The whole answer, late (a watch's events are delayed one by one below).
        Some(Fault::SlowAnswer) => tokio::time::sleep(delay).await,
        _ => {}
    }
    let (mut head, body) = answer.into_parts();
    for hop in [
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::CONTENT_LENGTH,
    ] {
        head.headers.remove(hop);
    }
    let body = if watch {
        let inner = if fault == Some(Fault::SlowWatch) {
            late(body, delay)
        } else {
            Body::new(body)
        };
        // Every watch stream ends after its life; one that drew a fault breaks instead of
        // ending cleanly.
        Body::new(Cut {
            inner: Box::pin(inner),
            deadline: Box::pin(tokio::time::sleep(life)),
            broken: fault == Some(Fault::WatchCut),
            done: false,
        })
    } else {
        Body::new(body)
    };
    Response::from_parts(head, body)
}

/// A Kubernetes `Status` answer with `code` and `reason`.
fn status(code: StatusCode, reason: &str) -> Response {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("injected by the fault proxy: {reason}"),
        "reason": reason, "code": code.as_u16()});
    let mut response = (code, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// An answer whose body fails at once: the server drops the connection mid-answer.
fn broken() -> Response {
    let error = std::io::Error::new(
        std::io::ErrorKind::ConnectionReset,
        "dropped by the fault proxy",
    );
    let stream = futures::stream::once(async move { Err::<Bytes, _>(error) });
    Response::new(Body::from_stream(stream))
}

/// `body` with each of its chunks delivered `delay` after the API server sent it, in order:
/// a watch whose events all come late. What was not delivered when the stream is cut is
/// lost, as it would be on a slow link; the watcher resumes from the last event it saw.
fn late(body: kube::client::Body, delay: Duration) -> Body {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut body = std::pin::pin!(body);
        loop {
            // Once the watcher hangs up (the stream was cut), the API server's stream goes
            // too, rather than stay open until its next event.
            let frame = tokio::select! {
                () = tx.closed() => break,
                frame = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)) => frame,
            };
            let Some(frame) = frame else { break };
            let chunk = frame.map(|f| f.into_data().unwrap_or_default());
            if tx
                .send((tokio::time::Instant::now() + delay, chunk))
                .is_err()
            {
                break;
            }
        }
    });
    let chunks = futures::stream::unfold(rx, |mut rx| async move {
        let (at, chunk) = rx.recv().await?;
        tokio::time::sleep_until(at).await;
        Some((chunk, rx))
    });
    Body::from_stream(chunks)
}

/// A watch body that ends (or breaks) at its deadline.
struct Cut {
    inner: Pin<Box<Body>>,
    deadline: Pin<Box<tokio::time::Sleep>>,
    broken: bool,
    done: bool,
}

impl HttpBody for Cut {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.done {
            return Poll::Ready(None);
        }
        if self.deadline.as_mut().poll(cx).is_ready() {
            self.done = true;
            return Poll::Ready(
                self.broken
                    .then(|| Err("watch stream cut by the fault proxy".into())),
            );
        }
        self.inner
            .as_mut()
            .poll_frame(cx)
            .map(|frame| frame.map(|f| f.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    use muster_topology::Rng;

    use super::{Counts, Fault, FaultPlan, Inner};

    /// A proxy's draws, without a proxy (its client answers nothing).
    fn inner(plan: FaultPlan) -> Inner {
        let (service, _handle) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        Inner {
            client: kube::Client::new(service, "default"),
            rng: Mutex::new(Rng::new(plan.seed)),
            plan,
            enabled: AtomicBool::new(true),
            counts: Counts::default(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_watch_delivers_every_event_in_order_after_its_delay() {
        let events = b"{\"type\":\"ADDED\"}\n{\"type\":\"MODIFIED\"}\n".to_vec();
        let start = tokio::time::Instant::now();
        let body = super::late(
            kube::client::Body::from(events.clone()),
            Duration::from_secs(3),
        );
        let delivered = axum::body::to_bytes(body, 1 << 20).await;
        assert_eq!(delivered.ok().map(|b| b.to_vec()), Some(events));
        assert!(
            start.elapsed() >= Duration::from_secs(3),
            "{:?}",
            start.elapsed()
        );
    }

    #[tokio::test]
    async fn a_seeded_share_of_requests_without_a_fault_is_answered_late() {
        let plan = FaultPlan {
            seed: 7,
            rate: 0.1,
            slow_rate: 0.25,
            ..FaultPlan::default()
        };
        let draws = |proxy: &Inner, watch: bool| {
            (0..4000)
                .map(|_| proxy.next(false, watch))
                .collect::<Vec<_>>()
        };
        let proxy = inner(plan.clone());
        let requests = draws(&proxy, false);
        let mut counts: BTreeMap<Option<Fault>, usize> = BTreeMap::new();
        for draw in &requests {
            *counts.entry(draw.fault).or_default() += 1;
            assert!(draw.delay >= Duration::from_secs(1) && draw.delay <= Duration::from_secs(5));
        }
        // About 0.9 × 0.25 of the requests come late; none of them is a watch.
        let late = counts.get(&Some(Fault::SlowAnswer)).copied().unwrap_or(0);
        assert!((800..=1000).contains(&late), "{counts:?}");
        assert!(!counts.contains_key(&Some(Fault::SlowWatch)));
        let watches = draws(&inner(plan.clone()), true);
        assert!(watches.iter().any(|d| d.fault == Some(Fault::SlowWatch)));
        assert!(watches.iter().all(|d| d.fault != Some(Fault::SlowAnswer)));
        // The same seed, the same sequence.
        let again = draws(&inner(plan.clone()), false);
        assert!(
            requests
                .iter()
                .zip(&again)
                .all(|(a, b)| a.fault == b.fault && a.delay == b.delay)
        );
        // Faults off: nothing late either.
        let off = inner(plan);
        off.enabled
            .store(false, std::sync::atomic::Ordering::Relaxed);
        assert!(draws(&off, false).iter().all(|d| d.fault.is_none()));
    }

    #[test]
    fn reads_never_draw_a_conflict_and_every_kind_is_reachable() {
        let draws = (0..1000).map(|i| f64::from(i) / 1000.0);
        let writes: std::collections::BTreeSet<Fault> =
            draws.clone().map(|d| Fault::pick(true, d)).collect();
        let reads: std::collections::BTreeSet<Fault> =
            draws.map(|d| Fault::pick(false, d)).collect();
        assert_eq!(writes.len(), 7);
        assert!(!reads.contains(&Fault::Conflict));
        assert_eq!(reads.len(), 6);
    }
}
