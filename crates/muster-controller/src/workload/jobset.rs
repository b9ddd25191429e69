//! The JobSet behind a queue entry: how it is read, held, released and let go. A JobSet is
//! held and released like a Job, through the pod templates of its replicated Jobs — one write
//! that tests each replicated Job's name and sets only what a suspended JobSet's templates
//! may take — and its child Jobs are its controller's (their pods carry what the release
//! wrote). The entry has one pod set per replicated Job (`replicas` whole TPU slices for a
//! TPU one), or one per replica (`<name>-<i>`) under an exclusive topology; a pod is placed by
//! its replicated Job, its replica (`jobset.sigs.k8s.io/job-index`) and its completion index.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{PodTemplateSpec, Toleration};
use muster_admission::PodSetPlacement;
use muster_api::jobset::{JobSet, ReplicatedJob};
use muster_api::wire::{
    ATTEMPT_LABEL, CLUSTER_QUEUE_ANNOTATION, DOMAIN_ANNOTATION, FLAVOR_ANNOTATION, JOB_LABEL,
    POD_SET_LABEL,
};
use muster_api::workload::pods_per_job;
use muster_api::{GpuJob, ObjectRef, ResourceFlavorSpec};
use serde_json::{Value, json};

use super::{Additions, WorkloadPatch, list, same_scheduling, wanted_template};
use crate::index::{ChildRecord, GangMember};

/// How a JobSet's run ended, from its conditions (`Completed`, `Failed`) or terminal state;
/// `None` while neither holds.
pub fn finished(jobset: &JobSet) -> Option<(bool, String)> {
    let status = jobset.status.as_ref()?;
    let condition = status
        .conditions
        .iter()
        .filter(|c| c.status == "True")
        .find(|c| c.type_ == "Completed" || c.type_ == "Failed");
    match (condition, status.terminal_state.as_deref()) {
        (Some(c), _) if c.type_ == "Completed" => Some((true, "the JobSet completed".to_owned())),
        (Some(c), _) => Some((
            false,
            format!(
                "the JobSet failed: {}",
                if c.message.is_empty() {
                    c.reason.as_str()
                } else {
                    c.message.as_str()
                }
            ),
        )),
        (None, Some("Completed")) => Some((true, "the JobSet completed".to_owned())),
        (None, Some("Failed")) => Some((false, "the JobSet failed".to_owned())),
        _ => None,
    }
}

/// Whether the JobSet's controller counts a child Job of it active. Its pods, which carry
/// the entry's job label once released, are asked of the index as well.
pub fn may_have_pods(jobset: &JobSet) -> bool {
    jobset
        .status
        .as_ref()
        .is_some_and(|s| s.replicated_jobs_status.iter().any(|r| r.active > 0))
}

/// Whether a replicated Job's pod template still carries what a release wrote.
pub fn carries_release(jobset: &JobSet) -> bool {
    jobset.spec.replicated_jobs.iter().any(|rj| {
        pod_template(rj)
            .and_then(|t| t.metadata.as_ref())
            .and_then(|m| m.labels.as_ref())
            .is_some_and(|l| l.contains_key(JOB_LABEL))
    })
}

/// The pod template of a replicated Job.
fn pod_template(rj: &ReplicatedJob) -> Option<&PodTemplateSpec> {
    rj.template.spec.as_ref().map(|s| &s.template)
}

/// Whether pod set `set` is made of the replicated Job named `rj`: named like it, or
/// `<rj>-<replica>`.
fn made_of(set: &str, rj: &str) -> bool {
    set == rj
        || set
            .strip_prefix(rj)
            .and_then(|rest| rest.strip_prefix('-'))
            .is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
}

/// The replica a pod set of the replicated Job `rj` stands for: `Some(i)` for `<rj>-<i>`,
/// `None` for the set named like `rj` (all its replicas).
fn replica_of(set: &str, rj: &str) -> Option<usize> {
    set.strip_prefix(rj)?.strip_prefix('-')?.parse().ok()
}

