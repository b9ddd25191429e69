//! Pods that run as one gang — made by an operator (Ray, Kubeflow, LeaderWorkerSet) or by
//! hand — read as the GpuJob admission sees: pods labelled [`POD_GROUP_LABEL`] `<name>` and
//! [`POD_GROUP_SIZE_LABEL`] `N` (a label or an annotation) are one pod set `main` of `N` pods,
//! asked for like a Job's with the pod's own annotations ([`crate::wire`]). The pods of one
//! group must be alike (the same resources and placement); the first by name is the
//! template.

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{Origin, pod_set, read_as_gpujob};
use crate::gpujob::GpuJob;
use crate::validation::FieldError;
use crate::wire::{
    ADMISSION_GATE, GPU_SHARE_ANNOTATION, POD_GROUP_LABEL, POD_GROUP_SIZE_LABEL, QUEUE_NAME_LABEL,
    TOPOLOGY_PREFERRED_ANNOTATION, TOPOLOGY_REQUIRED_ANNOTATION, TPU_ACCELERATOR_ANNOTATION,
    TPU_TOPOLOGY_ANNOTATION,
};

/// The name of the GpuJob the controller makes as the queue entry of the pod group `group`.
pub fn pod_group_entry_name(group: &str) -> String {
    format!("pods-{group}")
}

/// The group `pod` belongs to (its [`POD_GROUP_LABEL`]), when it has one.
pub fn pod_group_of(pod: &Pod) -> Option<&str> {
    pod.metadata
        .labels
        .as_ref()?
        .get(POD_GROUP_LABEL)
        .map(String::as_str)
}

/// The size `pod` says its group has: its [`POD_GROUP_SIZE_LABEL`] label, else the
/// annotation of that name.
pub fn pod_group_size(pod: &Pod) -> Option<&str> {
    let meta = &pod.metadata;
    meta.labels
        .as_ref()
        .and_then(|l| l.get(POD_GROUP_SIZE_LABEL))
        .or_else(|| {
            meta.annotations
                .as_ref()
                .and_then(|a| a.get(POD_GROUP_SIZE_LABEL))
        })
        .map(String::as_str)
}

/// A pod group read as the GpuJob admission sees (see the module docs): `pods` are its pods
/// in name order. Every problem with the pod's field and the fix; a pod that differs from the
/// first is named in the message.
pub fn pod_group_as_gpujob(group: &str, pods: &[&Pod]) -> Result<GpuJob, Vec<FieldError>> {
    let size_path = format!("metadata.labels[{POD_GROUP_SIZE_LABEL}]");
    let Some(first) = pods.first() else {
        return Err(vec![FieldError {
            path: format!("metadata.labels[{POD_GROUP_LABEL}]"),
            message: format!("pod group {group} has no pods"),
        }]);
    };
    let first_name = first.metadata.name.as_deref().unwrap_or_default();
    let mut errors = Vec::new();
    let size_text = pod_group_size(first);
    let said = |size: Option<&str>| size.map_or_else(|| "no size".to_owned(), |s| format!("{s:?}"));
    let size = size_text
        .and_then(|s| s.parse::<i32>().ok())
        .filter(|n| *n > 0);
    if size.is_none() {
        errors.push(FieldError {
            path: size_path.clone(),
            message: format!(
                "pod {first_name} gives {}; every pod of group {group} says how many pods the group has, a whole number of at least 1",
                said(size_text)
            ),
        });
    }
    for pod in &pods[1..] {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        if pod_group_size(pod) != size_text {
            errors.push(FieldError {
                path: size_path.clone(),
                message: format!(
                    "pod {name} says {} while pod {first_name} says {}; give every pod of the group the same size",
                    said(pod_group_size(pod)),
                    said(size_text)
                ),
            });
        }
    }
    read_group(group, pods, size, &size_path, errors)
}

/// The group `pod` belongs to as Kubernetes' own gang API names it (KEP-4671): its
/// `spec.schedulingGroup.podGroupName`, the `scheduling.k8s.io` PodGroup it is scheduled with.
pub fn scheduling_group_of(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()?
        .scheduling_group
        .as_ref()?
        .pod_group_name
        .as_deref()
}

