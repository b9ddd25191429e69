//! One scheduling pass of the controller, pure: from the [`State`] at time `now` to the
//! [`Action`]s that carry it out.
//!
//! A pass reads as four steps, each in its own module:
//! 1. `settle`: every job settled against what the cluster shows, through its state
//!    machine ([`crate::job`]) — gangs that finished, broke, timed out or were suspended;
//!    releases a restarted controller left half-done; stale pods of an earlier attempt.
//! 2. Admission's cycle, over the scheduler the last pass left brought up to the index (or
//!    one rebuilt from it: see `kept`).
//! 3. `decide`: its decisions turned into writes (figures alone within a budget: see
//!    `figure_budget`).
//! 4. `queues`: queue statuses.
//!
//! Every write is recorded in the ledger as the pass returns, before any goes out, so a pass
//! that runs while those writes are in flight books the same quota and nodes again instead
//! of promising them twice.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use muster_admission::{Cluster, Scheduler};
use muster_api::Resources;

pub use crate::action::{Action, Note, Plan};
use crate::decide::{QueueTally, decide, explain_all, release_action};
use crate::holding::holding;
use crate::index::Index;
use crate::job::InCycle;
use crate::last_pass::LastPass;
use crate::ledger::Busy;
use crate::preemptors::Preemptors;
use crate::seats::Seat;
use crate::settle::{Settled, settle};
use crate::state::State;
pub use crate::summary::Summary;

/// A pass at `now`: the writes to make. Records in the ledger every write it starts, so that
/// the next pass neither repeats nor contradicts them.
pub fn plan(state: &mut State, now: Timestamp) -> Plan {
    let now_t = Time(now);
    let now_s = now.as_second();
    let mut plan = Plan::default();
    // A waiting job whose status was written lately may be written again now.
    let refresh_due = state.ledger.expire_refreshes(now_s);

    // (1) The jobs whose inputs changed, settled.
    let Settled {
        actions,
        provisioned,
        mut changes,
        count: settled,
        ..
    } = settle_changed(state, &now_t, &mut plan.summary);
    plan.actions = actions;
    let seats = &state.seats;
    changes.sort();
    changes.dedup();
    plan.summary.considered = seats.queued();
    let pending_now: BTreeMap<(String, String), i64> = seats
        .backing_off()
        .map(|(queue, n)| {
            let n = i64::try_from(n).unwrap_or(i64::MAX);
            ((queue.clone(), "Backoff".to_owned()), n)
        })
        .collect();

    // (2) Admission's cycle. A held job's pods of its current attempt are booked through its
    // admission; pods of earlier attempts still terminating are booked as ordinary pods.
    let policy = state.placement_policy.clone();
    let State {
        index, last, seats, ..
    } = &mut *state;
    let LastPass {
        scheduler: kept,
        preemptors,
        ..
    } = &mut *last;
    let (mut scheduler, basis) =
        crate::kept::scheduler_for(kept, index, preemptors, seats, &changes, |index, usage| {
            let cluster = index.empty_cluster().clone();
            scheduler(index, cluster, usage, &policy)
        });
    plan.summary.scheduler_rebuilt = basis.rebuilt();
    let cycles = scheduler.cycles_run();
    let decisions = scheduler.step(now_s);
    // Every waiting job is explained again when anything it could read moved: a cycle ran,
    // a job was settled, a status may be refreshed. Otherwise each would be told what it was
    // told last pass, and the last pass's counts stand. Explaining costs a look at every
    // waiting job, so under a stream of events (passes a few hundred milliseconds apart) it
    // happens at most once per second of the pass clock: a pass within the second of the
    // last explanation owes it to the next pass (see [`LastPass::explain_owed`]).
    let moved = scheduler.cycles_run() != cycles || settled > 0 || refresh_due;
    let owed = moved || last.explain_owed;
    let explain = basis.rebuilt().is_some()
        || last.pending.is_none()
        || (owed && last.explained_at != Some(now_s));
    last.explain_owed = owed && !explain;
    last.explained_at = explain.then_some(now_s).or(last.explained_at);
    plan.summary.settled = settled;
    plan.summary.explained = explain;
    state.last.preemptors = Preemptors::of(&scheduler);

    // (3) Decisions into writes.
    let mut tally = QueueTally::default();
    for decision in decisions {
        state.seats.note(&decision, &state.index);
        decide(
            state,
            &scheduler,
            decision,
            &now_t,
            &provisioned,
            &mut tally,
            &mut plan,
        );
    }
    if explain {
        explain_all(
            state,
            &scheduler,
            &now_t,
            &provisioned,
            &mut tally,
            &mut plan,
        );
    }
    tally.into_summary(&mut plan.summary);
    job_figures(state, now_s, &mut plan.actions);
    if explain {
        state.last.pending = Some(plan.summary.pending.clone());
    } else {
        plan.summary.pending = state.last.pending.clone().unwrap_or_default();
    }
    for (key, n) in pending_now {
        *plan.summary.pending.entry(key).or_default() += n;
    }

    // (4) Queue statuses.
    queue_statuses(state, &scheduler, explain, &now_t, &mut plan.actions);

    state.ledger.drop_superseded(&state.index.jobs);
    state.ledger.sent(&plan.actions, &state.index.jobs);
    // Jobs the ledger names now settle again next pass, whatever lands meanwhile.
    state
        .seats
        .settle_again(state.ledger.jobs().cloned().collect());
    for name in state.index.cluster_queues.keys() {
        for (flavor, resource, used, _) in scheduler.quota().report(name) {
            #[expect(clippy::cast_precision_loss, reason = "a gauge; milli-units to units")]
            let amount = used.milli() as f64 / 1000.0;
            plan.summary
                .usage
                .push((name.clone(), flavor, resource, amount));
        }
    }
    crate::kept::keep(&mut state.last.scheduler, &state.index, scheduler, basis);
    plan
}

