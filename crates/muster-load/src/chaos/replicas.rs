//! The `muster controller` replicas under test: separate processes with `--leader-elect`, each
//! logging to `replica-<i>.log` (appended to across restarts), killed with SIGKILL and started
//! again.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::Context as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::Api;

/// The Lease the replicas elect a leader with (the controller's default).
const LEASE: &str = "muster-controller";

/// The replicas of one run.
pub struct Replicas {
    muster: PathBuf,
    kubeconfig: PathBuf,
    logs: PathBuf,
    children: Vec<Option<Child>>,
    starts: u64,
    /// Each end of a replica's process, the replica and when: killed by the run, or seen to
    /// have exited by itself.
    stops: Vec<(usize, Timestamp)>,
}

impl Replicas {
    /// `count` replicas, not yet started, of `muster` reaching the API server through
    /// `kubeconfig`, logging into `logs`.
    pub fn new(muster: &Path, kubeconfig: &Path, logs: &Path, count: usize) -> Replicas {
        Replicas {
            muster: muster.to_owned(),
            kubeconfig: kubeconfig.to_owned(),
            logs: logs.to_owned(),
            children: (0..count).map(|_| None).collect(),
            starts: 0,
            stops: Vec::new(),
        }
    }

    /// How many replicas there are.
    pub fn count(&self) -> usize {
        self.children.len()
    }

    /// Starts replica `i` (identity `replica-<i>_<random>`) if it is not running.
    pub fn start(&mut self, i: usize) -> anyhow::Result<()> {
        if self.running(i) {
            return Ok(());
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.logs.join(format!("replica-{i}.log")))
            .context("opening a replica's log")?;
        let child = Command::new(&self.muster)
            .arg("controller")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["--leader-elect", "--metrics-addr", "127.0.0.1:0"])
            .env("POD_NAME", format!("replica-{i}"))
            .env_remove("POD_NAMESPACE")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", self.muster.display()))?;
        if let Some(slot) = self.children.get_mut(i) {
            *slot = Some(child);
            self.starts += 1;
        }
        Ok(())
    }

    /// Starts every replica that is not running.
    pub fn start_all(&mut self) -> anyhow::Result<()> {
        for i in 0..self.children.len() {
            self.start(i)?;
        }
        Ok(())
    }

    /// Whether replica `i` runs (a replica that exited by itself is not running).
    pub fn running(&mut self, i: usize) -> bool {
        let Some(slot) = self.children.get_mut(i) else {
            return false;
        };
        match slot.as_mut().map(Child::try_wait) {
            Some(Ok(None)) => true,
            Some(_) => {
                // It exited by itself (a crash, say): its process ended about now.
                *slot = None;
                self.stops.push((i, Timestamp::now()));
                false
            }
            None => false,
        }
    }

    /// The replicas running now.
    pub fn running_ones(&mut self) -> Vec<usize> {
        (0..self.children.len())
            .filter(|&i| self.running(i))
            .collect()
    }

    /// `kill -9` of replica `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(slot) = self.children.get_mut(i)
            && let Some(mut child) = slot.take()
        {
            let _ = child.kill();
            let _ = child.wait();
            self.stops.push((i, Timestamp::now()));
        }
    }

    /// Every end of a replica's process so far (see [`Replicas::running`]): the replica and
    /// when.
    pub fn stops(&self) -> &[(usize, Timestamp)] {
        &self.stops
    }

    /// Starts so far, the first of each replica included.
    pub fn starts(&self) -> u64 {
        self.starts
    }

    /// The replica holding the Lease, by its identity, read from the API server.
    pub async fn leader(client: &Client) -> Option<usize> {
        let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
        let lease = leases.get_opt(LEASE).await.ok()??;
        let holder = lease.spec?.holder_identity?;
        holder
            .strip_prefix("replica-")?
            .split('_')
            .next()?
            .parse()
            .ok()
    }

    /// Every replica's log, concatenated (for looking for panics).
    pub fn logs(&self) -> String {
        (0..self.children.len())
            .filter_map(|i| {
                std::fs::read_to_string(self.logs.join(format!("replica-{i}.log"))).ok()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        for i in 0..self.children.len() {
            self.kill(i);
        }
    }
}
