//! The cycle: each ClusterQueue's waiting jobs served in order against quota and topology,
//! the decisions that change something applied before they are returned, and a cycle that
//! would change nothing skipped.

use std::sync::Arc;

use muster_api::Resources;
use muster_api::cluster_queue::{QueueingStrategy, StopPolicy};

use super::{
    Assignment, Blocked, CycleState, Holding, JobState, MemoKey, Options, REASONS_REFRESH_SECONDS,
    Scheduler, assign, blocked_reason, book, order, waiting,
};
use crate::decision::{Admitted, Decision, PendingReason};
use crate::job::{Job, JobId};
use crate::quota::{PreparedUsage, QuotaFit};

/// Per pod set of a job, the flavors it could take in one queue, prepared for measuring
/// ([`Scheduler::borrowing_plan`]).
pub(super) type BorrowingPlan = Vec<Vec<PreparedUsage>>;

/// Where a job the cycle serves is listed: its ClusterQueue, its shape (the memo's key, as
/// its queue's list keeps it beside the job, so that the cycle need not look the job up to
/// learn it) and its place among the jobs of its queue served so far (1: the first).
pub(super) struct Place<'a> {
    pub(super) cq: &'a str,
    pub(super) shape: MemoKey,
    pub(super) position: u32,
}

impl Scheduler {
    /// How many cycles ran in full, not skipped as quiet (see [`Scheduler::step`]). While it
    /// stays the same, [`Scheduler::waiting`] gives the same answer: nothing a waiting job's
    /// position or reason depends on has changed. A caller that keeps what `waiting` gave
    /// can skip asking again.
    pub fn cycles_run(&self) -> u64 {
        self.cycles_run
    }

    /// One scheduling cycle at time `now` (seconds) with every waiting job's explanation:
    /// [`Scheduler::step`]'s decisions, then [`Scheduler::waiting`]. Costs what waits (one
    /// decision per waiting job); a caller that needs only what changed calls `step`.
    pub fn cycle(&mut self, now: i64) -> Vec<Decision> {
        let mut out = self.step(now);
        out.extend(self.waiting());
        out
    }

    /// One scheduling cycle at time `now` (seconds): the decisions that change something —
    /// admit, provision, preempt, evict — applied to the scheduler's state before it returns
    /// (so the next cycle, or one that runs while the caller is still carrying them out,
    /// cannot promise the same quota or nodes twice). Why the others wait:
    /// [`Scheduler::waiting`].
    ///
    /// A cycle costs what it must look at, not what waits. Each ClusterQueue's jobs are kept
    /// in order between cycles; within a cycle, once a job shape has failed, every later job
    /// of that shape that respects the same reservations is passed over without a look (it
    /// would fail the same way). And after a cycle that changed nothing, the next one returns
    /// at once unless something came in from outside (a job, a finish, a node), time reached
    /// the first moment at which the same inputs could decide differently (a running job's
    /// expected end, a job being evicted, a preemptor that waits because waiting was
    /// cheaper), or the reasons are [`REASONS_REFRESH_SECONDS`] old. A skipped cycle decides
    /// exactly what a full one would; only the wording of a reason may lag (time alone can
    /// make a job respect a reservation it would have finished before, which changes the
    /// figures it is told but never lets it start).
    pub fn step(&mut self, now: i64) -> Vec<Decision> {
        if let Some((generation, until)) = self.quiet
            && generation == self.generation
            && now < until
            && now < self.found.now.saturating_add(REASONS_REFRESH_SECONDS)
        {
            return Vec::new();
        }
        self.cycles_run += 1;
        let nominated_before: Vec<JobId> = self.nominations.keys().cloned().collect();
        let mut out = Vec::new();
        self.drain_stopped(&mut out);
        self.start_provisioned(now, &mut out);
        let mut state = CycleState::default();
        // Preemptors first: what they evicted for is theirs.
        let (nominated, positions) = self.serve_nominated(now, &mut state, &mut out);

        let lists = std::mem::take(&mut self.lists);
        let mut walk = order::Walk::new(&lists.by_queue, &positions, &self.quota, |cq| {
            self.queues
                .get(cq)
                .is_none_or(|c| c.spec.stop_policy != StopPolicy::None)
        });
        while let Some(next) = self.next_job(&mut walk, &state, &nominated) {
            let job = Arc::clone(&next.queued.job);
            let before = out.len();
            let at = Place {
                cq: next.cq,
                shape: next.queued.shape,
                position: next.position,
            };
            self.serve(&at, &job, now, &mut state, &mut out);
            walk.served(&next);
            if out[before..].iter().any(|d| {
                matches!(
                    d,
                    Decision::Admit(_)
                        | Decision::Provision { .. }
                        | Decision::Pending {
                            reason: PendingReason::Preempting { .. },
                            ..
                        }
                )
            }) {
                // Usage changed (or was held for a preemptor): shares, borrowing and the
                // release timeline may have too.
                walk.usage_changed(&next);
                self.release_after(&mut state, &out[before..], now);
            }
        }
        self.release_holds(&mut state);
        self.cluster.commit();
        self.lists = lists;
        self.settle_cycle(now, out, state, &nominated_before)
    }

