//! A fake kubelet: one task that watches every pod and plays the kubelet for those bound to fake
//! nodes (label [`FAKE_NODE_LABEL`]): it starts them (Running, Ready), ends them after their run
//! time (Succeeded, or Failed with an exit code), fails them with reason `NodeLost` when their
//! node turns NotReady (Ready `False`: its kubelet stopped), and removes them once they are
//! deleted.
//!
//! A node whose Ready condition is `Unknown` is partitioned (see
//! [`partition_node`](crate::nodes::partition_node)): its kubelet cannot reach the API server,
//! so nothing is written for its pods — they keep running unseen, keep their last status, and a
//! pod deleted meanwhile stays Terminating. Timers run on; once the node is Ready again the
//! kubelet removes the pods deleted meanwhile and carries on with the others (starting those
//! whose start delay passed, ending those whose run time did).
//!
//! Each pod's behaviour comes from its annotations (copied from a GpuJob's pod template):
//! [`START_DELAY_ANNOTATION`], [`RUN_ANNOTATION`], [`EXIT_CODE_ANNOTATION`],
//! [`NEVER_READY_ANNOTATION`]; [`KubeletOptions`] gives the defaults. A pod that ends is given
//! phase Succeeded or Failed whatever its restart policy.

mod node;
mod pod;
mod status;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tokio_util::time::DelayQueue;

use self::node::{NodeState, Reach};
use self::pod::{Deletion, Phase, PodKey, TimerKind, Tracked, key_of, phase_of};
use crate::nodes::{FAKE_NODE_LABEL, node_ip, now};

/// Milliseconds from binding to Running (overrides the random default).
pub const START_DELAY_ANNOTATION: &str = "testkit.muster.dev/start-delay-ms";
/// Milliseconds from Running to the end; without it (and without a default) a pod runs forever.
pub const RUN_ANNOTATION: &str = "testkit.muster.dev/run-ms";
/// The exit code at the end: 0 (default) → Succeeded, anything else → Failed.
pub const EXIT_CODE_ANNOTATION: &str = "testkit.muster.dev/exit-code";
/// `"true"`: the pod runs but never becomes Ready.
pub const NEVER_READY_ANNOTATION: &str = "testkit.muster.dev/never-ready";

/// The field manager of the kubelet's status writes.
const MANAGER: &str = "muster-testkit-kubelet";
/// Attempts at one write before the kubelet gives up on it.
const MAX_RETRIES: u32 = 5;
/// The exit code of containers on a lost node (killed).
const NODE_LOST_EXIT_CODE: i32 = 137;

/// Defaults for pods without annotations, and limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeletOptions {
    /// The shortest start delay (default 0).
    pub min_start_delay: Duration,
    /// The longest start delay (default 200 ms); each pod gets one in between, fixed by its uid.
    pub max_start_delay: Duration,
    /// How long a pod runs (default `None`: forever).
    pub run_time: Option<Duration>,
    /// How many API writes may be in flight at once (default 32).
    pub max_in_flight: usize,
}

impl Default for KubeletOptions {
    fn default() -> Self {
        Self {
            min_start_delay: Duration::ZERO,
            max_start_delay: Duration::from_millis(200),
            run_time: None,
            max_in_flight: 32,
        }
    }
}

/// What a [`FakeKubelet`] has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KubeletStats {
    /// Pod status writes sent (Running, Succeeded, Failed).
    pub status_writes: u64,
    /// Pod deletions sent (grace period 0, after a deletion was requested).
    pub deletions: u64,
    /// Writes the API server refused or that did not reach it.
    pub failed_writes: u64,
}

#[derive(Default)]
struct Counters {
    status_writes: AtomicU64,
    deletions: AtomicU64,
    failed_writes: AtomicU64,
}

/// A running fake kubelet; dropping it (or [`FakeKubelet::stop`]) stops it.
pub struct FakeKubelet {
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
    counters: Arc<Counters>,
}

