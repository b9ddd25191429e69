//! Fitter benchmarks: a 64-pod gang that must fit in one block of a 10,000-node fleet with four
//! topology levels and realistic partial usage; one pod's apply and rollback.
//!
//! Run: `cargo bench -p muster-topology --bench fit`

use std::collections::BTreeMap;

use muster_api::{Amount, Resources};
use muster_topology::{BestFit, Constraint, NodeInfo, PodSetRequest, Topology, place};

// Counts allocations, so the index's memory per node can be read off the build benchmark.
#[global_allocator]
static ALLOC: divan::AllocProfiler = divan::AllocProfiler::system();

fn main() {
    divan::main();
}

const LEVELS: [&str; 4] = [
    "cloud.google.com/gce-topology-block",
    "cloud.google.com/gce-topology-subblock",
    "cloud.google.com/gce-topology-host",
    "kubernetes.io/hostname",
];

fn gpus(n: u64) -> Resources {
    [
        ("nvidia.com/gpu".to_owned(), Amount::from_units(n)),
        ("pods".to_owned(), Amount::from_units(1)),
    ]
    .into_iter()
    .collect()
}

/// The nodes of [`fleet`], as the index receives them.
fn fleet_nodes() -> Vec<NodeInfo> {
    (0..10_000u32)
        .map(|i| {
            let (b, s, r) = (i / 1000, i / 100 % 10, i / 10 % 10);
            let name = format!("gpu-{i:05}");
            let labels = BTreeMap::from([
                (LEVELS[0].to_owned(), format!("b{b}")),
                (LEVELS[1].to_owned(), format!("b{b}-s{s}")),
                (LEVELS[2].to_owned(), format!("b{b}-s{s}-r{r}")),
                (LEVELS[3].to_owned(), name.clone()),
                (
                    "cloud.google.com/gke-accelerator".to_owned(),
                    "nvidia-h100-80gb".to_owned(),
                ),
            ]);
            let mut allocatable = gpus(8);
            allocatable.set("pods", Amount::from_units(110));
            allocatable.set("cpu", Amount::from_units(208));
            NodeInfo {
                name,
                labels,
                taints: Vec::new(),
                allocatable,
                schedulable: true,
            }
        })
        .collect()
}

/// Build the index of 10,000 nodes; divan's allocation counts give the bytes per node
/// (everything the build allocates, divided by 10,000, bounds what it keeps).
#[divan::bench]
fn build_index_of_10k_nodes(bencher: divan::Bencher) {
    bencher
        .with_inputs(fleet_nodes)
        .bench_local_values(|nodes| Topology::new(LEVELS.map(str::to_owned).to_vec(), nodes));
}

/// 10 blocks × 10 sub-blocks × 10 racks × 10 hosts of 8 GPUs. About 60% of GPUs are in use,
/// spread unevenly (a fixed pseudo-random sequence, so every run measures the same state).
fn fleet() -> Topology {
    let nodes = fleet_nodes();
    let mut topo = Topology::new(LEVELS.map(str::to_owned).to_vec(), nodes);
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    for id in 0..10_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Most nodes full or empty, some partly used, as on a busy training fleet.
        let used = match x % 10 {
            0..=4 => 8,
            5..=6 => 0,
            _ => x % 8,
        };
        topo.add_usage(id, &gpus(used));
    }
    topo.commit();
    topo
}

fn gang(count: u32) -> Vec<PodSetRequest> {
    vec![PodSetRequest {
        name: "workers".into(),
        count,
        requests: gpus(8),
        node_selector: BTreeMap::from([(
            "cloud.google.com/gke-accelerator".to_owned(),
            "nvidia-h100-80gb".to_owned(),
        )]),
        affinity: Vec::new(),
        tolerations: Vec::new(),
        constraint: Constraint::Required(LEVELS[0].to_owned()),
        whole_gpus: false,
    }]
}

/// Place a 64 × 8-GPU gang in one block, then roll it back. The topology has seen the gang's
/// selector before (one placement before timing), as it has for every job of a queue after the
/// first.
#[divan::bench]
fn gang_64_in_one_block_of_10k_nodes(bencher: divan::Bencher) {
    let mut topo = fleet();
    let job = gang(64);
    let mark = topo.mark();
    assert!(
        place(&mut topo, &job, &BestFit).is_ok(),
        "the fleet must hold the gang"
    );
    topo.rollback(mark);
    bencher.bench_local(|| {
        let mark = topo.mark();
        let fit = place(&mut topo, &job, &BestFit);
        assert!(fit.is_ok(), "the fleet must hold the gang");
        topo.rollback(mark);
    });
}

/// The same gang on a topology that has not seen its selector yet: the first job of a new
/// selector pays for the label checks on every node.
#[divan::bench(sample_size = 1)]
fn gang_64_in_one_block_first_of_its_selector(bencher: divan::Bencher) {
    let base = fleet();
    let job = gang(64);
    bencher
        .with_inputs(|| base.clone())
        .bench_local_refs(|topo| {
            let fit = place(topo, &job, &BestFit);
            assert!(fit.is_ok(), "the fleet must hold the gang");
        });
}

/// Apply one pod's usage to a node and roll it back.
#[divan::bench]
fn apply_and_rollback_one_pod(bencher: divan::Bencher) {
    let mut topo = fleet();
    let usage = gpus(1);
    bencher.bench_local(|| {
        let mark = topo.mark();
        topo.add_usage(4242, &usage);
        topo.rollback(mark);
    });
}

/// Apply one pod's usage and roll it back while the topology keeps the capacity index of one
/// request shape (each change also updates it).
#[divan::bench]
fn apply_and_rollback_one_pod_with_one_kept_shape(bencher: divan::Bencher) {
    let mut topo = fleet();
    let mark = topo.mark();
    assert!(
        place(&mut topo, &gang(64), &BestFit).is_ok(),
        "the fleet must hold the gang"
    );
    topo.rollback(mark);
    topo.commit();
    let usage = gpus(1);
    bencher.bench_local(|| {
        let mark = topo.mark();
        topo.add_usage(4242, &usage);
        topo.rollback(mark);
    });
}
