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
        vec!["best-fit", "comparison.json", "comparison.md", "spread"]
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
