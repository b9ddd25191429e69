//! The `muster` binary end to end: generated CRDs match `crds/`, the shipped examples are valid,
//! and the invalid ones are rejected with field paths and fixes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn muster(args: &[&str]) -> Output {
    match Command::new(env!("CARGO_BIN_EXE_muster"))
        .args(args)
        .current_dir(repo())
        .output()
    {
        Ok(out) => out,
        Err(e) => unreachable!("cannot run muster: {e}"),
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The names of the files in `dir`, sorted.
fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| unreachable!("{}: {e}", path.display()))
}

#[test]
fn checked_in_crds_match_the_types() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| unreachable!("{e}"));
    let out_dir = dir.path().to_string_lossy().into_owned();
    let out = muster(&["crds", "--out", &out_dir]);
    assert!(out.status.success());
    let generated = file_names(dir.path());
    let checked_in = file_names(&repo().join("crds"));
    assert_eq!(
        generated, checked_in,
        "crds/ has other files than `muster crds --out` writes"
    );
    for name in &generated {
        assert!(
            read(&dir.path().join(name)) == read(&repo().join("crds").join(name)),
            "crds/{name} differs from the types; run `cargo run -p muster -- crds --out crds`"
        );
    }
}

#[test]
fn printed_crds_are_the_files_concatenated() {
    let out = muster(&["crds"]);
    let printed = stdout(&out);
    for name in [
        "muster.dev_gpujobs.yaml",
        "muster.dev_clusterqueues.yaml",
        "muster.dev_localqueues.yaml",
        "muster.dev_resourceflavors.yaml",
    ] {
        let file = read(&repo().join("crds").join(name));
        let body = file.lines().skip(1).collect::<Vec<_>>().join("\n");
        assert!(printed.contains(&body), "{name} missing from `muster crds`");
    }
}

#[test]
fn shipped_examples_are_valid() {
    let out = muster(&[
        "validate",
        "-f",
        "deploy/examples/admin.yaml",
        "deploy/examples/gpu-block-job.yaml",
        "deploy/examples/tpu-v5p-job.yaml",
        "deploy/examples/h100-mig-pool.yaml",
        "deploy/examples/hami-share-job.yaml",
        "deploy/examples/indexed-job.yaml",
        "deploy/examples/tpu-jobset.yaml",
        "deploy/examples/pod-group.yaml",
    ]);
    assert!(out.status.success(), "{}", stdout(&out));
    let summary = String::from_utf8_lossy(&out.stderr);
    assert!(
        summary.contains("22 Muster object(s) in 8 file(s): all valid, 4 other object(s) skipped"),
        "{summary}"
    );
}

/// Each invalid example, and lines its report must contain.
const INVALID: &[(&str, &[&str])] = &[
    (
        "conflicting-job.yaml",
        &[
            "conflicting-job.yaml:1: metadata.name: \"Bad_Job\" is not a DNS-1035 label",
            "conflicting-job.yaml:1: spec.priorityClassName: set either priority or priorityClassName, not both",
            "conflicting-job.yaml:1: spec.podSets[0].count: 0 pods; a pod set needs at least 1",
            "conflicting-job.yaml:1: spec.podSets[0].template.spec.nodeName: is set to \"gpu-node-7\"",
            "conflicting-job.yaml:1: spec.podSets[0].template.spec.restartPolicy: Always never lets the job finish",
            "conflicting-job.yaml:1: spec.podSets[0].template.spec.containers[0].resources.limits[\"nvidia.com/gpu\"]: nvidia.com/gpu request 4 and limit 8 differ",
            "conflicting-job.yaml:1: spec.podSets[0].topology: sets required and preferred; give at most one of required, preferred or tpu",
            "conflicting-job.yaml:1: spec.podSets[1].name: \"workers\" is used by an earlier pod set",
            "conflicting-job.yaml:1: spec.podSets[1].template.spec.containers[0].image: missing",
            "conflicting-job.yaml:1: spec.podSets[1].template.spec.containers[0].resources: nvidia.com/gpu is 500m; extended resources such as GPUs come in whole units",
        ],
    ),
    (
        "flavor.yaml",
        &[
            "flavor.yaml:1: spec.tolerations[0].operator: \"Matches\" is not a toleration operator; use Equal or Exists",
            "flavor.yaml:1: spec.topologyLevels[0]: kubernetes.io/hostname names single nodes, so it must be the last (narrowest) level",
        ],
    ),
    (
        "job-annotations.yaml",
        &[
            "job-annotations.yaml:1: spec.template.metadata.annotations[muster.dev/gpu-share]: 1.5 is one GPU or more; ask for whole GPUs with nvidia.com/gpu in the template and remove muster.dev/gpu-share",
            "job-annotations.yaml:1: spec.template.metadata.annotations: sets required and preferred; give at most one of muster.dev/topology-required, muster.dev/topology-preferred or a TPU slice",
        ],
    ),
    (
        "pod-group.yaml",
        &[
            "pod-group.yaml:1: metadata.labels[muster.dev/pod-group-size]: pod ray-worker-1 says \"3\" while pod ray-worker-0 says \"2\"",
            "pod-group.yaml:1: spec: pod ray-worker-1 asks for other resources or placement than pod ray-worker-0",
        ],
    ),
    (
        "quota-layout.yaml",
        &[
            "quota-layout.yaml:1: spec.resourceGroups[0].flavors[0].resources: lists [nvidia.com/gpu, cpu]; list quota for exactly the covered resources, in the same order: [cpu, nvidia.com/gpu]",
            "quota-layout.yaml:1: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: \"8 GPUs\" is not a Kubernetes quantity",
            "quota-layout.yaml:1: spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit: only a queue in a cohort can borrow; set spec.cohort or remove borrowingLimit",
            "quota-layout.yaml:1: spec.resourceGroups[0].flavors[0].resources[1].lendingLimit: only a queue in a cohort can lend; set spec.cohort or remove lendingLimit",
            "quota-layout.yaml:1: spec.resourceGroups[0].flavors[0].resources[1].lendingLimit: 128 is more than the nominal quota 64",
        ],
    ),
    (
        "tpu-bad-shape.yaml",
        &[
            "tpu-bad-shape.yaml:1: spec.podSets[0].topology.tpu.topology: \"3x3\" is not a valid tpu-v5-lite-podslice shape; valid shapes are 1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16",
            "tpu-bad-shape.yaml:1: spec.podSets[0].topology.tpu.allowRotation: tpu-v5-lite-podslice slices are 2D and never rotate; remove allowRotation",
        ],
    ),
    (
        "tpu-count-mismatch.yaml",
        &[
            "tpu-count-mismatch.yaml:1: spec.podSets[0].count: 2 pods, but 1 slice(s) of 2x2x4 with 4 chips per host need exactly 4 (one pod per host); set count to 4",
        ],
    ),
    (
        "typos.yaml",
        &[
            "typos.yaml:1: spec.podsReadyTimeoutSecond: unknown field",
            "typos.yaml:2: spec.podSets[0].count: invalid type: string \"sixteen\", expected an integer",
        ],
    ),
];

