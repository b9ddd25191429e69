//! Muster's controller: runs the admission cycle on a Kubernetes cluster and turns its
//! decisions into gangs of pods that start together.
//!
//! The modules form layers, each using only those below it (the workspace's `tests/layers.rs`
//! holds them to it). From the bottom:
//! - [`index`]: what the cluster shows — the objects admission needs, updated one watch event
//!   at a time. It knows nothing of passes or writes.
//! - [`release`], [`status`], [`lifecycle`]: the objects of one admitted gang (a headless
//!   Service and every pod, gated by `muster.dev/admission`, pinned to its node); job and
//!   queue statuses, only when they change; an admitted gang's health from its pods and nodes;
//!   [`unreachable`](mod@unreachable): what a job says while it waits for old pods on nodes
//!   that stopped reporting.
//! - [`action`] and [`ledger`]: the writes a pass plans, and those in flight (by leadership
//!   term); [`deferred`]: waiting jobs' status writes, queued apart from the writes that move
//!   work.
//! - [`job`]: one job's lifecycle as a state machine, from what the cluster shows for it to
//!   its phase and next step.
//! - `seats`, `preemptors`, `kept` and `last_pass`: what the last pass left — every job's
//!   seat (how the pass that settled it left it, so that a pass settles only the jobs whose
//!   inputs changed), and memos the next pass may reuse (admission's scheduler, the preemptors
//!   its cycle remembered, counts it need not repeat).
//! - [`state`]: the four rooms together — index, ledger, seats, last pass — each owning one
//!   kind of fact; watches and landings come in here.
//! - [`plan`]: one scheduling pass — settle the jobs whose inputs changed (`settle`), run
//!   admission's cycle (`kept`), turn decisions into writes (`decide`), write queue statuses
//!   (`queues`).
//!
//! The shell around them: [`executor`] carries actions out on the API server (a job's status
//! only onto the version its pass read), `writes` sends a pass's actions to it and lands
//! their outcomes in the state, and [`run`] watches, elects a leader, loops and serves
//! metrics.

pub mod action;
mod decide;
pub mod deferred;
mod ends;
pub mod entries;
pub mod event_budget;
pub mod executor;
mod figure_budget;
pub mod forecasting;
pub mod hami;
mod holding;
pub mod index;
pub mod job;
mod kept;
mod last_pass;
pub mod leadership;
pub mod lean;
pub mod ledger;
pub mod lifecycle;
pub mod metrics;
pub mod plan;
mod preemptors;
mod provision;
mod queues;
pub mod release;
pub mod run;
mod seats;
mod settle;
mod shared;
pub mod state;
pub mod status;
pub mod summary;
pub mod unreachable;
pub mod visibility;
pub mod visibility_server;
mod visibility_tls;
pub mod workload;
mod writes;
