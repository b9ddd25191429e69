//! The provisioning bridge: when a job holds quota but no block of today's nodes can hold it,
//! Muster asks the cluster autoscaler for the whole block at once through the
//! `autoscaling.x-k8s.io/v1` ProvisioningRequest API — GKE's Dynamic Workload Scheduler
//! (`queued-provisioning.gke.io`), or `best-effort-atomic-scale-up.autoscaling.x-k8s.io` /
//! `check-capacity.autoscaling.x-k8s.io` elsewhere — and starts the job on that capacity.
//!
//! Pure, like the rest of Muster's core: no I/O, no clock.
//! - [`state`]: what the autoscaler's conditions mean ([`state::observe`]) and what to do
//!   next for a job ([`state::step`]), as a table of cases.
//! - [`objects`]: the PodTemplates and ProvisioningRequests to create, and what the job's pods
//!   carry to consume the capacity.

pub mod objects;
pub mod state;
