//! Carrying out an admission on the API server: create the gang's Service and every pod (all
//! still gated), and only then lift the `muster.dev/admission` gate from every pod in one
//! burst, so the kube-scheduler sees the whole gang at once.
//!
//! Every step is idempotent: names are deterministic and an object that already exists (from
//! an earlier, interrupted attempt) counts as created, so a controller that restarts mid-way
//! finishes the release instead of duplicating it.

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use muster_api::validation::ADMISSION_GATE;

use crate::release::Gang;

/// Why a release could not be completed (the caller retries with backoff).
#[derive(Debug, thiserror::Error)]
pub enum ExecuteError {
    /// An object has no namespace or name (the release builder always sets both).
    #[error("{0} has no namespace or name")]
    Unnamed(&'static str),
    /// The API server refused a request.
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

fn already_exists(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 409)
}

fn named<K: Resource>(object: &K, kind: &'static str) -> Result<(String, String), ExecuteError> {
    let meta = object.meta();
    match (&meta.namespace, &meta.name) {
        (Some(ns), Some(name)) => Ok((ns.clone(), name.clone())),
        _ => Err(ExecuteError::Unnamed(kind)),
    }
}

/// Creates the gang's Service and pods (tolerating ones that exist), then removes Muster's
/// scheduling gate from every pod. Requests go one at a time, in pod order.
pub async fn release(client: &Client, gang: &Gang) -> Result<(), ExecuteError> {
    let (namespace, name) = named(&gang.service, "the Service")?;
    let services: Api<Service> = Api::namespaced(client.clone(), &namespace);
    match services.create(&PostParams::default(), &gang.service).await {
        Ok(_) => {}
        Err(e) if already_exists(&e) => {}
        Err(source) => {
            return Err(ExecuteError::Api {
                action: "creating Service",
                object: name,
                source,
            });
        }
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    for pod in &gang.pods {
        let (_, name) = named(pod, "a pod")?;
        match pods.create(&PostParams::default(), pod).await {
            Ok(_) => {}
            Err(e) if already_exists(&e) => {}
            Err(source) => {
                return Err(ExecuteError::Api {
                    action: "creating pod",
                    object: name,
                    source,
                });
            }
        }
    }
    // Every pod exists: open all the gates.
    for pod in &gang.pods {
        let (_, name) = named(pod, "a pod")?;
        let remaining: Vec<_> = pod
            .spec
            .iter()
            .flat_map(|s| s.scheduling_gates.iter().flatten())
            .filter(|g| g.name != ADMISSION_GATE)
            .cloned()
            .collect();
        let patch = serde_json::json!({"spec": {"schedulingGates": remaining}});
        pods.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| ExecuteError::Api {
                action: "ungating pod",
                object: name.clone(),
                source,
            })?;
    }
    Ok(())
}
