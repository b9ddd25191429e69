//! The workloads teams already run — `batch/v1` Jobs (indexed too) and JobSets — read as the
//! `GpuJob` admission would see: the same queue, pod sets, topology, TPU slices and GPU shares,
//! asked for with a label and pod-template annotations that mirror the GpuJob's fields (see
//! [`crate::wire`]). Every error names the field of the Job or JobSet to fix, not the GpuJob's.
//!
//! - A Job is one pod set, `main`, of `min(parallelism, completions)` pods.
//! - A JobSet is one pod set per replicated Job, of `replicas × min(parallelism, completions)`
//!   pods. A TPU replicated Job asks for one whole slice per replica. A replicated Job under
//!   the JobSet's exclusive-topology annotation is one pod set per replica (`<name>-<i>`), each
//!   required in one domain of that level, so no two child Jobs share a domain.
//!
//! - A pod group (pods labelled `muster.dev/pod-group`) is one pod set, `main`, of the size
//!   its pods give (`muster.dev/pod-group-size`); see [`pod_group_as_gpujob`].
//!
//! Pure: no I/O.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobCondition, JobSpec};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use crate::backoff::{gang_restarts, job_pod_failures_survived, jobset_pod_failures_survived};
use crate::document::read_lenient;
use crate::gpujob::{GpuJob, GpuJobSpec, PodSet, TopologyRequest, TpuSliceRequest};
use crate::jobset::{EXCLUSIVE_TOPOLOGY_ANNOTATION, JobSet};
use crate::tpu::{ACCELERATOR_LABEL, TOPOLOGY_LABEL};
use crate::validation::{FieldError, Validate};
use crate::wire::{
    GPU_SHARE_ANNOTATION, QUEUE_NAME_LABEL, TOPOLOGY_PREFERRED_ANNOTATION,
    TOPOLOGY_REQUIRED_ANNOTATION, TPU_ACCELERATOR_ANNOTATION, TPU_TOPOLOGY_ANNOTATION,
};

mod pod_group;

pub use pod_group::{
    pod_group_as_gpujob, pod_group_entry_name, pod_group_of, pod_group_size,
    scheduling_group_as_gpujob, scheduling_group_of,
};

/// The `apiVersion` of the Jobs Muster queues.
pub const JOB_API_VERSION: &str = "batch/v1";
/// The `apiVersion` of the JobSets Muster queues.
pub const JOBSET_API_VERSION: &str = "jobset.x-k8s.io/v1alpha2";

/// The name of the GpuJob the controller makes as the queue entry of the Job named `job`.
pub fn entry_name(job: &str) -> String {
    format!("{JOB_ENTRY_PREFIX}{job}")
}

/// What the name of a Job's queue entry begins with, before the Job's name.
pub const JOB_ENTRY_PREFIX: &str = "job-";

/// The name of the GpuJob the controller makes as the queue entry of the JobSet named
/// `jobset`.
pub fn jobset_entry_name(jobset: &str) -> String {
    format!("jobset-{jobset}")
}

/// Reads `value` as a workload Muster queues besides its own kinds — a `batch/v1` Job or a
/// `jobset.x-k8s.io/v1alpha2` JobSet — as the GpuJob admission sees; `None` for any other
/// kind. Fields Muster does not read are ignored, as they belong to other APIs.
pub fn read(value: Value) -> Option<Result<GpuJob, Vec<FieldError>>> {
    let field = |name: &str| value.get(name).and_then(Value::as_str).unwrap_or_default();
    match (field("apiVersion"), field("kind")) {
        (JOB_API_VERSION, "Job") => Some(
            read_lenient::<Job>(value)
                .map_err(|e| vec![e])
                .and_then(|job| job_as_gpujob(&job)),
        ),
        (JOBSET_API_VERSION, "JobSet") => Some(
            read_lenient::<JobSet>(value)
                .map_err(|e| vec![e])
                .and_then(|jobset| jobset_as_gpujob(&jobset)),
        ),
        _ => None,
    }
}

/// Whether `value` carries [`QUEUE_NAME_LABEL`]: a Job, JobSet or pod without it is never
/// Muster's.
pub fn is_queued(value: &Value) -> bool {
    value
        .pointer("/metadata/labels")
        .and_then(|labels| labels.get(QUEUE_NAME_LABEL))
        .is_some()
}

/// A Job read as the GpuJob admission sees (see the module docs); every problem, each with
/// the Job's field and the fix.
pub fn job_as_gpujob(job: &Job) -> Result<GpuJob, Vec<FieldError>> {
    let spec = job.spec.clone().unwrap_or_default();
    let count = pods_per_job(&spec);
    let origin = Origin::new("spec.template", "spec.parallelism", None, &spec.template);
    let mut errors = Vec::new();
    let set = pod_set("main", &spec.template, count, 1, None, &origin, &mut errors);
    let mut entry = read_as_gpujob(&job.metadata, vec![(set, origin)], errors)?;
    entry.spec.backoff_limit = Some(gang_restarts(job_pod_failures_survived(&spec)));
    Ok(entry)
}

