//! One scheduling pass of the controller, pure: from the [`Index`] at time `now` to the
//! [`Action`]s that carry it out.
//!
//! A pass (1) walks every job and settles what the cluster already shows — gangs that
//! finished, broke, timed out or were suspended; releases a restarted controller left
//! half-done; stale pods of an earlier attempt — (2) brings admission's [`Scheduler`] up to
//! the index (the one the last pass left, or one rebuilt from the index) and runs one cycle, and (3) turns its decisions into writes. Every admission is
//! recorded in the index as the pass returns, before any write goes out, so a pass that runs
//! while those writes are in flight books the same quota and nodes again instead of
//! promising them twice.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use muster_admission::{
    Admitted, Cluster, Decision, Holding, Job, PendingReason, PodSetPlacement, Scheduler,
};
use muster_api::gpujob::{GpuJobPhase, GpuJobStatus, PendingReasonKind, conditions};
use muster_api::{ClusterQueueStatus, GpuJob, LocalQueueStatus, Resources};

use crate::index::{Index, PodPhase, PodRecord};
use crate::lifecycle::{Health, health, requeue_at};
use crate::provision;
use crate::release::{Gang, gang};
use crate::status::{self, Eviction};

/// The finalizer that lets Muster release a deleted job's quota and remove its pods first.
pub const FINALIZER: &str = "muster.dev/gang";

/// Something the controller writes, as one unit (its requests go in order).
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Create the gang's Service and gated pods, lift every gate, then write the status.
    Release {
        /// The job, `namespace/name`.
        job: String,
        /// What to create.
        gang: Box<Gang>,
        /// The status once released.
        status: Box<GpuJobStatus>,
        /// The event to record.
        event: Option<Note>,
    },
    /// Write the status (admission gone, requeued or finished), then delete the pods.
    Evict {
        /// The job.
        job: String,
        /// The status to write first.
        status: Box<GpuJobStatus>,
        /// The pods to delete, `namespace/name`.
        pods: Vec<String>,
        /// The event to record.
        event: Note,
    },
    /// Delete pods that belong to no live admission (a rolled-back release, an old attempt).
    DeletePods {
        /// The job.
        job: String,
        /// The pods.
        pods: Vec<String>,
    },
    /// Write a job's status.
    JobStatus {
        /// The job.
        job: String,
        /// The new status.
        status: Box<GpuJobStatus>,
        /// The event to record, on a transition.
        event: Option<Note>,
    },
    /// Add Muster's finalizer to a job.
    AddFinalizer {
        /// The job.
        job: String,
    },
    /// A deleted job: remove its pods and Service, then its finalizer.
    Finalize {
        /// The job.
        job: String,
        /// Its pods.
        pods: Vec<String>,
    },
    /// Ask the autoscaler for capacity: create the PodTemplates and ProvisioningRequests
    /// (objects that exist count as created), then write the status.
    Provision {
        /// The job.
        job: String,
        /// One per pod set.
        templates: Vec<k8s_openapi::api::core::v1::PodTemplate>,
        /// One, or one per pod set.
        requests: Vec<muster_api::ProvisioningRequest>,
        /// The status: Provisioning, with the request and attempt.
        status: Box<GpuJobStatus>,
        /// The Event: which request, which attempt.
        event: Note,
    },
    /// Delete a job's ProvisioningRequests and PodTemplates (`namespace/name`; ones already
    /// gone count as deleted).
    Unprovision {
        /// The job.
        job: String,
        /// The requests.
        requests: Vec<String>,
        /// The templates.
        templates: Vec<String>,
    },
    /// Write a ClusterQueue's status.
    ClusterQueueStatus {
        /// The ClusterQueue.
        name: String,
        /// The new status.
        status: ClusterQueueStatus,
    },
    /// Write a LocalQueue's status.
    LocalQueueStatus {
        /// `namespace/name`.
        key: String,
        /// The new status.
        status: LocalQueueStatus,
    },
}

impl Action {
    /// The job the action is about, if any.
    pub fn job(&self) -> Option<&str> {
        match self {
            Action::Release { job, .. }
            | Action::Evict { job, .. }
            | Action::DeletePods { job, .. }
            | Action::JobStatus { job, .. }
            | Action::AddFinalizer { job }
            | Action::Finalize { job, .. }
            | Action::Provision { job, .. }
            | Action::Unprovision { job, .. } => Some(job),
            Action::ClusterQueueStatus { .. } | Action::LocalQueueStatus { .. } => None,
        }
    }

    /// A short name, for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::Release { .. } => "release",
            Action::Evict { .. } => "evict",
            Action::DeletePods { .. } => "delete_pods",
            Action::JobStatus { .. } => "job_status",
            Action::AddFinalizer { .. } => "add_finalizer",
            Action::Finalize { .. } => "finalize",
            Action::Provision { .. } => "provision",
            Action::Unprovision { .. } => "unprovision",
            Action::ClusterQueueStatus { .. } => "cluster_queue_status",
            Action::LocalQueueStatus { .. } => "local_queue_status",
        }
    }
}

/// A Kubernetes Event about a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// Warning rather than Normal.
    pub warning: bool,
    /// PascalCase reason.
    pub reason: String,
    /// What a person reads.
    pub message: String,
}

impl Note {
    fn normal(reason: &str, message: impl Into<String>) -> Note {
        Note {
            warning: false,
            reason: reason.to_owned(),
            message: message.into(),
        }
    }
    fn warning(reason: &str, message: impl Into<String>) -> Note {
        Note {
            warning: true,
            reason: reason.to_owned(),
            message: message.into(),
        }
    }
}

/// Writes the controller has started and not yet seen land, kept in the index.
#[derive(Clone, Debug, Default)]
pub struct Writes {
    /// Jobs with an action in flight.
    pub(crate) busy: BTreeMap<String, Busy>,
    /// Per job, how many of its actions are in flight: it stays [`Writes::busy`] until the
    /// last one lands (a pass may send several, such as a finalizer and a release, and the
    /// first to land must not free a job whose release is still being written).
    pub(crate) in_flight: BTreeMap<String, u32>,
    /// Jobs whose finalizer is being added.
    pub(crate) finalizing: BTreeSet<String>,
    /// Queues whose status is being written.
    pub(crate) queues: BTreeSet<String>,
    /// Jobs whose releases failed: (failures, retry at, last error).
    pub(crate) failed: BTreeMap<String, (u32, i64, String)>,
    /// Waiting jobs whose status this term wrote within the last
    /// [`status::PENDING_REFRESH_SECONDS`], and when.
    pub(crate) refreshed: BTreeMap<String, i64>,
    /// The leadership term these writes belong to.
    pub(crate) term: u64,
    /// Status writes of waiting jobs queued for the sender, not yet sent: each such job is
    /// [`Busy::StatusQueued`] and counts one write in flight.
    pub(crate) deferred: crate::deferred::DeferredStatuses,
}

