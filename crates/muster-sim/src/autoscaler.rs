//! The cluster autoscaler, as the simulator models it: pools of capacity that can be bought
//! block by block through ProvisioningRequests, with a provisioning latency, stockouts when
//! every block is in use, a booking that lapses when the gang does not start, and a maximum
//! run duration after which the capacity is taken back.
//!
//! A job that admission decides to provision gets the hosts its accelerators need, all in one
//! block of an autoscaler pool of its flavor. Once provisioned, the job, which has held its
//! quota all along, is narrowed to a toleration for exactly those hosts (every host carries its
//! own taint), so the capacity is its alone, and starts there; when the job ends or leaves,
//! the hosts are given back (scale-down). A request
//! larger than a block can never be served: it fails as a stockout. Retries after a stockout
//! or an expired booking follow the ClusterQueue's `provisioning.retry`, through the same
//! backoff function the controller uses.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

use k8s_openapi::api::core::v1::Toleration;
use muster_admission::{Job, Scheduler};
use muster_api::ClusterQueueSpec;
use muster_api::cluster_queue::{ProvisioningPolicy, RevokedPolicy};
use muster_provisioning::state::out_of_requests;

use muster_api::wire::{AUTOSCALER_POOL_LABEL, CAPACITY_HOST_TAINT};

use crate::scenario::{AutoscalerSpec, Loaded};
use crate::trace::Rng;

/// What the autoscaler did in one run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProvisioningStats {
    /// Requests made.
    pub requests: u64,
    /// Requests that got their capacity.
    pub provisioned: u64,
    /// Requests that failed for want of a free block.
    pub stockouts: u64,
    /// Bookings that lapsed before the gang started.
    pub expired: u64,
    /// Running gangs whose capacity was taken back.
    pub revoked: u64,
    /// Jobs that ran out of retries.
    pub gave_up: u64,
    /// Jobs that failed because their capacity was revoked (`onCapacityRevoked: Fail`).
    pub failed_on_revoke: u64,
    /// Accelerator-hours of bought capacity, from provisioned until given back.
    pub gpu_hours_bought: f64,
    /// Mean time from request to capacity, seconds, over provisioned requests.
    pub mean_latency_seconds: f64,
}

/// Events, ordered so that an instant's events apply in a fixed order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// The capacity of the job's request is ready.
    Ready,
    /// The request failed: no block was free.
    Stockout,
    /// The booking lapses unless the gang started.
    Expire,
    /// The maximum run duration is reached.
    Revoke,
    /// The backoff after a failure is over: the job queues again.
    Retry,
}

struct Pool {
    name: String,
    labels: BTreeMap<String, String>,
    spec: AutoscalerSpec,
    accelerators_per_host: u64,
    /// Node indexes (into `Loaded::nodes`) per block.
    blocks: Vec<Vec<usize>>,
    /// The job holding each node, by node index.
    holder: BTreeMap<usize, usize>,
    /// Jobs whose requests wait for free blocks, in arrival order.
    waiting: Vec<usize>,
}

/// A job's current request.
struct Request {
    pool: usize,
    /// Hosts it needs.
    needed: usize,
    /// Hosts it got, as node indexes (empty while it waits in a stockout).
    hosts: Vec<usize>,
    requested_at: i64,
    ready_at: Option<i64>,
    /// The gang was seen running on the capacity.
    started: bool,
}

/// The simulated autoscaler.
pub(crate) struct Autoscaler {
    pools: Vec<Pool>,
    rng: Rng,
    /// (time, event, job, attempt).
    events: BinaryHeap<Reverse<(i64, Event, usize, u32)>>,
    requests: BTreeMap<usize, Request>,
    /// Requests made per job.
    attempts: Vec<u32>,
    /// Each job as submitted, to queue it again without the bought capacity's toleration.
    originals: Vec<Job>,
    /// The provisioning policy of each ClusterQueue that buys capacity.
    policies: BTreeMap<String, ProvisioningPolicy>,
    latency_total: i64,
    pub(crate) stats: ProvisioningStats,
}

