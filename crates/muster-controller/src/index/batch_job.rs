//! A `batch/v1` Job labelled with a queue, as the index keeps it: the fields Muster reads,
//! parsed into a record of their own, and its pod template kept as the API server sent it.
//!
//! A Job parsed into k8s-openapi's `Job` is about 4.8 KB before any string (the `Job` 2,640
//! bytes by `size_of`, each `Container` 2,144), and the Job controller writes each Job's
//! status several times as its pods come and go: each write arrives as a watch event whose
//! whole object used to be parsed and kept. Muster reads a Job's name, labels, annotations,
//! owners and UID; how many pods it runs at once and whether it is suspended; the part of its
//! pod template a release writes (labels, annotations, node selector, tolerations,
//! scheduling gates); and from its status whether it may still have pods and how it ended.
//! The rest of the template is read once, to make the Job's queue entry
//! ([`BatchJob::job`]): it is kept as the JSON text the API server sent, parsed only then.
//! Once the Job has finished, its template is dropped whole ([`BatchJob::slimmed`]). Every
//! other field is passed over as the event is parsed, nothing allocated for it.
//!
//! The template's text is taken from the JSON as it is read, so a `BatchJob` is read only
//! from JSON text (`serde_json::from_str` and `from_slice`, as kube reads lists, answers and
//! watch events — the API server writes a watch event's `type` before its `object`), not
//! from a `serde_json::Value` or an event whose object comes before its type.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobCondition, JobSpec};
use k8s_openapi::api::core::v1::{PodSchedulingGate, PodTemplateSpec, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::core::ObjectMeta;
use muster_api::validation::FieldError;
use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// A labelled Job as the index keeps it (see the module docs). Read from the API server
/// through [`crate::lean`], so its metadata comes without managed fields.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct BatchJob {
    /// Its metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What Muster reads of its spec.
    #[serde(default)]
    pub spec: BatchJobSpec,
    /// What Muster reads of its status.
    #[serde(default)]
    pub status: BatchJobStatus,
}

/// What Muster reads of a Job's spec.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BatchJobSpec {
    /// `spec.parallelism`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<i32>,
    /// `spec.completions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completions: Option<i32>,
    /// `spec.completionMode`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_mode: Option<String>,
    /// `spec.suspend`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    /// `spec.activeDeadlineSeconds`: past it the Job controller fails the Job, even one whose
    /// pods have all succeeded but which it has not yet marked complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
    /// `spec.backoffLimit`: the pod failures the Job tolerates, and so the gang restarts its
    /// queue entry makes (see [`muster_api::workload::job_as_gpujob`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_limit: Option<i32>,
    /// `spec.template`.
    #[serde(default)]
    pub template: KeptTemplate,
}

/// What Muster reads of a Job's status.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BatchJobStatus {
    /// `status.active`: pods its controller counts running or pending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active: Option<i32>,
    /// `status.startTime`: set while the Job controller runs it (reset once it took in a
    /// suspension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// `status.conditions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<JobCondition>>,
    /// `status.succeeded`: its pods that succeeded, over every run of the Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeded: Option<i32>,
}

/// A Job's pod template as the index keeps it, until the Job has finished: what a release
/// writes, parsed, and the whole template as the API server sent it. Two are equal when they
/// say the same in what a release writes and hold the same text.
#[derive(Clone, Debug, Default)]
pub struct KeptTemplate {
    /// `metadata.labels`.
    pub labels: Option<BTreeMap<String, String>>,
    /// `metadata.annotations`.
    pub annotations: Option<BTreeMap<String, String>>,
    /// `spec.nodeSelector`.
    pub node_selector: Option<BTreeMap<String, String>>,
    /// `spec.tolerations`.
    pub tolerations: Option<Vec<Toleration>>,
    /// `spec.schedulingGates`.
    pub scheduling_gates: Option<Vec<PodSchedulingGate>>,
    /// The whole template as JSON (`None` for a Job with no template, and once it has
    /// finished).
    whole: Option<Box<RawValue>>,
}

/// The part of a template [`KeptTemplate`] parses: everything else is passed over.
#[derive(Deserialize)]
struct Scheduled {
    #[serde(default)]
    metadata: Option<ScheduledMeta>,
    #[serde(default)]
    spec: Option<ScheduledSpec>,
}

