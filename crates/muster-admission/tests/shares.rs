//! Fractional GPU requests (`gpuShare`) on nodes whose GPUs HAMi hands out in parts: quota
//! counts the shares exactly in milli-GPU, two shares that do not fit one GPU together never
//! share one, a whole-GPU pod only takes an untouched device, and a job's devices are given
//! back when it ends.

mod support;

use std::collections::BTreeMap;

use muster_admission::{Decision, Job, PendingReason};
use muster_api::gpujob::PendingReasonKind;
use muster_api::resources::names;
use muster_api::{Amount, GpuJob};
use muster_topology::{HAMI_NODE_LABEL, NVIDIA_GPU_COUNT, NodeInfo};
use support::{BLOCK, GPU, HOST, admitted, cq, cycle, reason_of, res, scheduler};

/// `nodes` HAMi nodes of `gpus` GPUs each (10 vGPUs per GPU), in one block, for flavor `hami`.
fn hami_pool(nodes: usize, gpus: u32) -> Vec<NodeInfo> {
    (0..nodes)
        .map(|h| {
            let name = format!("hami-{h}");
            NodeInfo {
                name: name.clone(),
                labels: BTreeMap::from([
                    ("pool".to_owned(), "hami".to_owned()),
                    (BLOCK.to_owned(), "b0".to_owned()),
                    (HOST.to_owned(), name),
                    (HAMI_NODE_LABEL.to_owned(), "on".to_owned()),
                    (NVIDIA_GPU_COUNT.to_owned(), gpus.to_string()),
                ]),
                taints: Vec::new(),
                allocatable: res(&[(GPU, u64::from(gpus) * 10), ("cpu", 64), ("pods", 110)]),
                schedulable: true,
            }
        })
        .collect()
}

/// A GpuJob of `pods` pods, each with `share` of one GPU (or, for `share` "whole", one whole
/// GPU), read as admission reads it.
fn job(id: &str, created: i64, pods: u32, share: &str) -> Job {
    let limits = if share == "whole" {
        serde_json::json!({"nvidia.com/gpu": "1"})
    } else {
        serde_json::json!({"cpu": "1"})
    };
    let mut pod_set = serde_json::json!({"name": "workers", "count": pods,
        "template": {"spec": {"restartPolicy": "Never", "containers": [{
            "name": "main", "image": "server:1", "resources": {"limits": limits}}]}}});
    if share != "whole" {
        pod_set["gpuShare"] = serde_json::json!(share);
    }
    let gpujob: GpuJob = serde_json::from_value(serde_json::json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "GpuJob",
        "metadata": {"name": id, "namespace": "ns", "uid": format!("uid-{id}"),
            "creationTimestamp": format!("2026-01-01T00:00:{created:02}Z")},
        "spec": {"queueName": "inference", "podSets": [pod_set]}
    }))
    .unwrap_or_default();
    let job = Job::from_gpujob(&gpujob, |_| None);
    assert_eq!(job.invalid, None, "{id}");
    job
}

fn queue(gpus: u64) -> muster_api::ClusterQueueSpec {
    cq(
        None,
        &[(
            "hami",
            &[
                (GPU, gpus, None, None),
                ("cpu", 1000, None, None),
                ("pods", 1000, None, None),
            ],
        )],
    )
}

fn flavor() -> (String, muster_api::ResourceFlavorSpec) {
    support::flavor("hami")
}

/// The devices each admitted pod took, by job.
fn devices_of(decisions: &[Decision], id: &str) -> Vec<Vec<u32>> {
    decisions
        .iter()
        .find_map(|d| match d {
            Decision::Admit(a) if a.job == format!("ns/{id}") => {
                Some(a.pod_sets[0].devices.clone())
            }
            _ => None,
        })
        .unwrap_or_default()
}

#[test]
fn a_share_asks_its_part_of_quota_and_one_vgpu_of_its_node() {
    let job = job("notebook", 0, 1, "250m");
    let set = &job.pod_sets[0];
    assert_eq!(set.requests.get(names::GPU_SHARE), Amount::from_milli(250));
    assert_eq!(set.requests.get(GPU), Amount::from_units(1), "one vGPU");
    assert_eq!(job.total_requests().get(GPU), Amount::from_milli(250));
    assert_eq!(job.total_requests().get(names::GPU_SHARE), Amount::ZERO);
}

