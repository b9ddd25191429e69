//! Workloads: Muster's own CSV, the Philly per-job projection, the Alibaba openb pod and node
//! lists (`openb`), and a synthetic generator. Every adapter yields [`TraceJob`]s; a malformed
//! row is an error naming file, line and column.

use std::collections::BTreeMap;
use std::fmt;
use std::fmt::Write as _;

use muster_api::Amount;

mod manifests;
mod openb;

pub use manifests::{ManifestError, ManifestSpec, read_manifests};
pub use openb::{read_openb, read_openb_nodes, read_openb_shares};

/// One job of a workload, before it becomes an admission job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceJob {
    /// Unique within the workload.
    pub id: String,
    /// Submission time, seconds.
    pub submit: i64,
    /// How long it runs once started, seconds.
    pub duration: i64,
    /// The LocalQueue it is submitted to (in the scenario's namespace).
    pub queue: String,
    /// Higher runs first.
    pub priority: i32,
    /// Pod sets: (name, count, per-pod resources).
    pub pod_sets: Vec<(String, u32, BTreeMap<String, Amount>)>,
    /// `required:<level>`, `preferred:<level>` or empty, for every pod set.
    pub topology: String,
    /// The runtime the submitter announces (for backfill), if any.
    pub expected_runtime: Option<i64>,
    /// Node labels every pod requires (a manifest's `nodeSelector`); empty for most traces.
    pub node_selector: BTreeMap<String, String>,
}

impl TraceJob {
    /// GPUs (or TPU chips) the job asks for in all.
    pub fn gpus(&self) -> u64 {
        self.pod_sets
            .iter()
            .map(|(_, count, r)| {
                let per_pod: u64 = ["nvidia.com/gpu", "google.com/tpu"]
                    .iter()
                    .filter_map(|k| r.get(*k))
                    .map(|a| a.units_ceil())
                    .sum();
                per_pod * u64::from(*count)
            })
            .sum()
    }

    /// Milli-GPU (or milli-chips) the job asks for in all: a pod asking for part of one GPU
    /// counts that part, not the GPU it is on.
    pub fn gpu_milli(&self) -> u64 {
        self.pod_sets
            .iter()
            .map(|(_, count, r)| {
                let per_pod: u64 = match r.get(muster_api::resources::names::GPU_SHARE) {
                    Some(share) if !share.is_zero() => share.milli(),
                    _ => ["nvidia.com/gpu", "google.com/tpu"]
                        .iter()
                        .filter_map(|k| r.get(*k))
                        .map(|a| a.units_ceil() * 1000)
                        .sum(),
                };
                per_pod * u64::from(*count)
            })
            .sum()
    }
}

/// A row a trace adapter cannot read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{column}: {message}")]
pub struct TraceError {
    /// The file.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column (character) where the bad field starts.
    pub column: usize,
    /// What is wrong and what was expected.
    pub message: String,
}

/// The fields of one CSV line with the column where each starts. Fields are separated by
/// commas; the formats here never quote.
fn fields(line: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut column = 1;
    for field in line.split(',') {
        out.push((column, field));
        column += field.chars().count() + 1;
    }
    out
}

/// Every non-empty line of a CSV after its header, as a row.
fn rows<'a>(file: &'a str, text: &'a str) -> impl Iterator<Item = Row<'a>> {
    text.lines()
        .enumerate()
        .skip(1)
        .filter(|(_, line)| !line.trim().is_empty())
        .map(move |(n, line)| Row {
            file,
            line: n + 1,
            fields: fields(line),
        })
}

struct Row<'a> {
    file: &'a str,
    line: usize,
    fields: Vec<(usize, &'a str)>,
}

