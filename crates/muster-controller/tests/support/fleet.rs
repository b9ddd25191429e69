//! A fleet with everything admission weighs, for tests that drive many passes over it: two
//! ClusterQueues that lend and borrow in a cohort (with priorities and preemption), one that
//! buys its capacity through ProvisioningRequests, one of GPU shares on HAMi nodes, and three
//! flavors (H100 and A100 blocks, HAMi nodes).

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use muster_api::{ClusterQueue, GpuJob, LocalQueue, ProvisioningRequest, ResourceFlavor};
use muster_controller::state::State;
use serde_json::{Value, json};

use super::{at, namespace, object};

/// The topology level of the fleet's blocks.
pub const BLOCK: &str = "example.com/block";
/// The node label the autoscaler's node pools carry (and the queue that buys selects by).
pub const NODE_POOL: &str = "cloud.google.com/gke-nodepool";

/// The ClusterQueues, each with a LocalQueue of the same name in its own namespace.
pub const QUEUES: [(&str, &str); 4] = [
    ("research", "team-a"),
    ("prod", "team-b"),
    ("bought", "team-c"),
    ("shares", "team-s"),
];

/// How the fleet is laid out and what its queues allow.
#[derive(Clone, Debug)]
pub struct FleetSpec {
    /// Blocks of two 8-GPU H100 nodes.
    pub h100_blocks: u8,
    /// Whether research also has an A100 block (a second flavor, tried after H100).
    pub a100: bool,
    /// research's and prod's H100 quota, in GPUs.
    pub research_gpus: u32,
    /// See `research_gpus`.
    pub prod_gpus: u32,
    /// How much of its quota prod lends to the cohort (`None`: all of it).
    pub prod_lends: Option<u32>,
    /// How much research may borrow from the cohort (`None`: any amount).
    pub research_borrows: Option<u32>,
    /// Whether research and prod preempt lower priorities within themselves.
    pub within: bool,
    /// How they reclaim lent quota: 0 Never, 1 LowerPriority, 2 Any.
    pub reclaim: u8,
    /// Whether the first HAMi node registers its GPUs' UUIDs.
    pub hami_uuids: bool,
    /// Whether research and prod weigh evicting against waiting (`waitWhenCheaper`), and
    /// the bound on the wait (`maxWaitWhenCheaperSeconds`), short enough for scripts to
    /// reach it.
    pub cheaper_wait: Option<i64>,
}

/// An 8-GPU node with `labels` besides its host name.
pub fn gpu_node(name: &str, labels: Value) -> Node {
    let mut labels = labels;
    labels["kubernetes.io/hostname"] = json!(name);
    object(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1000Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}]}
    }))
}

/// A HAMi node: two GPUs handed out in parts (20 vGPUs), `uuids` registered or not.
pub fn hami_node(name: &str, uuids: bool) -> Node {
    let mut node: Node = object(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "pool": "hami", "gpu": "on",
            "nvidia.com/gpu.count": "2"}},
        "status": {
            "allocatable": {"nvidia.com/gpu": "20", "nvidia.com/gpucores": "200",
                "nvidia.com/gpumem-percentage": "200", "cpu": "32", "memory": "128Gi",
                "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}]}
    }));
    if uuids {
        let register = format!(
            "GPU-{name}-a,10,24576,100,NVIDIA-L4,0,true:GPU-{name}-b,10,24576,100,NVIDIA-L4,0,true:"
        );
        node.metadata.annotations = Some(
            [("hami.io/node-nvidia-register".to_owned(), register)]
                .into_iter()
                .collect(),
        );
    }
    node
}

/// `node` with its Ready condition False (its kubelet stopped reporting).
pub fn not_ready(mut node: Node) -> Node {
    if let Some(c) = node
        .status
        .as_mut()
        .and_then(|s| s.conditions.as_mut())
        .and_then(|c| c.iter_mut().find(|c| c.type_ == "Ready"))
    {
        "False".clone_into(&mut c.status);
    }
    node
}

