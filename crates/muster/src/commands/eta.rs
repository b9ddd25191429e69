//! `muster eta` and `muster whatif`: every waiting job's start as a range, from the
//! controller's latest forecast; the same after changes to the cluster that are not made.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use k8s_openapi::jiff::Timestamp;
use muster_api::visibility::{ForecastAnswer, JobForecast, whatif};

use super::live::{
    Connection, Output, Table, client, clock, colour, get, gpus, print_document, range,
};

/// Arguments of `muster eta`.
#[derive(Debug, clap::Args)]
pub struct EtaArgs {
    #[command(flatten)]
    connection: Connection,
    /// The namespace (default: the kubeconfig context's).
    #[arg(short, long)]
    namespace: Option<String>,
    /// Every namespace's waiting jobs.
    #[arg(short = 'A', long)]
    all_namespaces: bool,
    /// Only this ClusterQueue's jobs (every namespace's).
    #[arg(long, conflicts_with = "all_namespaces")]
    cluster_queue: Option<String>,
    /// Output format: a table by default.
    #[arg(short, long, value_enum)]
    output: Option<Output>,
}

/// Arguments of `muster whatif`.
#[derive(Debug, clap::Args)]
pub struct WhatIfArgs {
    #[command(flatten)]
    connection: Connection,
    /// The namespace of the job `--submit` names, when its file names none (default: the
    /// kubeconfig context's); also whose jobs are listed.
    #[arg(short, long)]
    namespace: Option<String>,
    /// List every namespace's jobs whose start moves.
    #[arg(short = 'A', long)]
    all_namespaces: bool,
    /// COUNT nodes like the flavor's first node join, in topology block BLOCK of its widest
    /// level (a new block when left out): FLAVOR:COUNT[:BLOCK]. May repeat.
    #[arg(long, value_name = "FLAVOR:COUNT[:BLOCK]")]
    add_nodes: Vec<String>,
    /// The flavor's last COUNT nodes (of BLOCK) leave; what runs on them queues again.
    #[arg(long, value_name = "FLAVOR:COUNT[:BLOCK]")]
    remove_nodes: Vec<String>,
    /// The node takes no new pods. May repeat.
    #[arg(long, value_name = "NODE")]
    drain: Vec<String>,
    /// A ClusterQueue's nominal quota and/or borrowing limit of one flavor's resource (leave
    /// either empty to keep it): CLUSTERQUEUE:FLAVOR:RESOURCE:NOMINAL[:BORROWINGLIMIT].
    #[arg(long, value_name = "CQ:FLAVOR:RESOURCE:NOMINAL[:LIMIT]")]
    quota: Vec<String>,
    /// A GpuJob (YAML or JSON file) submitted now: when would it start?
    #[arg(long, value_name = "FILE")]
    submit: Option<PathBuf>,
    /// Output format: a summary by default.
    #[arg(short, long, value_enum)]
    output: Option<Output>,
}

