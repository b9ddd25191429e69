//! Forecasts on a small fleet (the `small` fixture: 4 hosts of 8 GPUs in two blocks, one
//! ClusterQueue of 32 GPUs) where every start can be worked out by hand.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use muster_admission::{Cluster, Decision, Holding, Scheduler};
use muster_api::Amount;
use muster_topology::Rng;

use super::*;
use crate::engine::admission_job;
use crate::scenario::Loaded;
use crate::trace::TraceJob;

const NOW: i64 = 10_000;

fn fleet() -> Snapshot {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/small.yaml");
    let loaded = match Loaded::from_file(&path, None) {
        Ok(l) => l,
        Err(e) => unreachable!("{e}"),
    };
    Snapshot {
        now: NOW,
        flavors: loaded.flavors,
        nodes: loaded.nodes,
        outside_usage: BTreeMap::new(),
        cluster_queues: loaded.cluster_queues,
        cohorts: loaded.cohorts,
        local_queues: loaded.local_queues,
        namespaces: BTreeMap::from([("default".to_owned(), BTreeMap::new())]),
        running: Vec::new(),
        waiting: Vec::new(),
        recent: Vec::new(),
    }
}

fn job(id: &str, hosts: u32, announced: Option<i64>) -> muster_admission::Job {
    admission_job(
        &TraceJob {
            id: id.to_owned(),
            submit: NOW - 100,
            duration: 1,
            queue: "team-a".to_owned(),
            priority: 0,
            pod_sets: vec![(
                "workers".to_owned(),
                hosts,
                BTreeMap::from([("nvidia.com/gpu".to_owned(), Amount::from_units(8))]),
            )],
            topology: String::new(),
            expected_runtime: announced,
            node_selector: BTreeMap::new(),
        },
        "default",
    )
}

fn keys() -> Vec<String> {
    vec![
        "team-a/train".to_owned(),
        "team-a".to_owned(),
        String::new(),
    ]
}

/// `job` admitted at `since` on the snapshot's fleet as it stands (what admission would
/// have given it then).
fn running(snapshot: &mut Snapshot, job: muster_admission::Job, since: i64) {
    let cluster = Cluster::new(snapshot.flavors.clone(), &snapshot.nodes);
    let mut s = Scheduler::new(
        cluster,
        snapshot.cluster_queues.clone(),
        snapshot.local_queues.clone(),
    );
    for r in &snapshot.running {
        s.restore(r.job.clone(), r.holding.clone(), false);
    }
    s.submit(job.clone());
    let admitted = s.step(since).into_iter().find_map(|d| match d {
        Decision::Admit(a) => Some(a),
        _ => None,
    });
    let Some(a) = admitted else {
        unreachable!("{} does not fit", job.id)
    };
    snapshot.running.push(RunningJob {
        job: Arc::new(job),
        holding: Holding {
            cluster_queue: a.cluster_queue,
            since: Some(since),
            pod_sets: a.pod_sets,
        },
        keys: keys().into(),
        batch: None,
        provisioning: false,
    });
}

fn waiting(snapshot: &mut Snapshot, job: muster_admission::Job) {
    snapshot.waiting.push(WaitingJob {
        job: Arc::new(job),
        keys: keys().into(),
        queues_at: None,
        batch: None,
    });
}

fn run(snapshot: &Snapshot, model: &RuntimeModel) -> Forecast {
    match forecast(snapshot, model, &Options::default()) {
        Ok(f) => f,
        Err(e) => unreachable!("{e}"),
    }
}

/// Twenty runs of `team-a/train` that ran from half to twice what they announced.
fn spread_model() -> RuntimeModel {
    let runs: Vec<FinishedRun> = (0..20)
        .map(|i| FinishedRun {
            keys: keys(),
            announced: Some(1_000),
            ran: 500 + 1_500 * i / 19,
            batch: None,
        })
        .collect();
    RuntimeModel::learned(&runs)
}

#[test]
fn without_history_an_announced_runtime_is_taken_as_exact() {
    let mut s = fleet();
    running(&mut s, job("big", 4, Some(1_000)), NOW - 400);
    waiting(&mut s, job("next", 1, None));
    let f = run(&s, &RuntimeModel::new());
    let eta = &f.etas[0];
    // The fleet is full until `big` ends at NOW - 400 + 1,000.
    assert_eq!(
        (eta.p10, eta.p50, eta.p90),
        (Some(NOW + 600), Some(NOW + 600), Some(NOW + 600))
    );
    assert_eq!((eta.started, f.samples), (32, 32));
    // `next` itself announced nothing and nothing finished: its own runtime is unknown.
    assert_eq!(eta.basis, Basis::Unknown);
    assert_eq!(f.unknown_runtimes, 1);
}

