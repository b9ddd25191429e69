//! `LocalQueue`: a namespace's door into a ClusterQueue.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where a team submits jobs; it points at one ClusterQueue.
#[expect(
    clippy::duplicated_attributes,
    reason = "printer columns repeat `type_` by design"
)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "muster.dev",
    version = "v1alpha1",
    kind = "LocalQueue",
    plural = "localqueues",
    shortname = "lq",
    category = "muster",
    namespaced,
    status = "LocalQueueStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "A namespaced queue that GpuJobs name in spec.queueName; it submits to one ClusterQueue.",
    printcolumn(
        name = "ClusterQueue",
        type_ = "string",
        json_path = ".spec.clusterQueue"
    ),
    printcolumn(name = "Pending", type_ = "integer", json_path = ".status.pendingJobs"),
    printcolumn(
        name = "Admitted",
        type_ = "integer",
        json_path = ".status.admittedJobs"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct LocalQueueSpec {
    /// The ClusterQueue this queue submits to.
    pub cluster_queue: String,
}

/// What the controller reports about a LocalQueue.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalQueueStatus {
    /// Jobs waiting.
    #[serde(default)]
    pub pending_jobs: i32,
    /// Jobs holding quota.
    #[serde(default)]
    pub admitted_jobs: i32,
    /// Quota its jobs hold in the ClusterQueue, per flavor and resource (`borrowed` is not
    /// set: borrowing is the ClusterQueue's, not one LocalQueue's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flavors_usage: Vec<crate::cluster_queue::FlavorUsage>,
    /// Active and other conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}
