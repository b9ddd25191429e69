//! Jobs teams already run, queued through a GpuJob Muster makes for each: its *queue entry*.
//!
//! A `batch/v1` Job or a JobSet labelled `muster.dev/queue-name` is Muster's (nothing without
//! the label is ever touched). Muster makes a GpuJob named `job-<name>` (`jobset-<name>` for
//! a JobSet) beside it, owned by the workload (the garbage collector deletes it with the
//! workload), whose spec is the workload read as admission sees it
//! ([`muster_api::workload`]). What follows says "Job"; a JobSet is held, released and
//! evicted the same way through its replicated Jobs' templates (see [`jobset`]), and its
//! child Jobs are its own (a Job a JobSet controls is never queued by itself). The entry queues, waits, is admitted, preempted, restarted and
//! finishes like any GpuJob — position, reason, ETA, Events, metrics and the `kubectl get
//! gpujobs` columns are the same — but its pods are the Job's, made by the Job controller:
//!
//! - **Held.** While the entry holds no admission, the Job is kept suspended (a Job that
//!   arrives running is suspended at once); what a release wrote into its template is put back,
//!   and what its owner edits (its parallelism, what a suspended Job's template may take) the
//!   entry reads again.
//! - **Released.** Admission writes what a suspended Job's template may take — the flavor's
//!   node labels and tolerations, Muster's scheduling gate, the gang's labels and annotations —
//!   and unsuspends the Job in one patch. The Job controller makes the pods behind the gate;
//!   once every pod of the gang exists, each is pinned to its node (pod `i` of an Indexed Job on
//!   the `i`-th node the admission placed) and let go. A Job that can never run more than one
//!   pod at a time ([`never_more_than_one_pod`]) has no peer to wait for: its template names
//!   the node instead of carrying the gate, and its pod goes as made, with no write of its
//!   own. Such a release writes the entry's status first and unsuspends the Job after, so no
//!   pod runs on an admission the status does not record.
//! - **Evicted** (preempted, timed out, its node lost): the status is written, then the Job is
//!   suspended, and its controller deletes the pods; the quota is freed once they are gone, and
//!   the template is put back before the Job is released again. A one-pod Job evicted before
//!   it showed its release taken in may have a pod no status tells of (see
//!   [`untaken_release`]): its quota stays taken until the Job shows the suspension taken in,
//!   or for [`UNTAKEN_RELEASE_SECONDS`].
//! - **Finished** when the Job says so: its `Complete` or `Failed` condition — or, for a Job
//!   whose one pod's success is the Job's ([`succeeds_with_its_pod`]), as soon as that pod has
//!   succeeded: its quota goes back to the queue without waiting for the Job controller's
//!   next sync, and the entry leaves the Job to it (never suspended after its success).
//!
//! Pure: objects in, objects and patches out.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PodSchedulingGate, PodSpec, PodTemplateSpec, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use muster_admission::PodSetPlacement;
use muster_api::gpujob::PodSet;
use muster_api::resource_flavor::HOSTNAME_LABEL;
use muster_api::validation::FieldError;
use muster_api::wire::{
    ADMISSION_GATE, ATTEMPT_LABEL, CLUSTER_QUEUE_ANNOTATION, DOMAIN_ANNOTATION, FLAVOR_ANNOTATION,
    JOB_LABEL, POD_INDEX_LABEL, POD_SET_LABEL, WORKLOAD_KIND_LABEL,
};
use muster_api::{GpuJob, ObjectRef, ResourceFlavorSpec};
use serde_json::{Map, Value, json};

use crate::index::{BatchJob, Index, KeptTemplate};

pub mod jobset;
mod kind;
pub mod pod_group;

pub use kind::{Run, WorkloadKind, WorkloadPatch, WorkloadRef};
pub use muster_api::workload::entry_name;

