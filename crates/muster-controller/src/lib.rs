//! Muster's controller: runs the admission cycle on a Kubernetes cluster and turns its
//! decisions into gangs of pods that start together.
//!
//! - [`release`]: the objects of one admitted gang — a headless Service and every pod, gated by
//!   `muster.dev/admission`, pinned to its node, with the environment a distributed job needs.
//!
//! The watch loop, the executor and leader election build on these pure parts.

pub mod release;
