//! The controller's picture of the cluster: every object admission needs, updated one watch
//! event (or write response) at a time. Pure and synchronous, and the bottom of the
//! controller: it knows nothing of passes, actions or writes in flight (those are
//! [`crate::ledger`]'s), only what the API server shows.
//!
//! Only what placement and the gang lifecycle need is kept. A pod is reduced to its node, its
//! requests while it holds them, its phase and readiness, and — for Muster's own pods — the
//! job, pod set, attempt and admission it was released under.

mod batch_job;
mod child_job;
mod ended;
mod job_entry;
mod objects;

pub use batch_job::{BatchJob, BatchJobSpec, BatchJobStatus, KeptTemplate};
pub use child_job::{ChildJob, ChildJobStatus, ChildRecord, completed_indexes};
pub use objects::pinned_node;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use muster_admission::CohortTree;
use muster_api::{
    ClusterQueue, Cohort, GpuJob, LocalQueue, ObjectRef, ProvisioningRequest, ResourceFlavor,
    Resources,
};
use muster_topology::NodeInfo;

/// The kinds of object the index holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `GpuJob`.
    GpuJob,
    /// `ClusterQueue`.
    ClusterQueue,
    /// `LocalQueue`.
    LocalQueue,
    /// `ResourceFlavor`.
    ResourceFlavor,
    /// `Cohort`.
    Cohort,
    /// `Node`.
    Node,
    /// `Pod`.
    Pod,
    /// `Namespace`.
    Namespace,
    /// `PriorityClass`.
    PriorityClass,
    /// `ProvisioningRequest` (watched once its CRD is installed).
    ProvisioningRequest,
    /// Muster's `PodTemplate`s, those labelled with their job (watched with
    /// ProvisioningRequests, which name them).
    PodTemplate,
    /// `batch/v1` Jobs labelled with a queue (see [`crate::workload`]).
    Job,
    /// JobSets labelled with a queue (watched once the JobSet CRD is installed).
    JobSet,
    /// The child Jobs of JobSets (`batch/v1` Jobs with a JobSet's name label), read for the
    /// completions they keep (watched with JobSets).
    ChildJob,
    /// `scheduling.k8s.io/v1alpha2` PodGroups labelled with a queue (watched where the API
    /// server serves them: Kubernetes 1.36 behind the `GenericWorkload` feature gate).
    SchedulingPodGroup,
}

impl Kind {
    /// Every kind whose cache must be synced before the first cycle. ProvisioningRequests
    /// are optional: the CRD may not be installed.
    pub const REQUIRED: [Kind; 10] = [
        Kind::GpuJob,
        Kind::ClusterQueue,
        Kind::LocalQueue,
        Kind::ResourceFlavor,
        Kind::Cohort,
        Kind::Node,
        Kind::Pod,
        Kind::Namespace,
        Kind::PriorityClass,
        Kind::Job,
    ];
}

/// A pod's phase, as far as the gang lifecycle cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodPhase {
    /// Not yet running (gated, unscheduled, pulling images).
    Pending,
    /// Running.
    Running,
    /// Exited 0 (every container).
    Succeeded,
    /// Failed.
    Failed,
    /// The kubelet stopped reporting.
    Unknown,
}

impl PodPhase {
    /// Its containers are done for good (succeeded or failed): it holds nothing on its node.
    pub fn ended(self) -> bool {
        matches!(self, PodPhase::Succeeded | PodPhase::Failed)
    }
}

