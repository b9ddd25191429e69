//! What the commands against a live cluster share: the connection (kubectl's `--kubeconfig`
//! and `--context`), reading the visibility API through the API server, output formats and
//! tables.

use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::path::PathBuf;

use anyhow::Context as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use muster_api::gpujob::StartRange;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// How to reach the cluster, as kubectl takes it.
#[derive(Debug, Clone, clap::Args)]
pub struct Connection {
    /// Kubeconfig to use (default: $KUBECONFIG or ~/.kube/config, else the in-cluster
    /// service account).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long)]
    pub context: Option<String>,
}

/// Output formats, as kubectl's `-o`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// More columns.
    Wide,
    /// The API's answer as JSON.
    Json,
    /// The API's answer as YAML.
    Yaml,
}

/// A client for the cluster `connection` names, and its default namespace.
pub async fn client(connection: &Connection) -> anyhow::Result<kube::Client> {
    let options = kube::config::KubeConfigOptions {
        context: connection.context.clone(),
        ..kube::config::KubeConfigOptions::default()
    };
    let config = match &connection.kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .with_context(|| format!("using kubeconfig {}", path.display()))?
        }
        None => match kube::Config::from_kubeconfig(&options).await {
            Ok(config) => config,
            Err(from_file) => kube::Config::incluster().map_err(|_| {
                anyhow::anyhow!(
                    "no usable kubeconfig ({from_file}) and no in-cluster service account"
                )
            })?,
        },
    };
    // kube's own retries of 429 and 503 back off for up to many minutes; a person waits for
    // at most a few seconds (see `get`).
    let mut config = config;
    config.default_retry = false;
    kube::Client::try_from(config).context("building the Kubernetes client")
}

/// How often a read answered 429 or 503 is tried again, a second apart: a replica handing the
/// lead over, or a caller over their rate, clears within that.
const RETRIES: u32 = 3;

/// Reads `path` of the visibility API (under [`muster_api::visibility::PREFIX`]).
pub async fn get<T: DeserializeOwned>(client: &kube::Client, path: &str) -> anyhow::Result<T> {
    let uri = format!("{}{path}", muster_api::visibility::PREFIX);
    let mut attempt = 0;
    let answer = loop {
        let request = http::Request::get(&uri)
            .body(Vec::new())
            .context("building the request")?;
        match client.request::<T>(request).await {
            Err(kube::Error::Api(status))
                if matches!(status.code, 429 | 503) && attempt < RETRIES =>
            {
                attempt += 1;
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
            answer => break answer,
        }
    };
    answer.map_err(|e| match e {
        kube::Error::Api(status)
            if status.code == 503
                && (status.message.contains("stands by") || status.message.contains("forecast")) =>
        {
            anyhow::anyhow!("{}", status.message)
        }
        kube::Error::Api(status) if status.code == 503 || status.code == 404 && !status.message.contains("not found") => {
            anyhow::anyhow!(
                "the visibility API is not available ({}): is the Muster controller running, and the \
                 APIService v1alpha1.visibility.muster.dev installed (deploy/visibility.yaml)?",
                status.message
            )
        }
        kube::Error::Api(status) if status.code == 403 => anyhow::anyhow!(
            "{}; ask an admin for the muster-visibility-reader ClusterRole (deploy/visibility.yaml)",
            status.message
        ),
        kube::Error::Api(status) => anyhow::anyhow!("{}", status.message),
        other => anyhow::anyhow!("asking {uri}: {other}"),
    })
}

/// Prints `value` as JSON or YAML.
pub fn print_document<T: Serialize>(value: &T, output: Output) -> anyhow::Result<()> {
    let text = match output {
        Output::Yaml => serde_yaml_ng::to_string(value).context("writing YAML")?,
        _ => serde_json::to_string_pretty(value).context("writing JSON")? + "\n",
    };
    print!("{text}");
    Ok(())
}

/// Whether to colour: stdout is a terminal and `NO_COLOR` is not set.
pub fn colour() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

/// A table: a header and rows, printed with columns padded to their widest cell, three
/// spaces apart, as kubectl prints.
#[derive(Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names.
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Whether it has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as text.
    pub fn render(&self, colour: bool) -> String {
        let columns = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(columns) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let line = |cells: &[String]| -> String {
            let mut out = String::new();
            for (i, cell) in cells.iter().enumerate().take(columns) {
                out.push_str(cell);
                if i + 1 < columns {
                    let pad = widths[i] + 3 - cell.chars().count();
                    out.push_str(&" ".repeat(pad));
                }
            }
            out.trim_end().to_owned()
        };
        let mut text = String::new();
        let header = line(&self.header);
        if colour {
            let _ = writeln!(text, "\u{1b}[1m{header}\u{1b}[0m");
        } else {
            text.push_str(&header);
            text.push('\n');
        }
        for row in &self.rows {
            text.push_str(&line(row));
            text.push('\n');
        }
        text
    }
}

