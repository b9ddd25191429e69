//! The examples of Kueue's documentation (borrowing, borrowingLimit, lendingLimit) and its
//! preemption test table (reclaim, within-queue, minimal sets), with the same setups and the
//! same expected outcomes. CPU only, one flavor, on a fleet large enough that only quota
//! decides.

mod support;

use muster_admission::{Decision, PendingReason, Scheduler};
use muster_api::cluster_queue::{PreemptionPolicy, ReclaimWithinCohort, WithinClusterQueue};
use support::*;

const CPU: &str = "cpu";

/// A scheduler with flavor `default` on 20 nodes of 200 CPUs, and the given queues.
fn cpu_scheduler(queues: Vec<(&str, muster_api::ClusterQueueSpec)>) -> Scheduler {
    scheduler(&fleet("default", 1, 20), vec![flavor("default")], queues)
}

fn cpu_job(id: &str, queue: &str, priority: i32, created: i64, cpus: u64) -> muster_admission::Job {
    job_of(id, queue, priority, created, 1, CPU, cpus)
}

/// Submits 1-CPU jobs to `queue` until one waits; returns how many were admitted.
fn fill(s: &mut Scheduler, queue: &str, now: i64) -> u64 {
    for i in 0..100 {
        s.submit(cpu_job(&format!("{queue}-{i}"), queue, 0, now, 1));
        let d = cycle(s, now);
        if admitted(&d).is_empty() {
            s.finish(&format!("ns/{queue}-{i}"));
            return i;
        }
    }
    100
}

#[test]
fn borrowing_team_a_can_use_both_nominal_quotas_when_team_b_is_idle() {
    // team-a-cq 9 CPUs, team-b-cq 12 CPUs, cohort team-ab: "team-a-cq can admit Workloads with
    // resources adding up to 12+9=21 CPUs".
    let mut s = cpu_scheduler(vec![
        (
            "team-a",
            cq(Some("team-ab"), &[("default", &[(CPU, 9, None, None)])]),
        ),
        (
            "team-b",
            cq(Some("team-ab"), &[("default", &[(CPU, 12, None, None)])]),
        ),
    ]);
    assert_eq!(fill(&mut s, "team-a", 0), 21);
}

#[test]
fn borrowing_limit_caps_what_team_a_borrows() {
    // team-a-cq 9 CPUs with borrowingLimit 1: "team-a-cq can admit Workloads with resources
    // adding up to 9+1=10 CPUs"; team-b-cq without a limit "can use up to 12+9 CPUs".
    let setup = || {
        cpu_scheduler(vec![
            (
                "team-a",
                cq(Some("team-ab"), &[("default", &[(CPU, 9, Some(1), None)])]),
            ),
            (
                "team-b",
                cq(Some("team-ab"), &[("default", &[(CPU, 12, None, None)])]),
            ),
        ])
    };
    assert_eq!(fill(&mut setup(), "team-a", 0), 10);
    assert_eq!(fill(&mut setup(), "team-b", 0), 21);
}

#[test]
fn lending_limit_keeps_the_rest_of_team_b_quota_for_team_b() {
    // team-b-cq 12 CPUs with lendingLimit 1: "team-a-cq can admit Workloads with resources
    // adding up to 9+1=10 CPUs" while team-b stays within 11; team-b itself can use 9+12.
    let setup = || {
        cpu_scheduler(vec![
            (
                "team-a",
                cq(Some("team-ab"), &[("default", &[(CPU, 9, None, None)])]),
            ),
            (
                "team-b",
                cq(Some("team-ab"), &[("default", &[(CPU, 12, None, Some(1))])]),
            ),
        ])
    };
    assert_eq!(fill(&mut setup(), "team-a", 0), 10);
    assert_eq!(fill(&mut setup(), "team-b", 0), 21);
    // With team-a at 10, team-b still has its 11 guaranteed CPUs.
    let mut s = setup();
    assert_eq!(fill(&mut s, "team-a", 0), 10);
    assert_eq!(fill(&mut s, "team-b", 0), 11);
}

