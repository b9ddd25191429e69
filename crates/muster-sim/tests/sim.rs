//! The simulator: stable outputs for the demo, the same decisions as calling the cycle
//! directly, and trace adapters that say where a row is wrong.

use std::collections::BTreeSet;

use muster_admission::Decision;
use muster_sim::scenario::Loaded;
use muster_sim::{engine, plots, report, trace};
use muster_topology::NodeInfo;
use support::{load, manifest, run};

mod support;

#[test]
fn the_demo_scenario_gives_the_same_outputs_every_time() {
    let loaded = load(&manifest().join("../../simulations/demo.yaml"));
    let result = run(&loaded, "best-fit");
    let summary = report::summary("demo", &result, false);
    insta::assert_snapshot!(
        "demo_summary",
        serde_json::to_string_pretty(&summary).unwrap_or_default()
    );
    insta::assert_snapshot!("demo_jobs", report::jobs_csv(&result));
    // And the run is deterministic within one process too.
    let again = run(&loaded, "best-fit");
    assert_eq!(result.records, again.records);
}

#[test]
fn the_demo_plots_stay_the_same() {
    let loaded = load(&manifest().join("../../simulations/demo.yaml"));
    let best_fit = run(&loaded, "best-fit");
    let spread = run(&loaded, "spread");
    let both = [&best_fit, &spread];
    insta::assert_snapshot!("demo_allocation_svg", plots::allocation(&both));
    insta::assert_snapshot!("demo_wait_cdf_svg", plots::wait_cdf(&best_fit));
    let by_class = plots::wait_cdf_by_class(&both);
    let stems: Vec<&str> = by_class.iter().map(|(stem, _)| stem.as_str()).collect();
    assert_eq!(stems, ["wait-cdf-1", "wait-cdf-2-8", "wait-cdf-9-32"]);
    // Drawing twice draws the same bytes.
    assert_eq!(plots::queue_length(&both), plots::queue_length(&both));
}

#[test]
fn the_simulator_decides_what_the_cycle_decides() {
    let loaded = load(&manifest().join("tests/fixtures/small.yaml"));
    let result = run(&loaded, "best-fit");
    let simulated: BTreeSet<String> = result
        .records
        .iter()
        .filter(|r| r.admit == Some(0))
        .map(|r| format!("default/{}", r.id))
        .collect();
    let mut direct = match engine::scheduler(&loaded, "best-fit") {
        Ok(s) => s,
        Err(e) => unreachable!("{e}"),
    };
    for job in loaded.jobs.iter().filter(|j| j.submit == 0) {
        direct.submit(engine::admission_job(job, "default"));
    }
    let admitted: BTreeSet<String> = direct
        .cycle(0)
        .into_iter()
        .filter_map(|d| match d {
            Decision::Admit(a) => Some(a.job),
            _ => None,
        })
        .collect();
    assert_eq!(simulated, admitted);
    assert_eq!(
        admitted,
        ["default/a", "default/b", "default/c"]
            .map(str::to_owned)
            .into()
    );
    // Job d (two whole hosts in one block) waits for a to free its block at t=100.
    let d = result.records.iter().find(|r| r.id == "d");
    assert_eq!(d.and_then(|r| r.start), Some(100));
}

#[test]
fn a_scenarios_cohort_tree_lets_a_team_borrow_across_departments_within_its_departments_limit() {
    let loaded = load(&manifest().join("tests/fixtures/cohort-tree.yaml"));
    assert_eq!(loaded.cohorts.len(), 3);
    let result = run(&loaded, "best-fit");
    let start = |id: &str| {
        result
            .records
            .iter()
            .find(|r| r.id == id)
            .and_then(|r| r.start)
    };
    // vision's own 16 and the 8 ml may take from org: three jobs at once, though web's 32
    // lie idle; the fourth starts when the first ends.
    assert_eq!(
        (start("v1"), start("v2"), start("v3"), start("v4")),
        (Some(0), Some(0), Some(0), Some(100))
    );
    // vision runs 24 GPUs, 8 beyond its quota, from 0 to 200: web's idle quota lends them,
    // through ml's edge to org. Milli-GPU-seconds.
    let lending = |name: &str| result.lending.get(name).map(|l| (l.lent, l.borrowed));
    assert_eq!(lending("vision"), Some((0, 1_600_000)));
    assert_eq!(lending("web"), Some((1_600_000, 0)));
    assert_eq!(lending("ml"), Some((0, 1_600_000)));
    assert_eq!(
        lending("infra"),
        Some((0, 0)),
        "infra lends web's quota, none of its own"
    );
    let summary = report::summary("cohort-tree", &result, false);
    assert_eq!(summary["lending"]["web"]["lentGpuHours"], 0.4);
    assert_eq!(summary["lending"]["web"]["parent"], "infra");
    // The text summary draws the tree, each node under its parent.
    let text = report::text(&summary);
    let tree = text
        .split_once("by cohort tree:\n")
        .map(|(_, t)| t)
        .unwrap_or_default();
    assert_eq!(
        tree,
        "  cohort org: 0.0 / 0.0\n    cohort infra: 0.0 / 0.0\n      web: 0.4 / 0.0\n    cohort ml: 0.0 / 0.4\n      vision: 0.0 / 0.4\n"
    );
    assert_eq!(summary["queues"]["vision"]["waitSeconds"]["p95"], 100);
}

