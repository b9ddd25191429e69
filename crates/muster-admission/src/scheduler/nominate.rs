//! Nominations: what a preemptor counted on when it evicted its victims stays its own until
//! it starts.
//!
//! A preemption is decided because the preemptor fits once its victims are gone — on their
//! nodes and on free ones beside them, with their quota and free quota beside it. Nothing
//! kept the free part for it: a job served later in the same cycle (or earlier in the next,
//! from another queue) could take it, the preemptor then evicted someone else, and the first
//! victim came back onto the nodes it had left. So a preemptor is nominated: from its
//! preemption until it starts, its nodes are blocked for everyone else in every cycle and
//! the quota it needs beyond its victims' is booked for it, and it is served before any
//! other job — it starts as soon as its victims are gone, or says it still waits for them.
//! A nomination lapses when the preemptor starts, leaves, or no longer fits even with every
//! job its policy lets it evict.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use muster_api::Resources;

use super::{Assignment, CycleState, JobState, Options, Scheduler, waiting};
use crate::decision::{Decision, PendingReason};
use crate::job::{Job, JobId, quota_usage};

/// What a preemptor counted on.
#[derive(Clone, Debug)]
pub(super) struct Nomination {
    /// Its ClusterQueue.
    cluster_queue: String,
    /// (flavor, nodes) of its placement.
    nodes: Vec<(String, Vec<String>)>,
    /// Quota per flavor it needs beyond what its victims hold (their departure frees theirs).
    quota: BTreeMap<String, Resources>,
}

/// Something a cycle holds for a nominated preemptor, taken back when the cycle ends.
#[derive(Clone, Debug)]
pub(super) enum Hold {
    /// Usage added to a node.
    Node(String, Resources),
    /// Quota booked: (ClusterQueue, flavor, usage).
    Quota(String, String, Resources),
}

impl Scheduler {
    /// Nominates `id` again, a preemptor that was waiting for its victims when the caller
    /// last ran a cycle (a scheduler rebuilt for every cycle, as the controller's, keeps no
    /// nominations of its own): the next cycle serves it first and holds what it needs. Does
    /// nothing unless the job is pending in a ClusterQueue.
    pub fn renominate(&mut self, id: &str) {
        let Some(entry) = self.jobs.get(id) else {
            return;
        };
        if entry.state != JobState::Pending {
            return;
        }
        if let Ok(cq) = self.cluster_queue_of(&entry.job) {
            self.generation += 1;
            self.nominations.insert(
                id.to_owned(),
                Nomination {
                    cluster_queue: cq,
                    nodes: Vec::new(),
                    quota: BTreeMap::new(),
                },
            );
        }
    }

    /// The preemptors nominated now (waiting for their victims), in id order.
    pub fn nominated(&self) -> impl Iterator<Item = &str> {
        self.nominations.keys().map(String::as_str)
    }

    /// `job` evicts (or waits for) `victims` to get `assignment` in `cq`: it is nominated
    /// for that, and what it counted on is held for it for the rest of the cycle.
    pub(super) fn nominate(
        &mut self,
        cq: &str,
        job: &Job,
        victims: &[JobId],
        assignment: &Assignment,
        state: &mut CycleState,
    ) {
        let mut freed: BTreeMap<String, Resources> = BTreeMap::new();
        for victim in victims {
            if let Some((victim, holding)) = self.holding_of(victim) {
                for (set, placement) in victim.pod_sets.iter().zip(&holding.pod_sets) {
                    freed
                        .entry(placement.flavor.clone())
                        .or_default()
                        .add_all(&quota_usage(set));
                }
            }
        }
        let quota = assignment
            .usage
            .iter()
            .map(|(flavor, usage)| {
                let mut beyond = usage.clone();
                if let Some(f) = freed.get(flavor) {
                    beyond.saturating_sub_all(f);
                }
                (flavor.clone(), beyond)
            })
            .collect();
        let nodes = assignment
            .pod_sets
            .iter()
            .map(|p| (p.flavor.clone(), p.nodes.clone()))
            .collect();
        let nomination = Nomination {
            cluster_queue: cq.to_owned(),
            nodes,
            quota,
        };
        self.hold_nominated(&nomination, state);
        self.nominations.insert(job.id.clone(), nomination);
    }

