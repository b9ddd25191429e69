//! Labelled batch Jobs through the controller's passes: the queue entry made and the Job held
//! suspended, the release written into the Job's template, each pod the Job controller makes
//! pinned to its node once the gang is whole, and the entry finished by the Job's condition.

mod support;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use muster_api::gpujob::{GpuJobPhase, PendingReasonKind};
use muster_api::wire::{ADMISSION_GATE, ATTEMPT_LABEL, JOB_LABEL, POD_SET_LABEL};
use muster_controller::index::BatchJob;
use muster_controller::plan::{Action, plan};
use muster_controller::state::State;
use serde_json::{Value, json};
use support::{at, cluster, kinds, land_all, object, status_of};

/// An Indexed Job of `pods` pods with 8 GPUs each in one block, labelled for the queue.
fn labelled_job(pods: u32, suspend: bool, status: &Value) -> Job {
    object(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "train", "namespace": "team-a", "uid": "uid-train",
                     "resourceVersion": "1", "labels": {"muster.dev/queue-name": "research"}},
        "spec": {
            "suspend": suspend, "parallelism": pods, "completions": pods,
            "completionMode": "Indexed",
            "template": {
                "metadata": {
                    "labels": {"batch.kubernetes.io/job-name": "train"},
                    "annotations": {"muster.dev/topology-required": "example.com/block"},
                },
                "spec": {"restartPolicy": "Never", "containers": [{
                    "name": "main", "image": "trainer:1",
                    "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}},
        "status": status.clone(),
    }))
}

/// A pod the Job controller made from the released template: gated, with the gang's labels,
/// completion index `index`.
fn job_pod(index: usize, attempt: i32) -> Pod {
    object(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("train-{index}-x{attempt}"), "namespace": "team-a",
            "resourceVersion": "1",
            "labels": {
                "batch.kubernetes.io/job-name": "train",
                "batch.kubernetes.io/job-completion-index": index.to_string(),
                JOB_LABEL: "job-train", POD_SET_LABEL: "main", ATTEMPT_LABEL: attempt.to_string(),
            },
            "annotations": {"muster.dev/cluster-queue": "research", "muster.dev/flavor": "h100"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                                 "uid": "uid-train", "controller": true}],
        },
        "spec": {
            "schedulingGates": [{"name": ADMISSION_GATE}],
            "nodeSelector": {"gpu": "h100"},
            "containers": [{"name": "main", "image": "trainer:1",
                            "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
        },
        "status": {"phase": "Pending"},
    }))
}

/// Applies `job` as the API server would hand it on: each version with a resourceVersion
/// of its own.
fn apply_job(state: &mut State, mut job: Job) {
    thread_local! {
        static VERSION: std::cell::Cell<u64> = const { std::cell::Cell::new(100) };
    }
    let version = VERSION.with(|v| {
        v.set(v.get() + 1);
        v.get()
    });
    job.metadata.resource_version = Some(version.to_string());
    state.apply(job);
}

/// The status of the queue entry the tests follow.
fn entry_status(state: &State) -> muster_api::GpuJobStatus {
    status_of(state, "team-a/job-train")
}

#[test]
fn a_labelled_job_gets_an_entry_and_arriving_running_is_suspended_at_once() {
    let mut state = cluster(16, Vec::new());
    apply_job(&mut state, labelled_job(2, false, &json!({})));
    let pass = plan(&mut state, at(10));
    assert_eq!(kinds(&pass.actions), ["create_entry", "patch_workload"]);
    let Some(Action::PatchWorkload {
        patch, workload, ..
    }) = pass.actions.get(1)
    else {
        unreachable!()
    };
    assert_eq!(workload.key.as_str(), "team-a/train");
    assert_eq!(*patch.body(), json!({"spec": {"suspend": true}}));
    let Some(Action::CreateEntry { entry, .. }) =
        pass.actions.iter().find(|a| a.kind() == "create_entry")
    else {
        unreachable!()
    };
    assert_eq!(entry.metadata.name.as_deref(), Some("job-train"));
    assert_eq!(entry.spec.pod_sets[0].count, 2);
}

/// A flood of labelled Jobs gets its entries a pass's share at a time, the highest priority
/// first and, within a priority, the oldest first; the rest in the passes after.
#[test]
fn a_flood_of_labelled_jobs_gets_its_entries_a_pass_s_share_at_a_time_in_queue_order() {
    use muster_controller::entries::ENTRIES_PER_PASS;
    let mut state = cluster(16, Vec::new());
    let flood = ENTRIES_PER_PASS + 5;
    for i in 0..flood {
        let mut job = labelled_job(1, true, &json!({}));
        job.metadata.name = Some(format!("train-{i:04}"));
        job.metadata.uid = Some(format!("uid-{i:04}"));
        // Newer Jobs first by name; the last five are urgent.
        let created = i64::try_from(flood - i).unwrap_or(0);
        job.metadata.creation_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(created)),
        );
        if i >= ENTRIES_PER_PASS
            && let Some(spec) = job.spec.as_mut().and_then(|s| s.template.spec.as_mut())
        {
            spec.priority = Some(1000);
        }
        apply_job(&mut state, job);
    }
    let made = |actions: &[Action]| -> Vec<String> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::CreateEntry { job, .. } => Some(job.name().to_owned()),
                _ => None,
            })
            .collect()
    };
    let first = made(&plan(&mut state, at(10)).actions);
    assert_eq!(first.len(), ENTRIES_PER_PASS);
    // The five of priority 1000, oldest first, then the others, oldest first.
    let want: Vec<String> = (ENTRIES_PER_PASS..flood)
        .rev()
        .chain((5..ENTRIES_PER_PASS).rev())
        .map(|i| format!("job-train-{i:04}"))
        .collect();
    assert_eq!(first, want);
    // The entries made are on their way: the next pass makes the rest.
    let second = made(&plan(&mut state, at(11)).actions);
    let rest: Vec<String> = (0..5).rev().map(|i| format!("job-train-{i:04}")).collect();
    assert_eq!(second, rest);
}

