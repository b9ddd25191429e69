//! What the controller writes: [`Action`]s, each one unit whose requests go in order, and the
//! [`Note`]s (Kubernetes Events) that go with them. A pass plans actions; the executor carries
//! them out; the ledger keeps track of those in flight.

use muster_api::gpujob::GpuJobStatus;
use muster_api::{
    ClusterQueueStatus, CohortStatus, GpuJob, LocalQueueStatus, ObjectRef, ResourceFlavorStatus,
};

use crate::release::Gang;
use crate::summary::Summary;

/// Something the controller writes, as one unit (its requests go in order).
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Create the gang's Service and gated pods, lift every gate, then write the status (for
    /// a queue entry: patch its workload, then write the status — or, for a release whose pod
    /// goes as made, the status first: see [`crate::release::WorkloadRelease::ungated`]).
    Release {
        /// The job, `namespace/name`.
        job: ObjectRef,
        /// What to create.
        gang: Box<Gang>,
        /// The status once released.
        status: Box<GpuJobStatus>,
        /// The event to record.
        event: Option<Note>,
    },
    /// Write the status (admission gone, requeued or finished), then delete the pods.
    Evict {
        /// The job.
        job: ObjectRef,
        /// The status to write first.
        status: Box<GpuJobStatus>,
        /// The pods to delete.
        pods: Vec<ObjectRef>,
        /// The event to record.
        event: Note,
        /// For the queue entry of a Job or JobSet: the workload, suspended after the status
        /// write (its controller deletes the pods; `pods` is then empty).
        workload: Option<crate::workload::WorkloadRef>,
    },
    /// Delete pods that belong to no live admission (a rolled-back release, an old attempt).
    DeletePods {
        /// The job.
        job: ObjectRef,
        /// The pods.
        pods: Vec<ObjectRef>,
    },
    /// Write a job's status.
    JobStatus {
        /// The job.
        job: ObjectRef,
        /// The new status.
        status: Box<GpuJobStatus>,
        /// The event to record, on a transition.
        event: Option<Note>,
    },
    /// Add Muster's finalizer to a job.
    AddFinalizer {
        /// The job.
        job: ObjectRef,
    },
    /// A deleted job: remove its pods and Service, then its finalizer.
    Finalize {
        /// The job.
        job: ObjectRef,
        /// Its pods.
        pods: Vec<ObjectRef>,
    },
    /// Ask the autoscaler for capacity: create the PodTemplates and ProvisioningRequests
    /// (objects that exist count as created), then write the status.
    Provision {
        /// The job.
        job: ObjectRef,
        /// One per pod set.
        templates: Vec<k8s_openapi::api::core::v1::PodTemplate>,
        /// One, or one per pod set.
        requests: Vec<muster_api::ProvisioningRequest>,
        /// The status: Provisioning, with the request and attempt.
        status: Box<GpuJobStatus>,
        /// The Event: which request, which attempt.
        event: Note,
    },
    /// Delete a job's ProvisioningRequests and PodTemplates (ones already gone count as
    /// deleted).
    Unprovision {
        /// The job.
        job: ObjectRef,
        /// The requests.
        requests: Vec<ObjectRef>,
        /// The templates.
        templates: Vec<ObjectRef>,
    },
    /// Make the queue entry of a Job labelled with a queue (one that exists counts as made).
    CreateEntry {
        /// The entry.
        job: ObjectRef,
        /// The GpuJob to create.
        entry: Box<GpuJob>,
    },
    /// Write a waiting queue entry's spec anew from its Job, which its owner edited while it
    /// waited (its parallelism, or what a suspended Job's template may take).
    UpdateEntry {
        /// The entry.
        job: ObjectRef,
        /// The spec the Job now reads as.
        spec: Box<muster_api::gpujob::GpuJobSpec>,
    },
    /// Patch the Job or JobSet behind a queue entry that holds no admission: keep it
    /// suspended, put its templates back as the entry recorded them, or say why it cannot be
    /// queued.
    PatchWorkload {
        /// The entry.
        job: ObjectRef,
        /// The workload.
        workload: crate::workload::WorkloadRef,
        /// The patch.
        patch: Box<crate::workload::WorkloadPatch>,
        /// A warning Event for the Job, when the patch reports a problem.
        event: Option<Note>,
    },
    /// Let the gated pods of a released Job go once its controller has made every pod of the
    /// gang: each pinned to its node (a merge patch per pod) and ungated.
    PinPods {
        /// The entry.
        job: ObjectRef,
        /// Each pod with its patch (see [`crate::workload::pin_patch`]).
        pins: Vec<(ObjectRef, serde_json::Value)>,
    },
    /// Write a ClusterQueue's status.
    ClusterQueueStatus {
        /// The ClusterQueue.
        name: String,
        /// The new status.
        status: ClusterQueueStatus,
    },
    /// Write a LocalQueue's status.
    LocalQueueStatus {
        /// The LocalQueue.
        key: ObjectRef,
        /// The new status.
        status: LocalQueueStatus,
    },
    /// Write a ResourceFlavor's status.
    FlavorStatus {
        /// The flavor.
        name: String,
        /// The new status.
        status: ResourceFlavorStatus,
    },
    /// Write a Cohort's status.
    CohortStatus {
        /// The cohort.
        name: String,
        /// The new status.
        status: CohortStatus,
    },
}

