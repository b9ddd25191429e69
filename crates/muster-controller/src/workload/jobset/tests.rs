//! A JobSet's queue entry, its release and restore patches (applied as the API server
//! applies them), its pins, and what its conditions say.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Toleration;
use muster_admission::PodSetPlacement;
use muster_api::ResourceFlavorSpec;
use muster_api::wire::{ADMISSION_GATE, JOB_LABEL, POD_INDEX_LABEL, QUEUE_NAME_LABEL};
use serde_json::{Value, json};

use super::*;
use crate::workload::Run;

/// A JobSet of `replicas` Indexed Jobs of `pods` pods each, as the API server stores it;
/// `exclusive` puts each child Job alone in one block. Its pods ask for one TPU v5p slice of
/// 4 hosts each unless `exclusive`.
fn stored_jobset(replicas: i32, pods: i32, exclusive: bool) -> JobSet {
    let (annotations, selector) = if exclusive {
        (
            json!({"alpha.jobset.sigs.k8s.io/exclusive-topology": "example.com/block"}),
            json!({"team": "a"}),
        )
    } else {
        (
            json!({}),
            json!({"cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice",
                   "cloud.google.com/gke-tpu-topology": "2x2x4"}),
        )
    };
    serde_json::from_value(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "multislice", "namespace": "team-a", "uid": "uid-js",
                     "labels": {QUEUE_NAME_LABEL: "research"}, "annotations": annotations},
        "spec": {"suspend": true, "replicatedJobs": [{
            "name": "slice", "replicas": replicas,
            "template": {"spec": {
                "parallelism": pods, "completions": pods, "completionMode": "Indexed",
                "template": {"spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": selector,
                    "tolerations": [{"key": "team-a", "operator": "Exists"}],
                    "containers": [{"name": "jax", "image": "jax:1",
                                    "resources": {"limits": {"google.com/tpu": "4"}}}]}}}}}]}}))
    .unwrap_or_else(|e| unreachable!("{e}"))
}

fn v5p() -> ResourceFlavorSpec {
    ResourceFlavorSpec {
        node_labels: BTreeMap::from([("pool-kind".to_owned(), "tpu".to_owned())]),
        tolerations: vec![Toleration {
            key: Some("google.com/tpu".to_owned()),
            operator: Some("Exists".to_owned()),
            ..Toleration::default()
        }],
        ..ResourceFlavorSpec::default()
    }
}

fn entry_of(jobset: &JobSet) -> GpuJob {
    Run::JobSet(jobset)
        .entry()
        .unwrap_or_else(|e| unreachable!("{e:?}"))
}

fn apply(jobset: &JobSet, patch: &WorkloadPatch) -> Result<JobSet, String> {
    let mut doc = serde_json::to_value(jobset).map_err(|e| e.to_string())?;
    match patch {
        WorkloadPatch::Json(ops) => {
            let ops: json_patch::Patch =
                serde_json::from_value(ops.clone()).map_err(|e| e.to_string())?;
            json_patch::patch(&mut doc, &ops).map_err(|e| e.to_string())?;
        }
        WorkloadPatch::Merge(body) => json_patch::merge(&mut doc, body),
        WorkloadPatch::Nothing => {}
    }
    serde_json::from_value(doc).map_err(|e| e.to_string())
}

fn placed(name: &str, nodes: std::ops::Range<usize>) -> PodSetPlacement {
    PodSetPlacement {
        name: name.to_owned(),
        flavor: "v5p".to_owned(),
        domain: Vec::new(),
        nodes: nodes.map(|i| format!("host-{i}")).collect(),
        devices: Vec::new(),
    }
}

/// Where the release placed `pod_sets` of the entry `jobset-multislice`, on attempt `attempt`.
fn slices_placement<'a>(
    pod_sets: &'a [PodSetPlacement],
    flavors: &'a BTreeMap<String, ResourceFlavorSpec>,
    attempt: i32,
) -> Placement<'a> {
    Placement {
        entry: "jobset-multislice",
        cluster_queue: "tpu",
        pod_sets,
        flavors,
        attempt,
    }
}