/// A JobSet read as the GpuJob admission sees (see the module docs); every problem, each with
/// the JobSet's field and the fix.
pub fn jobset_as_gpujob(jobset: &JobSet) -> Result<GpuJob, Vec<FieldError>> {
    let exclusive_for_all = annotation(&jobset.metadata, EXCLUSIVE_TOPOLOGY_ANNOTATION);
    let mut sets = Vec::new();
    let mut errors = Vec::new();
    for (i, replicated) in jobset.spec.replicated_jobs.iter().enumerate() {
        if jobset.is_done(replicated) {
            // Every child Job of it completed (the JobSet ran and was suspended since).
            continue;
        }
        let at = format!("spec.replicatedJobs[{i}]");
        let job_spec = replicated.template.spec.clone().unwrap_or_default();
        let per_job = pods_per_job(&job_spec);
        // The child Jobs still to run: after an eviction, those that had not completed.
        let replicas = jobset.replicas_left(replicated);
        let exclusive = replicated
            .template
            .metadata
            .as_ref()
            .and_then(|m| annotation(m, EXCLUSIVE_TOPOLOGY_ANNOTATION))
            .or(exclusive_for_all);
        let template = &job_spec.template;
        let origin = Origin::new(
            &format!("{at}.template.spec.template"),
            &format!("{at}.replicas"),
            Some(format!("{at}.name")),
            template,
        );
        if asks_for_tpu(template) || exclusive.is_none() {
            // A TPU replicated Job is one slice per replica: the slices are whole node pools
            // already, so an exclusive topology adds nothing.
            let count = replicas.saturating_mul(per_job);
            // A wrong count is a Job's parallelism when each Job is a slice or runs no pods.
            let origin = if asks_for_tpu(template) || per_job <= 0 {
                Origin {
                    count: format!("{at}.template.spec.parallelism"),
                    ..origin
                }
            } else {
                origin
            };
            let set = pod_set(
                &replicated.name,
                template,
                count,
                replicas,
                None,
                &origin,
                &mut errors,
            );
            sets.push((set, origin));
        } else {
            for replica in 0..replicas.max(0) {
                let name = format!("{}-{replica}", replicated.name);
                let origin = Origin {
                    count: format!("{at}.template.spec.parallelism"),
                    ..origin.clone()
                };
                let set = pod_set(&name, template, per_job, 1, exclusive, &origin, &mut errors);
                sets.push((set, origin));
            }
        }
    }
    if jobset.spec.replicated_jobs.is_empty() {
        errors.push(FieldError {
            path: "spec.replicatedJobs".into(),
            message: "a JobSet needs at least one replicated Job".into(),
        });
    }
    let mut entry = read_as_gpujob(&jobset.metadata, sets, errors)?;
    let survived = jobset_pod_failures_survived(jobset);
    entry.spec.backoff_limit = survived.map(gang_restarts);
    Ok(entry)
}

/// Where a pod set's fields come from in the Job or JobSet, for error paths.
#[derive(Clone, Debug)]
struct Origin {
    /// The pod template.
    template: String,
    /// What sets the pod count.
    count: String,
    /// The replicated Job's name (a JobSet's), which names the pod set.
    name: Option<String>,
    /// Where the TPU slice's accelerator and shape were read, when the template asks for one.
    tpu: Option<(String, String)>,
}

impl Origin {
    fn new(template: &str, count: &str, name: Option<String>, spec: &PodTemplateSpec) -> Origin {
        Origin {
            template: template.to_owned(),
            count: count.to_owned(),
            name,
            tpu: tpu_slice(spec, template)
                .map(|(accelerator, shape)| (accelerator.path, shape.path)),
        }
    }
}

/// How a Job's run ended, from its conditions: `Some(true)` once it met its success criteria
/// (`SuccessCriteriaMet`, which the Job controller adds as soon as the outcome is settled and
/// before its pods are gone, or `Complete`), `Some(false)` once it is bound to fail
/// (`FailureTarget` or `Failed`, with the condition's message), `None` while neither holds.
/// Reading the early conditions frees a queue entry from preemption a few seconds sooner; its
/// quota still comes back only when its pods are gone.
pub fn finished(job: &Job) -> Option<(bool, String)> {
    finished_by(job.status.as_ref()?.conditions.as_ref()?)
}

