//! Step 4 of a pass: ClusterQueue and LocalQueue statuses from the cycle's scheduler, and
//! ResourceFlavors' and Cohorts' `Valid` condition, written where they changed and no write of them is in
//! flight. A queue whose conditions changed is written at once; one whose figures alone moved
//! (pending and admitted counts, usage — which every admission and finish moves) at most once
//! every [`status::QUEUE_FIGURES_EVERY_SECONDS`], and within the controller's budget of
//! [`status::QUEUE_FIGURE_WRITES_PER_SECOND`] (see [`crate::figure_budget`]), so a busy queue
//! costs a write per interval, not per pass, and a fleet of queues a bounded number a second.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use muster_admission::Scheduler;
use muster_api::{LocalQueue, Validate as _};

use crate::action::Action;
use crate::ledger::QueueWrite;
use crate::state::State;
use crate::status;

/// ClusterQueue and LocalQueue statuses, where changed and not already being written. Returns
/// when the first of those held back comes due, if any was: one whose figures alone moved and
/// that was written less than [`status::QUEUE_FIGURES_EVERY_SECONDS`] ago, or that the
/// figure budget held back (a later pass writes it).
pub(crate) fn queue_statuses(
    state: &mut State,
    scheduler: &Scheduler,
    now: &Time,
    actions: &mut Vec<Action>,
) -> Option<i64> {
    let State {
        index,
        ledger,
        figures,
        ..
    } = state;
    let start = actions.len();
    let now_s = now.0.as_second();
    let mut held_back: Option<i64> = None;
    // A status that differs from `current` in its figures alone is offered to the budget
    // once its interval has passed, and waits its turn before then.
    let mut write = |queue: QueueWrite, action: Action, same_conditions: bool| {
        if !same_conditions {
            actions.push(action);
        } else if ledger.queue_figures_due(&queue, now_s) {
            figures.queues.offer(queue, action);
        } else {
            let due = ledger.queue_figures_due_at(&queue).unwrap_or(now_s);
            held_back = Some(held_back.map_or(due, |first| first.min(due)));
        }
    };
    let counts = status::queue_counts(scheduler);
    for (name, queue) in &index.cluster_queues {
        if ledger.is_writing_queue(&QueueWrite::Cluster(name.clone())) {
            continue;
        }
        let current = queue.status.clone().unwrap_or_default();
        let generation = queue.metadata.generation;
        let counted = counts.cluster.get(name).copied().unwrap_or_default();
        if let Some(status) =
            status::cluster_queue(&current, name, counted, generation, scheduler, now)
        {
            let same = status.conditions == current.conditions;
            let action = Action::ClusterQueueStatus {
                name: name.clone(),
                status,
            };
            write(QueueWrite::Cluster(name.clone()), action, same);
        }
    }
    for (key, queue) in &index.local_queues {
        if ledger.is_writing_queue(&QueueWrite::Local(key.clone())) {
            continue;
        }
        let current = queue.status.clone().unwrap_or_default();
        let empty = status::LocalQueueCounts::default();
        let counted = counts.local.get(key.as_str()).unwrap_or(&empty);
        let active = local_queue_active(queue, scheduler);
        let generation = queue.metadata.generation;
        let active = match &active {
            Ok(()) => Ok(()),
            Err((reason, message)) => Err((*reason, message.as_str())),
        };
        if let Some(status) = status::local_queue(&current, counted, active, generation, now) {
            let same = status.conditions == current.conditions;
            let action = Action::LocalQueueStatus {
                key: key.clone(),
                status,
            };
            write(QueueWrite::Local(key.clone()), action, same);
        }
    }
    let granted = figures.queues.grant(now_s);
    actions.extend(granted.writes.into_iter().map(|(_, action)| action));
    if granted.held_back {
        // The budget regains a token within the second.
        let due = now_s + 1;
        held_back = Some(held_back.map_or(due, |first| first.min(due)));
    }
    for (name, flavor) in &index.flavors {
        if ledger.is_writing_queue(&QueueWrite::Flavor(name.clone())) {
            continue;
        }
        let current = flavor.status.clone().unwrap_or_default();
        let problem = flavor.validate().into_iter().next();
        let generation = flavor.metadata.generation;
        if let Some(status) = status::flavor(&current, problem.as_ref(), generation, now) {
            actions.push(Action::FlavorStatus {
                name: name.clone(),
                status,
            });
        }
    }
    cohort_statuses(index, ledger, scheduler, now, actions);
    for queue in actions[start..].iter().filter_map(QueueWrite::of) {
        ledger.write_queue(queue, now_s);
    }
    held_back
}

/// Whether a LocalQueue can take jobs: its spec is valid, and its ClusterQueue exists and is
/// valid. Otherwise the condition's reason and a message naming the field or the queue.
fn local_queue_active(
    queue: &LocalQueue,
    scheduler: &Scheduler,
) -> Result<(), (&'static str, String)> {
    if let Some(error) = queue.validate().first() {
        return Err(("InvalidSpec", format!("{}: {}", error.path, error.message)));
    }
    let target = &queue.spec.cluster_queue;
    if !scheduler.has_queue(target) {
        return Err((
            "ClusterQueueMissing",
            format!(
                "spec.clusterQueue: ClusterQueue {target} does not exist; create it or name another"
            ),
        ));
    }
    if let Some(problem) = scheduler.queue_problem(target) {
        return Err((
            "ClusterQueueInvalid",
            format!("spec.clusterQueue: {problem}"),
        ));
    }
    Ok(())
}

/// Each Cohort's `Valid` condition, where it changed and no write of it is in flight.
fn cohort_statuses(
    index: &crate::index::Index,
    ledger: &crate::ledger::Ledger,
    scheduler: &Scheduler,
    now: &Time,
    actions: &mut Vec<Action>,
) {
    let tree = scheduler.cohorts();
    for (name, cohort) in &index.cohorts {
        if ledger.is_writing_queue(&QueueWrite::Cohort(name.clone())) {
            continue;
        }
        let current = cohort.status.clone().unwrap_or_default();
        let generation = cohort.metadata.generation;
        // A broken tree first (it changes what the cohort does), then a limit that can never
        // bind (it changes nothing, but was most likely meant otherwise).
        let problem = tree.problem(name).map(|p| ("InvalidSpec", p)).or_else(|| {
            let limit = scheduler.quota().limit_problem(name)?;
            Some(("LimitNeverBinds", limit))
        });
        if let Some(status) = status::cohort(&current, problem, generation, now) {
            actions.push(Action::CohortStatus {
                name: name.clone(),
                status,
            });
        }
    }
}
