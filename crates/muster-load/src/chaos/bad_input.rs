//! Bad input on a live cluster: GpuJobs, ClusterQueues, LocalQueues and ResourceFlavors drawn
//! with proptest from the run's seed — each a valid object with at most one field replaced by a
//! drawn value — applied while the workload runs. Some the CRD schema refuses; some it takes
//! though `validate()` rejects them; some are valid.
//!
//! What each must come to is judged from the object the API server stored: a valid job must
//! finish, or wait with a reason that is not `InvalidJob` (a drawn queue name or topology
//! level may name nothing that exists); an invalid job, ClusterQueue or LocalQueue must carry a
//! condition (`Valid` for a job or flavor, `Active` for a queue) that is False and names the
//! field `validate()` names first; a valid ClusterQueue must be `Active`, a valid flavor
//! `Valid`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use muster_api::{ClusterQueue, GpuJob, LocalQueue, ResourceFlavor, Validate};
use proptest::prelude::*;
use proptest::strategy::ValueTree as _;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde::Serialize;
use serde_json::{Value, json};

use super::faults::secs;
use super::workload::{BLOCK_LABEL, FLAVOR, GPU_LABEL};
use muster_testkit::checker::{Checker, ViolationKind};
use muster_testkit::kubelet::RUN_ANNOTATION;

/// The namespace (and LocalQueue) bad jobs are submitted to.
pub const NAMESPACE: &str = "team-0";

/// The kinds of object drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum BadKind {
    /// A GpuJob in [`NAMESPACE`].
    GpuJob,
    /// A ClusterQueue outside the workload's cohort.
    ClusterQueue,
    /// A LocalQueue in [`NAMESPACE`].
    LocalQueue,
    /// A ResourceFlavor no queue of the workload uses.
    ResourceFlavor,
}

/// One drawn object.
#[derive(Clone, Debug, PartialEq)]
pub struct BadObject {
    /// Its kind.
    pub kind: BadKind,
    /// Its name.
    pub name: String,
    /// The field replaced (`""`: none), as a JSON pointer into the object.
    pub field: String,
    /// The whole object.
    pub value: Value,
}

/// What became of a drawn object once applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The API server refused it (the CRD schema): its answer.
    Refused(String),
    /// Stored, and `validate()` finds nothing wrong.
    Valid,
    /// Stored, and `validate()` names this field first.
    Invalid(String),
    /// Stored, but Muster's types cannot read it back: the error.
    Unreadable(String),
}

/// Counts of what the bad input came to (`summary.json`).
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BadInputStats {
    /// Objects drawn, by kind.
    pub drawn: BTreeMap<String, usize>,
    /// Refused by the API server (the schema).
    pub refused: usize,
    /// Stored and valid.
    pub valid: usize,
    /// Stored though invalid: the controller must report each.
    pub invalid: usize,
    /// Stored but unreadable by Muster's types.
    pub unreadable: usize,
}

fn job_base(name: &str) -> Value {
    json!({"apiVersion": "muster.dev/v1alpha1", "kind": "GpuJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"queueName": NAMESPACE, "priority": 0, "backoffLimit": 20,
            "podSets": [{"name": "workers", "count": 1,
                "topology": {"required": BLOCK_LABEL},
                "template": {"metadata": {"annotations": {RUN_ANNOTATION: "1000"}},
                    "spec": {"restartPolicy": "Never", "containers": [{
                        "name": "main", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}]}})
}

fn queue_base(name: &str) -> Value {
    json!({"apiVersion": "muster.dev/v1alpha1", "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {"cohort": "bad-input",
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "no-such-namespace"}},
            "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"],
                "flavors": [{"name": FLAVOR, "resources": [
                    {"name": "nvidia.com/gpu", "nominalQuota": "8"}]}]}]}})
}

