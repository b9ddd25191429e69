//! One job's lifecycle as a state machine: from what the cluster shows for one job — its
//! status, its pods and their nodes, its ProvisioningRequests — and the writes in flight for
//! it, to its [`Phase`] and the [`Step`] a pass takes for it. Pure: [`step`] reads the index
//! and the ledger and changes neither, so every situation is one row of a table test (see
//! `tests.rs` beside this file).
//!
//! Where to look for "what happens when …":
//! - a pod of a running gang fails, its node goes away, or the gang is not Ready in time:
//!   [`step`], the admitted branch (`admitted.rs`), through [`crate::lifecycle::health`];
//! - a release was cut short (a replica died, a write failed): `admitted.rs` and `cut_off`;
//! - the autoscaler answers a ProvisioningRequest: `provisioning.rs`;
//! - a job is deleted or suspended: [`step`] and `admitted.rs`;
//! - a restarted gang's old pods linger (a node partitioned or down): `terminating.rs`,
//!   through [`crate::holding::draining`] and [`crate::unreachable`].

mod admitted;
pub(crate) mod entry;
mod provisioning;
mod terminating;
#[cfg(test)]
pub(crate) mod tests;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use muster_admission::{Admitted, Holding};
use muster_api::gpujob::{GpuJobPhase, GpuJobStatus, PendingReasonKind};
use muster_api::wire::FINALIZER;
use muster_api::{GpuJob, ObjectRef};

use crate::action::{Action, Note};
use crate::holding::{
    Pods, draining, held_by_pods, held_by_untaken_release, holding, holding_of,
    recovered_admission, seconds, split_pods,
};
use crate::index::Index;
use crate::ledger::{Busy, Failure, Ledger};
use crate::provision;

/// Where a job is in its life, as the cluster (and the writes in flight) show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Queued or pending: holds nothing, may be admitted (or waits out a backoff).
    Waiting,
    /// Holds quota while the autoscaler provisions its capacity.
    Provisioning,
    /// Admitted: its gang is being created and ungated, or not every pod is Ready yet (and a
    /// release cut short is finished or rolled back here).
    Releasing,
    /// Every pod of the gang is Ready.
    Running,
    /// Every pod succeeded; the status does not say so yet.
    Finishing,
    /// Its admission is gone (preempted, timed out, suspended, revoked) and its pods are
    /// leaving, or an eviction is being written.
    Evicting,
    /// Its gang broke (a pod failed, a node went away) and starts again, or pods of an
    /// earlier attempt are being removed.
    Restarting,
    /// Finished without success.
    Failed,
    /// Finished: every pod succeeded.
    Succeeded,
    /// Deleted: its pods and Service are removed, then Muster's finalizer.
    Deleted,
}

/// How admission's cycle is to see a job this pass.
#[derive(Clone, Debug, PartialEq)]
pub enum InCycle {
    /// Not at all: it neither holds nor queues.
    Out,
    /// It queues: the cycle may admit it.
    Queued,
    /// It holds `holding` (quota, and nodes unless `provisioning`: capacity being bought).
    Holds {
        /// What it holds.
        holding: Holding,
        /// Whether capacity is being bought for it (it holds quota, no nodes).
        provisioning: bool,
        /// `Some` when its attempt is over and it holds only until that is carried out: an
        /// eviction or a finish whose status write has not landed, or pods of the attempt
        /// still leaving (see [`step`]). What it does once they are gone.
        leaving: Option<AfterLeaving>,
    },
    /// It holds quota for capacity the autoscaler provisioned, and is placed there first,
    /// on nodes matching `node_selector`.
    OnBoughtCapacity {
        /// Its quota.
        holding: Holding,
        /// What the provisioned nodes carry.
        node_selector: BTreeMap<String, String>,
    },
    /// Its release was cut short: the pass finishes it now, as admitted.
    FinishRelease(Admitted),
    /// It waits out a backoff in `cluster_queue` (counted there, not queued).
    BackingOff {
        /// Its ClusterQueue ("" without one).
        cluster_queue: String,
    },
}

/// What a job whose attempt is over does once what it still holds is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterLeaving {
    /// It queues again (once its backoff, if its status names one, ends).
    Queues,
    /// It is done (finished, failed or deleted).
    Ends,
}

