//! What a job holds and what its pods say: its admission read back from its status or its
//! pods, split by attempt. Pure readers of the index, shared by the job state machine and
//! the pass's decisions.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use muster_admission::{Admitted, Holding, PodSetPlacement};
use muster_api::gpujob::{GpuJobStatus, conditions};
use muster_api::wire::OUT_OF_SERVICE_TAINT;
use muster_api::{GpuJob, ObjectRef};

use crate::index::{Index, PodPhase, PodRecord};

/// A job's pods, `(key, record)`.
pub(crate) type Pods<'a> = Vec<(&'a ObjectRef, &'a PodRecord)>;

pub(crate) fn seconds(t: &Time) -> i64 {
    t.0.as_second()
}

pub(crate) fn condition_time(status: &GpuJobStatus, type_: &str) -> Option<i64> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
        .map(|c| seconds(&c.last_transition_time))
}

/// Whether a pod bound to `node` (unbound: `None`) may still run there: the Node exists and
/// is not tainted [`OUT_OF_SERVICE_TAINT`]. A node that is NotReady or stopped reporting may
/// still run its pods — a network partition looks just like a dead machine from here.
pub(crate) fn node_may_run(index: &Index, node: Option<&str>) -> bool {
    node.is_none_or(|n| {
        index
            .node(n)
            .is_some_and(|n| !n.taints.iter().any(|t| t.key == OUT_OF_SERVICE_TAINT))
    })
}

/// Pods of earlier attempts of job `key` that are being deleted but may still run: not
/// ended, and on a node that may still run them ([`node_may_run`]) — also one that is
/// NotReady or unreachable, whose kubelet may be running them behind a partition. Until
/// every one is gone the job is not released again: at most one attempt of a job runs at
/// once.
pub(crate) fn draining<'a>(index: &'a Index, key: &ObjectRef, attempt: i32) -> Pods<'a> {
    index
        .pods_of(key)
        .filter(|(_, pod)| {
            pod.member.as_ref().is_some_and(|m| m.attempt != attempt)
                && pod.deleting
                && matches!(
                    pod.phase,
                    PodPhase::Pending | PodPhase::Running | PodPhase::Unknown
                )
                && node_may_run(index, pod.node.as_deref())
        })
        .collect()
}

/// A job's pods of its current attempt, and those left over from earlier attempts.
pub(crate) fn split_pods<'a>(
    index: &'a Index,
    key: &ObjectRef,
    attempt: i32,
) -> (Pods<'a>, Vec<ObjectRef>) {
    let (mut current, mut stale) = (Vec::new(), Vec::new());
    for (k, pod) in index.pods_of(key) {
        let Some(member) = &pod.member else { continue };
        if member.attempt == attempt {
            current.push((k, pod));
        } else if !pod.deleting {
            stale.push(k.clone());
        }
    }
    (current, stale)
}

/// The admission a job holds, from its status (nodes there, or else its pods' pins).
pub(crate) fn holding_of(
    job: &GpuJob,
    status: &GpuJobStatus,
    pods: &[(&ObjectRef, &PodRecord)],
) -> Option<Holding> {
    let admission = status.admission.as_ref()?;
    // A status that lost its Admitted condition still says when the gang was released; with
    // neither the time is unknown, and nothing is estimated from it.
    let since = admitted_at(status).or_else(|| status.start_time.as_ref().map(seconds));
    let pod_sets = admission
        .pod_sets
        .iter()
        .map(|a| {
            let count = job
                .spec
                .pod_sets
                .iter()
                .find(|s| s.name == a.name)
                .map_or(0, |s| usize::try_from(s.count).unwrap_or(0));
            let nodes = if a.nodes.len() == count {
                a.nodes.clone()
            } else {
                pinned_nodes(pods, &a.name, count).unwrap_or_default()
            };
            PodSetPlacement {
                devices: pinned_devices(pods, &a.name, nodes.len()),
                name: a.name.clone(),
                flavor: a.flavor.clone(),
                domain: a
                    .levels
                    .iter()
                    .cloned()
                    .zip(
                        a.domains
                            .first()
                            .map(|d| d.values.clone())
                            .unwrap_or_default(),
                    )
                    .collect(),
                nodes,
            }
        })
        .collect();
    Some(Holding {
        cluster_queue: admission.cluster_queue.clone(),
        since,
        pod_sets,
    })
}

