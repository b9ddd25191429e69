//! What the index keeps of a GpuJob that ended (`Succeeded` or `Failed`).
//!
//! An ended job never runs again, yet it stays until its owner deletes it: in a busy cluster
//! most of the GpuJobs the index holds have ended, and each one's pod templates are most of
//! it (k8s-openapi's `PodSpec` and `Container` take about 3.6 KB before any string). What is
//! still read of an ended job is its metadata and status (its story, its run's history, its
//! finalizer), its pod sets' names and counts (the gang its leftover pods are read back
//! into), and admission's reading of it (what its leftover pods hold until they are gone,
//! what its run cost, the forecast's recent submissions). So the index keeps the GpuJob
//! without its templates, and admission's reading of it, made from the whole object once as
//! it arrives, beside it ([`Index::admission_job`]).
//!
//! A queue entry is not slimmed here: a batch Job's is kept as [`super::job_entry`] says,
//! whether it ended or not; a JobSet's or pod group's is kept whole, compared with its
//! workload's templates.

use std::sync::Arc;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use muster_admission::Job;
use muster_api::wire::WORKLOAD_KIND_LABEL;
use muster_api::{GpuJob, ObjectRef};

use super::Index;

/// Admission's reading of an ended GpuJob, kept with the generation it was read at.
#[derive(Clone, Debug)]
pub(crate) struct EndedRead {
    /// The job's `metadata.generation` when read.
    generation: Option<i64>,
    /// Its `metadata.uid`: a job made again under the same name is read again.
    uid: Option<String>,
    /// The reading.
    job: Arc<Job>,
}

/// Whether `job` has ended and may be kept without its templates.
fn slims(job: &GpuJob) -> bool {
    let ended = job.has_ended();
    // Any GpuJob labelled with a workload kind is taken for a queue entry (the index knows
    // nothing of workloads beyond their label): kept whole is never wrong, only larger.
    let entry = job
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(WORKLOAD_KIND_LABEL));
    ended && !entry
}

/// Folds `job` into `index` under `key`: whole while it has not ended, else without its pod
/// templates, with admission's reading of it kept beside it.
pub(super) fn fold(index: &mut Index, key: ObjectRef, mut job: GpuJob) {
    if super::job_entry::is_job_entry(&job) {
        index.ended_reads.remove(&key);
        index.fold_job_entry(key, job);
        return;
    }
    index.entry_kept.remove(&key);
    if !slims(&job) {
        index.ended_reads.remove(&key);
        index.jobs.insert(key, Box::new(job));
        return;
    }
    let generation = job.metadata.generation;
    let uid = job.metadata.uid.clone();
    let kept = index
        .ended_reads
        .get(&key)
        .filter(|read| read.generation == generation && read.uid == uid)
        .map(|read| Arc::clone(&read.job));
    let read = kept.unwrap_or_else(|| {
        Arc::new(Job::from_gpujob(&job, |class| {
            index.priority_classes.get(class).copied()
        }))
    });
    for set in &mut job.spec.pod_sets {
        set.template = PodTemplateSpec::default();
    }
    index.ended_reads.insert(
        key.clone(),
        EndedRead {
            generation,
            uid,
            job: read,
        },
    );
    index.jobs.insert(key, Box::new(job));
}

impl Index {
    /// Admission's reading of the GpuJob `job` the index holds under `key`: for an ended job
    /// and a batch Job's entry, the reading made when it arrived whole (their templates are
    /// not kept; see [`super::job_entry`]); for any other, read now.
    pub(crate) fn admission_job(&self, key: &str, job: &GpuJob) -> Arc<Job> {
        if let Some(read) = self.job_entry_read(key) {
            return read;
        }
        match self.ended_reads.get(key) {
            Some(read) => Arc::clone(&read.job),
            None => Arc::new(Job::from_gpujob(job, |class| {
                self.priority_classes.get(class).copied()
            })),
        }
    }
}

#[cfg(test)]
mod tests {
    use muster_admission::Job;
    use muster_api::GpuJob;
    use serde_json::json;

    use crate::index::Index;

