//! Preemption of whole gangs: the smallest set of victims whose departure makes a feasible
//! placement for the preemptor.

use std::collections::BTreeSet;

use muster_api::cluster_queue::{ReclaimWithinCohort, WithinClusterQueue};

use super::{Assignment, JobState, Options, Scheduler};
use crate::job::{Job, JobId};
use crate::reservation::Reservation;

/// A preemption candidate: (not already leaving, in the preemptor's queue, priority, newest
/// admission first, id).
type Candidate = (bool, bool, i32, std::cmp::Reverse<i64>, JobId);

impl Scheduler {
    /// The smallest set of whole jobs whose eviction lets `job` be placed — quota and nodes —
    /// under the queue's preemption policy, with the jobs of that set already leaving (from
    /// an earlier preemption or a drain) and the assignment the job gets once they are gone.
    /// `None` when no such set exists. Jobs already leaving are counted first, so a preemptor
    /// waits for them rather than evicting more.
    pub(super) fn preempt(
        &mut self,
        cq: &str,
        job: &Job,
        reservations: &[Reservation],
        now: i64,
    ) -> Option<(Vec<JobId>, BTreeSet<JobId>, Assignment)> {
        let mut candidates = self.preemption_candidates(cq, job)?;
        if candidates.iter().all(|c| !c.0) {
            return None;
        }
        candidates.sort();
        let leaving: BTreeSet<JobId> = candidates
            .iter()
            .filter(|c| !c.0)
            .map(|c| c.4.clone())
            .collect();
        let other_queue: BTreeSet<JobId> = candidates
            .iter()
            .filter(|c| c.0 && !c.1)
            .map(|c| c.4.clone())
            .collect();
        // Reclaiming from other queues is only for quota the preemptor owns: no borrowing.
        let opts_for = |victims: &[JobId]| Options {
            place: true,
            no_borrow: victims.iter().any(|v| other_queue.contains(v)),
        };
        // Remove candidates in order until the preemptor fits. Another queue's job is taken
        // only while that queue still borrows: reclaiming stops at its nominal quota, so a
        // victim can never come straight back within its own quota and evict in turn.
        let start = (self.cluster.mark(), self.quota.clone());
        let mut victims: Vec<JobId> = Vec::new();
        let mut found = false;
        for c in &candidates {
            let id = &c.4;
            if other_queue.contains(id) {
                let still_borrowing = self.holding_of(id).is_some_and(|(_, h)| {
                    h.pod_sets
                        .iter()
                        .any(|p| self.quota.is_borrowing(&h.cluster_queue, &p.flavor))
                });
                if !still_borrowing {
                    continue;
                }
            }
            self.release_tentatively(std::slice::from_ref(id));
            victims.push(id.clone());
            let mark = self.cluster.mark();
            let fits = self
                .try_assign(cq, job, opts_for(&victims), reservations, now)
                .is_ok();
            self.cluster.rollback(&mark);
            if fits {
                found = true;
                break;
            }
        }
        self.cluster.rollback(&start.0);
        self.quota = start.1;
        if !found {
            return None;
        }
        // Keep out every victim the preemptor can do without, the last chosen excepted (it
        // made the difference), newest choices first.
        let mut i = victims.len().saturating_sub(1);
        while i > 0 {
            i -= 1;
            if leaving.contains(&victims[i]) {
                continue;
            }
            let mut fewer = victims.clone();
            fewer.remove(i);
            if self
                .fits_without(cq, job, &fewer, opts_for(&fewer), now, reservations)
                .is_some()
            {
                victims = fewer;
            }
        }
        let assignment =
            self.fits_without(cq, job, &victims, opts_for(&victims), now, reservations)?;
        Some((victims, leaving, assignment))
    }
    /// Jobs whose eviction the queue's policy allows for `job`, plus every job already
    /// leaving, as (not leaving, same queue, priority, newest first, id): sorted, that is
    /// Kueue's order — already leaving, other queues' borrowers, lowest priority, newest.
    fn preemption_candidates(&self, cq: &str, job: &Job) -> Option<Vec<Candidate>> {
        let policy = self.queues.get(cq)?.spec.preemption.clone()?;
        let cohort = self.quota.cohort(cq).map(str::to_owned);
        let mut candidates: Vec<Candidate> = Vec::new();
        for id in &self.holders {
            let Some(e) = self.jobs.get(id) else {
                continue;
            };
            let (h, leaving) = match &e.state {
                JobState::Admitted(h) => (h, false),
                JobState::Evicting(h) => (h, true),
                _ => continue,
            };
            let same_queue = h.cluster_queue == cq;
            let lower = e.job.priority < job.priority;
            let eligible = if same_queue {
                policy.within_cluster_queue == WithinClusterQueue::LowerPriority && lower
            } else {
                cohort.is_some()
                    && self.quota.cohort(&h.cluster_queue) == cohort.as_deref()
                    && match policy.reclaim_within_cohort {
                        ReclaimWithinCohort::Never => false,
                        ReclaimWithinCohort::LowerPriority => lower,
                        ReclaimWithinCohort::Any => true,
                    }
                    && (leaving
                        || h.pod_sets
                            .iter()
                            .any(|p| self.quota.is_borrowing(&h.cluster_queue, &p.flavor)))
            };
            if eligible || leaving {
                candidates.push((
                    !leaving,
                    same_queue,
                    e.job.priority,
                    std::cmp::Reverse(h.since),
                    id.clone(),
                ));
            }
        }
        Some(candidates)
    }
}
