//! A pod group behind a queue entry: pods labelled `muster.dev/pod-group` and
//! `muster.dev/queue-name`, made by an operator or by hand, which wait behind Muster's gate
//! (the admission policy adds it; without the policy, create them with it). Once the group's
//! size of gated pods exists, its entry `pods-<group>` is made, owned by each of them (the
//! garbage collector deletes it with the last). There is nothing to write on release: the
//! pods exist already, so the admitted step pins each — the flavor's node labels and
//! tolerations, the gang's labels, its node — and lifts the gate, all in one burst.
//!
//! Pods cannot be suspended or made again by Muster: an eviction deletes them and the entry
//! waits for the group's size of new gated pods (an operator makes them again), and a pod
//! that fails does not restart the gang — the group ends once every pod has ended, Failed
//! if any did. A labelled pod created without the gate is not the group's: it cannot be held
//! any more.
//!
//! Kubernetes' own gang API (KEP-4671, `scheduling.k8s.io/v1alpha2` in 1.36 behind the
//! `GenericWorkload` gate) names a group the same way: pods with the queue label whose
//! `spec.schedulingGroup.podGroupName` names a PodGroup labelled with the queue are that
//! group, of the PodGroup's gang `minCount`. Muster admits and pins them like any group;
//! kube-scheduler, with `GangScheduling` on, then binds them all or none.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodSchedulingGate, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use muster_api::resource_flavor::HOSTNAME_LABEL;
use muster_api::validation::FieldError;
use muster_api::wire::{
    ADMISSION_GATE, ATTEMPT_LABEL, JOB_LABEL, POD_GROUP_LABEL, POD_INDEX_LABEL, WORKLOAD_KIND_LABEL,
};
use muster_api::workload::{
    pod_group_as_gpujob, pod_group_size, scheduling_group_as_gpujob, scheduling_group_of,
};
use muster_api::{GpuJob, ObjectRef};
use serde_json::{Value, json};

use super::{Additions, WorkloadKind};

pub use crate::index::PodGroup;

impl PodGroup {
    /// The pods waiting to be queued: behind Muster's gate, not yet released (no gang label),
    /// not being deleted — in name order.
    pub fn waiting(&self) -> impl Iterator<Item = (&ObjectRef, &Pod)> {
        self.pods.iter().filter(|(_, pod)| {
            gated(pod)
                && pod.metadata.deletion_timestamp.is_none()
                && !pod
                    .metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key(JOB_LABEL))
        })
    }

    /// Whether as many pods wait as the group's size says: its `scheduling.k8s.io`
    /// PodGroup's gang size, else the pods' own size label (an unreadable label counts as
    /// whole, so that the entry says what is wrong with it). Pods that name a PodGroup not
    /// (yet) seen wait for it.
    pub fn is_whole(&self) -> bool {
        let waiting: Vec<&Pod> = self.waiting().map(|(_, p)| p).collect();
        if let Some(declared) = self.declared {
            return usize::try_from(declared).is_ok_and(|n| n > 0 && waiting.len() >= n);
        }
        let Some(first) = waiting.first() else {
            return false;
        };
        if scheduling_group_of(first).is_some() && pod_group_size(first).is_none() {
            return false;
        }
        match pod_group_size(first).and_then(|s| s.parse::<usize>().ok()) {
            Some(size) => waiting.len() >= size,
            None => true,
        }
    }

    /// The queue entry of the group `name`: its waiting pods read as one pod set (the first
    /// `size` of them by name), owned by each of them. Every problem with the pod's field.
    pub fn entry(&self, name: &str) -> Result<GpuJob, Vec<FieldError>> {
        let waiting: Vec<&Pod> = self.waiting().map(|(_, p)| p).collect();
        let mut entry = match self.declared {
            Some(min_count) => scheduling_group_as_gpujob(name, min_count, &waiting)?,
            None => pod_group_as_gpujob(name, &waiting)?,
        };
        let count = entry
            .spec
            .pod_sets
            .first()
            .and_then(|s| usize::try_from(s.count).ok())
            .unwrap_or(0);
        let owners = waiting
            .iter()
            .take(count)
            .map(|pod| OwnerReference {
                api_version: "v1".to_owned(),
                kind: "Pod".to_owned(),
                name: pod.metadata.name.clone().unwrap_or_default(),
                uid: pod.metadata.uid.clone().unwrap_or_default(),
                controller: Some(false),
                block_owner_deletion: Some(false),
            })
            .collect();
        entry.metadata = ObjectMeta {
            name: Some(WorkloadKind::PodGroup.entry_name(name)),
            namespace: waiting.first().and_then(|p| p.metadata.namespace.clone()),
            labels: Some(BTreeMap::from([
                (
                    WORKLOAD_KIND_LABEL.to_owned(),
                    WorkloadKind::PodGroup.label().to_owned(),
                ),
                (POD_GROUP_LABEL.to_owned(), name.to_owned()),
            ])),
            owner_references: Some(owners),
            ..ObjectMeta::default()
        };
        Ok(entry)
    }

    /// Whether the group's waiting pods read otherwise than `entry` recorded: asked only
    /// while the group is whole (between attempts it has no pods to read).
    pub fn edited_since(&self, name: &str, entry: &GpuJob) -> bool {
        self.is_whole()
            && self
                .entry(name)
                .map_or(true, |fresh| fresh.spec.pod_sets != entry.spec.pod_sets)
    }

    /// What the group's pods say of a problem reported on them (the first pod's annotation).
    pub fn reported(&self) -> Option<&String> {
        self.pods.values().find_map(|p| {
            p.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(super::INVALID_ANNOTATION))
        })
    }
}

