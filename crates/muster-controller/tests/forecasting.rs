//! Start-time ranges from a controller's state: the live cluster read into a forecast, each
//! waiting job's range served and written into its status, finished runs learned once, and
//! what-ifs read from the visibility API's parameters, refused with the form they take.

mod support;

use std::collections::BTreeMap;

use muster_api::GpuJob;
use muster_api::gpujob::GpuJobPhase;
use muster_controller::forecasting::{self, whatif};
use muster_controller::plan::plan;
use muster_controller::state::State;
use muster_controller::visibility;
use support::{at, cluster, job, land_all, status_of};

/// `job` announcing `seconds` of runtime.
fn announcing(mut job: GpuJob, seconds: i64) -> GpuJob {
    job.spec.expected_runtime_seconds = Some(seconds);
    job
}

/// 16 GPUs of quota: `run` (2 pods, 600 s) holds them from second 10; `next` (2 pods,
/// 300 s) and `last` (1 pod, 300 s) wait behind it.
fn busy() -> State {
    let mut state = cluster(
        16,
        vec![
            announcing(job("run", 2, 0), 600),
            announcing(job("next", 2, 1), 300),
            announcing(job("last", 1, 2), 300),
        ],
    );
    for t in 10..13 {
        let pass = plan(&mut state, at(t));
        land_all(&mut state, &pass.actions, t);
    }
    state
}

/// Forecasts `state` at second `t` and keeps the forecast; returns a copy.
fn forecast_at(state: &mut State, t: i64) -> forecasting::Latest {
    let input = state.gather_forecast_input(at(t).as_second());
    let latest = match forecasting::make(input, forecasting::live_options()) {
        Ok(latest) => latest,
        Err(e) => unreachable!("{e}"),
    };
    state.keep_forecast(latest.clone());
    latest
}

#[test]
fn every_waiting_job_gets_a_range_which_its_status_and_the_waiting_list_show() {
    let mut state = busy();
    let latest = forecast_at(&mut state, 20);
    let answer = visibility::forecast(&latest, None, &|_| true);
    let names: Vec<_> = answer.items.iter().map(|j| j.name.clone()).collect();
    assert_eq!(names, [Some("next".to_owned()), Some("last".to_owned())]);
    // No job has finished: announced runtimes are exact, every range one point. `run` was
    // admitted at second 10 and runs 600 s; `next` then runs 300 s.
    let likely = |i: usize| answer.items[i].range.likely.as_ref().map(|t| t.0);
    assert_eq!(likely(0), Some(at(610)));
    // `last` starts at 910, fifteen minutes out: beyond ten minutes the forward runs' clock
    // takes events at the end of a step, here four seconds, and starts what they admit
    // halfway through it.
    assert_eq!(likely(1), Some(at(911)));
    assert_eq!(answer.items[0].range.earliest, answer.items[0].range.latest);
    assert_eq!(answer.items[0].runtime_basis, "announced");
    assert_eq!((answer.history, answer.unknown_runtimes), (0, 0));

    // Passes write each waiting job's range into its status as one of its figures (at most
    // every refresh interval: the statuses were written at second 10), and the waiting list
    // serves it.
    for t in 21..60 {
        let pass = plan(&mut state, at(t));
        land_all(&mut state, &pass.actions, t);
    }
    let range = status_of(&state, "team-a/next")
        .pending_reason
        .and_then(|r| r.start_range);
    assert_eq!(
        range.as_ref().and_then(|r| r.likely.as_ref()).map(|t| t.0),
        Some(at(610))
    );
    let list = visibility::pending_jobs(
        &state,
        &visibility::Scope::Namespace("team-a".into()),
        &|_| true,
    )
    .unwrap_or_else(|e| unreachable!("{e:?}"));
    assert_eq!(list.items[0].start_range, range);
}