fn local_queue_base(name: &str) -> Value {
    json!({"apiVersion": "muster.dev/v1alpha1", "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"clusterQueue": "bad-cq-0"}})
}

fn flavor_base(name: &str) -> Value {
    json!({"apiVersion": "muster.dev/v1alpha1", "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {"nodeLabels": {GPU_LABEL: "bad-input"},
                 "topologyLevels": [BLOCK_LABEL, "kubernetes.io/hostname"]}})
}

/// Text a person might type into a name or quantity field, junk included.
fn text() -> BoxedStrategy<Value> {
    prop_oneof![
        "[a-z0-9-]{1,20}",
        "[A-Za-z0-9_. /-]{0,70}",
        "[0-9]{1,4}(m|Ki|Mi|Gi|k|e3)?",
        "-?[0-9]{1,3}\\.[0-9]{1,4}",
        Just(String::new()),
    ]
    .prop_map(Value::from)
    .boxed()
}

/// A number, far out of range included.
fn number() -> BoxedStrategy<Value> {
    prop_oneof![
        -5i64..=5,
        Just(i64::from(i32::MAX) + 1),
        Just(-1_000_000i64),
        0i64..=100_000
    ]
    .prop_map(Value::from)
    .boxed()
}

/// (JSON pointer, drawn value) pairs for a kind; the first entry leaves the object valid.
fn fields(kind: BadKind) -> Vec<(&'static str, BoxedStrategy<Value>)> {
    let none = || Just(Value::Null).boxed();
    match kind {
        BadKind::GpuJob => vec![
            ("", none()),
            ("/spec/queueName", text()),
            ("/spec/priority", number()),
            ("/spec/backoffLimit", number()),
            ("/spec/podsReadyTimeoutSeconds", number()),
            ("/spec/expectedRuntimeSeconds", number()),
            ("/spec/podSets/0/name", text()),
            ("/spec/podSets/0/count", number()),
            ("/spec/podSets/0/topology/required", text()),
            (
                "/spec/podSets/0/template/spec/containers/0/resources/limits/nvidia.com~1gpu",
                text(),
            ),
            ("/spec/podSets/0/template/spec/containers/0/name", text()),
        ],
        BadKind::ClusterQueue => vec![
            ("", none()),
            ("/spec/cohort", text()),
            (
                "/spec/resourceGroups/0/flavors/0/resources/0/nominalQuota",
                text(),
            ),
            (
                "/spec/resourceGroups/0/flavors/0/resources/0/borrowingLimit",
                text(),
            ),
            ("/spec/resourceGroups/0/flavors/0/name", text()),
            ("/spec/resourceGroups/0/coveredResources/0", text()),
            ("/spec/resourceGroups/0/flavors/0/resources/0/name", text()),
        ],
        BadKind::LocalQueue => vec![("", none()), ("/spec/clusterQueue", text())],
        BadKind::ResourceFlavor => vec![
            ("", none()),
            ("/spec/topologyLevels/0", text()),
            ("/spec/nodeLabels/chaos.muster.dev~1gpu", text()),
        ],
    }
}

/// Sets the field at JSON `pointer` (creating objects on the way) to `value`.
fn set(object: &mut Value, pointer: &str, value: Value) {
    let mut at = object;
    let parts: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(|p| p.replace("~1", "/").replace("~0", "~"))
        .collect();
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        let next = match at {
            Value::Array(items) => part.parse::<usize>().ok().and_then(|n| items.get_mut(n)),
            Value::Object(map) => {
                if last {
                    map.insert(part.clone(), value);
                    return;
                }
                Some(map.entry(part.clone()).or_insert_with(|| json!({})))
            }
            _ => None,
        };
        match next {
            Some(v) if last => {
                *v = value;
                return;
            }
            Some(v) => at = v,
            None => return,
        }
    }
}

/// `count` objects from `seed`: about half GpuJobs, the rest queues and flavors.
pub fn generate(seed: u64, count: usize) -> Vec<BadObject> {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
    );
    let kinds = prop_oneof![
        4 => Just(BadKind::GpuJob),
        2 => Just(BadKind::ClusterQueue),
        1 => Just(BadKind::LocalQueue),
        1 => Just(BadKind::ResourceFlavor),
    ];
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let Ok(kind) = kinds.new_tree(&mut runner).map(|t| t.current()) else {
            continue;
        };
        let fields = fields(kind);
        let Ok(pick) = (0..fields.len()).new_tree(&mut runner).map(|t| t.current()) else {
            continue;
        };
        let (field, strategy) = &fields[pick];
        let Ok(drawn) = strategy.new_tree(&mut runner).map(|t| t.current()) else {
            continue;
        };
        let name = match kind {
            BadKind::GpuJob => format!("bad-{i:04}"),
            BadKind::ClusterQueue => format!("bad-cq-{i}"),
            BadKind::LocalQueue => format!("bad-lq-{i}"),
            BadKind::ResourceFlavor => format!("bad-rf-{i}"),
        };
        let mut value = match kind {
            BadKind::GpuJob => job_base(&name),
            BadKind::ClusterQueue => queue_base(&name),
            BadKind::LocalQueue => local_queue_base(&name),
            BadKind::ResourceFlavor => flavor_base(&name),
        };
        if !field.is_empty() {
            set(&mut value, field, drawn);
        }
        out.push(BadObject {
            kind,
            name,
            field: (*field).to_owned(),
            value,
        });
    }
    out
}

fn resource(kind: BadKind) -> ApiResource {
    match kind {
        BadKind::GpuJob => ApiResource::erase::<GpuJob>(&()),
        BadKind::ClusterQueue => ApiResource::erase::<ClusterQueue>(&()),
        BadKind::LocalQueue => ApiResource::erase::<LocalQueue>(&()),
        BadKind::ResourceFlavor => ApiResource::erase::<ResourceFlavor>(&()),
    }
}

