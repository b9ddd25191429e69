//! Cohort trees: queues borrow from the nearest cohort that can lend, within every limit on
//! the way up; cohorts hold quota of their own; reclaiming takes from the nearest borrowers
//! first; a broken tree stops nothing but the broken edges. And, on random trees and random
//! scripts, at every instant: no edge's borrowing or lending limit is exceeded, no quota is
//! promised twice, and finishing everything leaves nothing in use.

mod support;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use muster_admission::{CohortTree, Decision, Job, QuotaBook, QuotaCheck, Scheduler};
use muster_api::cluster_queue::{
    FlavorQuotas, PreemptionPolicy, ReclaimWithinCohort, ResourceGroup, ResourceQuota,
};
use muster_api::{Amount, ClusterQueueSpec, CohortSpec, Resources};
use proptest::prelude::*;
use support::*;

/// A cohort under `parent` with `nominal` GPUs of its own and these limits on the edge up.
fn cohort(
    parent: Option<&str>,
    nominal: u64,
    borrowing: Option<u64>,
    lending: Option<u64>,
) -> CohortSpec {
    let quantity = |n: u64| Quantity(n.to_string());
    let has_quota = nominal > 0 || borrowing.is_some() || lending.is_some();
    CohortSpec {
        parent: parent.map(str::to_owned),
        resource_groups: if has_quota {
            vec![ResourceGroup {
                covered_resources: vec![GPU.to_owned()],
                flavors: vec![FlavorQuotas {
                    name: "h100".to_owned(),
                    resources: vec![ResourceQuota {
                        name: GPU.to_owned(),
                        nominal_quota: quantity(nominal),
                        borrowing_limit: borrowing.map(quantity),
                        lending_limit: lending.map(quantity),
                    }],
                }],
            }]
        } else {
            Vec::new()
        },
        fair_sharing: None,
    }
}

fn gpus(n: u64) -> Resources {
    res(&[(GPU, n)])
}

fn reclaiming(spec: ClusterQueueSpec) -> ClusterQueueSpec {
    preempting(
        spec,
        PreemptionPolicy {
            reclaim_within_cohort: ReclaimWithinCohort::Any,
            ..PreemptionPolicy::default()
        },
    )
}

/// org → ml (vision 8, nlp 8) and infra (web 16); `ml` and `infra` as given.
fn department_book(ml: CohortSpec, infra: CohortSpec) -> QuotaBook {
    let queues = [
        (
            "vision",
            cq(Some("ml"), &[("h100", &[(GPU, 8, None, None)])]),
        ),
        ("nlp", cq(Some("ml"), &[("h100", &[(GPU, 8, None, None)])])),
        (
            "web",
            cq(Some("infra"), &[("h100", &[(GPU, 16, None, None)])]),
        ),
    ];
    QuotaBook::with_cohorts(queues.iter().map(|(n, s)| (*n, s)), &departments(ml, infra))
}

/// org, holding nothing, over departments ml and infra, as given.
fn departments(ml: CohortSpec, infra: CohortSpec) -> CohortTree {
    CohortTree::new([
        ("org".to_owned(), cohort(None, 0, None, None)),
        ("ml".to_owned(), ml),
        ("infra".to_owned(), infra),
    ])
}

/// A scheduler over two blocks of two h100 nodes for `queues` (in cohorts ml and infra),
/// under org, with no quota or limits on the departments.
fn department_scheduler(queues: Vec<(&str, ClusterQueueSpec)>) -> Scheduler {
    let department = || cohort(Some("org"), 0, None, None);
    scheduler(&fleet("h100", 2, 2), vec![flavor("h100")], queues)
        .with_cohorts(departments(department(), department()))
}

/// The most GPUs `queue` could take now, by asking the book.
fn room(book: &QuotaBook, queue: &str) -> u64 {
    (0..=64)
        .take_while(|n| !matches!(book.check(queue, "h100", &gpus(*n)), QuotaCheck::Short(_)))
        .last()
        .unwrap_or(0)
}

