//! Scenario tests: real fleet shapes, real constraints, and what the fitter says.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Taint, Toleration};
use muster_api::tpu::Shape;
use muster_api::{Amount, Resources};
use muster_topology::{
    BestFit, Constraint, FragmentationAware, NoFitKind, NodeInfo, PodSetRequest, Spread, Topology,
    place,
};

const BLOCK: &str = "cloud.google.com/gce-topology-block";
const SUBBLOCK: &str = "cloud.google.com/gce-topology-subblock";
const HOST: &str = "kubernetes.io/hostname";

fn res(pairs: &[(&str, u64)]) -> Resources {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Amount::from_units(*v)))
        .collect()
}

fn node(name: &str, labels: &[(&str, &str)], alloc: &[(&str, u64)]) -> NodeInfo {
    let mut labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    labels.insert(HOST.to_owned(), name.to_owned());
    NodeInfo {
        name: name.to_owned(),
        labels,
        taints: Vec::new(),
        allocatable: res(alloc),
        schedulable: true,
    }
}

/// A GKE A3 fleet: `blocks` × 4 sub-blocks × 16 hosts × 8 GPUs.
fn a3_fleet(blocks: usize) -> Vec<NodeInfo> {
    let mut nodes = Vec::new();
    for b in 0..blocks {
        for s in 0..4 {
            for h in 0..16 {
                nodes.push(node(
                    &format!("gpu-b{b}-s{s}-h{h:02}"),
                    &[
                        (BLOCK, &format!("b-{b:02}")),
                        (SUBBLOCK, &format!("b-{b:02}-s{s}")),
                    ],
                    &[("nvidia.com/gpu", 8), ("cpu", 208), ("pods", 110)],
                ));
            }
        }
    }
    nodes
}

fn gke_levels() -> Vec<String> {
    [BLOCK, SUBBLOCK, HOST].map(str::to_owned).to_vec()
}

fn gpu_set(count: u32, gpus: u64, constraint: Constraint) -> PodSetRequest {
    PodSetRequest {
        name: "workers".into(),
        count,
        requests: res(&[("nvidia.com/gpu", gpus), ("pods", 1)]),
        node_selector: BTreeMap::new(),
        affinity: Vec::new(),
        tolerations: Vec::new(),
        constraint,
        whole_gpus: false,
    }
}

fn label_of<'a>(topo: &'a Topology, node: &str, key: &str) -> &'a str {
    let id = topo.node_id(node).unwrap_or_default();
    topo.nodes()[id]
        .info
        .labels
        .get(key)
        .map_or("", String::as_str)
}

/// Uses `hosts` whole hosts of every block, leaving the rest free.
fn occupy(topo: &mut Topology, per_block_busy: usize) {
    let busy: Vec<usize> = topo
        .nodes()
        .iter()
        .enumerate()
        .filter(|(_, n)| {
            let h: usize = n
                .info
                .name
                .rsplit('h')
                .next()
                .and_then(|h| h.parse().ok())
                .unwrap_or(0);
            let s: usize = n
                .info
                .name
                .split("-s")
                .nth(1)
                .and_then(|s| s[..1].parse().ok())
                .unwrap_or(0);
            s * 16 + h < per_block_busy
        })
        .map(|(id, _)| id)
        .collect();
    for id in busy {
        topo.add_usage(id, &res(&[("nvidia.com/gpu", 8), ("pods", 1)]));
    }
    topo.commit();
}

#[test]
fn a_block_gang_lands_in_one_block_with_neighbours_in_one_subblock() {
    let mut topo = Topology::new(gke_levels(), a3_fleet(4));
    let fit = place(
        &mut topo,
        &[gpu_set(16, 8, Constraint::Required(BLOCK.into()))],
        &BestFit,
    );
    let fit = fit.unwrap_or_else(|e| unreachable!("{}", e.message));
    let set = &fit.pod_sets[0];
    assert_eq!(set.nodes.len(), 16);
    let blocks: std::collections::BTreeSet<&str> = set
        .nodes
        .iter()
        .map(|n| label_of(&topo, n, BLOCK))
        .collect();
    assert_eq!(blocks.len(), 1);
    // 16 hosts per sub-block: the whole gang fits in one, so ring neighbours share it.
    let subs: std::collections::BTreeSet<&str> = set
        .nodes
        .iter()
        .map(|n| label_of(&topo, n, SUBBLOCK))
        .collect();
    assert_eq!(subs.len(), 1);
    assert_eq!(set.domain, vec![(BLOCK.to_owned(), "b-00".to_owned())]);
}