    /// A GpuJob of one pod set of `pods` pods asking for 8 GPUs each, in `phase`.
    fn gpujob(uid: &str, phase: &str, labels: &serde_json::Value) -> GpuJob {
        serde_json::from_value(json!({
            "apiVersion": "muster.dev/v1alpha1", "kind": "GpuJob",
            "metadata": {"name": "train", "namespace": "team-a", "uid": uid, "generation": 1,
                         "resourceVersion": "1", "labels": labels,
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"queueName": "research", "expectedRuntimeSeconds": 600, "podSets": [{
                "name": "workers", "count": 4,
                "template": {"spec": {
                    "nodeSelector": {"pool": "a100"},
                    "containers": [{"name": "main", "image": "trainer:1",
                        "resources": {"requests": {"cpu": "8", "nvidia.com/gpu": "8"},
                                      "limits": {"nvidia.com/gpu": "8"}}}]}}}]},
            "status": {"phase": phase}
        }))
        .unwrap_or_else(|e| unreachable!("{e}"))
    }

    fn read(index: &Index, job: &GpuJob) -> Job {
        Job::from_gpujob(job, |class| index.priority_classes.get(class).copied())
    }

    #[test]
    fn an_ended_job_is_kept_without_its_templates_and_read_as_it_was_whole() {
        let mut index = Index::new();
        for phase in ["Succeeded", "Failed"] {
            let whole = gpujob("uid-1", phase, &json!({}));
            let expected = read(&index, &whole);
            index.apply(whole.clone());
            let kept = index.job("team-a/train").cloned().unwrap_or_default();
            let set = &kept.spec.pod_sets[0];
            assert_eq!((set.name.as_str(), set.count), ("workers", 4));
            assert!(
                set.template.spec.is_none(),
                "{phase}: the template is dropped"
            );
            assert_eq!(kept.status, whole.status);
            assert_eq!(kept.metadata, whole.metadata);
            let answered = index.admission_job("team-a/train", &kept);
            assert_eq!(*answered, expected, "{phase}");
            assert_eq!(
                answered.total_requests().get("nvidia.com/gpu").milli(),
                32_000
            );
        }
    }

    #[test]
    fn a_job_that_has_not_ended_or_is_a_queue_entry_is_kept_whole() {
        let mut index = Index::new();
        for phase in ["Queued", "Admitted", "Running"] {
            let whole = gpujob("uid-1", phase, &json!({}));
            index.apply(whole.clone());
            assert_eq!(index.job("team-a/train"), Some(&whole), "{phase}");
            assert!(index.ended_reads.is_empty());
        }
        let entry = gpujob(
            "uid-2",
            "Succeeded",
            &json!({"muster.dev/workload-kind": "PodGroup", "muster.dev/pod-group": "g"}),
        );
        index.apply(entry.clone());
        assert_eq!(index.job("team-a/train"), Some(&entry));
        assert!(index.ended_reads.is_empty());
    }

    #[test]
    fn a_reading_is_dropped_with_its_job_and_made_again_for_a_new_one() {
        let mut index = Index::new();
        let first = gpujob("uid-1", "Succeeded", &json!({}));
        index.apply(first.clone());
        let kept = index.admission_job("team-a/train", &first);
        // A status write of the same job keeps the reading it has.
        let mut later = first.clone();
        later.metadata.resource_version = Some("2".to_owned());
        index.apply(later.clone());
        assert!(std::sync::Arc::ptr_eq(
            &kept,
            &index.admission_job("team-a/train", &later)
        ));
        // Deleted: nothing of it stays.
        index.delete(&later);
        assert!(index.job("team-a/train").is_none());
        assert!(index.ended_reads.is_empty());
        // A job made again under the name, and ended: read again, from its own template.
        let mut again = gpujob("uid-3", "Succeeded", &json!({}));
        again.metadata.resource_version = Some("3".to_owned());
        if let Some(spec) = again.spec.pod_sets[0].template.spec.as_mut() {
            spec.containers[0].resources = None;
        }
        index.apply(again.clone());
        let answered = index.admission_job("team-a/train", &again);
        assert_eq!(answered.uid, "uid-3");
        assert!(answered.total_requests().get("nvidia.com/gpu").is_zero());
        // Running again under the name (a new job): kept whole, no reading left over.
        let mut running = gpujob("uid-4", "Running", &json!({}));
        running.metadata.resource_version = Some("4".to_owned());
        index.apply(running.clone());
        assert_eq!(index.job("team-a/train"), Some(&running));
        assert!(index.ended_reads.is_empty());
    }
}
