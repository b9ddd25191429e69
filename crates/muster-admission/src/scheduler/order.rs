//! The cycle's order: which ClusterQueue's job is served next.
//!
//! The rule: the queue whose head has the least key goes next — jobs that fit without
//! borrowing before jobs that would borrow, then the lowest fair-sharing standing (the
//! dominant shares down the cohort tree, where cohorts share fairly), then priority, creation time and UID (see [`HeadKey`]). Keys hold while
//! usage does; every admission (or hold for a preemptor) changes usage, and they are taken
//! again.
//!
//! Serving a job that the memo already rules out (an identical job failed this cycle) only
//! tells it why it waits. Such jobs are passed over, but they keep their part in the order:
//! a queue reaches its next job that can start only once its ruled-out jobs ahead of it have
//! had their turn. Serving the least head, over and over, from lists whose keys do not change
//! reaches a queue's job `x` before another queue's job `y` exactly when the largest key up
//! to `x` in its list is below the largest key up to `y` in its own. So each queue is
//! represented by its next job that can start and the largest key from its cursor up to that
//! job; the least of those goes next. Keys within a queue rise with queue order, apart from
//! the borrowing flag in front, so the largest key is that of the last job up to there whose
//! shape would borrow, or else that of the job itself: found per shape by bisection, not by
//! walking the jobs passed over. The jobs come grouped by shape, with ranks that order jobs
//! across shapes ([`super::lists`]), so a cycle costs the queues and shapes it walks and the
//! jobs it looks at, never every job that waits. A key depends on usage only through the queue's own quota
//! and its cohort tree's, so an admission takes again only the keys of the queues that share
//! them.

use std::collections::{BTreeMap, BTreeSet};

use super::cycle::BorrowingPlan;
use super::lists::{QueueList, Queued, Run};
use super::{CycleState, HeadKey, MemoKey, Scheduler};
use crate::job::JobId;
use crate::quota::{QuotaBook, Standing};

/// One queue's jobs of one shape, as a cycle walks them.
struct RunWalk<'a> {
    shape: MemoKey,
    run: &'a Run,
    /// The first entry of the run not yet known to be passed over (the cursor and the memo
    /// only move forward within a cycle).
    scan: usize,
    /// Whether a job of this shape would borrow, with the queue's `usage_epoch` it was
    /// answered at: it holds while that usage stays as it is.
    borrows: Option<(u32, bool)>,
    /// What is measured to tell (built once a cycle: it holds while the queues' quotas do,
    /// which a cycle does not change).
    plan: PlanSlot,
    /// How many of the run's jobs are ranked at or below the rank its last job up to a head
    /// was last looked for at: the next search gallops on from there, as the heads a cycle
    /// takes keys up to only come later in the order.
    upto: usize,
}

/// One queue's progress through a cycle.
struct QueueWalk<'a> {
    cq: &'a str,
    /// Whether the queue is stopped (its spec's stop policy): the same for the whole cycle.
    stopped: bool,
    /// The number of its cohort tree's root in the quota book: its key depends only on its
    /// own usage and its tree's.
    tree: Option<usize>,
    /// Its own number in the quota book (`None`: the book does not hold it), for its
    /// standing.
    number: Option<usize>,
    /// Which usage its runs' borrowing answers ([`RunWalk::borrows`]) hold for: moved on
    /// when usage changes, so that forgetting every answer costs one increment.
    usage_epoch: u32,
    runs: Vec<RunWalk<'a>>,
    /// The rank from which jobs have not been served (see [`super::lists`]).
    cursor: u64,
    done: bool,
    /// Its next job to serve, by run and index in the run: it moves only when this queue is
    /// served (the cursor, and the memo of this queue's shapes, change only then).
    at: Option<(usize, usize)>,
    /// Its key, while usage stays as it is.
    key: Option<HeadKey<'a>>,
    /// Per run, its last job from the cursor up to `at` (rank, job, the run's index in
    /// `runs`), highest rank first, when `lasts_found`: which of them would borrow changes
    /// with usage, but they change only when `at` does, so an admission elsewhere in the tree
    /// takes the key again without a search. Kept between heads, emptied and found again.
    lasts: Vec<(u64, &'a Queued, usize)>,
    /// Whether `lasts` are those up to `at`.
    lasts_found: bool,
    /// Jobs served so far this cycle, preemptors served first included.
    served: u32,
}

