//! The pass step that keeps every labelled Job's queue entry (see [`crate::workload`]): the
//! entry made when the Job arrives, and the Job held — suspended, its template as the entry
//! recorded it — while the entry holds no admission. The entry's own step (in [`crate::job`])
//! releases, evicts and finishes it.

use muster_api::ObjectRef;

use crate::action::{Action, Note};
use crate::index::Index;
use crate::ledger::Ledger;
use crate::workload::{
    entry_for, entry_name, is_entry_of, is_suspended, may_have_pods, template_is, template_patch,
    workload_of,
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
                    let message = errors
                        .iter()
                        .map(|e| format!("{}: {}", e.path, e.message))
                        .collect::<Vec<_>>()
                        .join("; ");
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
        if reported.is_some() {
            actions.push(patch(
                serde_json::json!({"metadata": {"annotations": {INVALID_ANNOTATION: null}}}),
                None,
            ));
            continue;
        }
        let holds = entry
            .status
            .as_ref()
            .is_some_and(|s| s.admission.is_some() || s.provisioning_request.is_some());
        let ended = crate::workload::finished(run).is_some();
        if holds || ended {
            continue;
        }
        if !is_suspended(run) {
            // Arrived running, or released by a write the entry's status never showed: held
            // at once. Its template can be put back only once its pods are gone.
            actions.push(patch(serde_json::json!({"spec": {"suspend": true}}), None));
        } else if !may_have_pods(run) && !template_is(entry, run, None) {
            actions.push(patch(template_patch(entry, run, None, true), None));
        }
    }
    actions
}
