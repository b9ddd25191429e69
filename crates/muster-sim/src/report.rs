//! What a run produces: `jobs.csv`, `summary.json`, a comparison of policies, and a one-screen
//! text summary. Everything but the wall time and events per second is deterministic.

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::engine::Run;

/// Size classes by GPUs, for per-class statistics.
pub(crate) const SIZE_CLASSES: &[(&str, u64, u64)] = &[
    ("1", 1, 1),
    ("2-8", 2, 8),
    ("9-32", 9, 32),
    ("33+", 33, u64::MAX),
];

/// `jobs.csv`: one line per job.
pub fn jobs_csv(run: &Run) -> String {
    let mut out = String::from(
        "id,queue,gpus,submit,admit,start,end,wait,domain,preemptions,restarts,lost_gpu_seconds\n",
    );
    let opt = |v: Option<i64>| v.map_or_else(String::new, |v| v.to_string());
    for r in &run.records {
        let wait = r.start.map(|s| s - r.submit);
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{}",
            r.id,
            r.queue,
            r.gpus,
            r.submit,
            opt(r.admit),
            opt(r.start),
            opt(r.end),
            opt(wait),
            r.domain,
            r.preemptions,
            r.restarts,
            r.lost_gpu_seconds
        );
    }
    out
}

/// Mean and nearest-rank percentiles of `values` (seconds).
fn stats(values: &mut [i64]) -> Value {
    if values.is_empty() {
        return json!({"count": 0});
    }
    values.sort_unstable();
    let n = values.len();
    let pct = |p: usize| values[(n * p).div_ceil(100).clamp(1, n) - 1];
    let sum: i128 = values.iter().map(|v| i128::from(*v)).sum();
    #[expect(clippy::cast_precision_loss, reason = "a mean for people to read")]
    let mean = (sum as f64 / n as f64 * 10.0).round() / 10.0;
    json!({"count": n, "mean": mean, "p50": pct(50), "p95": pct(95), "p99": pct(99)})
}

/// GPU-seconds of capacity bought from the autoscaler.
fn bought(run: &Run) -> u128 {
    run.provisioning.as_ref().map_or(0, |p| {
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "non-negative GPU-seconds, rounded"
        )]
        let seconds = (p.gpu_hours_bought * 3600.0).round() as u128;
        seconds
    })
}

/// From the allocation timeline, GPU-seconds: held by admitted jobs, free while a queue head
/// waits, and free while one waits on fragmentation. Summed in milli-GPU-seconds (parts of a
/// GPU count exactly), returned in GPU-seconds.
fn timeline_gpu_seconds(run: &Run) -> (u128, u128, u128) {
    let (mut held_total, mut head_blocked, mut fragmented): (u128, u128, u128) = (0, 0, 0);
    let fleet_milli = u128::from(run.total_gpus) * 1000;
    for pair in run.timeline.windows(2) {
        let dt = u128::try_from(pair[1].time - pair[0].time).unwrap_or(0);
        let held = u128::from(pair[0].allocated_milli);
        held_total += held * dt;
        let free = fleet_milli.saturating_sub(held) * dt;
        if pair[0].head_waiting {
            head_blocked += free;
        }
        if pair[0].fragmented {
            fragmented += free;
        }
    }
    (held_total / 1000, head_blocked / 1000, fragmented / 1000)
}

/// The autoscaler's part of `summary.json`.
fn provisioning(p: &crate::autoscaler::ProvisioningStats) -> Value {
    json!({
        "requests": p.requests,
        "provisioned": p.provisioned,
        "stockouts": p.stockouts,
        "bookingsExpired": p.expired,
        "capacityRevoked": p.revoked,
        "jobsGaveUp": p.gave_up,
        "jobsFailedOnRevoke": p.failed_on_revoke,
        "gpuHoursBought": (p.gpu_hours_bought * 10.0).round() / 10.0,
        "meanLatencySeconds": p.mean_latency_seconds.round(),
    })
}

