//! The provisioning bridge in a pass: jobs whose ClusterQueue buys capacity through
//! ProvisioningRequests. `muster-provisioning` decides the step; this module reads the job's
//! record from its status, the requests from the index, and turns the step into actions.
//!
//! A job that is provisioning has an admission in its status without nodes (its flavors, so a
//! restarted controller books its quota again), `provisioningRequest` and
//! `provisioningAttempts`. When the capacity is ready the job queues again as *provisioned*:
//! admission places it where it fits (the detail node selectors narrow that to the new
//! capacity), and its pods carry the annotations that consume the request.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use muster_admission::{Holding, Job, PodSetPlacement};
use muster_api::cluster_queue::ProvisioningPolicy;
use muster_api::gpujob::{
    Admission, GpuJobPhase, GpuJobStatus, PendingReason, PendingReasonKind, PodSetAssignment,
    conditions,
};
use muster_api::{GpuJob, ObjectRef, ResourceFlavorSpec};
use muster_provisioning::objects::{
    consume_annotations, objects, request_name, request_names, template_name,
};
use muster_provisioning::state::{Next, Observed, Record, combine, observe, step};

use crate::index::Index;
use crate::ledger::Ledger;
use crate::release::Gang;

/// The provisioning policy of the ClusterQueue named in the job's admission.
pub(crate) fn policy<'a>(
    index: &'a Index,
    status: &GpuJobStatus,
) -> Option<&'a ProvisioningPolicy> {
    let queue = &status.admission.as_ref()?.cluster_queue;
    index.cluster_queues.get(queue)?.spec.provisioning.as_ref()
}

/// Whether the status shows a job provisioning: an admission without nodes and a request.
pub(crate) fn is_provisioning(status: &GpuJobStatus) -> bool {
    status.provisioning_request.is_some()
        && status
            .admission
            .as_ref()
            .is_some_and(|a| a.pod_sets.iter().all(|p| p.nodes.is_empty()))
}

/// `namespace/name` keys of the job's requests of its current attempt.
pub(crate) fn request_keys(
    job: &GpuJob,
    policy: &ProvisioningPolicy,
    attempt: u32,
) -> Vec<ObjectRef> {
    let namespace = job.metadata.namespace.as_deref().unwrap_or_default();
    request_names(&policy.class_name, job, attempt)
        .into_iter()
        .map(|n| ObjectRef::new(namespace, &n))
        .collect()
}

/// The job's reference.
pub(crate) fn job_key(job: &GpuJob) -> ObjectRef {
    ObjectRef::of(&job.metadata)
}

/// The PodTemplates of `attempt`, one per pod set.
pub(crate) fn template_keys(job: &GpuJob, attempt: u32) -> Vec<ObjectRef> {
    let namespace = job.metadata.namespace.as_deref().unwrap_or_default();
    let name = job.metadata.name.as_deref().unwrap_or_default();
    job.spec
        .pod_sets
        .iter()
        .map(|set| ObjectRef::new(namespace, &template_name(name, attempt, &set.name)))
        .collect()
}

