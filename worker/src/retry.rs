//! Retrying a write that failed on storage (real time): a database that fails over or a file
//! briefly locked should not cost a finished result, a periodic tick or a requeue.

use std::future::Future;
use std::time::Duration;

use taskgate::ErrorKind;

/// Waits between attempts of a write that failed on storage.
pub(crate) const STORAGE_RETRY_DELAYS: [Duration; 3] =
    [Duration::from_millis(100), Duration::from_millis(500), Duration::from_secs(2)];

/// Runs a write; storage failures are retried after [`STORAGE_RETRY_DELAYS`], contract errors
/// return at once.
pub(crate) async fn write_with_retry<T, F, Fut>(what: &str, mut write: F) -> taskgate::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = taskgate::Result<T>>,
{
    let mut delays = STORAGE_RETRY_DELAYS.iter();
    loop {
        match write().await {
            Err(e) if e.is(ErrorKind::Backend) => {
                let Some(delay) = delays.next() else { return Err(e) };
                let error = crate::error::chain_text(&e);
                tracing::warn!(%error, retry_in_ms = delay.as_millis(), "{what} failed, retrying");
                tokio::time::sleep(*delay).await;
            }
            other => return other,
        }
    }
}
