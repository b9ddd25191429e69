//! The visibility API's answers from a controller's state: waiting lists in admission's
//! order with each job's place in its ClusterQueue and LocalQueue, names hidden outside the
//! caller's namespaces, queue figures, free blocks and one job's story.

mod support;

use muster_api::visibility::HIDDEN;
use muster_api::{GpuJob, LocalQueue, ObjectRef};
use muster_controller::plan::plan;
use muster_controller::state::State;
use muster_controller::visibility::{self, Scope, Unanswered};
use support::{at, cluster, job, land_all};

/// `job` moved to `namespace` (its LocalQueue there has the same name).
fn in_namespace(mut job: GpuJob, namespace: &str) -> GpuJob {
    job.metadata.namespace = Some(namespace.to_owned());
    job
}

/// 16 GPUs of quota: team-a/run (2 pods of 8) holds them all; team-b/x, team-a/y and
/// team-b/z (1 pod each) wait behind it, in that order.
fn busy_cluster() -> State {
    let mut state = cluster(
        16,
        vec![
            job("run", 2, 0),
            in_namespace(job("x", 1, 1), "team-b"),
            job("y", 1, 2),
            in_namespace(job("z", 1, 3), "team-b"),
        ],
    );
    state.apply(support::namespace("team-b"));
    let mut lq: LocalQueue = support::local_queue();
    lq.metadata.namespace = Some("team-b".to_owned());
    state.apply(lq);
    for t in 10..14 {
        let pass = plan(&mut state, at(t));
        land_all(&mut state, &pass.actions, t);
    }
    state
}

fn team_a(namespace: &str) -> bool {
    namespace == "team-a"
}

#[test]
fn nothing_is_answered_before_the_first_pass() {
    let state = cluster(16, vec![job("a", 1, 0)]);
    let answer = visibility::pending_jobs(&state, &Scope::Namespace("team-a".into()), &|_| true);
    assert_eq!(answer, Err(Unanswered::NoPassYet));
    assert_eq!(
        visibility::cluster_queues(&state),
        Err(Unanswered::NoPassYet)
    );
}

#[test]
fn a_cluster_queue_s_list_shows_every_place_and_names_only_where_the_caller_may_look() {
    let state = busy_cluster();
    let list = visibility::pending_jobs(&state, &Scope::ClusterQueue("research".into()), &team_a)
        .unwrap_or_else(|e| unreachable!("{e:?}"));
    let shown: Vec<(u32, String, Option<u32>)> = list
        .items
        .iter()
        .map(|j| (j.position, j.display_name(), j.local_queue_position))
        .collect();
    assert_eq!(
        shown,
        [
            (1, HIDDEN.to_owned(), None),
            (2, "team-a/y".to_owned(), Some(1)),
            (3, HIDDEN.to_owned(), None),
        ]
    );
    assert_eq!(list.hidden, 2);
    let hidden = &list.items[0];
    assert!(hidden.message.is_none() && hidden.local_queue.is_none() && hidden.owner.is_none());
    // Size, priority and reason stay: counts are everyone's.
    assert_eq!((hidden.pods, &*hidden.reason), (1, "QuotaShort"));
    let mine = &list.items[1];
    assert_eq!(mine.local_queue.as_deref(), Some("research"));
    assert_eq!(
        list.flavors.get("research").map(Vec::as_slice),
        Some(&["h100".to_owned()][..])
    );
    assert!(
        mine.message.as_deref().is_some_and(|m| m.contains("quota")),
        "{mine:?}"
    );
    // A LocalQueue's list: its own jobs, their places in both queues.
    let theirs = visibility::pending_jobs(
        &state,
        &Scope::LocalQueue("team-b".into(), "research".into()),
        &|_| true,
    )
    .unwrap_or_else(|e| unreachable!("{e:?}"));
    let places: Vec<(u32, Option<u32>)> = theirs
        .items
        .iter()
        .map(|j| (j.position, j.local_queue_position))
        .collect();
    assert_eq!(places, [(1, Some(1)), (3, Some(2))]);
    // Every queue's in one answer, in the same order.
    let all = visibility::pending_jobs(&state, &Scope::All, &team_a)
        .unwrap_or_else(|e| unreachable!("{e:?}"));
    assert_eq!(all.items, list.items);
    assert_eq!(all.hidden, 2);
    assert_eq!(
        visibility::pending_jobs(&state, &Scope::ClusterQueue("nope".into()), &|_| true),
        Err(Unanswered::NotFound("ClusterQueue nope".into()))
    );
}