/// Every request `attempt` could have, whatever the class (the
/// queue's class may have changed since the requests were made).
pub(crate) fn possible_request_keys(job: &GpuJob, attempt: u32) -> Vec<ObjectRef> {
    let mut keys = Vec::new();
    for class in ["queued-provisioning.gke.io", ""] {
        let any = ProvisioningPolicy {
            class_name: class.to_owned(),
            ..ProvisioningPolicy::default()
        };
        for key in request_keys(job, &any, attempt) {
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
    }
    keys
}

/// How old a request must be before it can be taken for an orphan: longer than any write of
/// the controller takes, retries included.
pub(crate) const ORPHAN_AFTER_SECONDS: i64 = 300;

/// Muster's ProvisioningRequests that no job needs any more: their job is gone or finished,
/// or has moved on to another attempt or to no request at all (a delete that failed, or a
/// request made just before the controller stopped). Each with its job's key and the
/// PodTemplates. Jobs with writes in flight are left alone, and so are
/// requests younger than [`ORPHAN_AFTER_SECONDS`] of jobs that have not ended: a status that
/// is about to name one may still be landing (written in an earlier leadership term, or by a
/// replica that has just lost the Lease).
pub(crate) fn orphans(
    index: &Index,
    ledger: &Ledger,
    now: i64,
) -> Vec<(ObjectRef, ObjectRef, Vec<ObjectRef>)> {
    let mut out = Vec::new();
    for (key, request) in &index.provisioning_requests {
        let meta = &request.metadata;
        let Some(job_name) = meta
            .labels
            .as_ref()
            .and_then(|l| l.get(muster_api::wire::JOB_LABEL))
        else {
            continue;
        };
        if meta.deletion_timestamp.is_some() {
            continue;
        }
        let namespace = meta.namespace.clone().unwrap_or_default();
        let job_key = ObjectRef::new(&namespace, job_name);
        // A job that ended never names a request again: its requests go at once.
        let ended = index.jobs.get(&job_key).is_some_and(|job| job.has_ended());
        let young = meta
            .creation_timestamp
            .as_ref()
            .is_some_and(|t| now.saturating_sub(t.0.as_second()) < ORPHAN_AFTER_SECONDS);
        if young && !ended {
            continue;
        }
        if ledger.touches(&job_key) {
            continue;
        }
        let wanted = index.jobs.get(&job_key).is_some_and(|job| {
            let status = job.status.clone().unwrap_or_default();
            let live = status.provisioning_request.is_some()
                && !status.phase.is_some_and(GpuJobPhase::has_ended);
            live && possible_request_keys(job, attempts(&status)).contains(key)
        });
        if wanted {
            continue;
        }
        let templates = request
            .spec
            .pod_sets
            .iter()
            .map(|p| ObjectRef::new(&namespace, &p.pod_template_ref.name))
            .collect();
        out.push((job_key, key.clone(), templates));
    }
    out
}

/// Muster's PodTemplates that nothing needs any more and no request names, by their job's
/// key. A template is made just before its request, so a controller stopped (or a
/// request create failed for good) between the two leaves a template no request names, and
/// [`orphans`] never finds it. Such a template goes once its job has ended, or once it is
/// older than [`ORPHAN_AFTER_SECONDS`] and not a template of its job's current request.
/// Jobs with writes in flight are left alone. A deleted job's templates are the garbage
/// collector's (they are owned by the job).
pub(crate) fn orphan_templates(
    index: &Index,
    ledger: &Ledger,
    now: i64,
) -> BTreeMap<ObjectRef, Vec<ObjectRef>> {
    let mut out: BTreeMap<ObjectRef, Vec<ObjectRef>> = BTreeMap::new();
    if !index.is_synced(crate::index::Kind::PodTemplate) || !index.provisioning_api() {
        return out;
    }
    let named: std::collections::BTreeSet<ObjectRef> = index
        .provisioning_requests
        .values()
        .flat_map(|request| {
            let namespace = request.metadata.namespace.clone().unwrap_or_default();
            request
                .spec
                .pod_sets
                .iter()
                .map(move |p| ObjectRef::new(&namespace, &p.pod_template_ref.name))
        })
        .collect();
    for (key, template) in &index.pod_templates {
        if template.deleting || named.contains(key) {
            continue;
        }
        let job_key = ObjectRef::new(key.namespace(), &template.job);
        let Some(job) = index.jobs.get(&job_key) else {
            continue;
        };
        if ledger.touches(&job_key) {
            continue;
        }
        let status = job.status.clone().unwrap_or_default();
        let ended = status.phase.is_some_and(GpuJobPhase::has_ended);
        let young = template
            .created
            .is_none_or(|t| now.saturating_sub(t) < ORPHAN_AFTER_SECONDS);
        if !ended
            && (young
                || (status.provisioning_request.is_some()
                    && template_keys(job, attempts(&status)).contains(key)))
        {
            continue;
        }
        out.entry(job_key).or_default().push(key.clone());
    }
    out
}

/// What the autoscaler says about the job's current attempt.
pub(crate) fn observed(
    index: &Index,
    job: &GpuJob,
    policy: &ProvisioningPolicy,
    attempt: u32,
) -> Observed {
    combine(
        request_keys(job, policy, attempt)
            .iter()
            .map(|k| observe(index.provisioning_requests.get(k)))
            .collect(),
    )
}

/// The attempt the status records (0 before the first).
pub(crate) fn attempts(status: &GpuJobStatus) -> u32 {
    u32::try_from(status.provisioning_attempts).unwrap_or(0)
}

/// The next step for a job that is provisioning (not yet released).
pub(crate) fn next(
    index: &Index,
    job: &GpuJob,
    status: &GpuJobStatus,
    policy: &ProvisioningPolicy,
    now: i64,
) -> Next {
    let record = Record {
        attempts: attempts(status),
        requested: true,
        retry_at: None,
        released: false,
        active: !job.spec.suspend,
    };
    let seen = observed(index, job, policy, record.attempts);
    step(&record, &seen, policy, now)
}

/// What a provisioning job holds: its flavors' quota, no nodes.
pub(crate) fn holding(status: &GpuJobStatus, since: i64) -> Option<Holding> {
    let admission = status.admission.as_ref()?;
    Some(Holding {
        cluster_queue: admission.cluster_queue.clone(),
        since: Some(since),
        pod_sets: admission
            .pod_sets
            .iter()
            .map(|p| PodSetPlacement {
                name: p.name.clone(),
                flavor: p.flavor.clone(),
                domain: Vec::new(),
                nodes: Vec::new(),
                devices: Vec::new(),
            })
            .collect(),
    })
}

/// The job queued again on its provisioned capacity: admitted where it fits, with the node
/// selectors from the request's details, never provisioning again.
pub(crate) fn provisioned_job(mut job: Job, node_selector: &BTreeMap<String, String>) -> Job {
    job.provisioned = true;
    for set in &mut job.pod_sets {
        set.node_selector.extend(node_selector.clone());
    }
    job
}

/// Makes a released gang consume the job's requests: annotations per pod set and the detail
/// node selectors — on its pods, or for a queue entry in its workload's templates (a Job is
/// one pod set; a JobSet's replicated Job is the pod set named like it).
pub(crate) fn consume(
    gang: &mut Gang,
    job: &GpuJob,
    policy: &ProvisioningPolicy,
    attempt: u32,
    node_selector: &BTreeMap<String, String>,
) {
    let name = job.metadata.name.clone().unwrap_or_default();
    let sets = job.spec.pod_sets.len();
    if let Some(workload) = gang.workload.as_mut() {
        let only = match job.spec.pod_sets.as_slice() {
            [set] => Some(set.name.as_str()),
            _ => None,
        };
        workload.patch.add_to_templates(
            |set: Option<&str>| {
                let set = set.or(only).unwrap_or_default();
                let request = request_name(&policy.class_name, &name, attempt, set, sets);
                consume_annotations(&request, &policy.class_name)
            },
            node_selector,
        );
    }
    for pod in &mut gang.pods {
        let set = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(muster_api::wire::POD_SET_LABEL))
            .cloned()
            .unwrap_or_default();
        let request = request_name(&policy.class_name, &name, attempt, &set, sets);
        pod.metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .extend(consume_annotations(&request, &policy.class_name));
        if let Some(spec) = pod.spec.as_mut() {
            spec.node_selector
                .get_or_insert_with(BTreeMap::new)
                .extend(node_selector.clone());
        }
    }
}

