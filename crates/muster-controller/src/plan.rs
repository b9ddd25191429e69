//! One scheduling pass of the controller, pure: from the [`State`] at time `now` to the
//! [`Action`]s that carry it out.
//!
//! A pass reads as four steps, each in its own module:
//! 1. `settle`: every job settled against what the cluster shows, through its state
//!    machine ([`crate::job`]) — gangs that finished, broke, timed out or were suspended;
//!    releases a restarted controller left half-done; stale pods of an earlier attempt.
//! 2. Admission's cycle, over the scheduler the last pass left brought up to the index (or
//!    one rebuilt from it: see `kept`).
//! 3. `decide`: its decisions turned into writes.
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

pub use crate::action::{Action, FINALIZER, Note, Plan};
use crate::decide::{decide, release_action};
use crate::holding::holding;
use crate::index::Index;
use crate::ledger::Busy;
use crate::settle::{Settled, settle};
use crate::state::State;
use crate::status;
pub use crate::summary::Summary;

/// A pass at `now`: the writes to make. Records in the ledger every write it starts, so that
/// the next pass neither repeats nor contradicts them.
pub fn plan(state: &mut State, now: Timestamp) -> Plan {
    let now_t = Time(now);
    let now_s = now.as_second();
    let mut plan = Plan::default();
    state
        .ledger
        .refreshed
        .retain(|_, at| now_s - *at < status::PENDING_REFRESH_SECONDS);

    // (1) Every job settled.
    let Settled {
        actions,
        busy,
        finalizing,
        submit,
        mut restore,
        releases,
        provisioned,
    } = settle(&state.index, &state.ledger, &now_t, &mut plan.summary);
    plan.actions = actions;
    state.ledger.busy.extend(busy);
    state.ledger.finalizing.extend(finalizing);
    // Requests no job needs any more (a failed delete, a cut-off attempt) are deleted.
    for (job, request, templates) in crate::provision::orphans(&state.index, &state.ledger, now_s) {
        plan.actions.push(Action::Unprovision {
            job: job.clone(),
            requests: vec![request],
            templates,
        });
        state.ledger.busy.entry(job).or_insert(Busy::Other);
    }
    // Releases found half-done are finished before anything new is promised.
    for (key, admitted) in releases {
        match release_action(&state.index, &key, &admitted, &now_t, false) {
            Ok((action, job)) => {
                restore.push((job, holding(&admitted, now_s), false));
                state.ledger.busy.insert(key, Busy::Release(admitted));
                plan.actions.push(action);
            }
            Err(e) => state.ledger.fail_release(&key, now_s, e),
        }
    }

    // (2) Admission's cycle. A held job's pods of its current attempt are booked through its
    // admission; pods of earlier attempts still terminating are booked as ordinary pods.
    let held: BTreeMap<String, i32> = restore
        .iter()
        .map(|(j, _, _)| {
            let attempt = state
                .index
                .jobs
                .get(&j.id)
                .and_then(|g| g.status.as_ref())
                .map_or(0, |s| s.requeue_count);
            (j.id.clone(), attempt)
        })
        .collect();
    plan.summary.considered = submit.len();
    let State {
        index,
        nominated,
        kept,
        ..
    } = &mut *state;
    let (mut scheduler, basis) = crate::kept::scheduler_for(
        kept,
        index,
        nominated,
        &held,
        submit,
        restore,
        |index, usage| {
            let cluster = index.empty_cluster().clone();
            scheduler(index, cluster, usage)
        },
    );
    plan.summary.scheduler_rebuilt = basis.rebuilt();
    let decisions = scheduler.cycle(now_s);
    state.nominated = scheduler.nominated().map(str::to_owned).collect();

    // (3) Decisions into writes.
    for decision in decisions {
        decide(state, &scheduler, decision, &now_t, &provisioned, &mut plan);
    }
    // (4) Queue statuses.
    crate::queues::queue_statuses(state, &scheduler, &mut plan.actions);

    state.ledger.drop_superseded(&state.index.jobs);
    state.ledger.sent(&plan.actions);
    for name in state.index.cluster_queues.keys() {
        for (flavor, resource, used, _) in scheduler.quota().report(name) {
            #[expect(clippy::cast_precision_loss, reason = "a gauge; milli-units to units")]
            let amount = used.milli() as f64 / 1000.0;
            plan.summary
                .usage
                .push((name.clone(), flavor, resource, amount));
        }
    }
    crate::kept::keep(&mut state.kept, &state.index, scheduler, basis);
    plan
}

/// A scheduler built afresh: nodes per flavor with `usage` booked per node (pods that belong
/// to no held admission; a held job's nodes are booked by restoring it), queues and
/// namespaces.
fn scheduler(
    index: &Index,
    mut cluster: Cluster,
    usage: &BTreeMap<String, Resources>,
) -> Scheduler {
    for (node, usage) in usage {
        cluster.add_usage(node, usage);
    }
    // Without the ProvisioningRequest API no capacity can be bought: queues wait for
    // today's nodes instead.
    let buys = index.provisioning_api();
    let mut scheduler = Scheduler::new(
        cluster,
        index.cluster_queues.iter().map(|(name, q)| {
            let mut spec = q.spec.clone();
            if !buys {
                spec.provisioning = None;
            }
            (name.clone(), spec)
        }),
        index
            .local_queues
            .iter()
            .map(|(key, q)| (key.clone(), q.spec.cluster_queue.clone())),
    );
    for (name, labels) in &index.namespaces {
        scheduler.set_namespace(name, labels.clone());
    }
    scheduler
}