/// `summary.json` of a run (`with_timing`: include wall time and events per second, which
/// differ from run to run).
pub fn summary(scenario: &str, run: &Run, with_timing: bool) -> Value {
    let finished: Vec<_> = run.records.iter().filter(|r| r.end.is_some()).collect();
    let first_submit = run.records.iter().map(|r| r.submit).min().unwrap_or(0);
    let last_end = finished
        .iter()
        .filter_map(|r| r.end)
        .max()
        .unwrap_or(first_submit);
    let makespan = last_end - first_submit;
    let mut waits: Vec<i64> = finished
        .iter()
        .filter_map(|r| Some(r.start? - r.submit))
        .collect();
    let mut jcts: Vec<i64> = finished
        .iter()
        .filter_map(|r| Some(r.end? - r.submit))
        .collect();
    let mut by_size = serde_json::Map::new();
    let mut jct_by_size = serde_json::Map::new();
    for (name, lo, hi) in SIZE_CLASSES {
        let class: Vec<_> = finished
            .iter()
            .filter(|r| (*lo..=*hi).contains(&r.gpus))
            .collect();
        let mut w: Vec<i64> = class
            .iter()
            .filter_map(|r| Some(r.start? - r.submit))
            .collect();
        let mut c: Vec<i64> = class
            .iter()
            .filter_map(|r| Some(r.end? - r.submit))
            .collect();
        by_size.insert((*name).to_owned(), stats(&mut w));
        jct_by_size.insert((*name).to_owned(), stats(&mut c));
    }
    let wait_by_priority = wait_by_priority(&finished);
    let (gpu_seconds, head_blocked, fragmented) = timeline_gpu_seconds(run);
    // Capacity: the fleet over the makespan, plus whatever was bought (jobs on bought
    // capacity count as allocated, so it counts as capacity too).
    let capacity =
        u128::from(run.total_gpus) * u128::try_from(makespan.max(0)).unwrap_or(0) + bought(run);
    #[expect(clippy::cast_precision_loss, reason = "a fraction for people to read")]
    let allocation = if capacity == 0 {
        0.0
    } else {
        (gpu_seconds as f64 / capacity as f64 * 1000.0).round() / 1000.0
    };
    let per_queue = per_queue(run);
    let waste = waste(run, &finished, capacity);
    let mut summary = json!({
        "scenario": scenario,
        "policy": run.policy,
        "jobs": run.records.len(),
        "finished": finished.len(),
        "neverStarted": run.records.iter().filter(|r| r.admit.is_none()).count(),
        "makespanSeconds": makespan,
        "waitSeconds": stats(&mut waits),
        "jctSeconds": stats(&mut jcts),
        "waitSecondsBySize": by_size,
        "waitSecondsByPriority": wait_by_priority,
        "jctSecondsBySize": jct_by_size,
        "gpus": run.total_gpus,
        "gpuSecondsAllocated": u64::try_from(gpu_seconds).unwrap_or(u64::MAX),
        "gpuAllocationMean": allocation,
        "headBlockedGpuSeconds": u64::try_from(head_blocked).unwrap_or(u64::MAX),
        "fragmentedGpuSeconds": u64::try_from(fragmented).unwrap_or(u64::MAX),
        "queues": per_queue,
        "preemptions": run.records.iter().map(|r| u64::from(r.preemptions)).sum::<u64>(),
        "preemptionsPerJob": {"max": waste.max_preemptions, "p99": waste.p99_preemptions},
        "gpuSecondsLost": waste.lost,
        "goodput": waste.goodput,
        "events": run.events,
        "cycles": run.cycles,
    });
    if let (Some(p), Value::Object(m)) = (&run.provisioning, &mut summary) {
        m.insert("provisioning".into(), provisioning(p));
    }
    if !run.lending.is_empty()
        && let Value::Object(m) = &mut summary
    {
        m.insert("lending".into(), Value::Object(lending(run)));
    }
    if with_timing && let Value::Object(m) = &mut summary {
        let wall = run.wall.as_secs_f64();
        m.insert(
            "wallSeconds".into(),
            json!((wall * 1000.0).round() / 1000.0),
        );
        #[expect(clippy::cast_precision_loss, reason = "a rate for people to read")]
        let rate = if wall > 0.0 {
            (run.events as f64 / wall).round()
        } else {
            0.0
        };
        m.insert("eventsPerSecond".into(), json!(rate));
    }
    summary
}