#[test]
fn a_job_placed_on_bought_capacity_runs_out_its_time_and_one_waiting_for_it_holds_its_quota() {
    // Placed on the capacity that came: it ends when its runtime is up, as any job.
    let mut placed = fleet();
    running(&mut placed, job("big", 4, Some(1_000)), NOW - 400);
    placed.running[0].provisioning = true;
    waiting(&mut placed, job("next", 1, Some(100)));
    let eta = &run(&placed, &RuntimeModel::new()).etas[0];
    assert_eq!(eta.p50, Some(NOW + 600));
    // Still waiting for the autoscaler: no nodes yet, all the quota held, for as long as the
    // autoscaler takes, which the forecast cannot say.
    let mut waiting_for_it = placed.clone();
    for set in &mut waiting_for_it.running[0].holding.pod_sets {
        set.nodes.clear();
    }
    let eta = &run(&waiting_for_it, &RuntimeModel::new()).etas[0];
    assert_eq!((eta.p10, eta.started), (None, 0), "{eta:?}");
}

#[test]
fn history_makes_a_range_that_holds_what_the_runs_allow() {
    let mut s = fleet();
    running(&mut s, job("big", 4, Some(1_000)), NOW - 400);
    waiting(&mut s, job("next", 1, Some(1_000)));
    let f = run(&s, &spread_model());
    let eta = &f.etas[0];
    let (Some(p10), Some(p50), Some(p90)) = (eta.p10, eta.p50, eta.p90) else {
        unreachable!("{eta:?}")
    };
    assert!(p10 < p50 && p50 < p90, "{eta:?}");
    // `big` has run 400 s: it ends between 500 and 2,000 s after its start.
    assert!(p10 >= NOW + 100 && p90 <= NOW + 1_600, "{eta:?}");
    assert_eq!(
        eta.basis,
        Basis::Ratio {
            key: "team-a/train".into(),
            runs: 20
        }
    );
}

#[test]
fn a_job_behind_an_unknown_runtime_is_later_than_the_horizon() {
    let mut s = fleet();
    running(&mut s, job("big", 4, None), NOW - 400);
    waiting(&mut s, job("next", 1, None));
    let f = run(&s, &RuntimeModel::new());
    let eta = &f.etas[0];
    assert_eq!(
        (eta.p10, eta.p50, eta.p90, eta.started),
        (None, None, None, 0)
    );
    assert_eq!(f.unknown_runtimes, 2);
}

#[test]
fn a_backing_off_job_starts_when_its_backoff_ends() {
    let mut s = fleet();
    waiting(&mut s, job("later", 1, Some(60)));
    s.waiting[0].queues_at = Some(NOW + 120);
    waiting(&mut s, job("now", 1, Some(60)));
    let f = run(&s, &RuntimeModel::new());
    assert_eq!(f.etas[0].p50, Some(NOW + 120));
    assert_eq!(f.etas[1].p50, Some(NOW));
}

/// Starts are kept as seconds after the snapshot: a horizon further than that can count
/// looks as far as it can, and a job that starts within it is not lost.
#[test]
fn a_horizon_beyond_what_a_start_can_count_looks_as_far_as_it_can() {
    let mut s = fleet();
    running(&mut s, job("big", 4, Some(1_000)), NOW - 400);
    waiting(&mut s, job("first", 4, Some(300)));
    waiting(&mut s, job("never", 5, Some(300)));
    for horizon in [i64::MAX, 200 * 365 * 86_400] {
        let options = Options {
            horizon,
            ..Options::default()
        };
        let f = forecast(&s, &RuntimeModel::new(), &options);
        let etas = f.map(|f| f.etas).unwrap_or_default();
        assert_eq!(etas.len(), 2);
        assert_eq!((etas[0].p50, etas[0].started), (Some(NOW + 600), 32));
        // Five hosts on a fleet of four: later than any horizon.
        assert_eq!((etas[1].p50, etas[1].started), (None, 0));
    }
}

#[test]
fn jobs_queue_in_order_behind_each_other() {
    // Two whole-fleet jobs wait: the second starts after the first has run.
    let mut s = fleet();
    running(&mut s, job("big", 4, Some(1_000)), NOW - 400);
    waiting(&mut s, job("first", 4, Some(300)));
    waiting(&mut s, job("second", 4, Some(300)));
    let f = run(&s, &RuntimeModel::new());
    assert_eq!(f.etas[0].p50, Some(NOW + 600));
    assert_eq!(f.etas[1].p50, Some(NOW + 900));
}