impl Writes {
    /// Whether a write for `job` is under way: queued status writes do not count (a pass
    /// may replace or drop them, as nothing has been sent).
    pub(crate) fn is_busy(&self, job: &str) -> bool {
        self.busy
            .get(job)
            .is_some_and(|b| !matches!(b, Busy::StatusQueued))
    }

    /// Drops the queued status write of `job`, if any, with its count in flight.
    pub(crate) fn drop_deferred(&mut self, job: &str) {
        if !self.deferred.drop_job(job) {
            return;
        }
        let left = self.in_flight.get_mut(job).map_or(0, |n| {
            *n = n.saturating_sub(1);
            *n
        });
        if left == 0 {
            self.in_flight.remove(job);
        }
        if matches!(self.busy.get(job), Some(Busy::StatusQueued)) {
            self.busy.remove(job);
        }
    }

    /// Queued status writes whose job has since got another write, or is gone, are dropped:
    /// the other write carries the whole status, and a gone job has none.
    fn drop_superseded(&mut self, jobs: &BTreeMap<String, GpuJob>) {
        let superseded: Vec<String> = self
            .deferred
            .jobs()
            .filter(|j| {
                !jobs.contains_key(*j) || !matches!(self.busy.get(*j), Some(Busy::StatusQueued))
            })
            .map(str::to_owned)
            .collect();
        for job in superseded {
            self.drop_deferred(&job);
        }
    }
}

/// What is in flight for a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Busy {
    /// A release of this admission: the job holds it meanwhile.
    Release(Admitted),
    /// A status write for a waiting job: it still queues, but is not admitted until the
    /// write lands (two status writes in flight could land out of order).
    Status,
    /// A status write for a waiting job, queued and not yet sent (see
    /// [`crate::deferred`]): the job queues and may be admitted, which drops the write.
    StatusQueued,
    /// A new ProvisioningRequest being created: the job holds its quota meanwhile.
    Provision(Holding),
    /// Anything else (eviction, deletion, finalizing): it neither holds nor queues.
    Other,
}

/// What one pass found, for metrics and logs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// Jobs the cycle considered.
    pub considered: usize,
    /// Whether the pass built admission's scheduler afresh (else it brought the one the
    /// last pass left up to the index).
    pub scheduler_rebuilt: bool,
    /// Admissions.
    pub admitted: usize,
    /// Gangs evicted, by reason.
    pub evicted: BTreeMap<&'static str, usize>,
    /// Jobs preempted.
    pub preempted: usize,
    /// Pending jobs per (ClusterQueue, reason kind); jobs without a queue under "".
    pub pending: BTreeMap<(String, String), i64>,
    /// Seconds from creation to admission, one per admission.
    pub waited: Vec<i64>,
    /// Seconds from creation to all pods Ready, one per gang that became Ready.
    pub to_running: Vec<i64>,
    /// Quota in use: (ClusterQueue, flavor, resource, amount in the resource's units).
    pub usage: Vec<(String, String, String, f64)>,
    /// GPU (or TPU chip) seconds of runs evicted this pass, from admission to eviction: work
    /// thrown away unless the job checkpointed (which the controller cannot see).
    pub lost_gpu_seconds: u64,
    /// GPU (or TPU chip) seconds of runs that succeeded this pass, from admission to the end.
    pub completed_gpu_seconds: u64,
    /// Per job that finished this pass (succeeded or failed), how often it was evicted.
    pub finished_requeues: Vec<i32>,
}

/// One pass's writes and what it found.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// The writes, in order.
    pub actions: Vec<Action>,
    /// What it found.
    pub summary: Summary,
}

fn seconds(t: &Time) -> i64 {
    t.0.as_second()
}

fn condition_time(status: &GpuJobStatus, type_: &str) -> Option<i64> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
        .map(|c| seconds(&c.last_transition_time))
}

/// A job's pods of its current attempt, and those left over from earlier attempts.
fn split_pods<'a>(
    index: &'a Index,
    key: &str,
    attempt: i32,
) -> (Vec<(&'a str, &'a PodRecord)>, Vec<String>) {
    let (mut current, mut stale) = (Vec::new(), Vec::new());
    for (k, pod) in index.pods_of(key) {
        let Some(member) = &pod.member else { continue };
        if member.attempt == attempt {
            current.push((k, pod));
        } else if !pod.deleting {
            stale.push(k.to_owned());
        }
    }
    (current, stale)
}

/// The admission a job holds, from its status (nodes there, or else its pods' pins).
fn holding_of(job: &GpuJob, status: &GpuJobStatus, pods: &[(&str, &PodRecord)]) -> Option<Holding> {
    let admission = status.admission.as_ref()?;
    let since = condition_time(status, conditions::ADMITTED).unwrap_or(0);
    let pod_sets = admission
        .pod_sets
        .iter()
        .map(|a| {
            let count = job
                .spec
                .pod_sets
                .iter()
                .find(|s| s.name == a.name)
                .map_or(0, |s| usize::try_from(s.count).unwrap_or(0));
            let nodes = if a.nodes.len() == count {
                a.nodes.clone()
            } else {
                pinned_nodes(pods, &a.name, count).unwrap_or_default()
            };
            PodSetPlacement {
                name: a.name.clone(),
                flavor: a.flavor.clone(),
                domain: a
                    .levels
                    .iter()
                    .cloned()
                    .zip(
                        a.domains
                            .first()
                            .map(|d| d.values.clone())
                            .unwrap_or_default(),
                    )
                    .collect(),
                nodes,
            }
        })
        .collect();
    Some(Holding {
        cluster_queue: admission.cluster_queue.clone(),
        since,
        pod_sets,
    })
}

