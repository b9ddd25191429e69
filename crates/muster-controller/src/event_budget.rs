//! How many Normal Events the controller records per transition kind: a budget per
//! namespace and reason, so that a burst of jobs making the same transition (a thousand
//! small jobs admitted in a minute) costs a handful of Event writes rather than one per job.
//!
//! Each `(namespace, reason)` has a bucket of [`BURST`] Events that refills by one every
//! [`REFILL_SECONDS`]. A Normal Event that finds its bucket empty is not recorded; it is
//! counted, and the next one of its kind that is recorded says how many were left out since
//! when. Warnings (evictions, failures, invalid objects) are never limited. Every job's own
//! conditions still record each of its transitions with its time and message, so nothing a
//! user reads about one job is lost; only the stream of like Events is thinned.
//!
//! Pure and clock-free: the caller passes the time in seconds.

use std::collections::BTreeMap;

/// Normal Events of one kind recorded at once, before the budget limits them.
pub const BURST: f64 = 5.0;
/// Seconds for the budget of one kind to regain one Event.
pub const REFILL_SECONDS: f64 = 30.0;

/// One kind's bucket.
#[derive(Clone, Debug)]
struct Bucket {
    tokens: f64,
    at: f64,
    /// Events of this kind left out since the last one recorded, and when the first was.
    left_out: u64,
    since: f64,
}

/// Whether an Event is recorded, and what it says about the ones left out before it.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Record it; `left_out` like Events were not recorded since `since` (seconds).
    Record {
        /// How many were left out.
        left_out: u64,
        /// When the first of them was.
        since: f64,
    },
    /// Leave it out (counted for the next one recorded).
    LeaveOut,
}

/// The Event budget of one controller, per namespace and reason.
#[derive(Clone, Debug, Default)]
pub struct EventBudget {
    buckets: BTreeMap<(String, String), Bucket>,
}

impl EventBudget {
    /// Whether a Normal Event with `reason` about an object in `namespace` is recorded at
    /// `now` (seconds). Warnings are not asked about: they are always recorded.
    pub fn admit(&mut self, namespace: &str, reason: &str, now: f64) -> Verdict {
        let bucket = self
            .buckets
            .entry((namespace.to_owned(), reason.to_owned()))
            .or_insert(Bucket {
                tokens: BURST,
                at: now,
                left_out: 0,
                since: now,
            });
        let elapsed = (now - bucket.at).max(0.0);
        bucket.tokens = (bucket.tokens + elapsed / REFILL_SECONDS).min(BURST);
        bucket.at = now.max(bucket.at);
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            let verdict = Verdict::Record {
                left_out: bucket.left_out,
                since: bucket.since,
            };
            bucket.left_out = 0;
            verdict
        } else {
            if bucket.left_out == 0 {
                bucket.since = now;
            }
            bucket.left_out += 1;
            Verdict::LeaveOut
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_recorded_up_to_its_budget_then_counted_into_the_next_one_recorded() {
        let mut budget = EventBudget::default();
        let recorded = (0..25)
            .filter(|_| budget.admit("team-a", "Admitted", 100.0) != Verdict::LeaveOut)
            .count();
        assert_eq!(recorded, 5);
        // Another namespace and another reason have budgets of their own.
        assert_ne!(budget.admit("team-b", "Admitted", 100.0), Verdict::LeaveOut);
        assert_ne!(
            budget.admit("team-a", "Succeeded", 100.0),
            Verdict::LeaveOut
        );
        // One refill later, the next one says how many were left out, and since when.
        assert_eq!(budget.admit("team-a", "Admitted", 110.0), Verdict::LeaveOut);
        assert_eq!(
            budget.admit("team-a", "Admitted", 100.0 + REFILL_SECONDS),
            Verdict::Record {
                left_out: 21,
                since: 100.0
            }
        );
        // The count starts again.
        assert_eq!(
            budget.admit("team-a", "Admitted", 100.0 + 3.0 * REFILL_SECONDS),
            Verdict::Record {
                left_out: 0,
                since: 100.0
            }
        );
    }

    #[test]
    fn a_clock_that_steps_back_takes_no_budget_away() {
        let mut budget = EventBudget::default();
        for _ in 0..5 {
            budget.admit("ns", "Admitted", 50.0);
        }
        assert_eq!(budget.admit("ns", "Admitted", 40.0), Verdict::LeaveOut);
        assert!(matches!(
            budget.admit("ns", "Admitted", 50.0 + REFILL_SECONDS),
            Verdict::Record { left_out: 1, .. }
        ));
    }
}
