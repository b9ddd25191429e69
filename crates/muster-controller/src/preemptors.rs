//! The preemptors admission's scheduler remembers from one cycle to the next, kept by the
//! controller between passes: a scheduler built afresh for a pass (see [`crate::kept`]) knows
//! none of them, and without them a preemptor would lose what it evicted for, or wait again
//! from the start for capacity that waiting was cheaper than evicting for.
//!
//! - **Nominated**: waiting for its victims to leave; served first, what it counted on held.
//! - **Deferred**: waiting because that costs less than evicting, bounded from the time it
//!   first chose to wait. That time also survives a change of leader: the job's status
//!   shows it (`pendingReason.since` of a `PreemptionDeferred` reason), and the first
//!   scheduler of a leadership term takes it from there. Within a term the replica's own
//!   memory is what counts (a status may lag a wait that has ended since).

use std::collections::{BTreeMap, BTreeSet};

use muster_admission::Scheduler;
use muster_api::gpujob::PendingReasonKind;

use crate::index::Index;

/// The preemptors of the last pass's cycle (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Preemptors {
    /// Waiting for their victims to leave.
    nominated: BTreeSet<String>,
    /// Waiting because waiting was cheaper, with the time each first chose to.
    deferred: BTreeMap<String, i64>,
    /// Whether these are this term's own (a cycle of this term left them); until then the
    /// jobs' statuses say who waits since when.
    learned: bool,
}

impl Preemptors {
    /// What `scheduler` remembers after its cycle.
    pub(crate) fn of(scheduler: &Scheduler) -> Preemptors {
        Preemptors {
            nominated: scheduler.nominated().map(str::to_owned).collect(),
            deferred: scheduler
                .deferred()
                .map(|(id, since)| (id.to_owned(), since))
                .collect(),
            learned: true,
        }
    }

    /// A new leadership term: what another leader did meanwhile is in the jobs' statuses,
    /// which the term's first scheduler reads.
    pub(crate) fn start_term(&mut self) {
        self.learned = false;
    }

    /// Whether a kept `scheduler` remembers exactly these (and they are this term's).
    pub(crate) fn held_by(&self, scheduler: &Scheduler) -> bool {
        self.learned
            && scheduler
                .nominated()
                .eq(self.nominated.iter().map(String::as_str))
            && scheduler.deferred().eq(self
                .deferred
                .iter()
                .map(|(id, since)| (id.as_str(), *since)))
    }

    /// Tells a scheduler built afresh what the last cycle remembered and, at the start of a
    /// term, since when the jobs' statuses say they wait rather than evict.
    pub(crate) fn resume(&self, scheduler: &mut Scheduler, index: &Index) {
        for id in &self.nominated {
            scheduler.renominate(id);
        }
        for (id, since) in &self.deferred {
            scheduler.resume_deferral(id, *since);
        }
        if self.learned {
            return;
        }
        for (id, job) in &index.jobs {
            if self.nominated.contains(id.as_str()) {
                continue;
            }
            let shown = job
                .status
                .as_ref()
                .and_then(|s| s.pending_reason.as_ref())
                .filter(|r| r.kind == PendingReasonKind::PreemptionDeferred)
                .and_then(|r| r.since.as_ref());
            if let Some(since) = shown {
                scheduler.resume_deferral(id, since.0.as_second());
            }
        }
    }
}
