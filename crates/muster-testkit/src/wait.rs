//! Waiting for a condition on a live cluster.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// How often [`eventually`] checks.
const INTERVAL: Duration = Duration::from_millis(200);

/// Calls `check` every 200 ms until it returns `Some`, for at most `timeout`; the error names
/// `what` was awaited.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return Ok(value);
        }
        if Instant::now() >= deadline {
            anyhow::bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(INTERVAL).await;
    }
}
