//! The provisioning bridge in the controller's passes: a job with quota but no block asks the
//! autoscaler (PodTemplates and a ProvisioningRequest), holds its quota while it waits (also
//! across a restart), starts on the new capacity with its pods consuming the request, retries
//! a failure with backoff and fails past the limit, and is evicted when the capacity is
//! revoked.

mod support;

use muster_api::wire::{JOB_LABEL, WORKLOAD_KIND_LABEL};
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use muster_api::gpujob::{GpuJobPhase, PendingReasonKind};
use muster_api::{ClusterQueue, GpuJob, ObjectRef, ProvisioningRequest};
use muster_controller::plan::{Action, plan};
use muster_controller::state::State;
use serde_json::json;
use support::{at, cluster, job, land_all, object, with_phase};

/// The fixture cluster, its queue buying capacity (40 GPUs of quota), and `jobs`.
fn buying(jobs: Vec<GpuJob>) -> State {
    let mut index = cluster(40, jobs);
    let mut queue: ClusterQueue = index
        .index()
        .cluster_queue("research")
        .cloned()
        .unwrap_or_default();
    queue.spec.provisioning = Some(object(json!({
        "className": "queued-provisioning.gke.io",
        "retry": {"limit": 1, "baseSeconds": 60, "maxSeconds": 60},
        "nodeSelectorFromDetails": {"cloud.google.com/gke-nodepool": "NodePoolName"}
    })));
    index.apply(queue);
    index.relist_begin::<ProvisioningRequest>();
    index.relist_done::<ProvisioningRequest>();
    index
}

/// 4 pods of 8 GPUs in one block: more than a block (2 nodes) holds.
fn big() -> GpuJob {
    job("big", 4, 0)
}

fn status_of(index: &State, key: &str) -> muster_api::GpuJobStatus {
    index
        .index()
        .job(key)
        .and_then(|j| j.status.clone())
        .unwrap_or_default()
}

/// The autoscaler sets `conditions` (type, status) on request `name`.
fn autoscaler_says(index: &mut State, name: &str, conditions: &[(&str, &str)]) {
    let mut request = index
        .index()
        .provisioning_request(&format!("team-a/{name}"))
        .cloned()
        .unwrap_or_default();
    let mut status = request.status.clone().unwrap_or_default();
    for (i, (type_, value)) in conditions.iter().enumerate() {
        status.conditions.push(Condition {
            type_: (*type_).to_owned(),
            status: (*value).to_owned(),
            reason: format!("{type_}Reason"),
            message: format!("{type_} is {value}"),
            observed_generation: None,
            last_transition_time: Time(at(i64::try_from(i).unwrap_or(0))),
        });
    }
    status.provisioning_class_details =
        BTreeMap::from([("NodePoolName".to_owned(), "dws-pool-1".to_owned())]);
    request.status = Some(status);
    index.apply::<ProvisioningRequest>(request);
}

/// New nodes in block b3, in the node pool the details name.
fn capacity_arrives(index: &mut State) {
    for n in ["n5", "n6", "n7", "n8"] {
        let mut node = support::node(n, "b3");
        if let Some(labels) = node.metadata.labels.as_mut() {
            labels.insert("cloud.google.com/gke-nodepool".into(), "dws-pool-1".into());
        }
        index.apply(node);
    }
}

/// The job failed: its Finished condition's message.
fn failed_with(index: &State, key: &str) -> String {
    let status = status_of(index, key);
    assert_eq!(status.phase, Some(GpuJobPhase::Failed));
    status
        .conditions
        .iter()
        .find(|c| c.type_ == "Finished")
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// The gang a pass releases.
fn released(actions: &[Action]) -> &muster_controller::release::Gang {
    match actions.iter().find(|a| a.kind() == "release") {
        Some(Action::Release { gang, .. }) => gang,
        _ => unreachable!("no release: {actions:#?}"),
    }
}

fn kinds(actions: &[Action], key: &str) -> Vec<&'static str> {
    actions
        .iter()
        .filter(|a| a.job().map(muster_api::ObjectRef::as_str) == Some(key))
        .map(Action::kind)
        .collect()
}

