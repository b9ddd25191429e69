//! When some replica led, read back after a run: a replica leads from its log line
//! `leading: scheduling` (its first pass under the Lease) until `lost the lease: no more
//! writes` or until its process ended (the run killed it, or it was seen to have exited). The checker counts only such time against how long a
//! gang may stay half released: only a leader can finish a release.

use std::path::Path;

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

/// The message a replica logs once it leads and schedules.
const LEADS: &str = "leading: scheduling";
/// The message a replica logs once it no longer leads.
const LOST: &str = "lost the lease: no more writes";

/// What ends or starts a replica's leadership.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Turn {
    Leads,
    Stops,
}

/// The spells (seconds after `start`) when some replica led, from the logs
/// `replica-<i>.log` in `dir` of `replicas` replicas and the ends of their processes
/// (replica, when); a spell still open at `end` (seconds after `start`) ends there. Lines that are
/// not a replica's JSON log lines are skipped.
pub fn spells(
    dir: &Path,
    replicas: usize,
    stops: &[(usize, Timestamp)],
    start: Timestamp,
    end: f64,
) -> Vec<(f64, f64)> {
    let seconds = |t: Timestamp| t.duration_since(start).as_secs_f64();
    let mut spells = Vec::new();
    for i in 0..replicas {
        let log = std::fs::read_to_string(dir.join(format!("replica-{i}.log"))).unwrap_or_default();
        let mut turns: Vec<(f64, Turn)> = log
            .lines()
            .filter_map(turn)
            .map(|(t, turn)| (seconds(t), turn))
            .collect();
        turns.extend(
            stops
                .iter()
                .filter(|(replica, _)| *replica == i)
                .map(|(_, t)| (seconds(*t), Turn::Stops)),
        );
        spells.extend(spells_of(turns, end));
    }
    spells
}

/// A log line's time and turn, when it is one.
fn turn(line: &str) -> Option<(Timestamp, Turn)> {
    if !line.contains(LEADS) && !line.contains(LOST) {
        return None;
    }
    let value: Value = serde_json::from_str(line).ok()?;
    let turn = match value.pointer("/fields/message")?.as_str()? {
        LEADS => Turn::Leads,
        LOST => Turn::Stops,
        _ => return None,
    };
    Some((value.get("timestamp")?.as_str()?.parse().ok()?, turn))
}

/// One replica's spells of leading from its turns, in any order; one still open at `end`
/// ends there.
fn spells_of(mut turns: Vec<(f64, Turn)>, end: f64) -> Vec<(f64, f64)> {
    turns.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut spells = Vec::new();
    let mut since = None;
    for (at, turn) in turns {
        match (turn, since) {
            (Turn::Leads, None) => since = Some(at),
            (Turn::Stops, Some(from)) => {
                spells.push((from, at));
                since = None;
            }
            _ => {}
        }
    }
    spells.extend(since.map(|from| (from, end.max(from))));
    spells
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(at: &str, message: &str) -> String {
        serde_json::json!({"timestamp": at, "level": "INFO", "fields": {"message": message}})
            .to_string()
    }

    #[test]
    fn a_replica_leads_from_its_first_pass_until_it_loses_the_lease_or_is_killed() {
        let dir = std::env::temp_dir().join(format!("muster-leadership-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| unreachable!("{e}"));
        let start: Timestamp = "2026-01-01T00:00:00Z"
            .parse()
            .unwrap_or_else(|e| unreachable!("{e}"));
        // Replica 0 leads at 5 s, loses the Lease at 20 s, leads again at 40 s and is
        // killed at 50 s; replica 1 leads at 70 s to the end. A line that is not JSON and
        // a release line are skipped.
        let zero = [
            line("2026-01-01T00:00:05Z", LEADS),
            "not a log line: leading: scheduling".to_owned(),
            line("2026-01-01T00:00:10Z", "release"),
            line("2026-01-01T00:00:20Z", LOST),
            line("2026-01-01T00:00:40Z", LEADS),
        ];
        std::fs::write(dir.join("replica-0.log"), zero.join("\n"))
            .unwrap_or_else(|e| unreachable!("{e}"));
        std::fs::write(
            dir.join("replica-1.log"),
            line("2026-01-01T00:01:10Z", LEADS),
        )
        .unwrap_or_else(|e| unreachable!("{e}"));
        let killed: Timestamp = "2026-01-01T00:00:50Z"
            .parse()
            .unwrap_or_else(|e| unreachable!("{e}"));
        let found = spells(&dir, 3, &[(0, killed)], start, 100.0);
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(found, [(5.0, 20.0), (40.0, 50.0), (70.0, 100.0)]);
    }
}