#[test]
fn a_labelled_job_that_ended_before_it_was_queued_gets_no_entry_and_no_write() {
    let mut state = cluster(16, Vec::new());
    let done = json!({"succeeded": 2, "conditions": [{"type": "Complete", "status": "True"}]});
    apply_job(&mut state, labelled_job(2, false, &done));
    for t in 10..15 {
        let pass = plan(&mut state, at(t));
        assert!(
            kinds(&pass.actions).is_empty(),
            "at {t}: {:#?}",
            pass.actions
        );
    }
}

#[test]
fn an_unlabelled_job_is_never_read() {
    // The watch selects labelled Jobs only; a pod of a Job without the label carries none of
    // Muster's labels and is never a gang member.
    let mut state = cluster(16, Vec::new());
    let mut plain = job_pod(0, 0);
    plain.metadata.labels = Some(
        [(
            "batch.kubernetes.io/job-name".to_owned(),
            "plain".to_owned(),
        )]
        .into(),
    );
    state.apply(plain);
    let pass = plan(&mut state, at(10));
    assert!(kinds(&pass.actions).is_empty(), "{:#?}", pass.actions);
}

#[test]
fn a_job_waits_suspended_then_is_released_whole_pod_i_on_node_i_and_ends_with_its_job() {
    let mut state = cluster(8, Vec::new());
    apply_job(&mut state, labelled_job(2, true, &json!({})));
    let made = plan(&mut state, at(10));
    assert_eq!(kinds(&made.actions), ["create_entry"]);
    land_all(&mut state, &made.actions, 10);

    // Quota for one pod of two: the entry waits and says why; the Job is not touched.
    let waiting = plan(&mut state, at(11));
    land_all(&mut state, &waiting.actions, 11);
    let status = entry_status(&state);
    assert_eq!(
        status.pending_reason.map(|r| r.kind),
        Some(PendingReasonKind::QuotaShort)
    );
    assert!(
        !waiting
            .actions
            .iter()
            .any(|a| a.kind() == "patch_workload" || a.kind() == "release"),
        "{:#?}",
        waiting.actions
    );

    // Quota enough: one release, written into the Job's template; no pods to pin yet.
    state.apply(support::cluster_queue(16));
    let pass = plan(&mut state, at(12));
    let release = pass
        .actions
        .iter()
        .find(|a| a.kind() == "release")
        .unwrap_or_else(|| unreachable!("{:#?}", pass.actions));
    let Action::Release { gang, status, .. } = release else {
        unreachable!()
    };
    assert!(gang.pods.is_empty());
    let workload = gang.workload.clone().unwrap_or_else(|| unreachable!());
    assert_eq!(workload.workload.key.as_str(), "team-a/train");
    assert_eq!(workload.patch.body()["spec"]["suspend"], json!(false));
    assert_eq!(
        workload.patch.body()["spec"]["template"]["spec"]["schedulingGates"],
        json!([{"name": ADMISSION_GATE}])
    );
    assert_eq!(
        workload.patch.body()["spec"]["template"]["metadata"]["labels"][JOB_LABEL],
        json!("job-train")
    );
    let nodes = status.admission.clone().unwrap_or_default().pod_sets[0]
        .nodes
        .clone();
    land_all(&mut state, &pass.actions, 12);

    // The Job controller makes one pod: the gang is not whole, nothing is let go.
    apply_job(&mut state, labelled_job(2, false, &json!({"active": 1})));
    state.apply(job_pod(1, 0));
    let half = plan(&mut state, at(13));
    assert!(kinds(&half.actions).is_empty(), "{:#?}", half.actions);
    land_all(&mut state, &half.actions, 13);

    // Both exist: each is pinned to the node of its completion index, in one write, the
    // admission held meanwhile.
    state.apply(job_pod(0, 0));
    let whole = plan(&mut state, at(14));
    assert_eq!(kinds(&whole.actions), ["pin_pods"]);
    let Some(Action::PinPods { pins, .. }) = whole.actions.iter().find(|a| a.kind() == "pin_pods")
    else {
        unreachable!("{:#?}", whole.actions)
    };
    assert_eq!(pins.len(), 2);
    for (pod, patch) in pins {
        let index = usize::from(!pod.name().starts_with("train-0"));
        assert_eq!(
            patch["spec"]["nodeSelector"]["kubernetes.io/hostname"],
            json!(nodes[index]),
            "{pod}"
        );
        assert_eq!(patch["spec"]["schedulingGates"], Value::Null);
    }
    land_all(&mut state, &whole.actions, 14);

    // The Job completes: the entry says so, and holds nothing.
    apply_job(
        &mut state,
        labelled_job(
            2,
            false,
            &json!({"conditions": [{"type": "Complete", "status": "True"}]}),
        ),
    );
    let done = plan(&mut state, at(20));
    land_all(&mut state, &done.actions, 20);
    let status = entry_status(&state);
    assert_eq!(status.phase, Some(GpuJobPhase::Succeeded), "{status:#?}");
    assert!(status.admission.is_none());
}