/// The node of every pod of `pod_set` (by index), when each of the `count` pods exists and
/// is pinned.
pub(crate) fn pinned_nodes(
    pods: &[(&ObjectRef, &PodRecord)],
    pod_set: &str,
    count: usize,
) -> Option<Vec<String>> {
    let mut nodes = vec![None; count];
    for (_, pod) in pods {
        let member = pod.member.as_ref()?;
        if member.pod_set == pod_set && member.index < count {
            nodes[member.index].clone_from(&member.pinned);
        }
    }
    nodes.into_iter().collect()
}

/// The GPU devices each pod of `pod_set` (by index, `count` of them) was counted on, from
/// its pods; empty when no pod of the set names any (its nodes' GPUs are counted whole).
pub(crate) fn pinned_devices(
    pods: &[(&ObjectRef, &PodRecord)],
    pod_set: &str,
    count: usize,
) -> Vec<Vec<u32>> {
    let mut devices = vec![Vec::new(); count];
    for (_, pod) in pods {
        if let Some(m) = &pod.member
            && m.pod_set == pod_set
            && m.index < count
        {
            devices[m.index].clone_from(&m.devices);
        }
    }
    if devices.iter().all(Vec::is_empty) {
        return Vec::new();
    }
    devices
}

/// The admission a half-finished release carried, read back from its pods — when every pod
/// of every pod set exists and they agree on queue, flavor and domain. Pods of one attempt
/// that disagree on their domain come from two releases (one rolled back, its pod left over
/// when the next was made): finished together they would run one gang split across domains.
/// `None`: roll it back.
pub(crate) fn recovered_admission(
    job: &GpuJob,
    key: &ObjectRef,
    pods: &[(&ObjectRef, &PodRecord)],
) -> Option<Admitted> {
    let queue = pods.first()?.1.member.as_ref()?.cluster_queue.clone();
    let mut pod_sets = Vec::with_capacity(job.spec.pod_sets.len());
    for set in &job.spec.pod_sets {
        let count = usize::try_from(set.count).ok()?;
        let members: Vec<_> = pods
            .iter()
            .filter_map(|(_, p)| p.member.as_ref())
            .filter(|m| m.pod_set == set.name)
            .collect();
        let first = members.first()?;
        if members.iter().any(|m| {
            m.cluster_queue != queue || m.flavor != first.flavor || m.domain != first.domain
        }) {
            return None;
        }
        pod_sets.push(PodSetPlacement {
            name: set.name.clone(),
            flavor: first.flavor.clone(),
            domain: first.domain.clone(),
            nodes: pinned_nodes(pods, &set.name, count)?,
            devices: pinned_devices(pods, &set.name, count),
        });
    }
    let expected: usize = pod_sets.iter().map(|p| p.nodes.len()).sum();
    (expected == pods.len() && !queue.is_empty()).then(|| Admitted {
        job: key.to_string(),
        cluster_queue: queue,
        pod_sets,
        borrowing: false,
    })
}

