//! Writing to the Jobs and JobSets behind queue entries (see [`crate::workload`]): the entry made, the Job
//! patched (held, put back, released) and its gang's pods pinned and let go. Each write is a
//! merge patch that says the whole of what it sets, so a retried or repeated one changes
//! nothing more.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use muster_api::jobset::JobSet;
use muster_api::{GpuJob, ObjectRef};

use super::{ExecuteError, Executor, FIELD_MANAGER, Written, already_exists, is_code};
use crate::action::Note;
use crate::index::BatchJob;
use crate::lean::{Lean, lean};
use crate::release::WorkloadRelease;
use crate::workload::{WorkloadKind, WorkloadPatch, WorkloadRef};

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

    /// Patches the Job or JobSet behind a queue entry; one already gone is left so. `what`
    /// says what the write does (`suspending`, `patching`), for logs and errors.
    pub(super) async fn patch_workload(
        &self,
        workload: &WorkloadRef,
        patch: &WorkloadPatch,
        what: &'static str,
    ) -> Result<Vec<Written>, ExecuteError> {
        match self.write_workload(workload, patch, what).await {
            Err(ExecuteError::Api { source, .. }) if is_code(&source, 404) => Ok(Vec::new()),
            other => other,
        }
    }

    /// Releases the workload of a queue entry: its templates and `suspend` patched.
    pub(super) async fn release_workload(
        &self,
        release: &WorkloadRelease,
    ) -> Result<Vec<Written>, ExecuteError> {
        self.write_workload(&release.workload, &release.patch, "releasing")
            .await
    }

    /// One write to a workload, as a merge patch or a JSON patch.
    async fn write_workload(
        &self,
        workload: &WorkloadRef,
        patch: &WorkloadPatch,
        what: &'static str,
    ) -> Result<Vec<Written>, ExecuteError> {
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        if workload.kind == WorkloadKind::PodGroup {
            return self.write_pod_group(workload, patch, what).await;
        }
        let body: Patch<serde_json::Value> = match patch {
            WorkloadPatch::Merge(value) => Patch::Merge(value.clone()),
            WorkloadPatch::Json(ops) => {
                Patch::Json(serde_json::from_value(ops.clone()).map_err(|e| {
                    ExecuteError::Malformed(format!("the JSON patch of {workload}: {e}"))
                })?)
            }
            WorkloadPatch::Nothing => return Ok(Vec::new()),
        };
        let key = &workload.key;
        let name = key.name();
        match workload.kind {
            WorkloadKind::Job => {
                let api = lean(&Api::<BatchJob>::namespaced(
                    self.client.clone(),
                    key.namespace(),
                ));
                let Lean(job) = self
                    .call(what, key, || api.patch(name, &params, &body))
                    .await?;
                Ok(vec![Written::Workload(Box::new(job))])
            }
            WorkloadKind::JobSet => {
                let api: Api<JobSet> = Api::namespaced(self.client.clone(), key.namespace());
                let jobset = self
                    .call(what, key, || api.patch(name, &params, &body))
                    .await?;
                Ok(vec![Written::JobSet(Box::new(jobset))])
            }
            WorkloadKind::PodGroup => unreachable!("written by write_pod_group"),
        }
    }

    /// A write to a pod group: a merge patch of each of its pods (found by their group label;
    /// one gone meanwhile is left so). Nothing else is written to a pod group: its release
    /// writes nothing, and its pods are let go by their pins.
    async fn write_pod_group(
        &self,
        workload: &WorkloadRef,
        patch: &WorkloadPatch,
        what: &'static str,
    ) -> Result<Vec<Written>, ExecuteError> {
        let body = match patch {
            WorkloadPatch::Nothing => return Ok(Vec::new()),
            WorkloadPatch::Merge(body) => body,
            WorkloadPatch::Json(_) => {
                return Err(ExecuteError::Malformed(format!(
                    "a JSON patch of {workload}: a pod group takes merge patches only"
                )));
            }
        };
        let mut written = Vec::new();
        for pod in self.group_pods(workload).await? {
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..PatchParams::default()
            };
            let api: Api<Pod> = Api::namespaced(self.client.clone(), pod.namespace());
            let patch = Patch::Merge(body);
            match self
                .call(what, &pod, || api.patch(pod.name(), &params, &patch))
                .await
            {
                Ok(pod) => written.push(Written::Pod(Box::new(pod))),
                Err(ExecuteError::Api { source, .. }) if is_code(&source, 404) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(written)
    }

    /// The pods of a pod group, by its label, as the API server lists them now.
    async fn group_pods(&self, workload: &WorkloadRef) -> Result<Vec<ObjectRef>, ExecuteError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), workload.key.namespace());
        let selector = format!(
            "{}={}",
            muster_api::wire::POD_GROUP_LABEL,
            workload.key.name()
        );
        let params = kube::api::ListParams::default().labels(&selector);
        let pods = self
            .call("listing the pod group", &workload.key, || api.list(&params))
            .await?;
        Ok(pods
            .items
            .iter()
            .map(|p| ObjectRef::of(&p.metadata))
            .collect())
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

    /// Records an Event about the workload behind a queue entry (failures are logged); for a
    /// pod group, on each of its pods.
    pub(super) async fn record_on_workload(&self, workload: &WorkloadRef, note: &Note) {
        if workload.kind == WorkloadKind::PodGroup {
            for pod in self.group_pods(workload).await.unwrap_or_default() {
                let reference = ObjectReference {
                    api_version: Some("v1".to_owned()),
                    kind: Some("Pod".to_owned()),
                    namespace: Some(pod.namespace().to_owned()),
                    name: Some(pod.name().to_owned()),
                    ..ObjectReference::default()
                };
                self.publish(&reference, note).await;
            }
            return;
        }
        let reference = ObjectReference {
            api_version: Some(workload.kind.api_version().to_owned()),
            kind: Some(workload.kind.label().to_owned()),
            namespace: Some(workload.key.namespace().to_owned()),
            name: Some(workload.key.name().to_owned()),
            ..ObjectReference::default()
        };
        self.publish(&reference, note).await;
    }
}
