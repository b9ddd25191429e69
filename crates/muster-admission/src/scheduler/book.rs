//! The job book: every job the scheduler knows, filed by state — waiting in its
//! ClusterQueue's list, holding (admitted, provisioning, evicting), by expected end, by the
//! ClusterQueue it runs in — and kept in step on every change of state, so a cycle finds
//! holders, victims and waiting jobs without walking every job.

use std::sync::Arc;

use super::{Holding, JobState, Scheduler, ShapeUsage, SharedId, lists};
use crate::job::{Job, quota_usage};
use crate::quota::Booking;

/// Per job shape: (ClusterQueue, the flavor of each pod set, what a job of the shape so
/// placed books), as [`Scheduler::booking_for`] made them.
pub(super) type Bookings = Vec<Vec<(String, Vec<String>, Arc<Booking>)>>;

impl Scheduler {
    /// Files a holder under its state's index (provisioning, evicting, expected end, with
    /// `booking`, what it books, beside its end).
    pub(super) fn file(
        &mut self,
        id: &SharedId,
        job: &Job,
        state: &JobState,
        booking: Option<&Arc<Booking>>,
    ) {
        match state {
            JobState::Provisioning(_) => {
                self.provisioning.insert(Arc::clone(id));
            }
            JobState::Evicting(h) => {
                self.evicting.insert(Arc::clone(id));
                self.file_running(id, job, &h.cluster_queue);
            }
            JobState::Admitted(h) => {
                match expected_end(job, h) {
                    Some(end) => {
                        self.ends.insert((end, Arc::clone(id)), booking.cloned());
                    }
                    None => {
                        self.unending.insert(Arc::clone(id));
                    }
                }
                self.file_running(id, job, &h.cluster_queue);
            }
            JobState::Pending => {}
        }
    }

    /// Files a job running (admitted or being evicted) in `cq`.
    pub(super) fn file_running(&mut self, id: &SharedId, job: &Job, cq: &str) {
        let running = match self.running_in.get_mut(cq) {
            Some(running) => running,
            None => self.running_in.entry(cq.to_owned()).or_default(),
        };
        running.ids.insert(Arc::clone(id));
        *running.priorities.entry(job.priority).or_default() += 1;
    }

    /// Takes a job filed by [`Scheduler::file_running`] out.
    pub(super) fn unfile_running(&mut self, id: &str, job: &Job, cq: &str) {
        if let Some(running) = self.running_in.get_mut(cq) {
            if running.ids.remove(id)
                && let Some(count) = running.priorities.get_mut(&job.priority)
            {
                *count -= 1;
                if *count == 0 {
                    running.priorities.remove(&job.priority);
                }
            }
            if running.ids.is_empty() {
                self.running_in.remove(cq);
            }
        }
    }

    /// Takes a holder out of its state's index.
    pub(super) fn unfile(&mut self, id: &SharedId, job: &Job, state: &JobState) {
        match state {
            JobState::Provisioning(_) => {
                self.provisioning.remove(id);
            }
            JobState::Evicting(h) => {
                self.evicting.remove(id);
                self.unfile_running(id, job, &h.cluster_queue);
            }
            JobState::Admitted(h) => {
                match expected_end(job, h) {
                    Some(end) => {
                        self.ends.remove(&(end, Arc::clone(id)));
                    }
                    None => {
                        self.unending.remove(id);
                    }
                }
                self.unfile_running(id, job, &h.cluster_queue);
            }
            JobState::Pending => {}
        }
    }

    /// Lists a waiting job in its ClusterQueue, if it can queue there.
    pub(super) fn enlist(&mut self, job: Arc<Job>, shape: usize) {
        if job.invalid.is_some() || job.suspended {
            return;
        }
        if let Ok(cq) = self.cluster_queue_of(&job) {
            let runtime = job.expected_runtime;
            self.lists.insert(
                &cq,
                lists::Queued {
                    job,
                    shape,
                    runtime,
                },
            );
        }
    }

    /// Sets a job's state, keeping the holders and the waiting lists in step.
    pub(super) fn set_state(&mut self, id: &str, state: JobState) {
        let Some(entry) = self.jobs.get_mut(id) else {
            return;
        };
        let was_pending = entry.state == JobState::Pending;
        let pending = state == JobState::Pending;
        self.epoch += 1;
        // The old state is taken out and the new one filed before it goes in: filing reads
        // only the state it is given, and a holding (every pod's node) is not worth a copy.
        let old = std::mem::replace(&mut entry.state, JobState::Pending);
        let (job, shape, entry_usage, shared) = (
            Arc::clone(&entry.job),
            entry.shape,
            Arc::clone(&entry.usage),
            Arc::clone(&entry.id),
        );
        self.unfile(&shared, &job, &old);
        let booking = self.booking_in(shape, &state);
        debug_assert_eq!(
            booking,
            super::booking_of(&self.quota, &state, &entry_usage),
            "the booking kept for {id}'s shape is the one made by names"
        );
        self.file(&shared, &job, &state, booking.as_ref());
        if let Some(entry) = self.jobs.get_mut(id) {
            entry.state = state;
            entry.booking = booking;
        }
        if pending {
            self.holders.remove(id);
            if !was_pending {
                self.enlist(job, shape);
            }
        } else {
            self.holders.insert(shared);
            self.deferred.remove(id);
            if was_pending {
                self.lists.remove(&job);
            }
        }
    }

