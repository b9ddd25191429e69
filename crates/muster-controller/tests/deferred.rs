//! Waiting jobs' status writes go through a queue apart from the writes that move work, as
//! the run loop sends them: a queued write never holds its job back, is replaced in its turn
//! by a newer one, and is dropped when an admission or the job's own status makes it moot.

mod support;

use muster_api::gpujob::{GpuJobPhase, PendingReasonKind};
use muster_controller::plan::{Action, plan};
use muster_controller::state::State;
use support::{at, cluster, job, land, land_all, with_phase};

/// Queues every waiting job's status write among `actions`, as the run loop does, and
/// returns the rest (the writes that go out at once).
fn defer_all(index: &mut State, actions: Vec<Action>) -> Vec<Action> {
    actions.into_iter().filter_map(|a| index.defer(a)).collect()
}

fn released_jobs(actions: &[Action]) -> Vec<&str> {
    actions
        .iter()
        .filter(|a| matches!(a, Action::Release { .. }))
        .filter_map(|a| a.job().map(muster_api::ObjectRef::as_str))
        .collect()
}

fn statuses_written(actions: &[Action]) -> Vec<&str> {
    actions
        .iter()
        .filter(|a| matches!(a, Action::JobStatus { .. }))
        .filter_map(|a| a.job().map(muster_api::ObjectRef::as_str))
        .collect()
}

/// Every pod of the released gang among `actions` reports `phase`.
fn report(index: &mut State, actions: &[Action], phase: &str) {
    for action in actions {
        if let Action::Release { gang, .. } = action {
            for pod in &gang.pods {
                index.apply(with_phase(pod.clone(), phase, phase == "Running"));
            }
        }
    }
}

/// The queued writes, sent and landed in the order the sender takes them; their jobs.
fn send_all(index: &mut State, now: i64) -> Vec<(String, Action)> {
    let mut sent = Vec::new();
    while let Some((_, action)) = index.next_deferred() {
        sent.push((
            action.job().map(ToString::to_string).unwrap_or_default(),
            action,
        ));
    }
    for (_, action) in &sent {
        land(index, action, now);
    }
    sent
}

fn position(action: &Action) -> Option<i32> {
    match action {
        Action::JobStatus { status, .. } => status.queue_position,
        _ => None,
    }
}

#[test]
fn a_job_admitted_before_its_queued_status_is_sent_never_gets_that_write() {
    // Quota for one 2-pod gang: a runs, b waits.
    let mut index = cluster(16, vec![job("a", 2, 0), job("b", 2, 1)]);
    let pass = plan(&mut index, at(10));
    let now = defer_all(&mut index, pass.actions);
    assert_eq!(released_jobs(&now), ["team-a/a"]);
    assert!(statuses_written(&now).is_empty(), "{now:#?}");
    assert_eq!(
        index.deferred_len(),
        1,
        "b's first pending status is queued"
    );
    land_all(&mut index, &now, 10);

    // a finishes before the sender got to b's write: b is released in the pass that writes
    // a's end (sent once the end has landed), and its queued write is gone (the release
    // writes the whole status).
    report(&mut index, &now, "Succeeded");
    let pass = plan(&mut index, at(20));
    assert_eq!(
        released_jobs(&pass.actions),
        ["team-a/b"],
        "{:#?}",
        pass.actions
    );
    assert_eq!(index.deferred_len(), 0);
    assert!(index.next_deferred().is_none());
    let now = defer_all(&mut index, pass.actions);
    land_all(&mut index, &now, 20);
    let b = index
        .index()
        .job("team-a/b")
        .and_then(|j| j.status.clone())
        .unwrap_or_default();
    assert_eq!(b.phase, Some(GpuJobPhase::Admitted), "{b:#?}");
}

#[test]
fn a_queued_write_is_replaced_in_its_turn_and_writes_go_oldest_first() {
    let mut index = cluster(16, vec![job("a", 2, 0), job("b", 2, 1), job("c", 2, 2)]);
    let pass = plan(&mut index, at(10));
    let now = defer_all(&mut index, pass.actions);
    land_all(&mut index, &now, 10);
    assert_eq!(index.deferred_len(), 2);

    // z was created before b and c: it goes ahead of them, and their figures move before
    // their first writes were sent.
    index.apply(job("z", 2, -5));
    let pass = plan(&mut index, at(11));
    let now = defer_all(&mut index, pass.actions);
    assert!(
        statuses_written(&now).is_empty(),
        "replacing a queued write sends nothing: {now:#?}"
    );
    assert_eq!(
        index.deferred_len(),
        3,
        "b and c replaced in place, z added"
    );
    land_all(&mut index, &now, 11);

    let sent = send_all(&mut index, 12);
    let order: Vec<&str> = sent.iter().map(|(j, _)| j.as_str()).collect();
    assert_eq!(order, ["team-a/b", "team-a/c", "team-a/z"]);
    let positions: Vec<Option<i32>> = sent.iter().map(|(_, a)| position(a)).collect();
    assert_eq!(
        positions,
        [Some(2), Some(3), Some(1)],
        "each write is the latest"
    );
    assert_eq!(index.deferred_len(), 0);
}

#[test]
fn a_queued_write_the_status_no_longer_needs_is_dropped_and_holds_nothing() {
    let mut index = cluster(16, vec![job("a", 2, 0), job("b", 2, 1)]);
    let pass = plan(&mut index, at(10));
    let first = defer_all(&mut index, pass.actions);
    land_all(&mut index, &first, 10);
    // In the cycle that admitted a, b was second; from the next pass on it is first, and
    // its queued write says so before it goes.
    let pass = plan(&mut index, at(11));
    let now = defer_all(&mut index, pass.actions);
    land_all(&mut index, &now, 11);
    let sent = send_all(&mut index, 11);
    assert_eq!(position(&sent[0].1), Some(1));

    // z goes ahead of b; a refresh interval later b's new position is queued...
    index.apply(job("z", 2, -5));
    let pass = plan(&mut index, at(45));
    let now = defer_all(&mut index, pass.actions);
    land_all(&mut index, &now, 45);
    assert_eq!(
        index.deferred_len(),
        2,
        "b's new position and z's first reason"
    );

    // ...and z is deleted before anything was sent: b is back where its status says it is,
    // and z is gone. Neither write goes.
    let z = index.index().job("team-a/z").cloned().unwrap_or_default();
    index.delete(&z);
    let pass = plan(&mut index, at(46));
    let now = defer_all(&mut index, pass.actions);
    land_all(&mut index, &now, 46);
    assert_eq!(index.deferred_len(), 0);
    let b = index
        .index()
        .job("team-a/b")
        .and_then(|j| j.status.clone())
        .unwrap_or_default();
    assert_eq!(b.queue_position, Some(1));
    assert_eq!(
        b.pending_reason.map(|r| r.kind),
        Some(PendingReasonKind::QuotaShort)
    );

    // Nothing is left in flight for b: it is admitted in the pass that writes a's end.
    report(&mut index, &first, "Succeeded");
    let pass = plan(&mut index, at(50));
    assert_eq!(
        released_jobs(&pass.actions),
        ["team-a/b"],
        "{:#?}",
        pass.actions
    );
}