/// A `NonIndexed` Job of one completion, one 8-GPU pod: its controller never runs a second.
fn one_pod_job(suspend: bool, status: &Value) -> Job {
    let mut job = labelled_job(1, suspend, status);
    if let Some(spec) = job.spec.as_mut() {
        spec.completion_mode = Some("NonIndexed".to_owned());
    }
    job
}

/// The pod the Job controller makes from `job`'s released template: bound to the node the
/// template names, Running and Ready since `ready` (seconds, see [`at`]).
fn made_from(job: &BatchJob, ready: i64) -> Pod {
    let template = job.spec.template.template().unwrap_or_default();
    let node = template
        .spec
        .as_ref()
        .and_then(|s| s.node_selector.as_ref())
        .and_then(|s| s.get("kubernetes.io/hostname"))
        .cloned();
    let mut meta = template.metadata.unwrap_or_default();
    meta.name = Some("train-x0".to_owned());
    meta.namespace = Some("team-a".to_owned());
    meta.resource_version = Some("1".to_owned());
    meta.owner_references = object(json!([{"apiVersion": "batch/v1", "kind": "Job",
        "name": "train", "uid": "uid-train", "controller": true}]));
    let mut spec = template.spec.unwrap_or_default();
    spec.node_name = node;
    Pod {
        metadata: meta,
        spec: Some(spec),
        status: object(json!({"phase": "Running", "conditions": [{
            "type": "Ready", "status": "True",
            "lastTransitionTime": at(ready).to_string(),
        }]})),
    }
}

#[test]
fn a_job_that_never_runs_two_pods_is_released_with_its_node_in_its_template_and_no_pod_write() {
    let mut state = cluster(8, Vec::new());
    apply_job(&mut state, one_pod_job(true, &json!({})));
    let mut release = None;
    for t in 10..20 {
        let pass = plan(&mut state, at(t));
        if let Some(a @ Action::Release { .. }) =
            pass.actions.iter().find(|a| a.kind() == "release")
        {
            release = Some((a.clone(), t));
        }
        land_all(&mut state, &pass.actions, t);
        if release.is_some() {
            break;
        }
    }
    let Some((Action::Release { gang, status, .. }, released_at)) = release else {
        unreachable!("never released")
    };
    let workload = gang.workload.clone().unwrap_or_else(|| unreachable!());
    assert!(
        workload.ungated,
        "the status is written before the Job is unsuspended"
    );
    let node = status.admission.clone().unwrap_or_default().pod_sets[0].nodes[0].clone();
    let template = &workload.patch.body()["spec"]["template"];
    assert_eq!(
        template["spec"]["nodeSelector"]["kubernetes.io/hostname"],
        json!(node)
    );
    assert_eq!(template["spec"]["schedulingGates"], Value::Null);
    assert_eq!(
        template["metadata"]["labels"]["muster.dev/pod-index"],
        json!("0")
    );

    // Its pod goes as the Job controller makes it: nothing to pin, and the admission holds.
    let running = state
        .index()
        .workload("team-a/train")
        .cloned()
        .unwrap_or_else(|| unreachable!());
    assert_eq!(running.spec.suspend, Some(false));
    state.apply(made_from(&running, released_at + 1));
    for t in released_at + 1..released_at + 60 {
        let pass = plan(&mut state, at(t));
        let found = kinds(&pass.actions);
        assert!(
            !found
                .iter()
                .any(|k| ["pin_pods", "evict", "release"].contains(k)),
            "at {t}: {found:?}"
        );
        land_all(&mut state, &pass.actions, t);
    }
    let status = entry_status(&state);
    assert_eq!(status.phase, Some(GpuJobPhase::Running), "{status:#?}");
}

/// Whether `status`'s `Finished` condition gives `message` as how the run ended.
fn finished_saying(status: &muster_api::GpuJobStatus, message: &str) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == "Finished" && c.message == message)
}

/// `pod` ended in `phase`, as its kubelet writes it.
fn ended(mut pod: Pod, phase: &str) -> Pod {
    pod.status = object(json!({"phase": phase}));
    pod
}

/// Releases the one-pod Job `job` (applied suspended) and runs its pod for a few passes: the
/// pod and the second the test goes on from.
fn one_pod_running(state: &mut State, job: Job) -> (Pod, i64) {
    apply_job(state, job);
    let released = until_released(state, 10);
    let running = state
        .index()
        .workload("team-a/train")
        .cloned()
        .unwrap_or_else(|| unreachable!());
    let pod = made_from(&running, released + 1);
    state.apply(pod.clone());
    for t in released + 1..released + 5 {
        let pass = plan(state, at(t));
        land_all(state, &pass.actions, t);
    }
    let status = entry_status(state);
    assert!(status.admission.is_some(), "{status:#?}");
    (pod, released + 5)
}