fn member(replica: usize, completion: usize) -> GangMember {
    GangMember {
        job: ObjectRef::new("team-a", "jobset-multislice"),
        pod_set: "slice".to_owned(),
        index: completion,
        attempt: 0,
        cluster_queue: "tpu".to_owned(),
        flavor: "v5p".to_owned(),
        domain: Vec::new(),
        pinned: None,
        devices: Vec::new(),
        replicated_job: Some("slice".to_owned()),
        replica: Some(replica),
        completion: Some(completion),
    }
}

#[test]
fn a_tpu_jobset_is_one_entry_of_one_slice_per_replica_owned_by_the_jobset() {
    let jobset = stored_jobset(2, 4, false);
    let entry = entry_of(&jobset);
    assert_eq!(entry.metadata.name.as_deref(), Some("jobset-multislice"));
    let workload = crate::workload::workload_of(&entry);
    assert_eq!(
        workload,
        Some(crate::workload::WorkloadRef::jobset(ObjectRef::new(
            "team-a",
            "multislice"
        )))
    );
    assert!(Run::JobSet(&jobset).is_entry(&entry));
    let [set] = entry.spec.pod_sets.as_slice() else {
        unreachable!("one pod set: {:?}", entry.spec.pod_sets)
    };
    assert_eq!((set.name.as_str(), set.count), ("slice", 8));
    let tpu = set.topology.as_ref().and_then(|t| t.tpu.as_ref());
    assert_eq!(tpu.and_then(|t| t.slices), Some(2));
    assert!(!edited_since(&entry, &jobset), "read as it stands");
}

#[test]
fn the_release_writes_each_template_and_unsuspends_and_the_restore_gives_the_user_s_back() {
    let jobset = stored_jobset(2, 4, false);
    let entry = entry_of(&jobset);
    let flavors = BTreeMap::from([("v5p".to_owned(), v5p())]);
    let pod_sets = [placed("slice", 0..8)];
    let placement = slices_placement(&pod_sets, &flavors, 2);
    let patch = release_patch(&entry, &jobset, &placement).unwrap_or_else(|e| unreachable!("{e}"));
    let ops = patch.body().as_array().cloned().unwrap_or_default();
    assert_eq!(
        ops.first(),
        Some(&json!({"op": "test", "path": "/spec/replicatedJobs/0/name", "value": "slice"})),
        "the replicated Job is named before its template is written"
    );
    let released = apply(&jobset, &patch).unwrap_or_else(|e| unreachable!("{e}"));
    assert_eq!(released.spec.suspend, Some(false));
    assert!(templates_are(&entry, &released, Some(&placement)));
    assert!(carries_release(&released));
    let template = pod_template(&released.spec.replicated_jobs[0])
        .cloned()
        .unwrap_or_default();
    let meta = template.metadata.unwrap_or_default();
    assert_eq!(
        meta.labels
            .unwrap_or_default()
            .get(JOB_LABEL)
            .map(String::as_str),
        Some("jobset-multislice")
    );
    let spec = template.spec.unwrap_or_default();
    let selector = spec.node_selector.unwrap_or_default();
    assert_eq!(selector.get("pool-kind").map(String::as_str), Some("tpu"));
    assert_eq!(
        selector
            .get("cloud.google.com/gke-tpu-topology")
            .map(String::as_str),
        Some("2x2x4"),
        "the user's selector stays"
    );
    assert_eq!(spec.tolerations.unwrap_or_default().len(), 2);
    assert!(
        spec.scheduling_gates
            .unwrap_or_default()
            .iter()
            .any(|g| g.name == ADMISSION_GATE)
    );

    // Suspended again and put back: the user's template, byte for byte.
    let mut suspended = released;
    suspended.spec.suspend = Some(true);
    let restore = Run::JobSet(&suspended).put_back(&entry);
    let back = apply(&suspended, &restore).unwrap_or_else(|e| unreachable!("{e}"));
    assert!(Run::JobSet(&back).templates_as_recorded(&entry));
    assert!(!carries_release(&back));
    assert_eq!(back.spec.suspend, Some(true));
    let user = pod_template(&jobset.spec.replicated_jobs[0])
        .cloned()
        .unwrap_or_default();
    let mut got = pod_template(&back.spec.replicated_jobs[0])
        .cloned()
        .unwrap_or_default();
    // Empty lists and maps written by the restore stand for absent ones.
    if let Some(spec) = got.spec.as_mut()
        && spec.scheduling_gates.as_ref().is_some_and(Vec::is_empty)
    {
        spec.scheduling_gates = None;
    }
    if got.metadata.as_ref().is_some_and(|m| {
        *m == k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta::default()
    }) {
        got.metadata = None;
    }
    assert_eq!(got, user);
}

