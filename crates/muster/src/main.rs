//! `muster`: the one binary. Each job is a subcommand.

mod commands;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Muster: a gang-scheduling job queue for GPU and TPU workloads on Kubernetes.
#[derive(Debug, Parser)]
#[command(name = "muster", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run Muster on a Kubernetes cluster: watch, admit, release gangs, serve metrics.
    Controller(commands::controller::Args),
    /// Print every Muster CRD as YAML (or write one file per CRD with --out).
    Crds(commands::crds::Args),
    /// The FGD paper's fill experiment on shared GPUs: allocation and fragmentation per policy.
    Fill(commands::fill::Args),
    /// Would a GpuJob fit on these nodes now, and where? Exit 0: fits; 1: does not; 2: bad input.
    Fit(commands::fit::Args),
    /// Replay a scenario's workload through Muster's admission and placement in virtual time.
    Sim(commands::sim::Args),
    /// Check Muster YAML files offline: every error, with file, document and field.
    Validate(commands::validate::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Controller(args) => commands::controller::run(&args),
        Command::Crds(args) => commands::crds::run(&args),
        Command::Fill(args) => commands::fill::run(&args),
        Command::Fit(args) => commands::fit::run(&args),
        Command::Sim(args) => commands::sim::run(&args),
        Command::Validate(args) => commands::validate::run(&args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}
