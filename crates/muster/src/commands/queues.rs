//! `muster queues`, `muster stop` and `muster resume`: every ClusterQueue's quota, use,
//! borrowing and lending, waiting and admitted counts; holding and releasing a queue.

use std::process::ExitCode;

use anyhow::Context as _;
use muster_api::ClusterQueue;
use muster_api::visibility::ClusterQueueSummaryList;

use super::live::{Connection, Output, Table, client, colour, get, gpus, print_document};

/// Arguments of `muster queues`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    connection: Connection,
    /// Output format: a table by default; `wide` adds one row per flavor and resource.
    #[arg(short, long, value_enum)]
    output: Option<Output>,
}

/// Prints the queues.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let runtime = super::live_runtime()?;
    let list: ClusterQueueSummaryList = runtime.block_on(async {
        let client = client(&args.connection).await?;
        get(&client, "/clusterqueues").await
    })?;
    match args.output {
        Some(format @ (Output::Json | Output::Yaml)) => print_document(&list, format)?,
        wide => print!("{}", render(&list, wide == Some(Output::Wide), colour())),
    }
    Ok(ExitCode::SUCCESS)
}

/// The table `muster queues` prints: one row per ClusterQueue, cohort by cohort, with its
/// GPUs (every flavor's `nvidia.com/gpu` summed); `wide` adds a row per flavor and resource.
pub fn render(list: &ClusterQueueSummaryList, wide: bool, colour: bool) -> String {
    let mut items: Vec<_> = list.items.iter().collect();
    items.sort_by(|a, b| (&a.cohort, &a.name).cmp(&(&b.cohort, &b.name)));
    let mut table = Table::new(&[
        "COHORT",
        "CLUSTERQUEUE",
        "STOP",
        "WAITING",
        "ADMITTED",
        "GPUS USED",
        "NOMINAL",
        "BORROWED",
        "LENT",
    ]);
    for queue in items {
        let gpu = queue
            .usage
            .iter()
            .filter(|u| u.resource == muster_api::resources::names::NVIDIA_GPU);
        let sum =
            |f: fn(&muster_api::visibility::FlavorUsage) -> f64| gpu.clone().map(f).sum::<f64>();
        table.row(vec![
            queue.cohort.clone().unwrap_or_else(|| "-".to_owned()),
            queue.name.clone(),
            if queue.problem.is_some() {
                "Invalid".to_owned()
            } else {
                queue.stop_policy.clone()
            },
            queue.waiting.to_string(),
            queue.admitted.to_string(),
            gpus(sum(|u| u.used)),
            gpus(sum(|u| u.nominal)),
            gpus(sum(|u| u.borrowed)),
            gpus(sum(|u| u.lent)),
        ]);
        if wide {
            for usage in &queue.usage {
                table.row(vec![
                    String::new(),
                    format!("  {} {}", usage.flavor, usage.resource),
                    String::new(),
                    String::new(),
                    String::new(),
                    gpus(usage.used),
                    gpus(usage.nominal),
                    gpus(usage.borrowed),
                    gpus(usage.lent),
                ]);
            }
            if let Some(problem) = &queue.problem {
                table.row(vec![String::new(), format!("  invalid: {problem}")]);
            }
        }
    }
    if table.is_empty() {
        return "No ClusterQueues.\n".to_owned();
    }
    table.render(colour)
}

/// Arguments of `muster stop` and `muster resume`.
#[derive(Debug, clap::Args)]
pub struct StopArgs {
    #[command(flatten)]
    connection: Connection,
    /// The ClusterQueue.
    cluster_queue: String,
    /// Also evict what the queue admitted (stopPolicy HoldAndDrain); only with `stop`.
    #[arg(long)]
    drain: bool,
}

/// Sets the queue's `spec.stopPolicy`: `Hold` (or `HoldAndDrain`) to stop, `None` to resume.
pub fn stop(args: &StopArgs, resume: bool) -> anyhow::Result<ExitCode> {
    let policy = match (resume, args.drain) {
        (true, true) => anyhow::bail!("--drain goes with stop, not resume"),
        (true, false) => "None",
        (false, true) => "HoldAndDrain",
        (false, false) => "Hold",
    };
    let runtime = super::live_runtime()?;
    runtime.block_on(async {
        let client = client(&args.connection).await?;
        let api: kube::Api<ClusterQueue> = kube::Api::all(client);
        let patch = serde_json::json!({"spec": {"stopPolicy": policy}});
        api.patch(
            &args.cluster_queue,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .map_err(|e| match e {
            kube::Error::Api(status) => anyhow::anyhow!("{}", status.message),
            other => anyhow::anyhow!("{other}"),
        })
        .with_context(|| format!("setting ClusterQueue {}'s stopPolicy", args.cluster_queue))
    })?;
    println!(
        "clusterqueue/{} {}",
        args.cluster_queue,
        match policy {
            "None" => "resumed",
            "Hold" => "stopped (admitted jobs keep running)",
            _ => "stopped and draining",
        }
    );
    Ok(ExitCode::SUCCESS)
}
