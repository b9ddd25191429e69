//! The controller's whole state between passes, in four rooms, each owning one kind of fact:
//! - the [`Index`]: what the cluster shows (watches and write responses fold in);
//! - the [`Ledger`]: writes this replica's leadership term started and has not seen land;
//! - the [`Seats`]: every job as the last pass that settled it left it, and when each must
//!   be settled again;
//! - [`LastPass`]: memos of the last pass — admission's scheduler as it left it, the
//!   preemptors it remembered, counts it need not repeat.
//!
//! Beside them, the forecaster's memory ([`Forecasting`]): what finished jobs ran, and the
//! latest start-time forecast, which passes read into waiting jobs' statuses.
//!
//! Watches and write responses come in here; a pass reads the state and plans (see
//! [`crate::plan`]). Every change goes through it, so that the ledger stays in step with
//! what lands.

use crate::action::Action;
use crate::figure_budget::Figures;
use crate::forecasting::Forecasting;
use crate::index::{Index, Indexed, Written};
use crate::last_pass::LastPass;
use crate::ledger::Ledger;
use crate::seats::Seats;

/// The index plus the controller's own memory (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct State {
    /// What the cluster shows.
    pub(crate) index: Index,
    /// Writes started and not yet landed.
    pub(crate) ledger: Ledger,
    /// Every job as the last pass that settled it left it (see [`crate::seats`]).
    pub(crate) seats: Seats,
    /// What the last pass left for the next to reuse (see [`crate::last_pass`]).
    pub(crate) last: LastPass,
    /// The placement policy's name (see [`muster_topology::POLICY_NAMES`]); empty: best fit.
    pub(crate) placement_policy: String,
    /// How long a new job waits before its first status is written.
    pub(crate) first_status_after: FirstStatusAfter,
    /// The writes of figures alone, bounded per second (see [`crate::figure_budget`]).
    pub(crate) figures: Figures,
    /// Finished runs learned, ranges given and how they fared, and the latest start-time
    /// forecast (see [`crate::forecasting`]): made beside the passes, read by them.
    pub(crate) forecasting: Forecasting,
}

/// Seconds from a job's creation before its first status is written, when it still waits
/// then ([`crate::status::FIRST_STATUS_AFTER_SECONDS`] unless set).
#[derive(Clone, Copy, Debug)]
pub(crate) struct FirstStatusAfter(pub(crate) i64);

impl Default for FirstStatusAfter {
    fn default() -> FirstStatusAfter {
        FirstStatusAfter(crate::status::FIRST_STATUS_AFTER_SECONDS)
    }
}

impl State {
    /// An empty state.
    pub fn new() -> State {
        State::default()
    }

    /// An empty state whose scheduler places with the policy named `name` (one of
    /// [`muster_topology::POLICY_NAMES`]); an unknown name is an error naming the known ones.
    pub fn with_placement_policy(name: &str) -> Result<State, String> {
        if muster_topology::by_name(name).is_none() {
            return Err(format!(
                "unknown placement policy {name:?}; use one of {}",
                muster_topology::POLICY_NAMES.join(", ")
            ));
        }
        Ok(State {
            placement_policy: name.to_owned(),
            ..State::default()
        })
    }

    /// Writes a new job's first status once it has waited `seconds` since its creation
    /// (0: in the first pass that sees it wait).
    pub fn set_first_status_after(&mut self, seconds: i64) {
        self.first_status_after = FirstStatusAfter(seconds.max(0));
    }

    /// What a start-time forecast of the cluster at `now` (seconds) is made from; learns
    /// what finished and scores the ranges of jobs that started since the last call (see
    /// [`crate::forecasting`]).
    pub fn gather_forecast_input(&mut self, now: i64) -> crate::forecasting::Input {
        self.forecasting.gather(&self.index, &self.seats, now)
    }

    /// Keeps `latest` as the forecast passes and the visibility API read. The next pass
    /// explains every waiting job again, so that the new ranges reach their statuses as
    /// figures do (within the figure budget and refresh interval).
    pub fn keep_forecast(&mut self, latest: crate::forecasting::Latest) {
        self.forecasting.keep(&self.index, latest);
        self.last.explain_owed = true;
    }

    /// Folds in an added or modified object, as a watch reports it.
    pub fn apply<K: Indexed>(&mut self, object: K) {
        self.index.apply(object);
    }

    /// Removes a deleted object.
    pub fn delete<K: Indexed>(&mut self, object: &K) {
        self.index.delete(object);
    }

    /// A full list of `K` begins (the watch restarted): objects not listed again are gone.
    pub fn relist_begin<K: Indexed>(&mut self) {
        self.index.relist_begin::<K>();
    }

    /// The full list of `K` is complete: drops what it did not contain; `K` is synced.
    pub fn relist_done<K: Indexed>(&mut self) {
        self.index.relist_done::<K>();
    }

    /// An optional kind is being watched (see [`Index::expect_kind`]).
    pub fn expect_kind(&mut self, kind: crate::index::Kind) {
        self.index.expect_kind(kind);
    }

