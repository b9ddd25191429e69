//! A fake JobSet controller: the part of the `jobset.x-k8s.io` controller a queue relies on,
//! for clusters of the test kit, which run no JobSet controller.
//!
//! For every JobSet it makes one child Job per replica of each replicated Job
//! (`<jobset>-<replicatedJob>-<i>`, labelled with the JobSet's name, the replicated Job and the
//! replica, and owned by the JobSet), suspended while the JobSet is. It suspends the child Jobs
//! still active when the JobSet is suspended and, when it is let go, resumes them with what
//! the replicated Job's pod template now says (labels and annotations merged in; node
//! selector, tolerations and scheduling gates replaced), as the real controller does; a child
//! Job that completed stays completed through both. It reports per replicated Job how many
//! child Jobs have active pods, completed and failed, marks the JobSet `Completed` once every
//! child Job completed and `Failed` once one failed (no restarts: `maxRestarts` 0), and then
//! deletes the child Jobs still active.
//!
//! It reads JobSets and child Jobs through watches and writes only what differs from what
//! they show, so a write the watches have not caught up with may be sent twice (creating an
//! existing Job is refused and ignored; the others are idempotent).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, ResourceExt as _};
use muster_api::jobset::{JOB_INDEX_LABEL, JOBSET_NAME_LABEL, JobSet, REPLICATED_JOB_LABEL};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

/// How often every JobSet is looked at.
const TICK: Duration = Duration::from_millis(250);
/// How long a write is not sent again while the watches catch up with it.
const RESEND_AFTER: Duration = Duration::from_secs(3);

/// A running fake JobSet controller; dropping it stops it.
pub struct FakeJobSetController {
    tasks: Vec<JoinHandle<()>>,
}

impl FakeJobSetController {
    /// Starts watching JobSets and their child Jobs in every namespace, and reconciling them
    /// (needs a Tokio runtime and the JobSet CRD).
    pub fn start(client: Client) -> Self {
        let (jobsets, jobsets_writer) = reflector::store::<JobSet>();
        let (jobs, jobs_writer) = reflector::store::<Job>();
        let jobset_events = reflector::reflector(
            jobsets_writer,
            watcher::watcher(
                Api::<JobSet>::all(client.clone()),
                watcher::Config::default(),
            )
            .default_backoff(),
        );
        let job_events = reflector::reflector(
            jobs_writer,
            watcher::watcher(
                Api::<Job>::all(client.clone()),
                watcher::Config::default().labels(JOBSET_NAME_LABEL),
            )
            .default_backoff(),
        );
        let tasks = vec![
            tokio::spawn(jobset_events.for_each(|_| async {})),
            tokio::spawn(job_events.for_each(|_| async {})),
            tokio::spawn(
                Reconciler {
                    client,
                    jobsets,
                    jobs,
                    sent: HashMap::new(),
                }
                .run(),
            ),
        ];
        Self { tasks }
    }
}

impl Drop for FakeJobSetController {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

struct Reconciler {
    client: Client,
    jobsets: Store<JobSet>,
    jobs: Store<Job>,
    /// Writes sent lately: (object, what) → when.
    sent: HashMap<(String, String), Instant>,
}

/// How a child Job stands, as its conditions and counts say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ChildState {
    Completed,
    Failed,
    /// Neither: `true` when it has active pods.
    Running(bool),
}

fn child_state(job: &Job) -> ChildState {
    let status = job.status.as_ref();
    let holds = |kind: &str| {
        status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.type_ == kind && c.status == "True")
    };
    if holds("Complete") {
        ChildState::Completed
    } else if holds("Failed") {
        ChildState::Failed
    } else {
        ChildState::Running(status.and_then(|s| s.active).unwrap_or(0) > 0)
    }
}

/// Whether the JobSet has ended: its `Completed` or `Failed` condition holds.
fn finished(jobset: &JobSet) -> bool {
    jobset.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| (c.type_ == "Completed" || c.type_ == "Failed") && c.status == "True")
    })
}

impl Reconciler {
    async fn run(mut self) {
        // Both stores list once before anything is written from them.
        let _ = self.jobsets.wait_until_ready().await;
        let _ = self.jobs.wait_until_ready().await;
        loop {
            tokio::time::sleep(TICK).await;
            let now = Instant::now();
            self.sent
                .retain(|_, at| now.duration_since(*at) < RESEND_AFTER);
            let mut children: HashMap<(String, String), Vec<Arc<Job>>> = HashMap::new();
            for job in self.jobs.state() {
                let Some(owner) = job.labels().get(JOBSET_NAME_LABEL) else {
                    continue;
                };
                children
                    .entry((job.namespace().unwrap_or_default(), owner.clone()))
                    .or_default()
                    .push(job);
            }
            for jobset in self.jobsets.state() {
                let key = (jobset.namespace().unwrap_or_default(), jobset.name_any());
                let mine = children.remove(&key).unwrap_or_default();
                self.reconcile(&jobset, &mine).await;
            }
        }
    }

