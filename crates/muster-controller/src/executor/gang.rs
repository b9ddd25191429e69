//! Releasing a gang: its Service, then every pod created gated (a pod of its name that exists
//! already is taken only if it is the one this release plans), then every gate lifted — so no
//! pod of the gang can start before all of them exist.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use muster_api::ObjectRef;
use muster_api::wire::ADMISSION_GATE;

use super::{ExecuteError, Executor, FIELD_MANAGER, Written, already_exists, named};
use crate::lean::{Lean, lean};
use crate::release::{Gang, pinned_node};

impl Executor {
    /// Creates the gang's Service and pods (tolerating ones that exist), then removes Muster's
    /// scheduling gate from every pod.
    pub async fn release(&self, gang: &Gang) -> Result<Vec<Written>, ExecuteError> {
        if let Some(release) = &gang.workload {
            return self.release_workload(release).await;
        }
        if let Some(group) = &gang.scheduling_group {
            self.create_scheduling_group(group).await?;
        }
        let Some(namespace) = gang.pods.first().and_then(|p| p.metadata.namespace.clone()) else {
            return Ok(Vec::new());
        };
        let pp = PostParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        if let Some(service) = &gang.service {
            self.create_service(service, &pp).await?;
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let limit = self.gang_concurrency.max(1);
        let create_requests: Vec<_> = gang
            .pods
            .iter()
            .map(|pod| self.create_pod(&pods, &pp, pod))
            .collect();
        let created: Vec<Option<Written>> = futures::stream::iter(create_requests)
            .buffered(limit)
            .try_collect()
            .await?;
        // Every pod exists: open all the gates.
        let gate_patches: Vec<_> = gang
            .pods
            .iter()
            .filter(|pod| crate::release::is_gated(pod))
            .map(|pod| self.ungate(&pods, pod))
            .collect();
        let ungated: Vec<Written> = futures::stream::iter(gate_patches)
            .buffered(limit)
            .try_collect()
            .await?;
        Ok(created.into_iter().flatten().chain(ungated).collect())
    }

    /// Creates the gang's headless Service; one of an earlier attempt is pointed at this
    /// attempt's pods.
    async fn create_service(&self, service: &Service, pp: &PostParams) -> Result<(), ExecuteError> {
        let (namespace, service_name) = named(service)?;
        let services: Api<Service> = Api::namespaced(self.client.clone(), &namespace);
        match self
            .call("creating Service", &service_name, || {
                services.create(pp, service)
            })
            .await
        {
            Ok(_) => Ok(()),
            Err(ExecuteError::Api { source, .. }) if already_exists(&source) => {
                // An earlier attempt's Service: point it at this attempt's pods.
                let selector = service.spec.as_ref().map(|s| &s.selector);
                let patch = Patch::Merge(serde_json::json!({"spec": {"selector": selector}}));
                let params = PatchParams {
                    field_manager: Some(FIELD_MANAGER.to_owned()),
                    ..PatchParams::default()
                };
                self.call(
                    "pointing the Service at the new attempt",
                    &service_name,
                    || services.patch(&service_name, &params, &patch),
                )
                .await?;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Creates the gang's `scheduling.k8s.io` PodGroup, before any of its pods (one that
    /// exists, from an earlier try of this release, counts as made).
    async fn create_scheduling_group(
        &self,
        group: &k8s_openapi::api::scheduling::v1alpha2::PodGroup,
    ) -> Result<(), ExecuteError> {
        let (namespace, name) = named(group)?;
        let api: Api<k8s_openapi::api::scheduling::v1alpha2::PodGroup> =
            Api::namespaced(self.client.clone(), &namespace);
        let pp = PostParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        match self
            .call("creating the gang's PodGroup", &name, || {
                api.create(&pp, group)
            })
            .await
        {
            Ok(_) => Ok(()),
            Err(ExecuteError::Api { source, .. }) if already_exists(&source) => Ok(()),
            Err(e) => Err(e),
        }
    }

    pub(super) async fn create_pod(
        &self,
        pods: &Api<Pod>,
        pp: &PostParams,
        pod: &Pod,
    ) -> Result<Option<Written>, ExecuteError> {
        let (_, name) = named(pod)?;
        // The pod as made comes back whole; its managed fields are passed over unread.
        let (lean_pods, lean_pod) = (lean(pods), Lean(pod.clone()));
        match self
            .call("creating pod", &name, || lean_pods.create(pp, &lean_pod))
            .await
        {
            Ok(Lean(created)) => Ok(Some(Written::Pod(Box::new(created)))),
            Err(ExecuteError::Api { source, .. }) if already_exists(&source) => {
                // Made by an earlier try of this release — or by another release of this
                // attempt, rolled back or cut short, placed elsewhere: only the first counts
                // as made. The one that counts is folded in like a pod just created: until
                // the watch brings it (late, at times) the next pass would see the gang short
                // of it, take the gang for broken and evict it without deleting this pod,
                // which then ran beside the next attempt.
                let found = self
                    .call("reading an existing pod", &name, || pods.get(&name))
                    .await?;
                match displaced(&found, pod) {
                    None => Ok(Some(Written::Pod(Box::new(found)))),
                    Some(why) => Err(ExecuteError::Displaced {
                        pod: ObjectRef::new(pods.namespace().unwrap_or_default(), &name),
                        why,
                    }),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Lifts Muster's gate, keeping any other gate the template carries.
    pub(super) async fn ungate(&self, pods: &Api<Pod>, pod: &Pod) -> Result<Written, ExecuteError> {
        let (_, name) = named(pod)?;
        let remaining: Vec<_> = pod
            .spec
            .iter()
            .flat_map(|s| s.scheduling_gates.iter().flatten())
            .filter(|g| g.name != ADMISSION_GATE)
            .cloned()
            .collect();
        let body = serde_json::json!({"spec": {"schedulingGates": remaining}});
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        let patch = Patch::Merge(&body);
        let pod = self
            .retrying(self.gate_retry, true, "ungating pod", &name, || {
                pods.patch(&name, &params, &patch)
            })
            .await?;
        Ok(Written::Pod(Box::new(pod)))
    }
}

/// How an existing pod differs from the one a release plans under the same name, if it does:
/// being deleted, or pinned or bound to another node.
fn displaced(found: &Pod, planned: &Pod) -> Option<String> {
    if found.metadata.deletion_timestamp.is_some() {
        return Some("it is being deleted".to_owned());
    }
    let (pinned, wanted) = (pinned_node(found), pinned_node(planned));
    let bound = found.spec.as_ref().and_then(|s| s.node_name.as_deref());
    if pinned != wanted || bound.is_some_and(|b| Some(b) != wanted) {
        return Some(format!(
            "it is pinned to {}{}, this release pins it to {}",
            pinned.unwrap_or("no node"),
            bound
                .map(|b| format!(" (bound to {b})"))
                .unwrap_or_default(),
            wanted.unwrap_or("no node"),
        ));
    }
    None
}