    /// What the cluster shows, as watches and write responses reported it.
    pub fn index(&self) -> &Index {
        &self.index
    }

    /// An action's writes landed, or failed: the objects the API server returned are folded
    /// in at once, and once its last action in flight has landed the job is free for the next
    /// pass. A failed release waits with backoff (its half-made pods are finished or rolled
    /// back by the next pass).
    pub fn landed(&mut self, action: &Action, result: Result<Vec<Written>, String>, now: i64) {
        let term = self.ledger.term();
        self.landed_in(term, action, result, now);
    }

    /// [`State::landed`] for an action planned in leadership term `term`. An action of an
    /// earlier term (this replica lost the Lease and won it again meanwhile) only folds in what
    /// it wrote: the bookkeeping of writes in flight started afresh with the new term, and must
    /// not free a job that the new term is writing.
    pub fn landed_in(
        &mut self,
        term: u64,
        action: &Action,
        result: Result<Vec<Written>, String>,
        now: i64,
    ) {
        let (outcome, written) = match result {
            Ok(written) => (Ok(()), written),
            Err(error) => (Err(error), Vec::new()),
        };
        if outcome.is_err()
            && let Some(job) = action.job()
        {
            // Nothing else may move the job: without this, a waiting job whose status write
            // failed would wait untold until something did.
            self.seats.write_failed(job.clone());
        }
        if term == self.ledger.term() {
            self.ledger.landed(action, outcome, now);
        }
        self.index.fold_in(written);
    }

    /// Settles `action`, which was never sent (a release whose pass counted on a job's end
    /// that did not land: see [`crate::ends`]): its job is settled again from what the API
    /// server shows, and no failure counts against it.
    pub(crate) fn not_sent(&mut self, term: u64, action: &Action) {
        if let Some(job) = action.job() {
            self.seats.write_failed(job.clone());
        }
        if term == self.ledger.term() {
            self.ledger.unsent(action);
        }
    }

    /// Whether `job`'s end, being written, gave its quota up in the pass that decided it
    /// ([`crate::ledger::Busy::Ending`]): the releases of the passes that run while it is in
    /// flight wait for it (see [`crate::ends`]).
    pub(crate) fn frees_early(&self, job: &str) -> bool {
        matches!(self.ledger.promised(job), Some(crate::ledger::Busy::Ending))
    }

    /// `job`'s end has been in flight too long to be counted on (see [`crate::ends::PATIENCE`]):
    /// from this pass on its job holds its quota until the end lands, and the releases of
    /// later passes do not wait for it. Whether it still counted on the end (a job settled
    /// meanwhile has nothing to hold); `stage` is where the end was (see
    /// [`crate::ends::EndStage`]), for the log.
    pub(crate) fn end_overdue(
        &mut self,
        job: &muster_api::ObjectRef,
        stage: crate::ends::EndStage,
    ) -> bool {
        let held = self.ledger.end_overdue(job);
        if held {
            tracing::warn!(
                job = %job,
                waiting_for = stage.label(),
                "a job's end is overdue: its quota is held until it lands"
            );
        }
        held
    }

    /// Folds in the objects read back after a failed write (see
    /// [`crate::executor::Executor::read_back`]): like a write's response, never over a newer
    /// version nor over a deletion the watch reported.
    pub fn read_back(&mut self, objects: Vec<crate::index::Written>) {
        self.index.fold_in(objects);
    }

    /// Queues a waiting job's status write of this pass for the sender (see
    /// [`crate::deferred`]) instead of sending it now; gives back any other action, to send
    /// now.
    pub fn defer(&mut self, action: Action) -> Option<Action> {
        self.ledger.defer(action)
    }

    /// The oldest queued status write, to send now, with the term it belongs to: its job is
    /// marked as written to until [`State::landed_in`].
    pub fn next_deferred(&mut self) -> Option<(u64, Action)> {
        let action = self.ledger.next_deferred()?;
        Some((self.ledger.term(), action))
    }

    /// The job `action` writes the status of, as the pass that planned it read it: the
    /// executor writes the status only onto that version (see [`crate::action::JobRead`]).
    pub fn decided_on(&self, action: &Action) -> Option<crate::action::JobRead> {
        self.ledger.read_for(action).cloned()
    }

    /// How many status writes are queued and not yet sent.
    pub fn deferred_len(&self) -> usize {
        self.ledger.queued()
    }

    /// The leadership term whose writes are being tracked (see [`State::landed_in`]).
    pub fn term(&self) -> u64 {
        self.ledger.term()
    }

    /// This replica starts leading: forget the writes of any earlier term (they may never have
    /// landed; the API server shows what did) and start a new term.
    pub fn start_term(&mut self) {
        self.ledger = Ledger::for_term(self.ledger.term() + 1);
        // Jobs settled against the old term's writes in flight settle again.
        self.seats = Seats::default();
        self.last.start_term();
    }
}
