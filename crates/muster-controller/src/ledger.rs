//! The ledger of writes in flight: what passes of this leadership term have promised and not
//! yet seen land. A pass reads it so that it neither repeats a write under way nor promises
//! the same quota or nodes twice; a landing (see [`crate::state`]) settles its entry.
//!
//! The ledger knows nothing of the cluster: the index holds what the API server shows, the
//! ledger what this replica is about to make it show.

use std::collections::{BTreeMap, BTreeSet};

use muster_admission::{Admitted, Holding};
use muster_api::GpuJob;

use crate::action::{Action, JobRead};
use crate::deferred::DeferredStatuses;

/// Writes the controller has started and not yet seen land, kept between the passes of one
/// leadership term.
#[derive(Clone, Debug, Default)]
pub struct Ledger {
    /// Jobs with an action in flight.
    pub(crate) busy: BTreeMap<String, Busy>,
    /// Per job, how many of its actions are in flight: it stays [`Ledger::busy`] until the
    /// last one lands (a pass may send several, such as a finalizer and a release, and the
    /// first to land must not free a job whose release is still being written).
    pub(crate) in_flight: BTreeMap<String, u32>,
    /// Jobs whose finalizer is being added.
    pub(crate) finalizing: BTreeSet<String>,
    /// Queues whose status is being written.
    pub(crate) queues: BTreeSet<String>,
    /// Jobs whose releases failed: (failures, retry at, last error).
    pub(crate) failed: BTreeMap<String, (u32, i64, String)>,
    /// Waiting jobs whose status this term wrote within the last
    /// [`crate::status::PENDING_REFRESH_SECONDS`], and when.
    pub(crate) refreshed: BTreeMap<String, i64>,
    /// The leadership term these writes belong to.
    pub(crate) term: u64,
    /// Status writes of waiting jobs queued for the sender, not yet sent: each such job is
    /// [`Busy::StatusQueued`] and counts one write in flight.
    pub(crate) deferred: DeferredStatuses,
    /// Per job with a status write in flight (or queued), the job as the pass that planned
    /// the write read it: the write is made only onto that version.
    pub(crate) reads: BTreeMap<String, JobRead>,
    /// Per job with a release in flight, when its admission began (the time its status will
    /// show): the job holds its quota and nodes from then on, in every pass until the
    /// release lands, as it will once it has.
    pub(crate) released_at: BTreeMap<String, i64>,
}

impl Ledger {
    /// Whether a write for `job` is under way: queued status writes do not count (a pass
    /// may replace or drop them, as nothing has been sent).
    pub(crate) fn is_busy(&self, job: &str) -> bool {
        self.busy
            .get(job)
            .is_some_and(|b| !matches!(b, Busy::StatusQueued))
    }

    /// Drops the queued status write of `job`, if any, with its count in flight.
    pub(crate) fn drop_deferred(&mut self, job: &str) {
        if !self.deferred.drop_job(job) {
            return;
        }
        let left = self.in_flight.get_mut(job).map_or(0, |n| {
            *n = n.saturating_sub(1);
            *n
        });
        if left == 0 {
            self.in_flight.remove(job);
            self.reads.remove(job);
        }
        if matches!(self.busy.get(job), Some(Busy::StatusQueued)) {
            self.busy.remove(job);
        }
    }

    /// Queued status writes whose job has since got another write, or is gone, are dropped:
    /// the other write carries the whole status, and a gone job has none.
    pub(crate) fn drop_superseded(&mut self, jobs: &BTreeMap<String, GpuJob>) {
        let superseded: Vec<String> = self
            .deferred
            .jobs()
            .filter(|j| {
                !jobs.contains_key(*j) || !matches!(self.busy.get(*j), Some(Busy::StatusQueued))
            })
            .map(str::to_owned)
            .collect();
        for job in superseded {
            self.drop_deferred(&job);
        }
    }
}

/// What is in flight for a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Busy {
    /// A release of this admission: the job holds it meanwhile.
    Release(Admitted),
    /// A status write for a waiting job: it still queues, but is not admitted until the
    /// write lands (two status writes in flight could land out of order).
    Status,
    /// A status write for a waiting job, queued and not yet sent (see
    /// [`crate::deferred`]): the job queues and may be admitted, which drops the write.
    StatusQueued,
    /// A new ProvisioningRequest being created: the job holds its quota meanwhile.
    Provision(Holding),
    /// Anything else (eviction, deletion, finalizing): it neither holds nor queues.
    Other,
}