/// Prints every waiting job's start range.
pub fn eta(args: &EtaArgs) -> anyhow::Result<ExitCode> {
    let runtime = super::live_runtime()?;
    runtime.block_on(async {
        let client = client(&args.connection).await?;
        let namespace = args
            .namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_owned());
        let mut answer: ForecastAnswer = get(&client, "/forecast").await?;
        let everywhere = args.all_namespaces || args.cluster_queue.is_some();
        answer.items.retain(|j| {
            (everywhere || j.namespace.as_deref() == Some(namespace.as_str()))
                && args
                    .cluster_queue
                    .as_ref()
                    .is_none_or(|cq| j.cluster_queue.as_ref() == Some(cq))
        });
        answer.hidden = hidden(&answer);
        match args.output {
            Some(format @ (Output::Json | Output::Yaml)) => print_document(&answer, format)?,
            wide => print!(
                "{}",
                render_eta(
                    &answer,
                    everywhere,
                    wide == Some(Output::Wide),
                    Timestamp::now(),
                    colour()
                )
            ),
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// How many of the jobs listed are shown without their names.
fn hidden(answer: &ForecastAnswer) -> u32 {
    let count = answer.items.iter().filter(|j| j.name.is_none()).count();
    u32::try_from(count).unwrap_or(u32::MAX)
}

/// A job's name as listed: with its namespace when `qualified`, hidden when it may not be
/// seen.
fn name(job: &JobForecast, qualified: bool) -> String {
    match (&job.namespace, &job.name) {
        (Some(ns), Some(name)) if qualified => format!("{ns}/{name}"),
        (_, Some(name)) => name.clone(),
        _ => muster_api::visibility::HIDDEN.to_owned(),
    }
}

/// The table `muster eta` prints, with what the ranges are under it.
pub fn render_eta(
    answer: &ForecastAnswer,
    qualified: bool,
    wide: bool,
    now: Timestamp,
    colour: bool,
) -> String {
    let mut header = vec![
        "NAME",
        "CLUSTERQUEUE",
        "GPUS",
        "STARTS (P10–P90)",
        "BETWEEN (UTC)",
        "LIKELY (P50)",
    ];
    if wide {
        header.extend(["STARTED IN RUNS", "RUNTIMES FROM"]);
    }
    let horizon = Some(answer.horizon_seconds);
    let mut table = Table::new(&header);
    for job in &answer.items {
        let r = &job.range;
        let between = match (&r.earliest, &r.latest) {
            (Some(e), Some(l)) if clock(e, now) == clock(l, now) => clock(e, now),
            (Some(e), Some(l)) => format!("{}–{}", clock(e, now), clock(l, now)),
            (Some(e), None) => format!("after {}", clock(e, now)),
            _ => "-".to_owned(),
        };
        let mut row = vec![
            name(job, qualified),
            job.cluster_queue.clone().unwrap_or_else(|| "-".to_owned()),
            gpus(job.gpus),
            range(Some(r), now, horizon),
            between,
            r.likely
                .as_ref()
                .map_or_else(|| "-".to_owned(), |t| clock(t, now)),
        ];
        if wide {
            row.push(format!("{}/{}", job.started, answer.samples));
            row.push(job.runtime_basis.clone());
        }
        table.row(row);
    }
    if table.is_empty() {
        return "No waiting jobs.\n".to_owned();
    }
    let mut text = table.render(colour);
    text.push_str(&footnote(answer, now));
    text
}

/// What the ranges are: how many runs, as of when, how held to past starts.
fn footnote(answer: &ForecastAnswer, now: Timestamp) -> String {
    let took = if answer.took_millis < 1_000 {
        format!("{} ms", answer.took_millis)
    } else {
        super::live::span(i64::try_from(answer.took_millis / 1_000).unwrap_or(i64::MAX))
    };
    let runtimes = if answer.history == 0 {
        "no job has finished yet, so announced runtimes are taken as exact".to_owned()
    } else {
        format!("runtimes drawn from {} finished runs", answer.history)
    };
    let mut text = format!(
        "Ranges: 10th–90th percentile start over {} forward runs of the cluster from {} UTC \
         ({} ago, made in {took}); {runtimes}",
        answer.samples,
        answer.as_of.0.strftime("%H:%M:%S"),
        super::live::span(now.as_second() - answer.as_of.0.as_second()),
    );
    match answer.margin {
        Some([before, after]) => {
            let _ = write!(
                text,
                "; widened by how far past ranges missed ({before:.2}× the wait before, {after:.2}× after)."
            );
        }
        None => text.push_str("; not yet held to past starts (too few have started)."),
    }
    text.push('\n');
    if answer.unknown_runtimes > 0 {
        let _ = writeln!(
            text,
            "{}: taken to run past the horizon, so what waits behind them may start sooner \
             than shown. Set spec.expectedRuntimeSeconds.",
            match answer.unknown_runtimes {
                1 => "1 job announces no runtime and has no history".to_owned(),
                n => format!("{n} jobs announce no runtime and have no history"),
            }
        );
    }
    if answer.hidden > 0 {
        let _ = writeln!(
            text,
            "{}",
            match answer.hidden {
                1 => "1 of these jobs is in a namespace where you may not list GpuJobs: its \
                      name is hidden."
                    .to_owned(),
                n => format!(
                    "{n} of these jobs are in namespaces where you may not list GpuJobs: their \
                     names are hidden."
                ),
            }
        );
    }
    text
}

/// The what-if query `args` asks for.
fn query(args: &WhatIfArgs, namespace: &str) -> anyhow::Result<String> {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for v in &args.add_nodes {
        query.append_pair(whatif::ADD_NODES, v);
    }
    for v in &args.remove_nodes {
        query.append_pair(whatif::REMOVE_NODES, v);
    }
    for v in &args.drain {
        query.append_pair(whatif::DRAIN, v);
    }
    for v in &args.quota {
        query.append_pair(whatif::QUOTA, v);
    }
    if let Some(path) = &args.submit {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut job: serde_json::Value = serde_yaml_ng::from_str(&text)
            .with_context(|| format!("reading {} as YAML", path.display()))?;
        let meta = job
            .as_object_mut()
            .context("--submit: the file holds no object")?
            .entry("metadata")
            .or_insert_with(|| serde_json::json!({}));
        if let Some(meta) = meta.as_object_mut() {
            meta.entry("namespace").or_insert_with(|| namespace.into());
        }
        query.append_pair(whatif::SUBMIT, &job.to_string());
    }
    let query = query.finish();
    if query.is_empty() {
        anyhow::bail!("name a change: --add-nodes, --remove-nodes, --drain, --quota or --submit");
    }
    Ok(query)
}

/// Prints when jobs would start after changes that are not made.
pub fn what_if(args: &WhatIfArgs) -> anyhow::Result<ExitCode> {
    let runtime = super::live_runtime()?;
    runtime.block_on(async {
        let client = client(&args.connection).await?;
        let namespace = args
            .namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_owned());
        let query = query(args, &namespace)?;
        let mut answer: ForecastAnswer = get(&client, &format!("/forecast?{query}")).await?;
        if !args.all_namespaces {
            answer
                .items
                .retain(|j| j.namespace.as_deref() == Some(namespace.as_str()));
            answer.hidden = hidden(&answer);
        }
        match args.output {
            Some(format @ (Output::Json | Output::Yaml)) => print_document(&answer, format)?,
            _ => print!(
                "{}",
                render_what_if(&answer, args.all_namespaces, Timestamp::now(), colour())
            ),
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// What `muster whatif` prints: the submitted job's range first, then every job whose likely
/// start moves.
pub fn render_what_if(
    answer: &ForecastAnswer,
    qualified: bool,
    now: Timestamp,
    colour: bool,
) -> String {
    let horizon = Some(answer.horizon_seconds);
    let mut text = format!("If {}:\n", answer.changes.join("; "));
    for job in answer.items.iter().filter(|j| j.before.is_none()) {
        let r = &job.range;
        let when = match (&r.earliest, &r.latest) {
            (Some(e), Some(l)) if clock(e, now) == clock(l, now) => format!(
                "would start at {} UTC ({})",
                clock(e, now),
                range(Some(r), now, horizon)
            ),
            (Some(e), Some(l)) => format!(
                "would start between {} and {} UTC ({}; likely {})",
                clock(e, now),
                clock(l, now),
                range(Some(r), now, horizon),
                r.likely
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), |t| clock(t, now))
            ),
            (Some(e), None) => format!(
                "would start after {} UTC, perhaps beyond the forecast's horizon",
                clock(e, now)
            ),
            _ => format!(
                "would not start within the forecast's horizon ({})",
                super::live::span(answer.horizon_seconds)
            ),
        };
        let _ = writeln!(
            text,
            "  {} ({} GPUs) {when}.",
            name(job, true),
            gpus(job.gpus)
        );
    }
    let mut table = Table::new(&["NAME", "GPUS", "NOW STARTS", "WOULD START", "LIKELY START"]);
    for job in &answer.items {
        let Some(before) = &job.before else {
            continue;
        };
        let likely =
            |r: &muster_api::gpujob::StartRange| r.likely.as_ref().map(|t| t.0.as_second());
        let (was, will) = (likely(before), likely(&job.range));
        if was == will {
            continue;
        }
        let moved = match (was, will) {
            (Some(a), Some(b)) if b < a => format!("{} sooner", super::live::span(a - b)),
            (Some(a), Some(b)) => format!("{} later", super::live::span(b - a)),
            (None, Some(_)) => "now within the horizon".to_owned(),
            _ => "now beyond the horizon".to_owned(),
        };
        table.row(vec![
            name(job, qualified),
            gpus(job.gpus),
            range(Some(before), now, horizon),
            range(Some(&job.range), now, horizon),
            moved,
        ]);
    }
    if table.is_empty() {
        text.push_str("No waiting job's likely start moves.\n");
    } else {
        text.push_str(&table.render(colour));
    }
    text.push_str(&footnote(answer, now));
    text
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use muster_api::gpujob::StartRange;

    use super::*;

    fn at(second: i64) -> Time {
        Time(Timestamp::from_second(second).unwrap_or_default())
    }

    fn job(name: Option<&str>, range: [Option<i64>; 3], before: Option<i64>) -> JobForecast {
        let r = |[e, l, t]: [Option<i64>; 3]| StartRange {
            earliest: e.map(at),
            likely: l.map(at),
            latest: t.map(at),
            as_of: at(0),
        };
        JobForecast {
            name: name.map(str::to_owned),
            namespace: name.map(|_| "team-a".to_owned()),
            cluster_queue: Some("research".to_owned()),
            gpus: 16.0,
            range: r(range),
            started: 32,
            buys_capacity: 0,
            runtime_basis: "announced".to_owned(),
            before: before.map(|b| r([Some(b), Some(b), Some(b)])),
        }
    }

    fn answer(items: Vec<JobForecast>, margin: Option<[f64; 2]>) -> ForecastAnswer {
        ForecastAnswer {
            api_version: muster_api::visibility::API_VERSION.to_owned(),
            kind: "Forecast".to_owned(),
            as_of: at(0),
            samples: 32,
            horizon_seconds: 7 * 86_400,
            took_millis: 1_500,
            margin,
            history: 40,
            unknown_runtimes: 2,
            changes: vec!["2 h100 nodes added in b7".to_owned()],
            hidden: u32::from(items.iter().any(|j| j.name.is_none())),
            items,
        }
    }

    #[test]
    fn eta_lists_each_range_and_says_what_the_ranges_are() {
        let a = answer(
            vec![
                job(Some("train-1"), [Some(600), Some(900), Some(3_000)], None),
                job(None, [None, None, None], None),
            ],
            Some([0.25, 0.5]),
        );
        let text = render_eta(&a, true, false, Timestamp::UNIX_EPOCH, false);
        assert!(text.contains("team-a/train-1"), "{text}");
        assert!(text.contains("in 10m–50m"), "{text}");
        assert!(text.contains("00:10–00:50"), "{text}");
        assert!(
            text.contains("(hidden)") && text.contains("beyond 7d"),
            "{text}"
        );
        assert!(text.contains("over 32 forward runs"), "{text}");
        assert!(text.contains("made in 1s"), "{text}");
        assert!(
            text.contains("runtimes drawn from 40 finished runs"),
            "{text}"
        );
        assert!(
            text.contains("0.25× the wait before, 0.50× after"),
            "{text}"
        );
        assert!(text.contains("2 jobs announce no runtime"), "{text}");
        assert!(
            text.contains("1 of these jobs is in a namespace where you may not list GpuJobs"),
            "{text}"
        );
    }

    #[test]
    fn a_what_if_names_the_submitted_job_s_range_and_the_jobs_that_move() {
        let a = answer(
            vec![
                job(Some("moved"), [Some(60), Some(60), Some(60)], Some(1_800)),
                job(Some("same"), [Some(900), Some(900), Some(900)], Some(900)),
                job(Some("big"), [Some(600), Some(1_200), Some(2_400)], None),
            ],
            None,
        );
        let text = render_what_if(&a, true, Timestamp::UNIX_EPOCH, false);
        assert!(text.starts_with("If 2 h100 nodes added in b7:"), "{text}");
        assert!(
            text.contains("team-a/big (16 GPUs) would start between 00:10 and 00:40 UTC (in 10m–40m; likely 00:20)"),
            "{text}"
        );
        assert!(
            text.contains("team-a/moved") && text.contains("29m sooner"),
            "{text}"
        );
        assert!(!text.contains("team-a/same"), "{text}");
        assert!(text.contains("not yet held to past starts"), "{text}");
    }
}
