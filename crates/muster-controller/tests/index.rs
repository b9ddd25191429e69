//! The index fed with watch events: relists drop what is gone, a late event never rolls an
//! object back, unreadable objects are reported instead of breaking the index, and capacity
//! comes from every bound pod — counted once.

mod support;

use k8s_openapi::api::core::v1::{Node, Pod};
use muster_api::gpujob::PendingReasonKind;
use muster_api::wire::{
    ATTEMPT_LABEL, CLUSTER_QUEUE_ANNOTATION, FLAVOR_ANNOTATION, GPU_DEVICES_ANNOTATION, JOB_LABEL,
    POD_INDEX_LABEL, POD_SET_LABEL,
};
use muster_api::{ClusterQueue, GpuJob, ObjectRef};
use muster_controller::index::{Kind, PodPhase};
use muster_controller::plan::{Action, plan};
use muster_controller::state::State;
use serde_json::json;
use support::{at, cluster, job, object, with_phase};

/// A pod Muster does not manage, bound to `node`, asking for `gpus`.
fn other_pod(name: &str, node: &str, gpus: u32, phase: &str) -> Pod {
    object(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "other"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x",
            "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]},
        "status": {"phase": phase}
    }))
}

fn pending_kind(index: &mut State, key: &str) -> Option<PendingReasonKind> {
    let pass = plan(index, at(10));
    pass.actions.iter().find_map(|a| match a {
        Action::JobStatus { job, status, .. } if job == key => {
            status.pending_reason.as_ref().map(|r| r.kind)
        }
        _ => None,
    })
}

#[test]
fn the_first_pass_waits_for_every_cache() {
    let mut index = State::new();
    assert!(!index.index().ready());
    index.relist_begin::<GpuJob>();
    index.apply(job("a", 1, 0));
    assert!(
        !index.index().is_synced(Kind::GpuJob),
        "synced only at the end of the list"
    );
    index.relist_done::<GpuJob>();
    assert!(index.index().is_synced(Kind::GpuJob));
    assert!(!index.index().ready());
    assert!(cluster(8, Vec::new()).index().ready());
}

#[test]
fn a_relist_drops_objects_that_are_gone() {
    let mut index = cluster(32, vec![job("a", 1, 0), job("b", 1, 0)]);
    index.relist_begin::<GpuJob>();
    index.apply(job("b", 1, 0));
    index.relist_done::<GpuJob>();
    assert!(index.index().job("team-a/a").is_none());
    assert!(index.index().job("team-a/b").is_some());
    index.relist_begin::<Node>();
    index.apply(support::node("n1", "b1"));
    index.relist_done::<Node>();
    assert_eq!(index.index().len().1, 1);
}

#[test]
fn a_late_event_never_rolls_a_job_back() {
    let mut index = cluster(32, Vec::new());
    let mut newer = job("a", 1, 0);
    newer.metadata.resource_version = Some("20".into());
    newer.spec.suspend = true;
    index.apply(newer);
    let mut older = job("a", 1, 0);
    older.metadata.resource_version = Some("19".into());
    index.apply(older);
    assert!(
        index
            .index()
            .job("team-a/a")
            .is_some_and(|j| j.spec.suspend)
    );
}