/// The release to finish for an admitted job whose gang was never wholly released: some pod
/// of the current attempt still carries the gate (or is missing while others are gated), none
/// has failed or is being deleted, and every pod's node is known — never for a queue entry,
/// whose pods its Job's controller makes. `None` when the gang was
/// released (its health decides) or cannot be finished as it stands.
pub(crate) fn unfinished_release(
    job: &GpuJob,
    key: &ObjectRef,
    held: &Holding,
    current: &[(&ObjectRef, &PodRecord)],
) -> Option<Admitted> {
    let gated = current.iter().any(|(_, p)| p.gated);
    let intact = current
        .iter()
        .all(|(_, p)| !p.deleting && matches!(p.phase, PodPhase::Pending));
    if !gated || !intact || job.spec.suspend {
        return None;
    }
    let complete = held.pod_sets.iter().all(|set| {
        let count = job
            .spec
            .pod_sets
            .iter()
            .find(|s| s.name == set.name)
            .map_or(0, |s| usize::try_from(s.count).unwrap_or(0));
        count > 0 && set.nodes.len() == count
    });
    // A queue entry's pods are made by its Job's controller, not by a release: its step lets
    // them go once all exist (`job::entry::pins`).
    let made_here = crate::workload::workload_of(job).is_none();
    (complete && made_here).then(|| Admitted {
        job: key.to_string(),
        cluster_queue: held.cluster_queue.clone(),
        pod_sets: held.pod_sets.clone(),
        borrowing: false,
    })
}

/// The admission `admitted`, held since `since`.
pub(crate) fn holding(admitted: &Admitted, since: i64) -> Holding {
    Holding {
        cluster_queue: admitted.cluster_queue.clone(),
        since: Some(since),
        pod_sets: admitted.pod_sets.clone(),
    }
}

/// When the job was admitted (its Admitted condition turned True), seconds.
pub(crate) fn admitted_at(status: &GpuJobStatus) -> Option<i64> {
    condition_time(status, conditions::ADMITTED)
}

/// Whether `pod` may still run, so that its GPUs count against its queue: not ended, not
/// being deleted, and not bound to a node that is gone (nothing runs it there any more).
fn may_run(index: &Index, pod: &PodRecord) -> bool {
    !pod.deleting
        && matches!(pod.phase, PodPhase::Pending | PodPhase::Running)
        && pod.node.as_deref().is_none_or(|n| index.node(n).is_some())
}

/// The quota a job's pods still take while its status holds none: a release cut off and
/// being rolled back, an eviction written before its pods' deletes landed, pods of an earlier
/// attempt not yet deleted. Until every such pod is being deleted the job holds its gang's
/// quota in the ClusterQueue its pods were released under — never less than they use, so
/// no other gang is released into quota they still run on.
///
/// Pods of `attempt` (the status's current one) are booked through the holding: it lists the
/// node of each that is not ended (bound, or pinned while gated), deleted or not, as admitted
/// holdings do. Pods of earlier attempts are booked as ordinary pods already, so a holding
/// for them carries quota only. A pod set none of whose pods may run is counted in the
/// flavor of another pod set's pods (the job holds more quota for a moment, never less).
pub(crate) fn held_by_pods(
    index: &Index,
    job: &GpuJob,
    key: &ObjectRef,
    attempt: i32,
    since: Option<i64>,
) -> Option<Holding> {
    let running: Vec<&PodRecord> = index
        .pods_of(key)
        .map(|(_, p)| p)
        .filter(|p| p.member.is_some() && may_run(index, p))
        .collect();
    let of_attempt = |p: &&PodRecord| p.member.as_ref().is_some_and(|m| m.attempt == attempt);
    let current = running.iter().any(of_attempt);
    let source: Vec<&crate::index::GangMember> = running
        .iter()
        .filter(|p| !current || of_attempt(p))
        .filter_map(|p| p.member.as_ref())
        .collect();
    let first = source.first()?;
    if first.cluster_queue.is_empty() {
        return None;
    }
    let pod_sets = job
        .spec
        .pod_sets
        .iter()
        .map(|set| {
            let member = source
                .iter()
                .find(|m| m.pod_set == set.name)
                .unwrap_or(first);
            let (nodes, mut devices): (Vec<String>, Vec<Vec<u32>>) = if current {
                index
                    .pods_of(key)
                    .filter_map(|(_, p)| {
                        let m = p.member.as_ref()?;
                        let unended = matches!(p.phase, PodPhase::Pending | PodPhase::Running);
                        let node = p.node.clone().or_else(|| m.pinned.clone())?;
                        (m.attempt == attempt && m.pod_set == set.name && unended)
                            .then(|| (node, m.devices.clone()))
                    })
                    .unzip()
            } else {
                (Vec::new(), Vec::new())
            };
            if devices.iter().all(Vec::is_empty) {
                devices.clear();
            }
            PodSetPlacement {
                name: set.name.clone(),
                flavor: member.flavor.clone(),
                domain: member.domain.clone(),
                nodes,
                devices,
            }
        })
        .collect();
    Some(Holding {
        cluster_queue: first.cluster_queue.clone(),
        since,
        pod_sets,
    })
}

