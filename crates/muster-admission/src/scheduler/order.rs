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
//! walking the jobs passed over. A key depends on usage only through the queue's own quota
//! and its cohort tree's, so an admission takes again only the keys of the queues that share
//! them.

use std::collections::{BTreeMap, BTreeSet};

use muster_api::cluster_queue::StopPolicy;

use super::waiting::Queued;
use super::{CycleState, HeadKey, MemoKey, Scheduler};
use crate::job::JobId;
use crate::quota::QuotaBook;

/// One queue's jobs of one shape: a run of its indices in the queue's list, kept in
/// [`QueueWalk::order`] (`order[start..start + len]`, rising).
struct ShapeRun {
    shape: MemoKey,
    start: usize,
    len: usize,
    /// Whether [`QueueWalk::shortest`] holds this run's part (see there): worked out the
    /// first time the memo rules the shape out.
    shortest_ready: bool,
    /// The first entry of the run not yet known to be passed over (the cursor and the memo
    /// only move forward within a cycle).
    scan: usize,
}

impl ShapeRun {
    /// The run's indices into the queue's list, rising.
    fn at<'o>(&self, order: &'o [usize]) -> &'o [usize] {
        &order[self.start..self.start + self.len]
    }
}

/// One queue's progress through a cycle.
struct QueueWalk<'a> {
    cq: &'a str,
    /// The number of its cohort tree's root in the quota book: its key depends only on its
    /// own usage and its tree's.
    tree: Option<usize>,
    /// Per job shape, whether it would borrow, while that usage stays as it is.
    borrows: BTreeMap<MemoKey, bool>,
    list: &'a [Queued],
    shapes: Vec<ShapeRun>,
    /// The indices of `list` grouped by shape, each shape's run rising: one block per queue
    /// per cycle, sized once, rather than a growing vector per shape.
    order: Vec<usize>,
    /// Per entry of `order`, the shortest expected runtime from there to the end of its run
    /// (`i64::MAX` for none announced): the memo rules out a job of the shape whose runtime
    /// reaches a bound, so the whole rest of the run at once when this does. Empty until a
    /// run needs it; a run's part is filled when it does ([`ShapeRun::shortest_ready`]).
    shortest: Vec<i64>,
    cursor: usize,
    done: bool,
    /// The index of its next job to serve: it moves only when this queue is served (the
    /// cursor, and the memo of this queue's shapes, change only then).
    at: Option<usize>,
    /// Its key, while usage stays as it is.
    key: Option<HeadKey<'a>>,
    /// Jobs served so far this cycle, preemptors served first included.
    served: u32,
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
    at: usize,
}