#[test]
fn a_job_without_a_block_buys_one_waits_for_it_and_starts_on_it() {
    let mut index = buying(vec![big(), job("small", 2, 5)]);
    let pass = plan(&mut index, at(10));
    let Some(Action::Provision {
        templates,
        requests,
        status,
        ..
    }) = pass.actions.iter().find(|a| a.kind() == "provision")
    else {
        unreachable!("{:#?}", pass.actions)
    };
    assert_eq!(templates.len(), 1);
    assert_eq!(requests[0].metadata.name.as_deref(), Some("big-1"));
    assert_eq!(requests[0].spec.pod_sets[0].count, 4);
    assert_eq!(status.phase, Some(GpuJobPhase::Provisioning));
    assert_eq!(status.provisioning_attempts, 1);
    let Some(Action::Provision { event, .. }) =
        pass.actions.iter().find(|a| a.kind() == "provision")
    else {
        unreachable!()
    };
    assert_eq!(event.reason, "Provisioning");
    assert!(
        event.message.contains("big-1 (attempt 1)"),
        "{}",
        event.message
    );
    land_all(&mut index, &pass.actions, 10);
    // While it waits, big holds 32 of the 40 GPUs: small (16) waits on quota.
    let pass = plan(&mut index, at(20));
    assert!(
        kinds(&pass.actions, "team-a/small")
            .iter()
            .all(|k| *k != "release")
    );
    land_all(&mut index, &pass.actions, 20);
    assert_eq!(
        status_of(&index, "team-a/small")
            .pending_reason
            .map(|r| r.kind),
        Some(PendingReasonKind::QuotaShort)
    );
    // The autoscaler accepts: its message reaches the job.
    autoscaler_says(&mut index, "big-1", &[("Accepted", "True")]);
    let pass = plan(&mut index, at(30));
    land_all(&mut index, &pass.actions, 30);
    let reason = status_of(&index, "team-a/big")
        .pending_reason
        .unwrap_or_default();
    assert_eq!(reason.kind, PendingReasonKind::Provisioning);
    assert!(
        reason.message.contains("Accepted is True"),
        "{}",
        reason.message
    );
    // Provisioned, and the nodes join: the gang is released onto them.
    autoscaler_says(
        &mut index,
        "big-1",
        &[("Accepted", "True"), ("Provisioned", "True")],
    );
    capacity_arrives(&mut index);
    let pass = plan(&mut index, at(40));
    let Some(Action::Release { gang, status, .. }) =
        pass.actions.iter().find(|a| a.kind() == "release")
    else {
        unreachable!("{:#?}", pass.actions)
    };
    for pod in &gang.pods {
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            annotations
                .get("autoscaling.x-k8s.io/consume-provisioning-request")
                .map(String::as_str),
            Some("big-1")
        );
        let selector = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_selector.clone())
            .unwrap_or_default();
        assert_eq!(
            selector
                .get("cloud.google.com/gke-nodepool")
                .map(String::as_str),
            Some("dws-pool-1")
        );
    }
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Provisioned" && c.status == "True")
    );
    assert_eq!(status.provisioning_request.as_deref(), Some("big-1"));
}

/// A batch Job's entry is kept without its pods' spec (only what a release writes of its
/// template); the capacity it buys is asked for with the whole spec.
#[test]
fn a_batch_job_s_entry_buys_capacity_for_its_pods_whole_spec() {
    let mut entry = big();
    entry
        .metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(WORKLOAD_KIND_LABEL.to_owned(), "Job".to_owned());
    entry.metadata.owner_references = object(json!([{"apiVersion": "batch/v1", "kind": "Job",
        "name": "big", "uid": "uid-big", "controller": true}]));
    let whole = entry.spec.pod_sets[0]
        .template
        .spec
        .clone()
        .unwrap_or_default();
    assert!(!whole.containers.is_empty());
    let mut index = buying(vec![entry, job("small", 2, 5)]);
    let kept = index
        .index()
        .job("team-a/big")
        .and_then(|j| j.spec.pod_sets[0].template.spec.clone())
        .unwrap_or_default();
    assert!(kept.containers.is_empty(), "kept without its containers");
    let pass = plan(&mut index, at(10));
    let Some(Action::Provision { templates, .. }) =
        pass.actions.iter().find(|a| a.kind() == "provision")
    else {
        unreachable!("{:#?}", pass.actions)
    };
    let asked = templates[0]
        .template
        .as_ref()
        .and_then(|t| t.spec.clone())
        .unwrap_or_default();
    assert_eq!(asked.containers, whole.containers);
}

#[test]
fn a_restarted_controller_keeps_waiting_for_the_same_request() {
    let mut first = buying(vec![big()]);
    let pass = plan(&mut first, at(10));
    land_all(&mut first, &pass.actions, 10);
    // A fresh controller lists the job (Provisioning) and its request.
    let listed = first.index().job("team-a/big").cloned().unwrap_or_default();
    let request = first
        .index()
        .provisioning_request("team-a/big-1")
        .cloned()
        .unwrap_or_default();
    let mut restarted = buying(vec![listed, job("small", 2, 5)]);
    restarted.apply(request);
    let pass = plan(&mut restarted, at(20));
    assert!(
        !pass.actions.iter().any(|a| a.kind() == "provision"),
        "no second request: {:#?}",
        pass.actions
    );
    assert!(
        !pass.actions.iter().any(|a| a.kind() == "release"),
        "quota still held"
    );
}

