//! The Alibaba cluster-trace-gpu-v2023 ("openb") lists, as the FGD paper's authors published
//! them: pod lists (for a time replay, or the fill experiment's requests) and node lists.
//! Pod list columns are found by name, so a list with only the columns a reader needs loads.

use std::collections::BTreeMap;

use muster_api::Amount;
use muster_topology::shared::{ShareRequest, SharedNode};

use super::{Row, TraceError, TraceJob, fields, rows};

/// Reads the Alibaba cluster-trace-gpu-v2023 ("openb") pod list for a time replay
/// (`name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time`).
/// Columns are found by name in the header, in any order. Each pod is a one-pod job submitted
/// at `creation_time` to the LocalQueue named by its `qos` (lower case; `default` when the list
/// has no `qos` column), running `deletion_time − scheduled_time` seconds (`− creation_time`
/// for pods never scheduled, or when the list has no `scheduled_time`), at least one. A
/// GPU-sharing pod (`gpu_milli` < 1000, one GPU) asks for that part of one GPU, as a pod set
/// with `gpuShare` does: one vGPU (`nvidia.com/gpu: 1`) and the share
/// ([`muster_api::resources::names::GPU_SHARE`]), so it only fits nodes whose GPUs are
/// tracked one by one (HAMi pools). `gpu_spec` and `pod_phase` are not used in this replay
/// and may be absent; the fill experiment ([`crate::fill`], [`read_openb_shares`]) keeps
/// `gpu_spec`. A list without `creation_time` or `deletion_time` (the FGD authors'
/// `multigpu*` lists have neither) cannot be replayed in time: the error says so.
pub fn read_openb(file: &str, text: &str) -> Result<Vec<TraceJob>, TraceError> {
    let columns = Columns::of(file, text)?;
    let replay =
        "a time replay reads it (the fill experiment, `muster fill`, reads lists without times)";
    let name_at = columns.required("name", "every pod is a job named by it")?;
    let requests = PodRequests::columns(&columns, "a time replay asks for it")?;
    let created_at = columns.required("creation_time", replay)?;
    let deleted_at = columns.required("deletion_time", replay)?;
    let qos_at = columns.optional("qos");
    let scheduled_at = columns.optional("scheduled_time");
    let mut jobs = Vec::new();
    for row in rows(file, text) {
        let (name_column, name) = row.get(name_at, "name")?;
        if name.trim().is_empty() {
            return Err(row.error(name_column, "name is empty"));
        }
        let pod = requests.read(&row)?;
        let queue = match qos_at {
            Some(i) => row.optional(i).trim().to_lowercase(),
            None => "default".to_owned(),
        };
        let created = row.int(created_at, "creation_time")?;
        let deleted = row.int(deleted_at, "deletion_time")?;
        let scheduled = match scheduled_at {
            Some(i) if !row.optional(i).trim().is_empty() => row.int(i, "scheduled_time")?,
            _ => created,
        };
        let mut requests = BTreeMap::from([
            ("cpu".to_owned(), Amount::from_milli(pod.cpu_milli)),
            (
                "memory".to_owned(),
                Amount::from_units(pod.memory_mib.saturating_mul(1 << 20)),
            ),
        ]);
        if pod.gpus > 0 {
            requests.insert("nvidia.com/gpu".to_owned(), Amount::from_units(pod.gpus));
        }
        if pod.gpus == 1 && (1..1000).contains(&pod.gpu_milli) {
            requests.insert(
                muster_api::resources::names::GPU_SHARE.to_owned(),
                Amount::from_milli(pod.gpu_milli),
            );
        }
        jobs.push(TraceJob {
            id: name.trim().to_owned(),
            submit: created,
            duration: (deleted - scheduled).max(1),
            queue,
            priority: 0,
            pod_sets: vec![("pod".to_owned(), 1, requests)],
            topology: String::new(),
            expected_runtime: None,
            node_selector: BTreeMap::new(),
        });
    }
    Ok(jobs)
}