/// The pod sets of `sets` made of the replicated Job `rj`: the one named like it when there
/// is one, else one per replica.
fn sets_of<'a, T>(sets: &'a [T], name: impl Fn(&T) -> &str, rj: &str) -> Vec<&'a T> {
    if let Some(whole) = sets.iter().find(|s| name(s) == rj) {
        return vec![whole];
    }
    sets.iter().filter(|s| made_of(name(s), rj)).collect()
}

/// The first of the entry's pod sets made of the replicated Job `rj`: the template it
/// recorded of it.
fn first_set<'a>(entry: &'a GpuJob, rj: &str) -> Option<&'a muster_api::gpujob::PodSet> {
    sets_of(&entry.spec.pod_sets, |s| &s.name, rj)
        .first()
        .copied()
}

/// Whether the JobSet's owner edited it since `entry` read it: its replicated Jobs, their
/// replicas or pods per Job, or what a suspended JobSet's templates may take. Or whether
/// child Jobs completed since (an evicted JobSet is queued for the rest alone:
/// [`JobSet::replicas_left`]).
pub fn edited_since(entry: &GpuJob, jobset: &JobSet) -> bool {
    let recorded = &entry.spec.pod_sets;
    let mut matched = 0;
    for rj in &jobset.spec.replicated_jobs {
        if jobset.is_done(rj) {
            // Queued for no more: an entry that still records it reads the JobSet again.
            continue;
        }
        let sets = sets_of(recorded, |s| &s.name, &rj.name);
        matched += sets.len();
        let per_job = rj.template.spec.as_ref().map_or(1, pods_per_job);
        let replicas = jobset.replicas_left(rj);
        let counts_hold = match sets.as_slice() {
            [whole] if whole.name == rj.name => whole.count == replicas.saturating_mul(per_job),
            each => {
                i32::try_from(each.len()).is_ok_and(|n| n == replicas)
                    && each.iter().all(|s| s.count == per_job)
            }
        };
        let Some(first) = sets.first() else {
            return true;
        };
        if !counts_hold || !same_scheduling(pod_template(rj), Some(&first.template)) {
            return true;
        }
    }
    matched != recorded.len()
}

/// Whether every replicated Job's template is what [`template_patch`] would make it from
/// `entry` with `placement`'s additions: nothing to write.
pub fn templates_are(entry: &GpuJob, jobset: &JobSet, placement: Option<&Placement<'_>>) -> bool {
    jobset.spec.replicated_jobs.iter().all(|rj| {
        let Some(recorded) = first_set(entry, &rj.name) else {
            return true;
        };
        let additions = placement.and_then(|p| p.additions(&rj.name).ok());
        let wanted = wanted_template(&recorded.template, additions.as_ref());
        same_scheduling(pod_template(rj), Some(&wanted))
    })
}

/// Where a JobSet's gang was placed, to be written into its replicated Jobs' templates.
#[derive(Clone, Debug)]
pub struct Placement<'a> {
    /// The entry's name (the gang's job label).
    pub entry: &'a str,
    /// The ClusterQueue that admitted it.
    pub cluster_queue: &'a str,
    /// Every pod set as admission placed it.
    pub pod_sets: &'a [PodSetPlacement],
    /// The flavors, by name.
    pub flavors: &'a BTreeMap<String, ResourceFlavorSpec>,
    /// The attempt (the entry's `requeueCount`).
    pub attempt: i32,
}