#[test]
fn a_job_of_one_completion_succeeds_with_its_pod_and_is_then_left_to_its_controller() {
    let mut state = cluster(8, Vec::new());
    let (pod, from) = one_pod_running(&mut state, one_pod_job(true, &json!({})));

    // Its pod succeeded; the Job controller has not yet marked the Job complete. The Job's
    // success is decided: the entry finishes now and its quota goes back.
    state.apply(ended(pod, "Succeeded"));
    let done = plan(&mut state, at(from + 1));
    assert_eq!(kinds(&done.actions), ["job_status"], "{:#?}", done.actions);
    land_all(&mut state, &done.actions, from + 1);
    let status = entry_status(&state);
    assert_eq!(status.phase, Some(GpuJobPhase::Succeeded), "{status:#?}");
    assert!(status.admission.is_none());
    assert!(
        finished_saying(&status, "the Job's one pod succeeded"),
        "{status:#?}"
    );

    // The Job is left to its controller: never suspended, its entry not written again, before
    // or after the Job says it completed.
    for t in from + 2..from + 30 {
        let pass = plan(&mut state, at(t));
        assert!(
            kinds(&pass.actions).is_empty(),
            "at {t}: {:#?}",
            pass.actions
        );
        land_all(&mut state, &pass.actions, t);
    }
    apply_job(
        &mut state,
        one_pod_job(
            false,
            &json!({"conditions": [{"type": "Complete", "status": "True"}]}),
        ),
    );
    let after = plan(&mut state, at(from + 30));
    assert!(kinds(&after.actions).is_empty(), "{:#?}", after.actions);
    assert_eq!(entry_status(&state).phase, Some(GpuJobPhase::Succeeded));
}

#[test]
fn a_job_with_an_active_deadline_or_more_completions_ends_when_the_job_says_so() {
    let with_deadline = {
        let mut job = one_pod_job(true, &json!({}));
        if let Some(spec) = job.spec.as_mut() {
            spec.active_deadline_seconds = Some(3600);
        }
        job
    };
    // Two completions one pod at a time: its first pod's success is not the Job's.
    let two_completions = {
        let mut job = one_pod_job(true, &json!({}));
        if let Some(spec) = job.spec.as_mut() {
            spec.completions = Some(2);
        }
        job
    };
    for (name, job) in [
        ("deadline", with_deadline),
        ("two completions", two_completions),
    ] {
        let mut state = cluster(8, Vec::new());
        let (pod, from) = one_pod_running(&mut state, job.clone());
        state.apply(ended(pod, "Succeeded"));
        for t in from + 1..from + 10 {
            let pass = plan(&mut state, at(t));
            land_all(&mut state, &pass.actions, t);
        }
        let status = entry_status(&state);
        assert!(status.admission.is_some(), "{name}: {status:#?}");
        assert!(!status.phase.is_some_and(GpuJobPhase::has_ended), "{name}");

        let mut complete = job;
        if let Some(spec) = complete.spec.as_mut() {
            spec.suspend = Some(false);
        }
        complete.status = object(json!({"conditions": [{"type": "Complete", "status": "True"}]}));
        apply_job(&mut state, complete);
        let done = plan(&mut state, at(from + 10));
        land_all(&mut state, &done.actions, from + 10);
        let status = entry_status(&state);
        assert_eq!(status.phase, Some(GpuJobPhase::Succeeded), "{name}");
        assert!(
            finished_saying(&status, "the Job completed"),
            "{name}: {status:#?}"
        );
    }
}

/// Plans passes from `from` on, landing each, until one releases the entry: that second.
fn until_released(state: &mut State, from: i64) -> i64 {
    (from..from + 60)
        .find(|t| {
            let pass = plan(state, at(*t));
            land_all(state, &pass.actions, *t);
            kinds(&pass.actions).contains(&"release")
        })
        .unwrap_or_else(|| unreachable!("never released"))
}

#[test]
fn an_admission_whose_job_never_got_its_release_is_given_back_after_a_grace() {
    let mut state = cluster(8, Vec::new());
    apply_job(&mut state, one_pod_job(true, &json!({})));
    let released_at = until_released(&mut state, 10);
    assert!(entry_status(&state).admission.is_some());
    // The status landed, the Job's patch did not (the index holds the Job as it was).
    apply_job(&mut state, one_pod_job(true, &json!({})));
    // A copy of the Job from before the release may only be late: held meanwhile.
    let due = released_at + 30;
    for t in released_at + 1..due {
        let pass = plan(&mut state, at(t));
        assert!(!kinds(&pass.actions).contains(&"evict"), "at {t}");
        land_all(&mut state, &pass.actions, t);
    }
    let pass = plan(&mut state, at(due));
    let Some(Action::Evict {
        status, workload, ..
    }) = pass.actions.iter().find(|a| a.kind() == "evict")
    else {
        unreachable!("{:#?}", pass.actions)
    };
    assert!(status.admission.is_none());
    assert_eq!(status.restart_count, 0, "no restart is counted");
    let reason = status.pending_reason.clone().unwrap_or_default();
    assert!(
        reason.message.contains("never released"),
        "{}",
        reason.message
    );
    assert_eq!(
        workload.as_ref().map(|w| w.key.as_str()),
        Some("team-a/train")
    );
    land_all(&mut state, &pass.actions, due);
    // It queues again and is released again.
    until_released(&mut state, due + 1);
}

#[test]
fn a_gated_job_seen_unreleased_beside_its_admission_is_not_taken_for_a_lost_release() {
    // A gated Job's release is written before its entry's status: a copy of the Job from
    // before it is only late, and waits out the pods-ready timeout as before.
    let mut state = cluster(16, Vec::new());
    apply_job(&mut state, labelled_job(2, true, &json!({})));
    let released_at = until_released(&mut state, 10);
    apply_job(&mut state, labelled_job(2, true, &json!({})));
    for t in released_at + 1..released_at + 120 {
        let pass = plan(&mut state, at(t));
        assert!(!kinds(&pass.actions).contains(&"evict"), "at {t}");
        land_all(&mut state, &pass.actions, t);
    }
    assert!(entry_status(&state).admission.is_some());
}

