//! Fake nodes: Node objects with capacity and a Ready condition that no kubelet backs (the
//! [`FakeKubelet`](crate::FakeKubelet) plays one for their pods), and a heartbeat that renews
//! their Leases.
//!
//! A node can fail two ways. [`kill_node`]: its kubelet says it stopped (Ready `False`), and
//! the fake kubelet fails its pods with reason `NodeLost`. [`partition_node`]: it is cut off
//! from the API server — its Ready condition turns `Unknown` with the unreachable taints, as
//! the node lifecycle controller writes them once heartbeats stop, while its pods keep
//! running unseen: the fake kubelet reports nothing for them, nor confirms their deletion,
//! until [`heal_node`] makes it Ready again.

use std::collections::BTreeMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context as _;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::crds::MANAGER;

/// The label every fake node carries (`"true"`); the fake kubelet plays the kubelet of nodes
/// with it.
pub const FAKE_NODE_LABEL: &str = "testkit.muster.dev/fake";

pub use muster_api::wire::{NOT_READY_TAINT, UNREACHABLE_TAINT};

/// The namespace of node heartbeat Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// How many node writes [`create_nodes`] keeps in flight.
const CREATE_CONCURRENCY: usize = 16;

/// How often [`FakeNodes`] renews the Lease of each live node.
const HEARTBEAT: Duration = Duration::from_secs(10);

/// What a fake node looks like.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeSpec {
    /// The node's name.
    pub name: String,
    /// Its labels; [`FAKE_NODE_LABEL`] and `kubernetes.io/hostname` are added when created.
    pub labels: BTreeMap<String, String>,
    /// Its taints.
    pub taints: Vec<Taint>,
    /// Its capacity, also its allocatable: resource name to quantity, e.g. `nvidia.com/gpu` → `8`.
    pub capacity: BTreeMap<String, String>,
}