/// Creates `object` and judges what the API server stored.
pub async fn apply(client: &Client, object: &BadObject) -> anyhow::Result<Verdict> {
    let resource = resource(object.kind);
    let api: Api<DynamicObject> = match object.kind {
        BadKind::GpuJob | BadKind::LocalQueue => {
            Api::namespaced_with(client.clone(), NAMESPACE, &resource)
        }
        BadKind::ClusterQueue | BadKind::ResourceFlavor => Api::all_with(client.clone(), &resource),
    };
    let dynamic: DynamicObject =
        serde_json::from_value(object.value.clone()).context("a drawn object")?;
    let stored = match api.create(&PostParams::default(), &dynamic).await {
        Ok(stored) => stored,
        Err(kube::Error::Api(e)) if e.code == 422 || e.code == 400 => {
            return Ok(Verdict::Refused(e.message));
        }
        Err(kube::Error::Api(e)) if e.code == 409 => {
            // Made by an attempt whose answer was lost: judge what is there.
            api.get(&object.name)
                .await
                .context("reading a drawn object")?
        }
        Err(e) => return Err(e).context("creating a drawn object"),
    };
    let value = serde_json::to_value(&stored).context("a stored object")?;
    let errors = match object.kind {
        BadKind::GpuJob => serde_json::from_value::<GpuJob>(value).map(|o| o.validate()),
        BadKind::ClusterQueue => {
            serde_json::from_value::<ClusterQueue>(value).map(|o| o.validate())
        }
        BadKind::LocalQueue => serde_json::from_value::<LocalQueue>(value).map(|o| o.validate()),
        BadKind::ResourceFlavor => {
            serde_json::from_value::<ResourceFlavor>(value).map(|o| o.validate())
        }
    };
    Ok(match errors {
        Err(e) => Verdict::Unreadable(e.to_string()),
        Ok(errors) => match errors.first() {
            None => Verdict::Valid,
            Some(first) => Verdict::Invalid(first.path.clone()),
        },
    })
}

