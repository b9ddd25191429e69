//! Admission's scheduler, kept from one pass to the next.
//!
//! A scheduler built afresh every pass costs what waits: every waiting job submitted again
//! and a full cycle over all of them, even when one pod finished or nothing changed at all.
//! A pass instead brings the kept scheduler up to what the index shows, when the difference
//! is one a scheduler takes in as it happens: jobs that arrived, changed while waiting or
//! are gone, jobs that held and wait again (an eviction that landed, a release undone), and
//! usage of pods outside any admission that moved. The scheduler's own caches
//! (its queues kept in order, the memo, the quiet cycle after one that changed nothing) then
//! carry over, so a pass costs what changed.
//!
//! Anything else — a queue, flavor, node or namespace that changed; a held job whose holding
//! is not the one the scheduler gave it (an admission from an earlier term, a gang the
//! scheduler is evicting that still runs); a preemption in progress; a job whose definition
//! changed while it held capacity — and the pass builds the scheduler afresh, as every pass
//! once did. `muster_scheduler_rebuilds_total` counts those passes by cause. Either way the scheduler holds
//! the same jobs, quota and node usage, so it decides the same.
//!
//! An admitted job is held from the same second either way: from its admission, also while
//! its release is in flight (the ledger keeps the time its status will show). A held job
//! whose admission time is not the one the scheduler gave it (a release finished after a
//! restart keeps its status's time) has the scheduler built afresh.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use muster_admission::{Job, JobState, Scheduler};
use muster_api::{ClusterQueueSpec, CohortSpec, ObjectRef, Resources};

use crate::index::Index;
use crate::preemptors::Preemptors;
use crate::seats::Seats;

/// The scheduler a pass left, with what it was built from.
pub(crate) struct Kept {
    scheduler: Scheduler,
    inputs: Inputs,
    usage: OutsideUsage,
}

/// What a scheduler is built from besides jobs and node usage: when any of it changes, the
/// scheduler is built afresh.
#[derive(PartialEq)]
struct Inputs {
    topology: u64,
    buys: bool,
    cluster_queues: BTreeMap<String, ClusterQueueSpec>,
    cohorts: BTreeMap<String, CohortSpec>,
    local_queues: BTreeMap<ObjectRef, String>,
    namespaces: BTreeMap<String, BTreeMap<String, String>>,
}

impl Inputs {
    fn of(index: &Index) -> Inputs {
        Inputs {
            topology: index.topology_version(),
            buys: index.provisioning_api(),
            cluster_queues: index
                .cluster_queues
                .iter()
                .map(|(name, q)| (name.clone(), q.spec.clone()))
                .collect(),
            cohorts: index
                .cohorts
                .iter()
                .map(|(name, c)| (name.clone(), c.spec.clone()))
                .collect(),
            local_queues: index
                .local_queues
                .iter()
                .map(|(key, q)| (key.clone(), q.spec.cluster_queue.clone()))
                .collect(),
            namespaces: index.namespaces.clone(),
        }
    }

    /// Whether `index` shows these inputs still (compared in place: no copies).
    fn hold_in(&self, index: &Index) -> bool {
        self.topology == index.topology_version()
            && self.buys == index.provisioning_api()
            && self
                .cluster_queues
                .iter()
                .eq(index.cluster_queues.iter().map(|(n, q)| (n, &q.spec)))
            && self
                .cohorts
                .iter()
                .eq(index.cohorts.iter().map(|(n, c)| (n, &c.spec)))
            && self.local_queues.iter().eq(index
                .local_queues
                .iter()
                .map(|(k, q)| (k, &q.spec.cluster_queue)))
            && self.namespaces == index.namespaces
    }
}

/// Per node, the usage of pods no held admission books: pods outside any gang (summed by
/// the index) and gang pods of attempts that hold nothing (a finished or earlier attempt).
#[derive(Default)]
pub(crate) struct OutsideUsage {
    /// The index's sums of pods outside any gang, as the scheduler was given them.
    base: BTreeMap<String, Resources>,
    /// Gang pods that no admission books, summed per node.
    members: BTreeMap<String, Resources>,
}

impl OutsideUsage {
    /// What `index` shows, with `held` naming each held job's current attempt (its pods are
    /// booked through its admission).
    fn members_of(index: &Index, held: &BTreeMap<ObjectRef, i32>) -> BTreeMap<String, Resources> {
        debug_assert!(
            index.pods_by_job.iter().all(|(job, pods)| pods
                .iter()
                .filter(|k| index
                    .pods
                    .get(*k)
                    .is_some_and(|p| p.node.is_some() && p.usage.is_some()))
                .eq(index.holding_pods_of(job)))
                && index
                    .pods_holding
                    .keys()
                    .all(|job| index.pods_by_job.contains_key(job)),
            "the index's pods holding something differ from its pods bound and not finished"
        );
        let mut members: BTreeMap<String, Resources> = BTreeMap::new();
        for (job, pods) in &index.pods_holding {
            let attempt = held.get(job);
            for pod in pods.iter().filter_map(|k| index.pods.get(k)) {
                let booked = pod
                    .member
                    .as_ref()
                    .is_some_and(|m| Some(&m.attempt) == attempt);
                if let (Some(node), Some(usage), false) = (&pod.node, &pod.usage, booked) {
                    members.entry(node.clone()).or_default().add_all(usage);
                }
            }
        }
        members
    }

