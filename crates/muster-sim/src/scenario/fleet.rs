//! The fleet a scenario describes: every node of every pool, labelled for its block, sub-block,
//! host, TPU slice and autoscaler pool as the real fleet labels them.

use muster_api::resource_flavor::HOSTNAME_LABEL;
use muster_api::wire::{AUTOSCALER_POOL_LABEL, CAPACITY_HOST_TAINT};
use muster_api::{Amount, Resources};
use muster_topology::NodeInfo;

use super::ClusterSpec;

/// vGPUs per GPU on a HAMi pool (HAMi's default `deviceSplitCount`).
const HAMI_SPLIT: u64 = 10;

/// Every node of every pool: `<pool>-b<block>-h<host>`, labelled with the pool's labels, its
/// block and its host name. A pool labelled `gpu: "on"` is a HAMi pool: its GPUs are tracked
/// one by one (`nvidia.com/gpu.count` is set) and each advertises 10 vGPUs.
pub(super) fn nodes(cluster: &ClusterSpec) -> Result<Vec<NodeInfo>, String> {
    let mut out = Vec::new();
    for pool in &cluster.pools {
        let mut allocatable = Resources::new();
        for (k, v) in &pool.allocatable {
            let amount = Amount::parse(v)
                .map_err(|e| format!("pool {}: allocatable.{k}: {e}", pool.name))?;
            allocatable.set(k, amount);
        }
        let resource = if pool.tpu.is_some() {
            muster_api::resources::names::GOOGLE_TPU
        } else {
            pool.resource.as_str()
        };
        allocatable.set(resource, Amount::from_units(u64::from(pool.gpus_per_host)));
        let hami = pool
            .labels
            .get(muster_topology::HAMI_NODE_LABEL)
            .map(String::as_str)
            == Some("on");
        if hami {
            // HAMi's device plugin advertises each GPU as 10 vGPUs (its default split count),
            // and GPU feature discovery labels the physical count.
            allocatable.set(
                resource,
                Amount::from_units(u64::from(pool.gpus_per_host) * HAMI_SPLIT),
            );
        }
        if allocatable.get("pods").is_zero() {
            allocatable.set("pods", Amount::from_units(110));
        }
        for b in 0..pool.blocks {
            for h in 0..pool.hosts_per_block {
                let name = format!("{}-b{b:02}-h{h:03}", pool.name);
                let mut labels = pool.labels.clone();
                if hami {
                    labels.insert(
                        muster_topology::NVIDIA_GPU_COUNT.to_owned(),
                        pool.gpus_per_host.to_string(),
                    );
                }
                labels.insert(pool.block_label.clone(), format!("{}-b{b:02}", pool.name));
                labels.insert(HOSTNAME_LABEL.to_owned(), name.clone());
                if let Some(subs) = pool.sub_blocks_per_block.filter(|n| *n > 0) {
                    let per_sub = pool.hosts_per_block.div_ceil(subs).max(1);
                    labels.insert(
                        pool.sub_block_label.clone(),
                        format!("{}-b{b:02}-s{}", pool.name, h / per_sub),
                    );
                }
                if let Some(tpu) = &pool.tpu {
                    use muster_api::tpu::{ACCELERATOR_LABEL, NODE_POOL_LABEL, TOPOLOGY_LABEL};
                    labels.insert(NODE_POOL_LABEL.to_owned(), format!("{}-b{b:02}", pool.name));
                    labels.insert(ACCELERATOR_LABEL.to_owned(), tpu.accelerator.clone());
                    labels.insert(TOPOLOGY_LABEL.to_owned(), tpu.topology.clone());
                }
                let mut taints = Vec::new();
                if pool.autoscaler.is_some() {
                    labels.insert(AUTOSCALER_POOL_LABEL.to_owned(), pool.name.clone());
                    taints.push(k8s_openapi::api::core::v1::Taint {
                        key: CAPACITY_HOST_TAINT.to_owned(),
                        value: Some(name.clone()),
                        effect: "NoSchedule".to_owned(),
                        time_added: None,
                    });
                }
                out.push(NodeInfo {
                    name,
                    labels,
                    taints,
                    allocatable: allocatable.clone(),
                    schedulable: true,
                });
            }
        }
    }
    Ok(out)
}
