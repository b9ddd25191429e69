//! GPU devices tracked one by one on nodes that hand their GPUs out in parts (HAMi): a pod
//! asking for part of a GPU takes it on one device, a whole-GPU pod only an untouched device,
//! and every booking gives back exactly.

use std::collections::BTreeMap;

use muster_api::resources::names;
use muster_api::{Amount, Resources};
use muster_topology::{
    BestFit, Constraint, HAMI_NODE_LABEL, NVIDIA_GPU_COUNT, NoFitKind, NodeInfo, PodSetRequest,
    Topology, on_devices, place,
};
use proptest::prelude::*;

const HOST: &str = "kubernetes.io/hostname";

/// A HAMi node with `gpus` devices (split 10 ways: 10 vGPU slots each).
fn hami_node(name: &str, gpus: u32) -> NodeInfo {
    let labels: BTreeMap<String, String> = [
        (HOST, name.to_owned()),
        (HAMI_NODE_LABEL, "on".to_owned()),
        (NVIDIA_GPU_COUNT, gpus.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let allocatable = [
        (names::NVIDIA_GPU, u64::from(gpus) * 10),
        (names::CPU, 64),
        (names::PODS, 110),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), Amount::from_units(v)))
    .collect();
    NodeInfo {
        name: name.to_owned(),
        labels,
        taints: Vec::new(),
        allocatable,
        schedulable: true,
    }
}

/// `count` pods each asking for `milli` of one GPU (one vGPU slot), or for `milli / 1000`
/// whole GPUs when `milli` is a multiple of 1000.
fn set(count: u32, milli: u64) -> PodSetRequest {
    let mut requests = Resources::new();
    requests.set(names::PODS, Amount::from_units(1));
    if milli.is_multiple_of(1000) {
        requests.set(names::NVIDIA_GPU, Amount::from_milli(milli));
    } else {
        requests.set(names::NVIDIA_GPU, Amount::from_units(1));
        requests.set(names::GPU_SHARE, Amount::from_milli(milli));
    }
    PodSetRequest {
        name: "workers".into(),
        count,
        requests,
        node_selector: BTreeMap::new(),
        affinity: Vec::new(),
        tolerations: Vec::new(),
        constraint: Constraint::None,
        whole_gpus: false,
    }
}

fn topology(nodes: Vec<NodeInfo>) -> Topology {
    Topology::new(vec![HOST.to_owned()], nodes)
}

fn free(topo: &Topology, node: &str) -> Vec<u64> {
    topo.node_id(node)
        .map(|id| topo.device_free(id))
        .unwrap_or_default()
}

#[test]
fn two_pods_of_six_tenths_never_share_one_gpu() {
    let mut one = topology(vec![hami_node("h1", 1)]);
    let no_fit = place(&mut one, &[set(2, 600)], &BestFit).err();
    assert_eq!(no_fit.map(|n| n.kind), Some(NoFitKind::NotEnoughCapacity));
    assert_eq!(free(&one, "h1"), [1000], "a failed placement books nothing");

    let mut two = topology(vec![hami_node("h1", 2)]);
    let fit = place(&mut two, &[set(2, 600)], &BestFit).ok();
    let devices = fit.map(|f| f.pod_sets[0].devices.clone());
    assert_eq!(devices, Some(vec![vec![0], vec![1]]));
    assert_eq!(free(&two, "h1"), [400, 400]);
}

#[test]
fn a_share_goes_to_the_device_with_the_least_left_that_holds_it() {
    let mut topo = topology(vec![hami_node("h1", 3)]);
    for (milli, device) in [(500, 0), (300, 0), (600, 1), (200, 0), (400, 1), (100, 2)] {
        let fit = place(&mut topo, &[set(1, milli)], &BestFit).ok();
        assert_eq!(
            fit.map(|f| f.pod_sets[0].devices.clone()),
            Some(vec![vec![device]]),
            "{milli}m"
        );
    }
    assert_eq!(free(&topo, "h1"), [0, 0, 900]);
}

#[test]
fn a_whole_gpu_pod_only_takes_a_device_with_nothing_on_it() {
    let mut topo = topology(vec![hami_node("h1", 2)]);
    assert!(place(&mut topo, &[set(1, 100)], &BestFit).is_ok());
    let whole = place(&mut topo, &[set(1, 1000)], &BestFit).ok();
    assert_eq!(
        whole.map(|f| f.pod_sets[0].devices.clone()),
        Some(vec![vec![1]])
    );
    // Device 0 has 900m left but is not untouched: a second whole GPU does not fit.
    assert!(place(&mut topo, &[set(1, 1000)], &BestFit).is_err());
    assert!(place(&mut topo, &[set(1, 900)], &BestFit).is_ok());
    assert_eq!(free(&topo, "h1"), [0, 0]);
}

