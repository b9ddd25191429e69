//! A job that waits for pods of its earlier attempt on nodes that are not Ready: which pods,
//! which nodes, since when, and what an admin can do about it. Pure, like the rest of the
//! job's lifecycle.
//!
//! Muster restarts a gang only once every pod of the old attempt has ended or is gone (see
//! [`crate::holding::draining`]). A node that stops reporting — a network partition, a hung
//! kubelet, a machine that lost power — looks the same from the API server: its pods keep
//! their last phase and, once deleted, stay Terminating until its kubelet confirms. Muster
//! cannot tell a partition (the pods still run) from a dead machine (they do not), so it
//! waits; after [`UNREACHABLE_WARNING_SECONDS`] it says so in the job's status and with a
//! Warning event, naming the way out: delete the Node, or taint it
//! `node.kubernetes.io/out-of-service`, once the machine is known to be down.

use k8s_openapi::jiff::Timestamp;

use muster_api::wire::OUT_OF_SERVICE_TAINT;

use crate::holding::Pods;
use crate::index::Index;

/// How long a job waits on a node that is not Ready before its status and a Warning event
/// say so, seconds. A node that misses heartbeats for a moment, or a kubelet restarting, is
/// back well within it; a minute of silence is worth an admin's look.
pub const UNREACHABLE_WARNING_SECONDS: i64 = 60;

/// Pods a job waits for on one node that is not Ready.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Stranded {
    /// The node.
    pub(crate) node: String,
    /// Its Ready condition's status (`Unknown`: it stopped reporting; `False`).
    pub(crate) ready: String,
    /// Since when it is not Ready (Unix seconds), if the node says.
    pub(crate) since: Option<i64>,
    /// The pods' names (in the job's namespace), sorted.
    pub(crate) pods: Vec<String>,
}

/// The pods of `waiting` (pods a job waits for) bound to nodes that exist and are not Ready,
/// grouped by node in name order. Pods on a Ready node end as their kubelet confirms; pods on
/// a node that is gone or out of service are not waited for.
pub(crate) fn stranded(index: &Index, waiting: &Pods<'_>) -> Vec<Stranded> {
    let mut found: Vec<Stranded> = Vec::new();
    for (key, pod) in waiting {
        let Some(node) = pod.node.as_deref() else {
            continue;
        };
        let (Some(info), Some(not_ready)) = (index.node(node), index.not_ready(node)) else {
            continue;
        };
        if info.taints.iter().any(|t| t.key == OUT_OF_SERVICE_TAINT) {
            continue;
        }
        let name = key.rsplit('/').next().unwrap_or(key).to_owned();
        match found.iter_mut().find(|s| s.node == node) {
            Some(entry) => entry.pods.push(name),
            None => found.push(Stranded {
                node: node.to_owned(),
                ready: not_ready.status.clone(),
                since: not_ready.since,
                pods: vec![name],
            }),
        }
    }
    for entry in &mut found {
        entry.pods.sort();
    }
    found.sort_by(|a, b| a.node.cmp(&b.node));
    found
}

/// When the wait on `stranded` is worth a warning (Unix seconds): the bound after the node
/// that went first stopped being Ready; at once when a node does not say since when.
pub(crate) fn warn_at(stranded: &[Stranded]) -> Option<i64> {
    stranded
        .iter()
        .map(|s| {
            s.since
                .map_or(i64::MIN, |t| t.saturating_add(UNREACHABLE_WARNING_SECONDS))
        })
        .min()
}

/// The most pods a message names per node; the rest are counted.
const NAMED_PODS: usize = 8;

/// What the job's status and its Warning event say: every node, since when, its pods, and
/// the fix.
pub(crate) fn message(stranded: &[Stranded]) -> String {
    let nodes: Vec<String> = stranded
        .iter()
        .map(|s| {
            let since = s
                .since
                .and_then(|t| Timestamp::from_second(t).ok())
                .map_or_else(|| "an unknown time".to_owned(), |t| t.to_string());
            let mut pods = s.pods.iter().take(NAMED_PODS).cloned().collect::<Vec<_>>();
            if s.pods.len() > NAMED_PODS {
                pods.push(format!("and {} more", s.pods.len() - NAMED_PODS));
            }
            format!(
                "node {} (Ready {} since {since}): pods {}",
                s.node,
                s.ready,
                pods.join(", ")
            )
        })
        .collect();
    format!(
        "waiting for deleted pods of the gang that may still run on nodes that are not \
         Ready — {}; the gang starts again only once they have ended or are gone, so that two \
         attempts never run at once. If a machine is really down, delete its Node (kubectl \
         delete node NAME) or taint it {OUT_OF_SERVICE_TAINT}=nodeshutdown:NoExecute",
        nodes.join("; ")
    )
}