/// The columns of a CSV, found by name in its header: a format's columns may come in any
/// order, and a column a reader does not need may be absent (the openb pod lists the FGD
/// authors published come with five columns or with eleven).
struct Columns<'a> {
    file: &'a str,
    /// Where a missing column would start: one past the header's last character.
    end: usize,
    by_name: BTreeMap<&'a str, usize>,
}

impl<'a> Columns<'a> {
    /// The header of `text`; a column named twice is an error (which one would be read?).
    fn of(file: &'a str, text: &'a str) -> Result<Columns<'a>, TraceError> {
        let header = text.lines().next().unwrap_or_default();
        let mut by_name = BTreeMap::new();
        for (i, (column, name)) in fields(header).into_iter().enumerate() {
            let name = name.trim();
            if !name.is_empty() && by_name.insert(name, i).is_some() {
                return Err(TraceError {
                    file: file.to_owned(),
                    line: 1,
                    column,
                    message: format!("column {name:?} appears twice"),
                });
            }
        }
        Ok(Columns {
            file,
            end: header.chars().count() + 1,
            by_name,
        })
    }

    /// The field index of column `name`, which the reader needs (`why`: what for).
    fn required(&self, name: &str, why: &str) -> Result<usize, TraceError> {
        self.by_name.get(name).copied().ok_or_else(|| TraceError {
            file: self.file.to_owned(),
            line: 1,
            column: self.end,
            message: format!("missing column {name:?}: {why}"),
        })
    }

    /// The field index of column `name`, when the header has it.
    fn optional(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }
}

/// What every openb pod list gives for each pod, even the shortest (the FGD authors'
/// `multigpu*` lists: `name,cpu_milli,memory_mib,num_gpu,gpu_milli`).
struct PodRequests {
    cpu_milli: u64,
    memory_mib: u64,
    gpus: u64,
    /// Per GPU; below 1000 only for a share of one GPU.
    gpu_milli: u64,
}

/// Where [`PodRequests`] are in a pod list's rows.
struct PodRequestColumns {
    cpu_milli: usize,
    memory_mib: usize,
    num_gpu: usize,
    gpu_milli: usize,
}

impl PodRequests {
    /// Finds the request columns in `columns` (`why`: what the reader needs them for).
    fn columns(columns: &Columns<'_>, why: &str) -> Result<PodRequestColumns, TraceError> {
        Ok(PodRequestColumns {
            cpu_milli: columns.required("cpu_milli", why)?,
            memory_mib: columns.required("memory_mib", why)?,
            num_gpu: columns.required("num_gpu", why)?,
            gpu_milli: columns.required("gpu_milli", why)?,
        })
    }
}

impl PodRequestColumns {
    /// The requests of one row.
    fn read(&self, row: &Row<'_>) -> Result<PodRequests, TraceError> {
        Ok(PodRequests {
            cpu_milli: row.non_negative(self.cpu_milli, "cpu_milli")?,
            memory_mib: row.non_negative(self.memory_mib, "memory_mib")?,
            gpus: row.non_negative(self.num_gpu, "num_gpu")?,
            gpu_milli: row.non_negative(self.gpu_milli, "gpu_milli")?,
        })
    }

    /// Where `num_gpu` starts in `row`.
    fn gpus_column(&self, row: &Row<'_>) -> usize {
        row.fields.get(self.num_gpu).map_or(1, |(c, _)| *c)
    }

    /// Where `gpu_milli` starts in `row`.
    fn share_column(&self, row: &Row<'_>) -> usize {
        row.fields.get(self.gpu_milli).map_or(1, |(c, _)| *c)
    }
}

