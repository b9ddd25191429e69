//! Backfill reservations: the highest-priority blocked job of a BestEffortFIFO queue holds the
//! nodes and quota it will need at the earliest time they free up, and later jobs may start
//! only if they end before then or leave that capacity alone (as in Slurm's backfill).

use std::collections::BTreeMap;

use muster_api::Resources;
use muster_topology::NodeId;

use crate::job::JobId;
use crate::quota::{Booking, PreparedUsage, QuotaBook, QuotaScope};

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

    /// Whether a job of `cluster_queue` that books `booking` (made from `quota`) shares quota
    /// with the reserved job; without a booking, asked of `quota` by name.
    fn shares_quota(
        &self,
        quota: &QuotaBook,
        cluster_queue: &str,
        booking: Option<&Booking>,
    ) -> bool {
        match booking {
            Some(booking) => self.scope.is_some_and(|ours| ours.covers(booking)),
            None => self
                .scope
                .zip(quota.scope(cluster_queue))
                .is_some_and(|(ours, theirs)| ours.shares_with(theirs)),
        }
    }

    /// Whether booking `usage` (per flavor) to `cluster_queue` would leave the reserved job
    /// shorter of quota at its start than it is without it. `booking`, when given, is that
    /// usage as `quota` books it for the queue ([`QuotaBook::booking`]), booked by number
    /// instead of by names. `scratch` is overwritten with the book at the reservation's
    /// start and the usage booked into it: a book the caller keeps between checks, so that
    /// a check allocates nothing.
    pub(crate) fn would_delay(
        &self,
        scratch: &mut QuotaBook,
        quota: &QuotaBook,
        (cluster_queue, usage): (&str, &BTreeMap<String, Resources>),
        booking: Option<&Booking>,
    ) -> bool {
        if !self.shares_quota(quota, cluster_queue, booking) {
            return false;
        }
        scratch.copy_from(&self.book_at);
        match booking {
            Some(booking) => scratch.add_booking(booking),
            None => {
                for (flavor, u) in usage {
                    scratch.add(cluster_queue, flavor, u);
                }
            }
        }
        #[cfg(debug_assertions)]
        {
            let mut by_names = self.book_at.clone();
            for (flavor, u) in usage {
                by_names.add(cluster_queue, flavor, u);
            }
            debug_assert!(scratch.same_usage(&by_names), "a try booked as by names");
        }
        self.need
            .iter()
            .any(|need| scratch.shorter_than_prepared(&self.book_at, need))
    }

    /// A job was admitted later in the cycle: if it still runs when the reservation starts,
    /// its quota (`usage` per flavor, or `booking` as [`Reservation::would_delay`] takes
    /// it) counts then.
    pub(crate) fn admitted(
        &mut self,
        quota: &QuotaBook,
        (cluster_queue, usage): (&str, &BTreeMap<String, Resources>),
        booking: Option<&Booking>,
        ends: Option<i64>,
    ) {
        if self.ends_before(ends) || !self.shares_quota(quota, cluster_queue, booking) {
            return;
        }
        match booking {
            Some(booking) => self.book_at.add_booking(booking),
            None => {
                for (flavor, u) in usage {
                    self.book_at.add(cluster_queue, flavor, u);
                }
            }
        }
    }
}
