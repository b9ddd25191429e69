//! Carrying out a pass's [`Action`]s on the API server.
//!
//! A release creates the gang's Service (a gang of two or more) and every pod (all still gated), and only then lifts
//! the `muster.dev/admission` gate from every pod in one burst, so the kube-scheduler sees the
//! whole gang at once; the job's status is written last. An eviction writes the status first
//! (the admission gone, `requeueCount` moved on) and then deletes the pods, so a controller
//! that dies in between finds only stale pods and deletes them. For the queue entry of a batch
//! Job or JobSet the release patches the workload (`workload`) — its templates and `suspend:
//! false` in one write — and, once its controllers have made every pod, pins each and lifts
//! its gate; the eviction suspends the workload after the status write, and its controller
//! deletes the pods.
//!
//! Every step is idempotent: names are deterministic, an object that already exists (from an
//! earlier, interrupted attempt) counts as created, and one already gone counts as deleted —
//! except a pod of the same name that another release of the same attempt placed elsewhere
//! (or that is being deleted): the release fails rather than adopt it.
//! Conflicts, throttling and server errors are retried with exponential backoff — except that
//! a job's status is written only onto the version of the job its pass read, and a conflict
//! there is decided again from a fresh read (`job_status`). Before every request the executor
//! checks that it still leads: a controller that lost its lease stops writing at once.

mod gang;
mod job_status;
mod workload;

use std::future::Future;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ObjectReference, Pod, Service};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Client, Resource};
use muster_api::wire::FINALIZER;
use muster_api::{
    API_VERSION, ClusterQueue, Cohort, GpuJob, GpuJobStatus, LocalQueue, ObjectRef, ResourceFlavor,
};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

use crate::action::{Action, JobRead, Note};
use crate::event_budget::{EventBudget, Verdict};
pub use crate::index::Written;

/// The field manager of every write.
pub const FIELD_MANAGER: &str = "muster";
/// The field manager that owns Muster's finalizer entry (see [`Executor::add_finalizer`]).
const FINALIZER_MANAGER: &str = "muster-finalizer";

/// Why an action could not be completed (the next pass tries again).
#[derive(Debug, thiserror::Error)]
pub enum ExecuteError {
    /// A key is not `namespace/name`, or an object has no name.
    #[error("{0} has no namespace or name")]
    Unnamed(String),
    /// A write Muster built cannot be sent as it stands (a JSON patch that does not read as
    /// one): a defect, reported rather than sent.
    #[error("{0}")]
    Malformed(String),
    /// This controller no longer holds the lease.
    #[error("not the leader: stopped before {0}")]
    NotLeader(&'static str),
    /// The job changed since the pass that planned the write read it, in what the write was
    /// decided on (its spec, status, deletion, or the object itself): the status was not
    /// written, and the next pass decides again from what the job shows now.
    #[error("GpuJob {job} changed since it was read ({why}); not written, to be decided again")]
    Superseded {
        /// The job.
        job: ObjectRef,
        /// What changed.
        why: String,
    },
    /// A pod the release would make exists already but is not the one it plans — pinned to
    /// another node, or being deleted: left over from another release of the same attempt.
    /// Adopted, it would join this gang from elsewhere; the release fails instead, and the
    /// next pass rolls it back.
    #[error("pod {pod} exists from another release of this attempt: {why}")]
    Displaced {
        /// The pod.
        pod: ObjectRef,
        /// How it differs.
        why: String,
    },
    /// The API server refused a request, after retries.
    #[error("{action} {object}: {source}")]
    Api {
        /// What was attempted.
        action: &'static str,
        /// The object.
        object: String,
        /// The API error.
        source: kube::Error,
    },
}

/// Retry policy for one request.
#[derive(Clone, Copy, Debug)]
pub struct Retry {
    /// Attempts in all.
    pub attempts: u32,
    /// Delay before the first retry; doubles each time.
    pub base: Duration,
    /// Longest delay.
    pub max: Duration,
}

impl Retry {
    /// About 16 s in all: long enough to ride out a burst of faults or an API server's
    /// restart.
    pub const RIDE_OUT: Retry = Retry {
        attempts: 8,
        base: Duration::from_millis(200),
        max: Duration::from_secs(5),
    };
}

impl Default for Retry {
    fn default() -> Retry {
        Retry {
            attempts: 5,
            base: Duration::from_millis(100),
            max: Duration::from_secs(5),
        }
    }
}

/// Carries out actions with one client.
#[derive(Clone)]
pub struct Executor {
    client: Client,
    leader: watch::Receiver<bool>,
    recorder: Option<Recorder>,
    /// How many Normal Events of each kind are recorded (shared by every clone).
    events: Arc<Mutex<EventBudget>>,
    /// The executor's clock for the Event budget.
    started: std::time::Instant,
    /// Requests in flight at once within one gang.
    pub gang_concurrency: usize,
    /// Retries per request.
    pub retry: Retry,
    /// Retries of a read after a failed write (see [`Executor::read_back`]).
    pub read_retry: Retry,
    /// Retries of lifting a gate: once a gang's gates are being lifted, some of its pods may
    /// run already, so the rest are retried as long as a read back would be, riding out an
    /// API server that restarts mid-burst rather than leaving the gang running in part until
    /// a later pass (after the caches relist) finishes the release.
    pub gate_retry: Retry,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("gang_concurrency", &self.gang_concurrency)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

fn is_code(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == code)
}

fn already_exists(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 409 && status.reason == "AlreadyExists")
}

