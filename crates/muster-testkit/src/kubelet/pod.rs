//! What the fake kubelet knows of each pod, and how the pod asked to behave.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;
use tokio_util::time::delay_queue;

use super::status::{Container, PodFacts};
use super::{
    EXIT_CODE_ANNOTATION, KubeletOptions, NEVER_READY_ANNOTATION, RUN_ANNOTATION,
    START_DELAY_ANNOTATION,
};

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct PodKey {
    pub(super) namespace: String,
    pub(super) name: String,
}

/// Pending < Running < Terminal: a pod only moves forward, so an older watch event never undoes
/// what a newer write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Phase {
    Pending,
    Running,
    Terminal,
}

/// Where a pod's deletion stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Deletion {
    NotRequested,
    /// It has a deletionTimestamp.
    Requested,
    /// The kubelet sent the final delete.
    Sent,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TimerKind {
    /// The start delay is over.
    Start,
    /// The run time is over.
    Finish,
    /// A failed write may be tried again.
    Retry,
}

/// A pod's behaviour, from its annotations and the options.
#[derive(Clone, Debug)]
pub(super) struct Behaviour {
    pub(super) start_delay: Duration,
    pub(super) run: Option<Duration>,
    pub(super) exit_code: i32,
    pub(super) never_ready: bool,
}

impl Behaviour {
    pub(super) fn of(pod: &Pod, uid: &str, options: &KubeletOptions) -> Self {
        let annotations = pod.metadata.annotations.as_ref();
        let get = |key: &str| annotations.and_then(|a| a.get(key)).map(String::as_str);
        let millis = |key: &str| {
            get(key)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_millis)
        };
        let start_delay = millis(START_DELAY_ANNOTATION).unwrap_or_else(|| {
            let mut hasher = DefaultHasher::new();
            uid.hash(&mut hasher);
            let spread = options
                .max_start_delay
                .saturating_sub(options.min_start_delay);
            let fraction = u32::try_from(hasher.finish() % 1001).unwrap_or(0);
            options.min_start_delay + spread * fraction / 1000
        });
        Self {
            start_delay,
            run: millis(RUN_ANNOTATION).or(options.run_time),
            exit_code: get(EXIT_CODE_ANNOTATION)
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0),
            never_ready: get(NEVER_READY_ANNOTATION) == Some("true"),
        }
    }
}

/// What the kubelet knows of one pod.
pub(super) struct Tracked {
    pub(super) uid: String,
    pub(super) node: Option<String>,
    pub(super) phase: Phase,
    pub(super) deletion: Deletion,
    pub(super) behaviour: Behaviour,
    pub(super) containers: Vec<Container>,
    pub(super) init_containers: Vec<Container>,
    /// `startTime` as written (or found), RFC 3339.
    pub(super) started: Option<Value>,
    pub(super) started_at: Option<Timestamp>,
    pub(super) timer: Option<(delay_queue::Key, TimerKind)>,
    /// A timer fired and its action waits for the next reconcile.
    pub(super) due: Option<TimerKind>,
    pub(super) in_flight: bool,
    pub(super) retries: u32,
    pub(super) stuck: bool,
}

impl Tracked {
    pub(super) fn new(pod: &Pod, uid: String, options: &KubeletOptions) -> Self {
        let containers = |list: Option<&Vec<k8s_openapi::api::core::v1::Container>>| {
            list.map(|list| {
                list.iter()
                    .map(|c| Container {
                        name: c.name.clone(),
                        image: c.image.clone().unwrap_or_default(),
                    })
                    .collect()
            })
            .unwrap_or_default()
        };
        let spec = pod.spec.as_ref();
        let started_at = pod
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .map(|t| t.0);
        Self {
            behaviour: Behaviour::of(pod, &uid, options),
            uid,
            node: spec.and_then(|s| s.node_name.clone()),
            phase: Phase::Pending,
            deletion: Deletion::NotRequested,
            containers: containers(spec.map(|s| &s.containers)),
            init_containers: containers(spec.and_then(|s| s.init_containers.as_ref())),
            started: started_at.and_then(|t| serde_json::to_value(Time(t)).ok()),
            started_at,
            timer: None,
            due: None,
            in_flight: false,
            retries: 0,
            stuck: false,
        }
    }

    pub(super) fn facts(&self) -> PodFacts<'_> {
        PodFacts {
            uid: &self.uid,
            containers: &self.containers,
            init_containers: &self.init_containers,
            started: self.started.as_ref().unwrap_or(&Value::Null),
        }
    }
}

pub(super) fn phase_of(pod: &Pod) -> Phase {
    match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Running") => Phase::Running,
        Some("Succeeded" | "Failed") => Phase::Terminal,
        _ => Phase::Pending,
    }
}

pub(super) fn key_of(pod: &Pod) -> Option<PodKey> {
    Some(PodKey {
        namespace: pod.metadata.namespace.clone()?,
        name: pod.metadata.name.clone()?,
    })
}
