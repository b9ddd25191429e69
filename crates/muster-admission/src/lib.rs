//! Muster's admission: quotas, cohorts, ordering, backfill and preemption for whole gangs.
//!
//! - [`Job`] is a GpuJob as admission sees it: queue, priority, age, pod sets.
//! - [`Cluster`] holds every ResourceFlavor's nodes as a [`muster_topology::Topology`].
//! - [`QuotaBook`] keeps quota and usage per ClusterQueue, flavor and resource, and what
//!   the cohort tree ([`CohortTree`]) lends and borrows, in exact integer arithmetic.
//! - [`Scheduler`] keeps jobs between cycles; [`Scheduler::step`] runs a cycle and returns
//!   the [`Decision`]s that change something: admit (with flavors and nodes), provision,
//!   preempt, evict. [`Scheduler::waiting`] gives every waiting job its exact position and a
//!   [`PendingReason`] with, where the timeline knows, an ETA; [`Scheduler::cycle`] is both.
//!   A cycle costs what changed, not what waits (see [`Scheduler::step`]).
//!
//! Pure and synchronous: the time is an argument, nothing is read or written outside.

mod cluster;
mod cohorts;
mod decision;
mod job;
mod namespaces;
mod quota;
mod reservation;
mod scheduler;

pub use cluster::{Cluster, ClusterMark, with_flavor};
pub use cohorts::CohortTree;
pub use decision::{Admitted, Decision, Deferral, PendingReason, PodSetPlacement};
pub use job::{Job, JobId, mig_share_milli, quota_usage};
pub use namespaces::selects;
pub use quota::{Borrower, Flow, Limit, QuotaBook, QuotaCheck, Shortfall};
pub use scheduler::{Holding, JobState, REASONS_REFRESH_SECONDS, Scheduler, WaitingJob};
