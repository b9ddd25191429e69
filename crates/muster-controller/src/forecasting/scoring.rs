//! How the ranges given fared: the ranges of waiting jobs, noted at most once per
//! [`NOTE_EVERY`] seconds per job, scored when their jobs start (when their pods were
//! released, as the status says) into a [`Calibration`] that widens later ranges by how far
//! past ones missed, and by how often the ranges given (margins applied) still missed. Jobs still waiting past their range count as late already (see
//! [`Calibration::late`]).

use std::collections::BTreeMap;

use muster_sim::forecast::{Calibration, Forecast};

use crate::index::Index;

/// Seconds between two ranges of one job that are scored: ranges made a minute apart say
/// nearly the same, and a job that waits long would otherwise weigh in its waiting time's
/// worth of near copies.
pub(crate) const NOTE_EVERY: i64 = 600;

/// Ranges scored per job at most (the latest kept): a job that waits for days is one job.
const NOTED_PER_JOB: usize = 24;

/// One noted range: when it was made, its 10th, 50th and 90th percentile start as the
/// forward runs gave them (before any margin), and as it was given (margins applied).
type Noted = (i64, [Option<i64>; 3], [Option<i64>; 3]);

/// The ranges given and how they fared.
#[derive(Clone, Debug, Default)]
pub(crate) struct Scoring {
    /// Per waiting job (`namespace/name`), with its uid, the ranges noted for it.
    noted: BTreeMap<String, (String, Vec<Noted>)>,
    calibration: Calibration,
}

impl Scoring {
    /// Notes the ranges of jobs whose last noted range is [`NOTE_EVERY`] old: `raw`'s (the
    /// forward runs' own, before any margin) and `given`'s (the same forecast, margins
    /// applied); `uid` names each job's uid in the index.
    pub(crate) fn note<'i>(
        &mut self,
        raw: &Forecast,
        given: &Forecast,
        uid: impl Fn(&str) -> Option<&'i str>,
    ) {
        let made_at = raw.now;
        for (eta, shown) in raw.etas.iter().zip(&given.etas) {
            let Some(uid) = uid(&eta.job) else {
                continue;
            };
            let range = (
                made_at,
                [eta.p10, eta.p50, eta.p90],
                [shown.p10, shown.p50, shown.p90],
            );
            match self.noted.get_mut(eta.job.as_str()) {
                Some((noted_uid, ranges)) if noted_uid.as_str() == uid => {
                    let due = ranges
                        .last()
                        .is_none_or(|(at, _, _)| made_at - at >= NOTE_EVERY);
                    if due {
                        ranges.push(range);
                        if ranges.len() > NOTED_PER_JOB {
                            ranges.remove(0);
                        }
                    }
                }
                // A job noted under another uid was replaced by one of the same name.
                Some(replaced) => *replaced = (uid.to_owned(), vec![range]),
                // Room for one range: most jobs wait less than `NOTE_EVERY` and are noted
                // once (a vector's first room is four, 416 bytes: 6 MB over a flood of
                // 15,000 waiting jobs).
                None => {
                    self.noted
                        .insert(eta.job.clone(), (uid.to_owned(), vec![range]));
                }
            }
        }
    }

    /// Scores the ranges of jobs that started since (their status names a start time), and
    /// forgets those of jobs that are gone or were replaced by a job of the same name.
    pub(crate) fn settle(&mut self, index: &Index) {
        let calibration = &mut self.calibration;
        self.noted.retain(|job, (uid, ranges)| {
            let Some(gpujob) = index.jobs.get(job.as_str()) else {
                return false;
            };
            if gpujob.metadata.uid.as_deref() != Some(uid.as_str()) {
                return false;
            }
            let started = gpujob
                .status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .map(|t| t.0.as_second())
                // A start before every range noted is an earlier attempt's: the job waits again.
                .filter(|start| ranges.iter().any(|(made_at, _, _)| start >= made_at));
            match started {
                Some(start) => {
                    for (made_at, range, given) in ranges.iter() {
                        // A start before the range was made is an earlier attempt's.
                        if start >= *made_at {
                            calibration.record(*made_at, *range, start);
                            calibration.judge(*given, start);
                        }
                    }
                    false
                }
                None => true,
            }
        });
    }

    /// The calibration so far, and the late scores of jobs still waiting past a range at
    /// `now`.
    pub(crate) fn calibration(&self, now: i64) -> (Calibration, Vec<f64>) {
        let late = self
            .noted
            .values()
            .flat_map(|(_, ranges)| ranges)
            .filter_map(|(made_at, range, _)| Calibration::late(*made_at, *range, now))
            .collect();
        (self.calibration.clone(), late)
    }
}