/// One shape's borrowing plan in a queue's walk: not built yet, or built (`None` where the
/// queue cannot take the shape at all).
#[derive(Default)]
enum PlanSlot {
    #[default]
    Unbuilt,
    Built(Option<BorrowingPlan>),
}

impl<'a> QueueWalk<'a> {
    /// The job at `at` (run, index in the run).
    fn listed(&self, (run, k): (usize, usize)) -> &'a super::lists::Listed {
        &self.runs[run].run.jobs[k]
    }
}

/// Every queue's progress through a cycle.
pub(super) struct Walk<'a> {
    queues: Vec<QueueWalk<'a>>,
}

/// The job a cycle serves next.
pub(super) struct Next<'a> {
    /// Its queue.
    pub(super) cq: &'a str,
    /// The job.
    pub(super) queued: &'a Queued,
    /// Its place among the jobs of its queue this cycle has served (1: the first).
    pub(super) position: u32,
    queue: usize,
    rank: u64,
}

impl<'a> Walk<'a> {
    /// A walk over `lists`; `served` counts per queue the jobs served before it (preemptors),
    /// `stopped` tells the queues that are stopped. Costs the queues and shapes that wait, not
    /// the jobs: they are kept grouped.
    pub(super) fn new(
        lists: &'a BTreeMap<String, QueueList>,
        served: &BTreeMap<String, u32>,
        quota: &QuotaBook,
        stopped: impl Fn(&str) -> bool,
    ) -> Walk<'a> {
        let queues = lists
            .iter()
            .filter(|(_, list)| !list.is_empty())
            .map(|(cq, list)| QueueWalk {
                cq: cq.as_str(),
                stopped: stopped(cq),
                tree: quota.tree_number(cq),
                number: quota.queue(cq),
                usage_epoch: 0,
                runs: list
                    .runs
                    .iter()
                    .map(|(shape, run)| RunWalk {
                        shape: *shape,
                        run,
                        scan: 0,
                        borrows: None,
                        plan: PlanSlot::Unbuilt,
                        upto: 0,
                    })
                    .collect(),
                cursor: 0,
                done: false,
                at: None,
                key: None,
                lasts: Vec::new(),
                lasts_found: false,
                served: served.get(cq).copied().unwrap_or(0),
            })
            .collect();
        Walk { queues }
    }

    /// Usage changed in the queue `next` was served from: the keys of the queues that share
    /// its quota (itself and its cohort tree) may have; no other queue's did.
    pub(super) fn usage_changed(&mut self, next: &Next<'_>) {
        let Some(changed) = self.queues.get(next.queue) else {
            return;
        };
        let tree = changed.tree;
        for (i, q) in self.queues.iter_mut().enumerate() {
            if i == next.queue || (tree.is_some() && q.tree == tree) {
                q.key = None;
                q.usage_epoch = q.usage_epoch.wrapping_add(1);
                if q.usage_epoch == 0 {
                    // Wrapped: answers from four billion changes ago would look current.
                    for walk in &mut q.runs {
                        walk.borrows = None;
                    }
                }
            }
        }
    }

    /// The job `next` was served: its queue goes on behind it.
    pub(super) fn served(&mut self, next: &Next<'_>) {
        if let Some(q) = self.queues.get_mut(next.queue) {
            q.cursor = next.rank.saturating_add(1);
            q.at = None;
            q.key = None;
            q.lasts_found = false;
            q.served += 1;
        }
    }
}