impl FakeKubelet {
    /// Starts the kubelet task (needs a Tokio runtime).
    pub fn start(client: Client, options: KubeletOptions) -> Self {
        let stop = CancellationToken::new();
        let counters = Arc::new(Counters::default());
        let kubelet = Kubelet {
            semaphore: Arc::new(Semaphore::new(options.max_in_flight.max(1))),
            client,
            options,
            counters: Arc::clone(&counters),
            nodes: HashMap::new(),
            pods: HashMap::new(),
            by_node: HashMap::new(),
            timers: DelayQueue::new(),
            writes: JoinSet::new(),
            next_pod_ip: 1,
            pod_relist: None,
            node_relist: None,
        };
        let task = tokio::spawn(kubelet.run(stop.clone()));
        Self {
            stop,
            task: Some(task),
            counters,
        }
    }

    /// Pod status writes sent so far.
    pub fn status_writes(&self) -> u64 {
        self.counters.status_writes.load(Ordering::Relaxed)
    }

    /// Everything counted so far.
    pub fn stats(&self) -> KubeletStats {
        KubeletStats {
            status_writes: self.counters.status_writes.load(Ordering::Relaxed),
            deletions: self.counters.deletions.load(Ordering::Relaxed),
            failed_writes: self.counters.failed_writes.load(Ordering::Relaxed),
        }
    }

    /// Stops the kubelet and waits for its task to end (writes in flight are abandoned).
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

// === impl Kubelet ===

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WriteKind {
    Run,
    Finish,
    NodeLost,
    Delete,
}

struct WriteDone {
    key: PodKey,
    uid: String,
    kind: WriteKind,
    result: Result<(), kube::Error>,
}

/// What woke the loop, computed while the sources are borrowed and handled after.
enum Wake {
    Stop,
    Pod(Box<Result<Event<Pod>, watcher::Error>>),
    Node(Box<Result<Event<Node>, watcher::Error>>),
    Timer(PodKey, TimerKind),
    Write(WriteDone),
}

/// The kubelet loop's state: it alone owns it, so no locks.
struct Kubelet {
    client: Client,
    options: KubeletOptions,
    counters: Arc<Counters>,
    semaphore: Arc<Semaphore>,
    nodes: HashMap<String, NodeState>,
    pods: HashMap<PodKey, Tracked>,
    by_node: HashMap<String, HashSet<PodKey>>,
    timers: DelayQueue<(PodKey, TimerKind)>,
    writes: JoinSet<WriteDone>,
    next_pod_ip: u32,
    /// The pods listed since a relist began.
    pod_relist: Option<HashSet<PodKey>>,
    /// The nodes listed since a relist began.
    node_relist: Option<HashSet<String>>,
}

impl Kubelet {
    async fn run(mut self, shutdown: CancellationToken) {
        let pods = watcher::watcher(
            Api::<Pod>::all(self.client.clone()),
            watcher::Config::default(),
        )
        .default_backoff();
        let nodes = watcher::watcher(
            Api::<Node>::all(self.client.clone()),
            watcher::Config::default().labels(&format!("{FAKE_NODE_LABEL}=true")),
        )
        .default_backoff();
        let mut pods = std::pin::pin!(pods);
        let mut nodes = std::pin::pin!(nodes);
        loop {
            let step = tokio::select! {
                () = shutdown.cancelled() => Wake::Stop,
                event = pods.next() => event.map_or(Wake::Stop, |e| Wake::Pod(Box::new(e))),
                event = nodes.next() => event.map_or(Wake::Stop, |e| Wake::Node(Box::new(e))),
                Some(expired) = self.timers.next(), if !self.timers.is_empty() => {
                    let (key, kind) = expired.into_inner();
                    Wake::Timer(key, kind)
                }
                Some(done) = self.writes.join_next(), if !self.writes.is_empty() => match done {
                    Ok(done) => Wake::Write(done),
                    Err(_) => continue,
                },
            };
            match step {
                Wake::Stop => break,
                Wake::Pod(event) => match *event {
                    Ok(event) => self.on_pod_event(event),
                    Err(e) => tracing::debug!("fake kubelet, pod watch: {e}"),
                },
                Wake::Node(event) => match *event {
                    Ok(event) => self.on_node_event(event),
                    Err(e) => tracing::debug!("fake kubelet, node watch: {e}"),
                },
                Wake::Timer(key, kind) => self.on_timer(&key, kind),
                Wake::Write(done) => self.on_write_done(done),
            }
        }
    }

