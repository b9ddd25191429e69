use k8s_openapi::api::batch::v1::Job;
use serde_json::{Value, json};

use super::{job_as_gpujob, jobset_as_gpujob};
use crate::jobset::JobSet;
use crate::validation::FieldError;

fn read<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).unwrap_or_else(|e| unreachable!("fixture: {e}"))
}

/// An indexed Job of `parallelism` pods with 8 GPUs each, labelled for queue `training`, its
/// template annotated with `annotations`.
fn gpu_job(parallelism: i32, annotations: &Value) -> Job {
    read(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "train", "namespace": "team-a",
                     "labels": {"muster.dev/queue-name": "training"}},
        "spec": {"parallelism": parallelism, "completions": parallelism,
                 "completionMode": "Indexed", "suspend": true,
                 "template": {
                     "metadata": {"annotations": annotations},
                     "spec": {"restartPolicy": "Never", "containers": [{
                         "name": "main", "image": "trainer:1",
                         "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}
    }))
}

fn paths(errors: &[FieldError]) -> Vec<&str> {
    errors.iter().map(|e| e.path.as_str()).collect()
}

#[test]
fn an_indexed_job_is_one_pod_set_of_its_parallel_pods_in_the_level_it_requires() {
    let job = gpu_job(
        8,
        &json!({"muster.dev/topology-required": "example.com/block"}),
    );
    let read = job_as_gpujob(&job).unwrap_or_else(|e| unreachable!("{e:?}"));
    assert_eq!(read.spec.queue_name, "training");
    assert_eq!(read.metadata.name.as_deref(), Some("train"));
    let [set] = read.spec.pod_sets.as_slice() else {
        unreachable!("{:?}", read.spec.pod_sets)
    };
    assert_eq!((set.name.as_str(), set.count), ("main", 8));
    let topology = set.topology.clone().unwrap_or_default();
    assert_eq!(topology.required.as_deref(), Some("example.com/block"));
    assert_eq!(topology.preferred, None);
}

#[test]
fn a_job_s_entry_restarts_its_gang_as_often_as_the_job_tolerates_pod_failures() {
    let mut job = gpu_job(4, &json!({}));
    let limit = |job: &Job| {
        job_as_gpujob(job).map_or_else(|e| unreachable!("{e:?}"), |j| j.spec.backoff_limit())
    };
    let mut set = |change: &dyn Fn(&mut k8s_openapi::api::batch::v1::JobSpec)| {
        if let Some(spec) = job.spec.as_mut() {
            change(spec);
        }
        limit(&job)
    };
    assert_eq!(set(&|s| s.backoff_limit = Some(20)), 20);
    // Never fewer than Muster's default: some restarts follow no failure at all.
    assert_eq!(
        set(&|s| s.backoff_limit = Some(0)),
        crate::gpujob::DEFAULT_BACKOFF_LIMIT
    );
    // A Job read before the API server defaulted it: the default it will get.
    assert_eq!(
        set(&|s| s.backoff_limit = None),
        crate::backoff::JOB_DEFAULT_BACKOFF_LIMIT
    );
    // Every failure may fall on one index: its limit bounds the Job's.
    assert_eq!(set(&|s| s.backoff_limit_per_index = Some(4)), 4);
    assert_eq!(set(&|s| s.backoff_limit = Some(20)), 4);
    // Failures a pod failure policy ignores are not counted: no bound.
    let ignore: k8s_openapi::api::batch::v1::PodFailurePolicy = read(json!({"rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]}));
    assert_eq!(
        set(&|s| s.pod_failure_policy = Some(ignore.clone())),
        i32::MAX
    );
}

#[test]
fn a_job_runs_as_many_pods_at_once_as_its_parallelism_and_completions_allow() {
    let mut job = gpu_job(4, &json!({}));
    let count = |job: &Job| {
        job_as_gpujob(job).map_or_else(|e| unreachable!("{e:?}"), |j| j.spec.pod_sets[0].count)
    };
    assert_eq!(count(&job), 4);
    if let Some(spec) = job.spec.as_mut() {
        spec.completions = Some(2);
    }
    assert_eq!(count(&job), 2, "fewer completions than parallel pods");
    if let Some(spec) = job.spec.as_mut() {
        spec.completions = None;
        spec.parallelism = None;
    }
    assert_eq!(count(&job), 1, "parallelism defaults to 1");
}

#[test]
fn a_job_without_the_queue_label_is_refused_at_the_label() {
    let mut job = gpu_job(2, &json!({}));
    job.metadata.labels = None;
    let errors = job_as_gpujob(&job).err().unwrap_or_default();
    assert_eq!(paths(&errors), ["metadata.labels[muster.dev/queue-name]"]);
    assert!(
        errors[0]
            .message
            .contains("muster.dev/queue-name: <LocalQueue>")
    );
}

#[test]
fn errors_name_the_jobs_own_fields() {
    // Two topology constraints, a share of more than one GPU and no pods at all.
    let job = gpu_job(
        0,
        &json!({"muster.dev/topology-required": "example.com/block",
               "muster.dev/topology-preferred": "example.com/rack",
               "muster.dev/gpu-share": "1.5"}),
    );
    let errors = job_as_gpujob(&job).err().unwrap_or_default();
    let found = paths(&errors);
    for wanted in [
        "spec.parallelism",
        "spec.template.metadata.annotations",
        "spec.template.metadata.annotations[muster.dev/gpu-share]",
    ] {
        assert!(found.contains(&wanted), "{wanted} not in {errors:#?}");
    }
    assert!(
        found.iter().all(|p| !p.contains("podSets")),
        "a GpuJob's path leaked: {errors:#?}"
    );
}

#[test]
fn a_gke_tpu_job_asks_for_its_slice_through_its_node_selectors() {
    let tpu = |parallelism: i32| -> Job {
        read(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "jax", "namespace": "team-a",
                         "labels": {"muster.dev/queue-name": "training"}},
            "spec": {"parallelism": parallelism, "completions": parallelism,
                     "completionMode": "Indexed", "suspend": true,
                     "template": {"spec": {
                         "restartPolicy": "Never",
                         "nodeSelector": {
                             "cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice",
                             "cloud.google.com/gke-tpu-topology": "2x2x4"},
                         "containers": [{"name": "jax", "image": "jax:1",
                             "resources": {"limits": {"google.com/tpu": "4"}}}]}}}
        }))
    };
    let read = job_as_gpujob(&tpu(4)).unwrap_or_else(|e| unreachable!("{e:?}"));
    let slice = read.spec.pod_sets[0]
        .topology
        .clone()
        .and_then(|t| t.tpu)
        .unwrap_or_default();
    assert_eq!(
        (
            slice.accelerator.as_str(),
            slice.topology.as_str(),
            slice.slices
        ),
        ("tpu-v5p-slice", "2x2x4", None)
    );
    // A 2x2x4 slice has 4 hosts: 3 pods cannot be one pod per host.
    let errors = job_as_gpujob(&tpu(3)).err().unwrap_or_default();
    assert_eq!(paths(&errors), ["spec.parallelism"], "{errors:#?}");
    assert!(
        errors[0]
            .message
            .contains("set parallelism and completions to 4"),
        "{errors:#?}"
    );
}

fn jobset(value: Value) -> JobSet {
    read(value)
}

/// A suspended JobSet of `slices` TPU v5p 2x2x4 slices, one child Job of four pods each.
fn multislice(slices: i32) -> JobSet {
    jobset(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "multislice", "namespace": "team-a",
                     "labels": {"muster.dev/queue-name": "training"}},
        "spec": {"suspend": true, "replicatedJobs": [{
            "name": "slice", "replicas": slices,
            "template": {"spec": {"parallelism": 4, "completions": 4,
                "completionMode": "Indexed",
                "template": {
                    "metadata": {"annotations": {
                        "muster.dev/tpu-accelerator": "tpu-v5p-slice",
                        "muster.dev/tpu-topology": "2x2x4"}},
                    "spec": {"restartPolicy": "Never", "containers": [{
                        "name": "jax", "image": "jax:1",
                        "resources": {"limits": {"google.com/tpu": "4"}}}]}}}}}]}
    }))
}

