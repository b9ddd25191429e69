//! A preemptor that waits because waiting is cheaper than evicting: only jobs about to leave
//! count, the wait is bounded, GPU time is weighed by what jobs hold, and an unknown is never
//! read as a figure. Each rule is a scenario that a victim could otherwise use to make itself
//! unpreemptable, or that would weigh a job wrongly.

mod support;

use std::collections::BTreeMap;

use muster_admission::{Decision, Holding, PendingReason, PodSetPlacement, Scheduler};
use muster_api::ClusterQueueSpec;
use muster_api::cluster_queue::{PreemptionPolicy, ReclaimWithinCohort, WithinClusterQueue};
use muster_api::gpujob::PendingReasonKind;
use muster_topology::NodeInfo;
use support::{
    BLOCK, GPU, HOST, admitted, cq, cycle, flavor, fleet, job, job_of, preempted, preempting,
    reason_of, res, runs_for, scheduler,
};

/// A queue of `resource` whose jobs preempt lower priorities, weighing the wait, bounded by
/// `max_wait` seconds when given (else the default).
fn weighing(resource: &str, max_wait: Option<i64>) -> ClusterQueueSpec {
    preempting(
        cq(None, &[("h100", &[(resource, 1000, None, None)])]),
        PreemptionPolicy {
            within_cluster_queue: WithinClusterQueue::LowerPriority,
            reclaim_within_cohort: ReclaimWithinCohort::Never,
            wait_when_cheaper: Some(true),
            max_wait_when_cheaper_seconds: max_wait,
        },
    )
}

/// One block of two 8-GPU hosts, one queue `q` weighing the wait with `max_wait`.
fn two_hosts(max_wait: Option<i64>) -> Scheduler {
    scheduler(
        &fleet("h100", 1, 2),
        vec![flavor("h100")],
        vec![("q", weighing(GPU, max_wait))],
    )
}

/// Cycles every 10 s from `from` to `to`, carrying evictions out at once; the time `id`
/// was admitted, if it was.
fn admitted_by(s: &mut Scheduler, id: &str, from: i64, to: i64) -> Option<i64> {
    (from..=to)
        .step_by(10)
        .find(|t| admitted(&cycle(s, *t)).iter().any(|a| a == id))
}

#[test]
fn a_preemptor_whose_victim_overruns_its_announced_runtime_starts_within_the_bound() {
    // low announces 1,100 s and never ends on its own. At t=1,000 its end is 100 s away and
    // it would lose 16 GPUs × 1,000 s: high (16 GPUs) waits for it, told why and until when.
    let mut s = two_hosts(None);
    s.submit(runs_for(job("low", "q", 0, 0, 2, 8), 1_100));
    assert_eq!(admitted(&cycle(&mut s, 0)), vec!["low"]);
    s.submit(runs_for(job("high", "q", 100, 1_000, 2, 8), 500));
    let d = cycle(&mut s, 1_000);
    assert!(preempted(&d).is_empty(), "{d:#?}");
    let Some(PendingReason::PreemptionDeferred(deferral)) = reason_of(&d, "high") else {
        unreachable!("high waits for the cheaper path: {d:#?}")
    };
    assert_eq!(deferral.victims, vec!["ns/low".to_owned()]);
    assert_eq!(
        (deferral.starts, deferral.since, deferral.until),
        (1_100, 1_000, 2_800)
    );
    assert_eq!(deferral.lost_milli, 16 * 1000 * 1000);
    assert_eq!(deferral.waiting_milli, 16 * 1000 * 100);
    assert_eq!(
        PendingReason::PreemptionDeferred(deferral.clone()).kind(),
        PendingReasonKind::PreemptionDeferred
    );
    let message = reason_of(&d, "high").map(PendingReason::message);
    assert!(
        message
            .as_deref()
            .is_some_and(|m| m.contains("ns/low") && m.contains("t=2800s")),
        "{message:?}"
    );
    assert_eq!(s.deferred().collect::<Vec<_>>(), vec![("ns/high", 1_000)]);
    // Once low is past its announced end it is no longer about to leave: high evicts it.
    let started = admitted_by(&mut s, "high", 1_010, 5_000);
    assert!(
        started.is_some_and(|t| t <= 2_800),
        "high started at {started:?}"
    );
    assert_eq!(s.deferred().count(), 0, "a job that started defers nothing");
}

