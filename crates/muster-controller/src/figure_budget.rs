//! How many status writes the controller spends on figures alone: the counts and usage of
//! queues, the positions and ETAs of waiting jobs. Each moves with every admission and
//! finish, so in a fleet of many queues and deep queues a fixed refresh interval per object
//! would cost writes in proportion to the fleet (sixty queues every ten seconds: six writes a
//! second, before one job's position). A budget bounds them instead: writes of one kind of
//! figure share a bucket that refills at a fixed rate, and when more objects are due than the
//! bucket holds, those whose figures were written longest ago go first — so every object is
//! refreshed in turn and none starves, at an interval that grows with the fleet rather than
//! the writes.
//!
//! Only figures are budgeted. A new reason, a condition that changed, a job's first status,
//! its admission and its end are written at once, whatever the budget holds.
//!
//! Pure and clock-free: the caller passes the time in seconds.

use std::collections::BTreeMap;

use muster_api::ObjectRef;

use crate::action::Action;
use crate::ledger::QueueWrite;

/// Seconds after which an object's last figure write is forgotten: one not written for this
/// long goes first anyway (as one never written does), and the memory stays bounded by the
/// objects written lately.
const REMEMBERED_SECONDS: i64 = 600;

/// The figure writes of one kind (queues' or waiting jobs'): a bucket of tokens, when each
/// object's figures were last written, and the writes offered in this pass.
#[derive(Clone, Debug)]
pub(crate) struct FigureBudget<K: Ord, T> {
    per_second: f64,
    burst: f64,
    tokens: f64,
    /// When the tokens were last counted (seconds); none before the first grant.
    at: Option<i64>,
    written: BTreeMap<K, i64>,
    /// The writes offered in this pass, one per object: a later offer (a job decided about
    /// twice in one pass, by the cycle and by the explanation) replaces an earlier one.
    offered: BTreeMap<K, T>,
}

/// What a grant gave: the writes to make, and whether any was held back for want of tokens
/// (a later pass offers them again).
#[derive(Debug)]
pub(crate) struct Granted<K, T> {
    pub(crate) writes: Vec<(K, T)>,
    pub(crate) held_back: bool,
}

impl<K: Ord + Clone, T> FigureBudget<K, T> {
    /// A budget of `per_second` writes, of which `burst` may go at once after a quiet spell.
    pub(crate) fn new(per_second: f64, burst: f64) -> FigureBudget<K, T> {
        FigureBudget {
            per_second,
            burst,
            tokens: burst,
            at: None,
            written: BTreeMap::new(),
            offered: BTreeMap::new(),
        }
    }

    /// Offers the figure write `write` of object `key` for this pass's grant, in place of
    /// any offered before for it.
    pub(crate) fn offer(&mut self, key: K, write: T) {
        self.offered.insert(key, write);
    }

    /// Withdraws the offers whose object `keep` refuses (one given another write in the
    /// same pass: that write says what the figures would have, and spends no token).
    pub(crate) fn withdraw_unless(&mut self, keep: impl Fn(&K) -> bool) {
        self.offered.retain(|key, _| keep(key));
    }

    /// The writes offered since the last grant that the budget allows at `now` (seconds):
    /// those whose object was written longest ago (or never) first, ties by key. Each
    /// granted object counts as written at `now`; the rest are dropped.
    pub(crate) fn grant(&mut self, now: i64) -> Granted<K, T> {
        let elapsed = self.at.map_or(0, |at| (now - at).max(0));
        #[expect(clippy::cast_precision_loss, reason = "seconds between passes")]
        let refill = elapsed as f64 * self.per_second;
        self.tokens = (self.tokens + refill).min(self.burst);
        self.at = Some(self.at.map_or(now, |at| at.max(now)));
        self.written.retain(|_, at| now - *at < REMEMBERED_SECONDS);
        let mut offered: Vec<(K, T)> = std::mem::take(&mut self.offered).into_iter().collect();
        offered.sort_by(|(a, _), (b, _)| {
            let last = |k: &K| self.written.get(k).copied().unwrap_or(i64::MIN);
            last(a).cmp(&last(b)).then_with(|| a.cmp(b))
        });
        let mut writes = Vec::new();
        let mut held_back = false;
        for (key, write) in offered {
            if self.tokens >= 1.0 {
                self.tokens -= 1.0;
                self.written.insert(key.clone(), now);
                writes.push((key, write));
            } else {
                held_back = true;
            }
        }
        Granted { writes, held_back }
    }
}

