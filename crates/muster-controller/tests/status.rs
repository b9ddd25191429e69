//! GpuJob status from decisions: the right phase and conditions, and no write when nothing
//! changed.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use muster_admission::{Admitted, PendingReason, PodSetPlacement};
use muster_api::gpujob::{GpuJobPhase, GpuJobStatus, PendingReasonKind};
use muster_controller::status;

fn at(second: i64) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(second).unwrap_or_default())
}

fn figures(position: u32, eta: Option<i64>) -> status::Figures {
    status::Figures {
        position,
        eta,
        range: None,
    }
}

#[test]
fn a_waiting_job_s_status_carries_its_start_range_and_a_new_range_is_a_change() {
    let reason = PendingReason::CapacityReserved {
        for_job: "ns/big".into(),
        until: Some(1_000),
    };
    let range = |latest: i64| muster_api::gpujob::StartRange {
        earliest: Some(at(600)),
        likely: Some(at(900)),
        latest: Some(at(latest)),
        as_of: at(100),
    };
    let with_range = |latest| status::Figures {
        range: Some(range(latest)),
        ..figures(2, None)
    };
    let first = status::pending(
        &GpuJobStatus::default(),
        Some(1),
        &reason,
        &with_range(1_500),
        &at(100),
    )
    .unwrap_or_default();
    assert_eq!(
        first
            .pending_reason
            .as_ref()
            .and_then(|r| r.start_range.clone()),
        Some(range(1_500))
    );
    assert_eq!(
        status::pending(&first, Some(1), &reason, &with_range(1_500), &at(160)),
        None
    );
    // A later forecast with the same bounds writes nothing: the status keeps its asOf.
    let again = status::Figures {
        range: Some(muster_api::gpujob::StartRange {
            as_of: at(160),
            ..range(1_500)
        }),
        ..figures(2, None)
    };
    assert_eq!(
        status::pending(&first, Some(1), &reason, &again, &at(160)),
        None
    );
    let later =
        status::pending(&first, Some(1), &reason, &with_range(2_000), &at(160)).unwrap_or_default();
    assert_eq!(
        later.pending_reason.and_then(|r| r.start_range),
        Some(range(2_000))
    );
}

#[test]
fn a_waiting_job_is_written_once_and_again_only_when_its_reason_changes() {
    let reserved = PendingReason::CapacityReserved {
        for_job: "ns/big".into(),
        until: Some(1_000),
    };
    let first = status::pending(
        &GpuJobStatus::default(),
        Some(1),
        &reserved,
        &figures(3, None),
        &at(10),
    )
    .unwrap_or_default();
    assert_eq!(first.phase, Some(GpuJobPhase::Queued));
    assert_eq!(first.queue_position, Some(3));
    assert_eq!(
        first.pending_reason.as_ref().map(|r| r.kind),
        Some(PendingReasonKind::CapacityReserved)
    );
    // The same decision a cycle later: nothing to write.
    assert_eq!(
        status::pending(&first, Some(1), &reserved, &figures(3, None), &at(20)),
        None
    );
    // A new position is a change; the Valid condition keeps its transition time.
    let moved = status::pending(
        &first,
        Some(1),
        &reserved,
        &figures(2, Some(1_000)),
        &at(30),
    )
    .unwrap_or_default();
    assert_eq!(moved.queue_position, Some(2));
    assert_eq!(moved.pending_reason.and_then(|r| r.eta), Some(at(1_000)));
    assert_eq!(
        moved.conditions[0].last_transition_time,
        first.conditions[0].last_transition_time
    );
}

#[test]
fn an_invalid_job_is_pending_with_valid_false() {
    let reason = PendingReason::InvalidJob("spec.podSets[0].count: must be at least 1".into());
    let s = status::pending(
        &GpuJobStatus::default(),
        Some(2),
        &reason,
        &figures(0, None),
        &at(5),
    )
    .unwrap_or_default();
    assert_eq!(s.phase, Some(GpuJobPhase::Pending));
    assert_eq!(s.queue_position, None);
    let valid = &s.conditions[0];
    assert_eq!(
        (
            valid.type_.as_str(),
            valid.status.as_str(),
            valid.reason.as_str()
        ),
        ("Valid", "False", "InvalidJob")
    );
    assert!(valid.message.contains("spec.podSets[0].count"));
}