    fn on_pod_event(&mut self, event: Event<Pod>) {
        match event {
            Event::Init => self.pod_relist = Some(HashSet::new()),
            Event::InitApply(pod) | Event::Apply(pod) => self.on_pod(&pod),
            Event::Delete(pod) => {
                if let Some(key) = key_of(&pod) {
                    self.forget(&key);
                }
            }
            Event::InitDone => {
                if let Some(seen) = self.pod_relist.take() {
                    let gone: Vec<PodKey> = self
                        .pods
                        .keys()
                        .filter(|k| !seen.contains(*k))
                        .cloned()
                        .collect();
                    for key in gone {
                        self.forget(&key);
                    }
                }
            }
        }
    }

    fn on_node_event(&mut self, event: Event<Node>) {
        match event {
            Event::Init => self.node_relist = Some(HashSet::new()),
            Event::InitApply(node) | Event::Apply(node) => self.on_node(&node),
            Event::Delete(node) => {
                if let Some(name) = node.metadata.name {
                    self.nodes.remove(&name);
                    self.reconcile_node(&name);
                }
            }
            Event::InitDone => {
                if let Some(seen) = self.node_relist.take() {
                    let gone: Vec<String> = self
                        .nodes
                        .keys()
                        .filter(|n| !seen.contains(*n))
                        .cloned()
                        .collect();
                    for name in gone {
                        self.nodes.remove(&name);
                        self.reconcile_node(&name);
                    }
                }
            }
        }
    }

    fn on_node(&mut self, node: &Node) {
        let Some(name) = node.metadata.name.clone() else {
            return;
        };
        if let Some(seen) = &mut self.node_relist {
            seen.insert(name.clone());
        }
        let ip = node
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
            .map_or_else(|| node_ip(&name), |a| a.address.clone());
        let reach = Reach::of(node);
        let changed = self
            .nodes
            .insert(name.clone(), NodeState { reach, ip })
            .is_none_or(|before| before.reach != reach);
        if changed {
            self.reconcile_node(&name);
        }
    }

    fn reconcile_node(&mut self, name: &str) {
        let keys: Vec<PodKey> = self
            .by_node
            .get(name)
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default();
        for key in keys {
            self.reconcile(&key);
        }
    }

    fn on_pod(&mut self, pod: &Pod) {
        let (Some(key), Some(uid)) = (key_of(pod), pod.metadata.uid.clone()) else {
            return;
        };
        if let Some(seen) = &mut self.pod_relist {
            seen.insert(key.clone());
        }
        if self.pods.get(&key).is_some_and(|t| t.uid != uid) {
            self.forget(&key);
        }
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        let deleting = pod.metadata.deletion_timestamp.is_some();
        if !self.pods.contains_key(&key) {
            if node.is_none() && !deleting {
                return;
            }
            self.pods
                .insert(key.clone(), Tracked::new(pod, uid, &self.options));
        }
        let Some(tracked) = self.pods.get_mut(&key) else {
            return;
        };
        tracked.phase = tracked.phase.max(phase_of(pod));
        if deleting && tracked.deletion == Deletion::NotRequested {
            tracked.deletion = Deletion::Requested;
        }
        if tracked.node.is_none() {
            tracked.node.clone_from(&node);
        }
        if let Some(node) = &tracked.node {
            self.by_node
                .entry(node.clone())
                .or_default()
                .insert(key.clone());
        }
        self.reconcile(&key);
    }