#[derive(Deserialize)]
struct ScheduledMeta {
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ScheduledSpec {
    #[serde(default)]
    node_selector: Option<BTreeMap<String, String>>,
    #[serde(default)]
    tolerations: Option<Vec<Toleration>>,
    #[serde(default)]
    scheduling_gates: Option<Vec<PodSchedulingGate>>,
}

impl KeptTemplate {
    /// The template kept from its JSON: what a release writes parsed from it.
    fn from_json(whole: Box<RawValue>) -> serde_json::Result<KeptTemplate> {
        // A template written as `null` reads as an empty one, as an absent one does.
        let scheduled: Option<Scheduled> = serde_json::from_str(whole.get())?;
        let (meta, spec) = scheduled.map_or((None, None), |s| (s.metadata, s.spec));
        let (labels, annotations) = meta.map_or((None, None), |m| (m.labels, m.annotations));
        let (node_selector, tolerations, scheduling_gates) = spec.map_or((None, None, None), |s| {
            (s.node_selector, s.tolerations, s.scheduling_gates)
        });
        Ok(KeptTemplate {
            labels,
            annotations,
            node_selector,
            tolerations,
            scheduling_gates,
            whole: Some(whole),
        })
    }

    /// `template` as the index keeps it.
    pub fn of(template: &PodTemplateSpec) -> KeptTemplate {
        let meta = template.metadata.as_ref();
        let spec = template.spec.as_ref();
        KeptTemplate {
            labels: meta.and_then(|m| m.labels.clone()),
            annotations: meta.and_then(|m| m.annotations.clone()),
            node_selector: spec.and_then(|s| s.node_selector.clone()),
            tolerations: spec.and_then(|s| s.tolerations.clone()),
            scheduling_gates: spec.and_then(|s| s.scheduling_gates.clone()),
            // A template always serializes; were it not to, the Job reads as having none.
            whole: serde_json::value::to_raw_value(template).ok(),
        }
    }

    /// The whole template, parsed: the default template once the Job has finished (nothing
    /// reads it then). An error names the Job's field when the text kept does not read as a
    /// pod template (the API server validated it, so only a field of a type this build does
    /// not know can).
    pub fn template(&self) -> Result<PodTemplateSpec, FieldError> {
        let Some(whole) = &self.whole else {
            return Ok(PodTemplateSpec::default());
        };
        let template: Result<Option<PodTemplateSpec>, _> = serde_json::from_str(whole.get());
        template.map(Option::unwrap_or_default).map_err(|e| FieldError {
            path: "spec.template".to_owned(),
            message: format!(
                "could not be read as a pod template ({e}); fix the field or write the Job with a template this build of Muster reads"
            ),
        })
    }
}

impl PartialEq for KeptTemplate {
    fn eq(&self, other: &Self) -> bool {
        self.labels == other.labels
            && self.annotations == other.annotations
            && self.node_selector == other.node_selector
            && self.tolerations == other.tolerations
            && self.scheduling_gates == other.scheduling_gates
            && self.whole.as_deref().map(RawValue::get) == other.whole.as_deref().map(RawValue::get)
    }
}

impl<'de> Deserialize<'de> for KeptTemplate {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let whole = Box::<RawValue>::deserialize(deserializer)?;
        KeptTemplate::from_json(whole).map_err(de::Error::custom)
    }
}

impl Serialize for KeptTemplate {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match &self.whole {
            Some(whole) => whole.serialize(serializer),
            // No text (finished, or never had one): what is kept of it.
            None => PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: self.labels.clone(),
                    annotations: self.annotations.clone(),
                    ..ObjectMeta::default()
                }),
                spec: Some(k8s_openapi::api::core::v1::PodSpec {
                    node_selector: self.node_selector.clone(),
                    tolerations: self.tolerations.clone(),
                    scheduling_gates: self.scheduling_gates.clone(),
                    ..Default::default()
                }),
            }
            .serialize(serializer),
        }
    }
}

impl BatchJob {
    /// `job` as the index keeps it.
    pub fn of(job: &Job) -> BatchJob {
        let spec = job.spec.as_ref();
        let status = job.status.as_ref();
        BatchJob {
            metadata: ObjectMeta {
                managed_fields: None,
                ..job.metadata.clone()
            },
            spec: BatchJobSpec {
                parallelism: spec.and_then(|s| s.parallelism),
                completions: spec.and_then(|s| s.completions),
                completion_mode: spec.and_then(|s| s.completion_mode.clone()),
                suspend: spec.and_then(|s| s.suspend),
                active_deadline_seconds: spec.and_then(|s| s.active_deadline_seconds),
                backoff_limit: spec.and_then(|s| s.backoff_limit),
                template: spec
                    .map_or_else(KeptTemplate::default, |s| KeptTemplate::of(&s.template)),
            },
            status: BatchJobStatus {
                active: status.and_then(|s| s.active),
                start_time: status.and_then(|s| s.start_time.clone()),
                conditions: status.and_then(|s| s.conditions.clone()),
                succeeded: status.and_then(|s| s.succeeded),
            },
        }
    }

