//! Admission rules, one scenario each: ordering, StrictFIFO, many admissions per cycle,
//! backfill reservations and starvation, topology-aware preemption, settling, stop policies,
//! provisioning, fair sharing, and the reasons a job waits.

mod support;

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use muster_admission::{Decision, JobState, PendingReason};
use muster_api::cluster_queue::{
    FairSharing, PreemptionPolicy, ProvisioningPolicy, ReclaimWithinCohort, StopPolicy,
    WithinClusterQueue,
};
use muster_api::gpujob::PendingReasonKind;
use support::*;

fn gpu_queue(nominal: u64) -> muster_api::ClusterQueueSpec {
    cq(None, &[("h100", &[(GPU, nominal, None, None)])])
}

#[test]
fn order_is_priority_then_creation_then_uid() {
    let mut s = scheduler(
        &fleet("h100", 1, 1),
        vec![flavor("h100")],
        vec![("q", gpu_queue(8))],
    );
    s.submit(job("old-low", "q", 0, 1, 1, 8));
    s.submit(job("new-high", "q", 5, 9, 1, 8));
    s.submit(job("b-same", "q", 0, 1, 1, 8));
    let d = cycle(&mut s, 10);
    assert_eq!(admitted(&d), vec!["new-high"]);
    let positions: Vec<(String, u32)> = d
        .iter()
        .filter_map(|d| match d {
            Decision::Pending { job, position, .. } => Some((job.clone(), *position)),
            _ => None,
        })
        .collect();
    // Equal priority and age: the UID decides ("uid-b-same" < "uid-old-low"). Positions
    // count the jobs still waiting: the admitted job is no longer ahead of anyone.
    assert_eq!(
        positions,
        vec![("ns/b-same".to_owned(), 1), ("ns/old-low".to_owned(), 2)]
    );
}

#[test]
fn many_admissions_per_cycle_never_promise_a_gpu_twice() {
    let mut s = scheduler(
        &fleet("h100", 1, 4),
        vec![flavor("h100")],
        vec![("q", gpu_queue(1000))],
    );
    for i in 0..10 {
        s.submit(job(&format!("j{i}"), "q", 0, i, 1, 8));
    }
    let d = cycle(&mut s, 0);
    assert_eq!(admitted(&d).len(), 4);
    let nodes: Vec<&String> = d
        .iter()
        .filter_map(|d| match d {
            Decision::Admit(a) => Some(&a.pod_sets[0].nodes[0]),
            _ => None,
        })
        .collect();
    assert_eq!(nodes.iter().collect::<BTreeSet<_>>().len(), 4, "{nodes:?}");
    // Quota as well: a queue of 16 GPUs admits two 8-GPU jobs even with room for four.
    let mut s = scheduler(
        &fleet("h100", 1, 4),
        vec![flavor("h100")],
        vec![("q", gpu_queue(16))],
    );
    for i in 0..10 {
        s.submit(job(&format!("j{i}"), "q", 0, i, 1, 8));
    }
    assert_eq!(admitted(&cycle(&mut s, 0)).len(), 2);
}

#[test]
fn strict_fifo_head_blocks_the_queue_and_best_effort_passes_over_it() {
    for (strict_queue, expected) in [
        (true, Vec::<String>::new()),
        (false, vec!["small".to_owned()]),
    ] {
        let spec = if strict_queue {
            strict(gpu_queue(64))
        } else {
            gpu_queue(64)
        };
        let mut s = scheduler(
            &fleet("h100", 1, 2),
            vec![flavor("h100")],
            vec![("q", spec)],
        );
        s.submit(job("huge", "q", 0, 0, 3, 8)); // three hosts on a two-host fleet
        s.submit(job("small", "q", 0, 1, 1, 1));
        let d = cycle(&mut s, 0);
        assert_eq!(admitted(&d), expected);
        if strict_queue {
            assert_eq!(
                reason_of(&d, "small"),
                Some(&PendingReason::BlockedByQueueHead {
                    head: "ns/huge".into()
                })
            );
        }
    }
}

