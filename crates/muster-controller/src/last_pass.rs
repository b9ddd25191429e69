//! What the last pass left for the next to reuse: admission's scheduler as it left it, the
//! preemptors its cycle remembered, and the counts and comparisons it need not repeat while
//! nothing they read has moved. Each is a memo: dropping it costs the next pass work, never
//! a different decision (`tests/kept.rs` compares every pass with one that starts from none).

use std::collections::BTreeMap;

use crate::kept;
use crate::preemptors::Preemptors;

/// The memos of the last pass (see the module docs). Only [`crate::plan`] writes them.
#[derive(Debug, Default)]
pub(crate) struct LastPass {
    /// Admission's scheduler as the last pass left it (see [`crate::kept`]).
    pub(crate) scheduler: kept::Slot,
    /// Preemptors waiting for their victims to leave, or because waiting was cheaper, as
    /// the last pass's cycle left them: a scheduler built afresh for the next pass learns
    /// them again.
    pub(crate) preemptors: Preemptors,
    /// Pending jobs per (ClusterQueue, reason kind) as the last pass that explained every
    /// waiting job counted them; `None`: the next pass explains every waiting job.
    pub(crate) pending: Option<BTreeMap<(String, String), i64>>,
    /// The index's queue version when the last pass compared every queue status; `None`
    /// after one that left one uncompared because its write was in flight.
    pub(crate) queues_settled: Option<u64>,
    /// When the first queue status that pass held back (its figures alone moved, written
    /// lately) comes due, in seconds.
    pub(crate) queues_due: Option<i64>,
    /// The second (of the pass clock) of the last pass that explained every waiting job.
    pub(crate) explained_at: Option<i64>,
    /// Something a waiting job reads moved in a pass that did not explain (one within the
    /// second of the last explanation): the next pass in a later second explains.
    pub(crate) explain_owed: bool,
    /// The labelled Jobs the next pass looks at (see [`crate::entries::Revisit`]).
    pub(crate) revisit_entries: crate::entries::Revisit,
}

impl LastPass {
    /// Forgets the counts and comparisons (not the preemptors, which the jobs' statuses do
    /// not show within a term): the next pass explains every waiting job and compares every
    /// queue status again. Done whenever every job is settled afresh.
    pub(crate) fn forget_counts(&mut self) {
        self.pending = None;
        self.queues_settled = None;
    }

    /// A new leadership term: the counts are the old term's, and the preemptors are
    /// learned again from the jobs' statuses.
    pub(crate) fn start_term(&mut self) {
        self.forget_counts();
        self.preemptors.start_term();
    }
}

impl Clone for LastPass {
    /// A copy keeps the preemptors only: its first pass builds the scheduler afresh,
    /// explains every job and compares every queue, which decides the same.
    fn clone(&self) -> LastPass {
        LastPass {
            preemptors: self.preemptors.clone(),
            ..LastPass::default()
        }
    }
}
