//! What the index keeps of a batch Job's queue entry (a GpuJob labelled with the workload
//! kind `Job`, see [`crate::workload`]).
//!
//! An entry's pod template is a copy of its Job's, and k8s-openapi's `PodSpec` and
//! `Container` take about 3.6 KB of it before any string. Muster makes no pod from an entry —
//! the Job controller makes them — so what is read of an entry's template is what a release
//! writes into the Job's (labels, annotations, node selector, tolerations, scheduling gates:
//! compared with the Job's, and the base of the release's patch), admission's reading of the
//! whole entry, and the whole entry in the two writes made from it (capacity bought for it,
//! whose PodTemplates carry its pods' spec; the entry held while its Job's edit cannot be
//! queued). So the index keeps the entry with only that part of each template, each whole
//! template as JSON text beside it, and admission's reading made once as it arrives
//! ([`Index::admission_job`], made again when the priority class it names changes), and
//! gives the whole entry back on request ([`Index::whole_job`]).
//!
//! An entry's spec changes only with its generation, and what is kept is made again then.
//! Once the entry has ended (`Succeeded` or `Failed`) nothing is released from it or written
//! from its spec again, and the Job it queued has finished: it is kept without its templates
//! at all, as an ended GpuJob is ([`super::ended`]), with admission's reading made while it
//! was whole. In a busy cluster most entries the index holds have ended.

use std::borrow::Cow;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PodSpec, PodTemplateSpec};
use kube::core::ObjectMeta;
use muster_admission::Job;
use muster_api::wire::WORKLOAD_KIND_LABEL;
use muster_api::workload::JOB_API_VERSION;
use muster_api::{GpuJob, ObjectRef};
use serde_json::value::RawValue;

use super::Index;

/// The workload label's value, and the owner's kind, of a batch Job's entry.
const JOB_KIND: &str = "Job";

/// What the index keeps beside a batch Job's entry: its templates and admission's reading.
#[derive(Clone, Debug)]
pub(crate) struct EntryKept {
    /// The entry's `metadata.generation` when kept.
    generation: Option<i64>,
    /// Its `metadata.uid`: an entry made again under the same name is kept again.
    uid: Option<String>,
    /// Each pod set's whole template as JSON, in the order of its pod sets; none once the
    /// entry has ended.
    templates: Vec<Box<RawValue>>,
    /// Admission's reading of the whole entry.
    read: Arc<Job>,
}

/// Whether `job` is the queue entry of a batch Job: its workload label says `Job` and a Job
/// controls it, as [`crate::workload::workload_of`] reads an entry. A GpuJob that only
/// carries the label is released from its own templates, so it is kept whole.
pub(super) fn is_job_entry(job: &GpuJob) -> bool {
    let meta = &job.metadata;
    let labelled = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(WORKLOAD_KIND_LABEL))
        .is_some_and(|kind| kind == JOB_KIND);
    labelled
        && meta.owner_references.iter().flatten().any(|o| {
            o.controller == Some(true) && o.kind == JOB_KIND && o.api_version == JOB_API_VERSION
        })
}

/// What a release writes of `template`, and nothing else.
fn scheduling_only(template: &PodTemplateSpec) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: template.metadata.as_ref().map(|m| ObjectMeta {
            labels: m.labels.clone(),
            annotations: m.annotations.clone(),
            ..ObjectMeta::default()
        }),
        spec: template.spec.as_ref().map(|s| PodSpec {
            node_selector: s.node_selector.clone(),
            tolerations: s.tolerations.clone(),
            scheduling_gates: s.scheduling_gates.clone(),
            ..PodSpec::default()
        }),
    }
}

impl Index {
    /// Folds the batch Job entry `job` (whole, as the API server sent it) into the index
    /// under `key`, its templates kept beside it (see the module docs).
    pub(super) fn fold_job_entry(&mut self, key: ObjectRef, mut job: GpuJob) {
        let generation = job.metadata.generation;
        let uid = job.metadata.uid.clone();
        let ended = job.has_ended();
        let same = self.entry_kept.get(&key).is_some_and(|kept| {
            kept.generation == generation
                && kept.uid == uid
                && (kept.templates.len() == job.spec.pod_sets.len()
                    || ended && kept.templates.is_empty())
        });
        if !same {
            // An ended entry's templates are not kept (see the module docs): not written out
            // to be dropped.
            let templates: Option<Vec<Box<RawValue>>> = if ended {
                Some(Vec::new())
            } else {
                job.spec
                    .pod_sets
                    .iter()
                    .map(|set| serde_json::value::to_raw_value(&set.template).ok())
                    .collect()
            };
            let Some(templates) = templates else {
                // A template that does not serialize cannot be given back: kept whole.
                self.entry_kept.remove(&key);
                self.jobs.insert(key, Box::new(job));
                return;
            };
            let read = Job::from_gpujob(&job, |class| self.priority_classes.get(class).copied());
            let kept = EntryKept {
                generation,
                uid,
                templates,
                read: Arc::new(read),
            };
            self.entry_kept.insert(key.clone(), kept);
        }
        if ended {
            if let Some(kept) = self.entry_kept.get_mut(&key) {
                kept.templates = Vec::new();
            }
            for set in &mut job.spec.pod_sets {
                set.template = PodTemplateSpec::default();
            }
        } else {
            for set in &mut job.spec.pod_sets {
                set.template = scheduling_only(&set.template);
            }
        }
        self.jobs.insert(key, Box::new(job));
    }

