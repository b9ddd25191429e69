//! What differs in the step of a queue entry (see [`crate::workload`]): its pods are the Job
//! controller's, so it finishes when its Job (or JobSet) says so, and it is evicted by
//! suspending the workload rather than by deleting pods that its controller would make again.

use std::collections::{BTreeMap, BTreeSet};

use muster_admission::{Admitted, Holding};
use muster_api::gpujob::GpuJobStatus;
use muster_api::{GpuJob, ObjectRef, ResourceFlavorSpec};

use super::{Phase, Reading, Step};
use crate::action::{Action, Note};
use crate::index::{GangMember, Index};
use crate::release::{Gang, WorkloadRelease};
use crate::status;
use crate::workload::{
    Placement, Run, WorkloadKind, WorkloadPatch, WorkloadRef, jobset::Completion, pin_patch,
    template_patch, workload_of,
};

/// The workload behind `job` when `job` is a queue entry and the index holds that very
/// workload (the same UID: one made again under the name has an entry of its own).
pub(crate) fn workload<'a>(index: &'a Index, job: &GpuJob) -> Option<Run<'a>> {
    crate::workload::behind(index, job)
}

/// How long after its admission an entry's Job may still look unreleased before the
/// admission is given back, seconds (see [`release_missing`]). A copy of the Job older than
/// the release can stand beside the entry's Admitted status for a while — a watch cut and
/// backing off, a new leader whose caches lag — and a release that did land must not be
/// undone for it.
pub(super) const RELEASE_LANDS_WITHIN_SECONDS: i64 = 30;

/// Whether the admission `held` that `entry`'s status records never reached its Job: a
/// release that writes the status first (a Job that never runs more than one pod, placed on
/// one node: see [`crate::release::WorkloadRelease::ungated`]) whose Job is still suspended
/// without this attempt's release ([`crate::workload::release_missing`]) — its patch failed,
/// or its leader lost the Lease between the two writes. A gated Job's release is written
/// before its status, so its entry never shows an admission its Job has not had.
pub(super) fn release_missing(workload: Option<Run<'_>>, held: &Holding, attempt: i32) -> bool {
    let one_node = matches!(held.pod_sets.as_slice(), [set] if set.nodes.len() == 1);
    matches!(workload, Some(Run::Job(job))
        if one_node
            && crate::workload::never_more_than_one_pod(job)
            && crate::workload::release_missing(job, attempt))
}

/// Whether the success of every pod of the entry's gang is its workload's success, so the
/// entry finishes with them rather than when its Job says so: a Job whose one pod's success
/// is the Job's ([`crate::workload::succeeds_with_its_pod`]).
pub(super) fn succeeds_with_its_pods(workload: Option<Run<'_>>) -> bool {
    matches!(workload, Some(Run::Job(job)) if crate::workload::succeeds_with_its_pod(job))
}

/// The step of an entry whose workload has ended: its status says how.
pub(super) fn finished(reading: &Reading<'_>) -> Option<Step> {
    let run = reading.workload?;
    let (succeeded, message) = match run {
        Run::PodGroup(..) => group_finished(reading)?,
        Run::Job(_) | Run::JobSet(_) => run.finished()?,
    };
    let next = status::finished(
        reading.status,
        reading.job.metadata.generation,
        succeeded,
        &message,
        reading.now,
    );
    let event = if succeeded {
        Note::normal("Succeeded", message)
    } else {
        Note::warning("Failed", message)
    };
    Some(Step::new(Phase::Finishing).act(Action::JobStatus {
        job: reading.key.clone(),
        status: Box::new(next),
        event: Some(event),
    }))
}