/// The node of every pod of `pod_set` (by index), when each of the `count` pods exists and
/// is pinned.
fn pinned_nodes(pods: &[(&str, &PodRecord)], pod_set: &str, count: usize) -> Option<Vec<String>> {
    let mut nodes = vec![None; count];
    for (_, pod) in pods {
        let member = pod.member.as_ref()?;
        if member.pod_set == pod_set && member.index < count {
            nodes[member.index].clone_from(&member.pinned);
        }
    }
    nodes.into_iter().collect()
}

/// The admission a half-finished release carried, read back from its pods — when every pod
/// of every pod set exists and they agree on queue and flavors. `None`: roll it back.
fn recovered_admission(job: &GpuJob, key: &str, pods: &[(&str, &PodRecord)]) -> Option<Admitted> {
    let queue = pods.first()?.1.member.as_ref()?.cluster_queue.clone();
    let mut pod_sets = Vec::with_capacity(job.spec.pod_sets.len());
    for set in &job.spec.pod_sets {
        let count = usize::try_from(set.count).ok()?;
        let members: Vec<_> = pods
            .iter()
            .filter_map(|(_, p)| p.member.as_ref())
            .filter(|m| m.pod_set == set.name)
            .collect();
        let first = members.first()?;
        if members
            .iter()
            .any(|m| m.cluster_queue != queue || m.flavor != first.flavor)
        {
            return None;
        }
        pod_sets.push(PodSetPlacement {
            name: set.name.clone(),
            flavor: first.flavor.clone(),
            domain: first.domain.clone(),
            nodes: pinned_nodes(pods, &set.name, count)?,
        });
    }
    let expected: usize = pod_sets.iter().map(|p| p.nodes.len()).sum();
    (expected == pods.len() && !queue.is_empty()).then(|| Admitted {
        job: key.to_owned(),
        cluster_queue: queue,
        pod_sets,
        borrowing: false,
    })
}

/// The release to finish for an admitted job whose gang was never wholly released: some pod
/// of the current attempt still carries the gate (or is missing while others are gated), none
/// has failed or is being deleted, and every pod's node is known. `None` when the gang was
/// released (its health decides) or cannot be finished as it stands.
fn unfinished_release(
    job: &GpuJob,
    key: &str,
    held: &Holding,
    current: &[(&str, &PodRecord)],
) -> Option<Admitted> {
    let gated = current.iter().any(|(_, p)| p.gated);
    let intact = current
        .iter()
        .all(|(_, p)| !p.deleting && matches!(p.phase, PodPhase::Pending));
    if !gated || !intact || job.spec.suspend {
        return None;
    }
    let complete = held.pod_sets.iter().all(|set| {
        let count = job
            .spec
            .pod_sets
            .iter()
            .find(|s| s.name == set.name)
            .map_or(0, |s| usize::try_from(s.count).unwrap_or(0));
        count > 0 && set.nodes.len() == count
    });
    complete.then(|| Admitted {
        job: key.to_owned(),
        cluster_queue: held.cluster_queue.clone(),
        pod_sets: held.pod_sets.clone(),
        borrowing: false,
    })
}

/// What walking the jobs found, before admission's cycle.
#[derive(Default)]
struct Settled {
    actions: Vec<Action>,
    /// Jobs that get an action.
    busy: Vec<(String, Busy)>,
    finalizing: Vec<String>,
    submit: Vec<Job>,
    /// Held jobs: (job, holding, provisioning).
    restore: Vec<(Job, Holding, bool)>,
    /// Jobs queued again on capacity bought for them, with the node selectors it needs.
    provisioned: BTreeMap<String, BTreeMap<String, String>>,
    /// Half-done releases to finish.
    releases: Vec<(String, Admitted)>,
}

impl Settled {
    fn act(&mut self, key: &str, action: Action) {
        self.actions.push(action);
        self.busy.push((key.to_owned(), Busy::Other));
    }
}

/// A pass at `now`: the writes to make. Records in the index every write it starts, so that
/// the next pass neither repeats nor contradicts them.
pub fn plan(index: &mut Index, now: Timestamp) -> Plan {
    let now_t = Time(now);
    let mut plan = Plan::default();
    index
        .writes
        .refreshed
        .retain(|_, at| now.as_second() - *at < status::PENDING_REFRESH_SECONDS);
    let mut settled = Settled::default();
    for key in index.jobs.keys() {
        settle(index, key, &now_t, &mut settled, &mut plan.summary);
    }
    let Settled {
        actions,
        busy,
        finalizing,
        submit,
        mut restore,
        releases,
        provisioned,
    } = settled;
    plan.actions = actions;
    index.writes.busy.extend(busy);
    index.writes.finalizing.extend(finalizing);
    // Requests no job needs any more (a failed delete, a cut-off attempt) are deleted.
    for (job, request, templates) in provision::orphans(index, now.as_second()) {
        plan.actions.push(Action::Unprovision {
            job: job.clone(),
            requests: vec![request],
            templates,
        });
        index.writes.busy.entry(job).or_insert(Busy::Other);
    }

    // Releases found half-done are finished before anything new is promised.
    for (key, admitted) in releases {
        match release_action(index, &key, &admitted, &now_t, false) {
            Ok((action, job)) => {
                restore.push((job, holding(&admitted, now.as_second()), false));
                index.writes.busy.insert(key, Busy::Release(admitted));
                plan.actions.push(action);
            }
            Err(e) => fail_release(index, &key, now.as_second(), e),
        }
    }

    // (2) Admission's cycle over the scheduler the last pass left, brought up to the index
    // (or one rebuilt from it: see `kept`).
    // A held job's pods of its current attempt are booked through its admission; pods of
    // earlier attempts still terminating are booked as ordinary pods.
    let held: BTreeMap<String, i32> = restore
        .iter()
        .map(|(j, _, _)| {
            let attempt = index
                .jobs
                .get(&j.id)
                .and_then(|g| g.status.as_ref())
                .map_or(0, |s| s.requeue_count);
            (j.id.clone(), attempt)
        })
        .collect();
    plan.summary.considered = submit.len();
    let (mut scheduler, basis) =
        crate::kept::scheduler_for(index, &held, submit, restore, |index, usage| {
            let cluster = index.empty_cluster().clone();
            scheduler(index, cluster, usage)
        });
    plan.summary.scheduler_rebuilt = basis.rebuilt();
    let decisions = scheduler.cycle(now.as_second());
    index.nominated = scheduler.nominated().map(str::to_owned).collect();

    // (3) Decisions into writes.
    for decision in decisions {
        decide(index, &scheduler, decision, &now_t, &provisioned, &mut plan);
    }
    queue_statuses(index, &scheduler, &mut plan);
    index.writes.drop_superseded(&index.jobs);
    for action in &plan.actions {
        if let Some(job) = action.job() {
            *index.writes.in_flight.entry(job.to_owned()).or_default() += 1;
        }
    }
    for name in index.cluster_queues.keys() {
        for (flavor, resource, used, _) in scheduler.quota().report(name) {
            #[expect(clippy::cast_precision_loss, reason = "a gauge; milli-units to units")]
            let amount = used.milli() as f64 / 1000.0;
            plan.summary
                .usage
                .push((name.clone(), flavor, resource, amount));
        }
    }
    crate::kept::keep(index, scheduler, basis);
    plan
}

