//! What the last cycle found for the waiting jobs (kept in order between cycles by
//! [`super::lists`]), and every waiting job's position and reason read from it.
//!
//! A cycle decides afresh only for the jobs it serves: each queue's jobs until each job
//! shape has failed once (see [`super::CycleState::memo`]), and every job behind them of a
//! shape that failed is answered by that failure without being looked at. So the reasons the
//! last cycle found are kept per job it served and per shape it ruled out, and
//! [`Scheduler::waiting`] reads every waiting job's position and reason from them on demand.
//! Nothing there is stale: a job ruled out by its shape waits for exactly the reason an
//! identical job ahead of it was found to wait in the same cycle, and a cycle skipped because
//! nothing changed (see [`Scheduler::step`]) would have found the same.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use foldhash::fast::FixedState;

use muster_api::cluster_queue::StopPolicy;

use super::lists::{QueueList, Queued};
use super::{JobState, MemoKey, Scheduler};
use crate::decision::{Decision, PendingReason};
use crate::job::{Job, JobId};

/// A waiting job as [`Scheduler::each_waiting`] and [`Scheduler::waiting_jobs_in`] lend it.
#[derive(Clone, Debug)]
pub struct WaitingJob<'a> {
    /// The job.
    pub job: &'a Job,
    /// 1-based position among its ClusterQueue's waiting jobs.
    pub position: u32,
    /// Why it waits.
    pub reason: Cow<'a, PendingReason>,
    /// When it is expected to start, when the reservation timeline knows.
    pub eta: Option<i64>,
}

impl WaitingJob<'_> {
    /// The same as an owned [`Decision::Pending`].
    pub fn into_decision(self) -> Decision {
        Decision::Pending {
            job: self.job.id.clone(),
            position: self.position,
            reason: self.reason.into_owned(),
            eta: self.eta,
        }
    }
}

/// What the last cycle that ran found about waiting jobs.
#[derive(Clone, Debug, Default)]
pub(super) struct Found {
    /// The cycle's time.
    pub(super) now: i64,
    /// Jobs it served and left waiting: reason and ETA. Hashed: it is only looked up by id,
    /// and a cycle that serves ten thousand jobs files each of them here.
    pub(super) served: HashMap<JobId, (PendingReason, Option<i64>), FixedState>,
    /// Shapes ruled out: reservations respected (bit mask) and the reason.
    pub(super) memo: BTreeMap<MemoKey, Vec<(u64, PendingReason)>>,
    /// The reservations' start times, by index (for which ones a job respects).
    pub(super) untils: Vec<Option<i64>>,
    /// StrictFIFO queues whose head could not start.
    pub(super) strict_head: BTreeMap<String, JobId>,
    /// Per queue, the reason its first job served in the cycle waits, if it waits.
    pub(super) heads: BTreeMap<String, PendingReason>,
}

/// The reservations (by index, as a bit mask) that a job ending at `ends` must respect: those
/// it would not finish before.
pub(super) fn respected(untils: &[Option<i64>], ends: Option<i64>) -> u64 {
    untils
        .iter()
        .enumerate()
        .filter(|(_, until)| !matches!((ends, until), (Some(e), Some(t)) if e <= *t))
        .fold(0u64, |mask, (i, _)| mask | (1u64 << (i % 64)))
}

impl Scheduler {
    /// Every waiting job as the last cycle left it, as [`Decision::Pending`]: the jobs whose
    /// bought capacity is not ready for them yet (position 0), every job in a ClusterQueue with
    /// its exact position (1-based, among the jobs still waiting there; preemptors waiting for
    /// their victims first, then queue order) and reason, and jobs that cannot queue (invalid,
    /// suspended, no queue; position 0). Jobs submitted since the last cycle are not listed
    /// until a cycle has decided about them. A scheduler whose reasons are untold
    /// ([`Scheduler::reasons_untold`]) keeps none to give: it must not be asked.
    pub fn waiting(&self) -> Vec<Decision> {
        // Sized once: grown by doubling, a fleet's list took a dozen allocations a call, the
        // largest fresh pages each time.
        let listed: usize = self.lists.by_queue.values().map(QueueList::len).sum();
        let mut out = Vec::with_capacity(listed + self.holders.len());
        self.each_waiting(|waiting| out.push(waiting.into_decision()));
        out
    }

