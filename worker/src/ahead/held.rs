//! Held tasks that never start: one cancelled while held is finished as cancelled without
//! running, and shutdown returns the held tasks to `pending` with no counter changed.

use std::sync::Arc;

use taskgate::Task;

use super::buffer::Held;
use crate::error::chain_text;
use crate::finish::{lease_gone, write, Write};
use crate::inner::Inner;
use crate::queue::QueueRt;
use crate::shutdown::Ended;

/// Requeues at once when shutdown returns the held tasks.
const REQUEUE_PARALLEL: usize = 16;

/// A cancel made through this runtime: when task `id` is held here it leaves the buffer and is
/// finished as cancelled without running (the broker already recorded the cancel request).
pub(crate) async fn cancel_if_held(inner: &Inner, id: &str) {
    for q in inner.queues.values() {
        if let Some(held) = q.ahead.take(id) {
            cancel_held(inner, q, &held.task).await;
            // The buffer shrank: a claim may be due.
            q.ahead.poke();
            return;
        }
    }
}

/// A held task cancelled meanwhile: finished as cancelled without running.
pub(crate) async fn cancel_held(inner: &Inner, q: &QueueRt, task: &Task) {
    let (id, token) = (task.id.as_str(), task.lease_token.as_str());
    match write(inner, id, token, &Write::Cancel).await {
        Ok(()) => {
            q.metrics.canceled.increment(1);
            tracing::info!(task = id, "cancelled before it started");
        }
        Err(e) => tracing::warn!(task = id, error = %chain_text(&e),
            "finish_canceled of a held task failed; it runs again after its lease expires"),
    }
    inner.finished();
}

/// Shutdown: requeues every held task with no counter changed; returns how many.
pub(crate) async fn requeue_held(inner: &Arc<Inner>, q: &Arc<QueueRt>) -> usize {
    let held: Vec<Held> = q.ahead.drain();
    let mut requeued = 0;
    for chunk in held.chunks(REQUEUE_PARALLEL) {
        let mut set = tokio::task::JoinSet::new();
        for h in chunk {
            let (inner, id, token) = (inner.clone(), h.task.id.clone(), h.task.lease_token.clone());
            set.spawn(async move {
                let r = write(&inner, &id, &token, &Write::Requeue).await;
                (id, r)
            });
        }
        while let Some(joined) = set.join_next().await {
            match joined {
                Ok((_, Ok(()))) => {
                    requeued += 1;
                    q.metrics.requeued.increment(1);
                    inner.ended(Ended::HeldRequeued, 1);
                }
                Ok((id, Err(e))) => {
                    tracing::warn!(task = %id, error = %chain_text(&e),
                        "requeue of a held task failed; it runs again after its lease expires");
                    let lost = lease_gone(&e);
                    inner.ended(if lost { Ended::LeaseLost } else { Ended::WriteFailed }, 1);
                }
                Err(e) => {
                    tracing::error!(error = %e, "a requeue task ended abnormally");
                    inner.ended(Ended::WriteFailed, 1);
                }
            }
        }
    }
    if requeued > 0 {
        tracing::info!(queue = %q.name, requeued, "shutdown returned the tasks claimed ahead");
    }
    requeued
}
