//! Preemption in virtual time: a preemptor whose victim overruns the runtime it announced
//! starts within its queue's bound, and announced runtimes made wrong on purpose stay
//! reproducible.

use std::path::PathBuf;

use muster_sim::engine;
use muster_sim::scenario::Loaded;

fn overrun() -> Loaded {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/overrun.yaml");
    match Loaded::from_file(&path, None) {
        Ok(l) => l,
        Err(e) => unreachable!("{}: {e}", path.display()),
    }
}

fn run(loaded: &Loaded) -> engine::Run {
    match engine::run(loaded, "best-fit", &mut |_, _| {}) {
        Ok(r) => r,
        Err(e) => unreachable!("{e}"),
    }
}

fn record<'a>(run: &'a engine::Run, id: &str) -> &'a engine::JobRecord {
    match run.records.iter().find(|r| r.id == id) {
        Some(r) => r,
        None => unreachable!("no job {id}"),
    }
}

#[test]
fn a_preemptor_whose_victim_overruns_starts_within_the_bound() {
    // low announced 1,100 s and runs 10,000; high arrives at 1,000 and waits while low is
    // about to end, then evicts it once low is past its announced end: at 1,100, well
    // within the default 1,800 s bound. No event comes at 1,100: the simulator weighs again
    // when the scheduler says a wait may end.
    let result = run(&overrun());
    let high = record(&result, "high");
    assert_eq!(high.start, Some(1_100), "{high:?}");
    assert_eq!(record(&result, "low").preemptions, 1);

    // With a bound shorter than the announced end, it does not wait at all.
    let mut bounded = overrun();
    bounded.set_preemption_waits(None, Some(50));
    assert_eq!(record(&run(&bounded), "high").start, Some(1_000));

    // Told not to weigh, it evicts at once.
    let mut eager = overrun();
    eager.set_preemption_waits(Some(false), None);
    assert_eq!(record(&run(&eager), "high").start, Some(1_000));
}

#[test]
fn announced_runtimes_made_wrong_stay_within_the_error_and_follow_the_seed() {
    let base = overrun();
    let wrong = |seed: u64| {
        let mut l = overrun();
        if let Err(e) = l.misannounce_runtimes(0.5, seed) {
            unreachable!("{e}");
        }
        l.jobs
    };
    let announced = |jobs: &[muster_sim::trace::TraceJob]| {
        jobs.iter().map(|j| j.expected_runtime).collect::<Vec<_>>()
    };
    assert_eq!(
        announced(&wrong(3)),
        announced(&wrong(3)),
        "the same seed, the same errors"
    );
    assert_ne!(announced(&wrong(3)), announced(&wrong(4)));
    for (truth, wrong) in base.jobs.iter().zip(wrong(3)) {
        let (Some(told), Some(now)) = (truth.expected_runtime, wrong.expected_runtime) else {
            unreachable!("every job of the fixture announces a runtime")
        };
        assert!(
            now * 2 >= told && now * 2 <= told * 3,
            "{now} is within ±50 % of {told}"
        );
        assert_eq!(
            wrong.duration, truth.duration,
            "true durations are untouched"
        );
    }
    let mut bad = overrun();
    assert!(
        bad.misannounce_runtimes(1.5, 1)
            .is_err_and(|e| e.contains("below 1"))
    );
}
