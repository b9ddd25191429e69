//! Workloads written as Kubernetes manifests: GpuJobs, and `batch/v1` Jobs and JobSets
//! labelled `muster.dev/queue-name`, each read exactly as the controller reads it for its
//! queue entry ([`muster_api::workload`]) — the same pod sets, counts, topology and priority.
//! A researcher replays the very files a team submits, and `muster fit` answers for the same
//! files.
//!
//! A manifest says what a job asks for, not when it comes or how long it runs: the scenario
//! gives both ([`ManifestSpec`]). What the simulator cannot honour is an error naming the
//! document and the field, never dropped: required node affinity, and pod sets that differ
//! in topology or node selector (a simulated job has one of each). Tolerations are read and
//! have no effect, since simulated nodes carry no taints.

use std::collections::BTreeMap;

use muster_api::GpuJob;
use muster_api::manifest::{Located, objects};
use muster_api::validation::Validate;
use muster_topology::{Constraint, PodSetRequest};
use serde::Deserialize;
use serde_json::Value;

use super::TraceJob;

/// One manifest file of a scenario's workload and how its jobs arrive and run.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ManifestSpec {
    /// The file, relative to the scenario: GpuJobs, labelled Jobs and JobSets, and the
    /// PriorityClasses they name (other objects are an error).
    pub path: String,
    /// How long each job runs once its gang has started, seconds.
    pub duration_seconds: i64,
    /// When the file's jobs are first submitted, seconds. Default 0.
    #[serde(default)]
    pub submit_seconds: i64,
    /// How many times the file's jobs are submitted. Default 1.
    #[serde(default = "one")]
    pub copies: u32,
    /// Seconds between two copies. Default 0 (all at once).
    #[serde(default)]
    pub every_seconds: i64,
    /// Announce the duration as each job's expected runtime (for backfill) when the manifest
    /// gives none.
    #[serde(default)]
    pub announce_runtime: bool,
}

fn one() -> u32 {
    1
}

/// Why a manifest file cannot be simulated: the document (`3`, or `2:items[5]`) and what is
/// wrong, with the field and the fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}: document {document}: {message}")]
pub struct ManifestError {
    /// The file.
    pub file: String,
    /// The document (from 1), or `-` for the file as a whole.
    pub document: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

/// The jobs of the manifest file `file` (its text `text`) in `namespace`, submitted and run as
/// `spec` says: each copy's jobs in file order, ids `<name>` (`<name>-<copy>` when there are
/// several copies).
pub fn read_manifests(
    file: &str,
    text: &str,
    namespace: &str,
    spec: &ManifestSpec,
) -> Result<Vec<TraceJob>, ManifestError> {
    let error = |document: &str, message: String| ManifestError {
        file: file.to_owned(),
        document: document.to_owned(),
        message,
    };
    if spec.duration_seconds < 1 {
        return Err(error(
            "-",
            format!(
                "durationSeconds must be at least 1, got {}",
                spec.duration_seconds
            ),
        ));
    }
    if spec.copies == 0 || spec.every_seconds < 0 || spec.submit_seconds < 0 {
        return Err(error(
            "-",
            "copies must be at least 1, everySeconds and submitSeconds at least 0".to_owned(),
        ));
    }
    let (documents, syntax) = objects(text);
    if let Some(bad) = syntax {
        return Err(error(&bad.label, bad.message));
    }
    let classes = priority_classes(&documents).map_err(|(d, m)| error(&d, m))?;
    let mut jobs: Vec<TraceJob> = Vec::new();
    // Each job's name with the document it came from: a name given twice is an error.
    let mut seen: BTreeMap<String, &str> = BTreeMap::new();
    for document in &documents {
        if kind(&document.value) == Some("PriorityClass") {
            continue;
        }
        let job = read_job(&document.value, namespace).map_err(|m| error(&document.label, m))?;
        let job = trace_job(&job, spec, &classes)
            .map_err(|m| error(&document.label, format!("{}: {m}", name_of(&job))))?;
        if let Some(first) = seen.insert(job.id.clone(), &document.label) {
            return Err(error(
                &document.label,
                format!(
                    "{} is named twice (first in document {first}); give each job its own name",
                    job.id
                ),
            ));
        }
        jobs.push(job);
    }
    if jobs.is_empty() {
        return Err(error(
            "-",
            "holds no GpuJob, Job or JobSet to submit".to_owned(),
        ));
    }
    let mut out = Vec::with_capacity(jobs.len() * spec.copies as usize);
    for copy in 0..spec.copies {
        let submit = spec
            .submit_seconds
            .saturating_add(spec.every_seconds.saturating_mul(i64::from(copy)));
        for job in &jobs {
            let mut job = job.clone();
            if spec.copies > 1 {
                job.id = format!("{}-{copy}", job.id);
            }
            job.submit = submit;
            out.push(job);
        }
    }
    Ok(out)
}

fn kind(value: &Value) -> Option<&str> {
    value.get("kind").and_then(Value::as_str)
}

fn name_of(job: &GpuJob) -> &str {
    job.metadata.name.as_deref().unwrap_or_default()
}

/// The PriorityClasses of the file, by name.
fn priority_classes(documents: &[Located]) -> Result<BTreeMap<String, i32>, (String, String)> {
    let mut out = BTreeMap::new();
    for d in documents
        .iter()
        .filter(|d| kind(&d.value) == Some("PriorityClass"))
    {
        let name = d
            .value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                (
                    d.label.clone(),
                    "a PriorityClass has no metadata.name".into(),
                )
            })?;
        let value = d
            .value
            .get("value")
            .and_then(Value::as_i64)
            .and_then(|v| i32::try_from(v).ok())
            .ok_or_else(|| {
                (
                    d.label.clone(),
                    format!("PriorityClass {name}: value must be a 32-bit integer"),
                )
            })?;
        out.insert(name.to_owned(), value);
    }
    Ok(out)
}