#[test]
fn a_failed_request_is_retried_after_backoff_then_the_job_fails() {
    let mut index = buying(vec![big()]);
    let pass = plan(&mut index, at(10));
    land_all(&mut index, &pass.actions, 10);
    autoscaler_says(&mut index, "big-1", &[("Failed", "True")]);
    let pass = plan(&mut index, at(20));
    assert_eq!(
        kinds(&pass.actions, "team-a/big"),
        ["unprovision", "job_status"]
    );
    land_all(&mut index, &pass.actions, 20);
    let status = status_of(&index, "team-a/big");
    assert!(status.admission.is_none() && status.provisioning_request.is_none());
    assert_eq!(
        status.pending_reason.map(|r| (r.kind, r.eta.map(|t| t.0))),
        Some((PendingReasonKind::Backoff, Some(at(80))))
    );
    assert!(
        plan(&mut index, at(50))
            .actions
            .iter()
            .all(|a| a.kind() != "provision")
    );
    let pass = plan(&mut index, at(81));
    let Some(Action::Provision { requests, .. }) =
        pass.actions.iter().find(|a| a.kind() == "provision")
    else {
        unreachable!("{:#?}", pass.actions)
    };
    assert_eq!(requests[0].metadata.name.as_deref(), Some("big-2"));
    land_all(&mut index, &pass.actions, 81);
    autoscaler_says(&mut index, "big-2", &[("Failed", "True")]);
    let pass = plan(&mut index, at(90));
    land_all(&mut index, &pass.actions, 90);
    let finished = failed_with(&index, "team-a/big");
    assert!(finished.contains("FailedReason"), "{finished}");
}

#[test]
fn revoked_capacity_evicts_the_running_gang_and_gives_the_request_back() {
    let mut index = buying(vec![big()]);
    let pass = plan(&mut index, at(10));
    land_all(&mut index, &pass.actions, 10);
    autoscaler_says(&mut index, "big-1", &[("Provisioned", "True")]);
    capacity_arrives(&mut index);
    let pass = plan(&mut index, at(20));
    land_all(&mut index, &pass.actions, 20);
    let gang = released(&pass.actions);
    for pod in &gang.pods {
        index.apply(with_phase(pod.clone(), "Running", true));
    }
    let first_gang = gang.pods.clone();
    let pass = plan(&mut index, at(30));
    land_all(&mut index, &pass.actions, 30);
    autoscaler_says(&mut index, "big-1", &[("CapacityRevoked", "True")]);
    let pass = plan(&mut index, at(40));
    let kinds = kinds(&pass.actions, "team-a/big");
    assert!(
        kinds.contains(&"evict") && kinds.contains(&"unprovision"),
        "{kinds:?}"
    );
    land_all(&mut index, &pass.actions, 40);
    let status = status_of(&index, "team-a/big");
    assert!(status.admission.is_none() && status.provisioning_request.is_none());
    assert_eq!(status.requeue_count, 1);
    // It asks again after the provisioning backoff (60 s here), like a failed request.
    assert_eq!(
        status.pending_reason.map(|r| (r.kind, r.eta.map(|t| t.0))),
        Some((PendingReasonKind::Backoff, Some(at(100))))
    );
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Provisioned" && c.status == "False"),
        "no longer on provisioned capacity"
    );
    assert!(
        plan(&mut index, at(90))
            .actions
            .iter()
            .all(|a| a.kind() != "provision")
    );
    // The evicted pods go, as do the nodes the autoscaler took back.
    for pod in &first_gang {
        index.delete(pod);
    }
    for n in ["n5", "n6", "n7", "n8"] {
        index.delete(&support::node(n, "b3"));
    }
    // The second request (retry.limit 1) gets capacity, which is taken back too: the job has
    // made retry.limit + 1 requests and fails rather than buying for ever.
    let pass = plan(&mut index, at(101));
    assert!(pass.actions.iter().any(|a| a.kind() == "provision"));
    land_all(&mut index, &pass.actions, 101);
    autoscaler_says(&mut index, "big-2", &[("Provisioned", "True")]);
    capacity_arrives(&mut index);
    let pass = plan(&mut index, at(110));
    land_all(&mut index, &pass.actions, 110);
    let gang = released(&pass.actions);
    for pod in &gang.pods {
        index.apply(with_phase(pod.clone(), "Running", true));
    }
    let pass = plan(&mut index, at(120));
    land_all(&mut index, &pass.actions, 120);
    autoscaler_says(&mut index, "big-2", &[("CapacityRevoked", "True")]);
    let pass = plan(&mut index, at(130));
    land_all(&mut index, &pass.actions, 130);
    let finished = failed_with(&index, "team-a/big");
    assert!(finished.contains("gave up after 2 requests"), "{finished}");
}