/// Annotation on a labelled Job that cannot be queued as it stands: every problem, each with
/// the Job's field and the fix. Removed once the Job can be queued.
pub const INVALID_ANNOTATION: &str = "muster.dev/invalid";

/// The kind of workload a Job's queue entry stands for (the value of
/// [`WORKLOAD_KIND_LABEL`]).
pub const JOB_KIND: &str = "Job";

/// The queue entry of `job` (see the module docs): the Job read as admission sees it, named
/// [`entry_name`], labelled with the workload's kind and owned by the Job. Every problem,
/// each on the Job's own field, when the Job cannot be queued as it stands.
pub fn entry_for(job: &BatchJob) -> Result<GpuJob, Vec<FieldError>> {
    Run::Job(job).entry()
}

/// The workload `workload` as `index` last saw it.
pub fn run<'a>(index: &'a Index, workload: &WorkloadRef) -> Option<Run<'a>> {
    match workload.kind {
        WorkloadKind::Job => index.workloads.get(&workload.key).map(|job| Run::Job(job)),
        WorkloadKind::JobSet => index.jobsets.get(&workload.key).map(Run::JobSet),
        WorkloadKind::PodGroup => index
            .pod_groups
            .get_key_value(&workload.key)
            .map(|(k, g)| Run::PodGroup(k.name(), g)),
    }
}

/// Every workload labelled with a queue that `index` holds: Jobs, JobSets, then pod groups,
/// each by key.
pub fn runs(index: &Index) -> impl Iterator<Item = (WorkloadRef, Run<'_>)> {
    let jobs = index
        .workloads
        .iter()
        .map(|(k, j)| (WorkloadRef::job(k.clone()), Run::Job(j)));
    let jobsets = index
        .jobsets
        .iter()
        .map(|(k, j)| (WorkloadRef::jobset(k.clone()), Run::JobSet(j)));
    let groups = index.pod_groups.iter().map(|(k, g)| {
        (
            WorkloadRef::pod_group(k.clone()),
            Run::PodGroup(k.name(), g),
        )
    });
    jobs.chain(jobsets).chain(groups)
}

/// Whether the workload `run` behind the entry `entry` may still have pods from its last run
/// (or from arriving running), so that it has not settled: its own word
/// ([`Run::may_have_pods`]) — and for a JobSet, whose child Jobs are its controller's, any
/// pod of the entry's gang not yet ended. Until it settles its templates are neither put
/// back nor released again.
pub fn settling(index: &Index, run: Run<'_>, entry: &ObjectRef) -> bool {
    run.may_have_pods()
        || (matches!(run, Run::JobSet(_))
            && index.pods_of(entry).any(|(_, p)| {
                matches!(
                    p.phase,
                    crate::index::PodPhase::Pending | crate::index::PodPhase::Running
                )
            }))
}

/// `read` (a workload read as a GpuJob) made the queue entry of the workload whose metadata
/// is `meta` and whose owner reference is `owner`: named after it, labelled with its kind.
fn made_entry(
    read: Result<GpuJob, Vec<FieldError>>,
    meta: &ObjectMeta,
    owner: Option<OwnerReference>,
    kind: WorkloadKind,
) -> Result<GpuJob, Vec<FieldError>> {
    let mut entry = read?;
    let missing = |what: &str| {
        vec![FieldError {
            path: format!("metadata.{what}"),
            message: format!(
                "the {kind} has no {what}: only {kind}s read from the API server are queued"
            ),
        }]
    };
    let name = meta.name.as_deref().ok_or_else(|| missing("name"))?;
    let owner = owner.ok_or_else(|| missing("uid"))?;
    entry.metadata = ObjectMeta {
        name: Some(kind.entry_name(name)),
        namespace: meta.namespace.clone(),
        labels: Some(BTreeMap::from([(
            WORKLOAD_KIND_LABEL.to_owned(),
            kind.label().to_owned(),
        )])),
        owner_references: Some(vec![OwnerReference {
            block_owner_deletion: Some(true),
            ..owner
        }]),
        ..ObjectMeta::default()
    };
    Ok(entry)
}