#[test]
fn a_borrowed_quota_report_names_flavor_resource_and_amounts() {
    let mut s = cpu_scheduler(vec![
        (
            "team-a",
            cq(Some("team-ab"), &[("default", &[(CPU, 9, Some(1), None)])]),
        ),
        (
            "team-b",
            cq(Some("team-ab"), &[("default", &[(CPU, 12, None, None)])]),
        ),
    ]);
    s.submit(cpu_job("big", "team-a", 0, 0, 11));
    let d = cycle(&mut s, 0);
    let short = match reason_of(&d, "big") {
        Some(PendingReason::QuotaShort(short)) => short.clone(),
        other => unreachable!("expected a quota shortfall, got {other:?}"),
    };
    assert_eq!(
        (short.flavor.as_str(), short.resource.as_str()),
        ("default", CPU)
    );
    let message = PendingReason::QuotaShort(short).message();
    assert_eq!(
        message,
        "not enough quota for cpu in flavor default: the job needs 11; the ClusterQueue has 9 of its own left and can borrow 1 (its borrowingLimit, 1, holds it)"
    );
}

fn c1() -> muster_api::ClusterQueueSpec {
    preempting(
        cq(Some("cohort"), &[("default", &[(CPU, 6, Some(6), None)])]),
        PreemptionPolicy {
            within_cluster_queue: WithinClusterQueue::LowerPriority,
            reclaim_within_cohort: ReclaimWithinCohort::LowerPriority,
            ..PreemptionPolicy::default()
        },
    )
}

fn c2() -> muster_api::ClusterQueueSpec {
    preempting(
        cq(Some("cohort"), &[("default", &[(CPU, 6, Some(6), None)])]),
        PreemptionPolicy {
            within_cluster_queue: WithinClusterQueue::Never,
            reclaim_within_cohort: ReclaimWithinCohort::Any,
            ..PreemptionPolicy::default()
        },
    )
}

fn standalone() -> muster_api::ClusterQueueSpec {
    preempting(
        cq(None, &[("default", &[(CPU, 6, None, None)])]),
        PreemptionPolicy {
            within_cluster_queue: WithinClusterQueue::LowerPriority,
            reclaim_within_cohort: ReclaimWithinCohort::Never,
            ..PreemptionPolicy::default()
        },
    )
}

fn lender(lending: u64) -> muster_api::ClusterQueueSpec {
    preempting(
        cq(
            Some("cohort-lend"),
            &[("default", &[(CPU, 6, None, Some(lending))])],
        ),
        PreemptionPolicy {
            within_cluster_queue: WithinClusterQueue::LowerPriority,
            reclaim_within_cohort: ReclaimWithinCohort::LowerPriority,
            ..PreemptionPolicy::default()
        },
    )
}

/// Admits `running` (id, queue, priority, cpus) one by one, then submits the incoming job and
/// returns who it preempts.
fn preemption_case(
    queues: Vec<(&str, muster_api::ClusterQueueSpec)>,
    running: &[(&str, &str, i32, u64)],
    incoming: (&str, i32, u64),
) -> Vec<String> {
    let mut s = cpu_scheduler(queues);
    for (i, (id, queue, priority, cpus)) in running.iter().enumerate() {
        let t = i64::try_from(i).unwrap_or_default();
        s.submit(cpu_job(id, queue, *priority, t, *cpus));
        let d = s.cycle(t);
        assert_eq!(admitted(&d), vec![(*id).to_owned()], "setup: {d:?}");
    }
    s.submit(cpu_job("incoming", incoming.0, incoming.1, 100, incoming.2));
    let d = s.cycle(100);
    preempted(&d)
}

