//! `muster`: the one binary. Each job is a subcommand.

mod commands;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// jemalloc rather than the C library's allocator: the controller allocates and frees many
/// small objects from several threads (every watch event is parsed into new ones), where
/// glibc's allocator took a fifth of the controller's CPU in a batch run (see
/// docs/performance.md).
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Muster: a gang-scheduling job queue for GPU and TPU workloads on Kubernetes.
#[derive(Debug, Parser)]
#[command(name = "muster", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Free GPUs per flavor and topology domain, down to each node (live cluster).
    Blocks(commands::blocks::Args),
    /// Run Muster on a Kubernetes cluster: watch, admit, release gangs, serve metrics.
    Controller(commands::controller::Args),
    /// Print every Muster CRD as YAML (or write one file per CRD with --out).
    Crds(commands::crds::Args),
    /// The FGD paper's fill experiment on shared GPUs: allocation and fragmentation per policy.
    Fill(commands::fill::Args),
    /// A read-only page of the live cluster on this machine, with your kubeconfig: queues, waiting jobs, topology.
    Dashboard(commands::dashboard::Args),
    /// Every waiting job's start as a range (10th–90th percentile), from the controller's
    /// latest forecast (live cluster).
    Eta(commands::eta::EtaArgs),
    /// How good start-time ranges are: replay a scenario, forecast at many moments from the
    /// past only, compare with the real starts (and two baselines).
    EtaAccuracy(commands::eta_accuracy::Args),
    /// One job's story: where it stands, why it waits, who is ahead, what holds its quota (live cluster).
    Explain(commands::jobs::ExplainArgs),
    /// Would a GpuJob fit on these nodes now, and where? Exit 0: fits; 1: does not; 2: bad input.
    Fit(commands::fit::Args),
    /// The waiting jobs in order: positions, sizes, reasons, ETAs (live cluster).
    Jobs(commands::jobs::Args),
    /// Every ClusterQueue: quota, use, borrowing, lending, waiting and admitted jobs (live cluster).
    Queues(commands::queues::Args),
    /// Let a stopped ClusterQueue admit again (live cluster).
    Resume(commands::queues::StopArgs),
    /// Replay a scenario's workload through Muster's admission and placement in virtual time.
    Sim(commands::sim::Args),
    /// Stop a ClusterQueue admitting (--drain: and evict what it admitted) (live cluster).
    Stop(commands::queues::StopArgs),
    /// When jobs would start if nodes were added, removed or drained, a quota changed, or a
    /// job submitted — nothing is changed (live cluster).
    Whatif(commands::eta::WhatIfArgs),
    /// Check Muster YAML files offline: every error, with file, document and field.
    Validate(commands::validate::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Commands against a live cluster fail with 1, as kubectl does; the others keep 2 for
    // bad input.
    let failure = match cli.command {
        Command::Blocks(_)
        | Command::Dashboard(_)
        | Command::Eta(_)
        | Command::Explain(_)
        | Command::Jobs(_)
        | Command::Queues(_)
        | Command::Resume(_)
        | Command::Stop(_)
        | Command::Whatif(_) => 1,
        _ => 2,
    };
    let result = match cli.command {
        Command::Blocks(args) => commands::blocks::run(&args),
        Command::Controller(args) => commands::controller::run(&args),
        Command::Dashboard(args) => commands::dashboard::run(&args),
        Command::Eta(args) => commands::eta::eta(&args),
        Command::Explain(args) => commands::jobs::explain(&args),
        Command::Jobs(args) => commands::jobs::run(&args),
        Command::Queues(args) => commands::queues::run(&args),
        Command::Resume(args) => commands::queues::stop(&args, true),
        Command::Stop(args) => commands::queues::stop(&args, false),
        Command::Crds(args) => commands::crds::run(&args),
        Command::Fill(args) => commands::fill::run(&args),
        Command::EtaAccuracy(args) => commands::eta_accuracy::run(&args),
        Command::Fit(args) => commands::fit::run(&args),
        Command::Sim(args) => commands::sim::run(&args),
        Command::Validate(args) => commands::validate::run(&args),
        Command::Whatif(args) => commands::eta::what_if(&args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(failure)
        }
    }
}