#[test]
fn a_queue_borrows_from_its_department_then_from_the_organisation() {
    let ml = cohort(Some("org"), 0, None, None);
    let infra = cohort(Some("org"), 0, None, None);
    let mut book = department_book(ml, infra);
    assert_eq!(room(&book, "vision"), 32, "everything in the tree");
    // nlp uses its own 8: vision still reaches web's 16 through the organisation.
    book.add("nlp", "h100", &gpus(8));
    assert_eq!(room(&book, "vision"), 24);
    assert_eq!(book.check("vision", "h100", &gpus(8)), QuotaCheck::Fits);
    assert_eq!(book.check("vision", "h100", &gpus(9)), QuotaCheck::Borrows);
    book.add("vision", "h100", &gpus(20));
    // vision borrows 12, all from infra's web: web is left with 4.
    assert_eq!(room(&book, "web"), 4);
    assert_eq!(book.usage("vision", "h100", GPU).1, Amount::from_units(12));
    book.remove("vision", "h100", &gpus(20));
    book.remove("nlp", "h100", &gpus(8));
    assert!(book.is_idle());
}

/// (lent, borrowed) of each named node, in whole GPUs.
fn flows(book: &QuotaBook) -> BTreeMap<String, (u64, u64)> {
    book.flows("h100", GPU)
        .into_iter()
        .map(|f| (f.name.to_owned(), (f.lent / 1000, f.borrowed / 1000)))
        .collect()
}

#[test]
fn lending_is_counted_against_the_nearest_idle_quota_first() {
    let ml = cohort(Some("org"), 0, None, None);
    let infra = cohort(Some("org"), 0, None, None);
    let mut book = department_book(ml, infra);
    // vision takes 4 beyond its 8: its sibling nlp lends them, not web in the other department.
    book.add("vision", "h100", &gpus(12));
    let f = flows(&book);
    assert_eq!(f["vision"], (0, 4));
    assert_eq!(f["nlp"], (4, 0));
    assert_eq!(f["web"], (0, 0));
    // Beyond all of ml's quota, the rest comes from infra through the organisation.
    book.add("vision", "h100", &gpus(10));
    let f = flows(&book);
    assert_eq!(f["vision"], (0, 14));
    assert_eq!(f["nlp"], (8, 0));
    assert_eq!(
        f["ml"],
        (0, 6),
        "the department borrows 6 from the organisation"
    );
    assert_eq!(f["web"], (6, 0));
    assert_eq!(
        f["infra"],
        (0, 0),
        "infra lends web's quota, none of its own"
    );
}

/// The message of a quota shortfall of `gpus` more GPUs for `queue`.
fn short_message(book: &QuotaBook, queue: &str, gpus_wanted: u64) -> String {
    match book.check(queue, "h100", &gpus(gpus_wanted)) {
        QuotaCheck::Short(mut short) => {
            short.limit = book.limit(queue, "h100", GPU).map(Box::new);
            muster_admission::PendingReason::QuotaShort(short).message()
        }
        other => unreachable!("expected a shortfall, got {other:?}"),
    }
}

#[test]
fn a_shortfall_names_the_level_of_the_tree_that_stops_borrowing() {
    // No limit on the way: the organisation's pool is in use, and it says by whom.
    let mut book = department_book(
        cohort(Some("org"), 0, None, None),
        cohort(Some("org"), 0, None, None),
    );
    book.add("vision", "h100", &gpus(8));
    book.add("web", "h100", &gpus(24));
    assert_eq!(
        short_message(&book, "nlp", 1),
        "not enough quota for nvidia.com/gpu in flavor h100: the job needs 1; the ClusterQueue has 0 of its own left and can borrow 0; cohort org has 0 of the 32 it gives out left: cohort infra uses 8 beyond its own quota"
    );
    // The department's borrowing limit binds before the organisation runs dry.
    let mut book = department_book(
        cohort(Some("org"), 0, Some(4), None),
        cohort(Some("org"), 0, None, None),
    );
    book.add("vision", "h100", &gpus(20));
    assert_eq!(
        short_message(&book, "nlp", 1),
        "not enough quota for nvidia.com/gpu in flavor h100: the job needs 1; the ClusterQueue has 0 of its own left and can borrow 0; cohort ml may take at most 4 beyond what it lends (its borrowingLimit)"
    );
}

