//! How each kind of object is folded into the index: its key, where it goes, and what is kept
//! of it (a pod is reduced to a [`PodRecord`]; a node to its placement facts).

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, PodTemplate};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::scheduling::v1alpha2::PodGroup as SchedulingPodGroup;
use muster_api::jobset::{JOB_INDEX_LABEL, JobSet, REPLICATED_JOB_LABEL};
use muster_api::wire::{
    ADMISSION_GATE, ATTEMPT_LABEL, CLUSTER_QUEUE_ANNOTATION, COMPLETION_INDEX_LABEL,
    DOMAIN_ANNOTATION, FLAVOR_ANNOTATION, GPU_DEVICES_ANNOTATION, JOB_LABEL, POD_GROUP_LABEL,
    POD_INDEX_LABEL, POD_SET_LABEL, QUEUE_NAME_LABEL,
};
use muster_api::{
    ClusterQueue, Cohort, GpuJob, LocalQueue, ObjectRef, ProvisioningRequest, ResourceFlavor,
};
use muster_topology::{NodeInfo, pod_usage};

use super::{
    BatchJob, GangMember, Index, Indexed, Kind, NotReady, PodPhase, PodRecord, TemplateRecord,
};
use muster_api::wire::parse_domain;

impl Indexed for GpuJob {
    const KIND: Kind = Kind::GpuJob;
    fn apply(self, index: &mut Index) {
        let key = ObjectRef::of(&self.metadata);
        index.changed_jobs.insert(key.clone());
        super::ended::fold(index, key, self);
    }
    fn stored_version<'a>(index: &'a Index, key: &str) -> Option<&'a str> {
        index.jobs.get(key)?.metadata.resource_version.as_deref()
    }
    fn remove(index: &mut Index, key: &str) {
        index.ended_reads.remove(key);
        index.entry_kept.remove(key);
        if let Some((job_ref, _)) = index.jobs.remove_entry(key) {
            index.changed_jobs.insert(job_ref);
        } else if let Ok(job_ref) = ObjectRef::parse(key) {
            index.changed_jobs.insert(job_ref);
        }
    }
}

impl Indexed for ClusterQueue {
    const KIND: Kind = Kind::ClusterQueue;
    fn apply(self, index: &mut Index) {
        let key = Indexed::key(&self);
        if index.cluster_queues.get(&key).map(|q| &q.spec) != Some(&self.spec) {
            index.shared_version += 1;
        }
        index.queues_version += 1;
        index.cluster_queues.insert(key, self);
    }
    fn stored_version<'a>(index: &'a Index, key: &str) -> Option<&'a str> {
        index
            .cluster_queues
            .get(key)?
            .metadata
            .resource_version
            .as_deref()
    }
    fn remove(index: &mut Index, key: &str) {
        if index.cluster_queues.remove(key).is_some() {
            index.shared_version += 1;
        }
        index.queues_version += 1;
    }
}

impl Indexed for LocalQueue {
    const KIND: Kind = Kind::LocalQueue;
    fn apply(self, index: &mut Index) {
        let key = ObjectRef::of(&self.metadata);
        if index.local_queues.get(&key).map(|q| &q.spec) != Some(&self.spec) {
            index.shared_version += 1;
        }
        index.queues_version += 1;
        index.local_queues.insert(key, self);
    }
    fn stored_version<'a>(index: &'a Index, key: &str) -> Option<&'a str> {
        index
            .local_queues
            .get(key)?
            .metadata
            .resource_version
            .as_deref()
    }
    fn remove(index: &mut Index, key: &str) {
        if index.local_queues.remove(key).is_some() {
            index.shared_version += 1;
        }
        index.queues_version += 1;
    }
}