impl<'a> Walk<'a> {
    /// A walk over `lists`; `served` counts per queue the jobs served before it (preemptors);
    /// `shapes` is how many job shapes there are (each job's shape is below it).
    pub(super) fn new(
        lists: &'a BTreeMap<String, Vec<Queued>>,
        served: &BTreeMap<String, u32>,
        quota: &QuotaBook,
        shapes: usize,
    ) -> Walk<'a> {
        // Each queue's jobs grouped by shape: `slot[shape]` is the shape's run in the queue
        // being grouped (shapes are small dense numbers), reset after each queue. Runs come
        // in the order of their shapes' first jobs; counted first, then filled in place.
        let mut slot: Vec<usize> = vec![usize::MAX; shapes];
        let queues = lists
            .iter()
            .filter(|(_, list)| !list.is_empty())
            .map(|(cq, list)| {
                let mut runs: Vec<ShapeRun> = Vec::new();
                for q in list {
                    if q.shape >= slot.len() {
                        slot.resize(q.shape + 1, usize::MAX);
                    }
                    let r = &mut slot[q.shape];
                    if *r == usize::MAX {
                        *r = runs.len();
                        runs.push(ShapeRun {
                            shape: q.shape,
                            start: 0,
                            len: 0,
                            shortest_ready: false,
                            scan: 0,
                        });
                    }
                    runs[*r].len += 1;
                }
                let mut start = 0;
                for run in &mut runs {
                    run.start = start;
                    start += run.len;
                }
                // `scan` counts each run's entries filled so far, then starts at zero.
                let mut order = vec![0; list.len()];
                for (i, q) in list.iter().enumerate() {
                    let run = &mut runs[slot[q.shape]];
                    order[run.start + run.scan] = i;
                    run.scan += 1;
                }
                for run in &mut runs {
                    slot[run.shape] = usize::MAX;
                    run.scan = 0;
                }
                QueueWalk {
                    cq: cq.as_str(),
                    tree: quota.tree_number(cq),
                    borrows: BTreeMap::new(),
                    list: list.as_slice(),
                    shapes: runs,
                    order,
                    shortest: Vec::new(),
                    cursor: 0,
                    done: false,
                    at: None,
                    key: None,
                    served: served.get(cq).copied().unwrap_or(0),
                }
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
                q.borrows.clear();
            }
        }
    }

    /// The job `next` was served: its queue goes on behind it.
    pub(super) fn served(&mut self, next: &Next<'_>) {
        let (queue, at) = (next.queue, next.at);
        if let Some(q) = self.queues.get_mut(queue) {
            q.cursor = at + 1;
            q.at = None;
            q.key = None;
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
            let stopped = self
                .queues
                .get(q.cq)
                .is_none_or(|c| c.spec.stop_policy != StopPolicy::None);
            // A stopped queue, or one behind its blocked StrictFIFO head, only tells its jobs
            // so: nothing there changes anything else.
            if stopped || state.strict_head.contains_key(q.cq) {
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
        Some(Next {
            cq: q.cq,
            queued: &q.list[at],
            position: q.served + 1,
            queue,
            at,
        })
    }

    /// The key of queue `q` whose next job to serve is at `at`: the largest key of its jobs
    /// from the cursor up to that one (see the module's documentation).
    fn queue_key<'a>(
        &self,
        q: &mut QueueWalk<'a>,
        at: usize,
        nominated: &BTreeSet<JobId>,
    ) -> HeadKey<'a> {
        let share = self.quota.standing(q.cq);
        // The last job up to `at` whose shape would borrow.
        let mut last_borrower: Option<usize> = None;
        for run in &q.shapes {
            let run_at = run.at(&q.order);
            // Preemptors served first are not in the queue's order.
            let mut upto = run_at.partition_point(|i| *i <= at);
            while !nominated.is_empty()
                && upto > 0
                && nominated.contains(&q.list[run_at[upto - 1]].job.id)
            {
                upto -= 1;
            }
            let Some(&last) = upto.checked_sub(1).and_then(|k| run_at.get(k)) else {
                continue;
            };
            if last < q.cursor || last_borrower.is_some_and(|b| b > last) {
                continue;
            }
            let would = *q
                .borrows
                .entry(run.shape)
                .or_insert_with(|| self.needs_borrowing(q.cq, &self.shape_usage[run.shape]));
            if would {
                last_borrower = Some(last);
            }
        }
        let list: &'a [Queued] = q.list;
        let (borrowing, by) = match last_borrower {
            Some(b) => (true, &list[b].job),
            None => (false, &list[at].job),
        };
        let (priority, created, uid, id) = by.order_key();
        (borrowing, share, priority, created, uid, id)
    }
}

/// The index of the first job at or after `q`'s cursor that the cycle must serve: not a
/// preemptor already served, not ruled out by the memo.
fn first_to_serve(
    q: &mut QueueWalk<'_>,
    state: &CycleState,
    nominated: &BTreeSet<JobId>,
) -> Option<usize> {
    let mut first: Option<usize> = None;
    for run in &mut q.shapes {
        let run_at = run.at(&q.order);
        // Jobs before the cursor have been served.
        let cursor = q.cursor;
        run.scan += run_at[run.scan..].partition_point(|i| *i < cursor);
        let from = state.ruled_out_from.get(&run.shape).copied();
        if from.is_some() && !run.shortest_ready {
            if q.shortest.is_empty() {
                q.shortest = vec![i64::MAX; q.order.len()];
            }
            let mut shortest = i64::MAX;
            for (k, i) in run_at.iter().enumerate().rev() {
                let runtime = q.list[*i].runtime.unwrap_or(i64::MAX);
                shortest = shortest.min(runtime);
                q.shortest[run.start + k] = shortest;
            }
            run.shortest_ready = true;
        }
        while run.scan < run.len {
            if from.is_some_and(|f| q.shortest[run.start + run.scan] >= f) {
                // Every job left of this shape is ruled out.
                run.scan = run.len;
                break;
            }
            let queued = &q.list[run_at[run.scan]];
            let passed = state.ruled_out(queued)
                || (!nominated.is_empty() && nominated.contains(&queued.job.id));
            if !passed {
                break;
            }
            run.scan += 1;
        }
        if let Some(&i) = run_at.get(run.scan) {
            first = Some(first.map_or(i, |f| f.min(i)));
        }
    }
    first
}