/// A node of the autoscaler's node pool `pool` (H100, in a block of its own).
pub fn bought_node(pool: &str, name: &str) -> Node {
    gpu_node(
        name,
        json!({"gpu": "h100", BLOCK: format!("block-{pool}"), NODE_POOL: pool}),
    )
}

/// Every node the fleet starts with, by name.
pub fn nodes(spec: &FleetSpec) -> Vec<Node> {
    let mut nodes = Vec::new();
    for b in 0..spec.h100_blocks {
        for i in 0..2 {
            let name = format!("h{}", u32::from(b) * 2 + i + 1);
            nodes.push(gpu_node(
                &name,
                json!({"gpu": "h100", BLOCK: format!("b{b}")}),
            ));
        }
    }
    if spec.a100 {
        for name in ["a1", "a2"] {
            nodes.push(gpu_node(name, json!({"gpu": "a100", BLOCK: "ab"})));
        }
    }
    nodes.push(hami_node("s1", spec.hami_uuids));
    nodes.push(hami_node("s2", false));
    nodes
}

fn flavor(name: &str, labels: &Value, levels: &Value) -> ResourceFlavor {
    object(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {"nodeLabels": labels, "topologyLevels": levels}
    }))
}

fn quota(flavor: &str, resources: &Value) -> Value {
    json!({"name": flavor, "resources": resources})
}

fn cluster_queue(name: &str, spec: &Value) -> ClusterQueue {
    object(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "ClusterQueue",
        "metadata": {"name": name}, "spec": spec
    }))
}

/// The ClusterQueues of `spec`.
pub fn cluster_queues(spec: &FleetSpec) -> Vec<ClusterQueue> {
    let reclaim = ["Never", "LowerPriority", "Any"][usize::from(spec.reclaim % 3)];
    let within = if spec.within {
        "LowerPriority"
    } else {
        "Never"
    };
    let preemption = json!({"withinClusterQueue": within, "reclaimWithinCohort": reclaim,
                            "waitWhenCheaper": spec.cheaper_wait.is_some(),
                            "maxWaitWhenCheaperSeconds": spec.cheaper_wait.unwrap_or(0)});
    let mut research_h100 = json!({"name": "nvidia.com/gpu",
                                   "nominalQuota": spec.research_gpus.to_string()});
    if let Some(b) = spec.research_borrows {
        research_h100["borrowingLimit"] = json!(b.to_string());
    }
    let mut research_flavors = vec![quota("h100", &json!([research_h100]))];
    if spec.a100 {
        research_flavors.push(quota(
            "a100",
            &json!([{"name": "nvidia.com/gpu", "nominalQuota": "8"}]),
        ));
    }
    let mut prod_h100 =
        json!({"name": "nvidia.com/gpu", "nominalQuota": spec.prod_gpus.to_string()});
    if let Some(l) = spec.prod_lends {
        prod_h100["lendingLimit"] = json!(l.to_string());
    }
    vec![
        cluster_queue(
            "research",
            &json!({"namespaceSelector": {}, "cohort": "lab", "preemption": preemption,
                "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"],
                                    "flavors": research_flavors}]}),
        ),
        cluster_queue(
            "prod",
            &json!({"namespaceSelector": {}, "cohort": "lab", "preemption": preemption,
                "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"],
                                    "flavors": [quota("h100", &json!([prod_h100]))]}]}),
        ),
        cluster_queue(
            "bought",
            &json!({"namespaceSelector": {},
                "provisioning": {"className": "queued-provisioning.gke.io", "mode": "Always",
                    "retry": {"limit": 1, "baseSeconds": 60, "maxSeconds": 60},
                    "nodeSelectorFromDetails": {NODE_POOL: "NodePoolName"}},
                "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"],
                    "flavors": [quota("h100", &json!([{"name": "nvidia.com/gpu", "nominalQuota": "32"}]))]}]}),
        ),
        cluster_queue(
            "shares",
            &json!({"namespaceSelector": {},
                "resourceGroups": [{"coveredResources": ["nvidia.com/gpu", "cpu"],
                    "flavors": [quota("hami", &json!([
                        {"name": "nvidia.com/gpu", "nominalQuota": "2"},
                        {"name": "cpu", "nominalQuota": "16"}]))]}]}),
        ),
    ]
}