/// A queue of short jobs drains at the fleet's pace however far ahead it reaches: each
/// job frees its room when its minute is up, not when the clock's step for that distance
/// ends.
#[test]
fn a_flood_of_minute_jobs_drains_at_the_pace_the_fleet_runs_them() {
    let mut s = fleet();
    // 1,000 one-host jobs of a minute on four hosts: 250 rounds, the last from 14,940 s on.
    for i in 0..1_000 {
        waiting(&mut s, job(&format!("short-{i:04}"), 1, Some(60)));
    }
    let f = run(&s, &RuntimeModel::new());
    assert!(f.etas.iter().all(|e| e.started == f.samples));
    let last = f.etas.iter().filter_map(|e| e.p50).max().unwrap_or(0) - NOW;
    // Each round may be late by a 16th of its minute at most.
    assert!((14_940..=14_940 + 14_940 / 16).contains(&last), "{last}");
    // Round by round: the 401st job starts in the 101st round, 6,000 s on.
    let p50 = f.etas[400].p50.unwrap_or(0) - NOW;
    assert!((6_000..=6_000 + 6_000 / 16).contains(&p50), "{p50}");
}

#[test]
fn the_answer_is_the_same_on_any_number_of_threads_and_every_time() {
    let mut s = fleet();
    running(&mut s, job("a", 2, Some(1_000)), NOW - 400);
    running(&mut s, job("b", 2, Some(3_000)), NOW - 100);
    for i in 0..6 {
        waiting(&mut s, job(&format!("w{i}"), 1 + i % 3, Some(700)));
    }
    let model = spread_model();
    let one = run(&s, &model);
    let two = match forecast(
        &s,
        &model,
        &Options {
            threads: 2,
            ..Options::default()
        },
    ) {
        Ok(f) => f,
        Err(e) => unreachable!("{e}"),
    };
    assert_eq!(one, two);
    assert_eq!(one, run(&s, &model));
}

#[test]
fn an_unknown_policy_is_an_error() {
    let err = forecast(
        &fleet(),
        &RuntimeModel::new(),
        &Options {
            policy: "first-come".into(),
            ..Options::default()
        },
    );
    assert!(err.is_err_and(|e| e.contains("unknown policy")));
}

#[test]
fn a_running_job_is_drawn_only_from_runs_longer_than_it_has_run() {
    let model = spread_model();
    let mut rng = Rng::new(3);
    for elapsed in [0, 700, 1_900, 5_000] {
        for _ in 0..200 {
            let Some(total) = model.draw(&keys(), Some(1_000), elapsed, &mut rng) else {
                unreachable!("the history answers")
            };
            assert!(total > elapsed, "{total} after {elapsed}");
            if elapsed < 2_000 {
                assert!(total <= 2_000, "{total} beyond every run");
            } else {
                // Past every run: as long again as a fraction of what it ran.
                assert!(total <= 2 * elapsed, "{total}");
            }
        }
    }
}

#[test]
fn a_family_with_too_little_history_answers_from_a_coarser_key() {
    let mut model = spread_model();
    let lone = vec!["team-b/eval".to_owned(), "team-b".to_owned(), String::new()];
    model.learn(&FinishedRun {
        keys: lone.clone(),
        announced: Some(10),
        ran: 10,
        batch: None,
    });
    // One run of team-b is too little: every job's history (the 21 runs of "") answers.
    assert_eq!(
        model.basis(&lone, Some(100)),
        Basis::Ratio {
            key: String::new(),
            runs: 21
        }
    );
    // Without an announcement, durations answer.
    assert_eq!(
        model.basis(&lone, None),
        Basis::Duration {
            key: String::new(),
            runs: 21
        }
    );
}

/// The keys of a family `team-a/eval` in the queue of [`keys`].
fn eval_keys() -> Vec<String> {
    vec!["team-a/eval".to_owned(), "team-a".to_owned(), String::new()]
}

/// A finished run of `keys` that ran `ran` seconds and announced `announced`.
fn finished(keys: &[String], announced: Option<i64>, ran: i64) -> FinishedRun {
    FinishedRun {
        keys: keys.to_vec(),
        announced,
        ran,
        batch: None,
    }
}

/// `team-a/eval` with `family` runs of 100 s and one of 50,000 s, after (when `queue`) the
/// queue's other family ran 40 runs of 1,000 to 40,000 s; no run announced a runtime.
fn thin_family_model(family: usize, queue: bool) -> RuntimeModel {
    let others = (1..=40)
        .filter(|_| queue)
        .map(|i| finished(&keys(), None, 1_000 * i));
    let eval = std::iter::repeat_n(100, family)
        .chain([50_000])
        .map(|ran| finished(&eval_keys(), None, ran));
    RuntimeModel::learned(&others.chain(eval).collect::<Vec<_>>())
}

