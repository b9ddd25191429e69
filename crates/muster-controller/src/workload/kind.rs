//! The kinds of workload a queue entry stands for — `batch/v1` Jobs, JobSets and pod
//! groups — and what
//! the controller asks of each the same way: its entry, whether it is held or has ended, and
//! the writes that hold or release it.

use std::collections::BTreeMap;
use std::fmt;

use kube::Resource;
use muster_api::jobset::JobSet;
use muster_api::validation::FieldError;
use muster_api::{GpuJob, ObjectRef};
use serde_json::{Map, Value};

use super::pod_group::PodGroup;
use super::{jobset, made_entry};
use crate::index::BatchJob;

/// The kind of a workload behind a queue entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WorkloadKind {
    /// A `batch/v1` Job.
    Job,
    /// A `jobset.x-k8s.io/v1alpha2` JobSet.
    JobSet,
    /// Pods labelled with one `muster.dev/pod-group`.
    PodGroup,
}

impl WorkloadKind {
    /// Its Kubernetes kind, also the value of the entry's workload label.
    pub fn label(self) -> &'static str {
        match self {
            WorkloadKind::Job => "Job",
            WorkloadKind::JobSet => "JobSet",
            WorkloadKind::PodGroup => "PodGroup",
        }
    }

    /// The kind a workload label names.
    pub fn from_label(label: &str) -> Option<WorkloadKind> {
        match label {
            "Job" => Some(WorkloadKind::Job),
            "JobSet" => Some(WorkloadKind::JobSet),
            "PodGroup" => Some(WorkloadKind::PodGroup),
            _ => None,
        }
    }

    /// Its `apiVersion`.
    pub fn api_version(self) -> &'static str {
        match self {
            WorkloadKind::Job => muster_api::workload::JOB_API_VERSION,
            WorkloadKind::JobSet => muster_api::workload::JOBSET_API_VERSION,
            WorkloadKind::PodGroup => "v1",
        }
    }

    /// The name of the queue entry of the workload of this kind named `name`.
    pub fn entry_name(self, name: &str) -> String {
        match self {
            WorkloadKind::Job => muster_api::workload::entry_name(name),
            WorkloadKind::JobSet => muster_api::workload::jobset_entry_name(name),
            WorkloadKind::PodGroup => muster_api::workload::pod_group_entry_name(name),
        }
    }
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// The workload behind a queue entry: its kind and `namespace/name`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkloadRef {
    /// Job or JobSet.
    pub kind: WorkloadKind,
    /// Its `namespace/name`.
    pub key: ObjectRef,
}

impl WorkloadRef {
    /// A Job's reference.
    pub fn job(key: ObjectRef) -> WorkloadRef {
        WorkloadRef {
            kind: WorkloadKind::Job,
            key,
        }
    }

    /// A JobSet's reference.
    pub fn jobset(key: ObjectRef) -> WorkloadRef {
        WorkloadRef {
            kind: WorkloadKind::JobSet,
            key,
        }
    }

    /// A pod group's reference (`namespace/group`).
    pub fn pod_group(key: ObjectRef) -> WorkloadRef {
        WorkloadRef {
            kind: WorkloadKind::PodGroup,
            key,
        }
    }

    /// The key of its queue entry.
    pub fn entry(&self) -> ObjectRef {
        ObjectRef::new(self.key.namespace(), &self.kind.entry_name(self.key.name()))
    }
}

impl fmt::Display for WorkloadRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind, self.key)
    }
}

