//! Kueue's own scheduler benchmark and Muster's baseline run, one after the other on the same
//! machine, in one table: the only comparison with Kueue that means anything on a noisy
//! machine is one measured that way.
//!
//! Kueue's side is its `test/performance/scheduler` runner and `minimalkueue`, built and run by
//! the `kueue-bench` kit (`build.sh`, then `run.sh OUT_DIR`, which writes `summary.json`).
//! Muster's side is [`crate::kueue_baseline`]. The two differ in one way the table says: Kueue's
//! workloads make no pods (its runner marks each one finished after its runtime), Muster's jobs
//! each run a real pod that kube-scheduler binds and the fake kubelet runs.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;
use serde::Deserialize;

use crate::kueue_baseline::Summary;

/// What Kueue's benchmark kit writes in `summary.json`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KueueSummary {
    /// The Kueue commit built.
    pub kueue_commit: String,
    /// Workloads admitted.
    pub workloads: u64,
    /// From the first to the last workload event of the ClusterQueues, seconds.
    pub wall_seconds: f64,
    /// Per class, seconds from creation to admission.
    pub time_to_admission_seconds: std::collections::BTreeMap<String, Spread>,
    /// Mean usage over nominal quota.
    pub cluster_queue_usage: f64,
    /// minimalkueue's CPU seconds.
    pub kueue_cpu_seconds: f64,
    /// minimalkueue's peak resident memory, bytes.
    pub kueue_peak_rss_bytes: u64,
    /// Every request the API server served during the run.
    pub api_requests: KueueRequests,
    /// What the machine's CPUs did over the kit's whole run (control plane start and stop
    /// included), measured around it here: the kit does not write it.
    #[serde(default)]
    pub host_cpu: Option<crate::host_cpu::HostCpu>,
}

/// A class's times to admission.
#[derive(Clone, Debug, Deserialize)]
pub struct Spread {
    /// Mean, seconds.
    pub mean: f64,
}

/// The API server's requests during Kueue's run.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KueueRequests {
    /// In all, every client.
    pub total: u64,
    /// Per workload.
    pub per_workload: f64,
}

/// Runs Kueue's benchmark with the kit at `kit` (its `run.sh`), writing into `out`, and reads
/// its summary.
pub fn run_kueue(kit: &Path, out: &Path) -> anyhow::Result<KueueSummary> {
    let script = kit.join("run.sh");
    anyhow::ensure!(
        script.is_file(),
        "{} is not there: build Kueue's benchmark first (kueue-bench/build.sh)",
        script.display()
    );
    let host_before = crate::host_cpu::read();
    let status = std::process::Command::new(&script)
        .arg(out)
        .stdout(std::process::Stdio::null())
        .status()
        .with_context(|| format!("running {}", script.display()))?;
    let host = crate::host_cpu::between(host_before, crate::host_cpu::read());
    let summary = out.join("summary.json");
    let text = std::fs::read_to_string(&summary).with_context(|| {
        format!(
            "{} exited {status}; no {}",
            script.display(),
            summary.display()
        )
    })?;
    anyhow::ensure!(status.success(), "{} exited {status}", script.display());
    let mut kueue: KueueSummary =
        serde_json::from_str(&text).with_context(|| format!("reading {}", summary.display()))?;
    kueue.host_cpu = host;
    Ok(kueue)
}

/// A run's stolen CPU time and its share of the machine's, for the table.
fn stolen(host: Option<&crate::host_cpu::HostCpu>) -> String {
    host.map_or_else(
        || "—".to_owned(),
        |cpu| {
            format!(
                "{:.1} s ({:.1} %)",
                cpu.stolen_seconds,
                cpu.stolen_share() * 100.0
            )
        },
    )
}

fn ratio(muster: f64, kueue: f64) -> String {
    if kueue > 0.0 {
        format!("{:.2}", muster / kueue)
    } else {
        "—".to_owned()
    }
}