#[test]
fn an_admission_records_queue_flavor_and_domain() {
    let waiting = status::pending(
        &GpuJobStatus::default(),
        Some(1),
        &PendingReason::Suspended,
        &figures(1, None),
        &at(1),
    )
    .unwrap_or_default();
    let admitted = Admitted {
        job: "ns/train".into(),
        cluster_queue: "research".into(),
        pod_sets: vec![PodSetPlacement {
            name: "workers".into(),
            flavor: "h100".into(),
            domain: vec![("cloud.google.com/gce-topology-block".into(), "b-07".into())],
            nodes: vec!["n1".into(), "n2".into()],
            devices: Vec::new(),
        }],
        borrowing: false,
    };
    let s = status::admitted(&waiting, Some(1), &admitted, &at(9)).unwrap_or_default();
    assert_eq!(s.phase, Some(GpuJobPhase::Admitted));
    assert_eq!(s.pending_reason, None);
    let admission = s.admission.clone().unwrap_or_default();
    assert_eq!(admission.cluster_queue, "research");
    assert_eq!(
        admission.pod_sets[0].levels,
        ["cloud.google.com/gce-topology-block"]
    );
    assert_eq!(admission.pod_sets[0].domains[0].values, ["b-07"]);
    assert_eq!(admission.pod_sets[0].domains[0].count, 2);
    let types: Vec<(&str, &str)> = s
        .conditions
        .iter()
        .map(|c| (c.type_.as_str(), c.status.as_str()))
        .collect();
    assert_eq!(
        types,
        [
            ("Valid", "True"),
            ("QuotaReserved", "True"),
            ("Admitted", "True")
        ]
    );
    assert_eq!(status::admitted(&s, Some(1), &admitted, &at(10)), None);
}

/// A job `ns/{id}` of one pod asking for 6 GPUs, through LocalQueue `local_queue`.
fn six_gpu_job(id: &str, local_queue: &str, created: i64) -> muster_admission::Job {
    use muster_api::{Amount, Resources};
    use muster_topology::{Constraint, PodSetRequest};
    let requests: Resources = [
        ("nvidia.com/gpu".to_owned(), Amount::from_units(6)),
        ("pods".to_owned(), Amount::from_units(1)),
    ]
    .into_iter()
    .collect();
    muster_admission::Job {
        id: format!("ns/{id}"),
        uid: id.into(),
        local_queue: local_queue.into(),
        priority: 0,
        created,
        expected_runtime: None,
        pod_sets: vec![PodSetRequest {
            name: "w".into(),
            count: 1,
            requests,
            node_selector: std::collections::BTreeMap::new(),
            affinity: Vec::new(),
            tolerations: Vec::new(),
            constraint: Constraint::None,
            whole_gpus: false,
        }],
        invalid: None,
        suspended: false,
        provisioned: false,
    }
}

/// The jobs of `a_cluster_queue_reports_its_jobs_and_usage`, per LocalQueue: every job counts
/// under its own, and under no ClusterQueue when its LocalQueue leads to none that admits.
fn assert_counted_per_local_queue(all: &status::QueueCounts) {
    let local: Vec<(&str, i32, i32)> = all
        .local
        .iter()
        .map(|(q, c)| (q.as_str(), c.pending, c.admitted))
        .collect();
    assert_eq!(
        local,
        [
            ("ns/lq", 1, 1),
            ("ns/lq2", 1, 0),
            ("ns/nowhere", 1, 0),
            ("ns/to-broken", 1, 0)
        ]
    );
    assert_eq!(all.cluster.get("broken"), None);
}

