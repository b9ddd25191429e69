//! The invariant checker: what a gang queue promises, checked from the API server's objects
//! (never from a controller's memory) as they change.
//!
//! Fed every change of pods and GpuJobs, in the order one watch per kind delivers them, it
//! records a [`Violation`] when
//!
//! - the GPUs of a ClusterQueue's live pods pass its nominal quota plus borrowing limit, or a
//!   cohort's pass the sum of its members' nominal quotas ([`ViolationKind::PodsOverQuota`]).
//!   Pods being deleted do not count: an evicted gang's terminating pods hold their nodes (no
//!   pod is placed on that capacity until they are gone) but no longer their queue's quota;
//!   two attempts of one job are checked apart;
//! - the same holds for the jobs whose status says admitted ([`ViolationKind::AdmittedOverQuota`]);
//! - pods of two attempts of one job are live at once ([`ViolationKind::TwoAttemptsLive`]; a
//!   pod is live until it ends, or until the node it is bound to is deleted);
//! - a pod's scheduling gates are lifted before every pod of its gang exists
//!   ([`ViolationKind::GateLiftedOnPartialGang`]);
//! - a job that ended leaves its end or ends again ([`ViolationKind::EndedTwice`]);
//!
//! and, at the end ([`Checker::finish`]), when a job did not end, or failed when it was not
//! meant to (or without a reason). What is left on the cluster is checked by the caller.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::Pod;
use muster_api::{GpuJob, GpuJobPhase};
use serde::Serialize;

/// The label Muster puts on a gang's pods naming their GpuJob.
pub const JOB_LABEL: &str = "muster.dev/job-name";
/// The label naming the attempt a pod was released under.
pub const ATTEMPT_LABEL: &str = "muster.dev/attempt";
/// The annotation naming the ClusterQueue whose quota a pod uses.
pub const CLUSTER_QUEUE_ANNOTATION: &str = "muster.dev/cluster-queue";
/// The resource the workload asks for.
pub const GPU: &str = "nvidia.com/gpu";

/// What may be used, in GPUs: per ClusterQueue its nominal quota plus borrowing limit and its
/// cohort, per cohort the sum of its members' nominal quotas.
#[derive(Clone, Debug, Default)]
pub struct Limits {
    /// ClusterQueue → (cohort, nominal + borrowing limit).
    pub queues: BTreeMap<String, (Option<String>, i64)>,
    /// Cohort → sum of nominal quotas.
    pub cohorts: BTreeMap<String, i64>,
}

/// A kind of broken promise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum ViolationKind {
    /// Live pods of a ClusterQueue (or cohort), those being deleted aside, hold more GPUs than
    /// its quota allows.
    PodsOverQuota,
    /// Jobs whose status says admitted hold more GPUs than a ClusterQueue (or cohort) allows.
    AdmittedOverQuota,
    /// Pods of two attempts of one job are live at once.
    TwoAttemptsLive,
    /// A pod's gates were lifted before its whole gang existed.
    GateLiftedOnPartialGang,
    /// A job left Succeeded or Failed, or ended a second time.
    EndedTwice,
    /// A job had not ended when the run did.
    NeverEnded,
    /// A job failed that was meant to succeed, or failed without a reason.
    UnexpectedFailure,
    /// A job succeeded that was meant to fail.
    UnexpectedSuccess,
    /// A pod, Service, PodTemplate or ProvisioningRequest outlived the run's jobs.
    LeftBehind,
    /// A ClusterQueue's status still shows usage or admitted jobs after the run.
    UsageNotZero,
    /// The controller wrote no condition naming the field on an object that fails validation.
    InvalidNotReported,
    /// A valid object was reported invalid, or a valid job neither ran nor said why it waits.
    ValidReportedInvalid,
    /// The API server stored an object Muster's own types cannot read.
    Unreadable,
}

/// One broken promise.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Violation {
    /// What was broken.
    pub kind: ViolationKind,
    /// The object: `ClusterQueue/a`, `GpuJob/ns/name`, `Pod/ns/name`, ...
    pub object: String,
    /// Seconds since the run began.
    pub at_seconds: f64,
    /// The figures.
    pub detail: String,
}

