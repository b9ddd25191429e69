//! The live cluster as a forecast's [`Snapshot`]: what admission's scheduler is built from
//! when a pass builds it afresh (see [`crate::kept::scheduler_for`]) — flavors, nodes,
//! queues, namespaces, the usage of pods outside any held admission, every held job with its
//! holding, every waiting job — plus jobs backing off (they queue when their backoff ends)
//! and the jobs submitted lately, which a forward run keeps submitting at their rate.
//!
//! A job whose attempt is over but whose pods are still leaving (an eviction, a restart, a
//! pods-ready timeout: the controller holds its quota until they are gone) is not running:
//! it is taken as gone already (its pods take seconds to leave, a range is minutes wide) and,
//! when it will queue again, as waiting from when it will (the end of its backoff).

use std::collections::BTreeMap;
use std::sync::Arc;

use muster_api::{GpuJob, ObjectRef};
use muster_sim::forecast::{RecentJob, RunningJob, Snapshot, WaitingJob};

use crate::index::Index;
use crate::job::{self, AfterLeaving, InCycle};
use crate::seats::Seats;

use super::history;

/// The cluster as `index` and `seats` show it at `now` (seconds); jobs created within
/// `window` seconds before `now` are its recent submissions; `batches`: every job's batch
/// ([`history::batches`]).
pub(crate) fn of(
    index: &Index,
    seats: &Seats,
    now: i64,
    window: i64,
    batches: &BTreeMap<&ObjectRef, String>,
) -> Snapshot {
    let mut snapshot = Snapshot {
        now,
        flavors: index
            .flavors
            .iter()
            .map(|(name, f)| (name.clone(), f.spec.clone()))
            .collect(),
        nodes: index.nodes.values().cloned().collect(),
        outside_usage: crate::kept::outside_usage(index, seats),
        cluster_queues: index.admission_cluster_queues().collect(),
        cohorts: index
            .cohorts
            .iter()
            .map(|(name, c)| (name.clone(), c.spec.clone()))
            .collect(),
        local_queues: index
            .local_queues
            .iter()
            .map(|(key, q)| (key.to_string(), q.spec.cluster_queue.clone()))
            .collect(),
        namespaces: index.namespaces.clone(),
        ..Snapshot::default()
    };
    let mut shared = Keys::default();
    for (key, seat) in seats.iter() {
        let Some(gpujob) = index.jobs.get(key) else {
            continue;
        };
        let keys = shared.of(index, gpujob);
        let batch = batches.get(key).cloned();
        if let InCycle::Holds {
            leaving: Some(after),
            ..
        } = &seat.in_cycle
        {
            if let (AfterLeaving::Queues, Some(job)) = (after, &seat.job) {
                snapshot.waiting.push(WaitingJob {
                    job: Arc::clone(job),
                    keys,
                    queues_at: backoff_end(gpujob),
                    batch,
                });
            }
            continue;
        }
        match seat.wanted() {
            Some((job, Some((holding, provisioning)))) => snapshot.running.push(RunningJob {
                job: job.clone(),
                holding: holding.clone(),
                keys,
                batch,
                provisioning,
            }),
            Some((job, None)) => snapshot.waiting.push(WaitingJob {
                job: job.clone(),
                keys,
                queues_at: None,
                batch,
            }),
            None => {
                if let InCycle::BackingOff { .. } = seat.in_cycle {
                    snapshot.waiting.push(WaitingJob {
                        job: seat
                            .job
                            .clone()
                            .unwrap_or_else(|| index.admission_job(key.as_str(), gpujob)),
                        keys,
                        queues_at: backoff_end(gpujob),
                        batch,
                    });
                }
            }
        }
    }
    let since = now.saturating_sub(window);
    for (key, gpujob) in &index.jobs {
        let created = gpujob
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_second());
        if !created.is_some_and(|c| c >= since && c <= now) {
            continue;
        }
        let job = seats
            .get(key.as_str())
            .and_then(|s| s.job.clone())
            .unwrap_or_else(|| index.admission_job(key.as_str(), gpujob));
        snapshot.recent.push(RecentJob {
            job,
            keys: shared.of(index, gpujob),
        });
    }
    snapshot
}

/// Runtime keys ([`history::keys`]), each list kept once however many jobs share it: a
/// family's jobs do, and a flood's snapshot holds each of its jobs twice (waiting, and among
/// the recent submissions). Three strings a job took 5 MB of a 15,000-job snapshot's 6.
#[derive(Default)]
struct Keys(BTreeMap<Vec<String>, Arc<[String]>>);

impl Keys {
    /// `gpujob`'s keys, shared with every job's that has the same.
    fn of(&mut self, index: &Index, gpujob: &GpuJob) -> Arc<[String]> {
        let keys = history::keys(index, gpujob);
        if let Some(kept) = self.0.get(&keys) {
            return Arc::clone(kept);
        }
        let kept: Arc<[String]> = keys.clone().into();
        self.0.insert(keys, Arc::clone(&kept));
        kept
    }
}

/// When the backoff `gpujob`'s status names ends ([`job::backoff_end`]).
fn backoff_end(gpujob: &GpuJob) -> Option<i64> {
    gpujob.status.as_ref().and_then(job::backoff_end)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use muster_api::GpuJob;

    use crate::index::Index;

    use crate::job::tests::{KEY, World};
    use crate::seats::Seats;

    /// An ended job the index keeps without its pod templates still counts among the recent
    /// submissions with what it asked for, read from the job as it arrived whole.
    #[test]
    fn an_ended_job_is_a_recent_submission_with_its_whole_requests() {
        let mut world = World::new().admitted().finished(true);
        world.index.apply(world.job.clone());
        let kept = world.index.job(KEY).cloned().unwrap_or_default();
        assert!(kept.spec.pod_sets[0].template.spec.is_none());
        let created = kept
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(0, |t| t.0.as_second());
        let snapshot = super::of(
            &world.index,
            &Seats::default(),
            created + 60,
            3_600,
            &BTreeMap::new(),
        );
        let [recent] = snapshot.recent.as_slice() else {
            unreachable!("one recent submission, not {}", snapshot.recent.len());
        };
        assert_eq!(recent.job.pod_sets[0].count, 2);
        assert_eq!(
            recent.job.total_requests().get("nvidia.com/gpu").milli(),
            16_000
        );
        assert!(recent.job.invalid.is_none());
    }

    /// Jobs of one family in one queue share one list of runtime keys; another family's is
    /// its own.
    #[test]
    fn jobs_of_one_family_share_their_runtime_keys() {
        let job = |name: &str| -> GpuJob {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "muster.dev/v1alpha1",
                "kind": "GpuJob",
                "metadata": {"name": name, "namespace": "team-a"},
                "spec": {"queueName": "research", "podSets": []},
            }))
            .unwrap_or_else(|e| unreachable!("{e}"))
        };
        let index = Index::default();
        let mut shared = super::Keys::default();
        let first = shared.of(&index, &job("sweep-1"));
        let second = shared.of(&index, &job("sweep-2"));
        let other = shared.of(&index, &job("eval-1"));
        assert!(Arc::ptr_eq(&first, &second));
        assert!(!Arc::ptr_eq(&first, &other));
        assert_eq!(
            &*first,
            super::history::keys(&index, &job("sweep-3")).as_slice()
        );
        assert_ne!(first, other);
    }
}