/// The end of step (3): waiting jobs whose figures alone moved, as many as the figure budget
/// allows, those written longest ago first; the rest are explained again next pass.
fn job_figures(state: &mut State, now_s: i64, actions: &mut Vec<Action>) {
    // A job offered by one decision of the pass and written by a later one (the cycle found
    // it short of quota, the explanation found its nodes short) has its write already.
    let ledger = &state.ledger;
    state
        .figures
        .jobs
        .withdraw_unless(|job| !ledger.is_busy(job));
    let granted = state.figures.jobs.grant(now_s);
    for (key, action) in granted.writes {
        if let Some(action) = state.ledger.status_written(key, action, now_s) {
            actions.push(action);
        }
    }
    if granted.held_back {
        state.last.explain_owed = true;
    }
}

/// Step (4) of a pass: queue statuses, unless nothing they show can have changed since a
/// pass that compared every one (`explain` false: the scheduler did not move, or moved within
/// the second of the last explanation) and no figures held back then have come due.
fn queue_statuses(
    state: &mut State,
    scheduler: &Scheduler,
    explain: bool,
    now: &Time,
    actions: &mut Vec<Action>,
) {
    let queues = state.index.queues_version();
    let now_s = now.0.as_second();
    let unchanged = !explain
        && state.ledger.queues_idle()
        && state.last.queues_settled == Some(queues)
        && state.last.queues_due.is_none_or(|due| now_s < due);
    if !unchanged {
        state.last.queues_due = crate::queues::queue_statuses(state, scheduler, now, actions);
        // Settled only when no queue's write is in flight, this pass's or an earlier one's
        // (checked as the next pass begins): a queue with a write in flight is not compared,
        // and a write that fails changes nothing the index shows, so later passes would skip
        // a status left stale.
        state.last.queues_settled = state.ledger.queues_idle().then_some(queues);
    }
}