impl Scheduler {
    /// The job the cycle serves next, or `None` when every queue is through.
    pub(super) fn next_job<'a>(
        &self,
        walk: &mut Walk<'a>,
        state: &CycleState,
        nominated: &BTreeSet<JobId>,
    ) -> Option<Next<'a>> {
        let Walk { queues } = walk;
        for q in queues.iter_mut() {
            if q.done || q.key.is_some() {
                continue;
            }
            // A stopped queue, or one behind its blocked StrictFIFO head, only tells its jobs
            // so: nothing there changes anything else.
            if q.stopped || state.strict_head.contains_key(q.cq) {
                q.done = true;
                continue;
            }
            let at = match q.at {
                Some(at) => Some(at),
                None => first_to_serve(q, state, nominated),
            };
            match at {
                None => q.done = true,
                Some(at) => {
                    q.at = Some(at);
                    q.key = Some(self.queue_key(q, at, nominated));
                }
            }
        }
        let (queue, at) = queues
            .iter()
            .enumerate()
            .filter_map(|(i, q)| Some((q.key.as_ref()?, i, q.at?)))
            .min_by(|a, b| a.0.cmp(b.0))
            .map(|(_, i, at)| (i, at))?;
        let q = &queues[queue];
        let listed = q.listed(at);
        Some(Next {
            cq: q.cq,
            queued: &listed.queued,
            position: q.served + 1,
            queue,
            rank: listed.rank,
        })
    }

    /// The key of queue `q` whose next job to serve is at `at`: the largest key of its jobs
    /// from the cursor up to that one (see the module's documentation).
    fn queue_key<'a>(
        &self,
        q: &mut QueueWalk<'a>,
        at: (usize, usize),
        nominated: &BTreeSet<JobId>,
    ) -> HeadKey<'a> {
        let share = q
            .number
            .map_or_else(Standing::default, |n| self.quota.standing_of(n));
        debug_assert_eq!(share, self.quota.standing(q.cq));
        let head = q.listed(at);
        let QueueWalk {
            cq,
            runs,
            cursor,
            usage_epoch,
            lasts,
            lasts_found,
            ..
        } = q;
        if !*lasts_found {
            lasts_up_to(runs, (*cursor, head.rank), nominated, lasts);
            *lasts_found = true;
        }
        // The last job up to `at` whose shape would borrow: the first of the lasts, highest
        // rank first, whose shape would.
        let mut last_borrower: Option<&'a Queued> = None;
        for &(_, queued, r) in lasts.iter() {
            let walk = &mut runs[r];
            let would = match walk.borrows {
                Some((epoch, would)) if epoch == *usage_epoch => would,
                _ => {
                    if matches!(walk.plan, PlanSlot::Unbuilt) {
                        let plan = self.borrowing_plan(cq, &self.shape_usage[walk.shape]);
                        walk.plan = PlanSlot::Built(plan);
                    }
                    let plan = match &walk.plan {
                        PlanSlot::Built(plan) => plan.as_ref(),
                        PlanSlot::Unbuilt => None,
                    };
                    let would = self.needs_borrowing(plan);
                    walk.borrows = Some((*usage_epoch, would));
                    would
                }
            };
            if would {
                last_borrower = Some(queued);
                break;
            }
        }
        let (borrowing, by) = match last_borrower {
            Some(b) => (true, &b.job),
            None => (false, &head.queued.job),
        };
        let (priority, created, uid, id) = by.order_key();
        (borrowing, share, priority, created, uid, id)
    }
}