#[test]
fn a_draw_chooses_among_enough_runs_longer_than_the_job_has_run() {
    let eval = eval_keys();
    let quantiles = [0.05, 0.25, 0.5, 0.75, 0.95];
    // 25 runs of its own: the family answers a job that has not started...
    let model = thin_family_model(24, true);
    assert_eq!(
        model.basis(&eval, None),
        Basis::Duration {
            key: "team-a/eval".to_owned(),
            runs: 25
        }
    );
    for q in quantiles {
        let total = model.at_quantile(&eval, None, 0, q, 0.5);
        assert!(total.is_some_and(|t| t == 100 || t == 50_000), "{total:?}");
    }
    // ...but one that has run 5,000 s outlasted all but one of them: the queue's runs
    // longer than 5,000 s (the other family's 6,000 to 40,000 s and the 50,000 s one) say
    // when it ends, not that one run alone.
    let ends: Vec<i64> = quantiles
        .iter()
        .filter_map(|q| model.at_quantile(&eval, None, 5_000, *q, 0.5))
        .collect();
    assert_eq!(ends.len(), quantiles.len());
    assert!(
        ends.iter().all(|t| (6_000..=50_000).contains(t)),
        "{ends:?}"
    );
    assert!(ends.windows(2).all(|w| w[0] < w[1]), "{ends:?}");
    // Had no key as many runs that long, the family's would answer as before.
    let alone = thin_family_model(24, false);
    assert_eq!(
        alone.at_quantile(&eval, None, 5_000, 0.5, 0.5),
        Some(50_000)
    );
}

#[test]
fn a_family_with_fewer_runs_than_a_draw_wants_is_drawn_from_its_queue_but_priors_its_batches() {
    let eval = eval_keys();
    // Ten runs of its own: enough to go on, too few to choose among.
    let model = thin_family_model(9, true);
    assert_eq!(
        model.basis(&eval, None),
        Basis::Duration {
            key: "team-a".to_owned(),
            runs: 50
        }
    );
    let total = model.at_quantile(&eval, None, 0, 0.5, 0.5);
    assert!(total.is_some_and(|t| t > 100 && t < 50_000), "{total:?}");
    // A batch of the family starts from the family's own ten runs.
    let prior = model.batch_prior(&eval, None);
    assert_eq!(
        prior.map(|(ratio, points)| (ratio, points.len())),
        Some((false, 10))
    );
}

#[test]
fn a_ratio_is_drawn_from_a_key_with_enough_runs_that_announced_one() {
    let eval = eval_keys();
    // The family ran what it announced, ten times; the queue's other family twice that, 30
    // times: the queue's 40 answer, a third of them from the family.
    let runs: Vec<FinishedRun> = (0..30)
        .map(|_| finished(&keys(), Some(1_000), 2_000))
        .chain((0..10).map(|_| finished(&eval, Some(1_000), 1_000)))
        .collect();
    let model = RuntimeModel::learned(&runs);
    assert_eq!(
        model.basis(&eval, Some(1_000)),
        Basis::Ratio {
            key: "team-a".to_owned(),
            runs: 40
        }
    );
    assert_eq!(model.at_quantile(&eval, Some(500), 0, 0.1, 0.5), Some(500));
    assert_eq!(
        model.at_quantile(&eval, Some(500), 0, 0.9, 0.5),
        Some(1_000)
    );
    // Ten more of the family's own: it answers alone, and every draw is its ratio of 1.
    let more: Vec<FinishedRun> = runs
        .iter()
        .cloned()
        .chain((0..10).map(|_| finished(&eval, Some(1_000), 1_000)))
        .collect();
    let model = RuntimeModel::learned(&more);
    for q in [0.1, 0.5, 0.9] {
        assert_eq!(model.at_quantile(&eval, Some(500), 0, q, 0.5), Some(500));
    }
}

#[test]
fn the_history_of_a_key_stays_bounded_and_recent() {
    let mut model = RuntimeModel::new();
    let k = vec!["k".to_owned()];
    let kept = i64::try_from(runtimes::KEPT_PER_KEY).unwrap_or(i64::MAX);
    for i in 0..kept + 500 {
        // The oldest 500 runs ran 1..=500 s of the 1,000 s they announced; the rest 2,000 s.
        let ran = if i < 500 { i + 1 } else { 2_000 };
        model.learn(&FinishedRun {
            keys: k.clone(),
            announced: Some(1_000),
            ran,
            batch: None,
        });
    }
    let runs = runtimes::KEPT_PER_KEY;
    let key = || "k".to_owned();
    assert_eq!(model.basis(&k, None), Basis::Duration { key: key(), runs });
    assert_eq!(
        model.basis(&k, Some(1_000)),
        Basis::Ratio { key: key(), runs }
    );
    // The oldest 500 runs are gone from both the durations and the ratios (and the ratios'
    // order by announcement): every draw is of the 2,000 s runs.
    let mut rng = Rng::new(1);
    for _ in 0..500 {
        assert_eq!(model.draw(&k, None, 0, &mut rng), Some(2_000));
        assert_eq!(model.draw(&k, Some(1_000), 0, &mut rng), Some(2_000));
    }
}