impl Indexed for Cohort {
    const KIND: Kind = Kind::Cohort;
    fn apply(self, index: &mut Index) {
        let key = Indexed::key(&self);
        if index.cohorts.get(&key).map(|c| &c.spec) != Some(&self.spec) {
            // The tree admission lends and borrows through.
            index.shared_version += 1;
        }
        // Cohorts carry a status the queue step writes.
        index.queues_version += 1;
        index.cohorts.insert(key, self);
    }
    fn remove(index: &mut Index, key: &str) {
        if index.cohorts.remove(key).is_some() {
            index.shared_version += 1;
            index.queues_version += 1;
        }
    }
}

impl Indexed for ResourceFlavor {
    const KIND: Kind = Kind::ResourceFlavor;
    fn apply(self, index: &mut Index) {
        let key = Indexed::key(&self);
        if index.flavors.get(&key).map(|f| &f.spec) != Some(&self.spec) {
            index.topology_version += 1;
        }
        // Flavors carry a status the queue step writes.
        index.queues_version += 1;
        index.flavors.insert(key, self);
    }
    fn remove(index: &mut Index, key: &str) {
        if index.flavors.remove(key).is_some() {
            index.topology_version += 1;
            index.queues_version += 1;
        }
    }
}

impl Indexed for Node {
    const KIND: Kind = Kind::Node;
    fn apply(self, index: &mut Index) {
        let key = Indexed::key(&self);
        match self
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(crate::hami::NODE_REGISTER_ANNOTATION))
            .map(|text| crate::hami::device_uuids(text))
        {
            Some(uuids) if !uuids.is_empty() => {
                index.gpu_uuids.insert(key.clone(), uuids);
            }
            _ => {
                index.gpu_uuids.remove(&key);
            }
        }
        let not_ready = not_ready(&self);
        if index.not_ready.get(&key) != not_ready.as_ref() {
            // A gang waiting on pods of this node tells since when it is not Ready.
            index.shared_version += 1;
            match not_ready {
                Some(not_ready) => index.not_ready.insert(key.clone(), not_ready),
                None => index.not_ready.remove(&key),
            };
        }
        match NodeInfo::from_node(&self) {
            Ok(info) => {
                index.unreadable.remove(&format!("Node {key}"));
                if index.nodes.get(&key) != Some(&info) {
                    index.nodes.insert(key, info);
                    index.topology_version += 1;
                }
            }
            Err(e) => {
                // A node Muster cannot read holds no capacity for it, and says why.
                if index.nodes.remove(&key).is_some() {
                    index.topology_version += 1;
                }
                index
                    .unreadable
                    .insert(format!("Node {key}"), e.to_string());
            }
        }
    }
    fn remove(index: &mut Index, key: &str) {
        if index.nodes.remove(key).is_some() {
            index.topology_version += 1;
        }
        index.not_ready.remove(key);
        index.gpu_uuids.remove(key);
        index.unreadable.remove(&format!("Node {key}"));
    }
}

/// What a node's Ready condition says when it is not True (a node without one is not Ready
/// either).
fn not_ready(node: &Node) -> Option<NotReady> {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
    match ready {
        Some(c) if c.status == "True" => None,
        Some(c) => Some(NotReady {
            status: c.status.clone(),
            since: c.last_transition_time.as_ref().map(|t| t.0.as_second()),
        }),
        None => Some(NotReady {
            status: "Unknown".to_owned(),
            since: None,
        }),
    }
}

impl Indexed for Pod {
    const KIND: Kind = Kind::Pod;
    fn apply(self, index: &mut Index) {
        let key = ObjectRef::of(&self.metadata);
        let record = match pod_record(&self) {
            Ok(record) => {
                index.unreadable.remove(&format!("Pod {key}"));
                record
            }
            Err(e) => {
                index.unreadable.insert(format!("Pod {key}"), e);
                // Kept without usage: its gang membership still matters.
                PodRecord {
                    usage: None,
                    ..pod_record_lenient(&self)
                }
            }
        };
        index.remove_pod(&key);
        if let Some(group) = record.group.clone() {
            index.insert_group_pod(&group, key.clone(), self);
        }
        index.insert_pod(key, record);
    }
    fn stored_version<'a>(index: &'a Index, key: &str) -> Option<&'a str> {
        index.pods.get(key)?.resource_version.as_deref()
    }
    fn remove(index: &mut Index, key: &str) {
        index.remove_pod(key);
        index.unreadable.remove(&format!("Pod {key}"));
    }
}