    /// Whether `what` of `object` may be sent now (not sent within [`RESEND_AFTER`]).
    fn once(&mut self, object: &str, what: &str) -> bool {
        let key = (object.to_owned(), what.to_owned());
        if self.sent.contains_key(&key) {
            return false;
        }
        self.sent.insert(key, Instant::now());
        true
    }

    async fn reconcile(&mut self, jobset: &JobSet, children: &[Arc<Job>]) {
        if jobset.metadata.deletion_timestamp.is_some() {
            return;
        }
        let namespace = jobset.namespace().unwrap_or_default();
        let name = jobset.name_any();
        let jobs: Api<Job> = Api::namespaced(self.client.clone(), &namespace);
        let by_name: BTreeMap<String, &Arc<Job>> =
            children.iter().map(|j| (j.name_any(), j)).collect();
        if finished(jobset) {
            for job in children {
                if matches!(child_state(job), ChildState::Running(_))
                    && job.metadata.deletion_timestamp.is_none()
                    && self.once(&job.name_any(), "delete")
                {
                    let _ = jobs
                        .delete(&job.name_any(), &DeleteParams::background())
                        .await;
                }
            }
            return;
        }
        let suspend = jobset.spec.suspend.unwrap_or(false);
        let mut statuses = Vec::new();
        let (mut all, mut completed, mut failed) = (0, 0, 0);
        for rj in &jobset.spec.replicated_jobs {
            let (mut active, mut succeeded, mut rj_failed, mut suspended) = (0, 0, 0, 0);
            for replica in 0..rj.replicas().max(0) {
                all += 1;
                let child = format!("{name}-{}-{replica}", rj.name);
                let Some(job) = by_name.get(&child) else {
                    if self.once(&child, "create") {
                        let made = child_job(jobset, rj, replica, &child);
                        if let Ok(job) = serde_json::from_value::<Job>(made) {
                            let _ = jobs.create(&PostParams::default(), &job).await;
                        }
                    }
                    continue;
                };
                let held = job.spec.as_ref().and_then(|s| s.suspend).unwrap_or(false);
                match child_state(job) {
                    ChildState::Completed => {
                        succeeded += 1;
                        completed += 1;
                        continue;
                    }
                    ChildState::Failed => {
                        rj_failed += 1;
                        failed += 1;
                        continue;
                    }
                    ChildState::Running(pods) => {
                        active += i32::from(pods);
                        suspended += i32::from(held);
                    }
                }
                if suspend && !held && self.once(&child, "suspend") {
                    let patch = json!({"spec": {"suspend": true}});
                    let _ = jobs
                        .patch(&child, &PatchParams::default(), &Patch::Merge(&patch))
                        .await;
                } else if !suspend && held && self.once(&child, "resume") {
                    self.resume(&jobs, job, rj).await;
                }
            }
            statuses.push(
                json!({"name": rj.name, "active": active, "succeeded": succeeded,
                "failed": rj_failed, "suspended": suspended, "ready": 0}),
            );
        }
        let ended = if failed > 0 {
            Some(("Failed", "FailedJobs", "a child Job failed"))
        } else if all > 0 && completed == all {
            Some((
                "Completed",
                "AllJobsCompleted",
                "jobset completed successfully",
            ))
        } else {
            None
        };
        self.report(jobset, statuses, ended).await;
    }

