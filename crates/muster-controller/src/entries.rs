//! The pass step that keeps every labelled Job's, JobSet's and pod group's queue entry (see
//! [`crate::workload`]): the entry made when the workload arrives (a pod group once whole), and the workload held
//! suspended while the entry holds no admission — what a release wrote into its templates put
//! back, what its owner edits read into the entry again. The entry's own step (in
//! [`crate::job`]) releases, evicts and finishes it.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use muster_api::gpujob::GpuJobPhase;
use muster_api::workload::JOB_ENTRY_PREFIX;
use muster_api::{GpuJob, ObjectRef};

use crate::action::{Action, Note};
use crate::index::Index;
use crate::ledger::Ledger;
use crate::workload::{Run, WorkloadPatch, WorkloadRef, workload_of};

pub use crate::workload::INVALID_ANNOTATION;

/// Which labelled Jobs the next pass looks at. What [`keep`] writes for a Job reads only the
/// Job, its queue entry and whether a write of the entry is in flight, so a Job that needed
/// nothing needs nothing until the Job or its entry changes — and the index names both
/// changes by the entry (see [`crate::index::Index::take_changed_jobs`]). The Jobs looked at
/// are those, the ones that last needed a write or had one in flight (their write may fail
/// and change nothing), and every Job in a state's first pass. Every pass looked at every
/// waiting Job's template before: with 15,000 batch Jobs that was half the controller's CPU.
/// JobSets and pod groups, which also read their pods, are looked at in every pass.
#[derive(Clone, Debug)]
pub(crate) struct Revisit {
    /// Look at every Job (the state's first pass).
    all: bool,
    /// The Jobs to look at whatever changed.
    jobs: BTreeSet<ObjectRef>,
}

impl Default for Revisit {
    fn default() -> Revisit {
        Revisit {
            all: true,
            jobs: BTreeSet::new(),
        }
    }
}

/// The labelled Jobs whose entry's name is among `changed` (jobs whose objects changed): the
/// Jobs that changed, and those whose entry did.
pub(crate) fn jobs_changed(changed: &BTreeSet<ObjectRef>) -> BTreeSet<ObjectRef> {
    changed
        .iter()
        .filter_map(|entry| {
            let name = entry.name().strip_prefix(JOB_ENTRY_PREFIX)?;
            Some(ObjectRef::new(entry.namespace(), name))
        })
        .collect()
}

/// How many queue entries one pass makes at most. A pass hands its writes out as permits
/// allow and the next pass waits until the last has one (see `crate::run`), so a flood of new
/// workloads (15,000 Jobs within a minute and a half, say) had each pass make thousands of
/// entries, and every release decided meanwhile waited behind them: admissions all but
/// stopped until the last entry was made. The rest are made by the passes after, at the same
/// pace the API server takes them, while admissions go on between.
pub const ENTRIES_PER_PASS: usize = 256;