/// Whether `pod` carries Muster's scheduling gate.
fn gated(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.name == ADMISSION_GATE))
}

/// The pins that release a group's gang of `nodes`, as the admission placed it, with
/// `additions` (the flavor and the gang's labels) for attempt `attempt` of entry `entry`:
/// pods of this attempt already let go keep their positions, waiting pods take the rest in
/// name order. `None` until enough pods wait — and once every position is taken.
pub fn pins(
    group: &PodGroup,
    entry: &str,
    attempt: i32,
    nodes: &[String],
    additions: &Additions,
) -> Option<Vec<(ObjectRef, Value)>> {
    let ours = |pod: &Pod| {
        let labels = pod.metadata.labels.as_ref();
        labels.and_then(|l| l.get(JOB_LABEL)).map(String::as_str) == Some(entry)
            && labels.and_then(|l| l.get(ATTEMPT_LABEL)) == Some(&attempt.to_string())
    };
    let mut claims: Vec<(usize, &ObjectRef)> = group
        .pods
        .iter()
        .filter(|(_, pod)| ours(pod) && !gated(pod) && pod.metadata.deletion_timestamp.is_none())
        .map(|(key, pod)| {
            let index = pod
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(POD_INDEX_LABEL))
                .and_then(|i| i.parse().ok())
                .unwrap_or(usize::MAX);
            (index, key)
        })
        .collect();
    let placed = claims.len();
    if placed >= nodes.len() {
        return None;
    }
    claims.extend(
        group
            .waiting()
            .take(nodes.len() - placed)
            .map(|(key, _)| (usize::MAX, key)),
    );
    let positions = super::assign_positions(claims, nodes.len())?;
    Some(
        positions
            .into_iter()
            .filter_map(|(i, key)| {
                let pod = group.pods.get(key).filter(|p| gated(p))?;
                Some((key.clone(), pin_patch(pod, additions, &nodes[i], i)))
            })
            .collect(),
    )
}

/// The merge patch that lets one waiting pod of a group go: the gang's labels and the
/// admission's annotations, the flavor's node labels and tolerations beside its own, pinned
/// to `node`, numbered `index`, without Muster's gate (its other gates stay). Only what a
/// gated pod may still take.
pub fn pin_patch(pod: &Pod, additions: &Additions, node: &str, index: usize) -> Value {
    let spec = pod.spec.clone().unwrap_or_default();
    let mut labels = additions.labels.clone();
    labels.insert(POD_INDEX_LABEL.to_owned(), index.to_string());
    let mut selector = additions.node_labels.clone();
    selector.insert(HOSTNAME_LABEL.to_owned(), node.to_owned());
    let mut tolerations: Vec<Toleration> = spec.tolerations.unwrap_or_default();
    for toleration in &additions.tolerations {
        if !tolerations.contains(toleration) {
            tolerations.push(toleration.clone());
        }
    }
    let gates: Vec<PodSchedulingGate> = spec
        .scheduling_gates
        .unwrap_or_default()
        .into_iter()
        .filter(|g| g.name != ADMISSION_GATE)
        .collect();
    json!({
        "metadata": {"labels": labels, "annotations": additions.annotations},
        "spec": {
            "nodeSelector": selector,
            "tolerations": super::list(Some(tolerations)),
            "schedulingGates": super::list(Some(gates)),
        },
    })
}

#[cfg(test)]
mod tests;