/// A one-pod Job released pinned and preempted by a job of higher priority before its
/// status showed the release taken in (no start time, no pod seen): the second of the
/// eviction, and the Job as the index holds it then (suspended, its template still pinned).
fn preempted_before_it_showed_a_start(state: &mut State) -> (i64, BatchJob) {
    let mut queue = support::cluster_queue(8);
    queue.spec.preemption = Some(muster_api::cluster_queue::PreemptionPolicy {
        within_cluster_queue: muster_api::cluster_queue::WithinClusterQueue::LowerPriority,
        ..Default::default()
    });
    state.apply(queue);
    apply_job(state, one_pod_job(true, &json!({})));
    let released_at = until_released(state, 10);
    let mut urgent = support::job("urgent", 1, released_at);
    urgent.spec.priority = Some(100);
    state.apply(urgent);
    let evicted_at = (released_at + 1..released_at + 30)
        .find(|t| {
            let pass = plan(state, at(*t));
            land_all(state, &pass.actions, *t);
            pass.actions.iter().any(
                |a| matches!(a, Action::Evict { job, .. } if job.as_str() == "team-a/job-train"),
            )
        })
        .unwrap_or_else(|| unreachable!("never preempted"));
    // The eviction suspends the Job; the Job controller has recorded nothing yet.
    let job = state
        .index()
        .workload("team-a/train")
        .cloned()
        .unwrap_or_else(|| unreachable!());
    assert_eq!(job.spec.suspend, Some(false), "the release landed");
    apply_job(state, with_template_of(&job, &json!({})));
    (evicted_at, job)
}

/// The one-pod Job, suspended, with `job`'s template and `status`.
fn with_template_of(job: &BatchJob, status: &Value) -> Job {
    let mut suspended = one_pod_job(true, status);
    if let (Some(spec), Ok(template)) = (suspended.spec.as_mut(), job.spec.template.template()) {
        spec.template = template;
    }
    suspended
}

/// Plans a pass each second of `times`, landing each: none releases a job or patches the
/// Job (its template stays as the release wrote it).
fn neither_released_nor_put_back(state: &mut State, times: std::ops::Range<i64>) {
    for t in times {
        let pass = plan(state, at(t));
        let found = kinds(&pass.actions);
        assert!(
            !found.contains(&"release") && !found.contains(&"patch_workload"),
            "at {t}: {found:?}"
        );
        land_all(state, &pass.actions, t);
    }
}

/// The second, from `from` on, at which a pass releases the GpuJob `urgent`.
fn urgent_released(state: &mut State, from: i64) -> i64 {
    (from..from + 60)
        .find(|t| {
            let pass = plan(state, at(*t));
            land_all(state, &pass.actions, *t);
            pass.actions.iter().any(
                |a| matches!(a, Action::Release { job, .. } if job.as_str() == "team-a/urgent"),
            )
        })
        .unwrap_or_else(|| unreachable!("never released"))
}

#[test]
fn a_pinned_release_preempted_before_its_job_showed_it_keeps_its_quota_a_while() {
    // The Job controller may have made the pod from the released Job and failed to record
    // its start (its write conflicts with the suspension): nothing but the pod watch would
    // tell, so the release's quota stays taken — and the template that names it stays.
    let mut state = cluster(8, Vec::new());
    let (evicted_at, _) = preempted_before_it_showed_a_start(&mut state);
    let hold_ends = evicted_at + muster_controller::workload::UNTAKEN_RELEASE_SECONDS;
    neither_released_nor_put_back(&mut state, evicted_at + 1..hold_ends);
    // The pod shows up late: it holds the quota itself, past the hold's end.
    let job = state
        .index()
        .workload("team-a/train")
        .cloned()
        .unwrap_or_else(|| unreachable!());
    let late = made_from(&job, hold_ends - 1);
    state.apply(late.clone());
    for t in hold_ends..hold_ends + 20 {
        let pass = plan(&mut state, at(t));
        assert!(!kinds(&pass.actions).contains(&"release"), "at {t}");
        land_all(&mut state, &pass.actions, t);
    }
    // Its controller deletes it: the quota goes to the job that preempted it.
    state.delete(&late);
    let released = urgent_released(&mut state, hold_ends + 20);
    assert_eq!(released, hold_ends + 20);
}

#[test]
fn a_pinned_release_preempted_before_its_job_showed_it_frees_its_quota_after_the_hold() {
    let mut state = cluster(8, Vec::new());
    let (evicted_at, _) = preempted_before_it_showed_a_start(&mut state);
    let hold_ends = evicted_at + muster_controller::workload::UNTAKEN_RELEASE_SECONDS;
    // The quota goes to the job that preempted it, and what the release wrote is put back,
    // once the hold ends.
    let mut put_back = None;
    let mut released = None;
    for t in evicted_at + 1..hold_ends + 5 {
        let pass = plan(&mut state, at(t));
        for action in &pass.actions {
            match action {
                Action::PatchWorkload { workload, .. }
                    if workload.key.as_str() == "team-a/train" =>
                {
                    put_back.get_or_insert(t);
                }
                Action::Release { job, .. } if job.as_str() == "team-a/urgent" => {
                    released.get_or_insert(t);
                }
                _ => {}
            }
        }
        land_all(&mut state, &pass.actions, t);
    }
    assert_eq!((put_back, released), (Some(hold_ends), Some(hold_ends)));
}

