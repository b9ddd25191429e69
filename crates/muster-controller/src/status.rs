//! A GpuJob's status from admission's decisions, written only when something changed.
//!
//! Each function takes the job's current status and returns the new one, or `None` when it
//! would be the same (the controller then sends nothing). A condition's
//! `lastTransitionTime` moves only when its status flips, as Kubernetes conventions ask.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use muster_admission::{Admitted, PendingReason};
use muster_api::Amount;
use muster_api::gpujob::{
    Admission, DomainAssignment, GpuJobPhase, GpuJobStatus, PendingReasonKind, PodSetAssignment,
    StartRange, conditions,
};

/// Sets (or adds) a condition; keeps its transition time when its status is unchanged.
pub(crate) fn set_condition(
    list: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: &Time,
) {
    let status = if status { "True" } else { "False" };
    let new = |time: Time| Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        observed_generation: generation,
        last_transition_time: time,
    };
    match list.iter_mut().find(|c| c.type_ == type_) {
        Some(c) if c.status == status => *c = new(c.last_transition_time.clone()),
        Some(c) => *c = new(now.clone()),
        None => list.push(new(now.clone())),
    }
}

/// `Some(next)` when `next` differs from `current`.
fn changed(current: &GpuJobStatus, next: GpuJobStatus) -> Option<GpuJobStatus> {
    (next != *current).then_some(next)
}

/// How far back in its ClusterQueue a waiting job's `queuePosition` is shown, and its figures
/// (quota left, ETA) kept fresh. Every admission at a queue's head moves everyone behind it;
/// showing each job its exact position would cost one status write per waiting job per
/// admission. Further back the position is left out (the LocalQueue's and ClusterQueue's
/// `pending` counts say how long the queue is) and a job's status is rewritten only when its
/// reason changes.
pub const SHOWN_POSITIONS: u32 = 10;

/// How often, at most, the status of a waiting job among the first [`SHOWN_POSITIONS`] of its
/// ClusterQueue is rewritten while its reason stays the same and only its figures move (quota
/// left, position, ETA), seconds. A new reason is written at once; the figures shown are at
/// most this old.
pub const PENDING_REFRESH_SECONDS: i64 = 30;

/// How often, at most, a queue's status is written when only its figures moved (pending and
/// admitted counts, usage), seconds; a change of its conditions is written at once.
pub const QUEUE_FIGURES_EVERY_SECONDS: i64 = 10;

/// How many ClusterQueue and LocalQueue statuses whose figures alone moved are written per
/// second, at most, across the controller (see `crate::figure_budget`): with more queues
/// than this many times [`QUEUE_FIGURES_EVERY_SECONDS`], each queue's figures are refreshed
/// in turn, less often than that. One a second: the visibility API (`muster queues`)
/// answers every queue's current figures at any time, so the statuses are a record that may
/// lag, and a fleet of sixty queues costs a write a second rather than two.
pub const QUEUE_FIGURE_WRITES_PER_SECOND: f64 = 1.0;

/// How many waiting jobs' statuses whose figures alone moved (position, quota left, ETA) are
/// written per second, at most, across the controller: with more jobs shown their positions
/// than this many times [`PENDING_REFRESH_SECONDS`], each is refreshed in turn, less often.
pub const JOB_FIGURE_WRITES_PER_SECOND: f64 = 2.0;

/// How many figure writes of one kind may go at once after a quiet spell: a small cluster's
/// queues and shown positions are all refreshed on time.
pub const FIGURE_WRITES_AT_ONCE: f64 = 20.0;

/// How long a gang must have been Ready before its Running status is written, seconds from
/// when its last pod turned Ready. A gang that ends sooner (a short job) goes from Admitted
/// straight to its end, one write instead of two; one that runs on shows Running this much
/// later, its PodsReady condition dated when the gang was Ready.
pub const RUNNING_STATUS_AFTER_SECONDS: i64 = 5;

/// How long a new job (one without a status) may wait before its first status is written,
/// seconds from its creation. Most jobs of a busy queue are admitted within seconds: a status
/// saying they wait, written just before the one saying they are admitted, would cost a write
/// per job that no one could read in time. A job that waits longer is told why then; an
/// invalid job at once. Meanwhile the visibility API (`muster jobs`, `muster explain`)
/// answers from the controller's memory where the job stands and why, at no write. (30 s
/// was measured on Kueue's benchmark and saved nothing there: its jobs either start at once
/// or wait minutes. `muster controller --first-status-after` sets it.)
pub const FIRST_STATUS_AFTER_SECONDS: i64 = 10;