/// [`summary`]'s `summary` less the run's own timing (wall time, events per second): what
/// [`summary`] gives without `with_timing`, for a summary already made with it.
pub fn without_timing(summary: &Value) -> Value {
    let mut summary = summary.clone();
    if let Value::Object(m) = &mut summary {
        m.remove("wallSeconds");
        m.remove("eventsPerSecond");
    }
    summary
}

/// The wait of finished jobs per priority: what preemption rules trade is the high-priority
/// jobs' wait against the low-priority jobs' lost work.
fn wait_by_priority(finished: &[&crate::engine::JobRecord]) -> serde_json::Map<String, Value> {
    let mut by_priority: std::collections::BTreeMap<i32, Vec<i64>> =
        std::collections::BTreeMap::new();
    for r in finished {
        if let Some(start) = r.start {
            by_priority
                .entry(r.priority)
                .or_default()
                .push(start - r.submit);
        }
    }
    by_priority
        .into_iter()
        .map(|(p, mut w)| (p.to_string(), stats(&mut w)))
        .collect()
}

/// What preemptions and failures cost a run.
struct Waste {
    max_preemptions: u32,
    p99_preemptions: u32,
    /// GPU-seconds of runs that ended unfinished, less what checkpoints kept.
    lost: u64,
    /// The work that counted ÷ capacity.
    goodput: f64,
}

fn waste(run: &Run, finished: &[&crate::engine::JobRecord], capacity: u128) -> Waste {
    // Work that counted: every finished job's GPUs × its duration (its last run, and what
    // earlier runs kept at checkpoints).
    let useful: u128 = finished
        .iter()
        .map(|r| u128::from(r.gpu_milli) * u128::try_from(r.work.max(0)).unwrap_or(0))
        .sum::<u128>()
        / 1000;
    #[expect(clippy::cast_precision_loss, reason = "a fraction for people to read")]
    let goodput = if capacity == 0 {
        0.0
    } else {
        (useful as f64 / capacity as f64 * 1000.0).round() / 1000.0
    };
    let mut per_job: Vec<u32> = run.records.iter().map(|r| r.preemptions).collect();
    per_job.sort_unstable();
    let p99 = per_job
        .get((per_job.len() * 99).div_ceil(100).saturating_sub(1))
        .copied()
        .unwrap_or(0);
    Waste {
        max_preemptions: per_job.last().copied().unwrap_or(0),
        p99_preemptions: p99,
        lost: run.records.iter().map(|r| r.lost_gpu_seconds).sum(),
        goodput,
    }
}

/// Per LocalQueue: jobs, GPU-seconds of their finished runs, the share of all of them, and
/// the wait of its finished jobs.
fn per_queue(run: &Run) -> serde_json::Map<String, Value> {
    let mut queues: std::collections::BTreeMap<&str, (u64, u128, Vec<i64>)> =
        std::collections::BTreeMap::new();
    for r in &run.records {
        let entry = queues.entry(r.queue.as_str()).or_default();
        entry.0 += 1;
        if let (Some(start), Some(end)) = (r.start, r.end) {
            entry.1 += u128::from(r.gpu_milli) * u128::try_from(end - start).unwrap_or(0) / 1000;
            entry.2.push(start - r.submit);
        }
    }
    let used: u128 = queues.values().map(|q| q.1).sum();
    queues
        .into_iter()
        .map(|(name, (jobs, gpu_seconds, mut waits))| {
            #[expect(clippy::cast_precision_loss, reason = "a fraction for people to read")]
            let share = if used == 0 {
                0.0
            } else {
                (gpu_seconds as f64 / used as f64 * 1000.0).round() / 1000.0
            };
            (
                name.to_owned(),
                json!({
                    "jobs": jobs,
                    "gpuSeconds": u64::try_from(gpu_seconds).unwrap_or(u64::MAX),
                    "share": share,
                    "waitSeconds": stats(&mut waits),
                }),
            )
        })
        .collect()
}

/// Per ClusterQueue in a cohort and per cohort: its parent, GPU-hours of its quota others
/// used and GPU-hours it used beyond its own quota.
fn lending(run: &Run) -> serde_json::Map<String, Value> {
    #[expect(clippy::cast_precision_loss, reason = "hours for people to read")]
    let hours = |milli_seconds: u128| (milli_seconds as f64 / 3_600_000.0 * 10.0).round() / 10.0;
    run.lending
        .iter()
        .map(|(name, l)| {
            (
                name.clone(),
                json!({
                    "kind": if l.cohort { "Cohort" } else { "ClusterQueue" },
                    "parent": l.parent,
                    "lentGpuHours": hours(l.lent),
                    "borrowedGpuHours": hours(l.borrowed),
                }),
            )
        })
        .collect()
}

