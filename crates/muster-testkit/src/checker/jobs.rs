//! What the checker makes of GpuJobs: the size of each gang, what its status says it holds
//! (quota, the ClusterQueue its pods without an annotation use), the levels its pod sets
//! require, how it ended — and, at the end of the run, whether every job ended as it was built
//! to.

use std::collections::BTreeMap;

use muster_api::{GpuJob, GpuJobPhase, ObjectRef};

use super::facts::template_gpus;
use super::{Checker, ViolationKind};

impl Checker {
    /// A GpuJob was created or changed.
    pub fn job(&mut self, job: &GpuJob, at: f64) {
        let (Some(namespace), Some(name)) = (&job.metadata.namespace, &job.metadata.name) else {
            return;
        };
        let key = ObjectRef::new(namespace, name).into_string();
        let size: u32 = job
            .spec
            .pod_sets
            .iter()
            .map(|s| u32::try_from(s.count).unwrap_or(0))
            .sum();
        self.gang_size.insert(key.clone(), size);
        self.resolve_lifts(&key);
        self.latest = self.latest.max(at);
        let split = self.domains.job(&key, required_levels(job));
        self.report_splits(split);
        let status = job.status.clone().unwrap_or_default();
        let ended = status.phase.is_some_and(GpuJobPhase::has_ended);
        let gpus: i64 = job
            .spec
            .pod_sets
            .iter()
            .map(|s| i64::from(s.count) * template_gpus(&s.template))
            .sum();
        let admitted = (!ended)
            .then(|| {
                status
                    .admission
                    .as_ref()
                    .map(|a| (a.cluster_queue.clone(), gpus))
            })
            .flatten();
        let fact = self.jobs.entry(key.clone()).or_default();
        let before = std::mem::replace(&mut fact.admitted, admitted.clone());
        if before.is_none() && admitted.is_some() {
            fact.admitted_since = at;
        }
        fact.shown = format!(
            "{}@{}",
            status
                .phase
                .map_or_else(|| "-".to_owned(), |p| format!("{p:?}")),
            status.requeue_count
        );
        let end = ended.then(|| end_of(&status));
        let mut ended_twice = None;
        match (&fact.ended, end) {
            (Some(was), Some(now)) if was.0 != now.0 || was.2 != now.2 => {
                ended_twice = Some(format!(
                    "{} at {} then {} at {}",
                    was.0, was.2, now.0, now.2
                ));
                fact.ended = Some(now);
            }
            (Some(was), None) => {
                ended_twice = Some(format!(
                    "{} at {} then {:?} again",
                    was.0,
                    was.2,
                    status.phase.unwrap_or_default()
                ));
            }
            (None, Some(now)) => fact.ended = Some(now),
            _ => {}
        }
        if let Some(detail) = ended_twice {
            self.report(
                ViolationKind::EndedTwice,
                format!("GpuJob/{key}"),
                at,
                detail,
            );
        }
        if let Some((queue, gpus)) = &before {
            *self.admitted_usage.entry(queue.clone()).or_default() -= gpus;
        }
        if let Some((queue, gpus)) = &admitted {
            *self.admitted_usage.entry(queue.clone()).or_default() += gpus;
            self.check_quota(ViolationKind::AdmittedOverQuota, queue, at);
        }
        if let Some(queue) = status.admission.as_ref().map(|a| &a.cluster_queue) {
            self.job_queue(&key, queue, at);
        }
    }

    /// Job `key`'s status names ClusterQueue `queue`: its pods without an annotation use it.
    fn job_queue(&mut self, key: &str, queue: &str, at: f64) {
        if let Some(fact) = self.jobs.get_mut(key)
            && fact.queue.as_deref() != Some(queue)
        {
            fact.queue = Some(queue.to_owned());
            self.attribute(key, queue, at);
        }
    }

    /// The end-of-run checks: every job ended, and failed only when meant to, with a reason.
    pub fn finish(&mut self, at: f64) {
        self.tick(at);
        self.judge_releases(at);
        let mut found = Vec::new();
        let mut keys: Vec<&String> = self.jobs.keys().collect();
        keys.sort();
        for key in keys {
            if self.judged_elsewhere.contains(key) {
                continue;
            }
            let fact = &self.jobs[key];
            let object = format!("GpuJob/{key}");
            match &fact.ended {
                None => found.push((ViolationKind::NeverEnded, object, String::new())),
                Some((phase, reason, _)) if phase == "Failed" => {
                    if !self.meant_to_fail.contains(key) || reason.is_empty() {
                        found.push((
                            ViolationKind::UnexpectedFailure,
                            object,
                            format!("failed with reason {reason:?}"),
                        ));
                    }
                }
                Some(_) if self.meant_to_fail.contains(key) => found.push((
                    ViolationKind::UnexpectedSuccess,
                    object,
                    "succeeded though every pod exits 1".to_owned(),
                )),
                Some(_) => {}
            }
        }
        for (kind, object, detail) in found {
            self.report(kind, object, at, detail);
        }
    }
}

/// How an ended job ended: its phase (`Succeeded`/`Failed`), the reason of its Finished
/// condition and its completion time.
fn end_of(status: &muster_api::GpuJobStatus) -> (String, String, String) {
    let phase = if status.phase == Some(GpuJobPhase::Succeeded) {
        "Succeeded"
    } else {
        "Failed"
    };
    let reason = status
        .conditions
        .iter()
        .find(|c| c.type_ == muster_api::gpujob::conditions::FINISHED)
        .map(|c| c.reason.clone())
        .unwrap_or_default();
    let completion = status
        .completion_time
        .as_ref()
        .map(|t| t.0.to_string())
        .unwrap_or_default();
    (phase.to_owned(), reason, completion)
}

/// Each pod set of `job` that requires a topology level, with the level (a node label key).
fn required_levels(job: &GpuJob) -> BTreeMap<String, String> {
    job.spec
        .pod_sets
        .iter()
        .filter_map(|s| Some((s.name.clone(), s.topology.as_ref()?.required.clone()?)))
        .collect()
}
