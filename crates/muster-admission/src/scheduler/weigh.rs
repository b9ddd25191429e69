//! Weighing a preemption against waiting: a preemptor that could start by evicting waits
//! instead when running jobs are about to free what it needs and waiting costs less GPU time
//! than the victims would lose — but never longer than its ClusterQueue allows.
//!
//! What makes the rule sound, and not a way for a victim to make itself unpreemptable:
//! - only jobs that are really about to leave count: those being evicted, and admitted jobs
//!   before the end they announced. A job past its announced end says nothing about when it
//!   ends; waiting on it could last for ever;
//! - the wait is bounded: from the first cycle a preemptor chose to wait, it waits at most
//!   `preemption.maxWaitWhenCheaperSeconds`, and not at all when the release timeline says
//!   its capacity frees later than that;
//! - GPU time is weighed by what jobs hold — whole GPUs, TPU chips, parts of a GPU, MIG
//!   slices (see [`Job::accelerator_milli`]);
//! - an unknown is never read as a figure: a victim whose admission time is unknown, or a
//!   capacity that only jobs of unknown end would free, gives no estimate, and preemption
//!   goes ahead.

use std::collections::BTreeSet;
use std::rc::Rc;

use super::{Blocked, CycleState, Scheduler, SharedId};
use crate::decision::Deferral;
use crate::job::{Job, JobId};

impl Scheduler {
    /// The preemptors waiting now because waiting was cheaper, with the time each chose to
    /// wait first (their wait is bounded from then), in id order.
    pub fn deferred(&self) -> impl Iterator<Item = (&str, i64)> {
        self.deferred
            .iter()
            .map(|(id, (since, _))| (id.as_str(), *since))
    }

    /// The first time after `now` at which a preemptor that waits because waiting was
    /// cheaper may decide otherwise though nothing else changes: a job on the release
    /// timeline passes its announced end (it no longer counts as about to leave), or a
    /// preemptor's wait reaches its bound. `None` when no preemptor waits so. A caller that
    /// runs cycles only when something happens (the simulator) runs one then too.
    pub fn reweigh_at(&self, now: i64) -> Option<i64> {
        let deadline = self.deferred.values().map(|(_, until)| *until).min()?;
        let next_end = self
            .ends
            .range((now.saturating_add(1), SharedId::from(""))..)
            .next()
            .map(|((end, _), _)| *end);
        Some(
            next_end
                .map_or(deadline, |end| end.min(deadline))
                .max(now.saturating_add(1)),
        )
    }

    /// Resumes the wait of `id`, a preemptor that chose at `since` to wait rather than evict
    /// (a scheduler rebuilt for a cycle, as the controller's sometimes is, keeps none of its
    /// own): its wait stays bounded from `since`, not from the next cycle. Does nothing
    /// unless the job is pending.
    pub fn resume_deferral(&mut self, id: &str, since: i64) {
        if matches!(self.state(id), Some(super::JobState::Pending)) {
            // The bound is worked out again at its next weighing; until then it is not known
            // to end before `since`.
            self.deferred.insert(id.to_owned(), (since, since));
        }
    }

    /// Whether `job` should wait rather than evict `victims` (those not already `leaving`),
    /// and if so why and until when; `None`: evict. The caller has taken the job's earlier
    /// deferral, if any, out of [`Scheduler::deferred`] as `since`.
    #[expect(
        clippy::too_many_arguments,
        reason = "the cycle's context, passed down once"
    )]
    pub(super) fn weigh(
        &mut self,
        cq: &str,
        job: &Job,
        victims: &[JobId],
        leaving: &BTreeSet<JobId>,
        blocked: &Blocked,
        since: Option<i64>,
        now: i64,
        state: &mut CycleState,
    ) -> Option<Deferral> {
        let policy = self.queues.get(cq)?.spec.preemption.clone()?;
        if !policy.waits_when_cheaper() {
            return None;
        }
        let since = since.unwrap_or(now);
        let until = since.saturating_add(policy.max_wait_when_cheaper());
        if now >= until {
            return None;
        }
        let mut lost: u64 = 0;
        let mut evicted = Vec::new();
        for id in victims.iter().filter(|v| !leaving.contains(*v)) {
            let (victim, holding) = self.holding_of(id)?;
            // An admission time that is unknown is no estimate of the work at stake.
            let admitted = holding.since?;
            lost = lost.saturating_add(
                victim
                    .accelerator_milli()
                    .saturating_mul(seconds(now.saturating_sub(admitted))),
            );
            evicted.push(id.clone());
        }
        if lost == 0 {
            return None;
        }
        // When jobs about to leave free what it needs: a reservation search over a timeline
        // without the jobs that overran their estimate. Without such jobs it is the same
        // search as the reservation its queue takes next, which may then reuse it.
        let same_order = self.overdue(now) == 0;
        let release = if same_order {
            Rc::clone(
                state
                    .release
                    .get_or_insert_with(|| Rc::new(self.release_order(now, true))),
            )
        } else {
            Rc::new(self.release_order(now, false))
        };
        let found = self.reserve(cq, job, blocked, now, &release);
        let starts = found.as_ref().and_then(|r| r.until);
        if same_order {
            state.weighed = Some((job.id.clone(), found));
        }
        let starts = starts?;
        let waiting = job
            .accelerator_milli()
            .saturating_mul(seconds(starts.saturating_sub(now)));
        let waits = starts <= until && waiting <= lost;
        // What the victims would lose grows with time, and the wait has an end: a later
        // cycle may decide otherwise.
        state.timed |= waits;
        waits.then_some(Deferral {
            victims: evicted,
            lost_milli: lost,
            waiting_milli: waiting,
            starts,
            since,
            until,
        })
    }
}

fn seconds(t: i64) -> u64 {
    u64::try_from(t).unwrap_or(0)
}