#[test]
fn a_pinned_release_whose_job_took_the_suspension_in_frees_its_quota_at_once() {
    let mut state = cluster(8, Vec::new());
    let (evicted_at, job) = preempted_before_it_showed_a_start(&mut state);
    // Its controller recorded the suspension after the eviction: it holds no pod of it.
    let taken = json!({"conditions": [{
        "type": "Suspended", "status": "True",
        "lastTransitionTime": at(evicted_at).to_string()}]});
    apply_job(&mut state, with_template_of(&job, &taken));
    assert_eq!(urgent_released(&mut state, evicted_at + 1), evicted_at + 1);
}

#[test]
fn an_evicted_entry_suspends_its_job_instead_of_deleting_pods() {
    // Its pods exist and are let go; then one fails: the gang restarts.
    let mut state = pinned_gang_of_two();
    assert!(entry_status(&state).admission.is_some());
    state.apply(ran(job_pod(1, 0), "Failed"));
    let pass = plan(&mut state, at(14));
    let Some(Action::Evict { pods, workload, .. }) =
        pass.actions.iter().find(|a| a.kind() == "evict")
    else {
        unreachable!("{:#?}", pass.actions)
    };
    assert!(pods.is_empty(), "the Job controller deletes its pods");
    assert_eq!(
        workload.as_ref().map(|w| w.key.as_str()),
        Some("team-a/train")
    );
}

#[test]
fn an_evicted_entry_waits_for_its_job_controller_to_reset_the_start_time_before_release() {
    let mut state = pinned_gang_of_two();
    state.apply(ran(job_pod(1, 0), "Failed"));
    let evicted = plan(&mut state, at(14));
    land_all(&mut state, &evicted.actions, 14);
    assert!(kinds(&evicted.actions).contains(&"evict"));
    // Suspended, its pods gone, but its start time not yet reset: the API server would refuse
    // a change of its template, so it is neither put back nor released.
    let started = json!({"startTime": "2026-11-26T00:00:00Z",
                         "conditions": [{"type": "Suspended", "status": "True"}]});
    apply_job(&mut state, labelled_job(2, true, &started));
    state.delete(&job_pod(0, 0));
    state.delete(&job_pod(1, 0));
    neither_released_nor_put_back(&mut state, 15..200);
    assert_eq!(entry_status(&state).admission, None);
    // Once it is reset, the Job is released again.
    apply_job(
        &mut state,
        labelled_job(
            2,
            true,
            &json!({"conditions": [{"type": "Suspended", "status": "True"}]}),
        ),
    );
    let released = (200..400).any(|t| {
        let pass = plan(&mut state, at(t));
        land_all(&mut state, &pass.actions, t);
        kinds(&pass.actions).contains(&"release")
    });
    assert!(released);
}

#[test]
fn a_gpujob_holding_the_entry_name_keeps_the_job_held_and_says_so_once() {
    // A GpuJob `job-train` of the team's own, no Job's entry.
    let mut state = cluster(16, vec![support::job("job-train", 1, 0)]);
    apply_job(&mut state, labelled_job(2, false, &json!({})));
    let pass = plan(&mut state, at(10));
    let Some(Action::PatchWorkload { patch, event, .. }) =
        pass.actions.iter().find(|a| a.kind() == "patch_workload")
    else {
        unreachable!("{:#?}", pass.actions)
    };
    assert_eq!(patch.body()["spec"]["suspend"], json!(true));
    let said = patch.body()["metadata"]["annotations"]["muster.dev/invalid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        said.starts_with("metadata.name: GpuJob team-a/job-train is not this Job's queue entry"),
        "{said}"
    );
    assert_eq!(
        event.as_ref().map(|e| e.reason.as_str()),
        Some("InvalidWorkload")
    );
    assert!(
        !kinds(&pass.actions).contains(&"create_entry"),
        "the name is taken"
    );
    land_all(&mut state, &pass.actions, 10);
    // Held and told: nothing more is written while it stands.
    let mut held =
        object::<Job>(serde_json::to_value(labelled_job(2, true, &json!({}))).unwrap_or_default());
    held.metadata.annotations = Some([("muster.dev/invalid".to_owned(), said)].into());
    apply_job(&mut state, held);
    let pass = plan(&mut state, at(11));
    assert!(
        !kinds(&pass.actions).contains(&"patch_workload"),
        "{:#?}",
        pass.actions
    );
}

/// `job` with `key: value` added to its pod template's annotations.
fn annotated(mut job: Job, key: &str, value: &str) -> Job {
    if let Some(spec) = job.spec.as_mut() {
        spec.template
            .metadata
            .get_or_insert_with(Default::default)
            .annotations
            .get_or_insert_with(Default::default)
            .insert(key.to_owned(), value.to_owned());
    }
    job
}

