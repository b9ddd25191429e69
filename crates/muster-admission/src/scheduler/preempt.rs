//! Preemption of whole gangs: the smallest set of victims whose departure makes a feasible
//! placement for the preemptor.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use muster_api::cluster_queue::{PreemptionPolicy, ReclaimWithinCohort, WithinClusterQueue};

use super::{Assignment, JobState, Options, RunningIn, Scheduler};
use crate::job::{Job, JobId};
use crate::reservation::Reservation;

/// A preemption candidate: (not already leaving, in the preemptor's queue, edges up from the
/// preemptor's queue to the nearest cohort it shares with the candidate's — nearest first;
/// 0 for its own queue and for jobs already leaving —, priority, newest admission first — an
/// unknown admission time last, as if the oldest — id).
pub(super) type Candidate = (bool, bool, u32, i32, std::cmp::Reverse<Option<i64>>, JobId);

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
        if !self.may_choose_any(cq, job) {
            return None;
        }
        if known.0 != self.epoch {
            *known = (self.epoch, Candidates::new());
        }
        let known = &mut known.1;
        let key = (cq.to_owned(), job.priority);
        let candidates = match known.get(&key) {
            Some(c) => {
                #[cfg(debug_assertions)]
                {
                    let mut fresh = self.preemption_candidates(cq, job).unwrap_or_default();
                    fresh.sort();
                    debug_assert!(
                        **c == fresh,
                        "the preemption candidates kept for {cq} are those found again"
                    );
                }
                Rc::clone(c)
            }
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
            .map(|c| c.5.clone())
            .collect();
        // Reclaiming from other queues is only for quota the preemptor owns: no borrowing.
        let opts_for = |victims: &[&Candidate]| Options {
            place: true,
            no_borrow: victims.iter().any(|c| c.0 && !c.1),
        };
        let ids = |victims: &[&Candidate]| -> Vec<JobId> {
            victims.iter().map(|c| c.5.clone()).collect()
        };
        if !self.fits_with_every_candidate_gone(cq, job, &candidates, reservations, now) {
            return None;
        }
        // Remove candidates in order until the preemptor fits. Another queue's job is taken
        // only while that queue still borrows: reclaiming stops at its nominal quota, so a
        // victim can never come straight back within its own quota and evict in turn.
        let start = (self.cluster.mark(), self.quota.clone());
        let mut victims: Vec<&Candidate> = Vec::new();
        let mut found = false;
        for c in candidates.iter() {
            let id = &c.5;
            if c.0 && !c.1 && !self.still_borrowing(id) {
                continue;
            }
            self.release_tentatively(std::slice::from_ref(id), true);
            victims.push(c);
            if self.fits_now(cq, job, opts_for(&victims), reservations, now) {
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

    /// Whether `job` fits as things stand (after any tentative releases), leaving the nodes
    /// as they were.
    fn fits_now(
        &mut self,
        cq: &str,
        job: &Job,
        opts: Options,
        reservations: &[Reservation],
        now: i64,
    ) -> bool {
        let mark = self.cluster.mark();
        let fits = self.try_assign(cq, job, opts, reservations, now).is_ok();
        self.cluster.rollback(&mark);
        fits
    }

    /// Whether another queue's job `id` still holds quota its queue borrows: reclaiming takes
    /// it only then.
    fn still_borrowing(&self, id: &str) -> bool {
        self.jobs.get(id).is_some_and(|e| match &e.state {
            JobState::Admitted(h) | JobState::Provisioning(h) | JobState::Evicting(h) => h
                .pod_sets
                .iter()
                .any(|p| self.quota.is_borrowing(&h.cluster_queue, &p.flavor)),
            JobState::Pending => false,
        })
    }

    /// Whether `job` fits once every candidate the search in [`Scheduler::preempt`] could
    /// choose is gone, as that search chooses them (in order, another queue's job only while
    /// its queue still borrows). Releasing more never makes a job fit less, so when it does
    /// not fit then, no set the search tries makes it fit either: a search that is bound to
    /// fail costs one or two tries instead of one per candidate. Two, because the search
    /// lets the preemptor borrow only until it takes another queue's job: the largest set
    /// before that is tried with borrowing, the whole set without. Changes nothing.
    fn fits_with_every_candidate_gone(
        &mut self,
        cq: &str,
        job: &Job,
        candidates: &[Candidate],
        reservations: &[Reservation],
        now: i64,
    ) -> bool {
        let start = (self.cluster.mark(), self.quota.clone());
        let mut chosen = 0_usize;
        let mut reclaims = false;
        let mut fits = false;
        let opts = |no_borrow| Options {
            place: true,
            no_borrow,
        };
        for c in candidates {
            let reclaim = c.0 && !c.1;
            if reclaim && !self.still_borrowing(&c.5) {
                continue;
            }
            if reclaim && !reclaims {
                if chosen > 0 && self.fits_now(cq, job, opts(false), reservations, now) {
                    fits = true;
                    break;
                }
                reclaims = true;
            }
            self.release_tentatively(std::slice::from_ref(&c.5), true);
            chosen += 1;
        }
        if !fits && chosen > 0 {
            fits = self.fits_now(cq, job, opts(reclaims), reservations, now);
        }
        self.cluster.rollback(&start.0);
        self.quota = start.1;
        fits
    }

    /// Whether the queue's policy could let `job` choose any running job at all: some queue
    /// of its own and its cohort tree may lose one ([`Scheduler::may_lose`]). Without any,
    /// no search can evict anything (jobs already leaving are waited for, never chosen), and
    /// finding that out by gathering every candidate cost most of what preemption cost a
    /// busy cycle: most blocked jobs there have nothing they may take.
    fn may_choose_any(&self, cq: &str, job: &Job) -> bool {
        let Some(policy) = self.queues.get(cq).and_then(|q| q.spec.preemption.as_ref()) else {
            return false;
        };
        std::iter::once(cq)
            .chain(self.quota.queues_sharing(cq).filter(|q| *q != cq))
            .any(|queue| self.may_lose(policy, cq, queue, job).is_some())
    }

    /// The running jobs of `queue` (`cq` itself or a queue of its cohort tree) when
    /// `policy`, `cq`'s, may choose one of them for `job`, from what is known without
    /// looking at any: a job of lower priority runs in `cq` and the policy takes those;
    /// another queue borrows and the policy reclaims from it (from any job, or from one of
    /// lower priority that runs there). `None`: none of them can be chosen, so their
    /// running jobs cost nothing.
    fn may_lose(
        &self,
        policy: &PreemptionPolicy,
        cq: &str,
        queue: &str,
        job: &Job,
    ) -> Option<&RunningIn> {
        let running = self.running_in.get(queue)?;
        let below = running.any_below(job.priority);
        let may = if queue == cq {
            policy.within_cluster_queue == WithinClusterQueue::LowerPriority && below
        } else {
            let reclaims = match policy.reclaim_within_cohort {
                ReclaimWithinCohort::Never => false,
                ReclaimWithinCohort::LowerPriority => below,
                ReclaimWithinCohort::Any => true,
            };
            reclaims && self.quota.is_borrowing_anything(queue)
        };
        may.then_some(running)
    }

    /// Jobs whose eviction the queue's policy allows for `job`, plus every job already
    /// leaving, as [`Candidate`]s: sorted, that is Kueue's order — already leaving, other
    /// queues' borrowers (the nearest in the cohort tree first), lowest priority, newest.
    fn preemption_candidates(&self, cq: &str, job: &Job) -> Option<Vec<Candidate>> {
        let policy = self.queues.get(cq)?.spec.preemption.clone()?;
        let mut candidates: Vec<Candidate> = Vec::new();
        // Jobs already leaving count wherever they are.
        for id in &self.evicting {
            if let Some(e) = self.jobs.get(id)
                && let JobState::Evicting(h) = &e.state
            {
                candidates.push((
                    false,
                    h.cluster_queue == cq,
                    0,
                    e.job.priority,
                    std::cmp::Reverse(h.since),
                    id.to_string(),
                ));
            }
        }
        // Of the rest, only the queue's own jobs and, when it has a cohort, those of the
        // queues of its cohort tree can be chosen, the nearest queues' first; a queue none
        // of whose jobs may be chosen is passed over whole ([`Scheduler::may_lose`]). The
        // order does not matter: the caller sorts the candidates.
        let others = self.quota.queues_sharing(cq).filter(|q| *q != cq);
        for queue in std::iter::once(cq).chain(others) {
            let Some(running) = self.may_lose(&policy, cq, queue, job) else {
                continue;
            };
            let same_queue = queue == cq;
            let distance = if same_queue {
                0
            } else {
                self.quota.distance(cq, queue).unwrap_or(u32::MAX)
            };
            // Whether this queue borrows each flavor its jobs run on, asked once per flavor.
            let mut borrowing: Vec<(&str, bool)> = Vec::new();
            for id in &running.ids {
                let Some(e) = self.jobs.get(id) else {
                    continue;
                };
                let JobState::Admitted(h) = &e.state else {
                    continue;
                };
                let lower = e.job.priority < job.priority;
                let eligible = if same_queue {
                    lower
                } else {
                    let reclaims = match policy.reclaim_within_cohort {
                        ReclaimWithinCohort::Never => false,
                        ReclaimWithinCohort::LowerPriority => lower,
                        ReclaimWithinCohort::Any => true,
                    };
                    reclaims
                        && h.pod_sets.iter().any(|p| {
                            match borrowing.iter().find(|(f, _)| *f == p.flavor) {
                                Some(&(_, b)) => b,
                                None => {
                                    let b = self.quota.is_borrowing(queue, &p.flavor);
                                    borrowing.push((&p.flavor, b));
                                    b
                                }
                            }
                        })
                };
                if eligible {
                    candidates.push((
                        true,
                        same_queue,
                        distance,
                        e.job.priority,
                        std::cmp::Reverse(h.since),
                        id.to_string(),
                    ));
                }
            }
        }
        Some(candidates)
    }
}
