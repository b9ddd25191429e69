//! A job whose pods are still terminating: it waits for them, and says why when they are on
//! nodes that stopped reporting.

use muster_api::ObjectRef;
use muster_api::gpujob::{GpuJobStatus, PendingReason, PendingReasonKind};

use super::{Phase, Step};
use crate::action::{Action, Note};
use crate::holding::Pods;
use crate::index::Index;
use crate::unreachable;

/// Its pods (of this attempt, or of the one it was evicted from) are still terminating
/// (`waiting`): it holds nodes through them, not quota, and is not released again until they
/// are gone, so that two attempts never run at once. Pods on a node that has not been Ready
/// for [`unreachable::UNREACHABLE_WARNING_SECONDS`] may keep it waiting for ever (a
/// partition, or a machine that is down): the status says so, with a Warning event naming the
/// pods, the nodes and the fix.
pub(super) fn step(
    index: &Index,
    key: &ObjectRef,
    status: &GpuJobStatus,
    waiting: &Pods<'_>,
    now_s: i64,
) -> Step {
    let mut step = Step::new(Phase::Evicting);
    let stranded = unreachable::stranded(index, waiting);
    let Some(warn_at) = unreachable::warn_at(&stranded) else {
        return step;
    };
    if now_s < warn_at {
        step.until = Some(warn_at);
        return step;
    }
    let message = unreachable::message(&stranded);
    let eta = status
        .pending_reason
        .as_ref()
        .filter(|r| {
            matches!(
                r.kind,
                PendingReasonKind::Backoff | PendingReasonKind::NodeUnreachable
            )
        })
        .and_then(|r| r.eta.clone());
    let mut next = status.clone();
    next.pending_reason = Some(PendingReason {
        start_range: None,
        kind: PendingReasonKind::NodeUnreachable,
        message: message.clone(),
        eta,
        since: None,
    });
    if next == *status {
        return step;
    }
    step.act(Action::JobStatus {
        job: key.to_owned(),
        status: Box::new(next),
        event: Some(Note::warning("NodeUnreachable", message)),
    })
}