    /// Admission's reading of the batch Job entry the index keeps under `key` (see
    /// [`Index::admission_job`]).
    pub(super) fn job_entry_read(&self, key: &str) -> Option<Arc<Job>> {
        self.entry_kept.get(key).map(|kept| Arc::clone(&kept.read))
    }

    /// Makes admission's reading of every batch Job entry that names the priority class
    /// `class` again: the class was created, changed its value or was deleted, and a reading
    /// holds the value (or the error) it resolved to. An ended entry keeps the reading it
    /// ended with, as an ended GpuJob does: its templates are no longer kept to read it from.
    pub(super) fn reread_entries_naming(&mut self, class: &str) {
        let naming: Vec<ObjectRef> = self
            .entry_kept
            .keys()
            .filter(|key| {
                self.jobs.get(*key).is_some_and(|job| {
                    job.spec.priority_class_name.as_deref() == Some(class) && !job.has_ended()
                })
            })
            .cloned()
            .collect();
        for key in naming {
            let Some(job) = self.jobs.get(&key) else {
                continue;
            };
            let whole = self.whole_job(key.as_str(), job);
            let read = Job::from_gpujob(&whole, |c| self.priority_classes.get(c).copied());
            if let Some(kept) = self.entry_kept.get_mut(&key) {
                kept.read = Arc::new(read);
            }
        }
    }

