//! `Cohort`: a node of the tree through which ClusterQueues lend and borrow quota.
//!
//! ClusterQueues name their cohort in `spec.cohort`; a cohort names its parent in
//! `spec.parent`, so cohorts form trees (an organisation's departments, teams and projects).
//! A cohort that queues name but no `Cohort` object defines is a root with no quota of its
//! own: flat cohorts work as they always did.
//!
//! A cohort may hold quota itself (`spec.resourceGroups`): a shared pool on top of what its
//! children lend it. Its `borrowingLimit` and `lendingLimit` apply to the edge to its parent:
//! how much the whole subtree may take from the parent beyond what it has, and how much of
//! what the subtree has it lends up.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cluster_queue::{FairSharing, ResourceGroup};

/// A node of the cohort tree.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "muster.dev",
    version = "v1alpha1",
    kind = "Cohort",
    plural = "cohorts",
    shortname = "coh",
    category = "muster",
    status = "CohortStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "A node of the tree through which ClusterQueues lend and borrow: an optional parent, quota of its own, and limits on what its subtree borrows from and lends to the parent.",
    printcolumn(name = "Parent", type_ = "string", json_path = ".spec.parent"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct CohortSpec {
    /// The cohort this one lends to and borrows from. None: a root, which neither lends nor
    /// borrows beyond its subtree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Quota the cohort holds itself, shared by its subtree on top of what its children lend.
    /// Per resource, `borrowingLimit` caps what the whole subtree may take from the parent
    /// beyond its own quota and what its children lend it, and `lendingLimit` caps what of
    /// that the subtree lends to the parent (absent: no cap).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub resource_groups: Vec<ResourceGroup>,
    /// The cohort's weight when its parent's quota is shared fairly among its children.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_sharing: Option<FairSharing>,
}

/// What the controller reports about a Cohort.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CohortStatus {
    /// `Valid`: False (the field and the fix) when the spec fails validation or its parent
    /// does not exist or leads back to it (reason `InvalidSpec`; such a cohort acts as a
    /// root), or when a limit can never bind (reason `LimitNeverBinds`; the tree works as
    /// written).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}