impl Action {
    /// The job the action is about, if any.
    pub fn job(&self) -> Option<&ObjectRef> {
        match self {
            Action::Release { job, .. }
            | Action::Evict { job, .. }
            | Action::DeletePods { job, .. }
            | Action::JobStatus { job, .. }
            | Action::AddFinalizer { job }
            | Action::Finalize { job, .. }
            | Action::Provision { job, .. }
            | Action::Unprovision { job, .. }
            | Action::CreateEntry { job, .. }
            | Action::UpdateEntry { job, .. }
            | Action::PatchWorkload { job, .. }
            | Action::PinPods { job, .. } => Some(job),
            Action::ClusterQueueStatus { .. }
            | Action::LocalQueueStatus { .. }
            | Action::FlavorStatus { .. }
            | Action::CohortStatus { .. } => None,
        }
    }

    /// Whether the action writes its job's status (last, after any objects it creates). When
    /// such an action fails, the status may still have been written — the API server carried
    /// the request out and its answer was lost — so the job is read back (see
    /// [`crate::executor::Executor::read_back`]).
    pub fn writes_job_status(&self) -> bool {
        matches!(
            self,
            Action::Release { .. }
                | Action::Evict { .. }
                | Action::JobStatus { .. }
                | Action::Provision { .. }
        )
    }

    /// Whether the action starts or stops its job's work: a release, an eviction, a request
    /// for capacity, or the status of a job that ended (whose quota the next pass may give
    /// to another only once it has landed). A pass sends these first (see `writes`).
    pub fn moves_work(&self) -> bool {
        match self {
            Action::Release { .. } | Action::Evict { .. } | Action::Provision { .. } => true,
            Action::JobStatus { status, .. } => status
                .phase
                .is_some_and(muster_api::gpujob::GpuJobPhase::has_ended),
            _ => false,
        }
    }

