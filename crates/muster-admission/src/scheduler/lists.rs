//! The waiting jobs between cycles: every ClusterQueue's, in queue order, kept sorted as jobs
//! come and go (a cycle never sorts), and grouped by job shape as they are kept.
//!
//! A cycle serves each queue's jobs in order until each shape has failed once, then passes
//! over every later job of a failed shape without a look (see [`super::order`]). So it needs
//! each queue's jobs of each shape in order, and which of two jobs of different shapes comes
//! first in the queue. Each queue keeps one [`Run`] per shape, and every job a rank that rises
//! with queue order across the queue's runs. Ranks leave room between them, so a job listed
//! between two others takes a rank between theirs; when there is none left the queue's ranks
//! are dealt again. A cycle costs what it looks at: grouping every waiting job by shape at
//! every cycle would cost what waits, and at fleet scale most jobs wait.

use std::borrow::Borrow;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use foldhash::fast::FixedState;

use super::MemoKey;
use crate::job::Job;

/// A job waiting in a ClusterQueue, with its shape (the memo's key).
#[derive(Clone, Debug)]
pub(super) struct Queued {
    pub(super) job: Arc<Job>,
    pub(super) shape: MemoKey,
    /// The job's expected runtime, kept beside it: a cycle reads it for every waiting job of
    /// a shape it rules out, and the list is walked far more often than the jobs change.
    pub(super) runtime: Option<i64>,
}

/// A job in its run, with its place in its queue.
#[derive(Clone, Debug)]
pub(super) struct Listed {
    pub(super) queued: Queued,
    /// Its place in its queue's order: ranks rise with queue order across the queue's runs.
    pub(super) rank: u64,
    /// The shortest expected runtime from this job to the end of its run (`i64::MAX` for none
    /// announced): the memo rules out a job of the shape whose runtime reaches a bound, so the
    /// whole rest of the run at once when this does.
    pub(super) shortest: i64,
}

/// One ClusterQueue's waiting jobs of one shape, in queue order (rising rank).
#[derive(Clone, Debug, Default)]
pub(super) struct Run {
    pub(super) jobs: VecDeque<Listed>,
}

impl Run {
    /// Sets [`Listed::shortest`] again for the jobs before index `upto` (exclusive), after a
    /// change at `upto` or before it: the rest of the run is as it was. The jobs before
    /// index `changed` are the ones the run had before the change, in the same order, so
    /// the walk stops at the first of them whose shortest comes out as it was: each one
    /// ahead of it takes its shortest from it alone. A job joining a run mostly joins at its
    /// end, and a walk over the whole run for each of them made listing a queue's jobs cost
    /// the square of their number.
    fn reshortest(&mut self, upto: usize, changed: usize) {
        let upto = upto.min(self.jobs.len());
        let mut shortest = self.jobs.get(upto).map_or(i64::MAX, |l| l.shortest);
        for k in (0..upto).rev() {
            let l = &mut self.jobs[k];
            shortest = shortest.min(l.queued.runtime.unwrap_or(i64::MAX));
            if k < changed && l.shortest == shortest {
                return;
            }
            l.shortest = shortest;
        }
    }
}

/// One ClusterQueue's waiting jobs, a run per shape.
#[derive(Clone, Debug, Default)]
pub(super) struct QueueList {
    pub(super) runs: BTreeMap<MemoKey, Run>,
    len: usize,
}

/// The room left between two neighbouring ranks when ranks are dealt, and between the last
/// job and one listed behind it: jobs mostly join at the end of their queue.
const SPACING: u64 = 1 << 24;

/// The rank of a queue's first job when ranks are dealt: room for as many jobs listed ahead
/// of it as behind.
const FIRST: u64 = 1 << 62;

