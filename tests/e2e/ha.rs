//! Two `muster controller` processes with leader election, started the way an operator runs
//! them outside a pod (no `POD_NAME`, no `HOSTNAME`): exactly one leads; `kill -9` of the
//! replica the Lease names as its holder, in the middle of a release, leaves the standby to
//! finish the release or roll it back — the test says which, and holds the pods to it — with
//! no pod of the gang run twice, no index of the gang alive twice at once, and no GPU
//! promised twice. Killed as the first pod appears, either may follow; killed once every pod
//! exists, the release is always finished.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher;
use muster_api::GpuJobStatus;
use muster_api::wire::{POD_INDEX_LABEL, POD_SET_LABEL};
use serde_json::json;

use crate::support::{Env, MusterProcess, always, bound_node, eventually, gpu_job, phase, reason};

/// One pod (one UID) as the watch saw it.
#[derive(Debug)]
struct PodSeen {
    name: String,
    /// Whether it ever ran (Running, or ended).
    ran: bool,
    /// Whether it was deleted, or marked for deletion.
    deleted: bool,
}

/// Every pod the watch saw, by UID in the order they appeared, and what was alive at once.
#[derive(Default)]
struct Seen {
    pods: BTreeMap<String, PodSeen>,
    /// UIDs in the order they first appeared.
    order: Vec<String>,
    /// Per index of the gang, the UIDs alive now.
    live: BTreeMap<String, BTreeSet<String>>,
    most_alive: usize,
    /// Indices seen alive twice at once, with their UIDs.
    doubled: Vec<(String, BTreeSet<String>)>,
}

impl Seen {
    fn observe(&mut self, pod: &Pod, gone: bool) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let label = |k: &str| labels.get(k).cloned().unwrap_or_default();
        let index = format!("{}/{}", label(POD_SET_LABEL), label(POD_INDEX_LABEL));
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let ended = matches!(phase, Some("Succeeded" | "Failed"));
        let deleted = gone || pod.metadata.deletion_timestamp.is_some();
        if !self.pods.contains_key(&uid) {
            self.order.push(uid.clone());
        }
        let seen = self.pods.entry(uid.clone()).or_insert_with(|| PodSeen {
            name: pod.metadata.name.clone().unwrap_or_default(),
            ran: false,
            deleted: false,
        });
        seen.ran |= matches!(phase, Some("Running")) || ended;
        seen.deleted |= deleted;
        let live = self.live.entry(index.clone()).or_default();
        if deleted || ended {
            live.remove(&uid);
        } else {
            live.insert(uid);
        }
        if live.len() > 1 {
            self.doubled.push((index, live.clone()));
        }
        self.most_alive = self
            .most_alive
            .max(self.live.values().map(BTreeSet::len).sum());
    }

    /// Per pod name, its UIDs in the order they appeared.
    fn uids_by_name(&self) -> BTreeMap<&str, Vec<&str>> {
        let mut by_name: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for uid in &self.order {
            by_name
                .entry(self.pods[uid].name.as_str())
                .or_default()
                .push(uid);
        }
        by_name
    }
}

/// What the standby made of the release the kill cut off.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// The pods the killed leader made are the gang that runs.
    Finished,
    /// They were deleted and the gang released again.
    RolledBack,
}

/// Killed as the release's first pod appears, the leader leaves a release that is finished or
/// rolled back, whichever the pods it made allow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_two_replicas_leads_and_the_standby_finishes_or_rolls_back_a_release_cut_by_kill_9()
{
    cut_a_release_by_kill_9(1).await;
}

/// Killed once every pod of the gang exists, the leader leaves a release that is always
/// finished, never rolled back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_cut_by_kill_9_once_every_pod_exists_is_finished() {
    if let Some(outcome) = cut_a_release_by_kill_9(16).await {
        assert_eq!(outcome, Outcome::Finished);
    }
}

/// Two replicas; a 16-pod gang submitted; the Lease's holder killed once `pods` of its pods
/// exist; the standby takes over. What it made of the release (`None`: no control plane).
async fn cut_a_release_by_kill_9(pods: usize) -> Option<Outcome> {
    let env = Env::start(false).await?;
    env.h100().await;
    env.gpu_nodes("b1", &["n1", "n2", "n3", "n4"]).await;
    env.queue("a", "team-a", 32, json!({})).await;
    let mut replicas = two_replicas(&env).await;
    let leases: Api<Lease> = env.api("default");
    let holder = || async {
        leases
            .get_opt("muster-controller")
            .await
            .ok()??
            .spec?
            .holder_identity
    };

    // Watch every pod of team-a from here on.
    let (seen, changed, watch) = watch_pods(env.api("team-a"));

    // A 16-pod gang filling the whole block; the Lease's holder is killed once `pods` of its
    // pods exist.
    env.submit(&gpu_job("team-a", "wide", 16, 2, &json!({}), json!({})))
        .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while seen
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .pods
        .len()
        < pods
    {
        tokio::time::timeout_at(deadline, changed.notified())
            .await
            .unwrap_or_else(|_| unreachable!("fewer than {pods} pods of the gang appeared"));
    }
    let Some(leading) = holder().await else {
        unreachable!("the Lease names no holder while a release is under way")
    };
    let identities: Vec<Option<String>> = replicas.iter().map(MusterProcess::identity).collect();
    let Some(leader) = identities
        .iter()
        .position(|id| id.as_deref() == Some(leading.as_str()))
    else {
        unreachable!("the Lease's holder {leading:?} is none of the replicas {identities:?}")
    };
    replicas[leader].kill();
    let standby = 1 - leader;
    // What the killed leader left: a release is whole once every pod exists (its status is
    // written last, after every gate is lifted).
    let left = env.pods_of("team-a", "wide").await;
    let admitted = env
        .status("team-a", "wide")
        .await
        .is_some_and(|s| s.admission.is_some());
    let whole = admitted || left.len() == 16;

    // The standby takes the Lease and the gang ends up whole and running.
    eventually("the standby holds the Lease and leads", 60, || async {
        let now = holder().await?;
        (Some(now.as_str()) == identities[standby].as_deref() && replicas[standby].leads())
            .then_some(())
    })
    .await;
    let status = env
        .until_status("team-a", "wide", "Running", 90, |s| phase(s) == "Running")
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
    let outcome = judge(&seen, &left, &running, &status);
    eprintln!(
        "the standby found {} pods (admitted: {admitted}) and {outcome:?} the release",
        left.len()
    );
    if whole {
        assert_eq!(
            outcome,
            Outcome::Finished,
            "a release whose every pod existed is finished, never rolled back"
        );
    }
    Some(outcome)
}