#[test]
fn a_limit_that_can_never_bind_is_named_on_its_cohort_and_the_tree_works_as_written() {
    // ml lends at most 100, but only 16 are in it (vision's 8 and nlp's 8).
    let book = department_book(
        cohort(Some("org"), 0, None, Some(100)),
        cohort(Some("org"), 0, None, None),
    );
    assert_eq!(
        book.limit_problem("ml"),
        Some(
            "spec.resourceGroups[0].flavors[0].resources[0].lendingLimit: 100 is more than the 16 of nvidia.com/gpu in flavor h100 within cohort ml (its own quota and what its members lend it), so it never binds; lower it to at most 16 or remove it"
        )
    );
    assert_eq!(book.limit_problem("infra"), None);
    assert_eq!(book.limit_problem("org"), None);
    assert_eq!(room(&book, "web"), 32, "ml lends all it has, as written");
    // Exactly what is in it is a limit that binds when its teams lend more later: no problem.
    let book = department_book(
        cohort(Some("org"), 0, None, Some(16)),
        cohort(Some("org"), 0, None, None),
    );
    assert_eq!(book.limit_problem("ml"), None);
    // Quota in a flavor no queue under the cohort uses: a typo, most likely.
    let mut infra = cohort(Some("org"), 4, Some(2), None);
    infra.resource_groups[0].flavors[0].name = "a100".to_owned();
    let book = department_book(cohort(Some("org"), 0, None, None), infra);
    let problem = book.limit_problem("infra").unwrap_or_default();
    assert!(
        problem.starts_with(
            "spec.resourceGroups[0].flavors[0].resources[0]: no ClusterQueue under cohort infra has quota for nvidia.com/gpu in flavor a100"
        ),
        "{problem}"
    );
}

#[test]
fn a_departments_borrowing_limit_caps_what_all_its_teams_take_from_outside() {
    let ml = cohort(Some("org"), 0, Some(8), None);
    let infra = cohort(Some("org"), 0, None, None);
    let mut book = department_book(ml, infra);
    // 16 of ml's own, and at most 8 more from the organisation.
    assert_eq!(room(&book, "vision"), 24);
    book.add("vision", "h100", &gpus(20));
    // vision took 4 from outside; nlp, in the same department, only the other 4.
    assert_eq!(room(&book, "nlp"), 4);
    assert_eq!(room(&book, "web"), 12);
}

#[test]
fn a_departments_lending_limit_keeps_the_rest_of_its_quota_for_its_own_teams() {
    let ml = cohort(Some("org"), 0, None, None);
    let infra = cohort(Some("org"), 0, None, Some(4));
    let mut book = department_book(ml, infra);
    // infra lends at most 4 of web's 16 to the rest of the organisation.
    assert_eq!(room(&book, "vision"), 20);
    book.add("vision", "h100", &gpus(20));
    assert_eq!(room(&book, "web"), 12, "the 12 infra kept");
    assert_eq!(room(&book, "nlp"), 0);
}

#[test]
fn a_cohorts_own_quota_is_a_pool_its_teams_share_on_top_of_their_own() {
    let ml = cohort(Some("org"), 16, None, Some(0));
    let infra = cohort(Some("org"), 0, None, None);
    let mut book = department_book(ml, infra);
    // ml lends nothing up: its 16 and its teams' 16 are for ml alone, and web's 16 is
    // open to everyone.
    assert_eq!(room(&book, "vision"), 48);
    assert_eq!(room(&book, "web"), 16);
    book.add("vision", "h100", &gpus(40));
    assert_eq!(room(&book, "nlp"), 8);
    assert_eq!(room(&book, "web"), 8);
}

