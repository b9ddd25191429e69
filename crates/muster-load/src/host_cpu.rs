//! What the machine's CPUs did over a run, from the first line of `/proc/stat`: busy, idle,
//! and stolen (time the hypervisor gave another guest while this one had work). Two runs
//! compared "on the same machine in the same hour" are compared fairly only if neither was
//! robbed: stolen time says so, where a process's own CPU time cannot.

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

/// The machine's CPU time since boot, in clock ticks, summed over its CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostTicks {
    /// user + nice + system + irq + softirq (guest time is inside user).
    pub busy: u64,
    /// idle + iowait.
    pub idle: u64,
    /// steal.
    pub stolen: u64,
}

/// The machine's CPU seconds over a span, summed over its CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostCpu {
    /// Seconds the CPUs ran anything.
    pub busy_seconds: f64,
    /// Seconds they had nothing to run.
    pub idle_seconds: f64,
    /// Seconds the hypervisor ran another guest while this one had work.
    pub stolen_seconds: f64,
}

impl HostCpu {
    /// Stolen time as a share of all the CPUs' time over the span (0 when there was none).
    #[must_use]
    pub fn stolen_share(&self) -> f64 {
        let all = self.busy_seconds + self.idle_seconds + self.stolen_seconds;
        if all > 0.0 {
            self.stolen_seconds / all
        } else {
            0.0
        }
    }
}

/// Reads the machine's CPU time so far.
pub fn read() -> anyhow::Result<HostTicks> {
    let stat = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    parse(&stat)
}

/// The span from `before` to `after`, in seconds.
pub fn since(before: HostTicks, after: HostTicks) -> anyhow::Result<HostCpu> {
    #[expect(
        clippy::cast_precision_loss,
        reason = "clock ticks of one run fit in 52 bits"
    )]
    let ticks = crate::process_stats::clock_ticks_per_second()? as f64;
    #[expect(
        clippy::cast_precision_loss,
        reason = "clock ticks of one run fit in 52 bits"
    )]
    let seconds = |a: u64, b: u64| b.saturating_sub(a) as f64 / ticks;
    Ok(HostCpu {
        busy_seconds: seconds(before.busy, after.busy),
        idle_seconds: seconds(before.idle, after.idle),
        stolen_seconds: seconds(before.stolen, after.stolen),
    })
}

/// The machine's CPU time between two reads of it; none (and said why) if either failed: a
/// run's report goes on without it.
pub fn between(
    before: anyhow::Result<HostTicks>,
    after: anyhow::Result<HostTicks>,
) -> Option<HostCpu> {
    match before.and_then(|b| since(b, after?)) {
        Ok(cpu) => Some(cpu),
        Err(e) => {
            eprintln!("no host CPU figures: {e:#}");
            None
        }
    }
}

/// The `cpu` line of a `/proc/stat`: `cpu user nice system idle iowait irq softirq steal ...`
/// (kernels before 2.6.11 have no steal field: none was stolen then).
fn parse(stat: &str) -> anyhow::Result<HostTicks> {
    let line = stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some("cpu"))
        .context("no cpu line in /proc/stat")?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .context("a CPU time in /proc/stat's cpu line is not a number")?;
    let field = |i: usize| fields.get(i).copied().unwrap_or(0);
    anyhow::ensure!(
        fields.len() >= 4,
        "/proc/stat's cpu line has {} fields, not at least 4",
        fields.len()
    );
    Ok(HostTicks {
        busy: field(0) + field(1) + field(2) + field(5) + field(6),
        idle: field(3) + field(4),
        stolen: field(7),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summed_cpu_line_is_read_and_the_per_cpu_lines_are_not() {
        let stat = "cpu  100 5 20 1000 7 3 2 40 0 0\ncpu0 50 2 10 500 3 1 1 20 0 0\nintr 1 2\n";
        let ticks = parse(stat).ok();
        assert_eq!(
            ticks,
            Some(HostTicks {
                busy: 130,
                idle: 1007,
                stolen: 40
            })
        );
    }

    #[test]
    fn an_old_kernel_without_steal_counts_none_stolen_and_garbage_is_an_error() {
        let ticks = parse("cpu 1 2 3 4 5 6 7\n").ok();
        assert_eq!(ticks.map(|t| t.stolen), Some(0));
        assert!(parse("cpu 1 x 3 4\n").is_err());
        assert!(parse("intr 1 2\n").is_err());
        assert!(parse("cpu 1 2\n").is_err());
    }

    #[test]
    fn the_stolen_share_is_of_all_the_cpus_time() {
        let cpu = HostCpu {
            busy_seconds: 60.0,
            idle_seconds: 30.0,
            stolen_seconds: 10.0,
        };
        assert!((cpu.stolen_share() - 0.1).abs() < 1e-9);
        assert!(HostCpu::default().stolen_share().abs() < f64::EPSILON);
    }
}