/// One of Muster's pods: the gang it belongs to and the admission it was released under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GangMember {
    /// The job.
    pub job: ObjectRef,
    /// The pod set.
    pub pod_set: String,
    /// Its index within the pod set.
    pub index: usize,
    /// The job's `status.requeueCount` at release.
    pub attempt: i32,
    /// The ClusterQueue of the admission.
    pub cluster_queue: String,
    /// The flavor of the admission.
    pub flavor: String,
    /// The domain of the admission, (level, value) widest first.
    pub domain: Vec<(String, String)>,
    /// The node it is pinned to (its hostname node selector).
    pub pinned: Option<String>,
    /// The GPU devices of that node it was counted on (empty where they are not tracked).
    pub devices: Vec<u32>,
    /// For a pod of a JobSet's child Job: its replicated Job.
    pub replicated_job: Option<String>,
    /// For a pod of a JobSet's child Job: the replica (child Job) of its replicated Job.
    pub replica: Option<usize>,
    /// For a pod of an Indexed Job: its completion index (which [`GangMember::index`] no
    /// longer says once the pod is pinned to a place of its set).
    pub completion: Option<usize>,
}

/// A node whose Ready condition is not True: what the condition says, and since when. Kept
/// apart from the node's placement facts: a gang waiting on pods there says which node and
/// since when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotReady {
    /// The condition's status: `False` (its kubelet reports it not ready) or `Unknown` (it
    /// stopped reporting: the node lifecycle controller writes `Unknown` once its heartbeats
    /// stop; also a node without the condition).
    pub status: String,
    /// When the condition last changed, in Unix seconds (`None` when the node does not say).
    pub since: Option<i64>,
}

/// What the index keeps of a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRecord {
    /// The node it is bound to.
    pub node: Option<String>,
    /// What it holds on that node: bound and not finished (`None` otherwise).
    pub usage: Option<Resources>,
    /// Its phase.
    pub phase: PodPhase,
    /// Its Ready condition is True.
    pub ready: bool,
    /// When its Ready condition last turned True (seconds), while it is True and says so.
    pub ready_since: Option<i64>,
    /// It still carries Muster's scheduling gate.
    pub gated: bool,
    /// It has a deletion timestamp.
    pub deleting: bool,
    /// Set for pods Muster released.
    pub member: Option<GangMember>,
    /// For a pod labelled with a queue and a pod group: the group (`namespace/group`).
    pub group: Option<ObjectRef>,
    /// The version it was read at, so that an older copy never replaces it.
    pub resource_version: Option<String>,
}

/// An object the index can hold: how to key it and fold it in.
pub trait Indexed:
    Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static
{
    /// Its kind.
    const KIND: Kind;
    /// Folds the object in (add or replace).
    fn apply(self, index: &mut Index);
    /// Removes the object with this key.
    fn remove(index: &mut Index, key: &str);
    /// The resource version the index holds for `key` (`None` for kinds it keeps no version
    /// of): an older copy never replaces it.
    fn stored_version<'a>(index: &'a Index, key: &str) -> Option<&'a str> {
        let _ = (index, key);
        None
    }
    /// The object's key: `namespace/name` or `name`.
    fn key(&self) -> String {
        let meta = self.meta();
        match &meta.namespace {
            Some(_) => ObjectRef::of(meta).into_string(),
            None => meta.name.clone().unwrap_or_default(),
        }
    }
}

/// The pods of one pod group (labelled with a queue and `muster.dev/pod-group`), whole, by
/// key: what its queue entry is read from (see `crate::workload::pod_group`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodGroup {
    /// Every pod of the group.
    pub pods: BTreeMap<ObjectRef, Pod>,
    /// The gang size of the `scheduling.k8s.io` PodGroup of this name (KEP-4671), when one
    /// labelled with a queue exists: the pods that name it in `spec.schedulingGroup` are
    /// queued as that many.
    pub declared: Option<i32>,
}

/// What the index keeps of one of Muster's PodTemplates: enough to tell whether anything
/// still needs it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TemplateRecord {
    /// Its job's name (the template's namespace is the job's).
    pub job: String,
    /// When it was created, in Unix seconds.
    pub created: Option<i64>,
    /// Whether it is being deleted.
    pub deleting: bool,
}

