//! One claim call and what it produced: a waiting `dequeue_many` (woken by the broker's
//! wake-ups), a non-waiting `try_dequeue_many` (a backlog is known), and the back-off after a
//! failed claim. The gated loop (`gated.rs`) and the claim-ahead feeders (`ahead/feed.rs`)
//! both claim through here.

use std::time::Duration;

use taskgate::ErrorKind;
use tokio_util::sync::CancellationToken;

use crate::error::chain_text;
use crate::inner::Inner;
use crate::queue::QueueRt;

/// Back-off after a failed claim (real time: infrastructure, not task time).
const CLAIM_ERROR_BACKOFF: Duration = Duration::from_millis(100);

/// What one claim attempt produced.
pub(crate) enum Claim {
    Tasks(Vec<taskgate::Task>),
    Retry,
    Stop,
}

/// One `dequeue_many` for up to `max` tasks, waiting until one is ready or shutdown (the
/// dropped claim is cancel-safe: it returns what it claimed to `pending`).
pub(crate) async fn dequeue(
    inner: &Inner,
    q: &QueueRt,
    max: usize,
    stop: &CancellationToken,
) -> Claim {
    let queues = [q.name.as_str()];
    let claimed = tokio::select! {
        r = inner.broker.dequeue_many(&queues, max) => r,
        () = stop.cancelled() => return Claim::Stop,
    };
    claimed_or_failed(q, claimed, stop).await
}

/// One `try_dequeue_many` (a backlog is known; an empty answer ends it).
pub(crate) async fn try_dequeue(
    inner: &Inner,
    q: &QueueRt,
    max: usize,
    stop: &CancellationToken,
) -> Claim {
    let queues = [q.name.as_str()];
    let claimed = tokio::select! {
        r = inner.broker.try_dequeue_many(&queues, max) => r,
        () = stop.cancelled() => return Claim::Stop,
    };
    claimed_or_failed(q, claimed, stop).await
}

async fn claimed_or_failed(
    q: &QueueRt,
    claimed: taskgate::Result<Vec<taskgate::Task>>,
    stop: &CancellationToken,
) -> Claim {
    match claimed {
        Ok(tasks) => Claim::Tasks(tasks),
        Err(e) => claim_failed(q, &e, stop).await,
    }
}

/// A failed claim: a closed broker stops the claims; anything else waits
/// [`CLAIM_ERROR_BACKOFF`] and retries.
pub(crate) async fn claim_failed(
    q: &QueueRt,
    e: &taskgate::Error,
    stop: &CancellationToken,
) -> Claim {
    if e.is(ErrorKind::Closed) {
        tracing::error!(queue = %q.name, "broker closed; claims stop");
        return Claim::Stop;
    }
    tracing::warn!(queue = %q.name, error = %chain_text(e), "claim failed, retrying");
    tokio::select! {
        () = tokio::time::sleep(CLAIM_ERROR_BACKOFF) => Claim::Retry,
        () = stop.cancelled() => Claim::Stop,
    }
}