/// A workload as the index holds it.
#[derive(Clone, Copy, Debug)]
pub enum Run<'a> {
    /// A Job.
    Job(&'a BatchJob),
    /// A JobSet.
    JobSet(&'a JobSet),
    /// A pod group, named.
    PodGroup(&'a str, &'a PodGroup),
}

impl<'a> Run<'a> {
    /// Its kind.
    pub fn kind(self) -> WorkloadKind {
        match self {
            Run::Job(_) => WorkloadKind::Job,
            Run::JobSet(_) => WorkloadKind::JobSet,
            Run::PodGroup(..) => WorkloadKind::PodGroup,
        }
    }

    /// The problem last reported on it (its [`super::INVALID_ANNOTATION`]; a pod
    /// group's on its pods).
    pub fn reported(self) -> Option<&'a String> {
        let annotations = match self {
            Run::Job(job) => job.metadata.annotations.as_ref(),
            Run::JobSet(jobset) => jobset.metadata.annotations.as_ref(),
            Run::PodGroup(_, group) => return group.reported(),
        };
        annotations.and_then(|a| a.get(super::INVALID_ANNOTATION))
    }

    /// Whether it can be queued yet: a pod group once its size of pods waits behind the gate;
    /// a Job or JobSet at once.
    pub fn is_whole(self) -> bool {
        match self {
            Run::PodGroup(_, group) => group.is_whole(),
            Run::Job(_) | Run::JobSet(_) => true,
        }
    }

    /// Its queue entry (see [`super::entry_for`]): every problem, each on the workload's own
    /// field, when it cannot be queued as it stands.
    pub fn entry(self) -> Result<GpuJob, Vec<FieldError>> {
        match self {
            Run::Job(job) => made_entry(
                job.job()
                    .map_err(|e| vec![e])
                    .and_then(|read| muster_api::workload::job_as_gpujob(&read))
                    .map(|mut entry| {
                        // The pods its next run makes: a restarted Job runs only the
                        // completions it still lacks (`BatchJob::pods_at_once`).
                        if let Some(set) = entry.spec.pod_sets.first_mut() {
                            set.count = job.pods_at_once();
                        }
                        entry
                    }),
                &job.metadata,
                job.controller_owner_ref(&()),
                WorkloadKind::Job,
            ),
            Run::JobSet(jobset) => made_entry(
                muster_api::workload::jobset_as_gpujob(jobset),
                &jobset.metadata,
                jobset.controller_owner_ref(&()),
                WorkloadKind::JobSet,
            ),
            Run::PodGroup(name, group) => group.entry(name),
        }
    }

    /// Whether it still is the workload `entry` was made for: the same UID (a pod group has
    /// none: its entry is the group's, whichever pods it has).
    pub fn is_entry(self, entry: &GpuJob) -> bool {
        match self {
            Run::Job(job) => super::owned_by(entry, job.metadata.uid.as_deref()),
            Run::JobSet(jobset) => super::owned_by(entry, jobset.metadata.uid.as_deref()),
            Run::PodGroup(..) => true,
        }
    }

    /// Whether it is held: suspended (a pod group is held by its pods' gates, and a pod that
    /// lacks the gate is not the group's).
    pub fn is_suspended(self) -> bool {
        match self {
            Run::Job(job) => super::is_suspended(job),
            Run::JobSet(jobset) => jobset.spec.suspend.unwrap_or(false),
            Run::PodGroup(..) => true,
        }
    }

    /// How its run ended, when it has and says so itself (see [`super::finished`]). A pod
    /// group says nothing: its entry's step reads its gang's pods.
    pub fn finished(self) -> Option<(bool, String)> {
        match self {
            Run::Job(job) => job.finished(),
            Run::JobSet(jobset) => jobset::finished(jobset),
            Run::PodGroup(..) => None,
        }
    }

    /// Whether its owner's controller may still have pods of it, as the workload itself
    /// says (see [`super::may_have_pods`]; a JobSet's child Jobs counted active).
    pub fn may_have_pods(self) -> bool {
        match self {
            Run::Job(job) => super::may_have_pods(job),
            Run::JobSet(jobset) => jobset::may_have_pods(jobset),
            Run::PodGroup(..) => false,
        }
    }

    /// Whether its templates still carry what a release wrote.
    pub fn carries_release(self) -> bool {
        match self {
            Run::Job(job) => super::carries_release(job),
            Run::JobSet(jobset) => jobset::carries_release(jobset),
            Run::PodGroup(..) => false,
        }
    }

    /// Whether its owner edited it since `entry` read it.
    pub fn edited_since(self, entry: &GpuJob) -> bool {
        match self {
            Run::Job(job) => super::edited_since(entry, job),
            Run::JobSet(jobset) => jobset::edited_since(entry, jobset),
            Run::PodGroup(name, group) => group.edited_since(name, entry),
        }
    }

    /// Whether its templates are as `entry` recorded them.
    pub fn templates_as_recorded(self, entry: &GpuJob) -> bool {
        match self {
            Run::Job(job) => super::template_is(entry, job, None),
            Run::JobSet(jobset) => jobset::templates_are(entry, jobset, None),
            Run::PodGroup(..) => true,
        }
    }

    /// The write that puts its templates back as `entry` recorded them and keeps it
    /// suspended.
    pub fn put_back(self, entry: &GpuJob) -> WorkloadPatch {
        match self {
            Run::Job(job) => WorkloadPatch::Merge(super::template_patch(entry, job, None, true)),
            Run::JobSet(jobset) => jobset::template_patch(entry, jobset, None, true),
            Run::PodGroup(..) => WorkloadPatch::Nothing,
        }
    }
}