    /// [`Scheduler::waiting`]'s jobs in its order, each lent to `visit` with the reason the
    /// scheduler keeps: for callers that read every waiting job and keep little of it (the
    /// controller explaining them), no job's name or reason is copied.
    pub fn each_waiting<'a>(&'a self, mut visit: impl FnMut(WaitingJob<'a>)) {
        debug_assert!(
            self.reasons_told,
            "waiting jobs asked of a scheduler that keeps no reasons"
        );
        let found = &self.found;
        // Holders are kept unordered: the few a cycle left waiting (for bought capacity) are
        // told in id order.
        let mut held: Vec<&str> = self
            .holders
            .iter()
            .map(|id| &**id)
            .filter(|id| found.served.contains_key(*id))
            .collect();
        held.sort_unstable();
        for id in held {
            if let (Some((reason, eta)), Some(entry)) = (found.served.get(id), self.jobs.get(id)) {
                visit(WaitingJob {
                    job: &entry.job,
                    position: 0,
                    reason: Cow::Borrowed(reason),
                    eta: *eta,
                });
            }
        }
        for (id, entry) in self.jobs.iter() {
            if entry.state != JobState::Pending || self.lists.queue_of(id).is_some() {
                continue;
            }
            let job = &entry.job;
            let reason = if let Some(why) = &job.invalid {
                PendingReason::InvalidJob(why.clone())
            } else if job.suspended {
                PendingReason::Suspended
            } else {
                match self.cluster_queue_of(job) {
                    Err(why) => PendingReason::UnknownQueue(why),
                    // Listed at the next change that lists it.
                    Ok(_) => continue,
                }
            };
            visit(WaitingJob {
                job,
                position: 0,
                reason: Cow::Owned(reason),
                eta: None,
            });
        }
        for (cq, list) in &self.lists.by_queue {
            self.ranked(cq, list, &mut visit);
        }
    }

    /// ClusterQueue `cq`'s waiting jobs in order, as [`Scheduler::waiting`] lists them: only
    /// that queue's list is read (what a caller asking about one queue needs).
    pub fn waiting_in(&self, cq: &str) -> Vec<Decision> {
        let mut out = Vec::new();
        if let Some(list) = self.lists.by_queue.get(cq) {
            self.ranked(cq, list, &mut |waiting| out.push(waiting.into_decision()));
        }
        out
    }

    /// ClusterQueue `cq`'s waiting jobs in order, as [`Scheduler::waiting_in`] gives them,
    /// borrowed: no reason is copied that the scheduler already holds. For readers that look
    /// at many jobs and keep none (the visibility API).
    pub fn waiting_jobs_in(&self, cq: &str) -> Vec<WaitingJob<'_>> {
        let Some(list) = self.lists.by_queue.get(cq) else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(list.len());
        self.ranked(cq, list, &mut |waiting| out.push(waiting));
        out
    }

    /// `list`, ClusterQueue `cq`'s, lent to `visit` in order with positions: preemptors
    /// waiting for their victims first, then queue order; jobs no cycle has seen are left out.
    fn ranked<'a>(&'a self, cq: &str, list: &'a QueueList, visit: &mut impl FnMut(WaitingJob<'a>)) {
        let mut position = 0u32;
        for queued in self.in_order(list) {
            let Some((reason, eta)) = self.found_reason_ref(cq, queued) else {
                continue;
            };
            position += 1;
            visit(WaitingJob {
                job: &queued.job,
                position,
                reason,
                eta,
            });
        }
    }

    /// A queue's `list` in the order positions count: preemptors waiting for their victims
    /// first, then queue order.
    fn in_order<'a>(&'a self, list: &'a QueueList) -> impl Iterator<Item = &'a Queued> {
        let nominated = list
            .iter()
            .filter(|q| self.nominations.contains_key(&q.job.id));
        let rest = list
            .iter()
            .filter(|q| !self.nominations.contains_key(&q.job.id));
        nominated.chain(rest)
    }

    /// Why `queued` waits in `cq`, as the last cycle found, borrowing the reasons it keeps;
    /// `None` when no cycle has seen it.
    fn found_reason_ref(
        &self,
        cq: &str,
        queued: &Queued,
    ) -> Option<(Cow<'_, PendingReason>, Option<i64>)> {
        let found = &self.found;
        if let Some((reason, eta)) = found.served.get(&queued.job.id) {
            return Some((Cow::Borrowed(reason), *eta));
        }
        let stopped = self
            .queues
            .get(cq)
            .is_some_and(|q| q.spec.stop_policy != StopPolicy::None);
        if stopped {
            let reason = PendingReason::QueueStopped {
                cluster_queue: cq.to_owned(),
            };
            return Some((Cow::Owned(reason), None));
        }
        if let Some(head) = found.strict_head.get(cq) {
            let reason = PendingReason::BlockedByQueueHead { head: head.clone() };
            return Some((Cow::Owned(reason), None));
        }
        let ends = queued
            .job
            .expected_runtime
            .map(|r| found.now.saturating_add(r));
        let mask = respected(&found.untils, ends);
        found
            .memo
            .get(&queued.shape)?
            .iter()
            .find(|(m, _)| m & !mask == 0)
            .map(|(_, reason)| (Cow::Borrowed(reason), None))
    }

    /// When the reasons [`Scheduler::waiting`] gives were worked out: the time of the last
    /// cycle that ran in full. A cycle skipped as quiet keeps them, never for more than
    /// [`super::REASONS_REFRESH_SECONDS`].
    pub fn reasons_as_of(&self) -> i64 {
        self.found.now
    }

    /// Per ClusterQueue, why the first job the last cycle served there still waits (queues
    /// whose first job started, or that had none, are left out).
    pub fn head_reasons(&self) -> impl Iterator<Item = (&str, &PendingReason)> {
        self.found.heads.iter().map(|(q, r)| (q.as_str(), r))
    }
}