#[test]
fn best_fit_picks_the_tightest_block_and_spread_the_emptiest() {
    let mut topo = Topology::new(gke_levels(), a3_fleet(4));
    // Block b-02 keeps only 20 free hosts; the others 64.
    let ids: Vec<usize> = (0..topo.nodes().len())
        .filter(|id| label_of(&topo, &topo.nodes()[*id].info.name.clone(), BLOCK) == "b-02")
        .take(44)
        .collect();
    for id in ids {
        topo.add_usage(id, &res(&[("nvidia.com/gpu", 8), ("pods", 1)]));
    }
    let req = [gpu_set(16, 8, Constraint::Required(BLOCK.into()))];
    let mut t1 = topo.clone();
    let best = place(&mut t1, &req, &BestFit).map(|f| f.pod_sets[0].domain.clone());
    assert_eq!(best, Ok(vec![(BLOCK.to_owned(), "b-02".to_owned())]));
    let mut t2 = topo.clone();
    let spread = place(&mut t2, &req, &Spread).map(|f| f.pod_sets[0].domain.clone());
    assert_eq!(spread, Ok(vec![(BLOCK.to_owned(), "b-00".to_owned())]));
}

#[test]
fn fragmentation_is_named_as_such() {
    let mut topo = Topology::new(gke_levels(), a3_fleet(4));
    occupy(&mut topo, 53); // 11 free hosts in each block: 44 in all
    let err = place(
        &mut topo,
        &[gpu_set(16, 8, Constraint::Required(BLOCK.into()))],
        &BestFit,
    )
    .err();
    let err = err.unwrap_or_else(|| unreachable!("must not fit"));
    assert_eq!(err.kind, NoFitKind::NoDomainFits);
    assert!(err.fragmented);
    assert_eq!(err.best, Some(("b-00".to_owned(), 11)));
    assert_eq!(err.total_capacity, 44);
    assert!(err.message.contains("needs 16 pods with {nvidia.com/gpu: 8} each in one cloud.google.com/gce-topology-block; the best, b-00, has room for 11"), "{}", err.message);
    assert!(err.message.contains("fragmented"), "{}", err.message);
    // Unconstrained, the same gang fits across blocks.
    assert!(place(&mut topo, &[gpu_set(16, 8, Constraint::None)], &BestFit).is_ok());
}

#[test]
fn preferred_climbs_to_a_wider_level_when_it_must() {
    let mut topo = Topology::new(gke_levels(), a3_fleet(2));
    let fit = place(
        &mut topo,
        &[gpu_set(20, 8, Constraint::Preferred(SUBBLOCK.into()))],
        &BestFit,
    );
    let set = match fit {
        Ok(f) => f.pod_sets[0].clone(),
        Err(e) => unreachable!("{}", e.message),
    };
    assert_eq!(set.domain, vec![(BLOCK.to_owned(), "b-00".to_owned())]);
    // 16 in one sub-block, 4 in the next: consecutive indices stay together.
    let first: Vec<&str> = set.nodes[..16]
        .iter()
        .map(|n| label_of(&topo, n, SUBBLOCK))
        .collect();
    assert!(first.iter().all(|s| *s == first[0]));
}

#[test]
fn multi_gpu_pods_pack_onto_hosts() {
    let mut topo = Topology::new(gke_levels(), a3_fleet(1));
    let fit = place(
        &mut topo,
        &[gpu_set(8, 2, Constraint::Required(SUBBLOCK.into()))],
        &BestFit,
    );
    let nodes = fit.map(|f| f.pod_sets[0].nodes.clone()).unwrap_or_default();
    let distinct: std::collections::BTreeSet<&String> = nodes.iter().collect();
    assert_eq!(
        distinct.len(),
        2,
        "4 pods of 2 GPUs per 8-GPU host: {nodes:?}"
    );
    assert_eq!(nodes[0], nodes[3]);
}