/// A write to a workload behind a queue entry.
#[derive(Clone, Debug, PartialEq)]
pub enum WorkloadPatch {
    /// A JSON merge patch (a Job's template, or any workload's `suspend` and annotations).
    Merge(Value),
    /// A JSON patch (RFC 6902): a JobSet's replicated Jobs' templates, each field written at
    /// its path after a test of the replicated Job's name, so nothing else of the JobSet is
    /// written back.
    Json(Value),
    /// Nothing to write: a pod group's release (its pods exist already and are let go by
    /// their pins).
    Nothing,
}

impl WorkloadPatch {
    /// What is sent: the merge patch's object, or the JSON patch's list of operations.
    pub fn body(&self) -> &Value {
        match self {
            WorkloadPatch::Merge(body) | WorkloadPatch::Json(body) => body,
            WorkloadPatch::Nothing => &Value::Null,
        }
    }

    /// The merge patch that suspends a workload.
    pub fn suspend() -> WorkloadPatch {
        WorkloadPatch::Merge(serde_json::json!({"spec": {"suspend": true}}))
    }

    /// Adds to a release's template writes what capacity bought for the gang asks of its
    /// pods: `annotations` (the ProvisioningRequest to consume, asked with the replicated
    /// Job's name for a JobSet's template and with `None` for a Job's) and `node_selector`
    /// (the capacity's details). A restore drops them again, as every key the recorded
    /// template lacks.
    pub fn add_to_templates(
        &mut self,
        annotations: impl Fn(Option<&str>) -> BTreeMap<String, String>,
        node_selector: &BTreeMap<String, String>,
    ) {
        match self {
            WorkloadPatch::Merge(patch) => {
                super::add_to_template(patch, &annotations(None), node_selector);
            }
            WorkloadPatch::Nothing => {}
            WorkloadPatch::Json(ops) => {
                // Each replicated Job's writes follow the test of its name.
                let mut replicated_job = String::new();
                for op in ops.as_array_mut().into_iter().flatten() {
                    let path = op["path"].as_str().unwrap_or_default().to_owned();
                    if op["op"] == "test" && path.ends_with("/name") {
                        op["value"]
                            .as_str()
                            .unwrap_or_default()
                            .clone_into(&mut replicated_job);
                        continue;
                    }
                    let (target, extra) = if path.ends_with("/template/spec/template/metadata") {
                        (
                            &mut op["value"]["annotations"],
                            annotations(Some(&replicated_job)),
                        )
                    } else if path.ends_with("/template/spec/template/spec/nodeSelector") {
                        (&mut op["value"], node_selector.clone())
                    } else {
                        continue;
                    };
                    if !target.is_object() {
                        *target = Value::Object(Map::new());
                    }
                    if let Value::Object(fields) = target {
                        for (key, value) in extra {
                            fields.insert(key, Value::String(value));
                        }
                    }
                }
            }
        }
    }
}
