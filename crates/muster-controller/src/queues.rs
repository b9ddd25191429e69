//! Step 4 of a pass: ClusterQueue and LocalQueue statuses from the cycle's scheduler, written
//! where they changed and no write of them is in flight.

use std::collections::BTreeMap;

use muster_admission::{JobState, Scheduler};

use crate::action::Action;
use crate::state::State;
use crate::status;

/// ClusterQueue and LocalQueue statuses, where changed and not already being written.
pub(crate) fn queue_statuses(state: &mut State, scheduler: &Scheduler, actions: &mut Vec<Action>) {
    let State { index, ledger, .. } = state;
    let start = actions.len();
    for (name, queue) in &index.cluster_queues {
        if ledger.queues.contains(name) {
            continue;
        }
        let current = queue.status.clone().unwrap_or_default();
        if let Some(status) = status::cluster_queue(&current, name, scheduler) {
            actions.push(Action::ClusterQueueStatus {
                name: name.clone(),
                status,
            });
        }
    }
    let mut counts: BTreeMap<String, status::LocalQueueCounts> = BTreeMap::new();
    for (id, job_state) in scheduler.jobs() {
        let Some(job) = scheduler.job(id) else {
            continue;
        };
        let entry = counts.entry(job.local_queue.clone()).or_default();
        match job_state {
            JobState::Pending => entry.pending += 1,
            JobState::Admitted(h) | JobState::Provisioning(h) | JobState::Evicting(h) => {
                entry.admitted += 1;
                for (set, placement) in job.pod_sets.iter().zip(&h.pod_sets) {
                    entry
                        .usage
                        .entry(placement.flavor.clone())
                        .or_default()
                        .add_all(&muster_admission::quota_usage(set));
                }
            }
        }
    }
    for (key, queue) in &index.local_queues {
        let lq_key = format!("lq:{key}");
        if ledger.queues.contains(&lq_key) {
            continue;
        }
        let current = queue.status.clone().unwrap_or_default();
        let empty = status::LocalQueueCounts::default();
        let counted = counts.get(key).unwrap_or(&empty);
        if let Some(status) = status::local_queue(&current, counted) {
            actions.push(Action::LocalQueueStatus {
                key: key.clone(),
                status,
            });
        }
    }
    for action in &actions[start..] {
        match action {
            Action::ClusterQueueStatus { name, .. } => {
                ledger.queues.insert(name.clone());
            }
            Action::LocalQueueStatus { key, .. } => {
                ledger.queues.insert(format!("lq:{key}"));
            }
            _ => {}
        }
    }
}
