//! `muster jobs` and `muster explain`: the waiting list with positions, sizes, reasons and
//! ETAs; one job's story.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use muster_api::visibility::{JobStory, PendingJob, PendingJobList};

use super::live::{
    Connection, Output, Table, age, client, colour, get, gpus, print_document, range, until,
};

/// Arguments of `muster jobs`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    connection: Connection,
    /// The namespace (default: the kubeconfig context's).
    #[arg(short, long)]
    namespace: Option<String>,
    /// Only this LocalQueue of the namespace.
    #[arg(short = 'q', long = "queue")]
    local_queue: Option<String>,
    /// Only this ClusterQueue (every namespace's jobs in it).
    #[arg(long, conflicts_with_all = ["local_queue", "all_namespaces"])]
    cluster_queue: Option<String>,
    /// Every ClusterQueue's waiting jobs.
    #[arg(short = 'A', long, conflicts_with = "local_queue")]
    all_namespaces: bool,
    /// Keep watching: print the list again whenever it changes.
    #[arg(short, long)]
    watch: bool,
    /// Output format: a table by default.
    #[arg(short, long, value_enum)]
    output: Option<Output>,
}

/// Prints the waiting list.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let runtime = super::live_runtime()?;
    runtime.block_on(async {
        let client = client(&args.connection).await?;
        let namespace = args
            .namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_owned());
        let mut last: Option<PendingJobList> = None;
        loop {
            let answer = fetch(&client, args, &namespace).await?;
            if last.as_ref() != Some(&answer) {
                if args.watch && last.is_some() {
                    println!();
                }
                match args.output {
                    Some(format @ (Output::Json | Output::Yaml)) => {
                        print_document(&answer, format)?;
                    }
                    wide => print!(
                        "{}",
                        render(
                            &answer,
                            args.all_namespaces || args.cluster_queue.is_some(),
                            wide == Some(Output::Wide),
                            Timestamp::now(),
                            colour()
                        )
                    ),
                }
                last = Some(answer);
            }
            if !args.watch {
                return Ok(ExitCode::SUCCESS);
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    })
}

/// The list `args` asks for.
async fn fetch(
    client: &kube::Client,
    args: &Args,
    namespace: &str,
) -> anyhow::Result<PendingJobList> {
    if let Some(cq) = &args.cluster_queue {
        return get(client, &format!("/clusterqueues/{cq}/pendingjobs")).await;
    }
    if args.all_namespaces {
        return every_queue(client).await;
    }
    match &args.local_queue {
        Some(lq) => {
            get(
                client,
                &format!("/namespaces/{namespace}/localqueues/{lq}/pendingjobs"),
            )
            .await
        }
        None => get(client, &format!("/namespaces/{namespace}/pendingjobs")).await,
    }
}

/// Every ClusterQueue's waiting jobs, queue by queue (what `muster jobs -A` and the dashboard
/// show).
pub async fn every_queue(client: &kube::Client) -> anyhow::Result<PendingJobList> {
    get(client, "/pendingjobs").await
}

/// The table `muster jobs` prints. `qualified`: names with their namespace.
pub fn render(
    list: &PendingJobList,
    qualified: bool,
    wide: bool,
    now: Timestamp,
    colour: bool,
) -> String {
    let mut header = vec![
        "CLUSTERQUEUE",
        "POSITION",
        "NAME",
        "LOCALQUEUE",
        "LQ POSITION",
        "PODS",
        "GPUS",
        "PRIORITY",
        "REASON",
        "ETA",
        "STARTS (P10–P90)",
        "AGE",
    ];
    if wide {
        header.extend(["OWNER", "FLAVORS", "MESSAGE"]);
    }
    let mut table = Table::new(&header);
    for job in &list.items {
        let name = if qualified {
            job.display_name()
        } else {
            job.name
                .clone()
                .unwrap_or_else(|| muster_api::visibility::HIDDEN.to_owned())
        };
        let place = |p: u32| {
            if p == 0 {
                "-".to_owned()
            } else {
                p.to_string()
            }
        };
        let mut row = vec![
            job.cluster_queue.clone().unwrap_or_else(|| "-".to_owned()),
            place(job.position),
            name,
            job.local_queue.clone().unwrap_or_else(|| "-".to_owned()),
            job.local_queue_position
                .map_or_else(|| "-".to_owned(), place),
            job.pods.to_string(),
            gpus(job.gpus),
            job.priority.to_string(),
            job.reason.to_string(),
            until(job.eta.as_ref(), now),
            range(job.start_range.as_ref(), now, None),
            age(job.created.as_ref(), now),
        ];
        if wide {
            row.push(job.owner.clone().unwrap_or_else(|| "-".to_owned()));
            row.push(
                job.cluster_queue
                    .as_ref()
                    .and_then(|cq| list.flavors.get(cq))
                    .filter(|f| !f.is_empty())
                    .map_or_else(|| "-".to_owned(), |f| f.join(",")),
            );
            row.push(job.message.clone().unwrap_or_else(|| "-".to_owned()));
        }
        table.row(row);
    }
    if table.is_empty() {
        return format!("No waiting jobs in {}.\n", list.scope);
    }
    let mut text = table.render(colour);
    if list.hidden > 0 {
        let _ = writeln!(
            text,
            "{} in namespaces where you may not list GpuJobs: {} hidden.",
            if list.hidden == 1 {
                "1 of these jobs is".to_owned()
            } else {
                format!("{} of these jobs are", list.hidden)
            },
            if list.hidden == 1 {
                "its name is"
            } else {
                "their names are"
            }
        );
    }
    text
}