/// A document as the GpuJob admission sees: a GpuJob as written, a labelled Job or JobSet as
/// its queue entry.
fn read_job(value: &Value, namespace: &str) -> Result<GpuJob, String> {
    let listed = |errors: Vec<muster_api::FieldError>| {
        errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    };
    let job = match muster_api::workload::read(value.clone()) {
        Some(_) if !muster_api::workload::is_queued(value) => {
            return Err(format!(
                "a {} without the label {} is never queued; label it with its LocalQueue",
                kind(value).unwrap_or_default(),
                muster_api::wire::QUEUE_NAME_LABEL
            ));
        }
        Some(read) => read.map_err(listed)?,
        None => match muster_api::document::MusterObject::from_value(value.clone()) {
            Ok(muster_api::document::MusterObject::GpuJob(job)) => *job,
            Ok(_) => {
                return Err(format!(
                    "a {} belongs in the scenario's queues file, not its workload",
                    kind(value).unwrap_or_default()
                ));
            }
            Err(errors) => return Err(listed(errors)),
        },
    };
    let errors = job.validate();
    if !errors.is_empty() {
        return Err(listed(errors));
    }
    match job.metadata.namespace.as_deref() {
        Some(ns) if ns != namespace => Err(format!(
            "metadata.namespace is {ns:?}, but the scenario runs namespace {namespace:?}; remove it or set the scenario's namespace"
        )),
        _ => Ok(job),
    }
}

/// The simulated job of `job`, or what it asks for that the simulator cannot honour.
fn trace_job(
    job: &GpuJob,
    spec: &ManifestSpec,
    classes: &BTreeMap<String, i32>,
) -> Result<TraceJob, String> {
    let s = &job.spec;
    let priority = match (s.priority, &s.priority_class_name) {
        (Some(p), _) => p,
        (None, Some(class)) => *classes.get(class).ok_or_else(|| {
            format!("priorityClassName {class:?}: no PriorityClass of that name in the file; add one (scheduling.k8s.io/v1) or set spec.priority")
        })?,
        (None, None) => 0,
    };
    if s.accept_shared_gpus {
        return Err(
            "acceptSharedGpus: simulated nodes have no time-shared GPUs; remove it".to_owned(),
        );
    }
    let mut sets = Vec::with_capacity(s.pod_sets.len());
    for set in &s.pod_sets {
        let request = PodSetRequest::from_pod_set(set, None).map_err(|e| e.to_string())?;
        if !request.affinity.is_empty() {
            return Err(format!(
                "pod set {}: required node affinity is not simulated; use nodeSelector",
                set.name
            ));
        }
        sets.push(request);
    }
    let Some(first) = sets.first() else {
        return Err("no pod sets".to_owned());
    };
    if let Some(other) = sets.iter().find(|r| r.constraint != first.constraint) {
        return Err(format!(
            "pod sets {} and {} ask for different topologies; a simulated job has one",
            first.name, other.name
        ));
    }
    if let Some(other) = sets.iter().find(|r| r.node_selector != first.node_selector) {
        return Err(format!(
            "pod sets {} and {} select different nodes; a simulated job has one nodeSelector",
            first.name, other.name
        ));
    }
    let topology = match &first.constraint {
        Constraint::None => String::new(),
        Constraint::Required(level) => format!("required:{level}"),
        Constraint::Preferred(level) => format!("preferred:{level}"),
        Constraint::Tpu {
            accelerator,
            shape,
            slices,
            allow_rotation,
        } => format!(
            "tpu:{accelerator}:{shape}:{slices}{}",
            if *allow_rotation { ":rotate" } else { "" }
        ),
    };
    Ok(TraceJob {
        id: name_of(job).to_owned(),
        submit: spec.submit_seconds,
        duration: spec.duration_seconds,
        queue: s.queue_name.clone(),
        priority,
        pod_sets: sets
            .iter()
            .map(|r| {
                let requests = r
                    .requests
                    .iter()
                    .filter(|(name, _)| *name != muster_api::resources::names::PODS)
                    .map(|(name, amount)| (name.to_owned(), amount))
                    .collect();
                (r.name.clone(), r.count, requests)
            })
            .collect(),
        topology,
        expected_runtime: s
            .expected_runtime_seconds
            .or(spec.announce_runtime.then_some(spec.duration_seconds)),
        node_selector: first.node_selector.clone(),
    })
}