/// The writes that keep every labelled Job's entry and hold its Job, for jobs with no write in
/// flight: each names the entry it is for. `changed`: the Jobs that changed, or whose entry
/// did, since the last pass (see [`jobs_changed`] and [`Revisit`]). At most
/// [`ENTRIES_PER_PASS`] entries are made, of the workloads that queue first: the highest
/// priority, then the oldest (an entry's place in its queue is its own creation time, so
/// workloads of one priority are queued in the order they arrived).
pub(crate) fn keep(
    index: &Index,
    ledger: &Ledger,
    changed: BTreeSet<ObjectRef>,
    revisit: &mut Revisit,
    now_s: i64,
) -> Vec<Action> {
    let mut actions = Vec::new();
    let mut making = Making {
        entries: BTreeMap::new(),
        now_s,
    };
    let mut jobs = std::mem::take(&mut revisit.jobs);
    if std::mem::replace(&mut revisit.all, false) {
        jobs.extend(index.workloads.keys().cloned());
    } else {
        jobs.extend(changed);
    }
    for key in jobs {
        let Some(job) = index.workloads.get(&key) else {
            continue;
        };
        let created = job.metadata.creation_timestamp.as_ref();
        let key = WorkloadRef::job(key);
        if !making.look(index, ledger, &key, Run::Job(job), created, &mut actions) {
            // Looked at again next pass, whatever changes: its write may fail, or wait for
            // its turn among the entries to make.
            revisit.jobs.insert(key.key);
        }
    }
    for (key, jobset) in &index.jobsets {
        let key = WorkloadRef::jobset(key.clone());
        let created = jobset.metadata.creation_timestamp.as_ref();
        making.look(
            index,
            ledger,
            &key,
            Run::JobSet(jobset),
            created,
            &mut actions,
        );
    }
    for (key, group) in &index.pod_groups {
        let run = Run::PodGroup(key.name(), group);
        let key = WorkloadRef::pod_group(key.clone());
        making.look(index, ledger, &key, run, None, &mut actions);
    }
    making.made(&mut actions);
    actions
}

/// The entries a pass would make, each with the writes that go with it (a Job that arrived
/// running is suspended beside its entry's creation), in the order they queue.
struct Making {
    /// (priority, highest first; the workload's creation, oldest first; the entry) → the
    /// writes.
    entries: BTreeMap<(Reverse<i32>, i64, ObjectRef), Vec<Action>>,
    /// The pass's time, seconds: some holds last until a time (see [`keep_one`]).
    now_s: i64,
}

impl Making {
    /// Looks at one workload (see [`settled`]): its writes go to `actions`, but for one whose
    /// entry is to be made, which wait in `self` for [`Making::made`]. Whether it is settled.
    fn look(
        &mut self,
        index: &Index,
        ledger: &Ledger,
        key: &WorkloadRef,
        run: Run<'_>,
        created: Option<&Time>,
        actions: &mut Vec<Action>,
    ) -> bool {
        let mut writes = Vec::new();
        let settled = settled(index, ledger, key, run, self.now_s, &mut writes);
        let priority = writes.iter().find_map(|a| match a {
            Action::CreateEntry { entry, .. } => Some(priority_of(index, entry)),
            _ => None,
        });
        match priority {
            Some(priority) => {
                let created = created.map_or(i64::MAX, |t| t.0.as_second());
                self.entries
                    .insert((Reverse(priority), created, key.entry()), writes);
            }
            None => actions.extend(writes),
        }
        settled
    }

    /// The writes of the first [`ENTRIES_PER_PASS`] entries to make, onto `actions`.
    fn made(self, actions: &mut Vec<Action>) {
        for writes in self.entries.into_values().take(ENTRIES_PER_PASS) {
            actions.extend(writes);
        }
    }
}

/// The priority `entry` queues at ([`muster_api::GpuJobSpec::priority_with`]; 0 for a class
/// that does not exist, as admission reads such an entry as invalid anyway).
fn priority_of(index: &Index, entry: &GpuJob) -> i32 {
    entry
        .spec
        .priority_with(|class| index.priority_classes.get(class).copied())
        .unwrap_or(0)
}

/// Looks at one workload: adds the writes its entry needs to `actions`, and says whether it
/// is settled (no write in flight, none to make, and none held back until a time).
fn settled(
    index: &Index,
    ledger: &Ledger,
    key: &WorkloadRef,
    run: Run<'_>,
    now_s: i64,
    actions: &mut Vec<Action>,
) -> bool {
    if ledger.has_any_write(&key.entry()) {
        return false;
    }
    let before = actions.len();
    let timed = keep_one(index, key, run, now_s, actions);
    actions.len() == before && !timed
}

