//! Muster's controller: runs the admission cycle on a Kubernetes cluster and turns its
//! decisions into gangs of pods that start together.
//!
//! The pure parts, each testable without a cluster:
//! - [`index`]: the objects admission needs, updated one watch event at a time.
//! - [`plan`]: one scheduling pass, from the index to the writes that carry it out.
//! - [`lifecycle`]: an admitted gang's health from its pods and nodes.
//! - [`release`]: the objects of one admitted gang — a headless Service and every pod, gated by
//!   `muster.dev/admission`, pinned to its node, with the environment a distributed job needs.
//! - [`status`]: job and queue statuses, only when they change.
//!
//! - [`deferred`]: waiting jobs' status writes, queued apart from the writes that move work.
//!
//! The shell around them: [`executor`] carries actions out on the API server, and [`run`]
//! watches, elects a leader, loops and serves metrics.

pub mod deferred;
pub mod executor;
pub mod index;
mod kept;
pub mod lifecycle;
pub mod metrics;
pub mod plan;
mod provision;
pub mod release;
pub mod run;
pub mod status;
