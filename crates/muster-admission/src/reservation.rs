//! Backfill reservations: the highest-priority blocked job of a BestEffortFIFO queue holds the
//! nodes and quota it will need at the earliest time they free up, and later jobs may start
//! only if they end before then or leave that capacity alone (as in Slurm's backfill).

use std::collections::BTreeMap;

use muster_api::Resources;
use muster_topology::NodeId;

use crate::job::JobId;
use crate::quota::{PreparedUsage, QuotaBook, QuotaScope};

/// Capacity held for a blocked job within one cycle.
#[derive(Clone, Debug)]
pub(crate) struct Reservation {
    /// The job it is held for.
    pub(crate) job: JobId,
    /// The quota a check for that queue reads ([`QuotaBook::scope`]): a job of a queue
    /// outside it can never delay the reservation.
    pub(crate) scope: Option<QuotaScope>,
    /// When the capacity frees up; `None` when only jobs without a known runtime would free it.
    pub(crate) until: Option<i64>,
    /// (flavor, nodes) it will take, as ids in the flavor's topology: a cycle fills them for
    /// every job it tries while the reservation binds, so they are looked up by name once.
    pub(crate) nodes: Vec<(String, Vec<NodeId>)>,
    /// The quota usage it will take, per flavor, prepared in the book's numbers
    /// ([`QuotaBook::prepare`]): every job a cycle tries while the reservation binds asks
    /// whether it would leave it shorter, and a cycle does not change the book's layout.
    pub(crate) need: Vec<PreparedUsage>,
    /// The quota book as it will be at `until`: today's, minus what ends by then, plus what
    /// is admitted later in this cycle and still runs then.
    pub(crate) book_at: QuotaBook,
}

impl Reservation {
    /// Whether a job ending at `ends` is done before the reservation starts.
    pub(crate) fn ends_before(&self, ends: Option<i64>) -> bool {
        matches!((ends, self.until), (Some(e), Some(t)) if e <= t)
    }

    fn shares_quota(&self, quota: &QuotaBook, cluster_queue: &str) -> bool {
        self.scope
            .zip(quota.scope(cluster_queue))
            .is_some_and(|(ours, theirs)| ours.shares_with(theirs))
    }

    /// Whether booking `usage` (per flavor) to `cluster_queue` would leave the reserved job
    /// shorter of quota at its start than it is without it. `scratch` is overwritten with
    /// the book at the reservation's start and the usage booked into it: a book the caller
    /// keeps between checks, so that a check allocates nothing.
    pub(crate) fn would_delay(
        &self,
        scratch: &mut QuotaBook,
        quota: &QuotaBook,
        cluster_queue: &str,
        usage: &BTreeMap<String, Resources>,
    ) -> bool {
        if !self.shares_quota(quota, cluster_queue) {
            return false;
        }
        scratch.copy_from(&self.book_at);
        for (flavor, u) in usage {
            scratch.add(cluster_queue, flavor, u);
        }
        self.need
            .iter()
            .any(|need| scratch.shorter_than_prepared(&self.book_at, need))
    }

    /// A job was admitted later in the cycle: if it still runs when the reservation starts,
    /// its quota counts then.
    pub(crate) fn admitted(
        &mut self,
        quota: &QuotaBook,
        cluster_queue: &str,
        usage: &BTreeMap<String, Resources>,
        ends: Option<i64>,
    ) {
        if self.ends_before(ends) || !self.shares_quota(quota, cluster_queue) {
            return;
        }
        for (flavor, u) in usage {
            self.book_at.add(cluster_queue, flavor, u);
        }
    }
}
