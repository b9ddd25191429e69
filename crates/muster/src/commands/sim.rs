//! `muster sim`: replay a scenario through the real admission and placement code.

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use muster_sim::scenario::Loaded;
use muster_sim::{engine, plots, report};

/// Arguments of `muster sim`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The scenario file (see docs/researchers.md).
    scenario: PathBuf,
    /// Write jobs.csv and summary.json here (one folder per policy when comparing several,
    /// with comparison.md and comparison.json).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Placement policies to compare, comma-separated (overrides the scenario's).
    #[arg(long, value_delimiter = ',')]
    policy: Vec<String>,
    /// Seed of a synthetic workload (overrides the scenario's).
    #[arg(long)]
    seed: Option<u64>,
    /// Write the scenario's workload (from any trace format or the generator) as Muster CSV
    /// to this file, and exit without simulating.
    #[arg(long, value_name = "FILE")]
    export_trace: Option<PathBuf>,
    /// Make announced runtimes wrong by up to this fraction of themselves, drawn per job
    /// (0.5: from half to one and a half times the true runtime); jobs still run their true
    /// duration.
    #[arg(long, value_name = "FRACTION")]
    runtime_error: Option<f64>,
    /// Seed of the runtime errors.
    #[arg(
        long,
        value_name = "SEED",
        default_value_t = 1,
        requires = "runtime_error"
    )]
    runtime_error_seed: u64,
    /// Set `preemption.waitWhenCheaper` on every ClusterQueue that preempts.
    #[arg(long, value_name = "BOOL")]
    wait_when_cheaper: Option<bool>,
    /// Set `preemption.maxWaitWhenCheaperSeconds` on every ClusterQueue that preempts.
    #[arg(long, value_name = "SECONDS")]
    max_wait_when_cheaper: Option<i64>,
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let mut loaded = Loaded::from_file(&args.scenario, args.seed)?;
    if let Some(error) = args.runtime_error {
        loaded
            .misannounce_runtimes(error, args.runtime_error_seed)
            .map_err(anyhow::Error::msg)?;
    }
    loaded.set_preemption_waits(args.wait_when_cheaper, args.max_wait_when_cheaper);
    if let Some(path) = &args.export_trace {
        std::fs::write(path, muster_sim::trace::write_muster(&loaded.jobs))
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {} jobs to {}", loaded.jobs.len(), path.display());
        return Ok(ExitCode::SUCCESS);
    }
    let mut policies = if args.policy.is_empty() {
        loaded.scenario.policies.clone()
    } else {
        args.policy.clone()
    };
    if policies.is_empty() {
        policies.push("best-fit".into());
    }
    let name = loaded.scenario.name.clone();
    let tty = std::io::stderr().is_terminal();
    let mut summaries = Vec::new();
    let mut runs = Vec::new();
    for policy in &policies {
        let mut last = 0usize;
        let mut progress = |done: usize, total: usize| {
            // About every 2% on a terminal: a progress line that rewrites itself.
            if tty && total > 0 && (done * 50 / total != last * 50 / total || done == total) {
                last = done;
                eprint!("\r{policy}: {done}/{total} jobs finished");
            }
        };
        let result = engine::run(&loaded, policy, &mut progress).map_err(anyhow::Error::msg)?;
        if tty {
            eprintln!();
        }
        let summary = report::summary(&name, &result, true);
        print!("{}", report::text(&summary));
        if let Some(out) = &args.out {
            let dir = if policies.len() > 1 {
                out.join(policy)
            } else {
                out.clone()
            };
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            std::fs::write(dir.join("jobs.csv"), report::jobs_csv(&result))?;
            std::fs::write(
                dir.join("summary.json"),
                serde_json::to_string_pretty(&summary)? + "\n",
            )?;
            // Drawn once: written here and shown on the page.
            let own = vec![
                ("allocation.svg".to_owned(), plots::allocation(&[&result])),
                ("queue.svg".to_owned(), plots::queue_length(&[&result])),
                ("wait-cdf.svg".to_owned(), plots::wait_cdf(&result)),
            ];
            for (file, svg) in &own {
                std::fs::write(dir.join(file), svg)?;
            }
            runs.push((result, own));
        }
        summaries.push(summary);
    }
    let table = report::comparison_markdown(&summaries);
    if policies.len() > 1 {
        print!("\n{table}");
        if let Some(out) = &args.out {
            std::fs::write(out.join("comparison.md"), &table)?;
            std::fs::write(
                out.join("comparison.json"),
                serde_json::to_string_pretty(&summaries)? + "\n",
            )?;
        }
    }
    if let Some(out) = &args.out {
        let scenario_text = std::fs::read_to_string(&args.scenario)
            .with_context(|| format!("reading {}", args.scenario.display()))?;
        let page = index_page(
            &args.scenario,
            &scenario_text,
            &name,
            &table,
            &summaries,
            &runs,
        );
        if runs.len() > 1 {
            // The comparison's plots live only in the page's folder; each policy's are
            // already written beside its data (as a single run's are).
            for section in &page.sections {
                for (file, svg) in &section.plots {
                    if !file.contains('/') {
                        std::fs::write(out.join(file), svg)?;
                    }
                }
            }
        }
        std::fs::write(out.join("index.html"), muster_sim::page::render(&page))?;
        eprintln!("wrote {}", out.join("index.html").display());
    }
    Ok(ExitCode::SUCCESS)
}