    /// The Job as its queue entry is read from: its metadata, how many pods it runs and
    /// its whole template (see [`KeptTemplate::template`]).
    pub fn job(&self) -> Result<Job, FieldError> {
        Ok(Job {
            metadata: self.metadata.clone(),
            spec: Some(JobSpec {
                parallelism: self.spec.parallelism,
                completions: self.spec.completions,
                completion_mode: self.spec.completion_mode.clone(),
                suspend: self.spec.suspend,
                active_deadline_seconds: self.spec.active_deadline_seconds,
                backoff_limit: self.spec.backoff_limit,
                template: self.spec.template.template()?,
                ..JobSpec::default()
            }),
            status: None,
        })
    }

    /// How its run ended, from its conditions (see [`muster_api::workload::finished_by`]).
    pub fn finished(&self) -> Option<(bool, String)> {
        muster_api::workload::finished_by(self.status.conditions.as_deref()?)
    }

    /// How many pods its next run makes at once: as many as its parallelism allows of the
    /// completions it still lacks (see [`muster_api::workload::pods_at_once`]). The Job
    /// controller never makes a pod again for a completion that succeeded — an `Indexed` Job
    /// keeps its completed indexes through a suspension — so a Job restarted after some of
    /// its pods succeeded runs the rest only, and a gang counted from its spec alone would
    /// wait for pods that are never made, time out and restart for ever. While some
    /// completions are left, they count; once none is (the Job is about to complete), its
    /// spec does, so a queue entry never asks for no pods.
    pub fn pods_at_once(&self) -> i32 {
        let left = self
            .spec
            .completions
            .map(|completions| match self.status.succeeded {
                Some(succeeded) if succeeded > 0 && succeeded < completions => {
                    completions - succeeded
                }
                _ => completions,
            });
        muster_api::workload::pods_at_once(self.spec.parallelism, left)
    }

    /// The Job as kept once it has finished, without its template: it never runs again, so
    /// nothing is released into it or put back (the entries' step and the job step stop at a
    /// finished Job: [`crate::entries`], [`crate::job`]), and a Job is kept until its owner
    /// deletes it — in a busy cluster most Jobs the index holds have finished.
    #[must_use]
    pub fn slimmed(mut self) -> BatchJob {
        if self.finished().is_some() {
            self.spec.template = KeptTemplate::default();
        }
        self
    }
}

/// `impl kube::Resource` for a type that reads `batch/v1` Jobs in part (its `metadata`
/// field whole): the API paths of Jobs.
macro_rules! batch_job_resource {
    ($reader:ty) => {
        impl kube::Resource for $reader {
            type DynamicType = ();
            type Scope = k8s_openapi::NamespaceResourceScope;

            fn kind((): &()) -> std::borrow::Cow<'_, str> {
                std::borrow::Cow::Borrowed("Job")
            }

            fn group((): &()) -> std::borrow::Cow<'_, str> {
                std::borrow::Cow::Borrowed("batch")
            }

            fn version((): &()) -> std::borrow::Cow<'_, str> {
                std::borrow::Cow::Borrowed("v1")
            }

            fn api_version((): &()) -> std::borrow::Cow<'_, str> {
                std::borrow::Cow::Borrowed(muster_api::workload::JOB_API_VERSION)
            }

            fn plural((): &()) -> std::borrow::Cow<'_, str> {
                std::borrow::Cow::Borrowed("jobs")
            }

            fn meta(&self) -> &kube::core::ObjectMeta {
                &self.metadata
            }

            fn meta_mut(&mut self) -> &mut kube::core::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}
pub(super) use batch_job_resource;