impl Row<'_> {
    fn error(&self, column: usize, message: impl fmt::Display) -> TraceError {
        TraceError {
            file: self.file.to_owned(),
            line: self.line,
            column,
            message: message.to_string(),
        }
    }

    fn get(&self, i: usize, name: &str) -> Result<(usize, &str), TraceError> {
        self.fields.get(i).copied().ok_or_else(|| {
            let end = self.fields.last().map_or(1, |(c, f)| c + f.chars().count());
            self.error(end, format!("missing field {name} (field {})", i + 1))
        })
    }

    /// Field `i` of a column that may be left out: empty when the row stops before it.
    fn optional(&self, i: usize) -> &str {
        self.fields.get(i).map_or("", |(_, f)| f)
    }

    fn non_negative(&self, i: usize, name: &str) -> Result<u64, TraceError> {
        let v = self.int(i, name)?;
        u64::try_from(v)
            .map_err(|_| self.error(self.fields[i].0, format!("{name} must be ≥ 0, got {v}")))
    }

    fn int(&self, i: usize, name: &str) -> Result<i64, TraceError> {
        let (column, text) = self.get(i, name)?;
        text.trim().parse::<i64>().map_err(|_| {
            self.error(
                column,
                format!("{name} must be a whole number, got {text:?}"),
            )
        })
    }

    /// Seconds given with an optional fraction ("66.0"), rounded up to whole seconds.
    fn seconds(&self, i: usize, name: &str) -> Result<i64, TraceError> {
        let (column, text) = self.get(i, name)?;
        let value: f64 = text
            .trim()
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite() && *v >= 0.0 && *v < 1e15)
            .ok_or_else(|| {
                self.error(
                    column,
                    format!("{name} must be a number of seconds ≥ 0, got {text:?}"),
                )
            })?;
        // Bounded above, so the conversion is exact for whole seconds.
        #[expect(
            clippy::cast_possible_truncation,
            reason = "bounded to below 1e15 above"
        )]
        Ok(value.ceil() as i64)
    }
}

/// Reads a `vc,node num` CSV (the Philly trace's `philly_vc_nodes_heliosartifact.csv`): each
/// virtual cluster's name and node count, in file order. A name given twice is an error.
pub fn read_virtual_clusters(file: &str, text: &str) -> Result<Vec<(String, u32)>, TraceError> {
    let mut out: Vec<(String, u32)> = Vec::new();
    for row in rows(file, text) {
        let (name_column, name) = row.get(0, "vc")?;
        let name = name.trim();
        if name.is_empty() {
            return Err(row.error(name_column, "vc is empty"));
        }
        if out.iter().any(|(n, _)| n == name) {
            return Err(row.error(name_column, format!("vc {name} is listed twice")));
        }
        let nodes = row.int(1, "node num")?;
        let nodes = u32::try_from(nodes)
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| {
                row.error(
                    row.fields[1].0,
                    format!("node num must be ≥ 1, got {nodes}"),
                )
            })?;
        out.push((name.to_owned(), nodes));
    }
    Ok(out)
}

/// Reads Muster's CSV: a header line, then
/// `id,submit,duration,queue,priority,pod_sets,topology,expected_runtime[,node_selector]` per
/// job. `pod_sets` is `name:count:resource=amount+resource=amount`, several separated by `;`;
/// `node_selector` (optional) is `label=value+label=value`.
pub fn read_muster(file: &str, text: &str) -> Result<Vec<TraceJob>, TraceError> {
    let mut jobs = Vec::new();
    for row in rows(file, text) {
        if row.fields.len() > 9 {
            let (column, _) = row.fields[9];
            return Err(row.error(column, "more than 9 fields"));
        }
        let (id_column, id) = row.get(0, "id")?;
        if id.trim().is_empty() {
            return Err(row.error(id_column, "id is empty"));
        }
        let (queue_column, queue) = row.get(3, "queue")?;
        if queue.trim().is_empty() {
            return Err(row.error(queue_column, "queue is empty"));
        }
        let priority = i32::try_from(row.int(4, "priority")?)
            .map_err(|_| row.error(row.fields[4].0, "priority does not fit in 32 bits"))?;
        let (sets_column, sets) = row.get(5, "pod_sets")?;
        let pod_sets = pod_sets(&row, sets_column, sets)?;
        let (topology_column, topology) = row.get(6, "topology")?;
        let topology = topology.trim().to_owned();
        let tpu_ok = topology.strip_prefix("tpu:").is_some_and(|t| {
            let mut parts = t.split(':');
            let accelerator = parts.next().and_then(muster_api::tpu::accelerator);
            let shape = parts
                .next()
                .map(|shape| accelerator.is_some_and(|a| a.shape(shape).is_ok()));
            shape == Some(true)
                && parts.all(|p| p == "rotate" || p.parse::<u32>().is_ok_and(|n| n > 0))
        });
        if !(topology.is_empty()
            || topology.starts_with("required:")
            || topology.starts_with("preferred:")
            || tpu_ok)
        {
            return Err(row.error(
                topology_column,
                format!("topology must be empty, required:<level>, preferred:<level> or tpu:<accelerator>:<shape>[:<slices>][:rotate] with a valid accelerator and shape, got {topology:?}"),
            ));
        }
        let expected_runtime = match row.fields.get(7) {
            Some((_, t)) if !t.trim().is_empty() => Some(row.seconds(7, "expected_runtime")?),
            _ => None,
        };
        let node_selector = match row.fields.get(8) {
            Some((column, text)) => node_selector(&row, *column, text)?,
            None => BTreeMap::new(),
        };
        jobs.push(TraceJob {
            id: id.trim().to_owned(),
            submit: row.seconds(1, "submit")?,
            duration: row.seconds(2, "duration")?,
            queue: queue.trim().to_owned(),
            priority,
            pod_sets,
            topology,
            expected_runtime,
            node_selector,
        });
    }
    Ok(jobs)
}