/// The controller's two figure budgets: queues' and waiting jobs'. Kept apart so that deep
/// queues' positions never starve the queues' own usage, nor the other way round.
#[derive(Clone, Debug)]
pub(crate) struct Figures {
    /// ClusterQueue and LocalQueue statuses whose figures alone moved.
    pub(crate) queues: FigureBudget<QueueWrite, Action>,
    /// Waiting jobs' statuses whose figures alone moved (position, quota left, ETA).
    pub(crate) jobs: FigureBudget<ObjectRef, Action>,
}

impl Default for Figures {
    fn default() -> Figures {
        Figures {
            queues: FigureBudget::new(
                crate::status::QUEUE_FIGURE_WRITES_PER_SECOND,
                crate::status::FIGURE_WRITES_AT_ONCE,
            ),
            jobs: FigureBudget::new(
                crate::status::JOB_FIGURE_WRITES_PER_SECOND,
                crate::status::FIGURE_WRITES_AT_ONCE,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_goes_at_once_and_then_the_rate_bounds_the_writes() {
        let mut budget: FigureBudget<u32, ()> = FigureBudget::new(2.0, 5.0);
        for key in 0..8 {
            budget.offer(key, ());
        }
        let first = budget.grant(100);
        assert_eq!(first.writes.len(), 5);
        assert!(first.held_back);
        // Within the same second nothing more.
        budget.offer(7, ());
        let again = budget.grant(100);
        assert!(again.writes.is_empty());
        assert!(again.held_back);
        // A second later two tokens.
        for key in 0..8 {
            budget.offer(key, ());
        }
        assert_eq!(budget.grant(101).writes.len(), 2);
        // After a quiet spell never more than the burst.
        for key in 0..8 {
            budget.offer(key, ());
        }
        assert_eq!(budget.grant(1_000).writes.len(), 5);
    }

    #[test]
    fn objects_written_longest_ago_go_first_so_none_starves() {
        // Ten objects due every pass, one token a second: each is written once in ten
        // seconds, in turn, whatever order they are offered in.
        let mut budget: FigureBudget<u32, ()> = FigureBudget::new(1.0, 1.0);
        let mut written = BTreeMap::<u32, Vec<i64>>::new();
        for now in 0..40 {
            for key in (0..10).rev() {
                budget.offer(key, ());
            }
            for (key, ()) in budget.grant(now).writes {
                written.entry(key).or_default().push(now);
            }
        }
        assert_eq!(written.len(), 10);
        for times in written.values() {
            assert_eq!(times.len(), 4);
            assert!(times.windows(2).all(|w| w[1] - w[0] == 10), "{times:?}");
        }
    }

    #[test]
    fn an_object_offered_twice_in_a_pass_is_written_once_with_its_last_offer() {
        let mut budget: FigureBudget<u32, &str> = FigureBudget::new(1.0, 5.0);
        budget.offer(1, "cycle");
        budget.offer(1, "explanation");
        let granted = budget.grant(0);
        assert_eq!(granted.writes, vec![(1, "explanation")]);
        assert!(!granted.held_back);
    }

    #[test]
    fn a_clock_that_steps_back_gives_no_tokens() {
        let mut budget: FigureBudget<u32, ()> = FigureBudget::new(1.0, 1.0);
        budget.offer(1, ());
        assert_eq!(budget.grant(50).writes.len(), 1);
        budget.offer(2, ());
        assert!(budget.grant(10).writes.is_empty());
        budget.offer(2, ());
        assert!(budget.grant(50).writes.is_empty());
        budget.offer(2, ());
        assert_eq!(budget.grant(51).writes.len(), 1);
    }
}