impl Indexed for Namespace {
    const KIND: Kind = Kind::Namespace;
    fn apply(self, index: &mut Index) {
        let labels = self.metadata.labels.clone().unwrap_or_default();
        index.namespaces.insert(Indexed::key(&self), labels);
    }
    fn remove(index: &mut Index, key: &str) {
        index.namespaces.remove(key);
    }
}

impl Indexed for PriorityClass {
    const KIND: Kind = Kind::PriorityClass;
    fn apply(self, index: &mut Index) {
        // The API server defaults the value to 0 when a class leaves it out.
        let value = self.value.unwrap_or(0);
        let name = Indexed::key(&self);
        if index.priority_classes.insert(name.clone(), value) != Some(value) {
            index.shared_version += 1;
            index.reread_entries_naming(&name);
        }
    }
    fn remove(index: &mut Index, key: &str) {
        if index.priority_classes.remove(key).is_some() {
            index.shared_version += 1;
            index.reread_entries_naming(key);
        }
    }
}

impl Indexed for ProvisioningRequest {
    const KIND: Kind = Kind::ProvisioningRequest;
    fn apply(self, index: &mut Index) {
        request_changed(index, &self);
        if let Some(old) = index
            .provisioning_requests
            .insert(ObjectRef::of(&self.metadata), self)
        {
            request_changed(index, &old);
        }
    }
    fn stored_version<'a>(index: &'a Index, key: &str) -> Option<&'a str> {
        index
            .provisioning_requests
            .get(key)?
            .metadata
            .resource_version
            .as_deref()
    }
    fn remove(index: &mut Index, key: &str) {
        if let Some(old) = index.provisioning_requests.remove(key) {
            request_changed(index, &old);
        }
    }
}

impl Indexed for PodTemplate {
    const KIND: Kind = Kind::PodTemplate;
    fn apply(self, index: &mut Index) {
        let meta = &self.metadata;
        // Only Muster's templates are watched (by their job label); one without it is not
        // Muster's to clean up.
        let Some(job) = meta.labels.as_ref().and_then(|l| l.get(JOB_LABEL)) else {
            return;
        };
        let record = TemplateRecord {
            job: job.clone(),
            created: meta.creation_timestamp.as_ref().map(|t| t.0.as_second()),
            deleting: meta.deletion_timestamp.is_some(),
        };
        index
            .pod_templates
            .insert(ObjectRef::of(&self.metadata), record);
    }
    fn remove(index: &mut Index, key: &str) {
        index.pod_templates.remove(key);
    }
}

impl Indexed for BatchJob {
    const KIND: Kind = Kind::Job;
    fn apply(self, index: &mut Index) {
        let key = ObjectRef::of(&self.metadata);
        if controlled_by_jobset(&self.metadata) {
            // A JobSet's child Job is its JobSet's: queued, if at all, as the JobSet.
            BatchJob::remove(index, key.as_str());
            return;
        }
        // The entry's step reads its Job (held suspended, finished, or released).
        index.changed_jobs.insert(ObjectRef::new(
            key.namespace(),
            &muster_api::workload::entry_name(key.name()),
        ));
        index.workloads.insert(key, Box::new(self.slimmed()));
    }
    fn stored_version<'a>(index: &'a Index, key: &str) -> Option<&'a str> {
        index
            .workloads
            .get(key)?
            .metadata
            .resource_version
            .as_deref()
    }
    fn remove(index: &mut Index, key: &str) {
        if let Some((key, _)) = index.workloads.remove_entry(key) {
            index.changed_jobs.insert(ObjectRef::new(
                key.namespace(),
                &muster_api::workload::entry_name(key.name()),
            ));
        }
    }
}