type PodSets = Vec<(String, u32, BTreeMap<String, Amount>)>;

/// `label=value+label=value` (labels and their values hold neither `+` nor `,`).
fn node_selector(
    row: &Row<'_>,
    column: usize,
    text: &str,
) -> Result<BTreeMap<String, String>, TraceError> {
    let mut out = BTreeMap::new();
    for pair in text.trim().split('+').filter(|p| !p.is_empty()) {
        let (label, value) = pair
            .split_once('=')
            .filter(|(l, _)| !l.is_empty())
            .ok_or_else(|| {
                row.error(
                    column,
                    format!("node_selector is label=value+…, got {pair:?}"),
                )
            })?;
        out.insert(label.to_owned(), value.to_owned());
    }
    Ok(out)
}

/// Writes jobs in Muster's CSV (what [`read_muster`] reads back): any workload, from any
/// adapter or the generator, can be exported, edited and replayed.
pub fn write_muster(jobs: &[TraceJob]) -> String {
    let mut out =
        String::from("id,submit,duration,queue,priority,pod_sets,topology,expected_runtime");
    if jobs.iter().any(|j| !j.node_selector.is_empty()) {
        out.push_str(",node_selector");
    }
    out.push('\n');
    for j in jobs {
        let sets: Vec<String> = j
            .pod_sets
            .iter()
            .map(|(name, count, requests)| {
                let resources: Vec<String> = requests
                    .iter()
                    .map(|(r, a)| format!("{r}={}", a.format_for(r)))
                    .collect();
                format!("{name}:{count}:{}", resources.join("+"))
            })
            .collect();
        let expected = j
            .expected_runtime
            .map_or_else(String::new, |e| e.to_string());
        // The ninth column only when a job selects nodes, so traces without stay as they were.
        let selector = if j.node_selector.is_empty() {
            String::new()
        } else {
            let pairs: Vec<String> = j
                .node_selector
                .iter()
                .map(|(l, v)| format!("{l}={v}"))
                .collect();
            format!(",{}", pairs.join("+"))
        };
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{}{selector}",
            j.id,
            j.submit,
            j.duration,
            j.queue,
            j.priority,
            sets.join(";"),
            j.topology,
            expected
        );
    }
    out
}

