//! What the last passes settled for each job — how admission's cycle sees it — kept so that a
//! pass settles again only the jobs whose inputs changed: the job's own objects (the index
//! logs them), its writes in flight (the ledger names them), a decision about it, the time
//! it waits for (a pods-ready deadline, the end of a backoff), or — for every job at once —
//! something every job reads (nodes, flavors, queues, priority classes).
//!
//! A job's step depends on nothing else, so a job not settled again would settle as it did.
//! A copy of the state starts with no seats (its first pass settles every job), which
//! `tests/kept.rs` uses to compare every pass against one that settles everything.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use muster_admission::{Decision, Holding, Job};
use muster_api::ObjectRef;

use crate::index::Index;
use crate::job::InCycle;

/// What the scheduler is to hold for a job ([`Seat::wanted`]): the job, and its holding
/// with whether capacity is bought for it, or `None` while it waits.
pub(crate) type Wanted<'a> = (&'a Arc<Job>, Option<(&'a Holding, bool)>);

/// One job as the last pass that settled it left it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Seat {
    /// How admission's cycle sees it.
    pub(crate) in_cycle: InCycle,
    /// The job as admission reads it, when the cycle sees it at all (queued or holding):
    /// one copy, shared with the scheduler that holds it and with forecasts' snapshots.
    pub(crate) job: Option<Arc<Job>>,
    /// The GpuJob's `metadata.generation` that `job` was read from, when `job` is read from
    /// it alone (queued or holding, not narrowed to bought capacity): a job settled again at
    /// the same generation reads the same (its spec is unchanged, and a change of priority
    /// classes drops every seat), so `job` is reused instead of validated and read again.
    pub(crate) read_at: Option<i64>,
    /// The job's attempt (its status's `requeueCount`) while it holds capacity: its pods of
    /// that attempt are booked through its holding.
    pub(crate) attempt: i32,
}

impl Seat {
    /// The job as admission read it from `gpujob` when this seat was settled, if `gpujob`
    /// is still that object at that generation.
    pub(crate) fn read_of(&self, gpujob: &muster_api::GpuJob) -> Option<&Arc<Job>> {
        let job = self.job.as_ref()?;
        let same = self.read_at.is_some()
            && self.read_at == gpujob.metadata.generation
            && gpujob.metadata.uid.as_deref() == Some(job.uid.as_str());
        same.then_some(job)
    }

    /// What the scheduler is to hold for this job: waiting (no holding) or holding; `None`
    /// when it is not in the cycle at all.
    pub(crate) fn wanted(&self) -> Option<Wanted<'_>> {
        let job = self.job.as_ref()?;
        match &self.in_cycle {
            InCycle::Queued => Some((job, None)),
            InCycle::Holds {
                holding,
                provisioning,
                ..
            } => Some((job, Some((holding, *provisioning)))),
            InCycle::OnBoughtCapacity { holding, .. } => Some((job, Some((holding, true)))),
            InCycle::Out | InCycle::FinishRelease(_) | InCycle::BackingOff { .. } => None,
        }
    }
}

/// Every job's seat, and when each must be settled again.
#[derive(Debug, Default)]
pub(crate) struct Seats {
    /// The index's shared version the seats were settled against; `None`: none are kept.
    pub(crate) shared: Option<u64>,
    by_job: BTreeMap<ObjectRef, Seat>,
    /// (second, job): settle the job again once the pass's time reaches the second.
    timers: BTreeSet<(i64, ObjectRef)>,
    /// Each timed job's second in `timers`.
    timer_of: BTreeMap<ObjectRef, i64>,
    /// Jobs settled again every pass: those provisioning (their holding starts at the pass's
    /// time, and the autoscaler's answers and backoff are read each pass).
    every_pass: BTreeSet<ObjectRef>,
    /// Jobs to settle again at the next pass whatever happens: the ledger named them at the
    /// end of the last one.
    again: BTreeSet<ObjectRef>,
    /// Jobs a decision changed in admission's scheduler: settled again at the next pass, and
    /// compared with the scheduler whether or not their seats changed (the pass may not have
    /// carried the decision out).
    recheck: BTreeSet<ObjectRef>,
    /// How many jobs queue.
    queued: usize,
    /// Jobs backing off, per ClusterQueue.
    backoff: BTreeMap<String, BTreeSet<ObjectRef>>,
    /// Held jobs and their current attempt.
    held: BTreeMap<ObjectRef, i32>,
}

impl Clone for Seats {
    /// A copy keeps no seats: its first pass settles every job afresh.
    fn clone(&self) -> Seats {
        Seats::default()
    }
}

impl Seats {
    /// Whether the seats were settled against the index's `shared` version: otherwise the
    /// next [`Seats::due`] settles every job afresh.
    pub(crate) fn kept_for(&self, shared: u64) -> bool {
        self.shared == Some(shared)
    }

    /// Jobs the ledger names at the end of a pass: settled again at the next, whatever lands
    /// meanwhile.
    pub(crate) fn settle_again(&mut self, jobs: BTreeSet<ObjectRef>) {
        self.again = jobs;
    }

    /// A write of `job` failed after the pass that made it ended (one the sender took from
    /// the queue after the pass, so the pass did not name it): settled again at the next
    /// pass, which decides again from what the index shows.
    pub(crate) fn write_failed(&mut self, job: ObjectRef) {
        self.again.insert(job);
    }

