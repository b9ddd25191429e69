//! One forward run of a forecast: the snapshot's scheduler, runtimes drawn for this run, jobs
//! arriving as they recently did, events in virtual time until every waiting job has started
//! or the horizon is reached.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

use foldhash::fast::FixedState;
use muster_admission::{Cluster, CohortTree, Decision, Job, Scheduler};
use muster_topology::{Rng, text_seed, text_seed_joined};

use super::batches::{self, BatchDraws};
use super::{Options, RuntimeModel, Snapshot};

/// The most cycles one instant runs: an eviction frees capacity at once, so the cycle runs
/// again, as the simulator's does.
const CYCLES_PER_INSTANT: usize = 4;

/// What one run found, per waiting job (the snapshot's order). A forecast keeps every run's
/// until the last has run (its ranges are percentiles across them): 32 runs of 15,000 waiting
/// jobs kept as times and flags took 8 MB at the forecast's peak, as seconds after the
/// snapshot 2.4 MB.
#[derive(Clone, Debug, Default)]
pub(super) struct Starts {
    /// When it was first admitted, seconds after the snapshot's moment; [`NOT_STARTED`]: not
    /// within the horizon.
    start: Vec<u32>,
    /// Admission bought capacity for it.
    pub bought: Vec<bool>,
}

/// A job's start in [`Starts`] when it did not start within the horizon.
const NOT_STARTED: u32 = u32::MAX;

/// The furthest a forward run looks ahead, seconds (about 136 years): every start within it
/// is kept in [`Starts`] as seconds after the snapshot.
pub(super) const MAX_HORIZON: i64 = NOT_STARTED as i64 - 1;

impl Starts {
    /// When waiting job `i` first started in the run (`now`: the snapshot's moment);
    /// `None`: not within the horizon.
    pub(super) fn start(&self, i: usize, now: i64) -> Option<i64> {
        let offset = self.start[i];
        (offset != NOT_STARTED).then(|| now + i64::from(offset))
    }
}

/// A seed for `name` in run `sample`: FNV-1a over the name, mixed with the run's seed.
fn seed_of(seed: u64, sample: u32, name: &str) -> u64 {
    mixed(seed, sample, text_seed(name))
}

/// A seed named `named` ([`text_seed`]) in run `sample` of a forecast seeded `seed`.
fn mixed(seed: u64, sample: u32, named: u64) -> u64 {
    named ^ seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(sample).rotate_left(32)
}

/// Jobs that arrive during the run: copies of the snapshot's recent submissions, at the rate
/// they came in ([`Snapshot::recent`], [`Options::arrivals_window`]).
struct Arrivals {
    rng: Rng,
    /// Mean seconds between arrivals; `None`: none arrive.
    mean_gap: Option<f64>,
    /// When the next one is drawn to arrive; it is taken at [`Arrivals::due`].
    next: Option<i64>,
    /// The run's start: arrival ticks count from it.
    from: i64,
    /// Arrivals stop here: the recent rate says nothing about what comes later than the
    /// window it was measured over.
    until: i64,
    /// Arrived so far: (the job's id, index into `recent` it copies). Not the job itself: the
    /// scheduler holds it while it waits or runs and drops it when it ends, and a run that
    /// goes to the horizon takes in as many arrivals as the window saw submissions.
    arrived: Vec<(String, usize)>,
}

