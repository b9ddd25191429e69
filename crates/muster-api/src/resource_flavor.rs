//! `ResourceFlavor`: a kind of capacity (GPU model, TPU generation, node pool) and its topology.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The usual GKE topology levels, widest first.
pub const GKE_TOPOLOGY_LEVELS: &[&str] = &[
    "cloud.google.com/gce-topology-block",
    "cloud.google.com/gce-topology-subblock",
    "cloud.google.com/gce-topology-host",
    HOSTNAME_LABEL,
];
/// The usual AWS topology levels, widest first.
pub const AWS_TOPOLOGY_LEVELS: &[&str] = &[
    "topology.k8s.aws/network-node-layer-1",
    "topology.k8s.aws/network-node-layer-2",
    "topology.k8s.aws/network-node-layer-3",
    HOSTNAME_LABEL,
];
/// The node label that names a node: the narrowest topology level.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// A kind of capacity: which nodes it is, how to get onto them, and how they are wired.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "muster.dev",
    version = "v1alpha1",
    kind = "ResourceFlavor",
    plural = "resourceflavors",
    shortname = "rf",
    category = "muster",
    status = "ResourceFlavorStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "A kind of capacity: the nodes that carry it (by label), the taints they have and tolerations pods need, and their network topology levels.",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ResourceFlavorSpec {
    /// Labels a node must have to be of this flavor; pods get them as node selectors.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_labels: BTreeMap<String, String>,
    /// Taints the flavor's nodes carry; pods that do not tolerate them are not given this flavor.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_taints: Vec<Taint>,
    /// Tolerations added to every pod admitted with this flavor.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Node label keys of the topology levels, widest first (block, sub-block, host name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub topology_levels: Vec<String>,
}

/// What the controller says of a ResourceFlavor.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceFlavorStatus {
    /// `Valid`: False (reason `InvalidSpec`, the field and the fix) when the spec fails
    /// validation; such a flavor places nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}