/// Arguments of `muster explain`.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    #[command(flatten)]
    connection: Connection,
    /// The GpuJob (for a batch Job or JobSet, its queue entry: the GpuJob of the same name).
    job: String,
    /// Its namespace (default: the kubeconfig context's).
    #[arg(short, long)]
    namespace: Option<String>,
    /// Output format: text by default.
    #[arg(short, long, value_enum)]
    output: Option<Output>,
}

/// Prints one job's story.
pub fn explain(args: &ExplainArgs) -> anyhow::Result<ExitCode> {
    let runtime = super::live_runtime()?;
    let story: JobStory = runtime.block_on(async {
        let client = client(&args.connection).await?;
        let namespace = args
            .namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_owned());
        get(
            &client,
            &format!("/namespaces/{namespace}/gpujobs/{}/story", args.job),
        )
        .await
    })?;
    match args.output {
        Some(format @ (Output::Json | Output::Yaml)) => print_document(&story, format)?,
        _ => print!("{}", render_story(&story, Timestamp::now())),
    }
    Ok(ExitCode::SUCCESS)
}

/// `1 pod`, `2 pods`.
fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// `1 GPU`, `0.5 GPU`, `16 GPUs`.
fn gpu_count(n: f64) -> String {
    if n > 1.0 {
        format!("{} GPUs", gpus(n))
    } else {
        format!("{} GPU", gpus(n))
    }
}

fn describe(job: &PendingJob, now: Timestamp) -> String {
    format!(
        "{} ({}, {}, priority {}, {}, waiting {})",
        job.display_name(),
        count(u64::from(job.pods), "pod"),
        gpu_count(job.gpus),
        job.priority,
        job.reason,
        age(job.created.as_ref(), now)
    )
}

/// The text `muster explain` prints.
pub fn render_story(story: &JobStory, now: Timestamp) -> String {
    let mut out = format!("{}: {}\n", story.job, story.phase);
    if let Some(waiting) = &story.waiting {
        let cq = waiting.cluster_queue.as_deref().unwrap_or("-");
        if waiting.position > 0 {
            let _ = write!(out, "  position {} in ClusterQueue {cq}", waiting.position);
            if let (Some(lq), Some(p)) = (&waiting.local_queue, waiting.local_queue_position) {
                let _ = write!(out, ", {p} in LocalQueue {lq}");
            }
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "  asks for {}, {}{}, priority {}",
            count(u64::from(waiting.pods), "pod"),
            gpu_count(waiting.gpus),
            if story.flavors.is_empty() {
                String::new()
            } else {
                format!(" of {}", story.flavors.join(" or "))
            },
            waiting.priority
        );
        let _ = write!(out, "  waits: {}", waiting.reason);
        if let Some(message) = &waiting.message {
            let _ = write!(out, ": {message}");
        }
        out.push('\n');
        if let Some(eta) = &waiting.eta {
            let _ = writeln!(
                out,
                "  expected to start {} ({}), if the jobs ahead run as long as they said",
                until(Some(eta), now),
                eta.0
            );
        }
    }
    if let Some(nearest) = &story.nearest {
        let _ = writeln!(
            out,
            "  nearest block: {} holds {} of the {} pods of pod set {} in one place; the flavor's nodes hold {} in all{}",
            nearest.domain.as_deref().unwrap_or("none"),
            nearest.pods_fitting,
            nearest.pods_needed,
            nearest.pod_set,
            nearest.pods_fitting_anywhere,
            if nearest.fragmented {
                " (enough in all, but not in one place: fragmentation)"
            } else {
                ""
            }
        );
    }
    if story.ahead_count > 0 {
        let _ = writeln!(
            out,
            "  {} ahead of it:",
            count(u64::from(story.ahead_count), "job")
        );
        for job in &story.ahead {
            let _ = writeln!(out, "    {}. {}", job.position, describe(job, now));
        }
        let shown = u32::try_from(story.ahead.len()).unwrap_or(u32::MAX);
        if story.ahead_count > shown {
            let _ = writeln!(out, "    … and {} more", story.ahead_count - shown);
        }
    }
    if !story.holders.is_empty() {
        out.push_str("  holding the quota it could use:\n");
        for holder in &story.holders {
            let _ = writeln!(
                out,
                "    {} in {}: {} of {}, admitted {} ago, {}",
                holder.job,
                holder.cluster_queue,
                gpu_count(holder.gpus),
                holder.flavor,
                age(holder.since.as_ref(), now),
                holder.expected_end.as_ref().map_or_else(
                    || "end unknown".to_owned(),
                    |e| format!("expected to end {}", until(Some(e), now))
                )
            );
        }
    }
    if !story.steps.is_empty() {
        out.push_str("  steps:\n");
        for step in &story.steps {
            let _ = writeln!(
                out,
                "    {}  {}={} {}: {}",
                step.time.0, step.type_, step.status, step.reason, step.message
            );
        }
    }
    out
}
