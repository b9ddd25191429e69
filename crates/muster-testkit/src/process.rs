//! The child processes of a test cluster: each started with its output appended to a log file,
//! and stopped with SIGTERM, a bounded wait, then SIGKILL.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// How often a stopping process is checked.
const POLL: Duration = Duration::from_millis(50);

/// One control-plane program, restartable with the same arguments.
pub(crate) struct Process {
    name: &'static str,
    program: PathBuf,
    args: Vec<OsString>,
    log: PathBuf,
    child: Option<Child>,
}

impl Process {
    /// Starts `program` with `args`, its stdout and stderr appended to `log`.
    pub(crate) fn spawn(
        name: &'static str,
        program: PathBuf,
        args: Vec<OsString>,
        log: PathBuf,
    ) -> anyhow::Result<Self> {
        let mut process = Self {
            name,
            program,
            args,
            log,
            child: None,
        };
        process.start()?;
        Ok(process)
    }

    /// Starts the program again after [`Process::terminate`].
    pub(crate) fn start(&mut self) -> anyhow::Result<()> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("opening {}", self.log.display()))?;
        let err = log
            .try_clone()
            .with_context(|| format!("opening {}", self.log.display()))?;
        let child = Command::new(&self.program)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {}", self.program.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// The process id while it runs.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The exit status if the process has exited (it is then reaped).
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => {
                self.child = None;
                Some(status)
            }
            Ok(None) | Err(_) => None,
        }
    }

    /// An error saying the process exited, with the tail of its log.
    pub(crate) fn exit_error(&self, status: ExitStatus, what: &str) -> anyhow::Error {
        anyhow::anyhow!(
            "{} exited ({status}) {what}; last lines of {}:\n{}",
            self.name,
            self.log.display(),
            tail(&self.log, 20)
        )
    }

    /// An error saying the process did not become ready, with the tail of its log.
    pub(crate) fn not_ready_error(&self, what: &str) -> anyhow::Error {
        anyhow::anyhow!(
            "{} {what}; last lines of {}:\n{}",
            self.name,
            self.log.display(),
            tail(&self.log, 20)
        )
    }

    /// Whether the log says a port was taken: the start is then worth retrying on new ports.
    pub(crate) fn lost_a_port_race(&self) -> bool {
        let text = tail(&self.log, 40);
        text.contains("address already in use") || text.contains("bind: address")
    }

    /// Sends `signal` if the process runs.
    fn signal(&self, signal: Signal) {
        if let Some(pid) = self.pid().and_then(|pid| i32::try_from(pid).ok()) {
            let _ = kill(Pid::from_raw(pid), signal);
        }
    }

    /// Sends SIGKILL and reaps the process.
    fn kill_now(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, up to `grace` for the process to exit, then SIGKILL; without blocking the runtime.
    pub(crate) async fn terminate(&mut self, grace: Duration) {
        self.signal(Signal::SIGTERM);
        let deadline = Instant::now() + grace;
        while self.child.is_some() && Instant::now() < deadline {
            if self.exited().is_some() {
                return;
            }
            tokio::time::sleep(POLL).await;
        }
        self.kill_now();
    }
}

/// Stops all `processes` together: SIGTERM to each, up to `grace` for all of them, then SIGKILL.
/// Blocking, for `Drop`.
pub(crate) fn terminate_all<K>(processes: &mut [(K, Process)], grace: Duration) {
    for (_, process) in processes.iter() {
        process.signal(Signal::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    loop {
        let mut running = false;
        for (_, process) in processes.iter_mut() {
            if process.child.is_some() && process.exited().is_none() {
                running = true;
            }
        }
        if !running || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(POLL);
    }
    for (_, process) in processes.iter_mut() {
        process.kill_now();
    }
}

/// The last `lines` lines of a log file.
pub(crate) fn tail(path: &Path, lines: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read the log: {e})"),
    }
}