#[test]
fn a_finished_run_is_learned_once_and_outlives_its_gpujob() {
    let mut state = busy();
    let mut done = status_of(&state, "team-a/run");
    done.phase = Some(GpuJobPhase::Succeeded);
    done.start_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(10)));
    done.completion_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(
        400,
    )));
    let mut finished = announcing(job("run", 2, 0), 600);
    finished.metadata.resource_version = Some("9".to_owned());
    finished.status = Some(done);
    state.apply(finished.clone());
    let history =
        |latest: &forecasting::Latest| visibility::forecast(latest, None, &|_| true).history;
    assert_eq!(history(&forecast_at(&mut state, 500)), 1);
    assert_eq!(history(&forecast_at(&mut state, 501)), 1, "learned once");
    state.delete(&finished);
    assert_eq!(
        history(&forecast_at(&mut state, 502)),
        1,
        "kept after deletion"
    );
}

#[test]
fn a_what_if_changes_the_snapshot_and_names_what_the_cluster_lacks() {
    let mut state = busy();
    let latest = forecast_at(&mut state, 20);
    let now = at(20).as_second();
    let what = match whatif::parse("addNodes=h100%3A2%3Ab3&drain=n4", state.index(), now) {
        Ok(what) => what,
        Err(e) => unreachable!("{e}"),
    };
    // More nodes do not help a job held back by quota; a quota raise does.
    let (_, forecast) = whatif::run(&latest, &what).unwrap_or_else(|e| unreachable!("{e}"));
    let next = |f: &muster_sim::forecast::Forecast| {
        f.etas
            .iter()
            .find(|e| e.job == "team-a/next")
            .and_then(|e| e.p50)
    };
    let before = latest_p50(&latest, 0);
    assert_eq!(before, Some(at(610).as_second()));
    assert_eq!(next(&forecast), before);
    let quota = whatif::parse(
        "quota=research%3Ah100%3Anvidia.com%2Fgpu%3A32",
        state.index(),
        now,
    )
    .unwrap_or_else(|e| unreachable!("{e}"));
    let (_, raised) = whatif::run(&latest, &quota).unwrap_or_else(|e| unreachable!("{e}"));
    assert_eq!(next(&raised), Some(now), "next starts at once");
    let answer = visibility::forecast(
        &latest,
        Some((
            &latest_snapshot(&latest, &quota),
            &raised,
            &["quota".to_owned()],
        )),
        &|ns| ns == "team-b",
    );
    assert!(
        answer
            .items
            .iter()
            .all(|j| j.name.is_none() && j.before.is_some())
    );
    assert_eq!(answer.hidden, 2);

    for (query, says) in [
        ("addNodes=h100", "FLAVOR:COUNT[:BLOCK]"),
        ("removeNodes=h100%3A0", "FLAVOR:COUNT[:BLOCK]"),
        ("drain=", "name a node"),
        (
            "quota=research%3Ah100",
            "CLUSTERQUEUE:FLAVOR:RESOURCE:NOMINAL",
        ),
        (
            "quota=research%3Ah100%3Anvidia.com%2Fgpu%3Alots",
            "not a quantity",
        ),
        (
            "quota=research%3Ah100%3Anvidia.com%2Fgpu%3A%3A",
            "changes nothing",
        ),
        ("submit=%7B", "not a GpuJob"),
    ] {
        match whatif::parse(query, state.index(), now) {
            Ok(_) => unreachable!("{query} was taken"),
            Err(e) => assert!(e.contains(says), "{query}: {e}"),
        }
    }
    let unknown = whatif::parse("addNodes=a100%3A2", state.index(), now)
        .unwrap_or_else(|e| unreachable!("{e}"));
    match whatif::run(&latest, &unknown) {
        Ok(_) => unreachable!("a100 was taken"),
        Err(e) => assert!(e.contains("a100"), "{e}"),
    }
}

fn latest_p50(latest: &forecasting::Latest, i: usize) -> Option<i64> {
    let answer = visibility::forecast(latest, None, &|_| true);
    answer.items[i]
        .range
        .likely
        .as_ref()
        .map(|t| t.0.as_second())
}