#[test]
fn a_job_waiting_on_a_lent_pool_is_told_whose_job_gives_it_back_first() {
    // org → ml (vision 8, nlp 0) and infra (web 16). vision runs three 8-GPU jobs, 16 GPUs
    // of them web's; nlp's job waits, and is told that v1, ending first, gives 8 back.
    let queues = vec![
        (
            "vision",
            cq(Some("ml"), &[("h100", &[(GPU, 8, None, None)])]),
        ),
        ("nlp", cq(Some("ml"), &[("h100", &[(GPU, 0, None, None)])])),
        (
            "web",
            cq(Some("infra"), &[("h100", &[(GPU, 16, None, None)])]),
        ),
    ];
    let mut s = department_scheduler(queues);
    for (id, runtime) in [("v1", 300), ("v2", 100), ("v3", 200)] {
        s.submit(runs_for(job(id, "vision", 0, 0, 1, 8), runtime));
    }
    assert_eq!(admitted(&cycle(&mut s, 0)).len(), 3);
    s.submit(job("n1", "nlp", 0, 1, 1, 8));
    let decisions = cycle(&mut s, 1);
    let message = reason_of(&decisions, "n1").map(muster_admission::PendingReason::message);
    assert_eq!(
        message.as_deref(),
        Some(
            "not enough quota for nvidia.com/gpu in flavor h100: the job needs 8; the ClusterQueue has 0 of its own left and can borrow 0; cohort org has 0 of the 24 it gives out left: cohort ml uses 16 beyond its own quota; 8 come back when ns/v2 ends (expected at t=100s)"
        )
    );
    // v2 runs past its expected end: when it goes is anyone's guess, so v3 is named.
    let decisions = cycle(&mut s, 150);
    let message = reason_of(&decisions, "n1").map(muster_admission::PendingReason::message);
    assert!(
        message
            .as_deref()
            .is_some_and(|m| m.ends_with("8 come back when ns/v3 ends (expected at t=200s)")),
        "{message:?}"
    );
}

#[test]
fn reclaiming_takes_from_the_nearest_borrower_first() {
    // org → ml (vision 16, nlp 8) and infra (web 8). nlp and web each borrow 8 of vision's
    // quota; vision wants 8 back. nlp, in its own department, gives it back, though web's
    // job has the lower priority.
    let queues = vec![
        (
            "vision",
            reclaiming(cq(Some("ml"), &[("h100", &[(GPU, 16, None, None)])])),
        ),
        ("nlp", cq(Some("ml"), &[("h100", &[(GPU, 8, None, None)])])),
        (
            "web",
            cq(Some("infra"), &[("h100", &[(GPU, 8, None, None)])]),
        ),
    ];
    let mut s = department_scheduler(queues);
    for (id, queue, priority) in [
        ("n1", "nlp", 5),
        ("n2", "nlp", 5),
        ("w1", "web", 1),
        ("w2", "web", 1),
    ] {
        s.submit(job(id, queue, priority, 0, 1, 8));
    }
    assert_eq!(admitted(&cycle(&mut s, 0)).len(), 4);
    s.submit(job("v1", "vision", 0, 1, 1, 8));
    let decisions = cycle(&mut s, 1);
    let victims = preempted(&decisions);
    assert_eq!(victims.len(), 1, "{decisions:?}");
    assert!(victims[0].starts_with('n'), "{victims:?}");
    assert!(admitted(&cycle(&mut s, 2)).contains(&"v1".to_owned()));
}

#[test]
fn reclaiming_never_takes_from_a_borrower_of_another_cohort_tree() {
    // lab-a borrows all of lab-b's 32 GPUs and fills the four nodes. lab is a tree of its
    // own, so vision, which reclaims from anyone in org's tree and has quota to spare, waits
    // for the nodes rather than evicting lab-a's jobs: their quota was never vision's.
    let queues = vec![
        (
            "vision",
            reclaiming(cq(Some("ml"), &[("h100", &[(GPU, 16, None, None)])])),
        ),
        (
            "lab-a",
            cq(Some("lab"), &[("h100", &[(GPU, 0, None, None)])]),
        ),
        (
            "lab-b",
            cq(Some("lab"), &[("h100", &[(GPU, 32, None, None)])]),
        ),
    ];
    let mut s = department_scheduler(queues);
    for id in ["a1", "a2", "a3", "a4"] {
        s.submit(job(id, "lab-a", 0, 0, 1, 8));
    }
    assert_eq!(admitted(&cycle(&mut s, 0)).len(), 4);
    s.submit(job("v1", "vision", 5, 1, 1, 8));
    let decisions = cycle(&mut s, 1);
    assert!(preempted(&decisions).is_empty(), "{decisions:?}");
    assert!(admitted(&decisions).is_empty(), "{decisions:?}");
}