#[test]
fn a_ratio_is_drawn_from_runs_that_announced_about_as_much() {
    // Short announcements were honest, long ones five times too generous: drawn from the
    // family as a whole, a job announcing ten hours would run anything from two to ten.
    let mut model = RuntimeModel::new();
    let k = vec!["k".to_owned()];
    for i in 0..200 {
        let (announced, ran) = if i % 2 == 0 {
            (3_600 + i, 3_600 + i)
        } else {
            (36_000 + i, 7_200 + i / 5)
        };
        model.learn(&FinishedRun {
            keys: k.clone(),
            announced: Some(announced),
            ran,
            batch: None,
        });
    }
    let mut rng = Rng::new(5);
    for _ in 0..300 {
        let long = model
            .draw(&k, Some(36_100), 0, &mut rng)
            .unwrap_or_default();
        assert!((7_100..=7_400).contains(&long), "{long}");
        let short = model.draw(&k, Some(3_700), 0, &mut rng).unwrap_or_default();
        assert!((3_500..=3_900).contains(&short), "{short}");
    }
    // A job that has run past every near run falls back on the family's every ratio.
    let overdue = model
        .draw(&k, Some(3_700), 5_000, &mut rng)
        .unwrap_or_default();
    assert!(overdue > 5_000);
}

#[test]
fn the_announced_baseline_trusts_announcements_and_ends_overdue_jobs_now() {
    let model = RuntimeModel::announced_only(Some(300));
    let mut rng = Rng::new(1);
    assert_eq!(model.draw(&keys(), Some(1_000), 0, &mut rng), Some(1_000));
    assert_eq!(model.draw(&keys(), None, 0, &mut rng), Some(300));
    assert_eq!(
        model.draw(&keys(), Some(1_000), 1_500, &mut rng),
        Some(1_501)
    );
    assert_eq!(
        RuntimeModel::announced_only(None).draw(&keys(), None, 0, &mut rng),
        None
    );
}

#[test]
fn jobs_arriving_as_they_recently_did_go_ahead_when_they_rank_higher() {
    // The fleet is full until NOW + 600; a whole-fleet job of priority 0 waits. Lately, a
    // whole-fleet job of priority 10 came every ten minutes: with arrivals, one of them is
    // likely to be there when the fleet frees, and the waiting job starts later.
    let mut s = fleet();
    running(&mut s, job("big", 4, Some(1_000)), NOW - 400);
    waiting(&mut s, job("low", 4, Some(300)));
    for i in 0..36 {
        let mut urgent = job(&format!("urgent-{i}"), 4, Some(300));
        urgent.priority = 10;
        s.recent.push(RecentJob {
            job: Arc::new(urgent),
            keys: keys().into(),
        });
    }
    let alone = match forecast(
        &s,
        &RuntimeModel::new(),
        &Options {
            arrivals_window: 0,
            ..Options::default()
        },
    ) {
        Ok(f) => f,
        Err(e) => unreachable!("{e}"),
    };
    let with_arrivals = run(&s, &RuntimeModel::new());
    assert_eq!(alone.etas[0].p50, Some(NOW + 600));
    let (Some(a), Some(b)) = (alone.etas[0].p50, with_arrivals.etas[0].p50) else {
        unreachable!("{alone:?} {with_arrivals:?}")
    };
    assert!(b > a, "{with_arrivals:?}");
}

#[test]
fn how_alike_a_familys_runs_are_is_learned() {
    let mut rng = Rng::new(5);
    let family = |f: usize| vec![format!("f{f}"), String::new()];
    // Families whose consecutive runs are alike: each family runs in long stretches of one
    // length, far from the others.
    let mut alike = RuntimeModel::new();
    for stretch in 0..40u8 {
        let length = 100 + 1_000 * i64::from(stretch % 7);
        for _ in 0..10 {
            alike.learn(&FinishedRun {
                keys: family(usize::from(stretch % 3)),
                announced: None,
                ran: length + i64::try_from(rng.below(10)).unwrap_or(0),
                batch: None,
            });
        }
    }
    // Families whose runs are drawn independently.
    let mut apart = RuntimeModel::new();
    for i in 0..400 {
        apart.learn(&FinishedRun {
            keys: family(i % 3),
            announced: None,
            ran: 100 + i64::try_from(rng.below(6_000)).unwrap_or(0),
            batch: None,
        });
    }
    assert!(alike.correlation() > 0.6, "{}", alike.correlation());
    assert!(apart.correlation() < 0.2, "{}", apart.correlation());
    assert!(RuntimeModel::new().correlation().abs() < f64::EPSILON);
}