#[test]
fn taints_selectors_and_readiness_filter_nodes() {
    let mut nodes = a3_fleet(1);
    for n in &mut nodes {
        n.taints.push(Taint {
            key: "nvidia.com/gpu".into(),
            value: Some("present".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        });
    }
    let mut topo = Topology::new(gke_levels(), nodes);
    let mut req = gpu_set(4, 8, Constraint::None);
    let err = place(&mut topo, std::slice::from_ref(&req), &BestFit).err();
    assert_eq!(
        err.as_ref().map(|e| e.kind),
        Some(NoFitKind::NoEligibleNodes)
    );
    assert!(err.is_some_and(|e| e.message.contains("64 tainted")));
    req.tolerations.push(Toleration {
        key: Some("nvidia.com/gpu".into()),
        operator: Some("Exists".into()),
        effect: Some("NoSchedule".into()),
        ..Toleration::default()
    });
    assert!(place(&mut topo, std::slice::from_ref(&req), &BestFit).is_ok());
    req.node_selector.insert(
        "cloud.google.com/gke-accelerator".into(),
        "nvidia-h100-80gb".into(),
    );
    let err = place(&mut topo, std::slice::from_ref(&req), &BestFit).err();
    assert!(err.is_some_and(|e| e.message.contains("missing a required label")));
}

#[test]
fn aws_network_layers_and_nvlink_cliques() {
    let aws = [
        "topology.k8s.aws/network-node-layer-1",
        "topology.k8s.aws/network-node-layer-2",
        "topology.k8s.aws/network-node-layer-3",
    ];
    let mut nodes = Vec::new();
    for i in 0..32 {
        nodes.push(node(
            &format!("p5-{i:02}"),
            &[
                (aws[0], "nn-1"),
                (aws[1], &format!("nn-2-{}", i / 16)),
                (aws[2], &format!("nn-3-{}", i / 4)),
            ],
            &[("nvidia.com/gpu", 8), ("pods", 110)],
        ));
    }
    let levels: Vec<String> = aws.iter().map(|s| (*s).to_owned()).collect();
    let mut topo = Topology::new(levels, nodes);
    let fit = place(
        &mut topo,
        &[gpu_set(4, 8, Constraint::Required(aws[2].into()))],
        &BestFit,
    );
    assert_eq!(fit.map(|f| f.pod_sets[0].domain.len()), Ok(3));

    // NVLink: GB200 racks expose a clique per NVL72 domain; 18 trays × 4 GPUs.
    let clique = "nvidia.com/gpu.clique";
    let nodes = (0..36).map(|i| {
        node(
            &format!("gb-{i:02}"),
            &[(clique, &format!("cl-{}", i / 18))],
            &[("nvidia.com/gpu", 4), ("pods", 110)],
        )
    });
    let topo = Topology::new(vec![clique.to_owned(), HOST.to_owned()], nodes);
    let mut fresh = topo.clone();
    let err = place(
        &mut fresh,
        &[gpu_set(19, 4, Constraint::Required(clique.into()))],
        &BestFit,
    )
    .err();
    assert_eq!(
        err.map(|e| e.kind),
        Some(NoFitKind::NoDomainFits),
        "36 free GPUs trays, but 18 per clique"
    );
    let mut topo = topo;
    let fit = place(
        &mut topo,
        &[gpu_set(18, 4, Constraint::Required(clique.into()))],
        &BestFit,
    );
    assert_eq!(
        fit.map(|f| f.pod_sets[0].domain.clone()),
        Ok(vec![(clique.to_owned(), "cl-0".to_owned())])
    );
    let err = place(
        &mut topo,
        &[gpu_set(19, 4, Constraint::Required(clique.into()))],
        &BestFit,
    )
    .err();
    assert_eq!(
        err.map(|e| e.kind),
        Some(NoFitKind::NotEnoughCapacity),
        "18 left in all after the first gang"
    );
}

#[test]
fn unknown_levels_are_reported() {
    let mut topo = Topology::new(gke_levels(), a3_fleet(1));
    let err = place(
        &mut topo,
        &[gpu_set(1, 8, Constraint::Required("rack".into()))],
        &BestFit,
    )
    .err();
    assert_eq!(err.map(|e| e.kind), Some(NoFitKind::UnknownLevel));
}

#[test]
fn a_topology_that_words_no_failures_fails_alike_without_the_words() {
    let tpu_levels = vec!["cloud.google.com/gke-nodepool".to_owned(), HOST.to_owned()];
    let cases = [
        (
            gke_levels(),
            a3_fleet(1),
            gpu_set(1, 8, Constraint::Required("rack".into())),
            NoFitKind::UnknownLevel,
        ),
        (
            gke_levels(),
            a3_fleet(2),
            gpu_set(65, 8, Constraint::Required(BLOCK.into())),
            NoFitKind::NoDomainFits,
        ),
        (
            gke_levels(),
            a3_fleet(1),
            gpu_set(65, 8, Constraint::None),
            NoFitKind::NotEnoughCapacity,
        ),
        (
            tpu_levels,
            tpu_pool("pool-a", "2x2x4", "tpu-v5p-slice", 4, 4),
            tpu_set(8, 4, "tpu-v5p-slice", "2x2x4", 2, false),
            NoFitKind::NoFreeSlices,
        ),
    ];
    for (levels, nodes, set, kind) in cases {
        let mut worded = Topology::new(levels, nodes);
        let mut quiet = worded.clone();
        quiet.set_words_failures(false);
        let said = place(&mut worded, std::slice::from_ref(&set), &BestFit).err();
        let unsaid = place(&mut quiet, std::slice::from_ref(&set), &BestFit).err();
        assert!(said.is_some() && unsaid.is_some(), "{kind:?}: both fail");
        let (Some(said), Some(mut unsaid)) = (said, unsaid) else {
            continue;
        };
        assert_eq!(said.kind, kind);
        assert!(!said.message.is_empty(), "{kind:?} is worded by default");
        assert!(unsaid.message.is_empty(), "{kind:?}: {}", unsaid.message);
        // Everything but the words is the same.
        unsaid.message.clone_from(&said.message);
        assert_eq!(said, unsaid);
    }
}

fn tpu_pool(pool: &str, shape: &str, accel: &str, hosts: usize, chips: u64) -> Vec<NodeInfo> {
    (0..hosts)
        .map(|h| {
            node(
                &format!("{pool}-h{h}"),
                &[
                    ("cloud.google.com/gke-nodepool", pool),
                    ("cloud.google.com/gke-tpu-accelerator", accel),
                    ("cloud.google.com/gke-tpu-topology", shape),
                ],
                &[("google.com/tpu", chips), ("pods", 110)],
            )
        })
        .collect()
}

fn tpu_set(
    count: u32,
    chips: u64,
    accel: &str,
    shape: &str,
    slices: u32,
    rotate: bool,
) -> PodSetRequest {
    PodSetRequest {
        name: "hosts".into(),
        count,
        requests: res(&[("google.com/tpu", chips), ("pods", 1)]),
        node_selector: BTreeMap::new(),
        affinity: Vec::new(),
        tolerations: Vec::new(),
        constraint: Constraint::Tpu {
            accelerator: accel.into(),
            shape: Shape::parse(shape).unwrap_or_else(|| unreachable!()),
            slices,
            allow_rotation: rotate,
        },
        whole_gpus: false,
    }
}

#[test]
fn tpu_v5p_slices_are_whole_pools() {
    let mut nodes = tpu_pool("pool-a", "2x2x4", "tpu-v5p-slice", 4, 4);
    nodes.extend(tpu_pool("pool-b", "2x2x4", "tpu-v5p-slice", 4, 4));
    nodes.extend(tpu_pool("pool-r", "4x2x2", "tpu-v5p-slice", 4, 4));
    let mut topo = Topology::new(
        vec!["cloud.google.com/gke-nodepool".into(), HOST.into()],
        nodes,
    );
    let job = [tpu_set(4, 4, "tpu-v5p-slice", "2x2x4", 1, false)];
    let first = place(&mut topo, &job, &BestFit).map(|f| f.pod_sets[0].nodes.clone());
    assert_eq!(
        first,
        Ok(vec![
            "pool-a-h0".into(),
            "pool-a-h1".into(),
            "pool-a-h2".into(),
            "pool-a-h3".into()
        ])
    );
    let second = place(&mut topo, &job, &BestFit).map(|f| f.pod_sets[0].domain.clone());
    assert_eq!(
        second,
        Ok(vec![(
            "cloud.google.com/gke-nodepool".into(),
            "pool-b".into()
        )])
    );
    let third = place(&mut topo, &job, &BestFit).err();
    assert_eq!(
        third.as_ref().map(|e| e.kind),
        Some(NoFitKind::NoFreeSlices)
    );
    // The rotated pool serves only a job that allows rotation.
    let rotated = [tpu_set(4, 4, "tpu-v5p-slice", "2x2x4", 1, true)];
    let fourth = place(&mut topo, &rotated, &BestFit).map(|f| f.pod_sets[0].domain.clone());
    assert_eq!(
        fourth,
        Ok(vec![(
            "cloud.google.com/gke-nodepool".into(),
            "pool-r".into()
        )])
    );
}

#[test]
fn tpu_multi_slice_needs_distinct_pools_and_partial_pools_do_not_count() {
    let mut nodes = tpu_pool("v5e-a", "4x4", "tpu-v5-lite-podslice", 4, 4);
    nodes.extend(tpu_pool("v5e-b", "4x4", "tpu-v5-lite-podslice", 3, 4)); // still scaling up
    nodes.extend(tpu_pool("v5e-c", "4x4", "tpu-v5-lite-podslice", 4, 4));
    let mut topo = Topology::new(vec![], nodes);
    let two = [tpu_set(8, 4, "tpu-v5-lite-podslice", "4x4", 2, false)];
    let fit = place(&mut topo, &two, &BestFit).map(|f| {
        f.pod_sets[0]
            .domain
            .iter()
            .map(|d| d.1.clone())
            .collect::<Vec<_>>()
    });
    assert_eq!(fit, Ok(vec!["v5e-a".to_owned(), "v5e-c".to_owned()]));
    // A used host makes its whole slice unavailable.
    let mut topo2 = Topology::new(
        vec![],
        tpu_pool("v5e-a", "4x4", "tpu-v5-lite-podslice", 4, 4),
    );
    topo2.add_usage(1, &res(&[("google.com/tpu", 1)]));
    let err = place(
        &mut topo2,
        &[tpu_set(4, 4, "tpu-v5-lite-podslice", "4x4", 1, false)],
        &BestFit,
    )
    .err();
    assert!(err.is_some_and(|e| e.message.contains("0 free, 1 more match")));
}

#[test]
fn single_host_tpu_shapes_fit_on_one_node() {
    let nodes = (0..3).map(|i| {
        node(
            &format!("v6e-{i}"),
            &[
                ("cloud.google.com/gke-tpu-accelerator", "tpu-v6e-slice"),
                ("cloud.google.com/gke-tpu-topology", "2x4"),
            ],
            &[("google.com/tpu", 8), ("pods", 110)],
        )
    });
    let mut topo = Topology::new(vec![], nodes);
    let fit = place(
        &mut topo,
        &[tpu_set(1, 8, "tpu-v6e-slice", "2x4", 1, false)],
        &BestFit,
    );
    assert_eq!(
        fit.map(|f| f.pod_sets[0].nodes.clone()),
        Ok(vec!["v6e-0".to_owned()])
    );
}

#[test]
fn later_pod_sets_see_earlier_ones_and_failure_changes_nothing() {
    let mut topo = Topology::new(gke_levels(), a3_fleet(1));
    let before: Vec<Resources> = (0..topo.nodes().len()).map(|id| topo.used(id)).collect();
    let mut launcher = gpu_set(60, 8, Constraint::Required(BLOCK.into()));
    launcher.name = "launcher".into();
    let workers = gpu_set(8, 8, Constraint::Required(BLOCK.into()));
    let err = place(&mut topo, &[launcher, workers], &BestFit).err();
    assert_eq!(err.map(|e| e.pod_set), Some("workers".to_owned()));
    let after: Vec<Resources> = (0..topo.nodes().len()).map(|id| topo.used(id)).collect();
    assert_eq!(before, after);
}

#[test]
fn same_nodes_in_any_order_give_the_same_placement() {
    let mut nodes = a3_fleet(2);
    let mut t1 = Topology::new(gke_levels(), nodes.clone());
    nodes.reverse();
    nodes.rotate_left(37);
    let mut t2 = Topology::new(gke_levels(), nodes);
    let job = [gpu_set(24, 8, Constraint::Preferred(SUBBLOCK.into()))];
    assert_eq!(
        place(&mut t1, &job, &BestFit),
        place(&mut t2, &job, &BestFit)
    );
}

#[test]
fn fragmentation_aware_keeps_whole_subblocks_whole() {
    // Sub-block s0 has 16 hosts, 4 busy: 12 free, partly used. Sub-block s1 has only 10 hosts,
    // all free: whole. For an 8-pod gang best fit takes the tightest (s1, breaking a whole
    // sub-block); fragmentation-aware fills the hole in s0; spread takes the roomiest (s2).
    let nodes = a3_fleet(1)
        .into_iter()
        .filter(|n| !(n.name.starts_with("gpu-b0-s1-h") && n.name.as_str() >= "gpu-b0-s1-h10"));
    let mut topo = Topology::new(gke_levels(), nodes);
    for h in 0..4 {
        let id = topo
            .node_id(&format!("gpu-b0-s0-h{h:02}"))
            .unwrap_or_default();
        topo.add_usage(id, &res(&[("nvidia.com/gpu", 8), ("pods", 1)]));
    }
    let job = [gpu_set(8, 8, Constraint::Required(SUBBLOCK.into()))];
    let chosen = |policy: &dyn muster_topology::Policy| {
        let mut t = topo.clone();
        place(&mut t, &job, policy).map(|f| f.pod_sets[0].domain[1].1.clone())
    };
    assert_eq!(chosen(&BestFit), Ok("b-00-s1".to_owned()));
    assert_eq!(chosen(&FragmentationAware), Ok("b-00-s0".to_owned()));
    assert_eq!(chosen(&Spread), Ok("b-00-s2".to_owned()));
}

/// Constraints on an empty two-block A3 fleet (128 hosts of 8 GPUs): how wide the chosen domain
/// is (entries in its label path), or why nothing fits.
#[rstest::rstest]
#[case::one_subblock_holds_16_hosts(16, 8, Constraint::Required(SUBBLOCK.into()), Ok(2))]
#[case::seventeen_hosts_never_fit_a_subblock(17, 8, Constraint::Required(SUBBLOCK.into()), Err(NoFitKind::NoDomainFits))]
#[case::one_block_holds_64_hosts(64, 8, Constraint::Required(BLOCK.into()), Ok(1))]
#[case::sixty_five_hosts_never_fit_a_block(65, 8, Constraint::Required(BLOCK.into()), Err(NoFitKind::NoDomainFits))]
#[case::preferred_climbs_one_level(17, 8, Constraint::Preferred(SUBBLOCK.into()), Ok(1))]
#[case::preferred_climbs_to_the_whole_flavor(65, 8, Constraint::Preferred(SUBBLOCK.into()), Ok(0))]
#[case::half_host_pods_pack_two_per_host(32, 4, Constraint::Required(SUBBLOCK.into()), Ok(2))]
#[case::unconstrained_takes_the_whole_flavor(128, 8, Constraint::None, Ok(0))]
#[case::more_than_the_fleet(129, 8, Constraint::None, Err(NoFitKind::NotEnoughCapacity))]
#[case::more_than_a_host(1, 9, Constraint::None, Err(NoFitKind::NotEnoughCapacity))]
#[case::unknown_level(1, 8, Constraint::Required("rack".into()), Err(NoFitKind::UnknownLevel))]
fn gpu_constraints_on_an_a3_fleet(
    #[case] count: u32,
    #[case] gpus: u64,
    #[case] constraint: Constraint,
    #[case] expected: Result<usize, NoFitKind>,
) {
    let mut topo = Topology::new(gke_levels(), a3_fleet(2));
    let got = place(&mut topo, &[gpu_set(count, gpus, constraint)], &BestFit)
        .map(|f| f.pod_sets[0].domain.len())
        .map_err(|e| e.kind);
    assert_eq!(got, expected);
}

/// TPU slices of four-chip hosts: which pool (if any) a one-slice request takes.
#[rstest::rstest]
#[case::v5p_exact_shape(V5P, "2x2x4", 4, V5P, "2x2x4", false, Ok("pool"))]
#[case::v5p_rotated_pool_without_rotation(
    V5P,
    "4x2x2",
    4,
    V5P,
    "2x2x4",
    false,
    Err(NoFitKind::NoFreeSlices)
)]
#[case::v5p_rotated_pool_with_rotation(V5P, "4x2x2", 4, V5P, "2x2x4", true, Ok("pool"))]
#[case::v5e_4x4(V5E, "4x4", 4, V5E, "4x4", false, Ok("pool"))]
#[case::two_d_shapes_never_rotate(V5E, "2x4", 2, V5E, "4x2", true, Err(NoFitKind::NoFreeSlices))]
#[case::other_accelerator(
    V5P,
    "2x2x4",
    4,
    "tpu-v6e-slice",
    "2x2x4",
    false,
    Err(NoFitKind::NoFreeSlices)
)]
#[case::incomplete_pool(V5P, "2x2x4", 3, V5P, "2x2x4", false, Err(NoFitKind::NoFreeSlices))]
fn tpu_slice_matching(
    #[case] pool_accelerator: &str,
    #[case] pool_shape: &str,
    #[case] pool_hosts: usize,
    #[case] job_accelerator: &str,
    #[case] job_shape: &str,
    #[case] rotate: bool,
    #[case] expected: Result<&str, NoFitKind>,
) {
    const CHIPS: u32 = 4;
    let hosts = Shape::parse(job_shape).map_or(0, |s| s.chips()) / CHIPS;
    let mut topo = Topology::new(
        vec!["cloud.google.com/gke-nodepool".into()],
        tpu_pool(
            "pool",
            pool_shape,
            pool_accelerator,
            pool_hosts,
            u64::from(CHIPS),
        ),
    );
    let job = [tpu_set(
        hosts,
        u64::from(CHIPS),
        job_accelerator,
        job_shape,
        1,
        rotate,
    )];
    let got = place(&mut topo, &job, &BestFit)
        .map(|f| f.pod_sets[0].domain[0].1.clone())
        .map_err(|e| e.kind);
    assert_eq!(got, expected.map(str::to_owned));
}