/// Runs a fleet for `until` seconds: completes jobs at their expected end, submits `arrivals`
/// at their times, and returns when each job was admitted.
fn run(
    s: &mut muster_admission::Scheduler,
    arrivals: Vec<(i64, muster_admission::Job)>,
    until: i64,
    step: i64,
) -> std::collections::BTreeMap<String, i64> {
    let mut started = std::collections::BTreeMap::new();
    let mut ends: Vec<(i64, String)> = Vec::new();
    let mut arrivals = arrivals;
    arrivals.sort_by_key(|(t, j)| (*t, j.id.clone()));
    let mut next = 0;
    let mut now = 0;
    while now <= until {
        ends.retain(|(end, id)| {
            if *end <= now {
                s.finish(id);
                false
            } else {
                true
            }
        });
        while next < arrivals.len() && arrivals[next].0 <= now {
            s.submit(arrivals[next].1.clone());
            next += 1;
        }
        for d in cycle(s, now) {
            if let Decision::Admit(a) = d {
                let runtime = s
                    .job(&a.job)
                    .and_then(|j| j.expected_runtime)
                    .unwrap_or(i64::MAX / 4);
                ends.push((now + runtime, a.job.clone()));
                started.insert(a.job.trim_start_matches("ns/").to_owned(), now);
            }
        }
        now += step;
    }
    started
}

#[test]
fn a_stream_of_small_jobs_cannot_starve_a_block_gang() {
    // Two blocks of four 8-GPU hosts, full of 1-GPU jobs ending at different times; a gang of
    // four 8-GPU pods that needs one whole block arrives, then a steady stream of 1-GPU jobs.
    let mut s = scheduler(
        &fleet("h100", 2, 4),
        vec![flavor("h100")],
        vec![("q", gpu_queue(1000))],
    );
    let mut arrivals = Vec::new();
    for i in 0..64 {
        arrivals.push((
            0,
            runs_for(job(&format!("warm-{i:02}"), "q", 0, 0, 1, 1), 50 + i * 3),
        ));
    }
    arrivals.push((5, runs_for(in_one_block(job("gang", "q", 0, 5, 4, 8)), 100)));
    for t in (10..600).step_by(10) {
        for k in 0..4 {
            arrivals.push((
                t,
                runs_for(job(&format!("small-{t:03}-{k}"), "q", 0, t, 1, 1), 60),
            ));
        }
    }
    let started = run(&mut s, arrivals, 600, 5);
    let gang = started.get("gang").copied();
    assert!(gang.is_some(), "the gang never started");
    // It starts once one block's warm jobs are done (the slowest warm job in block 0 ends at
    // 50 + 31 × 3 = 143 s); small jobs that end before then keep starting meanwhile.
    assert!(gang <= Some(145), "the gang started at {gang:?}");
    let backfilled = started
        .iter()
        .filter(|(id, t)| id.starts_with("small-") && **t < gang.unwrap_or(0))
        .count();
    assert!(backfilled > 0, "no small job started while the gang waited");
}

#[test]
fn short_jobs_backfill_reserved_capacity_and_long_ones_do_not() {
    // One block of two hosts, both partly busy until t=100; a gang needs both whole hosts.
    let mut s = scheduler(
        &fleet("h100", 1, 2),
        vec![flavor("h100")],
        vec![("q", gpu_queue(1000))],
    );
    s.submit(runs_for(job("busy-0", "q", 0, 0, 1, 4), 100));
    s.submit(runs_for(job("busy-1", "q", 0, 0, 1, 4), 100));
    assert_eq!(admitted(&cycle(&mut s, 0)).len(), 2);
    s.submit(runs_for(in_one_block(job("gang", "q", 0, 1, 2, 8)), 100));
    s.submit(runs_for(job("short", "q", 0, 2, 1, 2), 50));
    s.submit(runs_for(job("long", "q", 0, 3, 1, 2), 500));
    let d = cycle(&mut s, 10);
    assert_eq!(admitted(&d), vec!["short"]);
    let eta = d.iter().find_map(|d| match d {
        Decision::Pending { job, eta, .. } if job == "ns/gang" => Some(*eta),
        _ => None,
    });
    assert_eq!(eta, Some(Some(100)));
    assert_eq!(
        reason_of(&d, "long"),
        Some(&PendingReason::CapacityReserved {
            for_job: "ns/gang".into(),
            until: Some(100)
        })
    );
}

