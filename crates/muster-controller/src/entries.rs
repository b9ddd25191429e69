//! The pass step that keeps every labelled Job's queue entry (see [`crate::workload`]): the
//! entry made when the Job arrives, and the Job held suspended while the entry holds no
//! admission — what a release wrote into its template put back, what its owner edits read
//! into the entry again. The entry's own step (in [`crate::job`]) releases, evicts and
//! finishes it.

use k8s_openapi::api::batch::v1::Job;
use muster_api::{GpuJob, ObjectRef};

use crate::action::{Action, Note};
use crate::index::Index;
use crate::ledger::Ledger;
use crate::workload::{
    carries_release, edited_since, entry_for, entry_name, is_entry_of, is_suspended, may_have_pods,
    template_is, template_patch, workload_of,
};

/// Annotation on a labelled Job that cannot be queued as it stands: every problem, each with
/// the Job's field and the fix. Removed once the Job can be queued.
pub const INVALID_ANNOTATION: &str = "muster.dev/invalid";

/// The writes that keep every labelled Job's entry and hold its Job, for jobs with no write in
/// flight: each names the entry it is for.
pub(crate) fn keep(index: &Index, ledger: &Ledger) -> Vec<Action> {
    let mut actions = Vec::new();
    for (key, run) in &index.workloads {
        let entry_key = ObjectRef::new(key.namespace(), &entry_name(key.name()));
        if ledger.has_any_write(&entry_key) {
            continue;
        }
        let patch = |patch: serde_json::Value, event: Option<Note>| Action::PatchWorkload {
            job: entry_key.clone(),
            workload: key.clone(),
            patch: Box::new(patch),
            event,
        };
        let reported = run
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(INVALID_ANNOTATION));
        let Some(entry) = index.jobs.get(&entry_key) else {
            match entry_for(run) {
                Ok(entry) => {
                    actions.push(Action::CreateEntry {
                        job: entry_key.clone(),
                        entry: Box::new(entry),
                    });
                    if !is_suspended(run) {
                        actions.push(patch(serde_json::json!({"spec": {"suspend": true}}), None));
                    }
                }
                Err(errors) => {
                    let message = joined(&errors);
                    // Held until it is fixed; said once per problem.
                    if reported != Some(&message) || !is_suspended(run) {
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
            continue;
        };
        if !is_entry_of(entry, run) {
            // The entry of a Job of the same name deleted before this one is on its way out
            // (the garbage collector deletes it): the Job is held meanwhile. A GpuJob of this
            // name that is no Job's entry stays: the Job is held, and told why.
            let taken = (workload_of(entry).as_ref() != Some(key)).then(|| {
                format!(
                    "metadata.name: GpuJob {entry_key} is not this Job's queue entry, but has the name the entry takes; rename the Job or that GpuJob"
                )
            });
            match taken {
                Some(message) if reported != Some(&message) || !is_suspended(run) => {
                    actions.push(patch(
                        serde_json::json!({
                            "metadata": {"annotations": {INVALID_ANNOTATION: message}},
                            "spec": {"suspend": true},
                        }),
                        Some(Note::warning("InvalidWorkload", message)),
                    ));
                }
                None if !is_suspended(run) => {
                    actions.push(patch(serde_json::json!({"spec": {"suspend": true}}), None));
                }
                _ => {}
            }
            continue;
        }
        if reported.is_some() && entry_for(run).is_ok() {
            actions.push(patch(
                serde_json::json!({"metadata": {"annotations": {INVALID_ANNOTATION: null}}}),
                None,
            ));
            continue;
        }
        actions.extend(waiting(entry, run, &entry_key, key, reported));
    }
    actions
}

/// The writes that hold the Job of `entry` while the entry holds no admission: suspended, what
/// a release wrote put back once its controller has taken in the suspension, and its owner's
/// edits read again (see [`keep`]).
fn waiting(
    entry: &GpuJob,
    run: &Job,
    entry_key: &ObjectRef,
    key: &ObjectRef,
    reported: Option<&String>,
) -> Vec<Action> {
    let patch = |patch: serde_json::Value, event: Option<Note>| Action::PatchWorkload {
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
    let ended = crate::workload::finished(run).is_some();
    if holds || ended {
        return Vec::new();
    }
    if !is_suspended(run) {
        // Arrived running, or released by a write the entry's status never showed: held
        // at once. Its template can be put back only once its pods are gone.
        out.push(patch(serde_json::json!({"spec": {"suspend": true}}), None));
    } else if may_have_pods(run) {
        // Neither put back nor read again until its controller has taken in the suspension.
    } else if carries_release(run) {
        // What a release wrote is Muster's to take back.
        if !template_is(entry, run, None) {
            out.push(patch(template_patch(entry, run, None, true), None));
        }
    } else if edited_since(entry, run) || entry.spec.suspend {
        // Its owner changed it while it waited: the entry reads it again. An edit that
        // cannot be queued holds the entry (`suspend`) and tells the Job why, until the
        // Job is fixed.
        match entry_for(run) {
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
                        serde_json::json!({
                            "metadata": {"annotations": {INVALID_ANNOTATION: message}},
                        }),
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
