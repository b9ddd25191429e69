use muster_topology::shared::{GPU_MILLI, ShareRequest, SharedNode};

use super::{FillError, FillOptions, FillRow, csv, fill, mean};

fn pod(gpus: u32, milli: u32) -> ShareRequest {
    ShareRequest::new(2_000, 1_024, gpus, milli, Vec::new()).unwrap_or_else(|e| unreachable!("{e}"))
}

fn fleet() -> Vec<SharedNode> {
    (0..10)
        .map(|i| SharedNode::new(format!("n{i}"), "V100M16", 64_000, 262_144, 8))
        .collect()
}

fn mixed() -> Vec<ShareRequest> {
    let mut pods = Vec::new();
    for i in 0..40u32 {
        pods.push(match i % 4 {
            0 => pod(1, GPU_MILLI),
            1 => pod(1, 300 + 100 * (i % 5)),
            2 => pod(2, GPU_MILLI),
            _ => pod(0, 0),
        });
    }
    pods
}

#[test]
fn the_same_seed_gives_the_same_curve_and_another_seed_another_order() {
    for policy in ["best-fit", "packing", "random", "fgd"] {
        let a = fill(&fleet(), &mixed(), policy, 42, &FillOptions::default());
        let b = fill(&fleet(), &mixed(), policy, 42, &FillOptions::default());
        assert_eq!(a, b, "{policy}");
    }
}

#[test]
fn a_curve_has_a_row_per_whole_percent_up_to_the_target_and_never_allocates_more_than_arrived() {
    let rows = fill(&fleet(), &mixed(), "fgd", 1, &FillOptions::default())
        .unwrap_or_else(|e| unreachable!("{e}"));
    let xs: Vec<u32> = rows.iter().map(|r| r.arrived_percent).collect();
    assert_eq!(xs.first(), Some(&0));
    assert!(xs.windows(2).all(|w| w[1] == w[0] + 1), "{xs:?}");
    assert!(
        *xs.last().unwrap_or(&0) <= 130 && *xs.last().unwrap_or(&0) >= 125,
        "{xs:?}"
    );
    for r in &rows {
        assert!(
            r.allocated_percent <= f64::from(r.arrived_percent) + 0.5,
            "{r:?}"
        );
        assert!(
            r.allocated_percent <= 100.0 && r.fragmented_percent >= 0.0,
            "{r:?}"
        );
    }
}

#[test]
fn whole_single_gpu_pods_fill_the_fleet_with_nothing_fragmented() {
    let pods = vec![pod(1, GPU_MILLI)];
    for policy in ["best-fit", "packing", "fgd"] {
        let rows = fill(&fleet(), &pods, policy, 3, &FillOptions::default())
            .unwrap_or_else(|e| unreachable!("{e}"));
        let at = |x: u32| rows.iter().find(|r| r.arrived_percent == x).cloned();
        let full = at(120).unwrap_or_else(|| unreachable!("{rows:?}"));
        assert!(
            (full.allocated_percent - 100.0).abs() < 1e-9,
            "{policy}: {full:?}"
        );
        let half = at(50).unwrap_or_else(|| unreachable!("{rows:?}"));
        assert!(
            (half.allocated_percent - 50.0).abs() < 1.0,
            "{policy}: {half:?}"
        );
        assert!(
            rows.iter().all(|r| r.fragmented_percent.abs() < 1e-9),
            "{policy}"
        );
    }
}

#[test]
fn shares_packed_onto_few_devices_leave_less_fragmented_than_random() {
    // Shares of 500 and whole GPUs: two shares fill a device exactly when packed.
    let pods: Vec<ShareRequest> = (0..20)
        .map(|i| {
            if i % 2 == 0 {
                pod(1, 500)
            } else {
                pod(1, GPU_MILLI)
            }
        })
        .collect();
    let at_100 = |policy: &str| {
        let runs: Vec<Vec<FillRow>> = (0..5)
            .map(|seed| {
                fill(&fleet(), &pods, policy, seed, &FillOptions::default())
                    .unwrap_or_else(|e| unreachable!("{e}"))
            })
            .collect();
        mean(&runs)
            .into_iter()
            .find(|r| r.arrived_percent == 100)
            .map_or(0.0, |r| r.allocated_percent)
    };
    assert!(at_100("fgd") > at_100("random"));
    assert!(at_100("packing") > at_100("random"));
}

#[test]
fn a_fleet_without_gpus_a_trace_without_gpu_pods_or_an_unknown_policy_is_refused() {
    let cpu_only = vec![SharedNode::new("c", "", 64_000, 1_024, 0)];
    assert_eq!(
        fill(&cpu_only, &mixed(), "fgd", 1, &FillOptions::default()),
        Err(FillError::NoGpus)
    );
    assert_eq!(
        fill(&fleet(), &[pod(0, 0)], "fgd", 1, &FillOptions::default()),
        Err(FillError::NoGpuPods)
    );
    assert!(matches!(
        fill(
            &fleet(),
            &mixed(),
            "dot-product",
            1,
            &FillOptions::default()
        ),
        Err(FillError::UnknownPolicy(_))
    ));
}

#[test]
fn the_csv_has_the_documented_columns() {
    let rows = vec![FillRow {
        policy: "fgd".into(),
        arrived_percent: 7,
        allocated_percent: 6.5,
        fragmented_percent: 0.126,
    }];
    assert_eq!(
        csv(&rows),
        "policy,arrived_percent,allocated_percent,fragmented_percent\nfgd,7,6.50,0.13\n"
    );
}
