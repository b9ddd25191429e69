//! `muster fill`: the FGD paper's fill experiment on shared GPUs — pods of a trace arrive and
//! never leave until the GPUs they ask for reach a share of the fleet's; per policy and seed,
//! allocation and fragmentation at every whole percent of arrived load.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use muster_sim::fill::{self, FillOptions, FillRow};
use muster_sim::{plots, trace};

/// Arguments of `muster fill`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The node list (`sn,cpu_milli,memory_mib,gpu,model`, as openb_node_list_gpu_node.csv).
    #[arg(long, value_name = "FILE")]
    nodes: PathBuf,
    /// The pod list (openb_pod_list_*.csv: at least `cpu_milli,memory_mib,num_gpu,gpu_milli`,
    /// in any order; `gpu_spec` when present).
    #[arg(long, value_name = "FILE")]
    pods: PathBuf,
    /// Policies, comma-separated: best-fit, packing, random, fgd.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "best-fit,packing,random,fgd"
    )]
    policy: Vec<String>,
    /// Seeds, comma-separated; the curves are their mean.
    #[arg(long, value_delimiter = ',', default_value = "42")]
    seeds: Vec<u64>,
    /// Arrivals stop before the GPUs asked for pass this percent of the fleet's.
    #[arg(long, default_value_t = 130)]
    target: u32,
    /// Write fill.csv and fill.svg here.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let nodes_name = args.nodes.display().to_string();
    let nodes = trace::read_openb_nodes(&nodes_name, &read(&args.nodes)?)?;
    let pods_name = args.pods.display().to_string();
    let pods = trace::read_openb_shares(&pods_name, &read(&args.pods)?)?;
    let options = FillOptions {
        target_percent: args.target,
        ..FillOptions::default()
    };
    let gpus: usize = nodes.iter().map(|n| n.devices().len()).sum();
    eprintln!(
        "{} nodes ({gpus} GPUs), {} pods; seeds {:?}",
        nodes.len(),
        pods.len(),
        args.seeds
    );
    let mut curves: Vec<FillRow> = Vec::new();
    let mut series = Vec::new();
    for policy in &args.policy {
        let started = Instant::now();
        let mut runs = Vec::with_capacity(args.seeds.len());
        for &seed in &args.seeds {
            runs.push(fill::fill(&nodes, &pods, policy, seed, &options)?);
        }
        let runs_made = u32::try_from(args.seeds.len().max(1)).unwrap_or(u32::MAX);
        let seconds = started.elapsed().as_secs_f64() / f64::from(runs_made);
        let curve = fill::mean(&runs);
        let at = |x: u32| {
            curve
                .iter()
                .find(|r| r.arrived_percent == x)
                .map_or(f64::NAN, |r| r.allocated_percent)
        };
        println!(
            "{policy:>9}: allocated {:.2} % at 100 %, {:.2} % at {} % arrived; {seconds:.2} s per run",
            at(100),
            at(args.target),
            args.target
        );
        series.push((
            policy.clone(),
            curve
                .iter()
                .map(|r| (f64::from(r.arrived_percent), r.allocated_percent))
                .collect(),
        ));
        curves.extend(curve);
    }
    if let Some(out) = &args.out {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        std::fs::write(out.join("fill.csv"), fill::csv(&curves))?;
        std::fs::write(out.join("fill.svg"), plots::fill(&series))?;
        eprintln!("wrote {}", out.join("fill.csv").display());
    }
    Ok(ExitCode::SUCCESS)
}