/// The workload `entry` is the queue entry of: its controller owner reference, when that is
/// a Job or JobSet of the kind the entry's workload label names. `None` for every other
/// GpuJob.
pub fn workload_of(entry: &GpuJob) -> Option<WorkloadRef> {
    let meta = &entry.metadata;
    let labels = meta.labels.as_ref()?;
    let kind = labels
        .get(WORKLOAD_KIND_LABEL)
        .and_then(|label| WorkloadKind::from_label(label))?;
    let namespace = meta.namespace.as_deref().unwrap_or_default();
    if kind == WorkloadKind::PodGroup {
        // Owned by its pods, which come and go: the group is named by its label.
        let group = labels.get(muster_api::wire::POD_GROUP_LABEL)?;
        return Some(WorkloadRef::pod_group(ObjectRef::new(namespace, group)));
    }
    let owner = meta.owner_references.iter().flatten().find(|o| {
        o.controller == Some(true) && o.kind == kind.label() && o.api_version == kind.api_version()
    })?;
    Some(WorkloadRef {
        kind,
        key: ObjectRef::new(namespace, &owner.name),
    })
}

/// Whether `job` still is the Job `entry` was made for (the same UID): a Job deleted and
/// made again under its name gets a new entry, never the old one's admission.
pub fn is_entry_of(entry: &GpuJob, job: &BatchJob) -> bool {
    owned_by(entry, job.metadata.uid.as_deref())
}

/// The workload behind `entry` when it is a queue entry and the index holds that very
/// workload (the same UID: one made again under its name has an entry of its own).
pub fn behind<'a>(index: &'a Index, entry: &GpuJob) -> Option<Run<'a>> {
    let key = workload_of(entry)?;
    run(index, &key).filter(|w| w.is_entry(entry))
}

/// Whether `entry`'s controller owner has the UID `uid`.
fn owned_by(entry: &GpuJob, uid: Option<&str>) -> bool {
    entry
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == uid)
}

/// Whether the Job is suspended.
pub fn is_suspended(job: &BatchJob) -> bool {
    job.spec.suspend.unwrap_or(false)
}

/// Whether the Job controller may still have pods of `job`, or not yet have taken in its
/// suspension: it counts some active, or the Job still has a start time. The Job controller
/// resets `status.startTime` once it has suspended a Job, and only then does the API server
/// let a suspended Job's template change — so neither the template is put back nor the Job
/// released again before.
pub fn may_have_pods(job: &BatchJob) -> bool {
    job.status.active.unwrap_or(0) > 0 || job.status.start_time.is_some()
}

/// How long after its eviction a one-pod Job released pinned, whose controller never showed
/// that it took the release in, keeps the release's quota, seconds (see [`untaken_release`]).
/// The Job controller makes a pod from the Job it last read and records the start after, in a
/// write that fails once Muster's suspension has landed: a pod made so shows in no status, and
/// only the pod watch tells of it. Ten seconds is more than such a sync and the watch that
/// reports its pod take on a loaded control plane (well under a second on this project's
/// benchmarks); a controller slower still could run the pod beside the gang released into
/// its quota. The `Suspended` condition's time is the controller manager's clock, the
/// eviction's Muster's: a controller manager whose clock runs behind costs such a Job these
/// seconds of quota after every eviction, never a pod over quota.
pub const UNTAKEN_RELEASE_SECONDS: i64 = 10;

/// What a one-pod Job's template still says of the release it was pinned by (see
/// [`untaken_release`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinnedRelease {
    /// The ClusterQueue the release took quota in.
    pub cluster_queue: String,
    /// Its pod set's flavor.
    pub flavor: String,
    /// Its pod set's domain.
    pub domain: Vec<(String, String)>,
    /// The node its pod was pinned to.
    pub node: Option<String>,
    /// Until when, seconds, its quota is kept with no other sign of a pod: `None` while the
    /// Job itself says its controller may have one (its status changes when that ends).
    pub until: Option<i64>,
}

