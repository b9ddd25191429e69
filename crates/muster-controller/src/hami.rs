//! HAMi, the device plugin and scheduler extender that hands GPUs out in parts: which GPU
//! devices a node has (HAMi's own node annotation), and pinning a share pod to the device
//! Muster counted it on, so that HAMi's choice and Muster's books agree.

use k8s_openapi::api::core::v1::Pod;

use crate::release::{GPU_DEVICES_ANNOTATION, parse_devices};

/// The node annotation in which HAMi's device plugin registers the node's NVIDIA GPUs: one
/// entry per device, in device order — `UUID,split,memory,cores,type,numa,healthy` entries
/// joined by `:` (older releases), or a JSON list of objects with the UUID in `id`.
pub const NODE_REGISTER_ANNOTATION: &str = "hami.io/node-nvidia-register";

/// The pod annotation that tells HAMi which GPUs (by UUID, joined by `,`) a pod may use.
pub const USE_GPU_UUID_ANNOTATION: &str = "nvidia.com/use-gpuuuid";

/// The device UUIDs of a node's register annotation, in device order; empty when it lists
/// none Muster can read.
pub fn device_uuids(text: &str) -> Vec<String> {
    let text = text.trim();
    if text.starts_with('[') {
        let Ok(serde_json::Value::Array(devices)) = serde_json::from_str(text) else {
            return Vec::new();
        };
        return devices
            .iter()
            .filter_map(|d| d.get("id").and_then(serde_json::Value::as_str))
            .map(str::to_owned)
            .collect();
    }
    text.split(':')
        .filter_map(|entry| entry.split(',').next())
        .map(str::trim)
        .filter(|uuid| !uuid.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Pins each pod Muster counted on GPU devices (its `muster.dev/gpu-devices` annotation) to
/// those devices' UUIDs on its node, as `uuids` gives them per node name: HAMi then places
/// the pod's vGPU on the very device Muster booked. A pod whose node's UUIDs are unknown, or
/// that names a device the node does not list, is left for HAMi to choose.
pub fn pin_devices<'a>(pods: &mut [Pod], uuids: impl Fn(&str) -> Option<&'a [String]>) {
    for pod in pods {
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_selector.as_ref())
            .and_then(|s| s.get(muster_api::resource_flavor::HOSTNAME_LABEL))
            .cloned();
        let annotations = pod
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        let devices = annotations
            .get(GPU_DEVICES_ANNOTATION)
            .and_then(|d| parse_devices(d))
            .unwrap_or_default();
        let (Some(node), false) = (node, devices.is_empty()) else {
            continue;
        };
        let Some(known) = uuids(&node) else { continue };
        let pinned: Option<Vec<&str>> = devices
            .iter()
            .map(|d| known.get(usize::try_from(*d).ok()?).map(String::as_str))
            .collect();
        if let Some(pinned) = pinned {
            annotations.insert(USE_GPU_UUID_ANNOTATION.to_owned(), pinned.join(","));
        }
    }
}