/// A Job read whole (by a client of the index other than the controller's watches: tests, a
/// snapshot) is kept as the watches keep it.
impl Indexed for Job {
    const KIND: Kind = Kind::Job;
    fn apply(self, index: &mut Index) {
        BatchJob::of(&self).apply(index);
    }
    fn stored_version<'a>(index: &'a Index, key: &str) -> Option<&'a str> {
        BatchJob::stored_version(index, key)
    }
    fn remove(index: &mut Index, key: &str) {
        BatchJob::remove(index, key);
    }
}

impl Index {
    /// Marks the queue entry of the JobSet `jobset` changed: the JobSet, or what its entry
    /// reads of its child Jobs, did.
    pub(super) fn jobset_changed(&mut self, jobset: &ObjectRef) {
        self.changed_jobs.insert(ObjectRef::new(
            jobset.namespace(),
            &muster_api::workload::jobset_entry_name(jobset.name()),
        ));
    }
}

impl Indexed for JobSet {
    const KIND: Kind = Kind::JobSet;
    fn apply(self, index: &mut Index) {
        let key = ObjectRef::of(&self.metadata);
        index.jobset_changed(&key);
        index.jobsets.insert(key, self);
    }
    fn stored_version<'a>(index: &'a Index, key: &str) -> Option<&'a str> {
        index.jobsets.get(key)?.metadata.resource_version.as_deref()
    }
    fn remove(index: &mut Index, key: &str) {
        if let Some((key, _)) = index.jobsets.remove_entry(key) {
            index.jobset_changed(&key);
        }
    }
}

/// Whether a JobSet controls the Job of `meta` (its child Job).
fn controlled_by_jobset(meta: &kube::core::ObjectMeta) -> bool {
    meta.owner_references.iter().flatten().any(|o| {
        o.controller == Some(true)
            && o.kind == "JobSet"
            && o.api_version.starts_with("jobset.x-k8s.io/")
    })
}

/// A ProvisioningRequest changed: its job (named by Muster's label) settles again; without
/// the label, whose it is cannot be told, so every job does.
fn request_changed(index: &mut Index, request: &ProvisioningRequest) {
    let meta = &request.metadata;
    match meta.labels.as_ref().and_then(|l| l.get(JOB_LABEL)) {
        Some(job) => {
            let namespace = meta.namespace.as_deref().unwrap_or_default();
            index.changed_jobs.insert(ObjectRef::new(namespace, job));
        }
        None => index.shared_version += 1,
    }
}

fn pod_record(pod: &Pod) -> Result<PodRecord, String> {
    let usage = pod_usage(pod).map_err(|e| e.to_string())?;
    let record = pod_record_lenient(pod);
    // A pod counted on GPU devices books them, as its holding would.
    let usage = usage.map(|(_, r)| match &record.member {
        Some(m) => crate::hami::booked_usage(r, &m.devices),
        None => r,
    });
    Ok(PodRecord { usage, ..record })
}

/// Everything but usage (which needs the pod's quantities to parse).
fn pod_record_lenient(pod: &Pod) -> PodRecord {
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let phase = match status.and_then(|s| s.phase.as_deref()) {
        Some("Running") => PodPhase::Running,
        Some("Succeeded") => PodPhase::Succeeded,
        Some("Failed") => PodPhase::Failed,
        Some("Unknown") => PodPhase::Unknown,
        _ => PodPhase::Pending,
    };
    let ready_condition = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .filter(|c| c.status == "True");
    let ready = ready_condition.is_some();
    let ready_since = ready_condition
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0.as_second());
    let gated = spec
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.name == ADMISSION_GATE));
    PodRecord {
        node: spec.and_then(|s| s.node_name.clone()),
        usage: None,
        phase,
        ready,
        ready_since,
        gated,
        deleting: pod.metadata.deletion_timestamp.is_some(),
        member: member(pod),
        group: queued_group(pod),
        resource_version: pod.metadata.resource_version.clone(),
    }
}

