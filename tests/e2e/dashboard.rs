//! `muster dashboard` in a real browser: headless Chromium (Debian's `chromium` and
//! `chromium-driver`) opens the page a user's dashboard serves with their kubeconfig, against
//! a real control plane with the controller's visibility API; the queue bars, the waiting
//! list and the topology agree with the cluster, a job moves from waiting to running without
//! a reload, and screenshots are saved. Without the browser the test says so in one line and
//! passes, as without `MUSTER_KUBE_BIN`.

use std::io::BufRead as _;
use std::time::Duration;

use kube::api::{Api, DeleteParams};
use muster_api::GpuJob;
use muster_controller::run::Options;
use muster_controller::visibility_server::VisibilityOptions;
use muster_testkit::browser::Browser;
use serde_json::{Value, json};

use crate::support::{Controller, Env, gpu_job, phase, runs_for};
use crate::visibility::{free_port, register, shared_queue, user};

/// `muster dashboard` running as a user, and the address it printed.
struct Dashboard {
    child: std::process::Child,
    url: String,
}

impl Dashboard {
    fn start(kubeconfig: &std::path::Path) -> Dashboard {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_muster"))
            .args(["dashboard", "--address", "127.0.0.1:0", "--kubeconfig"])
            .arg(kubeconfig)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| unreachable!("starting muster dashboard: {e}"));
        let stdout = child
            .stdout
            .take()
            .unwrap_or_else(|| unreachable!("no stdout"));
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let Some(url) = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .map(str::to_owned)
        else {
            unreachable!("no address in {line:?}")
        };
        Dashboard { child, url }
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `script` in the page every 250 ms until it returns something other than null or
/// false, for at most `seconds`; that value.
async fn until(browser: &Browser, what: &str, seconds: u64, script: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    loop {
        let last = match browser.execute(script, &[]).await {
            Ok(value) if !value.is_null() && value != json!(false) => return value,
            Ok(value) => value,
            Err(e) => json!(e.to_string()),
        };
        if tokio::time::Instant::now() > deadline {
            unreachable!("timed out after {seconds} s waiting for {what}; last: {last}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The waiting list's jobs in the order the page shows them.
const ROWS: &str =
    "return [...document.querySelectorAll('#waiting-rows tr.job')].map(r => r.dataset.job);";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_queues_waiting_jobs_and_topology_and_follows_a_job_without_reload() {
    let Some(env) = Env::start(false).await else {
        return;
    };
    let Some(browser) = Browser::start(1400, 1000)
        .await
        .unwrap_or_else(|e| unreachable!("starting the browser: {e:#}"))
    else {
        return;
    };
    let (controller, alice) = busy_queue(&env).await;

    let dashboard = Dashboard::start(&alice.kubeconfig);
    if let Err(e) = browser.goto(&dashboard.url).await {
        unreachable!("opening {}: {e:#}", dashboard.url);
    }
    // A marker that a reload would wipe.
    let _ = browser
        .execute("window.loadedOnce = 42; return null;", &[])
        .await;
    let shots = env.cluster.log_dir().join("screenshots");
    let _ = std::fs::create_dir_all(&shots);

    first_view_agrees(&browser, &shots).await;

    // The running job leaves: bob's job starts, alice's moves up, without a reload.
    let jobs: Api<GpuJob> = env.api("team-a");
    if let Err(e) = jobs.delete("first", &DeleteParams::default()).await {
        unreachable!("deleting first: {e}");
    }
    let rows = until(
        &browser,
        "the list to move up",
        90,
        &format!("const rows = (() => {{ {ROWS} }})(); return rows.length === 1 ? rows : null;"),
    )
    .await;
    assert_eq!(rows, json!(["team-a/a2"]));
    let position = browser
        .execute(
            "return document.querySelector('#waiting-rows tr.job').dataset.position;",
            &[],
        )
        .await
        .unwrap_or_default();
    assert_eq!(position, json!("1"));
    let marker = browser
        .execute("return window.loadedOnce;", &[])
        .await
        .unwrap_or_default();
    assert_eq!(marker, json!(42), "the page was not reloaded");
    // One job's timeline, by clicking its row.
    let _ = browser
        .execute(
            "document.querySelector('#waiting-rows tr.job').click(); return null;",
            &[],
        )
        .await;
    let story = until(&browser, "a2's story", 30, "const s = document.getElementById('story'); return s.dataset.job === 'team-a/a2' ? s.textContent : null;").await;
    let story = story.as_str().unwrap_or_default();
    assert!(
        story.contains("position 1 in ClusterQueue shared") && story.contains("timeline:"),
        "{story}"
    );
    if let Err(e) = browser.screenshot(&shots.join("dashboard-moved.png")).await {
        unreachable!("screenshot: {e:#}");
    }
    for shot in ["dashboard-waiting.png", "dashboard-moved.png"] {
        let bytes = std::fs::read(shots.join(shot)).unwrap_or_default();
        assert!(bytes.starts_with(b"\x89PNG"), "{shot} is a PNG");
    }
    if let Some(dir) = std::env::var_os("MUSTER_SCREENSHOT_DIR") {
        for shot in ["dashboard-waiting.png", "dashboard-moved.png"] {
            let _ = std::fs::copy(shots.join(shot), std::path::Path::new(&dir).join(shot));
        }
    }
    drop(dashboard);
    controller.stop().await;
}

/// The shared queue with `team-a/first` running and `team-b/b1`, `team-a/a2` waiting behind
/// it; the controller serving the visibility API; alice, who may list GpuJobs in `team-a`.
async fn busy_queue(env: &Env) -> (Controller, crate::visibility::User) {
    env.h100().await;
    env.gpu_nodes("b1", &["n1", "n2"]).await;
    shared_queue(env).await;
    // A cohort tree beside it, org → ml → queue idle, which the page draws as a tree.
    for (name, parent) in [("org", None), ("ml", Some("org"))] {
        env.apply_all::<muster_api::Cohort>(json!({"apiVersion": "muster.dev/v1alpha1",
            "kind": "Cohort", "metadata": {"name": name}, "spec": {"parent": parent}}))
            .await;
    }
    env.apply_all::<muster_api::ClusterQueue>(json!({"apiVersion": "muster.dev/v1alpha1",
        "kind": "ClusterQueue", "metadata": {"name": "idle"},
        "spec": {"cohort": "ml", "namespaceSelector": {},
            "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                {"name": "h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "4"}]}]}]}}))
        .await;
    let port = free_port();
    let controller = Controller::start(
        env.client.clone(),
        Options {
            visibility: Some(VisibilityOptions {
                addr: ([127, 0, 0, 1], port).into(),
                certificate: None,
                pod: None,
            }),
            forecast_every: Duration::from_secs(1),
            ..Options::default()
        },
    );
    register(env, port).await;
    let alice = user(env, "team-a", "alice", true).await;
    // It announces its runtime: the jobs behind it get start ranges.
    env.submit(&gpu_job(
        "team-a",
        "first",
        1,
        8,
        &runs_for(600_000),
        json!({"expectedRuntimeSeconds": 600}),
    ))
    .await;
    env.until_status("team-a", "first", "admitted", 60, |s| {
        matches!(phase(s).as_str(), "Admitted" | "Running")
    })
    .await;
    for (ns, name) in [("team-b", "b1"), ("team-a", "a2")] {
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        env.submit(&gpu_job(
            ns,
            name,
            1,
            8,
            &runs_for(600_000),
            json!({"expectedRuntimeSeconds": 600}),
        ))
        .await;
    }

    (controller, alice)
}