/// The ClusterQueues that provision, with their policies.
fn provisioning_queues(loaded: &Loaded) -> Vec<(&str, &ClusterQueueSpec, &ProvisioningPolicy)> {
    loaded
        .cluster_queues
        .iter()
        .filter_map(|(n, q)| q.provisioning.as_ref().map(|p| (n.as_str(), q, p)))
        .collect()
}

impl Autoscaler {
    /// The autoscaler of `loaded`, or `None` when no pool can be bought. Every node of an
    /// autoscaler pool starts out of the cluster. Errors when a queue provisions a flavor no
    /// autoscaler pool serves, or asks for what the model does not do.
    pub(crate) fn new(
        loaded: &Loaded,
        s: &mut Scheduler,
        absent: &mut BTreeSet<String>,
        originals: Vec<Job>,
    ) -> Result<Option<Autoscaler>, String> {
        let queues = provisioning_queues(loaded);
        let mut pools = Vec::new();
        let mut at = 0usize;
        for pool in &loaded.scenario.cluster.pools {
            let count = usize::try_from(u64::from(pool.blocks) * u64::from(pool.hosts_per_block))
                .unwrap_or(0);
            if let Some(spec) = &pool.autoscaler {
                let l = spec.latency_seconds;
                if l.min < 1 || l.max < l.min {
                    return Err(format!(
                        "pool {}: autoscaler.latencySeconds needs 1 <= min <= max (got {}..{})",
                        pool.name, l.min, l.max
                    ));
                }
                if spec.booking_seconds < 1 || spec.stockout_seconds < 1 {
                    return Err(format!(
                        "pool {}: autoscaler.bookingSeconds and stockoutSeconds must be at least 1",
                        pool.name
                    ));
                }
                let hosts = usize::try_from(pool.hosts_per_block).unwrap_or(0);
                let blocks: Vec<Vec<usize>> = (0..usize::try_from(pool.blocks).unwrap_or(0))
                    .map(|b| (at + b * hosts..at + (b + 1) * hosts).collect())
                    .collect();
                for node in at..at + count {
                    if let Some(info) = loaded.nodes.get(node) {
                        s.cluster_mut().set_schedulable(&info.name, false);
                        absent.insert(info.name.clone());
                    }
                }
                let mut labels = pool.labels.clone();
                labels.insert(AUTOSCALER_POOL_LABEL.to_owned(), pool.name.clone());
                pools.push(Pool {
                    name: pool.name.clone(),
                    labels,
                    spec: spec.clone(),
                    accelerators_per_host: u64::from(pool.gpus_per_host),
                    holder: BTreeMap::new(),
                    waiting: Vec::new(),
                    blocks,
                });
            }
            at += count;
        }
        check_queues(loaded, &queues, &pools)?;
        if pools.is_empty() {
            return if queues.is_empty() {
                Ok(None)
            } else {
                Err(
                    "a ClusterQueue provisions, but no pool has an `autoscaler:` to buy from"
                        .into(),
                )
            };
        }
        let seed = loaded
            .seed
            .or_else(|| pools.iter().find_map(|p| p.spec.seed))
            .unwrap_or(1);
        let policies = loaded
            .cluster_queues
            .iter()
            .filter_map(|(n, q)| q.provisioning.clone().map(|p| (n.clone(), p)))
            .collect();
        Ok(Some(Autoscaler {
            attempts: vec![0; originals.len()],
            originals,
            pools,
            rng: Rng::new(seed),
            events: BinaryHeap::new(),
            requests: BTreeMap::new(),
            policies,
            latency_total: 0,
            stats: ProvisioningStats::default(),
        }))
    }

    /// The time of the next event.
    pub(crate) fn next(&self) -> Option<i64> {
        self.events.peek().map(|Reverse((t, ..))| *t)
    }