/// How long a waiting job must have been among the first [`SHOWN_POSITIONS`] of its
/// ClusterQueue before its position is first written, seconds. In a busy queue the head moves
/// by several jobs a second, and most jobs pass through the shown positions within seconds
/// of being admitted: a position written just before the admission that ends it would cost a
/// write per job that no one could read in time (the reasoning of
/// [`FIRST_STATUS_AFTER_SECONDS`]). A job that stays near the head is shown its position then.
pub const POSITION_SHOWN_AFTER_SECONDS: i64 = 10;

/// The figures of a waiting job's status: they move with every admission and finish.
#[derive(Clone, Debug, Default)]
pub struct Figures {
    /// Its 1-based position in its ClusterQueue (0: not in an order).
    pub position: u32,
    /// When admission's reservation timeline expects it to start (seconds since the epoch).
    pub eta: Option<i64>,
    /// When the latest start-time forecast expects it to start, as a range.
    pub range: Option<StartRange>,
}

/// The status of a job that waits: phase Pending when it cannot be admitted as written (or
/// has no queue), Queued otherwise; its reason and figures (the position only among the
/// first [`SHOWN_POSITIONS`]).
pub fn pending(
    current: &GpuJobStatus,
    generation: Option<i64>,
    reason: &PendingReason,
    figures: &Figures,
    now: &Time,
) -> Option<GpuJobStatus> {
    let Figures {
        position,
        eta,
        ref range,
    } = *figures;
    let mut next = current.clone();
    let kind = reason.kind();
    let message = reason.message();
    let valid = kind != PendingReasonKind::InvalidJob;
    set_condition(
        &mut next.conditions,
        conditions::VALID,
        valid,
        if valid { "Valid" } else { "InvalidJob" },
        if valid { "" } else { &message },
        generation,
        now,
    );
    let queued = valid && kind != PendingReasonKind::UnknownQueue;
    next.phase = Some(if queued {
        GpuJobPhase::Queued
    } else {
        GpuJobPhase::Pending
    });
    next.queue_position = (position > 0 && position <= SHOWN_POSITIONS)
        .then(|| i32::try_from(position).unwrap_or(i32::MAX));
    next.pending_reason = Some(muster_api::gpujob::PendingReason {
        kind,
        message,
        eta: eta
            .and_then(|s| k8s_openapi::jiff::Timestamp::from_second(s).ok())
            .map(Time),
        since: match reason {
            PendingReason::PreemptionDeferred(d) => {
                k8s_openapi::jiff::Timestamp::from_second(d.since)
                    .ok()
                    .map(Time)
            }
            _ => None,
        },
        start_range: steady_range(current, range.as_ref()),
    });
    next.admission = None;
    changed(current, next)
}

/// `range` as the status is to show it: a forecast made later that gives the same bounds
/// keeps the range the status shows (and its `asOf`), so that a new forecast alone, which
/// comes every minute, costs no write.
fn steady_range(current: &GpuJobStatus, range: Option<&StartRange>) -> Option<StartRange> {
    let shown = current
        .pending_reason
        .as_ref()
        .and_then(|r| r.start_range.as_ref());
    match (shown, range) {
        (Some(shown), Some(new))
            if (&shown.earliest, &shown.likely, &shown.latest)
                == (&new.earliest, &new.likely, &new.latest) =>
        {
            Some(shown.clone())
        }
        _ => range.cloned(),
    }
}