fn holding(admitted: &Admitted, since: i64) -> Holding {
    Holding {
        cluster_queue: admitted.cluster_queue.clone(),
        since,
        pod_sets: admitted.pod_sets.clone(),
    }
}

/// Records a failed release: the job waits `10 s × 2^failures` (at most 10 minutes), with
/// the error in its status, and tries again.
pub(crate) fn fail_release(index: &mut Index, key: &str, now: i64, error: String) {
    let failures = index.writes.failed.get(key).map_or(0, |f| f.0) + 1;
    let delay = (10i64 << failures.min(6)).min(600);
    index
        .writes
        .failed
        .insert(key.to_owned(), (failures, now + delay, error));
}

/// Settles one job against what the cluster shows (step 1 of a pass).
#[allow(clippy::too_many_lines)]
fn settle(index: &Index, key: &str, now_t: &Time, out: &mut Settled, summary: &mut Summary) {
    let now_s = now_t.0.as_second();
    let Some(job) = index.jobs.get(key) else {
        return;
    };
    let status = job.status.clone().unwrap_or_default();
    let generation = job.metadata.generation;
    let admission_job = || Job::from_gpujob(job, |c| index.priority_classes.get(c).copied());
    let (current, stale) = split_pods(index, key, status.requeue_count);
    match index.writes.busy.get(key) {
        Some(Busy::Release(admitted)) => {
            out.restore
                .push((admission_job(), holding(admitted, now_s), false));
            return;
        }
        Some(Busy::Provision(held)) => {
            out.restore.push((admission_job(), held.clone(), true));
            return;
        }
        Some(Busy::Other) => {
            // Until the write lands, the job holds what its status says it holds: an
            // eviction or a finish in flight frees its quota one pass late, never early.
            if let Some(held) = holding_of(job, &status, &current) {
                let provisioning = provision::is_provisioning(&status);
                out.restore.push((admission_job(), held, provisioning));
            }
            return;
        }
        Some(Busy::Status) => {
            out.submit.push(admission_job());
            return;
        }
        // A queued status write holds nothing back: the pass decides afresh and replaces or
        // drops it.
        Some(Busy::StatusQueued) | None => {}
    }
    if job.metadata.deletion_timestamp.is_some() {
        if has_finalizer(job) {
            let pods = index.pods_of(key).map(|(k, _)| k.to_owned()).collect();
            out.act(
                key,
                Action::Finalize {
                    job: key.to_owned(),
                    pods,
                },
            );
        }
        return;
    }
    // A waiting job has nothing to clean up: the finalizer goes on with its release (see
    // [`finalize_with`]), so a deep queue costs no write per job before it is admitted. A
    // job that holds something or has pods and lacks it (admitted by an older version) gets
    // it now.
    let holds = status.admission.is_some()
        || provision::is_provisioning(&status)
        || !current.is_empty()
        || !stale.is_empty();
    if holds && !has_finalizer(job) && !index.writes.finalizing.contains(key) {
        out.actions.push(Action::AddFinalizer {
            job: key.to_owned(),
        });
        out.finalizing.push(key.to_owned());
    }
    if !stale.is_empty() {
        out.act(
            key,
            Action::DeletePods {
                job: key.to_owned(),
                pods: stale,
            },
        );
        return;
    }
    if matches!(
        status.phase,
        Some(GpuJobPhase::Succeeded | GpuJobPhase::Failed)
    ) {
        return;
    }
    let live: Vec<(&str, &PodRecord)> = current
        .iter()
        .copied()
        .filter(|(_, p)| !p.deleting)
        .collect();
    if provision::is_provisioning(&status) {
        let held = provision::holding(&status, now_s);
        if !live.is_empty() {
            // A release onto bought capacity was cut off or failed: finish it when the whole
            // gang exists, else roll it back and admit again; the quota stays held meanwhile.
            match recovered_admission(job, key, &live) {
                Some(admitted) if live.len() == current.len() => {
                    out.releases.push((key.to_owned(), admitted));
                }
                _ => {
                    out.act(
                        key,
                        Action::DeletePods {
                            job: key.to_owned(),
                            pods: live.iter().map(|(k, _)| (*k).to_owned()).collect(),
                        },
                    );
                    if let Some(held) = held {
                        out.restore.push((admission_job(), held, true));
                    }
                }
            }
            return;
        }
        if !current.is_empty() {
            // The rolled-back pods are still terminating: the next release reuses their
            // names, so it waits for them (holding the quota).
            if let Some(held) = held {
                out.restore.push((admission_job(), held, true));
            }
            return;
        }
        // After a failed release only the admission waits out its backoff; everything else
        // the autoscaler or the owner says still counts.
        let backing_off = index
            .writes
            .failed
            .get(key)
            .is_some_and(|(_, retry_at, _)| *retry_at > now_s);
        settle_provisioning(index, key, job, &status, now_t, backing_off, out);
        return;
    }
    if let Some(held) = holding_of(job, &status, &current) {
        if let Some(admitted) = unfinished_release(job, key, &held, &current) {
            // The status says admitted, yet gated pods remain and nothing is in flight: a
            // release that another writer cut short (a replica that lost the Lease, a pod
            // deleted under it). Finish it now rather than let the gang wait out its
            // pods-ready timeout or spend a restart.
            out.releases.push((key.to_owned(), admitted));
            return;
        }
        let expected: usize = held.pod_sets.iter().map(|p| p.nodes.len()).sum();
        let timeout = job
            .spec
            .pods_ready_timeout_seconds
            .unwrap_or(muster_api::gpujob::DEFAULT_PODS_READY_TIMEOUT_SECONDS);
        let gang_health = health(
            expected,
            &current,
            |n| index.nodes.get(n),
            held.since,
            timeout,
            now_s,
        );
        let all_pods: Vec<String> = current.iter().map(|(k, _)| (*k).to_owned()).collect();
        let evict = |eviction: Eviction| {
            let note = if matches!(eviction, Eviction::Suspended) {
                Note::normal(eviction.reason(), eviction.message())
            } else {
                Note::warning(eviction.reason(), eviction.message())
            };
            Action::Evict {
                job: key.to_owned(),
                status: Box::new(status::evicted(&status, generation, &eviction, now_t)),
                pods: all_pods.clone(),
                event: note,
            }
        };
        let revoked = provision::policy(index, &status)
            .filter(|_| status.provisioning_request.is_some())
            .and_then(|policy| {
                match provision::observed(index, job, policy, provision::attempts(&status)) {
                    muster_provisioning::state::Observed::CapacityRevoked { message } => {
                        Some((policy, message))
                    }
                    _ => None,
                }
            });
        let action = if let Some((policy, message)) = revoked {
            // Requeued like a failed request: after the provisioning backoff, and only while
            // the job's requests stay within retry.limit + 1 (a gang longer than the capacity's
            // maximum run does not buy capacity for ever).
            use muster_provisioning::state::{out_of_requests, retry_limit};
            let attempts = provision::attempts(&status);
            let limit = retry_limit(policy.retry.as_ref());
            let fail = policy.on_capacity_revoked == muster_api::cluster_queue::RevokedPolicy::Fail;
            if fail || out_of_requests(policy.retry.as_ref(), attempts) {
                let why = if fail {
                    format!("the autoscaler took the capacity back: {message}")
                } else {
                    format!(
                        "the autoscaler took the capacity back: {message}; gave up after {attempts} requests (retry.limit is {limit})"
                    )
                };
                Some(Action::Evict {
                    job: key.to_owned(),
                    status: Box::new(status::finished(&status, generation, false, &why, now_t)),
                    pods: all_pods.clone(),
                    event: Note::warning("CapacityRevoked", why),
                })
            } else {
                let retry_at = now_s.saturating_add(muster_provisioning::state::backoff(
                    policy.retry.as_ref(),
                    attempts,
                ));
                Some(evict(Eviction::CapacityRevoked { message, retry_at }))
            }
        } else if job.spec.suspend {
            Some(evict(Eviction::Suspended))
        } else {
            match gang_health {
                Health::Succeeded => Some(Action::JobStatus {
                    job: key.to_owned(),
                    status: Box::new(status::finished(
                        &status,
                        generation,
                        true,
                        "every pod succeeded",
                        now_t,
                    )),
                    event: Some(Note::normal("Succeeded", "every pod succeeded")),
                }),
                Health::TimedOut => Some(evict(Eviction::PodsReadyTimeout {
                    retry_at: requeue_at(now_s, status.requeue_count),
                })),
                Health::Broken { cause } => {
                    let limit = job
                        .spec
                        .backoff_limit
                        .unwrap_or(muster_api::gpujob::DEFAULT_BACKOFF_LIMIT);
                    if status.restart_count >= limit {
                        let message = format!(
                            "{cause}; the gang was restarted {} times and spec.backoffLimit is {limit}",
                            status.restart_count
                        );
                        Some(Action::Evict {
                            job: key.to_owned(),
                            status: Box::new(status::finished(
                                &status, generation, false, &message, now_t,
                            )),
                            pods: live.iter().map(|(k, _)| (*k).to_owned()).collect(),
                            event: Note::warning("BackoffLimitExceeded", message),
                        })
                    } else {
                        Some(evict(Eviction::Restart { cause }))
                    }
                }
                Health::Running => {
                    let update = status::running(&status, generation, now_t);
                    if update.is_some() && status.start_time.is_none() {
                        let created = job
                            .metadata
                            .creation_timestamp
                            .as_ref()
                            .map_or(now_s, seconds);
                        summary.to_running.push(now_s - created);
                    }
                    update.map(|s| Action::JobStatus {
                        job: key.to_owned(),
                        status: Box::new(s),
                        event: Some(Note::normal("PodsReady", "every pod of the gang is Ready")),
                    })
                }
                Health::Starting { .. } => None,
            }
        };
        match action {
            None => out.restore.push((admission_job(), held, false)),
            Some(action) => {
                account(&action, &admission_job(), held.since, now_s, summary);
                // A Running update keeps the admission; everything else gives it up.
                let keeps = matches!(&action, Action::JobStatus { status, .. } if status.admission.is_some());
                if let Action::Evict { event, .. } = &action {
                    *summary
                        .evicted
                        .entry(reason_key(&event.reason))
                        .or_default() += 1;
                }
                out.act(key, action);
                if keeps {
                    out.restore.push((admission_job(), held, false));
                } else if status.provisioning_request.is_some() {
                    // The gang leaves its bought capacity: give the requests back.
                    out.act(key, unprovision(job, &status));
                }
            }
        }
        return;
    }
    if !live.is_empty() {
        // Pods of the current attempt but no admission in the status: a release that was
        // cut off. Finish it when the whole gang exists, else roll it back.
        match recovered_admission(job, key, &live) {
            Some(admitted) if live.len() == current.len() => {
                out.releases.push((key.to_owned(), admitted));
            }
            _ => out.act(
                key,
                Action::DeletePods {
                    job: key.to_owned(),
                    pods: live.iter().map(|(k, _)| (*k).to_owned()).collect(),
                },
            ),
        }
        return;
    }
    if !current.is_empty() {
        // Its pods are still terminating: it holds nodes through them, not quota.
        return;
    }
    if let Some((failures, retry_at, error)) = index.writes.failed.get(key)
        && *retry_at > now_s
    {
        let mut next = status.clone();
        next.phase = Some(GpuJobPhase::Queued);
        next.pending_reason = Some(muster_api::gpujob::PendingReason {
            kind: PendingReasonKind::Backoff,
            message: format!("releasing the gang failed {failures} times, last: {error}"),
            eta: Timestamp::from_second(*retry_at).ok().map(Time),
        });
        if next != status {
            out.act(
                key,
                Action::JobStatus {
                    job: key.to_owned(),
                    status: Box::new(next),
                    event: Some(Note::warning("ReleaseFailed", error.clone())),
                },
            );
        }
        return;
    }
    if let Some(reason) = &status.pending_reason
        && reason.kind == PendingReasonKind::Backoff
        && reason.eta.as_ref().is_some_and(|eta| seconds(eta) > now_s)
    {
        let namespace = job.metadata.namespace.as_deref().unwrap_or_default();
        let queue = index
            .local_queues
            .get(&format!("{namespace}/{}", job.spec.queue_name))
            .map(|q| q.spec.cluster_queue.clone())
            .unwrap_or_default();
        *summary
            .pending
            .entry((queue, "Backoff".to_owned()))
            .or_default() += 1;
        return;
    }
    out.submit.push(admission_job());
}