/// The lending entries whose parent is `parent`, in name order, each followed by its
/// children, indented by depth.
fn lending_tree(
    out: &mut String,
    lending: &serde_json::Map<String, Value>,
    parent: Option<&str>,
    indent: usize,
) {
    for (name, l) in lending {
        let its_parent = l["parent"].as_str();
        // A root: no parent, or one the run does not know (a tree cut at a missing cohort).
        let is_child = match parent {
            Some(p) => its_parent == Some(p),
            None => its_parent.is_none_or(|p| !lending.contains_key(p)),
        };
        if !is_child {
            continue;
        }
        let kind = if l["kind"] == "Cohort" { "cohort " } else { "" };
        let _ = writeln!(
            out,
            "{:indent$}{kind}{name}: {} / {}",
            "", l["lentGpuHours"], l["borrowedGpuHours"]
        );
        if l["kind"] == "Cohort" && indent < 2 + 2 * 16 {
            lending_tree(out, lending, Some(name), indent + 2);
        }
    }
}

/// A Markdown table comparing policies side by side.
pub fn comparison_markdown(summaries: &[Value]) -> String {
    let mut out = String::from(
        "| policy | finished | never started | makespan s | wait mean s | wait p95 s | wait p99 s | GPU allocation | preemptions |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for s in summaries {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            s["policy"].as_str().unwrap_or_default(),
            s["finished"],
            s["neverStarted"],
            s["makespanSeconds"],
            s["waitSeconds"]["mean"],
            s["waitSeconds"]["p95"],
            s["waitSeconds"]["p99"],
            s["gpuAllocationMean"],
            s["preemptions"]
        );
    }
    out
}

/// The one-screen text summary of a run.
pub fn text(summary: &Value) -> String {
    let w = &summary["waitSeconds"];
    let j = &summary["jctSeconds"];
    let mut out = format!(
        "{} — policy {}\n  jobs {} (finished {}, never started {}), makespan {} s\n  wait  mean {} s, p50 {} s, p95 {} s, p99 {} s\n  JCT   mean {} s, p50 {} s, p95 {} s, p99 {} s\n  GPUs {}: mean allocation {}, goodput {}\n  preemptions {} (per job: max {}, p99 {}), GPU-seconds lost {}\n",
        summary["scenario"].as_str().unwrap_or_default(),
        summary["policy"].as_str().unwrap_or_default(),
        summary["jobs"],
        summary["finished"],
        summary["neverStarted"],
        summary["makespanSeconds"],
        w["mean"],
        w["p50"],
        w["p95"],
        w["p99"],
        j["mean"],
        j["p50"],
        j["p95"],
        j["p99"],
        summary["gpus"],
        summary["gpuAllocationMean"],
        summary["goodput"],
        summary["preemptions"],
        summary["preemptionsPerJob"]["max"],
        summary["preemptionsPerJob"]["p99"],
        summary["gpuSecondsLost"],
    );
    if let Some(p) = summary.get("provisioning") {
        let _ = writeln!(
            out,
            "  bought {} GPU-hours: {} of {} requests provisioned (mean latency {} s), {} stockouts, {} bookings expired, {} revoked, {} jobs gave up, {} failed on revocation",
            p["gpuHoursBought"],
            p["provisioned"],
            p["requests"],
            p["meanLatencySeconds"],
            p["stockouts"],
            p["bookingsExpired"],
            p["capacityRevoked"],
            p["jobsGaveUp"],
            p["jobsFailedOnRevoke"],
        );
    }
    if let Some(Value::Object(lending)) = summary.get("lending") {
        out.push_str("  lent / borrowed GPU-hours, by cohort tree:\n");
        lending_tree(&mut out, lending, None, 2);
    }
    if let (Some(wall), Some(rate)) = (summary.get("wallSeconds"), summary.get("eventsPerSecond")) {
        let _ = writeln!(out, "  ran in {wall} s ({rate} events/s)");
    }
    out
}