    /// What a job of `shape` books while in `state` (nothing while it holds nothing): the
    /// booking of [`Scheduler::booking_for`].
    pub(super) fn booking_in(&mut self, shape: usize, state: &JobState) -> Option<Arc<Booking>> {
        let (JobState::Admitted(h) | JobState::Provisioning(h) | JobState::Evicting(h)) = state
        else {
            return None;
        };
        let flavors = h.pod_sets.iter().map(|p| p.flavor.as_str());
        self.booking_for(shape, &h.cluster_queue, flavors)
    }

    /// What a job of `shape` books in `cq` with its pod sets in `flavors`, in order
    /// ([`crate::quota::QuotaBook::booking`]): made the first time it is asked for and kept,
    /// so that the jobs of a shape (every admission, and every try a reservation weighs)
    /// share one instead of each looking its names up. `None` when the book has no such
    /// queue. Holds while the book's numbering does ([`Scheduler::with_cohorts`] drops them).
    pub(super) fn booking_for<'f>(
        &mut self,
        shape: usize,
        cq: &str,
        flavors: impl Iterator<Item = &'f str> + Clone,
    ) -> Option<Arc<Booking>> {
        let kept = self.bookings.get(shape).and_then(|kept| {
            kept.iter()
                .find(|(q, f, _)| q == cq && f.iter().map(String::as_str).eq(flavors.clone()))
        });
        if let Some((_, _, booking)) = kept {
            return Some(Arc::clone(booking));
        }
        let usage = self.shape_usage.get(shape)?;
        let booking = Arc::new(self.quota.booking(cq, flavors.clone().zip(usage.iter()))?);
        if self.bookings.len() <= shape {
            self.bookings.resize_with(shape + 1, Vec::new);
        }
        self.bookings[shape].push((
            cq.to_owned(),
            flavors.map(str::to_owned).collect(),
            Arc::clone(&booking),
        ));
        Some(booking)
    }

    /// The index of `job`'s shape (its LocalQueue, priority and pod sets), a new one if no job
    /// had it before.
    pub(super) fn shape_of(&mut self, job: &Job) -> usize {
        let key = (job.local_queue.clone(), job.priority);
        let known = self.shapes.entry(key).or_default();
        if let Some((_, shape)) = known.iter().find(|(sets, _)| *sets == job.pod_sets) {
            return *shape;
        }
        let shape = self.shape_usage.len();
        self.shape_usage
            .push(job.pod_sets.iter().map(quota_usage).collect());
        known.push((job.pod_sets.clone(), shape));
        shape
    }

    /// `job`'s quota usage per pod set: its entry's when it has one with the same pod sets
    /// (shared with its shape), else worked out; and the index of that shape (`None` for a job
    /// the scheduler does not know as it is).
    pub(super) fn usage_and_shape(&self, job: &Job) -> (ShapeUsage, Option<usize>) {
        match self.jobs.get(&job.id) {
            Some(e) if std::ptr::eq(Arc::as_ptr(&e.job), job) || e.job.pod_sets == job.pod_sets => {
                (Arc::clone(&e.usage), Some(e.shape))
            }
            _ => (job.pod_sets.iter().map(quota_usage).collect(), None),
        }
    }

    pub(super) fn hold(&mut self, id: &str, holding: &Holding) {
        let Some((job, usage)) = self
            .jobs
            .get(id)
            .map(|e| (Arc::clone(&e.job), Arc::clone(&e.usage)))
        else {
            return;
        };
        for ((set, usage), placement) in job.pod_sets.iter().zip(&*usage).zip(&holding.pod_sets) {
            self.quota
                .add(&holding.cluster_queue, &placement.flavor, usage);
            for (pod, node) in placement.nodes.iter().enumerate() {
                self.cluster
                    .add_pod(node, &set.requests, placement.devices_of(pod));
            }
        }
    }

    pub(super) fn release_all(&mut self, id: &str) {
        if let Some(entry) = self.jobs.get(id) {
            entry.release(&mut self.quota, &mut self.cluster);
        }
    }
}

/// When an admitted job is expected to end: its admission plus the runtime it announced, when
/// both are known.
pub(super) fn expected_end(job: &Job, holding: &Holding) -> Option<i64> {
    Some(holding.since?.saturating_add(job.expected_runtime?))
}
