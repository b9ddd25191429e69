//! Jobs whose capacity the autoscaler has provisioned: they start on it first, within the
//! quota they have held since they asked for it.

use std::sync::Arc;

use muster_api::cluster_queue::StopPolicy;

use super::{Holding, JobState, Scheduler};
use crate::decision::{Admitted, Decision, PendingReason, PodSetPlacement};
use crate::job::Job;

use muster_topology::{NoFit, NoFitKind, PodSetRequest};

impl Scheduler {
    /// Places every provisioning job whose capacity is ready (`Job::provisioned`) on the
    /// flavors whose quota it holds, highest in queue order first. These go before any waiting
    /// job: the capacity was bought for them, and their quota never returns to the queue in
    /// between, so no other job can take it. A job that does not fit yet (its nodes are still
    /// joining) keeps holding its quota and is told why.
    pub(super) fn start_provisioned(&mut self, now: i64, out: &mut Vec<Decision>) {
        let mut ready: Vec<(Arc<Job>, Holding)> = self
            .provisioning
            .iter()
            .filter_map(|id| self.jobs.get(id))
            .filter_map(|e| match &e.state {
                JobState::Provisioning(h) if e.job.provisioned && !e.job.suspended => {
                    Some((Arc::clone(&e.job), h.clone()))
                }
                _ => None,
            })
            .collect();
        ready.sort_by(|(a, _), (b, _)| a.order_key().cmp(&b.order_key()));
        for (job, holding) in ready {
            let stopped = self
                .queues
                .get(&holding.cluster_queue)
                .is_some_and(|q| q.spec.stop_policy != StopPolicy::None);
            if stopped {
                // Hold admits nothing, bought capacity included; the job keeps its quota.
                out.push(Decision::Pending {
                    job: job.id.clone(),
                    position: 0,
                    reason: PendingReason::QueueStopped {
                        cluster_queue: holding.cluster_queue.clone(),
                    },
                    eta: None,
                });
                continue;
            }
            match self.place_held(&job, &holding) {
                Ok(pod_sets) => {
                    let borrowing = pod_sets
                        .iter()
                        .any(|p| self.quota.is_borrowing(&holding.cluster_queue, &p.flavor));
                    self.set_state(
                        &job.id,
                        JobState::Admitted(Holding {
                            cluster_queue: holding.cluster_queue.clone(),
                            since: Some(now),
                            pod_sets: pod_sets.clone(),
                        }),
                    );
                    out.push(Decision::Admit(Admitted {
                        job: job.id.clone(),
                        cluster_queue: holding.cluster_queue,
                        pod_sets,
                        borrowing,
                    }));
                }
                Err(no_fit) => out.push(Decision::Pending {
                    job: job.id.clone(),
                    position: 0,
                    reason: PendingReason::AwaitingProvisionedNodes(no_fit),
                    eta: None,
                }),
            }
        }
    }

    /// Nodes for every pod set of `job` in the flavor `holding` names for it; the pods stay
    /// booked on success, nothing changes on failure.
    fn place_held(
        &mut self,
        job: &Job,
        holding: &Holding,
    ) -> Result<Vec<PodSetPlacement>, Box<NoFit>> {
        let start = self.cluster.mark();
        let mut placed = Vec::with_capacity(job.pod_sets.len());
        for (set, held) in job.pod_sets.iter().zip(&holding.pod_sets) {
            match self.place_in(set, None, &held.flavor) {
                Some(Ok(placement)) => placed.push(placement),
                Some(Err(no_fit)) => {
                    self.cluster.rollback(&start);
                    return Err(Box::new(no_fit));
                }
                None => {
                    self.cluster.rollback(&start);
                    return Err(Box::new(no_nodes(set, &held.flavor)));
                }
            }
        }
        Ok(placed)
    }
}

/// The flavor a pod set holds quota in has no nodes at all.
fn no_nodes(set: &PodSetRequest, flavor: &str) -> NoFit {
    NoFit {
        pod_set: set.name.clone(),
        kind: NoFitKind::NoEligibleNodes,
        message: format!("flavor {flavor} of pod set {} has no nodes", set.name),
        needed: set.count,
        best: None,
        total_capacity: 0,
        fragmented: false,
    }
}
