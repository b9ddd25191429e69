use proptest::prelude::*;

use super::{
    DevicePacking, DevicePolicy, DeviceRandom, Fgd, GPU_MILLI, ShareError, ShareRequest,
    SharedNode, TaskMix, device_policy,
};

fn share(milli: u32) -> ShareRequest {
    ShareRequest::new(1_000, 1_024, 1, milli, Vec::new()).unwrap_or_else(|e| unreachable!("{e}"))
}

fn whole(gpus: u32) -> ShareRequest {
    ShareRequest::new(1_000, 1_024, gpus, GPU_MILLI, Vec::new())
        .unwrap_or_else(|e| unreachable!("{e}"))
}

fn node(name: &str, gpus: u8) -> SharedNode {
    SharedNode::new(name, "V100M16", 96_000, 512 * 1024, gpus)
}

#[test]
fn requests_say_what_is_wrong_with_them() {
    assert_eq!(
        ShareRequest::new(0, 0, 2, 500, Vec::new()),
        Err(ShareError::SharedMany {
            gpus: 2,
            milli: 500
        })
    );
    assert_eq!(
        ShareRequest::new(0, 0, 1, 1_500, Vec::new()),
        Err(ShareError::MilliOutOfRange(1_500))
    );
    assert_eq!(
        ShareRequest::new(0, 0, 1, 0, Vec::new()),
        Err(ShareError::MilliOutOfRange(0))
    );
    assert_eq!(
        ShareRequest::new(0, 0, 0, 300, Vec::new()),
        Err(ShareError::MilliWithoutGpus(300))
    );
}

#[test]
fn two_pods_of_six_hundred_never_share_one_gpu() {
    let mut n = node("a", 1);
    let first = n.best_devices(&share(600));
    assert_eq!(first, Some(vec![0]));
    assert_eq!(n.take(&share(600), &[0]), Ok(()));
    assert_eq!(n.best_devices(&share(600)), None);
    assert!(n.take(&share(600), &[0]).is_err());
    assert_eq!(n.best_devices(&share(400)), Some(vec![0]));
}

#[test]
fn a_whole_gpu_pod_takes_only_a_device_with_nothing_on_it() {
    let mut n = node("a", 2);
    assert_eq!(n.take(&share(100), &[0]), Ok(()));
    assert_eq!(n.best_devices(&whole(1)), Some(vec![1]));
    assert!(n.take(&whole(1), &[0]).is_err());
    assert_eq!(n.best_devices(&whole(2)), None);
}

#[test]
fn a_share_goes_onto_the_fullest_device_that_holds_it() {
    let mut n = node("a", 3);
    assert_eq!(n.take(&share(300), &[0]), Ok(()));
    assert_eq!(n.take(&share(600), &[2]), Ok(()));
    // Free: 700, 1000, 400. A 400 share fits device 2 exactly.
    assert_eq!(n.best_devices(&share(400)), Some(vec![2]));
    assert_eq!(n.best_devices(&share(500)), Some(vec![0]));
}

#[test]
fn a_model_the_pod_does_not_accept_is_never_used() {
    let n = node("a", 8);
    let t4_only = ShareRequest::new(1_000, 0, 1, GPU_MILLI, vec!["T4".to_owned()])
        .unwrap_or_else(|e| unreachable!("{e}"));
    assert!(!n.fits(&t4_only));
    let either = ShareRequest::new(
        1_000,
        0,
        1,
        GPU_MILLI,
        vec!["T4".to_owned(), "V100M16".to_owned()],
    )
    .unwrap_or_else(|e| unreachable!("{e}"));
    assert!(n.fits(&either));
}

#[test]
fn fragmentation_counts_what_a_task_could_not_use() {
    let mut n = node("a", 2);
    assert_eq!(n.take(&share(700), &[0]), Ok(()));
    // Free: 300 and 1000.
    assert_eq!(
        n.fragmentation_for(&share(500)),
        300,
        "the 300 is too small"
    );
    assert_eq!(n.fragmentation_for(&share(200)), 0, "both hold a 200");
    assert_eq!(n.fragmentation_for(&whole(1)), 300);
    assert_eq!(
        n.fragmentation_for(&whole(2)),
        1_300,
        "cannot run: all of it"
    );
    let cpu_only =
        ShareRequest::new(1_000, 0, 0, 0, Vec::new()).unwrap_or_else(|e| unreachable!("{e}"));
    assert_eq!(n.fragmentation_for(&cpu_only), 1_300);
    let hungry =
        ShareRequest::new(200_000, 0, 1, 100, Vec::new()).unwrap_or_else(|e| unreachable!("{e}"));
    assert_eq!(n.fragmentation_for(&hungry), 1_300, "too little CPU: all");
    let mix = TaskMix {
        tasks: vec![(share(500), 0.5), (whole(1), 0.5)],
    };
    assert!((n.fragmentation(&mix) - 300.0).abs() < 1e-9);
}

