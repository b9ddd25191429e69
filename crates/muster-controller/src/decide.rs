//! Step 3 of a pass: admission's decisions turned into writes — a release for each admission,
//! a status for each waiting job whose reason changed, evictions for preemptions, requests
//! for capacity to buy. Each is recorded in the ledger as it is planned, so that the next
//! pass neither repeats nor contradicts it.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use muster_admission::{Admitted, Decision, Job, PendingReason, Scheduler};
use muster_api::ObjectRef;
use muster_api::gpujob::{GpuJobStatus, PendingReasonKind};

use crate::action::{Action, Note, Plan};
use crate::holding::{admitted_at, seconds, split_pods};
use crate::index::Index;
use crate::job::{has_finalizer, unprovision};
use crate::ledger::Busy;
use crate::provision;
use crate::release::gang;
use crate::settle::{account, reason_key};
use crate::state::State;
use crate::status::{self, Eviction};

/// The release of `admitted` for job `key` (objects, status, event) and the job as
/// admission reads it; the error when its objects cannot be built.
pub(crate) fn release_action(
    index: &Index,
    key: &ObjectRef,
    admitted: &Admitted,
    now: &Time,
    fresh: bool,
) -> Result<(Action, Job), String> {
    let job = index
        .jobs
        .get(key)
        .ok_or_else(|| format!("GpuJob {key} is gone"))?;
    let flavors: BTreeMap<_, _> = index
        .flavors
        .iter()
        .map(|(n, f)| (n.clone(), f.spec.clone()))
        .collect();
    let gang = if crate::workload::workload_of(job).is_some() {
        crate::job::entry::release(index, key, job, admitted, &flavors)?
    } else {
        let mut gang = gang(job, admitted, &flavors).map_err(|e| e.to_string())?;
        crate::hami::pin_devices(&mut gang.pods, |node| {
            index.gpu_uuids.get(node).map(Vec::as_slice)
        });
        if index.is_synced(crate::index::Kind::SchedulingPodGroup) {
            // Kubernetes' own gang API is served: kube-scheduler binds the gang all or none.
            crate::release::join_scheduling_group(&mut gang);
        }
        gang
    };
    let current = job.status.clone().unwrap_or_default();
    let bought = current.provisioning_request.is_some();
    let mut status =
        status::admitted(&current, job.metadata.generation, admitted, now).unwrap_or(current);
    if bought {
        // Onto capacity the autoscaler provisioned (also a release finished after a restart).
        status::mark_provisioned(&mut status, job.metadata.generation, now);
    }
    let message = format!(
        "admitted by ClusterQueue {} onto {}",
        admitted.cluster_queue,
        admitted
            .pod_sets
            .iter()
            .map(|p| format!(
                "{} pods of {} in {} [{}]",
                p.nodes.len(),
                p.name,
                p.flavor,
                crate::release::format_domain(&p.domain)
            ))
            .collect::<Vec<_>>()
            .join("; ")
    );
    let action = Action::Release {
        job: key.to_owned(),
        gang: Box::new(gang),
        status: Box::new(status),
        event: fresh.then(|| Note::normal("Admitted", message)),
    };
    Ok((
        action,
        Arc::unwrap_or_clone(index.admission_job(key.as_str(), job)),
    ))
}

/// What the decisions of one pass share: each LocalQueue's ClusterQueue as the scheduler
/// resolves it, and the waiting jobs counted per ClusterQueue and reason kind (one count per
/// waiting job, without a string built for each).
#[derive(Default)]
pub(crate) struct QueueTally {
    /// Namespace → LocalQueue name → its ClusterQueue ("" for none): found from the job's
    /// own namespace and queue name, with no lookup of the job in the scheduler and no key
    /// built per job.
    queue_of: BTreeMap<String, BTreeMap<String, String>>,
    pending: BTreeMap<String, BTreeMap<&'static str, i64>>,
}