#[test]
fn preemption_frees_one_block_not_scattered_hosts() {
    let mut s = scheduler(
        &fleet("h100", 2, 2),
        vec![flavor("h100")],
        vec![(
            "q",
            preempting(
                gpu_queue(1000),
                PreemptionPolicy {
                    within_cluster_queue: WithinClusterQueue::LowerPriority,
                    reclaim_within_cohort: ReclaimWithinCohort::Never,
                    ..PreemptionPolicy::default()
                },
            ),
        )],
    );
    // Four low-priority whole-host jobs, admitted so that the newest sit in different blocks.
    for (i, id) in ["a", "b", "c", "d"].iter().enumerate() {
        s.submit(job(id, "q", 0, i64::try_from(i).unwrap_or(0), 1, 8));
    }
    assert_eq!(admitted(&cycle(&mut s, 0)).len(), 4);
    s.submit(in_one_block(job("gang", "q", 10, 10, 2, 8)));
    let d = cycle(&mut s, 10);
    // Two victims suffice only if they share a block; the gang fitting next cycle shows
    // they did.
    assert_eq!(preempted(&d).len(), 2, "{d:?}");
    // Next cycle, the gang takes the freed block.
    let d = cycle(&mut s, 11);
    assert_eq!(admitted(&d), vec!["gang"]);
}

#[test]
fn reclaim_settles_without_ping_pong() {
    let policy = PreemptionPolicy {
        within_cluster_queue: WithinClusterQueue::LowerPriority,
        reclaim_within_cohort: ReclaimWithinCohort::Any,
        ..PreemptionPolicy::default()
    };
    let queue = || {
        preempting(
            cq(Some("pool"), &[("h100", &[(GPU, 16, None, None)])]),
            policy.clone(),
        )
    };
    let mut s = scheduler(
        &fleet("h100", 1, 4),
        vec![flavor("h100")],
        vec![("a", queue()), ("b", queue())],
    );
    s.submit(job("a-big", "a", 0, 0, 4, 8)); // 32 GPUs: borrows 16 of b's
    assert_eq!(admitted(&cycle(&mut s, 0)), vec!["a-big"]);
    s.submit(job("b-own", "b", 0, 1, 2, 8)); // b wants its own 16 back
    s.submit(job("a-other", "a", 0, 2, 2, 8));
    let mut preemptions = 0;
    let mut last = Vec::new();
    for t in 1..10 {
        let d = cycle(&mut s, t);
        preemptions += preempted(&d).len();
        last = s
            .jobs()
            .filter(|(_, st)| matches!(st, JobState::Admitted(_)))
            .map(|(id, _)| id.to_owned())
            .collect::<Vec<_>>();
    }
    assert_eq!(preemptions, 1, "exactly one reclaim, then calm");
    assert_eq!(last, vec!["ns/a-other".to_owned(), "ns/b-own".to_owned()]);
}

#[test]
fn equal_priorities_never_preempt_each_other() {
    let policy = PreemptionPolicy {
        within_cluster_queue: WithinClusterQueue::LowerPriority,
        reclaim_within_cohort: ReclaimWithinCohort::Never,
        ..PreemptionPolicy::default()
    };
    let mut s = scheduler(
        &fleet("h100", 1, 1),
        vec![flavor("h100")],
        vec![("q", preempting(gpu_queue(8), policy))],
    );
    s.submit(job("first", "q", 3, 0, 1, 8));
    s.submit(job("second", "q", 3, 1, 1, 8));
    for t in 0..5 {
        assert!(preempted(&cycle(&mut s, t)).is_empty());
    }
    assert!(matches!(s.state("ns/first"), Some(JobState::Admitted(_))));
}