/// Worth trying again: a conflict, throttling, a server error, or the connection.
fn transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(status) => {
            (status.code == 409 && status.reason != "AlreadyExists")
                || status.code == 429
                || status.code >= 500
        }
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

fn named<K: Resource>(object: &K) -> Result<(String, String), ExecuteError> {
    let meta = object.meta();
    match (&meta.namespace, &meta.name) {
        (Some(ns), Some(name)) => Ok((ns.clone(), name.clone())),
        _ => Err(ExecuteError::Unnamed("an object".to_owned())),
    }
}

impl Executor {
    /// An executor that writes while `leader` holds true, recording Events with `recorder`.
    pub fn new(client: Client, leader: watch::Receiver<bool>, recorder: Option<Recorder>) -> Self {
        Executor {
            client,
            leader,
            recorder,
            events: Arc::default(),
            started: std::time::Instant::now(),
            gang_concurrency: 16,
            retry: Retry::default(),
            // The job is held as its write promised meanwhile.
            read_retry: Retry::RIDE_OUT,
            gate_retry: Retry::RIDE_OUT,
        }
    }

    /// One request, retried on transient errors; stops at once when leadership is lost.
    async fn call<T, F, Fut>(
        &self,
        action: &'static str,
        object: &str,
        request: F,
    ) -> Result<T, ExecuteError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        self.retrying(self.retry, true, action, object, request)
            .await
    }

    /// `request`, retried on transient errors as `retry` says; when `fenced`, never sent
    /// once leadership was lost. Writes are fenced ([`Executor::call`]); reads back after a
    /// failed write are not: what they learn is folded into the index, whichever term reads it.
    async fn retrying<T, F, Fut>(
        &self,
        retry: Retry,
        fenced: bool,
        action: &'static str,
        object: &str,
        request: F,
    ) -> Result<T, ExecuteError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        let mut delay = retry.base;
        let mut attempt = 1;
        loop {
            // Not leading, or leadership changed hands since the action began (even if this
            // replica leads again): a new term plans from what the API server shows, and a
            // write planned in the old one could land over the new term's.
            if fenced && (self.leader.has_changed().unwrap_or(true) || !*self.leader.borrow()) {
                return Err(ExecuteError::NotLeader(action));
            }
            match request().await {
                Ok(value) => return Ok(value),
                Err(e) if transient(&e) && attempt < retry.attempts => {
                    tracing::debug!(action, object, error = %e, attempt, "retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(retry.max);
                    attempt += 1;
                }
                Err(source) => {
                    return Err(ExecuteError::Api {
                        action,
                        object: object.to_owned(),
                        source,
                    });
                }
            }
        }
    }

    /// Carries out one action; returns the objects it wrote. `read` is the job as the pass
    /// that planned the action read it ([`crate::state::State::decided_on`]): a job's status
    /// is written only onto that version (see [`JobRead`]). Without one (or one without a
    /// version) the status is written whatever the job's version.
    pub async fn execute(
        &self,
        action: &Action,
        read: Option<&JobRead>,
    ) -> Result<Vec<Written>, ExecuteError> {
        // The action belongs to the leadership term it begins in: any change of leadership
        // from here on ends it (see `call`).
        let mut in_term = self.clone();
        in_term.leader.mark_unchanged();
        in_term.execute_in_term(action, read).await
    }

    /// This executor with the leadership it sees now as its term: [`Executor::execute_begun`]
    /// through it refuses to write once leadership has changed since, even if this replica
    /// leads again. A pass's writes are begun as the pass hands them over, so a write held
    /// back (a release waiting for jobs' ends to land, see `ends`) belongs to its pass's
    /// term, not to the one it is sent in.
    #[must_use]
    pub fn begun(&self) -> Executor {
        let mut in_term = self.clone();
        in_term.leader.mark_unchanged();
        in_term
    }

    /// Carries out one action within the term this executor was [`Executor::begun`] in (see
    /// [`Executor::execute`]).
    pub async fn execute_begun(
        &self,
        action: &Action,
        read: Option<&JobRead>,
    ) -> Result<Vec<Written>, ExecuteError> {
        self.execute_in_term(action, read).await
    }

    /// [`Executor::execute`] within the current term.
    async fn execute_in_term(
        &self,
        action: &Action,
        read: Option<&JobRead>,
    ) -> Result<Vec<Written>, ExecuteError> {
        let mut written = Vec::new();
        match action {
            Action::Release {
                job,
                gang,
                status,
                event,
            } => {
                written.extend(
                    self.release_recorded(job, gang, status, event.as_ref(), read)
                        .await?,
                );
            }
            Action::Evict {
                job,
                status,
                pods,
                event,
                workload,
            } => {
                let job = self.write_status(job, status, read).await?;
                self.record(&job, Some(event)).await;
                written.push(Written::Job(Box::new(job)));
                if let Some(workload) = workload {
                    let suspend = crate::workload::WorkloadPatch::suspend();
                    written.extend(
                        self.patch_workload(workload, &suspend, "suspending")
                            .await?,
                    );
                }
                written.extend(self.delete_pods(pods).await?);
            }
            Action::CreateEntry { entry, .. } => written.extend(self.create_entry(entry).await?),
            Action::UpdateEntry { job, spec } => {
                written.extend(self.update_entry(job, spec).await?);
            }
            Action::PinPods { pins, .. } => written.extend(self.pin_pods(pins).await?),
            Action::PatchWorkload {
                workload,
                patch,
                event,
                ..
            } => {
                written.extend(self.patch_workload(workload, patch, "patching").await?);
                if let Some(note) = event {
                    self.record_on_workload(workload, note).await;
                }
            }
            Action::DeletePods { pods, .. } => written.extend(self.delete_pods(pods).await?),
            Action::JobStatus { job, status, event } => {
                let job = self.write_status(job, status, read).await?;
                self.record(&job, event.as_ref()).await;
                written.push(Written::Job(Box::new(job)));
            }
            Action::AddFinalizer { job } => {
                written.push(Written::Job(Box::new(self.add_finalizer(job).await?)));
            }
            Action::Finalize { job, pods } => written.extend(self.finalize(job, pods).await?),
            Action::Provision {
                job,
                templates,
                requests,
                status,
                event,
            } => written.extend(
                self.provision(job, templates, requests, status, event, read)
                    .await?,
            ),
            Action::Unprovision {
                requests,
                templates,
                ..
            } => self.unprovision(requests, templates).await?,
            Action::ClusterQueueStatus { name, status } => {
                let api: Api<ClusterQueue> = Api::all(self.client.clone());
                let queue = self.write_whole_status(&api, name, name, status).await?;
                written.push(Written::ClusterQueue(Box::new(queue)));
            }
            Action::LocalQueueStatus { key, status } => {
                let api: Api<LocalQueue> = Api::namespaced(self.client.clone(), key.namespace());
                let queue = self
                    .write_whole_status(&api, key.name(), key, status)
                    .await?;
                written.push(Written::LocalQueue(Box::new(queue)));
            }
            Action::FlavorStatus { name, status } => {
                let api: Api<ResourceFlavor> = Api::all(self.client.clone());
                let flavor = self.write_whole_status(&api, name, name, status).await?;
                written.push(Written::ResourceFlavor(Box::new(flavor)));
            }
            Action::CohortStatus { name, status } => {
                let api: Api<Cohort> = Api::all(self.client.clone());
                let cohort = self.write_whole_status(&api, name, name, status).await?;
                written.push(Written::Cohort(Box::new(cohort)));
            }
        }
        Ok(written)
    }

    /// Releases `gang` and writes job `key`'s status that records it (with its Event): the
    /// gang first, so that a status never says admitted before anything is released — but
    /// the status first for a release whose pod runs as soon as its Job is unsuspended
    /// ([`crate::release::WorkloadRelease::ungated`]), so that a status write that fails
    /// releases nothing.
    async fn release_recorded(
        &self,
        key: &ObjectRef,
        gang: &crate::release::Gang,
        status: &GpuJobStatus,
        event: Option<&Note>,
        read: Option<&JobRead>,
    ) -> Result<Vec<Written>, ExecuteError> {
        let mut written = Vec::new();
        let status_first = gang.workload.as_ref().is_some_and(|w| w.ungated);
        if !status_first {
            written.extend(self.release(gang).await?);
        }
        let job = self.write_status(key, status, read).await?;
        self.record(&job, event).await;
        written.push(Written::Job(Box::new(job)));
        if status_first {
            written.extend(self.release(gang).await?);
        }
        Ok(written)
    }

    /// Writes `status` whole to object `name` of `api` (a queue or a flavor, logged as
    /// `key`) and returns the object as written.
    async fn write_whole_status<K>(
        &self,
        api: &Api<K>,
        name: &str,
        key: &str,
        status: &impl serde::Serialize,
    ) -> Result<K, ExecuteError>
    where
        K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let (params, patch) = (status_params(), whole_status(key, status, None)?);
        self.call("writing status", key, || {
            api.patch_status(name, &params, &patch)
        })
        .await
    }

    /// Adds Muster's finalizer in one request: a server-side apply that owns only that entry
    /// of `metadata.finalizers` (a set), so the finalizers of others are kept without reading
    /// the job first.
    async fn add_finalizer(&self, key: &ObjectRef) -> Result<GpuJob, ExecuteError> {
        let (namespace, name) = (key.namespace(), key.name());
        let api: Api<GpuJob> = Api::namespaced(self.client.clone(), namespace);
        let body = serde_json::json!({"apiVersion": API_VERSION, "kind": "GpuJob",
            "metadata": {"name": name, "finalizers": [FINALIZER]}});
        let params = PatchParams::apply(FINALIZER_MANAGER);
        let patch = Patch::Apply(&body);
        self.call("adding GpuJob finalizer", key, || {
            api.patch(name, &params, &patch)
        })
        .await
    }

    /// Removes Muster's finalizer, on the job's latest version (read first, then patched with
    /// its resourceVersion, so another controller's finalizer is never lost). A merge patch
    /// rather than an apply: the finalizer may have been added by an older Muster that did not
    /// add it by apply, and an apply only removes entries its own manager owns.
    async fn remove_finalizer(&self, key: &ObjectRef) -> Result<GpuJob, ExecuteError> {
        let (namespace, name) = (key.namespace(), key.name());
        let api: Api<GpuJob> = Api::namespaced(self.client.clone(), namespace);
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        // Read and patch as one unit: a conflict (someone changed the job in between)
        // retries from the read.
        self.call("patching GpuJob finalizers", key, || async {
            let current = api.get(name).await?;
            let mut finalizers = current.metadata.finalizers.clone().unwrap_or_default();
            if !finalizers.iter().any(|f| f == FINALIZER) {
                return Ok(current);
            }
            finalizers.retain(|f| f != FINALIZER);
            let body = serde_json::json!({"metadata": {
                "finalizers": finalizers,
                "resourceVersion": current.metadata.resource_version,
            }});
            api.patch(name, &params, &Patch::Merge(&body)).await
        })
        .await
    }

    /// A deleted job: its pods, then its Service, then Muster's finalizer.
    async fn finalize(
        &self,
        job: &ObjectRef,
        pods: &[ObjectRef],
    ) -> Result<Vec<Written>, ExecuteError> {
        let mut written = self.delete_pods(pods).await?;
        // The Service is named like the job.
        self.delete::<Service>(job, "deleting Service").await?;
        match self.remove_finalizer(job).await {
            Ok(job) => written.push(Written::Job(Box::new(job))),
            Err(ExecuteError::Api { source, .. }) if is_code(&source, 404) => {}
            Err(e) => return Err(e),
        }
        Ok(written)
    }

    /// Creates the PodTemplates, then the requests that count them, then writes the status
    /// (onto the version `read`, see [`Executor::write_status`]).
    async fn provision(
        &self,
        job: &ObjectRef,
        templates: &[k8s_openapi::api::core::v1::PodTemplate],
        requests: &[muster_api::ProvisioningRequest],
        status: &GpuJobStatus,
        event: &Note,
        read: Option<&JobRead>,
    ) -> Result<Vec<Written>, ExecuteError> {
        let mut written = Vec::new();
        for template in templates {
            if self
                .create(template, "creating PodTemplate")
                .await?
                .is_none()
            {
                // Left by a cut-off attempt of the same number, perhaps for other flavors:
                // the request must count pods as this attempt describes them.
                let (namespace, name) = named(template)?;
                let key = ObjectRef::new(&namespace, &name);
                self.delete::<k8s_openapi::api::core::v1::PodTemplate>(
                    &key,
                    "replacing PodTemplate",
                )
                .await?;
                self.create(template, "creating PodTemplate").await?;
            }
        }
        for request in requests {
            if let Some(created) = self.create(request, "creating ProvisioningRequest").await? {
                written.push(Written::Request(Box::new(created)));
            }
        }
        let job = self.write_status(job, status, read).await?;
        self.record(&job, Some(event)).await;
        written.push(Written::Job(Box::new(job)));
        Ok(written)
    }

    /// Deletes the requests, then their PodTemplates.
    async fn unprovision(
        &self,
        requests: &[ObjectRef],
        templates: &[ObjectRef],
    ) -> Result<(), ExecuteError> {
        // Templates first: a request that outlives a failed or cut-off delete is found again
        // (its job moved on, so it is an orphan) and deleted with its templates, but nothing
        // finds a template whose request is already gone.
        for key in templates {
            self.delete::<k8s_openapi::api::core::v1::PodTemplate>(key, "deleting PodTemplate")
                .await?;
        }
        for key in requests {
            self.delete::<muster_api::ProvisioningRequest>(key, "deleting ProvisioningRequest")
                .await?;
        }
        Ok(())
    }

    /// Creates a namespaced object; `None` when it already existed.
    async fn create<K>(&self, object: &K, action: &'static str) -> Result<Option<K>, ExecuteError>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::Serialize
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let (namespace, name) = named(object)?;
        let api: Api<K> = Api::namespaced(self.client.clone(), &namespace);
        let pp = PostParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        match self.call(action, &name, || api.create(&pp, object)).await {
            Ok(created) => Ok(Some(created)),
            Err(ExecuteError::Api { source, .. }) if already_exists(&source) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Deletes a namespaced object by `namespace/name` (one already gone counts as deleted).
    async fn delete<K>(&self, key: &ObjectRef, action: &'static str) -> Result<(), ExecuteError>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let (namespace, name) = (key.namespace(), key.name());
        let api: Api<K> = Api::namespaced(self.client.clone(), namespace);
        let dp = DeleteParams::default();
        match self.call(action, key, || api.delete(name, &dp)).await {
            Ok(_) => Ok(()),
            Err(ExecuteError::Api { source, .. }) if is_code(&source, 404) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Deletes pods by `namespace/name` (ones already gone count as deleted).
    async fn delete_pods(&self, keys: &[ObjectRef]) -> Result<Vec<Written>, ExecuteError> {
        let limit = self.gang_concurrency.max(1);
        let deletes: Vec<_> = keys.iter().map(|key| self.delete_pod(key)).collect();
        let written: Vec<Option<Written>> = futures::stream::iter(deletes)
            .buffered(limit)
            .try_collect()
            .await?;
        Ok(written.into_iter().flatten().collect())
    }

    async fn delete_pod(&self, key: &ObjectRef) -> Result<Option<Written>, ExecuteError> {
        let (namespace, name) = (key.namespace(), key.name());
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let dp = DeleteParams::default();
        match self
            .call("deleting pod", key, || pods.delete(name, &dp))
            .await
        {
            Ok(either) => Ok(either.left().map(|p| Written::Pod(Box::new(p)))),
            Err(ExecuteError::Api { source, .. }) if is_code(&source, 404) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Records an Event about `job` (failures are logged: an event is never worth a retry).
    async fn record(&self, job: &GpuJob, note: Option<&Note>) {
        let Some(note) = note else {
            return;
        };
        let reference = ObjectReference {
            api_version: Some(API_VERSION.to_owned()),
            kind: Some("GpuJob".to_owned()),
            name: job.metadata.name.clone(),
            namespace: job.metadata.namespace.clone(),
            uid: job.metadata.uid.clone(),
            resource_version: job.metadata.resource_version.clone(),
            ..ObjectReference::default()
        };
        self.publish(&reference, note).await;
    }

    /// Publishes `note` about the object `reference` names (failures are logged: an event is
    /// never worth a retry).
    async fn publish(&self, reference: &ObjectReference, note: &Note) {
        let Some(recorder) = &self.recorder else {
            return;
        };
        let mut message: String = note.message.chars().take(900).collect();
        if !note.warning {
            let namespace = reference.namespace.as_deref().unwrap_or_default();
            let now = self.started.elapsed().as_secs_f64();
            let verdict = match self.events.lock() {
                Ok(mut budget) => budget.admit(namespace, &note.reason, now),
                Err(poisoned) => poisoned.into_inner().admit(namespace, &note.reason, now),
            };
            match verdict {
                Verdict::LeaveOut => return,
                Verdict::Record { left_out, since } if left_out > 0 => {
                    use std::fmt::Write as _;
                    let _ = write!(
                        message,
                        " ({left_out} more {} Events in this namespace in the last {:.0} s were not recorded one by one; each job's conditions record its own)",
                        note.reason,
                        (now - since).max(0.0)
                    );
                }
                Verdict::Record { .. } => {}
            }
        }
        let event = Event {
            type_: if note.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: note.reason.clone(),
            note: Some(message),
            action: note.reason.clone(),
            secondary: None,
        };
        if let Err(e) = recorder.publish(&event, reference).await {
            tracing::warn!(error = %e, reason = %note.reason, "could not record event");
        }
    }
}

/// The parameters of a status write: a plain patch under Muster's field manager.
fn status_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    }
}

/// The JSON patch that makes an object's status `status`, whole: fields Muster set before and
/// leaves out now are removed, which a merge patch would keep. Not server-side apply: only
/// Muster writes these statuses, so apply's bookkeeping of field owners buys nothing, and it
/// was the API server's costliest step in a status write (docs/performance.md). With
/// `version`, the patch also sets the object's resourceVersion, which the API server compares
/// with the stored one: an object that moved on since is answered 409 Conflict, not
/// overwritten. Fails only if `status` does not serialize (then [`ExecuteError::Malformed`],
/// naming `what`).
pub(crate) fn whole_status(
    what: impl std::fmt::Display,
    status: &impl serde::Serialize,
    version: Option<&str>,
) -> Result<Patch<serde_json::Value>, ExecuteError> {
    use json_patch::jsonptr::PointerBuf;
    use json_patch::{AddOperation, PatchOperation, ReplaceOperation};
    let value = serde_json::to_value(status)
        .map_err(|e| ExecuteError::Malformed(format!("the status of {what}: {e}")))?;
    let mut ops = Vec::with_capacity(2);
    if let Some(version) = version {
        ops.push(PatchOperation::Replace(ReplaceOperation {
            path: PointerBuf::from_tokens(["metadata", "resourceVersion"]),
            value: serde_json::Value::from(version),
        }));
    }
    // "add" of a member that exists replaces it (RFC 6902): this holds whether or not the
    // object has a status yet.
    ops.push(PatchOperation::Add(AddOperation {
        path: PointerBuf::from_tokens(["status"]),
        value,
    }));
    Ok(Patch::Json(json_patch::Patch(ops)))
}