#[test]
fn provisioned_capacity_whose_nodes_are_still_joining_keeps_the_quota_and_is_not_bought_twice() {
    let mut index = buying(vec![big(), job("small", 2, 5)]);
    let pass = plan(&mut index, at(10));
    land_all(&mut index, &pass.actions, 10);
    // Provisioned, but no node has joined yet.
    autoscaler_says(
        &mut index,
        "big-1",
        &[("Accepted", "True"), ("Provisioned", "True")],
    );
    for t in [20, 30, 40] {
        let pass = plan(&mut index, at(t));
        for kind in ["provision", "release", "unprovision"] {
            assert!(
                pass.actions.iter().all(|a| a.kind() != kind),
                "t={t}: {:#?}",
                pass.actions
            );
        }
        land_all(&mut index, &pass.actions, t);
        let status = status_of(&index, "team-a/big");
        assert_eq!(status.phase, Some(GpuJobPhase::Provisioning));
        assert!(status.admission.is_some(), "the quota stays reserved");
        assert_eq!(status.provisioning_attempts, 1);
        let reason = status.pending_reason.unwrap_or_default();
        assert_eq!(reason.kind, PendingReasonKind::Provisioning);
        assert!(
            reason.message.contains("waiting for its nodes"),
            "{}",
            reason.message
        );
        assert_eq!(
            status_of(&index, "team-a/small")
                .pending_reason
                .map(|r| r.kind),
            Some(PendingReasonKind::QuotaShort)
        );
    }
    // The nodes join: big starts on them; small still waits for quota.
    capacity_arrives(&mut index);
    let pass = plan(&mut index, at(50));
    assert_eq!(kinds(&pass.actions, "team-a/big"), ["release"]);
    assert!(
        kinds(&pass.actions, "team-a/small")
            .iter()
            .all(|k| *k != "release")
    );
}

#[test]
fn without_the_provisioning_api_nothing_is_bought_and_nothing_is_given_up() {
    // The autoscaler's CRD is not served: the queue waits for today's nodes.
    let mut index = cluster(40, vec![big()]);
    let mut queue: ClusterQueue = index
        .index()
        .cluster_queue("research")
        .cloned()
        .unwrap_or_default();
    queue.spec.provisioning = buying(Vec::new())
        .index()
        .cluster_queue("research")
        .and_then(|q| q.spec.provisioning.clone());
    index.apply(queue);
    let pass = plan(&mut index, at(10));
    assert!(pass.actions.iter().all(|a| a.kind() != "provision"));
    land_all(&mut index, &pass.actions, 10);
    assert_eq!(
        status_of(&index, "team-a/big")
            .pending_reason
            .map(|r| r.kind),
        Some(PendingReasonKind::NoTopologyFit)
    );

    // A controller restarted mid-provisioning whose request list is not in yet: the job keeps
    // its quota and its request, and says what it waits for.
    let mut first = buying(vec![big()]);
    let pass = plan(&mut first, at(10));
    land_all(&mut first, &pass.actions, 10);
    let listed = first.index().job("team-a/big").cloned().unwrap_or_default();
    let mut restarted = cluster(40, vec![listed, job("small", 2, 5)]);
    let queue = first
        .index()
        .cluster_queue("research")
        .cloned()
        .unwrap_or_default();
    restarted.apply(queue);
    restarted.expect_kind(muster_controller::index::Kind::ProvisioningRequest);
    assert!(
        !restarted.index().ready(),
        "not ready before the requests are listed"
    );
    let pass = plan(&mut restarted, at(20));
    for kind in ["provision", "unprovision", "release"] {
        assert!(
            pass.actions.iter().all(|a| a.kind() != kind),
            "{kind}: {:#?}",
            pass.actions
        );
    }
    land_all(&mut restarted, &pass.actions, 20);
    let status = status_of(&restarted, "team-a/big");
    assert_eq!(status.phase, Some(GpuJobPhase::Provisioning));
    assert!(status.admission.is_some());
    assert!(
        status
            .pending_reason
            .is_some_and(|r| r.message.contains("not being watched")),
    );
    assert_eq!(
        status_of(&restarted, "team-a/small")
            .pending_reason
            .map(|r| r.kind),
        Some(PendingReasonKind::QuotaShort),
        "big still holds its quota"
    );
    // The list comes in with the request: followed as before.
    restarted.relist_begin::<ProvisioningRequest>();
    restarted.apply(
        first
            .index()
            .provisioning_request("team-a/big-1")
            .cloned()
            .unwrap_or_default(),
    );
    restarted.relist_done::<ProvisioningRequest>();
    assert!(restarted.index().ready());
    autoscaler_says(&mut restarted, "big-1", &[("Provisioned", "True")]);
    capacity_arrives(&mut restarted);
    let pass = plan(&mut restarted, at(30));
    assert_eq!(kinds(&pass.actions, "team-a/big"), ["release"]);
}

