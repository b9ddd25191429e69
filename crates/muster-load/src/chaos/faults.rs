//! The chaos run's fault schedule: replica kills, node deaths, network partitions of nodes and
//! control-plane restarts, each drawn from the seed, and what was done, for the summary.

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use kube::Client;
use muster_sim::trace::Rng;

use super::autoscaler::Autoscaler;
use super::replicas::Replicas;
use super::{ChaosOptions, Harness, Kills, Restarts};
use muster_testkit::checker::{Checker, InFlight};
use muster_testkit::nodes::{heal_node, kill_node, partition_node, repair_node};

/// How long a dead node stays dead.
const NODE_DOWN: Duration = Duration::from_secs(20);

/// What the fault loop chose and did, for the summary.
pub(super) struct Chaos {
    rng: Rng,
    /// Partitions draw from a sequence of their own, so that adding them left a seed's kills
    /// and node deaths as they were.
    partition_rng: Rng,
    pub(super) kills: Kills,
    pub(super) restarts: Restarts,
    pub(super) node_deaths: u32,
    pub(super) partitions: u32,
    /// How long the partitions drawn last, in all, seconds.
    pub(super) partition_seconds: f64,
    next_kill: Instant,
    next_node_death: Instant,
    next_partition: Instant,
    /// Replicas to start again, and when.
    revive: Vec<(Instant, usize)>,
    /// Nodes to repair, and when.
    repair: Vec<(Instant, String)>,
    /// Partitioned nodes to heal, and when.
    heal: Vec<(Instant, String)>,
    api_server_at: Option<Instant>,
    etcd_at: Option<Instant>,
}

/// `seconds` as a duration, clamped to [0, 10⁶] s.
pub(super) fn secs(seconds: f64) -> Duration {
    Duration::from_secs_f64(seconds.clamp(0.0, 1e6))
}

impl Chaos {
    pub(super) fn new(options: &ChaosOptions, start: Instant, faults_on: bool) -> Chaos {
        let mut rng = Rng::new(options.seed ^ 0xC4A0_5C4A_05C4_A05C);
        let next_kill = start + secs(rng.exponential(options.kill_every.as_secs_f64()));
        let next_node_death = start + secs(rng.exponential(options.node_death_every.as_secs_f64()));
        let mut partition_rng = Rng::new(options.seed ^ 0x9A27_1710_9A27_1710);
        let next_partition =
            start + secs(partition_rng.exponential(options.partition_every.as_secs_f64()));
        let restarts = faults_on && options.restart_control_plane;
        Chaos {
            rng,
            partition_rng,
            kills: Kills::default(),
            restarts: Restarts::default(),
            node_deaths: 0,
            partitions: 0,
            partition_seconds: 0.0,
            next_kill,
            next_node_death,
            next_partition,
            revive: Vec::new(),
            repair: Vec::new(),
            heal: Vec::new(),
            api_server_at: restarts.then(|| start + options.span.mul_f64(0.35)),
            etcd_at: restarts.then(|| start + options.span.mul_f64(0.65)),
        }
    }

    /// One turn of the chaos loop: whatever fell due.
    pub(super) async fn step(
        &mut self,
        options: &ChaosOptions,
        h: &mut Harness,
        nodes: &[String],
    ) -> anyhow::Result<()> {
        let chaos = self;
        let client = h.client.clone();
        let (cluster, replicas) = (&mut h.cluster, &mut h.replicas);
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut chaos.revive)
            .into_iter()
            .partition(|(at, _)| *at <= now);
        chaos.revive = later;
        for (_, i) in due {
            replicas.start(i)?;
        }
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut chaos.repair)
            .into_iter()
            .partition(|(at, _)| *at <= now);
        chaos.repair = later;
        for (_, node) in due {
            if repair_node(&client, &node).await.is_err() {
                chaos.repair.push((now + Duration::from_secs(1), node));
            }
        }
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut chaos.heal)
            .into_iter()
            .partition(|(at, _)| *at <= now);
        chaos.heal = later;
        for (_, node) in due {
            if heal_node(&client, &node).await.is_err() {
                chaos.heal.push((now + Duration::from_secs(1), node));
            }
        }
        if chaos.api_server_at.is_some_and(|at| at <= now) {
            chaos.api_server_at = None;
            cluster.restart_apiserver().await?;
            chaos.restarts.api_server += 1;
        }
        if chaos.etcd_at.is_some_and(|at| at <= now) {
            chaos.etcd_at = None;
            cluster.restart_etcd().await?;
            chaos.restarts.etcd += 1;
        }
        if chaos.next_node_death <= now {
            chaos.next_node_death = now
                + secs(
                    chaos
                        .rng
                        .exponential(options.node_death_every.as_secs_f64()),
                );
            let pick =
                usize::try_from(chaos.rng.next_u64() % nodes.len().max(1) as u64).unwrap_or(0);
            if let Some(node) = nodes.get(pick).filter(|n| !chaos.failing().contains(n))
                && kill_node(&client, node).await.is_ok()
            {
                chaos.node_deaths += 1;
                chaos.repair.push((now + NODE_DOWN, node.clone()));
            }
        }
        if chaos.next_partition <= now {
            chaos.partition(options, &client, nodes, now).await;
        }
        if chaos.next_kill <= now {
            kill(chaos, options, &client, replicas, &h.checker, &h.autoscaler).await;
        }
        Ok(())
    }
}