#[test]
fn a_job_edited_while_it_waits_is_read_again_and_an_invalid_edit_holds_its_entry() {
    let mut state = cluster(16, Vec::new());
    // 4 pods of 8 GPUs: more than the 16 GPUs of quota, so it waits.
    apply_job(&mut state, labelled_job(4, true, &json!({})));
    for t in 10..13 {
        let pass = plan(&mut state, at(t));
        land_all(&mut state, &pass.actions, t);
    }
    assert_eq!(entry_status(&state).admission, None);
    // Its owner halves it and adds an annotation: the entry reads it again, and the Job's
    // template is not put back.
    apply_job(
        &mut state,
        annotated(labelled_job(2, true, &json!({})), "team.example/run", "7"),
    );
    let pass = plan(&mut state, at(13));
    assert!(!kinds(&pass.actions).contains(&"patch_workload"));
    let Some(Action::UpdateEntry { spec, .. }) =
        pass.actions.iter().find(|a| a.kind() == "update_entry")
    else {
        unreachable!("{:#?}", pass.actions)
    };
    assert_eq!(spec.pod_sets[0].count, 2);
    assert!(!spec.suspend);
    land_all(&mut state, &pass.actions, 13);
    // Read: nothing more to write, and now it fits.
    let released = (14..20).any(|t| {
        let pass = plan(&mut state, at(t));
        assert!(!kinds(&pass.actions).contains(&"update_entry"), "at {t}");
        land_all(&mut state, &pass.actions, t);
        kinds(&pass.actions).contains(&"release")
    });
    assert!(released);
}