/// Pods that name the `scheduling.k8s.io` PodGroup `group` (KEP-4671) read as the GpuJob
/// admission sees: one pod set of `min_count` pods, the PodGroup's gang size, otherwise read as
/// [`pod_group_as_gpujob`] reads a group.
pub fn scheduling_group_as_gpujob(
    group: &str,
    min_count: i32,
    pods: &[&Pod],
) -> Result<GpuJob, Vec<FieldError>> {
    let path = "spec.schedulingPolicy.gang.minCount".to_owned();
    let mut errors = Vec::new();
    if min_count < 1 {
        errors.push(FieldError {
            path: path.clone(),
            message: format!("PodGroup {group} asks for {min_count} pods; a gang needs at least 1"),
        });
    }
    read_group(
        group,
        pods,
        Some(min_count).filter(|n| *n > 0),
        &path,
        errors,
    )
}

/// The pod set of `size` pods read from `pods` (in name order, the first the template), after
/// checking they share a queue and a shape; `size_path` is where the size was read.
fn read_group(
    group: &str,
    pods: &[&Pod],
    size: Option<i32>,
    size_path: &str,
    mut errors: Vec<FieldError>,
) -> Result<GpuJob, Vec<FieldError>> {
    let Some(first) = pods.first() else {
        return Err(vec![FieldError {
            path: format!("metadata.labels[{POD_GROUP_LABEL}]"),
            message: format!("pod group {group} has no pods"),
        }]);
    };
    let first_name = first.metadata.name.as_deref().unwrap_or_default();
    let queue = |pod: &Pod| {
        pod.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(QUEUE_NAME_LABEL))
            .cloned()
    };
    for pod in &pods[1..] {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        if queue(pod) != queue(first) {
            errors.push(FieldError {
                path: format!("metadata.labels[{QUEUE_NAME_LABEL}]"),
                message: format!(
                    "pod {name} is in queue {} while pod {first_name} is in {}; one group is one queue's",
                    queue(pod).unwrap_or_default(),
                    queue(first).unwrap_or_default()
                ),
            });
        }
        if shape(pod) != shape(first) {
            errors.push(FieldError {
                path: "spec".to_owned(),
                message: format!(
                    "pod {name} asks for other resources or placement than pod {first_name}; the pods of one group must be alike (containers' resources, node selector, affinity, tolerations, priority class, Muster's annotations)"
                ),
            });
        }
    }
    let template = template_of(first);
    let origin = Origin::new("", size_path, None, &template);
    let set = pod_set(
        "main",
        &template,
        size.unwrap_or(0),
        1,
        None,
        &origin,
        &mut errors,
    );
    let meta = ObjectMeta {
        name: Some(group.to_owned()),
        namespace: first.metadata.namespace.clone(),
        labels: first.metadata.labels.clone(),
        ..ObjectMeta::default()
    };
    read_as_gpujob(&meta, vec![(set, origin)], errors).map_err(|errors| {
        errors
            .into_iter()
            .map(|e| {
                // The template is the pod itself: its fields have no prefix, and the whole
                // template is the pod's spec.
                let path = match e.path.trim_start_matches('.') {
                    "" => "spec",
                    path => path,
                };
                FieldError {
                    path: path.to_owned(),
                    message: e.message,
                }
            })
            .collect()
    })
}

/// The pod as the template of its group's pod set: its labels, annotations and spec, without
/// the node it may be bound to or Muster's gate.
fn template_of(pod: &Pod) -> PodTemplateSpec {
    let mut spec = pod.spec.clone().unwrap_or_default();
    spec.node_name = None;
    if let Some(gates) = spec.scheduling_gates.as_mut() {
        gates.retain(|g| g.name != ADMISSION_GATE);
    }
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: pod.metadata.labels.clone(),
            annotations: pod.metadata.annotations.clone(),
            ..ObjectMeta::default()
        }),
        spec: Some(spec),
    }
}

