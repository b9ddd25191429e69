//! What jobs really ran, read from the statuses of finished GpuJobs and learned into a
//! runtime model the controller owns (bounded: the last runs per key), so that a run stays
//! learned after its GpuJob is deleted; and the runtime keys (family, queue) a job is
//! learned and drawn under.
//!
//! A replica that starts (or takes the lead) learns again from what finished jobs' statuses
//! still show; runs whose GpuJobs were deleted before it started are not known to it.

use std::collections::{BTreeMap, BTreeSet};

use muster_api::gpujob::GpuJobPhase;
use muster_api::{GpuJob, ObjectRef};
use muster_sim::forecast::{FinishedRun, RuntimeModel};

use crate::index::Index;

/// Label a team sets on a GpuJob (or on the Job or JobSet behind it) to name the family its
/// runtimes are learned with: jobs of one family run alike. Without it, the family is the
/// job's name without its trailing parts that hold a digit (`train-llama-42` →
/// `train-llama`).
pub const FAMILY_LABEL: &str = "muster.dev/family";

/// The runtime keys of `job`, most specific first: its family in its namespace, its
/// LocalQueue, then every job (see [`FinishedRun::keys`]).
pub(crate) fn keys(index: &Index, job: &GpuJob) -> Vec<String> {
    let namespace = job.metadata.namespace.as_deref().unwrap_or_default();
    vec![
        family_key(index, job),
        format!("queue {namespace}/{}", job.spec.queue_name),
        String::new(),
    ]
}

/// Every job's batch: jobs of one family (in one namespace) each created within
/// [`muster_sim::forecast::batches::BATCH_GAP`] seconds of the one before — a sweep, the
/// shards of one experiment — which tend to run alike. Jobs without a creation time have
/// none.
pub(crate) fn batches(index: &Index) -> BTreeMap<&ObjectRef, String> {
    let mut created: Vec<(i64, &ObjectRef, String)> = index
        .jobs
        .iter()
        .filter_map(|(key, job)| {
            let at = job.metadata.creation_timestamp.as_ref()?.0.as_second();
            Some((at, key, family_key(index, job)))
        })
        .collect();
    created.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    let named = muster_sim::forecast::batches::batches(
        created.iter().map(|(at, _, family)| (family.as_str(), *at)),
    );
    created
        .into_iter()
        .zip(named)
        .map(|((_, key, _), batch)| (key, batch))
        .collect()
}

/// The first of [`keys`]: `job`'s family in its namespace.
fn family_key(index: &Index, job: &GpuJob) -> String {
    let namespace = job.metadata.namespace.as_deref().unwrap_or_default();
    format!("family {namespace}/{}", family(index, job))
}

/// The family of `job`: [`FAMILY_LABEL`] on it or on its workload, else its name's prefix.
fn family(index: &Index, job: &GpuJob) -> String {
    let label = |labels: Option<&BTreeMap<String, String>>| {
        labels
            .and_then(|l| l.get(FAMILY_LABEL))
            .filter(|v| !v.is_empty())
            .cloned()
    };
    if let Some(family) = label(job.metadata.labels.as_ref()) {
        return family;
    }
    if let Some(workload) = crate::workload::workload_of(job) {
        let labels = index
            .workloads
            .get(&workload.key)
            .and_then(|w| w.metadata.labels.as_ref())
            .or_else(|| {
                index
                    .jobsets
                    .get(&workload.key)
                    .and_then(|j| j.metadata.labels.as_ref())
            });
        if let Some(family) = label(labels) {
            return family;
        }
    }
    name_prefix(job.metadata.name.as_deref().unwrap_or_default()).to_owned()
}

/// `name` without its trailing `-`-separated parts that hold a digit (a run number, a date,
/// a generated suffix); the first part always stays.
pub(crate) fn name_prefix(name: &str) -> &str {
    let mut end = name.len();
    while let Some(dash) = name[..end].rfind('-') {
        let part = &name[dash + 1..end];
        if dash == 0 || !part.bytes().any(|b| b.is_ascii_digit()) {
            break;
        }
        end = dash;
    }
    &name[..end]
}

/// The uid of `job` and when its run started and ended, if it succeeded or failed after its
/// pods were released.
fn finished(job: &GpuJob) -> Option<(&str, i64, i64)> {
    let status = job.status.as_ref()?;
    if !status.phase.is_some_and(GpuJobPhase::has_ended) {
        return None;
    }
    let start = status.start_time.as_ref()?.0.as_second();
    let end = status.completion_time.as_ref()?.0.as_second();
    Some((job.metadata.uid.as_deref()?, start, end))
}