impl NodeSpec {
    /// A node with 64 CPUs, 512Gi of memory, room for 110 pods, no GPU and no taint.
    pub fn new(name: impl Into<String>) -> Self {
        let capacity = [("cpu", "64"), ("memory", "512Gi"), ("pods", "110")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        Self {
            name: name.into(),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            capacity,
        }
    }

    /// Sets the number of `nvidia.com/gpu`.
    #[must_use]
    pub fn gpus(self, count: u32) -> Self {
        self.capacity("nvidia.com/gpu", count.to_string())
    }

    /// Sets a label.
    #[must_use]
    pub fn label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// Adds a taint.
    #[must_use]
    pub fn taint(mut self, taint: Taint) -> Self {
        self.taints.push(taint);
        self
    }

    /// Sets the capacity (and allocatable) of a resource.
    #[must_use]
    pub fn capacity(mut self, resource: impl Into<String>, quantity: impl Into<String>) -> Self {
        self.capacity.insert(resource.into(), quantity.into());
        self
    }
}

/// The made-up InternalIP of a fake node: `10.x.y.z`, from a hash of its name.
pub fn node_ip(name: &str) -> String {
    let mut hasher = DefaultHasher::new();
    name.hash(&mut hasher);
    let [a, b, c, ..] = hasher.finish().to_le_bytes();
    format!("10.{}.{b}.{}", a.max(1), c.max(1))
}

/// Whether a node's Ready condition is True.
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

/// Now, as an API timestamp.
pub(crate) fn now() -> Value {
    serde_json::to_value(Time(Timestamp::now())).unwrap_or(Value::Null)
}

/// Creates a fake node: the Node, then its status (capacity, allocatable, Ready=True with a fresh
/// heartbeat, addresses, nodeInfo), then without the not-ready taint the API server added.
pub async fn create_node(client: &Client, spec: &NodeSpec) -> anyhow::Result<Node> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut labels = spec.labels.clone();
    labels.insert(FAKE_NODE_LABEL.into(), "true".into());
    labels
        .entry("kubernetes.io/hostname".into())
        .or_insert_with(|| spec.name.clone());
    labels
        .entry("kubernetes.io/os".into())
        .or_insert_with(|| "linux".into());
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": spec.name, "labels": labels},
        "spec": {"taints": spec.taints},
    }))
    .context("building the Node")?;
    nodes
        .create(&PostParams::default(), &node)
        .await
        .with_context(|| format!("creating node {}", spec.name))?;

    let ip = node_ip(&spec.name);
    let now = now();
    let conditions: Vec<Value> = [
        ("Ready", "True", "KubeletReady", "fake kubelet is ready"),
        ("MemoryPressure", "False", "KubeletHasSufficientMemory", ""),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure", ""),
        ("PIDPressure", "False", "KubeletHasSufficientPID", ""),
    ]
    .into_iter()
    .map(|(type_, status, reason, message)| {
        json!({"type": type_, "status": status, "reason": reason, "message": message,
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    })
    .collect();
    let status = json!({"status": {
        "capacity": spec.capacity,
        "allocatable": spec.capacity,
        "conditions": conditions,
        "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": spec.name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": spec.name, "systemUUID": spec.name, "bootID": spec.name,
            "kernelVersion": "6.0.0-testkit", "osImage": "muster-testkit",
            "containerRuntimeVersion": "fake://1.0", "kubeletVersion": "v1.36.0-testkit",
            "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"},
    }});
    nodes
        .patch_status(&spec.name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .with_context(|| format!("writing the status of node {}", spec.name))?;
    remove_condition_taints(client, &spec.name).await
}

/// Creates many fake nodes, 16 at a time.
pub async fn create_nodes(client: &Client, specs: &[NodeSpec]) -> anyhow::Result<Vec<Node>> {
    futures::stream::iter(specs)
        .map(|spec| create_node(client, spec))
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_collect()
        .await
}

/// Sets a node's Ready condition to False, as when its kubelet stops; the fake kubelet then fails
/// the pods running there with reason `NodeLost`.
pub async fn kill_node(client: &Client, name: &str) -> anyhow::Result<()> {
    set_ready(client, name, Ready::False).await
}

/// Sets a node's Ready condition to True again (its other conditions to False) and removes
/// the not-ready and unreachable taints.
pub async fn repair_node(client: &Client, name: &str) -> anyhow::Result<()> {
    set_ready(client, name, Ready::True).await?;
    remove_condition_taints(client, name).await.map(|_| ())
}

/// Cuts a node off from the API server, as a network partition does: its conditions turn
/// `Unknown` and it gets the unreachable taints (NoSchedule, and NoExecute), as the node
/// lifecycle controller writes them once its heartbeats stop. Its pods keep running: the fake
/// kubelet writes nothing for them and confirms no deletion until [`heal_node`].
pub async fn partition_node(client: &Client, name: &str) -> anyhow::Result<()> {
    set_ready(client, name, Ready::Unknown).await?;
    add_unreachable_taints(client, name).await
}

/// Ends a partition: the node is Ready again, without the unreachable taints, and the fake
/// kubelet removes the pods deleted meanwhile and carries on with the others.
pub async fn heal_node(client: &Client, name: &str) -> anyhow::Result<()> {
    repair_node(client, name).await
}

/// What a node's Ready condition is set to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ready {
    /// Its kubelet is ready.
    True,
    /// Its kubelet says it stopped.
    False,
    /// It stopped reporting.
    Unknown,
}

async fn set_ready(client: &Client, name: &str, ready: Ready) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let now = now();
    let (status, reason, message) = match ready {
        Ready::True => ("True", "KubeletReady", "fake kubelet is ready"),
        Ready::False => ("False", "KubeletStopped", "fake kubelet stopped"),
        Ready::Unknown => (
            "Unknown",
            "NodeStatusUnknown",
            "Kubelet stopped posting node status.",
        ),
    };
    let mut conditions = vec![json!({"type": "Ready", "status": status, "reason": reason,
        "message": message, "lastHeartbeatTime": now, "lastTransitionTime": now})];
    // The node lifecycle controller marks every condition Unknown; a kubelet that reports
    // again sets them back.
    let pressure = match ready {
        Ready::True => Some("False"),
        Ready::Unknown => Some("Unknown"),
        Ready::False => None,
    };
    if let Some(pressure) = pressure {
        for type_ in ["MemoryPressure", "DiskPressure", "PIDPressure"] {
            conditions.push(json!({"type": type_, "status": pressure, "reason": reason,
                "message": message, "lastHeartbeatTime": now, "lastTransitionTime": now}));
        }
    }
    let patch = json!({"status": {"conditions": conditions}});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .with_context(|| format!("setting node {name} Ready={status}"))?;
    Ok(())
}