/// What must be alike across a group's pods: what each asks of a node and where it may run.
fn shape(pod: &Pod) -> (Vec<String>, PodSpec) {
    let annotations = [
        TOPOLOGY_REQUIRED_ANNOTATION,
        TOPOLOGY_PREFERRED_ANNOTATION,
        TPU_ACCELERATOR_ANNOTATION,
        TPU_TOPOLOGY_ANNOTATION,
        GPU_SHARE_ANNOTATION,
    ]
    .iter()
    .map(|key| {
        let value = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(*key))
            .cloned()
            .unwrap_or_default();
        format!("{key}={value}")
    })
    .collect();
    let spec = pod.spec.clone().unwrap_or_default();
    let resources = |containers: &[Container]| {
        containers
            .iter()
            .map(|c| Container {
                resources: c.resources.clone(),
                ..Container::default()
            })
            .collect::<Vec<_>>()
    };
    let init = spec.init_containers.as_deref().map(resources);
    let kept = PodSpec {
        containers: resources(&spec.containers),
        init_containers: init,
        node_selector: spec.node_selector,
        affinity: spec.affinity,
        tolerations: spec.tolerations,
        priority_class_name: spec.priority_class_name,
        overhead: spec.overhead,
        ..PodSpec::default()
    };
    (annotations, kept)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(name: &str, size: &str, gpus: &str) -> Pod {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "team-a",
                         "labels": {QUEUE_NAME_LABEL: "research", POD_GROUP_LABEL: "ray",
                                    POD_GROUP_SIZE_LABEL: size},
                         "annotations": {TOPOLOGY_REQUIRED_ANNOTATION: "example.com/block"}},
            "spec": {"schedulingGates": [{"name": ADMISSION_GATE}],
                     "containers": [{"name": "worker", "image": "ray:2",
                                     "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}))
        .unwrap_or_else(|e| unreachable!("{e}"))
    }

    #[test]
    fn four_alike_pods_are_one_pod_set_of_four_in_their_queue() {
        let pods: Vec<Pod> = (0..4).map(|i| pod(&format!("ray-{i}"), "4", "8")).collect();
        let refs: Vec<&Pod> = pods.iter().collect();
        let job = pod_group_as_gpujob("ray", &refs).unwrap_or_else(|e| unreachable!("{e:?}"));
        assert_eq!(job.spec.queue_name, "research");
        let [set] = job.spec.pod_sets.as_slice() else {
            unreachable!()
        };
        assert_eq!((set.name.as_str(), set.count), ("main", 4));
        let required = set.topology.as_ref().and_then(|t| t.required.as_deref());
        assert_eq!(required, Some("example.com/block"));
        let gates = set
            .template
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.clone())
            .unwrap_or_default();
        assert!(
            gates.is_empty(),
            "Muster's gate is not part of the template"
        );
        assert_eq!(pod_group_entry_name("ray"), "pods-ray");
    }

    #[test]
    fn a_missing_size_a_disagreeing_size_and_an_unlike_pod_are_each_named() {
        let pods = [pod("ray-0", "many", "8"), pod("ray-1", "4", "4")];
        let refs: Vec<&Pod> = pods.iter().collect();
        let errors = pod_group_as_gpujob("ray", &refs).err().unwrap_or_default();
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "metadata.labels[muster.dev/pod-group-size]",
                "metadata.labels[muster.dev/pod-group-size]",
                "spec",
            ],
            "{errors:?}"
        );
        assert!(errors[2].message.contains("pod ray-1"), "{errors:?}");
    }

    #[test]
    fn a_pod_s_own_fields_are_named_without_a_prefix() {
        let mut odd = pod("ray-0", "1", "8");
        odd.metadata.annotations.get_or_insert_default().insert(
            TOPOLOGY_PREFERRED_ANNOTATION.to_owned(),
            "example.com/rack".to_owned(),
        );
        let errors = pod_group_as_gpujob("ray", &[&odd])
            .err()
            .unwrap_or_default();
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["metadata.annotations"], "{errors:?}");
        assert!(errors[0].message.contains(TOPOLOGY_PREFERRED_ANNOTATION));
        let mut shared = pod("ray-0", "1", "8");
        shared
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(GPU_SHARE_ANNOTATION.to_owned(), "250m".to_owned());
        let errors = pod_group_as_gpujob("ray", &[&shared])
            .err()
            .unwrap_or_default();
        let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["spec"], "the whole pod: {errors:?}");
    }
}