/// The status of a job just admitted: phase Admitted, its ClusterQueue, and per pod set the
/// flavor and the domain with its pod count.
pub fn admitted(
    current: &GpuJobStatus,
    generation: Option<i64>,
    admitted: &Admitted,
    now: &Time,
) -> Option<GpuJobStatus> {
    let mut next = current.clone();
    let message = format!("admitted by ClusterQueue {}", admitted.cluster_queue);
    set_condition(
        &mut next.conditions,
        conditions::VALID,
        true,
        "Valid",
        "",
        generation,
        now,
    );
    for type_ in [conditions::QUOTA_RESERVED, conditions::ADMITTED] {
        set_condition(
            &mut next.conditions,
            type_,
            true,
            "Admitted",
            &message,
            generation,
            now,
        );
    }
    next.phase = Some(GpuJobPhase::Admitted);
    next.queue_position = None;
    next.pending_reason = None;
    next.admission = Some(Admission {
        cluster_queue: admitted.cluster_queue.clone(),
        pod_sets: admitted
            .pod_sets
            .iter()
            .map(|p| PodSetAssignment {
                name: p.name.clone(),
                flavor: p.flavor.clone(),
                levels: p.domain.iter().map(|(level, _)| level.clone()).collect(),
                domains: vec![DomainAssignment {
                    values: p.domain.iter().map(|(_, value)| value.clone()).collect(),
                    count: i32::try_from(p.nodes.len()).unwrap_or(i32::MAX),
                }],
                nodes: p.nodes.clone(),
            })
            .collect(),
    });
    changed(current, next)
}

/// The condition a ClusterQueue and a LocalQueue carry: whether it admits jobs.
pub const ACTIVE: &str = "Active";

/// A ResourceFlavor's status: `Valid` (False, reason `InvalidSpec`, naming the field, when
/// `problem` says what is wrong). `None` when it would not change.
pub fn flavor(
    current: &muster_api::ResourceFlavorStatus,
    problem: Option<&muster_api::FieldError>,
    generation: Option<i64>,
    now: &Time,
) -> Option<muster_api::ResourceFlavorStatus> {
    let mut next = current.clone();
    let problem = problem.map(|e| format!("{}: {}", e.path, e.message));
    let problem = problem.as_deref().map(|p| ("InvalidSpec", p));
    set_valid(&mut next.conditions, problem, generation, now);
    (next != *current).then_some(next)
}

/// A Cohort's status: `Valid` (False with `problem`'s reason and message: the field, what
/// is wrong and the fix — `InvalidSpec` for an invalid spec or a parent that does not exist
/// or leads back to it, `LimitNeverBinds` for a limit that can never bind). `None` when it
/// would not change.
pub fn cohort(
    current: &muster_api::CohortStatus,
    problem: Option<(&str, &str)>,
    generation: Option<i64>,
    now: &Time,
) -> Option<muster_api::CohortStatus> {
    let mut next = current.clone();
    set_valid(&mut next.conditions, problem, generation, now);
    (next != *current).then_some(next)
}

/// Sets `Valid`: False with `problem`'s (reason, message), else True.
fn set_valid(
    conditions: &mut Vec<Condition>,
    problem: Option<(&str, &str)>,
    generation: Option<i64>,
    now: &Time,
) {
    match problem {
        Some((reason, problem)) => set_condition(
            conditions,
            conditions::VALID,
            false,
            reason,
            problem,
            generation,
            now,
        ),
        None => set_condition(
            conditions,
            conditions::VALID,
            true,
            "Valid",
            "",
            generation,
            now,
        ),
    }
}

/// A ClusterQueue's status from the scheduler: jobs waiting and holding quota (`counts`,
/// see [`queue_counts`]), usage per flavor and resource (with the borrowed part), and
/// `Active` (False, reason `InvalidSpec`, naming the field, when the spec fails validation).
/// `None` when it would not change.
pub fn cluster_queue(
    current: &muster_api::ClusterQueueStatus,
    name: &str,
    counts: ClusterQueueCounts,
    generation: Option<i64>,
    scheduler: &muster_admission::Scheduler,
    now: &Time,
) -> Option<muster_api::ClusterQueueStatus> {
    let ClusterQueueCounts { pending, admitted } = counts;
    let mut conditions = current.conditions.clone();
    match scheduler.queue_problem(name) {
        Some(problem) => set_condition(
            &mut conditions,
            ACTIVE,
            false,
            "InvalidSpec",
            problem,
            generation,
            now,
        ),
        None => set_condition(&mut conditions, ACTIVE, true, "Ready", "", generation, now),
    }
    let next = muster_api::ClusterQueueStatus {
        pending_jobs: pending,
        admitted_jobs: admitted,
        flavors_usage: flavors_usage(scheduler.quota().report(name)),
        conditions,
    };
    (next != *current).then_some(next)
}