/// A queue whose quota cannot be read admits nothing and says why, naming the field.
fn assert_invalid(s: &muster_admission::Scheduler) {
    let current = muster_api::ClusterQueueStatus::default();
    let counts = status::queue_counts(s)
        .cluster
        .get("broken")
        .copied()
        .unwrap_or_default();
    let st =
        status::cluster_queue(&current, "broken", counts, Some(1), s, &at(5)).unwrap_or_default();
    let active = &st.conditions[0];
    assert_eq!(
        (active.status.as_str(), active.reason.as_str()),
        ("False", "InvalidSpec")
    );
    assert!(
        active
            .message
            .contains("spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"),
        "{}",
        active.message
    );
}

#[test]
fn a_cluster_queue_reports_its_jobs_and_usage() {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use muster_admission::{Cluster, Scheduler};
    use muster_api::cluster_queue::{FlavorQuotas, ResourceGroup, ResourceQuota};
    use muster_api::{Amount, ClusterQueueSpec, ClusterQueueStatus, ResourceFlavorSpec, Resources};
    use muster_topology::NodeInfo;

    let gpus = |n: u64| -> Resources {
        [
            ("nvidia.com/gpu".to_owned(), Amount::from_units(n)),
            ("pods".to_owned(), Amount::from_units(1)),
        ]
        .into_iter()
        .collect()
    };
    let node = NodeInfo {
        name: "n1".into(),
        labels: BTreeMap::from([("kubernetes.io/hostname".to_owned(), "n1".to_owned())]),
        taints: Vec::new(),
        allocatable: gpus(8),
        schedulable: true,
    };
    let cluster = Cluster::new(
        [("h100".to_owned(), ResourceFlavorSpec::default())],
        &[node],
    );
    let spec = ClusterQueueSpec {
        namespace_selector: Some(LabelSelector::default()),
        resource_groups: vec![ResourceGroup {
            covered_resources: vec!["nvidia.com/gpu".into()],
            flavors: vec![FlavorQuotas {
                name: "h100".into(),
                resources: vec![ResourceQuota {
                    name: "nvidia.com/gpu".into(),
                    nominal_quota: Quantity("8".into()),
                    borrowing_limit: None,
                    lending_limit: None,
                }],
            }],
        }],
        ..ClusterQueueSpec::default()
    };
    // A second queue whose quota cannot be read: it admits nothing and says why.
    let mut broken = spec.clone();
    broken.resource_groups[0].flavors[0].resources[0].nominal_quota = Quantity("lots".into());
    let mut s = Scheduler::new(
        cluster,
        [("q".to_owned(), spec), ("broken".to_owned(), broken)],
        [
            ("ns/lq".to_owned(), "q".to_owned()),
            ("ns/lq2".to_owned(), "q".to_owned()),
            ("ns/to-broken".to_owned(), "broken".to_owned()),
        ],
    );
    // a and b through ns/lq, c through ns/lq2 (both lead to q); d names a LocalQueue that
    // does not exist, e one whose ClusterQueue admits nothing: neither waits in any.
    let queues = ["ns/lq", "ns/lq", "ns/lq2", "ns/nowhere", "ns/to-broken"];
    for (i, (id, local_queue)) in ["a", "b", "c", "d", "e"].iter().zip(queues).enumerate() {
        s.submit(six_gpu_job(id, local_queue, i64::try_from(i).unwrap_or(0)));
    }
    s.cycle(0);
    let all = status::queue_counts(&s);
    assert_counted_per_local_queue(&all);
    let counts = all.cluster.get("q").copied().unwrap_or_default();
    let st = status::cluster_queue(
        &ClusterQueueStatus::default(),
        "q",
        counts,
        Some(1),
        &s,
        &at(5),
    )
    .unwrap_or_default();
    assert_eq!((st.pending_jobs, st.admitted_jobs), (2, 1));
    assert_eq!(st.flavors_usage[0].name, "h100");
    assert_eq!(st.flavors_usage[0].resources[0].total, Quantity("6".into()));
    let active = &st.conditions[0];
    assert_eq!(
        (
            active.type_.as_str(),
            active.status.as_str(),
            active.reason.as_str()
        ),
        ("Active", "True", "Ready")
    );
    assert_eq!(
        status::cluster_queue(&st, "q", counts, Some(1), &s, &at(6)),
        None
    );
    assert_invalid(&s);
    assert_counts_follow_the_jobs(&mut s);
}

