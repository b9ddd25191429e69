//! A JobSet's child Job, as the index keeps it: whose it is (its JobSet, replicated Job and
//! replica, from the labels the JobSet controller puts on it) and which of its completion
//! indexes succeeded (`status.completedIndexes`).
//!
//! A JobSet's entry leaves empty the places of completions an earlier attempt finished, as
//! the child Job never makes a pod for them again (see
//! `crate::workload::jobset::completed_before`). The pods that finished them are no witness
//! that lasts: a pod bound to a node the cluster autoscaler removed is deleted by the pod
//! garbage collector, succeeded or not. The child Job's own count lasts through suspensions,
//! so it is read from there; pods that succeeded still count where the child Job is not (yet)
//! in the index.
//!
//! Child Jobs are watched apart from the Jobs labelled with a queue (they are selected by
//! their JobSet's label, and are never queue entries themselves), as a kind of their own, so
//! that each watch's relist drops only what it lists.

use std::borrow::Cow;
use std::collections::BTreeSet;

use kube::core::ObjectMeta;
use muster_api::ObjectRef;
use muster_api::jobset::{JOB_INDEX_LABEL, JOBSET_NAME_LABEL, REPLICATED_JOB_LABEL};
use serde::{Deserialize, Serialize};

use super::{Index, Indexed, Kind};

/// A JobSet's child Job, read with only the fields Muster reads: its metadata and its
/// completed indexes. Every other field is passed over as it is parsed.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct ChildJob {
    /// Its metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What Muster reads of its status.
    #[serde(default)]
    pub status: ChildJobStatus,
}

/// What Muster reads of a child Job's status.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ChildJobStatus {
    /// `status.completedIndexes`: the completion indexes that succeeded, as the Job
    /// controller writes them (`"0,1,4-6"`). Kept by the Job through a suspension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_indexes: Option<String>,
}

/// What the index keeps of a child Job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildRecord {
    /// Its JobSet, in the same namespace.
    pub jobset: ObjectRef,
    /// Its replicated Job.
    pub replicated_job: String,
    /// Its replica of the replicated Job.
    pub replica: usize,
    /// The completion indexes that succeeded.
    pub completed: BTreeSet<usize>,
    /// Its resource version.
    pub version: Option<String>,
}

/// The completion indexes of a Job's `status.completedIndexes`: comma-separated indexes and
/// ranges (`"1,3-5,7"`). A part that does not read as either is passed over: it names no
/// completion Muster can place, and the pods that succeeded may still tell.
pub fn completed_indexes(text: &str) -> BTreeSet<usize> {
    let mut out = BTreeSet::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((first, last)) => {
                if let (Ok(first), Ok(last)) = (first.parse::<usize>(), last.parse::<usize>()) {
                    out.extend(first..=last);
                }
            }
            None => {
                if let Ok(index) = part.parse() {
                    out.insert(index);
                }
            }
        }
    }
    out
}

impl ChildJob {
    /// What the index keeps of it; `None` for a Job without its JobSet's, replicated Job's
    /// or replica's label (not made by a JobSet controller).
    fn record(&self) -> Option<ChildRecord> {
        let meta = &self.metadata;
        let labels = meta.labels.as_ref()?;
        let jobset = labels.get(JOBSET_NAME_LABEL)?;
        let replicated_job = labels.get(REPLICATED_JOB_LABEL)?.clone();
        let replica = labels.get(JOB_INDEX_LABEL)?.parse().ok()?;
        Some(ChildRecord {
            jobset: ObjectRef::new(meta.namespace.as_deref().unwrap_or_default(), jobset),
            replicated_job,
            replica,
            completed: self
                .status
                .completed_indexes
                .as_deref()
                .map(completed_indexes)
                .unwrap_or_default(),
            version: meta.resource_version.clone(),
        })
    }
}

impl Index {
    /// The child Jobs of the JobSet `jobset` that the index holds.
    pub fn child_jobs_of(&self, jobset: &str) -> impl Iterator<Item = &ChildRecord> {
        self.jobset_children
            .get(jobset)
            .into_iter()
            .flatten()
            .filter_map(|k| self.child_jobs.get(k.as_str()))
    }

    /// Marks the queue entry of `jobset` changed: what it reads of its children did.
    fn child_changed(&mut self, jobset: &ObjectRef) {
        self.changed_jobs.insert(ObjectRef::new(
            jobset.namespace(),
            &muster_api::workload::jobset_entry_name(jobset.name()),
        ));
    }
}

