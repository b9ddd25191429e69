//! `muster queues`, `muster stop` and `muster resume`: every ClusterQueue's quota, use,
//! borrowing and lending, waiting and admitted counts; holding and releasing a queue.

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::Context as _;
use muster_api::ClusterQueue;
use muster_api::visibility::{ClusterQueueSummary, ClusterQueueSummaryList};

use super::live::{Connection, Output, Table, client, colour, get, gpus, print_document};

/// Arguments of `muster queues`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    connection: Connection,
    /// Output format: a table by default; `wide` adds one row per flavor and resource.
    #[arg(short, long, value_enum)]
    output: Option<Output>,
    /// Show the cohort tree: each cohort with the queues and cohorts under it, indented.
    #[arg(long)]
    tree: bool,
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
        _ if args.tree => print!("{}", render_tree(&list, colour())),
        wide => print!("{}", render(&list, wide == Some(Output::Wide), colour())),
    }
    Ok(ExitCode::SUCCESS)
}

/// The table `muster queues` prints: one row per ClusterQueue, cohort by cohort, with its
/// GPUs (every flavor's `nvidia.com/gpu` summed); `wide` adds a row per flavor and resource.
pub fn render(list: &ClusterQueueSummaryList, wide: bool, colour: bool) -> String {
    let mut items: Vec<_> = list.items.iter().collect();
    items.sort_by(|a, b| (&a.cohort, &a.name).cmp(&(&b.cohort, &b.name)));
    let mut table = Table::new(&[&["COHORT", "CLUSTERQUEUE"], FIGURES].concat());
    for queue in items {
        let mut row = vec![
            queue.cohort.clone().unwrap_or_else(|| "-".to_owned()),
            queue.name.clone(),
        ];
        row.extend(figures(queue));
        table.row(row);
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

/// The headers of [`figures`]' cells.
const FIGURES: &[&str] = &[
    "STOP",
    "WAITING",
    "ADMITTED",
    "GPUS USED",
    "NOMINAL",
    "BORROWED",
    "LENT",
];

/// `f` of the queue's `nvidia.com/gpu` usage, summed over its flavors.
fn gpu_sum(queue: &ClusterQueueSummary, f: fn(&muster_api::visibility::FlavorUsage) -> f64) -> f64 {
    queue
        .usage
        .iter()
        .filter(|u| u.resource == muster_api::resources::names::NVIDIA_GPU)
        .map(f)
        .sum()
}

/// A queue's cells after its name: stop policy (or `Invalid`), waiting, admitted, and its
/// GPUs (every flavor's `nvidia.com/gpu` summed) used, nominal, borrowed and lent.
fn figures(queue: &ClusterQueueSummary) -> Vec<String> {
    let sum = |f| gpu_sum(queue, f);
    vec![
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
    ]
}

/// The table `muster queues --tree` prints: every cohort tree from its root down, a cohort
/// row (with its subtree's waiting, admitted and used GPUs) above the cohorts and queues
/// under it, indented by depth; queues without a cohort last, under `-`.
pub fn render_tree(list: &ClusterQueueSummaryList, colour: bool) -> String {
    /// A row's place: the cohorts from the root down, then the queue's name (`None` on a
    /// cohort's own row).
    type Path<'a> = (Vec<&'a str>, Option<&'a str>);
    let mut rows: Vec<(Path<'_>, Option<&ClusterQueueSummary>)> = Vec::new();
    // Per cohort path: (waiting, admitted, GPUs used) summed over its subtree.
    let mut totals: BTreeMap<Vec<&str>, (u64, u64, f64)> = BTreeMap::new();
    for queue in &list.items {
        let mut path: Vec<&str> = queue.ancestors.iter().rev().map(String::as_str).collect();
        if path.is_empty() {
            path.push("-");
        }
        for depth in 1..=path.len() {
            let total = totals.entry(path[..depth].to_vec()).or_default();
            total.0 += u64::from(queue.waiting);
            total.1 += u64::from(queue.admitted);
            total.2 += gpu_sum(queue, |u| u.used);
        }
        rows.push(((path, Some(queue.name.as_str())), Some(queue)));
    }
    for cohort in totals.keys() {
        rows.push(((cohort.clone(), None), None));
    }
    // Queues without a cohort last; within a tree, a cohort's row before what is under it.
    rows.sort_by(|(a, _), (b, _)| {
        (a.0.first() == Some(&"-"), a).cmp(&(b.0.first() == Some(&"-"), b))
    });
    let mut table = Table::new(&[&["TREE"], FIGURES].concat());
    for ((path, name), queue) in rows {
        let depth = path.len();
        match (name, queue) {
            (Some(name), Some(queue)) => {
                let mut row = vec![format!("{}{name}", "  ".repeat(depth))];
                row.extend(figures(queue));
                table.row(row);
            }
            _ => {
                let (waiting, admitted, used) = totals.get(&path).copied().unwrap_or_default();
                table.row(vec![
                    format!(
                        "{}{}",
                        "  ".repeat(depth - 1),
                        path.last().copied().unwrap_or("-")
                    ),
                    String::new(),
                    waiting.to_string(),
                    admitted.to_string(),
                    gpus(used),
                ]);
            }
        }
    }
    if list.items.is_empty() {
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

#[cfg(test)]
mod tests {
    use muster_api::visibility::{ClusterQueueSummary, ClusterQueueSummaryList, FlavorUsage};

    use super::render_tree;

    fn queue(name: &str, ancestors: &[&str], used: f64, waiting: u32) -> ClusterQueueSummary {
        ClusterQueueSummary {
            name: name.to_owned(),
            cohort: ancestors.first().map(|c| (*c).to_owned()),
            ancestors: ancestors.iter().map(|c| (*c).to_owned()).collect(),
            stop_policy: "None".to_owned(),
            waiting,
            admitted: 1,
            usage: vec![FlavorUsage {
                flavor: "h100".to_owned(),
                resource: "nvidia.com/gpu".to_owned(),
                nominal: 16.0,
                used,
                borrowed: (used - 16.0).max(0.0),
                lent: 0.0,
            }],
            problem: None,
        }
    }

    #[test]
    fn the_tree_shows_each_cohort_above_its_subtree_with_its_totals() {
        let list = ClusterQueueSummaryList {
            items: vec![
                queue("solo", &[], 8.0, 0),
                queue("vision", &["ml", "org"], 24.0, 3),
                queue("web", &["infra", "org"], 8.0, 1),
                queue("nlp", &["ml", "org"], 0.0, 2),
            ],
            ..ClusterQueueSummaryList::default()
        };
        let text = render_tree(&list, false);
        let indented: Vec<(usize, &str)> = text
            .lines()
            .skip(1)
            .map(|l| {
                let name = l.trim_start().split(' ').next().unwrap_or("");
                (l.len() - l.trim_start().len(), name)
            })
            .collect();
        assert_eq!(
            indented,
            vec![
                (0, "org"),
                (2, "infra"),
                (4, "web"),
                (2, "ml"),
                (4, "nlp"),
                (4, "vision"),
                (0, "-"),
                (2, "solo"),
            ],
            "{text}"
        );
        // org's row sums its subtree: 6 waiting, 3 admitted, 32 GPUs used.
        let org = text.lines().nth(1).unwrap_or_default();
        let figures: Vec<&str> = org.split_whitespace().collect();
        assert_eq!(figures[1..4], ["6", "3", "32"], "{org}");
    }
}
