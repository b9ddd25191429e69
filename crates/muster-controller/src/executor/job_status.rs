//! Writes of a job's status and what follows a failed one: the status goes only onto the
//! version of the job its pass read (see [`JobRead`]) and is decided again on a conflict, and
//! a write that failed is read back, since it may have been carried out.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use muster_api::{GpuJob, GpuJobStatus, ObjectRef};

use super::{ExecuteError, Executor, Written, is_code, named, status_params, whole_status};
use crate::action::{Action, JobRead};
use crate::lean::{Lean, lean};

impl Executor {
    /// After `action` failed: what it may have written, read afresh. A failed request is
    /// not one the API server did not carry out — the answer may have been lost on the way
    /// back — so the job's status may show the admission, eviction or request for capacity
    /// this replica takes for unwritten. Until its watch brings that change (a watch cut
    /// short may lag by many seconds), the next pass would count the job as holding nothing
    /// and give its quota to another. So the job is read back (a consistent read), with,
    /// for a release, its pods and, for a request for capacity, its ProvisioningRequests:
    /// an admitted job whose pods the index lacks would look broken. Objects already gone
    /// are left out. Meant for an action that [`Action::writes_job_status`]; for any other
    /// job action it reads the job alone.
    pub async fn read_back(&self, action: &Action) -> Result<Vec<Written>, ExecuteError> {
        let Some(key) = action.job() else {
            return Ok(Vec::new());
        };
        let (namespace, name) = (key.namespace(), key.name());
        let mut read = Vec::new();
        let jobs: Api<GpuJob> = Api::namespaced(self.client.clone(), namespace);
        let job = self
            .retrying(self.read_retry, false, "reading GpuJob back", key, || {
                jobs.get_opt(name)
            })
            .await?;
        read.extend(job.map(|job| Written::Job(Box::new(job))));
        match action {
            Action::Release { gang, .. } => {
                if let Some(release) = &gang.workload {
                    // A release whose status went first may have patched the Job too: an
                    // admitted entry beside a Job still held would look never released.
                    read.extend(self.read_workload_back(&release.workload).await?);
                }
                let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
                let selected = ListParams::default()
                    .labels(&format!("{}={name}", muster_api::wire::JOB_LABEL));
                let listed = self
                    .retrying(
                        self.read_retry,
                        false,
                        "reading the gang's pods back",
                        key,
                        || pods.list(&selected),
                    )
                    .await?;
                read.extend(listed.items.into_iter().map(|p| Written::Pod(Box::new(p))));
            }
            Action::Provision { requests, .. } => {
                for request in requests {
                    let (namespace, name) = named(request)?;
                    let api: Api<muster_api::ProvisioningRequest> =
                        Api::namespaced(self.client.clone(), &namespace);
                    let request = self
                        .retrying(
                            self.read_retry,
                            false,
                            "reading ProvisioningRequest back",
                            &name,
                            || api.get_opt(&name),
                        )
                        .await?;
                    read.extend(request.map(|r| Written::Request(Box::new(r))));
                }
            }
            _ => {}
        }
        Ok(read)
    }

    /// The Job or JobSet `workload` as the API server has it now (nothing when it is gone,
    /// or for a pod group, whose pods are read back with the gang's).
    async fn read_workload_back(
        &self,
        workload: &crate::workload::WorkloadRef,
    ) -> Result<Option<Written>, ExecuteError> {
        use crate::workload::WorkloadKind;
        let key = &workload.key;
        Ok(match workload.kind {
            WorkloadKind::Job => {
                let api = lean(&Api::<crate::index::BatchJob>::namespaced(
                    self.client.clone(),
                    key.namespace(),
                ));
                self.retrying(self.read_retry, false, "reading Job back", key, || {
                    api.get_opt(key.name())
                })
                .await?
                .map(|Lean(job)| Written::Workload(Box::new(job)))
            }
            WorkloadKind::JobSet => {
                let api: Api<muster_api::jobset::JobSet> =
                    Api::namespaced(self.client.clone(), key.namespace());
                self.retrying(self.read_retry, false, "reading JobSet back", key, || {
                    api.get_opt(key.name())
                })
                .await?
                .map(|jobset| Written::JobSet(Box::new(jobset)))
            }
            WorkloadKind::PodGroup => None,
        })
    }

    /// Writes a job's whole status (see [`whole_status`]), onto the version `read` only.
    ///
    /// When that version is gone (409 Conflict), the job is read afresh and the write decided
    /// again: already written (an earlier attempt landed and its answer was lost) — done;
    /// changed only where the decision does not look (its finalizer, labels, annotations) —
    /// written onto the new version; changed in what the decision read, or gone —
    /// [`ExecuteError::Superseded`], and the next pass decides from the fresh read.
    pub(super) async fn write_status(
        &self,
        key: &ObjectRef,
        status: &GpuJobStatus,
        read: Option<&JobRead>,
    ) -> Result<GpuJob, ExecuteError> {
        let (namespace, name) = (key.namespace(), key.name());
        // The job as written comes back whole; its managed fields are passed over unread.
        let api = lean(&Api::<GpuJob>::namespaced(self.client.clone(), namespace));
        let params = status_params();
        let Some((read, mut version)) = read.and_then(|r| Some((r, r.resource_version.clone()?)))
        else {
            let patch = whole_status(key, status, None)?;
            return self
                .call("writing GpuJob status", key, || {
                    api.patch_status(name, &params, &patch)
                })
                .await
                .map(Lean::into_inner);
        };
        let superseded = |why: &str| ExecuteError::Superseded {
            job: key.to_owned(),
            why: why.to_owned(),
        };
        for _ in 0..self.retry.attempts.max(1) {
            let patch = whole_status(key, status, Some(&version))?;
            // A conflict is an answer, not a fault to retry as it stands.
            let written = self
                .call("writing GpuJob status", key, || async {
                    match api.patch_status(name, &params, &patch).await {
                        Err(e) if is_code(&e, 409) => Ok(None),
                        other => other.map(Some),
                    }
                })
                .await?;
            if let Some(Lean(job)) = written {
                return Ok(job);
            }
            let Lean(current) = self
                .call("reading GpuJob after a conflict", key, || api.get_opt(name))
                .await?
                .ok_or_else(|| superseded("it is gone"))?;
            if serde_json::to_value(&current.status).ok() == serde_json::to_value(Some(status)).ok()
            {
                return Ok(current);
            }
            if !read.holds_for(&current) {
                return Err(superseded("its spec, status or deletion moved on"));
            }
            version = current
                .metadata
                .resource_version
                .clone()
                .ok_or_else(|| superseded("it has no resourceVersion"))?;
        }
        Err(superseded("it kept changing"))
    }
}