#[test]
fn fair_sharing_judges_a_department_against_its_siblings_before_its_teams() {
    // org holds 24 GPUs; ml (vision, nlp) and infra (web) hold none and share org's fairly,
    // as do ml's two teams. vision runs 16. nlp's job is older than web's, and neither team
    // has borrowed anything: alone, the teams would tie and nlp's would go first. But ml
    // already holds 16 of org's 24 and infra none, so web's job takes the last 8.
    let fair = || {
        Some(muster_api::cluster_queue::FairSharing {
            weight: Some(Quantity("1".to_owned())),
        })
    };
    let team = |cohort: &str| ClusterQueueSpec {
        fair_sharing: fair(),
        ..cq(Some(cohort), &[("h100", &[(GPU, 0, None, None)])])
    };
    let department = || CohortSpec {
        fair_sharing: fair(),
        ..cohort(Some("org"), 0, None, None)
    };
    let tree = CohortTree::new([
        ("org".to_owned(), cohort(None, 24, None, None)),
        ("ml".to_owned(), department()),
        ("infra".to_owned(), department()),
    ]);
    let queues = vec![
        ("vision", team("ml")),
        ("nlp", team("ml")),
        ("web", team("infra")),
    ];
    let mut s = scheduler(&fleet("h100", 2, 2), vec![flavor("h100")], queues).with_cohorts(tree);
    s.submit(job("v1", "vision", 0, 0, 1, 8));
    s.submit(job("v2", "vision", 0, 0, 1, 8));
    assert_eq!(admitted(&cycle(&mut s, 0)).len(), 2);
    s.submit(job("n1", "nlp", 0, 1, 1, 8));
    s.submit(job("w1", "web", 0, 2, 1, 8));
    assert_eq!(admitted(&cycle(&mut s, 1)), vec!["w1".to_owned()]);
}

#[test]
fn a_cycle_of_parents_is_an_error_on_each_cohort_and_their_queues_keep_their_own_quota() {
    let queues = vec![
        ("qa", cq(Some("a"), &[("h100", &[(GPU, 8, None, None)])])),
        ("qb", cq(Some("b"), &[("h100", &[(GPU, 8, None, None)])])),
    ];
    let tree = CohortTree::new([
        ("a".to_owned(), cohort(Some("b"), 0, None, None)),
        ("b".to_owned(), cohort(Some("a"), 0, None, None)),
    ]);
    let mut s = scheduler(&fleet("h100", 2, 2), vec![flavor("h100")], queues).with_cohorts(tree);
    for name in ["a", "b"] {
        let why = s.cohorts().problem(name).unwrap_or_default();
        assert!(
            why.contains("spec.parent") && why.contains("remove one"),
            "{why}"
        );
    }
    s.submit(job("a1", "qa", 0, 0, 1, 8));
    s.submit(job("a2", "qa", 0, 1, 1, 8));
    let decisions = cycle(&mut s, 0);
    // a and b are roots apart: qa cannot borrow qb's 8.
    assert_eq!(admitted(&decisions), vec!["a1".to_owned()]);
}

/// Two queues of 8 GPUs, `vision` and `nlp`, in the flat cohort `ml`, on 4 hosts of 8 GPUs.
fn vision_and_nlp_in_ml() -> Scheduler {
    let queues = vec![
        (
            "vision",
            cq(Some("ml"), &[("h100", &[(GPU, 8, None, None)])]),
        ),
        ("nlp", cq(Some("ml"), &[("h100", &[(GPU, 8, None, None)])])),
    ];
    scheduler(&fleet("h100", 2, 2), vec![flavor("h100")], queues)
}

#[test]
fn jobs_admitted_before_the_tree_changes_are_booked_in_the_new_one() {
    let mut s = vision_and_nlp_in_ml();
    s.submit(job("v1", "vision", 0, 0, 2, 8));
    assert_eq!(admitted(&cycle(&mut s, 0)), vec!["v1".to_owned()]);
    let s = s.with_cohorts(CohortTree::new([(
        "ml".to_owned(),
        cohort(None, 8, None, None),
    )]));
    assert_eq!(
        s.quota().usage("vision", "h100", GPU),
        (Amount::from_units(16), Amount::from_units(8))
    );
    // 24 in ml, 16 used.
    assert_eq!(room(s.quota(), "nlp"), 8);
}