#[test]
fn a_drained_job_gives_its_requests_back() {
    let mut index = buying(vec![big()]);
    let pass = plan(&mut index, at(10));
    land_all(&mut index, &pass.actions, 10);
    assert!(index.index().provisioning_request("team-a/big-1").is_some());
    let mut queue: ClusterQueue = index
        .index()
        .cluster_queue("research")
        .cloned()
        .unwrap_or_default();
    queue.spec.stop_policy = muster_api::cluster_queue::StopPolicy::HoldAndDrain;
    index.apply(queue);
    let pass = plan(&mut index, at(20));
    let kinds = kinds(&pass.actions, "team-a/big");
    assert!(
        kinds.contains(&"evict") && kinds.contains(&"unprovision"),
        "{kinds:?}"
    );
    land_all(&mut index, &pass.actions, 20);
    assert!(index.index().provisioning_request("team-a/big-1").is_none());
    let status = status_of(&index, "team-a/big");
    assert!(status.admission.is_none() && status.provisioning_request.is_none());
}

#[test]
fn a_failed_release_onto_bought_capacity_is_rolled_back_and_retried_after_backoff() {
    let mut index = buying(vec![big(), job("small", 2, 5)]);
    let pass = plan(&mut index, at(10));
    land_all(&mut index, &pass.actions, 10);
    autoscaler_says(&mut index, "big-1", &[("Provisioned", "True")]);
    capacity_arrives(&mut index);
    let pass = plan(&mut index, at(40));
    let Some(release) = pass.actions.iter().find(|a| a.kind() == "release") else {
        unreachable!("{:#?}", pass.actions)
    };
    let Action::Release { gang, .. } = release else {
        unreachable!()
    };
    // The release fails after creating one pod, which the watch then shows.
    let made = gang.pods[0].clone();
    for action in &pass.actions {
        let result = if action.kind() == "release" {
            Err("the API server went away".to_owned())
        } else {
            Ok(Vec::new())
        };
        index.landed(action, result, at(40).as_second());
    }
    index.apply(made.clone());
    // The half-made gang is rolled back; nothing else gets big's quota meanwhile.
    let pass = plan(&mut index, at(41));
    assert_eq!(kinds(&pass.actions, "team-a/big"), ["delete_pods"]);
    assert!(pass.actions.iter().all(|a| a.kind() != "release"));
    land_all(&mut index, &pass.actions, 41);
    index.delete(&made);
    // Within the release's backoff: still nothing.
    let pass = plan(&mut index, at(45));
    assert!(
        pass.actions.iter().all(|a| a.kind() != "release"),
        "{:#?}",
        pass.actions
    );
    land_all(&mut index, &pass.actions, 45);
    assert_eq!(
        status_of(&index, "team-a/big").phase,
        Some(GpuJobPhase::Provisioning)
    );
    // After it: big is released onto its capacity again.
    let pass = plan(&mut index, at(61));
    assert_eq!(kinds(&pass.actions, "team-a/big"), ["release"]);
}

#[test]
fn a_queue_that_stops_buying_gives_the_request_up_and_queues_the_job_again() {
    let mut index = buying(vec![big()]);
    let pass = plan(&mut index, at(10));
    land_all(&mut index, &pass.actions, 10);
    assert!(index.index().provisioning_request("team-a/big-1").is_some());
    let mut queue: ClusterQueue = index
        .index()
        .cluster_queue("research")
        .cloned()
        .unwrap_or_default();
    queue.spec.provisioning = None;
    index.apply(queue);
    let pass = plan(&mut index, at(20));
    assert_eq!(
        kinds(&pass.actions, "team-a/big"),
        ["unprovision", "job_status"]
    );
    land_all(&mut index, &pass.actions, 20);
    assert!(index.index().provisioning_request("team-a/big-1").is_none());
    let status = status_of(&index, "team-a/big");
    assert!(status.admission.is_none() && status.provisioning_request.is_none());
}