impl Arrivals {
    fn new(snapshot: &Snapshot, options: &Options, sample: u32) -> Arrivals {
        let mut rng = Rng::new(seed_of(options.seed, sample, "arrivals"));
        #[expect(
            clippy::cast_precision_loss,
            reason = "counts and seconds far below 2^53"
        )]
        let mean_gap = (options.arrivals_window > 0 && !snapshot.recent.is_empty())
            .then(|| options.arrivals_window as f64 / snapshot.recent.len() as f64);
        let until = snapshot.now.saturating_add(options.arrivals_window);
        let next = mean_gap
            .map(|gap| snapshot.now + gap_seconds(rng.exponential(gap)))
            .filter(|t| *t <= until);
        Arrivals {
            rng,
            mean_gap,
            next,
            from: snapshot.now,
            until,
            arrived: Vec::new(),
        }
    }

    /// The instant the next arrival is taken at: its drawn time on the nearest tick of
    /// [`ARRIVAL_TICK`] seconds from the run's start, never the start itself. Arrivals are
    /// copies of recent submissions at their recent rate, so the second each is drawn at is
    /// noise; taken together, they share the cycles of one instant a tick instead of a cycle
    /// each (a flood of small jobs draws one arrival every second or two, and each would run
    /// a whole cycle over every queue). Rounding to the nearest tick, not up, keeps them
    /// coming at their rate, neither late nor early on average.
    fn due(&self) -> Option<i64> {
        let ticks = |t: i64| ((t - self.from + ARRIVAL_TICK / 2) / ARRIVAL_TICK).max(1);
        self.next.map(|t| self.from + ticks(t) * ARRIVAL_TICK)
    }

    /// The job arriving at `at`: a recent submission's copy under a name of its own.
    fn arrive(&mut self, snapshot: &Snapshot, sample: u32, at: i64) -> Arc<Job> {
        let pick = self.rng.below(snapshot.recent.len());
        let template = &snapshot.recent[pick].job;
        let job = Arc::new(Job {
            id: format!("{}~{sample}.{}", template.id, self.arrived.len()),
            uid: format!("{}~{sample}.{}", template.uid, self.arrived.len()),
            created: at,
            ..(**template).clone()
        });
        self.arrived.push((job.id.clone(), pick));
        // The next is drawn from when this one was drawn to come, not from the tick it was
        // taken at, so that ticks leave the rate as it was.
        let drawn = self.next.unwrap_or(at);
        self.next = self
            .mean_gap
            .map(|gap| drawn + gap_seconds(self.rng.exponential(gap)))
            .filter(|t| *t <= self.until);
        job
    }
}

/// Seconds between the instants arrivals are taken at ([`Arrivals::due`]): a minute, little
/// beside the waits a range is read for (the accuracy checks judge jobs that waited over ten
/// minutes), and few cycles for a fleet that draws arrivals every second.
const ARRIVAL_TICK: i64 = 60;

/// A gap between arrivals in whole seconds, at least one.
#[expect(
    clippy::cast_possible_truncation,
    reason = "gaps in seconds far below i64's range"
)]
fn gap_seconds(gap: f64) -> i64 {
    (gap.ceil() as i64).max(1)
}

/// The run's state between events. Jobs are numbered: the snapshot's running jobs, then its
/// waiting jobs, then those that arrive during the run.
struct Run<'a> {
    snapshot: &'a Snapshot,
    model: &'a RuntimeModel,
    /// What the snapshot's batches showed.
    batches: &'a BatchDraws,
    seed: u64,
    sample: u32,
    /// The chance a job runs at its family's quantile rather than its own.
    correlation: f64,
    /// Job id → number, for the snapshot's jobs: looked up for every decision, never walked
    /// in order, so hashed (with a fixed seed). Made once for every run ([`Start`]).
    index: &'a HashMap<&'a str, usize, FixedState>,
    /// Job id → number, for arrivals.
    arrived_index: HashMap<String, usize, FixedState>,
    arrivals: Arrivals,
    /// (end, job, attempt, runtime in seconds): an eviction bumps the attempt, so its stale
    /// end is ignored; the runtime bounds the step of the clock the end is taken on
    /// ([`coarse`]).
    ends: BinaryHeap<Reverse<(i64, usize, u32, u32)>>,
    attempt: Vec<u32>,
    running: Vec<bool>,
    starts: Starts,
    /// Waiting jobs not started yet.
    left: usize,
}

impl<'a> Run<'a> {
    fn number(&self, id: &str) -> Option<usize> {
        self.index
            .get(id)
            .or_else(|| self.arrived_index.get(id))
            .copied()
    }

    /// Job `i`'s id.
    fn id(&self, i: usize) -> &str {
        let (r, w) = (self.snapshot.running.len(), self.snapshot.waiting.len());
        if i < r {
            &self.snapshot.running[i].job.id
        } else if i < r + w {
            &self.snapshot.waiting[i - r].job.id
        } else {
            &self.arrivals.arrived[i - r - w].0
        }
    }

