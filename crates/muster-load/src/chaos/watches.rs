//! The checker's own watches of the API server (pods, GpuJobs, nodes), straight to the API
//! server rather than through the fault proxy: what they hear is folded into the [`Checker`],
//! a relist handed over whole, and the time each watch was blind (from its break to the end
//! of the relist that followed) recorded.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::Api;
use kube::runtime::{WatchStreamExt as _, watcher};
use muster_api::{GpuJob, ObjectRef};

use muster_testkit::checker::{Checker, pod_key};

/// What the checker hears from one watch: a whole list (the watch's start, or a relist after
/// it restarted past what the API server still remembers, as after the API server's
/// restart), a change, or a deletion.
enum Heard<K> {
    Listed(Vec<K>),
    Changed(K),
    Gone(K),
}

/// Watches `api` for the run, telling `hear` (with the checker locked and the seconds into
/// the run) each thing heard. A list is handed over whole, so that the checker judges it as
/// one moment of the cluster.
///
/// The checker is blind to `kind` from the watch's first error after which it lists again
/// (or from the list's start, for the first list) until that list is whole: what changed and
/// changed back meanwhile it never saw. A watch that resumes without a relist missed nothing
/// (the API server replays what happened since), so its errors count for nothing.
async fn watch_whole<K>(
    kind: &str,
    api: Api<K>,
    config: watcher::Config,
    checker: Arc<Mutex<Checker>>,
    start: Instant,
    hear: impl Fn(&mut Checker, Heard<K>, f64),
) where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let mut events = std::pin::pin!(watcher::watcher(api, config).default_backoff());
    let mut relist: Option<Vec<K>> = None;
    let mut broken_since: Option<f64> = None;
    let mut blind_since: Option<f64> = None;
    while let Some(event) = events.next().await {
        let at = start.elapsed().as_secs_f64();
        let Ok(event) = event else {
            broken_since.get_or_insert(at);
            continue;
        };
        let heard = match event {
            watcher::Event::Init => {
                blind_since = Some(broken_since.take().unwrap_or(at));
                relist = Some(Vec::new());
                continue;
            }
            watcher::Event::InitApply(object) => {
                relist.get_or_insert_with(Vec::new).push(object);
                continue;
            }
            watcher::Event::InitDone => Heard::Listed(relist.take().unwrap_or_default()),
            watcher::Event::Apply(object) => Heard::Changed(object),
            watcher::Event::Delete(object) => Heard::Gone(object),
        };
        if !matches!(heard, Heard::Listed(_)) {
            // The watch resumed where it broke off.
            broken_since = None;
        }
        let mut checker = checker.lock().unwrap_or_else(PoisonError::into_inner);
        if let (Heard::Listed(_), Some(from)) = (&heard, blind_since.take()) {
            checker.blind(kind, from, at);
        }
        hear(&mut checker, heard, at);
    }
}

/// Watches every pod (not only those with Muster's labels: a pod of a job that lacks them is
/// still the job's, by its owner reference).
pub(super) async fn watch_pods(client: Client, checker: Arc<Mutex<Checker>>, start: Instant) {
    watch_whole(
        "Pod",
        Api::<Pod>::all(client),
        watcher::Config::default(),
        checker,
        start,
        |c, heard, at| match heard {
            Heard::Listed(pods) => c.relist(&pods, at),
            Heard::Changed(pod) => c.pod(&pod, at),
            Heard::Gone(pod) => {
                if let Some(key) = pod_key(&pod) {
                    c.pod_gone(&key);
                }
            }
        },
    )
    .await;
}

pub(super) async fn watch_nodes(client: Client, checker: Arc<Mutex<Checker>>, start: Instant) {
    watch_whole(
        "Node",
        Api::<Node>::all(client),
        watcher::Config::default(),
        checker,
        start,
        |c, heard, _| match heard {
            Heard::Listed(nodes) => c.nodes_listed(&nodes),
            Heard::Changed(node) => c.node_seen(&node),
            Heard::Gone(node) => {
                if let Some(name) = node.metadata.name.as_deref() {
                    c.node_gone(name);
                }
            }
        },
    )
    .await;
}

pub(super) async fn watch_jobs(client: Client, checker: Arc<Mutex<Checker>>, start: Instant) {
    watch_whole(
        "GpuJob",
        Api::<GpuJob>::all(client),
        watcher::Config::default(),
        checker,
        start,
        |c, heard, at| match heard {
            Heard::Listed(jobs) => c.jobs_listed(&jobs, at),
            Heard::Changed(job) => c.job(&job, at),
            Heard::Gone(job) => {
                if let (Some(namespace), Some(name)) = (&job.metadata.namespace, &job.metadata.name)
                {
                    c.job_gone(ObjectRef::new(namespace, name).as_str());
                }
            }
        },
    )
    .await;
}
