//! The discrete-event engine: arrivals and completions in virtual time, and after every batch
//! of events at one instant, `muster-admission`'s cycle, unchanged.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::{Duration, Instant};

use muster_admission::{Cluster, CohortTree, Decision, Job, PendingReason, Scheduler};
use muster_api::{Amount, ObjectRef, Resources};
use muster_topology::{Constraint, PodSetRequest};

use self::fleet::{Changes, Failures};
use crate::scenario::Loaded;
use crate::trace::TraceJob;

mod fleet;
mod lending;

pub use self::lending::Lending;

/// What happened to one job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRecord {
    /// The job.
    pub id: String,
    /// Its LocalQueue.
    pub queue: String,
    /// Its priority.
    pub priority: i32,
    /// GPUs it asked for (a pod asking for part of one GPU counts the one GPU it is on).
    pub gpus: u64,
    /// Milli-GPU it asked for: a part of one GPU counts exactly.
    pub gpu_milli: u64,
    /// When it was submitted.
    pub submit: i64,
    /// When it was first admitted.
    pub admit: Option<i64>,
    /// When its last (completed) run started.
    pub start: Option<i64>,
    /// When it finished.
    pub end: Option<i64>,
    /// The domain of its first pod set in its last admission, as `level=value` pairs.
    pub domain: String,
    /// How often it was preempted or evicted.
    pub preemptions: u32,
    /// How often its node failed under it and it restarted.
    pub restarts: u32,
    /// GPU-seconds of its runs that ended before it finished and whose work was not kept
    /// (all of such a run without checkpoints, what followed the last checkpoint with them).
    pub lost_gpu_seconds: u64,
    /// Seconds of work it asked for (its duration).
    pub work: i64,
}

/// One point of the allocation timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Virtual time.
    pub time: i64,
    /// Milli-GPU held by admitted jobs from then on (a part of one GPU counts exactly).
    pub allocated_milli: u64,
    /// Jobs waiting from then on.
    pub pending: u64,
    /// Some ClusterQueue's head job waits for capacity or quota from then on.
    pub head_waiting: bool,
    /// Some head waits because no single domain holds it although the flavor as a whole
    /// has room: fragmentation.
    pub fragmented: bool,
}

/// The outcome of one run.
#[derive(Clone, Debug)]
pub struct Run {
    /// The placement policy.
    pub policy: String,
    /// Per job, in submission order.
    pub records: Vec<JobRecord>,
    /// Allocation and queue length after every instant with events.
    pub timeline: Vec<Sample>,
    /// GPUs of the whole fleet.
    pub total_gpus: u64,
    /// Arrivals, completions and evictions processed.
    pub events: u64,
    /// Admission cycles run.
    pub cycles: u64,
    /// Wall time of the run (not part of any deterministic output).
    pub wall: Duration,
    /// What the autoscaler did, when the scenario has capacity to buy.
    pub provisioning: Option<crate::autoscaler::ProvisioningStats>,
    /// Per ClusterQueue in a cohort and per cohort, what it lent and borrowed of
    /// accelerators (empty when no queue is in a cohort).
    pub lending: BTreeMap<String, Lending>,
}

/// Converts a trace job to an admission job in `namespace`.
pub fn admission_job(job: &TraceJob, namespace: &str) -> Job {
    let (constraint, invalid) = if let Some(tpu) = job.topology.strip_prefix("tpu:") {
        match tpu_constraint(tpu) {
            Ok(c) => (c, None),
            Err(why) => (Constraint::None, Some(why)),
        }
    } else if let Some(level) = job.topology.strip_prefix("required:") {
        (Constraint::Required(level.to_owned()), None)
    } else if let Some(level) = job.topology.strip_prefix("preferred:") {
        (Constraint::Preferred(level.to_owned()), None)
    } else {
        (Constraint::None, None)
    };
    let keyed = |name: &str| {
        let mut key = String::with_capacity(namespace.len() + 1 + name.len());
        key.push_str(namespace);
        key.push('/');
        key.push_str(name);
        key
    };
    Job {
        id: keyed(&job.id),
        uid: job.id.clone(),
        local_queue: keyed(&job.queue),
        priority: job.priority,
        created: job.submit,
        expected_runtime: job.expected_runtime,
        pod_sets: job
            .pod_sets
            .iter()
            .map(|(name, count, requests)| {
                let mut r: Resources = requests.iter().map(|(k, v)| (k.clone(), *v)).collect();
                r.set("pods", Amount::from_units(1));
                let whole_gpus = muster_topology::needs_whole_gpus(&r);
                PodSetRequest {
                    name: name.clone(),
                    count: *count,
                    requests: r,
                    node_selector: job.node_selector.clone(),
                    affinity: Vec::new(),
                    tolerations: Vec::new(),
                    constraint: constraint.clone(),
                    whole_gpus,
                }
            })
            .collect(),
        invalid,
        suspended: false,
        provisioned: false,
    }
}

