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
    /// Write fill.csv, fill.svg, fill-zoom.svg and index.html here.
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
        series.push(plots::Series {
            name: policy.clone(),
            points: curve
                .iter()
                .map(|r| (f64::from(r.arrived_percent), r.allocated_percent))
                .collect(),
        });
        curves.extend(curve);
    }
    if let Some(out) = &args.out {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        std::fs::write(out.join("fill.csv"), fill::csv(&curves))?;
        let paper = is_the_papers_workload(&args.nodes, &args.pods);
        let published: &[_] = if paper { &fill::PAPER } else { &[] };
        let svg = plots::fill(&series, published);
        std::fs::write(out.join("fill.svg"), &svg)?;
        let zoom = plots::fill_zoom(&series, published);
        std::fs::write(out.join("fill-zoom.svg"), &zoom)?;
        let page = fill_page(
            args,
            &curves,
            vec![
                ("fill.svg".to_owned(), svg),
                ("fill-zoom.svg".to_owned(), zoom),
            ],
            paper,
        );
        std::fs::write(out.join("index.html"), muster_sim::page::render(&page))?;
        eprintln!("wrote {} and index.html", out.join("fill.csv").display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether the fill ran on the workload the paper published figures for: openb's default pod
/// list on its GPU node list (by their file names, as the trace ships them).
fn is_the_papers_workload(nodes: &Path, pods: &Path) -> bool {
    let named = |p: &Path, name: &str| p.file_name().is_some_and(|f| f == name);
    named(nodes, "openb_node_list_gpu_node.csv") && named(pods, "openb_pod_list_default.csv")
}

/// The fill's `index.html`: allocation and fragmentation at round loads per policy (with the
/// paper's figures beside when it ran the paper's workload), the plots, and the data file.
fn fill_page(
    args: &Args,
    curves: &[FillRow],
    plots: Vec<(String, String)>,
    paper: bool,
) -> muster_sim::page::Page {
    use muster_sim::page::{Page, Section};
    use std::fmt::Write as _;
    let loads: Vec<u32> = [80, 90, 100, 110, 120, 130]
        .into_iter()
        .filter(|l| *l <= args.target)
        .collect();
    let mut table = String::from("| policy |");
    for load in &loads {
        let _ = write!(table, " allocated at {load} % |");
    }
    table.push_str(" fragmented at the last load |\n|---|");
    for _ in &loads {
        table.push_str("---|");
    }
    table.push_str("---|\n");
    for policy in &args.policy {
        let rows: Vec<&FillRow> = curves.iter().filter(|r| &r.policy == policy).collect();
        let published = fill::PAPER
            .iter()
            .find(|(p, _)| paper && p == policy)
            .map(|(_, points)| points);
        let _ = write!(table, "| {policy} |");
        for load in &loads {
            let ours = rows
                .iter()
                .find(|r| r.arrived_percent == *load)
                .map_or_else(|| "–".to_owned(), |r| format!("{:.2}", r.allocated_percent));
            let theirs = published
                .and_then(|points| {
                    points
                        .iter()
                        .find(|(x, _)| (*x - f64::from(*load)).abs() < 0.5)
                })
                .map(|(_, y)| format!(" (paper {y:.2})"))
                .unwrap_or_default();
            let _ = write!(table, " {ours}{theirs} |");
        }
        let last = rows.last().map_or_else(
            || "–".to_owned(),
            |r| format!("{:.2}", r.fragmented_percent),
        );
        let _ = writeln!(table, " {last} |");
    }
    let mut notes = vec![format!(
        "Node list {}, pod list {}, seeds {:?}, load up to {} % of the fleet's GPUs; figures are percent of the fleet's GPUs, the mean over the seeds.",
        args.nodes.display(),
        args.pods.display(),
        args.seeds,
        args.target
    )];
    if paper {
        notes.push(
            "Circles and the figures in brackets: the paper's published allocation (Weng et al., USENIX ATC'23, seeds 42 to 51)."
                .to_owned(),
        );
    }
    Page {
        title: "Fill experiment".to_owned(),
        notes,
        sections: vec![Section {
            heading: "Allocation as load arrives".to_owned(),
            tables: vec![table],
            plots,
            links: vec![("fill.csv".to_owned(), "fill.csv".to_owned())],
            ..Section::default()
        }],
    }
}
