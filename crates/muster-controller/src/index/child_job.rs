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

use std::collections::BTreeSet;

use kube::core::ObjectMeta;
use muster_api::ObjectRef;
use muster_api::jobset::{JOB_INDEX_LABEL, JOBSET_NAME_LABEL, REPLICATED_JOB_LABEL};
use serde::{Deserialize, Serialize};

use super::{Index, Indexed, Kind};

/// A JobSet's child Job, read with only the fields Muster reads: its metadata, its number of
/// completions and its completed indexes. Every other field is passed over as it is parsed.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct ChildJob {
    /// Its metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What Muster reads of its spec.
    #[serde(default)]
    pub spec: ChildJobSpec,
    /// What Muster reads of its status.
    #[serde(default)]
    pub status: ChildJobStatus,
}

/// What Muster reads of a child Job's spec.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct ChildJobSpec {
    /// `spec.completions`: no completed index is at or past it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completions: Option<i32>,
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
    /// The UID of the JobSet that controls it, as its owner reference names it: a child Job
    /// left by an earlier JobSet of the same name is not the current one's.
    pub owner: Option<String>,
    /// Whether it is being deleted (a JobSet restarting its child Jobs deletes them in the
    /// foreground, and makes new ones of the same names, with no completions): its
    /// completions are no longer its JobSet's.
    pub deleting: bool,
    /// Its resource version.
    pub version: Option<String>,
}

impl ChildRecord {
    /// Whether its completions count for the JobSet whose UID is `uid`: it is not being
    /// deleted, and that JobSet controls it (where both UIDs are known).
    pub fn counts_for(&self, uid: Option<&str>) -> bool {
        !self.deleting
            && match (self.owner.as_deref(), uid) {
                (Some(owner), Some(uid)) => owner == uid,
                _ => true,
            }
    }

    /// Whether `other` says the same as this record, its version aside: only then may its
    /// JobSet's entry be left unread.
    fn same_as(&self, other: &ChildRecord) -> bool {
        ChildRecord {
            version: None,
            ..self.clone()
        } == ChildRecord {
            version: None,
            ..other.clone()
        }
    }
}

/// The most completions an Indexed Job may have (the API server refuses more): the bound of
/// the indexes read from a Job whose `spec.completions` is not known.
pub const MAX_COMPLETIONS: usize = 100_000;

/// The completion indexes below `completions` of a Job's `status.completedIndexes`:
/// comma-separated indexes and ranges (`"1,3-5,7"`). A part that does not read as either is
/// passed over: it names no completion Muster can place, and the pods that succeeded may
/// still tell. Indexes at or past `completions` name no place either, and are not read (a
/// range written past it is cut there, so no text makes more indexes than the Job has).
pub fn completed_indexes(text: &str, completions: usize) -> BTreeSet<usize> {
    let mut out = BTreeSet::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((first, last)) => {
                if let (Ok(first), Ok(last)) = (first.parse::<usize>(), last.parse::<usize>()) {
                    out.extend(first..last.saturating_add(1).min(completions));
                }
            }
            None => {
                if let Ok(index) = part.parse::<usize>()
                    && index < completions
                {
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
        let completions = self
            .spec
            .completions
            .and_then(|n| usize::try_from(n).ok())
            .map_or(MAX_COMPLETIONS, |n| n.min(MAX_COMPLETIONS));
        let owner = meta
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true) && o.kind == "JobSet")
            .map(|o| o.uid.clone());
        Some(ChildRecord {
            jobset: ObjectRef::new(meta.namespace.as_deref().unwrap_or_default(), jobset),
            replicated_job,
            replica,
            completed: self
                .status
                .completed_indexes
                .as_deref()
                .map(|text| completed_indexes(text, completions))
                .unwrap_or_default(),
            owner,
            deleting: meta.deletion_timestamp.is_some(),
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
            .map(|b| (b.jobset == record.jobset, b.same_as(&record)));
        match before {
            // A status write that changes nothing the record keeps (the Job controller writes
            // one as each pod starts) leaves its JobSet's entry be.
            Some((true, true)) => {}
            Some((true, false)) | None => index.jobset_changed(&record.jobset),
            // Relabelled to another JobSet: the one it left is told too.
            Some((false, _)) => {
                ChildJob::remove(index, key.as_str());
                index.jobset_changed(&record.jobset);
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
        index.jobset_changed(&record.jobset);
    }
}

super::batch_job::batch_job_resource!(ChildJob);

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
            completed_indexes("0,1,4-6, 9", 16),
            BTreeSet::from([0, 1, 4, 5, 6, 9])
        );
        assert_eq!(completed_indexes("", 16), BTreeSet::new());
        assert_eq!(completed_indexes("x,2,3-y,-1", 16), BTreeSet::from([2]));
        // Nothing at or past the Job's completions: a range written past them is cut.
        assert_eq!(
            completed_indexes("1,6-4294967295,9", 8),
            BTreeSet::from([1, 6, 7])
        );
        assert_eq!(completed_indexes("0-3", 0), BTreeSet::new());
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
    fn a_child_job_relabelled_to_another_jobset_leaves_the_first_and_both_entries_are_read() {
        let mut index = Index::new();
        index.apply(child(0, "1", Some("0")));
        index.take_changed_jobs();
        let mut moved = child(0, "2", Some("0"));
        if let Some(labels) = moved.metadata.labels.as_mut() {
            labels.insert(JOBSET_NAME_LABEL.to_owned(), "other".to_owned());
        }
        index.apply(moved);
        assert_eq!(completed_of(&index), []);
        assert_eq!(index.child_jobs_of("team-a/other").count(), 1);
        let changed = index.take_changed_jobs();
        assert!(changed.contains(&ObjectRef::new("team-a", "jobset-train")));
        assert!(changed.contains(&ObjectRef::new("team-a", "jobset-other")));
        // Deleted in the foreground: kept, marked, and its entry read again.
        let mut deleting = child(0, "3", Some("0"));
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        if let Some(labels) = deleting.metadata.labels.as_mut() {
            labels.insert(JOBSET_NAME_LABEL.to_owned(), "other".to_owned());
        }
        index.apply(deleting);
        assert!(index.child_jobs_of("team-a/other").all(|c| c.deleting));
        assert!(
            index
                .take_changed_jobs()
                .contains(&ObjectRef::new("team-a", "jobset-other"))
        );
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