impl QueueList {
    /// How many jobs wait here.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Whether none does.
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The jobs in queue order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Queued> + '_ {
        InOrder::new(self).map(|l| &l.queued)
    }

    /// The ranks of the jobs just before and just after where a job with order key `key`
    /// goes.
    fn neighbours(&self, job: &Job) -> (Option<u64>, Option<u64>) {
        let key = job.order_key();
        let (mut before, mut after): (Option<u64>, Option<u64>) = (None, None);
        for run in self.runs.values() {
            // Jobs mostly join behind every job of a run (the newest of their priority): one
            // look at the last before a search.
            let at = if run
                .jobs
                .back()
                .is_none_or(|l| l.queued.job.order_key() < key)
            {
                run.jobs.len()
            } else {
                run.jobs.partition_point(|l| l.queued.job.order_key() < key)
            };
            if let Some(l) = at.checked_sub(1).and_then(|k| run.jobs.get(k)) {
                before = Some(before.map_or(l.rank, |b| b.max(l.rank)));
            }
            if let Some(l) = run.jobs.get(at) {
                after = Some(after.map_or(l.rank, |a| a.min(l.rank)));
            }
        }
        (before, after)
    }

    /// A free rank between the neighbours of `job`, if there is one.
    fn free_rank(&self, job: &Job) -> Option<u64> {
        match self.neighbours(job) {
            (None, None) => Some(FIRST),
            (Some(b), None) => b.checked_add(SPACING),
            (None, Some(a)) => a.checked_sub(SPACING),
            (Some(b), Some(a)) => (a - b > 1).then(|| b + (a - b) / 2),
        }
    }

    /// Deals the ranks again, `SPACING` apart, in queue order.
    fn deal(&mut self) {
        let mut order: Vec<(u64, MemoKey, usize)> = self
            .runs
            .iter()
            .flat_map(|(shape, run)| {
                run.jobs
                    .iter()
                    .enumerate()
                    .map(move |(k, l)| (l.rank, *shape, k))
            })
            .collect();
        order.sort_unstable();
        for (i, (_, shape, k)) in order.into_iter().enumerate() {
            if let Some(l) = self
                .runs
                .get_mut(&shape)
                .and_then(|run| run.jobs.get_mut(k))
            {
                l.rank = FIRST + (i as u64) * SPACING;
            }
        }
    }

    /// Lists `queued` in queue order.
    fn insert(&mut self, queued: Queued) {
        let rank = match self.free_rank(&queued.job) {
            Some(rank) => rank,
            None => {
                self.deal();
                // Dealt `SPACING` apart from a rank far from either end, there is room.
                self.free_rank(&queued.job).unwrap_or(u64::MAX)
            }
        };
        let run = self.runs.entry(queued.shape).or_default();
        let at = if run.jobs.back().is_none_or(|l| l.rank < rank) {
            run.jobs.len()
        } else {
            run.jobs.partition_point(|l| l.rank < rank)
        };
        run.jobs.insert(
            at,
            Listed {
                queued,
                rank,
                shortest: i64::MAX,
            },
        );
        run.reshortest(at + 1, at);
        self.len += 1;
    }

    /// Takes the jobs at indices `ats` of the run of `shape` off the list.
    fn remove_at(&mut self, shape: MemoKey, mut ats: Vec<usize>) {
        let Some(run) = self.runs.get_mut(&shape) else {
            return;
        };
        ats.sort_unstable();
        ats.dedup();
        let (Some(&first), Some(&last)) = (ats.first(), ats.last()) else {
            return;
        };
        let before = run.jobs.len();
        // One at a time, a deque moves the shorter side of each: cheap near either end, where
        // a cycle mostly admits. Many from the middle cost less as one pass over the run.
        let moved: usize = ats
            .iter()
            .map(|&at| at.min(before.saturating_sub(at)))
            .sum();
        if moved <= before {
            // From the back, so the indices ahead stay put.
            for &at in ats.iter().rev() {
                run.jobs.remove(at);
            }
        } else {
            let mut i = 0usize;
            let mut next = 0usize;
            run.jobs.retain(|_| {
                let gone = ats.get(next) == Some(&i);
                next += usize::from(gone);
                i += 1;
                !gone
            });
        }
        self.len -= before - run.jobs.len();
        if run.jobs.is_empty() {
            self.runs.remove(&shape);
        } else {
            // Only the jobs ahead of the last one gone can have had it as their shortest;
            // those ahead of the first one gone are as they were.
            run.reshortest(last.saturating_sub(ats.len() - 1), first);
        }
    }
}

/// A queue's jobs in queue order: its runs merged by rank.
struct InOrder<'a> {
    runs: Vec<std::collections::vec_deque::Iter<'a, Listed>>,
    heads: BinaryHeap<Reverse<(u64, usize)>>,
    next: Vec<Option<&'a Listed>>,
}

impl<'a> InOrder<'a> {
    fn new(list: &'a QueueList) -> InOrder<'a> {
        let mut runs: Vec<_> = list.runs.values().map(|r| r.jobs.iter()).collect();
        let mut heads = BinaryHeap::with_capacity(runs.len());
        let mut next = Vec::with_capacity(runs.len());
        for (i, run) in runs.iter_mut().enumerate() {
            let head = run.next();
            if let Some(l) = head {
                heads.push(Reverse((l.rank, i)));
            }
            next.push(head);
        }
        InOrder { runs, heads, next }
    }
}

impl<'a> Iterator for InOrder<'a> {
    type Item = &'a Listed;

