//! MIG partitions as the NVIDIA device plugin's mixed strategy advertises them (one resource
//! per profile, `nvidia.com/mig-<profile>`): quota per profile in a flavor, gangs placed on the
//! nodes that carry the profile, and a clear reason when a profile is out of quota or not
//! covered. The example in docs/admins.md (an H100 MIG pool) is this fleet.

mod support;

use std::collections::BTreeMap;

use muster_admission::{Decision, PendingReason};
use muster_api::gpujob::PendingReasonKind;
use muster_topology::NodeInfo;
use support::{BLOCK, HOST, admitted, cq, cycle, job_of, reason_of, res, scheduler};

const MIG_1G: &str = "nvidia.com/mig-1g.10gb";
const MIG_3G: &str = "nvidia.com/mig-3g.40gb";

/// Four H100 nodes of 8 GPUs in one block, each partitioned as the mixed strategy advertises:
/// four GPUs as 7 × 1g.10gb (28 slices) and four as 2 × 3g.40gb (8 slices).
fn mig_pool() -> Vec<NodeInfo> {
    (0..4)
        .map(|h| {
            let name = format!("h100-mig-{h}");
            NodeInfo {
                name: name.clone(),
                labels: BTreeMap::from([
                    ("pool".to_owned(), "h100-mig".to_owned()),
                    (BLOCK.to_owned(), "b0".to_owned()),
                    (HOST.to_owned(), name),
                ]),
                taints: Vec::new(),
                allocatable: res(&[(MIG_1G, 28), (MIG_3G, 8), ("cpu", 200), ("pods", 110)]),
                schedulable: true,
            }
        })
        .collect()
}

fn queue() -> muster_api::ClusterQueueSpec {
    cq(
        None,
        &[(
            "h100-mig",
            &[
                (MIG_1G, 84, None, None),
                (MIG_3G, 16, None, None),
                ("pods", 1000, None, None),
            ],
        )],
    )
}

#[test]
fn mig_profiles_are_quota_and_placement_resources_of_their_own() {
    let mut s = scheduler(
        &mig_pool(),
        vec![support::flavor("h100-mig")],
        vec![("inference", queue())],
    );
    // 3 pods × 28 slices: one whole node's 1g.10gb slices each, all of the quota.
    s.submit(job_of("notebooks", "inference", 0, 1, 3, MIG_1G, 28));
    // 2 pods × 8 of 3g.40gb: two nodes' 3g slices, all of that quota.
    s.submit(job_of("serving", "inference", 0, 2, 2, MIG_3G, 8));
    // One more 1g.10gb slice: the profile's quota is spent, though nodes have room.
    s.submit(job_of("one-more", "inference", 0, 3, 1, MIG_1G, 1));
    // A whole GPU: not a resource this queue covers.
    s.submit(job_of("whole", "inference", 0, 4, 1, "nvidia.com/gpu", 1));
    let decisions = cycle(&mut s, 10);
    assert_eq!(admitted(&decisions), ["notebooks", "serving"]);
    assert_eq!(
        reason_of(&decisions, "one-more").map(PendingReason::kind),
        Some(PendingReasonKind::QuotaShort)
    );
    assert!(
        matches!(
            reason_of(&decisions, "whole"),
            Some(PendingReason::NotCovered { .. })
        ),
        "{:?}",
        reason_of(&decisions, "whole")
    );
}

#[test]
fn a_gang_of_slices_larger_than_any_node_holds_is_spread_over_nodes_with_the_profile() {
    let mut s = scheduler(
        &mig_pool(),
        vec![support::flavor("h100-mig")],
        vec![("inference", queue())],
    );
    // 4 pods × 20 slices: 80 in all, but one pod per node (28 slices each).
    s.submit(job_of("wide", "inference", 0, 1, 4, MIG_1G, 20));
    let decisions = cycle(&mut s, 10);
    assert_eq!(admitted(&decisions), ["wide"]);
    let nodes: Vec<String> = decisions
        .iter()
        .find_map(|d| match d {
            Decision::Admit(admitted) => Some(
                admitted
                    .pod_sets
                    .iter()
                    .flat_map(|p| p.nodes.iter().cloned())
                    .collect(),
            ),
            _ => None,
        })
        .unwrap_or_default();
    let mut distinct = nodes.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!((nodes.len(), distinct.len()), (4, 4), "{nodes:?}");
}