/// Why an admitted gang leaves its nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Eviction {
    /// Not every pod was Ready within `podsReadyTimeoutSeconds`; it may try again at
    /// `retry_at` (seconds).
    PodsReadyTimeout {
        /// When it may be admitted again.
        retry_at: i64,
    },
    /// A pod failed or lost its node: the whole gang restarts (counts toward `backoffLimit`).
    Restart {
        /// What broke.
        cause: String,
    },
    /// Preempted by a job that needs its room.
    Preempted {
        /// The preemptor, `namespace/name`.
        by: String,
    },
    /// `spec.suspend` was set.
    Suspended,
    /// Admission asked for it (e.g. its queue drains).
    Other(String),
    /// The autoscaler took the bought capacity back; the job may ask again at `retry_at`.
    CapacityRevoked {
        /// The autoscaler's message.
        message: String,
        /// When it may be admitted (and buy) again, seconds.
        retry_at: i64,
    },
}

impl Eviction {
    /// The condition and event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Eviction::PodsReadyTimeout { .. } => "PodsReadyTimeout",
            Eviction::Restart { .. } => "GangRestart",
            Eviction::Preempted { .. } => "Preempted",
            Eviction::Suspended => "Suspended",
            Eviction::Other(_) => "Evicted",
            Eviction::CapacityRevoked { .. } => "CapacityRevoked",
        }
    }

    /// What a person reads.
    pub fn message(&self) -> String {
        match self {
            Eviction::PodsReadyTimeout { .. } => {
                "not every pod was Ready within podsReadyTimeoutSeconds; the gang was evicted and requeued with backoff".to_owned()
            }
            Eviction::Restart { cause } => format!("{cause}; the whole gang restarts"),
            Eviction::Preempted { by } => format!("preempted to make room for {by}"),
            Eviction::Suspended => "spec.suspend is true; the gang was evicted".to_owned(),
            Eviction::Other(why) => why.clone(),
            Eviction::CapacityRevoked { message, .. } => format!(
                "the autoscaler took the capacity back ({message}); the gang was evicted and asks again after the provisioning backoff"
            ),
        }
    }
}

/// The status of a job whose gang is evicted: its admission is gone (quota released), it
/// queues again (after `retry_at` for a timeout), and `requeueCount` moves on so that the
/// evicted pods are never taken for the next attempt's.
pub fn evicted(
    current: &GpuJobStatus,
    generation: Option<i64>,
    eviction: &Eviction,
    now: &Time,
) -> GpuJobStatus {
    let mut next = current.clone();
    let message = eviction.message();
    set_condition(
        &mut next.conditions,
        conditions::EVICTED,
        true,
        eviction.reason(),
        &message,
        generation,
        now,
    );
    for type_ in [
        conditions::QUOTA_RESERVED,
        conditions::PROVISIONED,
        conditions::ADMITTED,
        conditions::PODS_READY,
    ] {
        if next.conditions.iter().any(|c| c.type_ == type_) {
            set_condition(
                &mut next.conditions,
                type_,
                false,
                eviction.reason(),
                &message,
                generation,
                now,
            );
        }
    }
    next.admission = None;
    next.provisioning_request = None;
    next.phase = Some(GpuJobPhase::Queued);
    next.start_time = None;
    next.requeue_count = next.requeue_count.saturating_add(1);
    if matches!(eviction, Eviction::Restart { .. }) {
        next.restart_count = next.restart_count.saturating_add(1);
    }
    next.pending_reason = Some(match eviction {
        Eviction::PodsReadyTimeout { retry_at } | Eviction::CapacityRevoked { retry_at, .. } => {
            muster_api::gpujob::PendingReason {
                start_range: None,
                kind: PendingReasonKind::Backoff,
                message: message.clone(),
                eta: k8s_openapi::jiff::Timestamp::from_second(*retry_at)
                    .ok()
                    .map(Time),
                since: None,
            }
        }
        Eviction::Suspended => muster_api::gpujob::PendingReason {
            start_range: None,
            kind: PendingReasonKind::Suspended,
            message: message.clone(),
            eta: None,
            since: None,
        },
        _ => muster_api::gpujob::PendingReason {
            start_range: None,
            kind: PendingReasonKind::NotYetScheduled,
            message: message.clone(),
            eta: None,
            since: None,
        },
    });
    next
}

