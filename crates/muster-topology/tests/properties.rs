//! Invariants of the fitter on random fleets, usage and gangs.

use std::collections::{BTreeMap, BTreeSet};

use muster_api::{Amount, Resources};
use muster_topology::{BestFit, Constraint, NodeInfo, PodSetRequest, Topology, place};
use proptest::prelude::*;

const LEVELS: [&str; 3] = ["block", "subblock", "kubernetes.io/hostname"];

fn gpus(n: u64) -> Resources {
    [
        ("nvidia.com/gpu".to_owned(), Amount::from_units(n)),
        ("pods".to_owned(), Amount::from_units(1)),
    ]
    .into_iter()
    .collect()
}

/// A fleet of (block, subblock, gpus, used gpus) nodes.
fn fleet() -> impl Strategy<Value = Vec<(u8, u8, u64, u64)>> {
    proptest::collection::vec(
        (
            0u8..4,
            0u8..3,
            prop_oneof![Just(8u64), Just(4), 1u64..9],
            0u64..9,
        ),
        1..60,
    )
}

fn build(fleet: &[(u8, u8, u64, u64)]) -> Topology {
    let nodes: Vec<NodeInfo> = fleet
        .iter()
        .enumerate()
        .map(|(i, (b, s, g, _))| NodeInfo {
            name: format!("n{i:03}"),
            labels: BTreeMap::from([
                ("block".to_owned(), format!("b{b}")),
                ("subblock".to_owned(), format!("b{b}s{s}")),
                ("kubernetes.io/hostname".to_owned(), format!("n{i:03}")),
            ]),
            taints: Vec::new(),
            allocatable: {
                let mut r = gpus(*g);
                r.set("pods", Amount::from_units(110));
                r
            },
            schedulable: true,
        })
        .collect();
    let mut topo = Topology::new(LEVELS.map(str::to_owned).to_vec(), nodes);
    for (i, (_, _, g, used)) in fleet.iter().enumerate() {
        let id = topo.node_id(&format!("n{i:03}")).unwrap_or_default();
        topo.add_usage(id, &gpus(*used.min(g)));
    }
    topo.commit();
    topo
}

fn constraint() -> impl Strategy<Value = Constraint> {
    prop_oneof![
        Just(Constraint::None),
        Just(Constraint::Required("block".into())),
        Just(Constraint::Required("subblock".into())),
        Just(Constraint::Preferred("subblock".into())),
    ]
}

fn gang() -> impl Strategy<Value = Vec<PodSetRequest>> {
    proptest::collection::vec((1u32..20, 1u64..9, constraint()), 1..3).prop_map(|sets| {
        sets.into_iter()
            .enumerate()
            .map(|(i, (count, g, constraint))| PodSetRequest {
                name: format!("set{i}"),
                count,
                requests: gpus(g),
                node_selector: BTreeMap::new(),
                affinity: Vec::new(),
                tolerations: Vec::new(),
                constraint,
                whole_gpus: false,
            })
            .collect()
    })
}

