//! `muster fit`: would this job fit on these nodes right now, and where?

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{Node, Pod};
use muster_api::document::{read, read_lenient};
use muster_api::resource_flavor::{AWS_TOPOLOGY_LEVELS, GKE_TOPOLOGY_LEVELS, HOSTNAME_LABEL};
use muster_api::{GpuJob, ResourceFlavor, ResourceFlavorSpec, Validate};
use muster_topology::{Fit, NodeInfo, PodSetRequest, Topology, place, pod_usage};
use serde_json::{Value, json};

use muster_api::manifest as yaml;

/// Arguments of `muster fit`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Nodes, as `kubectl get nodes -o yaml` prints them (a List or several documents).
    #[arg(long, value_name = "NODES.yaml")]
    nodes: PathBuf,
    /// The job to place: a GpuJob, or a `batch/v1` Job or JobSet labelled for a queue (its
    /// pod sets read as Muster reads them).
    #[arg(long, value_name = "JOB.yaml")]
    job: PathBuf,
    /// Pods whose usage counts, as `kubectl get pods -A -o yaml` prints them.
    #[arg(long, value_name = "PODS.yaml")]
    pods: Option<PathBuf>,
    /// The ResourceFlavor: its node labels select the nodes, its levels shape the topology.
    /// Without it, the levels are the label keys the job names plus kubernetes.io/hostname.
    #[arg(long, value_name = "FLAVOR.yaml")]
    flavor: Option<PathBuf>,
    /// Placement policy.
    #[arg(long, default_value = "best-fit", value_parser = clap::builder::PossibleValuesParser::new(muster_topology::POLICY_NAMES))]
    policy: String,
    /// Output format.
    #[arg(short = 'o', long, default_value = "text", value_parser = ["text", "json"])]
    output: String,
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let job = job_to_place(&args.job)?;
    let flavor: Option<ResourceFlavorSpec> = match &args.flavor {
        Some(path) => Some(one_object::<ResourceFlavor>(path)?.spec),
        None => None,
    };
    let levels = match &flavor {
        Some(f) => f.topology_levels.clone(),
        None => levels_named_by(&job),
    };

    let mut nodes = Vec::new();
    for object in documents(&args.nodes)? {
        let node: Node =
            read_lenient(object.value).map_err(|e| located(&args.nodes, &object.label, &[e]))?;
        let info = NodeInfo::from_node(&node)
            .with_context(|| format!("{}:{}", args.nodes.display(), object.label))?;
        let selected = flavor.as_ref().is_none_or(|f| {
            f.node_labels
                .iter()
                .all(|(k, v)| info.labels.get(k) == Some(v))
        });
        if selected {
            nodes.push(info);
        }
    }
    let mut topo = Topology::new(levels, nodes);
    if let Some(path) = &args.pods {
        for object in documents(path)? {
            let pod: Pod =
                read_lenient(object.value).map_err(|e| located(path, &object.label, &[e]))?;
            if let Some((node, usage)) =
                pod_usage(&pod).with_context(|| format!("{}:{}", path.display(), object.label))?
                && let Some(id) = topo.node_id(&node)
            {
                topo.add_usage(id, &usage);
            }
        }
    }

    let gang = job
        .spec
        .pod_sets
        .iter()
        .map(|set| {
            PodSetRequest::from_pod_set(set, flavor.as_ref()).map(|mut req| {
                req.whole_gpus &= !job.spec.accept_shared_gpus;
                req
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let policy = muster_topology::by_name(&args.policy).context("unknown policy")?;
    let result = place(&mut topo, &gang, policy.as_ref());
    let json = args.output == "json";
    match result {
        Ok(fit) => {
            print_fit(&fit, json);
            Ok(ExitCode::SUCCESS)
        }
        Err(no_fit) => {
            if json {
                let reason = json!({"kind": no_fit.kind.as_str(), "podSet": no_fit.pod_set, "message": no_fit.message});
                println!("{}", json!({"fit": false, "reason": reason}));
            } else {
                println!("does not fit: {}", no_fit.message);
            }
            Ok(ExitCode::FAILURE)
        }
    }
}

fn print_fit(fit: &Fit, json: bool) {
    if json {
        let sets: Vec<Value> = fit
            .pod_sets
            .iter()
            .map(|s| {
                let domain: serde_json::Map<String, Value> = s
                    .domain
                    .iter()
                    .map(|(k, v)| (k.clone(), json!(v)))
                    .collect();
                let pods: Vec<Value> = s
                    .nodes
                    .iter()
                    .enumerate()
                    .map(|(i, n)| json!({"index": i, "node": n}))
                    .collect();
                json!({"name": s.name, "domain": domain, "pods": pods})
            })
            .collect();
        println!("{}", json!({"fit": true, "podSets": sets}));
        return;
    }
    for s in &fit.pod_sets {
        let domain: Vec<String> = s.domain.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let place = if domain.is_empty() {
            "anywhere in the flavor".to_owned()
        } else {
            domain.join(", ")
        };
        println!("pod set {}: {} pods in {place}", s.name, s.nodes.len());
        for (i, n) in s.nodes.iter().enumerate() {
            println!("  {i:>4}  {n}");
        }
    }
}

/// The topology levels a job names, widest first by the usual cloud orderings, then
/// `kubernetes.io/hostname`.
fn levels_named_by(job: &GpuJob) -> Vec<String> {
    let known: Vec<&str> = GKE_TOPOLOGY_LEVELS
        .iter()
        .chain(AWS_TOPOLOGY_LEVELS)
        .copied()
        .collect();
    let mut named: Vec<String> = Vec::new();
    for set in &job.spec.pod_sets {
        if let Some(t) = &set.topology {
            for level in t.required.iter().chain(&t.preferred) {
                if level != HOSTNAME_LABEL && !named.contains(level) {
                    named.push(level.clone());
                }
            }
        }
    }
    named.sort_by_key(|l| known.iter().position(|k| k == l).unwrap_or(known.len()));
    named.push(HOSTNAME_LABEL.to_owned());
    named
}

/// Every object in a YAML file, lists flattened; a syntax error is an error.
fn documents(path: &Path) -> anyhow::Result<Vec<yaml::Located>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    match yaml::objects(&text) {
        (objects, None) => Ok(objects),
        (_, Some(err)) => bail!("{}:{}: {}", path.display(), err.label, err.message),
    }
}

/// The job in `path`: a GpuJob, or a Job or JobSet read as the GpuJob admission sees.
fn job_to_place(path: &Path) -> anyhow::Result<GpuJob> {
    let object = one_document(path)?;
    let (job, what) = match muster_api::workload::read(object.value.clone()) {
        Some(read) => (
            read.map_err(|e| located(path, &object.label, &e))?,
            "workload",
        ),
        None => (
            read::<GpuJob>(object.value).map_err(|e| located(path, &object.label, &e))?,
            "GpuJob",
        ),
    };
    let errors = job.validate();
    if !errors.is_empty() {
        let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
        bail!(
            "{} is not a valid {what}:\n  {}",
            path.display(),
            list.join("\n  ")
        );
    }
    Ok(job)
}

/// The one object in a file.
fn one_object<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    let object = one_document(path)?;
    read(object.value).map_err(|e| located(path, &object.label, &e))
}

/// The one document of a file; an error when it holds none or several.
fn one_document(path: &Path) -> anyhow::Result<yaml::Located> {
    let mut docs = documents(path)?;
    if docs.len() != 1 {
        bail!(
            "{}: expected one object, found {}",
            path.display(),
            docs.len()
        );
    }
    Ok(docs.remove(0))
}

fn located(path: &Path, label: &str, errors: &[muster_api::FieldError]) -> anyhow::Error {
    let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
    anyhow::anyhow!("{}:{label}: {}", path.display(), list.join("; "))
}
