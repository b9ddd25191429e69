//! Muster's Kubernetes API, group `muster.dev`, version `v1alpha1`.
//!
//! - [`GpuJob`]: what teams submit — pod sets that start together or not at all.
//! - [`ClusterQueue`], [`Cohort`], [`LocalQueue`], [`ResourceFlavor`]: what admins define —
//!   quota per flavor, the tree of cohorts that lend and borrow it, ordering, preemption,
//!   provisioning, and the topology of the capacity.
//! - [`ProvisioningRequest`]: the cluster autoscaler's API, written by hand to match upstream.
//! - [`quantity`] and [`resources`]: exact, saturating resource arithmetic shared by every crate.
//! - [`validation`]: every semantic error of an object, with field paths and fixes.
//! - [`crd`]: the CustomResourceDefinitions, generated from these types.
//! - [`ObjectRef`]: the `namespace/name` reference every crate keys namespaced objects by.
//! - [`workload`] and [`jobset`]: the `batch/v1` Jobs and JobSets teams already run, read as
//!   the GpuJob admission sees.
//! - [`visibility`]: the answers of the visibility API the controller serves.
//! - [`wire`]: the labels, annotations, finalizer, gate and taints Muster puts on other objects.
//!
//! No I/O happens here.

pub mod backoff;
pub mod cluster_queue;
pub mod cohort;
pub mod crd;
pub mod document;
pub mod gpujob;
pub mod jobset;
pub mod local_queue;
pub mod manifest;
pub mod object_ref;
pub mod provisioning_request;
pub mod quantity;
pub mod resource_flavor;
pub mod resources;
pub mod tpu;
pub mod validation;
pub mod visibility;
pub mod wire;
pub mod workload;

pub use cluster_queue::{ClusterQueue, ClusterQueueSpec, ClusterQueueStatus};
pub use cohort::{Cohort, CohortSpec, CohortStatus};
pub use gpujob::{
    GpuJob, GpuJobPhase, GpuJobSpec, GpuJobStatus, PodSet, TopologyRequest, TpuSliceRequest,
};
pub use local_queue::{LocalQueue, LocalQueueSpec, LocalQueueStatus};
pub use object_ref::ObjectRef;
pub use provisioning_request::{
    ProvisioningRequest, ProvisioningRequestSpec, ProvisioningRequestStatus,
};
pub use quantity::Amount;
pub use resource_flavor::{ResourceFlavor, ResourceFlavorSpec, ResourceFlavorStatus};
pub use resources::Resources;
pub use validation::{FieldError, Validate};

/// The API group of every Muster kind.
pub const GROUP: &str = "muster.dev";
/// The API version of every Muster kind.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` as written in objects.
pub const API_VERSION: &str = "muster.dev/v1alpha1";