/// The release of attempt `attempt` (evicted at `evicted_at`, seconds) that `job`'s template
/// still carries, when it let the Job's one pod go pinned to its node with no gate and the Job
/// controller has not shown that it took the suspension in: the Job still runs or may have a
/// pod ([`may_have_pods`]), or its `Suspended` condition has not turned True since the
/// eviction and [`UNTAKEN_RELEASE_SECONDS`] have not passed. Such a pod may exist unseen (made
/// from the released Job, its start never recorded) and run on the release's quota, so the
/// quota stays held. A gated release needs none of this: a pod made behind Muster's gate after
/// the eviction stays there until its controller deletes it. `None` otherwise.
pub fn untaken_release(
    job: &BatchJob,
    attempt: i32,
    evicted_at: i64,
    now_s: i64,
) -> Option<PinnedRelease> {
    let template = &job.spec.template;
    let label = |key: &str| template.labels.as_ref().and_then(|l| l.get(key));
    let annotation = |key: &str| template.annotations.as_ref().and_then(|a| a.get(key));
    let gated = template
        .scheduling_gates
        .iter()
        .flatten()
        .any(|g| g.name == ADMISSION_GATE);
    let node = template
        .node_selector
        .as_ref()
        .and_then(|s| s.get(HOSTNAME_LABEL))
        .cloned();
    if gated
        || node.is_none()
        || job.finished().is_some()
        || label(ATTEMPT_LABEL) != Some(&attempt.to_string())
        || !carries_release(job)
    {
        return None;
    }
    let until = if !is_suspended(job) || may_have_pods(job) {
        None
    } else {
        let suspended_since = job
            .status
            .conditions
            .iter()
            .flatten()
            .filter(|c| c.type_ == "Suspended" && c.status == "True")
            .find_map(|c| c.last_transition_time.as_ref())
            .map(|t| t.0.as_second());
        let end = evicted_at.saturating_add(UNTAKEN_RELEASE_SECONDS);
        if suspended_since.is_some_and(|t| t >= evicted_at) || now_s >= end {
            return None;
        }
        Some(end)
    };
    Some(PinnedRelease {
        cluster_queue: annotation(CLUSTER_QUEUE_ANNOTATION)?.clone(),
        flavor: annotation(FLAVOR_ANNOTATION)?.clone(),
        domain: annotation(DOMAIN_ANNOTATION)
            .map(|d| muster_api::wire::parse_domain(d))
            .unwrap_or_default(),
        node,
        until,
    })
}

/// Whether `job` is suspended with no release of attempt `attempt` of its entry in its
/// template: a release written to the entry's status whose patch of the Job never landed
/// (see [`crate::release::WorkloadRelease::ungated`]). A Job suspended after its release
/// landed (by its owner, say) still carries it.
pub fn release_missing(job: &BatchJob, attempt: i32) -> bool {
    let carried = job
        .spec
        .template
        .labels
        .as_ref()
        .and_then(|l| l.get(ATTEMPT_LABEL))
        .is_some_and(|a| *a == attempt.to_string());
    is_suspended(job) && !(carried && carries_release(job))
}

/// Whether `job`'s template still carries what a release wrote (the gang's job label): it is
/// Muster's to put back, not its owner's edit.
pub fn carries_release(job: &BatchJob) -> bool {
    job.spec
        .template
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(JOB_LABEL))
}

/// Whether the Job's owner edited it since `entry` read it: how many pods it runs at once, or
/// what a suspended Job's template may take (labels, annotations, node selector,
/// tolerations, scheduling gates). Compared in place: it is asked of every waiting Job in
/// every pass.
pub fn edited_since(entry: &GpuJob, job: &BatchJob) -> bool {
    let count = job.pods_at_once();
    let recorded = entry.spec.pod_sets.first();
    recorded.is_none_or(|set| set.count != count)
        || !Scheduling::kept(&job.spec.template)
            .same(&Scheduling::of(recorded.map(|s| &s.template)))
}