#[rstest::rstest]
#[case::reclaim_quota_from_borrower(
    vec![("c1", c1()), ("c2", c2())],
    &[("c1-low", "c1", -1, 3), ("c2-mid", "c2", 0, 3), ("c2-high", "c2", 1, 6)],
    ("c1", 1, 3),
    &["c2-mid"],
)]
#[case::reclaim_from_any_same_priority(
    vec![("c1", c1()), ("c2", c2())],
    &[("c1-1", "c1", 0, 4), ("c1-2", "c1", 1, 4), ("c2", "c2", 0, 2)],
    ("c2", 0, 4),
    &["c1-1"],
)]
#[case::no_reclaim_from_same_priority_with_lower_priority_policy(
    vec![("c1", c1()), ("c2", c2())],
    &[("c1", "c1", 0, 2), ("c2-1", "c2", 0, 4), ("c2-2", "c2", 0, 4)],
    ("c1", 0, 4),
    &[],
)]
#[case::preempt_from_all_queues_in_cohort(
    vec![("c1", c1()), ("c2", c2())],
    &[("c1-low", "c1", -1, 3), ("c1-mid", "c1", 0, 2), ("c2-low", "c2", -1, 3), ("c2-mid", "c2", 0, 4)],
    ("c1", 0, 4),
    &["c1-low", "c2-low"],
)]
#[case::no_workloads_borrowing(
    vec![("c1", c1()), ("c2", c2())],
    &[("c1-high", "c1", 1, 4), ("c2-low-1", "c2", -1, 4)],
    ("c1", 1, 4),
    &[],
)]
#[case::reclaim_quota_from_lender(
    vec![("lend1", lender(4)), ("lend2", lender(2))],
    &[("lend1-low", "lend1", -1, 3), ("lend2-mid", "lend2", 0, 3), ("lend2-high", "lend2", 1, 4)],
    ("lend1", 1, 3),
    &["lend2-mid"],
)]
#[case::preempt_lowest_priority(
    vec![("standalone", standalone())],
    &[("low", "standalone", -1, 2), ("mid", "standalone", 0, 2), ("high", "standalone", 1, 2)],
    ("standalone", 1, 2),
    &["low"],
)]
#[case::preempt_multiple(
    vec![("standalone", standalone())],
    &[("low", "standalone", -1, 2), ("mid", "standalone", 0, 2), ("high", "standalone", 1, 2)],
    ("standalone", 1, 3),
    &["low", "mid"],
)]
#[case::minimal_set_excludes_low_priority(
    vec![("standalone", standalone())],
    &[("low", "standalone", -1, 1), ("mid", "standalone", 0, 2), ("high", "standalone", 1, 3)],
    ("standalone", 1, 2),
    &["mid"],
)]
#[case::some_free_quota_preempt_low_priority(
    vec![("standalone", standalone())],
    &[("low", "standalone", -1, 1), ("mid", "standalone", 0, 1), ("high", "standalone", 1, 3)],
    ("standalone", 1, 2),
    &["low"],
)]
#[case::no_preemption_for_low_priority(
    vec![("standalone", standalone())],
    &[("low", "standalone", -1, 3), ("mid", "standalone", 0, 3)],
    ("standalone", -1, 1),
    &[],
)]
#[case::not_enough_low_priority_workloads(
    vec![("standalone", standalone())],
    &[("low", "standalone", -1, 3), ("mid", "standalone", 0, 3)],
    ("standalone", 0, 4),
    &[],
)]
fn kueue_preemption_table(
    #[case] queues: Vec<(&str, muster_api::ClusterQueueSpec)>,
    #[case] running: &[(&str, &str, i32, u64)],
    #[case] incoming: (&str, i32, u64),
    #[case] expected: &[&str],
) {
    let mut got = preemption_case(queues, running, incoming);
    got.sort();
    let mut expected: Vec<String> = expected.iter().map(|s| (*s).to_owned()).collect();
    expected.sort();
    assert_eq!(got, expected);
}