#[test]
fn calibration_widens_ranges_by_how_far_past_starts_fell_outside() {
    let mut c = Calibration::new();
    // Every past range [made + 100, made + 1,000, made + 1,900] made at `made` saw its job
    // start at made + 2,900: a full forecast wait (1,000 s) after its 90th percentile.
    for k in 0..i64::try_from(calibration::MIN_SCORES).unwrap_or(0) - 1 {
        let made = k * 10_000;
        c.record(
            made,
            [Some(made + 100), Some(made + 1_000), Some(made + 1_900)],
            made + 2_900,
        );
    }
    let mut f = Forecast {
        now: NOW,
        samples: 1,
        etas: vec![Eta {
            job: "default/x".into(),
            p10: Some(NOW + 100),
            p50: Some(NOW + 2_000),
            p90: Some(NOW + 3_000),
            started: 1,
            buys_capacity: 0,
            basis: Basis::Unknown,
        }],
        unknown_runtimes: 0,
        margin: None,
    };
    let before = f.clone();
    c.apply(&mut f, &[]);
    assert_eq!(f, before, "too few scores: nothing changes");
    c.record(0, [Some(100), Some(1_000), Some(1_900)], 2_900);
    c.apply(&mut f, &[]);
    // Late by one forecast wait: the 90th percentile moves out by this range's wait (2,000 s);
    // never early, so the 10th stays (margins only widen).
    assert_eq!(f.margin, Some((0.0, 1.0)));
    assert_eq!(
        (f.etas[0].p10, f.etas[0].p90),
        (Some(NOW + 100), Some(NOW + 5_000))
    );
}

#[test]
fn jobs_still_waiting_past_their_range_count_as_late() {
    let range = [Some(100), Some(1_000), Some(1_900)];
    assert_eq!(Calibration::late(0, range, 1_500), None);
    assert_eq!(Calibration::late(0, range, 2_900), Some(1.0));
    // Thirty ranges that held, and as many jobs still waiting a wait past theirs: the late
    // margin is theirs.
    let mut c = Calibration::new();
    for k in 0..30 {
        c.record(
            k,
            [Some(k + 100), Some(k + 1_000), Some(k + 1_900)],
            k + 1_000,
        );
    }
    assert_eq!(c.margins(&[]), Some((0.0, 0.0)));
    let late = vec![1.0; 30];
    assert_eq!(c.margins(&late), Some((0.0, 1.0)));
}

#[test]
fn ranges_given_that_keep_missing_raise_their_sides_level_until_ranges_hold_again() {
    // A hundred past ranges whose jobs started from 0.00 to 0.99 of a forecast wait after
    // their 90th percentile: the late margin is their 90th percentile, 0.9 or so.
    let mut c = Calibration::new();
    for k in 0..100 {
        c.record(0, [Some(100), Some(1_000), Some(1_900)], 1_900 + 10 * k);
    }
    let late = |c: &Calibration| c.margins(&[]).map_or(f64::NAN, |m| m.1);
    let base = late(&c);
    assert!((0.85..=0.95).contains(&base), "{base}");
    // Ranges given with that margin keep missing late (the future is busier than the
    // past): the late side's level rises, and its margin with it, up to the largest score.
    for _ in 0..100 {
        c.judge([Some(100), Some(1_000), Some(3_700)], 4_000);
    }
    let raised = late(&c);
    assert!(raised > base && raised <= 0.99, "{base} → {raised}");
    assert_eq!(
        c.margins(&[]).map(|m| m.0),
        Some(0.0),
        "the early side held"
    );
    // Then they hold, a long while: the level falls back to where it started, and no
    // further (a range is not narrowed because the ranges given lately held).
    for _ in 0..100_000 {
        c.judge([Some(100), Some(1_000), Some(3_700)], 1_000);
    }
    assert_eq!(late(&c).to_bits(), base.to_bits());
}

fn what_if(s: &Snapshot, changes: &[whatif::Change]) -> Snapshot {
    match whatif::apply(s, changes) {
        Ok(s) => s,
        Err(e) => unreachable!("{e}"),
    }
}

#[test]
fn more_nodes_start_a_waiting_job_sooner_and_the_draws_stay_the_same() {
    // Two whole-fleet jobs wait behind a full fleet; four more hosts (and quota for them)
    // start the first at once.
    let mut s = fleet();
    running(&mut s, job("big", 4, Some(1_000)), NOW - 400);
    waiting(&mut s, job("first", 4, Some(300)));
    waiting(&mut s, job("second", 4, Some(300)));
    let model = spread_model();
    let before = run(&s, &model);
    let changed = what_if(
        &s,
        &[
            whatif::Change::AddNodes {
                flavor: "gpu".into(),
                count: 4,
                block: None,
            },
            whatif::Change::Quota {
                cluster_queue: "shared".into(),
                flavor: "gpu".into(),
                resource: "nvidia.com/gpu".into(),
                nominal: Some(Quantity("64".into())),
                borrowing_limit: None,
            },
        ],
    );
    assert_eq!(changed.nodes.len(), 8);
    let after = run(&changed, &model);
    assert_eq!(after.etas[0].p90, Some(NOW));
    for (b, a) in before.etas.iter().zip(&after.etas) {
        assert!(a.p50 <= b.p50 && a.p90 <= b.p90, "{b:?} → {a:?}");
    }
    // Nodes without quota start nothing sooner.
    let nodes_only = what_if(
        &s,
        &[whatif::Change::AddNodes {
            flavor: "gpu".into(),
            count: 4,
            block: Some("b9".into()),
        }],
    );
    assert_eq!(run(&nodes_only, &model), before);
}