/// `accelerator:shape[:slices][:rotate]` as a TPU slice constraint, or why it is not one.
fn tpu_constraint(spec: &str) -> Result<Constraint, String> {
    let mut parts = spec.split(':');
    let accelerator = parts.next().unwrap_or_default().to_owned();
    let shape = parts
        .next()
        .and_then(muster_api::tpu::Shape::parse)
        .ok_or_else(|| format!("topology tpu:{spec}: the shape is not AxB or AxBxC"))?;
    let mut slices = 1;
    let mut allow_rotation = false;
    for part in parts {
        if part == "rotate" {
            allow_rotation = true;
        } else if let Ok(n) = part.parse::<u32>() {
            slices = n.max(1);
        }
    }
    Ok(Constraint::Tpu {
        accelerator,
        shape,
        slices,
        allow_rotation,
    })
}

/// A fresh scheduler for the scenario, placing with `policy`.
pub fn scheduler(loaded: &Loaded, policy: &str) -> Result<Scheduler, String> {
    let policy = muster_topology::by_name(policy).ok_or_else(|| {
        format!(
            "unknown policy {policy:?}; use one of {}",
            muster_topology::POLICY_NAMES.join(", ")
        )
    })?;
    let cluster = Cluster::new(loaded.flavors.clone(), &loaded.nodes);
    let mut s = Scheduler::new(
        cluster,
        loaded.cluster_queues.clone(),
        loaded.local_queues.clone(),
    )
    .with_cohorts(CohortTree::new(loaded.cohorts.clone()))
    .with_policy(policy);
    s.set_namespace(&loaded.scenario.namespace, BTreeMap::new());
    Ok(s)
}

/// The run's bookkeeping between events.
struct Books {
    namespace: String,
    index: BTreeMap<String, usize>,
    records: Vec<JobRecord>,
    /// Work left per job, seconds (less than its duration after a restart from a checkpoint).
    remaining: Vec<i64>,
    /// Nodes of each job's current run.
    nodes: Vec<Vec<String>>,
    checkpoint: Option<i64>,
    /// Nodes not in the cluster now (not yet added, or removed): they hold no pods and do not
    /// fail.
    absent: std::collections::BTreeSet<String>,
    /// Nodes failed and not yet repaired.
    failed: std::collections::BTreeSet<String>,
    /// (end, job index, attempt): an eviction bumps the attempt, so a stale end is ignored.
    ends: BinaryHeap<Reverse<(i64, usize, u32)>>,
    attempt: Vec<u32>,
    running: Vec<bool>,
    allocated: u64,
    pending: u64,
    finished: usize,
    events: u64,
}

impl Books {
    fn new(loaded: &Loaded) -> Books {
        let namespace = loaded.scenario.namespace.clone();
        Books {
            index: loaded
                .jobs
                .iter()
                .enumerate()
                .map(|(i, j)| (ObjectRef::new(&namespace, &j.id).into_string(), i))
                .collect(),
            records: loaded
                .jobs
                .iter()
                .map(|j| JobRecord {
                    id: j.id.clone(),
                    queue: j.queue.clone(),
                    priority: j.priority,
                    gpus: j.gpus(),
                    gpu_milli: j.gpu_milli(),
                    submit: j.submit,
                    admit: None,
                    start: None,
                    end: None,
                    domain: String::new(),
                    preemptions: 0,
                    restarts: 0,
                    lost_gpu_seconds: 0,
                    work: j.duration,
                })
                .collect(),
            remaining: loaded.jobs.iter().map(|j| j.duration).collect(),
            nodes: vec![Vec::new(); loaded.jobs.len()],
            checkpoint: loaded.scenario.checkpoint_seconds.filter(|c| *c > 0),
            absent: std::collections::BTreeSet::new(),
            failed: std::collections::BTreeSet::new(),
            ends: BinaryHeap::new(),
            attempt: vec![0; loaded.jobs.len()],
            running: vec![false; loaded.jobs.len()],
            allocated: 0,
            pending: 0,
            finished: 0,
            events: 0,
            namespace,
        }
    }