    /// Drops everything known about a pod, its timer included.
    fn forget(&mut self, key: &PodKey) {
        let Some(tracked) = self.pods.remove(key) else {
            return;
        };
        if let Some((timer, _)) = tracked.timer {
            self.timers.try_remove(&timer);
        }
        if let Some(node) = &tracked.node
            && let Some(keys) = self.by_node.get_mut(node)
        {
            keys.remove(key);
            if keys.is_empty() {
                self.by_node.remove(node);
            }
        }
    }

    fn on_timer(&mut self, key: &PodKey, kind: TimerKind) {
        let Some(tracked) = self.pods.get_mut(key) else {
            return;
        };
        tracked.timer = None;
        if kind != TimerKind::Retry {
            tracked.due = Some(kind);
        }
        self.reconcile(key);
    }

    fn set_timer(&mut self, key: &PodKey, kind: TimerKind, after: Duration) {
        let timer = self.timers.insert((key.clone(), kind), after);
        if let Some(tracked) = self.pods.get_mut(key)
            && let Some((old, _)) = tracked.timer.replace((timer, kind))
        {
            self.timers.try_remove(&old);
        }
    }

    fn cancel_timer(&mut self, key: &PodKey) {
        if let Some(tracked) = self.pods.get_mut(key) {
            if let Some((timer, _)) = tracked.timer.take() {
                self.timers.try_remove(&timer);
            }
            tracked.due = None;
        }
    }

    /// Decides the next step for a pod from what is known of it and of its node.
    fn reconcile(&mut self, key: &PodKey) {
        let Some(tracked) = self.pods.get(key) else {
            return;
        };
        if tracked.in_flight || matches!(tracked.timer, Some((_, TimerKind::Retry))) {
            return;
        }
        let node = tracked.node.as_ref().and_then(|n| self.nodes.get(n));
        if node.is_some_and(|n| n.reach == Reach::Partitioned) {
            // Cut off from the API server: nothing is reported until the partition heals
            // (timers that fire meanwhile leave their action due).
            return;
        }
        if tracked.deletion != Deletion::NotRequested {
            if tracked.deletion == Deletion::Requested && (tracked.node.is_none() || node.is_some())
            {
                self.cancel_timer(key);
                self.send(key, WriteKind::Delete, Value::Null);
            }
            return;
        }
        let Some(node) = node else {
            return;
        };
        if tracked.stuck {
            return;
        }
        let ready = node.reach == Reach::Ready;
        let host_ip = node.ip.clone();
        match tracked.phase {
            Phase::Terminal => self.cancel_timer(key),
            Phase::Pending if !ready => self.cancel_timer(key),
            Phase::Pending if tracked.due == Some(TimerKind::Start) => {
                let pod_ip = self.next_pod_ip();
                let Some(tracked) = self.pods.get_mut(key) else {
                    return;
                };
                tracked.due = None;
                let now = Timestamp::now();
                tracked.started_at = Some(now);
                tracked.started =
                    serde_json::to_value(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now))
                        .ok();
                let patch = status::running(
                    &tracked.facts(),
                    &host_ip,
                    &pod_ip,
                    !tracked.behaviour.never_ready,
                    &crate::nodes::now(),
                );
                self.send(key, WriteKind::Run, patch);
            }
            Phase::Pending => {
                if tracked.timer.is_none() {
                    let delay = tracked.behaviour.start_delay;
                    self.set_timer(key, TimerKind::Start, delay);
                }
            }
            Phase::Running if !ready => {
                let message = format!(
                    "Node {} which was running pod {} is unresponsive",
                    tracked.node.as_deref().unwrap_or_default(),
                    key.name
                );
                let patch = status::finished(
                    &tracked.facts(),
                    NODE_LOST_EXIT_CODE,
                    Some(("NodeLost", &message)),
                    &now(),
                );
                self.cancel_timer(key);
                self.send(key, WriteKind::NodeLost, patch);
            }
            Phase::Running if tracked.due == Some(TimerKind::Finish) => {
                let patch =
                    status::finished(&tracked.facts(), tracked.behaviour.exit_code, None, &now());
                self.cancel_timer(key);
                self.send(key, WriteKind::Finish, patch);
            }
            Phase::Running => {
                if tracked.timer.is_none()
                    && let Some(run) = tracked.behaviour.run
                {
                    let ran = tracked
                        .started_at
                        .and_then(|t| Timestamp::now().duration_since(t).try_into().ok())
                        .unwrap_or(Duration::ZERO);
                    self.set_timer(key, TimerKind::Finish, run.saturating_sub(ran));
                }
            }
        }
    }