    /// Job `i`'s runtime keys and announced runtime, as the snapshot holds them (an
    /// arrival's are those of the recent job it copies),
    /// and its batch (an arrival is of none).
    fn runtime_of(&self, i: usize) -> (&'a [String], Option<i64>, Option<&'a str>) {
        let snapshot = self.snapshot;
        let (r, w) = (snapshot.running.len(), snapshot.waiting.len());
        if i < r {
            let job = &snapshot.running[i];
            (&job.keys, job.job.expected_runtime, job.batch.as_deref())
        } else if i < r + w {
            let job = &snapshot.waiting[i - r];
            (&job.keys, job.job.expected_runtime, job.batch.as_deref())
        } else {
            let recent = &snapshot.recent[self.arrivals.arrived[i - r - w].1];
            (&recent.keys, recent.job.expected_runtime, None)
        }
    }

    /// Draws job `i`'s runtime (given it has run `elapsed`) and books its end; a runtime
    /// nothing can tell never ends within the run.
    fn starts_running(&mut self, i: usize, since: i64, elapsed: i64) {
        self.running[i] = true;
        let mut rng = Rng::new(seed_of(self.seed, self.sample, self.id(i)));
        let (keys, announced, batch) = self.runtime_of(i);
        // With probability `correlation` the job runs at its family's quantile of this run
        // (jobs of one family submitted together tend to run alike), else at its own: each
        // job's runtime keeps its distribution, and a family's jobs move together.
        let own = rng.unit();
        let quantile = match keys.first() {
            Some(family) if rng.unit() <= self.correlation => self.family_quantile(family),
            _ => own,
        };
        let beyond = rng.unit();
        // A batch that showed how it runs answers before the family, with its own μ in this
        // run for every job of it, so they move together.
        let from_batch = batch.and_then(|b| {
            let mu = batches::mu_draw(seed_of(self.seed, self.sample, "batches"), b);
            let running = i < self.snapshot.running.len();
            self.batches.draw(b, announced, elapsed, running, mu, own)
        });
        if let Some(total) = from_batch.or_else(|| {
            self.model
                .at_quantile(keys, announced, elapsed, quantile, beyond)
        }) {
            let runtime = u32::try_from(total.max(0)).unwrap_or(u32::MAX);
            self.ends
                .push(Reverse((since + total, i, self.attempt[i], runtime)));
        }
    }

    /// The quantile a family's jobs share in this run.
    fn family_quantile(&self, family: &str) -> f64 {
        // Named `family <family>`: hashed without formatting, once for every job that starts.
        let named = text_seed_joined("family ", family);
        Rng::new(mixed(self.seed, self.sample, named)).unit()
    }

    fn admitted(&mut self, job: &str, now: i64) {
        let Some(i) = self.number(job) else {
            return;
        };
        let r = self.snapshot.running.len();
        if (r..r + self.snapshot.waiting.len()).contains(&i)
            && self.starts.start[i - r] == NOT_STARTED
        {
            // Runs never look past `MAX_HORIZON` (see `forward`), so the offset fits.
            self.starts.start[i - r] =
                u32::try_from(now - self.snapshot.now).unwrap_or(NOT_STARTED - 1);
            self.left -= 1;
        }
        self.starts_running(i, now, 0);
    }

    fn evicted(&mut self, s: &mut Scheduler, job: &str) {
        s.requeue(job);
        if let Some(i) = self.number(job) {
            self.running[i] = false;
            self.attempt[i] += 1;
        }
    }

    /// Runs the cycle at `now` and applies its decisions, again while evictions happen. The
    /// jobs it admits start at `stamp` (see [`stamp`]).
    fn decide(&mut self, s: &mut Scheduler, now: i64, stamp: i64) {
        for _ in 0..CYCLES_PER_INSTANT {
            let mut evicted = false;
            for d in s.step(now) {
                match d {
                    Decision::Admit(a) => self.admitted(&a.job, stamp),
                    Decision::Preempt { victims, .. } => {
                        for v in victims {
                            self.evicted(s, &v);
                            evicted = true;
                        }
                    }
                    Decision::Evict { job, .. } => {
                        self.evicted(s, &job);
                        evicted = true;
                    }
                    Decision::Provision { job, .. } => {
                        let r = self.snapshot.running.len();
                        if let Some(i) = self.number(&job)
                            && (r..r + self.snapshot.waiting.len()).contains(&i)
                        {
                            self.starts.bought[i - r] = true;
                        }
                    }
                    Decision::Pending { .. } => {}
                }
            }
            if !evicted {
                break;
            }
        }
    }

    /// A job arrives at `at`.
    fn arrive(&mut self, s: &mut Scheduler, at: i64) {
        let job = self.arrivals.arrive(self.snapshot, self.sample, at);
        let i = self.running.len();
        self.arrived_index.insert(job.id.clone(), i);
        self.running.push(false);
        self.attempt.push(0);
        s.submit(job);
    }
}