impl QueueTally {
    /// Counts `job` as waiting for a reason of `kind`, under the ClusterQueue its LocalQueue
    /// leads to ("" without one).
    fn count(&mut self, scheduler: &Scheduler, job: &muster_api::GpuJob, kind: &'static str) {
        let QueueTally { queue_of, pending } = self;
        let namespace = job.metadata.namespace.as_deref().unwrap_or_default();
        let local = &job.spec.queue_name;
        let known = queue_of
            .get(namespace)
            .is_some_and(|names| names.contains_key(local));
        if !known {
            let cq = scheduler
                .cluster_queue_of_local_queue(ObjectRef::new(namespace, local).as_str())
                .unwrap_or_default();
            queue_of
                .entry(namespace.to_owned())
                .or_default()
                .insert(local.clone(), cq);
        }
        let cq = queue_of
            .get(namespace)
            .and_then(|names| names.get(local))
            .map_or("", String::as_str);
        let kinds = match pending.get_mut(cq) {
            Some(kinds) => kinds,
            None => pending.entry(cq.to_owned()).or_default(),
        };
        *kinds.entry(kind).or_default() += 1;
    }

    /// Adds the counts to `summary`'s.
    pub(crate) fn into_summary(self, summary: &mut crate::summary::Summary) {
        for (cq, kinds) in self.pending {
            for (kind, n) in kinds {
                *summary
                    .pending
                    .entry((cq.clone(), kind.to_owned()))
                    .or_default() += n;
            }
        }
    }
}

pub(crate) fn decide(
    state: &mut State,
    scheduler: &Scheduler,
    decision: Decision,
    now: &Time,
    provisioned: &BTreeMap<ObjectRef, BTreeMap<String, String>>,
    tally: &mut QueueTally,
    plan: &mut Plan,
) {
    match decision {
        Decision::Admit(admitted) => admit(state, admitted, now, provisioned, plan),
        Decision::Pending {
            job,
            position,
            reason,
            eta,
        } => {
            let standing = Standing {
                position,
                reason: &reason,
                eta,
            };
            explain(
                state,
                scheduler,
                &job,
                &standing,
                now,
                provisioned,
                tally,
                plan,
            );
        }
        Decision::Preempt { victims, for_job } => {
            for victim in victims {
                let Some(victim) = state.index.job_ref(&victim) else {
                    continue;
                };
                if evict_held(
                    state,
                    &victim,
                    &Eviction::Preempted {
                        by: for_job.clone(),
                    },
                    now,
                    plan,
                ) {
                    plan.summary.preempted += 1;
                }
            }
        }
        Decision::Evict { job, reason } => {
            if let Some(key) = state.index.job_ref(&job) {
                evict_held(state, &key, &Eviction::Other(reason), now, plan);
            }
        }
        Decision::Provision {
            job,
            cluster_queue,
            flavors,
        } => {
            if let Some(key) = state.index.job_ref(&job) {
                start_provisioning(state, key, &cluster_queue, &flavors, now, plan);
            }
        }
    }
}

/// Every waiting job as admission's last cycle left it (see
/// [`muster_admission::Scheduler::each_waiting`]), each told why it waits where that says
/// something new. Lent, not listed: a fleet's waiting jobs are looked at every second, and
/// most of them have nothing to write.
pub(crate) fn explain_all(
    state: &mut State,
    scheduler: &Scheduler,
    now: &Time,
    provisioned: &BTreeMap<ObjectRef, BTreeMap<String, String>>,
    tally: &mut QueueTally,
    plan: &mut Plan,
) {
    scheduler.each_waiting(|waiting| {
        let standing = Standing {
            position: waiting.position,
            reason: &waiting.reason,
            eta: waiting.eta,
        };
        explain(
            state,
            scheduler,
            &waiting.job.id,
            &standing,
            now,
            provisioned,
            tally,
            plan,
        );
    });
}