/// Per run of `runs`, its last job ranked from `cursor` up to `upto` (preemptors served first
/// left out: they are not in the queue's order), with its run's index; highest rank first,
/// into `lasts`.
fn lasts_up_to<'a>(
    runs: &mut [RunWalk<'a>],
    (cursor, upto): (u64, u64),
    nominated: &BTreeSet<JobId>,
    lasts: &mut Vec<(u64, &'a Queued, usize)>,
) {
    lasts.clear();
    for (r, walk) in runs.iter_mut().enumerate() {
        let jobs = &walk.run.jobs;
        let mut k = ranked_up_to(jobs, walk.upto, upto);
        walk.upto = k;
        while !nominated.is_empty() && k > 0 && nominated.contains(&jobs[k - 1].queued.job.id) {
            k -= 1;
        }
        if let Some(last) = k.checked_sub(1).and_then(|k| jobs.get(k))
            && last.rank >= cursor
        {
            lasts.push((last.rank, &last.queued, r));
        }
    }
    lasts.sort_unstable_by_key(|(rank, _, _)| std::cmp::Reverse(*rank));
}

/// How many of `jobs` (ranks rising along them) are ranked at or below `upto`, searched from
/// `hint`, the count for an earlier rank: galloping on from there costs the distance moved.
/// A hint past the answer (a rank lower than the last asked for) is bisected afresh.
fn ranked_up_to(
    jobs: &std::collections::VecDeque<super::lists::Listed>,
    hint: usize,
    upto: u64,
) -> usize {
    let hint = hint.min(jobs.len());
    let k = if hint > 0 && jobs[hint - 1].rank > upto {
        jobs.partition_point(|l| l.rank <= upto)
    } else if jobs.get(hint).is_some_and(|l| l.rank <= upto) {
        first_from(jobs, hint, |l| l.rank <= upto)
    } else {
        hint
    };
    debug_assert_eq!(k, jobs.partition_point(|l| l.rank <= upto));
    k
}

/// The first index from `from` on whose job `before` is false for, in a run along which
/// `before` is true up to some index and false after it, and true at `from`: found by
/// galloping from `from` and then bisecting, so that it costs the distance it moves.
fn first_from(
    jobs: &std::collections::VecDeque<super::lists::Listed>,
    from: usize,
    before: impl Fn(&super::lists::Listed) -> bool,
) -> usize {
    // `lo` is known to be before, `hi` (or the end) not.
    let (mut lo, mut step) = (from, 1);
    let mut hi = loop {
        let probe = lo + step;
        match jobs.get(probe) {
            Some(l) if before(l) => {
                lo = probe;
                step *= 2;
            }
            Some(_) => break probe,
            None => break jobs.len(),
        }
    };
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if before(&jobs[mid]) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

/// The first job at or after `q`'s cursor that the cycle must serve (its run and index
/// there): not a preemptor already served, not ruled out by the memo.
fn first_to_serve(
    q: &mut QueueWalk<'_>,
    state: &CycleState,
    nominated: &BTreeSet<JobId>,
) -> Option<(usize, usize)> {
    let mut first: Option<(u64, (usize, usize))> = None;
    let cursor = q.cursor;
    for (r, walk) in q.runs.iter_mut().enumerate() {
        let jobs = &walk.run.jobs;
        // Jobs before the cursor have been served; those before `scan` passed over. Ranks
        // rise along the run, so the first job at the cursor is never before `scan` when the
        // job at `scan` is at or past it (most calls): searched for only beyond `scan`.
        if jobs.get(walk.scan).is_some_and(|l| l.rank < cursor) {
            walk.scan = first_from(jobs, walk.scan, |l| l.rank < cursor);
        }
        debug_assert_eq!(
            walk.scan,
            walk.scan.max(jobs.partition_point(|l| l.rank < cursor))
        );
        let from = state.ruled_out_from.get(&walk.shape).copied();
        while let Some(listed) = jobs.get(walk.scan) {
            if from.is_some_and(|f| listed.shortest >= f) {
                // Every job left of this shape is ruled out.
                walk.scan = jobs.len();
                break;
            }
            let queued = &listed.queued;
            let passed = state.ruled_out(queued)
                || (!nominated.is_empty() && nominated.contains(&queued.job.id));
            if !passed {
                break;
            }
            walk.scan += 1;
        }
        if let Some(listed) = jobs.get(walk.scan)
            && first.is_none_or(|(rank, _)| listed.rank < rank)
        {
            first = Some((listed.rank, (r, walk.scan)));
        }
    }
    first.map(|(_, at)| at)
}
