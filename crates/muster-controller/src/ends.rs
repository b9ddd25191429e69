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
//!
//! An end is counted on for [`PATIENCE`] at most. A write can hang for minutes (a partitioned
//! API server: each attempt waits out the client's read timeout), and every release of the
//! passes that counted on it would hang with it, cluster-wide. So a release gives up waiting
//! after [`PATIENCE`] and is not sent (its job is settled again, as after a failed end), and an
//! end in flight for longer is *overdue*: the passes that follow no longer wait for it, and
//! its job holds its quota again until the end lands ([`crate::state::State::end_overdue`]),
//! as every other write that gives quota up does.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use muster_api::ObjectRef;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::action::Action;

/// How long an end in flight is counted on: past it the passes to come hold its quota again
/// until it lands, and a release waiting for it gives up (see the module's docs). Ends land
/// in milliseconds; one that takes seconds is riding out retries or a partition.
pub(crate) const PATIENCE: Duration = Duration::from_secs(5);

/// One end's landing as its sender reports it: `None` while in flight, then whether it landed.
pub(crate) type Landing = watch::Receiver<Option<bool>>;

/// The ends in flight, kept beside the state for the passes to come.
#[derive(Debug, Default)]
pub(crate) struct EndsInFlight {
    in_flight: Mutex<Vec<InFlight>>,
}

/// One end in flight: how it lands, whose it is, and since when it is counted on.
#[derive(Debug)]
struct InFlight {
    landing: Landing,
    job: ObjectRef,
    since: Instant,
}

/// What a pass is to know of the ends in flight as it begins (see [`EndsInFlight::before_pass`]).
#[derive(Debug, Default)]
pub(crate) struct BeforePass {
    /// The ends the pass's releases wait for.
    pub(crate) waits_for: Vec<Landing>,
    /// The jobs whose ends have been in flight for [`PATIENCE`] or longer: each holds its
    /// quota again from this pass on, and is waited for no more.
    pub(crate) overdue: Vec<ObjectRef>,
}

impl EndsInFlight {
    /// The ends still in flight, taken just before a pass reads the state: those that have
    /// landed or failed by then are in the state the pass reads (a landing is folded in before
    /// it is told here), the overdue are handed back to be held again, the rest are what the
    /// pass's releases wait for.
    pub(crate) fn before_pass(&self) -> BeforePass {
        let now = Instant::now();
        let mut in_flight = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // A sender dropped without telling (its task stopped) has nothing more to say.
        in_flight.retain(|end| end.landing.borrow().is_none() && end.landing.has_changed().is_ok());
        let mut pass = BeforePass::default();
        in_flight.retain(|end| {
            if now.saturating_duration_since(end.since) >= PATIENCE {
                pass.overdue.push(end.job.clone());
                false
            } else {
                pass.waits_for.push(end.landing.clone());
                true
            }
        });
        pass
    }

    /// `job`'s end about to be sent: kept in flight until its sender tells how it went.
    pub(crate) fn sending(&self, job: ObjectRef) -> (EndSent, Landing) {
        let (sender, landing) = watch::channel(None);
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(InFlight {
                landing: landing.clone(),
                job,
                since: Instant::now(),
            });
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

/// Waits for every one of `landings`, for [`PATIENCE`] at most; whether all landed in time.
pub(crate) async fn all_landed(landings: Vec<Landing>) -> bool {
    let every = async {
        for mut landing in landings {
            match landing.wait_for(Option::is_some).await {
                Ok(told) if *told == Some(true) => {}
                _ => return false,
            }
        }
        true
    };
    tokio::time::timeout(PATIENCE, every).await.unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::{EndsInFlight, PATIENCE, all_landed};

    fn job(name: &str) -> muster_api::ObjectRef {
        muster_api::ObjectRef::new("team-a", name)
    }

    #[tokio::test]
    async fn a_release_waits_for_the_ends_in_flight_and_is_told_when_one_failed() {
        let ends = EndsInFlight::default();
        let (first, _) = ends.sending(job("j1"));
        let (second, _) = ends.sending(job("j2"));
        let waited = ends.before_pass().waits_for;
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
            ends.before_pass().waits_for.is_empty(),
            "landed ends are not waited for again"
        );

        let (failed, _) = ends.sending(job("j3"));
        let (dropped, _) = ends.sending(job("j4"));
        let waited = ends.before_pass().waits_for;
        failed.landed(false);
        drop(dropped);
        assert!(
            !all_landed(waited).await,
            "an end that failed stops the release"
        );
        assert!(
            ends.before_pass().waits_for.is_empty(),
            "an end that failed, or whose sender stopped, is in the state the next pass reads"
        );
    }

    #[tokio::test]
    async fn an_end_dropped_untold_counts_as_failed() {
        let ends = EndsInFlight::default();
        let (sent, _) = ends.sending(job("j5"));
        let waited = ends.before_pass().waits_for;
        drop(sent);
        assert!(!all_landed(waited).await);
    }

    /// An end that hangs (a partitioned API server) holds back the releases counting on it
    /// for `PATIENCE` at most, and the passes after that hold its job's quota again instead
    /// of waiting for it.
    #[tokio::test(start_paused = true)]
    async fn an_end_in_flight_past_patience_is_overdue_and_no_longer_waited_for() {
        let ends = EndsInFlight::default();
        let (hung, _) = ends.sending(job("hung"));
        let waiting = tokio::spawn(all_landed(ends.before_pass().waits_for));
        tokio::time::sleep(PATIENCE / 2).await;
        assert!(!waiting.is_finished(), "the end may still land");
        let (_fresh, _) = ends.sending(job("fresh"));
        tokio::time::sleep(PATIENCE / 2).await;
        assert!(
            !waiting.await.unwrap_or(true),
            "a release gives up on an end that has not landed in time"
        );
        let pass = ends.before_pass();
        assert_eq!(pass.overdue, vec![job("hung")], "{pass:?}");
        assert_eq!(pass.waits_for.len(), 1, "the fresh end is still counted on");
        let next = ends.before_pass();
        assert!(
            next.overdue.is_empty(),
            "an end is handed back as overdue once: {next:?}"
        );
        hung.landed(true);
    }
}
