//! How many pod failures a batch Job or a JobSet survives before it fails, and so how many
//! gang restarts the queue entry Muster makes for it allows. The workload's own controller
//! fails it past its limits; the entry should neither give up sooner (and leave the workload
//! suspended while it would have run on) nor count on more than the workload takes.

use k8s_openapi::api::batch::v1::JobSpec;

use crate::jobset::JobSet;

/// The `backoffLimit` the API server gives a Job that does not set one (a JobSet's Job
/// templates are not defaulted; their child Jobs are, when made).
pub const JOB_DEFAULT_BACKOFF_LIMIT: i32 = 6;

/// How many pod failures a Job survives: its `backoffLimit` (6 when unset, unbounded when
/// only a per-index limit is set, as the API server defaults it), and no more than its
/// `backoffLimitPerIndex`, since every failure may fall on one index. A Job whose
/// `podFailurePolicy` ignores some failures (pods disrupted by a drain or preemption, say)
/// may survive any number: unbounded.
pub fn job_pod_failures_survived(spec: &JobSpec) -> i32 {
    let ignores = spec
        .pod_failure_policy
        .as_ref()
        .is_some_and(|p| p.rules.iter().any(|r| r.action == "Ignore"));
    if ignores {
        return i32::MAX;
    }
    let per_index = spec.backoff_limit_per_index;
    let whole = spec.backoff_limit.unwrap_or(if per_index.is_some() {
        i32::MAX
    } else {
        JOB_DEFAULT_BACKOFF_LIMIT
    });
    whole.min(per_index.unwrap_or(i32::MAX)).max(0)
}

/// How many gang restarts the queue entry of a workload that survives `survived` pod failures
/// allows. Most restarts follow a failed pod, which the workload counts too, so it gets at
/// least as many as it would take itself (one that takes twenty pod failures is not given up
/// after Muster's default of three and left suspended). Some follow no failure at all (a node
/// lost before its pod was bound, a pods-ready timeout), so it gets no fewer than Muster's
/// default either: restarting more often than the workload allows costs nothing, as its own
/// `Failed` condition ends the entry whenever it comes.
pub(crate) fn gang_restarts(survived: i32) -> i32 {
    survived.max(crate::gpujob::DEFAULT_BACKOFF_LIMIT)
}

/// Failure-policy actions after which a JobSet goes on without counting a restart against
/// `maxRestarts`.
const UNCOUNTED_RESTARTS: [&str; 2] = ["RestartJobSetAndIgnoreMaxRestarts", "RecreateJob"];

/// How many pod failures the JobSet survives for certain: a child Job fails past its own limit
/// ([`job_pod_failures_survived`]), and the JobSet then restarts every child Job afresh up to
/// `failurePolicy.maxRestarts` times before it fails. The weakest child Job still to run
/// bounds it (failures may all fall on it). `None` when no child Job is left to run. A
/// failure-policy rule that restarts the JobSet or recreates a child Job without counting it
/// against `maxRestarts` makes it unbounded; one that fails the JobSet sooner is left to the
/// JobSet's own `Failed` condition.
pub fn jobset_pod_failures_survived(jobset: &JobSet) -> Option<i32> {
    let weakest = jobset
        .spec
        .replicated_jobs
        .iter()
        .filter(|rj| jobset.replicas_left(rj) > 0)
        .map(|rj| {
            rj.template
                .spec
                .as_ref()
                .map_or(JOB_DEFAULT_BACKOFF_LIMIT, |spec| {
                    job_pod_failures_survived(spec)
                })
        })
        .min()?;
    let policy = jobset.spec.failure_policy.as_ref();
    if policy.is_some_and(|p| {
        p.rules
            .iter()
            .any(|r| UNCOUNTED_RESTARTS.contains(&r.action.as_str()))
    }) {
        return Some(i32::MAX);
    }
    let restarts = policy.and_then(|p| p.max_restarts).unwrap_or(0).max(0);
    // (weakest + 1) failures end each of the (restarts + 1) attempts; one fewer is safe.
    let survived = (i64::from(weakest) + 1) * (i64::from(restarts) + 1) - 1;
    Some(i32::try_from(survived).unwrap_or(i32::MAX))
}
