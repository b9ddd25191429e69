//! The invariant checker: what a gang queue promises, checked from the API server's objects
//! (never from a controller's memory) as they change.
//!
//! Fed every change of pods and GpuJobs, in the order one watch per kind delivers them, it
//! records a [`Violation`] when
//!
//! - the GPUs of a ClusterQueue's live pods pass its nominal quota plus borrowing limit, or a
//!   cohort's pass the sum of its members' nominal quotas ([`ViolationKind::PodsOverQuota`]).
//!   Pods being deleted do not count: an evicted gang's terminating pods hold their nodes (no
//!   pod is placed on that capacity until they are gone) but no longer their queue's quota.
//!   Nor do pods behind a scheduling gate: no scheduler may bind them, so they use no GPU,
//!   and they count from the moment their gates are lifted (a workload controller may make a
//!   gated pod from a release already evicted, which stays gated until it is deleted); two
//!   attempts of one job are checked apart;
//! - the same holds for the jobs whose status says admitted ([`ViolationKind::AdmittedOverQuota`]);
//! - pods of two attempts of one job are live at once ([`ViolationKind::TwoAttemptsLive`]): at
//!   most one attempt of a job runs at once. A pod is live until it ends, its object is gone,
//!   or the node it is bound to is deleted or tainted `node.kubernetes.io/out-of-service` — a
//!   pod on a node that is NotReady or partitioned is live (it may well be running);
//! - a pod's scheduling gates are lifted before every pod of its gang exists
//!   ([`ViolationKind::GateLiftedOnPartialGang`]), or some pods of an attempt stay ungated
//!   while others keep their gates for longer than [`HALF_RELEASED_SECONDS`] while some
//!   replica leads ([`ViolationKind::GatesHalfLifted`], `gates.rs`; judged at the end, once
//!   the caller has said when a replica led: [`Checker::led`]);
//! - pods of one attempt that exist together are bound to nodes in two domains of a level
//!   their pod set requires ([`ViolationKind::SplitAcrossDomains`], `domains.rs`; a release
//!   rolled back and made again elsewhere reuses the attempt and its pod names);
//! - a job that ended leaves its end or ends again ([`ViolationKind::EndedTwice`]);
//!
//! and, at the end ([`Checker::finish`]), when a job did not end, or failed when it was not
//! meant to (or without a reason). What is left on the cluster is checked by the caller.
//!
//! A pod belongs to the job its job label names, else to the GpuJob its owner reference
//! names; it uses the quota of the ClusterQueue its annotation names, else of the one its
//! job's status last named. Where a watch broke and relisted, the checker was blind from the
//! break to the end of the list ([`Checker::blind_seconds`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::Pod;
use muster_api::GpuJob;
use serde::Serialize;

pub use self::facts::pod_key;
pub use self::gates::HALF_RELEASED_SECONDS;

use self::blind::Blind;
use self::domains::Domains;
use self::facts::{NodeFact, PodFact, QueueSource, pod_fact};
use self::gates::Releases;

/// The resource the workload asks for.
pub const GPU: &str = "nvidia.com/gpu";

/// What may be used, in GPUs: per ClusterQueue its nominal quota plus borrowing limit and its
/// cohort; per cohort what its whole subtree may hold (at a root, the nominal quotas within
/// it; below, those plus the cohort's borrowing limit) and its parent.
#[derive(Clone, Debug, Default)]
pub struct Limits {
    /// ClusterQueue → (cohort, nominal + borrowing limit).
    pub queues: BTreeMap<String, (Option<String>, i64)>,
    /// Cohort → what the queues under it, at any depth, may hold together.
    pub cohorts: BTreeMap<String, i64>,
    /// Cohort → its parent cohort (roots are absent).
    pub parents: BTreeMap<String, String>,
}

