//! Status writes of waiting jobs, queued apart from the writes that move work.
//!
//! A deep queue makes many status writes — every new job's first pending reason, and a new
//! reason whenever quota or capacity moves — and none of them starts, stops or frees
//! anything. Sent in line with releases and evictions they hold a pass up until the API
//! server has taken them all, and a 200 ms job then keeps its quota for as long as that
//! takes. So the run loop hands them to this queue instead: a sender takes them in the
//! order they were first queued, a few at a time, while passes go on.
//!
//! A queued write is the job's latest wish, not a log: a pass that wants a newer status for
//! the job replaces it in place (keeping its turn), a pass that admits, evicts or deletes the
//! job drops it (that write carries the whole status), and a pass that finds the status
//! already as it should be drops it too. So under load a job admitted soon after it arrived
//! never gets a pending status written at all, and the writes that do go out are current.

use std::collections::BTreeMap;

use muster_api::ObjectRef;

use crate::action::Action;

/// Queued status writes of waiting jobs, oldest first.
#[derive(Clone, Debug, Default)]
pub struct DeferredStatuses {
    next: u64,
    /// Turn → job.
    order: BTreeMap<u64, ObjectRef>,
    /// Job → (turn, the write).
    queued: BTreeMap<ObjectRef, (u64, Action)>,
}

impl DeferredStatuses {
    /// Queues `action` for `job`, or replaces the write already queued for it (which keeps
    /// its turn).
    pub(crate) fn put(&mut self, job: &ObjectRef, action: Action) {
        let Some(action) = self.replace(job, action) else {
            return;
        };
        let turn = self.next;
        self.next += 1;
        self.order.insert(turn, job.to_owned());
        self.queued.insert(job.to_owned(), (turn, action));
    }

    /// Replaces the write queued for `job`, keeping its turn; gives `action` back when none
    /// is queued.
    pub(crate) fn replace(&mut self, job: &ObjectRef, action: Action) -> Option<Action> {
        match self.queued.get_mut(job) {
            Some((_, queued)) => {
                *queued = action;
                None
            }
            None => Some(action),
        }
    }

    /// Drops the write queued for `job`; whether there was one.
    pub(crate) fn drop_job(&mut self, job: &str) -> bool {
        match self.queued.remove(job) {
            Some((turn, _)) => {
                self.order.remove(&turn);
                true
            }
            None => false,
        }
    }

    /// The oldest queued write, taken out of the queue.
    pub(crate) fn pop(&mut self) -> Option<(ObjectRef, Action)> {
        let (_, job) = self.order.pop_first()?;
        let (_, action) = self.queued.remove(&job)?;
        Some((job, action))
    }

    /// Whether a write is queued for `job`.
    pub fn contains(&self, job: &str) -> bool {
        self.queued.contains_key(job)
    }

    /// Jobs with a queued write, in key order.
    pub(crate) fn jobs(&self) -> impl Iterator<Item = &ObjectRef> {
        self.queued.keys()
    }

    /// Jobs with a queued write, by key: walked beside the ledger's own maps (see
    /// [`crate::ledger`]).
    pub(crate) fn queued(&self) -> &BTreeMap<ObjectRef, (u64, Action)> {
        &self.queued
    }

    /// How many writes are queued.
    pub fn len(&self) -> usize {
        self.queued.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }
}