    /// The phase the job status this action writes shows, lower case, for metrics: `None`
    /// when it writes no job status.
    pub fn status_phase(&self) -> Option<&'static str> {
        use muster_api::gpujob::GpuJobPhase;
        let (Action::Release { status, .. }
        | Action::Evict { status, .. }
        | Action::JobStatus { status, .. }
        | Action::Provision { status, .. }) = self
        else {
            return None;
        };
        Some(match status.phase.unwrap_or_default() {
            GpuJobPhase::Pending => "pending",
            GpuJobPhase::Queued => "queued",
            GpuJobPhase::Provisioning => "provisioning",
            GpuJobPhase::Admitted => "admitted",
            GpuJobPhase::Running => "running",
            GpuJobPhase::Succeeded => "succeeded",
            GpuJobPhase::Failed => "failed",
        })
    }

    /// A short name, for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::Release { .. } => "release",
            Action::Evict { .. } => "evict",
            Action::DeletePods { .. } => "delete_pods",
            Action::JobStatus { .. } => "job_status",
            Action::AddFinalizer { .. } => "add_finalizer",
            Action::Finalize { .. } => "finalize",
            Action::Provision { .. } => "provision",
            Action::Unprovision { .. } => "unprovision",
            Action::CreateEntry { .. } => "create_entry",
            Action::UpdateEntry { .. } => "update_entry",
            Action::PatchWorkload { .. } => "patch_workload",
            Action::PinPods { .. } => "pin_pods",
            Action::ClusterQueueStatus { .. } => "cluster_queue_status",
            Action::LocalQueueStatus { .. } => "local_queue_status",
            Action::FlavorStatus { .. } => "flavor_status",
            Action::CohortStatus { .. } => "cohort_status",
        }
    }
}

/// A job as the pass that planned a write of its status read it. The status is written only
/// onto that version (a `resourceVersion` precondition): a write never lands on a status, a
/// spec or an object (a job deleted and made again under its name) that its pass did not
/// see — a watch behind the API server, another leader's write that landed late, an answer
/// lost on the way back. When the precondition fails, the executor reads the job afresh and
/// decides again (see [`JobRead::holds_for`]).
#[derive(Clone, Debug, PartialEq)]
pub struct JobRead {
    /// The version read.
    pub resource_version: Option<String>,
    uid: Option<String>,
    generation: Option<i64>,
    deleting: bool,
    status: Option<GpuJobStatus>,
}

impl JobRead {
    /// What a pass reads of `job`.
    pub fn of(job: &GpuJob) -> JobRead {
        JobRead {
            resource_version: job.metadata.resource_version.clone(),
            uid: job.metadata.uid.clone(),
            generation: job.metadata.generation,
            deleting: job.metadata.deletion_timestamp.is_some(),
            status: job.status.clone(),
        }
    }

    /// Whether a write decided on this read is still the one to make on `current`, a newer
    /// version of the job: the same object (UID), spec (generation), deletion and status —
    /// everything a job's step reads of its GpuJob. Its labels, annotations, finalizers and
    /// managed fields may have moved (Muster's own finalizer lands beside a release).
    pub fn holds_for(&self, current: &GpuJob) -> bool {
        let now = JobRead::of(current);
        self.uid == now.uid
            && self.generation == now.generation
            && self.deleting == now.deleting
            && self.status == now.status
    }

    /// This read at `current`'s version when the decision still holds there (see
    /// [`JobRead::holds_for`]; `current` is what another write of this controller returned);
    /// else unchanged, so that the write meets the precondition and its job is decided again.
    #[must_use]
    pub fn at_version_of(&self, current: &GpuJob) -> JobRead {
        if self.holds_for(current) {
            JobRead {
                resource_version: current.metadata.resource_version.clone(),
                ..self.clone()
            }
        } else {
            self.clone()
        }
    }
}

/// A Kubernetes Event about a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// Warning rather than Normal.
    pub warning: bool,
    /// PascalCase reason.
    pub reason: String,
    /// What a person reads.
    pub message: String,
}

impl Note {
    pub(crate) fn normal(reason: &str, message: impl Into<String>) -> Note {
        Note {
            warning: false,
            reason: reason.to_owned(),
            message: message.into(),
        }
    }
    pub(crate) fn warning(reason: &str, message: impl Into<String>) -> Note {
        Note {
            warning: true,
            reason: reason.to_owned(),
            message: message.into(),
        }
    }
}

/// One pass's writes and what it found.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// The writes, in order.
    pub actions: Vec<Action>,
    /// What it found.
    pub summary: Summary,
}