#[derive(Clone, Debug)]
struct PodFact {
    job: String,
    attempt: String,
    gated: bool,
    /// Not ended, and not bound to a node that no longer exists.
    live: bool,
    node: Option<String>,
    terminating: bool,
    queue: Option<String>,
    gpus: i64,
}

#[derive(Clone, Debug, Default)]
struct JobFact {
    /// The ClusterQueue and GPUs its status says it holds.
    admitted: Option<(String, i64)>,
    /// Since when (seconds into the run) its status says so, and its phase and attempt as
    /// last seen: what a report needs to tell a stale holder from a fresh one.
    admitted_since: f64,
    shown: String,
    /// Phase (`Succeeded`/`Failed`), reason and completion time once ended.
    ended: Option<(String, String, String)>,
}

/// The checker's state; see the module documentation.
#[derive(Debug, Default)]
pub struct Checker {
    limits: Limits,
    meant_to_fail: BTreeSet<String>,
    /// Jobs judged elsewhere (drawn bad input): not expected to end.
    judged_elsewhere: BTreeSet<String>,
    pods: HashMap<String, PodFact>,
    /// Job → attempt → live pods.
    live: HashMap<String, BTreeMap<String, u32>>,
    /// (job, attempt) → every pod seen.
    seen: HashMap<(String, String), BTreeSet<String>>,
    gang_size: HashMap<String, u32>,
    /// Gate lifts seen before their job: (job, attempt, pod, pods seen, when).
    unsized_lifts: Vec<(String, String, String, usize, f64)>,
    jobs: HashMap<String, JobFact>,
    pod_usage: BTreeMap<String, i64>,
    admitted_usage: BTreeMap<String, i64>,
    /// Queues and cohorts over quota now (so that one excursion is one violation).
    over: BTreeSet<(ViolationKind, String)>,
    /// Pairs of attempts already reported.
    reported_pairs: BTreeSet<String>,
    /// The nodes that exist, once the first list of them is in (`None` before).
    nodes: Option<BTreeSet<String>>,
    /// While a relist is folded in, the checks its objects call for: made once the whole
    /// list is in (see [`Checker::relist`]).
    relisting: Option<Pending>,
    /// The checker's own relists, `Pod` or `GpuJob`, with when (seconds into the run).
    relists: Vec<(String, f64)>,
    violations: Vec<Violation>,
}

/// Checks put off until a relist is whole.
#[derive(Debug, Default)]
struct Pending {
    /// Queues to check, by how usage is counted.
    quotas: BTreeSet<(ViolationKind, String)>,
    /// Jobs whose live attempts to check.
    attempts: BTreeSet<String>,
}

/// Work in flight as the cluster shows it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InFlight {
    /// Attempts with a live pod still gated: a release under way.
    pub releases: usize,
    /// Live pods being deleted: an eviction or restart under way.
    pub evictions: usize,
}

impl Checker {
    /// A checker for these limits; `meant_to_fail` are the jobs (`namespace/name`) built to
    /// fail.
    pub fn new(limits: Limits, meant_to_fail: BTreeSet<String>) -> Checker {
        Checker {
            limits,
            meant_to_fail,
            ..Checker::default()
        }
    }

    /// Every violation so far.
    pub fn violations(&self) -> &[Violation] {
        &self.violations
    }

    /// The checker's own relists so far (kind, seconds into the run): a watch that restarted
    /// past what the API server remembered, as after its restart. The first of each kind is
    /// the watch's start.
    pub fn relists(&self) -> &[(String, f64)] {
        &self.relists
    }

    /// Adds a violation found outside the checker (leftovers, queue statuses).
    pub fn report(&mut self, kind: ViolationKind, object: String, at: f64, detail: String) {
        self.violations.push(Violation {
            kind,
            object,
            at_seconds: at,
            detail,
        });
    }

    /// Jobs that ended, by phase and reason (`Succeeded`, `Failed/BackoffLimitExceeded`).
    pub fn ends(&self) -> BTreeMap<String, usize> {
        let mut ends = BTreeMap::new();
        let ours = self
            .jobs
            .iter()
            .filter(|(k, _)| !self.judged_elsewhere.contains(*k));
        for (phase, reason, _) in ours.filter_map(|(_, j)| j.ended.as_ref()) {
            let key = if phase == "Failed" {
                format!("Failed/{reason}")
            } else {
                phase.clone()
            };
            *ends.entry(key).or_default() += 1;
        }
        ends
    }