#[test]
fn a_scenario_whose_cohort_tree_is_broken_stops_with_the_cohort_named() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| unreachable!("{e}"));
    let fixtures = manifest().join("tests/fixtures");
    let text = std::fs::read_to_string(fixtures.join("cohort-tree.yaml")).unwrap_or_default();
    let _ = std::fs::copy(
        fixtures.join("cohort-tree.csv"),
        dir.path().join("cohort-tree.csv"),
    );
    let error = |text: &str| {
        let path = dir.path().join("tree.yaml");
        std::fs::write(&path, text).unwrap_or_else(|e| unreachable!("{e}"));
        Loaded::from_file(&path, None)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    assert!(text.contains("parent: org\n"), "the fixture changed");
    let missing = error(&text.replacen("parent: org\n", "parent: orgg\n", 1));
    assert!(
        missing.contains("Cohort ml: spec.parent: cohort orgg does not exist"),
        "{missing}"
    );
    let idle = error(&text.replace(
        "borrowingLimit: \"8\"}",
        "borrowingLimit: \"8\", lendingLimit: \"99\"}",
    ));
    assert!(
        idle.contains("Cohort ml: spec.resourceGroups[0].flavors[0].resources[0].lendingLimit: 99 is more than"),
        "{idle}"
    );
}

#[test]
fn virtual_clusters_join_the_cohorts_a_scenario_names() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| unreachable!("{e}"));
    let scenario = |cohorts: &str| {
        format!(
            "name: vcs
cluster:
  pools: [{{name: gpu, labels: {{pool: gpu}}, blocks: 1, hostsPerBlock: 4, gpusPerHost: 8}}]
queues:
  - {{apiVersion: muster.dev/v1alpha1, kind: ResourceFlavor, metadata: {{name: gpu}}, spec: {{nodeLabels: {{pool: gpu}}}}}}
  - {{apiVersion: muster.dev/v1alpha1, kind: Cohort, metadata: {{name: org}}, spec: {{}}}}
  - {{apiVersion: muster.dev/v1alpha1, kind: Cohort, metadata: {{name: dept}}, spec: {{parent: org}}}}
virtualClusters:
  path: vcs.csv
  flavor: gpu
  gpusPerNode: 8
  cohort: org
  cohorts: {cohorts}
workload:
  synthetic: {{jobs: 4, queues: [alpha], sizes: [{{gpus: 8, weight: 1}}]}}
"
        )
    };
    let write = |name: &str, text: &str| {
        std::fs::write(dir.path().join(name), text).unwrap_or_else(|e| unreachable!("{e}"));
    };
    write("vcs.csv", "vc,node num\nalpha,1\nbeta,2\ngamma,1\n");
    write("ok.yaml", &scenario("{alpha: dept, beta: dept}"));
    let loaded = load(&dir.path().join("ok.yaml"));
    let cohort_of = |vc: &str| {
        loaded
            .cluster_queues
            .iter()
            .find(|(name, _)| name == vc)
            .and_then(|(_, q)| q.cohort.clone())
    };
    assert_eq!(cohort_of("alpha").as_deref(), Some("dept"));
    assert_eq!(cohort_of("beta").as_deref(), Some("dept"));
    assert_eq!(
        cohort_of("gamma").as_deref(),
        Some("org"),
        "the default cohort"
    );
    // A name the CSV does not list is a typo, not a cluster without a cohort.
    write("typo.yaml", &scenario("{alpah: dept}"));
    let err = Loaded::from_file(&dir.path().join("typo.yaml"), None)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains(
            "virtualClusters.cohorts names alpah, which is not a virtual cluster of this file"
        ),
        "{err}"
    );
}