#[test]
fn a_tpu_jobset_takes_one_whole_slice_per_replica() {
    let set = multislice(2);
    let read = jobset_as_gpujob(&set).unwrap_or_else(|e| unreachable!("{e:?}"));
    let [pods] = read.spec.pod_sets.as_slice() else {
        unreachable!("{:?}", read.spec.pod_sets)
    };
    assert_eq!((pods.name.as_str(), pods.count), ("slice", 8));
    let slice = pods
        .topology
        .clone()
        .and_then(|t| t.tpu)
        .unwrap_or_default();
    assert_eq!(slice.slices, Some(2));
    // Each replica is one slice: 3 pods per Job cannot be one pod per host of 4.
    let mut short = set.clone();
    if let Some(spec) = short.spec.replicated_jobs[0].template.spec.as_mut() {
        spec.parallelism = Some(3);
        spec.completions = Some(3);
    }
    let errors = jobset_as_gpujob(&short).err().unwrap_or_default();
    assert_eq!(
        paths(&errors),
        ["spec.replicatedJobs[0].template.spec.parallelism"],
        "{errors:#?}"
    );
}

#[test]
fn an_exclusive_topology_gives_each_child_job_a_domain_of_its_own() {
    let mut set = jobset(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "train", "namespace": "team-a",
                     "labels": {"muster.dev/queue-name": "training"},
                     "annotations": {"alpha.jobset.sigs.k8s.io/exclusive-topology": "example.com/block"}},
        "spec": {"replicatedJobs": [
            {"name": "workers", "replicas": 3,
             "template": {"spec": {"parallelism": 2, "completions": 2,
                "template": {"spec": {"restartPolicy": "Never", "containers": [{
                    "name": "main", "image": "trainer:1",
                    "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}}}]}
    }));
    let read = jobset_as_gpujob(&set).unwrap_or_else(|e| unreachable!("{e:?}"));
    let sets: Vec<(&str, i32, Option<&str>)> = read
        .spec
        .pod_sets
        .iter()
        .map(|p| {
            (
                p.name.as_str(),
                p.count,
                p.topology.as_ref().and_then(|t| t.required.as_deref()),
            )
        })
        .collect();
    let block = Some("example.com/block");
    assert_eq!(
        sets,
        [
            ("workers-0", 2, block),
            ("workers-1", 2, block),
            ("workers-2", 2, block)
        ]
    );
    // A template that requires another level contradicts the JobSet.
    let replicated = &mut set.spec.replicated_jobs[0];
    if let Some(template) = replicated.template.spec.as_mut().map(|s| &mut s.template) {
        template.metadata = Some(read_meta(json!({"annotations": {
            "muster.dev/topology-required": "kubernetes.io/hostname"}})));
    }
    let errors = jobset_as_gpujob(&set).err().unwrap_or_default();
    assert!(
        paths(&errors).contains(
            &"spec.replicatedJobs[0].template.spec.template.metadata.annotations[muster.dev/topology-required]"
        ),
        "{errors:#?}"
    );
}

/// `set` as its controller reports it once `succeeded` child Jobs of each named replicated
/// Job completed.
fn with_succeeded(set: &JobSet, succeeded: &[(&str, i32)]) -> JobSet {
    let mut value = serde_json::to_value(set).unwrap_or_default();
    value["status"] = json!({"replicatedJobsStatus": succeeded
        .iter()
        .map(|(name, n)| json!({"name": name, "succeeded": n, "active": 0}))
        .collect::<Vec<_>>()});
    jobset(value)
}

#[test]
fn a_jobset_whose_child_jobs_partly_completed_queues_for_the_rest_alone() {
    // Slices of a TPU replicated Job: the slices left.
    let tpu = multislice(4);
    let read = jobset_as_gpujob(&with_succeeded(&tpu, &[("slice", 1)]))
        .unwrap_or_else(|e| unreachable!("{e:?}"));
    let [pods] = read.spec.pod_sets.as_slice() else {
        unreachable!("{:?}", read.spec.pod_sets)
    };
    assert_eq!(pods.count, 12);
    let slices = pods
        .topology
        .as_ref()
        .and_then(|t| t.tpu.as_ref())
        .and_then(|t| t.slices);
    assert_eq!(slices, Some(3));

    // An initializer that completed is no part of the gang; the workers left are.
    let pipeline = jobset(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "train", "namespace": "team-a",
                     "labels": {"muster.dev/queue-name": "training"}},
        "spec": {"replicatedJobs": [
            {"name": "init", "template": {"spec": {"template": {"spec": {
                "restartPolicy": "Never", "containers": [{"name": "fetch", "image": "fetch:1"}]}}}}},
            {"name": "workers", "replicas": 3, "template": {"spec": {"parallelism": 2,
                "template": {"spec": {"restartPolicy": "Never", "containers": [{
                    "name": "main", "image": "trainer:1",
                    "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}}}]}
    }));
    let counts = |set: &JobSet| -> Vec<(String, i32)> {
        jobset_as_gpujob(set)
            .unwrap_or_else(|e| unreachable!("{e:?}"))
            .spec
            .pod_sets
            .iter()
            .map(|p| (p.name.clone(), p.count))
            .collect()
    };
    let named = |pairs: &[(&str, i32)]| -> Vec<(String, i32)> {
        pairs.iter().map(|(n, c)| ((*n).to_owned(), *c)).collect()
    };
    assert_eq!(counts(&pipeline), named(&[("init", 1), ("workers", 6)]));
    let partly = with_succeeded(&pipeline, &[("init", 1), ("workers", 2)]);
    assert_eq!(counts(&partly), named(&[("workers", 2)]));
    assert!(partly.is_done(&partly.spec.replicated_jobs[0]));
    // Every child Job completed: its controller is about to mark it so, and until then it
    // reads as it always did (an entry of no pod set would be refused).
    let all = with_succeeded(&pipeline, &[("init", 1), ("workers", 3)]);
    assert_eq!(counts(&all), counts(&pipeline));
    // A count past the replicas, or below zero, is taken within them.
    let odd = with_succeeded(&pipeline, &[("workers", -2)]);
    assert_eq!(counts(&odd), counts(&pipeline));
}

/// A JobSet of a one-pod `init` and two `workers`, each Job template with the given
/// `backoffLimit` (none when `None`), restarted `max_restarts` times on a failed child Job.
fn with_limits(init: Option<i32>, workers: Option<i32>, max_restarts: Option<i32>) -> JobSet {
    let job = |limit: Option<i32>, gpus: &str| {
        let mut spec = json!({"template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "main", "image": "trainer:1",
                "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}});
        if let Some(limit) = limit {
            spec["backoffLimit"] = json!(limit);
        }
        json!({"spec": spec})
    };
    let mut value = json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "train", "namespace": "team-a",
                     "labels": {"muster.dev/queue-name": "training"}},
        "spec": {"replicatedJobs": [
            {"name": "init", "template": job(init, "0")},
            {"name": "workers", "replicas": 2, "template": job(workers, "8")}]}
    });
    if let Some(restarts) = max_restarts {
        value["spec"]["failurePolicy"] = json!({"maxRestarts": restarts});
    }
    jobset(value)
}

#[test]
fn a_jobset_s_entry_restarts_its_gang_as_often_as_the_jobset_survives_pod_failures() {
    let limit = |set: &JobSet| {
        jobset_as_gpujob(set).map_or_else(|e| unreachable!("{e:?}"), |j| j.spec.backoff_limit())
    };
    // The weakest child Job bounds it: all failures may fall on it.
    assert_eq!(limit(&with_limits(Some(20), Some(5), None)), 5);
    assert_eq!(limit(&with_limits(Some(7), Some(20), None)), 7);
    // Never fewer than Muster's default.
    assert_eq!(
        limit(&with_limits(Some(0), Some(20), None)),
        crate::gpujob::DEFAULT_BACKOFF_LIMIT
    );
    // A child Job that completed fails no more, nor does a replicated Job of no replicas
    // (an entry refuses it, but the JobSet's count does not depend on that): the others
    // bound it.
    let init_done = with_succeeded(&with_limits(Some(0), Some(20), None), &[("init", 1)]);
    assert_eq!(limit(&init_done), 20);
    let mut no_init = with_limits(Some(0), Some(20), None);
    no_init.spec.replicated_jobs[0].replicas = Some(0);
    assert_eq!(
        crate::backoff::jobset_pod_failures_survived(&no_init),
        Some(20)
    );
    // Each restart of the JobSet gives every child Job its limit afresh: 3 failures end
    // each of 3 attempts, so 8 are survived.
    assert_eq!(limit(&with_limits(Some(20), Some(2), Some(2))), 8);
    // A template without a limit makes a child Job the API server gives 6.
    assert_eq!(
        limit(&with_limits(None, None, None)),
        crate::backoff::JOB_DEFAULT_BACKOFF_LIMIT
    );
    // A per-index limit bounds its child Job.
    let mut per_index = with_limits(None, Some(20), None);
    if let Some(spec) = per_index.spec.replicated_jobs[1].template.spec.as_mut() {
        spec.completion_mode = Some("Indexed".into());
        spec.backoff_limit_per_index = Some(4);
    }
    assert_eq!(limit(&per_index), 4);
    // Restarts not counted against maxRestarts: no bound.
    let mut uncounted = with_limits(Some(20), Some(2), Some(1));
    if let Some(policy) = uncounted.spec.failure_policy.as_mut() {
        policy.rules = vec![crate::jobset::FailurePolicyRule {
            action: "RestartJobSetAndIgnoreMaxRestarts".into(),
        }];
    }
    assert_eq!(limit(&uncounted), i32::MAX);
    // No overflow past the largest limit.
    assert_eq!(
        limit(&with_limits(Some(i32::MAX), Some(i32::MAX), Some(i32::MAX))),
        i32::MAX
    );
}

fn read_meta(value: Value) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
    read(value)
}

#[test]
fn a_jobset_without_replicated_jobs_is_refused() {
    let set = jobset(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "empty", "namespace": "team-a",
                     "labels": {"muster.dev/queue-name": "training"}},
        "spec": {"replicatedJobs": []}
    }));
    let errors = jobset_as_gpujob(&set).err().unwrap_or_default();
    assert!(
        paths(&errors).contains(&"spec.replicatedJobs"),
        "{errors:#?}"
    );
}