/// The pod group `pod` is queued with: `namespace/group`, when it carries the queue label and
/// names a group — by Muster's group label, or by `spec.schedulingGroup` (the
/// `scheduling.k8s.io` PodGroup of KEP-4671).
fn queued_group(pod: &Pod) -> Option<ObjectRef> {
    let labels = pod.metadata.labels.as_ref()?;
    labels.get(QUEUE_NAME_LABEL)?;
    let group = labels
        .get(POD_GROUP_LABEL)
        .map(String::as_str)
        .or_else(|| muster_api::workload::scheduling_group_of(pod))?;
    Some(ObjectRef::new(
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        group,
    ))
}

impl Indexed for SchedulingPodGroup {
    const KIND: Kind = Kind::SchedulingPodGroup;
    fn apply(self, index: &mut Index) {
        let key = ObjectRef::of(&self.metadata);
        // Only a gang has a size to queue; a basic PodGroup asks for none.
        let declared = self
            .spec
            .scheduling_policy
            .gang
            .as_ref()
            .map(|g| g.min_count);
        index.declare_group(&key, declared);
    }
    fn remove(index: &mut Index, key: &str) {
        if let Ok(key) = ObjectRef::parse(key) {
            index.declare_group(&key, None);
        }
    }
}

/// The gang a pod belongs to: Muster's labels and an owner reference to a GpuJob.
fn member(pod: &Pod) -> Option<GangMember> {
    let meta = &pod.metadata;
    let labels = meta.labels.as_ref()?;
    // Made by Muster for a GpuJob, or by the Job controller for the Job behind a queue
    // entry (its template carries the gang's labels from the release on), or a pod of a
    // queued pod group (labelled with the gang when it is let go).
    let owned = meta.owner_references.iter().flatten().any(|o| {
        (o.kind == "GpuJob" && o.api_version == muster_api::API_VERSION)
            || (o.kind == "Job" && o.api_version == "batch/v1" && o.controller == Some(true))
    }) || queued_group(pod).is_some();
    if !owned {
        return None;
    }
    let job = labels.get(JOB_LABEL)?;
    let annotations = meta.annotations.clone().unwrap_or_default();
    let annotation = |k: &str| annotations.get(k).cloned().unwrap_or_default();
    Some(GangMember {
        job: ObjectRef::new(meta.namespace.as_deref().unwrap_or_default(), job),
        pod_set: labels.get(POD_SET_LABEL).cloned().unwrap_or_default(),
        // A Job's pod is numbered when it is pinned; an Indexed Job's has its completion
        // index before.
        index: labels
            .get(POD_INDEX_LABEL)
            .or_else(|| labels.get(COMPLETION_INDEX_LABEL))
            .and_then(|i| i.parse().ok())
            .unwrap_or(usize::MAX),
        attempt: labels
            .get(ATTEMPT_LABEL)
            .and_then(|a| a.parse().ok())
            .unwrap_or(-1),
        cluster_queue: annotation(CLUSTER_QUEUE_ANNOTATION),
        flavor: annotation(FLAVOR_ANNOTATION),
        domain: parse_domain(&annotation(DOMAIN_ANNOTATION)),
        pinned: pinned_node(pod).map(str::to_owned),
        devices: crate::hami::parse_devices(&annotation(GPU_DEVICES_ANNOTATION))
            .unwrap_or_default(),
        replicated_job: labels.get(REPLICATED_JOB_LABEL).cloned(),
        replica: labels.get(JOB_INDEX_LABEL).and_then(|i| i.parse().ok()),
        completion: labels
            .get(COMPLETION_INDEX_LABEL)
            .and_then(|i| i.parse().ok()),
    })
}

/// The node a gang's pod is pinned to (its `kubernetes.io/hostname` node selector), if any.
pub fn pinned_node(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_selector.as_ref())
        .and_then(|s| s.get(muster_api::resource_flavor::HOSTNAME_LABEL))
        .map(String::as_str)
}