/// How an admitted pod group's run ended, once every pod of its gang (of the current attempt)
/// has: Succeeded when each did, else Failed, naming a failed pod. Nobody makes a plain
/// pod again, so a failed pod ends the group rather than restarting it.
fn group_finished(reading: &Reading<'_>) -> Option<(bool, String)> {
    let expected: usize = reading
        .status
        .admission
        .as_ref()?
        .pod_sets
        .iter()
        .map(|p| p.nodes.len())
        .sum();
    let pods: Vec<(&ObjectRef, &crate::index::PodRecord)> = reading
        .index
        .pods_of(reading.key)
        .filter(|(_, p)| {
            p.member
                .as_ref()
                .is_some_and(|m| m.attempt == reading.status.requeue_count)
        })
        .collect();
    if expected == 0 || pods.len() < expected || !pods.iter().all(|(_, p)| p.phase.ended()) {
        return None;
    }
    Some(
        match pods
            .iter()
            .find(|(_, p)| p.phase == crate::index::PodPhase::Failed)
        {
            Some((pod, _)) => (false, format!("pod {pod} of the group failed")),
            None => (true, "every pod of the group succeeded".to_owned()),
        },
    )
}

/// Whether `job` is a queue entry whose workload has not yet settled from its last run (or
/// from arriving running): the Job controller may still have its pods, or has not yet reset
/// its start time, so its template cannot change and it must not be released again yet. A
/// JobSet settles once no child Job is counted active and none of its gang's pods is left.
pub(super) fn settling(index: &Index, key: &ObjectRef, workload: Option<Run<'_>>) -> bool {
    workload.is_some_and(|run| crate::workload::settling(index, run, key))
}

/// The Job or JobSet `job` is the queue entry of, whose controller deletes the pods of an
/// ended attempt once the workload is suspended; `None` for any other GpuJob. Muster must
/// not delete them itself: the Job controller counts a pod deleted under it before it
/// succeeded as a failure (unless the Job sets `podReplacementPolicy: Failed` or a
/// `podFailurePolicy` that ignores it), so a Job with a small `backoffLimit` would fail for
/// an eviction. A pod group's pods cannot be suspended; they are deleted, as a GpuJob's are.
/// Read from the entry's labels and owner alone: a workload that is gone takes its pods with
/// it (the garbage collector), and an orphaned entry loses the owner reference.
pub(crate) fn suspendable_workload(job: &GpuJob) -> Option<WorkloadRef> {
    workload_of(job).filter(|w| w.kind != WorkloadKind::PodGroup)
}

/// The eviction of `job`: its status written, then its pods deleted — or, for a queue entry,
/// its workload suspended, whose controller deletes them.
pub(crate) fn evict(
    job: &GpuJob,
    key: &ObjectRef,
    status: GpuJobStatus,
    pods: Vec<ObjectRef>,
    event: Note,
) -> Action {
    let workload = suspendable_workload(job);
    Action::Evict {
        job: key.clone(),
        status: Box::new(status),
        pods: if workload.is_some() { Vec::new() } else { pods },
        event,
        workload,
    }
}

/// The release of the workload behind the entry `key`, as `admitted` places it: its template
/// patch (its pods are let go by [`pins`] once its controllers have made them all). An error
/// says why it cannot be released.
pub(crate) fn release(
    index: &Index,
    key: &ObjectRef,
    entry: &GpuJob,
    admitted: &Admitted,
    flavors: &BTreeMap<String, ResourceFlavorSpec>,
) -> Result<Gang, String> {
    let target = workload_of(entry).ok_or_else(|| "not a queue entry".to_owned())?;
    let run = workload(index, entry).ok_or_else(|| {
        format!(
            "the {} behind this queue entry is gone, or no longer labelled with a queue",
            target.kind
        )
    })?;
    let attempt = entry.status.as_ref().map_or(0, |s| s.requeue_count);
    let mut ungated = false;
    let patch = match run {
        Run::Job(job) => {
            let [placed] = admitted.pod_sets.as_slice() else {
                return Err(format!(
                    "a Job is one pod set; the admission places {}",
                    admitted.pod_sets.len()
                ));
            };
            let flavor = flavors
                .get(&placed.flavor)
                .ok_or_else(|| format!("flavor {} is unknown", placed.flavor))?;
            let placement = Placement {
                entry: key.name(),
                cluster_queue: &admitted.cluster_queue,
                pod_set: placed,
                flavor,
                attempt,
            };
            ungated = placement.pin_for(job).is_some();
            WorkloadPatch::Merge(template_patch(entry, job, Some(&placement), false))
        }
        Run::JobSet(jobset) => {
            let placement = crate::workload::jobset::Placement {
                entry: key.name(),
                cluster_queue: &admitted.cluster_queue,
                pod_sets: &admitted.pod_sets,
                flavors,
                attempt,
            };
            crate::workload::jobset::release_patch(entry, jobset, &placement)?
        }
        // Its pods exist already: the admitted step pins them.
        Run::PodGroup(..) => WorkloadPatch::Nothing,
    };
    Ok(Gang {
        service: None,
        pods: Vec::new(),
        scheduling_group: None,
        workload: Some(Box::new(WorkloadRelease {
            workload: target,
            patch,
            ungated,
        })),
    })
}