/// The policy a forward run places with: `policy`, else best fit.
fn policy(policy: &str) -> Box<dyn muster_topology::Policy> {
    muster_topology::by_name(policy)
        .or_else(|| muster_topology::by_name("best-fit"))
        .unwrap_or_else(|| unreachable!("best-fit is a policy"))
}

/// Where every forward run of a snapshot starts: the scheduler as the snapshot stands (its
/// nodes, queues, namespaces and what runs) with the waiting jobs that queue at once
/// submitted, and when each of the others queues. Built once and copied for each run:
/// submitting a hundred thousand waiting jobs into their queues' order cost more than a
/// tenth of a run, the same for every run. A run built its own took those jobs after
/// finishing the running jobs drawn to end at the snapshot's time, and a copy has them
/// before: the order of the two changes nothing a cycle reads (a submission files one job,
/// a finish takes another's usage off, and no cycle runs between them).
pub(super) struct Start<'a> {
    scheduler: Scheduler,
    /// Job id → number, for the snapshot's jobs (see [`Run`]): the same for every run.
    numbers: HashMap<&'a str, usize, FixedState>,
    /// (when it queues, its index among the snapshot's waiting jobs), in that order.
    queueing: Vec<(i64, usize)>,
    /// How many of `queueing` are submitted already: those that queue at the snapshot's
    /// time.
    queued: usize,
}