#[test]
fn virtual_clusters_become_hard_quotas_of_their_nodes() {
    let text = "vc,node num\nalpha,4\nbeta,2\n";
    let vcs = trace::read_virtual_clusters("vcs.csv", text);
    assert_eq!(
        vcs.ok(),
        Some(vec![("alpha".to_owned(), 4), ("beta".to_owned(), 2)])
    );
    let err = |text: &str| {
        trace::read_virtual_clusters("vcs.csv", text)
            .err()
            .map(|e| e.to_string())
    };
    assert_eq!(
        err("vc,node num\nalpha,four\n").as_deref(),
        Some("vcs.csv:2:7: node num must be a whole number, got \"four\"")
    );
    assert_eq!(
        err("vc,node num\nalpha,4\nalpha,2\n").as_deref(),
        Some("vcs.csv:3:1: vc alpha is listed twice")
    );
    assert_eq!(
        err("vc,node num\nalpha,0\n").as_deref(),
        Some("vcs.csv:2:7: node num must be ≥ 1, got 0")
    );

    // The shipped scenario on the real trace: one hard quota per virtual cluster.
    let path = manifest().join("../../simulations/philly-vc.yaml");
    let trace = manifest().join("../../../shared/traces/philly/philly_vc_nodes_heliosartifact.csv");
    let jobs = manifest().join("../../../shared/traces/philly/philly_jobs_pollux.csv");
    if !trace.exists() || !jobs.exists() {
        eprintln!(
            "skipped: the Philly trace in {} is not present",
            trace.display()
        );
        return;
    }
    let loaded = load(&path);
    assert_eq!(loaded.cluster_queues.len(), 11);
    let quota: u64 = loaded
        .cluster_queues
        .iter()
        .map(|(_, q)| {
            assert!(q.cohort.is_none(), "hard quotas");
            q.resource_groups[0].flavors[0].resources[0]
                .nominal_quota
                .0
                .parse::<u64>()
                .unwrap_or(0)
        })
        .sum();
    assert_eq!(quota, 352 * 8, "every node's GPUs, once");
    assert_eq!(loaded.local_queues.len(), 11);
}

#[test]
fn a_malformed_row_names_file_line_and_column() {
    let text = "id,submit,duration,queue,priority,pod_sets,topology,expected_runtime\n\
                a,0,10,q,0,workers:1:nvidia.com/gpu=1,,\n\
                b,0,ten,q,0,workers:1:nvidia.com/gpu=1,,\n";
    let err = trace::read_muster("jobs.csv", text)
        .err()
        .map(|e| e.to_string());
    assert_eq!(
        err.as_deref(),
        Some("jobs.csv:3:5: duration must be a number of seconds ≥ 0, got \"ten\"")
    );
    let text = "id,submit,duration,queue,priority,pod_sets,topology,expected_runtime\n\
                a,0,10,q,0,workers:0:nvidia.com/gpu=1,,\n";
    let err = trace::read_muster("jobs.csv", text)
        .err()
        .map(|e| e.to_string());
    assert_eq!(
        err.as_deref(),
        Some("jobs.csv:2:12: pod set workers: count must be a whole number ≥ 1, got \"0\"")
    );
    let text = "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,0,0,vc\n";
    let err = trace::read_philly("philly.csv", text, "")
        .err()
        .map(|e| e.to_string());
    assert_eq!(
        err.as_deref(),
        Some("philly.csv:2:26: num_gpus must be ≥ 1, got 0")
    );
}