/// Counts what a run that ends with `action` (an eviction, or the job's last status) cost
/// and delivered: GPU-seconds from its admission at `since` to `now`, lost or completed, and
/// for a finished job how often it was evicted.
fn account(action: &Action, job: &Job, since: i64, now: i64, summary: &mut Summary) {
    let gpu_seconds = job
        .accelerators()
        .saturating_mul(u64::try_from(now.saturating_sub(since)).unwrap_or(0));
    match action {
        Action::Evict { status, .. } => {
            if status.phase == Some(GpuJobPhase::Failed) {
                summary.finished_requeues.push(status.requeue_count);
            } else {
                summary.lost_gpu_seconds += gpu_seconds;
            }
        }
        Action::JobStatus { status, .. } if status.phase == Some(GpuJobPhase::Succeeded) => {
            summary.completed_gpu_seconds += gpu_seconds;
            summary.finished_requeues.push(status.requeue_count);
        }
        _ => {}
    }
}

/// Deletes the job's requests and templates of its current attempt. Every name the attempt
/// could have used goes, whatever its queue's class is now (ones that never existed count as
/// deleted), so a queue that changed or stopped buying leaves nothing behind.
fn unprovision(job: &GpuJob, status: &GpuJobStatus) -> Action {
    let attempt = provision::attempts(status);
    Action::Unprovision {
        job: provision::job_key(job),
        requests: provision::possible_request_keys(job, attempt),
        templates: provision::template_keys(job, attempt),
    }
}

