//! Start-time ranges and what-ifs on a real control plane: the controller forecasts every
//! waiting job's start from the live cluster, `muster eta` shows the ranges, `muster whatif
//! --add-nodes` says what two more nodes would change; the nodes are then really added, and
//! every job starts inside the range the what-if gave it.

use std::time::Duration;

use muster_api::gpujob::StartRange;
use muster_api::visibility::ForecastAnswer;
use muster_controller::run::Options;
use muster_controller::visibility_server::VisibilityOptions;
use serde_json::json;

use crate::support::{Controller, Env, apart_from_load, eventually, gpu_job, phase, runs_for};
use crate::visibility::{free_port, muster, register};

/// How far a real start may fall outside its range, seconds. The forward runs count a job as
/// started the second admission takes it and a job as ended the second its runtime is up; on
/// the cluster, the fake kubelet starts pods up to 200 ms after their release and reports
/// their end as it happens, and the controller admits in passes that follow events within
/// 200 ms and come at least every tick (here one second). Two seconds cover both, and the
/// whole-second resolution of the statuses' times, on a machine not also running the chaos
/// test (which delays passes by seconds; see `apart_from_load`).
const PASS_SLACK: i64 = 2;

/// Seconds since the epoch of an API time.
fn second(t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> Option<i64> {
    t.map(|t| t.0.as_second())
}

/// The forecast `muster` prints as JSON for `args`.
fn forecast(args: &[&str]) -> ForecastAnswer {
    let (code, out, err) = muster(args);
    assert_eq!(code, 0, "muster {args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| unreachable!("{e}: {out}"))
}

/// The range `answer` gives job `name`.
fn range_of(answer: &ForecastAnswer, name: &str) -> StartRange {
    match answer
        .items
        .iter()
        .find(|j| j.name.as_deref() == Some(name))
    {
        Some(job) => job.range.clone(),
        None => unreachable!("{name} is not in the forecast: {answer:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eta_and_whatif_answer_from_the_live_cluster_and_jobs_start_inside_the_range() {
    // Starts are held to within two seconds of the forecast: not beside the chaos run.
    let _apart = apart_from_load().await;
    let Some(env) = Env::start(false).await else {
        return;
    };
    env.h100().await;
    env.gpu_nodes("b1", &["n1", "n2"]).await;
    env.queue("a", "team-a", 64, json!({})).await;
    let port = free_port();
    let controller = Controller::start(
        env.client.clone(),
        Options {
            visibility: Some(VisibilityOptions {
                addr: ([127, 0, 0, 1], port).into(),
                certificate: None,
                pod: None,
            }),
            tick: Duration::from_secs(1),
            forecast_every: Duration::from_secs(1),
            ..Options::default()
        },
    );
    register(&env, port).await;
    let kubeconfig = env.cluster.kubeconfig_path().to_string_lossy().into_owned();
    let announced = |seconds: u64| json!({"expectedRuntimeSeconds": seconds});

    // r1 and r2 hold both nodes for 40 s; w1..w4 wait, 30 s each.
    for name in ["r1", "r2"] {
        env.submit(&gpu_job(
            "team-a",
            name,
            1,
            8,
            &runs_for(40_000),
            announced(40),
        ))
        .await;
    }
    for name in ["r1", "r2"] {
        env.until_status("team-a", name, "admitted", 60, |s| {
            matches!(phase(s).as_str(), "Admitted" | "Running")
        })
        .await;
    }
    for name in ["w1", "w2", "w3", "w4"] {
        // Creation times have a resolution of a second: the queue's order is w1..w4.
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        env.submit(&gpu_job(
            "team-a",
            name,
            1,
            8,
            &runs_for(30_000),
            announced(30),
        ))
        .await;
    }

    eta_shows_ranges(&env, &kubeconfig).await;
    a_job_not_submitted_gets_a_range(&env, &kubeconfig);
    let what_if = whatif_answers(&kubeconfig);

    // The nodes really join; every job starts inside the range the what-if gave it (a job
    // it started at once starts when the nodes really came).
    env.gpu_nodes("b2", &["n3", "n4"]).await;
    let added_at = k8s_openapi::jiff::Timestamp::now().as_second();
    for name in ["w1", "w2", "w3", "w4"] {
        let status = env
            .until_status("team-a", name, "started", 120, |s| s.start_time.is_some())
            .await;
        let started = second(status.start_time.as_ref()).unwrap_or_default();
        let r = range_of(&what_if, name);
        let (earliest, latest) = (
            second(r.earliest.as_ref()).unwrap_or(i64::MIN),
            second(r.latest.as_ref()).unwrap_or(i64::MAX),
        );
        assert!(
            started >= earliest - PASS_SLACK && started <= latest.max(added_at) + PASS_SLACK,
            "{name} started at {started}, outside {earliest}..{latest} (nodes added at {added_at})"
        );
    }
    controller.stop().await;
}

/// `muster eta` gives every waiting job a range: w1 and w2 when r1 and r2 end, w3 and w4
/// thirty seconds later; so does the job's status.
async fn eta_shows_ranges(env: &Env, kubeconfig: &str) {
    let eta = eventually("a forecast of the four waiting jobs", 60, || async {
        let (code, out, _) = muster(&["eta", "-A", "-o", "json", "--kubeconfig", kubeconfig]);
        let answer: ForecastAnswer = serde_json::from_str(&out).ok().filter(|_| code == 0)?;
        (answer.items.len() == 4).then_some(answer)
    })
    .await;
    let likely = |answer: &ForecastAnswer, name: &str| {
        second(range_of(answer, name).likely.as_ref())
            .unwrap_or_else(|| unreachable!("{name} has no likely start: {answer:?}"))
    };
    assert!(likely(&eta, "w1") < likely(&eta, "w3"), "{eta:?}");
    assert!(likely(&eta, "w2") < likely(&eta, "w4"), "{eta:?}");
    let (code, table, err) = muster(&["eta", "-A", "--kubeconfig", kubeconfig]);
    assert_eq!(code, 0, "{err}");
    assert!(
        table.contains("STARTS (P10–P90)") && table.contains("team-a/w3"),
        "{table}"
    );
    assert!(
        table.contains("Ranges: 10th–90th percentile start over 32 forward runs"),
        "{table}"
    );

    // The range is in the job's status too, labelled as one.
    eventually("w1's status carries its start range", 60, || async {
        let status = env.status("team-a", "w1").await?;
        status.pending_reason?.start_range?.latest.map(|_| ())
    })
    .await;
}

/// `muster whatif --add-nodes`: two more nodes in a new block start w1 and w2 at once, and
/// w3 and w4 when r1 and r2 end; a change naming what the cluster lacks is refused. The
/// what-if's answer.
fn whatif_answers(kubeconfig: &str) -> ForecastAnswer {
    let what_if = forecast(&[
        "whatif",
        "--add-nodes",
        "h100:2:b2",
        "-A",
        "-o",
        "json",
        "--kubeconfig",
        kubeconfig,
    ]);
    assert_eq!(what_if.changes, ["2 h100 nodes added in b2"]);
    let made_at = what_if.as_of.0.as_second();
    for name in ["w1", "w2"] {
        let r = range_of(&what_if, name);
        assert!(
            second(r.latest.as_ref()).is_some_and(|l| l <= made_at + PASS_SLACK),
            "{name} would start at once: {r:?}"
        );
    }
    assert!(
        what_if.items.iter().all(|j| j.before.is_some()),
        "every job has its range as the cluster stands beside: {what_if:?}"
    );
    let (code, text, err) = muster(&[
        "whatif",
        "--add-nodes",
        "h100:2:b2",
        "-A",
        "--kubeconfig",
        kubeconfig,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.starts_with("If 2 h100 nodes added in b2:") && text.contains("sooner"),
        "{text}"
    );
    // A change naming what the cluster lacks is refused, naming it.
    let (code, _, err) = muster(&[
        "whatif",
        "--add-nodes",
        "a100:2",
        "--kubeconfig",
        kubeconfig,
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("a100"), "{err}");

    what_if
}

/// `muster whatif --submit`: a 16-GPU gang not submitted yet starts after the four waiting
/// jobs, with a range of its own; nothing is created.
fn a_job_not_submitted_gets_a_range(env: &Env, kubeconfig: &str) {
    let file = env.cluster.log_dir().join("big.yaml");
    let mut big = serde_json::to_value(gpu_job(
        "team-a",
        "big",
        2,
        8,
        &runs_for(30_000),
        json!({"expectedRuntimeSeconds": 30}),
    ))
    .unwrap_or_else(|e| unreachable!("{e}"));
    // The namespace comes from -n.
    big["metadata"]
        .as_object_mut()
        .map(|m| m.remove("namespace"));
    if let Err(e) = std::fs::write(&file, serde_yaml_ng::to_string(&big).unwrap_or_default()) {
        unreachable!("writing {}: {e}", file.display());
    }
    let path = file.to_string_lossy().into_owned();
    let answer = forecast(&[
        "whatif",
        "--submit",
        &path,
        "-n",
        "team-a",
        "-o",
        "json",
        "--kubeconfig",
        kubeconfig,
    ]);
    assert_eq!(answer.changes, ["team-a/big submitted"]);
    let likely = |name: &str| second(range_of(&answer, name).likely.as_ref());
    assert!(
        likely("big").is_some() && likely("big") > likely("w4"),
        "big starts after w4: {answer:?}"
    );
    assert!(
        answer
            .items
            .iter()
            .find(|j| j.name.as_deref() == Some("big"))
            .is_some_and(|j| j.before.is_none()),
        "{answer:?}"
    );
    let (code, text, err) = muster(&[
        "whatif",
        "--submit",
        &path,
        "-n",
        "team-a",
        "--kubeconfig",
        kubeconfig,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("team-a/big (16 GPUs) would start"), "{text}");
}