#[test]
fn invalid_examples_are_rejected_with_paths_and_fixes() {
    let on_disk = file_names(&repo().join("deploy/examples/invalid"));
    let expected: Vec<&str> = INVALID.iter().map(|(f, _)| *f).collect();
    assert_eq!(
        on_disk, expected,
        "every invalid example has expectations here"
    );
    for (file, lines) in INVALID {
        let path = format!("deploy/examples/invalid/{file}");
        let out = muster(&["validate", "-f", &path]);
        assert_eq!(out.status.code(), Some(1), "{file} must be rejected");
        let report = stdout(&out);
        assert_eq!(
            report.lines().count(),
            lines.len(),
            "{file}: exactly these errors:\n{report}"
        );
        for line in *lines {
            let full = format!("deploy/examples/invalid/{line}");
            assert!(
                report.lines().any(|l| l.starts_with(&full)),
                "{file}: missing {line:?} in:\n{report}"
            );
        }
    }
}

#[test]
fn directories_are_searched_and_errors_fail_the_run() {
    let out = muster(&["validate", "-f", "deploy/examples"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("deploy/examples/invalid/typos.yaml:1:"));
}

#[test]
fn yaml_syntax_errors_are_located() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| unreachable!("{e}"));
    let path = dir.path().join("broken.yaml");
    std::fs::write(
        &path,
        "apiVersion: muster.dev/v1alpha1\nkind: LocalQueue\nspec: [unclosed\n",
    )
    .unwrap_or_default();
    let out = muster(&["validate", "-f", &path.to_string_lossy()]);
    assert_eq!(out.status.code(), Some(1));
    let report = stdout(&out);
    assert!(
        report.contains("broken.yaml:1: (yaml):") && report.contains("line"),
        "{report}"
    );
}