#[test]
fn a_release_onto_a_jobset_whose_replicated_jobs_moved_is_refused_by_the_server() {
    let jobset = stored_jobset(2, 4, false);
    let entry = entry_of(&jobset);
    let flavors = BTreeMap::from([("v5p".to_owned(), v5p())]);
    let pod_sets = [placed("slice", 0..8)];
    let placement = slices_placement(&pod_sets, &flavors, 0);
    let patch = release_patch(&entry, &jobset, &placement).unwrap_or_else(|e| unreachable!("{e}"));
    let mut renamed = jobset.clone();
    renamed.spec.replicated_jobs[0].name = "other".to_owned();
    assert!(apply(&renamed, &patch).is_err(), "the test op fails");
}

#[test]
fn each_pod_of_a_slice_is_pinned_to_its_host_of_its_slice() {
    let jobset = stored_jobset(2, 4, false);
    let entry = entry_of(&jobset);
    let pod_sets = [placed("slice", 0..8)];
    let names: Vec<ObjectRef> = (0..8)
        .map(|i| ObjectRef::new("team-a", &format!("pod-{}", 7 - i)))
        .collect();
    let members: Vec<GangMember> = (0..8).map(|i| member(i / 4, i % 4)).collect();
    let gated: Vec<(&ObjectRef, &GangMember)> = names.iter().zip(&members).collect();
    let pinned = pins(&entry, &jobset, &pod_sets, &gated, &BTreeSet::new())
        .unwrap_or_else(|| unreachable!());
    for (i, (pod, patch)) in pinned.iter().enumerate() {
        let at = names.iter().position(|n| n == pod).unwrap_or(usize::MAX);
        assert_eq!(at, i);
        assert_eq!(
            patch["spec"]["nodeSelector"]["kubernetes.io/hostname"],
            json!(format!("host-{i}")),
            "replica {} pod {} on host {i}",
            i / 4,
            i % 4
        );
        assert_eq!(
            patch["metadata"]["labels"][POD_INDEX_LABEL],
            json!(i.to_string())
        );
    }
    // One pod short: nothing is let go.
    assert_eq!(
        pins(&entry, &jobset, &pod_sets, &gated[..7], &BTreeSet::new()),
        None
    );
}

/// `members` as pods that succeeded.
fn succeeded(members: &[GangMember]) -> impl Iterator<Item = (&GangMember, bool)> {
    members.iter().map(|m| (m, true))
}

/// Replica `replica`'s child Job of the multislice JobSet, counting `completed` succeeded.
fn child(replica: usize, completed: &[usize]) -> crate::index::ChildRecord {
    crate::index::ChildRecord {
        jobset: ObjectRef::new("team-a", "multislice"),
        replicated_job: "slice".to_owned(),
        replica,
        completed: completed.iter().copied().collect(),
        owner: Some("uid-js".to_owned()),
        deleting: false,
        version: Some("7".to_owned()),
    }
}