#[test]
fn a_reservation_after_the_tree_changes_frees_what_its_holders_book_in_the_new_one() {
    // vision holds 16 until 600; the tree then gains a root above ml, which numbers the
    // book afresh. n1 (24) can start only once v1 ends, and n2 (8 until 3,610) would take
    // the room n1 is promised then: the reservation search frees v1's quota from the book
    // at 600 by the booking kept beside its end, which must be the one of the new book
    // (debug builds compare the two there).
    let mut s = vision_and_nlp_in_ml();
    let timed = |job: Job, runtime: i64| Job {
        expected_runtime: Some(runtime),
        ..job
    };
    s.submit(timed(job("v1", "vision", 0, 0, 2, 8), 600));
    assert_eq!(admitted(&cycle(&mut s, 0)), vec!["v1".to_owned()]);
    let mut s = s.with_cohorts(CohortTree::new([
        ("org".to_owned(), cohort(None, 0, None, None)),
        ("ml".to_owned(), cohort(Some("org"), 8, None, None)),
    ]));
    s.submit(timed(job("n1", "nlp", 0, 1, 3, 8), 600));
    s.submit(timed(job("n2", "nlp", 0, 2, 1, 8), 3_600));
    assert_eq!(admitted(&cycle(&mut s, 10)), Vec::<String>::new());
    s.finish("ns/v1");
    assert_eq!(admitted(&cycle(&mut s, 600)), vec!["n1".to_owned()]);
}

// ---- Properties on random trees ----

/// A random tree: per cohort (parent among the earlier ones or none, own nominal, borrowing
/// limit, lending limit), per queue (cohort or none, nominal, borrowing limit, lending
/// limit). Limits only where there is an edge to put them on (validation requires that).
#[derive(Clone, Debug)]
struct Tree {
    cohorts: Vec<Node>,
    queues: Vec<Node>,
}

/// (parent cohort, own nominal, borrowing limit, lending limit).
type Node = (Option<usize>, u64, Option<u64>, Option<u64>);

fn trees() -> impl Strategy<Value = Tree> {
    let limit = || proptest::option::weighted(0.4, 0u64..16);
    let cohorts = proptest::collection::vec(
        (
            proptest::option::weighted(0.7, 0usize..6),
            prop_oneof![Just(0u64), 0u64..12],
            limit(),
            limit(),
        ),
        1..6,
    );
    let queues = proptest::collection::vec(
        (
            proptest::option::weighted(0.9, 0usize..6),
            0u64..16,
            limit(),
            limit(),
        ),
        1..7,
    );
    (cohorts, queues).prop_map(|(cohorts, queues)| {
        let count = cohorts.len();
        let cohorts = cohorts
            .into_iter()
            .enumerate()
            .map(|(i, (parent, nominal, b, l))| {
                // Parents come earlier: no cycles, every tree depth up to five.
                let parent = parent.filter(|_| i > 0).map(|p| p % i);
                let (b, l) = if parent.is_some() {
                    (b, l)
                } else {
                    (None, None)
                };
                (parent, nominal, b, l)
            })
            .collect();
        let queues = queues
            .into_iter()
            .map(|(c, nominal, b, l)| {
                let c = c.map(|c| c % count);
                let (b, l) = if c.is_some() {
                    (b, l.map(|l| l.min(nominal)))
                } else {
                    (None, None)
                };
                (c, nominal, b, l)
            })
            .collect();
        Tree { cohorts, queues }
    })
}

impl Tree {
    fn cohort_name(i: usize) -> String {
        format!("c{i}")
    }

    fn queue_name(i: usize) -> String {
        format!("q{i}")
    }

    fn specs(&self) -> (Vec<(String, ClusterQueueSpec)>, CohortTree) {
        let queues = self
            .queues
            .iter()
            .enumerate()
            .map(|(i, (c, nominal, b, l))| {
                let name = c.map(Tree::cohort_name);
                (
                    Tree::queue_name(i),
                    cq(name.as_deref(), &[("h100", &[(GPU, *nominal, *b, *l)])]),
                )
            })
            .collect();
        let tree = CohortTree::new(self.cohorts.iter().enumerate().map(|(i, (p, n, b, l))| {
            let parent = p.map(Tree::cohort_name);
            (Tree::cohort_name(i), cohort(parent.as_deref(), *n, *b, *l))
        }));
        (queues, tree)
    }

    /// Node of cohort `c` is `queues.len() + c`; a queue's node is its index.
    fn parent(&self, node: usize) -> Option<usize> {
        let q = self.queues.len();
        if node < q {
            self.queues[node].0.map(|c| q + c)
        } else {
            self.cohorts[node - q].0.map(|c| q + c)
        }
    }

