//! The labels, annotations, finalizer, scheduling gate and taints Muster writes onto (or reads
//! from) objects that are not its own kinds: the wire contract between the controller, the
//! capacity it buys, the simulator and anything that watches a gang's pods.
//!
//! Each name is defined here once; every crate that writes or reads one uses these constants,
//! so a rename is one edit and no reader can drift from the writer.

/// The scheduling gate Muster puts on a gang's pods until all of them exist.
pub const ADMISSION_GATE: &str = "muster.dev/admission";

/// The finalizer that lets Muster release a deleted job's quota and remove its pods first.
pub const FINALIZER: &str = "muster.dev/gang";

/// Label naming the GpuJob a pod, Service, PodTemplate or ProvisioningRequest belongs to.
pub const JOB_LABEL: &str = "muster.dev/job-name";

/// Label naming a pod's pod set.
pub const POD_SET_LABEL: &str = "muster.dev/pod-set";

/// Label carrying a pod's index within its pod set.
pub const POD_INDEX_LABEL: &str = "muster.dev/pod-index";

/// Label carrying the job's `status.requeueCount` when the pod was released: pods of an
/// earlier attempt are stale and never taken for the current gang.
pub const ATTEMPT_LABEL: &str = "muster.dev/attempt";

/// Annotation naming the ClusterQueue whose quota the pod's gang uses.
pub const CLUSTER_QUEUE_ANNOTATION: &str = "muster.dev/cluster-queue";

/// Annotation naming the pod's ResourceFlavor.
pub const FLAVOR_ANNOTATION: &str = "muster.dev/flavor";

/// Annotation with the pod set's domain as `level=value` pairs, widest first, joined by `,`.
pub const DOMAIN_ANNOTATION: &str = "muster.dev/domain";

