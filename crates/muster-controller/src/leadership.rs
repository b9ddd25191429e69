//! Leadership: a channel that holds whether this replica may write, kept true only while the
//! Lease is this replica's and known to be so.
//!
//! The lease manager (`kube-lease-manager`) takes and renews the Lease; three things around it
//! make it safe on a faulty API server:
//!
//! - **Setting up is retried.** The manager's first request (read or create the Lease) fails
//!   on any API error; a replica that gave up then would leave the fleet without a leader.
//!   [`start`] asks again with backoff until it succeeds or the process stops.
//! - **A manager that stops is rebuilt.** Its watch task can end with an error; the channel
//!   here then says `false` and a new manager is set up, instead of the last value (perhaps
//!   `true`) standing for good.
//! - **Leadership is fenced by the Lease's own expiry.** The manager keeps saying it leads
//!   while its renewals fail, until a read of the Lease succeeds again; by then a standby may
//!   have taken the expired Lease and two replicas would write at once. So this replica reads
//!   the Lease every [`CONFIRM_EVERY`] and leads only until its last confirmed renewal plus the
//!   Lease's duration, less [`CLOCK_MARGIN`] for the clocks of the replicas.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How long a Lease lasts without renewal, in seconds.
pub const LEASE_SECONDS: u16 = 20;
/// How long before expiry the holder renews, in seconds: the slack its renewals have to
/// succeed on a faulty API server before the fence stops its writes.
pub const RENEW_BEFORE_SECONDS: u16 = 8;
/// How often the holder reads the Lease to confirm its renewals.
pub const CONFIRM_EVERY: Duration = Duration::from_secs(2);
/// Taken off every confirmed expiry: the replicas' clocks may differ by this much.
pub const CLOCK_MARGIN: Duration = Duration::from_secs(2);
/// How long a renewal lets this replica write: the Lease's duration less [`CLOCK_MARGIN`].
pub const HOLDS_FOR: Duration =
    Duration::from_secs(LEASE_SECONDS as u64).saturating_sub(CLOCK_MARGIN);
/// The longest wait between two attempts to set the lease manager up.
const SETUP_BACKOFF_MAX: Duration = Duration::from_secs(10);

/// Which Lease, and who this replica is in it.
#[derive(Clone, Debug)]
pub struct LeaseParams {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name.
    pub name: String,
    /// This replica's identity in the Lease.
    pub identity: String,
}

/// Starts keeping leadership. The channel says `true` while this replica may write. Once every
/// receiver is dropped, the Lease is given up (so a standby takes over at once) and the task
/// ends; a caller waits on the handle for that, with a bound of its own.
pub fn start(client: Client, params: LeaseParams) -> (watch::Receiver<bool>, JoinHandle<()>) {
    let (tx, rx) = watch::channel(false);
    let task = tokio::spawn(supervise(client, params, tx));
    (rx, task)
}

/// Sets the lease manager up, runs it, and sets it up again whenever it stops, until every
/// receiver of `tx` is gone.
async fn supervise(client: Client, params: LeaseParams, tx: watch::Sender<bool>) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), &params.namespace);
    let mut backoff = Backoff::default();
    loop {
        let built = tokio::select! {
            () = tx.closed() => return,
            built = kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &params.name)
                .with_namespace(&params.namespace)
                .with_identity(&params.identity)
                .with_duration(LEASE_SECONDS.into())
                .with_grace(RENEW_BEFORE_SECONDS.into())
                .build() => built,
        };
        let manager = match built {
            Ok(manager) => manager,
            Err(e) => {
                let wait = backoff.next();
                tracing::warn!(error = %e, ?wait, "setting up the leader-election Lease; trying again");
                tokio::select! {
                    () = tx.closed() => return,
                    () = tokio::time::sleep(wait) => continue,
                }
            }
        };
        backoff = Backoff::default();
        let (inner, task) = manager.watch().await;
        match follow(&leases, &params, inner, &tx).await {
            Followed::Closed => {
                // The manager sees its channel closed too, gives the Lease up and returns.
                if let Ok(Err(e)) = task.await {
                    tracing::warn!(error = %e, "giving up the Lease");
                }
                return;
            }
            Followed::ManagerStopped => {
                tx.send_replace(false);
                let error = match task.await {
                    Ok(Err(e)) => e.to_string(),
                    Ok(Ok(_)) => "its task ended".to_owned(),
                    Err(e) => e.to_string(),
                };
                tracing::error!(%error, "leader election stopped; setting it up again");
                tokio::select! {
                    () = tx.closed() => return,
                    () = tokio::time::sleep(backoff.next()) => {}
                }
            }
        }
    }
}

