//! The accuracy check of start-time ranges on a small synthetic workload: every scored job
//! really waited, each method is scored, and the same input gives the same answer.

use std::path::PathBuf;

use muster_sim::forecast::Options;
use muster_sim::forecast::accuracy::{AccuracyOptions, evaluate};
use muster_sim::scenario::Loaded;

fn load(fixture: &str) -> Loaded {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(fixture);
    match Loaded::from_file(&path, None) {
        Ok(l) => l,
        Err(e) => unreachable!("{}: {e}", path.display()),
    }
}

fn options() -> AccuracyOptions {
    AccuracyOptions {
        every: 1_800,
        min_wait: 600,
        forecast: Options {
            samples: 8,
            ..Options::default()
        },
    }
}

#[test]
fn the_accuracy_check_scores_waiting_jobs_against_their_real_starts() {
    let mut loaded = load("queueing.yaml");
    if let Err(e) = loaded.announce_off_by(0.5, 4.0, 1) {
        unreachable!("{e}");
    }
    let result = match evaluate(&loaded, &options(), &mut |_, _| {}) {
        Ok(r) => r,
        Err(e) => unreachable!("{e}"),
    };
    assert!(result.pairs.len() > 50, "{} pairs", result.pairs.len());
    for p in &result.pairs {
        assert!(
            p.wait() > 600 && p.start > p.moment && p.moment >= p.submit,
            "{p:?}"
        );
        let [p10, p50, p90] = p.range;
        assert!(p10 <= p50 && (p90.is_none() || p50 <= p90), "{p:?}");
    }
    let methods: Vec<&str> = result.scores.iter().map(|s| s.method).collect();
    assert_eq!(methods, ["range", "announced", "position"]);
    assert!(result.scores[0].covered.is_some());
    assert!(result.scores.iter().all(|s| s.median_error.is_finite()));
    let again = match evaluate(&loaded, &options(), &mut |_, _| {}) {
        Ok(r) => r,
        Err(e) => unreachable!("{e}"),
    };
    assert_eq!(result.pairs, again.pairs);
}

#[test]
fn the_accuracy_check_refuses_what_its_snapshots_cannot_carry() {
    let loaded = load("buy.yaml");
    let err = evaluate(&loaded, &options(), &mut |_, _| {});
    assert!(err.is_err_and(|e| e.contains("autoscaler")));
    let loaded = load("queueing.yaml");
    let mut bad = options();
    bad.every = 0;
    assert!(evaluate(&loaded, &bad, &mut |_, _| {}).is_err_and(|e| e.contains("positive")));
}