    /// Admission decided to buy capacity for job `i` (in `flavor`, needing `accelerators`).
    pub(crate) fn request(
        &mut self,
        i: usize,
        flavor: &muster_api::ResourceFlavorSpec,
        accelerators: u64,
        now: i64,
    ) {
        if self.requests.contains_key(&i) {
            return;
        }
        self.stats.requests += 1;
        self.attempts[i] += 1;
        let attempt = self.attempts[i];
        let Some(p) = self.pools.iter().position(|p| {
            flavor
                .node_labels
                .iter()
                .all(|(k, v)| p.labels.get(k) == Some(v))
        }) else {
            // Checked when the run began: every provisioning flavor has a pool.
            return;
        };
        let pool = &mut self.pools[p];
        let needed = usize::try_from(accelerators.div_ceil(pool.accelerators_per_host.max(1)))
            .unwrap_or(usize::MAX)
            .max(1);
        self.requests.insert(
            i,
            Request {
                pool: p,
                needed,
                hosts: Vec::new(),
                requested_at: now,
                ready_at: None,
                started: false,
            },
        );
        // The request queues at the autoscaler until a block has the hosts free; in a
        // stockout that takes long, and past `stockoutSeconds` it fails.
        self.events.push(Reverse((
            now + pool.spec.stockout_seconds,
            Event::Stockout,
            i,
            attempt,
        )));
        pool.waiting.push(i);
        self.serve_waiting(p, now);
    }

    /// Hands free hosts of pool `p` to waiting requests, oldest first, each all in one block
    /// (a request that does not fit lets smaller ones behind it go).
    fn serve_waiting(&mut self, p: usize, now: i64) {
        let waiting = std::mem::take(&mut self.pools[p].waiting);
        let mut still = Vec::new();
        for i in waiting {
            let Some(request) = self.requests.get_mut(&i) else {
                continue;
            };
            let pool = &mut self.pools[p];
            let holder = &pool.holder;
            let found = pool.blocks.iter().find_map(|block| {
                let free: Vec<usize> = block
                    .iter()
                    .copied()
                    .filter(|n| !holder.contains_key(n))
                    .take(request.needed)
                    .collect();
                (free.len() == request.needed).then_some(free)
            });
            let Some(free) = found else {
                still.push(i);
                continue;
            };
            for n in &free {
                pool.holder.insert(*n, i);
            }
            request.hosts = free;
            let l = pool.spec.latency_seconds;
            let span = u64::try_from(l.max - l.min).unwrap_or(0) + 1;
            let latency = l.min + i64::try_from(self.rng.next_u64() % span).unwrap_or(0);
            self.events
                .push(Reverse((now + latency, Event::Ready, i, self.attempts[i])));
        }
        self.pools[p].waiting = still;
    }

