//! A real browser for page tests: headless Chromium driven through chromedriver's WebDriver
//! protocol (W3C), with the few commands a test needs — open a page, run a script in it and
//! read what it returns, click by running a script, save a screenshot.
//!
//! Debian's `chromium` and `chromium-driver` packages provide both (`.ci/run` installs them
//! when missing). Without them [`Browser::start`] says so in one line and gives `None`, and the
//! test skips like the other end-to-end tests without `MUSTER_KUBE_BIN`.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context as _;
use base64::Engine as _;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Where Debian puts the browser and its driver.
const CHROMIUM: &[&str] = &["/usr/bin/chromium", "/usr/bin/chromium-browser"];
const CHROMEDRIVER: &[&str] = &["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"];

/// A chromedriver process and one browser session in it; both end when this is dropped.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
}

fn first_existing(paths: &[&str]) -> Option<PathBuf> {
    paths.iter().map(PathBuf::from).find(|p| p.exists())
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session with a `width`×`height` window;
    /// `Ok(None)` (after one line on stderr) when either is not installed.
    pub async fn start(width: u32, height: u32) -> anyhow::Result<Option<Browser>> {
        let (Some(chromium), Some(chromedriver)) =
            (first_existing(CHROMIUM), first_existing(CHROMEDRIVER))
        else {
            eprintln!(
                "skipped: no headless Chromium here (apt-get install -y chromium chromium-driver)"
            );
            return Ok(None);
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .context("finding a free port for chromedriver")?;
        // In a process group of its own, so that the browser it starts ends with it.
        let driver = Command::new(&chromedriver)
            .process_group(0)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", chromedriver.display()))?;
        let mut browser = Browser {
            driver,
            port,
            session: String::new(),
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let ready = browser
                .request("GET", "/status", None)
                .await
                .ok()
                .and_then(|v| v["value"]["ready"].as_bool());
            if ready == Some(true) {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                anyhow::bail!("chromedriver did not become ready within 20 s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", format!("--window-size={width},{height}")]
            }
        }}});
        let answer = browser
            .request("POST", "/session", Some(&capabilities))
            .await
            .context("starting a browser session")?;
        browser.session = answer["value"]["sessionId"]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("no session in {answer}"))?;
        Ok(Some(browser))
    }

    /// Opens `url` and waits for it to load.
    pub async fn goto(&self, url: &str) -> anyhow::Result<()> {
        self.command("POST", "url", Some(&json!({ "url": url })))
            .await
            .map(|_| ())
    }

    /// Runs `script` (a function body; `arguments` holds `args`) in the page and returns
    /// what it returns.
    pub async fn execute(&self, script: &str, args: &[Value]) -> anyhow::Result<Value> {
        let answer = self
            .command(
                "POST",
                "execute/sync",
                Some(&json!({ "script": script, "args": args })),
            )
            .await?;
        Ok(answer["value"].clone())
    }

    /// Saves a PNG screenshot of the window to `path`.
    pub async fn screenshot(&self, path: &Path) -> anyhow::Result<()> {
        let answer = self.command("GET", "screenshot", None).await?;
        let data = answer["value"]
            .as_str()
            .context("no screenshot in the answer")?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(data)
            .context("decoding the screenshot")?;
        std::fs::write(path, png).with_context(|| format!("writing {}", path.display()))
    }

    /// A command of this session.
    async fn command(
        &self,
        method: &str,
        what: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<Value> {
        let path = format!("/session/{}/{what}", self.session);
        let answer = self.request(method, &path, body).await?;
        if let Some(error) = answer["value"]["error"].as_str() {
            anyhow::bail!(
                "{what}: {error}: {}",
                answer["value"]["message"].as_str().unwrap_or_default()
            );
        }
        Ok(answer)
    }

    /// One HTTP/1.1 request to chromedriver, on a connection of its own (chromedriver answers
    /// with a `Content-Length`, never in chunks).
    async fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<Value> {
        let body = body.map(Value::to_string).unwrap_or_default();
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .context("connecting to chromedriver")?;
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            self.port,
            body.len()
        );
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        let read = async {
            let mut response = Vec::new();
            let mut buffer = vec![0u8; 65_536];
            loop {
                let n = stream.read(&mut buffer).await?;
                if n == 0 {
                    return Ok::<_, std::io::Error>(response);
                }
                response.extend_from_slice(&buffer[..n]);
                // chromedriver keeps the connection open: the answer ends where its
                // Content-Length says.
                if let Some(end) = response.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&response[..end]).to_ascii_lowercase();
                    let length = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok());
                    if length.is_some_and(|len| response.len() >= end + 4 + len) {
                        return Ok(response);
                    }
                }
            }
        };
        let response = tokio::time::timeout(Duration::from_secs(60), read)
            .await
            .context("chromedriver did not answer within 60 s")??;
        let text = String::from_utf8_lossy(&response);
        let (head, payload) = text
            .split_once("\r\n\r\n")
            .context("an answer without headers")?;
        if head.to_ascii_lowercase().contains("transfer-encoding") {
            anyhow::bail!("chromedriver answered in chunks, which this client does not read");
        }
        serde_json::from_str(payload).with_context(|| format!("reading {payload:.200}"))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The driver, the browser and its renderers: the whole process group.
        if let Ok(pid) = i32::try_from(self.driver.id()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