impl Placement<'_> {
    /// What the release adds to the template of the replicated Job `rj`. Its replicas share
    /// one template, so when they were placed on several flavors it carries the node labels
    /// all of them have and the tolerations any needs (each pod's node is named when it is
    /// let go); an error when one of its pod sets was not placed, or on an unknown flavor.
    pub fn additions(&self, rj: &str) -> Result<Additions, String> {
        let placed = sets_of(self.pod_sets, |p| &p.name, rj);
        let first = placed
            .first()
            .ok_or_else(|| format!("replicated Job {rj} has no pod set in the admission"))?;
        let mut node_labels: Option<BTreeMap<String, String>> = None;
        let mut tolerations: Vec<Toleration> = Vec::new();
        for set in &placed {
            let flavor = self
                .flavors
                .get(&set.flavor)
                .ok_or_else(|| format!("flavor {} is unknown", set.flavor))?;
            node_labels = Some(match node_labels {
                None => flavor.node_labels.clone(),
                Some(mut common) => {
                    common.retain(|k, v| flavor.node_labels.get(k) == Some(v));
                    common
                }
            });
            for toleration in &flavor.tolerations {
                if !tolerations.contains(toleration) {
                    tolerations.push(toleration.clone());
                }
            }
        }
        let one_set = placed.len() == 1;
        let mut annotations = BTreeMap::from([(
            CLUSTER_QUEUE_ANNOTATION.to_owned(),
            self.cluster_queue.to_owned(),
        )]);
        if placed.iter().all(|p| p.flavor == first.flavor) {
            annotations.insert(FLAVOR_ANNOTATION.to_owned(), first.flavor.clone());
        }
        if one_set {
            annotations.insert(
                DOMAIN_ANNOTATION.to_owned(),
                muster_api::wire::format_domain(&first.domain),
            );
        }
        Ok(Additions {
            labels: BTreeMap::from([
                (JOB_LABEL.to_owned(), self.entry.to_owned()),
                // Each pod is labelled with its own pod set when it is let go.
                (POD_SET_LABEL.to_owned(), rj.to_owned()),
                (ATTEMPT_LABEL.to_owned(), self.attempt.to_string()),
            ]),
            annotations,
            node_labels: node_labels.unwrap_or_default(),
            tolerations,
            // A replicated Job's template is shared by its replicas' pods: always gated.
            pin: None,
        })
    }
}

/// The JSON patch that makes every replicated Job's pod template what `entry` recorded, with
/// `placement`'s additions when given, and sets `spec.suspend` to `suspend`. Each replicated
/// Job's name is tested first, so a JobSet whose replicated Jobs moved is not written; only
/// the template's metadata, node selector, tolerations and scheduling gates are set. An
/// error when a replicated Job cannot be placed.
pub fn release_patch(
    entry: &GpuJob,
    jobset: &JobSet,
    placement: &Placement<'_>,
) -> Result<WorkloadPatch, String> {
    patch(entry, jobset, Some(placement), false)
}

/// The JSON patch of [`release_patch`] without a placement: the templates put back.
pub fn template_patch(
    entry: &GpuJob,
    jobset: &JobSet,
    placement: Option<&Placement<'_>>,
    suspend: bool,
) -> WorkloadPatch {
    patch(entry, jobset, placement, suspend).unwrap_or_else(|_| WorkloadPatch::suspend())
}

fn patch(
    entry: &GpuJob,
    jobset: &JobSet,
    placement: Option<&Placement<'_>>,
    suspend: bool,
) -> Result<WorkloadPatch, String> {
    let mut ops = Vec::new();
    for (i, rj) in jobset.spec.replicated_jobs.iter().enumerate() {
        if placement.is_some() && jobset.is_done(rj) {
            // Its child Jobs all completed: none of the gang is made of it, and its template
            // was put back before the entry was read again.
            continue;
        }
        let Some(recorded) = first_set(entry, &rj.name) else {
            if placement.is_some() {
                return Err(format!(
                    "replicated Job {} is not in the queue entry; it is read again once the JobSet is suspended",
                    rj.name
                ));
            }
            continue;
        };
        let additions = placement.map(|p| p.additions(&rj.name)).transpose()?;
        let wanted = wanted_template(&recorded.template, additions.as_ref());
        let at = format!("/spec/replicatedJobs/{i}/template/spec/template");
        let spec = wanted.spec.unwrap_or_default();
        ops.push(json!({"op": "test", "path": format!("/spec/replicatedJobs/{i}/name"), "value": rj.name}));
        ops.push(json!({"op": "add", "path": format!("{at}/metadata"),
            "value": serde_json::to_value(wanted.metadata.unwrap_or_default()).unwrap_or(Value::Null)}));
        ops.push(
            json!({"op": "add", "path": format!("{at}/spec/nodeSelector"),
            "value": spec.node_selector.unwrap_or_default()}),
        );
        ops.push(
            json!({"op": "add", "path": format!("{at}/spec/tolerations"),
            "value": list(spec.tolerations).as_array().cloned().unwrap_or_default()}),
        );
        ops.push(
            json!({"op": "add", "path": format!("{at}/spec/schedulingGates"),
            "value": list(spec.scheduling_gates).as_array().cloned().unwrap_or_default()}),
        );
    }
    ops.push(json!({"op": "add", "path": "/spec/suspend", "value": suspend}));
    Ok(WorkloadPatch::Json(Value::Array(ops)))
}