/// Adds the unreachable taints (NoSchedule and NoExecute), retrying when the node changed
/// meanwhile.
async fn add_unreachable_taints(client: &Client, name: &str) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut attempts = 0;
    loop {
        let node = nodes
            .get(name)
            .await
            .with_context(|| format!("reading node {name}"))?;
        let mut taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        let before = taints.len();
        for effect in ["NoSchedule", "NoExecute"] {
            if !taints
                .iter()
                .any(|t| t.key == UNREACHABLE_TAINT && t.effect == effect)
            {
                taints.push(Taint {
                    key: UNREACHABLE_TAINT.to_owned(),
                    effect: effect.to_owned(),
                    time_added: (effect == "NoExecute").then(|| Time(Timestamp::now())),
                    value: None,
                });
            }
        }
        if taints.len() == before {
            return Ok(());
        }
        let patch = json!({
            "metadata": {"resourceVersion": node.metadata.resource_version},
            "spec": {"taints": taints},
        });
        match nodes
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 && attempts < 10 => attempts += 1,
            Err(e) => return Err(e).with_context(|| format!("tainting node {name} unreachable")),
        }
    }
}

/// Removes the not-ready and unreachable taints, retrying when the node changed meanwhile.
async fn remove_condition_taints(client: &Client, name: &str) -> anyhow::Result<Node> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut attempts = 0;
    loop {
        let node = nodes
            .get(name)
            .await
            .with_context(|| format!("reading node {name}"))?;
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        let kept: Vec<&Taint> = taints
            .iter()
            .filter(|t| t.key != NOT_READY_TAINT && t.key != UNREACHABLE_TAINT)
            .collect();
        if kept.len() == taints.len() {
            return Ok(node);
        }
        let patch = json!({
            "metadata": {"resourceVersion": node.metadata.resource_version},
            "spec": {"taints": kept},
        });
        match nodes
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(node) => return Ok(node),
            Err(kube::Error::Api(status)) if status.code == 409 && attempts < 10 => attempts += 1,
            Err(e) => return Err(e).with_context(|| format!("removing the taints of node {name}")),
        }
    }
}

/// Fake nodes with heartbeats: while it lives, a task renews the Lease in `kube-node-lease` of
/// each node it created and has not killed, every 10 s. Dropping it stops the heartbeats (the
/// nodes stay).
pub struct FakeNodes {
    client: Client,
    alive: Arc<Mutex<BTreeMap<String, bool>>>,
    renewals: Arc<AtomicU64>,
    heartbeat: tokio::task::JoinHandle<()>,
}

impl FakeNodes {
    /// Starts the heartbeat task (needs a Tokio runtime).
    pub fn start(client: Client) -> Self {
        let alive: Arc<Mutex<BTreeMap<String, bool>>> = Arc::default();
        let renewals = Arc::new(AtomicU64::new(0));
        let heartbeat = tokio::spawn(heartbeat(
            client.clone(),
            Arc::clone(&alive),
            Arc::clone(&renewals),
        ));
        Self {
            client,
            alive,
            renewals,
            heartbeat,
        }
    }

    /// Creates a fake node (see [`create_node`]) and its Lease.
    pub async fn create(&self, spec: &NodeSpec) -> anyhow::Result<Node> {
        let node = create_node(&self.client, spec).await?;
        renew_lease(&self.client, &node).await?;
        self.renewals.fetch_add(1, Ordering::Relaxed);
        self.set_alive(&spec.name, true);
        Ok(node)
    }

    /// Creates many fake nodes, 16 at a time.
    pub async fn create_all(&self, specs: &[NodeSpec]) -> anyhow::Result<Vec<Node>> {
        futures::stream::iter(specs)
            .map(|spec| self.create(spec))
            .buffer_unordered(CREATE_CONCURRENCY)
            .try_collect()
            .await
    }