    /// Job `key` is judged elsewhere (drawn bad input that may wait forever, with a reason).
    pub fn judge_elsewhere(&mut self, key: String) {
        self.judged_elsewhere.insert(key);
    }

    /// Jobs seen that have not ended (those judged elsewhere aside).
    pub fn unended(&self) -> usize {
        self.jobs
            .iter()
            .filter(|(k, j)| j.ended.is_none() && !self.judged_elsewhere.contains(*k))
            .count()
    }

    /// What is in flight now.
    pub fn in_flight(&self) -> InFlight {
        let releases: BTreeSet<(&str, &str)> = self
            .pods
            .values()
            .filter(|p| p.live && p.gated)
            .map(|p| (p.job.as_str(), p.attempt.as_str()))
            .collect();
        InFlight {
            releases: releases.len(),
            evictions: self
                .pods
                .values()
                .filter(|p| p.live && p.terminating)
                .count(),
        }
    }

    /// The nodes that exist now (a whole list): pods bound to any other node are lost, not
    /// live — the machine that would run them is gone.
    pub fn nodes_listed(&mut self, names: BTreeSet<String>) {
        self.nodes = Some(names);
        let lost: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, p)| p.live && !self.node_exists(p.node.as_deref()))
            .map(|(k, _)| k.clone())
            .collect();
        for key in lost {
            self.lose(&key);
        }
    }

    /// A node was created or changed.
    pub fn node_seen(&mut self, name: &str) {
        if let Some(nodes) = self.nodes.as_mut() {
            nodes.insert(name.to_owned());
        }
    }

    /// A node was deleted: the pods bound to it are lost.
    pub fn node_gone(&mut self, name: &str) {
        if let Some(nodes) = self.nodes.as_mut() {
            nodes.remove(name);
        }
        let lost: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, p)| p.live && p.node.as_deref() == Some(name))
            .map(|(k, _)| k.clone())
            .collect();
        for key in lost {
            self.lose(&key);
        }
    }

    fn node_exists(&self, node: Option<&str>) -> bool {
        match (node, &self.nodes) {
            (Some(name), Some(nodes)) => nodes.contains(name),
            _ => true,
        }
    }

    /// Pod `key` no longer counts as live (its node is gone).
    fn lose(&mut self, key: &str) {
        let Some(before) = self.pods.get(key).cloned() else {
            return;
        };
        self.unlive(&before, true);
        if let Some(fact) = self.pods.get_mut(key) {
            fact.live = false;
        }
    }

    /// A pod was created or changed.
    pub fn pod(&mut self, pod: &Pod, at: f64) {
        let Some(key) = pod_key(pod) else { return };
        let Some(mut fact) = pod_fact(pod) else {
            return;
        };
        fact.live = fact.live && self.node_exists(fact.node.as_deref());
        let before = self.pods.insert(key.clone(), fact.clone());
        // Settled after the new fact is in, so that an update of an over-quota pod is not
        // taken for the end of the excursion.
        if let Some(before) = &before {
            self.unlive(before, false);
        }
        self.seen
            .entry((fact.job.clone(), fact.attempt.clone()))
            .or_default()
            .insert(key.clone());
        if fact.live {
            *self
                .live
                .entry(fact.job.clone())
                .or_default()
                .entry(fact.attempt.clone())
                .or_default() += 1;
            if let (Some(queue), false) = (&fact.queue, fact.terminating) {
                *self.pod_usage.entry(queue.clone()).or_default() += fact.gpus;
            }
        }
        let lifted = !fact.gated && before.as_ref().is_none_or(|b| b.gated);
        if lifted && fact.live {
            self.check_gang(&fact.job, &fact.attempt, &key, at);
        }
        if fact.live {
            self.check_attempts(&fact.job, at);
            if let Some(queue) = &fact.queue {
                self.check_quota(ViolationKind::PodsOverQuota, queue, at);
            }
        }
        if let Some(queue) = before.and_then(|b| b.queue) {
            self.settle_over(ViolationKind::PodsOverQuota, &queue);
        }
    }

    /// A pod is gone.
    pub fn pod_gone(&mut self, key: &str) {
        if let Some(before) = self.pods.remove(key) {
            self.unlive(&before, true);
        }
    }

    /// The live pods known, sorted (for tests and reports).
    pub fn pod_keys_live(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, p)| p.live)
            .map(|(k, _)| k.clone())
            .collect();
        keys.sort();
        keys
    }

    /// A whole relist of pods (after the checker's watch was cut): every pod of it is known
    /// to exist before any gate lift in it is judged, and pods not in it are gone. Quotas and
    /// attempts are judged once the whole list is in: a list is one moment of the cluster,
    /// and folded pod by pod it would count a pod started since the cut beside one that ended
    /// since, which were never live together.
    pub fn relist(&mut self, pods: &[Pod], at: f64) {
        self.relists.push(("Pod".to_owned(), at));
        self.relisting.get_or_insert_default();
        self.fold_relist(pods, at);
        self.relisted(at);
    }

    /// A whole relist of jobs (after the checker's watch was cut): admitted usage is judged
    /// once every job of it is in, as [`Checker::relist`] does for pods; a job not in it is
    /// gone and holds nothing.
    pub fn jobs_listed(&mut self, jobs: &[GpuJob], at: f64) {
        self.relists.push(("GpuJob".to_owned(), at));
        self.relisting.get_or_insert_default();
        let listed: BTreeSet<String> = jobs
            .iter()
            .filter_map(|j| {
                Some(format!(
                    "{}/{}",
                    j.metadata.namespace.as_deref()?,
                    j.metadata.name.as_deref()?
                ))
            })
            .collect();
        for key in unlisted(self.jobs.keys(), &listed) {
            self.job_gone(&key);
        }
        for job in jobs {
            self.job(job, at);
        }
        self.relisted(at);
    }

    /// A job (`namespace/name`) is gone: it holds nothing.
    pub fn job_gone(&mut self, key: &str) {
        if let Some((queue, gpus)) = self.jobs.get_mut(key).and_then(|f| f.admitted.take()) {
            *self.admitted_usage.entry(queue.clone()).or_default() -= gpus;
            self.settle_over(ViolationKind::AdmittedOverQuota, &queue);
        }
    }

    /// The checks a relist put off, made now that it is whole.
    fn relisted(&mut self, at: f64) {
        let Some(pending) = self.relisting.take() else {
            return;
        };
        for job in pending.attempts {
            self.check_attempts(&job, at);
        }
        for (kind, queue) in pending.quotas {
            self.check_quota(kind, &queue, at);
        }
    }

    fn fold_relist(&mut self, pods: &[Pod], at: f64) {
        let mut listed = BTreeSet::new();
        for pod in pods {
            let (Some(key), Some(fact)) = (pod_key(pod), pod_fact(pod)) else {
                continue;
            };
            self.seen
                .entry((fact.job, fact.attempt))
                .or_default()
                .insert(key.clone());
            listed.insert(key);
        }
        for key in unlisted(self.pods.keys(), &listed) {
            self.pod_gone(&key);
        }
        for pod in pods {
            self.pod(pod, at);
        }
    }

    /// A GpuJob was created or changed.
    pub fn job(&mut self, job: &GpuJob, at: f64) {
        let (Some(namespace), Some(name)) = (&job.metadata.namespace, &job.metadata.name) else {
            return;
        };
        let key = format!("{namespace}/{name}");
        let size: u32 = job
            .spec
            .pod_sets
            .iter()
            .map(|s| u32::try_from(s.count).unwrap_or(0))
            .sum();
        self.gang_size.insert(key.clone(), size);
        self.resolve_lifts(&key);
        let status = job.status.clone().unwrap_or_default();
        let ended = matches!(
            status.phase,
            Some(GpuJobPhase::Succeeded | GpuJobPhase::Failed)
        );
        let gpus: i64 = job
            .spec
            .pod_sets
            .iter()
            .map(|s| i64::from(s.count) * template_gpus(&s.template))
            .sum();
        let admitted = (!ended)
            .then(|| {
                status
                    .admission
                    .as_ref()
                    .map(|a| (a.cluster_queue.clone(), gpus))
            })
            .flatten();
        let fact = self.jobs.entry(key.clone()).or_default();
        let before = std::mem::replace(&mut fact.admitted, admitted.clone());
        if before.is_none() && admitted.is_some() {
            fact.admitted_since = at;
        }
        fact.shown = format!(
            "{}@{}",
            status
                .phase
                .map_or_else(|| "-".to_owned(), |p| format!("{p:?}")),
            status.requeue_count
        );
        let end = ended.then(|| {
            let phase = if status.phase == Some(GpuJobPhase::Succeeded) {
                "Succeeded"
            } else {
                "Failed"
            };
            let reason = status
                .conditions
                .iter()
                .find(|c| c.type_ == muster_api::gpujob::conditions::FINISHED)
                .map(|c| c.reason.clone())
                .unwrap_or_default();
            let completion = status
                .completion_time
                .as_ref()
                .map(|t| t.0.to_string())
                .unwrap_or_default();
            (phase.to_owned(), reason, completion)
        });
        let mut ended_twice = None;
        match (&fact.ended, end) {
            (Some(was), Some(now)) if was.0 != now.0 || was.2 != now.2 => {
                ended_twice = Some(format!(
                    "{} at {} then {} at {}",
                    was.0, was.2, now.0, now.2
                ));
                fact.ended = Some(now);
            }
            (Some(was), None) => {
                ended_twice = Some(format!(
                    "{} at {} then {:?} again",
                    was.0,
                    was.2,
                    status.phase.unwrap_or_default()
                ));
            }
            (None, Some(now)) => fact.ended = Some(now),
            _ => {}
        }
        if let Some(detail) = ended_twice {
            self.report(
                ViolationKind::EndedTwice,
                format!("GpuJob/{key}"),
                at,
                detail,
            );
        }
        if let Some((queue, gpus)) = &before {
            *self.admitted_usage.entry(queue.clone()).or_default() -= gpus;
        }
        if let Some((queue, gpus)) = &admitted {
            *self.admitted_usage.entry(queue.clone()).or_default() += gpus;
            self.check_quota(ViolationKind::AdmittedOverQuota, queue, at);
        }
    }

    /// The end-of-run checks: every job ended, and failed only when meant to, with a reason.
    pub fn finish(&mut self, at: f64) {
        let mut found = Vec::new();
        let mut keys: Vec<&String> = self.jobs.keys().collect();
        keys.sort();
        for key in keys {
            if self.judged_elsewhere.contains(key) {
                continue;
            }
            let fact = &self.jobs[key];
            let object = format!("GpuJob/{key}");
            match &fact.ended {
                None => found.push((ViolationKind::NeverEnded, object, String::new())),
                Some((phase, reason, _)) if phase == "Failed" => {
                    if !self.meant_to_fail.contains(key) || reason.is_empty() {
                        found.push((
                            ViolationKind::UnexpectedFailure,
                            object,
                            format!("failed with reason {reason:?}"),
                        ));
                    }
                }
                Some(_) if self.meant_to_fail.contains(key) => found.push((
                    ViolationKind::UnexpectedSuccess,
                    object,
                    "succeeded though every pod exits 1".to_owned(),
                )),
                Some(_) => {}
            }
        }
        for (kind, object, detail) in found {
            self.report(kind, object, at, detail);
        }
    }

    /// Takes a pod's live contribution away; `settle` forgets a quota excursion it ended.
    fn unlive(&mut self, before: &PodFact, settle: bool) {
        if !before.live {
            return;
        }
        if let Some(attempts) = self.live.get_mut(&before.job) {
            if let Some(n) = attempts.get_mut(&before.attempt) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    attempts.remove(&before.attempt);
                }
            }
            if attempts.is_empty() {
                self.live.remove(&before.job);
            }
        }
        if let (Some(queue), false) = (&before.queue, before.terminating) {
            let usage = self.pod_usage.entry(queue.clone()).or_default();
            *usage -= before.gpus;
            if settle {
                self.settle_over(ViolationKind::PodsOverQuota, queue);
            }
        }
    }

    fn check_gang(&mut self, job: &str, attempt: &str, pod: &str, at: f64) {
        let seen = self
            .seen
            .get(&(job.to_owned(), attempt.to_owned()))
            .map_or(0, BTreeSet::len);
        match self.gang_size.get(job) {
            Some(&size) => self.judge_lift(job, attempt, pod, seen, size, at),
            None => self.unsized_lifts.push((
                job.to_owned(),
                attempt.to_owned(),
                pod.to_owned(),
                seen,
                at,
            )),
        }
    }

    fn resolve_lifts(&mut self, job: &str) {
        let Some(&size) = self.gang_size.get(job) else {
            return;
        };
        let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.unsized_lifts)
            .into_iter()
            .partition(|l| l.0 == job);
        self.unsized_lifts = later;
        for (job, attempt, pod, seen, at) in now {
            self.judge_lift(&job, &attempt, &pod, seen, size, at);
        }
    }

    fn judge_lift(&mut self, job: &str, attempt: &str, pod: &str, seen: usize, size: u32, at: f64) {
        if seen < size as usize {
            self.report(
                ViolationKind::GateLiftedOnPartialGang,
                format!("Pod/{pod}"),
                at,
                format!("gates lifted with {seen} of {size} pods of {job} attempt {attempt} made"),
            );
        }
    }

    fn check_attempts(&mut self, job: &str, at: f64) {
        if let Some(pending) = &mut self.relisting {
            pending.attempts.insert(job.to_owned());
            return;
        }
        let Some(attempts) = self.live.get(job) else {
            return;
        };
        if attempts.len() < 2 {
            return;
        }
        let list: Vec<String> = attempts
            .iter()
            .map(|(a, n)| format!("attempt {a}: {n} live"))
            .collect();
        let pair = format!(
            "{job}:{}",
            attempts.keys().cloned().collect::<Vec<_>>().join(",")
        );
        if self.reported_pairs.insert(pair) {
            self.report(
                ViolationKind::TwoAttemptsLive,
                format!("GpuJob/{job}"),
                at,
                list.join(", "),
            );
        }
    }

    fn usage(&self, kind: ViolationKind) -> &BTreeMap<String, i64> {
        if kind == ViolationKind::PodsOverQuota {
            &self.pod_usage
        } else {
            &self.admitted_usage
        }
    }

    /// What the members of `cohort` use, counted as `kind` counts.
    fn cohort_usage(&self, kind: ViolationKind, cohort: &str) -> i64 {
        let usage = self.usage(kind);
        self.limits
            .queues
            .iter()
            .filter(|(_, (c, _))| c.as_deref() == Some(cohort))
            .map(|(q, _)| usage.get(q).copied().unwrap_or(0))
            .sum()
    }

    fn check_quota(&mut self, kind: ViolationKind, queue: &str, at: f64) {
        if let Some(pending) = &mut self.relisting {
            pending.quotas.insert((kind, queue.to_owned()));
            return;
        }
        let usage = self.usage(kind);
        let used = usage.get(queue).copied().unwrap_or(0);
        let Some((cohort, max)) = self.limits.queues.get(queue).cloned() else {
            return;
        };
        let mut found = Vec::new();
        if used > max {
            found.push((
                format!("ClusterQueue/{queue}"),
                format!(
                    "{used} GPUs in use, {max} allowed; {}",
                    self.holders(kind, queue)
                ),
            ));
        }
        if let Some(cohort) = cohort {
            let members = self.cohort_usage(kind, &cohort);
            let cap = self
                .limits
                .cohorts
                .get(&cohort)
                .copied()
                .unwrap_or(i64::MAX);
            if members > cap {
                found.push((
                    format!("Cohort/{cohort}"),
                    format!("{members} GPUs in use, {cap} nominal"),
                ));
            }
        }
        for (object, detail) in found {
            if self.over.insert((kind, object.clone())) {
                self.report(kind, object, at, detail);
            }
        }
        self.settle_over(kind, queue);
    }

    /// Who holds `queue`'s GPUs, counted as `kind` counts: `job@attempt=GPUs` for live pods
    /// (marked `unadmitted` when the job's status holds no admission), `job=GPUs` for
    /// admitted jobs; so that a report says which jobs took the queue over.
    fn holders(&self, kind: ViolationKind, queue: &str) -> String {
        let mut held: BTreeMap<String, i64> = BTreeMap::new();
        if kind == ViolationKind::PodsOverQuota {
            for pod in self.pods.values() {
                if pod.live && !pod.terminating && pod.queue.as_deref() == Some(queue) {
                    let admitted = self
                        .jobs
                        .get(&pod.job)
                        .and_then(|j| j.admitted.as_ref())
                        .is_some_and(|(q, _)| q == queue);
                    let mark = if admitted { "" } else { " unadmitted" };
                    *held
                        .entry(format!("{}@{}{mark}", pod.job, pod.attempt))
                        .or_default() += pod.gpus;
                }
            }
        } else {
            let mut list = Vec::new();
            for (job, fact) in &self.jobs {
                if let Some((q, gpus)) = &fact.admitted
                    && q == queue
                {
                    list.push(format!(
                        "{job}={gpus} ({} since {:.1} s)",
                        fact.shown, fact.admitted_since
                    ));
                }
            }
            return format!("held by {}", list.join(", "));
        }
        let list: Vec<String> = held.iter().map(|(k, g)| format!("{k}={g}")).collect();
        format!("held by {}", list.join(", "))
    }

    /// Forgets excursions that ended, so that the next one is reported again.
    fn settle_over(&mut self, kind: ViolationKind, queue: &str) {
        if let Some(pending) = &mut self.relisting {
            // Judged, and settled, once the relist is whole.
            pending.quotas.insert((kind, queue.to_owned()));
            return;
        }
        let usage = self.usage(kind);
        let Some((cohort, max)) = self.limits.queues.get(queue).cloned() else {
            return;
        };
        let mut ended = Vec::new();
        if usage.get(queue).copied().unwrap_or(0) <= max {
            ended.push(format!("ClusterQueue/{queue}"));
        }
        if let Some(cohort) = cohort {
            let members = self.cohort_usage(kind, &cohort);
            if members
                <= self
                    .limits
                    .cohorts
                    .get(&cohort)
                    .copied()
                    .unwrap_or(i64::MAX)
            {
                ended.push(format!("Cohort/{cohort}"));
            }
        }
        for object in ended {
            self.over.remove(&(kind, object));
        }
    }
}