/// A number of GPUs as people write it: `16`, `0.5`.
pub fn gpus(n: f64) -> String {
    if (n - n.round()).abs() < 1e-9 {
        format!("{n:.0}")
    } else {
        let text = format!("{n:.3}");
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

/// A span of seconds as kubectl writes ages (its `HumanDuration`): `45s`, `90s`, `2m10s`,
/// `12m`, `3h20m`, `20h`, `2d4h`, `9d`.
pub fn span(seconds: i64) -> String {
    let s = seconds.max(0);
    let (m, h) = (s / 60, s / 3_600);
    let unit = |whole: i64, whole_unit: &str, rest: i64, rest_unit: &str| {
        if rest == 0 {
            format!("{whole}{whole_unit}")
        } else {
            format!("{whole}{whole_unit}{rest}{rest_unit}")
        }
    };
    match s {
        _ if s < 120 => format!("{s}s"),
        _ if m < 10 => unit(m, "m", s % 60, "s"),
        _ if m < 180 => format!("{m}m"),
        _ if h < 8 => unit(h, "h", m % 60, "m"),
        _ if h < 48 => format!("{h}h"),
        _ if h < 24 * 8 => unit(h / 24, "d", h % 24, "h"),
        _ => format!("{}d", h / 24),
    }
}

/// How long ago `time` was, from `now`; `<unknown>` without one.
pub fn age(time: Option<&Time>, now: Timestamp) -> String {
    time.map_or_else(
        || "<unknown>".to_owned(),
        |t| span(now.as_second() - t.0.as_second()),
    )
}

/// When `time` comes, from `now`: `in 5m`, `now` once due; `-` without one.
pub fn until(time: Option<&Time>, now: Timestamp) -> String {
    match time {
        None => "-".to_owned(),
        Some(t) if t.0 <= now => "now".to_owned(),
        Some(t) => format!("in {}", span(t.0.as_second() - now.as_second())),
    }
}

/// A start-time range from `now`, labelled as a range: `in 5m–70m`, `now–20m`, `after 4h`
/// (its end beyond the forecast's horizon), `beyond 7d` (its start too), `in 5m` (both ends
/// alike, to the shown precision); `-` without one.
pub fn range(range: Option<&StartRange>, now: Timestamp, horizon: Option<i64>) -> String {
    let Some(r) = range else {
        return "-".to_owned();
    };
    let from = |t: &Time| {
        if t.0 <= now {
            "now".to_owned()
        } else {
            span(t.0.as_second() - now.as_second())
        }
    };
    match (&r.earliest, &r.latest) {
        (None, _) => horizon.map_or_else(
            || "beyond the horizon".to_owned(),
            |h| format!("beyond {}", span(h)),
        ),
        (Some(e), None) => format!("after {}", from(e)),
        (Some(e), Some(l)) if e.0 <= now && l.0 <= now => "now".to_owned(),
        (Some(e), Some(l)) => {
            let (start, end) = (from(e), from(l));
            let prefix = if start == "now" { "" } else { "in " };
            if start == end {
                // Every run (near enough) agreed: a range of one point.
                format!("{prefix}{start}")
            } else {
                format!("{prefix}{start}–{end}")
            }
        }
    }
}

/// A moment as a clock reads it in UTC: `14:20` on `now`'s day, `Nov 28 14:20` on another.
pub fn clock(time: &Time, now: Timestamp) -> String {
    let day = |t: Timestamp| t.as_second().div_euclid(86_400);
    if day(time.0) == day(now) {
        time.0.strftime("%H:%M").to_string()
    } else {
        time.0.strftime("%b %d %H:%M").to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_pad_columns_to_the_widest_cell() {
        let mut table = Table::new(&["NAME", "GPUS"]);
        table.row(vec!["a-long-name".into(), "16".into()]);
        table.row(vec!["b".into(), "0.5".into()]);
        assert_eq!(
            table.render(false),
            "NAME          GPUS\na-long-name   16\nb             0.5\n"
        );
    }

    #[test]
    fn spans_and_gpus_read_as_kubectl_writes_them() {
        assert_eq!(span(45), "45s");
        assert_eq!(span(720), "12m");
        assert_eq!(span(3_600 * 3), "3h");
        assert_eq!(span(3_600 * 3 + 20 * 60), "3h20m");
        assert_eq!(span(86_400 * 2 + 3_600 * 4), "2d4h");
        assert_eq!(span(90), "90s");
        assert_eq!(span(130), "2m10s");
        assert_eq!(span(20 * 3_600 + 59), "20h");
        assert_eq!(span(9 * 86_400), "9d");
        assert_eq!(gpus(16.0), "16");
        assert_eq!(gpus(0.5), "0.5");
        assert_eq!(gpus(0.125), "0.125");
    }

    #[test]
    fn a_start_range_reads_as_a_range_from_now() {
        let now = Timestamp::from_second(100_000).unwrap_or_default();
        let at = |s: i64| Time(Timestamp::from_second(100_000 + s).unwrap_or_default());
        let r = |e: Option<i64>, l: Option<i64>| StartRange {
            earliest: e.map(at),
            likely: e.map(at),
            latest: l.map(at),
            as_of: at(0),
        };
        assert_eq!(range(None, now, None), "-");
        assert_eq!(
            range(Some(&r(Some(300), Some(4_200))), now, None),
            "in 5m–70m"
        );
        assert_eq!(range(Some(&r(Some(0), Some(1_200))), now, None), "now–20m");
        assert_eq!(range(Some(&r(Some(-5), Some(-1))), now, None), "now");
        assert_eq!(range(Some(&r(Some(14_400), None)), now, None), "after 4h");
        assert_eq!(range(Some(&r(Some(300), Some(300))), now, None), "in 5m");
        assert_eq!(
            range(Some(&r(Some(300), Some(310))), now, None),
            "in 5m–5m10s"
        );
        assert_eq!(
            range(Some(&r(None, None)), now, Some(7 * 86_400)),
            "beyond 7d"
        );
        assert_eq!(clock(&at(600), now), "03:56");
        assert_eq!(clock(&at(86_400), now), "Jan 03 03:46");
    }
}