    /// The GpuJob `job` the index holds under `key`, whole: a batch Job's entry with its
    /// templates as they arrived (see the module docs); an ended entry, and any other
    /// GpuJob, as it is.
    pub(crate) fn whole_job<'a>(&self, key: &str, job: &'a GpuJob) -> Cow<'a, GpuJob> {
        let Some(kept) = self.entry_kept.get(key) else {
            return Cow::Borrowed(job);
        };
        let mut whole = job.clone();
        for (set, text) in whole.spec.pod_sets.iter_mut().zip(&kept.templates) {
            // Written from a template, so it reads as one; were it not to, the set keeps what
            // the index holds of it.
            if let Ok(template) = serde_json::from_str(text.get()) {
                set.template = template;
            }
        }
        Cow::Owned(whole)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    use muster_admission::Job;
    use muster_api::GpuJob;
    use serde_json::json;

    use crate::index::Index;

    /// A batch Job's entry of 4 pods asking for 8 GPUs each.
    fn entry(uid: &str, generation: i64, class: Option<&str>) -> GpuJob {
        serde_json::from_value(json!({
            "apiVersion": "muster.dev/v1alpha1", "kind": "GpuJob",
            "metadata": {"name": "job-train", "namespace": "team-a", "uid": uid,
                         "generation": generation, "resourceVersion": "1",
                         "labels": {"muster.dev/workload-kind": "Job"},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                             "name": "train", "uid": "uid-train", "controller": true}],
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"queueName": "research", "priorityClassName": class, "podSets": [{
                "name": "main", "count": 4,
                "template": {
                    "metadata": {"labels": {"app": "train"}, "annotations": {"a": "b"}},
                    "spec": {
                        "nodeSelector": {"pool": "a100"},
                        "tolerations": [{"key": "gpu", "operator": "Exists"}],
                        "schedulingGates": [{"name": "other.dev/gate"}],
                        "containers": [{"name": "main", "image": "trainer:1",
                            "command": ["python", "train.py"],
                            "resources": {"requests": {"cpu": "8", "nvidia.com/gpu": "8"},
                                          "limits": {"nvidia.com/gpu": "8"}}}]}}}]},
        }))
        .unwrap_or_else(|e| unreachable!("{e}"))
    }

    /// The priority class `high` of `value`.
    fn high(value: i32) -> PriorityClass {
        serde_json::from_value(json!({"metadata": {"name": "high"}, "value": value}))
            .unwrap_or_else(|e| unreachable!("{e}"))
    }

    fn read(index: &Index, job: &GpuJob) -> Job {
        Job::from_gpujob(job, |class| index.priority_classes.get(class).copied())
    }

    #[test]
    fn a_job_entry_keeps_what_a_release_writes_and_gives_the_whole_back() {
        let mut index = Index::new();
        let whole = entry("uid-1", 1, None);
        let expected = read(&index, &whole);
        index.apply(whole.clone());
        let kept = index.job("team-a/job-train").cloned().unwrap_or_default();
        let template = &kept.spec.pod_sets[0].template;
        let spec = template.spec.clone().unwrap_or_default();
        assert!(spec.containers.is_empty(), "the containers are not kept");
        let whole_spec = whole.spec.pod_sets[0]
            .template
            .spec
            .clone()
            .unwrap_or_default();
        assert_eq!(spec.node_selector, whole_spec.node_selector);
        assert_eq!(spec.tolerations, whole_spec.tolerations);
        assert_eq!(spec.scheduling_gates, whole_spec.scheduling_gates);
        assert_eq!(
            template.metadata.clone().unwrap_or_default().labels,
            whole.spec.pod_sets[0]
                .template
                .metadata
                .clone()
                .unwrap_or_default()
                .labels
        );
        assert_eq!(kept.metadata, whole.metadata);
        assert_eq!(
            *index.admission_job("team-a/job-train", &kept),
            expected,
            "admission reads it as it read the whole"
        );
        assert_eq!(
            *index.whole_job("team-a/job-train", &kept),
            whole,
            "the whole entry, as it arrived"
        );
        // A status write's answer (same generation) keeps what was kept; a new spec is kept
        // anew.
        index.apply(whole.clone());
        assert_eq!(*index.whole_job("team-a/job-train", &kept), whole);
        let mut edited = entry("uid-1", 2, None);
        edited.spec.pod_sets[0].count = 2;
        index.apply(edited.clone());
        let kept = index.job("team-a/job-train").cloned().unwrap_or_default();
        assert_eq!(
            index.admission_job("team-a/job-train", &kept).pod_sets[0].count,
            2
        );
        assert_eq!(*index.whole_job("team-a/job-train", &kept), edited);
        index.delete(&kept);
        assert_eq!(
            *index.whole_job("team-a/job-train", &kept),
            kept,
            "forgotten with the entry"
        );
    }

    /// An ended entry is kept without its templates, read for admission as it was while
    /// whole, and not read again.
    #[test]
    fn an_ended_job_entry_keeps_no_templates_and_the_reading_it_had() {
        let mut index = Index::new();
        let whole = entry("uid-1", 1, Some("high"));
        index.apply(whole.clone());
        let kept = index.job("team-a/job-train").cloned().unwrap_or_default();
        let reading = index.admission_job("team-a/job-train", &kept);
        let mut ended = whole.clone();
        ended.status = Some(
            serde_json::from_value(json!({"phase": "Succeeded"}))
                .unwrap_or_else(|e| unreachable!("{e}")),
        );
        index.apply(ended.clone());
        let kept = index.job("team-a/job-train").cloned().unwrap_or_default();
        let set = &kept.spec.pod_sets[0];
        assert_eq!((set.name.as_str(), set.count), ("main", 4));
        assert_eq!(
            set.template,
            k8s_openapi::api::core::v1::PodTemplateSpec::default()
        );
        assert_eq!(index.admission_job("team-a/job-train", &kept), reading);
        assert_eq!(
            index.admission_job("team-a/job-train", &kept).pod_sets[0].count,
            4
        );
        assert_eq!(*index.whole_job("team-a/job-train", &kept), kept);
        // Its status written again, and its priority class made: the reading stays.
        index.apply(ended);
        index.apply(high(1000));
        assert_eq!(index.admission_job("team-a/job-train", &kept), reading);
    }

    #[test]
    fn a_job_entry_is_read_again_when_its_priority_class_changes() {
        let mut index = Index::new();
        let whole = entry("uid-1", 1, Some("high"));
        index.apply(whole.clone());
        let kept = index.job("team-a/job-train").cloned().unwrap_or_default();
        let before = index.admission_job("team-a/job-train", &kept);
        assert!(before.invalid.is_some(), "no such class yet");
        index.apply(high(1000));
        let after = index.admission_job("team-a/job-train", &kept);
        assert_eq!(*after, read(&index, &whole));
        assert_eq!((after.priority, after.invalid.clone()), (1000, None));
        index.apply(high(10));
        assert_eq!(index.admission_job("team-a/job-train", &kept).priority, 10);
        index.delete(&high(10));
        assert!(
            index
                .admission_job("team-a/job-train", &kept)
                .invalid
                .is_some(),
            "the class is gone again"
        );
    }

    #[test]
    fn only_a_batch_job_s_entry_is_kept_so() {
        for kind in ["JobSet", "PodGroup"] {
            let mut index = Index::new();
            let mut whole = entry("uid-1", 1, None);
            whole.metadata.labels =
                Some([("muster.dev/workload-kind".to_owned(), kind.to_owned())].into());
            index.apply(whole.clone());
            assert_eq!(index.job("team-a/job-train"), Some(&whole), "{kind}");
        }
        // Labelled as a Job's entry but controlled by no Job: a GpuJob of its own, released
        // from its templates.
        let mut index = Index::new();
        let mut whole = entry("uid-1", 1, None);
        whole.metadata.owner_references = None;
        index.apply(whole.clone());
        assert_eq!(index.job("team-a/job-train"), Some(&whole));
    }
}