/// How a Job's run ended, from its `status.conditions` (see [`finished`]).
pub fn finished_by(conditions: &[JobCondition]) -> Option<(bool, String)> {
    conditions
        .iter()
        .filter(|c| c.status == "True")
        .find_map(|c| match c.type_.as_str() {
            "Complete" | "SuccessCriteriaMet" => Some((true, "the Job completed".to_owned())),
            "Failed" | "FailureTarget" => Some((
                false,
                format!(
                    "the Job failed: {}",
                    c.message
                        .as_deref()
                        .or(c.reason.as_deref())
                        .unwrap_or("no reason given")
                ),
            )),
            _ => None,
        })
}

/// How many pods one Job runs at once: `min(parallelism, completions)`, parallelism 1 when
/// unset, completions unset meaning as many as run in parallel.
pub fn pods_per_job(spec: &JobSpec) -> i32 {
    pods_at_once(spec.parallelism, spec.completions)
}

/// How many pods a Job of this `spec.parallelism` and `spec.completions` runs at once (see
/// [`pods_per_job`]).
pub fn pods_at_once(parallelism: Option<i32>, completions: Option<i32>) -> i32 {
    let parallelism = parallelism.unwrap_or(1);
    completions.map_or(parallelism, |completions| completions.min(parallelism))
}

fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

fn node_selector<'a>(template: &'a PodTemplateSpec, key: &str) -> Option<&'a str> {
    template
        .spec
        .as_ref()
        .and_then(|s| s.node_selector.as_ref())
        .and_then(|s| s.get(key))
        .map(String::as_str)
}

/// One value of a template, with the path it was read from.
struct Read<'a> {
    value: &'a str,
    path: String,
}

/// The template's TPU slice — its accelerator and shape: Muster's annotations, else GKE's
/// node selectors (as the GKE TPU guides write a slice's Job).
fn tpu_slice<'a>(template: &'a PodTemplateSpec, at: &str) -> Option<(Read<'a>, Read<'a>)> {
    let meta = template.metadata.as_ref();
    let accelerator = meta.and_then(|m| annotation(m, TPU_ACCELERATOR_ANNOTATION));
    let topology = meta.and_then(|m| annotation(m, TPU_TOPOLOGY_ANNOTATION));
    if accelerator.is_some() || topology.is_some() {
        return Some((
            Read {
                value: accelerator.unwrap_or_default(),
                path: annotation_path(at, TPU_ACCELERATOR_ANNOTATION),
            },
            Read {
                value: topology.unwrap_or_default(),
                path: annotation_path(at, TPU_TOPOLOGY_ANNOTATION),
            },
        ));
    }
    Some((
        Read {
            value: node_selector(template, ACCELERATOR_LABEL)?,
            path: format!("{at}.spec.nodeSelector[{ACCELERATOR_LABEL}]"),
        },
        Read {
            value: node_selector(template, TOPOLOGY_LABEL)?,
            path: format!("{at}.spec.nodeSelector[{TOPOLOGY_LABEL}]"),
        },
    ))
}

fn asks_for_tpu(template: &PodTemplateSpec) -> bool {
    tpu_slice(template, "").is_some()
}

fn annotation_path(template: &str, key: &str) -> String {
    format!("{template}.metadata.annotations[{key}]")
}

/// One pod set from a template; its topology from the template's annotations (an exclusive
/// topology, when given, is its required level).
fn pod_set(
    name: &str,
    template: &PodTemplateSpec,
    count: i32,
    slices: i32,
    exclusive: Option<&str>,
    origin: &Origin,
    errors: &mut Vec<FieldError>,
) -> PodSet {
    let meta = template.metadata.clone().unwrap_or_default();
    let required = annotation(&meta, TOPOLOGY_REQUIRED_ANNOTATION);
    if let (Some(level), Some(exclusive)) = (required, exclusive)
        && level != exclusive
    {
        errors.push(FieldError {
            path: annotation_path(&origin.template, TOPOLOGY_REQUIRED_ANNOTATION),
            message: format!(
                "requires {level:?} while the JobSet's {EXCLUSIVE_TOPOLOGY_ANNOTATION} is {exclusive:?}; give one level"
            ),
        });
    }
    let tpu =
        tpu_slice(template, &origin.template).map(|(accelerator, topology)| TpuSliceRequest {
            accelerator: accelerator.value.to_owned(),
            topology: topology.value.to_owned(),
            slices: (slices != 1).then_some(slices),
            allow_rotation: false,
        });
    let topology = TopologyRequest {
        required: required.or(exclusive).map(str::to_owned),
        preferred: annotation(&meta, TOPOLOGY_PREFERRED_ANNOTATION).map(str::to_owned),
        tpu,
    };
    PodSet {
        name: name.to_owned(),
        count,
        topology: (topology != TopologyRequest::default()).then_some(topology),
        template: template.clone(),
        gpu_share: annotation(&meta, GPU_SHARE_ANNOTATION).map(str::to_owned),
    }
}