/// What finished jobs ran, learned into a runtime model.
#[derive(Clone, Debug, Default)]
pub(crate) struct RunHistory {
    model: RuntimeModel,
    /// The uids of the finished GpuJobs the index still holds whose runs are learned: each
    /// is learned once. A run stays in the model after its GpuJob is deleted (within the
    /// model's window per key), and its uid is forgotten then, so this stays as small as the
    /// index's finished jobs.
    learned: BTreeSet<String>,
    /// Runs learned since this replica started.
    runs: usize,
}

impl RunHistory {
    /// Learns every run the index's finished GpuJobs show that is not learned yet, in the
    /// order they ended (the model reads consecutive runs of a family for how alike they
    /// run).
    /// `batches`: every job's batch ([`batches`]).
    pub(crate) fn observe(&mut self, index: &Index, batches: &BTreeMap<&ObjectRef, String>) {
        let mut present = BTreeSet::new();
        // Keys are made only for runs not learned yet: the index keeps finished jobs until
        // they are deleted, and this runs before every forecast.
        let mut new: Vec<(i64, String, FinishedRun)> = Vec::new();
        for (key, job) in &index.jobs {
            let Some((uid, start, end)) = finished(job) else {
                continue;
            };
            if !self.learned.contains(uid) {
                let run = FinishedRun {
                    keys: keys(index, job),
                    announced: job.spec.expected_runtime_seconds,
                    ran: end - start,
                    batch: batches.get(key).cloned(),
                };
                new.push((end, uid.to_owned(), run));
            }
            present.insert(uid);
        }
        new.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        for (_, uid, run) in new {
            self.model.learn(&run);
            self.learned.insert(uid);
            self.runs += 1;
        }
        self.learned.retain(|uid| present.contains(uid.as_str()));
    }

    /// The model learned so far.
    pub(crate) fn model(&self) -> &RuntimeModel {
        &self.model
    }

    /// How many runs it learned since this replica started.
    pub(crate) fn runs(&self) -> usize {
        self.runs
    }
}

#[cfg(test)]
mod tests {
    use muster_api::{GpuJob, ObjectRef};

    use super::{batches, name_prefix};
    use crate::index::Index;

    fn created(name: &str, at: i64) -> GpuJob {
        let time = k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 + at)
            .unwrap_or_else(|e| unreachable!("{e}"));
        serde_json::from_value(serde_json::json!({
            "apiVersion": "muster.dev/v1alpha1", "kind": "GpuJob",
            "metadata": {"name": name, "namespace": "team-a", "uid": format!("uid-{name}"),
                         "creationTimestamp": time.to_string()},
            "spec": {"queueName": "research", "podSets": []}
        }))
        .unwrap_or_else(|e| unreachable!("{e}"))
    }

    #[test]
    fn a_batch_is_a_familys_jobs_each_created_close_to_the_one_before() {
        let mut index = Index::new();
        for (name, at) in [
            ("sweep-1", 0),
            ("sweep-2", 5),
            ("eval-1", 6),
            ("sweep-3", 20),
        ] {
            index.apply(created(name, at));
        }
        let named = batches(&index);
        let of = |name: &str| named.get(&ObjectRef::new("team-a", name)).cloned();
        assert_eq!(of("sweep-1"), of("sweep-2"));
        assert_ne!(of("sweep-2"), of("sweep-3"));
        assert_ne!(of("eval-1"), of("sweep-1"));
        assert_eq!(
            of("sweep-1").as_deref(),
            Some("family team-a/sweep@1800000000")
        );
    }

    #[test]
    fn a_family_is_a_name_without_its_numbered_tail() {
        assert_eq!(name_prefix("train-llama-42"), "train-llama");
        assert_eq!(name_prefix("train-llama-20261127-x7k2p"), "train-llama");
        assert_eq!(name_prefix("sweep-lr-0.1-3"), "sweep-lr");
        assert_eq!(name_prefix("eval"), "eval");
        assert_eq!(name_prefix("eval-final"), "eval-final");
        // The first part always stays.
        assert_eq!(name_prefix("42-7"), "42");
        assert_eq!(name_prefix("llama3-8b"), "llama3");
    }
}