/// The run's `index.html`: the summary tables, the plots (with every policy on the same axes
/// when comparing), each policy's files, and the scenario.
fn index_page(
    path: &std::path::Path,
    scenario: &str,
    name: &str,
    table: &str,
    summaries: &[serde_json::Value],
    runs: &[(engine::Run, Vec<(String, String)>)],
) -> muster_sim::page::Page {
    use muster_sim::page::{Page, Section};
    let refs: Vec<&engine::Run> = runs.iter().map(|(run, _)| run).collect();
    let policies: Vec<&str> = refs.iter().map(|r| r.policy.as_str()).collect();
    // Without the run's own timing, so that the page, like the plots, is the same for the same
    // scenario byte for byte.
    let texts: Vec<String> = summaries
        .iter()
        .map(|summary| report::text(&report::without_timing(summary)))
        .collect();
    let mut sections = vec![Section {
        heading: "Summary".to_owned(),
        tables: vec![table.to_owned()],
        text: Some(texts.join("\n")),
        ..Section::default()
    }];
    if runs.len() > 1 {
        let mut plots = vec![
            ("allocation.svg".to_owned(), plots::allocation(&refs)),
            ("queue.svg".to_owned(), plots::queue_length(&refs)),
        ];
        for (stem, svg) in plots::wait_cdf_by_class(&refs) {
            plots.push((format!("{stem}.svg"), svg));
        }
        sections.push(Section {
            heading: "Every policy on the same axes".to_owned(),
            plots,
            links: vec![
                ("comparison.md".to_owned(), "comparison.md".to_owned()),
                ("comparison.json".to_owned(), "comparison.json".to_owned()),
            ],
            ..Section::default()
        });
        for (run, own) in runs {
            let p = &run.policy;
            sections.push(Section {
                heading: format!("Policy {p}"),
                plots: own
                    .iter()
                    .filter(|(file, _)| file == "wait-cdf.svg")
                    .map(|(file, svg)| (format!("{p}/{file}"), svg.clone()))
                    .collect(),
                links: ["jobs.csv", "summary.json", "allocation.svg", "queue.svg"]
                    .iter()
                    .map(|f| ((*f).to_owned(), format!("{p}/{f}")))
                    .collect(),
                ..Section::default()
            });
        }
    } else if let Some((_, own)) = runs.first() {
        sections.push(Section {
            heading: "Plots".to_owned(),
            plots: own.clone(),
            links: ["jobs.csv", "summary.json"]
                .iter()
                .map(|f| ((*f).to_owned(), (*f).to_owned()))
                .collect(),
            ..Section::default()
        });
    }
    sections.push(Section {
        heading: format!("Scenario ({})", path.display()),
        text: Some(scenario.to_owned()),
        ..Section::default()
    });
    Page {
        title: format!("Simulation: {name}"),
        notes: vec![format!(
            "Placement policies: {}. Made by muster sim; jobs.csv and summary.json hold every figure.",
            policies.join(", ")
        )],
        sections,
    }
}