/// An object as the API server returned it after a write: folded into the index at once, so
/// the next pass sees the write even before its watch event arrives.
#[derive(Clone, Debug)]
pub enum Written {
    /// A job.
    Job(Box<GpuJob>),
    /// A pod.
    Pod(Box<Pod>),
    /// A ProvisioningRequest.
    Request(Box<muster_api::ProvisioningRequest>),
    /// A ClusterQueue (its status written).
    ClusterQueue(Box<ClusterQueue>),
    /// A LocalQueue (its status written).
    LocalQueue(Box<LocalQueue>),
    /// A ResourceFlavor with its new status.
    ResourceFlavor(Box<ResourceFlavor>),
    /// A Cohort with its new status.
    Cohort(Box<Cohort>),
    /// The Job behind a queue entry.
    Workload(Box<BatchJob>),
    /// The JobSet behind a queue entry.
    JobSet(Box<muster_api::jobset::JobSet>),
}

/// What a controller knows about the cluster.
#[derive(Clone, Debug, Default)]
pub struct Index {
    /// Every GpuJob, an ended one without its pod templates (see [`ended`]), a batch Job's
    /// queue entry with only what a release writes of its templates (see [`job_entry`]).
    /// Boxed: a GpuJob is 824 bytes (`size_of`), and a map's node keeps room for eleven
    /// values, half of it empty on average.
    pub(crate) jobs: BTreeMap<ObjectRef, Box<GpuJob>>,
    /// Admission's reading of every ended GpuJob in `jobs`, made before its templates were
    /// dropped.
    ended_reads: BTreeMap<ObjectRef, ended::EndedRead>,
    /// What is kept beside each batch Job's queue entry in `jobs`, held there with only what
    /// a release writes of its templates (see [`job_entry`]).
    entry_kept: BTreeMap<ObjectRef, job_entry::EntryKept>,
    pub(crate) cluster_queues: BTreeMap<String, ClusterQueue>,
    pub(crate) local_queues: BTreeMap<ObjectRef, LocalQueue>,
    pub(crate) flavors: BTreeMap<String, ResourceFlavor>,
    pub(crate) cohorts: BTreeMap<String, Cohort>,
    pub(crate) nodes: BTreeMap<String, NodeInfo>,
    /// The nodes whose Ready condition is not True (absent: Ready).
    pub(crate) not_ready: BTreeMap<String, NotReady>,
    /// Per node, the UUIDs of its GPU devices in device order, as HAMi's device plugin
    /// registers them (nodes without the annotation are absent).
    pub(crate) gpu_uuids: BTreeMap<String, Vec<String>>,
    pub(crate) pods: BTreeMap<ObjectRef, PodRecord>,
    /// Job → its pods' keys.
    pub(crate) pods_by_job: BTreeMap<ObjectRef, BTreeSet<ObjectRef>>,
    /// Job → its pods that hold something on a node (bound, not finished): the few of
    /// `pods_by_job` a pass books, kept apart because finished pods linger in their
    /// thousands after their jobs end.
    pub(crate) pods_holding: BTreeMap<ObjectRef, BTreeSet<ObjectRef>>,
    /// Per node, what pods outside any gang hold there: kept as pods come and go, so a pass
    /// books one sum per node instead of one entry per pod.
    pub(crate) base_usage: BTreeMap<String, Resources>,
    pub(crate) namespaces: BTreeMap<String, BTreeMap<String, String>>,
    pub(crate) priority_classes: BTreeMap<String, i32>,
    pub(crate) provisioning_requests: BTreeMap<ObjectRef, ProvisioningRequest>,
    /// Muster's PodTemplates.
    pub(crate) pod_templates: BTreeMap<ObjectRef, TemplateRecord>,
    /// Jobs labelled with a queue: the workloads behind queue entries, each as a
    /// [`BatchJob`]. Boxed: an ordered map's nodes keep room for eleven values inline, of
    /// which a batch run's Jobs filled about three fifths; boxed, an empty place costs a
    /// pointer.
    pub(crate) workloads: BTreeMap<ObjectRef, Box<BatchJob>>,
    /// JobSets labelled with a queue: the other workloads behind queue entries.
    pub(crate) jobsets: BTreeMap<ObjectRef, muster_api::jobset::JobSet>,
    /// JobSets' child Jobs, by key (see [`ChildJob`]).
    pub(crate) child_jobs: BTreeMap<ObjectRef, ChildRecord>,
    /// The keys of each JobSet's child Jobs in `child_jobs`, by JobSet.
    pub(crate) jobset_children: BTreeMap<ObjectRef, BTreeSet<ObjectRef>>,
    /// Pods labelled with a queue and a pod group, whole, by group (`namespace/group`).
    pub(crate) pod_groups: BTreeMap<ObjectRef, PodGroup>,
    /// Bumped when a node's placement facts (labels, taints, allocatable, schedulable) or a
    /// flavor change: the cached arrangement of nodes per flavor is rebuilt only then.
    pub(super) topology_version: u64,
    /// Bumped when something every job's lifecycle reads changes: a node's placement facts or
    /// readiness, a flavor, a queue's spec, a priority class, whether ProvisioningRequests
    /// are watched. Every job is settled again then.
    pub(super) shared_version: u64,
    /// Jobs whose own objects changed (the GpuJob, one of its pods, one of its
    /// ProvisioningRequests; for a queue entry, its workload, and a JobSet's child Jobs)
    /// since [`Index::take_changed_jobs`] last took them.
    pub(super) changed_jobs: BTreeSet<ObjectRef>,
    /// Bumped when a ClusterQueue or LocalQueue changes in any way (its status too).
    pub(super) queues_version: u64,
    /// Every flavor's nodes with no usage, as of `.0` (a topology version).
    cluster: Option<(u64, muster_admission::Cluster)>,
    /// Objects that could not be read, with why (reported, never fatal).
    pub(crate) unreadable: BTreeMap<String, String>,
    /// Keys seen during a relist, per kind: what was not seen is gone.
    relisting: BTreeMap<Kind, BTreeSet<String>>,
    synced: BTreeSet<Kind>,
    /// Optional kinds that are watched (their API is served): required for readiness too.
    expected: BTreeSet<Kind>,
    /// Recently deleted objects: (the deletion's sequence number, the version it was deleted
    /// at). A write's response for one of them is not folded in.
    tombstones: BTreeMap<(Kind, String), (u64, Option<String>)>,
    /// Deletions, oldest first, by sequence number; an entry whose tombstone was forgotten or
    /// replaced since is skipped when it falls off.
    tombstone_order: std::collections::VecDeque<(u64, (Kind, String))>,
    tombstone_seq: u64,
}