#[test]
fn hold_stops_admissions_and_hold_and_drain_evicts() {
    for (policy, evicted) in [(StopPolicy::Hold, false), (StopPolicy::HoldAndDrain, true)] {
        let mut s = scheduler(
            &fleet("h100", 1, 2),
            vec![flavor("h100")],
            vec![("q", gpu_queue(16))],
        );
        s.submit(job("running", "q", 0, 0, 1, 8));
        assert_eq!(admitted(&cycle(&mut s, 0)), vec!["running"]);
        let mut spec = gpu_queue(16);
        spec.stop_policy = policy;
        // Queues are configuration: a new scheduler with the stopped queue, the job restored.
        let running = s.job("ns/running").cloned();
        let holding = match s.state("ns/running") {
            Some(JobState::Admitted(h)) => Some(h.clone()),
            _ => None,
        };
        let mut s = scheduler(
            &fleet("h100", 1, 2),
            vec![flavor("h100")],
            vec![("q", spec)],
        );
        if let (Some(j), Some(h)) = (running, holding) {
            s.restore(j, h, false);
        }
        s.submit(job("new", "q", 0, 1, 1, 8));
        let d = s.cycle(1);
        assert!(admitted(&d).is_empty());
        assert_eq!(
            reason_of(&d, "new").map(PendingReason::kind),
            Some(PendingReasonKind::QueueStopped)
        );
        let drained = d
            .iter()
            .any(|d| matches!(d, Decision::Evict { job, .. } if job == "ns/running"));
        assert_eq!(drained, evicted);
    }
}

#[test]
fn quota_without_capacity_provisions_when_the_queue_may() {
    let mut spec = gpu_queue(64);
    spec.provisioning = Some(ProvisioningPolicy {
        class_name: "queued-provisioning.gke.io".into(),
        managed_resources: vec![GPU.into()],
        ..ProvisioningPolicy::default()
    });
    let mut s = scheduler(
        &fleet("h100", 1, 1),
        vec![flavor("h100")],
        vec![("q", spec)],
    );
    s.submit(job("needs-more", "q", 0, 0, 4, 8));
    let d = s.cycle(0);
    assert!(
        d.iter()
            .any(|d| matches!(d, Decision::Provision { job, flavors, .. }
        if job == "ns/needs-more" && flavors == &vec![("workers".to_owned(), "h100".to_owned())]))
    );
    assert_eq!(s.quota().usage("q", "h100", GPU).0.units_ceil(), 32);
    // Without provisioning, the same job waits for topology.
    let mut s = scheduler(
        &fleet("h100", 1, 1),
        vec![flavor("h100")],
        vec![("q", gpu_queue(64))],
    );
    s.submit(job("needs-more", "q", 0, 0, 4, 8));
    let d = s.cycle(0);
    assert_eq!(
        reason_of(&d, "needs-more").map(PendingReason::kind),
        Some(PendingReasonKind::NoTopologyFit)
    );
}

#[test]
fn fair_sharing_splits_borrowed_quota_by_weight() {
    let borrower = |weight: Option<&str>| {
        let mut spec = cq(Some("pool"), &[("h100", &[(GPU, 0, None, None)])]);
        spec.fair_sharing = weight.map(|w| FairSharing {
            weight: Some(Quantity(w.into())),
        });
        spec
    };
    let lender = cq(Some("pool"), &[("h100", &[(GPU, 16, None, None)])]);
    for (weights, expected) in [
        ((None, None), (10, 6)),
        ((Some("1"), Some("1")), (8, 8)),
        ((Some("3"), Some("1")), (10, 6)),
    ] {
        let mut s = scheduler(
            &fleet("h100", 1, 4),
            vec![flavor("h100")],
            vec![
                ("a", borrower(weights.0)),
                ("b", borrower(weights.1)),
                ("lender", lender.clone()),
            ],
        );
        for i in 0..10 {
            s.submit(job(&format!("a{i}"), "a", 0, i, 1, 1));
            s.submit(job(&format!("b{i}"), "b", 0, 100 + i, 1, 1));
        }
        let got = admitted(&cycle(&mut s, 200));
        let a = got.iter().filter(|j| j.starts_with('a')).count();
        assert_eq!((a, got.len() - a), expected, "weights {weights:?}");
    }
}