    /// (own nominal, borrowing limit, lending limit) of a node.
    fn limits(&self, node: usize) -> (u64, Option<u64>, Option<u64>) {
        let q = self.queues.len();
        let (_, n, b, l) = if node < q {
            self.queues[node]
        } else {
            self.cohorts[node - q]
        };
        (n, b, l)
    }

    fn nodes(&self) -> usize {
        self.queues.len() + self.cohorts.len()
    }

    /// Whether `node` is `ancestor` or under it.
    fn under(&self, mut node: usize, ancestor: usize) -> bool {
        loop {
            if node == ancestor {
                return true;
            }
            match self.parent(node) {
                Some(p) => node = p,
                None => return false,
            }
        }
    }

    fn root(&self, mut node: usize) -> usize {
        while let Some(p) = self.parent(node) {
            node = p;
        }
        node
    }

    /// Checks the tree's limits against per-queue usage (GPUs), without the book's own
    /// arithmetic: what a subtree uses beyond all the quota in it is what it borrows from
    /// outside, and what the rest of its tree uses beyond all the quota outside it is what
    /// it lends.
    fn check(&self, used: &[u64]) -> Result<(), TestCaseError> {
        let queues = self.queues.len();
        let nominal_within = |n: usize| -> u64 {
            (0..self.nodes())
                .filter(|m| self.under(*m, n))
                .map(|m| self.limits(m).0)
                .sum()
        };
        let used_within = |n: usize| -> u64 {
            (0..queues)
                .filter(|q| self.under(*q, n))
                .map(|q| used[q])
                .sum()
        };
        for n in 0..self.nodes() {
            let root = self.root(n);
            let (tree_nominal, tree_used) = (nominal_within(root), used_within(root));
            if n == root {
                prop_assert!(
                    tree_used <= tree_nominal,
                    "the tree of node {n} promises {tree_used} of {tree_nominal}"
                );
                continue;
            }
            let (own_nominal, own_used) = (nominal_within(n), used_within(n));
            let (_, borrowing, lending) = self.limits(n);
            if let Some(b) = borrowing {
                prop_assert!(
                    own_used <= own_nominal + b,
                    "node {n}'s subtree uses {own_used} with {own_nominal} in it and may borrow {b}"
                );
            }
            if let Some(l) = lending {
                let (others_nominal, others_used) =
                    (tree_nominal - own_nominal, tree_used - own_used);
                prop_assert!(
                    others_used <= others_nominal + l,
                    "the rest of node {n}'s tree uses {others_used} with {others_nominal} of its own; node {n} lends at most {l}"
                );
            }
        }
        Ok(())
    }
}

