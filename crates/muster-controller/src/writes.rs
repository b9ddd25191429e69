//! Sending a pass's writes: each action to the executor in a task of its own (a job's
//! finalizer and the status write after it in one, in that order), each status write with the
//! version of its job the pass read (see [`JobRead`]), waiting jobs' queued statuses by a
//! sender of their own, and every outcome landed in the [`State`](crate::state::State) —
//! after a failed write of a job's status, with what a read of the job shows now.

use std::sync::Arc;

use muster_api::GpuJob;
use muster_api::gpujob::PendingReasonKind;
use tokio::sync::{Semaphore, watch};

use crate::action::{Action, JobRead};
use crate::ends::{EndSent, Landing};
use crate::executor::{Executor, Written};
use crate::shared::Shared;

/// Logs a write that gives or takes quota (a release, a request for capacity, an eviction),
/// with its job, the ClusterQueue of the admission it writes and the leadership term: what an
/// investigation of a quota excursion needs from the controller's side.
pub(crate) fn log_quota_change(action: &Action, term: u64) {
    match action {
        Action::Release { job, status, .. } => {
            let admission = status.admission.as_ref();
            tracing::info!(
                job = %job,
                term,
                cluster_queue = admission.map_or("", |a| a.cluster_queue.as_str()),
                pods = admission.map_or(0, |a| a.pod_sets.iter().map(|p| p.nodes.len()).sum::<usize>()),
                attempt = status.requeue_count,
                "release"
            );
        }
        Action::Provision { job, status, .. } => {
            tracing::info!(
                job = %job,
                term,
                cluster_queue = status.admission.as_ref().map_or("", |a| a.cluster_queue.as_str()),
                request = status.provisioning_request.as_deref().unwrap_or(""),
                attempt = status.requeue_count,
                "provision"
            );
        }
        Action::Evict { job, status, .. } => {
            tracing::info!(
                job = %job,
                term,
                phase = ?status.phase,
                attempt = status.requeue_count,
                "evict"
            );
        }
        _ => {}
    }
}

/// A pass's writes as they go out: each alone, but a job's finalizer together with the write
/// of its status that follows it in the pass (a release, say), finalizer first. Sent at
/// once, the finalizer would move the job's version under the status write, whose
/// precondition would then fail and cost a read and a second write (see
/// [`JobRead`]); sent first, its answer gives the version to write onto.
///
/// The writes of jobs whose work starts or stops in the pass (a release, an eviction, a
/// request for capacity, a finish: [`Action::moves_work`]) go out first, each job's in the
/// order the pass made them: each
/// unit waits for a permit, and a pass that also makes hundreds of queue entries or waiting
/// statuses held its releases behind all of them, with their quota held and nothing running.
pub(crate) fn in_order(
    actions: Vec<(Action, Option<JobRead>)>,
) -> Vec<Vec<(Action, Option<JobRead>)>> {
    let mut units: Vec<Vec<(Action, Option<JobRead>)>> = Vec::with_capacity(actions.len());
    let mut finalizing: std::collections::BTreeMap<muster_api::ObjectRef, usize> =
        std::collections::BTreeMap::new();
    for (action, read) in actions {
        if let Action::AddFinalizer { job } = &action {
            finalizing.insert(job.clone(), units.len());
        } else if action.writes_job_status()
            && let Some(unit) = action.job().and_then(|job| finalizing.remove(job))
        {
            units[unit].push((action, read));
            continue;
        }
        units.push(vec![(action, read)]);
    }
    let moving: std::collections::BTreeSet<muster_api::ObjectRef> = units
        .iter()
        .flatten()
        .filter(|(action, _)| action.moves_work())
        .filter_map(|(action, _)| action.job().cloned())
        .collect();
    // Stable: each group keeps the pass's order.
    units.sort_by_key(|unit| {
        !unit
            .iter()
            .any(|(action, _)| action.job().is_some_and(|job| moving.contains(job)))
    });
    units
}