    /// The release order kept for reservations, after `decided` changed usage: an admission
    /// alone puts its job in place (see [`super::reserve::ReleaseOrder::admitted`]); anything else
    /// (capacity bought, victims told to leave, quota held for a preemptor) drops it, to be
    /// built again when a reservation is next searched for.
    fn release_after(&self, state: &mut CycleState, decided: &[Decision], now: i64) {
        let [Decision::Admit(a)] = decided else {
            state.release = None;
            return;
        };
        let holding = self.jobs.get(&a.job).and_then(|e| match &e.state {
            JobState::Admitted(h) => Some((e, h)),
            _ => None,
        });
        let end = holding.and_then(|(e, h)| book::expected_end(&e.job, h));
        let add = |book: &mut crate::quota::QuotaBook| {
            if let Some(booking) = holding.and_then(|(e, _)| e.booking.as_deref()) {
                book.add_booking(booking);
            }
        };
        let patched = state
            .release
            .as_mut()
            .and_then(std::rc::Rc::get_mut)
            .is_some_and(|order| {
                let booking = holding.and_then(|(e, _)| e.booking.as_ref());
                order.admitted((&a.job, booking), end, now, add)
            });
        if !patched {
            state.release = None;
        }
        #[cfg(debug_assertions)]
        if let Some(order) = &state.release {
            let rebuilt = self.release_order(now, true).whole(self);
            debug_assert!(
                order.taken().starts(&rebuilt) && order.whole(self) == rebuilt,
                "the release order after admitting {} is not the one rebuilt",
                a.job
            );
            for (t, book) in order.books() {
                debug_assert!(
                    book.same_usage(&self.book_at(&self.release_order(now, true), t)),
                    "the quota book at {t} after admitting {} is not the one rebuilt",
                    a.job
                );
            }
        }
    }

    /// The end of a cycle: waiting jobs come off the lists when they start, what the cycle
    /// found about the rest is kept for [`Scheduler::waiting`], and, when it changed
    /// nothing, how long the next may be skipped. Returns the decisions that change
    /// something.
    pub(super) fn settle_cycle(
        &mut self,
        now: i64,
        out: Vec<Decision>,
        state: CycleState,
        nominated_before: &[JobId],
    ) -> Vec<Decision> {
        let gone: Vec<Arc<Job>> = out
            .iter()
            .filter_map(|d| match d {
                Decision::Admit(a) => self.jobs.get(&a.job),
                Decision::Provision { job, .. } => self.jobs.get(job),
                _ => None,
            })
            .map(|e| Arc::clone(&e.job))
            .collect();
        self.lists.remove_all(gone.iter().map(AsRef::as_ref));
        let mut found = waiting::Found {
            now,
            untils: state.reservations.iter().map(|r| r.until).collect(),
            memo: state.memo,
            strict_head: state.strict_head,
            ..waiting::Found::default()
        };
        let mut decisions = Vec::new();
        for d in out {
            match d {
                // Nobody asks why they wait: the words are not kept either.
                Decision::Pending { .. } if !self.reasons_told => {}
                Decision::Pending {
                    job,
                    position,
                    reason,
                    eta,
                } => {
                    if position == 1
                        && let Some(cq) = self.lists.queue_of(&job)
                    {
                        found.heads.insert(cq.to_owned(), reason.clone());
                    }
                    found.served.insert(job, (reason, eta));
                }
                other => decisions.push(other),
            }
        }
        self.found = found;
        let changed = !decisions.is_empty() || !self.nominations.keys().eq(nominated_before.iter());
        self.quiet = if changed || state.timed {
            None
        } else {
            Some((self.generation, self.decisions_hold_until(now)))
        };
        decisions
    }

