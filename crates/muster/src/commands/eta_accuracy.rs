//! `muster eta-accuracy`: how good start-time ranges are on a replayed trace, against two
//! baselines (announced runtimes, one run; queue position only).

use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use muster_sim::forecast::Options;
use muster_sim::forecast::accuracy::{self, Accuracy, AccuracyOptions};
use muster_sim::scenario::Loaded;

/// Arguments of `muster eta-accuracy`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The scenario file (see docs/researchers.md); no failures, pool changes or autoscaler.
    scenario: PathBuf,
    /// Seconds between snapshots of the replay.
    #[arg(long, value_name = "SECONDS", default_value_t = 3600)]
    every: i64,
    /// Score only jobs that really waited longer than this.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    min_wait: i64,
    /// Forward runs per forecast.
    #[arg(long, default_value_t = 32)]
    samples: u32,
    /// Seed of the runtime draws.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How far ahead a forecast runs, days.
    #[arg(long, value_name = "DAYS", default_value_t = 30)]
    horizon_days: i64,
    /// The placement policy (default: the scenario's first, else best-fit).
    #[arg(long)]
    policy: Option<String>,
    /// Give every job an announced runtime of its true duration times a factor drawn
    /// log-uniformly from LOW to HIGH (0.5:4), replacing the scenario's announcements.
    #[arg(long, value_name = "LOW:HIGH")]
    announced_factor: Option<String>,
    /// Take every announced runtime away (as on Philly, where jobs announced none): the
    /// forecasts learn durations alone.
    #[arg(long, conflicts_with = "announced_factor")]
    unannounced: bool,
    /// Seed of the announced-runtime factors.
    #[arg(long, default_value_t = 1, requires = "announced_factor")]
    announced_factor_seed: u64,
    /// How alike one family's runtimes are within a forward run (0: independent, 1: all at
    /// one quantile; default: as alike as finished runs were).
    #[arg(long)]
    correlation: Option<f64>,
    /// Jobs keep arriving in a forward run as they did over this many seconds before the
    /// snapshot (0: none arrive).
    #[arg(long, value_name = "SECONDS", default_value_t = 6 * 3600)]
    arrivals_window: i64,
    /// Threads for the forward runs (default: every core). The answer does not depend on it.
    #[arg(long)]
    threads: Option<usize>,
    /// Write pairs.csv (every scored job at every moment) and accuracy.json here.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

fn factors(text: &str) -> anyhow::Result<(f64, f64)> {
    let (low, high) = text
        .split_once(':')
        .with_context(|| format!("--announced-factor {text:?}: write LOW:HIGH, as 0.5:4"))?;
    let parse = |v: &str| {
        v.trim()
            .parse::<f64>()
            .with_context(|| format!("--announced-factor {text:?}: {v:?} is not a number"))
    };
    Ok((parse(low)?, parse(high)?))
}

pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let mut loaded = Loaded::from_file(&args.scenario, None)?;
    if let Some(text) = &args.announced_factor {
        let (low, high) = factors(text)?;
        loaded
            .announce_off_by(low, high, args.announced_factor_seed)
            .map_err(anyhow::Error::msg)?;
    }
    if args.unannounced {
        for job in &mut loaded.jobs {
            job.expected_runtime = None;
        }
    }
    let policy = args
        .policy
        .clone()
        .or_else(|| loaded.scenario.policies.first().cloned())
        .unwrap_or_else(|| "best-fit".to_owned());
    let threads = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let options = AccuracyOptions {
        every: args.every,
        min_wait: args.min_wait,
        forecast: Options {
            samples: args.samples,
            seed: args.seed,
            horizon: args.horizon_days.saturating_mul(24 * 3600),
            policy: policy.clone(),
            threads,
            correlation: args.correlation,
            arrivals_window: args.arrivals_window,
        },
    };
    let tty = std::io::stderr().is_terminal();
    let started = Instant::now();
    let result = accuracy::evaluate(&loaded, &options, &mut |done, total| {
        if tty {
            eprint!("\rforecast {done}/{total} moments");
        }
    })
    .map_err(anyhow::Error::msg)?;
    if tty {
        eprintln!();
    }
    print!("{}", table(&loaded.scenario.name, &policy, args, &result));
    eprintln!("took {:.1} s", started.elapsed().as_secs_f64());
    if let Some(out) = &args.out {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        std::fs::write(out.join("pairs.csv"), pairs_csv(&result))?;
        std::fs::write(
            out.join("accuracy.json"),
            serde_json::to_string_pretty(&json(&loaded.scenario.name, &policy, args, &result))?
                + "\n",
        )?;
        eprintln!("wrote {}", out.join("pairs.csv").display());
    }
    Ok(ExitCode::SUCCESS)
}

fn percent(part: usize, whole: usize) -> f64 {
    #[expect(clippy::cast_precision_loss, reason = "counts far below 2^53")]
    let p = 100.0 * part as f64 / whole.max(1) as f64;
    p
}

fn table(name: &str, policy: &str, args: &Args, result: &Accuracy) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{name} — policy {policy}, a snapshot every {} s, {} forward runs per forecast",
        args.every, args.samples
    );
    let _ = writeln!(
        out,
        "  scored {} pairs ({} jobs that waited over {} s, at {} moments)",
        result.pairs.len(),
        result.jobs,
        args.min_wait,
        result.moments
    );
    let _ = writeln!(
        out,
        "  {:<10} {:>18} {:>22} {:>10}",
        "method", "covered p10-p90", "median error ÷ wait", "no answer"
    );
    for s in &result.scores {
        let covered = s.covered.map_or_else(
            || "-".to_owned(),
            |c| format!("{:.1} %", percent(c, result.pairs.len())),
        );
        let _ = writeln!(
            out,
            "  {:<10} {covered:>18} {:>22} {:>10}",
            s.method,
            format!("{:.3}", s.median_error),
            s.no_answer
        );
    }
    out
}

fn json(name: &str, policy: &str, args: &Args, result: &Accuracy) -> serde_json::Value {
    serde_json::json!({
        "scenario": name,
        "policy": policy,
        "everySeconds": args.every,
        "minWaitSeconds": args.min_wait,
        "samples": args.samples,
        "seed": args.seed,
        "correlation": args.correlation,
        "arrivalsWindowSeconds": args.arrivals_window,
        "announcedFactor": args.announced_factor,
        "unannounced": args.unannounced,
        "pairs": result.pairs.len(),
        "jobs": result.jobs,
        "moments": result.moments,
        "methods": result.scores.iter().map(|s| serde_json::json!({
            "method": s.method,
            "coveredPercent": s.covered.map(|c| (percent(c, result.pairs.len()) * 10.0).round() / 10.0),
            "medianError": if s.median_error.is_finite() { serde_json::json!((s.median_error * 1000.0).round() / 1000.0) } else { serde_json::Value::Null },
            "noAnswer": s.no_answer,
        })).collect::<Vec<_>>(),
    })
}

fn pairs_csv(result: &Accuracy) -> String {
    let cell = |t: Option<i64>| t.map_or_else(String::new, |t| t.to_string());
    let mut out = String::from("moment,job,submit,start,p10,p50,p90,announced,position\n");
    for p in &result.pairs {
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{}",
            p.moment,
            p.job,
            p.submit,
            p.start,
            cell(p.range[0]),
            cell(p.range[1]),
            cell(p.range[2]),
            cell(p.announced),
            cell(p.position)
        );
    }
    out
}