/// A completion of a child Job: its replicated Job, replica and completion index.
pub type Completion = (String, usize, usize);

/// The completions of the JobSet's child Jobs left part done by an earlier attempt: those
/// its child Jobs count succeeded (`children`, their `status.completedIndexes`; of those it
/// controls and that are not being deleted) but for the
/// places pods of attempt `attempt` hold, and those of the gang's pods that succeeded before
/// attempt `attempt` (`pods`: each pod's gang membership, and whether it succeeded), of
/// child Jobs that have completions left. An Indexed child Job keeps its completed indexes
/// through a suspension and never makes a pod for them again, so a gang released again after
/// some of a child Job's pods succeeded gets no pod for their places: [`pins`] leaves those
/// places empty instead of waiting for pods that never come. The child Job's count is the
/// witness that lasts: a succeeded pod bound to a node the autoscaler took back is deleted
/// by the pod garbage collector. A child Job all of whose completions succeeded is left out:
/// it is done, and the JobSet's status already counts it ([`JobSet::replicas_left`]).
pub fn completed_before<'a>(
    jobset: &JobSet,
    pods: impl Iterator<Item = (&'a GangMember, bool)>,
    children: impl Iterator<Item = &'a ChildRecord>,
    attempt: i32,
) -> BTreeSet<Completion> {
    let mut done: BTreeMap<(String, usize), BTreeSet<usize>> = BTreeMap::new();
    let mut current: BTreeSet<(&str, usize, usize)> = BTreeSet::new();
    for (m, succeeded) in pods {
        // By completion index: a pinned pod's index is its place in the set.
        let (Some(rj), Some(replica), Some(completion)) =
            (&m.replicated_job, m.replica, m.completion)
        else {
            continue;
        };
        if m.attempt == attempt {
            current.insert((rj.as_str(), replica, completion));
        } else if succeeded && m.attempt < attempt {
            done.entry((rj.clone(), replica))
                .or_default()
                .insert(completion);
        }
    }
    // A child Job being deleted (a restart of the JobSet's child Jobs), or left by an earlier
    // JobSet of the same name, counts nothing for this one.
    let uid = jobset.metadata.uid.as_deref();
    for child in children.filter(|c| c.counts_for(uid)) {
        // A completion of this attempt is not one done before it.
        let before = child
            .completed
            .iter()
            .filter(|c| !current.contains(&(child.replicated_job.as_str(), child.replica, **c)));
        done.entry((child.replicated_job.clone(), child.replica))
            .or_default()
            .extend(before);
    }
    let per_job = |rj: &str| {
        jobset
            .spec
            .replicated_jobs
            .iter()
            .find(|r| r.name == rj)
            .and_then(|r| usize::try_from(r.template.spec.as_ref().map_or(1, pods_per_job)).ok())
    };
    done.into_iter()
        .filter(|((rj, _), indexes)| {
            per_job(rj).is_some_and(|n| indexes.len() < n && indexes.iter().all(|i| *i < n))
        })
        .flat_map(|((rj, replica), indexes)| {
            indexes.into_iter().map(move |i| (rj.clone(), replica, i))
        })
        .collect()
}