#[test]
fn an_invalid_edit_holds_the_entry_and_says_why_once_until_it_is_fixed() {
    let mut state = cluster(16, Vec::new());
    apply_job(&mut state, labelled_job(4, true, &json!({})));
    for t in 10..13 {
        let pass = plan(&mut state, at(t));
        land_all(&mut state, &pass.actions, t);
    }
    let bad = annotated(
        labelled_job(4, true, &json!({})),
        "muster.dev/gpu-share",
        "3",
    );
    apply_job(&mut state, bad.clone());
    let pass = plan(&mut state, at(13));
    let Some(Action::UpdateEntry { spec, .. }) =
        pass.actions.iter().find(|a| a.kind() == "update_entry")
    else {
        unreachable!("{:#?}", pass.actions)
    };
    assert!(spec.suspend, "held while the Job cannot be queued");
    // The index keeps the entry without its pods' spec; the spec written to hold it is
    // whole, or the merge patch would take the containers out of the entry.
    let containers = spec.pod_sets[0]
        .template
        .spec
        .as_ref()
        .map(|s| s.containers.len());
    assert_eq!(containers, Some(1), "written whole");
    let Some(Action::PatchWorkload { patch, event, .. }) =
        pass.actions.iter().find(|a| a.kind() == "patch_workload")
    else {
        unreachable!("{:#?}", pass.actions)
    };
    let said = patch.body()["metadata"]["annotations"]["muster.dev/invalid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(said.contains("muster.dev/gpu-share"), "{said}");
    assert!(event.is_some());
    land_all(&mut state, &pass.actions, 13);
    let mut reported = bad;
    reported
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("muster.dev/invalid".to_owned(), said);
    apply_job(&mut state, reported);
    for t in 14..20 {
        let pass = plan(&mut state, at(t));
        let found = kinds(&pass.actions);
        assert!(
            !found.contains(&"patch_workload") && !found.contains(&"release"),
            "at {t}: {found:?}"
        );
        land_all(&mut state, &pass.actions, t);
    }
    // Fixed (the annotation gone, parallelism halved): read again and no longer held.
    apply_job(&mut state, labelled_job(2, true, &json!({})));
    let pass = plan(&mut state, at(20));
    let Some(Action::UpdateEntry { spec, .. }) =
        pass.actions.iter().find(|a| a.kind() == "update_entry")
    else {
        unreachable!("{:#?}", pass.actions)
    };
    assert!(!spec.suspend);
    assert_eq!(spec.pod_sets[0].count, 2);
}

/// A Job whose hold failed to be written is held again by the next pass, though neither the
/// Job nor its entry changed; one that is held and quiet is not written again.
#[test]
fn a_hold_that_failed_is_written_again_and_a_quiet_job_is_left_alone() {
    let mut state = cluster(0, Vec::new());
    apply_job(&mut state, labelled_job(2, true, &json!({})));
    let pass = plan(&mut state, at(10));
    land_all(&mut state, &pass.actions, 10);
    // Running when it should be held: suspended at once.
    apply_job(&mut state, labelled_job(2, false, &json!({})));
    let pass = plan(&mut state, at(11));
    let holds: Vec<&Action> = pass
        .actions
        .iter()
        .filter(|a| a.kind() == "patch_workload")
        .collect();
    assert_eq!(holds.len(), 1, "{:#?}", pass.actions);
    for action in &pass.actions {
        state.landed(action, Err("the API server is unavailable".to_owned()), 11);
    }
    let again = plan(&mut state, at(12));
    assert_eq!(
        kinds(&again.actions)
            .iter()
            .filter(|k| **k == "patch_workload")
            .count(),
        1,
        "{:#?}",
        again.actions
    );
    land_all(&mut state, &again.actions, 12);
    apply_job(&mut state, labelled_job(2, true, &json!({})));
    writes_no_job(&mut state, 13..20);
}

/// The passes at `times`, each landed, none writing the Job.
fn writes_no_job(state: &mut State, times: std::ops::Range<i64>) {
    for t in times {
        let pass = plan(state, at(t));
        assert!(
            !kinds(&pass.actions).contains(&"patch_workload"),
            "at {t}: {:#?}",
            pass.actions
        );
        land_all(state, &pass.actions, t);
    }
}

/// A 2-pod Job admitted, released, both its pods made and let go (second 13).
fn pinned_gang_of_two() -> State {
    pinned_gang_of_two_restarted_at_most(None)
}

/// [`labelled_job`] with `spec.backoffLimit` at `limit`.
fn with_backoff_limit(mut job: Job, limit: Option<i32>) -> Job {
    if let Some(spec) = job.spec.as_mut() {
        spec.backoff_limit = limit;
    }
    job
}

/// [`pinned_gang_of_two`], the Job's `spec.backoffLimit` at `limit`.
fn pinned_gang_of_two_restarted_at_most(limit: Option<i32>) -> State {
    let mut state = cluster(16, Vec::new());
    apply_job(
        &mut state,
        with_backoff_limit(labelled_job(2, true, &json!({})), limit),
    );
    for t in 10..13 {
        let pass = plan(&mut state, at(t));
        land_all(&mut state, &pass.actions, t);
    }
    apply_job(
        &mut state,
        with_backoff_limit(labelled_job(2, false, &json!({"active": 2})), limit),
    );
    state.apply(job_pod(0, 0));
    state.apply(job_pod(1, 0));
    let pinned = plan(&mut state, at(13));
    land_all(&mut state, &pinned.actions, 13);
    state
}

/// `pod` after its run: let go (no gate) and in `phase`.
fn ran(mut pod: Pod, phase: &str) -> Pod {
    if let Some(spec) = pod.spec.as_mut() {
        spec.scheduling_gates = None;
    }
    pod.status = object(json!({"phase": phase}));
    pod
}

#[test]
fn a_job_restarted_after_some_of_its_pods_succeeded_is_queued_and_released_for_the_rest() {
    let mut state = pinned_gang_of_two();
    // Index 0 succeeds, index 1 fails: the gang restarts.
    state.apply(ran(job_pod(0, 0), "Succeeded"));
    state.apply(ran(job_pod(1, 0), "Failed"));
    let evicted = plan(&mut state, at(14));
    assert!(kinds(&evicted.actions).contains(&"evict"));
    land_all(&mut state, &evicted.actions, 14);
    // Its controller took in the suspension and keeps index 0 completed: the next run makes
    // index 1 alone.
    apply_job(
        &mut state,
        labelled_job(
            2,
            true,
            &json!({"succeeded": 1, "failed": 1, "completedIndexes": "0",
                    "conditions": [{"type": "Suspended", "status": "True"}]}),
        ),
    );
    state.delete(&job_pod(1, 0));
    let mut released = None;
    for t in 15..400 {
        let pass = plan(&mut state, at(t));
        if let Some(Action::Release { status, .. }) =
            pass.actions.iter().find(|a| a.kind() == "release")
        {
            released = Some((t, status.admission.clone().unwrap_or_default()));
        }
        land_all(&mut state, &pass.actions, t);
        if released.is_some() {
            break;
        }
    }
    let Some((t, admission)) = released else {
        unreachable!("never released again")
    };
    // The entry asks for the one pod left, and the admission places one.
    let entry = state.index().job("team-a/job-train").cloned();
    assert_eq!(
        entry.map(|e| e.spec.pod_sets[0].count),
        Some(1),
        "the entry counts the completions left"
    );
    let nodes = admission.pod_sets[0].nodes.clone();
    assert_eq!(nodes.len(), 1, "{admission:?}");
    // The pod of index 1 is the whole gang: let go on the admission's node.
    apply_job(
        &mut state,
        labelled_job(
            2,
            false,
            &json!({"active": 1, "succeeded": 1, "completedIndexes": "0"}),
        ),
    );
    state.apply(job_pod(1, 1));
    let whole = plan(&mut state, at(t + 1));
    let Some(Action::PinPods { pins, .. }) = whole.actions.iter().find(|a| a.kind() == "pin_pods")
    else {
        unreachable!("{:#?}", whole.actions)
    };
    assert_eq!(pins.len(), 1);
    assert_eq!(pins[0].0.name(), "train-1-x1");
    assert_eq!(
        pins[0].1["spec"]["nodeSelector"]["kubernetes.io/hostname"],
        json!(nodes[0])
    );
}

#[test]
fn a_job_whose_entry_failed_past_its_backoff_limit_stays_suspended_and_is_written_no_more() {
    // The Job tolerates no failure, and its gang was restarted as often as its entry allows
    // (Muster's default, the least an entry gets).
    let mut state = pinned_gang_of_two_restarted_at_most(Some(0));
    let mut entry = state.index().job("team-a/job-train").cloned();
    if let Some(status) = entry.as_mut().and_then(|e| e.status.as_mut()) {
        status.restart_count = muster_api::gpujob::DEFAULT_BACKOFF_LIMIT;
    }
    state.apply(entry.unwrap_or_else(|| unreachable!("an entry")));
    state.apply(ran(job_pod(0, 0), "Failed"));
    let failed = plan(&mut state, at(14));
    land_all(&mut state, &failed.actions, 14);
    let status = entry_status(&state);
    assert_eq!(
        status.phase,
        Some(muster_api::gpujob::GpuJobPhase::Failed),
        "{:#?}",
        failed.actions
    );
    // Its controller takes in the suspension; the template still carries the release.
    let mut held = with_backoff_limit(labelled_job(2, true, &json!({})), Some(0));
    if let Some(template) = held.spec.as_mut().map(|s| &mut s.template) {
        template
            .metadata
            .get_or_insert_with(Default::default)
            .labels
            .get_or_insert_with(Default::default)
            .insert(JOB_LABEL.to_owned(), "job-train".to_owned());
    }
    apply_job(&mut state, held);
    state.delete(&ran(job_pod(0, 0), "Failed"));
    writes_no_job(&mut state, 15..200);
}