/// The keys of `known` that a relist did not list: gone.
fn unlisted<'a>(known: impl Iterator<Item = &'a String>, listed: &BTreeSet<String>) -> Vec<String> {
    known.filter(|k| !listed.contains(*k)).cloned().collect()
}

/// `namespace/name` of a pod.
pub fn pod_key(pod: &Pod) -> Option<String> {
    Some(format!(
        "{}/{}",
        pod.metadata.namespace.as_deref()?,
        pod.metadata.name.as_deref()?
    ))
}

fn pod_fact(pod: &Pod) -> Option<PodFact> {
    let labels = pod.metadata.labels.as_ref()?;
    let namespace = pod.metadata.namespace.as_deref()?;
    let job = format!("{namespace}/{}", labels.get(JOB_LABEL)?);
    let attempt = labels.get(ATTEMPT_LABEL).cloned().unwrap_or_default();
    let spec = pod.spec.as_ref();
    let gated = spec
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty());
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    let live = !matches!(phase, Some("Succeeded" | "Failed"));
    let node = spec.and_then(|s| s.node_name.clone());
    let gpus = spec_gpus(spec);
    Some(PodFact {
        job,
        attempt,
        gated,
        live,
        node,
        terminating: pod.metadata.deletion_timestamp.is_some(),
        queue: pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(CLUSTER_QUEUE_ANNOTATION))
            .cloned(),
        gpus,
    })
}

fn template_gpus(template: &k8s_openapi::api::core::v1::PodTemplateSpec) -> i64 {
    spec_gpus(template.spec.as_ref())
}

/// The GPUs of a pod spec's containers.
fn spec_gpus(spec: Option<&k8s_openapi::api::core::v1::PodSpec>) -> i64 {
    spec.map_or(0, |s| {
        s.containers
            .iter()
            .map(|c| container_gpus(c.resources.as_ref()))
            .sum()
    })
}

/// A container's GPUs: its request, else its limit (whole GPUs only).
fn container_gpus(resources: Option<&k8s_openapi::api::core::v1::ResourceRequirements>) -> i64 {
    let Some(resources) = resources else { return 0 };
    resources
        .requests
        .as_ref()
        .and_then(|r| r.get(GPU))
        .or_else(|| resources.limits.as_ref().and_then(|l| l.get(GPU)))
        .and_then(|q| q.0.parse::<i64>().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests;