#[test]
fn pods_of_two_whole_gpus_take_two_untouched_devices_each() {
    let mut topo = topology(vec![hami_node("h1", 4)]);
    let fit = place(&mut topo, &[set(2, 2000)], &BestFit).ok();
    assert_eq!(
        fit.map(|f| f.pod_sets[0].devices.clone()),
        Some(vec![vec![0, 1], vec![2, 3]])
    );
}

#[test]
fn shares_never_land_on_nodes_whose_gpus_are_counted_whole() {
    let mut whole = hami_node("plain", 8);
    whole.labels.remove(HAMI_NODE_LABEL);
    let mut topo = topology(vec![whole, hami_node("h1", 1)]);
    let fit = place(&mut topo, &[set(3, 250)], &BestFit).ok();
    assert_eq!(
        fit.map(|f| f.pod_sets[0].nodes.clone()),
        Some(vec!["h1".to_owned(); 3])
    );
    let plain = topo.node_id("plain").unwrap_or_default();
    assert!(topo.device_free(plain).is_empty());
}

#[test]
fn rolling_back_a_placement_restores_every_device() {
    let mut topo = topology(vec![hami_node("h1", 2), hami_node("h2", 2)]);
    assert!(place(&mut topo, &[set(3, 300)], &BestFit).is_ok());
    let before: Vec<Vec<u64>> = ["h1", "h2"].iter().map(|n| free(&topo, n)).collect();
    let mark = topo.mark();
    assert!(place(&mut topo, &[set(2, 700), set(1, 1000)], &BestFit).is_ok());
    topo.rollback(mark);
    let after: Vec<Vec<u64>> = ["h1", "h2"].iter().map(|n| free(&topo, n)).collect();
    assert_eq!(before, after);
}

proptest! {
    /// Any mix of shares and whole GPUs, placed by any policy and then given back in any
    /// order: no device ever holds more than one GPU, and giving every pod back leaves every
    /// device whole.
    #[test]
    fn no_device_goes_over_one_gpu_and_give_back_is_exact(
        pods in proptest::collection::vec(
            prop_oneof![(1u64..=99).prop_map(|p| p * 10), Just(1000u64), Just(2000u64)],
            1..40,
        ),
        order in any::<u64>(),
        policy in proptest::sample::select(muster_topology::POLICY_NAMES.to_vec()),
    ) {
        let policy = muster_topology::by_name(policy).unwrap_or_else(|| Box::new(BestFit));
        let mut topo = topology(vec![hami_node("h1", 4), hami_node("h2", 2)]);
        let mut booked: Vec<(String, Resources, Vec<u32>)> = Vec::new();
        for milli in pods {
            let req = set(1, milli);
            if let Ok(fit) = place(&mut topo, std::slice::from_ref(&req), policy.as_ref()) {
                let placed = &fit.pod_sets[0];
                booked.push((placed.nodes[0].clone(), req.requests, placed.devices[0].clone()));
            }
            for node in ["h1", "h2"] {
                let id = topo.node_id(node).unwrap_or_default();
                let mut used = vec![0u64; topo.device_free(id).len()];
                for (n, requests, devices) in &booked {
                    if n == node {
                        for d in devices {
                            let each = on_devices(requests, devices)
                                .get(&names::gpu_device(*d))
                                .milli();
                            used[*d as usize] += each;
                        }
                    }
                }
                prop_assert!(used.iter().all(|u| *u <= 1000), "{node}: {used:?}");
                let left: Vec<u64> = used.iter().map(|u| 1000 - u).collect();
                prop_assert_eq!(topo.device_free(id), left);
            }
        }
        // Give back in a shuffled order.
        let mut rng = muster_topology::Rng::new(order);
        while !booked.is_empty() {
            let i = rng.below(booked.len());
            let (node, requests, devices) = booked.swap_remove(i);
            let id = topo.node_id(&node).unwrap_or_default();
            topo.remove_usage(id, &on_devices(&requests, &devices));
        }
        prop_assert_eq!(free(&topo, "h1"), vec![1000; 4]);
        prop_assert_eq!(free(&topo, "h2"), vec![1000; 2]);
    }
}