fn latest_snapshot(
    latest: &forecasting::Latest,
    what: &whatif::WhatIf,
) -> muster_sim::forecast::Snapshot {
    match whatif::run(latest, what) {
        Ok((snapshot, _)) => snapshot,
        Err(e) => unreachable!("{e}"),
    }
}

/// Five gangs with exact announced runtimes on 32 GPUs, driven second by second from 10 to
/// 700 as the kubelet would run them, forecast (and the forecast kept, as the controller's
/// forecaster keeps it) at each second of `forecasts_at`: when each job was released, and the
/// forecasts made.
fn drive_exact_runtimes(forecasts_at: &[i64]) -> (BTreeMap<String, i64>, Vec<forecasting::Latest>) {
    let spec = [
        ("j1", 2, 600),
        ("j2", 2, 300),
        ("j3", 2, 200),
        ("j4", 1, 100),
        ("j5", 2, 100),
    ];
    let jobs = spec
        .iter()
        .zip(0..)
        .map(|(&(name, pods, runtime), created)| announcing(job(name, pods, created), runtime))
        .collect();
    let mut state = cluster(32, jobs);
    let mut started: BTreeMap<String, i64> = BTreeMap::new();
    let mut released: Vec<(String, i64, muster_controller::plan::Action)> = Vec::new();
    let mut forecasts = Vec::new();
    for t in 10..700 {
        // Gangs whose runtime is up end now.
        for (job, since, release) in &released {
            let runtime = spec.iter().find(|s| job.ends_with(s.0)).map_or(0, |s| s.2);
            if *since + runtime == t {
                report(&mut state, release, "Succeeded", false);
            }
        }
        // Passes until the second's work is done (a finish lands, then its quota is free).
        for _ in 0..4 {
            let pass = plan(&mut state, at(t));
            for action in &pass.actions {
                if let muster_controller::plan::Action::Release { job, .. } = action {
                    started.insert(job.to_string(), t);
                    released.push((job.to_string(), t, action.clone()));
                }
            }
            land_all(&mut state, &pass.actions, t);
            for (_, since, release) in &released {
                if *since == t {
                    report(&mut state, release, "Running", true);
                }
            }
            if pass.actions.is_empty() {
                break;
            }
        }
        if forecasts_at.contains(&t) {
            forecasts.push(forecast_at(&mut state, t));
        }
    }
    (started, forecasts)
}

/// The controller's own lifecycle, driven second by second (every gang Ready at once, each
/// ending when its announced runtime is up), starts every job at the second the forecast's
/// forward runs say: with runtimes known exactly, the two agree to the second. Jobs of two
/// sizes in two blocks, a queue order, and a small job that starts before a larger one
/// ahead of it can: j3 when j2 ends, j4 beside it when j3 ends, j5 when j1 ends.
#[test]
fn the_controller_starts_jobs_when_the_forward_runs_say_when_runtimes_are_exact() {
    let (started, forecasts) = drive_exact_runtimes(&[11]);
    let Some(latest) = forecasts.into_iter().next() else {
        unreachable!("forecast at 11")
    };
    let answer = visibility::forecast(&latest, None, &|_| true);
    let forecast_starts: BTreeMap<String, i64> = answer
        .items
        .iter()
        .map(|j| {
            let name = format!("team-a/{}", j.name.clone().unwrap_or_default());
            let likely = j.range.likely.as_ref().map_or(0, |t| t.0.as_second());
            (name, likely - at(0).as_second())
        })
        .collect();
    let real: BTreeMap<String, i64> = started
        .iter()
        .filter(|(job, _)| forecast_starts.contains_key(*job))
        .map(|(job, t)| (job.clone(), *t))
        .collect();
    assert_eq!(
        forecast_starts.keys().collect::<Vec<_>>(),
        ["team-a/j3", "team-a/j4", "team-a/j5"]
    );
    assert_eq!(real, forecast_starts);
    assert_eq!(forecast_starts["team-a/j3"], 310);
}