impl Limits {
    /// `cohort` and its ancestors, nearest first (a cycle is cut where it closes).
    pub fn cohort_path(&self, cohort: &str) -> Vec<String> {
        let mut path = vec![cohort.to_owned()];
        while let Some(parent) = path.last().and_then(|c| self.parents.get(c)) {
            if path.contains(parent) {
                break;
            }
            path.push(parent.clone());
        }
        path
    }
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
    /// Some pods of one attempt ran ungated while others kept their gates for longer than
    /// [`HALF_RELEASED_SECONDS`]: a gang released in part.
    GatesHalfLifted,
    /// Pods of one attempt were bound to nodes in two domains of the level their pod set
    /// requires (`topology.required`), or to a node without that label.
    SplitAcrossDomains,
    /// A task of the run itself failed (panicked, was cancelled, or gave up): what it was to
    /// do or check went undone, so the run cannot say it broke nothing.
    HarnessFailed,
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
    /// The ClusterQueue its status last named: the quota its pods without an annotation use.
    queue: Option<String>,
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
    nodes: Option<BTreeMap<String, NodeFact>>,
    /// Half-released gangs.
    releases: Releases,
    /// Gangs split across domains.
    domains: Domains,
    /// When the checker's watches were blind.
    blind: Blind,
    /// When some replica of the controller led, seconds into the run; `None` until told
    /// ([`Checker::led`]).
    leaders: Option<Vec<(f64, f64)>>,
    /// The latest time heard (seconds into the run).
    latest: f64,
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

    /// A pod was created or changed.
    pub fn pod(&mut self, pod: &Pod, at: f64) {
        let Some(key) = pod_key(pod) else { return };
        let Some(mut fact) = pod_fact(pod) else {
            return;
        };
        if fact.queue_source == QueueSource::Job {
            fact.queue = self.jobs.get(&fact.job).and_then(|j| j.queue.clone());
        }
        self.fold_pod(&key, fact, at);
    }