    /// Applies the events due at `now`; `running(i)` says whether job `i` runs. Returns the
    /// number of events, the jobs that gave up, and the running jobs whose capacity was
    /// revoked (the engine evicts them; `settle` then gives their blocks back).
    pub(crate) fn apply(
        &mut self,
        now: i64,
        s: &mut Scheduler,
        loaded: &Loaded,
        absent: &mut BTreeSet<String>,
        failed: &BTreeSet<String>,
        running: &dyn Fn(usize) -> bool,
    ) -> (u64, Vec<usize>, Vec<usize>) {
        let mut count = 0;
        let mut gave_up = Vec::new();
        let mut revoked = Vec::new();
        while let Some(Reverse((t, event, i, attempt))) = self.events.peek().copied()
            && t == now
        {
            self.events.pop();
            if attempt != self.attempts[i] {
                continue;
            }
            count += 1;
            match event {
                Event::Ready => {
                    let Some(request) = self.requests.get_mut(&i) else {
                        continue;
                    };
                    request.ready_at = Some(now);
                    self.stats.provisioned += 1;
                    self.latency_total += now - request.requested_at;
                    let pool = &self.pools[request.pool];
                    let mut names = Vec::with_capacity(request.hosts.len());
                    for node in &request.hosts {
                        let name = &loaded.nodes[*node].name;
                        if absent.remove(name) && !failed.contains(name) {
                            s.cluster_mut().set_schedulable(name, true);
                        }
                        names.push(name.as_str());
                    }
                    // Still holding its quota, the job starts on its hosts in the next
                    // cycle, before any waiting job.
                    s.capacity_ready(on_hosts(&self.originals[i], &pool.name, &names));
                    self.events.push(Reverse((
                        now + pool.spec.booking_seconds,
                        Event::Expire,
                        i,
                        attempt,
                    )));
                    if let Some(max) = pool.spec.max_run_seconds {
                        self.events
                            .push(Reverse((now + max, Event::Revoke, i, attempt)));
                    }
                }
                Event::Stockout => {
                    // Only a request still without blocks has failed.
                    let Some(request) = self.requests.get(&i) else {
                        continue;
                    };
                    if !request.hosts.is_empty() {
                        continue;
                    }
                    let p = request.pool;
                    self.pools[p].waiting.retain(|w| *w != i);
                    self.stats.stockouts += 1;
                    self.requests.remove(&i);
                    if self.retry_or_give_up(i, now, s) {
                        gave_up.push(i);
                    }
                }
                Event::Expire => {
                    if running(i) || self.requests.get(&i).is_none_or(|r| r.started) {
                        continue;
                    }
                    self.stats.expired += 1;
                    self.give_back(i, now, s, loaded, absent);
                    if self.retry_or_give_up(i, now, s) {
                        gave_up.push(i);
                    }
                }
                Event::Revoke => {
                    let on_capacity = self.requests.get(&i).is_some_and(|r| r.ready_at.is_some());
                    if on_capacity && running(i) {
                        self.stats.revoked += 1;
                        revoked.push(i);
                    }
                }
                Event::Retry => s.submit(self.originals[i].clone()),
            }
        }
        (count, gave_up, revoked)
    }

    /// After the instant's cycles: notes gangs that started on their capacity, and gives
    /// back the capacity of gangs that left it (finished, evicted, or failed).
    pub(crate) fn settle(
        &mut self,
        now: i64,
        s: &mut Scheduler,
        loaded: &Loaded,
        absent: &mut BTreeSet<String>,
        running: &dyn Fn(usize) -> bool,
    ) {
        let left: Vec<usize> = self
            .requests
            .iter_mut()
            .filter_map(|(i, r)| {
                r.ready_at?;
                if running(*i) {
                    r.started = true;
                    None
                } else {
                    r.started.then_some(*i)
                }
            })
            .collect();
        for i in left {
            self.give_back(i, now, s, loaded, absent);
        }
    }

    /// Gives job `i`'s hosts back (scale-down) and queues the job as submitted.
    fn give_back(
        &mut self,
        i: usize,
        now: i64,
        s: &mut Scheduler,
        loaded: &Loaded,
        absent: &mut BTreeSet<String>,
    ) {
        let Some(request) = self.requests.remove(&i) else {
            return;
        };
        let pool = &mut self.pools[request.pool];
        if let Some(ready) = request.ready_at {
            #[expect(clippy::cast_precision_loss, reason = "hours for a report")]
            let hours = (now - ready) as f64 / 3600.0;
            #[expect(clippy::cast_precision_loss, reason = "accelerators for a report")]
            let accelerators = (pool.accelerators_per_host * request.hosts.len() as u64) as f64;
            self.stats.gpu_hours_bought += hours * accelerators;
        }
        for node in &request.hosts {
            pool.holder.remove(node);
            let name = &loaded.nodes[*node].name;
            s.cluster_mut().set_schedulable(name, false);
            absent.insert(name.clone());
        }
        pool.waiting.retain(|w| *w != i);
        self.serve_waiting(request.pool, now);
        // Pending again (evicted or retrying): without the bought blocks' toleration.
        if matches!(
            s.state(&self.originals[i].id),
            Some(muster_admission::JobState::Pending)
        ) {
            s.submit(self.originals[i].clone());
        }
    }

