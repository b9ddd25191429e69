//! The cluster autoscaler, played by the kit: each new ProvisioningRequest is answered after a
//! few seconds, either `Failed` (a stock-out, one in ten) or with a new block of nodes — one
//! 8-GPU node per pod, labelled for the bought flavor — and `Provisioned`. When a request is
//! deleted, its nodes go too, each once no live pod is bound to it (other jobs of the flavor
//! may run there) — also a request deleted while the watch was down, which the relist that
//! follows no longer lists.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt as _, watcher};
use muster_api::{ObjectRef, ProvisioningRequest};
use muster_sim::trace::Rng;
use serde::Serialize;
use serde_json::json;

use super::workload::{BURST_FLAVOR, gpu_node};
use muster_testkit::nodes::create_node;

/// What the autoscaler did.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AutoscalerStats {
    /// Requests seen.
    pub requests: u64,
    /// Requests answered Provisioned.
    pub provisioned: u64,
    /// Requests answered Failed.
    pub failed: u64,
    /// Nodes created.
    pub nodes_created: u64,
    /// Nodes deleted after their request went.
    pub nodes_deleted: u64,
}

#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    provisioned: AtomicU64,
    failed: AtomicU64,
    nodes_created: AtomicU64,
    nodes_deleted: AtomicU64,
}

/// The running autoscaler; dropping it stops it.
pub struct Autoscaler {
    counters: Arc<Counters>,
    pending: Arc<Mutex<BTreeMap<String, bool>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Autoscaler {
    /// Starts answering requests through `client`; `seed` fixes each request's answer.
    pub fn start(client: Client, seed: u64) -> Autoscaler {
        let counters = Arc::new(Counters::default());
        let pending = Arc::new(Mutex::new(BTreeMap::new()));
        let task = tokio::spawn(run(
            client,
            seed,
            Arc::clone(&counters),
            Arc::clone(&pending),
        ));
        Autoscaler {
            counters,
            pending,
            task,
        }
    }

    /// Requests not yet answered.
    pub fn unanswered(&self) -> usize {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .filter(|answered| !**answered)
            .count()
    }

    /// What it did so far.
    pub fn stats(&self) -> AutoscalerStats {
        let c = &self.counters;
        AutoscalerStats {
            requests: c.requests.load(Ordering::Relaxed),
            provisioned: c.provisioned.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            nodes_created: c.nodes_created.load(Ordering::Relaxed),
            nodes_deleted: c.nodes_deleted.load(Ordering::Relaxed),
        }
    }
}

impl Drop for Autoscaler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn run(
    client: Client,
    seed: u64,
    counters: Arc<Counters>,
    pending: Arc<Mutex<BTreeMap<String, bool>>>,
) {
    let api: Api<ProvisioningRequest> = Api::all(client.clone());
    let mut events =
        std::pin::pin!(watcher::watcher(api, watcher::Config::default()).default_backoff());
    let mut known: HashMap<String, tokio::task::JoinHandle<()>> = HashMap::new();
    let mut relist = Relist::default();
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Init) => relist.start(),
            Ok(watcher::Event::InitDone) => {
                for key in relist.done(known.keys()) {
                    if let Ok(request) = ObjectRef::parse(&key) {
                        forget(&client, &key, &request, &mut known, &pending, &counters);
                    }
                }
            }
            Ok(watcher::Event::Apply(request) | watcher::Event::InitApply(request)) => {
                let Some((namespace, name, key)) = names(&request) else {
                    continue;
                };
                relist.saw(&key);
                let answered = request
                    .status
                    .as_ref()
                    .is_some_and(|s| !s.conditions.is_empty());
                if known.contains_key(&key) || answered {
                    continue;
                }
                counters.requests.fetch_add(1, Ordering::Relaxed);
                pending
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(key.clone(), false);
                let pods: i32 = request.spec.pod_sets.iter().map(|s| s.count).sum();
                let task = tokio::spawn(answer(
                    client.clone(),
                    namespace,
                    name,
                    u32::try_from(pods).unwrap_or(0),
                    seed ^ muster_topology::text_seed(&key),
                    Arc::clone(&counters),
                    Arc::clone(&pending),
                ));
                known.insert(key, task);
            }
            Ok(watcher::Event::Delete(request)) => {
                let Some((namespace, name, key)) = names(&request) else {
                    continue;
                };
                let request = ObjectRef::new(&namespace, &name);
                forget(&client, &key, &request, &mut known, &pending, &counters);
            }
            Err(_) => {}
        }
    }
}

/// The requests a relist under way has listed so far. No delete event is sent for a request
/// deleted while the watch was down, so the known requests a relist does not list are gone.
#[derive(Debug, Default)]
struct Relist {
    /// `None` outside a relist.
    listed: Option<HashSet<String>>,
}

impl Relist {
    /// A relist begins (the watcher's `Init`).
    fn start(&mut self) {
        self.listed = Some(HashSet::new());
    }

    /// Request `key` is listed; outside a relist, an event says nothing about the others.
    fn saw(&mut self, key: &str) {
        if let Some(listed) = self.listed.as_mut() {
            listed.insert(key.to_owned());
        }
    }