/// Whether the Job controller can never keep more than one pod of `job` active at a time,
/// whatever its owner edits while it runs: a `NonIndexed` Job of one completion. Its
/// controller keeps at most `completions - succeeded` pods active, and the API server refuses
/// any change to a `NonIndexed` Job's `completions`, so raising `parallelism` adds no pod. (A
/// replacement for a pod being deleted may be made before that pod is gone; pinned to the
/// same node, it waits there until the old pod's resources are free.) An `Indexed` Job's
/// completions may be raised with its parallelism, and a Job without completions runs as many
/// pods as its parallelism says: both stay gated.
pub fn never_more_than_one_pod(job: &BatchJob) -> bool {
    job.spec.completions == Some(1)
        && job
            .spec
            .completion_mode
            .as_deref()
            .is_none_or(|mode| mode == "NonIndexed")
}

/// Whether `job` has succeeded once a pod of it has, before its controller says so: a Job of
/// one completion ([`never_more_than_one_pod`]) with no active deadline. Once that pod
/// succeeded and no other runs, the Job controller marks the Job complete on its next sync
/// (a failed pod of the same run breaks the gang first, and restarts count only pods still
/// running); only a deadline it finds passed on that sync would fail it instead. Under load
/// that sync comes seconds after the pod ended, and until it does the Job's quota would sit
/// idle.
pub fn succeeds_with_its_pod(job: &BatchJob) -> bool {
    never_more_than_one_pod(job) && job.spec.active_deadline_seconds.is_none()
}

/// What the gang's release writes into a Job's pod template: the flavor's node labels and
/// tolerations, Muster's gate, the gang's labels and the admission's annotations.
#[derive(Clone, Debug, PartialEq)]
pub struct Placement<'a> {
    /// The entry's name (the gang's job label).
    pub entry: &'a str,
    /// The ClusterQueue that admitted it.
    pub cluster_queue: &'a str,
    /// The pod set as admission placed it.
    pub pod_set: &'a PodSetPlacement,
    /// The flavor it was placed on.
    pub flavor: &'a ResourceFlavorSpec,
    /// The attempt (the entry's `requeueCount`).
    pub attempt: i32,
}

/// The merge patch that makes `job`'s template what `entry` recorded, with `placement`'s
/// additions when given, and sets `spec.suspend` to `suspend`. Keys Muster added before and
/// that the new template lacks are removed, so a Job released again onto another flavor
/// keeps none of the last one's labels. Only fields a suspended Job's template may take are
/// written.
pub fn template_patch(
    entry: &GpuJob,
    job: &BatchJob,
    placement: Option<&Placement<'_>>,
    suspend: bool,
) -> Value {
    let recorded = entry
        .spec
        .pod_sets
        .first()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let current = &job.spec.template;
    let additions = placement.map(|p| p.additions_for(job));
    let wanted = wanted_template(&recorded, additions.as_ref());
    let (wanted_meta, wanted_spec) = (
        wanted.metadata.unwrap_or_default(),
        wanted.spec.unwrap_or_default(),
    );
    json!({
        "spec": {
            "suspend": suspend,
            "template": {
                "metadata": {
                    "labels": map_patch(current.labels.as_ref(), wanted_meta.labels.as_ref()),
                    "annotations": map_patch(
                        current.annotations.as_ref(),
                        wanted_meta.annotations.as_ref(),
                    ),
                },
                "spec": {
                    "nodeSelector": map_patch(
                        current.node_selector.as_ref(),
                        wanted_spec.node_selector.as_ref(),
                    ),
                    "tolerations": list(wanted_spec.tolerations),
                    "schedulingGates": list(wanted_spec.scheduling_gates),
                },
            },
        },
    })
}

