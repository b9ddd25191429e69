//! Jobs' ends in flight, and the releases that wait for them to land.
//!
//! A gang whose pods have all ended gives its quota up in the pass that writes its end
//! ([`crate::ledger::Busy::Ending`]), so that pass may admit the next job into the quota at
//! once rather than a pass after the end has landed. The API server must still never show
//! both admitted: a release or a request for capacity (which takes quota too) goes out only
//! once every end that was in flight when its pass ran has landed, and is not sent at all if
//! one failed. The job is then settled again from what the API server shows and released by a
//! later pass, which sees the failed end's job hold its quota again. A leader that dies
//! meanwhile never sends the release.
//!
//! An end counts for the passes that run while it is in flight, not for its job alone: which
//! quota a release takes is admission's business, and waiting for every end (they land within
//! a request's time) is simpler than knowing which one freed it.

use std::sync::{Mutex, PoisonError};

use tokio::sync::watch;

use crate::action::Action;

/// One end's landing as its sender reports it: `None` while in flight, then whether it landed.
pub(crate) type Landing = watch::Receiver<Option<bool>>;

/// The ends in flight, kept beside the state for the passes to come.
#[derive(Debug, Default)]
pub(crate) struct EndsInFlight {
    in_flight: Mutex<Vec<Landing>>,
}

impl EndsInFlight {
    /// The ends still in flight, taken just before a pass reads the state: those that have
    /// landed or failed by then are in the state the pass reads (a landing is folded in before
    /// it is told here), the rest are what the pass's releases wait for.
    pub(crate) fn before_pass(&self) -> Vec<Landing> {
        let mut in_flight = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // A sender dropped without telling (its task stopped) has nothing more to say.
        in_flight.retain(|landing| landing.borrow().is_none() && landing.has_changed().is_ok());
        in_flight.clone()
    }

    /// An end about to be sent: kept in flight until its sender tells how it went.
    pub(crate) fn sending(&self) -> (EndSent, Landing) {
        let (sender, landing) = watch::channel(None);
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(landing.clone());
        (EndSent(sender), landing)
    }
}

/// Tells the releases waiting for an end how it went; dropped untold, it counts as failed.
pub(crate) struct EndSent(watch::Sender<Option<bool>>);

impl EndSent {
    /// The end landed (`true`) or failed.
    pub(crate) fn landed(self, ok: bool) {
        self.0.send_replace(Some(ok));
    }
}

/// Whether `action` is the end of a job (a status that says it succeeded) that gave its
/// quota up in the pass that decided it, as `frees_early` says of its job: the releases of
/// the passes that run while it is in flight wait for it. An end that holds its quota until
/// it lands is not waited for.
pub(crate) fn is_early_end(action: &Action, frees_early: impl Fn(&str) -> bool) -> bool {
    matches!(action, Action::JobStatus { job, status, .. }
        if status.phase == Some(muster_api::GpuJobPhase::Succeeded) && frees_early(job.as_str()))
}

/// Whether `action` takes quota (a release or a request for capacity): it waits for the ends
/// in flight when its pass ran.
pub(crate) fn takes_quota(action: &Action) -> bool {
    matches!(action, Action::Release { .. } | Action::Provision { .. })
}

/// Waits for every one of `landings`; whether all landed.
pub(crate) async fn all_landed(landings: Vec<Landing>) -> bool {
    for mut landing in landings {
        match landing.wait_for(Option::is_some).await {
            Ok(told) if *told == Some(true) => {}
            _ => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::{EndsInFlight, all_landed};

    #[tokio::test]
    async fn a_release_waits_for_the_ends_in_flight_and_is_told_when_one_failed() {
        let ends = EndsInFlight::default();
        let (first, _) = ends.sending();
        let (second, _) = ends.sending();
        let waited = ends.before_pass();
        assert_eq!(waited.len(), 2);
        let waiting = tokio::spawn(all_landed(waited));
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "neither end has landed");
        first.landed(true);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "the second end is still in flight");
        second.landed(true);
        assert!(waiting.await.unwrap_or(false), "both landed");
        assert!(
            ends.before_pass().is_empty(),
            "landed ends are not waited for again"
        );

        let (failed, _) = ends.sending();
        let (dropped, _) = ends.sending();
        let waited = ends.before_pass();
        failed.landed(false);
        drop(dropped);
        assert!(
            !all_landed(waited).await,
            "an end that failed stops the release"
        );
        assert!(
            ends.before_pass().is_empty(),
            "an end that failed, or whose sender stopped, is in the state the next pass reads"
        );
    }

    #[tokio::test]
    async fn an_end_dropped_untold_counts_as_failed() {
        let ends = EndsInFlight::default();
        let (sent, _) = ends.sending();
        let waited = ends.before_pass();
        drop(sent);
        assert!(!all_landed(waited).await);
    }
}