/// Admission's word on waiting job `job` (see [`muster_admission::Scheduler::each_waiting`]):
/// counted under its queue and reason, and its status written when that says something new.
/// Every waiting job comes here each time the waiting are explained, and most have nothing to
/// write, so nothing is copied from admission's reason unless a write needs it.
#[expect(
    clippy::too_many_arguments,
    reason = "the pass's parts a waiting job's write reads"
)]
fn explain(
    state: &mut State,
    scheduler: &Scheduler,
    job: &str,
    standing: &Standing<'_>,
    now: &Time,
    provisioned: &BTreeMap<ObjectRef, BTreeMap<String, String>>,
    tally: &mut QueueTally,
    plan: &mut Plan,
) {
    if provisioned.contains_key(job) {
        let Some(key) = state.index.job_ref(job) else {
            return;
        };
        let queue = scheduler
            .job(job)
            .and_then(|j| scheduler.cluster_queue_of_job(j))
            .unwrap_or_default();
        waiting_for_nodes(
            state,
            key,
            queue,
            &standing.reason.message(),
            now.0.as_second(),
            plan,
        );
        return;
    }
    // The job is found once and its key copied only for a write.
    let State {
        index,
        ledger,
        figures,
        forecasting,
        first_status_after,
        ..
    } = state;
    let Some((key, job)) = index.jobs.get_key_value(job) else {
        return;
    };
    tally.count(scheduler, job, standing.reason.kind().as_str());
    let room = WaitRoom {
        ledger,
        figures,
        forecasting,
        first_status_after: first_status_after.0,
    };
    wait(room, key, job, standing, now, plan);
}

/// Where a waiting job stands, as admission's cycle says: its position in its queue (0: not
/// ranked), why it waits, and when it may start.
#[derive(Clone, Copy)]
struct Standing<'a> {
    position: u32,
    reason: &'a PendingReason,
    eta: Option<i64>,
}

/// What deciding a waiting job's write reads and changes besides the job itself.
struct WaitRoom<'a> {
    ledger: &'a mut crate::ledger::Ledger,
    figures: &'a mut crate::figure_budget::Figures,
    forecasting: &'a crate::forecasting::Forecasting,
    first_status_after: i64,
}