/// What the controller made of a stored drawn object, read back at the end: `None` when it
/// did what it must, else what is wrong.
pub async fn judge(client: &Client, object: &BadObject, verdict: &Verdict) -> Option<String> {
    if let Verdict::Refused(_) = verdict {
        // The API server refused it: there is nothing for the controller to report.
        return None;
    }
    let conditions = |value: &Value, type_: &str| -> Option<(String, String, String)> {
        value["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == type_)
            .map(|c| {
                (
                    c["status"].as_str().unwrap_or_default().to_owned(),
                    c["reason"].as_str().unwrap_or_default().to_owned(),
                    c["message"].as_str().unwrap_or_default().to_owned(),
                )
            })
    };
    let resource = resource(object.kind);
    let api: Api<DynamicObject> = match object.kind {
        BadKind::GpuJob | BadKind::LocalQueue => {
            Api::namespaced_with(client.clone(), NAMESPACE, &resource)
        }
        BadKind::ClusterQueue | BadKind::ResourceFlavor => Api::all_with(client.clone(), &resource),
    };
    let stored = match api.get(&object.name).await {
        Ok(stored) => serde_json::to_value(stored).unwrap_or_default(),
        Err(e) => return Some(format!("could not read it back: {e}")),
    };
    let condition = match object.kind {
        BadKind::GpuJob | BadKind::ResourceFlavor => "Valid",
        BadKind::ClusterQueue | BadKind::LocalQueue => "Active",
    };
    let found = conditions(&stored, condition);
    match verdict {
        Verdict::Refused(_) => None,
        Verdict::Unreadable(e) => Some(format!("stored, but unreadable by Muster's types: {e}")),
        Verdict::Invalid(path) => match found {
            Some((status, _, message)) if status == "False" && message.contains(path.as_str()) => {
                None
            }
            other => Some(format!(
                "invalid at {path}, but condition {condition} is {other:?}"
            )),
        },
        Verdict::Valid => match object.kind {
            BadKind::GpuJob => {
                let phase = stored["status"]["phase"].as_str().unwrap_or_default();
                let kind = stored["status"]["pendingReason"]["kind"]
                    .as_str()
                    .unwrap_or_default();
                let ended = phase == "Succeeded";
                let explained = !kind.is_empty() && kind != "InvalidJob";
                (!ended && !explained).then(|| {
                    format!("valid, but neither succeeded nor waits with a reason (phase {phase:?}, reason {kind:?})")
                })
            }
            BadKind::ClusterQueue | BadKind::ResourceFlavor => match found {
                Some((status, _, _)) if status == "True" => None,
                other => Some(format!("valid, but condition {condition} is {other:?}")),
            },
            // A valid LocalQueue may point at a drawn ClusterQueue that is missing or invalid:
            // it must then say which.
            BadKind::LocalQueue => match found {
                Some((status, ..)) if status == "True" => None,
                Some((status, reason, message))
                    if status == "False" && message.contains("spec.clusterQueue") =>
                {
                    let _ = reason;
                    None
                }
                other => Some(format!("condition Active is {other:?}")),
            },
        },
    }
}

// === what the run does with them ===

/// Applies the drawn objects evenly over `span`, each once (retried while the API server
/// cannot be reached); drawn jobs the API server stored are judged by [`judge_all`],
/// not by the checker's end-of-run rules.
pub(super) async fn apply_all(
    client: Client,
    drawn: Vec<BadObject>,
    span: Duration,
    start: Instant,
    checker: Arc<Mutex<Checker>>,
) -> Vec<(BadObject, Verdict)> {
    let mut out = Vec::with_capacity(drawn.len());
    #[expect(clippy::cast_precision_loss, reason = "spacing in seconds")]
    let gap = span.as_secs_f64() / drawn.len().max(1) as f64;
    for (i, object) in drawn.into_iter().enumerate() {
        #[expect(clippy::cast_precision_loss, reason = "spacing in seconds")]
        let at = start + secs(gap * i as f64);
        tokio::time::sleep_until(at.into()).await;
        if object.kind == BadKind::GpuJob {
            checker
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .judge_elsewhere(format!("{NAMESPACE}/{}", object.name));
        }
        for _ in 0..60 {
            match apply(&client, &object).await {
                Ok(verdict) => {
                    out.push((object, verdict));
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    }
    out
}

/// Reads every stored drawn object back and judges what the controller made of it.
pub(super) async fn judge_all(
    client: &Client,
    drawn: &[(BadObject, Verdict)],
) -> (BadInputStats, Vec<(ViolationKind, String, String)>) {
    let mut stats = BadInputStats::default();
    let mut found = Vec::new();
    for (object, verdict) in drawn {
        *stats.drawn.entry(format!("{:?}", object.kind)).or_default() += 1;
        match verdict {
            Verdict::Refused(_) => stats.refused += 1,
            Verdict::Valid => stats.valid += 1,
            Verdict::Invalid(_) => stats.invalid += 1,
            Verdict::Unreadable(_) => stats.unreadable += 1,
        }
        // Conditions may lag a pass behind: a few looks before a verdict.
        let mut problem = None;
        for _ in 0..10 {
            problem = judge(client, object, verdict).await;
            if problem.is_none() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        if let Some(problem) = problem {
            let kind = match verdict {
                Verdict::Unreadable(_) => ViolationKind::Unreadable,
                Verdict::Valid => ViolationKind::ValidReportedInvalid,
                _ => ViolationKind::InvalidNotReported,
            };
            let field = if object.field.is_empty() {
                "no field changed".to_owned()
            } else {
                format!(
                    "{} = {}",
                    object.field,
                    pointer(&object.value, &object.field)
                )
            };
            found.push((
                kind,
                format!("{:?}/{}", object.kind, object.name),
                format!("{field}: {problem}"),
            ));
        }
    }
    (stats, found)
}

/// The value at JSON `pointer` in `value`, as JSON text.
fn pointer(value: &serde_json::Value, pointer: &str) -> String {
    value
        .pointer(pointer)
        .map_or_else(|| "(unset)".to_owned(), ToString::to_string)
}

#[cfg(test)]
mod tests {
    use super::{BadKind, generate, set};
    use serde_json::json;

    #[test]
    fn a_seed_draws_one_set_of_every_kind_with_and_without_a_bad_field() {
        let drawn = generate(5, 200);
        assert_eq!(drawn, generate(5, 200));
        assert_ne!(drawn, generate(6, 200));
        for kind in [
            BadKind::GpuJob,
            BadKind::ClusterQueue,
            BadKind::LocalQueue,
            BadKind::ResourceFlavor,
        ] {
            assert!(drawn.iter().any(|o| o.kind == kind && o.field.is_empty()));
            assert!(drawn.iter().any(|o| o.kind == kind && !o.field.is_empty()));
        }
    }

    #[test]
    fn set_follows_a_json_pointer_with_escapes_and_array_indices() {
        let mut v = json!({"a": [{"b": {}}]});
        set(&mut v, "/a/0/b/x~1y", json!(3));
        set(&mut v, "/a/0/c/d", json!("e"));
        set(&mut v, "/a/5/z", json!(1));
        assert_eq!(v, json!({"a": [{"b": {"x/y": 3}, "c": {"d": "e"}}]}));
    }
}