impl Chaos {
    /// The nodes dead or partitioned now: neither fails again until it is back.
    fn failing(&self) -> HashSet<&String> {
        self.repair
            .iter()
            .chain(&self.heal)
            .map(|(_, n)| n)
            .collect()
    }

    /// Partitions a node drawn from `nodes` (one neither dead nor partitioned) for a drawn
    /// time — half to one and a half times `options.partition_for` — and draws the next
    /// partition's time.
    async fn partition(
        &mut self,
        options: &ChaosOptions,
        client: &Client,
        nodes: &[String],
        now: Instant,
    ) {
        let rng = &mut self.partition_rng;
        self.next_partition = now + secs(rng.exponential(options.partition_every.as_secs_f64()));
        let pick = usize::try_from(rng.next_u64() % nodes.len().max(1) as u64).unwrap_or(0);
        let lasts = options.partition_for.mul_f64(0.5 + rng.unit());
        let node = nodes.get(pick).filter(|n| !self.failing().contains(n));
        if let Some(node) = node
            && partition_node(client, node).await.is_ok()
        {
            self.partitions += 1;
            self.partition_seconds += lasts.as_secs_f64();
            self.heal.push((now + lasts, node.clone()));
            tracing::info!(node = %node, seconds = lasts.as_secs(), "partitioned a node");
        }
    }

    /// Ends every fault still running: dead nodes repaired, partitions healed.
    pub(super) async fn end(&mut self, client: &Client) {
        for (_, node) in std::mem::take(&mut self.repair) {
            let _ = repair_node(client, &node).await;
        }
        for (_, node) in std::mem::take(&mut self.heal) {
            let _ = heal_node(client, &node).await;
        }
    }
}

/// Kills a replica: waits up to 5 s for a release, eviction or provisioning step to be in
/// flight, then kills the leader (three times in five) or a random running replica, and
/// schedules its restart 1 to 8 s later.
async fn kill(
    chaos: &mut Chaos,
    options: &ChaosOptions,
    client: &Client,
    replicas: &mut Replicas,
    checker: &Mutex<Checker>,
    autoscaler: &Autoscaler,
) {
    let wanted = Instant::now() + Duration::from_secs(5);
    let mut busy = (InFlight::default(), 0);
    while Instant::now() < wanted {
        busy = (
            checker
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .in_flight(),
            autoscaler.unanswered(),
        );
        if busy.0.releases + busy.0.evictions + busy.1 > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let now = Instant::now();
    chaos.next_kill = now + secs(chaos.rng.exponential(options.kill_every.as_secs_f64()));
    let leader = Replicas::leader(client).await;
    let running = replicas.running_ones();
    let aim_at_leader = chaos.rng.unit() <= 0.6;
    let pick = usize::try_from(chaos.rng.next_u64() % running.len().max(1) as u64).unwrap_or(0);
    let target = match leader {
        Some(l) if aim_at_leader && running.contains(&l) => l,
        _ => match running.get(pick) {
            Some(&r) => r,
            None => return,
        },
    };
    replicas.kill(target);
    let restart = Duration::from_millis(1_000 + chaos.rng.next_u64() % 7_000);
    chaos.revive.push((now + restart, target));
    let kills = &mut chaos.kills;
    kills.total += 1;
    if leader == Some(target) {
        kills.leader += 1;
    } else {
        kills.standby += 1;
    }
    let (flight, provisioning) = busy;
    if flight.releases > 0 {
        kills.during_release += 1;
    }
    if flight.evictions > 0 {
        kills.during_eviction += 1;
    }
    if provisioning > 0 {
        kills.during_provisioning += 1;
    }
    if flight.releases + flight.evictions + provisioning == 0 {
        kills.idle += 1;
    }
    tracing::info!(
        replica = target,
        leader = leader == Some(target),
        "killed a replica"
    );
}