/// What a pass does for one job.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// Where the job is.
    pub phase: Phase,
    /// Muster's finalizer goes on first (the job holds something and lacks it).
    pub add_finalizer: bool,
    /// Writes to make now, in order.
    pub actions: Vec<Action>,
    /// How the job counts while `actions` are in flight: a status write of a provisioning job
    /// keeps its quota held; anything else neither holds nor queues.
    pub(crate) busy: Option<Busy>,
    /// How admission's cycle sees it.
    pub in_cycle: InCycle,
    /// The run the actions end began at this time (seconds): GPU time lost or completed.
    pub ran_since: Option<i64>,
    /// The gang became Ready this pass, this many seconds after the job was created.
    pub to_running: Option<i64>,
    /// Time alone changes this step at this second (a pods-ready deadline, the end of a
    /// backoff), though nothing the job's objects show does.
    pub until: Option<i64>,
}

impl Step {
    fn new(phase: Phase) -> Step {
        Step {
            phase,
            add_finalizer: false,
            actions: Vec::new(),
            busy: None,
            in_cycle: InCycle::Out,
            ran_since: None,
            to_running: None,
            until: None,
        }
    }

    fn with(mut self, in_cycle: InCycle) -> Step {
        self.in_cycle = in_cycle;
        self
    }

    fn holds(self, holding: Holding, provisioning: bool) -> Step {
        self.with(InCycle::Holds {
            holding,
            provisioning,
            leaving: None,
        })
    }

    fn holds_maybe(self, holding: Option<Holding>, provisioning: bool) -> Step {
        match holding {
            Some(h) => self.holds(h, provisioning),
            None => self,
        }
    }

    /// Adds a write that keeps the job busy (neither holding nor queuing) until it lands.
    fn act(mut self, action: Action) -> Step {
        self.actions.push(action);
        self.busy = Some(Busy::Other);
        self
    }

    /// Adds the write of the end of a job whose pods have all ended: it holds nothing from
    /// this pass on (see [`Busy::Ending`]).
    fn end(mut self, action: Action) -> Step {
        self.actions.push(action);
        self.busy = Some(Busy::Ending);
        self
    }

    /// Whether the job's end is being written and it holds nothing meanwhile.
    fn ending(&self) -> bool {
        matches!(self.busy, Some(Busy::Ending))
    }

    /// A one-line description, for tests and logs: the phase, each write, and how the cycle
    /// sees the job.
    pub fn describe(&self) -> String {
        let mut parts = vec![format!("{:?}", self.phase)];
        if self.add_finalizer {
            parts.push("AddFinalizer".to_owned());
        }
        for action in &self.actions {
            parts.push(match action {
                Action::Evict { event, .. } => format!("Evict({})", event.reason),
                Action::JobStatus {
                    status,
                    event: Some(event),
                    ..
                } => format!("JobStatus({}, {})", phase_name(status), event.reason),
                Action::JobStatus { status, .. } => format!("JobStatus({})", phase_name(status)),
                other => other.kind().to_owned(),
            });
        }
        parts.push(match &self.in_cycle {
            InCycle::Out => "out".to_owned(),
            InCycle::Queued => "queued".to_owned(),
            InCycle::Holds {
                provisioning: false,
                ..
            } => "holds".to_owned(),
            InCycle::Holds {
                provisioning: true, ..
            } => "holds quota".to_owned(),
            InCycle::OnBoughtCapacity { .. } => "on bought capacity".to_owned(),
            InCycle::FinishRelease(_) => "finish release".to_owned(),
            InCycle::BackingOff { .. } => "backing off".to_owned(),
        });
        parts.join(" · ")
    }
}

fn phase_name(status: &GpuJobStatus) -> String {
    status
        .phase
        .map_or_else(|| "-".to_owned(), |p| format!("{p:?}"))
}

/// The phase a job's status shows, for a job whose writes are in flight.
fn shown_phase(job: &GpuJob, status: &GpuJobStatus) -> Phase {
    if job.metadata.deletion_timestamp.is_some() {
        return Phase::Deleted;
    }
    match status.phase {
        Some(GpuJobPhase::Succeeded) => Phase::Succeeded,
        Some(GpuJobPhase::Failed) => Phase::Failed,
        _ if provision::is_provisioning(status) => Phase::Provisioning,
        Some(GpuJobPhase::Running) => Phase::Running,
        _ if status.admission.is_some() => Phase::Releasing,
        _ => Phase::Waiting,
    }
}

/// Whether Muster's finalizer is on the job.
pub(crate) fn has_finalizer(job: &GpuJob) -> bool {
    job.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == FINALIZER))
}