#[test]
fn a_wait_longer_than_the_bound_is_not_taken() {
    // low ends 2,000 s from now; waiting would still cost far less than its 16 × 10,000
    // GPU-seconds, but 2,000 s is past the 1,800 s bound: evict now rather than at the bound.
    for (max_wait, waits) in [(None, false), (Some(2_400), true), (Some(0), false)] {
        let mut s = two_hosts(max_wait);
        s.submit(runs_for(job("low", "q", 0, 0, 2, 8), 12_000));
        assert_eq!(admitted(&cycle(&mut s, 0)), vec!["low"]);
        s.submit(runs_for(job("high", "q", 100, 10_000, 2, 8), 500));
        let d = cycle(&mut s, 10_000);
        assert_eq!(
            preempted(&d).is_empty(),
            waits,
            "max wait {max_wait:?}: {d:#?}"
        );
    }
}

#[test]
fn the_bound_counts_from_the_first_wait_even_in_a_scheduler_built_afresh() {
    // A scheduler built afresh for a pass (as the controller's is, now and then) learns
    // from its caller that high has waited since t=0: at t=2,000 its 1,800 s are over.
    let build = |resume: bool| {
        let mut s = two_hosts(None);
        s.submit(runs_for(job("low", "q", 0, 0, 2, 8), 2_100));
        assert_eq!(admitted(&cycle(&mut s, 0)), vec!["low"]);
        s.submit(runs_for(job("high", "q", 100, 0, 2, 8), 500));
        if resume {
            s.resume_deferral("ns/high", 0);
        }
        s
    };
    let d = cycle(&mut build(false), 2_000);
    assert!(preempted(&d).is_empty(), "a first wait is taken: {d:#?}");
    let d = cycle(&mut build(true), 2_000);
    assert_eq!(preempted(&d), vec!["low"], "the bound has passed: {d:#?}");
}

#[test]
fn a_victim_whose_admission_time_is_unknown_is_not_weighed() {
    // A job restored from a status that lost its Admitted time: its work at stake is not
    // known (read as admitted at 0 it would look enormous, and high would wait for it).
    let mut s = two_hosts(None);
    let low = runs_for(job("low", "q", 0, 0, 2, 8), 1_100);
    let nodes = vec!["h100-b0-h00".to_owned(), "h100-b0-h01".to_owned()];
    s.restore(
        low,
        Holding {
            cluster_queue: "q".into(),
            since: None,
            pod_sets: vec![placement(nodes)],
        },
        false,
    );
    s.submit(runs_for(job("high", "q", 100, 1_000, 2, 8), 500));
    let d = cycle(&mut s, 1_000);
    assert_eq!(preempted(&d), vec!["low"], "{d:#?}");
}

#[test]
fn a_preemptor_blocked_only_by_jobs_of_unknown_end_evicts() {
    // low announces no runtime: nothing says when it leaves, so there is nothing to wait for.
    let mut s = two_hosts(None);
    s.submit(job("low", "q", 0, 0, 2, 8));
    assert_eq!(admitted(&cycle(&mut s, 0)), vec!["low"]);
    s.submit(runs_for(job("high", "q", 100, 1_000, 2, 8), 500));
    assert_eq!(preempted(&cycle(&mut s, 1_000)), vec!["low"]);
}

/// A MIG profile holding 3 of a GPU's 7 compute slices.
const MIG_3G: &str = "nvidia.com/mig-3g.40gb";