#[test]
fn the_task_mix_keeps_the_common_shapes_until_they_cover_the_share_asked() {
    let mut pods = vec![whole(1); 6];
    pods.extend(vec![share(500); 3]);
    pods.push(whole(8));
    let mix = TaskMix::from_pods(&pods, 0.9);
    let weights: Vec<f64> = mix.tasks.iter().map(|(_, w)| *w).collect();
    assert_eq!(mix.tasks.len(), 2, "{mix:?}");
    assert!((weights[0] - 6.0 / 9.0).abs() < 1e-9);
    assert!((weights[1] - 3.0 / 9.0).abs() < 1e-9);
    assert_eq!(TaskMix::from_pods(&pods, 1.0).tasks.len(), 3);
}

#[test]
fn packing_puts_a_share_on_a_device_in_use_before_an_empty_node() {
    let mut busy = node("busy", 8);
    assert_eq!(busy.take(&share(500), &[3]), Ok(()));
    let nodes = vec![node("empty", 8), busy];
    let pick = DevicePacking.choose(&nodes, &[0, 1], &share(400));
    assert_eq!(pick.map(|p| (p.node, p.devices)), Some((1, vec![3])));
}

#[test]
fn fgd_fills_a_hole_a_typical_task_could_not_use() {
    // Tasks are mostly whole GPUs: a 400 hole is fragmentation; filling it with a 400 share
    // removes it, while putting the share on an empty device makes a new 600 hole.
    let mix = TaskMix::from_pods(&[whole(1), whole(1), whole(1), share(400)], 1.0);
    let mut holed = node("holed", 2);
    assert_eq!(holed.take(&share(600), &[1]), Ok(()));
    let nodes = vec![node("empty", 2), holed];
    let pick = Fgd::new(mix).choose(&nodes, &[0, 1], &share(400));
    assert_eq!(pick.map(|p| (p.node, p.devices)), Some((1, vec![1])));
}

#[test]
fn every_policy_says_none_when_no_node_holds_the_pod() {
    let nodes = vec![node("a", 1)];
    let mix = TaskMix::from_pods(&[whole(1)], 1.0);
    for name in super::DEVICE_POLICY_NAMES {
        let mut policy = device_policy(name, 7, &mix).unwrap_or_else(|| unreachable!("{name}"));
        assert_eq!(policy.choose(&nodes, &[0], &whole(2)), None, "{name}");
        assert!(policy.choose(&nodes, &[0], &whole(1)).is_some(), "{name}");
    }
}

#[test]
fn random_is_the_same_for_the_same_seed() {
    let nodes: Vec<SharedNode> = (0..20).map(|i| node(&format!("n{i}"), 8)).collect();
    let order: Vec<usize> = (0..20).collect();
    let draw = |seed| {
        let mut policy = DeviceRandom::new(seed);
        (0..10)
            .filter_map(|_| policy.choose(&nodes, &order, &share(300)))
            .collect::<Vec<_>>()
    };
    assert_eq!(draw(5), draw(5));
    assert_ne!(draw(5), draw(6));
}

fn request() -> impl Strategy<Value = ShareRequest> {
    prop_oneof![
        (1u32..=GPU_MILLI).prop_map(share),
        (1u32..=4).prop_map(whole),
        (0u64..8_000).prop_map(|cpu| ShareRequest::new(cpu, 0, 0, 0, Vec::new())
            .unwrap_or_else(|e| unreachable!("{e}"))),
    ]
}

proptest! {
    /// Whatever lands, no device is ever over its 1000 milli, and giving everything back in
    /// any order leaves the node exactly as it was.
    #[test]
    fn devices_never_overflow_and_give_back_is_exact(
        gpus in 1u8..=8,
        requests in prop::collection::vec(request(), 1..40),
        policy in prop::sample::select(super::DEVICE_POLICY_NAMES.to_vec()),
        seed in any::<u64>(),
        reverse in any::<bool>(),
    ) {
        let mix = TaskMix::from_pods(&requests, 0.95);
        let mut policy = device_policy(policy, seed, &mix).unwrap_or_else(|| unreachable!());
        let empty = vec![node("a", gpus), node("b", gpus)];
        let mut nodes = empty.clone();
        let mut placed = Vec::new();
        for r in &requests {
            if let Some(pick) = policy.choose(&nodes, &[1, 0], r) {
                prop_assert_eq!(nodes[pick.node].take(r, &pick.devices), Ok(()));
                placed.push((r.clone(), pick));
            }
            for n in &nodes {
                prop_assert!(n.devices().iter().all(|&g| g <= GPU_MILLI));
            }
        }
        let used: u64 = placed.iter().map(|(r, _)| r.total_milli()).sum();
        let free: u64 = nodes.iter().map(SharedNode::free_milli).sum();
        prop_assert_eq!(used + free, 2 * u64::from(gpus) * u64::from(GPU_MILLI));
        if reverse {
            placed.reverse();
        }
        for (r, pick) in &placed {
            prop_assert_eq!(nodes[pick.node].give_back(r, &pick.devices), Ok(()));
        }
        prop_assert_eq!(nodes, empty);
    }

    /// Giving back what was never taken is refused, and changes nothing.
    #[test]
    fn giving_back_more_than_was_taken_is_refused(milli in 1u32..=GPU_MILLI) {
        let mut n = node("a", 1);
        let before = n.clone();
        prop_assert!(n.give_back(&share(milli), &[0]).is_err());
        prop_assert_eq!(n, before);
    }
}
