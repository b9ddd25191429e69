//! The pass step that keeps every labelled Job's, JobSet's and pod group's queue entry (see
//! [`crate::workload`]): the entry made when the workload arrives (a pod group once whole), and the workload held
//! suspended while the entry holds no admission — what a release wrote into its templates put
//! back, what its owner edits read into the entry again. The entry's own step (in
//! [`crate::job`]) releases, evicts and finishes it.

use std::collections::BTreeMap;

use muster_api::GpuJob;

use crate::action::{Action, Note};
use crate::index::Index;
use crate::ledger::Ledger;
use crate::workload::{Run, WorkloadPatch, WorkloadRef, workload_of};

pub use crate::workload::INVALID_ANNOTATION;

/// Labelled Jobs whose queue entry needed no write when last looked at, with the versions of
/// the Job and the entry then read. What [`keep`] writes for a Job reads only the Job, its
/// entry and whether a write of the entry is in flight (which skips it), so while both
/// versions stand the answer is still none, and the Job is passed over. Every pass looked at
/// every waiting Job's template before: with 15,000 batch Jobs that was half the
/// controller's CPU. JobSets and pod groups also read their pods, and are always looked at.
#[derive(Clone, Debug, Default)]
pub(crate) struct Quiet(BTreeMap<WorkloadRef, (String, String)>);

impl Quiet {
    /// Forgets the Jobs that are gone, once more are remembered than exist.
    fn prune(&mut self, index: &Index) {
        if self.0.len() > index.workloads.len() {
            self.0
                .retain(|key, _| index.workloads.contains_key(&key.key));
        }
    }
}

/// The versions [`Quiet`] compares: the Job's and its entry's, when the run is a Job whose
/// entry exists and both have one.
fn versions(
    index: &Index,
    run: Run<'_>,
    entry: &muster_api::ObjectRef,
) -> Option<(String, String)> {
    let Run::Job(job) = run else {
        return None;
    };
    let job_version = job.metadata.resource_version.clone()?;
    let entry_version = index.jobs.get(entry)?.metadata.resource_version.clone()?;
    Some((job_version, entry_version))
}

/// The writes that keep every labelled Job's entry and hold its Job, for jobs with no write in
/// flight: each names the entry it is for. Jobs `quiet` names at their current versions are
/// passed over; those that need nothing now are remembered there.
pub(crate) fn keep(index: &Index, ledger: &Ledger, quiet: &mut Quiet) -> Vec<Action> {
    let mut actions = Vec::new();
    quiet.prune(index);
    for (key, run) in crate::workload::runs(index) {
        let entry_key = key.entry();
        if ledger.has_any_write(&entry_key) {
            continue;
        }
        let read = versions(index, run, &entry_key);
        if read.is_some() && quiet.0.get(&key) == read.as_ref() {
            continue;
        }
        let before = actions.len();
        keep_one(index, &key, run, &mut actions);
        match read {
            Some(read) if actions.len() == before => {
                quiet.0.insert(key, read);
            }
            _ => {
                quiet.0.remove(&key);
            }
        }
    }
    actions
}

/// The writes that keep the entry of one workload (see [`keep`]).
fn keep_one(index: &Index, key: &WorkloadRef, run: Run<'_>, actions: &mut Vec<Action>) {
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
            return;
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
        return;
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
        return;
    }
    if reported.is_some() && run.entry().is_ok() {
        actions.push(patch(
            serde_json::json!({"metadata": {"annotations": {INVALID_ANNOTATION: null}}}),
            None,
        ));
        return;
    }
    let settling = crate::workload::settling(index, run, &entry_key);
    actions.extend(waiting(entry, run, settling, &key, reported));
}

/// The writes that hold the workload of `entry` while the entry holds no admission:
/// suspended, what a release wrote put back once its controller has taken in the suspension,
/// and its owner's edits read again (see [`keep`]). `settling`: the workload may still have
/// pods of its last run (see [`crate::workload::settling`]).
fn waiting(
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
    let holds = entry
        .status
        .as_ref()
        .is_some_and(|s| s.admission.is_some() || s.provisioning_request.is_some());
    let ended = run.finished().is_some();
    if holds || ended {
        return Vec::new();
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
                    let mut held = entry.spec.clone();
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