/// The writes that keep the entry of one workload (see [`keep`]). Whether a write is held
/// back until a time rather than a change (see [`crate::holding::held_by_untaken_release`]),
/// so that the workload is looked at again.
fn keep_one(
    index: &Index,
    key: &WorkloadRef,
    run: Run<'_>,
    now_s: i64,
    actions: &mut Vec<Action>,
) -> bool {
    let key = key.clone();
    let entry_key = key.entry();
    let patch = |patch: serde_json::Value, event: Option<Note>| Action::PatchWorkload {
        job: entry_key.clone(),
        workload: key.clone(),
        patch: Box::new(WorkloadPatch::Merge(patch)),
        event,
    };
    let reported = run.reported();
    let Some(entry) = index.jobs.get(&entry_key) else {
        if !run.is_whole() {
            // A pod group waits, gated, for the rest of its pods.
            return false;
        }
        if run.finished().is_some() {
            // Ended before it was queued (or after its entry was deleted): nothing to queue,
            // and the index no longer keeps a finished Job's template to read one from.
            return false;
        }
        match run.entry() {
            Ok(entry) => {
                actions.push(Action::CreateEntry {
                    job: entry_key.clone(),
                    entry: Box::new(entry),
                });
                if !run.is_suspended() {
                    actions.push(patch(serde_json::json!({"spec": {"suspend": true}}), None));
                }
            }
            Err(errors) => {
                let message = joined(&errors);
                // Held until it is fixed; said once per problem.
                if reported != Some(&message) || !run.is_suspended() {
                    actions.push(patch(
                        serde_json::json!({
                            "metadata": {"annotations": {INVALID_ANNOTATION: message}},
                            "spec": {"suspend": true},
                        }),
                        Some(Note::warning("InvalidWorkload", message)),
                    ));
                }
            }
        }
        return false;
    };
    if !run.is_entry(entry) {
        // The entry of a workload of the same name deleted before this one is on its way
        // out (the garbage collector deletes it): the workload is held meanwhile. A GpuJob
        // of this name that is no workload's entry stays: the workload is held, and told
        // why.
        let kind = key.kind;
        let taken = (workload_of(entry).as_ref() != Some(&key)).then(|| {
            format!(
                "metadata.name: GpuJob {entry_key} is not this {kind}'s queue entry, but has the name the entry takes; rename the {kind} or that GpuJob"
            )
        });
        match taken {
            Some(message) if reported != Some(&message) || !run.is_suspended() => {
                actions.push(patch(
                    serde_json::json!({
                        "metadata": {"annotations": {INVALID_ANNOTATION: message}},
                        "spec": {"suspend": true},
                    }),
                    Some(Note::warning("InvalidWorkload", message)),
                ));
            }
            None if !run.is_suspended() => {
                actions.push(patch(serde_json::json!({"spec": {"suspend": true}}), None));
            }
            _ => {}
        }
        return false;
    }
    if reported.is_some() && run.entry().is_ok() {
        actions.push(patch(
            serde_json::json!({"metadata": {"annotations": {INVALID_ANNOTATION: null}}}),
            None,
        ));
        return false;
    }
    // A release its Job's controller may have taken in unseen keeps its quota for a while
    // (see `crate::holding::held_by_untaken_release`), and the template that names it stays
    // as it is meanwhile.
    let untaken = crate::holding::held_by_untaken_release(index, entry, now_s).is_some();
    let settling = untaken || crate::workload::settling(index, run, &entry_key);
    actions.extend(waiting(index, entry, run, settling, &key, reported));
    untaken
}