    /// Holds a nomination's nodes and quota for the rest of the cycle.
    fn hold_nominated(&mut self, nomination: &Nomination, state: &mut CycleState) {
        self.epoch += 1;
        for (flavor, nodes) in &nomination.nodes {
            for (node, usage) in self.cluster.block(flavor, nodes) {
                state.holds.push(Hold::Node(node, usage));
            }
        }
        for (flavor, usage) in &nomination.quota {
            self.quota.add(&nomination.cluster_queue, flavor, usage);
            state.holds.push(Hold::Quota(
                nomination.cluster_queue.clone(),
                flavor.clone(),
                usage.clone(),
            ));
        }
    }

    /// Takes back everything the cycle held for nominated preemptors.
    pub(super) fn release_holds(&mut self, state: &mut CycleState) {
        for hold in state.holds.drain(..).rev() {
            match hold {
                Hold::Node(node, usage) => self.cluster.remove_usage(&node, &usage),
                Hold::Quota(cq, flavor, usage) => self.quota.remove(&cq, &flavor, &usage),
            }
        }
    }

    /// Serves the nominated preemptors before anyone else, in queue order: each starts if it
    /// fits now, else evicts what it still needs (its victims, leaving, are counted first)
    /// and keeps its nomination, else loses it and queues like any job. Returns the jobs it
    /// served (the cycle does not serve them again) and their positions per queue.
    pub(super) fn serve_nominated(
        &mut self,
        now: i64,
        state: &mut CycleState,
        out: &mut Vec<Decision>,
    ) -> (BTreeSet<JobId>, BTreeMap<String, u32>) {
        let mut served = BTreeSet::new();
        let mut positions: BTreeMap<String, u32> = BTreeMap::new();
        let mut nominated: Vec<Arc<Job>> = Vec::new();
        let ids: Vec<JobId> = self.nominations.keys().cloned().collect();
        for id in ids {
            match self.jobs.get(&id) {
                Some(e) if e.state == JobState::Pending && !e.job.suspended => {
                    nominated.push(Arc::clone(&e.job));
                }
                _ => {
                    self.nominations.remove(&id);
                }
            }
        }
        nominated.sort_by(|a, b| a.order_key().cmp(&b.order_key()));
        for job in nominated {
            let cq = self
                .nominations
                .get(&job.id)
                .map(|n| n.cluster_queue.clone())
                .unwrap_or_default();
            let stopped = self
                .queues
                .get(&cq)
                .is_none_or(|q| q.spec.stop_policy != muster_api::cluster_queue::StopPolicy::None);
            if stopped || self.cluster_queue_of(&job).ok().as_deref() != Some(cq.as_str()) {
                self.nominations.remove(&job.id);
                continue;
            }
            let opts = Options {
                place: true,
                no_borrow: false,
            };
            if let Ok(assignment) = self.try_assign(&cq, &job, opts, &[], now) {
                self.nominations.remove(&job.id);
                self.admit(&cq, &job, assignment, now, out);
                served.insert(job.id.clone());
                *positions.entry(cq).or_insert(0) += 1;
                continue;
            }
            let Some((victims, leaving, assignment)) =
                self.preempt(&cq, &job, &[], now, &mut state.candidates)
            else {
                self.nominations.remove(&job.id);
                continue;
            };
            let position = positions.entry(cq.clone()).or_insert(0);
            *position += 1;
            let position = *position;
            self.evict_for(&job, &victims, &leaving, out);
            self.nominate(&cq, &job, &victims, &assignment, state);
            out.push(waiting(
                &job,
                position,
                PendingReason::Preempting { victims },
                None,
            ));
            served.insert(job.id.clone());
        }
        (served, positions)
    }

    /// Evicts the `victims` of `job` that are not already `leaving`.
    pub(super) fn evict_for(
        &mut self,
        job: &Job,
        victims: &[JobId],
        leaving: &BTreeSet<JobId>,
        out: &mut Vec<Decision>,
    ) {
        let fresh: Vec<JobId> = victims
            .iter()
            .filter(|v| !leaving.contains(*v))
            .cloned()
            .collect();
        for v in &fresh {
            if let Some(JobState::Admitted(h)) = self.state(v).cloned() {
                self.set_state(v, JobState::Evicting(h));
            }
        }
        if !fresh.is_empty() {
            out.push(Decision::Preempt {
                victims: fresh,
                for_job: job.id.clone(),
            });
        }
    }
}