#[test]
fn a_request_whose_delete_failed_is_deleted_by_a_later_pass() {
    let mut index = buying(vec![big()]);
    let pass = plan(&mut index, at(10));
    // The request is in flight: never taken for an orphan meanwhile.
    let again = plan(&mut index, at(11));
    assert!(again.actions.iter().all(|a| a.kind() != "unprovision"));
    land_all(&mut index, &pass.actions, 10);
    land_all(&mut index, &again.actions, 11);
    autoscaler_says(&mut index, "big-1", &[("Failed", "True")]);
    let pass = plan(&mut index, at(20));
    assert_eq!(
        kinds(&pass.actions, "team-a/big"),
        ["unprovision", "job_status"]
    );
    // The status lands; the delete fails.
    for action in &pass.actions {
        if action.kind() == "unprovision" {
            index.landed(action, Err("timeout".into()), at(20).as_second());
        } else {
            support::land(&mut index, action, 20);
        }
    }
    assert!(index.index().provisioning_request("team-a/big-1").is_some());
    let pass = plan(&mut index, at(21));
    let Some(Action::Unprovision {
        requests,
        templates,
        ..
    }) = pass.actions.iter().find(|a| a.kind() == "unprovision")
    else {
        unreachable!("{:#?}", pass.actions)
    };
    assert_eq!(requests, &["team-a/big-1"]);
    assert_eq!(templates, &["team-a/big-1-workers"]);
    land_all(&mut index, &pass.actions, 21);
    assert!(index.index().provisioning_request("team-a/big-1").is_none());
    assert!(
        plan(&mut index, at(22))
            .actions
            .iter()
            .all(|a| a.kind() != "unprovision")
    );
}

#[test]
fn a_release_onto_bought_capacity_cut_off_after_every_pod_exists_is_finished_as_provisioned() {
    let mut index = buying(vec![big()]);
    let pass = plan(&mut index, at(10));
    land_all(&mut index, &pass.actions, 10);
    autoscaler_says(&mut index, "big-1", &[("Provisioned", "True")]);
    capacity_arrives(&mut index);
    let pass = plan(&mut index, at(40));
    let Some(Action::Release { gang, .. }) = pass.actions.iter().find(|a| a.kind() == "release")
    else {
        unreachable!("{:#?}", pass.actions)
    };
    // Every pod was created, then the controller stopped before the status was written.
    let pods = gang.pods.clone();
    let mut restarted = buying(vec![
        index.index().job("team-a/big").cloned().unwrap_or_default(),
    ]);
    capacity_arrives(&mut restarted);
    restarted.apply(
        index
            .index()
            .provisioning_request("team-a/big-1")
            .cloned()
            .unwrap_or_default(),
    );
    for pod in pods {
        restarted.apply(pod);
    }
    let pass = plan(&mut restarted, at(50));
    let Some(Action::Release { status, .. }) = pass.actions.iter().find(|a| a.kind() == "release")
    else {
        unreachable!("{:#?}", pass.actions)
    };
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Provisioned" && c.status == "True"),
        "{:#?}",
        status.conditions
    );
    assert_eq!(status.provisioning_request.as_deref(), Some("big-1"));
}

#[test]
fn a_young_request_is_never_taken_for_an_orphan() {
    let mut index = cluster(40, vec![job("small", 1, 0)]);
    index.relist_begin::<ProvisioningRequest>();
    index.relist_done::<ProvisioningRequest>();
    // A request no job in the index names (yet): its job, or a status write of an earlier
    // leadership term, may still be on its way.
    let request: ProvisioningRequest = object(json!({
        "apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
        "metadata": {"name": "gone-1", "namespace": "team-a",
                     "labels": {JOB_LABEL: "gone"},
                     "creationTimestamp": at(5).to_string()},
        "spec": {"provisioningClassName": "queued-provisioning.gke.io",
                 "podSets": [{"podTemplateRef": {"name": "gone-1-workers"}, "count": 1}]}
    }));
    index.apply(request);
    let pass = plan(&mut index, at(10));
    assert!(pass.actions.iter().all(|a| a.kind() != "unprovision"));
    land_all(&mut index, &pass.actions, 10);
    let pass = plan(&mut index, at(400));
    assert_eq!(kinds(&pass.actions, "team-a/gone"), ["unprovision"]);
}

#[test]
fn a_young_request_of_a_job_that_ended_is_deleted_at_once() {
    let mut done = job("small", 1, 0);
    done.status = Some(muster_api::GpuJobStatus {
        phase: Some(muster_api::GpuJobPhase::Succeeded),
        ..muster_api::GpuJobStatus::default()
    });
    let mut index = cluster(40, vec![done]);
    index.relist_begin::<ProvisioningRequest>();
    index.relist_done::<ProvisioningRequest>();
    // Its delete was cut off as the job finished: nothing will ever name it again, so it does
    // not wait out the age that guards requests of live jobs.
    let request: ProvisioningRequest = object(json!({
        "apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
        "metadata": {"name": "small-1", "namespace": "team-a",
                     "labels": {JOB_LABEL: "small"},
                     "creationTimestamp": at(5).to_string()},
        "spec": {"provisioningClassName": "queued-provisioning.gke.io",
                 "podSets": [{"podTemplateRef": {"name": "small-1-workers"}, "count": 1}]}
    }));
    index.apply(request);
    let pass = plan(&mut index, at(10));
    assert_eq!(kinds(&pass.actions, "team-a/small"), ["unprovision"]);
}