#[test]
fn every_waiting_job_says_why() {
    let mut spec = gpu_queue(8);
    spec.resource_groups[0].covered_resources = vec![GPU.into()];
    let mut s = scheduler(
        &fleet("h100", 1, 1),
        vec![flavor("h100")],
        vec![("q", spec)],
    );
    let mut invalid = job("invalid", "q", 0, 0, 1, 1);
    invalid.invalid = Some("spec.podSets[0].count: must be at least 1".into());
    s.submit(invalid);
    let mut suspended = job("suspended", "q", 0, 0, 1, 1);
    suspended.suspended = true;
    s.submit(suspended);
    s.submit(job("lost", "nowhere", 0, 0, 1, 1));
    s.submit(job_of("cpu-only", "q", 0, 0, 1, "cpu", 4));
    let d = s.cycle(0);
    let kind = |id: &str| reason_of(&d, id).map(PendingReason::kind);
    assert_eq!(kind("invalid"), Some(PendingReasonKind::InvalidJob));
    assert_eq!(kind("suspended"), Some(PendingReasonKind::Suspended));
    assert_eq!(kind("lost"), Some(PendingReasonKind::UnknownQueue));
    assert_eq!(
        reason_of(&d, "cpu-only").map(PendingReason::message),
        Some("pod set workers requests cpu, which no single resource group of ClusterQueue q covers; add them to a group's coveredResources".into())
    );
    assert_eq!(
        reason_of(&d, "lost").map(PendingReason::message),
        Some("LocalQueue ns/nowhere does not exist; create it or set spec.queueName to an existing one".into())
    );
}

#[test]
fn a_queue_admits_only_namespaces_its_selector_selects() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    let mut spec = gpu_queue(8);
    spec.namespace_selector = Some(LabelSelector {
        match_labels: Some([("team".to_owned(), "a".to_owned())].into()),
        ..LabelSelector::default()
    });
    let mut s = scheduler(
        &fleet("h100", 1, 1),
        vec![flavor("h100")],
        vec![("q", spec)],
    );
    s.submit(job("outsider", "q", 0, 0, 1, 1));
    let d = s.cycle(0);
    assert_eq!(
        reason_of(&d, "outsider").map(PendingReason::message),
        Some("ClusterQueue q's namespaceSelector does not admit namespace ns; ask an admin to include it".into())
    );
    s.set_namespace("ns", [("team".to_owned(), "a".to_owned())].into());
    assert_eq!(admitted(&s.cycle(1)), vec!["outsider"]);
}

fn provisioning(
    spec: muster_api::ClusterQueueSpec,
    policy: ProvisioningPolicy,
) -> muster_api::ClusterQueueSpec {
    let mut spec = spec;
    spec.provisioning = Some(ProvisioningPolicy {
        class_name: "queued-provisioning.gke.io".into(),
        ..policy
    });
    spec
}

fn provisions(d: &[Decision], id: &str) -> bool {
    d.iter()
        .any(|d| matches!(d, Decision::Provision { job, .. } if job == &format!("ns/{id}")))
}

#[test]
fn mode_always_buys_capacity_even_when_todays_nodes_would_do() {
    let policy = ProvisioningPolicy {
        mode: muster_api::cluster_queue::ProvisioningMode::Always,
        managed_resources: vec![GPU.into()],
        ..ProvisioningPolicy::default()
    };
    let mut s = scheduler(
        &fleet("h100", 1, 4),
        vec![flavor("h100")],
        vec![("q", provisioning(gpu_queue(64), policy))],
    );
    s.submit(job("small", "q", 0, 0, 1, 8));
    let d = s.cycle(0);
    assert!(provisions(&d, "small"), "{d:?}");
    assert!(admitted(&d).is_empty());
    // Quota still bounds it: beyond the nominal quota the job waits on quota.
    s.submit(job("huge", "q", 0, 1, 16, 8));
    let d = s.cycle(1);
    assert_eq!(
        reason_of(&d, "huge").map(PendingReason::kind),
        Some(PendingReasonKind::QuotaShort)
    );
}