impl Tree {
    /// Checks the book's account of who lends to whom against per-queue usage (GPUs): each
    /// queue borrows what it uses beyond its nominal quota, lends no more than its idle
    /// lendable quota, a cohort no more than its own quota, and what is lent adds up to what
    /// queues borrow (less at most a milli-GPU per share rounded down).
    fn check_flows(&self, book: &QuotaBook, used: &[u64]) -> Result<(), TestCaseError> {
        let flows = book.flows("h100", GPU);
        let queue_flows: Vec<_> = flows.iter().filter(|f| !f.cohort).collect();
        prop_assert_eq!(queue_flows.len(), self.queues.len());
        let mut borrowed = 0;
        for (q, flow) in queue_flows.iter().enumerate() {
            let (nominal, _, lending) = self.limits(q);
            prop_assert_eq!(flow.name, Tree::queue_name(q));
            prop_assert_eq!(flow.borrowed, used[q].saturating_sub(nominal) * 1000);
            let idle = nominal
                .saturating_sub(used[q])
                .min(lending.unwrap_or(nominal));
            prop_assert!(
                flow.lent <= idle * 1000,
                "queue {q} lends {} of {idle} idle",
                flow.lent
            );
            if self.queues[q].0.is_none() {
                prop_assert_eq!((flow.borrowed, flow.lent), (0, 0));
            }
            borrowed += flow.borrowed;
        }
        for flow in flows.iter().filter(|f| f.cohort) {
            let c: usize = flow.name[1..].parse().unwrap_or(usize::MAX);
            prop_assert!(flow.lent <= self.cohorts[c].1 * 1000);
        }
        let lent: u64 = flows.iter().map(|f| f.lent).sum();
        let shares = 2 * u64::try_from(self.nodes()).unwrap_or(u64::MAX);
        prop_assert!(
            lent <= borrowed && borrowed - lent <= shares,
            "lent {lent} against {borrowed} borrowed (milli-GPUs)"
        );
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_book_keeps_every_limit_of_the_tree_at_every_step(
        tree in trees(),
        // (queue, GPUs, take back the oldest booking instead)
        script in proptest::collection::vec((0usize..7, 1u64..12, proptest::bool::weighted(0.3)), 1..40),
    ) {
        let (queues, cohorts) = tree.specs();
        prop_assert_eq!(cohorts.problems().count(), 0);
        let mut book = QuotaBook::with_cohorts(queues.iter().map(|(n, s)| (n.as_str(), s)), &cohorts);
        let mut used = vec![0u64; tree.queues.len()];
        let mut booked: Vec<(usize, u64)> = Vec::new();
        for (q, amount, release) in script {
            let q = q % tree.queues.len();
            let name = Tree::queue_name(q);
            if release && !booked.is_empty() {
                let (q, amount) = booked.remove(0);
                book.remove(&Tree::queue_name(q), "h100", &gpus(amount));
                used[q] -= amount;
            } else if !matches!(book.check(&name, "h100", &gpus(amount)), QuotaCheck::Short(_)) {
                book.add(&name, "h100", &gpus(amount));
                used[q] += amount;
                booked.push((q, amount));
            }
            for (i, u) in used.iter().enumerate() {
                let in_book = book.usage(&Tree::queue_name(i), "h100", GPU).0;
                prop_assert_eq!(in_book, Amount::from_units(*u));
            }
            tree.check(&used)?;
            tree.check_flows(&book, &used)?;
        }
        for (q, amount) in booked {
            book.remove(&Tree::queue_name(q), "h100", &gpus(amount));
        }
        prop_assert!(book.is_idle(), "usage left in the tree after everything was released");
    }

    #[test]
    fn admission_on_a_tree_keeps_every_limit_at_every_cycle(
        tree in trees(),
        workload in proptest::collection::vec((0usize..7, 0i32..3, 1u32..3, 1u64..9, 1i64..5), 1..25),
    ) {
        let (queues, cohorts) = tree.specs();
        let queues: Vec<(String, ClusterQueueSpec)> = queues
            .into_iter()
            .map(|(n, s)| (n, reclaiming(s)))
            .collect();
        let mut s: Scheduler = scheduler(
            &fleet("h100", 2, 4),
            vec![flavor("h100")],
            queues.iter().map(|(n, s)| (n.as_str(), s.clone())).collect(),
        )
        .with_cohorts(cohorts);
        for (i, (q, priority, pods, gpus, runtime)) in workload.iter().enumerate() {
            let j = job(
                &format!("j{i:02}"),
                &Tree::queue_name(q % tree.queues.len()),
                *priority,
                i64::try_from(i).unwrap_or(0),
                *pods,
                *gpus,
            );
            s.submit(runs_for(j, *runtime));
        }
        let mut ends: BTreeMap<String, i64> = BTreeMap::new();
        for now in 0..8 {
            let done: Vec<String> = ends.iter().filter(|(_, e)| **e <= now).map(|(j, _)| j.clone()).collect();
            for j in done {
                s.finish(&j);
                ends.remove(&j);
            }
            for d in cycle(&mut s, now) {
                match d {
                    Decision::Admit(a) => {
                        let runtime = s.job(&a.job).and_then(|j| j.expected_runtime).unwrap_or(1);
                        ends.insert(a.job.clone(), now + runtime);
                    }
                    Decision::Preempt { victims, .. } => {
                        for v in victims {
                            ends.remove(&v);
                        }
                    }
                    _ => {}
                }
            }
            let used: Vec<u64> = (0..tree.queues.len())
                .map(|q| s.quota().usage(&Tree::queue_name(q), "h100", GPU).0.milli() / 1000)
                .collect();
            tree.check(&used)?;
        }
        for j in ends.into_keys() {
            s.finish(&j);
        }
        prop_assert!(s.quota().is_idle(), "usage left after every job finished");
    }
}