impl Index {
    /// An empty index.
    pub fn new() -> Index {
        Index::default()
    }

    /// Folds in an added or modified object, as a watch reports it.
    pub fn apply<K: Indexed>(&mut self, object: K) {
        self.tombstones.remove(&(K::KIND, object.key()));
        self.fold::<K>(object);
    }

    /// Folds in an object a write returned, unless the watch has already reported it deleted
    /// (a response can land after the deletion's event, and must not bring the object back).
    fn apply_written<K: Indexed>(&mut self, object: K) {
        let incoming = object.meta().resource_version.as_deref();
        let deleted = self.tombstones.get(&(K::KIND, object.key()));
        if deleted.is_some_and(|(_, at)| !newer_than(at.as_deref(), incoming)) {
            return;
        }
        self.fold::<K>(object);
    }

    /// Folds `object` in unless the index holds a newer version of it: a write's response can
    /// overtake the watch event of an earlier change, and a late event or response must never
    /// roll an object back.
    fn fold<K: Indexed>(&mut self, object: K) {
        let key = object.key();
        let current = K::stored_version(self, &key);
        let keep = newer(current, object.meta().resource_version.as_deref());
        if let Some(seen) = self.relisting.get_mut(&K::KIND) {
            seen.insert(key);
        }
        if keep {
            object.apply(self);
        }
    }