/// A domain as [`DOMAIN_ANNOTATION`] spells it: `level=value` pairs joined by `,`.
pub fn format_domain(domain: &[(String, String)]) -> String {
    domain
        .iter()
        .map(|(level, value)| format!("{level}={value}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Reads a [`DOMAIN_ANNOTATION`] back (pairs without `=` are skipped).
pub fn parse_domain(text: &str) -> Vec<(String, String)> {
    text.split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(level, value)| (level.to_owned(), value.to_owned()))
        .collect()
}

/// Annotation with the GPU devices of its node a pod was counted on, joined by `,` (set on
/// nodes whose GPUs are handed out in parts): the device Muster booked its share on, or the
/// untouched devices it booked whole.
pub const GPU_DEVICES_ANNOTATION: &str = "muster.dev/gpu-devices";

/// The taint on every host of a simulated autoscaler pool (its value is the host's name): only
/// the job the host was bought for tolerates it.
pub const CAPACITY_HOST_TAINT: &str = "muster.dev/bought-for";

/// The label naming a simulated autoscaler pool on its nodes.
pub const AUTOSCALER_POOL_LABEL: &str = "muster.dev/autoscaler-pool";

/// The taint that says a node is really down: the upstream signal for a non-graceful node
/// shutdown, added by an admin (or their automation) once the machine is known to be off.
/// Pods on a node with it can no longer run (kube-controller-manager's pod garbage collector
/// force-deletes them), whatever the node's Ready condition says.
pub const OUT_OF_SERVICE_TAINT: &str = "node.kubernetes.io/out-of-service";

/// The taint the API server puts on a new node until it is Ready.
pub const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";

/// The taint the node lifecycle controller puts on a node whose heartbeats stopped.
pub const UNREACHABLE_TAINT: &str = "node.kubernetes.io/unreachable";

/// Label that puts a `batch/v1` Job, a JobSet or a pod in a LocalQueue (its value is the
/// LocalQueue's name, in the object's namespace): nothing without it is Muster's.
pub const QUEUE_NAME_LABEL: &str = "muster.dev/queue-name";

/// Pod-template annotation of a Job or JobSet: every pod of the pod set in one domain of this
/// level (a GpuJob pod set's `topology.required`).
pub const TOPOLOGY_REQUIRED_ANNOTATION: &str = "muster.dev/topology-required";

/// Pod-template annotation of a Job or JobSet: the tightest domain possible, from this level
/// up (a GpuJob pod set's `topology.preferred`).
pub const TOPOLOGY_PREFERRED_ANNOTATION: &str = "muster.dev/topology-preferred";

/// Pod-template annotation of a Job or JobSet: the TPU accelerator of a whole slice (a GpuJob
/// pod set's `topology.tpu.accelerator`).
pub const TPU_ACCELERATOR_ANNOTATION: &str = "muster.dev/tpu-accelerator";

/// Pod-template annotation of a Job or JobSet: the TPU slice's shape (a GpuJob pod set's
/// `topology.tpu.topology`).
pub const TPU_TOPOLOGY_ANNOTATION: &str = "muster.dev/tpu-topology";

/// Pod-template annotation of a Job or JobSet: each pod's part of one GPU (a GpuJob pod set's
/// `gpuShare`).
pub const GPU_SHARE_ANNOTATION: &str = "muster.dev/gpu-share";

/// Label on the GpuJob Muster makes as the queue entry of a Job or JobSet: the kind of the
/// workload it stands for (`Job`, `JobSet`). The entry's controller owner reference names the
/// workload itself.
pub const WORKLOAD_KIND_LABEL: &str = "muster.dev/workload-kind";

/// Label the Job controller puts on each pod of an Indexed Job: its completion index, the pod
/// index Muster places it by (pod `i` on the `i`-th node of its pod set).
pub const COMPLETION_INDEX_LABEL: &str = "batch.kubernetes.io/job-completion-index";

/// Label on pods that run as one gang: the group's name (in the pods' namespace). Pods that
/// also carry [`QUEUE_NAME_LABEL`] are queued as one workload once the group is whole.
pub const POD_GROUP_LABEL: &str = "muster.dev/pod-group";

/// Label (or annotation) on the pods of a group: how many pods the group has, all admitted
/// together.
pub const POD_GROUP_SIZE_LABEL: &str = "muster.dev/pod-group-size";

#[cfg(test)]
mod tests {
    use super::*;

    /// These names are on objects in running clusters and in other tools' selectors: renaming
    /// one strands every pod, request and finalizer written before. Change one only with a
    /// migration.
    #[test]
    fn the_wire_names_are_the_ones_clusters_already_carry() {
        let names = [
            ADMISSION_GATE,
            FINALIZER,
            JOB_LABEL,
            POD_SET_LABEL,
            POD_INDEX_LABEL,
            ATTEMPT_LABEL,
            CLUSTER_QUEUE_ANNOTATION,
            FLAVOR_ANNOTATION,
            DOMAIN_ANNOTATION,
            GPU_DEVICES_ANNOTATION,
            CAPACITY_HOST_TAINT,
            AUTOSCALER_POOL_LABEL,
            QUEUE_NAME_LABEL,
            TOPOLOGY_REQUIRED_ANNOTATION,
            TOPOLOGY_PREFERRED_ANNOTATION,
            TPU_ACCELERATOR_ANNOTATION,
            TPU_TOPOLOGY_ANNOTATION,
            GPU_SHARE_ANNOTATION,
            WORKLOAD_KIND_LABEL,
            COMPLETION_INDEX_LABEL,
            POD_GROUP_LABEL,
            POD_GROUP_SIZE_LABEL,
        ];
        assert_eq!(
            names,
            [
                "muster.dev/admission",
                "muster.dev/gang",
                "muster.dev/job-name",
                "muster.dev/pod-set",
                "muster.dev/pod-index",
                "muster.dev/attempt",
                "muster.dev/cluster-queue",
                "muster.dev/flavor",
                "muster.dev/domain",
                "muster.dev/gpu-devices",
                "muster.dev/bought-for",
                "muster.dev/autoscaler-pool",
                "muster.dev/queue-name",
                "muster.dev/topology-required",
                "muster.dev/topology-preferred",
                "muster.dev/tpu-accelerator",
                "muster.dev/tpu-topology",
                "muster.dev/gpu-share",
                "muster.dev/workload-kind",
                "batch.kubernetes.io/job-completion-index",
                "muster.dev/pod-group",
                "muster.dev/pod-group-size",
            ]
        );
    }
}