#[test]
fn a_preemptor_that_waits_for_leaving_victims_evicts_no_more() {
    let mut s = cpu_scheduler(vec![("standalone", standalone())]);
    for (i, id) in ["a", "b", "c"].iter().enumerate() {
        s.submit(cpu_job(
            id,
            "standalone",
            -1,
            i64::try_from(i).unwrap_or(0),
            2,
        ));
    }
    assert_eq!(admitted(&s.cycle(0)).len(), 3);
    s.submit(cpu_job("urgent", "standalone", 5, 10, 2));
    let first = s.cycle(10);
    assert_eq!(preempted(&first).len(), 1);
    // The victim has not left yet: the next cycle preempts nobody else.
    let second = s.cycle(11);
    assert!(preempted(&second).is_empty(), "{second:?}");
    assert!(matches!(
        reason_of(&second, "urgent"),
        Some(PendingReason::Preempting { .. })
    ));
    assert!(second.iter().all(|d| !matches!(d, Decision::Admit(_))));
}

/// `job` restored as admitted to `queue` at second 0, its one pod on the first host.
fn restore_on_first_host(s: &mut Scheduler, job: muster_admission::Job, queue: &str) {
    let holding = muster_admission::Holding {
        cluster_queue: queue.to_owned(),
        since: Some(0),
        pod_sets: vec![muster_admission::PodSetPlacement {
            name: "workers".into(),
            flavor: "default".into(),
            domain: vec![(BLOCK.to_owned(), "default-b0".to_owned())],
            nodes: vec!["default-b0-h00".to_owned()],
            devices: Vec::new(),
        }],
    };
    s.restore(job, holding, false);
}

#[test]
fn a_preemptor_that_fits_by_borrowing_once_a_leaving_job_is_gone_waits_for_it_and_reclaims_nothing()
{
    // Cohort of 12 CPUs, all in use: a (priority 10) holds `team-a`'s 4; b1 and d1 hold 4
    // each in queues of 2, borrowing the idle lender's. `drained` stops and drains, so d1
    // leaves. urgent (priority 5) needs 4 beyond `team-a`'s own, borrowed: d1's 4, once d1
    // is gone. Reclaiming b1 as well would forbid borrowing (reclaiming is only for quota the
    // preemptor owns), and it would not fit then: evicting every candidate does not make it
    // fit, yet waiting for the one already leaving does.
    let reclaiming = PreemptionPolicy {
        within_cluster_queue: WithinClusterQueue::LowerPriority,
        reclaim_within_cohort: ReclaimWithinCohort::Any,
        ..PreemptionPolicy::default()
    };
    let mut drained = cq(Some("all"), &[("default", &[(CPU, 2, None, None)])]);
    drained.stop_policy = muster_api::cluster_queue::StopPolicy::HoldAndDrain;
    let mut s = cpu_scheduler(vec![
        (
            "team-a",
            preempting(
                cq(Some("all"), &[("default", &[(CPU, 4, None, None)])]),
                reclaiming,
            ),
        ),
        (
            "team-b",
            cq(Some("all"), &[("default", &[(CPU, 2, None, None)])]),
        ),
        ("drained", drained),
        (
            "lender",
            cq(Some("all"), &[("default", &[(CPU, 4, None, None)])]),
        ),
    ]);
    restore_on_first_host(&mut s, cpu_job("a", "team-a", 10, 0, 4), "team-a");
    restore_on_first_host(&mut s, cpu_job("b1", "team-b", 0, 0, 4), "team-b");
    restore_on_first_host(&mut s, cpu_job("d1", "drained", 0, 0, 4), "drained");
    let drain = s.cycle(1);
    assert!(
        drain
            .iter()
            .any(|d| matches!(d, Decision::Evict { job, .. } if job == "ns/d1")),
        "{drain:?}"
    );
    s.submit(cpu_job("urgent", "team-a", 5, 2, 4));
    let next = s.cycle(2);
    assert!(preempted(&next).is_empty(), "{next:?}");
    assert!(
        matches!(
            reason_of(&next, "urgent"),
            Some(PendingReason::Preempting { victims }) if victims == &["ns/d1".to_owned()]
        ),
        "{next:?}"
    );
}