/// Every node's usage and every domain's free capacity.
fn snapshot(topo: &Topology) -> (Vec<Resources>, Vec<Resources>) {
    (
        (0..topo.nodes().len()).map(|id| topo.used(id)).collect(),
        (0..topo.domains().len())
            .map(|id| topo.domain_free(id))
            .collect(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn placements_never_overcommit_and_honour_required_levels(f in fleet(), g in gang(), policy in 0usize..3) {
        let mut topo = build(&f);
        let used_before: Vec<u64> = (0..topo.nodes().len()).map(|id| topo.used(id).get("nvidia.com/gpu").milli()).collect();
        let policy = muster_topology::by_name(muster_topology::POLICY_NAMES[policy]).unwrap_or_else(|| Box::new(BestFit));
        let fit = place(&mut topo, &g, policy.as_ref());
        let Ok(fit) = fit else { return Ok(()) };
        for (i, n) in topo.nodes().iter().enumerate() {
            // Pre-existing usage may exceed allocatable; what Muster adds never may.
            let added = topo.used(i).get("nvidia.com/gpu").milli() - used_before[i];
            let room = n.info.allocatable.get("nvidia.com/gpu").milli().saturating_sub(used_before[i]);
            prop_assert!(added <= room, "node {} over-committed", n.info.name);
        }
        for (set, req) in fit.pod_sets.iter().zip(&g) {
            prop_assert_eq!(set.nodes.len(), req.count as usize);
            if let Constraint::Required(level) = &req.constraint {
                let values: BTreeSet<String> = set.nodes.iter()
                    .map(|n| topo.nodes()[topo.node_id(n).unwrap_or_default()].info.labels[level].clone())
                    .collect();
                prop_assert_eq!(values.len(), 1);
            }
        }
    }

    #[test]
    fn rollback_restores_the_exact_state(f in fleet(), g in gang()) {
        let mut topo = build(&f);
        let before = snapshot(&topo);
        let mark = topo.mark();
        let _ = place(&mut topo, &g, &BestFit);
        let _ = place(&mut topo, &g, &BestFit);
        topo.rollback(mark);
        prop_assert_eq!(snapshot(&topo), before);
    }

    #[test]
    fn filling_a_node_takes_what_is_free_where_a_pod_fits_and_rolls_back(
        f in fleet(), g in gang(), want in 1u64..=8,
    ) {
        let mut topo = build(&f);
        let _ = place(&mut topo, &g, &BestFit);
        let mut by_name = build(&f);
        let _ = place(&mut by_name, &g, &BestFit);
        let before = snapshot(&topo);
        let mark = topo.mark();
        let request = gpus(want);
        for node in 0..topo.nodes().len() {
            let free = by_name.free(node);
            let room = request.iter().all(|(r, a)| free.get(r) >= a);
            let keep_off = topo.keep_off(&[&request]);
            let taken = topo.fill(node, &keep_off);
            prop_assert_eq!(taken.is_some(), room, "node {}", node);
            if let Some(taken) = taken {
                prop_assert_eq!(topo.resources_of(&taken), free.clone());
                by_name.add_usage(node, &free);
            }
        }
        // The same as reading each node's free resources and adding them back as usage.
        prop_assert_eq!(snapshot(&topo), snapshot(&by_name));
        topo.rollback(mark);
        prop_assert_eq!(snapshot(&topo), before);
    }

    #[test]
    fn a_fill_never_makes_room_for_what_no_node_has(
        f in fleet(), g in gang(), want in 1u64..=8,
    ) {
        let mut topo = build(&f);
        let _ = place(&mut topo, &g, &BestFit);
        let plain = gpus(want);
        // A pod asking for a resource no node has fits nowhere: keeping it off takes nothing.
        let mut unknown = plain.clone();
        unknown.set("example.com/none", Amount::from_units(1));
        prop_assert_eq!(topo.keep_off(&[&unknown, &plain]), topo.keep_off(&[&plain]));
        let nothing = topo.keep_off(&[&unknown]);
        let before = snapshot(&topo);
        for node in 0..topo.nodes().len() {
            prop_assert!(topo.fill(node, &nothing).is_none(), "node {}", node);
        }
        prop_assert_eq!(snapshot(&topo), before);
    }

    #[test]
    fn domain_free_is_the_sum_of_node_free(f in fleet(), g in gang()) {
        let mut topo = build(&f);
        let _ = place(&mut topo, &g, &BestFit);
        let mut sums = vec![Resources::new(); topo.domains().len()];
        for (node, n) in topo.nodes().iter().enumerate() {
            let mut at = Some(n.domain);
            while let Some(id) = at {
                sums[id].add_all(&topo.free(node));
                at = topo.domains()[id].parent;
            }
        }
        for (id, d) in topo.domains().iter().enumerate() {
            prop_assert_eq!(&topo.domain_free(id), &sums[id], "domain {}", d.value);
        }
    }

    #[test]
    fn same_input_same_output(f in fleet(), g in gang()) {
        let mut a = build(&f);
        let mut b = build(&f);
        prop_assert_eq!(place(&mut a, &g, &BestFit), place(&mut b, &g, &BestFit));
    }
}

proptest! {
    /// The topology's eligibility (interned labels, cached per selector) says exactly what the
    /// plain check on each node's label strings says, asked once or twice.
    #[test]
    fn eligibility_agrees_with_the_label_check(
        fleet in fleet(),
        selector in proptest::collection::btree_map(
            prop_oneof![Just("block".to_owned()), Just("subblock".to_owned()), Just("absent".to_owned())],
            prop_oneof![Just("b0".to_owned()), Just("b1".to_owned()), Just("b1s2".to_owned())],
            0..3,
        ),
    ) {
        let mut topo = build(&fleet);
        let req = PodSetRequest {
            name: "set".into(),
            count: 1,
            requests: gpus(1),
            node_selector: selector,
            affinity: Vec::new(),
            tolerations: Vec::new(),
            constraint: Constraint::None,
            whole_gpus: false,
        };
        let direct: Vec<bool> = topo
            .nodes()
            .iter()
            .map(|n| req.node_mismatch(&n.info).is_none())
            .collect();
        prop_assert_eq!(&topo.eligibility(&req)[..], &direct[..]);
        prop_assert_eq!(&topo.eligibility(&req)[..], &direct[..]);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// A topology that has placed, rolled back and placed again (its kept capacity indexes
    /// updated by every change) places the next gang exactly as a fresh topology with the same
    /// usage does.
    #[test]
    fn a_warm_topology_places_like_a_fresh_one(f in fleet(), g1 in gang(), g2 in gang(), g3 in gang()) {
        let mut warm = build(&f);
        let mark = warm.mark();
        let _ = place(&mut warm, &g1, &BestFit);
        let _ = place(&mut warm, &g3, &BestFit);
        warm.rollback(mark);
        let first = place(&mut warm, &g2, &BestFit);
        let mut fresh = build(&f);
        if let Ok(fit) = &first {
            for (set, req) in fit.pod_sets.iter().zip(&g2) {
                for n in &set.nodes {
                    let id = fresh.node_id(n).unwrap_or_default();
                    fresh.add_usage(id, &req.requests);
                }
            }
        }
        prop_assert_eq!(place(&mut warm, &g1, &BestFit), place(&mut fresh, &g1, &BestFit));
    }
}