#[test]
fn removed_nodes_send_their_jobs_back_to_the_queue_and_a_drained_node_takes_nothing() {
    let mut s = fleet();
    running(&mut s, job("half", 2, Some(1_000)), NOW - 400);
    waiting(&mut s, job("pair", 2, Some(300)));
    let f = run(&s, &RuntimeModel::new());
    assert_eq!(f.etas[0].p50, Some(NOW));
    // Remove the two hosts `half` does not use, and `pair` waits for `half`.
    let used: Vec<String> = s.running[0].holding.pod_sets[0].nodes.clone();
    let free: Vec<String> = s
        .nodes
        .iter()
        .map(|n| n.name.clone())
        .filter(|n| !used.contains(n))
        .collect();
    let drained = what_if(
        &s,
        &free
            .iter()
            .map(|n| whatif::Change::Drain { node: n.clone() })
            .collect::<Vec<_>>(),
    );
    assert_eq!(
        run(&drained, &RuntimeModel::new()).etas[0].p50,
        Some(NOW + 600)
    );
    let all_gone = what_if(
        &s,
        &[whatif::Change::RemoveNodes {
            flavor: "gpu".into(),
            count: 4,
            block: None,
        }],
    );
    assert!(all_gone.running.is_empty());
    assert_eq!(all_gone.waiting.len(), 2);
    let f = run(&all_gone, &RuntimeModel::new());
    assert!(f.etas.iter().all(|e| e.p50.is_none()), "{f:?}");
}

#[test]
fn a_job_not_yet_submitted_gets_a_range_of_its_own() {
    let mut s = fleet();
    running(&mut s, job("big", 4, Some(1_000)), NOW - 400);
    let planned = WaitingJob {
        job: Arc::new(job("planned", 2, Some(600))),
        keys: keys().into(),
        queues_at: None,
        batch: None,
    };
    let changed = what_if(&s, &[whatif::Change::Submit(planned.clone())]);
    let f = run(&changed, &spread_model());
    assert_eq!(f.etas[0].job, "default/planned");
    assert!(f.etas[0].p50.is_some_and(|t| t > NOW));
    let twice = whatif::apply(&changed, &[whatif::Change::Submit(planned)]);
    assert!(twice.is_err_and(|e| e.contains("exists")));
}

#[test]
fn a_what_if_naming_what_is_not_there_is_an_error() {
    let s = fleet();
    let errors = [
        whatif::Change::AddNodes {
            flavor: "tpu".into(),
            count: 1,
            block: None,
        },
        whatif::Change::RemoveNodes {
            flavor: "gpu".into(),
            count: 5,
            block: None,
        },
        whatif::Change::Drain {
            node: "nowhere".into(),
        },
        whatif::Change::Quota {
            cluster_queue: "shared".into(),
            flavor: "gpu".into(),
            resource: "memory".into(),
            nominal: None,
            borrowing_limit: None,
        },
    ];
    for change in errors {
        assert!(
            whatif::apply(&s, std::slice::from_ref(&change)).is_err(),
            "{change:?}"
        );
    }
}

#[test]
fn a_range_from_32_runs_ends_at_the_3rd_and_30th_so_one_more_run_falls_inside_82_percent() {
    let starts: Vec<Option<i64>> = (1..=32).map(Some).collect();
    assert_eq!(super::range_end(&starts, 10, false), Some(3));
    assert_eq!(super::range_end(&starts, 90, true), Some(30));
    // One more run falls below the k-th of n with chance k / (n + 1): 3 / 33 below, 3 / 33
    // above, whatever the runs' distribution. Counted over every place it can take:
    let (mut below, mut above) = (0, 0);
    for place in 0..=32 {
        let drawn = i64::from(place) * 2 + 1; // the runs at 2, 4, …, 64; one more between
        let scaled: Vec<Option<i64>> = (1..=32).map(|t| Some(t * 2)).collect();
        below += usize::from(drawn < super::range_end(&scaled, 10, false).unwrap_or(0));
        above += usize::from(drawn > super::range_end(&scaled, 90, true).unwrap_or(0));
    }
    assert_eq!((below, above), (3, 3));
    // Few runs: the first and the last; runs past the horizon sort last and stay `None`.
    assert_eq!(super::range_end(&[Some(5), Some(9)], 10, false), Some(5));
    assert_eq!(super::range_end(&[Some(5), None], 90, true), None);
    assert_eq!(super::range_end(&[], 10, false), None);
}