/// The fleet of `spec`, every cache synced (ProvisioningRequests watched), and `jobs`.
pub fn fleet(spec: &FleetSpec, jobs: Vec<GpuJob>) -> State {
    let mut state = State::new();
    state.relist_begin::<GpuJob>();
    for j in jobs {
        state.apply(j);
    }
    state.relist_done::<GpuJob>();
    state.relist_begin::<Node>();
    for n in nodes(spec) {
        state.apply(n);
    }
    state.relist_done::<Node>();
    state.relist_begin::<ResourceFlavor>();
    let levels = json!([BLOCK, "kubernetes.io/hostname"]);
    state.apply(flavor("h100", &json!({"gpu": "h100"}), &levels));
    state.apply(flavor("a100", &json!({"gpu": "a100"}), &levels));
    state.apply(flavor(
        "hami",
        &json!({"pool": "hami"}),
        &json!(["kubernetes.io/hostname"]),
    ));
    state.relist_done::<ResourceFlavor>();
    state.relist_begin::<ClusterQueue>();
    for q in cluster_queues(spec) {
        state.apply(q);
    }
    state.relist_done::<ClusterQueue>();
    state.relist_begin::<LocalQueue>();
    for (queue, ns) in QUEUES {
        state.apply::<LocalQueue>(object(json!({
            "apiVersion": "muster.dev/v1alpha1", "kind": "LocalQueue",
            "metadata": {"name": queue, "namespace": ns},
            "spec": {"clusterQueue": queue}
        })));
    }
    state.relist_done::<LocalQueue>();
    state.relist_begin::<Namespace>();
    for (_, ns) in QUEUES {
        state.apply(namespace(ns));
    }
    state.relist_done::<Namespace>();
    state.relist_begin::<Pod>();
    state.relist_done::<Pod>();
    state.relist_begin::<PriorityClass>();
    state.relist_done::<PriorityClass>();
    state.relist_begin::<ProvisioningRequest>();
    state.relist_done::<ProvisioningRequest>();
    state
}

/// What a drawn job asks for.
#[derive(Clone, Debug)]
pub struct JobSpec {
    /// Which of [`QUEUES`].
    pub queue: u8,
    /// Pods.
    pub count: u8,
    /// GPUs per pod (whole GPUs), or the share in tenths of a GPU (the shares queue).
    pub size: u8,
    /// 0, 10 or 100.
    pub priority: u8,
    /// The runtime the job announces (backfill reads it), seconds.
    pub runtime: Option<u16>,
}

/// The job `name` as `spec` draws it, created at `at(created)`.
pub fn gang(name: &str, spec: &JobSpec, created: i64) -> GpuJob {
    let (queue, ns) = QUEUES[usize::from(spec.queue) % QUEUES.len()];
    let count = 1 + spec.count % 3;
    let priority = [0, 10, 100][usize::from(spec.priority % 3)];
    let pod_set = if queue == "shares" {
        let share = format!("{}00m", 1 + spec.size % 9);
        json!({"name": "servers", "count": count, "gpuShare": share,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{
                "name": "server", "image": "server:1",
                "resources": {"requests": {"cpu": "1"}}}]}}})
    } else {
        let gpus = [2, 4, 8][usize::from(spec.size % 3)];
        json!({"name": "workers", "count": count, "topology": {"required": BLOCK},
            "template": {"spec": {"restartPolicy": "Never", "containers": [{
                "name": "main", "image": "trainer:1",
                "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]}}})
    };
    let mut job_spec = json!({"queueName": queue, "priority": priority,
        "podsReadyTimeoutSeconds": 300, "backoffLimit": 1, "podSets": [pod_set]});
    if let Some(r) = spec.runtime {
        job_spec["expectedRuntimeSeconds"] = json!(60 + i64::from(r % 600));
    }
    object(json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "GpuJob",
        "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}"),
                     "resourceVersion": "1", "generation": 1,
                     "creationTimestamp": at(created).to_string()},
        "spec": job_spec
    }))
}