/// Sends a pass's writes in [`in_order`]'s units, each holding one of `permits` until it has
/// landed. The pass's ends that gave their quota up early (those of jobs in `early`: see
/// [`crate::ends`]) are in flight before any unit goes out, and each unit that takes quota
/// waits for them and for `ends_before`, the ends in flight when the pass read the state. Such
/// a unit takes its permit only once they have landed: the loop's permits pace what is being
/// written, and a release held back holds none of them (held, they kept the loop from its next
/// pass behind a stream of ends, and a job's end waited longer for the pass that writes it).
pub(crate) async fn send_pass(
    shared: &Arc<Shared>,
    executor: &Executor,
    permits: &Arc<Semaphore>,
    term: u64,
    (actions, early): (
        Vec<(Action, Option<JobRead>)>,
        std::collections::BTreeSet<muster_api::ObjectRef>,
    ),
    ends_before: Vec<Landing>,
) {
    let mut units: Vec<_> = in_order(actions)
        .into_iter()
        .map(|writes| {
            let tells = writes
                .iter()
                .find(|(action, _)| crate::ends::is_early_end(action, |job| early.contains(job)))
                .and_then(|(action, _)| action.job().cloned())
                .map(|job| shared.ends.sending(job));
            (writes, tells)
        })
        .collect();
    // Ends first (the order is otherwise kept): the sooner an end lands, the sooner the
    // releases into its quota go.
    units.sort_by_key(|(_, tells)| tells.is_none());
    let mut waited = ends_before;
    waited.extend(
        units
            .iter()
            .filter_map(|(_, tells)| tells.as_ref())
            .map(|(_, landing)| landing.clone()),
    );
    for (writes, tells) in units {
        let takes_quota = writes
            .iter()
            .any(|(action, _)| crate::ends::takes_quota(action));
        if takes_quota && !waited.is_empty() {
            // A unit never waits for its own end.
            let own = tells.as_ref().map(|(_, landing)| landing);
            let waits_for = waited
                .iter()
                .filter(|landing| own.is_none_or(|own| !own.same_channel(landing)))
                .cloned()
                .collect();
            let ends = AfterEnds {
                waits_for,
                tells: tells.map(|(sent, _)| sent),
            };
            let permits = Arc::clone(permits);
            let permit = async move { permits.acquire_owned().await.ok() };
            spawn_writes(shared, executor, term, writes, permit, true, ends);
            continue;
        }
        let Ok(permit) = Arc::clone(permits).acquire_owned().await else {
            return;
        };
        let ends = AfterEnds {
            waits_for: Vec::new(),
            tells: tells.map(|(sent, _)| sent),
        };
        let permit = std::future::ready(Some(permit));
        spawn_writes(shared, executor, term, writes, permit, true, ends);
    }
}

/// How a unit of writes stands to the jobs' ends in flight (see [`crate::ends`]).
#[derive(Default)]
pub(crate) struct AfterEnds {
    /// The ends it waits for before anything is sent; if one fails, nothing is.
    pub(crate) waits_for: Vec<Landing>,
    /// The end it writes, told when it has landed.
    pub(crate) tells: Option<EndSent>,
}