#[test]
fn completions_a_child_job_counts_are_done_though_their_pods_are_gone_but_not_this_attempt_s() {
    let jobset = stored_jobset(2, 4, false);
    // Attempt 0's pods are gone (their nodes were taken back, and the pod garbage collector
    // deleted them); replica 1's Job counts completions 0 and 1, replica 0's all four.
    let children = [child(1, &[0, 1]), child(0, &[0, 1, 2, 3])];
    let done = completed_before(&jobset, std::iter::empty(), children.iter(), 1);
    assert_eq!(
        done,
        BTreeSet::from([("slice".to_owned(), 1, 0), ("slice".to_owned(), 1, 1)])
    );
    // Attempt 1 runs completions 2 and 3 of replica 1; completion 2 succeeded and its Job
    // counts it: that place is this attempt's pod's, not one done before.
    let running: Vec<GangMember> = [2, 3]
        .into_iter()
        .map(|c| GangMember {
            attempt: 1,
            ..member(1, c)
        })
        .collect();
    let pods = running.iter().map(|m| (m, m.completion == Some(2)));
    let now = [child(1, &[0, 1, 2])];
    assert_eq!(
        completed_before(&jobset, pods, now.iter(), 1),
        BTreeSet::from([("slice".to_owned(), 1, 0), ("slice".to_owned(), 1, 1)])
    );
    // A child Job being deleted (the JobSet restarts its child Jobs) or left by an earlier
    // JobSet of the same name counts nothing.
    let deleting = crate::index::ChildRecord {
        deleting: true,
        ..child(1, &[0, 1])
    };
    let earlier_jobset = crate::index::ChildRecord {
        owner: Some("uid-of-another".to_owned()),
        ..child(1, &[0, 1])
    };
    for gone in [deleting, earlier_jobset] {
        assert_eq!(
            completed_before(&jobset, std::iter::empty(), [gone].iter(), 1),
            BTreeSet::new()
        );
    }
    // A pod of an earlier attempt that succeeded still counts where the Job does not (yet).
    let earlier = [member(1, 3)];
    assert_eq!(
        completed_before(&jobset, succeeded(&earlier), children.iter(), 1),
        BTreeSet::from([
            ("slice".to_owned(), 1, 0),
            ("slice".to_owned(), 1, 1),
            ("slice".to_owned(), 1, 3)
        ])
    );
}

#[test]
fn completions_an_earlier_attempt_left_done_keep_their_hosts_empty() {
    let jobset = stored_jobset(2, 4, false);
    let entry = entry_of(&jobset);
    let pod_sets = [placed("slice", 0..8)];
    // Attempt 0 pinned replica 1's pods to hosts 4–7 (their index there is their place, not
    // their completion): completions 0 and 1 succeeded; and all four of replica 0's, whose
    // child Job is then done and keeps no place.
    let earlier: Vec<GangMember> = [(1, 0), (1, 1), (0, 0), (0, 1), (0, 2), (0, 3)]
        .into_iter()
        .map(|(r, c)| GangMember {
            index: r * 4 + c,
            ..member(r, c)
        })
        .collect();
    assert_eq!(
        completed_before(&jobset, succeeded(&earlier), std::iter::empty(), 1),
        BTreeSet::from([("slice".to_owned(), 1, 0), ("slice".to_owned(), 1, 1)])
    );
    assert_eq!(
        completed_before(&jobset, succeeded(&earlier), std::iter::empty(), 0),
        BTreeSet::new()
    );
    // Attempt 1: replica 1's Job makes completions 2 and 3 alone.
    let done = completed_before(&jobset, succeeded(&earlier), std::iter::empty(), 1);
    let names: Vec<ObjectRef> = (0..6)
        .map(|i| ObjectRef::new("team-a", &format!("pod-{i}")))
        .collect();
    let members: Vec<GangMember> = [(0, 0), (0, 1), (0, 2), (0, 3), (1, 2), (1, 3)]
        .into_iter()
        .map(|(r, c)| GangMember {
            attempt: 1,
            ..member(r, c)
        })
        .collect();
    let gated: Vec<(&ObjectRef, &GangMember)> = names.iter().zip(&members).collect();
    let pinned = pins(&entry, &jobset, &pod_sets, &gated, &done).unwrap_or_else(|| unreachable!());
    let hosts: Vec<(String, Value)> = pinned
        .iter()
        .map(|(pod, patch)| {
            (
                pod.name().to_owned(),
                patch["spec"]["nodeSelector"]["kubernetes.io/hostname"].clone(),
            )
        })
        .collect();
    let expected: Vec<(String, Value)> = [0, 1, 2, 3, 6, 7]
        .iter()
        .enumerate()
        .map(|(i, host)| (format!("pod-{i}"), json!(format!("host-{host}"))))
        .collect();
    assert_eq!(hosts, expected);
    // Without the completions done, the gang is short and nothing is let go.
    assert_eq!(
        pins(&entry, &jobset, &pod_sets, &gated, &BTreeSet::new()),
        None
    );
}