/// Deletes the job's requests and templates of its current attempt. Every name the attempt
/// could have used goes, whatever its queue's class is now (ones that never existed count as
/// deleted), so a queue that changed or stopped buying leaves nothing behind.
pub(crate) fn unprovision(job: &GpuJob, status: &GpuJobStatus) -> Action {
    let attempt = provision::attempts(status);
    Action::Unprovision {
        job: provision::job_key(job),
        requests: provision::possible_request_keys(job, attempt),
        templates: provision::template_keys(job, attempt),
    }
}

/// The step of job `key` at `now`, from the index and the writes in flight; `None` when the
/// index does not hold the job.
///
/// A job whose step holds nothing while pods of it may still run holds their quota all the
/// same (see [`held_by_pods`]): a rolled-back release, an eviction or a finish frees its quota
/// only once its pods are being deleted, so a gang released into that quota never runs
/// beside them. So does a one-pod Job's entry evicted before its Job showed the release
/// taken in, whose pod may exist unseen ([`held_by_untaken_release`]). And a job whose status still names an admission holds it until a write
/// saying otherwise has landed (an eviction, a request for capacity given up): in
/// the pass that decides the write here, while it is in flight in [`step_by_status`]. Until
/// then the API server shows the job admitted, and a gang released into its quota could show
/// admitted beside it (its status written first, or this write lost with a leader that died).
/// The exception is the end of a gang whose pods have all ended ([`Busy::Ending`]): its
/// admission holds nothing from the pass that decides it (pods of it that may still run
/// do, as above), and the releases that could take its quota are sent only once it has
/// landed (see [`crate::ends`]), which keeps the same promise.
pub fn step(index: &Index, ledger: &Ledger, key: &ObjectRef, now: &Time) -> Option<Step> {
    let mut step = step_by_status(index, ledger, key, now)?;
    // Its end gives its admission up at once; pods of it that may still run hold all the
    // same (below).
    let ending = step.ending() || matches!(ledger.promised(key), Some(Busy::Ending));
    let now_s = now.0.as_second();
    if matches!(
        step.in_cycle,
        InCycle::Out | InCycle::Queued | InCycle::BackingOff { .. }
    ) {
        let job = index.jobs.get(key)?;
        let status = job.status.as_ref();
        let leaving = Some(after_leaving(&step));
        if let Some(status) = status.filter(|s| s.admission.is_some() && !ending) {
            let (current, _) = split_pods(index, key, status.requeue_count);
            if let Some(holding) = holding_of(job, status, &current) {
                step.in_cycle = InCycle::Holds {
                    holding,
                    provisioning: provision::is_provisioning(status),
                    leaving,
                };
                return Some(step);
            }
        }
        let attempt = status.map_or(0, |s| s.requeue_count);
        let since = status.and_then(crate::holding::admitted_at);
        if let Some(holding) = held_by_pods(index, job, key, attempt, since) {
            step.in_cycle = InCycle::Holds {
                holding,
                provisioning: false,
                leaving,
            };
        } else if let Some((holding, until)) = held_by_untaken_release(index, job, now_s) {
            // A pod its controller may have made unseen, from a release evicted before the
            // Job showed it: its quota stays taken until the Job shows the suspension taken
            // in, or for a while.
            step.in_cycle = InCycle::Holds {
                holding,
                provisioning: false,
                leaving,
            };
            step.until = match (step.until, until) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
    }
    Some(step)
}

/// What a job whose step holds nothing does once what it still holds is gone: what the step
/// says it does now (queue or back off), or, while its eviction or the removal of an earlier
/// attempt's pods is being written, queue again; anything else is done.
fn after_leaving(step: &Step) -> AfterLeaving {
    match (&step.in_cycle, step.phase) {
        (InCycle::Queued | InCycle::BackingOff { .. }, _)
        | (InCycle::Out, Phase::Evicting | Phase::Restarting) => AfterLeaving::Queues,
        _ => AfterLeaving::Ends,
    }
}

/// When the backoff `status` names ends, seconds: the eta of its pending reason when that is
/// a backoff (after an eviction) or a wait on an unreachable node (which keeps the backoff
/// the gang was evicted with as its eta).
pub(crate) fn backoff_end(status: &GpuJobStatus) -> Option<i64> {
    let reason = status.pending_reason.as_ref()?;
    let backs_off = matches!(
        reason.kind,
        PendingReasonKind::Backoff | PendingReasonKind::NodeUnreachable
    );
    reason.eta.as_ref().filter(|_| backs_off).map(seconds)
}

/// [`step`] before the pods that may still run are counted.
fn step_by_status(index: &Index, ledger: &Ledger, key: &ObjectRef, now: &Time) -> Option<Step> {
    let job = index.jobs.get(key)?;
    let now_s = now.0.as_second();
    let default = GpuJobStatus::default();
    let status = job.status.as_ref().unwrap_or(&default);
    let (current, stale) = split_pods(index, key, status.requeue_count);
    // Writes in flight: until they land the job holds (or queues) as they promised.
    match ledger.promised(key) {
        Some(Busy::Release(admitted)) => {
            return Some(Step::new(Phase::Releasing).holds(holding(admitted, now_s), false));
        }
        Some(Busy::Provision(held)) => {
            return Some(Step::new(Phase::Provisioning).holds(held.clone(), true));
        }
        // The end of a gang with nothing left running: it holds nothing (see [`step`]).
        Some(Busy::Ending) => return Some(Step::new(Phase::Finishing)),
        Some(Busy::Other) => {
            // An eviction or a finish in flight holds its quota (its status still shows the
            // admission) until it lands: freed late, never early.
            let held = holding_of(job, status, &current);
            let provisioning = provision::is_provisioning(status);
            return Some(Step::new(shown_phase(job, status)).holds_maybe(held, provisioning));
        }
        // A waiting job whose status write is on its way sits out the cycle until it lands:
        // admitted meanwhile, it could not be released (two status writes in flight could
        // land out of order), and the quota the cycle booked for it would hold back the
        // jobs behind it for a pass.
        Some(Busy::Status) => return Some(Step::new(Phase::Waiting)),
        // A queued status write holds nothing back (it is not promised): the pass decides
        // afresh and replaces or drops it.
        None => {}
    }
    if job.metadata.deletion_timestamp.is_some() {
        let step = Step::new(Phase::Deleted);
        if !has_finalizer(job) {
            return Some(step);
        }
        let pods = index.pods_of(key).map(|(k, _)| k.to_owned()).collect();
        return Some(step.act(Action::Finalize {
            job: key.to_owned(),
            pods,
        }));
    }
    // A waiting job has nothing to clean up: the finalizer goes on with its release, so a
    // deep queue costs no write per job before it is admitted. A job that holds something or
    // has pods and lacks it (admitted by an older version) gets it now.
    let holds = status.admission.is_some()
        || provision::is_provisioning(status)
        || !current.is_empty()
        || !stale.is_empty();
    let add_finalizer = holds && !has_finalizer(job) && !ledger.is_finalizing(key);
    let reading = Reading {
        index,
        ledger,
        key,
        job,
        status,
        current: &current,
        now,
        workload: entry::workload(index, job),
    };
    let mut step = next(&reading, stale);
    step.add_finalizer = add_finalizer;
    Some(step)
}

/// What one job's step reads: the index and the ledger, the job and its status, its pods of
/// the current attempt, and the pass's time.
#[derive(Clone, Copy)]
pub(super) struct Reading<'a> {
    pub(super) index: &'a Index,
    pub(super) ledger: &'a Ledger,
    pub(super) key: &'a ObjectRef,
    pub(super) job: &'a GpuJob,
    pub(super) status: &'a GpuJobStatus,
    /// The job's pods of its current attempt, with those being deleted.
    pub(super) current: &'a Pods<'a>,
    pub(super) now: &'a Time,
    /// The workload behind the job when it is a queue entry and the index holds that very
    /// workload ([`entry::workload`]): found once, as several of the step's questions ask it.
    pub(super) workload: Option<crate::workload::Run<'a>>,
}