    /// The usage on every node that has any.
    fn total(&self) -> BTreeMap<String, Resources> {
        let mut total = self.base.clone();
        for (node, m) in &self.members {
            total.entry(node.clone()).or_default().add_all(m);
        }
        total
    }

    /// The usage on `node`.
    fn on(&self, node: &str) -> Resources {
        let mut total = self.base.get(node).cloned().unwrap_or_default();
        if let Some(m) = self.members.get(node) {
            total.add_all(m);
        }
        total
    }
}

/// Per node, the usage of pods no held admission books, as a scheduler built afresh from
/// `index` and `seats` is given it: pods outside any gang, and gang pods of attempts that
/// hold nothing.
pub(crate) fn outside_usage(index: &Index, seats: &Seats) -> BTreeMap<String, Resources> {
    OutsideUsage {
        base: index.base_usage.clone(),
        members: OutsideUsage::members_of(index, seats.held()),
    }
    .total()
}

/// What a pass's scheduler was built from, handed back to [`keep`] after the cycle.
pub(crate) struct Basis {
    source: Source,
    usage: OutsideUsage,
}

/// Where a pass's scheduler came from.
enum Source {
    /// The kept one, brought up to date: its inputs, unchanged.
    Kept(Inputs),
    /// Built afresh from the index, and why (see [`Basis::rebuilt`]).
    Rebuilt(&'static str),
}

/// The scheduler for a pass: the kept one brought up to `index` and `seats`, or one built
/// afresh by `build` (given the usage to book per node) when the kept one cannot be.
/// `changes` are the jobs whose seats changed since the last pass.
pub(crate) fn scheduler_for(
    slot: &mut Slot,
    index: &mut Index,
    preemptors: &Preemptors,
    seats: &Seats,
    changes: &[ObjectRef],
    build: impl FnOnce(&mut Index, &BTreeMap<String, Resources>) -> Scheduler,
) -> (Scheduler, Basis) {
    let members = OutsideUsage::members_of(index, seats.held());
    let cause = match slot.take() {
        None => "first",
        Some(kept) if !kept.inputs.hold_in(index) => "inputs",
        Some(mut kept) => match kept.catch_up(seats, changes, preemptors) {
            Err(cause) => cause,
            Ok(()) => {
                kept.book(index, members);
                let Kept {
                    scheduler,
                    inputs,
                    usage,
                } = kept;
                let basis = Basis {
                    source: Source::Kept(inputs),
                    usage,
                };
                return (scheduler, basis);
            }
        },
    };
    let usage = OutsideUsage {
        base: index.base_usage.clone(),
        members,
    };
    let mut scheduler = build(index, &usage.total());
    for (_, seat) in seats.iter() {
        if let Some((job, Some((holding, provisioning)))) = seat.wanted() {
            scheduler.restore(Arc::clone(job), holding.clone(), provisioning);
        }
    }
    for (_, seat) in seats.iter() {
        if let Some((job, None)) = seat.wanted() {
            scheduler.submit(Arc::clone(job));
        }
    }
    preemptors.resume(&mut scheduler, index);
    let basis = Basis {
        source: Source::Rebuilt(cause),
        usage,
    };
    (scheduler, basis)
}

impl Basis {
    /// Why the scheduler was built afresh, `None` when the kept one was brought up to date:
    /// `first` (no scheduler kept), `inputs` (a queue, cohort, flavor, node or namespace changed),
    /// `preemption` (one in progress the kept scheduler does not hold), or a job's seat the
    /// kept scheduler cannot take in — `held` (the seat holds what the scheduler does not),
    /// `holding` (both hold, but not the same), `changed` (its definition changed while
    /// held), `evicting` (the scheduler evicts it and the seat still holds).
    pub(crate) fn rebuilt(&self) -> Option<&'static str> {
        match self.source {
            Source::Kept(_) => None,
            Source::Rebuilt(cause) => Some(cause),
        }
    }
}

/// Keeps `scheduler` for the next pass, with what it was built from.
pub(crate) fn keep(slot: &mut Slot, index: &Index, scheduler: Scheduler, basis: Basis) {
    let inputs = match basis.source {
        Source::Kept(inputs) => inputs,
        Source::Rebuilt(_) => Inputs::of(index),
    };
    *slot = Slot(Some(Kept {
        scheduler,
        inputs,
        usage: basis.usage,
    }));
}