#[test]
fn philly_jobs_become_even_gangs_relative_to_the_first_submission() {
    let text = "timestamp,duration,num_gpus,gpu_time,cluster\n\
                2017-10-09 07:01:55,66.0,12,792.0,vc1\n\
                2017-10-09 07:00:00,10.5,24,252.0,vc2\n\
                2017-10-09 07:02:00,5,1,5,vc1\n";
    let jobs = trace::read_philly("p.csv", text, "required:block").unwrap_or_default();
    let shape: Vec<(i64, i64, u32, u64, String, String)> = jobs
        .iter()
        .map(|j| {
            let (_, count, r) = &j.pod_sets[0];
            let per_pod = r.get("nvidia.com/gpu").map_or(0, |a| a.units_ceil());
            (
                j.submit,
                j.duration,
                *count,
                per_pod,
                j.queue.clone(),
                j.topology.clone(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        vec![
            (115, 66, 2, 6, "vc1".into(), "required:block".into()),
            (0, 11, 3, 8, "vc2".into(), "required:block".into()),
            (120, 5, 1, 1, "vc1".into(), String::new()),
        ]
    );
}

#[test]
fn the_real_philly_trace_reads_whole() {
    let path = manifest().join("../../../shared/traces/philly/philly_jobs_pollux.csv");
    let Ok(text) = std::fs::read_to_string(&path) else {
        eprintln!("skipped: {} is not present", path.display());
        return;
    };
    let jobs = match trace::read_philly(&path.display().to_string(), &text, "required:block") {
        Ok(j) => j,
        Err(e) => unreachable!("{e}"),
    };
    assert_eq!(jobs.len(), 82_247);
    assert_eq!(jobs.iter().filter(|j| j.gpus() > 8).count(), 289);
    // The trace's own gpu_time column against GPUs × duration (durations rounded up).
    let listed: f64 = text
        .lines()
        .skip(1)
        .filter_map(|l| l.split(',').nth(3)?.parse::<f64>().ok())
        .sum();
    #[expect(clippy::cast_precision_loss, reason = "a ratio of two large sums")]
    let ours: f64 = jobs
        .iter()
        .map(|j| j.gpus() as f64 * j.duration as f64)
        .sum();
    assert!((ours - listed).abs() / listed < 1e-3, "{ours} vs {listed}");
}

#[test]
fn openb_pods_become_one_pod_jobs_and_gpu_sharing_pods_ask_for_their_share() {
    let text = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n\
                p0,12000,16384,1,460,,LS,Running,100,700,200\n\
                p1,4000,1024,0,0,,BE,Pending,300,900,\n";
    let jobs = trace::read_openb("pods.csv", text).unwrap_or_default();
    let shape: Vec<(String, i64, i64, String, u64, u64)> = jobs
        .iter()
        .map(|j| {
            let r = &j.pod_sets[0].2;
            (
                j.id.clone(),
                j.submit,
                j.duration,
                j.queue.clone(),
                r.get("cpu").map_or(0, |a| a.milli()),
                j.gpus(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        vec![
            ("p0".into(), 100, 500, "ls".into(), 12_000, 1),
            ("p1".into(), 300, 600, "be".into(), 4_000, 0),
        ]
    );
    let share_of = |j: &trace::TraceJob| {
        j.pod_sets[0]
            .2
            .get(muster_api::resources::names::GPU_SHARE)
            .map_or(0, |a| a.milli())
    };
    assert_eq!(jobs.iter().map(share_of).collect::<Vec<_>>(), [460, 0]);
    // Allocation and goodput count the share exactly, not the GPU it is on.
    assert_eq!(
        jobs.iter()
            .map(trace::TraceJob::gpu_milli)
            .collect::<Vec<_>>(),
        [460, 0]
    );
    let bad = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n\
               p0,-5,16384,1,460,,LS,Running,100,700,200\n";
    assert_eq!(
        trace::read_openb("pods.csv", bad)
            .err()
            .map(|e| e.to_string())
            .as_deref(),
        Some("pods.csv:2:4: cpu_milli must be ≥ 0, got -5")
    );
}

#[test]
fn an_openb_list_needs_only_the_columns_the_replay_reads() {
    // No gpu_spec, qos, pod_phase or scheduled_time, and columns in another order: every pod
    // goes to the LocalQueue `default` and runs from its creation.
    let text = "creation_time,deletion_time,name,cpu_milli,memory_mib,num_gpu,gpu_milli\n\
                100,700,p0,12000,16384,1,460\n";
    let jobs = trace::read_openb("pods.csv", text).unwrap_or_else(|e| unreachable!("{e}"));
    let shape: Vec<(String, i64, i64, String, u64)> = jobs
        .iter()
        .map(|j| {
            (
                j.id.clone(),
                j.submit,
                j.duration,
                j.queue.clone(),
                j.gpu_milli(),
            )
        })
        .collect();
    assert_eq!(shape, [("p0".into(), 100, 600, "default".into(), 460)]);
    // A list without times (the FGD authors' multigpu lists) cannot be replayed in time.
    assert_eq!(
        trace::read_openb(
            "multigpu.csv",
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,12000,16384,1,460\n"
        )
        .err()
        .map(|e| e.to_string())
        .as_deref(),
        Some(
            "multigpu.csv:1:44: missing column \"creation_time\": a time replay reads it (the fill experiment, `muster fill`, reads lists without times)"
        )
    );
    assert_eq!(
        trace::read_openb(
            "pods.csv",
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n\
             p0,12000,16384,1,460,soon,700\n"
        )
        .err()
        .map(|e| e.to_string())
        .as_deref(),
        Some("pods.csv:2:22: creation_time must be a whole number, got \"soon\"")
    );
}

#[test]
fn the_real_openb_pod_list_reads_whole() {
    let path = manifest().join("../../../shared/traces/openb/openb_pod_list_default.csv");
    let Ok(text) = std::fs::read_to_string(&path) else {
        eprintln!("skipped: {} is not present", path.display());
        return;
    };
    let jobs = match trace::read_openb(&path.display().to_string(), &text) {
        Ok(j) => j,
        Err(e) => unreachable!("{e}"),
    };
    assert_eq!(jobs.len(), 8_152);
    // num_gpu: 0 → 1,088 pods, 1 → 6,989, 2 → 16, 4 → 15, 8 → 44 (the trace's README).
    assert_eq!(jobs.iter().filter(|j| j.gpus() == 0).count(), 1_088);
    assert_eq!(
        jobs.iter().map(trace::TraceJob::gpus).sum::<u64>(),
        6_989 + 32 + 60 + 352
    );
}

#[test]
fn failed_nodes_restart_their_gangs_and_checkpoints_keep_work() {
    let mut loaded = load(&manifest().join("tests/fixtures/small.yaml"));
    loaded.scenario.failures = Some(muster_sim::scenario::FailureSpec {
        mtbf_hours: 0.05,
        repair_hours: 0.01,
        seed: Some(3),
    });
    let without = run(&loaded, "best-fit");
    assert!(
        without.records.iter().all(|r| r.end.is_some()),
        "every job finishes"
    );
    let restarts: u32 = without.records.iter().map(|r| r.restarts).sum();
    assert!(
        restarts > 0,
        "failures every few minutes must hit a running job"
    );
    assert_eq!(
        run(&loaded, "best-fit").records,
        without.records,
        "deterministic"
    );
    loaded.scenario.checkpoint_seconds = Some(10);
    let with = run(&loaded, "best-fit");
    let busy = |r: &engine::Run| -> i64 {
        r.records
            .iter()
            .filter_map(|j| Some(j.end? - j.submit))
            .sum()
    };
    assert!(
        busy(&with) <= busy(&without),
        "checkpoints never make jobs finish later in total: {} vs {}",
        busy(&with),
        busy(&without)
    );
    // What the restarts threw away: without checkpoints a restarted job loses whole runs;
    // with one every 10 s, less than 10 s of its GPUs per restart.
    let lost = |r: &engine::Run| -> u64 { r.records.iter().map(|j| j.lost_gpu_seconds).sum() };
    assert!(lost(&without) > 0);
    for j in &with.records {
        assert!(
            j.lost_gpu_seconds < 10 * j.gpus * u64::from(j.restarts + j.preemptions).max(1),
            "{j:?}"
        );
    }
    for r in [&without, &with] {
        let summary = muster_sim::report::summary("small", r, false);
        assert_eq!(summary["gpuSecondsLost"], lost(r));
        let goodput = summary["goodput"].as_f64().unwrap_or(-1.0);
        assert!(goodput > 0.0 && goodput <= summary["gpuAllocationMean"].as_f64().unwrap_or(0.0));
    }
}

#[test]
fn any_workload_exports_to_muster_csv_and_reads_back_the_same() {
    let loaded = load(&manifest().join("../../simulations/demo.yaml"));
    let csv = trace::write_muster(&loaded.jobs);
    let back = trace::read_muster("export.csv", &csv);
    assert_eq!(back.as_ref().ok(), Some(&loaded.jobs));
    let philly =
        "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,12,792.0,vc1\n";
    let jobs = trace::read_philly("p.csv", philly, "required:block").unwrap_or_default();
    assert_eq!(
        trace::read_muster("e.csv", &trace::write_muster(&jobs)).ok(),
        Some(jobs)
    );
}

#[test]
fn pools_join_and_leave_during_the_run() {
    let mut loaded = load(&manifest().join("tests/fixtures/small.yaml"));
    loaded.scenario.cluster.pools[0].added_at = Some(1000);
    let joined = run(&loaded, "best-fit");
    let first = joined.records.iter().filter_map(|r| r.start).min();
    assert_eq!(first, Some(1000), "nothing starts before the pool joins");
    assert!(joined.records.iter().all(|r| r.end.is_some()));
    loaded.scenario.cluster.pools[0].added_at = None;
    loaded.scenario.cluster.pools[0].removed_at = Some(20);
    let left = run(&loaded, "best-fit");
    // Jobs running at t=20 are evicted and never finish; nothing runs after.
    assert!(
        left.records.iter().all(|r| r.end.is_none()),
        "{:?}",
        left.records
    );
    assert!(left.records.iter().filter(|r| r.preemptions > 0).count() >= 3);
}

#[test]
fn tpu_pools_serve_whole_slices() {
    let loaded = load(&manifest().join("tests/fixtures/tpu.yaml"));
    let result = run(&loaded, "best-fit");
    let starts: Vec<(String, Option<i64>, String)> = result
        .records
        .iter()
        .map(|r| (r.id.clone(), r.start, r.domain.clone()))
        .collect();
    assert_eq!(
        starts,
        vec![
            (
                "t1".into(),
                Some(0),
                "cloud.google.com/gke-nodepool=v5p-b00".into()
            ),
            (
                "t2".into(),
                Some(0),
                "cloud.google.com/gke-nodepool=v5p-b01".into()
            ),
            (
                "t3".into(),
                Some(100),
                "cloud.google.com/gke-nodepool=v5p-b00".into()
            ),
        ]
    );
}

#[test]
fn synthetic_defaults_are_philly_s_and_bursts_share_a_time() {
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => unreachable!("{e}"),
    };
    let queues = std::fs::read_to_string(manifest().join("../../simulations/demo-queues.yaml"))
        .unwrap_or_default();
    let _ = std::fs::write(dir.path().join("queues.yaml"), queues);
    let scenario = "name: defaults\n\
        cluster:\n  pools:\n    - {name: h100, blocks: 2, hostsPerBlock: 8, gpusPerHost: 8, subBlocksPerBlock: 2,\n       labels: {cloud.google.com/gke-accelerator: nvidia-h100-80gb}}\n\
        queues: queues.yaml\n\
        workload:\n  synthetic: {jobs: 2000, burst: 4, queues: [team-a]}\n";
    let path = dir.path().join("s.yaml");
    let _ = std::fs::write(&path, scenario);
    let loaded = load(&path);
    // Bursts: every group of four jobs arrives at one instant.
    for chunk in loaded.jobs.chunks(4) {
        assert!(chunk.iter().all(|j| j.submit == chunk[0].submit));
    }
    // Philly's mix: about 93% single-GPU jobs.
    let single = loaded.jobs.iter().filter(|j| j.gpus() == 1).count();
    assert!((1_800..=1_930).contains(&single), "{single} of 2000");
    // Sub-blocks: the first and last host of a block of 8 in different halves.
    let sub = |name: &str| {
        loaded.nodes.iter().find(|n| n.name == name).and_then(|n| {
            n.labels
                .get("cloud.google.com/gce-topology-subblock")
                .cloned()
        })
    };
    assert_eq!(sub("h100-b00-h000").as_deref(), Some("h100-b00-s0"));
    assert_eq!(sub("h100-b00-h007").as_deref(), Some("h100-b00-s1"));
}

fn record<'a>(run: &'a engine::Run, id: &str) -> &'a engine::JobRecord {
    run.records
        .iter()
        .find(|r| r.id == id)
        .unwrap_or_else(|| unreachable!("no job {id}"))
}

#[test]
fn jobs_too_big_for_the_fleet_buy_capacity_and_wait_their_turn_in_a_stockout() {
    let loaded = load(&manifest().join("tests/fixtures/buy.yaml"));
    let result = run(&loaded, "best-fit");
    // small fits the fleet at once; big (3 hosts) and bigger (4 hosts) need bought capacity.
    assert_eq!(record(&result, "small").start, Some(0));
    // big gets the pool's only block after 600 s; bigger waits at the autoscaler (a
    // stockout) until big gives the block back at 4200, then 600 s more.
    assert_eq!(record(&result, "big").start, Some(600));
    assert_eq!(record(&result, "big").end, Some(4200));
    assert_eq!(record(&result, "bigger").start, Some(4800));
    assert!(result.records.iter().all(|r| r.end.is_some()));
    let stats = result.provisioning.clone().unwrap_or_default();
    assert_eq!(
        (stats.requests, stats.provisioned, stats.stockouts),
        (2, 2, 0)
    );
    // Bought: 3 hosts × 8 GPUs × 1 h, then 4 hosts × 8 GPUs × 1 h.
    assert!((stats.gpu_hours_bought - 56.0).abs() < 1e-9, "{stats:?}");
    // The fleet's GPUs exclude what can be bought.
    assert_eq!(result.total_gpus, 16);
    let summary = report::summary("buy", &result, false);
    assert_eq!(summary["provisioning"]["gpuHoursBought"], 56.0);
    // Deterministic.
    assert_eq!(run(&loaded, "best-fit").records, result.records);
}

#[test]
fn a_stockout_that_lasts_fails_the_request_and_retries_run_out() {
    let mut loaded = load(&manifest().join("tests/fixtures/buy.yaml"));
    if let Some(a) = loaded.scenario.cluster.pools[1].autoscaler.as_mut() {
        a.stockout_seconds = 1000;
    }
    let result = run(&loaded, "best-fit");
    let stats = result.provisioning.clone().unwrap_or_default();
    // bigger's first request fails at 1000 (big holds the block until 4200); its retry at
    // 1100 fails at 2100; retry.limit 1 is spent, so it gives up and never runs.
    assert_eq!(stats.stockouts, 2, "{stats:?}");
    assert_eq!(stats.gave_up, 1);
    assert_eq!(record(&result, "bigger").start, None);
    assert_eq!(record(&result, "big").end, Some(4200));
}

#[test]
fn capacity_past_its_maximum_run_is_revoked_and_the_gang_queues_again() {
    let mut loaded = load(&manifest().join("tests/fixtures/buy.yaml"));
    if let Some(a) = loaded.scenario.cluster.pools[1].autoscaler.as_mut() {
        a.max_run_seconds = Some(1800);
    }
    let result = run(&loaded, "best-fit");
    let stats = result.provisioning.clone().unwrap_or_default();
    assert!(stats.revoked >= 1, "{stats:?}");
    let big = record(&result, "big");
    assert!(big.preemptions >= 1, "{big:?}");
    // A 1-hour job never finishes on capacity that lasts 30 minutes: after retry.limit + 1
    // requests it gives up, and the run ends.
    assert_eq!(big.end, None);
    assert!(stats.gave_up >= 1, "{stats:?}");
}

#[test]
fn with_on_capacity_revoked_fail_a_revoked_gang_fails_instead_of_buying_again() {
    let mut loaded = load(&manifest().join("tests/fixtures/buy.yaml"));
    if let Some(a) = loaded.scenario.cluster.pools[1].autoscaler.as_mut() {
        a.max_run_seconds = Some(1800);
    }
    for (_, queue) in &mut loaded.cluster_queues {
        if let Some(p) = queue.provisioning.as_mut() {
            p.on_capacity_revoked = muster_api::cluster_queue::RevokedPolicy::Fail;
        }
    }
    let result = run(&loaded, "best-fit");
    let stats = result.provisioning.clone().unwrap_or_default();
    let big = record(&result, "big");
    // big runs 30 minutes on its capacity, loses it, and fails: one request, no retry.
    assert_eq!(big.end, None);
    assert!(big.domain.contains("onCapacityRevoked: Fail"), "{big:?}");
    assert!(stats.failed_on_revoke >= 1, "{stats:?}");
    assert_eq!(stats.gave_up, 0, "{stats:?}");
    // Every revoked gang failed, and none bought capacity a second time.
    assert_eq!(stats.failed_on_revoke, stats.revoked, "{stats:?}");
    assert_eq!(stats.requests, stats.revoked, "{stats:?}");
    let summary = report::summary("fail", &result, false);
    assert_eq!(
        summary["provisioning"]["jobsFailedOnRevoke"],
        stats.failed_on_revoke
    );
}

#[test]
fn a_queue_that_provisions_needs_a_pool_to_buy_from() {
    let mut loaded = load(&manifest().join("tests/fixtures/buy.yaml"));
    loaded.scenario.cluster.pools.truncate(1);
    loaded.nodes.truncate(2);
    let Err(e) = engine::run(&loaded, "best-fit", &mut |_, _| {}) else {
        unreachable!("ran without an autoscaler pool")
    };
    assert!(e.contains("no pool"), "{e}");
}

#[test]
fn the_shipped_provisioning_scenario_meets_stockouts_and_beats_waiting() {
    let bought = run(
        &load(&manifest().join("../../simulations/dws.yaml")),
        "best-fit",
    );
    let fixed = run(
        &load(&manifest().join("../../simulations/dws-fixed.yaml")),
        "best-fit",
    );
    let stats = bought.provisioning.clone().unwrap_or_default();
    assert!(stats.stockouts > 0, "{stats:?}");
    assert!(stats.gpu_hours_bought > 0.0);
    assert!(fixed.provisioning.is_none());
    let mean_wait = |r: &engine::Run| {
        let waits: Vec<i64> = r
            .records
            .iter()
            .filter_map(|j| Some(j.start? - j.submit))
            .collect();
        waits.iter().sum::<i64>() / i64::try_from(waits.len().max(1)).unwrap_or(1)
    };
    assert!(bought.records.iter().all(|r| r.end.is_some()));
    assert!(mean_wait(&bought) < mean_wait(&fixed));
}

/// The shipped openb scenarios: HAMi pools shaped like the trace's node list (every GPU
/// tracked one by one, 10 vGPUs each), the trace's sharing pods asking for their share, and
/// the busy variant submitting 300 times faster.
#[test]
fn the_openb_scenarios_run_shares_on_hami_pools() {
    let trace = manifest().join("../../../shared/traces/openb/openb_pod_list_default.csv");
    if !trace.exists() {
        eprintln!(
            "skipped: the openb trace {} is not present",
            trace.display()
        );
        return;
    }
    let calm = load(&manifest().join("../../simulations/openb-shares.yaml"));
    let busy = load(&manifest().join("../../simulations/openb-shares-busy.yaml"));
    assert_eq!(calm.nodes.len(), 1_213);
    let devices: u32 = calm.nodes.iter().map(NodeInfo::gpu_devices).sum();
    assert_eq!(
        devices, 6_212,
        "every GPU of the node list, tracked one by one"
    );
    assert!(calm.nodes.iter().all(|n| {
        n.allocatable.get("nvidia.com/gpu")
            == muster_api::Amount::from_units(u64::from(n.gpu_devices()) * 10)
    }));
    let shares = calm
        .jobs
        .iter()
        .filter(|j| {
            j.pod_sets[0]
                .2
                .contains_key(muster_api::resources::names::GPU_SHARE)
        })
        .count();
    assert_eq!(shares, 3_078, "the pods asking for part of one GPU");
    let submits = |l: &Loaded| l.jobs.iter().map(|j| j.submit).max();
    assert_eq!(submits(&busy), submits(&calm).map(|s| s / 1000));
}

/// A synthetic size with `gpuShare` makes gangs of that many pods each asking for the share;
/// a share of a whole GPU or more is refused with the field named.
#[test]
fn synthetic_sizes_may_ask_for_shares() {
    let loaded = load(&manifest().join("../../simulations/shares-gangs.yaml"));
    let share = |j: &trace::TraceJob| {
        j.pod_sets[0]
            .2
            .get(muster_api::resources::names::GPU_SHARE)
            .map(|a| (j.pod_sets[0].1, a.milli()))
    };
    let shapes: BTreeSet<(u32, u64)> = loaded.jobs.iter().filter_map(share).collect();
    assert_eq!(
        shapes,
        [(1, 300), (1, 700), (2, 500), (4, 250)]
            .into_iter()
            .collect()
    );
    assert!(loaded.nodes.iter().all(|n| n.gpu_devices() == 4));
    let text = std::fs::read_to_string(manifest().join("../../simulations/shares-gangs.yaml"))
        .unwrap_or_default()
        .replace("gpuShare: 700m", "gpuShare: 1500m");
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => unreachable!("a temporary folder: {e}"),
    };
    let path = dir.path().join("bad.yaml");
    if let Err(e) = std::fs::write(&path, text) {
        unreachable!("writing {}: {e}", path.display());
    }
    let err = Loaded::from_file(&path, None).err().map(|e| e.to_string());
    assert!(
        err.as_deref()
            .is_some_and(|e| e.contains("gpuShare \"1500m\"")),
        "{err:?}"
    );
}