#[test]
fn a_missing_file_is_an_error_not_a_pass() {
    let out = muster(&["validate", "-f", "no/such/file.yaml"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn the_readme_simulation_runs_and_writes_its_reports() {
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => unreachable!("{e}"),
    };
    let out_dir = dir.path().display().to_string();
    let out = muster(&[
        "sim",
        "simulations/demo.yaml",
        "--out",
        &out_dir,
        "--policy",
        "best-fit,spread",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = stdout(&out);
    assert!(text.contains("demo — policy best-fit"), "{text}");
    assert!(text.contains("| spread | 400 |"), "{text}");
    assert_eq!(
        file_names(dir.path()),
        vec![
            "allocation.svg",
            "best-fit",
            "comparison.json",
            "comparison.md",
            "index.html",
            "queue.svg",
            "spread",
            "wait-cdf-1.svg",
            "wait-cdf-2-8.svg",
            "wait-cdf-9-32.svg",
        ]
    );
    assert_eq!(
        file_names(&dir.path().join("spread")),
        vec![
            "allocation.svg",
            "jobs.csv",
            "queue.svg",
            "summary.json",
            "wait-cdf.svg"
        ]
    );
    // The page gathers the tables, every plot inline, the data files and the scenario.
    let page = read(&dir.path().join("index.html"));
    assert!(page.contains("<td>spread</td><td>400</td>"), "{page}");
    assert_eq!(page.matches("<svg").count(), 3 + 2 + 2, "{page}");
    for link in ["spread/jobs.csv", "best-fit/summary.json", "comparison.md"] {
        assert!(page.contains(&format!("href=\"{link}\"")), "{link}");
    }
    assert!(page.contains("name: demo"), "the scenario is on the page");
    assert!(!page.contains("<script"));
    // Both policies share the comparison's axes.
    let allocation = read(&dir.path().join("allocation.svg"));
    assert!(allocation.contains("\nbest-fit\n") && allocation.contains("\nspread\n"));
    assert!(allocation.contains("GPUs allocated") && allocation.contains("hours"));
    renders(dir.path());
}

/// Renders every SVG under `dir` to PNG with rsvg-convert (librsvg), so that a malformed file
/// fails; says so and returns when rsvg-convert is not installed.
fn renders(dir: &Path) {
    if Command::new("rsvg-convert")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!(
            "skipped rendering the SVGs: rsvg-convert (Debian's librsvg2-bin) is not installed"
        );
        return;
    }
    let mut svgs = Vec::new();
    let mut folders = vec![dir.to_owned()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "svg") {
                svgs.push(path);
            }
        }
    }
    assert!(!svgs.is_empty(), "no SVG in {}", dir.display());
    for svg in svgs {
        let png = svg.with_extension("png");
        let out = Command::new("rsvg-convert")
            .arg("-o")
            .arg(&png)
            .arg(&svg)
            .output();
        let out = out.unwrap_or_else(|e| unreachable!("rsvg-convert: {e}"));
        assert!(
            out.status.success(),
            "{} does not render: {}",
            svg.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let size = std::fs::metadata(&png).map_or(0, |m| m.len());
        assert!(size > 1_000, "{} rendered to {size} bytes", svg.display());
    }
}

#[test]
fn the_fill_experiment_writes_its_page_and_marks_the_papers_points_on_its_workload() {
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => unreachable!("{e}"),
    };
    // A small fleet and pod list under the names openb ships its default workload as.
    let nodes = dir.path().join("openb_node_list_gpu_node.csv");
    let pods = dir.path().join("openb_pod_list_default.csv");
    let node_rows: String = std::iter::once("sn,cpu_milli,memory_mib,gpu,model\n".to_owned())
        .chain((0..8).map(|i| format!("n{i},96000,786432,8,V100M32\n")))
        .collect();
    let header = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n".to_owned();
    let pod_rows: String = std::iter::once(header)
        .chain((0..40).map(|i| {
            let (gpus, milli) = match i % 4 {
                0 => (1, 500),
                1 => (1, 1000),
                2 => (2, 1000),
                _ => (1, 250),
            };
            format!("p{i},4000,16384,{gpus},{milli},\n")
        }))
        .collect();
    for (path, text) in [(&nodes, node_rows), (&pods, pod_rows)] {
        std::fs::write(path, text).unwrap_or_else(|e| unreachable!("{e}"));
    }
    let out_dir = dir.path().join("out");
    let out = muster(&[
        "fill",
        "--nodes",
        &nodes.display().to_string(),
        "--pods",
        &pods.display().to_string(),
        "--policy",
        "best-fit,fgd",
        "--out",
        &out_dir.display().to_string(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        file_names(&out_dir),
        vec!["fill-zoom.svg", "fill.csv", "fill.svg", "index.html"]
    );
    let svg = read(&out_dir.join("fill.svg"));
    assert!(
        svg.contains("paper (ATC&apos;23)"),
        "the paper's points are marked"
    );
    assert!(
        svg.matches("<circle").count() > 2,
        "the paper's points are drawn"
    );
    let page = read(&out_dir.join("index.html"));
    assert!(page.contains("(paper 95.23)"), "{page}");
    assert!(page.contains("href=\"fill.csv\""));
    renders(&out_dir);
}

#[test]
fn a_scenario_with_a_bad_trace_row_fails_with_its_position() {
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => unreachable!("{e}"),
    };
    let scenario =
        std::fs::read_to_string(repo().join("crates/muster-sim/tests/fixtures/small.yaml"))
            .unwrap_or_default();
    let _ = std::fs::write(dir.path().join("small.yaml"), scenario);
    let _ = std::fs::write(
        dir.path().join("small.csv"),
        "id,submit,duration,queue,priority,pod_sets,topology,expected_runtime\na,0,10,team-a,high,workers:1:nvidia.com/gpu=1,,\n",
    );
    let path = dir.path().join("small.yaml").display().to_string();
    let out = muster(&["sim", &path]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        err.contains("small.csv:2:15: priority must be a whole number, got \"high\""),
        "{err}"
    );
}