const V5P: &str = "tpu-v5p-slice";
const V5E: &str = "tpu-v5-lite-podslice";

#[test]
fn one_pod_sets_still_see_how_full_each_host_is() {
    // Host h00 has 6 GPUs in use, h01 2, the rest none: best fit packs a 1-GPU pod onto the
    // fullest host that has room, spread onto the emptiest.
    let mut topo = Topology::new(gke_levels(), a3_fleet(1));
    let busy = |topo: &Topology, name: &str| topo.node_id(name).unwrap_or_default();
    let (h00, h01) = (busy(&topo, "gpu-b0-s0-h00"), busy(&topo, "gpu-b0-s0-h01"));
    topo.add_usage(h00, &res(&[("nvidia.com/gpu", 6)]));
    topo.add_usage(h01, &res(&[("nvidia.com/gpu", 2)]));
    let job = [gpu_set(1, 1, Constraint::None)];
    let best = place(&mut topo.clone(), &job, &BestFit).map(|f| f.pod_sets[0].nodes.clone());
    assert_eq!(best, Ok(vec!["gpu-b0-s0-h00".to_owned()]));
    let spread = place(&mut topo, &job, &Spread).map(|f| f.pod_sets[0].nodes.clone());
    assert!(
        spread
            .as_ref()
            .is_ok_and(|n| n[0] != "gpu-b0-s0-h00" && n[0] != "gpu-b0-s0-h01"),
        "{spread:?}"
    );
}

