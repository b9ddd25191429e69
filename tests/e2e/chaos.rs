//! A short seeded chaos run (`muster-load chaos` in small): two leader-elected replicas behind
//! the fault-injecting proxy (errors, drops, late answers and late watches), replicas killed
//! with SIGKILL, nodes dying, nodes partitioned, kube-apiserver and etcd restarted, drawn bad
//! objects applied — and not one broken promise.

use std::time::Duration;

use muster_load::chaos::{ChaosOptions, run};
use muster_testkit::cluster::{BIN_ENV, SKIP_MESSAGE};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_seeded_chaos_run_breaks_no_promise() {
    let Some(kube_bin) = std::env::var_os(BIN_ENV) else {
        eprintln!("{SKIP_MESSAGE}");
        return;
    };
    let _apart = crate::support::apart_from_load().await;
    let out = match tempfile::tempdir() {
        Ok(dir) => dir,
        Err(e) => unreachable!("a temporary folder: {e}"),
    };
    let options = ChaosOptions {
        kube_bin: kube_bin.into(),
        out: out.path().to_owned(),
        muster: env!("CARGO_BIN_EXE_muster").into(),
        seed: 3,
        jobs: 40,
        span: Duration::from_secs(30),
        blocks: 3,
        replicas: 2,
        fault_rate: 0.1,
        slow_rate: 0.05,
        kill_every: Duration::from_secs(8),
        node_death_every: Duration::from_secs(15),
        partition_every: Duration::from_secs(30),
        partition_for: Duration::from_secs(30),
        restart_control_plane: true,
        baseline: false,
        bad_objects: 24,
        timeout: Duration::from_secs(600),
    };
    let summary = match run(&options).await {
        Ok(summary) => summary,
        Err(e) => unreachable!("the chaos run did not run: {e:#}"),
    };
    let report = serde_json::to_string_pretty(&summary).unwrap_or_default();
    eprintln!("{}", summary.headline());
    if summary.failures().is_some() {
        // The replicas' logs, the proxy's fault log and the checker's timeline are what explain
        // a broken promise; a temporary folder would take them with it.
        eprintln!("the run's logs are kept in {}", out.keep().display());
    }
    assert_eq!(summary.failures(), None, "{report}");
    assert!(summary.kills.total >= 2, "{report}");
    assert_eq!(summary.restarts.api_server, 1, "{report}");
    assert_eq!(summary.restarts.etcd, 1, "{report}");
    assert!(summary.faults.values().sum::<u64>() > 0, "{report}");
    assert!(summary.partitions >= 1, "{report}");
    for late in ["slowAnswer", "slowWatch"] {
        assert!(
            summary.faults.get(late).is_some_and(|n| *n > 0),
            "{late}: {report}"
        );
    }
}
