//! Reading GpuJobs into admission's jobs: queue, priority, order, and what makes a job invalid.

use muster_admission::Job;
use muster_api::GpuJob;

fn gpujob(spec: &serde_json::Value) -> GpuJob {
    let value = serde_json::json!({
        "apiVersion": "muster.dev/v1alpha1",
        "kind": "GpuJob",
        "metadata": {
            "name": "train",
            "namespace": "team-a",
            "uid": "0b5c",
            "creationTimestamp": "2026-11-01T10:00:00Z"
        },
        "spec": spec,
    });
    serde_json::from_value(value).unwrap_or_default()
}

fn workers(count: i64) -> serde_json::Value {
    serde_json::json!({
        "name": "workers",
        "count": count,
        "topology": {"required": "cloud.google.com/gce-topology-block"},
        "template": {"spec": {"containers": [{
            "name": "main",
            "image": "trainer:1",
            "resources": {
                "requests": {"nvidia.com/gpu": "8", "cpu": "16"},
                "limits": {"nvidia.com/gpu": "8"}
            }
        }]}}
    })
}

#[test]
fn a_valid_job_carries_its_queue_priority_age_and_needs() {
    let job = Job::from_gpujob(
        &gpujob(&serde_json::json!({
            "queueName": "research",
            "priorityClassName": "high",
            "expectedRuntimeSeconds": 3600,
            "podSets": [workers(4)]
        })),
        |class| (class == "high").then_some(1000),
    );
    assert_eq!(job.invalid, None);
    assert_eq!(job.id, "team-a/train");
    assert_eq!(job.local_queue, "team-a/research");
    assert_eq!(job.priority, 1000);
    assert_eq!(job.created, 1_793_527_200);
    assert_eq!(job.expected_runtime, Some(3600));
    assert_eq!(job.accelerators(), 32);
    assert_eq!(job.total_requests().get("cpu").units_ceil(), 64);
}

#[test]
fn an_unknown_priority_class_or_a_bad_field_makes_the_job_invalid_with_the_fix() {
    let job = Job::from_gpujob(
        &gpujob(&serde_json::json!({
            "queueName": "research",
            "priorityClassName": "missing",
            "podSets": [workers(2)]
        })),
        |_| None,
    );
    assert_eq!(
        job.invalid.as_deref(),
        Some(
            "spec.priorityClassName: no PriorityClass \"missing\" exists; create it or name another"
        )
    );
    let job = Job::from_gpujob(
        &gpujob(&serde_json::json!({"queueName": "research", "podSets": [workers(0)]})),
        |_| None,
    );
    assert!(
        job.invalid
            .as_deref()
            .is_some_and(|m| m.starts_with("spec.podSets[0].count")),
        "{:?}",
        job.invalid
    );
}

#[test]
fn pods_asking_for_gpus_need_whole_ones_unless_the_job_accepts_shared_gpus() {
    let exclusive = Job::from_gpujob(
        &gpujob(&serde_json::json!({"queueName": "q", "podSets": [workers(2)]})),
        |_| None,
    );
    assert!(exclusive.pod_sets.iter().all(|p| p.whole_gpus));
    let sharing = Job::from_gpujob(
        &gpujob(&serde_json::json!({
            "queueName": "q", "acceptSharedGpus": true, "podSets": [workers(2)]
        })),
        |_| None,
    );
    assert_eq!(sharing.invalid, None);
    assert!(sharing.pod_sets.iter().all(|p| !p.whole_gpus));
}
