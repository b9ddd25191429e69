//! The cluster autoscaler's `ProvisioningRequest` (`autoscaling.x-k8s.io/v1`), written by hand to
//! match the upstream CRD: Muster creates these objects but does not own their definition.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A request to the cluster autoscaler for capacity for a set of pods, all or nothing.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "autoscaling.x-k8s.io",
    version = "v1",
    kind = "ProvisioningRequest",
    plural = "provisioningrequests",
    namespaced,
    status = "ProvisioningRequestStatus",
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct ProvisioningRequestSpec {
    /// The provisioning class, e.g. `queued-provisioning.gke.io`.
    pub provisioning_class_name: String,
    /// The pods to make room for: PodTemplates in the same namespace, with counts.
    pub pod_sets: Vec<ProvisioningPodSet>,
    /// Class-specific parameters.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, String>,
}

/// Pods of one template.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProvisioningPodSet {
    /// The PodTemplate.
    pub pod_template_ref: Reference,
    /// How many pods of it.
    pub count: i32,
}

/// A reference to an object in the same namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Reference {
    /// Its name.
    pub name: String,
}

/// What the autoscaler reports.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProvisioningRequestStatus {
    /// Accepted, Provisioned, Failed, BookingExpired, CapacityRevoked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Class-specific details, e.g. the node selectors of the capacity provisioned.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub provisioning_class_details: BTreeMap<String, String>,
}

/// ProvisioningRequest condition types.
pub mod conditions {
    /// The autoscaler accepted the request.
    pub const ACCEPTED: &str = "Accepted";
    /// The capacity exists and is booked for the request's pods.
    pub const PROVISIONED: &str = "Provisioned";
    /// The autoscaler gave up.
    pub const FAILED: &str = "Failed";
    /// The booking lapsed before the pods were scheduled.
    pub const BOOKING_EXPIRED: &str = "BookingExpired";
    /// The capacity was taken back (e.g. the maximum run duration was reached).
    pub const CAPACITY_REVOKED: &str = "CapacityRevoked";
}

/// Annotations and labels that tie pods to their request.
pub mod annotations {
    /// On a pod: the ProvisioningRequest whose capacity it consumes.
    pub const CONSUME: &str = "autoscaling.x-k8s.io/consume-provisioning-request";
    /// On a pod: the class of that request.
    pub const CLASS_NAME: &str = "autoscaling.x-k8s.io/provisioning-class-name";
}
