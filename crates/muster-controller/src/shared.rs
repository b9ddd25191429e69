//! What the watches, the scheduling loop, the sender of writes and the HTTP server share: the
//! [`State`], the notifications that wake the loop and the sender, and the metrics.

use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

use crate::metrics::Metrics;
use crate::state::State;

/// What the watches, the loop and the HTTP server share.
#[derive(Debug, Default)]
pub struct Shared {
    pub(crate) state: Mutex<State>,
    /// Wakes the scheduling loop.
    pub(crate) wake: Notify,
    /// Wakes the sender of queued status writes.
    pub(crate) deferred_wake: Notify,
    /// The metrics.
    pub metrics: Metrics,
    /// Jobs' ends in flight, which releases wait for (see [`crate::ends`]).
    pub(crate) ends: crate::ends::EndsInFlight,
}

impl Shared {
    /// The state, locked (a panic elsewhere never stops the controller from serving).
    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