#[rstest::rstest]
#[case::waits_for_the_autoscaler(false, false)]
#[case::preempts_when_allowed(true, true)]
fn a_provisioning_queue_preempts_only_when_it_allows_it(
    #[case] allow: bool,
    #[case] preempts: bool,
) {
    let policy = ProvisioningPolicy {
        preempt_while_provisioning: allow,
        ..ProvisioningPolicy::default()
    };
    let queue = preempting(
        provisioning(gpu_queue(1000), policy),
        PreemptionPolicy {
            within_cluster_queue: WithinClusterQueue::LowerPriority,
            reclaim_within_cohort: ReclaimWithinCohort::Never,
            ..PreemptionPolicy::default()
        },
    );
    let mut s = scheduler(
        &fleet("h100", 1, 2),
        vec![flavor("h100")],
        vec![("q", queue)],
    );
    s.submit(job("low", "q", 0, 0, 2, 8));
    assert_eq!(admitted(&cycle(&mut s, 0)), vec!["low"]);
    s.submit(job("high", "q", 10, 1, 2, 8));
    let d = cycle(&mut s, 1);
    assert_eq!(!preempted(&d).is_empty(), preempts, "{d:?}");
    assert_eq!(provisions(&d, "high"), !preempts, "{d:?}");
}

#[test]
fn provisioned_capacity_goes_to_the_job_that_bought_it_with_the_quota_it_held() {
    let policy = ProvisioningPolicy {
        managed_resources: vec![GPU.into()],
        ..ProvisioningPolicy::default()
    };
    // The block the autoscaler will bring has not joined yet.
    let mut nodes = fleet("h100", 1, 4);
    for n in &mut nodes {
        n.schedulable = false;
    }
    let mut s = scheduler(
        &nodes,
        vec![flavor("h100")],
        vec![("q", provisioning(gpu_queue(32), policy))],
    );
    let big = in_one_block(job("big", "q", 0, 0, 4, 8));
    s.submit(big.clone());
    assert!(provisions(&s.cycle(0), "big"));
    // A more urgent job arrives while big waits for the autoscaler: big's quota is not its.
    s.submit(job("urgent", "q", 10, 1, 1, 8));
    let d = s.cycle(1);
    assert_eq!(
        reason_of(&d, "urgent").map(PendingReason::kind),
        Some(PendingReasonKind::QuotaShort)
    );
    // Provisioned, but the nodes are still joining: big keeps its quota and says what it
    // waits for; urgent still cannot take the quota.
    assert!(s.capacity_ready(big.clone()));
    let d = s.cycle(2);
    let reason = reason_of(&d, "big").cloned();
    assert!(
        matches!(reason, Some(PendingReason::AwaitingProvisionedNodes(_))),
        "{d:?}"
    );
    assert_eq!(
        reason.map(|r| r.kind()),
        Some(PendingReasonKind::Provisioning)
    );
    assert!(matches!(s.state("ns/big"), Some(JobState::Provisioning(_))));
    assert!(admitted(&d).is_empty(), "{d:?}");
    assert_eq!(s.quota().usage("q", "h100", GPU).0.units_ceil(), 32);
    // The nodes join: big starts on them, first, within the quota it held all along.
    for n in &nodes {
        s.cluster_mut().set_schedulable(&n.name, true);
    }
    let d = s.cycle(3);
    assert_eq!(admitted(&d), vec!["big"]);
    assert_eq!(s.quota().usage("q", "h100", GPU).0.units_ceil(), 32);
    assert_eq!(
        reason_of(&d, "urgent").map(PendingReason::kind),
        Some(PendingReasonKind::QuotaShort)
    );
    // Only a provisioning job can be told its capacity is ready.
    assert!(!s.capacity_ready(job("urgent", "q", 10, 1, 1, 8)));
}

