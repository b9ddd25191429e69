//! What differs in the step of a queue entry (see [`crate::workload`]): its pods are the Job
//! controller's, so it finishes when its Job says so, and it is evicted by suspending the Job
//! rather than by deleting pods that the Job controller would make again.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Service;
use muster_admission::{Admitted, Holding};
use muster_api::gpujob::GpuJobStatus;
use muster_api::{GpuJob, ObjectRef, ResourceFlavorSpec};

use super::{Phase, Reading, Step};
use crate::action::{Action, Note};
use crate::index::Index;
use crate::release::{Gang, WorkloadRelease};
use crate::status;
use crate::workload::{Placement, is_entry_of, pin_patch, template_patch, workload_of};

/// The Job behind `job` when `job` is a queue entry and the index holds that very Job (the
/// same UID: a Job made again under the name has an entry of its own).
pub(crate) fn workload<'a>(index: &'a Index, job: &GpuJob) -> Option<&'a Job> {
    let key = workload_of(job)?;
    index.workloads.get(&key).filter(|w| is_entry_of(job, w))
}

/// The step of an entry whose Job has ended: its status says how.
pub(super) fn finished(reading: &Reading<'_>) -> Option<Step> {
    let run = workload(reading.index, reading.job)?;
    let (succeeded, message) = crate::workload::finished(run)?;
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

/// Whether `job` is a queue entry whose Job has not yet settled from its last run (or from
/// arriving running): the Job controller may still have its pods, or has not yet reset its
/// start time, so its template cannot change and it must not be released again yet.
pub(super) fn settling(index: &Index, job: &GpuJob) -> bool {
    workload(index, job).is_some_and(crate::workload::may_have_pods)
}

/// The eviction of `job`: its status written, then its pods deleted — or, for a queue entry,
/// its Job suspended, whose controller deletes them.
pub(crate) fn evict(
    job: &GpuJob,
    key: &ObjectRef,
    status: GpuJobStatus,
    pods: Vec<ObjectRef>,
    event: Note,
) -> Action {
    let workload = workload_of(job);
    Action::Evict {
        job: key.clone(),
        status: Box::new(status),
        pods: if workload.is_some() { Vec::new() } else { pods },
        event,
        workload,
    }
}

/// The release of the Job behind the entry `key`, as `admitted` places it: its template
/// patch (its pods are let go by [`pins`] once the Job controller has made them all). An
/// error says why the Job cannot be released.
pub(crate) fn release(
    index: &Index,
    key: &ObjectRef,
    entry: &GpuJob,
    admitted: &Admitted,
    flavors: &BTreeMap<String, ResourceFlavorSpec>,
) -> Result<Gang, String> {
    let run = workload(index, entry).ok_or_else(|| {
        "the Job behind this queue entry is gone, or no longer labelled with a queue".to_owned()
    })?;
    let target = workload_of(entry).ok_or_else(|| "not a queue entry".to_owned())?;
    let [placed] = admitted.pod_sets.as_slice() else {
        return Err(format!(
            "a Job is one pod set; the admission places {}",
            admitted.pod_sets.len()
        ));
    };
    let flavor = flavors
        .get(&placed.flavor)
        .ok_or_else(|| format!("flavor {} is unknown", placed.flavor))?;
    let attempt = entry.status.as_ref().map_or(0, |s| s.requeue_count);
    let placement = Placement {
        entry: key.name(),
        cluster_queue: &admitted.cluster_queue,
        pod_set: placed,
        flavor,
        attempt,
    };
    Ok(Gang {
        service: Service::default(),
        pods: Vec::new(),
        workload: Some(Box::new(WorkloadRelease {
            job: target,
            patch: template_patch(entry, run, Some(&placement), false),
        })),
    })
}

/// The pins that let an admitted entry's gang go (pod `i` of an Indexed Job on the `i`-th node
/// the admission placed; others, by name, on the nodes left): every pod of its current attempt
/// made by the Job controller and still behind Muster's gate, as many as the admission
/// placed, no index claimed twice. `None` until then — and once the gang has been let go.
pub(super) fn pins(
    index: &Index,
    key: &ObjectRef,
    entry: &GpuJob,
    held: &Holding,
    attempt: i32,
) -> Option<Vec<(ObjectRef, serde_json::Value)>> {
    let [placed] = held.pod_sets.as_slice() else {
        return None;
    };
    let nodes = &placed.nodes;
    let mut gated: Vec<(usize, &ObjectRef)> = index
        .pods_of(key)
        .filter_map(|(pod, record)| {
            let member = record.member.as_ref()?;
            (member.attempt == attempt && record.gated && !record.deleting)
                .then_some((member.index, pod))
        })
        .collect();
    if gated.len() != nodes.len() {
        return None;
    }
    gated.sort();
    let claimed: Vec<usize> = gated
        .iter()
        .map(|(i, _)| *i)
        .filter(|i| *i < nodes.len())
        .collect();
    if claimed.windows(2).any(|w| w[0] == w[1]) {
        return None;
    }
    let mut free = (0..nodes.len()).filter(|i| !claimed.contains(i));
    let mut out = Vec::with_capacity(nodes.len());
    for (claim, pod) in gated {
        let i = (claim < nodes.len())
            .then_some(claim)
            .or_else(|| free.next())?;
        out.push((pod.clone(), pin_patch(entry, &nodes[i], i)));
    }
    Some(out)
}