    /// Removes a deleted object, remembering its last version for a while (see
    /// [`TOMBSTONES`]).
    pub fn delete<K: Indexed>(&mut self, object: &K) {
        let key = object.key();
        let deleted = object.meta().resource_version.clone();
        // A newer object of the same name (a write's response folded in before this event of
        // the old one's deletion) stays.
        if !newer_than(deleted.as_deref(), K::stored_version(self, &key)) {
            K::remove(self, &key);
            self.remember_deleted(K::KIND, key, deleted);
        }
    }

    /// Remembers a deletion (see [`TOMBSTONES`]).
    fn remember_deleted(&mut self, kind: Kind, key: String, version: Option<String>) {
        self.tombstone_seq += 1;
        let seq = self.tombstone_seq;
        self.tombstones.insert((kind, key.clone()), (seq, version));
        self.tombstone_order.push_back((seq, (kind, key)));
        while self.tombstone_order.len() > TOMBSTONES {
            if let Some((old, entry)) = self.tombstone_order.pop_front()
                && self.tombstones.get(&entry).is_some_and(|(s, _)| *s == old)
            {
                self.tombstones.remove(&entry);
            }
        }
    }

    /// A full list of `K` begins (the watch restarted): objects not listed again are gone.
    pub fn relist_begin<K: Indexed>(&mut self) {
        self.relisting.insert(K::KIND, BTreeSet::new());
    }

    /// The full list of `K` is complete: drops what it did not contain; `K` is synced.
    pub fn relist_done<K: Indexed>(&mut self) {
        let seen = self.relisting.remove(&K::KIND).unwrap_or_default();
        let stale: Vec<String> = self.keys(K::KIND).filter(|k| !seen.contains(k)).collect();
        for key in stale {
            K::remove(self, &key);
            // Deleted while the watch was down: a late write's response must not bring it
            // back either (its version is not known, so none is newer).
            self.remember_deleted(K::KIND, key, None);
        }
        if self.synced.insert(K::KIND) && K::KIND == Kind::ProvisioningRequest {
            self.shared_version += 1;
        }
    }