#[test]
fn mig_slices_are_weighed_by_the_part_of_a_gpu_they_hold() {
    // low holds 8 slices (8 × 3/7 of a GPU) for 1,000 s, ending in 100 s: high (8 slices)
    // waits. Counted in whole GPUs the slices weigh nothing, and high evicted at once.
    let node = NodeInfo {
        name: "mig-0".into(),
        labels: BTreeMap::from([
            ("pool".to_owned(), "h100".to_owned()),
            (BLOCK.to_owned(), "b0".to_owned()),
            (HOST.to_owned(), "mig-0".to_owned()),
        ]),
        taints: Vec::new(),
        allocatable: res(&[(MIG_3G, 8), ("cpu", 64), ("pods", 110)]),
        schedulable: true,
    };
    let mut s = scheduler(
        &[node],
        vec![flavor("h100")],
        vec![("q", weighing(MIG_3G, None))],
    );
    s.submit(runs_for(job_of("low", "q", 0, 0, 8, MIG_3G, 1), 1_100));
    assert_eq!(admitted(&cycle(&mut s, 0)), vec!["low"]);
    s.submit(runs_for(job_of("high", "q", 100, 1_000, 8, MIG_3G, 1), 500));
    let d = cycle(&mut s, 1_000);
    let Some(PendingReason::PreemptionDeferred(deferral)) = reason_of(&d, "high") else {
        unreachable!("high waits: {d:#?}")
    };
    assert_eq!(deferral.lost_milli, 8 * 428 * 1000);
}

#[test]
fn parts_of_a_gpu_and_mig_slices_weigh_what_they_hold() {
    let share = |milli: u64| {
        let mut j = job("s", "q", 0, 0, 3, 0);
        j.pod_sets[0].requests.set(
            muster_api::resources::names::GPU_SHARE,
            muster_api::Amount::from_milli(milli),
        );
        j
    };
    assert_eq!(share(250).accelerator_milli(), 750);
    assert_eq!(
        share(250).accelerators(),
        0,
        "whole GPUs round the parts away"
    );
    assert_eq!(job("w", "q", 0, 0, 2, 8).accelerator_milli(), 16_000);
    let mig = |profile: &str| job_of("m", "q", 0, 0, 1, profile, 2).accelerator_milli();
    assert_eq!(mig("nvidia.com/mig-1g.10gb"), 2 * 142);
    assert_eq!(mig("nvidia.com/mig-7g.80gb"), 2 * 1000);
    assert_eq!(
        mig("nvidia.com/mig-1g.6gb"),
        2 * 250,
        "an A30 has 4 compute slices"
    );
    assert_eq!(mig("nvidia.com/mig-2g.12gb"), 2 * 500);
    assert_eq!(mig("nvidia.com/mig-1g.10gb+me"), 2 * 142);
    assert_eq!(
        mig("nvidia.com/mig-weird"),
        2 * 1000,
        "unreadable: a whole GPU"
    );
    assert_eq!(job_of("c", "q", 0, 0, 4, "cpu", 8).accelerator_milli(), 0);
}

#[test]
fn without_weighing_a_preemptor_evicts_at_once() {
    let mut s = scheduler(
        &fleet("h100", 1, 2),
        vec![flavor("h100")],
        vec![(
            "q",
            preempting(
                cq(None, &[("h100", &[(GPU, 1000, None, None)])]),
                PreemptionPolicy {
                    within_cluster_queue: WithinClusterQueue::LowerPriority,
                    wait_when_cheaper: Some(false),
                    ..PreemptionPolicy::default()
                },
            ),
        )],
    );
    s.submit(runs_for(job("low", "q", 0, 0, 2, 8), 1_100));
    assert_eq!(admitted(&cycle(&mut s, 0)), vec!["low"]);
    s.submit(runs_for(job("high", "q", 100, 1_000, 2, 8), 500));
    let d = cycle(&mut s, 1_000);
    assert_eq!(preempted(&d), vec!["low"]);
    assert!(matches!(
        reason_of(&d, "high"),
        Some(PendingReason::Preempting { .. })
    ));
    assert!(d.iter().all(|x| !matches!(x, Decision::Admit(_))));
}

/// The placement of a 2-pod set of 8 GPUs each on `nodes`.
fn placement(nodes: Vec<String>) -> PodSetPlacement {
    PodSetPlacement {
        name: "workers".into(),
        flavor: "h100".into(),
        domain: vec![(BLOCK.to_owned(), "h100-b0".to_owned())],
        nodes,
        devices: Vec::new(),
    }
}
