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

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
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

/// One end in flight: how it lands, whose it is, since when it is counted on, and whether
/// its write has been sent yet (its unit has a write permit).
#[derive(Debug)]
struct InFlight {
    landing: Landing,
    job: ObjectRef,
    since: Instant,
    writing: Arc<AtomicBool>,
}

/// Where an overdue end was when its [`PATIENCE`] ran out: what kept it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EndStage {
    /// Its write had not been sent: it was waiting for a write permit.
    Permit,
    /// Its write had been sent and had not been answered (or was being retried).
    Write,
}

impl EndStage {
    /// The metric label and log field for it.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Permit => "permit",
            Self::Write => "write",
        }
    }
}

/// What a pass is to know of the ends in flight as it begins (see [`EndsInFlight::before_pass`]).
#[derive(Debug, Default)]
pub(crate) struct BeforePass {
    /// The ends the pass's releases wait for.
    pub(crate) waits_for: Vec<Landing>,
    /// The jobs whose ends have been in flight for [`PATIENCE`] or longer, each with what
    /// kept it: each holds its quota again from this pass on, and is waited for no more.
    pub(crate) overdue: Vec<(ObjectRef, EndStage)>,
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
                let stage = if end.writing.load(Ordering::Relaxed) {
                    EndStage::Write
                } else {
                    EndStage::Permit
                };
                pass.overdue.push((end.job.clone(), stage));
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
        let writing = Arc::new(AtomicBool::new(false));
        let since = Instant::now();
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(InFlight {
                landing: landing.clone(),
                job: job.clone(),
                since,
                writing: Arc::clone(&writing),
            });
        let sent = EndSent {
            sender,
            writing,
            job,
            since,
            writing_at: None,
        };
        (sent, landing)
    }
}

/// How long an end may take to land before its landing is logged with what the time went
/// on: a fifth of [`PATIENCE`].
const SLOW: Duration = Duration::from_secs(1);

/// Tells the releases waiting for an end how it went; dropped untold, it counts as failed.
pub(crate) struct EndSent {
    sender: watch::Sender<Option<bool>>,
    writing: Arc<AtomicBool>,
    job: ObjectRef,
    /// When its pass sent it: its patience counts from here.
    since: Instant,
    /// When its unit had its write permit.
    writing_at: Option<Instant>,
}

/// What an end's landing took once its write permit was in hand (see [`EndSent::landed`]).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct EndTook {
    /// The writes of its unit up to and with its status write (and that write's Event).
    pub(crate) writing: Duration,
    /// Folding their answers into the state (which waits for a pass that holds it), with
    /// the read-back after a write that failed.
    pub(crate) folding: Duration,
}

impl EndSent {
    /// The end's write is being sent: its unit has its write permit. An end overdue after
    /// this was still being written when its patience ran out (see [`EndStage`]), however
    /// long it had waited for the permit.
    pub(crate) fn writing(&mut self) {
        self.writing.store(true, Ordering::Relaxed);
        self.writing_at = Some(Instant::now());
    }

    /// The end landed (`true`) or failed, its writes and their folding having taken `took`;
    /// an end that took [`SLOW`] or longer from its pass is logged with where the time went.
    pub(crate) fn landed(self, ok: bool, took: EndTook) {
        let total = self.since.elapsed();
        if total >= SLOW {
            let permit = self
                .writing_at
                .map(|at| at.saturating_duration_since(self.since));
            tracing::info!(
                job = %self.job,
                landed = ok,
                total_ms = total.as_millis(),
                permit_ms = permit.map(|p| p.as_millis()),
                writing_ms = took.writing.as_millis(),
                folding_ms = took.folding.as_millis(),
                "a job's end was slow to land"
            );
        }
        self.sender.send_replace(Some(ok));
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
    use super::{EndStage, EndTook, EndsInFlight, PATIENCE, all_landed};

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
        first.landed(true, EndTook::default());
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "the second end is still in flight");
        second.landed(true, EndTook::default());
        assert!(waiting.await.unwrap_or(false), "both landed");
        assert!(
            ends.before_pass().waits_for.is_empty(),
            "landed ends are not waited for again"
        );

        let (failed, _) = ends.sending(job("j3"));
        let (dropped, _) = ends.sending(job("j4"));
        let waited = ends.before_pass().waits_for;
        failed.landed(false, EndTook::default());
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
        let (mut hung, _) = ends.sending(job("hung"));
        let (queued, _) = ends.sending(job("queued"));
        hung.writing();
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
        assert_eq!(
            pass.overdue,
            vec![
                (job("hung"), EndStage::Write),
                (job("queued"), EndStage::Permit)
            ],
            "each overdue end says whether its write had gone out: {pass:?}"
        );
        assert_eq!(pass.waits_for.len(), 1, "the fresh end is still counted on");
        let next = ends.before_pass();
        assert!(
            next.overdue.is_empty(),
            "an end is handed back as overdue once: {next:?}"
        );
        hung.landed(true, EndTook::default());
        queued.landed(true, EndTook::default());
    }
}
