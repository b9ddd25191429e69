//! Two `muster controller` processes with leader election, started the way an operator runs
//! them outside a pod (no `POD_NAME`, no `HOSTNAME`): exactly one leads; `kill -9` of the
//! leader in the middle of a release leaves the standby to finish or roll it back, with no
//! pod of the gang alive twice and no GPU promised twice.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher;
use serde_json::json;

use crate::support::{Env, MusterProcess, always, eventually, gpu_job, phase, reason};

/// Every pod UID the watch saw per pod name, and the most pods of one job alive at once.
#[derive(Default)]
struct Seen {
    uids: BTreeMap<String, BTreeSet<String>>,
    live: BTreeMap<String, String>,
    most_alive: usize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_two_replicas_leads_and_the_standby_finishes_a_release_cut_by_kill_9() {
    let Some(env) = Env::start(false).await else {
        return;
    };
    env.h100().await;
    env.gpu_nodes("b1", &["n1", "n2", "n3", "n4"]).await;
    env.queue("a", "team-a", 32, json!({})).await;
    let logs = env.cluster.log_dir();
    let args = ["--leader-elect", "--lease-namespace", "default"];
    let kubeconfig = env.cluster.kubeconfig_path().to_path_buf();
    let mut replicas = [
        MusterProcess::start(&kubeconfig, &args, logs.join("muster-1.log")),
        MusterProcess::start(&kubeconfig, &args, logs.join("muster-2.log")),
    ];

    // Exactly one leads, and keeps leading.
    let leases: Api<Lease> = env.api("default");
    let holder = eventually("a Lease holder", 60, || async {
        leases
            .get_opt("muster-controller")
            .await
            .ok()??
            .spec?
            .holder_identity
    })
    .await;
    eventually("the leader says so", 30, || async {
        replicas.iter().any(MusterProcess::leads).then_some(())
    })
    .await;
    always("a single leader", 5, || async {
        let leading = replicas.iter().filter(|r| r.leads()).count();
        if leading == 1 {
            Ok(())
        } else {
            Err(format!("{leading} replicas lead"))
        }
    })
    .await;

    // Watch every pod of team-a from here on: UIDs per name, and how many live at once.
    let (seen, first_pod, watch) = watch_pods(env.api("team-a"));

    // A 16-pod gang filling the whole block; the leader is killed as its first pod appears.
    env.submit(&gpu_job("team-a", "wide", 16, 2, &json!({}), json!({})))
        .await;
    tokio::time::timeout(Duration::from_secs(60), first_pod.notified())
        .await
        .unwrap_or_else(|_| unreachable!("no pod of the gang appeared"));
    let leader = replicas.iter().position(MusterProcess::leads).unwrap_or(0);
    replicas[leader].kill();
    let standby = 1 - leader;

    // The standby takes the Lease and the gang ends up whole and running.
    eventually("the standby leads", 60, || async {
        let now = leases
            .get_opt("muster-controller")
            .await
            .ok()??
            .spec?
            .holder_identity?;
        (now != holder && replicas[standby].leads()).then_some(())
    })
    .await;
    env.until_status("team-a", "wide", "Running", 90, |s| phase(s) == "Running")
        .await;
    let running = env.pods_of("team-a", "wide").await;
    assert_eq!(running.len(), 16);

    // No GPU promised twice: a second gang of the same size waits for quota.
    env.submit(&gpu_job("team-a", "next", 16, 2, &json!({}), json!({})))
        .await;
    env.until_status("team-a", "next", "waiting for quota", 30, |s| {
        reason(s) == "QuotaShort"
    })
    .await;
    assert!(env.pods_of("team-a", "next").await.is_empty());
    watch.abort();
    let seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
    assert!(
        seen.most_alive <= 16,
        "at most one gang's pods alive: {}",
        seen.most_alive
    );
    // Pod names are the gang's host names, so the API server never holds two of one name;
    // a release rolled back and made again shows as a second UID for a name, never as more
    // pods alive than the gang has.
    let remade = seen.uids.values().filter(|u| u.len() > 1).count();
    eprintln!("pods made again after the kill: {remade}");
}

/// Watches `pods`: what it saw, a notification at every pod event, and the watch's task.
fn watch_pods(
    pods: Api<Pod>,
) -> (
    Arc<Mutex<Seen>>,
    Arc<tokio::sync::Notify>,
    tokio::task::JoinHandle<()>,
) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let first_pod = Arc::new(tokio::sync::Notify::new());
    let watch = {
        let (seen, first_pod) = (Arc::clone(&seen), Arc::clone(&first_pod));
        tokio::spawn(async move {
            let mut events = std::pin::pin!(watcher::watcher(pods, watcher::Config::default()));
            while let Some(Ok(event)) = events.next().await {
                let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
                match event {
                    watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
                        let name = pod.metadata.name.clone().unwrap_or_default();
                        let uid = pod.metadata.uid.clone().unwrap_or_default();
                        seen.uids
                            .entry(name.clone())
                            .or_default()
                            .insert(uid.clone());
                        let terminal = pod.metadata.deletion_timestamp.is_some()
                            || matches!(
                                pod.status.as_ref().and_then(|s| s.phase.as_deref()),
                                Some("Succeeded" | "Failed")
                            );
                        if terminal {
                            seen.live.remove(&name);
                        } else {
                            seen.live.insert(name, uid);
                        }
                        seen.most_alive = seen.most_alive.max(seen.live.len());
                        first_pod.notify_one();
                    }
                    watcher::Event::Delete(pod) => {
                        seen.live.remove(&pod.metadata.name.unwrap_or_default());
                    }
                    _ => {}
                }
            }
        })
    };
    (seen, first_pod, watch)
}