/// The quota (and node) an evicted queue entry still holds for a release its Job's
/// controller may have taken in unseen: a one-pod Job let go pinned, with no gate (see
/// [`crate::workload::untaken_release`]). With it, until when the hold lasts (`None`: until
/// the Job changes). Asked only of a job that holds nothing else — its pods, once seen, hold
/// the quota themselves ([`held_by_pods`]).
pub(crate) fn held_by_untaken_release(
    index: &Index,
    job: &GpuJob,
    now_s: i64,
) -> Option<(Holding, Option<i64>)> {
    let status = job.status.as_ref()?;
    if status.admission.is_some() {
        return None;
    }
    let evicted_at = evicted_at(status)?;
    let Some(crate::workload::Run::Job(batch)) = crate::workload::behind(index, job) else {
        return None;
    };
    let attempt = status.requeue_count.checked_sub(1)?;
    let release = crate::workload::untaken_release(batch, attempt, evicted_at, now_s)?;
    let [set] = job.spec.pod_sets.as_slice() else {
        return None;
    };
    let holding = Holding {
        cluster_queue: release.cluster_queue,
        since: admitted_at(status),
        pod_sets: vec![PodSetPlacement {
            name: set.name.clone(),
            flavor: release.flavor,
            domain: release.domain,
            nodes: release.node.into_iter().collect(),
            devices: Vec::new(),
        }],
    };
    Some((holding, release.until))
}

/// When the job's latest eviction was written, seconds: the latest of its `Evicted`
/// condition's turn to True and its `QuotaReserved` or `Admitted` condition's turn to False.
/// `Evicted` stays True through the admissions after a first eviction, so a later eviction
/// leaves the first one's time on it; the admission's conditions turn False at each.
/// `None` for a job never evicted.
fn evicted_at(status: &GpuJobStatus) -> Option<i64> {
    let first = condition_time(status, conditions::EVICTED)?;
    let given_back = status
        .conditions
        .iter()
        .filter(|c| {
            (c.type_ == conditions::QUOTA_RESERVED || c.type_ == conditions::ADMITTED)
                && c.status == "False"
        })
        .map(|c| seconds(&c.last_transition_time))
        .max();
    Some(given_back.map_or(first, |t| t.max(first)))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn condition(type_: &str, status: &str, at: i64) -> Condition {
        Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            reason: "Test".to_owned(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: Time(Timestamp::from_second(at).unwrap_or_default()),
        }
    }

    #[test]
    fn a_second_eviction_is_dated_by_the_admission_it_gave_back_not_the_first_eviction() {
        let mut status = GpuJobStatus::default();
        assert_eq!(evicted_at(&status), None, "never evicted");
        status.conditions = vec![
            condition(conditions::QUOTA_RESERVED, "False", 100),
            condition(conditions::ADMITTED, "False", 100),
            condition(conditions::EVICTED, "True", 100),
        ];
        assert_eq!(evicted_at(&status), Some(100));
        // Admitted again at 200 and evicted again at 300: Evicted kept its first time.
        status.conditions = vec![
            condition(conditions::QUOTA_RESERVED, "False", 300),
            condition(conditions::ADMITTED, "False", 300),
            condition(conditions::EVICTED, "True", 100),
        ];
        assert_eq!(evicted_at(&status), Some(300));
    }
}