/// Whether `job`'s template is what [`template_patch`] would make it from `entry` with
/// `placement`: nothing to write.
pub fn template_is(entry: &GpuJob, job: &BatchJob, placement: Option<&Placement<'_>>) -> bool {
    let current = Scheduling::kept(&job.spec.template);
    let recorded = entry.spec.pod_sets.first().map(|s| &s.template);
    // Read every pass for every waiting Job: compared in place, copied only with additions.
    match placement {
        None => current.same(&Scheduling::of(recorded)),
        Some(placement) => {
            let additions = placement.additions_for(job);
            let wanted = wanted_template(&recorded.cloned().unwrap_or_default(), Some(&additions));
            current.same(&Scheduling::of(Some(&wanted)))
        }
    }
}

/// Whether two templates agree in what a release writes: labels, annotations, node
/// selector, tolerations and scheduling gates (absent and empty alike).
pub(crate) fn same_scheduling(a: Option<&PodTemplateSpec>, b: Option<&PodTemplateSpec>) -> bool {
    Scheduling::of(a).same(&Scheduling::of(b))
}

/// What a release writes into a pod template, borrowed from a template or from a Job's
/// [`KeptTemplate`]: absent and empty alike.
struct Scheduling<'a> {
    labels: Option<&'a BTreeMap<String, String>>,
    annotations: Option<&'a BTreeMap<String, String>>,
    node_selector: Option<&'a BTreeMap<String, String>>,
    tolerations: &'a [Toleration],
    gates: &'a [PodSchedulingGate],
}

impl<'a> Scheduling<'a> {
    /// What `template` says of it (nothing, without one).
    fn of(template: Option<&'a PodTemplateSpec>) -> Scheduling<'a> {
        let meta = template.and_then(|t| t.metadata.as_ref());
        let spec = template.and_then(|t| t.spec.as_ref());
        Scheduling {
            labels: meta.and_then(|m| m.labels.as_ref()),
            annotations: meta.and_then(|m| m.annotations.as_ref()),
            node_selector: spec.and_then(|s| s.node_selector.as_ref()),
            tolerations: spec
                .and_then(|s| s.tolerations.as_deref())
                .unwrap_or_default(),
            gates: spec
                .and_then(|s| s.scheduling_gates.as_deref())
                .unwrap_or_default(),
        }
    }

    /// What a Job's kept template says of it.
    fn kept(template: &'a KeptTemplate) -> Scheduling<'a> {
        Scheduling {
            labels: template.labels.as_ref(),
            annotations: template.annotations.as_ref(),
            node_selector: template.node_selector.as_ref(),
            tolerations: template.tolerations.as_deref().unwrap_or_default(),
            gates: template.scheduling_gates.as_deref().unwrap_or_default(),
        }
    }

    /// Whether both say the same.
    fn same(&self, other: &Scheduling<'_>) -> bool {
        fn map(m: Option<&BTreeMap<String, String>>) -> Option<&BTreeMap<String, String>> {
            m.filter(|m| !m.is_empty())
        }
        map(self.labels) == map(other.labels)
            && map(self.annotations) == map(other.annotations)
            && map(self.node_selector) == map(other.node_selector)
            && self.tolerations == other.tolerations
            && self.gates == other.gates
    }
}

/// What a release adds to a workload's pod template: the gang's labels, the admission's
/// annotations, the flavor's node labels and tolerations, and Muster's gate — or, for a Job
/// that never runs more than one pod, its node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Additions {
    /// Labels: the gang's job label, pod set and attempt.
    pub labels: BTreeMap<String, String>,
    /// Annotations: the ClusterQueue, flavor and domain of the admission.
    pub annotations: BTreeMap<String, String>,
    /// Node labels every pod's node has (the flavor's).
    pub node_labels: BTreeMap<String, String>,
    /// Tolerations the pods need on their nodes (the flavor's).
    pub tolerations: Vec<Toleration>,
    /// The node of a Job that never runs more than one pod (see [`never_more_than_one_pod`]).
    /// Its template is pinned there (the node's host name, pod index 0) and carries no gate:
    /// with no peer to wait for, the pod its controller makes goes as made and needs no write
    /// of its own. `None`: the template is gated, and each pod is pinned once the whole gang
    /// exists.
    pub pin: Option<String>,
}

impl Placement<'_> {
    /// What this placement adds to `job`'s template: [`Placement::additions`], pinned to the
    /// node when `job` never runs more than one pod and the admission placed it on one node.
    pub fn additions_for(&self, job: &BatchJob) -> Additions {
        Additions {
            pin: self.pin_for(job).map(str::to_owned),
            ..self.additions()
        }
    }