    fn next(&mut self) -> Option<&'a Listed> {
        let Reverse((_, i)) = self.heads.pop()?;
        let out = self.next[i].take();
        let head = self.runs[i].next();
        if let Some(l) = head {
            self.heads.push(Reverse((l.rank, i)));
        }
        self.next[i] = head;
        out
    }
}

/// Every ClusterQueue's waiting jobs.
#[derive(Clone, Debug, Default)]
pub(super) struct Lists {
    pub(super) by_queue: BTreeMap<String, QueueList>,
    /// The queue and shape each listed job is in: looked up for every job that starts, ends
    /// or leaves, never walked in order, so hashed (with a fixed seed). Keyed by the job and
    /// naming the queue by pointers: a forecast copies these lists for each of its runs.
    queue_of: HashMap<ById, (Arc<str>, MemoKey), FixedState>,
    /// The names of the queues jobs are listed in, each kept once for `queue_of`.
    names: BTreeMap<String, Arc<str>>,
}

/// A listed job as [`Lists::queue_of`] keys it: hashed and compared by its id, as the id
/// itself would be, so that it is looked up by id.
#[derive(Clone, Debug)]
struct ById(Arc<Job>);

impl PartialEq for ById {
    fn eq(&self, other: &ById) -> bool {
        self.0.id == other.0.id
    }
}

impl Eq for ById {}

impl Hash for ById {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // As `str` hashes, which `Borrow<str>` requires.
        self.0.id.as_str().hash(state);
    }
}

impl Borrow<str> for ById {
    fn borrow(&self) -> &str {
        &self.0.id
    }
}

impl Lists {
    /// Lists `job` in `cq`, in queue order.
    pub(super) fn insert(&mut self, cq: &str, queued: Queued) {
        let name = match self.names.get(cq) {
            Some(name) => Arc::clone(name),
            None => {
                let name: Arc<str> = Arc::from(cq);
                self.names.insert(cq.to_owned(), Arc::clone(&name));
                name
            }
        };
        self.queue_of
            .insert(ById(Arc::clone(&queued.job)), (name, queued.shape));
        match self.by_queue.get_mut(cq) {
            Some(list) => list.insert(queued),
            None => {
                let mut list = QueueList::default();
                list.insert(queued);
                self.by_queue.insert(cq.to_owned(), list);
            }
        }
    }

    /// Takes `job` (as it was listed) off its queue's list, if it is on one.
    pub(super) fn remove(&mut self, job: &Job) {
        self.remove_all(std::iter::once(job));
    }

    /// Takes every job in `gone` off the lists (those a cycle admitted or sent provisioning):
    /// each run is changed once, however many of its jobs go.
    pub(super) fn remove_all<'a>(&mut self, gone: impl IntoIterator<Item = &'a Job>) {
        let mut at_by_run: BTreeMap<(Arc<str>, MemoKey), Vec<usize>> = BTreeMap::new();
        for job in gone {
            let Some((cq, shape)) = self.queue_of.remove(job.id.as_str()) else {
                continue;
            };
            let at = self
                .by_queue
                .get(&*cq)
                .and_then(|list| list.runs.get(&shape))
                .and_then(|run| position(&run.jobs, job));
            if let Some(at) = at {
                at_by_run.entry((cq, shape)).or_default().push(at);
            }
        }
        for ((cq, shape), ats) in at_by_run {
            if let Some(list) = self.by_queue.get_mut(&*cq) {
                list.remove_at(shape, ats);
                if list.is_empty() {
                    self.by_queue.remove(&*cq);
                    self.names.remove(&*cq);
                }
            }
        }
    }

    /// The queue `id` is listed in.
    pub(super) fn queue_of(&self, id: &str) -> Option<&str> {
        self.queue_of.get(id).map(|(cq, _)| &**cq)
    }
}