/// The status of a job whose pods are all Ready: phase Running, `PodsReady`, and the start
/// time (kept from the first time). `None` when unchanged.
pub fn running(
    current: &GpuJobStatus,
    generation: Option<i64>,
    now: &Time,
) -> Option<GpuJobStatus> {
    let mut next = current.clone();
    set_condition(
        &mut next.conditions,
        conditions::PODS_READY,
        true,
        "PodsReady",
        "every pod of the gang is Ready",
        generation,
        now,
    );
    next.phase = Some(GpuJobPhase::Running);
    if next.start_time.is_none() {
        next.start_time = Some(now.clone());
    }
    changed(current, next)
}

/// The status of a job that ended: Succeeded (every pod succeeded) or Failed (with why). Its
/// admission is gone: the quota is free.
pub fn finished(
    current: &GpuJobStatus,
    generation: Option<i64>,
    succeeded: bool,
    message: &str,
    now: &Time,
) -> GpuJobStatus {
    let mut next = current.clone();
    let reason = if succeeded { "Succeeded" } else { "Failed" };
    set_condition(
        &mut next.conditions,
        conditions::FINISHED,
        true,
        reason,
        message,
        generation,
        now,
    );
    for type_ in [conditions::QUOTA_RESERVED, conditions::ADMITTED] {
        if next.conditions.iter().any(|c| c.type_ == type_) {
            set_condition(
                &mut next.conditions,
                type_,
                false,
                reason,
                "the job finished; its quota is released",
                generation,
                now,
            );
        }
    }
    next.phase = Some(if succeeded {
        GpuJobPhase::Succeeded
    } else {
        GpuJobPhase::Failed
    });
    next.admission = None;
    next.provisioning_request = None;
    next.queue_position = None;
    next.pending_reason = None;
    next.completion_time = Some(now.clone());
    next
}

/// A LocalQueue's status: its jobs waiting and holding quota, and `Active` (False with the
/// reason and message of `active` when it cannot take jobs). `None` when unchanged.
pub fn local_queue(
    current: &muster_api::LocalQueueStatus,
    counts: &LocalQueueCounts,
    active: Result<(), (&str, &str)>,
    generation: Option<i64>,
    now: &Time,
) -> Option<muster_api::LocalQueueStatus> {
    let rows = counts.usage.iter().flat_map(|(flavor, resources)| {
        resources
            .iter()
            .filter(|(_, amount)| !amount.is_zero())
            .map(|(resource, amount)| (flavor.clone(), resource.to_owned(), amount, Amount::ZERO))
    });
    let mut conditions = current.conditions.clone();
    match active {
        Ok(()) => set_condition(&mut conditions, ACTIVE, true, "Ready", "", generation, now),
        Err((reason, message)) => set_condition(
            &mut conditions,
            ACTIVE,
            false,
            reason,
            message,
            generation,
            now,
        ),
    }
    let next = muster_api::LocalQueueStatus {
        pending_jobs: counts.pending,
        admitted_jobs: counts.admitted,
        flavors_usage: flavors_usage(rows),
        conditions,
    };
    (next != *current).then_some(next)
}

/// Quota usage rows (flavor, resource, in use, of which borrowed) as a queue's
/// `flavorsUsage`: grouped by flavor in the rows' order, `borrowed` only when not zero.
fn flavors_usage(
    rows: impl IntoIterator<Item = (String, String, Amount, Amount)>,
) -> Vec<muster_api::cluster_queue::FlavorUsage> {
    use muster_api::cluster_queue::{FlavorUsage, ResourceUsage};
    let mut flavors: Vec<FlavorUsage> = Vec::new();
    for (flavor, resource, used, borrowed) in rows {
        let usage = ResourceUsage {
            total: used.to_quantity(),
            borrowed: (!borrowed.is_zero()).then(|| borrowed.to_quantity()),
            name: resource,
        };
        match flavors.iter_mut().find(|f| f.name == flavor) {
            Some(f) => f.resources.push(usage),
            None => flavors.push(FlavorUsage {
                name: flavor,
                resources: vec![usage],
            }),
        }
    }
    flavors
}

/// What a ClusterQueue's jobs add up to in one pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClusterQueueCounts {
    /// Jobs waiting in it (their LocalQueue leads to it and it admits their namespace).
    pub pending: i32,
    /// Jobs holding its quota.
    pub admitted: i32,
}