batch_job_resource!(BatchJob);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A Job as the API server sends it: managed fields, a template with much Muster does
    /// not read, a status the Job controller wrote.
    fn sent() -> serde_json::Value {
        json!({
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": "train", "namespace": "team-a", "uid": "u-1", "resourceVersion": "42",
                "labels": {"muster.dev/queue-name": "main"},
                "annotations": {"note": "kept"},
                "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "o"}],
            },
            "spec": {
                "parallelism": 4, "completions": 8, "completionMode": "Indexed", "suspend": true,
                "backoffLimit": 6, "activeDeadlineSeconds": 3600,
                "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}},
                "template": {
                    "metadata": {"labels": {"app": "train"}, "annotations": {"a": "b"}},
                    "spec": {
                        "nodeSelector": {"pool": "a100"},
                        "tolerations": [{"key": "gpu", "operator": "Exists"}],
                        "schedulingGates": [{"name": "other.dev/gate"}],
                        "restartPolicy": "Never",
                        "containers": [{
                            "name": "main", "image": "trainer:1",
                            "command": ["python", "train.py"],
                            "env": [{"name": "EPOCHS", "value": "10"}],
                            "resources": {"requests": {"nvidia.com/gpu": "1"}},
                        }],
                    },
                },
            },
            "status": {
                "active": 2, "ready": 2, "startTime": "2026-12-01T10:00:00Z",
                "uncountedTerminatedPods": {},
            },
        })
    }

    fn read(text: &str) -> Result<BatchJob, serde_json::Error> {
        serde_json::from_str(text)
    }

    #[test]
    fn a_job_is_read_as_kept_and_reads_back_as_the_job_it_was() -> Result<(), serde_json::Error> {
        let text = sent().to_string();
        let kept = read(&text)?;
        assert_eq!(kept.metadata.name.as_deref(), Some("train"));
        assert_eq!(kept.spec.parallelism, Some(4));
        assert_eq!(kept.pods_at_once(), 4);
        assert_eq!(kept.spec.suspend, Some(true));
        assert_eq!(kept.spec.active_deadline_seconds, Some(3600));
        assert_eq!(kept.spec.backoff_limit, Some(6));
        assert_eq!(kept.status.active, Some(2));
        assert!(kept.status.start_time.is_some());
        let template = &kept.spec.template;
        assert_eq!(
            template.node_selector.as_ref().and_then(|s| s.get("pool")),
            Some(&"a100".to_owned())
        );
        assert_eq!(template.tolerations.as_ref().map(Vec::len), Some(1));
        assert_eq!(template.scheduling_gates.as_ref().map(Vec::len), Some(1));
        assert_eq!(
            template.labels.as_ref().and_then(|l| l.get("app")),
            Some(&"train".to_owned())
        );
        // What the entry is made from is the template as sent, and the Job as k8s-openapi
        // reads it.
        let whole: Job = serde_json::from_value(sent())?;
        let spec = whole.spec.clone().unwrap_or_default();
        let again = kept.job().map_err(|e| de::Error::custom(e.message))?;
        let again_spec = again.spec.clone().unwrap_or_default();
        assert_eq!(again_spec.template, spec.template);
        assert_eq!(again_spec.parallelism, spec.parallelism);
        assert_eq!(again_spec.completions, spec.completions);
        assert_eq!(again_spec.completion_mode, spec.completion_mode);
        assert_eq!(again_spec.active_deadline_seconds, Some(3600));
        // Built from a parsed Job, the record reads as the one read from the text.
        let built = BatchJob::of(&whole);
        assert_eq!(built.metadata.managed_fields, None);
        assert_eq!(
            built.metadata,
            ObjectMeta {
                managed_fields: None,
                ..kept.metadata.clone()
            }
        );
        assert_eq!(built.status, kept.status);
        assert_eq!(built.spec.template.node_selector, template.node_selector);
        assert_eq!(built.spec.template.tolerations, template.tolerations);
        assert_eq!(built.spec.template.labels, template.labels);
        let built_spec = built.job().map_err(|e| de::Error::custom(e.message))?.spec;
        assert_eq!(built_spec, again.spec);
        Ok(())
    }

    #[test]
    fn a_finished_job_keeps_no_template() -> Result<(), serde_json::Error> {
        let mut value = sent();
        value["status"]["conditions"] = json!([
            {"type": "SuccessCriteriaMet", "status": "True"},
            {"type": "Complete", "status": "True"},
        ]);
        let kept = read(&value.to_string())?.slimmed();
        assert_eq!(
            kept.finished(),
            Some((true, "the Job completed".to_owned()))
        );
        assert_eq!(kept.spec.template, KeptTemplate::default());
        assert_eq!(
            kept.spec.template.template().ok(),
            Some(PodTemplateSpec::default())
        );
        // What else Muster reads of it stays.
        let whole = read(&value.to_string())?;
        assert_eq!(
            (&kept.metadata, &kept.status, kept.pods_at_once()),
            (&whole.metadata, &whole.status, whole.pods_at_once())
        );
        // A running Job keeps it.
        let running = read(&sent().to_string())?.slimmed();
        assert!(running.spec.template.whole.is_some());
        assert_eq!(
            running
                .spec
                .template
                .node_selector
                .as_ref()
                .map(BTreeMap::len),
            Some(1)
        );
        Ok(())
    }

    #[test]
    fn a_null_template_reads_as_an_empty_one() -> Result<(), serde_json::Error> {
        let mut value = sent();
        value["spec"]["template"] = serde_json::Value::Null;
        let kept = read(&value.to_string())?;
        assert_eq!(kept.spec.template.labels, None);
        assert_eq!(
            kept.spec.template.template().ok(),
            Some(PodTemplateSpec::default())
        );
        Ok(())
    }

    #[test]
    fn a_template_this_build_cannot_read_is_named_when_the_entry_is_made()
    -> Result<(), serde_json::Error> {
        let mut value = sent();
        value["spec"]["template"]["spec"]["containers"] = json!("not a list");
        let kept = read(&value.to_string())?;
        let error = kept.job().err().map(|e| e.path);
        assert_eq!(error.as_deref(), Some("spec.template"));
        Ok(())
    }
}