/// The writes that hold the workload of `entry` while the entry holds no admission:
/// suspended, what a release wrote put back once its controller has taken in the suspension,
/// and its owner's edits read again (see [`keep`]); while it holds quota for capacity being
/// bought, only suspended. `settling`: the workload may still have
/// pods of its last run (see [`crate::workload::settling`]); `index` gives the whole entry
/// back for a write of its spec.
fn waiting(
    index: &Index,
    entry: &GpuJob,
    run: Run<'_>,
    settling: bool,
    key: &WorkloadRef,
    reported: Option<&String>,
) -> Vec<Action> {
    let entry_key = key.entry();
    let patch = |patch: WorkloadPatch, event: Option<Note>| Action::PatchWorkload {
        job: entry_key.clone(),
        workload: key.clone(),
        patch: Box::new(patch),
        event,
    };
    let mut out = Vec::new();
    let status = entry.status.as_ref();
    let holds = status.is_some_and(|s| s.admission.is_some() || s.provisioning_request.is_some());
    // Placed: its admission names the nodes its pods go to, which a release records.
    // Quota reserved while capacity is bought names none.
    let placed = status
        .and_then(|s| s.admission.as_ref())
        .is_some_and(|a| a.pod_sets.iter().any(|p| !p.nodes.is_empty()));
    let ended = run.finished().is_some();
    // An entry that succeeded before its Job says so (its one pod succeeded: see
    // `crate::workload::succeeds_with_its_pod`) leaves the Job to its controller, which
    // marks it complete; suspended now, it would be held for nothing. One that Muster failed
    // (its gang restarted past the backoff limit) left its workload suspended, and that is
    // all: the index keeps an ended entry without its templates, so there is nothing to put
    // back from, and a patch built from none is refused (a Job's template must keep its
    // selector's labels) — every pass, for ever.
    let finished = entry
        .status
        .as_ref()
        .is_some_and(|s| matches!(s.phase, Some(GpuJobPhase::Succeeded | GpuJobPhase::Failed)));
    if ended || finished || placed {
        return Vec::new();
    }
    if holds {
        // Capacity is being bought for it: its workload stays held until a release places
        // it. One found running carries a release the entry never recorded (its writer cut
        // off between the workload's patch and the entry's status): held again, its pods
        // go, and once the workload has settled the bought capacity's release comes again.
        // Left running, it would never settle, and the release would wait on it for ever.
        if !run.is_suspended() {
            out.push(patch(WorkloadPatch::suspend(), None));
        }
        return out;
    }
    if !run.is_suspended() {
        // Arrived running, or released by a write the entry's status never showed: held
        // at once. Its template can be put back only once its pods are gone.
        out.push(patch(WorkloadPatch::suspend(), None));
    } else if settling {
        // Neither put back nor read again until its controller has taken in the suspension.
    } else if run.carries_release() {
        // What a release wrote is Muster's to take back.
        if !run.templates_as_recorded(entry) {
            out.push(patch(run.put_back(entry), None));
        }
    } else if run.edited_since(entry) || entry.spec.suspend {
        // Its owner changed it while it waited: the entry reads it again. An edit that
        // cannot be queued holds the entry (`suspend`) and tells the workload why, until it
        // is fixed.
        match run.entry() {
            Ok(fresh) => out.push(Action::UpdateEntry {
                job: entry_key.clone(),
                spec: Box::new(fresh.spec),
            }),
            Err(errors) => {
                if !entry.spec.suspend {
                    // Written whole: the index keeps a batch Job's entry without its
                    // templates.
                    let mut held = index.whole_job(entry_key.as_str(), entry).spec.clone();
                    held.suspend = true;
                    out.push(Action::UpdateEntry {
                        job: entry_key.clone(),
                        spec: Box::new(held),
                    });
                }
                let message = joined(&errors);
                if reported != Some(&message) {
                    out.push(patch(
                        WorkloadPatch::Merge(serde_json::json!({
                            "metadata": {"annotations": {INVALID_ANNOTATION: message}},
                        })),
                        Some(Note::warning("InvalidWorkload", message)),
                    ));
                }
            }
        }
    }
    out
}

/// Every problem of a Job that cannot be queued, each with its field, in one line.
fn joined(errors: &[muster_api::validation::FieldError]) -> String {
    errors
        .iter()
        .map(|e| format!("{}: {}", e.path, e.message))
        .collect::<Vec<_>>()
        .join("; ")
}