/// A job that waits: counted under its queue and reason, and its status written when the
/// reason changed, or when its figures moved and were last written a refresh interval ago.
fn wait(
    room: WaitRoom<'_>,
    key: &ObjectRef,
    job: &muster_api::GpuJob,
    standing: &Standing<'_>,
    now: &Time,
    plan: &mut Plan,
) {
    let Standing {
        position,
        reason,
        eta,
    } = *standing;
    let WaitRoom {
        ledger,
        figures,
        forecasting,
        first_status_after: after,
    } = room;
    if ledger.is_busy(key) {
        return;
    }
    let no_status = GpuJobStatus::default();
    let current = job.status.as_ref().unwrap_or(&no_status);
    let before = current.pending_reason.as_ref().map(|r| r.kind);
    let now_s = now.0.as_second();
    // A new reason is written at once. The same reason with new figures (quota left,
    // position, ETA) — which every admission or completion changes for every job behind it —
    // is written only for jobs whose position is shown (or was), at most once per refresh
    // interval; further back a job keeps the message of its last new reason. A write still
    // queued is always brought up to date: replacing it costs no request.
    let queued = ledger.is_queued(key);
    let invalid = reason.kind() == PendingReasonKind::InvalidJob;
    if after > 0 && job.status.is_none() && !invalid && !queued {
        // A new job is told why it waits only once it has waited a while (see
        // [`status::FIRST_STATUS_AFTER_SECONDS`]); the ledger brings it back then.
        let created = job
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_second());
        if let Some(due) = created.map(|c| c + after).filter(|due| *due > now_s) {
            ledger.write_first_status_at(key, due);
            return;
        }
    }
    // Deep in a queue, one way of waiting one's turn (quota short, behind the queue's head,
    // capacity reserved for an earlier job, not looked at yet) turning into another says
    // nothing new: such a change is written like new figures, not at once.
    let same = before == Some(reason.kind())
        || (before.is_some_and(waits_its_turn) && waits_its_turn(reason.kind()));
    if same && !queued {
        let shown = position > 0 && position <= status::SHOWN_POSITIONS;
        let refreshed_lately = ledger.refreshed_lately(key, now_s);
        if refreshed_lately || !(shown || current.queue_position.is_some()) {
            return;
        }
        // A job that just came among the shown positions, its status already saying this
        // very reason, is shown its position once it has stayed there a while (see
        // [`status::POSITION_SHOWN_AFTER_SECONDS`]): the position is all the write would add.
        // One whose status says another way of waiting its turn (an eviction's "preempted to
        // make room", say) is told where it stands at once.
        if current.queue_position.is_none()
            && before == Some(reason.kind())
            && !ledger.position_due(key, now_s)
        {
            return;
        }
    }
    let shown_figures = status::Figures {
        position,
        eta,
        range: forecasting.range_of(key.as_str()),
    };
    let Some(next) = status::pending(
        current,
        job.metadata.generation,
        reason,
        &shown_figures,
        now,
    ) else {
        // The status already says it: a write still queued would say something older.
        ledger.drop_deferred(key);
        return;
    };
    if queued && same {
        // Back to the reason the status shows, only the figures differ: a job whose position
        // is not shown keeps its status as it is.
        let shown = position > 0 && position <= status::SHOWN_POSITIONS;
        if !(shown || current.queue_position.is_some()) {
            ledger.drop_deferred(key);
            return;
        }
    }
    // An Event when the reason changes, and for an invalid job at once; a job's first reason
    // is in its status (an Event for it too would be one more write per job).
    let event = (!same && (before.is_some() || invalid)).then(|| {
        let note = reason.message();
        if invalid {
            Note::warning("InvalidJob", note)
        } else {
            Note::normal("Pending", note)
        }
    });
    let action = Action::JobStatus {
        job: key.clone(),
        status: Box::new(next),
        event,
    };
    if same && !queued {
        // Figures alone: written as the controller's figure budget allows, once the pass has
        // seen every job whose figures moved (see [`crate::figure_budget`]).
        figures.jobs.offer(key.clone(), action);
        return;
    }
    // A write still queued for the job is replaced in its turn; else a new one goes out (the
    // sender queues it: see [`crate::ledger::Ledger::defer`]).
    if let Some(action) = ledger.status_written(key.clone(), action, now_s) {
        plan.actions.push(action);
    }
}

/// Whether a job waiting for `kind` is only waiting its turn in its queue: quota short,
/// behind the queue's head, its capacity reserved for an earlier job, or not looked at yet.
/// Which of these a job deep in a busy queue shows at a given second depends on what ended
/// just before (quota one second, a reservation the next): in a run of 3,000 batch Jobs the
/// flip between quota short and capacity reserved was written about once per job.
fn waits_its_turn(kind: PendingReasonKind) -> bool {
    matches!(
        kind,
        PendingReasonKind::QuotaShort
            | PendingReasonKind::BlockedByQueueHead
            | PendingReasonKind::CapacityReserved
            | PendingReasonKind::NotYetScheduled
    )
}

/// Adds Muster's finalizer beside a job's first write that creates something (a release, a
/// ProvisioningRequest), unless it has it or it is being added.
fn finalize_with(state: &mut State, key: &ObjectRef, plan: &mut Plan) {
    let lacks = state.index.jobs.get(key).is_some_and(|j| !has_finalizer(j));
    if lacks && state.ledger.finalize(key) {
        plan.actions.push(Action::AddFinalizer {
            job: key.to_owned(),
        });
    }
}