    /// The node `job`'s template is pinned to instead of gated: see
    /// [`Placement::additions_for`].
    pub fn pin_for(&self, job: &BatchJob) -> Option<&str> {
        match self.pod_set.nodes.as_slice() {
            [node] if never_more_than_one_pod(job) => Some(node),
            _ => None,
        }
    }

    /// What this placement adds to a template that is gated (every pod set of a JobSet, a
    /// pod group's pods, a Job that may run more than one pod).
    pub fn additions(&self) -> Additions {
        Additions {
            labels: BTreeMap::from([
                (JOB_LABEL.to_owned(), self.entry.to_owned()),
                (POD_SET_LABEL.to_owned(), self.pod_set.name.clone()),
                (ATTEMPT_LABEL.to_owned(), self.attempt.to_string()),
            ]),
            annotations: BTreeMap::from([
                (
                    CLUSTER_QUEUE_ANNOTATION.to_owned(),
                    self.cluster_queue.to_owned(),
                ),
                (FLAVOR_ANNOTATION.to_owned(), self.pod_set.flavor.clone()),
                (
                    DOMAIN_ANNOTATION.to_owned(),
                    muster_api::wire::format_domain(&self.pod_set.domain),
                ),
            ]),
            node_labels: self.flavor.node_labels.clone(),
            tolerations: self.flavor.tolerations.clone(),
            pin: None,
        }
    }
}

/// The template `recorded` with `additions`, when given.
pub(crate) fn wanted_template(
    recorded: &PodTemplateSpec,
    additions: Option<&Additions>,
) -> PodTemplateSpec {
    let mut template = recorded.clone();
    let Some(additions) = additions else {
        return template;
    };
    let meta = template.metadata.get_or_insert_with(ObjectMeta::default);
    meta.labels
        .get_or_insert_with(BTreeMap::new)
        .extend(additions.labels.clone());
    meta.annotations
        .get_or_insert_with(BTreeMap::new)
        .extend(additions.annotations.clone());
    let spec: &mut PodSpec = template.spec.get_or_insert_with(PodSpec::default);
    spec.node_selector
        .get_or_insert_with(BTreeMap::new)
        .extend(additions.node_labels.clone());
    let tolerations: &mut Vec<Toleration> = spec.tolerations.get_or_insert_with(Vec::new);
    for toleration in &additions.tolerations {
        if !tolerations.contains(toleration) {
            tolerations.push(toleration.clone());
        }
    }
    if let Some(node) = &additions.pin {
        spec.node_selector
            .get_or_insert_with(BTreeMap::new)
            .insert(HOSTNAME_LABEL.to_owned(), node.clone());
        meta.labels
            .get_or_insert_with(BTreeMap::new)
            .insert(POD_INDEX_LABEL.to_owned(), "0".to_owned());
        return template;
    }
    let gates = spec.scheduling_gates.get_or_insert_with(Vec::new);
    if !gates.iter().any(|g| g.name == ADMISSION_GATE) {
        gates.push(PodSchedulingGate {
            name: ADMISSION_GATE.to_owned(),
        });
    }
    template
}

