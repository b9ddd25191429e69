//! How a cycle's cost grows: 1,000 / 10,000 / 100,000 jobs × 1,000 / 10,000 hosts, each
//! once the scheduler has settled (cycles have admitted what fits, and the last changed
//! nothing), for a cycle where nothing changed, one after one admitted job finished, and one
//! after one job arrived. A cycle here is [`Scheduler::step`]: the decisions that change
//! something; reading every waiting job's reason ([`Scheduler::waiting`]) is measured apart.
//!
//! Run: `cargo bench -p muster-admission --bench scale`

mod support;

use muster_admission::{Decision, JobState, Scheduler};
use support::{job, scheduler};

fn main() {
    divan::main();
}

/// `jobs × hosts`, as the benches' arguments spell them.
const SIZES: &[&str] = &[
    "1k jobs × 1k hosts",
    "10k jobs × 1k hosts",
    "100k jobs × 1k hosts",
    "1k jobs × 10k hosts",
    "10k jobs × 10k hosts",
    "100k jobs × 10k hosts",
];

fn size(label: &str) -> (usize, u32) {
    let count = |s: &str| match s {
        "1k" => 1_000,
        "10k" => 10_000,
        _ => 100_000,
    };
    let mut words = label.split_whitespace();
    let jobs = count(words.next().unwrap_or_default());
    let hosts = count(words.nth(2).unwrap_or_default());
    (jobs, u32::try_from(hosts).unwrap_or(u32::MAX))
}

/// The scheduler once its cycles at time 0 have admitted what fits and the last one changed
/// nothing.
fn settled(label: &str) -> Scheduler {
    let (jobs, hosts) = size(label);
    let mut s = scheduler(jobs, hosts);
    for _ in 0..8 {
        if s.step(0).is_empty() {
            break;
        }
    }
    s
}

#[divan::bench(args = SIZES, sample_count = 3, sample_size = 1)]
fn nothing_changed(bencher: divan::Bencher, label: &str) {
    bencher
        .with_inputs(|| settled(label))
        .bench_local_refs(|s| s.step(1).len());
}

#[divan::bench(args = SIZES, sample_count = 3, sample_size = 1)]
fn every_waiting_reason(bencher: divan::Bencher, label: &str) {
    bencher
        .with_inputs(|| settled(label))
        .bench_local_refs(|s| s.waiting().len());
}

#[divan::bench(args = SIZES, sample_count = 3, sample_size = 1)]
fn one_completion(bencher: divan::Bencher, label: &str) {
    bencher
        .with_inputs(|| {
            let mut s = settled(label);
            let done = s
                .jobs()
                .find(|(_, state)| matches!(state, JobState::Admitted(_)))
                .map(|(id, _)| id.to_owned());
            if let Some(done) = done {
                s.finish(&done);
            }
            s
        })
        .bench_local_refs(|s| s.step(1).len());
}

#[divan::bench(args = SIZES, sample_count = 3, sample_size = 1)]
fn one_arrival(bencher: divan::Bencher, label: &str) {
    bencher
        .with_inputs(|| {
            let mut s = settled(label);
            s.submit(job(size(label).0));
            s
        })
        .bench_local_refs(|s| {
            s.step(1)
                .iter()
                .filter(|d| matches!(d, Decision::Admit(_)))
                .count()
        });
}
