//! How an admitted gang is doing, from its pods and their nodes: pure, so every rule of the
//! lifecycle is a table test.
//!
//! A gang is one unit: it is Running only when every pod is Ready, it has Succeeded only when
//! every pod has, and one failed pod — or one pod whose node is gone, NotReady or cordoned
//! before it finished — breaks the whole gang.

use muster_api::ObjectRef;

use crate::index::{Index, PodPhase, PodRecord};

/// Default base of the requeue backoff after a pods-ready timeout, seconds.
pub const REQUEUE_BASE_SECONDS: i64 = 30;
/// Cap of the requeue backoff, seconds.
pub const REQUEUE_MAX_SECONDS: i64 = 1800;

/// An admitted gang's health.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// Some pods are not Ready yet; the gang has until `deadline` (seconds).
    Starting {
        /// When the pods-ready timeout strikes.
        deadline: i64,
    },
    /// Every pod is Ready (or already succeeded).
    Running,
    /// Every pod succeeded.
    Succeeded,
    /// Not every pod was Ready by the deadline.
    TimedOut,
    /// A pod failed, vanished or lost its node.
    Broken {
        /// What happened, for the job's status.
        cause: String,
    },
}

/// How long the node a pod is pinned to may be NotReady before the pod, not yet bound there,
/// is given up on. A kubelet's blip (its container runtime restarting) passes within it, and
/// the scheduler binds the pod once the node is back: restarting the gang for it would cost a
/// restart for nothing. A node that died stays down past it.
pub const PINNED_NODE_GRACE_SECONDS: i64 = 60;

/// The health of a gang of `expected` pods admitted at `admitted_at` (seconds), placed on the
/// nodes `placed`, given its pods of the current attempt (key, record) and the index's nodes.
pub fn health(
    expected: usize,
    placed: &[String],
    pods: &[(&ObjectRef, &PodRecord)],
    index: &Index,
    admitted_at: i64,
    ready_timeout: i64,
    now: i64,
) -> Health {
    // A pod not yet bound whose node is gone (an autoscaler removed it as idle, an admin
    // deleted it), cordoned, or down past the grace can never be bound: restart now rather
    // than wait out the pods-ready timeout. Each pod is judged by its own pin, not by every
    // node placed: a place left empty (completed by an earlier attempt) or a finished pod's
    // node may go without harm.
    let unbound = pods
        .iter()
        .filter(|(_, p)| p.node.is_none() && p.phase == PodPhase::Pending);
    for (key, pod) in unbound {
        match pod.member.as_ref().and_then(|m| m.pinned.as_deref()) {
            Some(pinned) => {
                if let Some(why) = pin_lost(pinned, index, now) {
                    return Health::Broken {
                        cause: format!("pod {key} is pinned to node {pinned}, which {why}"),
                    };
                }
            }
            // Not pinned yet: it goes to one of the placed nodes.
            None => {
                if let Some(gone) = placed.iter().find(|n| !index.nodes.contains_key(*n)) {
                    return Health::Broken {
                        cause: format!("node {gone} the gang was placed on is gone"),
                    };
                }
            }
        }
    }
    let mut ready = 0usize;
    let mut succeeded = 0usize;
    for (key, pod) in pods {
        match pod.phase {
            PodPhase::Failed => {
                return Health::Broken {
                    cause: format!("pod {key} failed"),
                };
            }
            PodPhase::Succeeded => {
                succeeded += 1;
                continue;
            }
            PodPhase::Unknown => {
                return Health::Broken {
                    cause: format!("pod {key} is in phase Unknown (its node stopped reporting)"),
                };
            }
            PodPhase::Pending | PodPhase::Running => {}
        }
        if pod.deleting {
            return Health::Broken {
                cause: format!("pod {key} is being deleted"),
            };
        }
        if let Some(name) = &pod.node {
            match index.nodes.get(name) {
                None => {
                    return Health::Broken {
                        cause: format!("node {name} of pod {key} is gone"),
                    };
                }
                Some(n) if !n.schedulable => {
                    return Health::Broken {
                        cause: format!("node {name} of pod {key} is NotReady or cordoned"),
                    };
                }
                Some(_) => {}
            }
        }
        if pod.ready {
            ready += 1;
        }
    }
    if pods.len() < expected {
        return Health::Broken {
            cause: format!(
                "{} of the gang's {expected} pods are missing",
                expected - pods.len()
            ),
        };
    }
    if succeeded == expected {
        return Health::Succeeded;
    }
    if ready + succeeded >= expected {
        return Health::Running;
    }
    let deadline = admitted_at.saturating_add(ready_timeout);
    if now >= deadline {
        Health::TimedOut
    } else {
        Health::Starting { deadline }
    }
}

/// Why a pod pinned to node `pinned` and not yet bound there never will be, if it never will:
/// the node is gone, cordoned, or NotReady for [`PINNED_NODE_GRACE_SECONDS`] or longer (a
/// node that does not say since when counts as down long enough).
fn pin_lost(pinned: &str, index: &Index, now: i64) -> Option<String> {
    let Some(info) = index.nodes.get(pinned) else {
        return Some("is gone".to_owned());
    };
    if info.schedulable {
        return None;
    }
    match index.not_ready(pinned) {
        // Ready, yet not schedulable: cordoned.
        None => Some("is cordoned".to_owned()),
        Some(down) => match down.since {
            Some(since) if now.saturating_sub(since) < PINNED_NODE_GRACE_SECONDS => None,
            Some(since) => Some(format!(
                "has been NotReady ({}) for {} s",
                down.status,
                now.saturating_sub(since)
            )),
            None => Some(format!("is NotReady ({})", down.status)),
        },
    }
}

/// When a job evicted for the `requeues`-th time (0-based) may try again: exponential backoff
/// from `now`, capped.
pub fn requeue_at(now: i64, requeues: i32) -> i64 {
    let exponent = u32::try_from(requeues.clamp(0, 20)).unwrap_or(0);
    let delay = REQUEUE_BASE_SECONDS
        .saturating_mul(1i64 << exponent)
        .min(REQUEUE_MAX_SECONDS);
    now.saturating_add(delay)
}