/// Step (1) of a pass: the jobs whose inputs changed settled into their seats, requests no
/// job needs deleted, and releases found half-done finished (their jobs hold from now on).
/// The writes are in the returned `actions`; its releases are consumed.
fn settle_changed(state: &mut State, now_t: &Time, summary: &mut Summary) -> Settled {
    let now_s = now_t.0.as_second();
    let changed = state.index.take_changed_jobs();
    let jobs_changed = crate::entries::jobs_changed(&changed);
    let State {
        index,
        ledger,
        seats,
        last,
        ..
    } = &mut *state;
    if !seats.kept_for(index.shared_version()) {
        // Every job is settled afresh: so are the counts and comparisons.
        last.forget_counts();
    }
    let involved = ledger.jobs();
    let (due, recheck) = seats.due(
        index.shared_version(),
        now_s,
        changed,
        involved,
        index.jobs.keys(),
    );
    let Settled {
        mut actions,
        busy,
        finalizing,
        provisioned,
        releases,
        mut changes,
        count: settled,
    } = settle(index, ledger, seats, &due, &recheck, now_t, summary);
    for (job, promise) in busy {
        ledger.promise(job, promise);
    }
    for job in finalizing {
        ledger.finalize(&job);
    }
    // Requests no job needs any more (a failed delete, a cut-off attempt) are deleted.
    for (job, request, templates) in crate::provision::orphans(index, ledger, now_s) {
        actions.push(Action::Unprovision {
            job: job.clone(),
            requests: vec![request],
            templates,
        });
        ledger.promise_unless_busy(job, Busy::Other);
    }
    // So are templates no request names (a request never made, a cut-off clean-up).
    for (job, templates) in crate::provision::orphan_templates(index, ledger, now_s) {
        actions.push(Action::Unprovision {
            job: job.clone(),
            requests: Vec::new(),
            templates,
        });
        ledger.promise_unless_busy(job, Busy::Other);
    }
    // Labelled Jobs: their queue entries made, and each Job held while its entry waits.
    for action in crate::entries::keep(
        index,
        ledger,
        jobs_changed,
        &mut last.revisit_entries,
        now_s,
    ) {
        if let Some(job) = action.job() {
            ledger.promise_unless_busy(job.clone(), Busy::Other);
        }
        actions.push(action);
    }
    // Releases found half-done are finished before anything new is promised.
    for (key, admitted) in releases {
        match release_action(index, &key, &admitted, now_t, false) {
            Ok((action, job)) => {
                let attempt = index
                    .jobs
                    .get(&key)
                    .and_then(|g| g.status.as_ref())
                    .map_or(0, |s| s.requeue_count);
                let seat = Seat {
                    in_cycle: InCycle::Holds {
                        holding: holding(&admitted, now_s),
                        provisioning: false,
                        leaving: None,
                    },
                    job: Some(std::sync::Arc::new(job)),
                    read_at: None,
                    attempt,
                };
                seats.put(&key, Some(seat), None);
                changes.push(key.clone());
                ledger.promise(key, Busy::Release(admitted));
                actions.push(action);
            }
            Err(e) => ledger.fail_release(&key, now_s, e),
        }
    }
    Settled {
        actions,
        provisioned,
        changes,
        count: settled,
        ..Settled::default()
    }
}

/// A scheduler built afresh: nodes per flavor with `usage` booked per node (pods that belong
/// to no held admission; a held job's nodes are booked by restoring it), queues and
/// namespaces.
fn scheduler(
    index: &Index,
    mut cluster: Cluster,
    usage: &BTreeMap<String, Resources>,
    policy: &str,
) -> Scheduler {
    for (node, usage) in usage {
        cluster.add_usage(node, usage);
    }
    let mut scheduler = Scheduler::new(
        cluster,
        index.admission_cluster_queues(),
        index
            .local_queues
            .iter()
            .map(|(key, q)| (key.to_string(), q.spec.cluster_queue.clone())),
    )
    .with_cohorts(index.cohort_tree());
    for (name, labels) in &index.namespaces {
        scheduler.set_namespace(name, labels.clone());
    }
    match muster_topology::by_name(policy) {
        Some(policy) => scheduler.with_policy(policy),
        None => scheduler,
    }
}