    fn keys(&self, kind: Kind) -> Box<dyn Iterator<Item = String> + '_> {
        match kind {
            Kind::GpuJob => Box::new(self.jobs.keys().map(|k| k.as_str().to_owned())),
            Kind::ClusterQueue => Box::new(self.cluster_queues.keys().cloned()),
            Kind::LocalQueue => Box::new(self.local_queues.keys().map(|k| k.as_str().to_owned())),
            Kind::ResourceFlavor => Box::new(self.flavors.keys().cloned()),
            Kind::Cohort => Box::new(self.cohorts.keys().cloned()),
            Kind::Node => Box::new(self.nodes.keys().cloned()),
            Kind::Pod => Box::new(self.pods.keys().map(|k| k.as_str().to_owned())),
            Kind::Namespace => Box::new(self.namespaces.keys().cloned()),
            Kind::PriorityClass => Box::new(self.priority_classes.keys().cloned()),
            Kind::ProvisioningRequest => Box::new(
                self.provisioning_requests
                    .keys()
                    .map(|k| k.as_str().to_owned()),
            ),
            Kind::PodTemplate => Box::new(self.pod_templates.keys().map(|k| k.as_str().to_owned())),
            Kind::Job => Box::new(self.workloads.keys().map(|k| k.as_str().to_owned())),
            Kind::JobSet => Box::new(self.jobsets.keys().map(|k| k.as_str().to_owned())),
            Kind::ChildJob => Box::new(self.child_jobs.keys().map(|k| k.as_str().to_owned())),
            Kind::SchedulingPodGroup => Box::new(
                self.pod_groups
                    .iter()
                    .filter(|(_, g)| g.declared.is_some())
                    .map(|(k, _)| k.as_str().to_owned()),
            ),
        }
    }

    /// Whether `kind` has been listed in full at least once.
    pub fn is_synced(&self, kind: Kind) -> bool {
        self.synced.contains(&kind)
    }

    /// An optional kind is being watched: until its first full list is in, the index is not
    /// ready (a pass that ran before ProvisioningRequests are listed would take every
    /// job's request for deleted).
    pub fn expect_kind(&mut self, kind: Kind) {
        self.expected.insert(kind);
    }

    /// Whether every required kind, and every optional kind being watched, is synced: a
    /// cycle may run.
    pub fn ready(&self) -> bool {
        Kind::REQUIRED
            .iter()
            .chain(&self.expected)
            .all(|k| self.is_synced(*k))
    }

    /// Whether ProvisioningRequests are watched and listed: only then can capacity be
    /// bought, or a request's progress be read.
    pub fn provisioning_api(&self) -> bool {
        self.is_synced(Kind::ProvisioningRequest)
    }

    /// A job by `namespace/name`.
    pub fn job(&self, key: &str) -> Option<&GpuJob> {
        self.jobs.get(key).map(AsRef::as_ref)
    }

    /// A Job labelled with a queue (the workload behind a queue entry) by `namespace/name`.
    pub fn workload(&self, key: &str) -> Option<&BatchJob> {
        self.workloads.get(key).map(AsRef::as_ref)
    }

    /// A ProvisioningRequest by `namespace/name`.
    pub fn provisioning_request(&self, key: &str) -> Option<&ProvisioningRequest> {
        self.provisioning_requests.get(key)
    }

    /// The ResourceFlavor `name`, as last seen.
    pub fn flavor(&self, name: &str) -> Option<&ResourceFlavor> {
        self.flavors.get(name)
    }

    /// The Cohort `name`, as last seen.
    pub fn cohort(&self, name: &str) -> Option<&Cohort> {
        self.cohorts.get(name)
    }

    /// A ClusterQueue by name.
    pub fn cluster_queue(&self, name: &str) -> Option<&ClusterQueue> {
        self.cluster_queues.get(name)
    }

    /// A LocalQueue by `namespace/name`.
    pub fn local_queue(&self, key: &str) -> Option<&LocalQueue> {
        self.local_queues.get(key)
    }

    /// The index's reference to the job admission's `id` names (admission keys jobs by their
    /// written reference); `None` once the index no longer holds the job, which every
    /// decision about a job needs.
    pub(crate) fn job_ref(&self, id: &str) -> Option<ObjectRef> {
        self.jobs.get_key_value(id).map(|(key, _)| key.clone())
    }

    /// A pod by `namespace/name`.
    pub fn pod(&self, key: &str) -> Option<&PodRecord> {
        self.pods.get(key)
    }

    /// The pods Muster released for `job` (any attempt), by key.
    pub fn pods_of(&self, job: &str) -> impl Iterator<Item = (&ObjectRef, &PodRecord)> {
        self.pods_by_job
            .get(job)
            .into_iter()
            .flatten()
            .filter_map(|k| self.pods.get(k).map(|p| (k, p)))
    }

    /// The pods Muster released for `job` (any attempt) that hold something on a node: bound
    /// and not finished.
    pub fn holding_pods_of(&self, job: &str) -> impl Iterator<Item = &ObjectRef> {
        self.pods_holding.get(job).into_iter().flatten()
    }

    /// What pods outside any gang hold on `node`, summed.
    pub fn base_usage(&self, node: &str) -> Option<&Resources> {
        self.base_usage.get(node)
    }

    /// A node.
    pub fn node(&self, name: &str) -> Option<&NodeInfo> {
        self.nodes.get(name)
    }

    /// Whether node `name`'s Ready condition is not True, and since when (`None`: it is Ready,
    /// or not known).
    pub fn not_ready(&self, name: &str) -> Option<&NotReady> {
        self.not_ready.get(name)
    }

    /// Counts: (jobs, nodes, pods).
    pub fn len(&self) -> (usize, usize, usize) {
        (self.jobs.len(), self.nodes.len(), self.pods.len())
    }

    /// Whether the index holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == (0, 0, 0)
    }

    /// Objects that could not be read, with why.
    pub fn unreadable(&self) -> impl Iterator<Item = (&str, &str)> {
        self.unreadable
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Objects a write returned, folded in like watch events (but never over a deletion).
    pub(crate) fn fold_in(&mut self, written: Vec<Written>) {
        for object in written {
            match object {
                Written::Job(job) => self.apply_written(*job),
                Written::Pod(pod) => self.apply_written(*pod),
                Written::Request(request) => self.apply_written(*request),
                Written::ClusterQueue(queue) => self.apply_written(*queue),
                Written::LocalQueue(queue) => self.apply_written(*queue),
                Written::ResourceFlavor(flavor) => self.apply_written(*flavor),
                Written::Cohort(cohort) => self.apply_written(*cohort),
                Written::Workload(job) => self.apply_written(*job),
                Written::JobSet(jobset) => self.apply_written(*jobset),
            }
        }
    }

    /// Counts changes of what every job's lifecycle reads (see `shared_version`): while it
    /// stays the same, a job whose own objects did not change settles as it did.
    pub(crate) fn shared_version(&self) -> u64 {
        self.shared_version + self.topology_version
    }

    /// Counts changes of ClusterQueues, LocalQueues and ResourceFlavors, statuses included.
    pub(crate) fn queues_version(&self) -> u64 {
        self.queues_version
    }

    /// The jobs whose own objects changed since the last call (the GpuJob, its pods, its
    /// ProvisioningRequests), and forgets them.
    pub(crate) fn take_changed_jobs(&mut self) -> BTreeSet<ObjectRef> {
        std::mem::take(&mut self.changed_jobs)
    }

    /// Counts changes of nodes' placement facts and of flavors.
    pub(crate) fn topology_version(&self) -> u64 {
        self.topology_version
    }

    /// Every flavor's nodes, with no usage booked: built when nodes or flavors changed since
    /// the last call, else the cached one. Node heartbeats change nothing here, so a fleet's
    /// steady stream of node updates does not rebuild it.
    pub fn empty_cluster(&mut self) -> &muster_admission::Cluster {
        let current = self.topology_version;
        if self.cluster.as_ref().is_none_or(|(v, _)| *v != current) {
            let nodes: Vec<NodeInfo> = self.nodes.values().cloned().collect();
            let flavors = self
                .flavors
                .iter()
                .map(|(name, f)| (name.clone(), f.spec.clone()));
            self.cluster = Some((current, muster_admission::Cluster::new(flavors, &nodes)));
        }
        match &self.cluster {
            Some((_, cluster)) => cluster,
            None => unreachable!("built above"),
        }
    }

    /// Every ClusterQueue's spec as admission is to read it: without the ProvisioningRequest
    /// API no capacity can be bought, so queues wait for today's nodes instead.
    pub fn admission_cluster_queues(
        &self,
    ) -> impl Iterator<Item = (String, muster_api::ClusterQueueSpec)> + '_ {
        let buys = self.provisioning_api();
        self.cluster_queues.iter().map(move |(name, q)| {
            let mut spec = q.spec.clone();
            if !buys {
                spec.provisioning = None;
            }
            (name.clone(), spec)
        })
    }

    /// The cohort tree the Cohort objects define, checked (see [`CohortTree`]).
    pub fn cohort_tree(&self) -> CohortTree {
        CohortTree::new(
            self.cohorts
                .iter()
                .map(|(name, c)| (name.clone(), c.spec.clone())),
        )
    }

    fn remove_pod(&mut self, key: &str) {
        let Some(old) = self.pods.remove(key) else {
            return;
        };
        if let Some(group) = &old.group
            && let Some(pods) = self.pod_groups.get_mut(group)
        {
            pods.pods.remove(key);
            if pods.pods.is_empty() && pods.declared.is_none() {
                self.pod_groups.remove(group);
            }
            self.changed_jobs.insert(group_entry(group));
        }
        match old.member {
            Some(member) => {
                self.changed_jobs.insert(member.job.clone());
                for by_job in [&mut self.pods_by_job, &mut self.pods_holding] {
                    if let Some(set) = by_job.get_mut(&member.job) {
                        set.remove(key);
                        if set.is_empty() {
                            by_job.remove(&member.job);
                        }
                    }
                }
            }
            None => {
                if let (Some(node), Some(usage)) = (old.node, old.usage)
                    && let Some(sum) = self.base_usage.get_mut(&node)
                {
                    sum.saturating_sub_all(&usage);
                    if sum.iter().all(|(_, a)| a.is_zero()) {
                        self.base_usage.remove(&node);
                    }
                }
            }
        }
    }

    /// Sets the gang size the `scheduling.k8s.io` PodGroup `group` declares (`None` once it is
    /// gone, or asks for no gang).
    pub(crate) fn declare_group(&mut self, group: &ObjectRef, declared: Option<i32>) {
        self.changed_jobs.insert(group_entry(group));
        match self.pod_groups.get_mut(group) {
            Some(existing) => {
                existing.declared = declared;
                if existing.pods.is_empty() && declared.is_none() {
                    self.pod_groups.remove(group);
                }
            }
            None if declared.is_some() => {
                self.pod_groups.insert(
                    group.clone(),
                    PodGroup {
                        pods: BTreeMap::new(),
                        declared,
                    },
                );
            }
            None => {}
        }
    }

    /// Keeps `pod` (labelled with a queue and a pod group) in its group.
    pub(crate) fn insert_group_pod(&mut self, group: &ObjectRef, key: ObjectRef, pod: Pod) {
        self.changed_jobs.insert(group_entry(group));
        self.pod_groups
            .entry(group.clone())
            .or_default()
            .pods
            .insert(key, pod);
    }

    fn insert_pod(&mut self, key: ObjectRef, record: PodRecord) {
        match &record.member {
            Some(member) => {
                self.changed_jobs.insert(member.job.clone());
                self.pods_by_job
                    .entry(member.job.clone())
                    .or_default()
                    .insert(key.clone());
                if record.node.is_some() && record.usage.is_some() {
                    self.pods_holding
                        .entry(member.job.clone())
                        .or_default()
                        .insert(key.clone());
                }
            }
            None => {
                if let (Some(node), Some(usage)) = (&record.node, &record.usage) {
                    self.base_usage
                        .entry(node.clone())
                        .or_default()
                        .add_all(usage);
                }
            }
        }
        self.pods.insert(key, record);
    }
}

