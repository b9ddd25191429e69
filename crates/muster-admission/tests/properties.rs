//! Invariants of admission on random queues, fleets and workloads: quota limits hold, nodes are
//! never over-committed, no job is admitted twice, cycles are deterministic, a cycle skipped
//! because nothing changed decides what a full one would, and finishing every job returns all
//! usage to zero.

mod support;

use std::collections::BTreeSet;

use muster_admission::{Decision, Scheduler};
use muster_api::cluster_queue::{PreemptionPolicy, ReclaimWithinCohort, WithinClusterQueue};
use muster_api::{Amount, ClusterQueueSpec};
use proptest::prelude::*;
use support::*;

/// (nominal, borrowing limit, lending limit, preempts) per queue.
type QueueParams = (u64, Option<u64>, Option<u64>, bool);
/// (queue, priority, pods, GPUs per pod, in one block, runtime).
type JobParams = (usize, i32, u32, u64, bool, i64);

fn queues() -> impl Strategy<Value = Vec<QueueParams>> {
    proptest::collection::vec(
        (
            0u64..40,
            proptest::option::of(0u64..20),
            proptest::option::of(0u64..20),
            any::<bool>(),
        ),
        1..4,
    )
}

fn jobs() -> impl Strategy<Value = Vec<JobParams>> {
    proptest::collection::vec(
        (0usize..3, 0i32..3, 1u32..5, 1u64..9, any::<bool>(), 1i64..6),
        1..25,
    )
}

fn specs(params: &[QueueParams]) -> Vec<(String, ClusterQueueSpec)> {
    params
        .iter()
        .enumerate()
        .map(|(i, (nominal, borrow, lend, preempts))| {
            let lend = lend.map(|l| l.min(*nominal));
            let mut spec = cq(Some("pool"), &[("h100", &[(GPU, *nominal, *borrow, lend)])]);
            if *preempts {
                spec.preemption = Some(PreemptionPolicy {
                    within_cluster_queue: WithinClusterQueue::LowerPriority,
                    reclaim_within_cohort: ReclaimWithinCohort::Any,
                    ..PreemptionPolicy::default()
                });
            }
            (format!("q{i}"), spec)
        })
        .collect()
}

fn build(params: &[QueueParams]) -> Scheduler {
    let specs = specs(params);
    scheduler(
        &fleet("h100", 2, 3),
        vec![flavor("h100")],
        specs.iter().map(|(n, s)| (n.as_str(), s.clone())).collect(),
    )
}

fn make_job(i: usize, p: &JobParams, queues: usize) -> muster_admission::Job {
    let (q, priority, pods, gpus, block, runtime) = *p;
    let j = job(
        &format!("j{i:02}"),
        &format!("q{}", q % queues),
        priority,
        i64::try_from(i).unwrap_or(0),
        pods,
        gpus,
    );
    let j = runs_for(j, runtime);
    if block { in_one_block(j) } else { j }
}

/// How [`run`] runs its cycles; the default is the plain way. None of it may change a
/// decision that changes something.
#[derive(Clone, Copy, Default)]
struct Way {
    /// Jobs submitted in the opposite order.
    reversed: bool,
    /// Every cycle told that something changed, so that none is skipped as quiet.
    full: bool,
    /// The cycles from then on run on a copy of the scheduler
    /// (`Scheduler::copy_with_policy`).
    copy_at: Option<i64>,
    /// The scheduler keeps no reasons (`Scheduler::reasons_untold`), and its cycles are
    /// steps: it tells no waiting job.
    untold: bool,
}

/// Runs cycles at t = 0..8, finishing jobs when their runtime is up and carrying out
/// evictions at once; checks the invariants after every cycle; returns every decision.
fn run(
    params: &[QueueParams],
    workload: &[JobParams],
    way: Way,
) -> Result<Vec<Decision>, TestCaseError> {
    let mut s = build(params);
    if way.untold {
        s = s.reasons_untold();
    }
    let specs = specs(params);
    let mut submissions: Vec<_> = workload
        .iter()
        .enumerate()
        .map(|(i, p)| make_job(i, p, params.len()))
        .collect();
    if way.reversed {
        submissions.reverse();
    }
    for j in submissions {
        s.submit(j);
    }
    let mut all = Vec::new();
    let mut ends: Vec<(i64, String)> = Vec::new();
    let mut holding: BTreeSet<String> = BTreeSet::new();
    for now in 0..8 {
        if way.copy_at == Some(now) {
            s = s.copy_with_policy(Box::new(muster_topology::BestFit));
        }
        ends.retain(|(end, id)| {
            if *end <= now {
                s.finish(id);
                holding.remove(id);
                false
            } else {
                true
            }
        });
        if way.full {
            s.cluster_mut();
        }
        let decisions = if way.untold {
            step(&mut s, now)
        } else {
            cycle(&mut s, now)
        };
        for d in &decisions {
            match d {
                Decision::Admit(a) => {
                    prop_assert!(holding.insert(a.job.clone()), "{} admitted twice", a.job);
                    let runtime = s.job(&a.job).and_then(|j| j.expected_runtime).unwrap_or(1);
                    ends.push((now + runtime, a.job.clone()));
                }
                Decision::Preempt { victims, .. } => {
                    for v in victims {
                        holding.remove(v);
                        ends.retain(|(_, id)| id != v);
                    }
                }
                _ => {}
            }
        }
        check_quota(&s, &specs)?;
        check_nodes(&s)?;
        all.extend(decisions);
    }
    for id in holding {
        s.finish(&id);
    }
    prop_assert!(
        s.quota().is_idle(),
        "quota left in use after every job finished"
    );
    let topo = s.cluster().topology("h100");
    if let Some(topo) = topo {
        for id in 0..topo.nodes().len() {
            prop_assert!(topo.used(id).is_empty(), "node {id} still used");
        }
    }
    Ok(all)
}