/// The objects and status of a new attempt for a job admission decided to provision.
pub(crate) fn start(
    job: &GpuJob,
    cluster_queue: &str,
    flavors: &[(String, String)],
    specs: &BTreeMap<String, ResourceFlavorSpec>,
    policy: &ProvisioningPolicy,
    now: &Time,
) -> Result<(muster_provisioning::objects::Objects, GpuJobStatus), String> {
    let current = job.status.clone().unwrap_or_default();
    let attempt = attempts(&current) + 1;
    let by_set: BTreeMap<String, ResourceFlavorSpec> = flavors
        .iter()
        .filter_map(|(set, flavor)| specs.get(flavor).map(|s| (set.clone(), s.clone())))
        .collect();
    let built = objects(job, attempt, &by_set, policy).map_err(|e| e.to_string())?;
    let first = built
        .requests
        .first()
        .and_then(|r| r.metadata.name.clone())
        .unwrap_or_default();
    let mut next = current.clone();
    next.phase = Some(GpuJobPhase::Provisioning);
    next.provisioning_request = Some(first.clone());
    next.provisioning_attempts = i32::try_from(attempt).unwrap_or(i32::MAX);
    next.queue_position = None;
    next.admission = Some(Admission {
        cluster_queue: cluster_queue.to_owned(),
        pod_sets: flavors
            .iter()
            .map(|(set, flavor)| PodSetAssignment {
                name: set.clone(),
                flavor: flavor.clone(),
                ..PodSetAssignment::default()
            })
            .collect(),
    });
    // What a pass says of a request the autoscaler has not answered yet, so that the next
    // pass, finding the request, has nothing new to write.
    let message = muster_provisioning::state::waiting_message(false, "");
    next.pending_reason = Some(PendingReason {
        start_range: None,
        kind: PendingReasonKind::Provisioning,
        message,
        eta: None,
        since: None,
    });
    crate::status::set_condition(
        &mut next.conditions,
        conditions::QUOTA_RESERVED,
        true,
        "Provisioning",
        "quota reserved while capacity is bought",
        job.metadata.generation,
        now,
    );
    crate::status::set_condition(
        &mut next.conditions,
        conditions::PROVISIONED,
        false,
        "Requested",
        &format!("ProvisioningRequest {first} created"),
        job.metadata.generation,
        now,
    );
    Ok((built, next))
}

/// The status of a job still waiting for its capacity, with the autoscaler's message.
pub(crate) fn waiting(status: &GpuJobStatus, message: &str) -> GpuJobStatus {
    let mut next = status.clone();
    next.pending_reason = Some(PendingReason {
        start_range: None,
        kind: PendingReasonKind::Provisioning,
        message: message.to_owned(),
        eta: None,
        since: None,
    });
    next
}

/// The status after giving the request up: quota released, queued again at `retry_at`.
pub(crate) fn retrying(
    status: &GpuJobStatus,
    reason: &str,
    retry_at: i64,
    now: &Time,
    generation: Option<i64>,
) -> GpuJobStatus {
    let mut next =
        crate::status::unprovisioned(status, "ProvisioningRetry", reason, generation, now);
    next.pending_reason = Some(PendingReason {
        start_range: None,
        kind: PendingReasonKind::Backoff,
        message: format!("{reason}; asking again at the retry time"),
        eta: k8s_openapi::jiff::Timestamp::from_second(retry_at)
            .ok()
            .map(Time),
        since: None,
    });
    next
}