impl Indexed for ChildJob {
    const KIND: Kind = Kind::ChildJob;
    fn apply(self, index: &mut Index) {
        let key = ObjectRef::of(&self.metadata);
        let Some(record) = self.record() else {
            ChildJob::remove(index, key.as_str());
            return;
        };
        let before = index
            .child_jobs
            .get(key.as_str())
            .map(|b| (b.jobset == record.jobset, b.completed == record.completed));
        match before {
            // Only its completions are read: a status write that changes nothing of them (the
            // Job controller writes one as each pod starts) leaves its JobSet's entry be.
            Some((true, true)) => {}
            Some((true, false)) | None => index.child_changed(&record.jobset),
            // Relabelled to another JobSet: the one it left is told too.
            Some((false, _)) => {
                ChildJob::remove(index, key.as_str());
                index.child_changed(&record.jobset);
            }
        }
        index
            .jobset_children
            .entry(record.jobset.clone())
            .or_default()
            .insert(key.clone());
        index.child_jobs.insert(key, record);
    }
    fn stored_version<'a>(index: &'a Index, key: &str) -> Option<&'a str> {
        index.child_jobs.get(key)?.version.as_deref()
    }
    fn remove(index: &mut Index, key: &str) {
        let Some((key, record)) = index.child_jobs.remove_entry(key) else {
            return;
        };
        if let Some(children) = index.jobset_children.get_mut(record.jobset.as_str()) {
            children.remove(&key);
            if children.is_empty() {
                index.jobset_children.remove(record.jobset.as_str());
            }
        }
        index.child_changed(&record.jobset);
    }
}

impl kube::Resource for ChildJob {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind((): &()) -> Cow<'_, str> {
        Cow::Borrowed("Job")
    }

    fn group((): &()) -> Cow<'_, str> {
        Cow::Borrowed("batch")
    }

    fn version((): &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }

    fn api_version((): &()) -> Cow<'_, str> {
        Cow::Borrowed(muster_api::workload::JOB_API_VERSION)
    }

    fn plural((): &()) -> Cow<'_, str> {
        Cow::Borrowed("jobs")
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Replica `replica` of the JobSet `train`'s replicated Job `workers`, at `version`,
    /// counting `completed`.
    fn child(replica: usize, version: &str, completed: Option<&str>) -> ChildJob {
        serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": format!("train-workers-{replica}"), "namespace": "team-a",
                         "resourceVersion": version,
                         "labels": {JOBSET_NAME_LABEL: "train", REPLICATED_JOB_LABEL: "workers",
                                    JOB_INDEX_LABEL: replica.to_string()},
                         "managedFields": [{"manager": "kube-controller-manager"}]},
            "spec": {"completions": 8, "completionMode": "Indexed", "template": {"spec": {}}},
            "status": {"completedIndexes": completed, "active": 2},
        }))
        .unwrap_or_else(|e| unreachable!("{e}"))
    }

    fn completed_of(index: &Index) -> Vec<(usize, Vec<usize>)> {
        index
            .child_jobs_of("team-a/train")
            .map(|c| (c.replica, c.completed.iter().copied().collect()))
            .collect()
    }

    #[test]
    fn completed_indexes_read_single_indexes_and_ranges_and_pass_over_the_rest() {
        assert_eq!(
            completed_indexes("0,1,4-6, 9"),
            BTreeSet::from([0, 1, 4, 5, 6, 9])
        );
        assert_eq!(completed_indexes(""), BTreeSet::new());
        assert_eq!(completed_indexes("x,2,3-y,-1"), BTreeSet::from([2]));
    }

    #[test]
    fn a_child_job_s_completions_are_kept_by_jobset_and_only_their_changes_mark_its_entry() {
        let entry = ObjectRef::new("team-a", "jobset-train");
        let mut index = Index::new();
        index.apply(child(0, "1", None));
        index.apply(child(1, "1", Some("0,1,4-5")));
        assert_eq!(completed_of(&index), [(0, vec![]), (1, vec![0, 1, 4, 5])]);
        assert!(index.take_changed_jobs().contains(&entry));
        // A status write that leaves the completions as they were: the entry is not read again.
        index.apply(child(1, "2", Some("0-1,4,5")));
        assert!(!index.take_changed_jobs().contains(&entry));
        index.apply(child(1, "3", Some("0-1,4-6")));
        assert!(index.take_changed_jobs().contains(&entry));
        // An older version never rolls it back.
        index.apply(child(1, "2", Some("0")));
        assert_eq!(completed_of(&index)[1].1, [0, 1, 4, 5, 6]);
        // A relist that finds replica 0 gone drops it; deleted, replica 1 goes too.
        index.relist_begin::<ChildJob>();
        index.apply(child(1, "3", Some("0-1,4-6")));
        index.relist_done::<ChildJob>();
        assert_eq!(completed_of(&index), [(1, vec![0, 1, 4, 5, 6])]);
        assert!(index.take_changed_jobs().contains(&entry));
        index.delete(&child(1, "4", Some("0-1,4-6")));
        assert_eq!(completed_of(&index), []);
        assert!(index.jobset_children.is_empty());
    }

    #[test]
    fn a_job_without_its_jobset_s_labels_is_not_kept() {
        let mut index = Index::new();
        let mut job = child(0, "1", Some("0"));
        if let Some(labels) = job.metadata.labels.as_mut() {
            labels.remove(JOB_INDEX_LABEL);
        }
        index.apply(job);
        assert!(index.child_jobs.is_empty());
    }
}