/// The side-by-side table, in Markdown: one row per run and one of ratios (Muster ÷ Kueue;
/// below 1 is Muster ahead).
pub fn table(kueue: &KueueSummary, muster: &Summary) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    let classes = ["large", "medium", "small"];
    let kueue_tta: Vec<f64> = classes
        .iter()
        .map(|c| {
            kueue
                .time_to_admission_seconds
                .get(*c)
                .map_or(0.0, |s| s.mean)
        })
        .collect();
    let muster_tta: Vec<f64> = classes
        .iter()
        .map(|c| {
            muster
                .time_to_admission_seconds
                .get(*c)
                .copied()
                .unwrap_or(0.0)
        })
        .collect();
    let slash = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.1}"))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    #[expect(clippy::cast_precision_loss, reason = "figures for a report")]
    let (kueue_rss, muster_rss) = (
        kueue.kueue_peak_rss_bytes as f64 / MIB,
        muster.controller_peak_rss_bytes as f64 / MIB,
    );
    let muster_all = muster.api_server_requests_per_job.unwrap_or(0.0);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| run | jobs | wall | time to admission large / medium / small | usage | controller CPU | controller peak RSS | API requests per job, all clients | controller's own | CPU stolen from the machine |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|");
    let _ = writeln!(
        out,
        "| Kueue {} (minimalkueue, no pods) | {} | {:.1} s | {} s | {:.0} % | {:.1} CPU-s | {:.0} MiB | {:.2} | — | {} |",
        kueue.kueue_commit.get(..7).unwrap_or(&kueue.kueue_commit),
        kueue.workloads,
        kueue.wall_seconds,
        slash(&kueue_tta),
        kueue.cluster_queue_usage * 100.0,
        kueue.kueue_cpu_seconds,
        kueue_rss,
        kueue.api_requests.per_workload,
        stolen(kueue.host_cpu.as_ref()),
    );
    let _ = writeln!(
        out,
        "| Muster ({}, every job a pod; {} of {} finished) | {} | {:.1} s | {} s | {:.0} % | {:.1} CPU-s | {:.0} MiB | {:.2} | {:.2} | {} |",
        muster.workload.name(),
        muster.finished,
        muster.jobs,
        muster.jobs,
        muster.wall_seconds,
        slash(&muster_tta),
        muster.cluster_queue_usage * 100.0,
        muster.controller_cpu_seconds,
        muster_rss,
        muster_all,
        muster.api_requests_per_job,
        stolen(muster.host_cpu.as_ref()),
    );
    let tta_ratios: Vec<String> = muster_tta
        .iter()
        .zip(&kueue_tta)
        .map(|(m, k)| ratio(*m, *k))
        .collect();
    let _ = writeln!(
        out,
        "| Muster ÷ Kueue | | {} | {} | | {} | {} | {} | | |",
        ratio(muster.wall_seconds, kueue.wall_seconds),
        tta_ratios.join(" / "),
        ratio(muster.controller_cpu_seconds, kueue.kueue_cpu_seconds),
        ratio(muster_rss, kueue_rss),
        ratio(muster_all, kueue.api_requests.per_workload),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_puts_both_runs_and_their_ratios_side_by_side() {
        let kueue: KueueSummary = serde_json::from_value(serde_json::json!({
            "kueueCommit": "ff69552e79ad", "workloads": 15000, "wallSeconds": 400.0,
            "timeToAdmissionSeconds": {"large": {"mean": 30.0, "p50": 1.0, "p90": 2.0},
                "medium": {"mean": 100.0, "p50": 1.0, "p90": 2.0},
                "small": {"mean": 200.0, "p50": 1.0, "p90": 2.0}},
            "clusterQueueUsage": 0.54, "kueueCpuSeconds": 100.0,
            "kueuePeakRssBytes": 629_145_600u64,
            "apiRequests": {"total": 90000, "perWorkload": 6.0}
        }))
        .unwrap_or_else(|e| unreachable!("a valid summary: {e}"));
        let muster = Summary {
            jobs: 15000,
            finished: 15000,
            wall_seconds: 300.0,
            time_to_admission_seconds: [("large", 15.0), ("medium", 100.0), ("small", 300.0)]
                .into_iter()
                .map(|(c, v)| (c.to_owned(), v))
                .collect(),
            cluster_queue_usage: 0.9,
            controller_cpu_seconds: 50.0,
            controller_peak_rss_bytes: 314_572_800,
            api_requests_per_job: 4.0,
            api_server_requests_per_job: Some(9.0),
            host_cpu: Some(crate::host_cpu::HostCpu {
                busy_seconds: 500.0,
                idle_seconds: 90.0,
                stolen_seconds: 10.0,
            }),
            ..Summary::default()
        };
        let table = table(&kueue, &muster);
        let rows: Vec<&str> = table.lines().collect();
        assert_eq!(rows.len(), 5, "{table}");
        assert!(
            rows[2].contains("ff69552 ") && rows[2].contains("400.0 s"),
            "{table}"
        );
        assert!(
            rows[2].contains("600 MiB") && rows[2].contains("| 6.00 |"),
            "{table}"
        );
        assert!(
            rows[3].contains("300.0 s") && rows[3].contains("| 9.00 | 4.00 | 10.0 s (1.7 %) |"),
            "{table}"
        );
        assert!(
            rows[2].ends_with("| — |"),
            "no stolen time where none was measured: {table}"
        );
        // Wall, times to admission, CPU, memory, requests of all clients: Muster ÷ Kueue.
        let ratios = rows[4];
        for part in [
            "| 0.75 |",
            "| 0.50 / 1.00 / 1.50 |",
            "| 0.50 | 0.50 | 1.50 |",
        ] {
            assert!(ratios.contains(part), "{part} in {ratios}");
        }
    }
}