/// A PodTemplate of Muster's for `job`'s pod set `workers`, made at second `created`.
fn template(name: &str, job: &str, created: i64) -> k8s_openapi::api::core::v1::PodTemplate {
    object(json!({
        "apiVersion": "v1", "kind": "PodTemplate",
        "metadata": {"name": name, "namespace": "team-a",
                     "labels": {JOB_LABEL: job},
                     "creationTimestamp": at(created).to_string()},
        "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}}
    }))
}

/// `index` with ProvisioningRequests and PodTemplates listed (none of either yet).
fn watching_templates(mut index: State) -> State {
    index.relist_begin::<ProvisioningRequest>();
    index.relist_done::<ProvisioningRequest>();
    index.relist_begin::<k8s_openapi::api::core::v1::PodTemplate>();
    index.relist_done::<k8s_openapi::api::core::v1::PodTemplate>();
    index
}

fn unprovisioned(
    actions: &[Action],
) -> Vec<(Vec<muster_api::ObjectRef>, Vec<muster_api::ObjectRef>)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Unprovision {
                requests,
                templates,
                ..
            } => Some((requests.clone(), templates.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_template_whose_request_was_never_made_goes_once_its_job_ended() {
    let mut done = job("small", 1, 0);
    done.status = Some(muster_api::GpuJobStatus {
        phase: Some(GpuJobPhase::Succeeded),
        ..muster_api::GpuJobStatus::default()
    });
    let mut index = watching_templates(cluster(40, vec![done]));
    // The controller stopped between the template's create and the request's: no request
    // names the template, and the job went on without buying capacity.
    index.apply(template("small-1-workers", "small", 5));
    let pass = plan(&mut index, at(10));
    assert_eq!(
        unprovisioned(&pass.actions),
        [(
            Vec::new(),
            vec![ObjectRef::new("team-a", "small-1-workers")]
        )]
    );
}

#[test]
fn a_template_of_a_live_job_that_no_request_names_goes_only_once_old() {
    // The job waits (no block holds it, and its queue does not buy capacity any more).
    let mut index = watching_templates(cluster(40, vec![big()]));
    index.apply(template("big-1-workers", "big", 5));
    let pass = plan(&mut index, at(10));
    // Its request may be on its way (a create in flight in another leadership term).
    assert!(
        unprovisioned(&pass.actions).is_empty(),
        "{:#?}",
        pass.actions
    );
    land_all(&mut index, &pass.actions, 10);
    let pass = plan(&mut index, at(400));
    assert_eq!(
        unprovisioned(&pass.actions),
        [(Vec::new(), vec![ObjectRef::new("team-a", "big-1-workers")])]
    );
}

#[test]
fn the_templates_of_a_jobs_current_request_are_kept_however_old() {
    let mut index = buying(vec![big()]);
    index.relist_begin::<k8s_openapi::api::core::v1::PodTemplate>();
    index.relist_done::<k8s_openapi::api::core::v1::PodTemplate>();
    let pass = plan(&mut index, at(10));
    land_all(&mut index, &pass.actions, 10);
    assert!(index.index().provisioning_request("team-a/big-1").is_some());
    // Made long ago (the request waits in the autoscaler's queue).
    index.apply(template("big-1-workers", "big", -1000));
    // Named by the live request.
    let pass = plan(&mut index, at(30));
    assert!(
        unprovisioned(&pass.actions).is_empty(),
        "{:#?}",
        pass.actions
    );
}

#[test]
fn a_labelled_job_buys_its_block_and_its_template_consumes_the_request() {
    let mut index = buying(Vec::new());
    index.apply::<k8s_openapi::api::batch::v1::Job>(object(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "train", "namespace": "team-a", "uid": "uid-train",
                     "resourceVersion": "1", "labels": {"muster.dev/queue-name": "research"}},
        "spec": {
            "suspend": true, "parallelism": 4, "completions": 4, "completionMode": "Indexed",
            "template": {
                "metadata": {"annotations": {"muster.dev/topology-required": "example.com/block"}},
                "spec": {"restartPolicy": "Never", "containers": [{
                    "name": "main", "image": "trainer:1",
                    "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}},
    })));
    // The entry is made, then admission finds no block of 4 nodes: it buys one.
    let mut bought = None;
    for t in 10..20 {
        let pass = plan(&mut index, at(t));
        if let Some(Action::Provision { requests, .. }) =
            pass.actions.iter().find(|a| a.kind() == "provision")
        {
            bought = requests[0].metadata.name.clone();
        }
        land_all(&mut index, &pass.actions, t);
        if bought.is_some() {
            break;
        }
    }
    assert_eq!(bought.as_deref(), Some("job-train-1"));
    assert_eq!(
        status_of(&index, "team-a/job-train").phase,
        Some(GpuJobPhase::Provisioning)
    );
    autoscaler_says(
        &mut index,
        "job-train-1",
        &[("Accepted", "True"), ("Provisioned", "True")],
    );
    capacity_arrives(&mut index);
    let pass = plan(&mut index, at(40));
    let gang = released(&pass.actions);
    let Some(workload) = gang.workload.as_ref() else {
        unreachable!("{gang:#?}")
    };
    let template = &workload.patch.body()["spec"]["template"];
    assert_eq!(
        template["metadata"]["annotations"]["autoscaling.x-k8s.io/consume-provisioning-request"],
        json!("job-train-1")
    );
    assert_eq!(
        template["spec"]["nodeSelector"]["cloud.google.com/gke-nodepool"],
        json!("dws-pool-1")
    );
    assert_eq!(workload.patch.body()["spec"]["suspend"], json!(false));
}

#[test]
fn a_labelled_job_released_onto_bought_capacity_without_its_entry_s_status_is_held_and_released_again()
 {
    let mut index = buying(Vec::new());
    let job = |suspend: bool, template_labels: serde_json::Value, status: serde_json::Value| {
        object::<k8s_openapi::api::batch::v1::Job>(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "team-a", "uid": "uid-train",
                         "resourceVersion": "1", "labels": {"muster.dev/queue-name": "research"}},
            "spec": {
                "suspend": suspend, "parallelism": 4, "completions": 4,
                "completionMode": "Indexed",
                "template": {
                    "metadata": {"labels": template_labels,
                                 "annotations": {"muster.dev/topology-required": "example.com/block"}},
                    "spec": {"restartPolicy": "Never", "containers": [{
                        "name": "main", "image": "trainer:1",
                        "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}},
            "status": status,
        }))
    };
    index.apply(job(true, json!({}), json!({})));
    for t in 10..20 {
        let pass = plan(&mut index, at(t));
        land_all(&mut index, &pass.actions, t);
    }
    assert_eq!(
        status_of(&index, "team-a/job-train").phase,
        Some(GpuJobPhase::Provisioning)
    );
    autoscaler_says(&mut index, "job-train-1", &[("Provisioned", "True")]);
    capacity_arrives(&mut index);
    let pass = plan(&mut index, at(40));
    assert!(kinds(&pass.actions, "team-a/job-train").contains(&"release"));
    // The Job's patch landed, then the controller stopped before the entry's status was
    // written: the next leader finds the Job running, its entry still buying capacity.
    let mut restarted = buying(Vec::new());
    restarted.apply(
        index
            .index()
            .job("team-a/job-train")
            .cloned()
            .unwrap_or_default(),
    );
    capacity_arrives(&mut restarted);
    restarted.apply(
        index
            .index()
            .provisioning_request("team-a/job-train-1")
            .cloned()
            .unwrap_or_default(),
    );
    let released = json!({"muster.dev/job-name": "job-train", "muster.dev/attempt": "0"});
    restarted.apply(job(
        false,
        released.clone(),
        json!({"active": 4, "startTime": "2026-01-01T00:00:41Z"}),
    ));
    // It is held again (left running, it would never settle and the release would wait
    // on it for ever).
    let pass = plan(&mut restarted, at(50));
    let held = pass.actions.iter().find_map(|a| match a {
        Action::PatchWorkload { patch, .. } => Some(patch.body()["spec"]["suspend"].clone()),
        _ => None,
    });
    assert_eq!(held, Some(json!(true)), "{:#?}", pass.actions);
    land_all(&mut restarted, &pass.actions, 50);
    // Once its controller took in the suspension, the bought capacity's release comes again.
    restarted.apply(job(
        true,
        released,
        json!({"conditions": [{"type": "Suspended", "status": "True"}]}),
    ));
    let again = (51..120).any(|t| {
        let pass = plan(&mut restarted, at(t));
        land_all(&mut restarted, &pass.actions, t);
        kinds(&pass.actions, "team-a/job-train").contains(&"release")
    });
    assert!(again, "never released again");
}