/// How following one lease manager ended.
enum Followed {
    /// Every receiver is gone: the process stops.
    Closed,
    /// The manager's task ended.
    ManagerStopped,
}

/// Forwards the manager's view into `tx`, fenced by the Lease's confirmed expiry.
async fn follow(
    leases: &Api<Lease>,
    params: &LeaseParams,
    mut inner: watch::Receiver<bool>,
    tx: &watch::Sender<bool>,
) -> Followed {
    let mut fence = Fence::default();
    let mut confirm = tokio::time::interval(CONFIRM_EVERY);
    confirm.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let now = Instant::now();
        let leads = fence.leads(*inner.borrow(), now);
        tx.send_if_modified(|current| std::mem::replace(current, leads) != leads);
        // Wake when the fence falls, to say so even if nothing else happens.
        let falls = fence.until.filter(|&until| until > now);
        tokio::select! {
            () = tx.closed() => return Followed::Closed,
            changed = inner.changed() => {
                if changed.is_err() {
                    return Followed::ManagerStopped;
                }
                if *inner.borrow_and_update() {
                    // The manager says so only right after writing the Lease as its holder.
                    fence.renewed(Instant::now());
                }
            }
            _ = confirm.tick() => {
                if *inner.borrow() {
                    // A read held up by the API server must not hold the fence up: it falls
                    // on time whatever the read is doing, and a late read counts as failed.
                    let read = tokio::select! {
                        read = tokio::time::timeout(CONFIRM_EVERY, leases.get_opt(&params.name)) => {
                            read.ok().and_then(Result::ok)
                        }
                        () = sleep_until(falls) => None,
                    };
                    let read = read.map(|lease| expiry(lease.as_ref(), &params.identity));
                    fence.confirm(read, Timestamp::now(), Instant::now());
                }
            }
            () = sleep_until(falls) => {}
        }
    }
}

/// Sleeps until `at`, or for ever.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// When `lease` expires if `identity` holds it; `None` if another holds it, nobody does, or it
/// is gone.
pub fn expiry(lease: Option<&Lease>, identity: &str) -> Option<Timestamp> {
    let spec = lease?.spec.as_ref()?;
    if spec.holder_identity.as_deref() != Some(identity) {
        return None;
    }
    let renewed = spec.renew_time.as_ref().or(spec.acquire_time.as_ref())?.0;
    let seconds = spec.lease_duration_seconds?;
    renewed
        .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(seconds.into()))
        .ok()
}

/// Until when this replica may write: set when the manager has just written the Lease, moved
/// by each read of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fence {
    /// The instant past which this replica no longer knows the Lease to be its own.
    pub until: Option<Instant>,
}

impl Fence {
    /// Whether to write at `now`, given whether the manager says it leads.
    pub fn leads(&self, manager_leads: bool, now: Instant) -> bool {
        manager_leads && self.until.is_some_and(|until| now < until)
    }

    /// The manager wrote the Lease as its holder no earlier than `at`.
    pub fn renewed(&mut self, at: Instant) {
        self.until = Some(at + HOLDS_FOR);
    }

    /// A read of the Lease at wall time `wall` (and instant `now`): `None` when the read failed
    /// (the fence stands), `Some(None)` when the Lease is not this replica's (it falls),
    /// `Some(Some(expiry))` when it is (it moves to the expiry, less the clock margin).
    pub fn confirm(&mut self, read: Option<Option<Timestamp>>, wall: Timestamp, now: Instant) {
        let Some(read) = read else { return };
        self.until = read.and_then(|expires| {
            let left = expires
                .duration_since(wall)
                .checked_sub(k8s_openapi::jiff::SignedDuration::try_from(CLOCK_MARGIN).ok()?)?;
            let left = Duration::try_from(left)
                .ok()
                .filter(|left| !left.is_zero())?;
            Some(now + left)
        });
    }
}

/// Exponential waits between attempts: 1 s, 2 s, 4 s, … up to [`SETUP_BACKOFF_MAX`].
#[derive(Debug)]
struct Backoff(Duration);

impl Default for Backoff {
    fn default() -> Self {
        Backoff(Duration::from_secs(1))
    }
}

impl Backoff {
    fn next(&mut self) -> Duration {
        let wait = self.0;
        self.0 = (self.0 * 2).min(SETUP_BACKOFF_MAX);
        wait
    }
}

#[cfg(test)]
mod tests;