/// The share policies (`packing`, `random`, `fgd`) choose node and device for each share; the
/// same placements in the same order give the same choices, and each choice is one a device
/// can hold.
#[test]
fn share_policies_place_every_share_and_repeat_themselves() {
    let shares = [500, 300, 700, 250, 250, 100, 600, 400, 900, 50];
    for name in ["packing", "random", "fgd"] {
        let run = || {
            let policy = muster_topology::by_name(name).unwrap_or_else(|| Box::new(BestFit));
            let mut topo = topology(vec![
                hami_node("h1", 2),
                hami_node("h2", 2),
                hami_node("h3", 1),
            ]);
            let mut placed = Vec::new();
            for milli in shares {
                let fit = place(&mut topo, &[set(1, milli)], policy.as_ref()).ok();
                placed.push(
                    fit.map(|f| (f.pod_sets[0].nodes.clone(), f.pod_sets[0].devices.clone())),
                );
            }
            (placed, ["h1", "h2", "h3"].map(|n| free(&topo, n)))
        };
        let (first, left) = run();
        assert_eq!(
            (first.clone(), left.clone()),
            run(),
            "{name} repeats itself"
        );
        // A policy may leave a share unplaced (fragmentation is what they trade), never
        // half-booked: what the devices lost is what was placed.
        let placed: u64 = first
            .iter()
            .zip(shares)
            .filter(|(p, _)| p.is_some())
            .map(|(_, milli)| milli)
            .sum();
        assert!(placed >= 3000, "{name}: {first:?}");
        let used: u64 = left.iter().flatten().map(|f| 1000 - f).sum();
        assert_eq!(used, placed, "{name}: every placed share booked once");
    }
}

/// A gang of shares under a share policy goes to the domain the policy's domain level chose
/// and stays there.
#[test]
fn gangs_of_shares_keep_their_required_domain_under_a_share_policy() {
    let block = |name: &str, b: &str| {
        let mut n = hami_node(name, 2);
        n.labels.insert("block".to_owned(), b.to_owned());
        n
    };
    let mut topo = Topology::new(
        vec!["block".to_owned(), HOST.to_owned()],
        vec![block("a1", "a"), block("a2", "a"), block("b1", "b")],
    );
    let packing = muster_topology::by_name("packing").unwrap_or_else(|| Box::new(BestFit));
    assert!(place(&mut topo, &[set(1, 200)], packing.as_ref()).is_ok());
    let mut gang = set(3, 500);
    gang.constraint = Constraint::Required("block".to_owned());
    let fit = place(&mut topo, &[gang], packing.as_ref()).ok();
    let nodes = fit.map(|f| (f.pod_sets[0].domain.clone(), f.pod_sets[0].nodes.clone()));
    let Some((domain, nodes)) = nodes else {
        unreachable!("the gang fits a block")
    };
    let [(level, block)] = domain.as_slice() else {
        unreachable!("one level: {domain:?}")
    };
    assert_eq!(level, "block");
    assert_eq!(nodes.len(), 3);
    assert!(
        nodes.iter().all(|n| n.starts_with(block.as_str())),
        "{block}: {nodes:?}"
    );
}