#[test]
fn a_node_taken_out_of_service_gets_no_pods_and_is_named_as_such() {
    let mut topo = Topology::new(gke_levels(), a3_fleet(1));
    let job = [gpu_set(1, 8, Constraint::None)];
    // Warm the kept indexes, then take every node down: placement must not use stale ones.
    let mark = topo.mark();
    assert!(place(&mut topo, &job, &BestFit).is_ok());
    topo.rollback(mark);
    for id in 0..topo.nodes().len() {
        topo.set_schedulable(id, false);
    }
    let err = place(&mut topo, &job, &BestFit).err();
    assert_eq!(err.map(|e| e.kind), Some(NoFitKind::NoEligibleNodes));
    let back = topo.node_id("gpu-b0-s2-h05").unwrap_or_default();
    topo.set_schedulable(back, true);
    let fit = place(&mut topo, &job, &BestFit).map(|f| f.pod_sets[0].nodes.clone());
    assert_eq!(fit, Ok(vec!["gpu-b0-s2-h05".to_owned()]));
}

#[test]
fn nodes_whose_gpus_are_time_shared_replicas_are_told_by_their_labels() {
    let with = |labels: &[(&str, &str)]| node("n", labels, &[]).shares_gpus();
    assert!(!with(&[]));
    assert!(with(&[(
        muster_topology::GKE_GPU_SHARING_STRATEGY,
        "time-sharing"
    )]));
    assert!(with(&[(muster_topology::GKE_GPU_SHARING_STRATEGY, "mps")]));
    assert!(with(&[(muster_topology::GKE_MAX_SHARED_CLIENTS, "4")]));
    assert!(!with(&[(muster_topology::GKE_MAX_SHARED_CLIENTS, "1")]));
    assert!(with(&[(muster_topology::NVIDIA_GPU_REPLICAS, "2")]));
    assert!(!with(&[(muster_topology::NVIDIA_GPU_REPLICAS, "1")]));
    assert!(!with(&[(muster_topology::NVIDIA_GPU_REPLICAS, "many")]));
}