#[test]
fn under_an_exclusive_topology_each_replica_is_its_own_pod_set_pinned_by_replica() {
    let jobset = stored_jobset(2, 2, true);
    let entry = entry_of(&jobset);
    let names: Vec<&str> = entry
        .spec
        .pod_sets
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(names, ["slice-0", "slice-1"]);
    assert!(!one_set_per_template(&entry, &jobset));
    assert!(!edited_since(&entry, &jobset));
    let pod_sets = [placed("slice-0", 0..2), placed("slice-1", 2..4)];
    let pods: Vec<ObjectRef> = (0..4)
        .map(|i| ObjectRef::new("team-a", &format!("pod-{i}")))
        .collect();
    // Replica 1's pods first: the order they come in does not matter.
    let members: Vec<GangMember> = [(1, 0), (1, 1), (0, 0), (0, 1)]
        .into_iter()
        .map(|(r, c)| member(r, c))
        .collect();
    let gated: Vec<(&ObjectRef, &GangMember)> = pods.iter().zip(&members).collect();
    let pinned = pins(&entry, &jobset, &pod_sets, &gated, &BTreeSet::new())
        .unwrap_or_else(|| unreachable!());
    let placed: BTreeMap<String, (String, String)> = pinned
        .iter()
        .map(|(pod, patch)| {
            (
                pod.name().to_owned(),
                (
                    patch["spec"]["nodeSelector"]["kubernetes.io/hostname"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    patch["metadata"]["labels"]["muster.dev/pod-set"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                ),
            )
        })
        .collect();
    let expect = |host: &str, set: &str| (host.to_owned(), set.to_owned());
    assert_eq!(placed["pod-0"], expect("host-2", "slice-1"));
    assert_eq!(placed["pod-1"], expect("host-3", "slice-1"));
    assert_eq!(placed["pod-2"], expect("host-0", "slice-0"));
    assert_eq!(placed["pod-3"], expect("host-1", "slice-0"));
}

#[test]
fn edits_of_replicas_pods_or_scheduling_are_seen() {
    let jobset = stored_jobset(2, 4, false);
    let entry = entry_of(&jobset);
    let mut more = jobset.clone();
    more.spec.replicated_jobs[0].replicas = Some(3);
    assert!(edited_since(&entry, &more));
    let mut wider = jobset.clone();
    if let Some(spec) = wider.spec.replicated_jobs[0].template.spec.as_mut() {
        spec.parallelism = Some(8);
        spec.completions = Some(8);
    }
    assert!(edited_since(&entry, &wider));
    let mut moved = jobset.clone();
    if let Some(spec) = moved.spec.replicated_jobs[0]
        .template
        .spec
        .as_mut()
        .and_then(|s| s.template.spec.as_mut())
    {
        spec.node_selector
            .get_or_insert_with(BTreeMap::new)
            .insert("zone".to_owned(), "b".to_owned());
    }
    assert!(edited_since(&entry, &moved));
}

#[test]
fn a_jobset_ends_on_its_completed_or_failed_condition_and_counts_active_child_jobs() {
    let mut jobset = stored_jobset(2, 4, false);
    assert_eq!(finished(&jobset), None);
    assert!(!may_have_pods(&jobset));
    jobset.status = Some(
        serde_json::from_value(json!({
            "replicatedJobsStatus": [{"name": "slice", "active": 1}],
        }))
        .unwrap_or_else(|e| unreachable!("{e}")),
    );
    assert!(may_have_pods(&jobset));
    jobset.status = Some(
        serde_json::from_value(json!({
            "conditions": [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted",
                            "message": "jobset completed successfully",
                            "lastTransitionTime": "2026-11-26T00:00:00Z"}],
        }))
        .unwrap_or_else(|e| unreachable!("{e}")),
    );
    assert_eq!(finished(&jobset).map(|(ok, _)| ok), Some(true));
    jobset.status = Some(
        serde_json::from_value(json!({
            "conditions": [{"type": "Failed", "status": "True", "reason": "FailedJobs",
                            "message": "jobset failed due to reaching max number of restarts",
                            "lastTransitionTime": "2026-11-26T00:00:00Z"}],
        }))
        .unwrap_or_else(|e| unreachable!("{e}")),
    );
    let (ok, message) = finished(&jobset).unwrap_or_default();
    assert!(!ok);
    assert!(message.contains("max number of restarts"), "{message}");
}