    /// The first time at which the same inputs could decide differently than at `now`: when
    /// a running job reaches its expected end (the release timeline, and so reservations,
    /// move from then on), or at once while a job is being evicted (it is on the timeline at
    /// `now`).
    pub(super) fn decisions_hold_until(&self, now: i64) -> i64 {
        if !self.evicting.is_empty() {
            return now;
        }
        self.ends
            .first_key_value()
            .map_or(i64::MAX, |((end, _), _)| (*end).max(now))
    }

    /// Decides for one job, the next in the cycle's order, listed at `at`.
    pub(super) fn serve(
        &mut self,
        at: &Place<'_>,
        job: &Arc<Job>,
        now: i64,
        state: &mut CycleState,
        out: &mut Vec<Decision>,
    ) {
        let &Place {
            cq,
            shape,
            position,
        } = at;
        let pending = |reason, eta| waiting(job, position, reason, eta);
        let Some(spec) = self.queues.get(cq).map(|q| &q.spec) else {
            return;
        };
        let told = self.reasons_told;
        if spec.stop_policy != StopPolicy::None {
            if told {
                out.push(pending(
                    PendingReason::QueueStopped {
                        cluster_queue: cq.to_owned(),
                    },
                    None,
                ));
            }
            return;
        }
        if let Some(head) = state.strict_head.get(cq) {
            if told {
                out.push(pending(
                    PendingReason::BlockedByQueueHead { head: head.clone() },
                    None,
                ));
            }
            return;
        }
        let strict = spec.queueing_strategy == QueueingStrategy::StrictFIFO;
        let ends = job.expected_runtime.map(|r| now.saturating_add(r));
        let respected = state
            .reservations
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.ends_before(ends))
            .fold(0u64, |mask, (i, _)| mask | (1u64 << (i % 64)));
        let known = state.memo.get(&shape).and_then(|seen| {
            seen.iter()
                .find(|(mask, _)| mask & !respected == 0)
                .map(|(_, reason)| reason)
        });
        if let Some(reason) = known {
            if strict {
                state.strict_head.insert(cq.to_owned(), job.id.clone());
            }
            if told {
                out.push(pending(reason.clone(), None));
            }
            return;
        }
        if self.provisions_always(cq)
            && let Some(d) = self.provision(cq, job, now)
        {
            // Fresh capacity for every job: it does not take today's nodes.
            out.push(d);
            return;
        }
        let opts = Options {
            place: true,
            no_borrow: false,
        };
        let blocked = match self.try_assign(cq, job, opts, &state.reservations, now) {
            Ok(assignment) => {
                let booking = assignment.booking.as_deref();
                for r in &mut state.reservations {
                    r.admitted(&self.quota, (cq, &assignment.usage), booking, ends);
                }
                self.admit(cq, job, assignment, now, out);
                return;
            }
            Err(blocked) => blocked,
        };
        if strict {
            state.strict_head.insert(cq.to_owned(), job.id.clone());
        }
        self.on_blocked(
            cq,
            job,
            position,
            now,
            blocked,
            (shape, respected),
            state,
            out,
        );
    }

    /// A job that cannot start as things are: provision, preempt, or wait (taking the
    /// queue's reservation when it is the first to be blocked).
    #[expect(
        clippy::too_many_arguments,
        reason = "the cycle's context, passed down once"
    )]
    pub(super) fn on_blocked(
        &mut self,
        cq: &str,
        job: &Arc<Job>,
        position: u32,
        now: i64,
        blocked: Blocked,
        key: (MemoKey, u64),
        state: &mut CycleState,
        out: &mut Vec<Decision>,
    ) {
        let pending = |reason, eta| waiting(job, position, reason, eta);
        // A queue that buys capacity waits for it rather than evicting running work, unless
        // it allows preemption while provisioning: then preemption is tried first.
        let preempt_first = self
            .queues
            .get(cq)
            .and_then(|q| q.spec.provisioning.as_ref())
            .is_some_and(|p| p.preempt_while_provisioning);
        if let Blocked::Topology { .. } = &blocked
            && !preempt_first
            && let Some(d) = self.provision(cq, job, now)
        {
            out.push(d);
            state.strict_head.remove(cq);
            return;
        }
        let deferred_since = self.deferred.remove(&job.id);
        let mut deferral = None;
        if let Some((victims, leaving, assignment)) =
            self.preempt(cq, job, &state.reservations, now, &mut state.candidates)
        {
            deferral = self.weigh(
                cq,
                job,
                &victims,
                &leaving,
                &blocked,
                deferred_since.map(|(since, _)| since),
                now,
                state,
            );
            if deferral.is_none() {
                self.evict_for(job, &victims, &leaving, out);
                self.nominate(cq, job, &victims, &assignment, state);
                out.push(pending(PendingReason::Preempting { victims }, None));
                return;
            }
        }
        if let Some(d) = &deferral {
            self.deferred.insert(job.id.clone(), (d.since, d.until));
        }
        if let Blocked::Topology { .. } = &blocked
            && preempt_first
            && let Some(d) = self.provision(cq, job, now)
        {
            out.push(d);
            state.strict_head.remove(cq);
            return;
        }
        let reservable = matches!(blocked, Blocked::Quota(_) | Blocked::Topology { .. });
        let reservation =
            if reservable && !state.reserved_by.contains(cq) && state.reservations.len() < 64 {
                state.reserved_by.insert(cq.to_owned());
                match state.weighed.take() {
                    Some((weighed, found)) if weighed == job.id => Some(found),
                    _ => {
                        let release = std::rc::Rc::clone(state.release.get_or_insert_with(|| {
                            std::rc::Rc::new(self.release_order(now, true))
                        }));
                        Some(self.reserve(cq, job, &blocked, now, &release))
                    }
                }
            } else {
                None
            };
        let mut reason = blocked_reason(cq, blocked);
        if self.reasons_told {
            self.locate_limit(cq, &mut reason, state, now);
        }
        let mut eta = None;
        let remembered = match reservation {
            Some(Some(r)) => {
                eta = r.until;
                state.reservations.push(r);
                false
            }
            // The first blocked job of its queue, with nothing to reserve: a later identical
            // job may still make the reservation, so it is not remembered.
            Some(None) => false,
            None => true,
        };
        // What an identical job would be told: why it cannot start, not this job's own
        // weighing. Untold, the memo keeps the reason only to rule identical jobs out.
        let (key, respected) = key;
        if !self.reasons_told {
            if remembered {
                state.remember(key, respected, reason, now);
            }
            return;
        }
        if remembered {
            state.remember(key, respected, reason.clone(), now);
        }
        match deferral {
            // Its start as the weighing sees it: only jobs about to leave free capacity.
            Some(d) => {
                let starts = d.starts;
                out.push(pending(
                    PendingReason::PreemptionDeferred(Box::new(d)),
                    Some(starts),
                ));
            }
            None => out.push(pending(reason, eta)),
        }
    }

    /// What [`Scheduler::needs_borrowing`] measures for a job of `usage` (its shape's quota
    /// usage per pod set) in `cq`: per pod set, the flavors of the group covering it, in
    /// order, each with its names looked up. `None`: the job could not start in `cq` at all
    /// (no such queue, or a pod set no group covers). Holds while the queues and their quotas
    /// do, so a cycle builds it once per queue and shape and measures it after every admission.
    pub(super) fn borrowing_plan(&self, cq: &str, usage: &[Resources]) -> Option<BorrowingPlan> {
        let spec = &self.queues.get(cq)?.spec;
        usage
            .iter()
            .map(|usage| {
                let group = assign::covering_group(spec, usage)?;
                Some(
                    group
                        .flavors
                        .iter()
                        .map(|f| self.quota.prepare(cq, &f.name, usage))
                        .collect(),
                )
            })
            .collect()
    }

    /// Whether a job of `plan` ([`Scheduler::borrowing_plan`]) could start only by borrowing:
    /// some pod set has no flavor with room within the queue's nominal quota, but one with
    /// room in the cohort.
    pub(super) fn needs_borrowing(&self, plan: Option<&BorrowingPlan>) -> bool {
        let Some(plan) = plan else {
            return false;
        };
        let mut borrows = false;
        for flavors in plan {
            let mut fits = QuotaFit::Short;
            for prepared in flavors {
                match self.quota.fit_prepared(prepared) {
                    QuotaFit::Fits => {
                        fits = QuotaFit::Fits;
                        break;
                    }
                    QuotaFit::Borrows => fits = QuotaFit::Borrows,
                    QuotaFit::Short => {}
                }
            }
            match fits {
                QuotaFit::Fits => {}
                QuotaFit::Borrows => borrows = true,
                QuotaFit::Short => return false,
            }
        }
        borrows
    }

    /// HoldAndDrain: every job holding a stopped queue's quota is evicted.
    pub(super) fn drain_stopped(&mut self, out: &mut Vec<Decision>) {
        let draining: Vec<String> = self
            .queues
            .iter()
            .filter(|(_, q)| q.spec.stop_policy == StopPolicy::HoldAndDrain)
            .map(|(n, _)| n.clone())
            .collect();
        if draining.is_empty() {
            return;
        }
        let mut holders: Vec<JobId> = self.holders.iter().map(ToString::to_string).collect();
        holders.sort_unstable();
        for id in holders {
            let Some(entry) = self.jobs.get(&id) else {
                continue;
            };
            if let JobState::Admitted(h) | JobState::Provisioning(h) = entry.state.clone()
                && draining.contains(&h.cluster_queue)
            {
                out.push(Decision::Evict {
                    job: id.clone(),
                    reason: format!(
                        "ClusterQueue {} has stopPolicy HoldAndDrain",
                        h.cluster_queue
                    ),
                });
                self.set_state(&id, JobState::Evicting(h));
            }
        }
    }

    pub(super) fn admit(
        &mut self,
        cq: &str,
        job: &Job,
        assignment: Assignment,
        now: i64,
        out: &mut Vec<Decision>,
    ) {
        #[cfg(debug_assertions)]
        let by_names = {
            let mut book = self.quota.clone();
            for (flavor, usage) in &assignment.usage {
                book.add(cq, flavor, usage);
            }
            book
        };
        match &assignment.booking {
            Some(booking) => self.quota.add_booking(booking),
            None => {
                for (flavor, usage) in &assignment.usage {
                    self.quota.add(cq, flavor, usage);
                }
            }
        }
        #[cfg(debug_assertions)]
        debug_assert!(
            self.quota.same_usage(&by_names),
            "{} booked by number as by names",
            job.id
        );
        let told = if self.placements_told {
            assignment.pod_sets.clone()
        } else {
            Vec::new()
        };
        let holding = Holding {
            cluster_queue: cq.to_owned(),
            since: Some(now),
            pod_sets: assignment.pod_sets,
        };
        self.set_state(&job.id, JobState::Admitted(holding));
        out.push(Decision::Admit(Admitted {
            job: job.id.clone(),
            cluster_queue: cq.to_owned(),
            pod_sets: told,
            borrowing: assignment.borrowing,
        }));
    }

    /// Whether `cq` buys fresh capacity for every job (`mode: Always`).
    pub(super) fn provisions_always(&self, cq: &str) -> bool {
        self.queues
            .get(cq)
            .and_then(|q| q.spec.provisioning.as_ref())
            .is_some_and(|p| p.mode == muster_api::cluster_queue::ProvisioningMode::Always)
    }

    /// Quota fits but no nodes do: when the queue provisions for this job, book its quota and
    /// decide to buy capacity.
    pub(super) fn provision(&mut self, cq: &str, job: &Job, now: i64) -> Option<Decision> {
        if job.provisioned {
            return None;
        }
        let policy = self.queues.get(cq)?.spec.provisioning.clone()?;
        if !policy.managed_resources.is_empty() {
            let total = job.total_requests();
            if !policy
                .managed_resources
                .iter()
                .any(|r| !total.get(r).is_zero())
            {
                return None;
            }
        }
        let assignment = self
            .try_assign(
                cq,
                job,
                Options {
                    place: false,
                    no_borrow: false,
                },
                &[],
                now,
            )
            .ok()?;
        for (flavor, usage) in &assignment.usage {
            self.quota.add(cq, flavor, usage);
        }
        let flavors = assignment
            .pod_sets
            .iter()
            .map(|p| (p.name.clone(), p.flavor.clone()))
            .collect();
        self.set_state(
            &job.id,
            JobState::Provisioning(Holding {
                cluster_queue: cq.to_owned(),
                since: Some(now),
                pod_sets: assignment.pod_sets,
            }),
        );
        Some(Decision::Provision {
            job: job.id.clone(),
            cluster_queue: cq.to_owned(),
            flavors,
        })
    }
}