#[test]
fn queue_figures_blocks_and_a_story_agree_with_the_pass() {
    let state = busy_cluster();
    let queues = visibility::cluster_queues(&state).unwrap_or_else(|e| unreachable!("{e:?}"));
    let research = &queues.items[0];
    assert_eq!((research.waiting, research.admitted), (3, 1));
    let gpu = &research.usage[0];
    assert_eq!(
        [gpu.nominal, gpu.used, gpu.borrowed, gpu.lent].map(|n| n.to_string()),
        ["16", "16", "0", "0"]
    );

    let blocks = visibility::blocks(&state, &team_a).unwrap_or_else(|e| unreachable!("{e:?}"));
    let full: Vec<&str> = blocks
        .items
        .iter()
        .filter(|b| b.path.len() == 1 && b.free_gpus < 1.0)
        .map(|b| b.path[0].as_str())
        .collect();
    assert_eq!(full.len(), 1, "one block holds the 2-pod gang: {blocks:?}");
    let holder = blocks
        .items
        .iter()
        .find(|b| b.path == [full[0]])
        .map(|b| b.jobs.clone())
        .unwrap_or_default();
    assert_eq!(holder.keys().collect::<Vec<_>>(), ["team-a/run"]);
    let hidden = visibility::blocks(&state, &|_| false).unwrap_or_else(|e| unreachable!("{e:?}"));
    assert!(
        hidden
            .items
            .iter()
            .all(|b| b.jobs.keys().all(|k| k == HIDDEN))
    );

    let story = visibility::story(&state, &ObjectRef::new("team-a", "y"), &team_a)
        .unwrap_or_else(|e| unreachable!("{e:?}"));
    assert_eq!(story.ahead_count, 1);
    assert_eq!(story.ahead[0].display_name(), HIDDEN);
    assert_eq!(story.holders.len(), 1);
    assert_eq!(story.holders[0].job, "team-a/run");
    assert!(story.waiting.is_some_and(|w| w.position == 2));
    // Another team's job is not there for this caller.
    assert_eq!(
        visibility::story(&state, &ObjectRef::new("team-b", "x"), &team_a),
        Err(Unanswered::NotFound("GpuJob team-b/x".into()))
    );
}

#[test]
fn the_same_state_gives_the_same_answer_byte_for_byte() {
    let state = busy_cluster();
    let scope = Scope::Namespace("team-a".into());
    let a = serde_json::to_string(&visibility::pending_jobs(&state, &scope, &team_a).ok());
    let b = serde_json::to_string(&visibility::pending_jobs(&state, &scope, &team_a).ok());
    assert_eq!(a.ok(), b.ok());
}

/// The list the API writes (each job made as it is written) is the list built whole, byte
/// for byte, for every scope and for a caller who sees part of the cluster.
#[test]
fn the_written_list_is_the_built_list() {
    let state = busy_cluster();
    let scopes = [
        Scope::All,
        Scope::ClusterQueue("research".into()),
        Scope::Namespace("team-a".into()),
        Scope::Namespace("team-b".into()),
    ];
    for scope in scopes {
        for may_see in [&team_a as &dyn Fn(&str) -> bool, &|_: &str| true] {
            let built = visibility::pending_jobs(&state, &scope, may_see);
            let written = visibility::pending_job_listing(&state, &scope, may_see);
            let built = built.map(|l| serde_json::to_string(&l).ok());
            let written = written.map(|l| serde_json::to_string(&l).ok());
            assert!(
                matches!(&built, Ok(Some(text)) if text.contains("\"items\":[{")),
                "{built:?}"
            );
            assert_eq!(built, written, "{scope:?}");
            let read: Option<muster_api::visibility::PendingJobList> = written
                .ok()
                .flatten()
                .and_then(|text| serde_json::from_str(&text).ok());
            assert_eq!(read, visibility::pending_jobs(&state, &scope, may_see).ok());
        }
    }
}

#[test]
fn a_queue_lends_what_its_cohort_borrows_of_its_unused_quota() {
    // research (16 GPUs, idle) and other (no quota of its own) share cohort `pool`: other's
    // job borrows 8 GPUs, all of them research's to lend.
    let mut borrower = job("b", 1, 0);
    borrower.spec.queue_name = "other".to_owned();
    let mut state = cluster(16, vec![borrower]);
    let mut research = support::cluster_queue(16);
    research.spec.cohort = Some("pool".to_owned());
    state.apply(research);
    let mut other = support::cluster_queue(0);
    other.metadata.name = Some("other".to_owned());
    other.spec.cohort = Some("pool".to_owned());
    state.apply(other);
    let mut lq = support::local_queue();
    lq.metadata.name = Some("other".to_owned());
    lq.spec.cluster_queue = "other".to_owned();
    state.apply(lq);
    for t in 10..13 {
        let pass = plan(&mut state, at(t));
        land_all(&mut state, &pass.actions, t);
    }
    let queues = visibility::cluster_queues(&state).unwrap_or_else(|e| unreachable!("{e:?}"));
    let figures = |name: &str| {
        queues
            .items
            .iter()
            .find(|q| q.name == name)
            .map(|q| {
                let u = &q.usage[0];
                [u.nominal, u.used, u.borrowed, u.lent].map(|n| n.to_string())
            })
            .unwrap_or_default()
    };
    assert_eq!(figures("other"), ["0", "8", "8", "0"]);
    assert_eq!(figures("research"), ["16", "0", "0", "8"]);
    // The cohort is listed, a root with no quota of its own: it neither lends nor borrows.
    let pool: Vec<_> = queues
        .cohorts
        .iter()
        .map(|c| {
            let usage: Vec<_> = c.usage.iter().map(|u| (u.borrowed, u.lent)).collect();
            (c.name.as_str(), c.parent.as_deref(), usage)
        })
        .collect();
    assert_eq!(pool, [("pool", None, vec![(0.0, 0.0)])]);
}
