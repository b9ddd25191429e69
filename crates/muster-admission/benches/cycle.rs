//! One admission cycle over 100,000 pending jobs in 30 ClusterQueues (three cohorts of ten) on
//! a 10,000-node fleet: how long the cycle takes and how many decisions per second it makes.
//! And the same jobs in 100 ClusterQueues, in one flat cohort and in a three-level cohort tree:
//! what the tree costs a cycle. And what listing the 100,000 jobs in their queues' order
//! costs before any cycle.
//!
//! Run: `cargo bench -p muster-admission --bench cycle`

mod support;

use muster_admission::Decision;
use support::{Sharing, job, scheduler, scheduler_100_queues};

fn main() {
    divan::main();
}

const JOBS: usize = 100_000;
const HOSTS: u32 = 10_000;

/// The first cycle: every job pending, the fleet empty. Counts decisions per second.
#[divan::bench(sample_count = 5, sample_size = 1)]
fn first_cycle_100k_jobs_30_queues_10k_nodes(bencher: divan::Bencher) {
    bencher
        .counter(divan::counter::ItemsCount::new(JOBS))
        .with_inputs(|| scheduler(JOBS, HOSTS))
        .bench_local_refs(first_cycle);
}

/// Runs the first cycle: every job gets a decision, some are admitted. Returns how many.
fn first_cycle(s: &mut muster_admission::Scheduler) -> usize {
    let decisions = s.cycle(0);
    let admitted = decisions
        .iter()
        .filter(|d| matches!(d, Decision::Admit(_)))
        .count();
    assert!(admitted > 0 && decisions.len() == JOBS);
    admitted
}

/// A later cycle: the fleet as the first cycle left it, nothing changed (every job is
/// re-examined and still waits, or was admitted before).
#[divan::bench(sample_count = 5, sample_size = 1)]
fn steady_cycle_100k_jobs_30_queues_10k_nodes(bencher: divan::Bencher) {
    bencher
        .with_inputs(|| {
            let mut s = scheduler(JOBS, HOSTS);
            s.cycle(0);
            s
        })
        .bench_local_refs(|s| s.cycle(1).len());
}

/// The first cycle with the jobs in 100 ClusterQueues of one flat cohort, and of a tree
/// (an organisation of 5 departments of 4 teams of 5 queues).
#[divan::bench(args = ["flat", "tree"], sample_count = 5, sample_size = 1)]
fn first_cycle_100k_jobs_100_queues_10k_nodes(bencher: divan::Bencher, sharing: &str) {
    let sharing = if sharing == "tree" {
        Sharing::Tree
    } else {
        Sharing::Flat
    };
    bencher
        .counter(divan::counter::ItemsCount::new(JOBS))
        .with_inputs(|| scheduler_100_queues(JOBS, HOSTS, sharing))
        .bench_local_refs(first_cycle);
}

/// Submitting the 100,000 jobs of [`first_cycle_100k_jobs_30_queues_10k_nodes`] to a scheduler
/// with none: each is listed in its queue's order, among the jobs of its shape.
#[divan::bench(sample_count = 5, sample_size = 1)]
fn submit_100k_jobs_30_queues_10k_nodes(bencher: divan::Bencher) {
    bencher
        .counter(divan::counter::ItemsCount::new(JOBS))
        .with_inputs(|| (scheduler(0, HOSTS), (0..JOBS).map(job).collect::<Vec<_>>()))
        .bench_local_values(|(mut s, jobs)| {
            for j in jobs {
                s.submit(j);
            }
            s
        });
}