    /// Resumes a suspended child Job as the real controller does: its start time cleared (so
    /// its template may change), its pod template brought up to the replicated Job's, and
    /// unsuspended.
    async fn resume(&self, jobs: &Api<Job>, job: &Job, rj: &muster_api::jobset::ReplicatedJob) {
        let name = job.name_any();
        if job
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .is_some()
        {
            let clear = json!({"status": {"startTime": null}});
            let _ = jobs
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&clear))
                .await;
        }
        let wanted = rj
            .template
            .spec
            .as_ref()
            .map(|s| s.template.clone())
            .unwrap_or_default();
        let current = job.spec.as_ref().map(|s| &s.template);
        let merged = |now: Option<&BTreeMap<String, String>>,
                      add: Option<&BTreeMap<String, String>>| {
            let mut map = now.cloned().unwrap_or_default();
            map.extend(add.cloned().unwrap_or_default());
            map
        };
        let meta = |t: Option<&k8s_openapi::api::core::v1::PodTemplateSpec>| {
            t.and_then(|t| t.metadata.clone())
        };
        let (now_meta, want_meta) = (meta(current), wanted.metadata.clone());
        let labels = merged(
            now_meta.as_ref().and_then(|m| m.labels.as_ref()),
            want_meta.as_ref().and_then(|m| m.labels.as_ref()),
        );
        let annotations = merged(
            now_meta.as_ref().and_then(|m| m.annotations.as_ref()),
            want_meta.as_ref().and_then(|m| m.annotations.as_ref()),
        );
        let spec = wanted.spec.unwrap_or_default();
        let ops = json!([
            {"op": "add", "path": "/spec/template/metadata/labels", "value": labels},
            {"op": "add", "path": "/spec/template/metadata/annotations", "value": annotations},
            {"op": "add", "path": "/spec/template/spec/nodeSelector",
             "value": spec.node_selector.unwrap_or_default()},
            {"op": "add", "path": "/spec/template/spec/tolerations",
             "value": spec.tolerations.unwrap_or_default()},
            {"op": "add", "path": "/spec/template/spec/schedulingGates",
             "value": spec.scheduling_gates.unwrap_or_default()},
            {"op": "replace", "path": "/spec/suspend", "value": false},
        ]);
        if let Ok(patch) = serde_json::from_value::<json_patch::Patch>(ops) {
            let _ = jobs
                .patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
                .await;
        }
    }

    /// Writes the JobSet's status when it differs from what it shows: the replicated Jobs'
    /// counts and, once it ended, its condition and terminal state.
    async fn report(
        &mut self,
        jobset: &JobSet,
        statuses: Vec<Value>,
        ended: Option<(&str, &str, &str)>,
    ) {
        let shown = serde_json::to_value(jobset.status.as_ref().map(|s| &s.replicated_jobs_status))
            .unwrap_or(Value::Null);
        let counts = |v: &Value| {
            v.as_array()
                .map(|a| {
                    a.iter()
                        .map(|s| {
                            (
                                s["name"].clone(),
                                s["active"].clone(),
                                s["succeeded"].clone(),
                            )
                        })
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        };
        let wanted = Value::Array(statuses);
        if counts(&shown) == counts(&wanted) && ended.is_none() {
            return;
        }
        let name = jobset.name_any();
        let mut status = json!({"replicatedJobsStatus": wanted});
        if let Some((kind, reason, message)) = ended {
            status["terminalState"] = json!(kind);
            status["conditions"] = json!([{"type": kind, "status": "True", "reason": reason,
                "message": message,
                "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string()}]);
        }
        if !self.once(&name, &status.to_string()) {
            return;
        }
        let api: Api<JobSet> =
            Api::namespaced(self.client.clone(), &jobset.namespace().unwrap_or_default());
        let _ = api
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": status})),
            )
            .await;
    }
}

/// Child Job `name`, replica `replica` of `rj`: its template's Job with the JobSet's labels on
/// it and its pods, suspended while the JobSet is, owned by the JobSet.
fn child_job(
    jobset: &JobSet,
    rj: &muster_api::jobset::ReplicatedJob,
    replica: i32,
    name: &str,
) -> Value {
    let labels = json!({
        JOBSET_NAME_LABEL: jobset.name_any(),
        REPLICATED_JOB_LABEL: rj.name,
        JOB_INDEX_LABEL: replica.to_string(),
    });
    let mut template = serde_json::to_value(&rj.template).unwrap_or_default();
    let mut spec = template
        .get_mut("spec")
        .map_or_else(|| json!({}), Value::take);
    spec["suspend"] = json!(jobset.spec.suspend.unwrap_or(false));
    let pod_labels = &mut spec["template"]["metadata"]["labels"];
    if !pod_labels.is_object() {
        *pod_labels = json!({});
    }
    if let (Some(into), Some(from)) = (pod_labels.as_object_mut(), labels.as_object()) {
        into.extend(from.clone());
    }
    let mut metadata = template
        .get_mut("metadata")
        .map(Value::take)
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    metadata["name"] = json!(name);
    metadata["namespace"] = json!(jobset.namespace());
    let own = &mut metadata["labels"];
    if !own.is_object() {
        *own = json!({});
    }
    if let (Some(into), Some(from)) = (own.as_object_mut(), labels.as_object()) {
        into.extend(from.clone());
    }
    metadata["ownerReferences"] = json!([{
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "name": jobset.name_any(), "uid": jobset.metadata.uid,
        "controller": true, "blockOwnerDeletion": true}]);
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec})
}