#[test]
fn a_held_queue_does_not_start_provisioned_capacity_either() {
    let mut spec = provisioning(
        gpu_queue(32),
        ProvisioningPolicy {
            managed_resources: vec![GPU.into()],
            ..ProvisioningPolicy::default()
        },
    );
    spec.stop_policy = StopPolicy::Hold;
    let mut s = scheduler(
        &fleet("h100", 1, 4),
        vec![flavor("h100")],
        vec![("q", spec)],
    );
    let big = in_one_block(job("big", "q", 0, 0, 4, 8));
    // Restored as it was before the queue was held: provisioning, quota booked, no nodes.
    let holding = muster_admission::Holding {
        cluster_queue: "q".into(),
        since: Some(0),
        pod_sets: vec![muster_admission::PodSetPlacement {
            name: "workers".into(),
            flavor: "h100".into(),
            domain: Vec::new(),
            nodes: Vec::new(),
            devices: Vec::new(),
        }],
    };
    s.restore(big.clone(), holding, true);
    assert!(s.capacity_ready(big));
    let d = s.cycle(1);
    assert!(admitted(&d).is_empty(), "{d:?}");
    assert_eq!(
        reason_of(&d, "big").map(PendingReason::kind),
        Some(PendingReasonKind::QueueStopped)
    );
    assert!(matches!(s.state("ns/big"), Some(JobState::Provisioning(_))));
    assert_eq!(s.quota().usage("q", "h100", GPU).0.units_ceil(), 32);
}

/// The demo's loop, in three jobs: a gang needing a whole block evicts one low-priority gang
/// and counts on the block's free hosts too; a second low-priority gang, served later in
/// the same cycle, took those free hosts, so the preemptor evicted it next, and the first one
/// came back onto the hosts it had left, and so on, every cycle. The preemptor's nodes are
/// now its own from its preemption until it starts.
#[test]
fn a_preemptor_keeps_the_capacity_it_counted_on_until_it_starts() {
    let policy = PreemptionPolicy {
        within_cluster_queue: WithinClusterQueue::LowerPriority,
        reclaim_within_cohort: ReclaimWithinCohort::Never,
        ..PreemptionPolicy::default()
    };
    let mut s = scheduler(
        &fleet("h100", 1, 4),
        vec![flavor("h100")],
        vec![("q", preempting(gpu_queue(1000), policy))],
    );
    s.submit(in_one_block(job("low-1", "q", 0, 0, 2, 8)));
    assert_eq!(admitted(&cycle(&mut s, 0)), vec!["low-1"]);
    s.submit(in_one_block(job("high", "q", 100, 1, 4, 8)));
    s.submit(in_one_block(job("low-2", "q", 0, 1, 2, 8)));
    let mut preemptions = Vec::new();
    let mut started = None;
    for t in 1..12 {
        let d = cycle(&mut s, t);
        if admitted(&d).contains(&"high".to_owned()) {
            started.get_or_insert(t);
        }
        // `cycle` lets the victims go at once, as the simulator does.
        preemptions.extend(preempted(&d));
    }
    assert_eq!(preemptions, vec!["low-1"], "one eviction, then calm");
    assert_eq!(
        started,
        Some(2),
        "the preemptor starts as soon as its victim is gone"
    );
}

/// The controller builds its scheduler afresh for every pass: a preemptor whose victim is
/// still terminating is nominated again (`renominate`), and a job of another queue ordered
/// before it cannot take the free hosts it counted on.
#[test]
fn a_renominated_preemptor_is_served_first_by_a_rebuilt_scheduler() {
    let policy = PreemptionPolicy {
        within_cluster_queue: WithinClusterQueue::LowerPriority,
        reclaim_within_cohort: ReclaimWithinCohort::Never,
        ..PreemptionPolicy::default()
    };
    let build = || {
        scheduler(
            &fleet("h100", 1, 4),
            vec![flavor("h100")],
            vec![
                ("a", preempting(gpu_queue(1000), policy.clone())),
                ("b", gpu_queue(1000)),
            ],
        )
    };
    let low = in_one_block(job("low", "a", 0, 0, 2, 8));
    let high = in_one_block(job("high", "a", 100, 1, 4, 8));
    let mut first = build();
    first.submit(low.clone());
    assert_eq!(admitted(&first.cycle(0)), vec!["low"]);
    first.submit(high.clone());
    let d = first.cycle(1);
    assert_eq!(preempted(&d), vec!["low"]);
    assert_eq!(first.nominated().collect::<Vec<_>>(), vec!["ns/high"]);
    let Some(JobState::Evicting(holding)) = first.state("ns/low").cloned() else {
        unreachable!("low is leaving")
    };

    // The next pass: low's pods are still terminating, and a job of another queue that
    // would be served first (higher priority) arrives.
    let other = in_one_block(job("other", "b", 200, 2, 2, 8));
    for renominated in [true, false] {
        let mut next = build();
        next.restore(low.clone(), holding.clone(), false);
        next.submit(high.clone());
        next.submit(other.clone());
        if renominated {
            next.renominate("ns/high");
        }
        let d = next.cycle(2);
        let took = admitted(&d).contains(&"other".to_owned());
        assert_eq!(took, !renominated, "renominated {renominated}: {d:#?}");
    }
}