/// The pins that let a released JobSet's gang go: every pod of the current attempt made by
/// its child Jobs and still behind Muster's gate, matched to the admission's pod sets by
/// replicated Job and replica, and within a pod set placed by position — replica `r`'s pod
/// of completion index `c` at `r × pods per Job + c` of a set holding all replicas (pod `c`
/// on host `c` of slice `r`), at `c` of a set holding one. `None` until every pod exists.
///
/// A JobSet released again after some of its child Jobs completed makes pods of the others
/// alone, and its entry holds places for those only ([`JobSet::replicas_left`]): a set of
/// all replicas then has fewer slices, where a replica's claim past the end takes the
/// positions left in order (whole slices, as the claims are), and the sets `<name>-<k>`
/// stand for the `k`-th replica by rank among those whose pods the gang has. With every
/// replica's pods there, rank and replica agree. The completions `done` by an earlier
/// attempt ([`completed_before`]) hold their places, left empty.
pub fn pins(
    entry: &GpuJob,
    jobset: &JobSet,
    placed: &[PodSetPlacement],
    gated: &[(&ObjectRef, &GangMember)],
    done: &BTreeSet<Completion>,
) -> Option<Vec<(ObjectRef, Value)>> {
    let expected: usize = placed.iter().map(|p| p.nodes.len()).sum();
    if gated.len() + done.len() != expected {
        return None;
    }
    let mut out = Vec::with_capacity(expected);
    for set in placed {
        let rj = jobset.spec.replicated_jobs.iter().find(|rj| {
            sets_of(placed, |p| &p.name, &rj.name)
                .iter()
                .any(|p| p.name == set.name)
        })?;
        let recorded = entry.spec.pod_sets.iter().find(|s| s.name == set.name)?;
        let per_job = usize::try_from(rj.template.spec.as_ref().map_or(1, pods_per_job)).ok()?;
        let of_rj = |m: &GangMember| m.replicated_job.as_deref() == Some(rj.name.as_str());
        // Every place of the gang: a gated pod, or a completion done before (no pod).
        let spots: Vec<(Option<usize>, usize, Option<&ObjectRef>)> = gated
            .iter()
            .filter(|(_, m)| of_rj(m))
            .map(|(pod, m)| (m.replica, m.index, Some(*pod)))
            .chain(
                done.iter()
                    .filter(|(name, _, _)| *name == rj.name)
                    .map(|(_, replica, index)| (Some(*replica), *index, None)),
            )
            .collect();
        // The replicas the gang has places of, in order: a set of one replica takes the
        // replica of its rank among them.
        let mut replicas: Vec<usize> = spots.iter().filter_map(|(r, _, _)| *r).collect();
        replicas.sort_unstable();
        replicas.dedup();
        let rank = |replica: Option<usize>| replica.and_then(|r| replicas.binary_search(&r).ok());
        let slot = replica_of(&set.name, &rj.name);
        let claims: Vec<(usize, Option<&ObjectRef>)> = spots
            .iter()
            .filter(|(replica, _, _)| slot.is_none_or(|k| rank(*replica) == Some(k)))
            .map(|&(replica, index, pod)| {
                let claim = match (slot, replica) {
                    (Some(_), _) => index,
                    (None, Some(r)) if index < per_job => r.saturating_mul(per_job) + index,
                    (None, _) => usize::MAX,
                };
                (claim, pod)
            })
            .collect();
        for (i, pod) in super::assign_positions(claims, set.nodes.len())? {
            if let Some(pod) = pod {
                out.push((pod.clone(), super::pin_patch(recorded, &set.nodes[i], i)));
            }
        }
    }
    Some(out)
}

/// Whether the queue entry's pod sets can each consume a ProvisioningRequest of their own
/// through the JobSet's templates: each replicated Job is one pod set (not one per replica,
/// whose replicas share the template the consume annotation is written into).
pub fn one_set_per_template(entry: &GpuJob, jobset: &JobSet) -> bool {
    jobset.spec.replicated_jobs.iter().all(|rj| {
        sets_of(&entry.spec.pod_sets, |s| &s.name, &rj.name)
            .iter()
            .all(|s| s.name == rj.name)
    })
}

#[cfg(test)]
mod tests;