/// Admission placed a job: release its gang (onto bought capacity, consuming its request,
/// when it was provisioned).
fn admit(
    state: &mut State,
    admitted: Admitted,
    now: &Time,
    provisioned: &BTreeMap<ObjectRef, BTreeMap<String, String>>,
    plan: &mut Plan,
) {
    let Some(key) = state.index.job_ref(&admitted.job) else {
        return;
    };
    if state.ledger.is_busy(&key) {
        // A status write is in flight; admit on the next pass.
        return;
    }
    // A queued status write is dropped: the release writes the whole status.
    state.ledger.drop_deferred(&key);
    match release_action(&state.index, &key, &admitted, now, true) {
        Err(e) => state.ledger.fail_release(&key, now.0.as_second(), e),
        Ok((mut action, _)) => {
            if let Some(selector) = provisioned.get(key.as_str()) {
                on_bought_capacity(&state.index, &key, selector, &mut action);
            }
            if let Some(created) = state
                .index
                .jobs
                .get(&key)
                .and_then(|j| j.metadata.creation_timestamp.as_ref())
            {
                plan.summary
                    .waited
                    .push(now.0.as_second() - seconds(created));
            }
            plan.summary.admitted += 1;
            finalize_with(state, &key, plan);
            state.ledger.promise(key, Busy::Release(admitted));
            plan.actions.push(action);
        }
    }
}

/// A release onto bought capacity: its pods consume the job's requests and select the
/// capacity's details (the status records the capacity: see [`release_action`]).
fn on_bought_capacity(
    index: &Index,
    key: &ObjectRef,
    selector: &BTreeMap<String, String>,
    action: &mut Action,
) {
    let Some(job) = index.jobs.get(key) else {
        return;
    };
    let current = job.status.clone().unwrap_or_default();
    let Some(policy) = provision::policy(index, &current) else {
        return;
    };
    if let Action::Release { gang, .. } = action {
        provision::consume(gang, job, policy, provision::attempts(&current), selector);
    }
}

/// Admission decided to buy capacity: create the requests (or say why not).
fn start_provisioning(
    state: &mut State,
    key: ObjectRef,
    cluster_queue: &str,
    flavors: &[(String, String)],
    now: &Time,
    plan: &mut Plan,
) {
    if state.ledger.is_busy(&key) {
        return;
    }
    state.ledger.drop_deferred(&key);
    let Some(job) = state.index.jobs.get(&key) else {
        return;
    };
    let Some(policy) = state
        .index
        .cluster_queues
        .get(cluster_queue)
        .and_then(|q| q.spec.provisioning.clone())
    else {
        return;
    };
    if let Some(why) = cannot_buy(&state.index, job) {
        state
            .ledger
            .fail_release(&key, now.0.as_second(), why.to_owned());
        return;
    }
    let specs: BTreeMap<String, muster_api::ResourceFlavorSpec> = state
        .index
        .flavors
        .iter()
        .map(|(n, f)| (n.clone(), f.spec.clone()))
        .collect();
    // The requests' PodTemplates carry the pods' whole spec: a batch Job's entry is kept
    // without it, and given back whole here.
    let whole = state.index.whole_job(key.as_str(), job);
    match provision::start(&whole, cluster_queue, flavors, &specs, &policy, now) {
        Ok((objects, status)) => {
            *plan
                .summary
                .pending
                .entry((cluster_queue.to_owned(), "Provisioning".to_owned()))
                .or_default() += 1;
            let held = provision::holding(&status, now.0.as_second());
            let names: Vec<&str> = objects
                .requests
                .iter()
                .filter_map(|r| r.metadata.name.as_deref())
                .collect();
            let event = Note::normal(
                "Provisioning",
                format!(
                    "asked the cluster autoscaler ({}) for the gang's capacity: ProvisioningRequest {} (attempt {})",
                    policy.class_name,
                    names.join(", "),
                    status.provisioning_attempts
                ),
            );
            finalize_with(state, &key, plan);
            plan.actions.push(Action::Provision {
                job: key.clone(),
                templates: objects.templates,
                requests: objects.requests,
                status: Box::new(status),
                event,
            });
            if let Some(held) = held {
                state.ledger.promise(key, Busy::Provision(held));
            }
        }
        Err(e) => state.ledger.fail_release(&key, now.0.as_second(), e),
    }
}