/// A merge patch of a string map from `current` to `wanted`: every wanted entry, and `null`
/// for each key only `current` has.
pub(crate) fn map_patch(
    current: Option<&BTreeMap<String, String>>,
    wanted: Option<&BTreeMap<String, String>>,
) -> Value {
    let mut out = Map::new();
    for key in current.into_iter().flatten().map(|(k, _)| k) {
        out.insert(key.clone(), Value::Null);
    }
    for (key, value) in wanted.into_iter().flatten() {
        out.insert(key.clone(), Value::String(value.clone()));
    }
    Value::Object(out)
}

/// Adds to a release's template patch (see [`template_patch`]) what capacity bought for the
/// gang asks of its pods: `annotations` (the ProvisioningRequest to consume) and
/// `node_selector` (the capacity's details). A restore drops them again, as every key the
/// recorded template lacks.
pub fn add_to_template(
    patch: &mut Value,
    annotations: &BTreeMap<String, String>,
    node_selector: &BTreeMap<String, String>,
) {
    for (path, map) in [
        (["metadata", "annotations"], annotations),
        (["spec", "nodeSelector"], node_selector),
    ] {
        let at = &mut patch["spec"]["template"][path[0]][path[1]];
        if !at.is_object() {
            *at = Value::Object(Map::new());
        }
        if let Value::Object(fields) = at {
            for (key, value) in map {
                fields.insert(key.clone(), Value::String(value.clone()));
            }
        }
    }
}

/// A list in a merge patch: replaced whole, `null` when empty (the field is removed).
pub(crate) fn list<T: serde::Serialize>(items: Option<Vec<T>>) -> Value {
    match items.filter(|i| !i.is_empty()) {
        Some(items) => serde_json::to_value(items).unwrap_or(Value::Null),
        None => Value::Null,
    }
}

/// The merge patch that lets one gated pod of a released workload go: pinned to `node` (a
/// node selector a gated pod may still take), numbered `index` in its pod set `set`, without
/// Muster's gate. The pod's other gates are those of the template the entry recorded for the
/// set, and stay.
pub fn pin_patch(set: &PodSet, node: &str, index: usize) -> Value {
    let gates: Vec<PodSchedulingGate> = set
        .template
        .spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.clone())
        .into_iter()
        .flatten()
        .filter(|g| g.name != ADMISSION_GATE)
        .collect();
    json!({
        "metadata": {"labels": {POD_INDEX_LABEL: index.to_string(), POD_SET_LABEL: set.name}},
        "spec": {
            "nodeSelector": {HOSTNAME_LABEL: node},
            "schedulingGates": list(Some(gates)),
        },
    })
}

/// Each pod of one placed pod set matched to its node's position: a pod that claims a
/// position (its completion index, say) takes it, the rest take the positions left in name
/// order. `claims` holds each pod with its claim (`usize::MAX` for none); `None` unless
/// there are exactly `nodes` pods and no position is claimed twice. (A claimant may stand
/// for a position already done rather than a pod: see [`jobset::pins`].)
pub(crate) fn assign_positions<T: Ord>(
    mut claims: Vec<(usize, T)>,
    nodes: usize,
) -> Option<Vec<(usize, T)>> {
    if claims.len() != nodes {
        return None;
    }
    claims.sort();
    let claimed: Vec<usize> = claims
        .iter()
        .map(|(i, _)| *i)
        .filter(|i| *i < nodes)
        .collect();
    if claimed.windows(2).any(|w| w[0] == w[1]) {
        return None;
    }
    let mut free = (0..nodes).filter(|i| !claimed.contains(i));
    claims
        .into_iter()
        .map(|(claim, pod)| {
            let i = (claim < nodes).then_some(claim).or_else(|| free.next())?;
            Some((i, pod))
        })
        .collect()
}

#[cfg(test)]
mod tests;
