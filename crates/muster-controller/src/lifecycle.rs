//! How an admitted gang is doing, from its pods and their nodes: pure, so every rule of the
//! lifecycle is a table test.
//!
//! A gang is one unit: it is Running only when every pod is Ready, it has Succeeded only when
//! every pod has, and one failed pod — or one pod whose node is gone, NotReady or cordoned
//! before it finished — breaks the whole gang.

use muster_api::ObjectRef;
use muster_topology::NodeInfo;

use crate::index::{PodPhase, PodRecord};

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

/// The health of a gang of `expected` pods admitted at `admitted_at` (seconds), placed on the
/// nodes `placed`, given its pods of the current attempt (key, record) and a node lookup.
pub fn health<'a>(
    expected: usize,
    placed: &[String],
    pods: &[(&'a ObjectRef, &'a PodRecord)],
    node: impl Fn(&str) -> Option<&'a NodeInfo>,
    admitted_at: i64,
    ready_timeout: i64,
    now: i64,
) -> Health {
    // A node the gang was placed on vanished before every pod was bound to it (an
    // autoscaler removed it as idle, an admin deleted it): the unbound pods, pinned there,
    // can never run. Restart now rather than wait out the pods-ready timeout.
    let unbound = pods
        .iter()
        .any(|(_, p)| p.node.is_none() && p.phase == PodPhase::Pending);
    if unbound && let Some(gone) = placed.iter().find(|n| node(n.as_str()).is_none()) {
        return Health::Broken {
            cause: format!("node {gone} the gang was placed on is gone"),
        };
    }
    // The same for a placed node that stopped reporting or was cordoned: the scheduler binds
    // no new pod there, so a pod pinned to it waits for good. A node that holds one of the
    // gang's bound pods is judged by that pod below (a finished pod's node may go away
    // without harm); one that holds none has a pinned pod still to bind.
    if unbound
        && let Some(down) = placed.iter().find(|n| {
            node(n.as_str()).is_some_and(|info| !info.schedulable)
                && !pods
                    .iter()
                    .any(|(_, p)| p.node.as_deref() == Some(n.as_str()))
        })
    {
        return Health::Broken {
            cause: format!("node {down} the gang was placed on is NotReady or cordoned"),
        };
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
            match node(name) {
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

/// When a job evicted for the `requeues`-th time (0-based) may try again: exponential backoff
/// from `now`, capped.
pub fn requeue_at(now: i64, requeues: i32) -> i64 {
    let exponent = u32::try_from(requeues.clamp(0, 20)).unwrap_or(0);
    let delay = REQUEUE_BASE_SECONDS
        .saturating_mul(1i64 << exponent)
        .min(REQUEUE_MAX_SECONDS);
    now.saturating_add(delay)
}