/// Forecasts only read the controller's state and write ranges: with one kept every 7
/// seconds, each pass writing the ranges into waiting jobs' statuses, every job is
/// released at the same second as with none.
#[test]
fn forecasts_leave_every_release_where_it_was() {
    let (without, none) = drive_exact_runtimes(&[]);
    assert!(none.is_empty());
    let every_7: Vec<i64> = (11..700).step_by(7).collect();
    let (with, made) = drive_exact_runtimes(&every_7);
    assert_eq!(made.len(), every_7.len());
    assert!(
        made.iter()
            .any(|latest| !visibility::forecast(latest, None, &|_| true)
                .items
                .is_empty()),
        "some forecast saw a waiting job"
    );
    assert_eq!(without.len(), 5, "{without:?}");
    assert_eq!(with, without);
}

/// Reports the pods `release` created as the kubelet would: in `phase`, Ready or not.
fn report(state: &mut State, release: &muster_controller::plan::Action, phase: &str, ready: bool) {
    let muster_controller::plan::Action::Release { gang, .. } = release else {
        unreachable!("not a release")
    };
    for pod in &gang.pods {
        state.apply(support::with_phase(pod.clone(), phase, ready));
    }
}

/// A gang not Ready within its pods-ready timeout is evicted and backs off; while its pods
/// are still leaving, the controller holds its quota (hold-until-landed). A forecast made
/// then takes it as what it is — done with this attempt, queuing again when its backoff ends
/// — not as a job running on to its announced end: the job behind it starts once the pods
/// are gone, and the evicted one gets a range of its own after that.
#[test]
fn a_gang_evicted_while_its_pods_leave_is_forecast_to_queue_again_not_to_run_on() {
    let mut stuck = announcing(job("stuck", 2, 0), 600);
    stuck.spec.pods_ready_timeout_seconds = Some(60);
    let mut state = cluster(16, vec![stuck, announcing(job("next", 2, 1), 300)]);
    let mut evicted_at = None;
    for t in 10..200 {
        let pass = plan(&mut state, at(t));
        for action in &pass.actions {
            match action {
                // Its pods never become Ready.
                muster_controller::plan::Action::Release { .. } => {
                    support::land(&mut state, action, t);
                    report(&mut state, action, "Running", false);
                }
                // The eviction's status lands; its pods are still there.
                muster_controller::plan::Action::Evict { .. } => {
                    support::land_as(&mut state, action, support::Landing::CutShort, t);
                    evicted_at = Some(t);
                }
                _ => support::land(&mut state, action, t),
            }
        }
        if evicted_at.is_some() {
            break;
        }
    }
    let Some(evicted) = evicted_at else {
        unreachable!("the gang times out within 200 s")
    };
    assert_eq!(evicted, 70, "admitted at 10, 60 s to be Ready");
    let now = evicted + 1;
    let pass = plan(&mut state, at(now));
    land_all(&mut state, &pass.actions, now);
    assert!(
        !pass
            .actions
            .iter()
            .any(|a| matches!(a, muster_controller::plan::Action::Release { .. })),
        "nothing starts while the evicted gang's pods are there"
    );
    let latest = forecast_at(&mut state, now);
    let answer = visibility::forecast(&latest, None, &|_| true);
    let likely = |name: &str| {
        answer
            .items
            .iter()
            .find(|j| j.name.as_deref() == Some(name))
            .and_then(|j| j.range.likely.as_ref())
            .map(|t| t.0.as_second() - at(0).as_second())
    };
    // `next` starts now, not when `stuck` would have run its 600 s; `stuck` queues again at
    // the end of its 30 s backoff and starts once `next` has run its 300 s.
    assert_eq!(likely("next"), Some(now));
    assert_eq!(likely("stuck"), Some(now + 300));
}