    fn next_pod_ip(&mut self) -> String {
        let n = self.next_pod_ip;
        self.next_pod_ip = self.next_pod_ip.wrapping_add(1);
        format!(
            "100.{}.{}.{}",
            64 + ((n >> 16) & 0x3f),
            (n >> 8) & 0xff,
            n & 0xff
        )
    }

    /// Sends a write in its own task, at most `max_in_flight` at once.
    fn send(&mut self, key: &PodKey, kind: WriteKind, patch: Value) {
        let Some(tracked) = self.pods.get_mut(key) else {
            return;
        };
        tracked.in_flight = true;
        if kind == WriteKind::Delete {
            tracked.deletion = Deletion::Sent;
        }
        let uid = tracked.uid.clone();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &key.namespace);
        let semaphore = Arc::clone(&self.semaphore);
        let counters = Arc::clone(&self.counters);
        let key = key.clone();
        self.writes.spawn(async move {
            let _permit = semaphore.acquire_owned().await;
            let result = if kind == WriteKind::Delete {
                counters.deletions.fetch_add(1, Ordering::Relaxed);
                let params = DeleteParams {
                    grace_period_seconds: Some(0),
                    preconditions: Some(Preconditions {
                        uid: Some(uid.clone()),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                api.delete(&key.name, &params).await.map(|_| ())
            } else {
                counters.status_writes.fetch_add(1, Ordering::Relaxed);
                let params = PatchParams {
                    field_manager: Some(MANAGER.into()),
                    ..PatchParams::default()
                };
                api.patch_status(&key.name, &params, &Patch::Strategic(&patch))
                    .await
                    .map(|_| ())
            };
            if result.is_err() {
                counters.failed_writes.fetch_add(1, Ordering::Relaxed);
            }
            WriteDone {
                key,
                uid,
                kind,
                result,
            }
        });
    }

    fn on_write_done(&mut self, done: WriteDone) {
        let Some(tracked) = self.pods.get_mut(&done.key) else {
            return;
        };
        if tracked.uid != done.uid {
            return;
        }
        tracked.in_flight = false;
        match done.result {
            Ok(()) => {
                tracked.retries = 0;
                match done.kind {
                    WriteKind::Run => tracked.phase = tracked.phase.max(Phase::Running),
                    WriteKind::Finish | WriteKind::NodeLost => tracked.phase = Phase::Terminal,
                    WriteKind::Delete => {}
                }
            }
            // Gone, or (a precondition failed) replaced by a pod of the same name.
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
                self.forget(&done.key);
                return;
            }
            Err(e) => {
                tracing::debug!(
                    "fake kubelet: {:?} of pod {}/{}: {e}",
                    done.kind,
                    done.key.namespace,
                    done.key.name
                );
                tracked.retries += 1;
                let invalid = matches!(&e, kube::Error::Api(status) if status.code == 422);
                if invalid || tracked.retries > MAX_RETRIES {
                    // Give the status up; a requested deletion is still carried out.
                    tracked.stuck = done.kind != WriteKind::Delete;
                    return;
                }
                match done.kind {
                    WriteKind::Run => tracked.due = Some(TimerKind::Start),
                    WriteKind::Finish => tracked.due = Some(TimerKind::Finish),
                    WriteKind::NodeLost => {}
                    WriteKind::Delete => tracked.deletion = Deletion::Requested,
                }
                let backoff = Duration::from_millis(100) * 2u32.pow(tracked.retries);
                self.set_timer(&done.key, TimerKind::Retry, backoff);
                return;
            }
        }
        self.reconcile(&done.key);
    }
}