fn check_quota(s: &Scheduler, specs: &[(String, ClusterQueueSpec)]) -> Result<(), TestCaseError> {
    let mut pooled = 0u64;
    let mut pool = 0u64;
    for (name, spec) in specs {
        let quota = &spec.resource_groups[0].flavors[0].resources[0];
        let units = |q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity| {
            Amount::parse(&q.0).map_or(0, Amount::milli)
        };
        let nominal = units(&quota.nominal_quota);
        let lendable = quota
            .lending_limit
            .as_ref()
            .map_or(nominal, |l| units(l).min(nominal));
        let used = s.quota().usage(name, "h100", GPU).0.milli();
        if let Some(limit) = &quota.borrowing_limit {
            prop_assert!(
                used <= nominal + units(limit),
                "{name} uses {used} > nominal {nominal} + borrowing limit"
            );
        }
        pooled += used.saturating_sub(nominal - lendable);
        pool += lendable;
    }
    // Lending limits: what queues take beyond their guaranteed parts never exceeds what the
    // queues lend.
    prop_assert!(pooled <= pool, "cohort uses {pooled} of a pool of {pool}");
    Ok(())
}

fn check_nodes(s: &Scheduler) -> Result<(), TestCaseError> {
    let Some(topo) = s.cluster().topology("h100") else {
        return Ok(());
    };
    for (id, node) in topo.nodes().iter().enumerate() {
        let used = topo.used(id);
        prop_assert!(
            used.fits_in(&node.info.allocatable),
            "{} over-committed: {used} of {}",
            node.info.name,
            node.info.allocatable
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn admission_invariants_hold(params in queues(), workload in jobs()) {
        run(&params, &workload, Way::default())?;
    }

    #[test]
    fn a_cycle_is_deterministic_whatever_the_submission_order(params in queues(), workload in jobs()) {
        let first = run(&params, &workload, Way::default())?;
        let second = run(&params, &workload, Way { reversed: true, ..Way::default() })?;
        prop_assert_eq!(first, second);
    }

    #[test]
    fn a_cycle_skipped_as_quiet_decides_what_a_full_one_would(params in queues(), workload in jobs()) {
        // The same admissions, preemptions and evictions, and the same jobs waiting in the
        // same places; only a reason's figures may lag (see REASONS_REFRESH_SECONDS).
        let shown = |decisions: Vec<Decision>| -> Vec<Decision> {
            decisions
                .into_iter()
                .map(|d| match d {
                    Decision::Pending { job, position, .. } => Decision::Pending {
                        job,
                        position,
                        reason: muster_admission::PendingReason::Suspended,
                        eta: None,
                    },
                    other => other,
                })
                .collect()
        };
        let skipping = run(&params, &workload, Way::default())?;
        let full = run(&params, &workload, Way { full: true, ..Way::default() })?;
        prop_assert_eq!(shown(skipping), shown(full));
    }

    #[test]
    fn a_copy_of_the_scheduler_decides_what_the_original_would(
        params in queues(), workload in jobs(), copy_at in 0i64..8,
    ) {
        let original = run(&params, &workload, Way::default())?;
        let copied = run(&params, &workload, Way { copy_at: Some(copy_at), ..Way::default() })?;
        prop_assert_eq!(original, copied);
    }

    #[test]
    fn a_scheduler_that_keeps_no_reasons_decides_what_one_that_tells_them_would(
        params in queues(), workload in jobs(), copy_at in proptest::option::of(0i64..8),
    ) {
        let changes = |decisions: Vec<Decision>| -> Vec<Decision> {
            decisions
                .into_iter()
                .filter(|d| !matches!(d, Decision::Pending { .. }))
                .collect()
        };
        let told = run(&params, &workload, Way::default())?;
        let untold = run(&params, &workload, Way { untold: true, copy_at, ..Way::default() })?;
        prop_assert_eq!(changes(told), untold);
    }
}