/// The key of the queue entry of pod group `group`.
fn group_entry(group: &ObjectRef) -> ObjectRef {
    ObjectRef::new(
        group.namespace(),
        &muster_api::workload::pod_group_entry_name(group.name()),
    )
}

/// How many deletions the index remembers (about 100 bytes each). A write's response lands
/// within the request's timeout of its deletion; this covers a burst of deletions across a
/// 100,000-pod fleet in between.
const TOMBSTONES: usize = 65_536;

/// A resource version as a number, when it is one (as etcd gives them).
fn version_number(version: Option<&str>) -> Option<u64> {
    version.and_then(|v| v.parse().ok())
}

/// Whether `incoming` is strictly newer than the version an object was deleted at (a
/// re-created object); without numbers to compare, it is not.
fn newer_than(deleted: Option<&str>, incoming: Option<&str>) -> bool {
    match (version_number(deleted), version_number(incoming)) {
        (Some(d), Some(i)) => i > d,
        _ => false,
    }
}

/// Whether `incoming` may replace `current` (it is at least as new). Without numbers to
/// compare, the incoming one wins.
fn newer(current: Option<&str>, incoming: Option<&str>) -> bool {
    match (version_number(current), version_number(incoming)) {
        (Some(c), Some(i)) => i >= c,
        _ => true,
    }
}