/// A family whose jobs run anywhere from a minute to half a day, in batches of four whose
/// jobs run within a few percent of each other (as the jobs of one sweep do): 60 batches,
/// their means spread evenly in log from 60 s to 43,200 s.
fn batched_model(batches_alike: bool) -> RuntimeModel {
    let mut model = RuntimeModel::new();
    let mut rng = Rng::new(7);
    for b in 0..60_i32 {
        for j in 0..4_i32 {
            // Alike: the batch's mean within ±7.5 %. Not: every run on its own, anywhere in
            // the family's span, so a batch is jobs submitted together by chance.
            let at = if batches_alike {
                f64::from(b) / 59.0
            } else {
                rng.unit()
            };
            let mean = 60.0 * 720.0_f64.powf(at);
            let spread = if batches_alike {
                1.0 + 0.05 * (f64::from(j) - 1.5)
            } else {
                1.0
            };
            #[expect(clippy::cast_possible_truncation, reason = "seconds, rounded")]
            let ran = (mean * spread).round() as i64;
            model.learn(&FinishedRun {
                keys: keys(),
                announced: None,
                ran,
                batch: Some(format!("past@{b}")),
            });
        }
    }
    model
}

#[test]
fn a_batch_whose_first_job_ran_long_makes_the_job_running_beside_it_long() {
    // "first" holds the fleet and has run 100 s; "second" waits for all of it. A job of
    // their batch ran 30,000 s. The family alone says most of its jobs are done within an
    // hour; the batch says "first" runs about 30,000 s.
    let mut model = batched_model(true);
    model.learn(&FinishedRun {
        keys: keys(),
        announced: None,
        ran: 30_000,
        batch: Some("now@1".to_owned()),
    });
    let snapshot = |batch: Option<&str>| {
        let mut s = fleet();
        running(&mut s, job("first", 4, None), NOW - 100);
        waiting(&mut s, job("second", 4, None));
        s.running[0].batch = batch.map(str::to_owned);
        s.waiting[0].batch = batch.map(str::to_owned);
        s
    };
    let with = run(&snapshot(Some("now@1")), &model).etas[0].clone();
    let p = |t: Option<i64>| t.unwrap_or(i64::MAX) - NOW;
    assert!(
        p(with.p10) > 25_000 && p(with.p90) < 40_000,
        "{with:?}: the batch's run says about 30,000 s"
    );
    let without = run(&snapshot(None), &model).etas[0].clone();
    assert!(
        p(without.p10) < 5_000,
        "{without:?}: the family alone says most runs are short"
    );
}

/// "a" holding the whole fleet, having run `ran` seconds; "b" waiting next, of a's
/// `batch`; "c" (of no batch) waiting behind "b".
fn queue_behind(ran: i64, batch: Option<&str>) -> Snapshot {
    let mut s = fleet();
    running(&mut s, job("a", 4, None), NOW - ran);
    waiting(&mut s, job("b", 4, None));
    waiting(&mut s, job("c", 4, None));
    s.running[0].batch = batch.map(str::to_owned);
    s.waiting[0].batch = batch.map(str::to_owned);
    s
}

#[test]
fn a_batch_still_running_long_makes_its_waiting_jobs_long_too() {
    // "a" has run 20,000 s and holds the fleet; "b" of its batch waits next, and "c" (of no
    // batch) behind "b". Nothing of the batch has finished: that "a" is still running is
    // all it shows, and it says "b" will run long as well, so "c" starts late.
    let model = batched_model(true);
    let p = |t: Option<i64>| t.unwrap_or(i64::MAX) - NOW;
    let with = run(&queue_behind(20_000, Some("now@2")), &model);
    let without = run(&queue_behind(20_000, None), &model);
    assert_eq!(with.etas[1].job, "default/c");
    assert!(
        p(with.etas[1].p10) > 15_000,
        "{:?}: b runs about as long as a has",
        with.etas[1]
    );
    assert!(
        p(without.etas[1].p10) < 10_000,
        "{:?}: the family alone says b is likely short",
        without.etas[1]
    );
}

#[test]
fn batches_of_jobs_submitted_together_by_chance_leave_the_family_to_answer() {
    // Jobs grouped in batches that run no more alike than any two of the family: the
    // batches explain nothing, and the ranges are the family's.
    let model = batched_model(false);
    assert_eq!(
        run(&queue_behind(2_000, Some("past@3")), &model).etas,
        run(&queue_behind(2_000, None), &model).etas
    );
}
