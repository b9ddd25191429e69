//! Start-time ranges for the live cluster: the state read into a forecast's snapshot
//! ([`snapshot`]), run forward through admission's own cycle many times with runtimes drawn
//! from what finished jobs ran ([`history`]), each range widened by how far past ranges
//! missed ([`scoring`]); and what-ifs, the same snapshot changed and run forward again
//! ([`whatif`]).
//!
//! A forecast costs seconds to minutes of CPU on a large fleet, so it is never made inside a
//! pass: the controller's forecaster ([`crate::state::State::gather_forecast_input`]) gathers
//! an [`Input`] under the state's lock (cheap: copies), makes the forecast with the lock
//! released ([`make`]), and keeps the result ([`crate::state::State::keep_forecast`]).
//! Passes then read each waiting job's range from the latest forecast
//! ([`Forecasting::range_of`]) into its status, and the visibility API serves it. Pure: the
//! caller passes the time.

pub(crate) mod history;
mod scoring;
pub(crate) mod snapshot;
pub mod whatif;

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use muster_api::gpujob::StartRange;
use muster_sim::forecast::{Calibration, Forecast, Options, RuntimeModel, Snapshot};

use crate::index::Index;
use crate::seats::Seats;

pub use self::history::FAMILY_LABEL;

/// How a live forecast is made (see [`muster_sim::forecast::Options`]): 32 forward runs on
/// one thread (the controller keeps the other cores), a week ahead, jobs arriving as they did
/// over the last six hours.
pub fn live_options() -> Options {
    Options {
        samples: 32,
        horizon: 7 * 24 * 3600,
        threads: 1,
        ..Options::default()
    }
}

/// What a forecast is made from, gathered from the state under its lock.
#[derive(Clone, Debug)]
pub struct Input {
    snapshot: Snapshot,
    model: RuntimeModel,
    history: usize,
    calibration: Calibration,
    late: Vec<f64>,
}

/// A forecast made, with everything a what-if needs to be compared with it.
#[derive(Clone, Debug)]
pub struct Latest {
    /// The cluster it ran forward from.
    pub(crate) snapshot: Snapshot,
    /// The runtimes it drew from.
    pub(crate) model: RuntimeModel,
    /// Finished runs the model learned from.
    pub(crate) history: usize,
    /// How it was made.
    pub(crate) options: Options,
    /// Past ranges' scores when it was made.
    pub(crate) calibration: Calibration,
    /// The late scores of jobs then still waiting past a range (see
    /// [`Calibration::late`]).
    pub(crate) late: Vec<f64>,
    /// The forward runs' own ranges, before any margin: what is scored. Taken when the
    /// forecast is kept ([`Forecasting::keep`]), once noted: 15,000 waiting jobs' ranges
    /// and names are 2 MB the kept forecast would hold for nothing.
    pub(crate) raw: Option<Forecast>,
    /// The ranges, margins applied: what is shown.
    pub(crate) forecast: Forecast,
    /// The places in `forecast.etas`, in the order of their jobs' names (`namespace/name`):
    /// a job's range is found by a search, not through a map holding every name again.
    pub(crate) by_job: Vec<u32>,
    /// How long it took, milliseconds (measured by the caller).
    pub(crate) took_millis: u64,
}

impl Latest {
    /// The ranges, margins applied: what is shown.
    pub fn forecast(&self) -> &Forecast {
        &self.forecast
    }

    /// The range of `job` (`namespace/name`), when this forecast has it.
    pub(crate) fn range_of(&self, job: &str) -> Option<StartRange> {
        let etas = &self.forecast.etas;
        let at = self
            .by_job
            .binary_search_by(|&i| etas[i as usize].job.as_str().cmp(job))
            .ok()?;
        let eta = &etas[self.by_job[at] as usize];
        Some(range(self.forecast.now, [eta.p10, eta.p50, eta.p90]))
    }
}

/// `[p10, p50, p90]` of a forecast made at `now`, as the API writes a range.
pub(crate) fn range(now: i64, [p10, p50, p90]: [Option<i64>; 3]) -> StartRange {
    let time = |s: i64| Timestamp::from_second(s).ok().map(Time);
    StartRange {
        earliest: p10.and_then(time),
        likely: p50.and_then(time),
        latest: p90.and_then(time),
        as_of: time(now).unwrap_or(Time(Timestamp::UNIX_EPOCH)),
    }
}