/// Why the queue entry `job` cannot buy capacity, when it cannot: what would consume the
/// request goes into its workload's templates, and some workloads have none to take it.
fn cannot_buy(index: &Index, job: &muster_api::GpuJob) -> Option<&'static str> {
    use crate::workload::Run;
    match crate::workload::run(index, &crate::workload::workload_of(job)?)? {
        Run::JobSet(jobset) if !crate::workload::jobset::one_set_per_template(job, jobset) => Some(
            "a JobSet whose replicas are placed one by one (an exclusive topology) cannot buy capacity: each replicated Job's template can consume one ProvisioningRequest; use a ClusterQueue without provisioning, or one replica per replicated Job",
        ),
        Run::PodGroup(..) => Some(
            "a pod group cannot buy capacity: its pods exist before the request, so none would consume it; use a ClusterQueue without provisioning",
        ),
        Run::Job(_) | Run::JobSet(_) => None,
    }
}

/// A job whose capacity is provisioned but does not hold the gang yet (its nodes are still
/// joining): it keeps its quota and its status says what it waits for.
fn waiting_for_nodes(
    state: &mut State,
    key: ObjectRef,
    cluster_queue: String,
    message: &str,
    now: i64,
    plan: &mut Plan,
) {
    let Some(job) = state.index.jobs.get(&key) else {
        return;
    };
    let current = job.status.clone().unwrap_or_default();
    let next = provision::waiting(&current, message);
    *plan
        .summary
        .pending
        .entry((cluster_queue, "Provisioning".to_owned()))
        .or_default() += 1;
    if next != current
        && !state.ledger.is_busy(&key)
        && let Some(held) = provision::holding(&current, now)
    {
        plan.actions.push(Action::JobStatus {
            job: key.clone(),
            status: Box::new(next),
            event: None,
        });
        // The write keeps the job provisioning: it holds its quota meanwhile.
        state.ledger.promise(key, Busy::Provision(held));
    }
}

/// Evicts a job that holds an admission (from its status). Returns whether it did.
fn evict_held(
    state: &mut State,
    key: &ObjectRef,
    eviction: &Eviction,
    now: &Time,
    plan: &mut Plan,
) -> bool {
    if state.ledger.has_any_write(key) {
        return false;
    }
    let Some(job) = state.index.jobs.get(key) else {
        return false;
    };
    let status = job.status.clone().unwrap_or_default();
    if status.admission.is_none() {
        return false;
    }
    let (current, _) = split_pods(&state.index, key, status.requeue_count);
    let pods = current.iter().map(|(k, _)| (*k).clone()).collect();
    let action = crate::job::entry::evict(
        job,
        key,
        status::evicted(&status, job.metadata.generation, eviction, now),
        pods,
        Note::warning(eviction.reason(), eviction.message()),
    );
    let since = admitted_at(&status).unwrap_or(now.0.as_second());
    let admission_job = state.index.admission_job(key.as_str(), job);
    account(
        &action,
        &admission_job,
        since,
        now.0.as_second(),
        &mut plan.summary,
    );
    plan.actions.push(action);
    if status.provisioning_request.is_some() {
        // The job leaves its bought capacity (or stops waiting for it): give the requests
        // back, so that nothing is paid for a job that no longer runs there.
        plan.actions.push(unprovision(job, &status));
    }
    *plan
        .summary
        .evicted
        .entry(reason_key(eviction.reason()))
        .or_default() += 1;
    state.ledger.promise(key.to_owned(), Busy::Other);
    true
}
