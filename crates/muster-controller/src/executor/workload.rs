//! Writing to the Jobs behind queue entries (see [`crate::workload`]): the entry made, the Job
//! patched (held, put back, released) and its gang's pods pinned and let go. Each write is a
//! merge patch that says the whole of what it sets, so a retried or repeated one changes
//! nothing more.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use muster_api::{GpuJob, ObjectRef};

use super::{ExecuteError, Executor, FIELD_MANAGER, Written, already_exists, is_code};
use crate::action::Note;
use crate::release::WorkloadRelease;

impl Executor {
    /// Creates a queue entry; one that exists already counts as made (the index shows it).
    pub(super) async fn create_entry(&self, entry: &GpuJob) -> Result<Vec<Written>, ExecuteError> {
        let namespace = entry.metadata.namespace.clone().unwrap_or_default();
        let name = entry.metadata.name.clone().unwrap_or_default();
        let api: Api<GpuJob> = Api::namespaced(self.client.clone(), &namespace);
        let pp = PostParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        match self
            .call("creating queue entry", &name, || api.create(&pp, entry))
            .await
        {
            Ok(created) => Ok(vec![Written::Job(Box::new(created))]),
            Err(ExecuteError::Api { source, .. }) if already_exists(&source) => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    /// Writes a waiting entry's spec anew (a merge patch whose pod sets replace the old ones
    /// whole); an entry already gone is left so.
    pub(super) async fn update_entry(
        &self,
        entry: &ObjectRef,
        spec: &muster_api::gpujob::GpuJobSpec,
    ) -> Result<Vec<Written>, ExecuteError> {
        let api: Api<GpuJob> = Api::namespaced(self.client.clone(), entry.namespace());
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        let body = serde_json::json!({ "spec": spec });
        let patch = Patch::Merge(&body);
        match self
            .call("updating queue entry", entry, || {
                api.patch(entry.name(), &params, &patch)
            })
            .await
        {
            Ok(job) => Ok(vec![Written::Job(Box::new(job))]),
            Err(ExecuteError::Api { source, .. }) if is_code(&source, 404) => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    /// Merge-patches the Job behind a queue entry; a Job already gone is left so.
    pub(super) async fn patch_workload(
        &self,
        workload: &ObjectRef,
        patch: &serde_json::Value,
        what: &'static str,
    ) -> Result<Vec<Written>, ExecuteError> {
        let api: Api<Job> = Api::namespaced(self.client.clone(), workload.namespace());
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        let patch = Patch::Merge(patch);
        match self
            .call(what, workload, || {
                api.patch(workload.name(), &params, &patch)
            })
            .await
        {
            Ok(job) => Ok(vec![Written::Workload(Box::new(job))]),
            Err(ExecuteError::Api { source, .. }) if is_code(&source, 404) => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }

    /// Releases the Job of a queue entry: its template and `suspend` patched.
    pub(super) async fn release_workload(
        &self,
        release: &WorkloadRelease,
    ) -> Result<Vec<Written>, ExecuteError> {
        let api: Api<Job> = Api::namespaced(self.client.clone(), release.job.namespace());
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        let patch = Patch::Merge(&release.patch);
        let job = self
            .call("releasing Job", &release.job, || {
                api.patch(release.job.name(), &params, &patch)
            })
            .await?;
        Ok(vec![Written::Workload(Box::new(job))])
    }

    /// Pins every gated pod of a released Job's gang and lifts Muster's gate, in one burst.
    pub(super) async fn pin_pods(
        &self,
        pins: &[(ObjectRef, serde_json::Value)],
    ) -> Result<Vec<Written>, ExecuteError> {
        let limit = self.gang_concurrency.max(1);
        let requests: Vec<_> = pins
            .iter()
            .map(|(pod, patch)| self.pin(pod, patch))
            .collect();
        futures::stream::iter(requests)
            .buffered(limit)
            .try_collect()
            .await
    }

    /// Pins one gated pod of a released Job to its node and lifts Muster's gate.
    async fn pin(
        &self,
        pod: &ObjectRef,
        patch: &serde_json::Value,
    ) -> Result<Written, ExecuteError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), pod.namespace());
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        let patch = Patch::Merge(patch);
        let pod = self
            .call("pinning pod", pod, || {
                api.patch(pod.name(), &params, &patch)
            })
            .await?;
        Ok(Written::Pod(Box::new(pod)))
    }

    /// Records an Event about the Job behind a queue entry (failures are logged).
    pub(super) async fn record_on_workload(&self, workload: &ObjectRef, note: &Note) {
        let reference = ObjectReference {
            api_version: Some("batch/v1".to_owned()),
            kind: Some("Job".to_owned()),
            namespace: Some(workload.namespace().to_owned()),
            name: Some(workload.name().to_owned()),
            ..ObjectReference::default()
        };
        self.publish(&reference, note).await;
    }
}
