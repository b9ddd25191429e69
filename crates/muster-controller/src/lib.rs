//! Muster's controller: runs the admission cycle on a Kubernetes cluster and turns its
//! decisions into gangs of pods that start together.
//!
//! - [`release`]: the objects of one admitted gang — a headless Service and every pod, gated by
//!   `muster.dev/admission`, pinned to its node, with the environment a distributed job needs.
//! - [`status`]: a GpuJob's status from admission's decisions, only when it changes.
//!
//! The watch loop, the executor and leader election build on these pure parts.

pub mod executor;
pub mod release;
pub mod status;