    /// The relist is done (`InitDone`): the requests of `known` it did not list, in order.
    /// Without a relist under way, none.
    fn done<'a>(&mut self, known: impl Iterator<Item = &'a String>) -> Vec<String> {
        let Some(listed) = self.listed.take() else {
            return Vec::new();
        };
        let mut gone: Vec<String> = known
            .filter(|key| !listed.contains(*key))
            .cloned()
            .collect();
        gone.sort();
        gone
    }
}

/// Request `key` is gone: its answer, if still coming, is not given, and its nodes go.
fn forget(
    client: &Client,
    key: &str,
    request: &ObjectRef,
    known: &mut HashMap<String, tokio::task::JoinHandle<()>>,
    pending: &Mutex<BTreeMap<String, bool>>,
    counters: &Arc<Counters>,
) {
    if let Some(task) = known.remove(key) {
        task.abort();
    }
    pending
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(key);
    tokio::spawn(scale_down(
        client.clone(),
        node_prefix(request.namespace(), request.name()),
        Arc::clone(counters),
    ));
}

/// A request's namespace, name and `namespace/name`.
fn names(request: &ProvisioningRequest) -> Option<(String, String, String)> {
    let namespace = request.metadata.namespace.clone()?;
    let name = request.metadata.name.clone()?;
    let key = ObjectRef::new(&namespace, &name).into_string();
    Some((namespace, name, key))
}

/// The names of a request's nodes start with this.
fn node_prefix(namespace: &str, name: &str) -> String {
    format!("pr-{namespace}-{name}-")
}

async fn answer(
    client: Client,
    namespace: String,
    name: String,
    pods: u32,
    seed: u64,
    counters: Arc<Counters>,
    pending: Arc<Mutex<BTreeMap<String, bool>>>,
) {
    let mut rng = Rng::new(seed);
    tokio::time::sleep(Duration::from_millis(2_000 + rng.next_u64() % 3_000)).await;
    let stock_out = rng.unit() <= 0.1;
    let prefix = node_prefix(&namespace, &name);
    if !stock_out {
        for i in 0..pods {
            let spec = gpu_node(
                &format!("{prefix}{i}"),
                BURST_FLAVOR,
                prefix.trim_end_matches('-'),
            );
            // The node may exist from an answer cut short: it is the same node.
            if create_node(&client, &spec).await.is_ok() {
                counters.nodes_created.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    let (type_, message) = if stock_out {
        ("Failed", "stock-out in the zone")
    } else {
        ("Provisioned", "capacity is ready")
    };
    let status = json!({"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
        "status": {"conditions": [{"type": type_, "status": "True", "reason": "Chaos",
            "message": message,
            "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string()}]}});
    let requests: Api<ProvisioningRequest> = Api::namespaced(client, &namespace);
    for _ in 0..20 {
        match requests
            .patch_status(
                &name,
                &PatchParams::apply("muster-chaos-autoscaler").force(),
                &Patch::Apply(&status),
            )
            .await
        {
            Ok(_) => {
                let counter = if stock_out {
                    &counters.failed
                } else {
                    &counters.provisioned
                };
                counter.fetch_add(1, Ordering::Relaxed);
                pending
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(ObjectRef::new(&namespace, &name).into_string(), true);
                return;
            }
            Err(kube::Error::Api(e)) if e.code == 404 => return,
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// Deletes a request's nodes once no live pod is bound to them, as a real autoscaler removes
/// only idle nodes (checked every 2 s, for up to 10 minutes).
async fn scale_down(client: Client, prefix: String, counters: Arc<Counters>) {
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::all(client);
    for _ in 0..300 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let Ok(list) = nodes.list(&ListParams::default()).await else {
            continue;
        };
        let mine: Vec<String> = list
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .filter(|n| n.starts_with(&prefix))
            .collect();
        if mine.is_empty() {
            return;
        }
        for name in mine {
            let on_node = ListParams::default().fields(&format!("spec.nodeName={name}"));
            let Ok(bound) = pods.list(&on_node).await else {
                continue;
            };
            let busy = bound.items.iter().any(|p| {
                !matches!(
                    p.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Succeeded" | "Failed")
                )
            });
            if !busy && nodes.delete(&name, &DeleteParams::default()).await.is_ok() {
                counters.nodes_deleted.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn a_relist_forgets_the_known_requests_it_does_not_list() {
        let known = keys(&["team-a/one", "team-a/three", "team-b/two"]);
        let mut relist = Relist::default();
        relist.start();
        relist.saw("team-a/three");
        // A request first seen in the relist is new, not gone.
        relist.saw("team-c/four");
        assert_eq!(
            relist.done(known.iter()),
            keys(&["team-a/one", "team-b/two"])
        );
        // The relist is over: nothing more is forgotten until the next one.
        assert!(relist.done(known.iter()).is_empty());
    }

    #[test]
    fn events_outside_a_relist_forget_nothing() {
        let known = keys(&["team-a/one", "team-b/two"]);
        let mut relist = Relist::default();
        // A watch event between relists says nothing about the requests it does not name.
        relist.saw("team-a/one");
        assert!(relist.done(known.iter()).is_empty());
        // A relist that lists every known request forgets none.
        relist.start();
        relist.saw("team-b/two");
        relist.saw("team-a/one");
        assert!(relist.done(known.iter()).is_empty());
    }
}