/// Makes the forecast of `input` with `options` (the heavy part: run without the state's
/// lock). `took_millis` is filled in by the caller, who has the clock.
pub fn make(input: Input, options: Options) -> Result<Latest, String> {
    let raw = muster_sim::forecast::forecast(&input.snapshot, &input.model, &options)?;
    let mut forecast = raw.clone();
    input.calibration.apply(&mut forecast, &input.late);
    let by_job = places_by_name(&forecast);
    Ok(Latest {
        snapshot: input.snapshot,
        model: input.model,
        history: input.history,
        options,
        calibration: input.calibration,
        late: input.late,
        raw: Some(raw),
        forecast,
        by_job,
        took_millis: 0,
    })
}

/// The places of `forecast`'s ranges, in the order of their jobs' names ([`Latest::by_job`]).
fn places_by_name(forecast: &Forecast) -> Vec<u32> {
    let mut places: Vec<u32> =
        (0..u32::try_from(forecast.etas.len()).unwrap_or(u32::MAX)).collect();
    places.sort_unstable_by(|&a, &b| {
        forecast.etas[a as usize]
            .job
            .cmp(&forecast.etas[b as usize].job)
    });
    places
}

/// The controller's forecasting memory: finished runs learned, ranges given and how they
/// fared, and the latest forecast.
#[derive(Clone, Debug, Default)]
pub struct Forecasting {
    history: history::RunHistory,
    scoring: scoring::Scoring,
    latest: Option<Arc<Latest>>,
}

impl Forecasting {
    /// Learns what finished since the last call, scores the ranges of jobs that started, and
    /// returns what a forecast of the cluster at `now`, as `index` and `seats` show it, is
    /// made from.
    pub(crate) fn gather(&mut self, index: &Index, seats: &Seats, now: i64) -> Input {
        let window = live_options().arrivals_window;
        let batches = history::batches(index);
        self.history.observe(index, &batches);
        self.scoring.settle(index);
        let (calibration, late) = self.scoring.calibration(now);
        Input {
            snapshot: snapshot::of(index, seats, now, window, &batches),
            model: self.history.model().clone(),
            history: self.history.runs(),
            calibration,
            late,
        }
    }

    /// Keeps `latest` as the forecast passes and the visibility API read, and notes its
    /// ranges for scoring (jobs named as in `index`).
    pub(crate) fn keep(&mut self, index: &Index, mut latest: Latest) {
        if let Some(raw) = latest.raw.take() {
            self.scoring.note(&raw, &latest.forecast, |job| {
                index.jobs.get(job).and_then(|j| j.metadata.uid.as_deref())
            });
        }
        self.latest = Some(Arc::new(latest));
    }

    /// The latest forecast.
    pub fn latest(&self) -> Option<Arc<Latest>> {
        self.latest.clone()
    }

    /// The range the latest forecast gives `job` (`namespace/name`).
    pub(crate) fn range_of(&self, job: &str) -> Option<StartRange> {
        self.latest.as_ref()?.range_of(job)
    }
}

#[cfg(test)]
mod tests {
    use muster_sim::forecast::{Basis, Calibration, Eta, Forecast, Options, RuntimeModel};

    use super::{Latest, places_by_name};

    /// A range is found by its job's name whatever order the forecast gives them in.
    #[test]
    fn each_job_s_range_is_found_by_its_name() {
        let eta = |job: &str, p50: i64| Eta {
            job: job.to_owned(),
            p10: Some(p50 - 10),
            p50: Some(p50),
            p90: Some(p50 + 10),
            started: 32,
            buys_capacity: 0,
            basis: Basis::Unknown,
        };
        let forecast = Forecast {
            now: 1_000,
            samples: 32,
            etas: vec![eta("b/x", 2_000), eta("a/y", 3_000), eta("c/z", 4_000)],
            unknown_runtimes: 0,
            margin: None,
        };
        let latest = Latest {
            snapshot: muster_sim::forecast::Snapshot::default(),
            model: RuntimeModel::new(),
            history: 0,
            options: Options::default(),
            calibration: Calibration::default(),
            late: Vec::new(),
            raw: None,
            by_job: places_by_name(&forecast),
            forecast,
            took_millis: 0,
        };
        let p50 = |job: &str| {
            latest
                .range_of(job)
                .and_then(|r| r.likely)
                .map(|t| t.0.as_second())
        };
        assert_eq!(
            [p50("a/y"), p50("b/x"), p50("c/z")],
            [Some(3_000), Some(2_000), Some(4_000)]
        );
        assert_eq!(p50("b/y"), None);
        assert_eq!(p50(""), None);
    }
}