/// Carries `writes` out one after the other in a task of their own, holding `permit` until
/// the last has landed; wakes the loop afterwards when `wake`, or when a write failed (no
/// watch event follows a failure, and its job is to be settled again at once). A status write goes onto the
/// version its pass read, or onto the one an earlier write of the same job returned when
/// nothing it was decided on moved (see [`JobRead::at_version_of`]). Nothing is sent until
/// the ends `ends` waits for have landed and `permit` gives a permit, and nothing at all if an
/// end failed (or no permit comes: the loop stopped): each write is then settled as never
/// sent, and the loop woken. `executor` was [`Executor::begun`] when the writes were planned
/// (or taken from the queue): after any change of leadership since, even one this replica won
/// back, none is sent.
pub(crate) fn spawn_writes<P, F>(
    shared: &Arc<Shared>,
    executor: &Executor,
    term: u64,
    writes: Vec<(Action, Option<JobRead>)>,
    permit: F,
    wake: bool,
    ends: AfterEnds,
) where
    P: Send + 'static,
    F: std::future::Future<Output = Option<P>> + Send + 'static,
{
    let (shared, executor) = (Arc::clone(shared), executor.clone());
    tokio::spawn(async move {
        let AfterEnds {
            waits_for,
            mut tells,
        } = ends;
        let landed = waits_for.is_empty() || crate::ends::all_landed(waits_for).await;
        let permit = if landed { permit.await } else { None };
        let Some(permit) = permit else {
            for (action, _) in &writes {
                tracing::info!(
                    action = action.kind(),
                    job = ?action.job(),
                    "not sent: a job's end its pass counted on did not land, or the loop stopped"
                );
                shared.metrics.action_not_sent(action.kind());
                shared.state().not_sent(term, action);
            }
            if let Some(end) = tells {
                end.landed(false, crate::ends::EndTook::default());
            }
            shared.wake.notify_one();
            return;
        };
        if let Some(end) = &mut tells {
            end.writing();
        }
        let mut took = crate::ends::EndTook::default();
        let mut returned: Option<GpuJob> = None;
        let mut failed = false;
        for (action, read) in writes {
            let read = match (read, &returned) {
                (Some(read), Some(job)) => Some(read.at_version_of(job)),
                (read, _) => read,
            };
            log_quota_change(&action, term);
            let writing = std::time::Instant::now();
            let result = executor.execute_begun(&action, read.as_ref()).await;
            took.writing += writing.elapsed();
            failed |= result.is_err();
            returned = result.as_ref().ok().and_then(|written| {
                written.iter().rev().find_map(|w| match w {
                    Written::Job(job) => Some((**job).clone()),
                    _ => None,
                })
            });
            let landed = result.is_ok();
            let folding = std::time::Instant::now();
            land(
                &shared,
                &executor,
                term,
                &action,
                result.map_err(|e| e.to_string()),
            )
            .await;
            took.folding += folding.elapsed();
            // Told once the landing is in the state: a pass that no longer waits for the end
            // reads what it did.
            if matches!(action, Action::JobStatus { .. })
                && let Some(end) = tells.take()
            {
                end.landed(landed, took);
            }
        }
        if wake || failed {
            shared.wake.notify_one();
        }
        drop(permit);
    });
}

/// Folds in what `action` wrote, or — when it failed, for a write of its job's status — what
/// a read of the job shows now (a failed write may still have been carried out: see
/// `Executor::read_back`), and settles the ledger.
async fn land(
    shared: &Arc<Shared>,
    executor: &Executor,
    term: u64,
    action: &Action,
    result: Result<Vec<Written>, String>,
) {
    let mut read = Vec::new();
    if let Err(e) = &result {
        tracing::warn!(action = action.kind(), job = ?action.job(), error = %e, "write failed");
        if action.writes_job_status() {
            match executor.read_back(action).await {
                Ok(objects) => {
                    shared.metrics.action("read_back", true);
                    read = objects;
                }
                Err(e) => {
                    shared.metrics.action("read_back", false);
                    tracing::warn!(job = ?action.job(), error = %e, "reading back after a failed write failed; the watch brings the job");
                }
            }
        }
    }
    shared.metrics.action(action.kind(), result.is_ok());
    if let (Ok(_), Some(phase)) = (&result, action.status_phase()) {
        shared.metrics.status_write(phase);
    }
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let mut state = shared.state();
    if result.is_ok()
        && let Some(change) = waiting_change(state.index(), action)
    {
        shared.metrics.waiting_status_write(change.label());
        if let WaitingChange::Reason { from, to } = change {
            let from = from.map_or("none", PendingReasonKind::as_str);
            shared.metrics.waiting_reason_change(from, to.as_str());
        }
    }
    state.read_back(read);
    state.landed_in(term, action, result, now);
}

/// What a waiting job's status write changes against the status the index still holds (its
/// own write not yet folded in).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WaitingChange {
    /// The job had no status.
    First,
    /// A new kind of reason: `from` the one the status showed (none after an admission, say)
    /// `to` the one written.
    Reason {
        from: Option<PendingReasonKind>,
        to: PendingReasonKind,
    },
    /// The same kind of reason; its position, message or ETA moved.
    Figures,
}