/// [`step`] for a job with no write in flight and not deleted, with its pods of earlier
/// attempts (`stale`).
fn next(reading: &Reading<'_>, stale: Vec<ObjectRef>) -> Step {
    let Reading {
        index,
        ledger,
        key,
        job,
        status,
        current,
        now,
        workload,
    } = *reading;
    let now_s = now.0.as_second();
    // A Job's or JobSet's pods are its controller's to delete: the entries step keeps the
    // workload suspended while the entry holds no admission, and the entry is not released
    // again while the workload may have pods (`entry::settling`). Its pods of an earlier
    // attempt may also have ended with the workload's success, which `entry::finished` reads.
    if !stale.is_empty() && entry::suspendable_workload(job).is_none() {
        return Step::new(Phase::Restarting).act(Action::DeletePods {
            job: key.to_owned(),
            pods: stale,
        });
    }
    let ended = match status.phase {
        Some(GpuJobPhase::Succeeded) => Some(Phase::Succeeded),
        Some(GpuJobPhase::Failed) => Some(Phase::Failed),
        _ => None,
    };
    if let Some(phase) = ended {
        return ended_step(phase, job, key, current);
    }
    if let Some(step) = entry::finished(reading) {
        return step;
    }
    let live: Pods<'_> = current
        .iter()
        .copied()
        .filter(|(_, p)| !p.deleting)
        .collect();
    if provision::is_provisioning(status) {
        return provisioning::step(reading, &live);
    }
    if let Some(held) = holding_of(job, status, current) {
        return admitted::step(reading, held, &live);
    }
    if !live.is_empty() {
        // Pods of the current attempt but no admission in the status: a release that was
        // cut off. Finish it when the whole gang exists, else roll it back.
        return cut_off(job, key, current, &live, Step::new(Phase::Releasing));
    }
    let draining = draining(index, key, status.requeue_count);
    if !current.is_empty() || !draining.is_empty() {
        let waiting: Pods<'_> = current.iter().copied().chain(draining).collect();
        return terminating::step(index, key, status, &waiting, now_s);
    }
    if entry::settling(index, key, workload) {
        // Its pods are gone, but its Job has not yet taken in the suspension: held, as for
        // terminating pods, until the Job controller has.
        return Step::new(Phase::Evicting);
    }
    if let Some(Failure {
        failures,
        retry_at,
        error,
    }) = ledger.failure(key)
        && *retry_at > now_s
    {
        let mut next = status.clone();
        next.phase = Some(GpuJobPhase::Queued);
        next.pending_reason = Some(muster_api::gpujob::PendingReason {
            start_range: None,
            kind: PendingReasonKind::Backoff,
            message: format!("releasing the gang failed {failures} times, last: {error}"),
            eta: Timestamp::from_second(*retry_at).ok().map(Time),
            since: None,
        });
        let step = Step::new(Phase::Waiting);
        if next == *status {
            return step;
        }
        return step.act(Action::JobStatus {
            job: key.to_owned(),
            status: Box::new(next),
            event: Some(Note::warning("ReleaseFailed", error.clone())),
        });
    }
    // A wait on an unreachable node keeps the backoff the gang was evicted with as its eta.
    if let Some(end) = backoff_end(status).filter(|end| *end > now_s) {
        let namespace = job.metadata.namespace.as_deref().unwrap_or_default();
        let cluster_queue = index
            .local_queues
            .get(ObjectRef::new(namespace, &job.spec.queue_name).as_str())
            .map(|q| q.spec.cluster_queue.clone())
            .unwrap_or_default();
        let mut step = Step::new(Phase::Waiting).with(InCycle::BackingOff { cluster_queue });
        step.until = Some(end);
        return step;
    }
    Step::new(Phase::Waiting).with(InCycle::Queued)
}

