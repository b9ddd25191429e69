//! Reservations for blocked jobs, from the timeline of running jobs' expected ends.

use std::sync::Arc;

use muster_api::Resources;
use muster_topology::Constraint;

use super::{Assignment, Blocked, Holding, JobState, Options, Scheduler};
use crate::job::{Job, JobId, quota_usage};
use crate::reservation::Reservation;

impl Scheduler {
    /// Admitted jobs with their expected end (now for jobs being evicted), soonest first; jobs
    /// without an expected runtime never end as far as planning knows.
    pub(super) fn release_timeline(&self, now: i64) -> Vec<(i64, JobId)> {
        let mut timeline: Vec<(i64, JobId)> = self
            .jobs
            .iter()
            .filter_map(|(id, e)| match &e.state {
                JobState::Evicting(_) => Some((now, id.clone())),
                JobState::Admitted(h) => e
                    .job
                    .expected_runtime
                    .map(|r| (h.since.saturating_add(r).max(now), id.clone())),
                _ => None,
            })
            .collect();
        timeline.sort();
        timeline
    }

    pub(super) fn holding_of(&self, id: &str) -> Option<(Arc<Job>, Holding)> {
        let e = self.jobs.get(id)?;
        match &e.state {
            JobState::Admitted(h) | JobState::Provisioning(h) | JobState::Evicting(h) => {
                Some((Arc::clone(&e.job), h.clone()))
            }
            JobState::Pending => None,
        }
    }

    /// Releases `ids` tentatively (the caller restores the cluster mark and the quota book).
    pub(super) fn release_tentatively(&mut self, ids: &[JobId]) {
        for id in ids {
            if let Some((job, h)) = self.holding_of(id) {
                self.release(&job, &h);
            }
        }
    }

    /// Whether `job` fits once `ids` are gone; the assignment if so. Changes nothing.
    pub(super) fn fits_without(
        &mut self,
        cq: &str,
        job: &Job,
        ids: &[JobId],
        opts: Options,
        now: i64,
    ) -> Option<Assignment> {
        let mark = self.cluster.mark();
        let book = self.quota.clone();
        self.release_tentatively(ids);
        let result = self.try_assign(cq, job, opts, &[], now).ok();
        self.cluster.rollback(&mark);
        self.quota = book;
        result
    }

    /// The reservation of a blocked job: the earliest point on the release timeline at which
    /// it fits (found by bisection: releasing more never hurts), the nodes and quota it would
    /// take then. When it fits only once jobs without a known runtime end, it reserves the
    /// most promising domain (or its quota) with no time. When it would not fit even on an
    /// empty cluster, there is nothing to reserve.
    pub(super) fn reserve(
        &mut self,
        cq: &str,
        job: &Job,
        blocked: &Blocked,
        now: i64,
    ) -> Option<Reservation> {
        let opts = Options {
            place: true,
            no_borrow: false,
        };
        let everyone: Vec<JobId> = self
            .jobs
            .iter()
            .filter(|(_, e)| e.state != JobState::Pending)
            .map(|(id, _)| id.clone())
            .collect();
        self.fits_without(cq, job, &everyone, opts, now)?;
        let timeline = self.release_timeline(now);
        let ids: Vec<JobId> = timeline.iter().map(|(_, id)| id.clone()).collect();
        let known = self.fits_without(cq, job, &ids, opts, now);
        let (until, assignment) = match known {
            Some(_) => {
                // Smallest k such that releasing the first k jobs makes room.
                let (mut lo, mut hi) = (0usize, ids.len());
                let mut best = None;
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    match self.fits_without(cq, job, &ids[..mid], opts, now) {
                        Some(a) => {
                            best = Some(a);
                            hi = mid;
                        }
                        None => lo = mid + 1,
                    }
                }
                let assignment = match best {
                    Some(a) if lo > 0 || ids.is_empty() => a,
                    _ => self.fits_without(cq, job, &ids[..lo], opts, now)?,
                };
                let until = if lo == 0 { now } else { timeline[lo - 1].0 };
                (Some(until), Some(assignment))
            }
            None => (None, None),
        };
        let mut book_at = self.quota.clone();
        if let Some(t) = until {
            for (end, id) in &timeline {
                if *end > t {
                    break;
                }
                if let Some((j, h)) = self.holding_of(id) {
                    for (set, p) in j.pod_sets.iter().zip(&h.pod_sets) {
                        book_at.remove(&h.cluster_queue, &p.flavor, &quota_usage(set));
                    }
                }
            }
        }
        let (nodes, need) = match assignment {
            Some(a) => (
                a.pod_sets
                    .iter()
                    .map(|p| (p.flavor.clone(), p.nodes.clone()))
                    .collect(),
                a.usage.into_iter().collect(),
            ),
            None => {
                let (nodes, mut need) = self.fallback_reservation(job, blocked);
                // Without a time, only quota the queue owns is held: quota the job would
                // borrow belongs to queues that may want it back at any moment.
                let nominal = Options {
                    place: false,
                    no_borrow: true,
                };
                if self
                    .fits_without(cq, job, &everyone, nominal, now)
                    .is_none()
                {
                    need.clear();
                }
                if nodes.is_empty() && need.is_empty() {
                    return None;
                }
                (nodes, need)
            }
        };
        Some(Reservation {
            job: job.id.clone(),
            cluster_queue: cq.to_owned(),
            cohort: self.quota.cohort(cq).map(str::to_owned),
            until,
            nodes,
            need,
            book_at,
        })
    }

    /// Without a known time, reserve the best candidate domain of the failing pod set (so it
    /// drains) or, when quota is what is short, the quota it needs.
    #[expect(
        clippy::type_complexity,
        reason = "two parallel lists, named at the call site"
    )]
    pub(super) fn fallback_reservation(
        &self,
        job: &Job,
        blocked: &Blocked,
    ) -> (Vec<(String, Vec<String>)>, Vec<(String, Resources)>) {
        match blocked {
            Blocked::Topology { no_fit, flavor } => {
                let mut nodes = Vec::new();
                let set = job.pod_sets.iter().find(|s| s.name == no_fit.pod_set);
                let level = set.and_then(|s| match &s.constraint {
                    Constraint::Required(l) | Constraint::Preferred(l) => Some(l.clone()),
                    _ => None,
                });
                if let (Some(topo), Some(level), Some((value, _))) =
                    (self.cluster.topology(flavor), level, &no_fit.best)
                    && let Some(depth) = topo.levels().iter().position(|l| *l == level)
                    && let Some(domain) = topo.domain_by_value(depth + 1, value)
                {
                    let names = topo
                        .nodes_under(domain)
                        .into_iter()
                        .map(|id| topo.nodes()[id].info.name.clone())
                        .collect();
                    nodes.push((flavor.clone(), names));
                }
                let need = vec![(flavor.clone(), job.total_requests())];
                (nodes, need)
            }
            Blocked::Quota(short) => (
                Vec::new(),
                vec![(short.flavor.clone(), job.total_requests())],
            ),
            _ => (Vec::new(), Vec::new()),
        }
    }
}