/// Best fit puts a gang in the block with the least room that holds it; `fgd-gang` in the
/// block where the gang adds least fragmentation against the workload it has seen. Here the
/// tightest block is an untouched GPU, which two 400m pods would spoil for whole-GPU pods,
/// while the other block's GPUs each have 400m left that no whole-GPU pod can use anyway.
#[test]
fn fgd_gang_puts_a_gang_in_the_block_it_fragments_least() {
    let block = |name: &str, b: &str, gpus: u32| {
        let mut n = hami_node(name, gpus);
        n.labels.insert("block".to_owned(), b.to_owned());
        n
    };
    let fleet = || {
        let mut topo = Topology::new(
            vec!["block".to_owned(), HOST.to_owned()],
            vec![block("a1", "a", 1), block("b1", "b", 4)],
        );
        // b1's four GPUs each get 600m.
        for _ in 0..4 {
            let mut pod = set(1, 600);
            pod.node_selector.insert(HOST.to_owned(), "b1".to_owned());
            assert!(place(&mut topo, &[pod], &BestFit).is_ok());
        }
        assert_eq!(free(&topo, "b1"), [400, 400, 400, 400]);
        topo
    };
    let mut gang = set(2, 400);
    gang.constraint = Constraint::Required("block".to_owned());
    let block_of =
        |fit: Option<muster_topology::Fit>| fit.map(|f| f.pod_sets[0].domain[0].1.clone());

    let mut by_best_fit = fleet();
    let fit = place(&mut by_best_fit, std::slice::from_ref(&gang), &BestFit).ok();
    assert_eq!(
        block_of(fit).as_deref(),
        Some("a"),
        "a holds 2 such pods, b 4"
    );

    let fgd_gang = muster_topology::by_name("fgd-gang").unwrap_or_else(|| Box::new(BestFit));
    assert_eq!(fgd_gang.name(), "fgd-gang");
    // The workload so far: mostly whole GPUs.
    let whole = muster_topology::shared::ShareRequest::new(0, 0, 1, 1000, Vec::new())
        .unwrap_or_else(|e| unreachable!("{e}"));
    fgd_gang.observe(&whole, 20);
    let mut by_fgd_gang = fleet();
    let fit = place(&mut by_fgd_gang, &[gang], fgd_gang.as_ref()).ok();
    assert_eq!(block_of(fit).as_deref(), Some("b"));
    assert_eq!(
        free(&by_fgd_gang, "a1"),
        [1000],
        "the untouched GPU stays whole"
    );
    assert_eq!(free(&by_fgd_gang, "b1"), [0, 0, 400, 400]);
}

proptest! {
    /// Booking a pod by its requests and the devices it took (`add_pod`, `remove_pod`, and
    /// `remove_pods` for a pod set's pods at once) changes a topology exactly as booking what
    /// it uses by name does (`add_usage` and
    /// `remove_usage` of `on_devices`), shares, whole GPUs, devices a node lacks and pods that
    /// took none alike.
    #[test]
    fn a_pod_booked_by_its_devices_books_what_its_usage_by_name_does(
        pods in proptest::collection::vec(
            (
                0usize..2,
                prop_oneof![(1u64..=99).prop_map(|p| p * 10), Just(1000u64), Just(2000u64)],
                proptest::collection::vec(0u32..6, 0..3),
            ),
            1..30,
        ),
        leaving in any::<u64>(),
    ) {
        let fleet = || topology(vec![hami_node("h1", 4), hami_node("h2", 2)]);
        let (mut by_pod, mut by_name) = (fleet(), fleet());
        let same = |a: &Topology, b: &Topology| {
            ["h1", "h2"].iter().all(|node| {
                let id = a.node_id(node).unwrap_or_default();
                a.used(id) == b.used(id) && a.free(id) == b.free(id) && a.device_free(id) == b.device_free(id)
            })
        };
        let mark = by_pod.mark();
        for (node, milli, devices) in &pods {
            let requests = set(1, *milli).requests;
            by_pod.add_pod(*node, &requests, devices);
            by_name.add_usage(*node, &on_devices(&requests, devices));
            prop_assert!(same(&by_pod, &by_name));
        }
        let names = ["h1", "h2"];
        let gone: Vec<&(usize, u64, Vec<u32>)> = pods
            .iter()
            .enumerate()
            .filter(|(i, _)| leaving >> (i % 64) & 1 == 1)
            .map(|(_, pod)| pod)
            .collect();
        if leaving >> 63 == 1 {
            // As a pod set leaves: every pod of one request at once, by node name.
            let mut sizes: Vec<u64> = gone.iter().map(|(_, milli, _)| *milli).collect();
            sizes.sort_unstable();
            sizes.dedup();
            for size in sizes {
                let requests = set(1, size).requests;
                let of_size = gone.iter().filter(|(_, milli, _)| *milli == size);
                by_pod.remove_pods(
                    of_size.clone().map(|(node, _, devices)| (names[*node], devices.as_slice())),
                    &requests,
                );
                for (node, _, devices) in of_size {
                    by_name.remove_usage(*node, &on_devices(&requests, devices));
                }
                prop_assert!(same(&by_pod, &by_name));
            }
        } else {
            for (node, milli, devices) in gone {
                let requests = set(1, *milli).requests;
                by_pod.remove_pod(*node, &requests, devices);
                by_name.remove_usage(*node, &on_devices(&requests, devices));
                prop_assert!(same(&by_pod, &by_name));
            }
        }
        by_pod.rollback(mark);
        prop_assert!(same(&by_pod, &fleet()));
    }
}
