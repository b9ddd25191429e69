//! A synthetic workload drawn from a seed: Poisson arrivals, job sizes by weight, queues and
//! priorities uniformly, exponential runtimes (at least a minute).

use std::collections::BTreeMap;

use muster_api::Amount;

use super::SyntheticSpec;
use crate::trace::{self, Rng, TraceJob};

/// Generates a synthetic workload.
pub(super) fn synthetic(s: &SyntheticSpec, seed: Option<u64>, block: &str) -> Vec<TraceJob> {
    let mut rng = Rng::new(seed.or(s.seed).unwrap_or(1));
    let total: u64 = s
        .sizes
        .iter()
        .map(|w| u64::from(w.weight))
        .sum::<u64>()
        .max(1);
    let priorities = if s.priorities.is_empty() {
        vec![0]
    } else {
        s.priorities.clone()
    };
    let topology = s
        .gang_topology
        .clone()
        .unwrap_or_else(|| format!("required:{block}"));
    let mean_gap = 3600.0 / s.arrivals_per_hour.max(1e-9);
    let mut t = 0.0f64;
    let mut jobs = Vec::new();
    let burst = s.burst.unwrap_or(1).max(1);
    for i in 0..s.jobs {
        if i % burst == 0 {
            t += rng.exponential(mean_gap);
        }
        let mut pick = rng.next_u64() % total;
        let size = s.sizes.iter().find(|w| {
            let hit = pick < u64::from(w.weight);
            pick = pick.saturating_sub(u64::from(w.weight));
            hit
        });
        let gpus = size.map_or(1, |w| w.gpus);
        let share = size.and_then(|w| w.share_milli().ok().flatten());
        let (pods, requests) = match share {
            Some(milli) => (
                size.and_then(|w| w.pods).unwrap_or(1).max(1),
                BTreeMap::from([
                    ("nvidia.com/gpu".to_owned(), Amount::from_units(1)),
                    (
                        muster_api::resources::names::GPU_SHARE.to_owned(),
                        Amount::from_milli(milli),
                    ),
                ]),
            ),
            None => {
                let (pods, per_pod) = trace::pods_of(gpus, s.max_gpus_per_pod.unwrap_or(8));
                let requests =
                    BTreeMap::from([("nvidia.com/gpu".to_owned(), Amount::from_units(per_pod))]);
                (pods, requests)
            }
        };
        let queue = pick_one(&mut rng, &s.queues).cloned().unwrap_or_default();
        let drawn_priority = pick_one(&mut rng, &priorities).copied().unwrap_or(0);
        let priority = size.and_then(|w| w.priority).unwrap_or(drawn_priority);
        #[expect(
            clippy::cast_possible_truncation,
            reason = "virtual seconds stay far below 2^63"
        )]
        let drawn = rng.exponential(s.mean_duration_seconds).ceil().max(60.0) as i64;
        let duration = size
            .and_then(|w| w.duration_seconds)
            .unwrap_or(drawn)
            .max(1);
        #[expect(
            clippy::cast_possible_truncation,
            reason = "virtual seconds stay far below 2^63"
        )]
        let submit = t.floor() as i64;
        jobs.push(TraceJob {
            id: format!("job-{i:06}"),
            submit,
            duration,
            queue,
            priority,
            pod_sets: vec![("workers".to_owned(), pods, requests)],
            topology: if pods > 1 {
                topology.clone()
            } else {
                String::new()
            },
            expected_runtime: s.announce_runtime.then_some(duration),
            node_selector: BTreeMap::new(),
        });
    }
    jobs
}

/// A uniformly chosen element (`None` only when `items` is empty).
fn pick_one<'a, T>(rng: &mut Rng, items: &'a [T]) -> Option<&'a T> {
    let n = u64::try_from(items.len()).ok().filter(|n| *n > 0)?;
    items.get(usize::try_from(rng.next_u64() % n).ok()?)
}