/// The page as alice first sees it: bob's job counted, not named; the queue bar; first's
/// GPUs on one node; a screenshot.
async fn first_view_agrees(browser: &Browser, shots: &std::path::Path) {
    // The waiting list: bob's job counted, not named; alice's named, in the controller's order.
    let rows = until(
        browser,
        "two waiting jobs",
        60,
        &format!("const rows = (() => {{ {ROWS} }})(); return rows.length === 2 ? rows : null;"),
    )
    .await;
    assert_eq!(rows, json!(["(hidden)", "team-a/a2"]));
    // a2's start as a range, from the controller's forecast: when first and b1 have run.
    let range = until(browser, "a2's start range", 60, "const r = document.querySelector('tr.job[data-job=\"team-a/a2\"] td.range'); return r && r.dataset.earliest ? r.textContent : null;").await;
    assert!(
        range.as_str().is_some_and(|r| r.starts_with("in ")),
        "{range}"
    );
    // The queue bar: 8 of 8 GPUs used, two waiting, one admitted.
    let bar = until(browser, "the queue bar", 30, "const q = document.querySelector('.queue[data-name=shared]'); return q && q.dataset.waiting === '2' ? {used: q.dataset.used, nominal: q.dataset.nominal, admitted: q.dataset.admitted} : null;").await;
    assert_eq!(bar, json!({"used": "8", "nominal": "8", "admitted": "1"}));
    // The tree: org, ml under it, idle under ml; shared, in no cohort, after them.
    let tree = until(browser, "the cohort tree", 30, "const rows = [...document.querySelectorAll('#queue-bars > .cohort, #queue-bars > .queue')]; return rows.length === 5 ? rows.map(r => [r.className, r.dataset.name || '', r.dataset.depth, r.dataset.nominal || '']) : null;").await;
    assert_eq!(
        tree,
        json!([
            ["cohort", "org", "0", "4"],
            ["cohort", "ml", "1", "4"],
            ["queue", "idle", "2", "4"],
            ["cohort", "", "0", ""],
            ["queue", "shared", "0", "8"]
        ])
    );
    // The topology: first's 8 GPUs on one node, the other node free.
    let hosts = until(browser, "the topology", 30, "const h = [...document.querySelectorAll('.host')]; return h.length === 2 ? h.map(x => [x.dataset.node, x.querySelectorAll('.gpu[data-job=\"team-a/first\"]').length, x.querySelectorAll('.gpu[data-free]').length]) : null;").await;
    let hosts: Vec<(String, u64, u64)> = serde_json::from_value(hosts).unwrap_or_default();
    let mut held: Vec<(u64, u64)> = hosts.iter().map(|(_, j, f)| (*j, *f)).collect();
    held.sort_unstable();
    assert_eq!(held, [(0, 8), (8, 0)], "{hosts:?}");
    if let Err(e) = browser
        .screenshot(&shots.join("dashboard-waiting.png"))
        .await
    {
        unreachable!("screenshot: {e:#}");
    }
}