/// A preemptor waits when evicting would throw away more GPU time than waiting costs: the
/// victims ran 1,000 s on 16 GPUs, and the release timeline frees room for it in 100 s.
/// Told not to weigh the two, it evicts, as Kueue does.
#[test]
fn a_preemptor_waits_when_waiting_costs_less_than_the_work_it_would_throw_away() {
    for weighs in [true, false] {
        let policy = PreemptionPolicy {
            within_cluster_queue: WithinClusterQueue::LowerPriority,
            reclaim_within_cohort: ReclaimWithinCohort::Never,
            wait_when_cheaper: Some(weighs),
            ..PreemptionPolicy::default()
        };
        let mut s = scheduler(
            &fleet("h100", 1, 4),
            vec![flavor("h100")],
            vec![("q", preempting(gpu_queue(1000), policy))],
        );
        s.submit(runs_for(job("long", "q", 0, 0, 2, 8), 10_000));
        s.submit(runs_for(job("short", "q", 0, 1, 2, 8), 1_100));
        assert_eq!(admitted(&cycle(&mut s, 0)).len(), 2);
        s.submit(runs_for(job("high", "q", 100, 1_000, 2, 8), 500));
        let d = cycle(&mut s, 1_000);
        if weighs {
            assert!(preempted(&d).is_empty(), "{d:#?}");
            let Some(PendingReason::PreemptionDeferred(deferral)) = reason_of(&d, "high") else {
                unreachable!("high waits rather than evicts: {d:#?}")
            };
            assert_eq!(deferral.starts, 1_100);
            let eta = d.iter().find_map(|x| match x {
                Decision::Pending { job, eta, .. } if job == "ns/high" => *eta,
                _ => None,
            });
            assert_eq!(eta, Some(1_100), "it starts when short ends");
        } else {
            assert_eq!(preempted(&d).len(), 1, "{d:#?}");
        }
    }
}

#[test]
fn reasons_skipped_by_quiet_cycles_are_never_older_than_the_refresh_interval() {
    // One job runs (no announced end), one waits on quota: after the cycle that changed
    // nothing, the next cycles are skipped until the reasons are REASONS_REFRESH_SECONDS old.
    let refresh = muster_admission::REASONS_REFRESH_SECONDS;
    let mut s = scheduler(
        &fleet("h100", 1, 2),
        vec![flavor("h100")],
        vec![("q", gpu_queue(8))],
    );
    s.submit(job("running", "q", 0, 1, 1, 8));
    s.submit(job("waiting", "q", 0, 2, 1, 8));
    assert_eq!(admitted(&s.step(100)), vec!["running"]);
    assert!(s.step(101).is_empty(), "nothing changed");
    assert_eq!(s.reasons_as_of(), 101);
    for t in 102..101 + refresh {
        assert!(s.step(t).is_empty());
        assert_eq!(s.reasons_as_of(), 101, "skipped at {t}");
    }
    assert!(s.step(101 + refresh).is_empty());
    assert_eq!(s.reasons_as_of(), 101 + refresh, "refreshed in full");
    assert!(
        s.waiting()
            .iter()
            .any(|d| matches!(d, Decision::Pending { job, .. } if job == "ns/waiting")),
        "the waiting job is still explained"
    );
    // Anything from outside ends the quiet at once.
    s.submit(job("another", "q", 0, 3, 1, 8));
    assert!(s.step(102 + refresh).is_empty());
    assert_eq!(s.reasons_as_of(), 102 + refresh);
}