impl WaitingChange {
    /// The change's `change` label (`first`, `reason`, `figures`).
    fn label(self) -> &'static str {
        match self {
            WaitingChange::First => "first",
            WaitingChange::Reason { .. } => "reason",
            WaitingChange::Figures => "figures",
        }
    }
}

/// What a waiting job's status write changes (see [`WaitingChange`]); `None` for every other
/// write.
fn waiting_change(index: &crate::index::Index, action: &Action) -> Option<WaitingChange> {
    let Action::JobStatus { job, status, .. } = action else {
        return None;
    };
    let to = status.pending_reason.as_ref()?.kind;
    Some(match index.jobs.get(job).and_then(|j| j.status.as_ref()) {
        None => WaitingChange::First,
        Some(before) => {
            let from = before.pending_reason.as_ref().map(|r| r.kind);
            if from == Some(to) {
                WaitingChange::Figures
            } else {
                WaitingChange::Reason { from, to }
            }
        }
    })
}

/// Sends the waiting jobs' status writes that passes queued (see [`crate::deferred`]),
/// oldest first, at most `lane` at once and each also holding one of the loop's `permits`:
/// releases and evictions keep most of the API server's attention. Only while leading.
pub(crate) async fn send_deferred(
    shared: Arc<Shared>,
    executor: Executor,
    leader: watch::Receiver<bool>,
    permits: Arc<Semaphore>,
    lane: usize,
    mut stop: watch::Receiver<bool>,
) {
    let lane = Arc::new(Semaphore::new(lane));
    loop {
        tokio::select! {
            () = shared.deferred_wake.notified() => {}
            _ = stop.changed() => return,
        }
        while *leader.borrow() && !*stop.borrow() {
            let Ok(own) = Arc::clone(&lane).acquire_owned().await else {
                return;
            };
            let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
                return;
            };
            let next = {
                let mut state = shared.state();
                let next = state.next_deferred().map(|(term, action)| {
                    let read = state.decided_on(&action);
                    (term, action, read)
                });
                shared
                    .metrics
                    .deferred_status_writes
                    .set(i64::try_from(state.deferred_len()).unwrap_or(i64::MAX));
                next
            };
            let Some((term, action, read)) = next else {
                break;
            };
            let in_term = executor.begun();
            // Its landing need not wake the loop: the job's watch event does (a failure wakes
            // it, see `spawn_writes`).
            spawn_writes(
                &shared,
                &in_term,
                term,
                vec![(action, read)],
                std::future::ready(Some((own, permit))),
                false,
                AfterEnds::default(),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use muster_api::ObjectRef;
    use muster_api::gpujob::GpuJobStatus;

    use super::{WaitingChange, in_order, waiting_change};
    use crate::action::Action;

    fn status(job: &str) -> Action {
        Action::JobStatus {
            job: ObjectRef::new("team-a", job),
            status: Box::default(),
            event: None,
        }
    }

    fn finalizer(job: &str) -> Action {
        Action::AddFinalizer {
            job: ObjectRef::new("team-a", job),
        }
    }

    fn waiting(kind: muster_api::gpujob::PendingReasonKind, message: &str) -> Box<GpuJobStatus> {
        Box::new(GpuJobStatus {
            phase: Some(muster_api::GpuJobPhase::Queued),
            pending_reason: Some(muster_api::gpujob::PendingReason {
                start_range: None,
                kind,
                message: message.to_owned(),
                eta: None,
                since: None,
            }),
            ..GpuJobStatus::default()
        })
    }

    #[test]
    fn a_waiting_status_write_is_told_apart_as_first_new_reason_or_new_figures() {
        use muster_api::gpujob::PendingReasonKind::{QuotaShort, UnknownQueue};
        let mut index = crate::index::Index::default();
        let write = |status: Box<GpuJobStatus>| Action::JobStatus {
            job: ObjectRef::new("team-a", "a"),
            status,
            event: None,
        };
        let mut job: muster_api::GpuJob = serde_json::from_value(serde_json::json!({
            "apiVersion": "muster.dev/v1alpha1", "kind": "GpuJob",
            "metadata": {"name": "a", "namespace": "team-a"},
            "spec": {"queueName": "q", "podSets": []}}))
        .unwrap_or_else(|e| unreachable!("a valid job: {e}"));
        index.apply(job.clone());
        let short = write(waiting(QuotaShort, "3 of 8 GPUs free"));
        assert_eq!(waiting_change(&index, &short), Some(WaitingChange::First));
        job.status = Some(*waiting(QuotaShort, "2 of 8 GPUs free"));
        index.apply(job.clone());
        assert_eq!(waiting_change(&index, &short), Some(WaitingChange::Figures));
        let unknown = write(waiting(UnknownQueue, "no LocalQueue q"));
        let change = waiting_change(&index, &unknown);
        assert_eq!(
            change,
            Some(WaitingChange::Reason {
                from: Some(QuotaShort),
                to: UnknownQueue
            })
        );
        assert_eq!(change.map(WaitingChange::label), Some("reason"));
        // A status that shows no reason (the job was admitted, then evicted): from none.
        job.status = Some(GpuJobStatus::default());
        index.apply(job.clone());
        assert_eq!(
            waiting_change(&index, &unknown),
            Some(WaitingChange::Reason {
                from: None,
                to: UnknownQueue
            })
        );
        // Not a waiting status: not counted.
        assert_eq!(waiting_change(&index, &write(Box::default())), None);
        assert_eq!(waiting_change(&index, &finalizer("a")), None);
    }

    #[test]
    fn a_finalizer_goes_first_with_its_job_s_status_write_and_everything_else_alone() {
        let actions = vec![
            finalizer("a"),
            finalizer("b"),
            Action::DeletePods {
                job: ObjectRef::new("team-a", "c"),
                pods: Vec::new(),
            },
            status("a"),
            status("c"),
        ];
        let units: Vec<Vec<String>> = in_order(actions.into_iter().map(|a| (a, None)).collect())
            .iter()
            .map(|unit| {
                unit.iter()
                    .map(|(a, _)| format!("{} {}", a.kind(), a.job().map_or("", |j| j.name())))
                    .collect()
            })
            .collect();
        assert_eq!(
            units,
            [
                vec!["add_finalizer a", "job_status a"],
                vec!["add_finalizer b"],
                vec!["delete_pods c"],
                vec!["job_status c"],
            ]
        );
    }

    /// A pass's queue entries and waiting statuses go out behind the writes that start or
    /// stop work, and every write of a job whose work moves goes with them, in its order.
    #[test]
    fn releases_evictions_and_finishes_go_out_ahead_of_the_rest_of_their_pass() {
        use crate::action::Note;
        let finished = |job: &str| Action::JobStatus {
            job: ObjectRef::new("team-a", job),
            status: Box::new(GpuJobStatus {
                phase: Some(muster_api::GpuJobPhase::Succeeded),
                ..GpuJobStatus::default()
            }),
            event: None,
        };
        let key = |job: &str| ObjectRef::new("team-a", job);
        let entry = |job: &str| Action::CreateEntry {
            job: key(job),
            entry: Box::default(),
        };
        let evict = |job: &str| Action::Evict {
            job: key(job),
            status: Box::default(),
            pods: Vec::new(),
            event: Note::normal("Preempted", String::new()),
            workload: None,
        };
        let actions = vec![
            entry("e1"),
            status("w"),
            Action::DeletePods {
                job: key("v"),
                pods: Vec::new(),
            },
            entry("e2"),
            evict("v"),
            finalizer("r"),
            status("r"),
            evict("x"),
            status("w2"),
            finished("f"),
        ];
        let order: Vec<String> = in_order(actions.into_iter().map(|a| (a, None)).collect())
            .iter()
            .flatten()
            .map(|(a, _)| format!("{} {}", a.kind(), a.job().map_or("", |j| j.name())))
            .collect();
        assert_eq!(
            order,
            [
                "delete_pods v",
                "evict v",
                "evict x",
                "job_status f",
                "create_entry e1",
                "job_status w",
                "create_entry e2",
                "add_finalizer r",
                "job_status r",
                "job_status w2",
            ]
        );
    }
}
