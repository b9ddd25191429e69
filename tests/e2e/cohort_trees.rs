//! Cohort trees on a real control plane: a queue three levels down borrows another
//! department's idle quota through the organisation, gives it back whole when that
//! department wants it (reclaimed across two levels), and every Cohort says whether its tree
//! holds — one whose parent does not exist says which field and what to do.

use kube::api::Api;
use muster_api::Cohort;
use serde_json::json;

use crate::support::{
    Env, eventually, phase, team_a_runs_its_own_gang_then_a_borrowed_one,
    team_b_reclaims_the_borrowed_gang,
};

/// `Valid`'s (status, message) on Cohort `name`, once written.
async fn valid(cohorts: &Api<Cohort>, name: &str) -> Option<(String, String)> {
    let status = cohorts.get(name).await.ok()?.status?;
    status
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Valid")
        .map(|c| (c.status, c.message))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_borrowed_through_the_organisation_is_reclaimed_whole_across_two_levels() {
    let Some(env) = Env::start(false).await else {
        return;
    };
    env.h100().await;
    env.gpu_nodes("b1", &["n1", "n2"]).await;
    env.gpu_nodes("b2", &["n3", "n4"]).await;
    // org → ml → vision → queue a; org → infra → queue b; and a stray cohort.
    for (name, parent) in [
        ("org", None),
        ("ml", Some("org")),
        ("vision", Some("ml")),
        ("infra", Some("org")),
        ("stray", Some("nowhere")),
    ] {
        env.apply_all::<Cohort>(
            json!({"apiVersion": "muster.dev/v1alpha1", "kind": "Cohort",
            "metadata": {"name": name}, "spec": {"parent": parent}}),
        )
        .await;
    }
    let reclaims = json!({"preemption": {"reclaimWithinCohort": "Any"}});
    let mut a = reclaims.clone();
    a["cohort"] = json!("vision");
    let mut b = reclaims;
    b["cohort"] = json!("infra");
    env.queue("a", "team-a", 16, a).await;
    env.queue("b", "team-b", 16, b).await;
    let controller = env.controller();

    let cohorts: Api<Cohort> = env.all();
    for name in ["org", "ml", "vision", "infra"] {
        eventually(&format!("cohort {name} valid"), 30, || async {
            let (status, _) = valid(&cohorts, name).await?;
            (status == "True").then_some(())
        })
        .await;
    }
    let (status, message) = eventually("cohort stray invalid", 30, || async {
        valid(&cohorts, "stray").await
    })
    .await;
    assert_eq!(status, "False");
    assert!(
        message.contains("spec.parent") && message.contains("create a Cohort named nowhere"),
        "{message}"
    );

    // Team a runs its own 16 GPUs, then borrows team b's idle 16 through org.
    let borrowed_pods = team_a_runs_its_own_gang_then_a_borrowed_one(&env, json!({})).await;

    // Team b wants its quota back: the borrowing gang, two levels away, leaves whole.
    team_b_reclaims_the_borrowed_gang(&env, &borrowed_pods).await;
    // Team a's own gang, within its quota, was never touched.
    let own = env.status("team-a", "own").await.unwrap_or_default();
    assert_eq!((phase(&own).as_str(), own.requeue_count), ("Running", 0));
    controller.stop().await;
}