impl<'a> Start<'a> {
    /// The start of every forward run of `snapshot`.
    pub(super) fn new(snapshot: &'a Snapshot, options: &Options) -> Start<'a> {
        let now = snapshot.now;
        let mut cluster = Cluster::new(snapshot.flavors.clone(), &snapshot.nodes);
        for (node, usage) in &snapshot.outside_usage {
            cluster.add_usage(node, usage);
        }
        let mut s = Scheduler::new(
            cluster,
            snapshot.cluster_queues.clone(),
            snapshot.local_queues.clone(),
        )
        .with_cohorts(CohortTree::new(snapshot.cohorts.clone()))
        .with_policy(policy(&options.policy))
        // Forward runs never walk their jobs in order; every start, end and arrival would
        // keep them so. They read only which job an admission started, and never why a job
        // waits.
        .without_id_order()
        .admissions_by_job_alone()
        .reasons_untold();
        for (name, labels) in &snapshot.namespaces {
            s.set_namespace(name, labels.clone());
        }
        for r in &snapshot.running {
            s.restore(Arc::clone(&r.job), r.holding.clone(), r.provisioning);
        }
        // Waiting jobs queue now, or when their backoff ends.
        let mut queueing: Vec<(i64, usize)> = snapshot
            .waiting
            .iter()
            .enumerate()
            .map(|(i, w)| (w.queues_at.unwrap_or(now).max(now), i))
            .collect();
        queueing.sort_unstable();
        let queued = queueing.partition_point(|(t, _)| *t <= now);
        for &(_, i) in &queueing[..queued] {
            s.submit(Arc::clone(&snapshot.waiting[i].job));
        }
        Start {
            scheduler: s,
            numbers: snapshot
                .running
                .iter()
                .map(|r| r.job.id.as_str())
                .chain(snapshot.waiting.iter().map(|w| w.job.id.as_str()))
                .enumerate()
                .map(|(i, id)| (id, i))
                .collect(),
            queueing,
            queued,
        }
    }
}

/// The forward runs' clock gets coarser the further ahead it looks: beyond
/// [`EXACT_AHEAD`], events at most `1 / CLOCK_STEPS` of their distance apart are taken
/// together. A range hours out is minutes wide, so taking a job's end (and the admissions it
/// allows) that little apart costs the range nothing it can show, and a run makes as many
/// cycles fewer as events share a step. What the step's cycle admits starts mid-step
/// ([`stamp`]), not at its end: every job admitted at a step's end would start late by half a
/// step on average, and a job that waits on a chain of others' ends, late by as many.
const CLOCK_STEPS: i64 = 64;

/// A job's end is never taken on a step longer than `1 / RUNTIME_STEPS` of its runtime
/// ([`coarse`]). Short jobs run in chains: a queue of a minute's jobs behind one another
/// starts one as each ends, and taken on a day-ahead step of a quarter of an hour, each would
/// hold its room for that step, not its minute — the queue would drain fifteen times too
/// slowly. Bounded by the runtime, each link of a chain is late by at most a sixteenth of
/// its runtime (on average a 64th: the midpoint [`stamp`]).
const RUNTIME_STEPS: i64 = 16;

/// Seconds ahead within which the forward runs' clock keeps every second.
const EXACT_AHEAD: i64 = 600;

/// The instant an event at `t` is taken at, in a run from `now`: within [`EXACT_AHEAD`],
/// `t`; beyond, `t` rounded up to a step of the largest power of two seconds no longer than
/// `(t - now - EXACT_AHEAD) / CLOCK_STEPS`, nor, when the event is a job's end, than
/// `runtime / RUNTIME_STEPS`. Steps are powers of two on one grid, so events in one step
/// round to the same instant, and an event never to an instant before it.
fn coarse(now: i64, t: i64, runtime: Option<u32>) -> i64 {
    let mut ahead = (t - now - EXACT_AHEAD).max(0) / CLOCK_STEPS;
    if let Some(runtime) = runtime {
        ahead = ahead.min(i64::from(runtime) / RUNTIME_STEPS);
    }
    if ahead <= 1 {
        return t;
    }
    let step = 1_i64 << (63 - ahead.leading_zeros());
    now + (t - now + step - 1) / step * step
}

/// When the jobs admitted at `at`, the instant the events from `first` on were taken at
/// ([`coarse`]), start: halfway between. The events that freed their room came somewhere in
/// that span; taken at its end every time, every start (and the end it leads to, and the
/// starts that waited on that) would come late. Never before `first`, so never before the
/// instant taken before.
fn stamp(first: i64, at: i64) -> i64 {
    first + (at - first) / 2
}

/// Forward run number `sample`, from `start` (built from the same `snapshot`).
pub(super) fn forward<'a>(
    snapshot: &'a Snapshot,
    start: &'a Start<'a>,
    model: &'a RuntimeModel,
    batches: &'a BatchDraws,
    options: &Options,
    sample: u32,
) -> Starts {
    let now = snapshot.now;
    let mut s = start.scheduler.copy_with_policy(policy(&options.policy));
    let total = snapshot.running.len() + snapshot.waiting.len();
    let mut run = Run {
        snapshot,
        batches,
        model,
        seed: options.seed,
        sample,
        // A job takes its family's quantile with probability √ρ: two jobs of the family
        // then share it with probability ρ, which makes their quantiles correlate by ρ.
        correlation: options
            .correlation
            .unwrap_or_else(|| model.correlation())
            .clamp(0.0, 1.0)
            .sqrt(),
        index: &start.numbers,
        arrived_index: HashMap::default(),
        arrivals: Arrivals::new(snapshot, options, sample),
        ends: BinaryHeap::new(),
        attempt: vec![0; total],
        running: vec![false; total],
        starts: Starts {
            start: vec![NOT_STARTED; snapshot.waiting.len()],
            bought: vec![false; snapshot.waiting.len()],
        },
        left: snapshot.waiting.len(),
    };
    for (i, r) in snapshot.running.iter().enumerate() {
        // A job still waiting for bought capacity holds no nodes: when it comes is the
        // autoscaler's to say. One placed on the capacity that came runs like any other.
        if let Some(ran) = r.ran_for(now) {
            run.starts_running(i, now - ran, ran);
        }
    }
    // Those queueing now are submitted already; the rest when their backoff ends.
    let queueing = &start.queueing;
    let mut next_queueing = start.queued;
    let horizon = now.saturating_add(options.horizon.min(MAX_HORIZON));
    let (mut at, mut admitted_at) = (now, now);
    loop {
        while let Some(Reverse((t, i, a, _))) = run.ends.peek().copied()
            && t <= at
        {
            run.ends.pop();
            if a == run.attempt[i] && run.running[i] {
                run.running[i] = false;
                s.finish(run.id(i));
            }
        }
        while let Some(&(t, i)) = queueing.get(next_queueing)
            && t <= at
        {
            s.submit(Arc::clone(&snapshot.waiting[i].job));
            next_queueing += 1;
        }
        while run.arrivals.due().is_some_and(|t| t <= at) {
            run.arrive(&mut s, at);
        }
        run.decide(&mut s, at, admitted_at);
        if run.left == 0 {
            break;
        }
        // The next event, and the runtime of the job it ends (if it is an end).
        let next = [
            // A job started mid-step may end before the step's instant: at the next second.
            run.ends
                .peek()
                .map(|Reverse((t, _, _, runtime))| ((*t).max(at + 1), Some(*runtime))),
            queueing.get(next_queueing).map(|(t, _)| (*t, None)),
            run.arrivals.due().map(|t| (t, None)),
            s.reweigh_at(at).map(|t| (t, None)),
        ]
        .into_iter()
        .flatten()
        .filter(|(t, _)| *t > at)
        .min();
        match next {
            Some((t, runtime)) if t <= horizon => {
                at = coarse(now, t, runtime);
                admitted_at = stamp(t, at);
            }
            _ => break,
        }
    }
    run.starts
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{ARRIVAL_TICK, Arrivals, CLOCK_STEPS, EXACT_AHEAD, coarse};
    use crate::forecast::{Options, RecentJob, Snapshot};

    #[test]
    fn arrivals_come_on_minute_ticks_at_the_rate_they_recently_came() {
        // 600 submissions in the last hour: one every six seconds, for an hour ahead.
        let now = 7_000;
        let snapshot = Snapshot {
            now,
            recent: (0..600)
                .map(|i| RecentJob {
                    job: Arc::new(muster_admission::Job {
                        id: format!("ns/job-{i}"),
                        uid: format!("uid-{i}"),
                        local_queue: "ns/queue".to_owned(),
                        priority: 0,
                        created: now - 3_600 + i,
                        expected_runtime: Some(600),
                        pod_sets: Vec::new(),
                        invalid: None,
                        suspended: false,
                        provisioned: false,
                    }),
                    keys: Arc::from([]),
                })
                .collect(),
            ..Snapshot::default()
        };
        let options = Options {
            arrivals_window: 3_600,
            ..Options::default()
        };
        let mut arrivals = Arrivals::new(&snapshot, &options, 0);
        let mut ticks = Vec::new();
        while let Some(at) = arrivals.due() {
            assert!(at > now && (at - now) % ARRIVAL_TICK == 0, "{at}");
            let drawn = arrivals.next.unwrap_or(at);
            assert!((drawn - at).abs() <= ARRIVAL_TICK / 2 || at == now + ARRIVAL_TICK);
            let job = arrivals.arrive(&snapshot, 0, at);
            assert_eq!(job.created, at);
            ticks.push(at);
        }
        // Each taken at the tick nearest its draw; the count is the rate's (600 expected,
        // Poisson spread about 25), not one a tick.
        assert!((540..=660).contains(&ticks.len()), "{}", ticks.len());
        assert!(ticks.windows(2).all(|w| w[0] <= w[1]));
        assert!(
            ticks
                .last()
                .is_some_and(|t| *t <= now + 3_600 + ARRIVAL_TICK / 2)
        );
    }

    #[test]
    fn the_clock_keeps_every_second_near_now_and_coarsens_in_proportion_further_ahead() {
        let now = 1_000;
        for t in now..=now + EXACT_AHEAD + 2 * CLOCK_STEPS {
            assert_eq!(coarse(now, t, None), t);
        }
        let mut last = now;
        for t in now..now + 30 * 86_400 {
            let c = coarse(now, t, None);
            assert!(c >= t && c >= last, "{t} -> {c} after {last}");
            // Never later than a 64th of the way beyond the exact span.
            assert!(
                (c - t) * CLOCK_STEPS <= (t - now - EXACT_AHEAD).max(0),
                "{t} -> {c}"
            );
            last = c;
        }
        // Events an hour ahead share 32-second steps: fewer instants, fewer cycles.
        assert_eq!(coarse(now, now + 3_590, None), now + 3_616);
        assert_eq!(coarse(now, now + 3_600, None), now + 3_616);
        // A minute's job ending then is taken on a step no longer than a 16th of its
        // runtime (two seconds), an hour's on the distance's 32 seconds.
        assert_eq!(coarse(now, now + 3_591, Some(60)), now + 3_592);
        assert_eq!(coarse(now, now + 3_590, Some(3_600)), now + 3_616);
        // A day ahead, a ten-minute job's end is on a 32-second step, not a 1,024-second one.
        assert_eq!(coarse(now, now + 86_401, None), now + 87_040);
        assert_eq!(coarse(now, now + 86_401, Some(600)), now + 86_432);
    }
}