/// The job's ClusterQueue no longer buys capacity (or is gone): give the request up and queue
/// the job again.
fn stop_provisioning(
    key: &str,
    job: &GpuJob,
    status: &GpuJobStatus,
    now_t: &Time,
    out: &mut Settled,
) {
    let next = status::unprovisioned(
        status,
        "ProvisioningStopped",
        "the ClusterQueue no longer buys capacity",
        job.metadata.generation,
        now_t,
    );
    out.act(key, unprovision(job, status));
    out.act(
        key,
        Action::JobStatus {
            job: key.to_owned(),
            status: Box::new(next),
            event: Some(Note::normal(
                "ProvisioningStopped",
                "the job's ClusterQueue no longer buys capacity: the request was given up and the job queues again",
            )),
        },
    );
}

/// A job waiting for bought capacity: follow the autoscaler (see [`provision`]).
fn settle_provisioning(
    index: &Index,
    key: &str,
    job: &GpuJob,
    status: &GpuJobStatus,
    now_t: &Time,
    backing_off: bool,
    out: &mut Settled,
) {
    use muster_provisioning::state::Step;
    let now_s = now_t.0.as_second();
    let generation = job.metadata.generation;
    let admission_job = || Job::from_gpujob(job, |c| index.priority_classes.get(c).copied());
    let Some(policy) = provision::policy(index, status) else {
        stop_provisioning(key, job, status, now_t, out);
        return;
    };
    let step = if index.provisioning_api() {
        provision::next(index, job, status, policy, now_s)
    } else {
        // Requests cannot be read: nothing is known of this one, so nothing is given up.
        Step::Wait {
            message: "the ProvisioningRequest API (autoscaling.x-k8s.io/v1) is not being watched yet; the request is followed once it is".to_owned(),
        }
    };
    match step {
        Step::Wait { message } => {
            if let Some(held) = provision::holding(status, now_s) {
                out.restore.push((admission_job(), held, true));
            }
            let next = provision::waiting(status, &message);
            if next != *status {
                out.act(
                    key,
                    Action::JobStatus {
                        job: key.to_owned(),
                        status: Box::new(next),
                        event: None,
                    },
                );
                // The write keeps the job provisioning: it holds its quota meanwhile.
                if let Some(held) = provision::holding(status, now_s) {
                    out.busy.pop();
                    out.busy.push((key.to_owned(), Busy::Provision(held)));
                }
            }
        }
        Step::Admit { .. } if backing_off => {
            if let Some(held) = provision::holding(status, now_s) {
                out.restore.push((admission_job(), held, true));
            }
        }
        Step::Admit { node_selector } => {
            // Still holding its quota, the job starts on the capacity before anything else.
            if let Some(held) = provision::holding(status, now_s) {
                out.restore.push((
                    provision::provisioned_job(admission_job(), &node_selector),
                    held,
                    true,
                ));
                out.provisioned.insert(key.to_owned(), node_selector);
            }
        }
        Step::Retry { at, reason } => {
            out.act(key, unprovision(job, status));
            out.act(
                key,
                Action::JobStatus {
                    job: key.to_owned(),
                    status: Box::new(provision::retrying(status, &reason, at, now_t, generation)),
                    event: Some(Note::warning("ProvisioningRetry", reason)),
                },
            );
        }
        Step::Fail { reason } => {
            out.act(key, unprovision(job, status));
            out.act(
                key,
                Action::JobStatus {
                    job: key.to_owned(),
                    status: Box::new(status::finished(status, generation, false, &reason, now_t)),
                    event: Some(Note::warning("ProvisioningFailed", reason)),
                },
            );
        }
        Step::Delete | Step::Revoked { .. } | Step::Nothing | Step::Create { .. } => {
            // Suspended (or nothing left to wait for): give the capacity up, queue again.
            out.act(key, unprovision(job, status));
            let next = status::unprovisioned(
                status,
                "ProvisioningStopped",
                "the job no longer waits for bought capacity",
                generation,
                now_t,
            );
            out.act(
                key,
                Action::JobStatus {
                    job: key.to_owned(),
                    status: Box::new(next),
                    event: None,
                },
            );
        }
    }
}

