//! What one start-time forecast holds at its peak beyond the state it is made from: the
//! input gathered under the state's lock, then the forward runs' working copies and the
//! forecast made (see `muster_controller::forecasting`). Counted by the allocator (bytes
//! asked for and not yet given back), on the allocator the `muster` binary ships with.
//! Printed, not timed: the controller's peak memory is a forecast's peak above its steady
//! state.
//!
//! Run: `cargo bench -p muster-controller --bench forecast_memory`

use k8s_openapi::jiff::Timestamp;
use peakmem_alloc::{PeakMemAlloc, PeakMemAllocTrait};

mod fleet;
#[path = "../tests/support/mod.rs"]
mod support;

use fleet::{Fleet, settled};

#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: PeakMemAlloc<tikv_jemallocator::Jemalloc> =
    PeakMemAlloc::new(tikv_jemallocator::Jemalloc);

/// `bytes` in MiB, to a tenth.
fn mib(bytes: usize) -> String {
    let tenths = bytes.saturating_mul(10) / 1_048_576;
    format!("{}.{} MiB", tenths / 10, tenths % 10)
}

/// Makes one forecast of `fleet` as the controller's forecaster does and prints its peaks.
fn forecast(name: &str, fleet: Fleet) {
    let now = Timestamp::from_second(1_767_225_700).unwrap_or_default();
    let mut state = settled(fleet, now);
    ALLOCATOR.reset_peak_memory();
    let input = state.gather_forecast_input(now.as_second());
    let gathered = ALLOCATOR.get_peak_memory();
    let started = std::time::Instant::now();
    let made =
        muster_controller::forecasting::make(input, muster_controller::forecasting::live_options());
    let took = started.elapsed();
    let peak = ALLOCATOR.get_peak_memory();
    let summary = match &made {
        Ok(latest) => {
            let etas = &latest.forecast().etas;
            let started = etas.iter().filter(|e| e.p50.is_some()).count();
            format!(
                "{} waiting, {started} started within the horizon in most runs",
                etas.len()
            )
        }
        Err(e) => format!("no forecast: {e}"),
    };
    println!(
        "{name}: {summary}; peak above the state: {} gathering, {} gathering and making ({:.1} s)",
        mib(gathered),
        mib(peak),
        took.as_secs_f64()
    );
    if let Ok(latest) = made {
        state.keep_forecast(latest);
    }
}

fn main() {
    forecast(
        "a flood on a small cluster (64 nodes, 15,000 jobs of 60 s)",
        Fleet {
            nodes: 64,
            pods: 0,
            jobs: 15_000,
            runtime: Some(60),
        },
    );
    forecast(
        "the index bench's fleet (10,000 nodes, 100,000 pods, 15,000 jobs, runtimes unknown)",
        Fleet::with_jobs(15_000),
    );
}