    /// Completes every job whose current run ends at `now`.
    fn complete(&mut self, s: &mut Scheduler, now: i64) {
        while let Some(Reverse((t, i, a))) = self.ends.peek().copied()
            && t == now
        {
            self.ends.pop();
            if a == self.attempt[i] && self.running[i] {
                self.running[i] = false;
                self.allocated -= self.records[i].gpu_milli;
                self.records[i].end = Some(now);
                self.finished += 1;
                s.finish(ObjectRef::new(&self.namespace, &self.records[i].id).as_str());
                self.events += 1;
            }
        }
    }

    fn admitted(&mut self, a: &muster_admission::Admitted, now: i64) {
        let Some(&i) = self.index.get(&a.job) else {
            return;
        };
        self.running[i] = true;
        self.allocated += self.records[i].gpu_milli;
        self.pending -= 1;
        let r = &mut self.records[i];
        r.admit.get_or_insert(now);
        r.start = Some(now);
        r.domain = a.pod_sets.first().map_or_else(String::new, |p| {
            p.domain
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        });
        self.nodes[i] = a.pod_sets.iter().flat_map(|p| p.nodes.clone()).collect();
        self.ends
            .push(Reverse((now + self.remaining[i], i, self.attempt[i])));
    }

    /// The job's pods are gone at `now`: back to the queue, keeping its work up to the last
    /// checkpoint. `failed`: its node failed (a restart), else it was evicted.
    fn evicted(&mut self, s: &mut Scheduler, id: &str, now: i64, failed: bool) {
        let Some(&i) = self.index.get(id) else { return };
        s.requeue(id);
        if self.running[i] {
            self.running[i] = false;
            self.allocated -= self.records[i].gpu_milli;
            self.pending += 1;
            let ran = self.records[i]
                .start
                .map_or(0, |start| (now - start).max(0));
            let kept = self.checkpoint.map_or(0, |every| ran / every * every);
            if self.checkpoint.is_some() {
                self.remaining[i] = (self.remaining[i] - kept).max(1);
            }
            let lost = u64::try_from(ran - kept).unwrap_or(0);
            self.records[i].lost_gpu_seconds += self.records[i].gpu_milli * lost / 1000;
        }
        self.attempt[i] += 1;
        if failed {
            self.records[i].restarts += 1;
        } else {
            self.records[i].preemptions += 1;
        }
        self.records[i].start = None;
        self.nodes[i].clear();
        self.events += 1;
    }

    /// Takes `node` out of service at `now`: every job with a pod on it leaves (a restart if
    /// `failed`, else an eviction), and the node is marked not schedulable.
    fn take_down(
        &mut self,
        s: &mut Scheduler,
        node: &muster_topology::NodeInfo,
        now: i64,
        failed: bool,
    ) {
        for job in self.on_node(&node.name) {
            self.evicted(s, &job, now, failed);
        }
        s.cluster_mut().set_schedulable(&node.name, false);
    }

    /// Jobs running on `node`.
    fn on_node(&self, node: &str) -> Vec<String> {
        (0..self.records.len())
            .filter(|&i| self.running[i] && self.nodes[i].iter().any(|n| n == node))
            .map(|i| ObjectRef::new(&self.namespace, &self.records[i].id).into_string())
            .collect()
    }
}

/// Looks at a run as it goes, at moments of its choosing (the start-time forecasts' accuracy
/// check takes its snapshots this way).
pub trait Observer {
    /// The next moment to look at, if any: it is shown the run once every event at or before
    /// that moment has been applied and its cycle run.
    fn next(&self) -> Option<i64>;
    /// The run at `moment`: the scheduler and every job's record so far.
    fn observe(&mut self, moment: i64, scheduler: &Scheduler, records: &[JobRecord]);
}