impl Kept {
    /// Brings the kept scheduler's jobs up to the seats of `changes`; the cause (see
    /// [`Basis::rebuilt`]; the kept scheduler is then dropped) when a difference is not one
    /// it can take in. Jobs whose
    /// seats did not change are as the scheduler holds them: the last pass left them so, and
    /// anything the cycle changed about a job has it settled again.
    fn catch_up(
        &mut self,
        seats: &Seats,
        changes: &[ObjectRef],
        preemptors: &Preemptors,
    ) -> Result<(), &'static str> {
        if !preemptors.held_by(&self.scheduler) {
            return Err("preemption");
        }
        let s = &self.scheduler;
        let mut gone: Vec<&str> = Vec::new();
        let mut arrived: Vec<&Arc<Job>> = Vec::new();
        for id in changes {
            let wanted = seats.get(id).and_then(crate::seats::Seat::wanted);
            let (state, known) = (s.state(id), s.job(id));
            match (wanted, state) {
                (None, None) => {}
                (None, Some(_)) => gone.push(id),
                (Some((job, None)), None) => arrived.push(job),
                (Some((job, None)), Some(JobState::Pending)) => {
                    if known != Some(&**job) {
                        arrived.push(job);
                    }
                }
                (Some((job, Some((h, false)))), Some(JobState::Admitted(k)))
                    if known == Some(&**job)
                        && k.cluster_queue == h.cluster_queue
                        && k.pod_sets == h.pod_sets
                        && k.since == h.since => {}
                (Some((job, Some((h, true)))), Some(JobState::Provisioning(k)))
                    if known == Some(&**job)
                        && k.cluster_queue == h.cluster_queue
                        && k.pod_sets == h.pod_sets => {}
                // It held and waits again (its eviction landed, its release was undone or
                // never carried out), as a scheduler built afresh has it.
                (Some((job, None)), Some(_)) => {
                    gone.push(id);
                    arrived.push(job);
                }
                (_, Some(JobState::Evicting(_))) => return Err("evicting"),
                (Some((_, Some(_))), None | Some(JobState::Pending)) => return Err("held"),
                (Some((job, Some(_))), Some(_)) if known != Some(&**job) => return Err("changed"),
                (Some((_, Some(_))), Some(_)) => return Err("holding"),
            }
        }
        for id in gone {
            self.scheduler.finish(id);
        }
        for job in arrived {
            self.scheduler.submit(Arc::clone(job));
        }
        Ok(())
    }

    /// Books the usage outside admissions that moved since the last pass: the index's sums
    /// per node (compared in place) and gang pods no admission books (`members`).
    fn book(&mut self, index: &Index, members: BTreeMap<String, Resources>) {
        let mut changed: BTreeSet<String> = index
            .base_usage
            .iter()
            .filter(|(node, usage)| self.usage.base.get(*node) != Some(usage))
            .map(|(node, _)| node.clone())
            .collect();
        changed.extend(
            self.usage
                .base
                .keys()
                .filter(|node| !index.base_usage.contains_key(*node))
                .cloned(),
        );
        if members != self.usage.members {
            changed.extend(self.usage.members.keys().cloned());
            changed.extend(members.keys().cloned());
        }
        if changed.is_empty() {
            return;
        }
        let before: Vec<(String, Resources)> = changed
            .iter()
            .map(|n| (n.clone(), self.usage.on(n)))
            .collect();
        for node in &changed {
            match index.base_usage.get(node) {
                Some(u) => {
                    self.usage.base.insert(node.clone(), u.clone());
                }
                None => {
                    self.usage.base.remove(node);
                }
            }
        }
        self.usage.members = members;
        for (node, old) in before {
            let now = self.usage.on(&node);
            if now != old {
                let cluster = self.scheduler.cluster_mut();
                cluster.remove_usage(&node, &old);
                cluster.add_usage(&node, &now);
            }
        }
    }
}

/// The state's slot for the kept scheduler. A copy of the state starts without one (its
/// first pass builds afresh, which decides the same).
#[derive(Default)]
pub(crate) struct Slot(Option<Kept>);

impl Slot {
    /// The scheduler the last pass left, if any pass has run since the slot was emptied.
    pub(crate) fn scheduler(&self) -> Option<&Scheduler> {
        self.0.as_ref().map(|kept| &kept.scheduler)
    }

    fn take(&mut self) -> Option<Kept> {
        self.0.take()
    }
}

impl Clone for Slot {
    fn clone(&self) -> Slot {
        Slot(None)
    }
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "kept" } else { "none" })
    }
}