    /// Folds in what is now known of pod `key`.
    fn fold_pod(&mut self, key: &str, mut fact: PodFact, at: f64) {
        self.latest = self.latest.max(at);
        fact.live = fact.live && self.node_holds(fact.node.as_deref());
        let before = self.pods.insert(key.to_owned(), fact.clone());
        // Settled after the new fact is in, so that an update of an over-quota pod is not
        // taken for the end of the excursion.
        if let Some(before) = &before {
            self.unlive(before, false);
        }
        self.seen
            .entry((fact.job.clone(), fact.attempt.clone()))
            .or_default()
            .insert(key.to_owned());
        if fact.live {
            *self
                .live
                .entry(fact.job.clone())
                .or_default()
                .entry(fact.attempt.clone())
                .or_default() += 1;
            if let (Some(queue), true) = (&fact.queue, fact.uses_quota()) {
                *self.pod_usage.entry(queue.clone()).or_default() += fact.gpus;
            }
        }
        let lifted = !fact.gated && before.as_ref().is_none_or(|b| b.gated);
        if lifted && fact.live {
            self.check_gang(&fact.job, &fact.attempt, key, at);
        }
        self.check_release(&fact.job, &fact.attempt, at);
        if let (Some(node), true) = (&fact.node, fact.live) {
            let split = self
                .domains
                .pod(&fact.job, &fact.attempt, &fact.pod_set, key, node);
            self.report_splits(split);
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

    /// Pods of `job` without a ClusterQueue annotation now use `queue` (its status named it).
    fn attribute(&mut self, job: &str, queue: &str, at: f64) {
        let owned: Vec<(String, PodFact)> = self
            .pods
            .iter()
            .filter(|(_, p)| {
                p.job == job
                    && p.queue_source == QueueSource::Job
                    && p.queue.as_deref() != Some(queue)
            })
            .map(|(k, p)| (k.clone(), p.clone()))
            .collect();
        for (key, mut fact) in owned {
            fact.queue = Some(queue.to_owned());
            // Live or not as it was (a lost pod stays lost): folded again with its new queue.
            self.fold_pod(&key, fact, at);
        }
    }

    /// Judges whether attempt `attempt` of `job` is half released (some pods ungated, others
    /// still gated) and for how long.
    fn check_release(&mut self, job: &str, attempt: &str, at: f64) {
        let (mut gated, mut lifted) = (0, 0);
        let key = (job.to_owned(), attempt.to_owned());
        for pod in self.seen.get(&key).into_iter().flatten() {
            match self.pods.get(pod) {
                Some(p) if p.live && !p.terminating && p.gated => gated += 1,
                Some(p) if p.live && !p.terminating => lifted += 1,
                _ => {}
            }
        }
        self.releases.observe(job, attempt, gated, lifted, at);
    }

    /// Reports every gang half released for too long up to `at`, counting only the time some
    /// replica led ([`Checker::led`]). Done at the end ([`Checker::finish`]), once the caller
    /// has said when a replica led.
    pub(super) fn judge_releases(&mut self, at: f64) {
        let leaders = self.leaders.clone();
        let led = |from: f64, to: f64| match &leaders {
            None => to - from,
            Some(spells) => spells::covered(spells.iter().copied(), from, to),
        };
        for half in self.releases.judge(at, led) {
            self.report(
                ViolationKind::GatesHalfLifted,
                format!("GpuJob/{}", half.job),
                half.at,
                half.detail,
            );
        }
    }

    /// Some replica of the controller led from `from` to `to`, seconds into the run. Once
    /// told this, the checker counts only such time against a half-released gang's bound
    /// (before, every second).
    pub fn led(&mut self, from: f64, to: f64) {
        self.leaders
            .get_or_insert_with(Vec::new)
            .push((from, to.max(from)));
    }

    /// How long no replica led up to `until`, seconds; `None` when never told who led.
    pub fn leaderless_seconds(&self, until: f64) -> Option<f64> {
        let leaders = self.leaders.as_ref()?;
        Some(until - spells::covered(leaders.iter().copied(), 0.0, until))
    }

    fn report_splits(&mut self, splits: impl IntoIterator<Item = domains::Split>) {
        let at = self.latest;
        for split in splits {
            self.report(
                ViolationKind::SplitAcrossDomains,
                format!("GpuJob/{}", split.job),
                at,
                split.detail,
            );
        }
    }

    /// Time passed (seconds into the run), with or without anything heard.
    pub fn tick(&mut self, at: f64) {
        self.latest = self.latest.max(at);
    }

    /// The `kind` watch (`Pod`, `GpuJob`, `Node`) saw nothing from `from` to `to` (seconds
    /// into the run): its break, and the relist that followed.
    pub fn blind(&mut self, kind: &str, from: f64, to: f64) {
        self.blind.add(kind, from, to);
    }

    /// How long the checker was blind to something, seconds (overlaps counted once).
    pub fn blind_seconds(&self) -> f64 {
        self.blind.seconds()
    }

    /// How long each watch was blind, seconds.
    pub fn blind_by_kind(&self) -> BTreeMap<String, f64> {
        self.blind.by_kind()
    }

    /// A pod is gone.
    pub fn pod_gone(&mut self, key: &str) {
        if let Some(before) = self.pods.remove(key) {
            self.unlive(&before, true);
            self.domains
                .gone(&before.job, &before.attempt, &before.pod_set, key);
            self.check_release(&before.job, &before.attempt, self.latest);
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
        if let (Some(queue), true) = (&before.queue, before.uses_quota()) {
            let usage = self.pod_usage.entry(queue.clone()).or_default();
            *usage -= before.gpus;
            if settle {
                self.settle_over(ViolationKind::PodsOverQuota, queue);
            }
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
}

/// The keys of `known` that a relist did not list: gone.
fn unlisted<'a>(known: impl Iterator<Item = &'a String>, listed: &BTreeSet<String>) -> Vec<String> {
    known.filter(|k| !listed.contains(*k)).cloned().collect()
}

mod blind;
mod domains;
mod facts;
mod gates;
mod jobs;
mod nodes;
mod quota;
mod spells;
#[cfg(test)]
mod tests;