/// The GpuJob of `sets`, validated as one, its errors translated to the fields they came from.
fn read_as_gpujob(
    meta: &ObjectMeta,
    sets: Vec<(PodSet, Origin)>,
    mut errors: Vec<FieldError>,
) -> Result<GpuJob, Vec<FieldError>> {
    let queue = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(QUEUE_NAME_LABEL))
        .cloned();
    if queue.is_none() {
        errors.push(FieldError {
            path: format!("metadata.labels[{QUEUE_NAME_LABEL}]"),
            message: format!(
                "missing; Muster queues only workloads labelled {QUEUE_NAME_LABEL}: <LocalQueue>"
            ),
        });
    }
    let priority_class_name = sets
        .first()
        .and_then(|(set, _)| set.template.spec.as_ref())
        .and_then(|s| s.priority_class_name.clone());
    let origins: Vec<Origin> = sets.iter().map(|(_, o)| o.clone()).collect();
    let job = GpuJob {
        metadata: ObjectMeta {
            name: meta.name.clone(),
            namespace: meta.namespace.clone(),
            uid: meta.uid.clone(),
            creation_timestamp: meta.creation_timestamp.clone(),
            labels: meta.labels.clone(),
            ..ObjectMeta::default()
        },
        spec: GpuJobSpec {
            queue_name: queue.unwrap_or_default(),
            priority_class_name,
            pod_sets: sets.into_iter().map(|(set, _)| set).collect(),
            ..GpuJobSpec::default()
        },
        status: None,
    };
    for error in job.validate() {
        let path = translate(&error.path, &origins);
        // A missing queue is said once, at the label.
        if path.starts_with("metadata.labels[") && errors.iter().any(|e| e.path == path) {
            continue;
        }
        let message = reword(&error.message, &path);
        errors.push(FieldError { path, message });
    }
    if errors.is_empty() {
        Ok(job)
    } else {
        Err(errors)
    }
}

/// A GpuJob's error message in the words of the Job or JobSet at `path`: its annotations and
/// fields, not the GpuJob's.
fn reword(message: &str, path: &str) -> String {
    let message = message
        .replace(
            "give at most one of required, preferred or tpu",
            &format!(
                "give at most one of {TOPOLOGY_REQUIRED_ANNOTATION}, {TOPOLOGY_PREFERRED_ANNOTATION} or a TPU slice"
            ),
        )
        .replace("remove gpuShare", &format!("remove {GPU_SHARE_ANNOTATION}"))
        .replace("gpuShare is set", &format!("{GPU_SHARE_ANNOTATION} is set"));
    if path.ends_with(".parallelism") {
        message.replace("set count to", "set parallelism and completions to")
    } else {
        message
    }
}

/// A GpuJob field's path as the Job's or JobSet's field it was read from.
fn translate(path: &str, origins: &[Origin]) -> String {
    if path == "spec.queueName" {
        return format!("metadata.labels[{QUEUE_NAME_LABEL}]");
    }
    if path == "spec.priorityClassName" {
        return origins.first().map_or_else(
            || path.to_owned(),
            |o| format!("{}.spec.priorityClassName", o.template),
        );
    }
    let Some(rest) = path.strip_prefix("spec.podSets[") else {
        return path.to_owned();
    };
    let Some((index, field)) = rest.split_once(']') else {
        return path.to_owned();
    };
    let Some(origin) = index.parse::<usize>().ok().and_then(|i| origins.get(i)) else {
        return path.to_owned();
    };
    if let Some((accelerator, shape)) = &origin.tpu {
        match field {
            ".topology.tpu.accelerator" => return accelerator.clone(),
            ".topology.tpu.topology" | ".topology.tpu" => return shape.clone(),
            _ => {}
        }
    }
    let annotations: BTreeMap<&str, &str> = [
        (".topology.required", TOPOLOGY_REQUIRED_ANNOTATION),
        (".topology.preferred", TOPOLOGY_PREFERRED_ANNOTATION),
        (".gpuShare", GPU_SHARE_ANNOTATION),
    ]
    .into();
    if let Some(template_field) = field.strip_prefix(".template") {
        return format!("{}{template_field}", origin.template);
    }
    if field == ".count" || field == ".topology.tpu.slices" {
        return origin.count.clone();
    }
    if field == ".name" {
        return origin
            .name
            .clone()
            .unwrap_or_else(|| "metadata.name".to_owned());
    }
    if field == ".topology" {
        return format!("{}.metadata.annotations", origin.template);
    }
    match annotations.get(field) {
        Some(key) => annotation_path(&origin.template, key),
        None => format!("{}{field}", origin.template),
    }
}

#[cfg(test)]
mod tests;