fn reason_key(reason: &str) -> &'static str {
    match reason {
        "PodsReadyTimeout" => "pods_ready_timeout",
        "GangRestart" => "restart",
        "Preempted" => "preempted",
        "Suspended" => "suspended",
        "BackoffLimitExceeded" => "failed",
        "CapacityRevoked" => "capacity_revoked",
        _ => "other",
    }
}

fn has_finalizer(job: &GpuJob) -> bool {
    job.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == FINALIZER))
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

/// The release of `admitted` for job `key` (objects, status, event) and the job as
/// admission reads it; the error when its objects cannot be built.
fn release_action(
    index: &Index,
    key: &str,
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
    let gang = gang(job, admitted, &flavors).map_err(|e| e.to_string())?;
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
        Job::from_gpujob(job, |c| index.priority_classes.get(c).copied()),
    ))
}

fn decide(
    index: &mut Index,
    scheduler: &Scheduler,
    decision: Decision,
    now: &Time,
    provisioned: &BTreeMap<String, BTreeMap<String, String>>,
    plan: &mut Plan,
) {
    match decision {
        Decision::Admit(admitted) => admit(index, admitted, now, provisioned, plan),
        Decision::Pending {
            job: key, reason, ..
        } if provisioned.contains_key(&key) => {
            let queue = scheduler
                .job(&key)
                .and_then(|j| scheduler.cluster_queue_of_job(j))
                .unwrap_or_default();
            waiting_for_nodes(
                index,
                key,
                queue,
                &reason.message(),
                now.0.as_second(),
                plan,
            );
        }
        Decision::Pending {
            job: key,
            position,
            reason,
            eta,
        } => wait(index, scheduler, key, position, &reason, eta, now, plan),
        Decision::Preempt { victims, for_job } => {
            for victim in victims {
                if evict_held(
                    index,
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
            evict_held(index, &job, &Eviction::Other(reason), now, plan);
        }
        Decision::Provision {
            job: key,
            cluster_queue,
            flavors,
        } => {
            start_provisioning(index, key, &cluster_queue, &flavors, now, plan);
        }
    }
}

/// A job that waits: counted under its queue and reason, and its status written when the
/// reason changed, or when its figures moved and were last written a refresh interval ago.
#[allow(clippy::too_many_arguments)]
fn wait(
    index: &mut Index,
    scheduler: &Scheduler,
    key: String,
    position: u32,
    reason: &PendingReason,
    eta: Option<i64>,
    now: &Time,
    plan: &mut Plan,
) {
    let queue = scheduler
        .job(&key)
        .and_then(|j| scheduler.cluster_queue_of_job(j))
        .unwrap_or_default();
    *plan
        .summary
        .pending
        .entry((queue, format!("{:?}", reason.kind())))
        .or_default() += 1;
    let Some(job) = index.jobs.get(&key) else {
        return;
    };
    if index.writes.is_busy(&key) {
        return;
    }
    let current = job.status.clone().unwrap_or_default();
    let before = current.pending_reason.as_ref().map(|r| r.kind);
    let now_s = now.0.as_second();
    // A new reason is written at once. The same reason with new figures (quota left,
    // position, ETA) — which every admission or completion changes for every job behind it —
    // is written only for jobs whose position is shown (or was), at most once per refresh
    // interval; further back a job keeps the message of its last new reason. A write still
    // queued is always brought up to date: replacing it costs no request.
    let queued = index.writes.deferred.contains(&key);
    if before == Some(reason.kind()) && !queued {
        let shown = position > 0 && position <= status::SHOWN_POSITIONS;
        let refreshed_lately = index
            .writes
            .refreshed
            .get(&key)
            .is_some_and(|at| now_s - at < status::PENDING_REFRESH_SECONDS);
        if refreshed_lately || !(shown || current.queue_position.is_some()) {
            return;
        }
    }
    let Some(next) = status::pending(
        &current,
        job.metadata.generation,
        position,
        reason,
        eta,
        now,
    ) else {
        // The status already says it: a write still queued would say something older.
        index.writes.drop_deferred(&key);
        return;
    };
    if queued && before == Some(reason.kind()) {
        // Back to the reason the status shows, only the figures differ: a job whose position
        // is not shown keeps its status as it is.
        let shown = position > 0 && position <= status::SHOWN_POSITIONS;
        if !(shown || current.queue_position.is_some()) {
            index.writes.drop_deferred(&key);
            return;
        }
    }
    // An Event when the reason changes, and for an invalid job at once; a job's first reason
    // is in its status (an Event for it too would be one more write per job).
    let invalid = reason.kind() == PendingReasonKind::InvalidJob;
    let event = (before != Some(reason.kind()) && (before.is_some() || invalid)).then(|| {
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
    index.writes.refreshed.insert(key.clone(), now_s);
    // A write still queued for the job is replaced in its turn; else a new one goes out (the
    // run loop queues it: see [`Index::defer`]).
    if let Some(action) = index.writes.deferred.replace(&key, action) {
        plan.actions.push(action);
        index.writes.busy.insert(key, Busy::Status);
    }
}

/// Adds Muster's finalizer beside a job's first write that creates something (a release, a
/// ProvisioningRequest), unless it has it or it is being added.
fn finalize_with(index: &mut Index, key: &str, plan: &mut Plan) {
    let lacks = index.jobs.get(key).is_some_and(|j| !has_finalizer(j));
    if lacks && index.writes.finalizing.insert(key.to_owned()) {
        plan.actions.push(Action::AddFinalizer {
            job: key.to_owned(),
        });
    }
}

/// Admission placed a job: release its gang (onto bought capacity, consuming its request,
/// when it was provisioned).
fn admit(
    index: &mut Index,
    admitted: Admitted,
    now: &Time,
    provisioned: &BTreeMap<String, BTreeMap<String, String>>,
    plan: &mut Plan,
) {
    let key = admitted.job.clone();
    if index.writes.is_busy(&key) {
        // A status write is in flight; admit on the next pass.
        return;
    }
    // A queued status write is dropped: the release writes the whole status.
    index.writes.drop_deferred(&key);
    match release_action(index, &key, &admitted, now, true) {
        Err(e) => fail_release(index, &key, now.0.as_second(), e),
        Ok((mut action, _)) => {
            if let Some(selector) = provisioned.get(&key) {
                on_bought_capacity(index, &key, selector, &mut action);
            }
            if let Some(created) = index
                .jobs
                .get(&key)
                .and_then(|j| j.metadata.creation_timestamp.as_ref())
            {
                plan.summary
                    .waited
                    .push(now.0.as_second() - seconds(created));
            }
            plan.summary.admitted += 1;
            finalize_with(index, &key, plan);
            index.writes.busy.insert(key, Busy::Release(admitted));
            plan.actions.push(action);
        }
    }
}

/// A release onto bought capacity: its pods consume the job's requests and select the
/// capacity's details (the status records the capacity: see [`release_action`]).
fn on_bought_capacity(
    index: &Index,
    key: &str,
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
    index: &mut Index,
    key: String,
    cluster_queue: &str,
    flavors: &[(String, String)],
    now: &Time,
    plan: &mut Plan,
) {
    if index.writes.is_busy(&key) {
        return;
    }
    index.writes.drop_deferred(&key);
    let Some(job) = index.jobs.get(&key) else {
        return;
    };
    let Some(policy) = index
        .cluster_queues
        .get(cluster_queue)
        .and_then(|q| q.spec.provisioning.clone())
    else {
        return;
    };
    let specs: BTreeMap<String, muster_api::ResourceFlavorSpec> = index
        .flavors
        .iter()
        .map(|(n, f)| (n.clone(), f.spec.clone()))
        .collect();
    match provision::start(job, cluster_queue, flavors, &specs, &policy, now) {
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
            finalize_with(index, &key, plan);
            plan.actions.push(Action::Provision {
                job: key.clone(),
                templates: objects.templates,
                requests: objects.requests,
                status: Box::new(status),
                event,
            });
            if let Some(held) = held {
                index.writes.busy.insert(key, Busy::Provision(held));
            }
        }
        Err(e) => fail_release(index, &key, now.0.as_second(), e),
    }
}

/// A job whose capacity is provisioned but does not hold the gang yet (its nodes are still
/// joining): it keeps its quota and its status says what it waits for.
fn waiting_for_nodes(
    index: &mut Index,
    key: String,
    cluster_queue: String,
    message: &str,
    now: i64,
    plan: &mut Plan,
) {
    let Some(job) = index.jobs.get(&key) else {
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
        && !index.writes.is_busy(&key)
        && let Some(held) = provision::holding(&current, now)
    {
        plan.actions.push(Action::JobStatus {
            job: key.clone(),
            status: Box::new(next),
            event: None,
        });
        // The write keeps the job provisioning: it holds its quota meanwhile.
        index.writes.busy.insert(key, Busy::Provision(held));
    }
}

/// Evicts a job that holds an admission (from its status). Returns whether it did.
fn evict_held(
    index: &mut Index,
    key: &str,
    eviction: &Eviction,
    now: &Time,
    plan: &mut Plan,
) -> bool {
    if index.writes.busy.contains_key(key) {
        return false;
    }
    let Some(job) = index.jobs.get(key) else {
        return false;
    };
    let status = job.status.clone().unwrap_or_default();
    if status.admission.is_none() {
        return false;
    }
    let (current, _) = split_pods(index, key, status.requeue_count);
    let pods = current.iter().map(|(k, _)| (*k).to_owned()).collect();
    let action = Action::Evict {
        job: key.to_owned(),
        status: Box::new(status::evicted(
            &status,
            job.metadata.generation,
            eviction,
            now,
        )),
        pods,
        event: Note::warning(eviction.reason(), eviction.message()),
    };
    let since = condition_time(&status, conditions::ADMITTED).unwrap_or(now.0.as_second());
    let admission_job = Job::from_gpujob(job, |c| index.priority_classes.get(c).copied());
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
    index.writes.busy.insert(key.to_owned(), Busy::Other);
    true
}

/// ClusterQueue and LocalQueue statuses, where changed and not already being written.
fn queue_statuses(index: &mut Index, scheduler: &Scheduler, plan: &mut Plan) {
    for (name, queue) in &index.cluster_queues {
        let current = queue.status.clone().unwrap_or_default();
        if index.writes.queues.contains(name) {
            continue;
        }
        if let Some(status) = status::cluster_queue(&current, name, scheduler) {
            plan.actions.push(Action::ClusterQueueStatus {
                name: name.clone(),
                status,
            });
        }
    }
    let mut counts: BTreeMap<String, status::LocalQueueCounts> = BTreeMap::new();
    for (id, state) in scheduler.jobs() {
        let Some(job) = scheduler.job(id) else {
            continue;
        };
        let entry = counts.entry(job.local_queue.clone()).or_default();
        match state {
            muster_admission::JobState::Pending => entry.pending += 1,
            muster_admission::JobState::Admitted(h)
            | muster_admission::JobState::Provisioning(h)
            | muster_admission::JobState::Evicting(h) => {
                entry.admitted += 1;
                for (set, placement) in job.pod_sets.iter().zip(&h.pod_sets) {
                    entry
                        .usage
                        .entry(placement.flavor.clone())
                        .or_default()
                        .add_all(&muster_admission::quota_usage(set));
                }
            }
        }
    }
    for (key, queue) in &index.local_queues {
        let lq_key = format!("lq:{key}");
        if index.writes.queues.contains(&lq_key) {
            continue;
        }
        let current = queue.status.clone().unwrap_or_default();
        let empty = status::LocalQueueCounts::default();
        let counted = counts.get(key).unwrap_or(&empty);
        if let Some(status) = status::local_queue(&current, counted) {
            plan.actions.push(Action::LocalQueueStatus {
                key: key.clone(),
                status,
            });
        }
    }
    for action in &plan.actions {
        match action {
            Action::ClusterQueueStatus { name, .. } => {
                index.writes.queues.insert(name.clone());
            }
            Action::LocalQueueStatus { key, .. } => {
                index.writes.queues.insert(format!("lq:{key}"));
            }
            _ => {}
        }
    }
}