    /// After a revocation (the gang was evicted): whether job `i` leaves the scheduler —
    /// `Some(why)` when its ClusterQueue says `onCapacityRevoked: Fail`, or when it has used
    /// up its requests (`retry.limit` + 1 of them), so that a gang longer than the
    /// capacity's maximum run does not buy capacity forever.
    pub(crate) fn spent(&mut self, i: usize, s: &mut Scheduler) -> Option<&'static str> {
        let id = self.originals[i].id.clone();
        let policy = self.policy_of(&id, s);
        if policy.is_some_and(|p| p.on_capacity_revoked == RevokedPolicy::Fail) {
            self.stats.failed_on_revoke += 1;
            s.finish(&id);
            return Some("failed: capacity revoked (onCapacityRevoked: Fail)");
        }
        let retry = policy.and_then(|p| p.retry.as_ref());
        if out_of_requests(retry, self.attempts[i]) {
            self.stats.gave_up += 1;
            s.finish(&id);
            Some("gave up: capacity revoked after every provisioning retry")
        } else {
            None
        }
    }

    /// After a failed request: retry with backoff, or give up past the limit (the job
    /// leaves the scheduler). Returns whether it gave up.
    fn retry_or_give_up(&mut self, i: usize, now: i64, s: &mut Scheduler) -> bool {
        let id = self.originals[i].id.clone();
        let retry = self.policy_of(&id, s).and_then(|p| p.retry.clone());
        let attempts = self.attempts[i];
        if out_of_requests(retry.as_ref(), attempts) {
            self.stats.gave_up += 1;
            s.finish(&id);
            return true;
        }
        s.requeue(&id);
        let mut held = self.originals[i].clone();
        held.suspended = true;
        s.submit(held);
        let at = now + muster_provisioning::state::backoff(retry.as_ref(), attempts);
        self.events.push(Reverse((at, Event::Retry, i, attempts)));
        false
    }

    /// The provisioning policy of the ClusterQueue job `id` queues in.
    fn policy_of(&self, id: &str, s: &Scheduler) -> Option<&ProvisioningPolicy> {
        let queue = s.job(id).and_then(|j| s.cluster_queue_of_job(j))?;
        self.policies.get(&queue)
    }

    /// The run's statistics.
    pub(crate) fn finish(mut self) -> ProvisioningStats {
        if self.stats.provisioned > 0 {
            #[expect(clippy::cast_precision_loss, reason = "a mean for a report")]
            let mean = self.latency_total as f64 / self.stats.provisioned as f64;
            self.stats.mean_latency_seconds = mean;
        }
        self.stats
    }
}

/// Every provisioning queue can buy each of its flavors from some pool.
fn check_queues(
    loaded: &Loaded,
    queues: &[(&str, &ClusterQueueSpec, &ProvisioningPolicy)],
    pools: &[Pool],
) -> Result<(), String> {
    for (name, queue, _) in queues {
        for group in &queue.resource_groups {
            for flavor in &group.flavors {
                let Some((_, spec)) = loaded.flavors.iter().find(|(n, _)| *n == flavor.name) else {
                    continue;
                };
                let served = pools.iter().any(|p| {
                    spec.node_labels
                        .iter()
                        .all(|(k, v)| p.labels.get(k) == Some(v))
                });
                if !served {
                    return Err(format!(
                        "ClusterQueue {name} provisions, but no pool with an autoscaler serves its flavor {}; add a pool with `autoscaler:` and the flavor's labels",
                        flavor.name
                    ));
                }
            }
        }
    }
    Ok(())
}

/// `job`, allowed onto exactly `hosts` of autoscaler pool `pool` (and only there).
fn on_hosts(job: &Job, pool: &str, hosts: &[&str]) -> Job {
    let mut job = job.clone();
    for set in &mut job.pod_sets {
        set.node_selector
            .insert(AUTOSCALER_POOL_LABEL.to_owned(), pool.to_owned());
        for host in hosts {
            set.tolerations.push(Toleration {
                key: Some(CAPACITY_HOST_TAINT.to_owned()),
                operator: Some("Equal".to_owned()),
                value: Some((*host).to_owned()),
                effect: Some("NoSchedule".to_owned()),
                toleration_seconds: None,
            });
        }
    }
    job
}