/// Checks that a CSV's header names `expected` columns, in order, and says where it does not.
fn check_header(file: &str, text: &str, expected: &[&str]) -> Result<(), TraceError> {
    let header = text.lines().next().unwrap_or_default();
    let found = fields(header);
    for (i, want) in expected.iter().enumerate() {
        match found.get(i) {
            Some((_, name)) if name.trim() == *want => {}
            Some((column, name)) => {
                return Err(TraceError {
                    file: file.to_owned(),
                    line: 1,
                    column: *column,
                    message: format!("expected column {want:?}, found {:?}", name.trim()),
                });
            }
            None => {
                return Err(TraceError {
                    file: file.to_owned(),
                    line: 1,
                    column: header.chars().count() + 1,
                    message: format!("missing column {want:?} (column {})", i + 1),
                });
            }
        }
    }
    Ok(())
}

/// Reads an openb node list (`sn,cpu_milli,memory_mib,gpu,model`) into nodes with shared-GPU
/// accounting: each node's CPU, memory and GPUs (at most 255, of `model`), all free.
pub fn read_openb_nodes(file: &str, text: &str) -> Result<Vec<SharedNode>, TraceError> {
    check_header(
        file,
        text,
        &["sn", "cpu_milli", "memory_mib", "gpu", "model"],
    )?;
    let mut nodes = Vec::new();
    for row in rows(file, text) {
        let (name_column, name) = row.get(0, "sn")?;
        if name.trim().is_empty() {
            return Err(row.error(name_column, "sn (the node's name) is empty"));
        }
        let cpu = row.non_negative(1, "cpu_milli")?;
        let memory = row.non_negative(2, "memory_mib")?;
        let gpus = row.non_negative(3, "gpu")?;
        let gpus = u8::try_from(gpus).map_err(|_| {
            row.error(
                row.fields[3].0,
                format!("gpu must be at most 255, got {gpus}"),
            )
        })?;
        let (model_column, model) = row.get(4, "model")?;
        if gpus > 0 && model.trim().is_empty() {
            return Err(row.error(model_column, "model is empty for a node with GPUs"));
        }
        nodes.push(SharedNode::new(
            name.trim(),
            model.trim(),
            cpu,
            memory,
            gpus,
        ));
    }
    Ok(nodes)
}

/// Reads an openb pod list's requests as shared-GPU requests: `cpu_milli`, `memory_mib`,
/// `num_gpu` and `gpu_milli` (per GPU; below 1000 only with one GPU), which every openb pod
/// list has, and `gpu_spec` (the GPU models a pod accepts, `|`-separated; empty or absent:
/// any). Columns are found by name; others (`name`, times, `qos`) are not read and may be
/// absent, as in the FGD authors' `multigpu*` lists. Pods come back in the file's order.
pub fn read_openb_shares(file: &str, text: &str) -> Result<Vec<ShareRequest>, TraceError> {
    let columns = Columns::of(file, text)?;
    let requests = PodRequests::columns(&columns, "the fill experiment places each pod by it")?;
    let spec_at = columns.optional("gpu_spec");
    let mut pods = Vec::new();
    for row in rows(file, text) {
        let pod = requests.read(&row)?;
        let gpus = u32::try_from(pod.gpus).map_err(|_| {
            row.error(
                requests.gpus_column(&row),
                format!("num_gpu is too large: {}", pod.gpus),
            )
        })?;
        // A pod without GPUs may carry a share of 0; anything else is its share per GPU.
        let milli = if gpus == 0 { 0 } else { pod.gpu_milli };
        let milli = u32::try_from(milli).map_err(|_| {
            row.error(
                requests.share_column(&row),
                format!("gpu_milli is too large: {milli}"),
            )
        })?;
        let models: Vec<String> = spec_at
            .map(|i| row.optional(i))
            .unwrap_or_default()
            .split('|')
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(str::to_owned)
            .collect();
        let request = ShareRequest::new(pod.cpu_milli, pod.memory_mib, gpus, milli, models)
            .map_err(|e| row.error(requests.share_column(&row), e))?;
        pods.push(request);
    }
    Ok(pods)
}