/// A job whose status says it ended. An eviction writes the status first and deletes the
/// pods after, so a leader that stops between the two (or a deletion that failed) leaves an
/// ended job with pods still running, which nothing else would ever remove: they are deleted
/// here. A Job's or JobSet's pods are its controller's (the entries step suspends it).
fn ended_step(phase: Phase, job: &GpuJob, key: &ObjectRef, current: &Pods<'_>) -> Step {
    let running: Vec<ObjectRef> = current
        .iter()
        .filter(|(_, p)| !p.deleting && !p.phase.ended())
        .map(|(k, _)| (*k).clone())
        .collect();
    if running.is_empty() || crate::workload::workload_of(job).is_some() {
        return Step::new(phase);
    }
    Step::new(phase).act(Action::DeletePods {
        job: key.to_owned(),
        pods: running,
    })
}

/// Pods of the current attempt exist, yet the status names no released gang: a release cut
/// off. Finished when the whole gang exists and agrees on its admission, else rolled back
/// (its live pods deleted).
fn cut_off(job: &GpuJob, key: &ObjectRef, current: &Pods<'_>, live: &Pods<'_>, step: Step) -> Step {
    if crate::workload::workload_of(job).is_some() {
        // The Job controller would make deleted pods again: the entries step suspends the
        // Job instead, and its controller deletes them.
        return step;
    }
    match recovered_admission(job, key, live) {
        Some(admitted) if live.len() == current.len() => {
            step.with(InCycle::FinishRelease(admitted))
        }
        _ => step.act(Action::DeletePods {
            job: key.to_owned(),
            pods: live.iter().map(|(k, _)| (*k).clone()).collect(),
        }),
    }
}