/// Replays the scenario's jobs with `policy`. `progress(done, total)` is called now and then.
pub fn run(
    loaded: &Loaded,
    policy: &str,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Run, String> {
    run_observed(loaded, policy, progress, None)
}

/// GPUs of the pools that exist (capacity bought from the autoscaler is reported apart).
fn fleet_gpus(loaded: &Loaded) -> u64 {
    loaded
        .scenario
        .cluster
        .pools
        .iter()
        .filter(|p| p.autoscaler.is_none())
        .map(|p| u64::from(p.blocks) * u64::from(p.hosts_per_block) * u64::from(p.gpus_per_host))
        .sum()
}

/// [`run`], shown to `observer` at the moments it asks for.
pub fn run_observed(
    loaded: &Loaded,
    policy: &str,
    progress: &mut dyn FnMut(usize, usize),
    mut observer: Option<&mut dyn Observer>,
) -> Result<Run, String> {
    let started = Instant::now();
    let mut s = scheduler(loaded, policy)?;
    let mut books = Books::new(loaded);
    let originals: Vec<Job> = loaded
        .jobs
        .iter()
        .map(|j| admission_job(j, &books.namespace))
        .collect();
    let mut autoscaler =
        crate::autoscaler::Autoscaler::new(loaded, &mut s, &mut books.absent, originals)?;
    let mut timeline = Vec::new();
    let mut ledger = lending::Ledger::new(loaded);
    let mut cycles = 0u64;
    let mut next = 0;
    let total = loaded.jobs.len();
    let mut failures = Failures::new(loaded);
    let mut changes = Changes::new(loaded, &mut s, &mut books);
    let mut reweigh: Option<i64> = None;
    loop {
        let next_end = books.ends.peek().map(|Reverse((t, _, _))| *t);
        let next_arrival = loaded.jobs.get(next).map(|j| j.submit);
        // Failures matter while work remains to disturb; repairs while jobs still wait.
        let work_left = next_end.is_some() || next_arrival.is_some();
        let next_failure = failures.next_failure().filter(|_| work_left);
        let next_repair = failures
            .next_repair()
            .filter(|_| work_left || books.pending > 0);
        let next_change = changes.next().filter(|_| work_left || books.pending > 0);
        let next_autoscaler = autoscaler
            .as_ref()
            .and_then(crate::autoscaler::Autoscaler::next);
        // A preemptor that waits because waiting is cheaper weighs again when a job passes
        // its announced end or its wait reaches its bound, though no event comes then.
        let next_reweigh = reweigh.filter(|_| work_left || books.pending > 0);
        let Some(now) = [
            next_end,
            next_arrival,
            next_failure,
            next_repair,
            next_change,
            next_autoscaler,
            next_reweigh,
        ]
        .into_iter()
        .flatten()
        .min() else {
            break;
        };
        show(observer.as_deref_mut(), now, &s, &books.records);
        books.complete(&mut s, now);
        books.events += failures.apply(now, &mut s, &mut books, &loaded.nodes);
        books.events += changes.apply(now, &mut s, &mut books, &loaded.nodes);
        if let Some(a) = autoscaler.as_mut() {
            autoscale(a, now, &mut s, &mut books, loaded);
        }
        while next < total && loaded.jobs[next].submit == now {
            s.submit(admission_job(&loaded.jobs[next], &books.namespace));
            books.pending += 1;
            books.events += 1;
            next += 1;
        }
        let (head_waiting, fragmented) = decide(
            &mut s,
            &mut books,
            autoscaler.as_mut(),
            loaded,
            now,
            &mut cycles,
        );
        reweigh = s.reweigh_at(now);
        if let Some(a) = autoscaler.as_mut() {
            let running = books.running.clone();
            a.settle(now, &mut s, loaded, &mut books.absent, &|i| {
                running.get(i).copied().unwrap_or(false)
            });
        }
        ledger.record(now, s.quota());
        timeline.push(Sample {
            time: now,
            allocated_milli: books.allocated,
            pending: books.pending,
            head_waiting,
            fragmented,
        });
        progress(books.finished, total);
    }
    Ok(Run {
        policy: policy.to_owned(),
        records: books.records,
        timeline,
        total_gpus: fleet_gpus(loaded),
        events: books.events,
        cycles,
        wall: started.elapsed(),
        provisioning: autoscaler.map(crate::autoscaler::Autoscaler::finish),
        lending: ledger.finish(),
    })
}

/// Shows `observer` every moment it asks for before `now`: the run as the last instant left
/// it.
fn show(
    observer: Option<&mut (dyn Observer + '_)>,
    now: i64,
    s: &Scheduler,
    records: &[JobRecord],
) {
    if let Some(o) = observer {
        while let Some(moment) = o.next()
            && moment < now
        {
            o.observe(moment, s, records);
        }
    }
}

/// Runs the cycle at `now` and applies its decisions; evictions free capacity at once, so
/// it cycles again (at most four times) until the instant is quiet. Returns whether some
/// queue head waits, and whether on fragmentation.
fn decide(
    s: &mut Scheduler,
    books: &mut Books,
    mut autoscaler: Option<&mut crate::autoscaler::Autoscaler>,
    loaded: &Loaded,
    now: i64,
    cycles: &mut u64,
) -> (bool, bool) {
    let (mut head_waiting, mut fragmented) = (false, false);
    for _ in 0..4 {
        *cycles += 1;
        let mut evicted = false;
        let decisions = s.step(now);
        (head_waiting, fragmented) = heads(s);
        for d in decisions {
            match d {
                Decision::Admit(a) => books.admitted(&a, now),
                Decision::Preempt { victims, .. } => {
                    for v in victims {
                        books.evicted(s, &v, now, false);
                        evicted = true;
                    }
                }
                Decision::Evict { job, .. } => {
                    books.evicted(s, &job, now, false);
                    evicted = true;
                }
                Decision::Provision { job, flavors, .. } => {
                    if let Some(a) = autoscaler.as_deref_mut() {
                        buy(a, books, loaded, &job, &flavors, now);
                    }
                }
                Decision::Pending { .. } => {}
            }
        }
        if !evicted {
            break;
        }
    }
    (head_waiting, fragmented)
}

/// Admission decided to buy capacity for `job`: ask the autoscaler (for its first pod set's
/// flavor).
fn buy(
    a: &mut crate::autoscaler::Autoscaler,
    books: &Books,
    loaded: &Loaded,
    job: &str,
    flavors: &[(String, String)],
    now: i64,
) {
    let Some(&i) = books.index.get(job) else {
        return;
    };
    let flavor = flavors
        .first()
        .and_then(|(_, f)| loaded.flavors.iter().find(|(n, _)| n == f));
    if let Some((_, flavor)) = flavor {
        a.request(i, flavor, loaded.jobs[i].gpus(), now);
    }
}

/// The autoscaler's events at `now`: capacity ready, stockouts, expired bookings, and
/// revocations (whose gangs are evicted and whose capacity goes before the cycle).
fn autoscale(
    a: &mut crate::autoscaler::Autoscaler,
    now: i64,
    s: &mut Scheduler,
    books: &mut Books,
    loaded: &Loaded,
) {
    let running = books.running.clone();
    let (count, gave_up, revoked) =
        a.apply(now, s, loaded, &mut books.absent, &books.failed, &|i| {
            running.get(i).copied().unwrap_or(false)
        });
    books.events += count;
    for i in gave_up {
        books.pending = books.pending.saturating_sub(1);
        books.finished += 1;
        books.records[i].domain = "gave up: no capacity after every provisioning retry".into();
    }
    if !revoked.is_empty() {
        let spent_candidates = revoked.clone();
        for i in revoked {
            let id = ObjectRef::new(&books.namespace, &books.records[i].id).into_string();
            books.evicted(s, &id, now, false);
        }
        // The capacity goes before the cycle, so the gang cannot start on it again.
        let running = books.running.clone();
        a.settle(now, s, loaded, &mut books.absent, &|i| {
            running.get(i).copied().unwrap_or(false)
        });
        for i in spent_candidates {
            if let Some(why) = a.spent(i, s) {
                books.pending = books.pending.saturating_sub(1);
                books.finished += 1;
                books.records[i].domain = why.into();
            }
        }
    }
}

/// Whether some queue head waits for capacity or quota, and whether some waits because free
/// capacity is fragmented.
fn heads(s: &Scheduler) -> (bool, bool) {
    let mut waiting = false;
    let mut fragmented = false;
    for (_, reason) in s.head_reasons() {
        match reason {
            PendingReason::NoTopologyFit(no_fit) => {
                waiting = true;
                fragmented |= no_fit.fragmented;
            }
            PendingReason::QuotaShort(_)
            | PendingReason::NotCovered { .. }
            | PendingReason::CapacityReserved { .. }
            | PendingReason::Preempting { .. }
            | PendingReason::PreemptionDeferred(_) => waiting = true,
            _ => {}
        }
    }
    (waiting, fragmented)
}
