//! Manifest workloads: the example Job, JobSet and GpuJob files teams submit, replayed as the
//! controller reads them, and every manifest the simulator cannot honour refused with its
//! document and field.

use muster_sim::trace::{self, ManifestSpec, read_manifests};
use support::{load, manifest, run};

mod support;

fn spec() -> ManifestSpec {
    ManifestSpec {
        path: "jobs.yaml".into(),
        duration_seconds: 600,
        submit_seconds: 30,
        copies: 1,
        every_seconds: 0,
        announce_runtime: false,
    }
}

/// The error for `text` as a manifest file, or the jobs' ids when it reads.
fn read(text: &str) -> Result<Vec<trace::TraceJob>, String> {
    read_manifests("jobs.yaml", text, "team-a", &spec()).map_err(|e| e.to_string())
}

const LABELLED_JOB: &str = r"
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  labels: {muster.dev/queue-name: training}
spec:
  parallelism: 4
  completions: 4
  completionMode: Indexed
  template:
    metadata:
      annotations: {muster.dev/topology-required: example.com/block}
    spec:
      restartPolicy: Never
      priorityClassName: research-high
      nodeSelector: {gpu: h100}
      containers:
      - name: main
        image: trainer:1
        resources: {limits: {nvidia.com/gpu: 8}}
";

const PRIORITY_CLASS: &str = r"
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: research-high}
value: 1000
";

#[test]
fn the_example_manifests_replay_as_the_controller_reads_them() {
    let loaded = load(&manifest().join("../../simulations/manifests.yaml"));
    assert_eq!(loaded.jobs.len(), 36);
    let first = run(&loaded, "best-fit");
    let again = run(&loaded, "best-fit");
    assert_eq!(
        first.records, again.records,
        "the same input decides the same"
    );
    for record in &first.records {
        assert!(record.end.is_some(), "{} never finished", record.id);
        let domains: Vec<&str> = record.domain.split(' ').collect();
        if record.id.starts_with("jax-multislice-") {
            // The JobSet's two replicated Jobs: two whole v5p slices (node pools).
            assert_eq!(domains.len(), 2, "{record:?}");
            assert!(
                domains
                    .iter()
                    .all(|d| d.starts_with("cloud.google.com/gke-nodepool=v5p-")),
                "{record:?}"
            );
            assert_ne!(domains[0], domains[1]);
        } else if record.id.starts_with("llm-pretrain-") {
            // The indexed Job: all 8 hosts in one block, as its annotation requires.
            assert_eq!(domains.len(), 1, "{record:?}");
            assert!(
                domains[0].starts_with("cloud.google.com/gce-topology-block=h100-"),
                "{record:?}"
            );
        } else {
            assert!(record.id.starts_with("jax-v5p-"), "{record:?}");
            assert!(domains[0].starts_with("cloud.google.com/gke-nodepool=v5p-"));
        }
    }
}

#[test]
fn a_labelled_job_is_one_gang_with_its_class_priority_selector_and_topology() {
    let jobs = read(&format!("{PRIORITY_CLASS}---{LABELLED_JOB}"));
    let jobs = match jobs {
        Ok(j) => j,
        Err(e) => unreachable!("{e}"),
    };
    let [job] = jobs.as_slice() else {
        unreachable!("{jobs:?}")
    };
    assert_eq!(job.id, "train");
    assert_eq!((job.submit, job.duration), (30, 600));
    assert_eq!(job.queue, "training");
    assert_eq!(job.priority, 1000);
    assert_eq!(job.topology, "required:example.com/block");
    assert_eq!(job.pod_sets.len(), 1);
    assert_eq!(job.pod_sets[0].1, 4);
    assert_eq!(job.gpus(), 32);
    assert_eq!(
        job.node_selector.get("gpu").map(String::as_str),
        Some("h100")
    );
    // The selector survives an export to Muster's CSV and back.
    let csv = trace::write_muster(&jobs);
    assert_eq!(trace::read_muster("e.csv", &csv).ok(), Some(jobs.clone()));
}

#[test]
fn copies_arrive_every_so_often_under_their_own_names() {
    let text = format!("{PRIORITY_CLASS}---{LABELLED_JOB}");
    let spec = ManifestSpec {
        copies: 3,
        every_seconds: 100,
        ..spec()
    };
    let jobs = read_manifests("jobs.yaml", &text, "team-a", &spec).unwrap_or_default();
    let arrivals: Vec<(&str, i64)> = jobs.iter().map(|j| (j.id.as_str(), j.submit)).collect();
    assert_eq!(
        arrivals,
        vec![("train-0", 30), ("train-1", 130), ("train-2", 230)]
    );
}

#[test]
fn what_the_simulator_cannot_honour_is_refused_with_document_and_field() {
    let cases = [
        (
            LABELLED_JOB.to_owned(),
            "document 1: train: priorityClassName \"research-high\": no PriorityClass",
        ),
        (
            LABELLED_JOB.replace("  labels: {muster.dev/queue-name: training}\n", ""),
            "document 1: a Job without the label muster.dev/queue-name is never queued",
        ),
        (
            format!(
                "{PRIORITY_CLASS}---{}",
                LABELLED_JOB.replace("  name: train\n", "  name: train\n  namespace: team-b\n")
            ),
            "document 2: metadata.namespace is \"team-b\", but the scenario runs namespace \"team-a\"",
        ),
        (
            format!(
                "{PRIORITY_CLASS}---{}",
                LABELLED_JOB.replace(
                    "      nodeSelector: {gpu: h100}\n",
                    "      affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: gpu, operator: In, values: [h100]}]}]}}}\n"
                )
            ),
            "document 2: train: pod set main: required node affinity is not simulated; use nodeSelector",
        ),
        (
            format!("{PRIORITY_CLASS}---{LABELLED_JOB}---{LABELLED_JOB}"),
            "document 3: train is named twice (first in document 2)",
        ),
        (
            LABELLED_JOB.replace("nvidia.com/gpu: 8", "nvidia.com/gpu: lots"),
            "document 1: spec.template.spec.containers[0].resources",
        ),
        (
            "apiVersion: muster.dev/v1alpha1\nkind: LocalQueue\nmetadata: {name: q}\nspec: {clusterQueue: cq}\n".to_owned(),
            "document 1: a LocalQueue belongs in the scenario's queues file",
        ),
        (
            "kind: [unclosed\n".to_owned(),
            "jobs.yaml: document 1: ",
        ),
        (
            PRIORITY_CLASS.to_owned(),
            "holds no GpuJob, Job or JobSet to submit",
        ),
    ];
    for (text, wanted) in cases {
        let error = read(&text).err().unwrap_or_default();
        assert!(
            error.contains(wanted),
            "wanted {wanted:?}, got {error:?} for\n{text}"
        );
    }
}
