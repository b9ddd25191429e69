//! What a process cost, read from `/proc`: CPU seconds (user + system) and peak resident memory.

use std::path::Path;

use anyhow::Context as _;

/// CPU time and peak memory of one process so far.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcessStats {
    /// User plus system CPU seconds.
    pub cpu_seconds: f64,
    /// Peak resident set size (`VmHWM`), bytes.
    pub peak_rss_bytes: u64,
}

/// Reads `/proc/<pid>/stat` and `/proc/<pid>/status`.
pub fn read(pid: u32) -> anyhow::Result<ProcessStats> {
    let proc = Path::new("/proc").join(pid.to_string());
    let stat = std::fs::read_to_string(proc.join("stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    let status = std::fs::read_to_string(proc.join("status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    #[expect(
        clippy::cast_precision_loss,
        reason = "clock ticks of one run fit in 52 bits"
    )]
    Ok(ProcessStats {
        cpu_seconds: cpu_ticks(&stat)? as f64 / clock_ticks_per_second()? as f64,
        peak_rss_bytes: peak_rss_kib(&status)? * 1024,
    })
}

/// utime + stime (fields 14 and 15) of a `/proc/<pid>/stat` line. The command name (field 2)
/// is in parentheses and may hold spaces, so fields are counted after its closing one.
fn cpu_ticks(stat: &str) -> anyhow::Result<u64> {
    let after = stat
        .rfind(')')
        .map(|i| &stat[i + 1..])
        .context("no command name in /proc/<pid>/stat")?;
    // After ")" come field 3 (state) onwards: utime is field 14, the 12th here.
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |i: usize| -> anyhow::Result<u64> {
        fields
            .get(i)
            .context("/proc/<pid>/stat is too short")?
            .parse::<u64>()
            .context("a CPU time in /proc/<pid>/stat is not a number")
    };
    Ok(field(11)? + field(12)?)
}

/// `VmHWM` of a `/proc/<pid>/status`, KiB.
fn peak_rss_kib(status: &str) -> anyhow::Result<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .context("no VmHWM in /proc/<pid>/status")?
        .parse()
        .context("VmHWM is not a number")
}

/// The kernel's clock ticks per second (`getconf CLK_TCK`), the unit of `/proc/<pid>/stat`.
pub(crate) fn clock_ticks_per_second() -> anyhow::Result<u64> {
    let out = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .context("running getconf CLK_TCK")?;
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .context("getconf CLK_TCK did not print a number")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_is_read_after_a_command_name_with_spaces() {
        let stat =
            "4242 (muster (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 8 0 123 0 0";
        assert_eq!(cpu_ticks(stat).ok(), Some(325));
        assert!(cpu_ticks("4242 (muster) S 1").is_err());
    }

    #[test]
    fn peak_memory_is_vm_hwm() {
        let status = "Name:\tmuster\nVmPeak:\t  900 kB\nVmHWM:\t   5120 kB\nVmRSS:\t 4000 kB\n";
        assert_eq!(peak_rss_kib(status).ok(), Some(5120));
        assert!(peak_rss_kib("Name:\tx\n").is_err());
    }

    #[test]
    fn this_process_has_a_cost() {
        let stats = read(std::process::id());
        assert!(
            stats.as_ref().is_ok_and(|s| s.peak_rss_bytes > 0),
            "{stats:?}"
        );
    }
}
