//! What the commands against a live cluster share: the connection (kubectl's `--kubeconfig`
//! and `--context`), reading the visibility API through the API server, output formats and
//! tables.

use std::fmt::Write as _;
use std::io::IsTerminal as _;
use std::path::PathBuf;

use anyhow::Context as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
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
        kube::Error::Api(status) if status.code == 503 && status.message.contains("stands by") => {
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

/// A span of seconds as kubectl writes ages: `45s`, `12m`, `3h20m`, `2d4h`.
pub fn span(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3_600 => format!("{}m", s / 60),
        3_600..86_400 if (s % 3_600) / 60 == 0 => format!("{}h", s / 3_600),
        3_600..86_400 => format!("{}h{}m", s / 3_600, (s % 3_600) / 60),
        _ => format!("{}d{}h", s / 86_400, (s % 86_400) / 3_600),
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
        assert_eq!(gpus(16.0), "16");
        assert_eq!(gpus(0.5), "0.5");
        assert_eq!(gpus(0.125), "0.125");
    }
}