/// Every queue's jobs, counted in one pass over the scheduler's jobs: per ClusterQueue
/// (waiting jobs under the ClusterQueue their LocalQueue leads to, held jobs under the one
/// whose quota they hold) and per LocalQueue (`namespace/name`).
#[derive(Clone, Debug, Default)]
pub struct QueueCounts {
    /// Per ClusterQueue.
    pub cluster: std::collections::BTreeMap<String, ClusterQueueCounts>,
    /// Per LocalQueue.
    pub local: std::collections::BTreeMap<String, LocalQueueCounts>,
}

/// Counts every queue's jobs from the scheduler's own tallies: the jobs each LocalQueue has
/// (kept as jobs come and go) less those of them that hold capacity, which are walked one by
/// one for their usage. The cost is one step per queue and per holder, not per job: at fleet
/// scale most jobs wait, and counting them one by one every second cost as much as the rest
/// of a pass.
pub fn queue_counts(scheduler: &muster_admission::Scheduler) -> QueueCounts {
    use muster_admission::JobState;
    let mut counts = QueueCounts::default();
    for (local_queue, jobs) in scheduler.jobs_per_local_queue() {
        counts.local.insert(
            local_queue.to_owned(),
            LocalQueueCounts {
                pending: i32::try_from(jobs).unwrap_or(i32::MAX),
                ..LocalQueueCounts::default()
            },
        );
    }
    // Counts and exact sums (quantities in milli-units): no order to keep.
    for (job, state) in scheduler.holders_with_states() {
        let (JobState::Admitted(h) | JobState::Provisioning(h) | JobState::Evicting(h)) = state
        else {
            continue;
        };
        let local = match counts.local.get_mut(&job.local_queue) {
            Some(local) => local,
            None => counts.local.entry(job.local_queue.clone()).or_default(),
        };
        // Every job was counted as waiting above: a holder is not.
        local.pending = local.pending.saturating_sub(1).max(0);
        local.admitted = local.admitted.saturating_add(1);
        for (set, placement) in job.pod_sets.iter().zip(&h.pod_sets) {
            local
                .usage
                .entry(placement.flavor.clone())
                .or_default()
                .add_all(&muster_admission::quota_usage(set));
        }
        let cluster = counts.cluster.entry(h.cluster_queue.clone()).or_default();
        cluster.admitted = cluster.admitted.saturating_add(1);
    }
    for (local_queue, local) in &counts.local {
        if local.pending == 0 {
            continue;
        }
        if let Some(cq) = scheduler.cluster_queue_of_local_queue(local_queue) {
            let cluster = counts.cluster.entry(cq).or_default();
            cluster.pending = cluster.pending.saturating_add(local.pending);
        }
    }
    counts
}

/// What a LocalQueue's jobs add up to in one pass.
#[derive(Clone, Debug, Default)]
pub struct LocalQueueCounts {
    /// Jobs waiting.
    pub pending: i32,
    /// Jobs holding quota.
    pub admitted: i32,
    /// Quota held per flavor.
    pub usage: std::collections::BTreeMap<String, muster_api::Resources>,
}

/// The status of a job that gives its bought capacity up (or stops waiting for it) and queues
/// again: no admission, no request, and neither quota reserved nor capacity provisioned
/// (`QuotaReserved` and `Provisioned` False, with `reason` and `message`).
pub(crate) fn unprovisioned(
    current: &GpuJobStatus,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: &Time,
) -> GpuJobStatus {
    let mut next = current.clone();
    next.admission = None;
    next.provisioning_request = None;
    next.phase = Some(GpuJobPhase::Queued);
    for type_ in [conditions::QUOTA_RESERVED, conditions::PROVISIONED] {
        set_condition(
            &mut next.conditions,
            type_,
            false,
            reason,
            message,
            generation,
            now,
        );
    }
    next
}

/// Marks a job released onto capacity the autoscaler provisioned: `Provisioned=True`.
pub(crate) fn mark_provisioned(status: &mut GpuJobStatus, generation: Option<i64>, now: &Time) {
    set_condition(
        &mut status.conditions,
        conditions::PROVISIONED,
        true,
        "Provisioned",
        "the autoscaler provisioned the capacity",
        generation,
        now,
    );
}