#[test]
fn a_late_write_response_never_rolls_a_pod_or_request_back() {
    let mut index = cluster(32, Vec::new());
    // The watch brings the pod bound and running; the create's response (older) lands after.
    let mut bound = other_pod("p", "n1", 8, "Running");
    bound.metadata.resource_version = Some("7".into());
    index.apply(bound);
    let mut created = other_pod("p", "n1", 8, "Pending");
    created.metadata.resource_version = Some("5".into());
    if let Some(spec) = created.spec.as_mut() {
        spec.node_name = None;
    }
    index.apply(created);
    let pod = index.index().pod("other/p").cloned();
    assert_eq!(pod.as_ref().and_then(|p| p.node.as_deref()), Some("n1"));
    assert_eq!(pod.map(|p| p.phase), Some(PodPhase::Running));
    assert!(
        index.index().base_usage("n1").is_some(),
        "its GPUs stay counted"
    );
    // A request the autoscaler already provisioned, then the create's response.
    let provisioned: muster_api::ProvisioningRequest = object(json!({
        "apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
        "metadata": {"name": "r", "namespace": "team-a", "resourceVersion": "12"},
        "spec": {"provisioningClassName": "queued-provisioning.gke.io", "podSets": []},
        "status": {"conditions": [{"type": "Provisioned", "status": "True", "reason": "R",
            "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    }));
    index.apply(provisioned);
    let mut response = index
        .index()
        .provisioning_request("team-a/r")
        .cloned()
        .unwrap_or_default();
    response.metadata.resource_version = Some("11".into());
    response.status = None;
    index.apply(response);
    assert!(
        index
            .index()
            .provisioning_request("team-a/r")
            .is_some_and(|r| r.status.is_some())
    );
}

#[test]
fn a_write_response_never_brings_a_deleted_object_back() {
    let mut index = cluster(32, Vec::new());
    let mut a = job("a", 1, 0);
    a.metadata.resource_version = Some("5".into());
    index.apply(a.clone());
    // The watch reports the job deleted; then the response of a write made before lands.
    let mut gone = a.clone();
    gone.metadata.resource_version = Some("7".into());
    index.delete(&gone);
    let mut response = a.clone();
    response.metadata.resource_version = Some("6".into());
    let action = Action::AddFinalizer {
        job: ObjectRef::new("team-a", "a"),
    };
    index.landed(
        &action,
        Ok(vec![muster_controller::executor::Written::Job(Box::new(
            response,
        ))]),
        0,
    );
    assert!(index.index().job("team-a/a").is_none());
    // A job created again under the same name is the watch's to report, and it is kept.
    let mut again = a;
    again.metadata.resource_version = Some("9".into());
    index.apply(again);
    assert!(index.index().job("team-a/a").is_some());
}

#[test]
fn the_deletion_of_an_old_object_leaves_a_newer_one_of_the_same_name() {
    let mut index = cluster(32, Vec::new());
    // The new pod (a write's response, version 12) is in before the old one's deletion event.
    let mut new = other_pod("p", "n1", 8, "Pending");
    new.metadata.resource_version = Some("12".into());
    index.apply(new);
    let mut old = other_pod("p", "n2", 8, "Running");
    old.metadata.resource_version = Some("9".into());
    index.delete(&old);
    assert_eq!(
        index
            .index()
            .pod("other/p")
            .and_then(|p| p.node.clone())
            .as_deref(),
        Some("n1")
    );
}

#[test]
fn an_object_a_relist_finds_gone_is_not_brought_back_by_a_late_response() {
    let mut index = cluster(32, vec![job("a", 1, 0)]);
    let listed = index.index().job("team-a/a").cloned().unwrap_or_default();
    // Deleted while the watch was down: the relist does not list it.
    index.relist_begin::<GpuJob>();
    index.relist_done::<GpuJob>();
    index.landed(
        &Action::AddFinalizer {
            job: ObjectRef::new("team-a", "a"),
        },
        Ok(vec![muster_controller::executor::Written::Job(Box::new(
            listed,
        ))]),
        0,
    );
    assert!(index.index().job("team-a/a").is_none());
}

#[test]
fn an_unreadable_node_holds_no_capacity_and_says_why() {
    let mut index = cluster(32, Vec::new());
    let bad: Node = object(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "labels": {"gpu": "h100"}},
        "status": {"allocatable": {"nvidia.com/gpu": "eight"}}
    }));
    index.apply(bad);
    assert!(index.index().node("n1").is_none());
    let reasons: Vec<_> = index.index().unreadable().collect();
    assert_eq!(reasons.len(), 1);
    assert!(reasons[0].0.contains("n1"), "{reasons:?}");
    // The index keeps serving everything else.
    assert!(index.index().node("n2").is_some());
}

#[test]
fn pods_muster_does_not_manage_take_capacity_while_they_run() {
    // Four 8-GPU nodes; another team's pods fill n1 and n3, one on each block.
    let mut index = cluster(64, vec![job("a", 2, 0)]);
    index.apply(other_pod("x", "n1", 8, "Running"));
    index.apply(other_pod("y", "n3", 8, "Running"));
    assert_eq!(
        pending_kind(&mut index, "team-a/a"),
        Some(PendingReasonKind::NoTopologyFit)
    );
    // One of them finishes: its GPUs are free again.
    let mut index = cluster(64, vec![job("a", 2, 0)]);
    index.apply(other_pod("x", "n1", 8, "Running"));
    index.apply(other_pod("y", "n3", 8, "Succeeded"));
    let pass = plan(&mut index, at(10));
    assert!(
        pass.actions
            .iter()
            .any(|a| matches!(a, Action::Release { job, .. } if job == "team-a/a"))
    );
    assert_eq!(
        index
            .index()
            .pod("other/y")
            .map(|p| (p.phase, p.usage.is_none())),
        Some((PodPhase::Succeeded, true))
    );
}

#[test]
fn a_running_gang_is_counted_once_not_as_pods_and_admission() {
    // Quota and nodes for exactly two 2-pod gangs; a runs with its pods bound.
    let mut index = cluster(32, vec![job("a", 2, 0), job("b", 2, 1)]);
    let pass = plan(&mut index, at(10));
    let Some(Action::Release { gang, status, .. }) = pass
        .actions
        .iter()
        .find(|a| matches!(a, Action::Release { job, .. } if job == "team-a/a"))
    else {
        unreachable!("{:#?}", pass.actions)
    };
    // A fresh index, as after a restart: a admitted (status) with its pods bound.
    let mut a = job("a", 2, 0);
    a.status = Some((**status).clone());
    let mut restarted = cluster(32, vec![a, job("b", 2, 1)]);
    for pod in &gang.pods {
        restarted.apply(with_phase(pod.clone(), "Running", true));
    }
    let pass = plan(&mut restarted, at(20));
    assert!(
        pass.actions
            .iter()
            .any(|x| matches!(x, Action::Release { job, .. } if job == "team-a/b")),
        "b fits beside a: a's pods are not booked twice\n{:#?}",
        pass.actions
    );
}

#[test]
fn a_gang_pod_holds_its_node_until_it_finishes() {
    let mut index = cluster(32, vec![job("a", 2, 0)]);
    let pass = plan(&mut index, at(10));
    let Some(Action::Release { gang, .. }) = pass
        .actions
        .iter()
        .find(|a| matches!(a, Action::Release { .. }))
    else {
        unreachable!("{:#?}", pass.actions)
    };
    let holding = |index: &State| index.index().holding_pods_of("team-a/a").count();
    for pod in &gang.pods {
        index.apply(with_phase(pod.clone(), "Running", true));
    }
    assert_eq!(holding(&index), 2);
    // Updated in place: counted once.
    index.apply(with_phase(gang.pods[0].clone(), "Running", true));
    assert_eq!(holding(&index), 2);
    index.apply(with_phase(gang.pods[0].clone(), "Succeeded", false));
    assert_eq!(holding(&index), 1);
    assert_eq!(index.index().pods_of("team-a/a").count(), 2);
    index.delete(&gang.pods[1]);
    assert_eq!(holding(&index), 0);
    assert_eq!(index.index().pods_of("team-a/a").count(), 1);
    let _ = plan(&mut index, at(20));
}

#[test]
fn an_invalid_job_gets_a_condition_naming_the_field_and_others_still_run() {
    let mut bad = job("bad", 1, 0);
    bad.spec.pod_sets[0].count = 0;
    let mut index = cluster(32, vec![bad, job("good", 1, 1)]);
    let pass = plan(&mut index, at(10));
    let status = pass.actions.iter().find_map(|a| match a {
        Action::JobStatus { job, status, .. } if job == "team-a/bad" => Some(status.clone()),
        _ => None,
    });
    let status = status.unwrap_or_default();
    let Some(valid) = status.conditions.iter().find(|c| c.type_ == "Valid") else {
        unreachable!("no Valid condition: {status:#?}")
    };
    assert_eq!(valid.status, "False");
    assert!(
        valid.message.contains("podSets[0].count"),
        "{}",
        valid.message
    );
    assert!(
        pass.actions
            .iter()
            .any(|a| matches!(a, Action::Release { job, .. } if job == "team-a/good"))
    );
}

#[test]
fn a_cluster_queue_status_is_written_only_when_it_changes() {
    let mut index = cluster(32, vec![job("a", 1, 0)]);
    let pass = plan(&mut index, at(10));
    let Some(Action::ClusterQueueStatus { status, .. }) = pass
        .actions
        .iter()
        .find(|a| matches!(a, Action::ClusterQueueStatus { .. }))
    else {
        unreachable!("{:#?}", pass.actions)
    };
    assert_eq!(status.admitted_jobs, 1);
    let mut queue: ClusterQueue = index
        .index()
        .cluster_queue("research")
        .cloned()
        .unwrap_or_default();
    queue.status = Some(status.clone());
    for action in &pass.actions {
        index.landed(action, Ok(Vec::new()), 0);
    }
    index.apply(queue);
    let again = plan(&mut index, at(11));
    assert!(
        !again
            .actions
            .iter()
            .any(|a| matches!(a, Action::ClusterQueueStatus { .. })),
        "{:#?}",
        again.actions
    );
}

#[test]
fn a_local_queue_reports_the_quota_its_jobs_hold_per_flavor() {
    let mut index = cluster(32, vec![job("a", 1, 0), job("b", 2, 1), job("c", 4, 2)]);
    let pass = plan(&mut index, at(10));
    let Some(Action::LocalQueueStatus { status, .. }) = pass
        .actions
        .iter()
        .find(|a| matches!(a, Action::LocalQueueStatus { .. }))
    else {
        unreachable!("{:#?}", pass.actions)
    };
    // a (8 GPUs) and b (16) run; c (32) waits for quota.
    assert_eq!((status.admitted_jobs, status.pending_jobs), (2, 1));
    let gpus: Vec<(String, String, String)> = status
        .flavors_usage
        .iter()
        .flat_map(|f| {
            f.resources
                .iter()
                .map(|r| (f.name.clone(), r.name.clone(), r.total.0.clone()))
        })
        .collect();
    assert_eq!(
        gpus,
        [("h100".into(), "nvidia.com/gpu".into(), "24".into())]
    );
}

#[test]
fn the_per_node_sum_follows_pods_through_their_lives() {
    let mut index = cluster(64, Vec::new());
    let gpus = |index: &State| {
        index
            .index()
            .base_usage("n1")
            .map_or(0, |r| r.get("nvidia.com/gpu").milli() / 1000)
    };
    index.apply(other_pod("x", "n1", 2, "Running"));
    index.apply(other_pod("y", "n1", 3, "Running"));
    assert_eq!(gpus(&index), 5);
    // Updated in place: counted once.
    index.apply(other_pod("x", "n1", 2, "Running"));
    assert_eq!(gpus(&index), 5);
    index.apply(other_pod("x", "n1", 2, "Succeeded"));
    assert_eq!(gpus(&index), 3);
    index.delete(&other_pod("y", "n1", 3, "Running"));
    assert_eq!(gpus(&index), 0);
    assert!(index.index().base_usage("n1").is_none());
    // A relist that no longer lists a pod drops its usage too.
    index.apply(other_pod("z", "n1", 4, "Running"));
    index.relist_begin::<Pod>();
    index.relist_done::<Pod>();
    assert_eq!(gpus(&index), 0);
}

#[test]
fn nodes_that_join_or_change_are_seen_by_the_next_pass() {
    // Quota for two gangs, nodes for one: b waits on topology.
    let mut index = cluster(64, vec![job("a", 4, 0)]);
    let pass = plan(&mut index, at(10));
    assert!(
        !pass
            .actions
            .iter()
            .any(|a| matches!(a, Action::Release { .. })),
        "a 4-node gang does not fit a 2-node block"
    );
    for action in &pass.actions {
        index.landed(action, Ok(Vec::new()), 0);
    }
    // A bigger block joins: the cached arrangement of nodes is rebuilt.
    for n in ["n5", "n6", "n7", "n8"] {
        index.apply(support::node(n, "b3"));
    }
    let pass = plan(&mut index, at(20));
    assert!(
        pass.actions
            .iter()
            .any(|a| matches!(a, Action::Release { job, .. } if job == "team-a/a")),
        "{:#?}",
        pass.actions
    );
}

/// A share pod Muster released books the device it was counted on (its vGPU's percentage of
/// cores as milli-GPU), not HAMi's resources, so that a restarted controller sees the device
/// taken.
#[test]
fn a_share_pod_books_the_device_it_names() {
    let mut index = cluster(16, vec![]);
    index.apply::<Pod>(object(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "serve-workers-0-a0", "namespace": "team-a",
            "labels": {JOB_LABEL: "serve", POD_SET_LABEL: "workers",
                POD_INDEX_LABEL: "0", ATTEMPT_LABEL: "0"},
            "annotations": {CLUSTER_QUEUE_ANNOTATION: "research", FLAVOR_ANNOTATION: "h100",
                GPU_DEVICES_ANNOTATION: "3"},
            "ownerReferences": [{"apiVersion": "muster.dev/v1alpha1", "kind": "GpuJob",
                "name": "serve", "uid": "uid-serve"}]},
        "spec": {"nodeName": "n1", "containers": [{"name": "main", "image": "x",
            "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "25",
                "nvidia.com/gpumem-percentage": "25"}}}]},
        "status": {"phase": "Running"}
    })));
    let pod = index.index().pod("team-a/serve-workers-0-a0");
    assert_eq!(
        pod.and_then(|p| p.member.as_ref())
            .map(|m| m.devices.clone()),
        Some(vec![3])
    );
    let usage = pod.and_then(|p| p.usage.clone()).unwrap_or_default();
    assert_eq!(
        usage.get("muster.dev/gpu-device-3"),
        muster_api::Amount::from_milli(250)
    );
    assert!(usage.get("nvidia.com/gpucores").is_zero());
    assert_eq!(
        usage.get("nvidia.com/gpu"),
        muster_api::Amount::from_units(1)
    );
}