    /// Jobs whose state in admission's scheduler `decision` changes: compared with the
    /// scheduler at the next pass, whatever the pass made of the decision. Admission names
    /// jobs by their written reference; `index` gives them back as references (a job it no
    /// longer holds has nothing to compare).
    pub(crate) fn note(&mut self, decision: &Decision, index: &Index) {
        let ids: Vec<&str> = match decision {
            Decision::Admit(admitted) => vec![&admitted.job],
            Decision::Preempt { victims, for_job } => victims
                .iter()
                .map(String::as_str)
                .chain([for_job.as_str()])
                .collect(),
            Decision::Evict { job, .. } | Decision::Provision { job, .. } => vec![job],
            Decision::Pending { .. } => Vec::new(),
        };
        self.recheck
            .extend(ids.into_iter().filter_map(|id| index.job_ref(id)));
    }

    /// The jobs to settle at `now`, given `changed` (jobs whose objects changed) and
    /// `involved` (jobs the ledger names now); every job in `all` when the seats were
    /// settled against another `shared` version (or none are kept). With them, the jobs to
    /// compare with the scheduler whatever their seats say (see `recheck`).
    pub(crate) fn due<'a>(
        &mut self,
        shared: u64,
        now: i64,
        changed: BTreeSet<ObjectRef>,
        involved: impl Iterator<Item = &'a ObjectRef>,
        all: impl Iterator<Item = &'a ObjectRef>,
    ) -> (BTreeSet<ObjectRef>, BTreeSet<ObjectRef>) {
        let recheck = std::mem::take(&mut self.recheck);
        if self.shared != Some(shared) {
            let mut due: BTreeSet<ObjectRef> = self.by_job.keys().cloned().collect();
            due.extend(all.cloned());
            due.extend(recheck.iter().cloned());
            *self = Seats {
                shared: Some(shared),
                ..Seats::default()
            };
            return (due, recheck);
        }
        let mut due = changed;
        due.extend(recheck.iter().cloned());
        due.append(&mut self.again);
        due.extend(self.every_pass.iter().cloned());
        due.extend(involved.cloned());
        while let Some(first) = self.timers.first()
            && first.0 <= now
        {
            if let Some((_, job)) = self.timers.pop_first() {
                self.timer_of.remove(&job);
                due.insert(job);
            }
        }
        (due, recheck)
    }

    /// Records `job`'s new seat (`None`: the job is gone) and when time alone changes it;
    /// returns whether admission's view of it changed.
    pub(crate) fn put(&mut self, key: &ObjectRef, seat: Option<Seat>, until: Option<i64>) -> bool {
        let tally = seat.as_ref().map(CountsAs::of);
        let old = match seat {
            Some(seat) => self.by_job.insert(key.to_owned(), seat),
            None => self.by_job.remove(key),
        };
        if let Some(old) = &old {
            self.count(key, CountsAs::of(old), false);
        }
        if let Some(at) = self.timer_of.remove(key) {
            self.timers.remove(&(at, key.to_owned()));
        }
        self.every_pass.remove(key);
        if let Some(tally) = tally {
            if let Some(at) = until {
                self.timers.insert((at, key.to_owned()));
                self.timer_of.insert(key.to_owned(), at);
            }
            if matches!(
                tally,
                CountsAs::Held {
                    provisioning: true,
                    ..
                }
            ) {
                self.every_pass.insert(key.to_owned());
            }
            self.count(key, tally, true);
        }
        old.as_ref().and_then(Seat::wanted) != self.by_job.get(key).and_then(Seat::wanted)
    }

    /// Keeps the counts the pass reports without walking every seat.
    fn count(&mut self, key: &ObjectRef, tally: CountsAs, add: bool) {
        match tally {
            CountsAs::Queued => {
                if add {
                    self.queued += 1;
                } else {
                    self.queued = self.queued.saturating_sub(1);
                }
            }
            CountsAs::BackingOff(cluster_queue) => {
                let jobs = self.backoff.entry(cluster_queue.clone()).or_default();
                if add {
                    jobs.insert(key.to_owned());
                } else {
                    jobs.remove(key);
                    if jobs.is_empty() {
                        self.backoff.remove(&cluster_queue);
                    }
                }
            }
            CountsAs::Held { attempt, .. } => {
                if add {
                    self.held.insert(key.to_owned(), attempt);
                } else {
                    self.held.remove(key);
                }
            }
            CountsAs::Other => {}
        }
    }

    /// The job's seat.
    pub(crate) fn get(&self, key: &str) -> Option<&Seat> {
        self.by_job.get(key)
    }

    /// Every seat, by job.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&ObjectRef, &Seat)> {
        self.by_job.iter()
    }

    /// How many jobs queue.
    pub(crate) fn queued(&self) -> usize {
        self.queued
    }

    /// Jobs backing off, counted per ClusterQueue.
    pub(crate) fn backing_off(&self) -> impl Iterator<Item = (&String, usize)> {
        self.backoff.iter().map(|(q, jobs)| (q, jobs.len()))
    }

    /// Held jobs with their current attempt.
    pub(crate) fn held(&self) -> &BTreeMap<ObjectRef, i32> {
        &self.held
    }
}

/// What a seat counts for in [`Seats`]' running counts.
enum CountsAs {
    Queued,
    BackingOff(String),
    Held {
        attempt: i32,
        /// Capacity is being bought for it: it is settled every pass.
        provisioning: bool,
    },
    Other,
}

impl CountsAs {
    fn of(seat: &Seat) -> CountsAs {
        match &seat.in_cycle {
            InCycle::Queued => CountsAs::Queued,
            InCycle::BackingOff { cluster_queue } => CountsAs::BackingOff(cluster_queue.clone()),
            InCycle::Holds { provisioning, .. } => CountsAs::Held {
                attempt: seat.attempt,
                provisioning: *provisioning,
            },
            InCycle::OnBoughtCapacity { .. } => CountsAs::Held {
                attempt: seat.attempt,
                provisioning: true,
            },
            InCycle::Out | InCycle::FinishRelease(_) => CountsAs::Other,
        }
    }
}
