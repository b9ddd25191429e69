//! Muster's topology fitter: *can this gang be placed, all of it, right now — and where?*
//!
//! - [`NodeInfo`] and [`pod_usage`] read nodes and pods as the API returns them.
//! - [`Topology`] arranges one flavor's nodes in a tree of domains by topology levels, keeps free
//!   capacity per node and per domain, and journals every change so a cycle can roll back.
//! - [`PodSetRequest`] is what one pod set needs: count, per-pod requests, where it may go, and a
//!   [`Constraint`] (required level, preferred level, TPU slices, or none).
//! - [`place`] puts a whole gang down or explains, as a [`NoFit`], why it cannot.
//! - [`Policy`] chooses among domains: [`BestFit`] (default), [`Spread`] or
//!   [`FragmentationAware`].
//! - [`shared`] keeps shared GPUs at device level (fractional requests, each device's free
//!   share), measures fragmentation as the FGD paper does, and chooses nodes and devices by
//!   best-fit, packing, random or fragmentation gradient descent.
//!
//! Pure and synchronous: no I/O, no clock.

mod dense;
mod fit;
mod labels;
mod node;
mod place;
mod policy;
mod request;
mod rng;
pub mod shared;
mod tpu;
mod tree;

pub use dense::{DenseRequest, on_devices};
pub use fit::{Fit, NoFit, NoFitKind, PodSetFit};
pub use node::{
    GKE_GPU_SHARING_STRATEGY, GKE_MAX_SHARED_CLIENTS, HAMI_NODE_LABEL, InputError, MAX_GPU_DEVICES,
    NVIDIA_GPU_COUNT, NVIDIA_GPU_REPLICAS, NodeInfo, pod_usage,
};
pub use place::{PlaceScratch, place, place_reusing};
pub use policy::{
    BestFit, FragmentationAware, POLICY_NAMES, Policy, SHARE_SEED, SharePlacement, Spread, Unit,
    by_name,
};
pub use request::{
    Constraint, Eligibility, Mismatch, PodSetRequest, RequestError, needs_whole_gpus, tolerated,
};
pub use rng::{Rng, text_seed, text_seed_joined};
pub use tree::{Domain, DomainId, KeepOff, Mark, NodeId, NodeState, Topology};