/// Where `job` (as it was listed) is in its run: found by its order key, or by its id when
/// its key changed since it was listed.
fn position(run: &VecDeque<Listed>, job: &Job) -> Option<usize> {
    let key = job.order_key();
    let at = run.partition_point(|l| l.queued.job.order_key() < key);
    if run.get(at).is_some_and(|l| l.queued.job.id == job.id) {
        Some(at)
    } else {
        run.iter().position(|l| l.queued.job.id == job.id)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn job(n: usize, priority: i32, created: i64, runtime: Option<i64>) -> Arc<Job> {
        Arc::new(Job {
            id: format!("ns/job-{n}"),
            uid: format!("uid-{n:05}"),
            local_queue: "ns/lq".to_owned(),
            priority,
            created,
            expected_runtime: runtime,
            pod_sets: Vec::new(),
            invalid: None,
            suspended: false,
            provisioned: false,
        })
    }

    /// One change to the lists: list job `n` (priority, created, shape, runtime) or take
    /// the listed jobs picked by the mask off at once.
    #[derive(Clone, Debug)]
    enum Change {
        List(i32, i64, MemoKey, Option<i64>),
        Take(Vec<bool>),
    }

    fn change() -> impl Strategy<Value = Change> {
        prop_oneof![
            3 => (0..3i32, 0..40i64, 0..4usize, proptest::option::of(1..100i64))
                .prop_map(|(p, c, s, r)| Change::List(p, c, s, r)),
            1 => proptest::collection::vec(proptest::bool::weighted(0.3), 0..40)
                .prop_map(Change::Take),
        ]
    }

    proptest! {
        /// Whatever is listed and taken off, in any order: each queue's jobs come in queue
        /// order, each run's ranks rise with it, and every job's shortest runtime to the end
        /// of its run is the one a walk from the end finds.
        #[test]
        fn the_lists_keep_queue_order_and_the_shortest_runtimes(
            changes in proptest::collection::vec(change(), 1..120),
        ) {
            let mut lists = Lists::default();
            let mut model: Vec<Arc<Job>> = Vec::new();
            for (n, c) in changes.into_iter().enumerate() {
                match c {
                    Change::List(priority, created, shape, runtime) => {
                        let job = job(n, priority, created, runtime);
                        lists.insert("cq", Queued { job: Arc::clone(&job), shape, runtime });
                        model.push(job);
                    }
                    Change::Take(mask) => {
                        let gone: Vec<Arc<Job>> = model
                            .iter()
                            .zip(mask.iter().chain(std::iter::repeat(&false)))
                            .filter(|(_, take)| **take)
                            .map(|(j, _)| Arc::clone(j))
                            .collect();
                        lists.remove_all(gone.iter().map(AsRef::as_ref));
                        model.retain(|j| !gone.iter().any(|g| g.id == j.id));
                    }
                }
                model.sort_by(|a, b| a.order_key().cmp(&b.order_key()));
                let listed: Vec<&str> = lists
                    .by_queue
                    .get("cq")
                    .map(|l| l.iter().map(|q| q.job.id.as_str()).collect())
                    .unwrap_or_default();
                let want: Vec<&str> = model.iter().map(|j| j.id.as_str()).collect();
                prop_assert_eq!(listed, want);
                let len = lists.by_queue.get("cq").map_or(0, QueueList::len);
                prop_assert_eq!(len, model.len());
                for j in &model {
                    prop_assert_eq!(lists.queue_of(&j.id), Some("cq"));
                }
                for run in lists.by_queue.values().flat_map(|l| l.runs.values()) {
                    prop_assert!(!run.jobs.is_empty());
                    let mut shortest = i64::MAX;
                    for l in run.jobs.iter().rev() {
                        shortest = shortest.min(l.queued.runtime.unwrap_or(i64::MAX));
                        prop_assert_eq!(l.shortest, shortest);
                    }
                    prop_assert!(run.jobs.iter().zip(run.jobs.iter().skip(1)).all(|(a, b)| a.rank < b.rank));
                }
            }
        }
    }

    /// Jobs listed ahead of one another, over and over, use up the room between ranks: the
    /// ranks are dealt again and the order holds.
    #[test]
    fn ranks_are_dealt_again_when_room_runs_out() {
        let mut lists = Lists::default();
        // Each job is created just after the first one and before all the others listed so
        // far: every one goes between the first and the last listed, halving the room.
        let first = job(0, 0, 0, None);
        lists.insert(
            "cq",
            Queued {
                job: Arc::clone(&first),
                shape: 0,
                runtime: None,
            },
        );
        let last = job(1, 0, 1_000_000, None);
        lists.insert(
            "cq",
            Queued {
                job: last,
                shape: 1,
                runtime: None,
            },
        );
        for (n, t) in (2..200usize).zip(2..200i64) {
            lists.insert(
                "cq",
                Queued {
                    job: job(n, 0, 1_000_000 - t, Some(t)),
                    shape: n % 3,
                    runtime: Some(t),
                },
            );
        }
        let ids: Vec<String> = lists.by_queue["cq"]
            .iter()
            .map(|q| q.job.id.clone())
            .collect();
        let mut want = vec!["ns/job-0".to_owned()];
        want.extend((2..200usize).rev().map(|n| format!("ns/job-{n}")));
        want.push("ns/job-1".to_owned());
        assert_eq!(ids, want);
    }
}
