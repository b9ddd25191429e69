//! The jobs a scenario replays, from its workload source.

use std::path::Path;

use super::synthetic::synthetic;
use super::{Loaded, ScenarioError, default_block_label, read};
use crate::trace::{self, TraceJob};

impl Loaded {
    /// The jobs of the scenario at `path` (trace paths are relative to its folder).
    pub(super) fn workload(
        &self,
        path: &Path,
        seed: Option<u64>,
    ) -> Result<Vec<TraceJob>, ScenarioError> {
        let dir = path.parent().unwrap_or_else(|| Path::new(""));
        let block = self
            .scenario
            .cluster
            .pools
            .first()
            .map_or_else(default_block_label, |p| p.block_label.clone());
        let workload = &self.scenario.workload;
        match (
            &workload.trace,
            &workload.synthetic,
            &workload.manifests[..],
        ) {
            (Some(t), None, []) => {
                let path = dir.join(&t.path);
                let text = read(&path)?;
                let file = path.display().to_string();
                let mut jobs = match t.format.as_str() {
                    "muster" => trace::read_muster(&file, &text)?,
                    "openb" => trace::read_openb(&file, &text)?,
                    "philly" => {
                        let topology = t
                            .gang_topology
                            .clone()
                            .unwrap_or_else(|| format!("required:{block}"));
                        trace::read_philly(&file, &text, &topology)?
                    }
                    other => {
                        return Err(ScenarioError::Invalid {
                            path: file,
                            message: format!(
                                "unknown trace format {other:?}; use muster, philly or openb"
                            ),
                        });
                    }
                };
                if let Some(limit) = t.limit {
                    jobs.truncate(limit);
                }
                let compress = i64::from(t.compress_arrivals.unwrap_or(1).max(1));
                for job in &mut jobs {
                    job.submit /= compress;
                    if let Some(queue) = &t.queue {
                        job.queue.clone_from(queue);
                    }
                    if t.announce_runtime {
                        job.expected_runtime = Some(job.duration);
                    }
                }
                Ok(jobs)
            }
            (None, Some(s), []) => {
                if let Some(e) = s.sizes.iter().find_map(|w| w.share_milli().err()) {
                    return Err(ScenarioError::Invalid {
                        path: path.display().to_string(),
                        message: format!("workload.synthetic.sizes: {e}"),
                    });
                }
                if s.queues.is_empty()
                    || s.sizes.is_empty()
                    || s.sizes.iter().all(|w| w.weight == 0)
                {
                    return Err(ScenarioError::Invalid {
                        path: path.display().to_string(),
                        message: "workload.synthetic needs at least one queue and one size with a weight above 0".into(),
                    });
                }
                Ok(synthetic(s, seed, &block))
            }
            (None, None, files) if !files.is_empty() => {
                let mut jobs = Vec::new();
                for spec in files {
                    let path = dir.join(&spec.path);
                    let text = read(&path)?;
                    let file = path.display().to_string();
                    jobs.extend(
                        trace::read_manifests(&file, &text, &self.scenario.namespace, spec)
                            .map_err(|e| ScenarioError::Invalid {
                                path: file,
                                message: format!("document {}: {}", e.document, e.message),
                            })?,
                    );
                }
                let mut ids = std::collections::BTreeSet::new();
                if let Some(job) = jobs.iter().find(|j| !ids.insert(j.id.as_str())) {
                    return Err(ScenarioError::Invalid {
                        path: path.display().to_string(),
                        message: format!(
                            "workload.manifests: job {} comes from two files; give each job its own name",
                            job.id
                        ),
                    });
                }
                Ok(jobs)
            }
            _ => Err(ScenarioError::Invalid {
                path: path.display().to_string(),
                message: "workload needs exactly one of trace, synthetic or manifests".into(),
            }),
        }
    }
}