#[test]
fn quota_counts_shares_exactly_in_milli_gpu() {
    let mut s = scheduler(
        &hami_pool(2, 2),
        vec![flavor()],
        vec![("inference", queue(1))],
    );
    s.submit(job("a", 1, 2, "250m"));
    s.submit(job("b", 2, 1, "500m"));
    s.submit(job("c", 3, 1, "10m"));
    let decisions = cycle(&mut s, 10);
    assert_eq!(admitted(&decisions), ["a", "b"]);
    assert_eq!(
        reason_of(&decisions, "c").map(PendingReason::kind),
        Some(PendingReasonKind::QuotaShort),
        "a, b use 1000m of the 1 GPU of quota"
    );
    s.finish("ns/b");
    let decisions = cycle(&mut s, 20);
    assert_eq!(admitted(&decisions), ["c"]);
}

#[test]
fn shares_that_do_not_fit_one_gpu_together_wait_for_a_device_of_their_own() {
    // One node of two GPUs; quota is no limit.
    let mut s = scheduler(
        &hami_pool(1, 2),
        vec![flavor()],
        vec![("inference", queue(8))],
    );
    s.submit(job("first", 1, 1, "600m"));
    s.submit(job("whole", 2, 1, "whole"));
    s.submit(job("second", 3, 1, "600m"));
    s.submit(job("small", 4, 1, "400m"));
    let decisions = cycle(&mut s, 10);
    assert_eq!(admitted(&decisions), ["first", "whole", "small"]);
    assert_eq!(devices_of(&decisions, "first"), [vec![0]]);
    assert_eq!(
        devices_of(&decisions, "whole"),
        [vec![1]],
        "the untouched device"
    );
    assert_eq!(
        devices_of(&decisions, "small"),
        [vec![0]],
        "the 400m left beside first"
    );
    assert!(
        reason_of(&decisions, "second").is_some(),
        "two 600m shares never share one GPU"
    );
    // The whole GPU ends: its device is untouched again and takes the second share.
    s.finish("ns/whole");
    let decisions = cycle(&mut s, 20);
    assert_eq!(admitted(&decisions), ["second"]);
    assert_eq!(devices_of(&decisions, "second"), [vec![1]]);
}

#[test]
fn a_restored_holding_keeps_its_devices() {
    let mut s = scheduler(
        &hami_pool(1, 2),
        vec![flavor()],
        vec![("inference", queue(8))],
    );
    s.submit(job("first", 1, 1, "600m"));
    let decisions = cycle(&mut s, 10);
    let Some(Decision::Admit(first)) = decisions
        .into_iter()
        .find(|d| matches!(d, Decision::Admit(_)))
    else {
        unreachable!("first is admitted")
    };
    // A restarted scheduler restores first's holding on device 1 (where its pod runs).
    let mut restarted = scheduler(
        &hami_pool(1, 2),
        vec![flavor()],
        vec![("inference", queue(8))],
    );
    let mut placement = first.pod_sets[0].clone();
    placement.devices = vec![vec![1]];
    restarted.restore(
        job("first", 1, 1, "600m"),
        muster_admission::Holding {
            cluster_queue: "inference".into(),
            since: Some(10),
            pod_sets: vec![placement],
        },
        false,
    );
    restarted.submit(job("whole", 2, 1, "whole"));
    let decisions = cycle(&mut restarted, 20);
    assert_eq!(devices_of(&decisions, "whole"), [vec![0]]);
}

/// A share in a flavor whose nodes count their GPUs whole waits with a reason that says what
/// a node needs to take it.
#[test]
fn a_share_with_no_hami_node_says_so() {
    let mut plain = hami_pool(1, 2);
    plain[0].labels.remove(muster_topology::HAMI_NODE_LABEL);
    let mut s = scheduler(&plain, vec![flavor()], vec![("inference", queue(8))]);
    s.submit(job("notebook", 1, 1, "250m"));
    let decisions = cycle(&mut s, 10);
    let Some(PendingReason::NoTopologyFit(no_fit)) = reason_of(&decisions, "notebook") else {
        unreachable!("{decisions:?}")
    };
    assert_eq!(no_fit.kind, muster_topology::NoFitKind::NoEligibleNodes);
    assert!(
        no_fit.message.contains("250m of one GPU") && no_fit.message.contains("gpu: \"on\""),
        "{}",
        no_fit.message
    );
}
