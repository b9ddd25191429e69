//! Preemption of whole gangs: the smallest set of victims whose departure makes a feasible
//! placement for the preemptor.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use muster_api::cluster_queue::{ReclaimWithinCohort, WithinClusterQueue};

use super::{Assignment, JobState, Options, Scheduler};
use crate::job::{Job, JobId};
use crate::reservation::Reservation;

/// A preemption candidate: (not already leaving, in the preemptor's queue, priority, newest
/// admission first — an unknown admission time last, as if the oldest — id).
pub(super) type Candidate = (bool, bool, i32, std::cmp::Reverse<Option<i64>>, JobId);

/// Preemption candidates per (ClusterQueue, preemptor priority), sorted, while usage stays as
/// it is: identical preemptors in one cycle look at the same jobs.
pub(super) type Candidates = BTreeMap<(String, i32), Rc<Vec<Candidate>>>;

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
        known: &mut (u64, Candidates),
    ) -> Option<(Vec<JobId>, BTreeSet<JobId>, Assignment)> {
        if known.0 != self.epoch {
            *known = (self.epoch, Candidates::new());
        }
        let known = &mut known.1;
        let key = (cq.to_owned(), job.priority);
        let candidates = match known.get(&key) {
            Some(c) => Rc::clone(c),
            None => {
                let mut found = self.preemption_candidates(cq, job)?;
                found.sort();
                let found = Rc::new(found);
                known.insert(key, Rc::clone(&found));
                found
            }
        };
        if candidates.iter().all(|c| !c.0) {
            return None;
        }
        let leaving: BTreeSet<JobId> = candidates
            .iter()
            .filter(|c| !c.0)
            .map(|c| c.4.clone())
            .collect();
        // Reclaiming from other queues is only for quota the preemptor owns: no borrowing.
        let opts_for = |victims: &[&Candidate]| Options {
            place: true,
            no_borrow: victims.iter().any(|c| c.0 && !c.1),
        };
        let ids = |victims: &[&Candidate]| -> Vec<JobId> {
            victims.iter().map(|c| c.4.clone()).collect()
        };
        // Remove candidates in order until the preemptor fits. Another queue's job is taken
        // only while that queue still borrows: reclaiming stops at its nominal quota, so a
        // victim can never come straight back within its own quota and evict in turn.
        let start = (self.cluster.mark(), self.quota.clone());
        let mut victims: Vec<&Candidate> = Vec::new();
        let mut found = false;
        for c in candidates.iter() {
            let id = &c.4;
            if c.0 && !c.1 {
                let still_borrowing = self.jobs.get(id).is_some_and(|e| match &e.state {
                    JobState::Admitted(h) | JobState::Provisioning(h) | JobState::Evicting(h) => h
                        .pod_sets
                        .iter()
                        .any(|p| self.quota.is_borrowing(&h.cluster_queue, &p.flavor)),
                    JobState::Pending => false,
                });
                if !still_borrowing {
                    continue;
                }
            }
            self.release_tentatively(std::slice::from_ref(id), true);
            victims.push(c);
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
            if !victims[i].0 {
                continue;
            }
            let mut fewer = victims.clone();
            fewer.remove(i);
            if self
                .fits_without(cq, job, &ids(&fewer), opts_for(&fewer), now, reservations)
                .is_some()
            {
                victims = fewer;
            }
        }
        let assignment = self.fits_without(
            cq,
            job,
            &ids(&victims),
            opts_for(&victims),
            now,
            reservations,
        )?;
        Some((ids(&victims), leaving, assignment))
    }

    /// Jobs whose eviction the queue's policy allows for `job`, plus every job already
    /// leaving, as (not leaving, same queue, priority, newest first, id): sorted, that is
    /// Kueue's order — already leaving, other queues' borrowers, lowest priority, newest.
    fn preemption_candidates(&self, cq: &str, job: &Job) -> Option<Vec<Candidate>> {
        let policy = self.queues.get(cq)?.spec.preemption.clone()?;
        let cohort = self.quota.cohort(cq).map(str::to_owned);
        let related = |queue: &str| {
            queue == cq || (cohort.is_some() && self.quota.cohort(queue) == cohort.as_deref())
        };
        let queue_of = |id: &str| match self.jobs.get(id).map(|e| &e.state) {
            Some(JobState::Admitted(h) | JobState::Evicting(h)) => Some(h.cluster_queue.as_str()),
            _ => None,
        };
        // Only the queue's own jobs and, when it has one, its cohort's can be chosen; jobs
        // already leaving count wherever they are (those of other queues are looked at apart,
        // so that unrelated queues' running jobs cost nothing).
        let chosen = self
            .running_in
            .iter()
            .filter(|(queue, _)| related(queue))
            .flat_map(|(_, ids)| ids.iter().map(String::as_str));
        let leaving_elsewhere = self
            .evicting
            .iter()
            .map(|id| &**id)
            .filter(|id| queue_of(id).is_some_and(|q| !related(q)));
        let mut candidates: Vec<Candidate> = Vec::new();
        for id in chosen.chain(leaving_elsewhere) {
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
                let reclaims = match policy.reclaim_within_cohort {
                    ReclaimWithinCohort::Never => false,
                    ReclaimWithinCohort::LowerPriority => lower,
                    ReclaimWithinCohort::Any => true,
                };
                related(&h.cluster_queue)
                    && reclaims
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
                    id.to_owned(),
                ));
            }
        }
        Some(candidates)
    }
}
