//! Jobs as admission sees them: who they are, where they queue, in what order, and what each
//! pod set needs.

use std::cmp::Reverse;

use muster_api::resources::names;
use muster_api::{GpuJob, ObjectRef, Resources, Validate};
use muster_topology::PodSetRequest;

/// A job's identity: `namespace/name`.
pub type JobId = String;

/// One job, pending or admitted.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    /// `namespace/name`.
    pub id: JobId,
    /// The object's UID: the last tie-breaker of queue order.
    pub uid: String,
    /// The LocalQueue it was submitted to, as `namespace/name`.
    pub local_queue: String,
    /// Higher runs first.
    pub priority: i32,
    /// Creation time, seconds.
    pub created: i64,
    /// How long it runs once started, when the submitter said so; used for backfill.
    pub expected_runtime: Option<i64>,
    /// Its pod sets, without any flavor's labels or tolerations.
    pub pod_sets: Vec<PodSetRequest>,
    /// Why the job cannot be admitted as written, when it cannot.
    pub invalid: Option<String>,
    /// `spec.suspend`: held back on purpose.
    pub suspended: bool,
    /// Capacity was bought for it and is ready: while it holds its quota as a provisioning job
    /// it starts there first (see `Scheduler::capacity_ready`), and it never provisions again.
    pub provisioned: bool,
}

impl Job {
    /// Reads a GpuJob. `priority_class` resolves `spec.priorityClassName` to a value (None:
    /// no such class, which makes the job invalid). A job that fails validation is still
    /// returned, with `invalid` naming the field and the fix, so that it can be reported.
    pub fn from_gpujob(job: &GpuJob, priority_class: impl Fn(&str) -> Option<i32>) -> Job {
        let meta = &job.metadata;
        let namespace = meta.namespace.clone().unwrap_or_default();
        let name = meta.name.clone().unwrap_or_default();
        let spec = &job.spec;
        let mut invalid = job
            .validate()
            .first()
            .map(|e| format!("{}: {}", e.path, e.message));
        let priority = spec.priority_with(priority_class).unwrap_or_else(|class| {
            invalid.get_or_insert_with(|| {
                format!(
                    "spec.priorityClassName: no PriorityClass {class:?} exists; create it or name another"
                )
            });
            0
        });
        let mut pod_sets = Vec::with_capacity(spec.pod_sets.len());
        for set in &spec.pod_sets {
            match PodSetRequest::from_pod_set(set, None) {
                Ok(mut req) => {
                    // Pods that accept shared GPUs may also go to time-shared nodes.
                    req.whole_gpus &= !spec.accept_shared_gpus;
                    pod_sets.push(req);
                }
                Err(e) => {
                    invalid.get_or_insert_with(|| e.to_string());
                }
            }
        }
        Job {
            id: ObjectRef::new(&namespace, &name).into_string(),
            uid: meta.uid.clone().unwrap_or_default(),
            local_queue: ObjectRef::new(&namespace, &spec.queue_name).into_string(),
            priority,
            created: meta
                .creation_timestamp
                .as_ref()
                .map_or(0, |t| t.0.as_second()),
            expected_runtime: spec.expected_runtime_seconds,
            pod_sets,
            invalid,
            suspended: spec.suspend,
            provisioned: false,
        }
    }

    /// The queue order: higher priority first, then older, then by UID (and id, so that two
    /// jobs never compare equal).
    pub fn order_key(&self) -> (Reverse<i32>, i64, &str, &str) {
        (Reverse(self.priority), self.created, &self.uid, &self.id)
    }

    /// What the job's pods need in all, for quota: every pod set's requests times its count,
    /// without the pod slot.
    pub fn total_requests(&self) -> Resources {
        let mut total = Resources::new();
        for set in &self.pod_sets {
            total.add_all(&quota_usage(set));
        }
        total
    }

    /// The number of GPUs (`nvidia.com/gpu`) or TPU chips the job asks for in all.
    pub fn accelerators(&self) -> u64 {
        let total = self.total_requests();
        (total.get(names::NVIDIA_GPU).milli() + total.get(names::GOOGLE_TPU).milli()) / 1000
    }

    /// What the job holds of accelerators in all, in thousandths of a GPU: whole GPUs and TPU
    /// chips, parts of a GPU exactly, and MIG slices by their share of a GPU's compute (see
    /// [`mig_share_milli`]). The weight of GPU time lost or spent waiting: a job of shares or
    /// MIG slices holds real capacity even when it holds no whole GPU.
    pub fn accelerator_milli(&self) -> u64 {
        let total = self.total_requests();
        total
            .iter()
            .map(|(resource, amount)| {
                if resource == names::NVIDIA_GPU || resource == names::GOOGLE_TPU {
                    amount.milli()
                } else if let Some(share) = mig_share_milli(resource) {
                    // A count of slices: whole units, each worth `share` of a GPU.
                    (amount.milli() / 1000).saturating_mul(share)
                } else {
                    0
                }
            })
            .fold(0u64, u64::saturating_add)
    }
}

/// The share of one GPU, in thousandths, that a slice of MIG profile `resource` holds
/// (`nvidia.com/mig-3g.40gb`: 3 of an H100's or A100's 7 compute slices, 428), or `None` when
/// `resource` is not a MIG profile. An A30 has 4 compute slices; its profiles are told apart
/// by their memory (`1g.6gb`, `2g.12gb`, `4g.24gb`). A profile whose compute part cannot be
/// read counts as a whole GPU.
pub fn mig_share_milli(resource: &str) -> Option<u64> {
    let profile = resource.strip_prefix("nvidia.com/mig-")?;
    let compute = profile
        .split_once('g')
        .and_then(|(n, _)| n.parse::<u64>().ok())
        .filter(|n| *n > 0);
    let Some(compute) = compute else {
        return Some(1000);
    };
    let memory = profile.split_once('.').map_or("", |(_, m)| m);
    let memory = memory.split('+').next().unwrap_or(memory);
    let slices = if matches!((compute, memory), (1, "6gb") | (2, "12gb") | (4, "24gb")) {
        4
    } else {
        7
    };
    Some((compute * 1000 / slices).min(1000))
}

/// One pod set's quota usage: per-pod requests times the count, without the pod slot (pods are
/// not a quota resource). A pod asking for part of a GPU counts that part of `nvidia.com/gpu`
/// (milli-GPU, exactly), not the one vGPU it gets on its node.
pub fn quota_usage(set: &PodSetRequest) -> Resources {
    let mut per_pod = set.requests.clone();
    let share = per_pod.get(names::GPU_SHARE);
    if !share.is_zero() {
        per_pod.set(names::NVIDIA_GPU, share);
        per_pod.set(names::GPU_SHARE, muster_api::Amount::ZERO);
    }
    per_pod.set(names::PODS, muster_api::Amount::ZERO);
    per_pod.times(u64::from(set.count))
}