impl Ledger {
    /// A ledger for leadership term `term`, with nothing in flight.
    pub(crate) fn for_term(term: u64) -> Ledger {
        Ledger {
            term,
            ..Ledger::default()
        }
    }

    /// Records a failed release (or request for capacity): the job waits
    /// `10 s × 2^failures` (at most 10 minutes), with the error in its status, and tries again.
    pub(crate) fn fail_release(&mut self, key: &str, now: i64, error: String) {
        let failures = self.failed.get(key).map_or(0, |f| f.0) + 1;
        let delay = (10i64 << failures.min(6)).min(600);
        self.failed
            .insert(key.to_owned(), (failures, now + delay, error));
    }

    /// Counts every job action of a pass as in flight until it lands, and keeps the version
    /// of `jobs` each status write was decided on.
    pub(crate) fn sent(&mut self, actions: &[Action], jobs: &BTreeMap<String, GpuJob>) {
        for action in actions {
            if let Some(job) = action.job() {
                *self.in_flight.entry(job.to_owned()).or_default() += 1;
                if let (true, Some(read)) = (action.writes_job_status(), jobs.get(job)) {
                    self.reads.insert(job.to_owned(), JobRead::of(read));
                }
                if let Action::Release { status, .. } = action
                    && let Some(at) = crate::holding::admitted_at(status)
                {
                    self.released_at.insert(job.to_owned(), at);
                }
            }
        }
    }

    /// The version of the job `action` is about that the pass planning it read, when the
    /// action writes the job's status.
    pub(crate) fn read_for(&self, action: &Action) -> Option<&JobRead> {
        action
            .job()
            .filter(|_| action.writes_job_status())
            .and_then(|job| self.reads.get(job))
    }

    /// Whether `job` has any write in flight or promised.
    pub(crate) fn touches(&self, job: &str) -> bool {
        self.busy.contains_key(job) || self.in_flight.contains_key(job)
    }

    /// Settles the bookkeeping of `action`, which landed (`ok`) or failed at `now`: once a
    /// job's last action in flight has landed it is free for the next pass; a failed release
    /// or request for capacity waits with backoff (its half-made objects are finished or
    /// rolled back by the next pass).
    pub(crate) fn landed(&mut self, action: &Action, outcome: Result<(), String>, now: i64) {
        if let Some(job) = action.job() {
            let left = self.in_flight.get_mut(job).map_or(0, |n| {
                *n = n.saturating_sub(1);
                *n
            });
            if left == 0 {
                self.in_flight.remove(job);
                self.busy.remove(job);
                self.reads.remove(job);
                self.released_at.remove(job);
            }
        }
        match action {
            Action::AddFinalizer { job } => {
                self.finalizing.remove(job);
            }
            Action::ClusterQueueStatus { name, .. } => {
                self.queues.remove(name);
            }
            Action::LocalQueueStatus { key, .. } => {
                self.queues.remove(&format!("lq:{key}"));
            }
            Action::FlavorStatus { name, .. } => {
                self.queues.remove(&format!("rf:{name}"));
            }
            _ => {}
        }
        match outcome {
            Ok(()) => {
                if let Action::Release { job, .. } = action {
                    self.failed.remove(job);
                }
            }
            Err(error) => {
                if let Action::Release { job, .. } | Action::Provision { job, .. } = action {
                    self.fail_release(job, now, error);
                }
            }
        }
    }

    /// Queues a waiting job's status write for the sender (see [`crate::deferred`]) instead
    /// of sending it now; gives back any other action, to send now.
    pub(crate) fn defer(&mut self, action: Action) -> Option<Action> {
        let Action::JobStatus { job, .. } = &action else {
            return Some(action);
        };
        if !matches!(self.busy.get(job), Some(Busy::Status)) {
            return Some(action);
        }
        let job = job.clone();
        self.busy.insert(job.clone(), Busy::StatusQueued);
        self.deferred.put(&job, action);
        None
    }

    /// The oldest queued status write, to send now: its job is marked as written to until it
    /// lands.
    pub(crate) fn next_deferred(&mut self) -> Option<Action> {
        let (job, action) = self.deferred.pop()?;
        self.busy.insert(job, Busy::Status);
        Some(action)
    }
}