    /// Makes a node NotReady (see [`kill_node`]) and stops renewing its Lease.
    pub async fn kill(&self, name: &str) -> anyhow::Result<()> {
        self.set_alive(name, false);
        kill_node(&self.client, name).await
    }

    /// Makes a node Ready again (see [`repair_node`]) and renews its Lease again.
    pub async fn repair(&self, name: &str) -> anyhow::Result<()> {
        repair_node(&self.client, name).await?;
        self.set_alive(name, true);
        Ok(())
    }

    /// Cuts a node off (see [`partition_node`]) and stops renewing its Lease.
    pub async fn partition(&self, name: &str) -> anyhow::Result<()> {
        self.set_alive(name, false);
        partition_node(&self.client, name).await
    }

    /// Ends a node's partition (see [`heal_node`]) and renews its Lease again.
    pub async fn heal(&self, name: &str) -> anyhow::Result<()> {
        heal_node(&self.client, name).await?;
        self.set_alive(name, true);
        Ok(())
    }

    /// The names of the nodes created, sorted.
    pub fn names(&self) -> Vec<String> {
        self.alive
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect()
    }

    /// How many Lease writes the heartbeat made.
    pub fn lease_renewals(&self) -> u64 {
        self.renewals.load(Ordering::Relaxed)
    }

    fn set_alive(&self, name: &str, alive: bool) {
        self.alive
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_owned(), alive);
    }
}

impl Drop for FakeNodes {
    fn drop(&mut self) {
        self.heartbeat.abort();
    }
}

/// Renews the Lease of every live node every [`HEARTBEAT`].
async fn heartbeat(
    client: Client,
    alive: Arc<Mutex<BTreeMap<String, bool>>>,
    renewals: Arc<AtomicU64>,
) {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut interval = tokio::time::interval(HEARTBEAT);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    interval.tick().await;
    loop {
        interval.tick().await;
        let live: Vec<String> = alive
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(_, alive)| **alive)
            .map(|(name, _)| name.clone())
            .collect();
        futures::stream::iter(live)
            .for_each_concurrent(CREATE_CONCURRENCY, |name| {
                let nodes = nodes.clone();
                let client = client.clone();
                let renewals = Arc::clone(&renewals);
                async move {
                    let Ok(node) = nodes.get(&name).await else {
                        return;
                    };
                    match renew_lease(&client, &node).await {
                        Ok(()) => {
                            renewals.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => tracing::debug!("renewing the lease of node {name}: {e:#}"),
                    }
                }
            })
            .await;
    }
}

/// Creates or renews a node's Lease (server-side apply), owned by the node like a kubelet's.
async fn renew_lease(client: &Client, node: &Node) -> anyhow::Result<()> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let leases: Api<Lease> = Api::namespaced(client.clone(), NODE_LEASE_NAMESPACE);
    let renew_time = serde_json::to_value(MicroTime(Timestamp::now())).unwrap_or(Value::Null);
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": NODE_LEASE_NAMESPACE, "ownerReferences": [{
            "apiVersion": "v1", "kind": "Node", "name": name,
            "uid": node.metadata.uid.clone().unwrap_or_default()}]},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": renew_time},
    });
    leases
        .patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&lease),
        )
        .await
        .with_context(|| format!("renewing the lease of node {name}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builder_sets_gpus_labels_and_taints() {
        let spec = NodeSpec::new("n1")
            .gpus(8)
            .label("example.com/block", "b1")
            .taint(Taint {
                key: "gpu".into(),
                effect: "NoSchedule".into(),
                ..Taint::default()
            });
        assert_eq!(spec.capacity["nvidia.com/gpu"], "8");
        assert_eq!(spec.capacity["pods"], "110");
        assert_eq!(spec.labels["example.com/block"], "b1");
        assert_eq!(spec.taints.len(), 1);
    }

    #[test]
    fn node_ips_are_stable_and_look_like_addresses() {
        assert_eq!(node_ip("n1"), node_ip("n1"));
        assert_eq!(node_ip("n1").split('.').count(), 4);
        assert!(node_ip("n1").parse::<std::net::Ipv4Addr>().is_ok());
    }
}