/// As jobs end, are admitted, queue again and move between LocalQueues, the counts kept stay
/// what a walk over every job finds.
fn assert_counts_follow_the_jobs(s: &mut muster_admission::Scheduler) {
    assert_counts_as_a_scan_finds(s);
    s.finish("ns/a");
    s.cycle(10);
    assert_counts_as_a_scan_finds(s);
    assert_eq!(
        status::queue_counts(s).cluster.get("q").copied(),
        Some(status::ClusterQueueCounts {
            pending: 1,
            admitted: 1
        })
    );
    s.requeue("ns/b");
    assert_counts_as_a_scan_finds(s);
    s.submit(six_gpu_job("c", "ns/lq", 2));
    s.submit(six_gpu_job("f", "ns/lq2", 5));
    s.cycle(20);
    assert_counts_as_a_scan_finds(s);
    for id in ["ns/b", "ns/c", "ns/d", "ns/e", "ns/f"] {
        s.finish(id);
    }
    assert_counts_as_a_scan_finds(s);
    assert!(status::queue_counts(s).local.is_empty());
}

/// `queue_counts` agrees with counting every job the scheduler has, one by one.
fn assert_counts_as_a_scan_finds(s: &muster_admission::Scheduler) {
    use muster_admission::JobState;
    let mut scanned = status::QueueCounts::default();
    for (job, state) in s.jobs_with_states() {
        let local = scanned.local.entry(job.local_queue.clone()).or_default();
        match state {
            JobState::Pending => local.pending += 1,
            JobState::Admitted(h) | JobState::Provisioning(h) | JobState::Evicting(h) => {
                local.admitted += 1;
                for (set, placement) in job.pod_sets.iter().zip(&h.pod_sets) {
                    local
                        .usage
                        .entry(placement.flavor.clone())
                        .or_default()
                        .add_all(&muster_admission::quota_usage(set));
                }
                scanned
                    .cluster
                    .entry(h.cluster_queue.clone())
                    .or_default()
                    .admitted += 1;
            }
        }
    }
    for (local_queue, local) in &scanned.local {
        if let (Some(cq), true) = (
            s.cluster_queue_of_local_queue(local_queue),
            local.pending > 0,
        ) {
            scanned.cluster.entry(cq).or_default().pending += local.pending;
        }
    }
    assert_eq!(
        format!("{:?}", status::queue_counts(s)),
        format!("{scanned:?}")
    );
}

#[test]
fn a_flavor_says_whether_it_is_valid_naming_the_field() {
    use muster_api::{ResourceFlavor, ResourceFlavorStatus, Validate as _};
    let flavor: ResourceFlavor = serde_json::from_value(serde_json::json!({
        "apiVersion": "muster.dev/v1alpha1", "kind": "ResourceFlavor",
        "metadata": {"name": "h100"},
        "spec": {"nodeLabels": {"gpu": "not a label value"}}}))
    .unwrap_or_default();
    let problem = flavor.validate().into_iter().next();
    let st = status::flavor(
        &ResourceFlavorStatus::default(),
        problem.as_ref(),
        Some(2),
        &at(5),
    )
    .unwrap_or_default();
    let valid = &st.conditions[0];
    assert_eq!(
        (
            valid.type_.as_str(),
            valid.status.as_str(),
            valid.reason.as_str()
        ),
        ("Valid", "False", "InvalidSpec")
    );
    assert!(
        valid.message.starts_with("spec.nodeLabels[\"gpu\"]"),
        "{}",
        valid.message
    );
    assert_eq!(status::flavor(&st, problem.as_ref(), Some(2), &at(6)), None);
    let fixed = status::flavor(&st, None, Some(3), &at(7)).unwrap_or_default();
    assert_eq!(fixed.conditions[0].status, "True");
}