#[test]
fn a_gang_that_needs_whole_gpus_never_lands_on_shared_replicas_and_says_so() {
    // Two time-sliced nodes advertise 4 replicas of each of their 8 GPUs; one node has 8
    // whole GPUs.
    let shared = |name: &str| {
        node(
            name,
            &[(BLOCK, "b-00"), (muster_topology::NVIDIA_GPU_REPLICAS, "4")],
            &[("nvidia.com/gpu", 32), ("cpu", 208), ("pods", 110)],
        )
    };
    let whole = node(
        "whole",
        &[(BLOCK, "b-00")],
        &[("nvidia.com/gpu", 8), ("cpu", 208), ("pods", 110)],
    );
    let mut topo = Topology::new(gke_levels(), vec![shared("ts-1"), shared("ts-2")]);
    let mut req = gpu_set(2, 8, Constraint::None);
    req.whole_gpus = true;
    let err = place(&mut topo, std::slice::from_ref(&req), &BestFit).err();
    assert_eq!(
        err.as_ref().map(|e| e.kind),
        Some(NoFitKind::NoEligibleNodes)
    );
    assert!(
        err.as_ref().is_some_and(|e| e
            .message
            .contains("2 sharing their GPUs (time-slicing): the job needs whole GPUs; set spec.acceptSharedGpus")),
        "{err:?}"
    );
    // A job that accepts shared GPUs takes the replicas.
    req.whole_gpus = false;
    assert!(place(&mut topo, std::slice::from_ref(&req), &BestFit).is_ok());

    // With a whole node beside them, a one-pod gang needing whole GPUs goes there.
    let mut topo = Topology::new(gke_levels(), vec![shared("ts-1"), whole, shared("ts-2")]);
    let mut one = gpu_set(1, 8, Constraint::None);
    one.whole_gpus = true;
    let fit = place(&mut topo, std::slice::from_ref(&one), &BestFit)
        .unwrap_or_else(|e| unreachable!("{}", e.message));
    assert_eq!(fit.pod_sets[0].nodes, ["whole"]);
}