/// Two `muster controller --leader-elect` replicas, once exactly one leads and keeps leading.
async fn two_replicas(env: &Env) -> [MusterProcess; 2] {
    let logs = env.cluster.log_dir();
    let args = ["--leader-elect", "--lease-namespace", "default"];
    let kubeconfig = env.cluster.kubeconfig_path().to_path_buf();
    let replicas = [
        MusterProcess::start(&kubeconfig, &args, logs.join("muster-1.log")),
        MusterProcess::start(&kubeconfig, &args, logs.join("muster-2.log")),
    ];
    let leases: Api<Lease> = env.api("default");
    eventually("a Lease holder", 60, || async {
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
    replicas
}

/// What the standby made of the release, from every pod the watch saw (`left`: those the
/// killed leader left; `running`: the gang at the end, whose status is `status`), checked
/// against those pods: no index alive twice at once, no pod name run twice, the gang that runs
/// the last pod made of each name on the nodes its status names, and — finished — nothing
/// deleted or made again, or — rolled back — every pod made before deleted without running.
fn judge(seen: &Seen, left: &[Pod], running: &[Pod], status: &GpuJobStatus) -> Outcome {
    assert!(
        seen.most_alive <= 16,
        "at most one gang's pods alive: {}",
        seen.most_alive
    );
    assert!(
        seen.doubled.is_empty(),
        "an index of the gang alive twice at once: {:?}",
        seen.doubled
    );
    let by_name = seen.uids_by_name();
    for (name, uids) in &by_name {
        let ran = uids.iter().filter(|u| seen.pods[**u].ran).count();
        assert!(ran <= 1, "pod {name} ran {ran} times: {uids:?}");
    }
    let outcome = if by_name.values().any(|uids| uids.len() > 1) {
        Outcome::RolledBack
    } else {
        Outcome::Finished
    };
    let running_uids: BTreeSet<&str> = running
        .iter()
        .filter_map(|p| p.metadata.uid.as_deref())
        .collect();
    let last_uids: BTreeSet<&str> = by_name
        .values()
        .filter_map(|uids| uids.last().copied())
        .collect();
    assert_eq!(
        running_uids, last_uids,
        "the gang that runs is the last pod made of each name"
    );
    match outcome {
        Outcome::Finished => {
            // The pods the killed leader made are the gang: none deleted, none made again.
            assert!(
                left.iter().all(|p| p
                    .metadata
                    .uid
                    .as_deref()
                    .is_some_and(|u| running_uids.contains(u))),
                "every pod left at the kill runs"
            );
            assert!(
                seen.pods.values().all(|p| !p.deleted),
                "a finished release deletes nothing"
            );
        }
        Outcome::RolledBack => {
            // Every pod made before the rollback was deleted without running, and its name
            // made again.
            for uids in by_name.values().filter(|uids| uids.len() > 1) {
                for first in &uids[..uids.len() - 1] {
                    let pod = &seen.pods[*first];
                    assert!(
                        pod.deleted && !pod.ran,
                        "a rolled-back pod is deleted before it runs: {pod:?}"
                    );
                }
            }
        }
    }
    // The status names the nodes the gang runs on, pod by pod.
    let nodes = status
        .admission
        .as_ref()
        .and_then(|a| a.pod_sets.first())
        .map(|p| p.nodes.clone())
        .unwrap_or_default();
    for pod in running {
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let index: usize = labels
            .get(POD_INDEX_LABEL)
            .and_then(|i| i.parse().ok())
            .unwrap_or(usize::MAX);
        assert_eq!(
            bound_node(pod).as_ref(),
            nodes.get(index),
            "pod {:?} runs where the status says",
            pod.metadata.name
        );
    }
    outcome
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
    let changed = Arc::new(tokio::sync::Notify::new());
    let watch = {
        let (seen, changed) = (Arc::clone(&seen), Arc::clone(&changed));
        tokio::spawn(async move {
            let mut events = std::pin::pin!(watcher::watcher(pods, watcher::Config::default()));
            while let Some(Ok(event)) = events.next().await {
                let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner);
                match event {
                    watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
                        seen.observe(&pod, false);
                        changed.notify_one();
                    }
                    watcher::Event::Delete(pod) => seen.observe(&pod, true),
                    _ => {}
                }
            }
        })
    };
    (seen, changed, watch)
}
