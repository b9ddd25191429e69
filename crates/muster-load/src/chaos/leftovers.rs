//! What a run leaves behind: once every job ended, no live pod, PodTemplate or
//! ProvisioningRequest and no ClusterQueue usage; once every job is deleted, nothing of them
//! (nor of a batch Job or JobSet: its queue entry, child Jobs and the Job or JobSet itself).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, PodTemplate, Service};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams};
use muster_api::jobset::JobSet;
use muster_api::{Amount, ClusterQueue, GpuJob, ProvisioningRequest};

use super::Found;
use super::workload::Workload;
use muster_testkit::checker::ViolationKind;

/// What the end of a run checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stage {
    /// Every job ended: no live pod, no PodTemplate or ProvisioningRequest, every
    /// ClusterQueue's usage and admitted count at zero.
    Ended,
    /// Every job deleted: none of them, their pods or Services is left either.
    Deleted,
}

/// Waits until `stage` holds, or until `deadline`; returns what is still wrong then.
pub(super) async fn wait_clean(
    client: &Client,
    workload: &Workload,
    stage: Stage,
    deadline: Instant,
) -> Vec<Found> {
    loop {
        let found = leftovers(client, workload, stage).await;
        if found.is_empty() || Instant::now() >= deadline {
            return found;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Deletes every labelled JobSet and Job and then every GpuJob of the workload's namespaces,
/// as their users would (a JobSet or Job in the background: the garbage collector deletes
/// its child Jobs, its pods and its queue entry).
pub(super) async fn delete_jobs(client: &Client, workload: &Workload) {
    for queue in &workload.queues {
        delete_all(&Api::<JobSet>::namespaced(client.clone(), &queue.name)).await;
        delete_all(&Api::<Job>::namespaced(client.clone(), &queue.name)).await;
        delete_all(&Api::<GpuJob>::namespaced(client.clone(), &queue.name)).await;
    }
}

/// Deletes every object of `api`, trying for ten seconds.
async fn delete_all<K>(api: &Api<K>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    for _ in 0..10 {
        if api
            .delete_collection(&DeleteParams::background(), &ListParams::default())
            .await
            .is_ok()
        {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn leftovers(client: &Client, workload: &Workload, stage: Stage) -> Vec<Found> {
    let mut found = Vec::new();
    let namespaces: BTreeSet<&str> = workload.queues.iter().map(|q| q.name.as_str()).collect();
    for namespace in namespaces {
        let names = |kind: &str, list: Result<Vec<(String, bool)>, kube::Error>| match list {
            Ok(names) => names
                .into_iter()
                .filter(|(_, live)| *live || stage == Stage::Deleted)
                .map(|(n, _)| {
                    (
                        ViolationKind::LeftBehind,
                        format!("{kind}/{namespace}/{n}"),
                        format!("{stage:?}"),
                    )
                })
                .collect::<Vec<_>>(),
            Err(e) => vec![(
                ViolationKind::LeftBehind,
                format!("{kind}/{namespace}"),
                format!("could not list: {e}"),
            )],
        };
        found.extend(names("Pod", list::<Pod>(client, namespace, live_pod).await));
        found.extend(names(
            "PodTemplate",
            list::<PodTemplate>(client, namespace, |_| true).await,
        ));
        found.extend(names(
            "ProvisioningRequest",
            list::<ProvisioningRequest>(client, namespace, |_| true).await,
        ));
        found.extend(names(
            "Service",
            list::<Service>(client, namespace, |_| false).await,
        ));
        found.extend(names(
            "GpuJob",
            list::<GpuJob>(client, namespace, |_| false).await,
        ));
        found.extend(names(
            "Job",
            list::<Job>(client, namespace, |_| false).await,
        ));
        found.extend(names(
            "JobSet",
            list::<JobSet>(client, namespace, |_| false).await,
        ));
    }
    let queues: Api<ClusterQueue> = Api::all(client.clone());
    match queues.list(&ListParams::default()).await {
        Ok(list) => {
            for queue in list {
                let name = queue.metadata.name.clone().unwrap_or_default();
                let status = queue.status.unwrap_or_default();
                let used: Vec<String> = status
                    .flavors_usage
                    .iter()
                    .flat_map(|f| f.resources.iter().map(move |r| (f, r)))
                    .filter(|(_, r)| Amount::parse(&r.total.0).map_or(true, |a| a.milli() != 0))
                    .map(|(f, r)| format!("{}/{}={}", f.name, r.name, r.total.0))
                    .collect();
                if !used.is_empty() || status.admitted_jobs != 0 {
                    found.push((
                        ViolationKind::UsageNotZero,
                        format!("ClusterQueue/{name}"),
                        format!(
                            "admittedJobs {}, usage [{}]",
                            status.admitted_jobs,
                            used.join(", ")
                        ),
                    ));
                }
            }
        }
        Err(e) => found.push((
            ViolationKind::UsageNotZero,
            "ClusterQueue".to_owned(),
            format!("could not list: {e}"),
        )),
    }
    found
}

/// A pod that has not ended.
fn live_pod(pod: &Pod) -> bool {
    !matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// The names of the objects of kind `K` in `namespace`, each with whether it counts while
/// the jobs still exist (`live`).
async fn list<K>(
    client: &Client,
    namespace: &str,
    live: fn(&K) -> bool,
) -> Result<Vec<(String, bool)>, kube::Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    Ok(api
        .list(&ListParams::default())
        .await?
        .into_iter()
        .filter_map(|o| Some((o.meta().name.clone()?, live(&o))))
        .collect())
}