/// The completions of a JobSet's child Jobs that an earlier attempt of its entry `key` left
/// done: their places in the gang stay empty, as no pod takes them again (see
/// [`crate::workload::jobset::completed_before`]); none for any other workload.
pub(super) fn completed_before(
    index: &Index,
    key: &ObjectRef,
    workload: Option<Run<'_>>,
    attempt: i32,
) -> BTreeSet<Completion> {
    let Some(Run::JobSet(jobset)) = workload else {
        return BTreeSet::new();
    };
    let pods = index.pods_of(key).filter_map(|(_, p)| {
        let member = p.member.as_ref()?;
        Some((member, p.phase == crate::index::PodPhase::Succeeded))
    });
    let of = ObjectRef::of(&jobset.metadata);
    let children = index.child_jobs_of(of.as_str());
    crate::workload::jobset::completed_before(jobset, pods, children, attempt)
}

/// The pins that let an admitted entry's gang go (for a Job: pod `i` of an Indexed Job on
/// the `i`-th node the admission placed, others, by name, on the nodes left; for a JobSet see
/// [`crate::workload::jobset::pins`]): every pod of its current attempt made by the
/// workload's controllers and still behind Muster's gate, as many as the admission placed,
/// no position claimed twice (`done`: the places [`completed_before`] left empty). `None`
/// until then — and once the gang has been let go.
pub(super) fn pins(
    index: &Index,
    key: &ObjectRef,
    entry: &GpuJob,
    workload: Option<Run<'_>>,
    held: &Holding,
    attempt: i32,
    done: &BTreeSet<Completion>,
) -> Option<Vec<(ObjectRef, serde_json::Value)>> {
    let gated: Vec<(&ObjectRef, &GangMember)> = index
        .pods_of(key)
        .filter_map(|(pod, record)| {
            let member = record.member.as_ref()?;
            (member.attempt == attempt && record.gated && !record.deleting).then_some((pod, member))
        })
        .collect();
    match workload? {
        Run::Job(_) => {
            let [placed] = held.pod_sets.as_slice() else {
                return None;
            };
            let set = entry.spec.pod_sets.first()?;
            let claims = gated.iter().map(|(pod, m)| (m.index, *pod)).collect();
            let positions = crate::workload::assign_positions(claims, placed.nodes.len())?;
            Some(
                positions
                    .into_iter()
                    .map(|(i, pod)| (pod.clone(), pin_patch(set, &placed.nodes[i], i)))
                    .collect(),
            )
        }
        Run::JobSet(jobset) => {
            crate::workload::jobset::pins(entry, jobset, &held.pod_sets, &gated, done)
        }
        Run::PodGroup(_, group) => {
            let [placed] = held.pod_sets.as_slice() else {
                return None;
            };
            let flavor = index.flavors.get(&placed.flavor)?;
            let placement = Placement {
                entry: key.name(),
                cluster_queue: &held.cluster_queue,
                pod_set: placed,
                flavor: &flavor.spec,
                attempt,
            };
            crate::workload::pod_group::pins(
                group,
                key.name(),
                attempt,
                &placed.nodes,
                &placement.additions(),
            )
        }
    }
}
