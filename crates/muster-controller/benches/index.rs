//! The controller's index at fleet scale: 10,000 GPU nodes and 100,000 running pods (other
//! teams' work), plus 1,000 waiting GpuJobs. Measures how long folding in the watch events
//! takes, how long one scheduling pass over that index takes, and — printed before the
//! benches — how much memory the index holds per node and per pod.
//!
//! Run: `cargo bench -p muster-controller --bench index`

use k8s_openapi::jiff::Timestamp;
use muster_controller::plan::plan;
use muster_controller::state::State;

mod fleet;
// What the API server holds once a write succeeded, folded in as the executor folds it: the
// tests' helper.
#[path = "../tests/support/mod.rs"]
mod support;

use fleet::{Fleet, NODES, PODS, fleet, settled};

/// Waiting jobs in the benches that do not say otherwise.
const JOBS: usize = 1_000;

/// Resident memory of this process, bytes (Linux; 0 elsewhere).
fn resident() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4096)
}

fn main() {
    // Memory first, in a process that has built nothing else yet.
    let before = resident();
    let index = fleet(Fleet::with_jobs(0));
    let after = resident();
    let bytes = after.saturating_sub(before);
    let objects = u64::try_from(NODES + PODS).unwrap_or(1);
    println!(
        "index of {NODES} nodes and {PODS} pods: {} MB resident ({} bytes per object)",
        bytes / 100_000 / 10,
        bytes / objects
    );
    drop(index);
    // The steady pass below is meant to keep the scheduler: say so if it does not.
    let now = Timestamp::from_second(1_767_225_700).unwrap_or_default();
    let mut index = settled(Fleet::with_jobs(JOBS), now);
    let steady = plan(&mut index, now);
    println!(
        "steady pass: {} actions, scheduler {} (kept, or why rebuilt), {} jobs settled, waiting jobs {}",
        steady.actions.len(),
        steady.summary.scheduler_rebuilt.unwrap_or("kept"),
        steady.summary.settled,
        if steady.summary.explained {
            "explained again"
        } else {
            "not explained again"
        }
    );
    drop(index);
    // And the pass after one arrival is meant to explain every waiting job again.
    let arrival = plan(&mut after_one_arrival(JOBS), a_second_later());
    println!(
        "pass after one arrival: waiting jobs {}",
        if arrival.summary.explained {
            "explained again"
        } else {
            "not explained again"
        }
    );
    divan::main();
}

/// Folding in 10,000 node and 100,000 pod watch events.
#[divan::bench(sample_count = 5)]
fn fold_in_fleet_events() -> State {
    fleet(Fleet::with_jobs(0))
}

/// One scheduling pass: rebuild admission's view from the index, run a cycle over 1,000
/// waiting jobs, plan the writes.
#[divan::bench(sample_count = 5)]
fn one_pass(bencher: divan::Bencher) {
    bencher
        .with_inputs(|| fleet(Fleet::with_jobs(JOBS)))
        .bench_local_values(|mut index| {
            plan(
                &mut index,
                Timestamp::from_second(1_767_225_700).unwrap_or_default(),
            )
        });
}

/// A pass after earlier ones whose writes all landed, until one had nothing to write, with
/// 1,000 and with 15,000 waiting jobs: the loop's usual pass when nothing happened in between
/// (its timer fires every few seconds). The arrangement of nodes per flavor is cached, the
/// scheduler the last pass left is kept, no job is settled again and no waiting job is
/// explained again.
#[divan::bench(args = [JOBS, 15_000], sample_count = 5)]
fn steady_pass(bencher: divan::Bencher, jobs: usize) {
    let now = Timestamp::from_second(1_767_225_700).unwrap_or_default();
    bencher
        .with_inputs(|| settled(Fleet::with_jobs(jobs), now))
        .bench_local_refs(|index| plan(index, now));
}

/// The same, after one new job arrived a second later: that job is settled and submitted, a
/// cycle runs, and every waiting job's position and reason is read again (their statuses
/// need no write; waiting jobs are explained at most once a second of the pass clock).
#[divan::bench(args = [JOBS, 15_000], sample_count = 5)]
fn pass_after_one_arrival(bencher: divan::Bencher, jobs: usize) {
    bencher
        .with_inputs(|| after_one_arrival(jobs))
        .bench_local_refs(|index| plan(index, a_second_later()));
}

/// The time of the benches' settled state.
fn settled_at() -> Timestamp {
    Timestamp::from_second(1_767_225_700).unwrap_or_default()
}

/// The second after it, when a new job's pass explains the waiting again.
fn a_second_later() -> Timestamp {
    Timestamp::from_second(1_767_225_701).unwrap_or_default()
}

/// The settled state of `jobs` waiting jobs, and one more job just arrived.
fn after_one_arrival(jobs: usize) -> State {
    let mut index = settled(Fleet::with_jobs(jobs), settled_at());
    index.apply(fleet::job(jobs, None));
    index
}

/// The visibility API's answer for a ClusterQueue of 1,000 and of 15,000 waiting jobs, from
/// the state the loop holds after a pass, written as the JSON the controller sends: what it
/// spends per `muster jobs` or dashboard refresh, all with the state locked (the order, then
/// each job made as it is written). No request, no write.
#[divan::bench(args = [JOBS, 15_000], sample_count = 5)]
fn waiting_list(bencher: divan::Bencher, jobs: usize) {
    let now = Timestamp::from_second(1_767_225_700).unwrap_or_default();
    let scope = muster_controller::visibility::Scope::ClusterQueue("research".to_owned());
    bencher
        .with_inputs(|| settled(Fleet::with_jobs(jobs), now))
        .bench_local_refs(|state| {
            let list = muster_controller::visibility::pending_job_listing(state, &scope, &|_| true);
            assert_eq!(list.as_ref().map(|l| l.items.len()).ok(), Some(jobs));
            serde_json::to_string(&list.ok()).map(|json| json.len())
        });
}

/// Gathering what a start-time forecast is made from, for 1,000 and 15,000 waiting jobs on the
/// fleet: the part of a forecast that holds the state's lock (the snapshot of every node, queue
/// and held or waiting job copied; finished runs learned; ranges scored). The forward runs
/// themselves go without the lock (see muster-sim's `forecast` bench).
#[divan::bench(args = [JOBS, 15_000], sample_count = 5)]
fn gather_forecast_input(bencher: divan::Bencher, jobs: usize) {
    let now = Timestamp::from_second(1_767_225_700).unwrap_or_default();
    bencher
        .with_inputs(|| settled(Fleet::with_jobs(jobs), now))
        .bench_local_refs(|state| state.gather_forecast_input(now.as_second()));
}