fn pod_sets(row: &Row<'_>, column: usize, text: &str) -> Result<PodSets, TraceError> {
    let mut out = Vec::new();
    let mut at = column;
    for set in text.split(';') {
        let parts: Vec<&str> = set.split(':').collect();
        let [name, count, resources] = parts.as_slice() else {
            return Err(row.error(
                at,
                format!("a pod set is name:count:resource=amount+…, got {set:?}"),
            ));
        };
        let count: u32 = count.parse().ok().filter(|c| *c > 0).ok_or_else(|| {
            row.error(
                at,
                format!("pod set {name}: count must be a whole number ≥ 1, got {count:?}"),
            )
        })?;
        let mut requests = BTreeMap::new();
        for pair in resources.split('+').filter(|p| !p.is_empty()) {
            let Some((resource, amount)) = pair.split_once('=') else {
                return Err(row.error(
                    at,
                    format!("pod set {name}: {pair:?} is not resource=amount"),
                ));
            };
            let amount = Amount::parse(amount)
                .map_err(|e| row.error(at, format!("pod set {name}: {resource}: {e}")))?;
            requests.insert(resource.to_owned(), amount);
        }
        out.push(((*name).to_owned(), count, requests));
        at += set.chars().count() + 1;
    }
    Ok(out)
}

/// A job of `gpus` GPUs as pods of at most 8: ceil(gpus / 8) pods that split the GPUs as evenly
/// as possible (12 → 2 × 6, 24 → 3 × 8). Pods that cannot all be equal are rounded up (10 → 2 ×
/// 5, 9 → 2 × 5: a gang of equal pods, as training frameworks expect).
pub fn gpu_pods(gpus: u64) -> (u32, u64) {
    pods_of(gpus, 8)
}

/// [`gpu_pods`] with at most `per_pod` GPUs in a pod.
pub fn pods_of(gpus: u64, per_pod: u64) -> (u32, u64) {
    let pods = gpus.div_ceil(per_pod.max(1)).max(1);
    (u32::try_from(pods).unwrap_or(u32::MAX), gpus.div_ceil(pods))
}

/// Reads the Philly per-job projection (`timestamp,duration,num_gpus,gpu_time,cluster`; rows not
/// sorted). Each job becomes one gang of [`gpu_pods`] pods with the topology `topology` when it
/// has more than one pod; its virtual cluster is its LocalQueue; times are seconds after the
/// earliest submission.
pub fn read_philly(file: &str, text: &str, topology: &str) -> Result<Vec<TraceJob>, TraceError> {
    let mut parsed = Vec::new();
    for row in rows(file, text) {
        let (ts_column, ts) = row.get(0, "timestamp")?;
        let when: jiff::civil::DateTime = ts.trim().parse().map_err(|_| {
            row.error(
                ts_column,
                format!("timestamp must be YYYY-MM-DD hh:mm:ss, got {ts:?}"),
            )
        })?;
        let submit = when
            .to_zoned(jiff::tz::TimeZone::UTC)
            .map(|z| z.timestamp().as_second())
            .map_err(|e| row.error(ts_column, e))?;
        let duration = row.seconds(1, "duration")?;
        let gpus = row.int(2, "num_gpus")?;
        let gpus = u64::try_from(gpus).ok().filter(|g| *g > 0).ok_or_else(|| {
            row.error(row.fields[2].0, format!("num_gpus must be ≥ 1, got {gpus}"))
        })?;
        let (_, cluster) = row.get(4, "cluster")?;
        parsed.push((submit, row.line, duration, gpus, cluster.trim().to_owned()));
    }
    let start = parsed.iter().map(|r| r.0).min().unwrap_or(0);
    Ok(parsed
        .into_iter()
        .map(|(submit, line, duration, gpus, cluster)| {
            let (pods, per_pod) = gpu_pods(gpus);
            TraceJob {
                id: format!("philly-{line:06}"),
                submit: submit - start,
                duration,
                queue: cluster,
                priority: 0,
                pod_sets: vec![(
                    "workers".to_owned(),
                    pods,
                    BTreeMap::from([("nvidia.com/gpu".to_owned(), Amount::from_units(per_pod))]),
                )],
                topology: if pods > 1 {
                    topology.to_owned()
                } else {
                    String::new()
                },
                expected_runtime: None,
                node_selector: BTreeMap::new(),
            }
        })
        .collect())
}

/// The seeded sequence workloads are drawn from (SplitMix64; shared with the placement
/// policies that draw).
pub use muster_topology::Rng;
