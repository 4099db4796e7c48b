//! Batched completion: finished handlers hand their acks to one task that writes them with
//! `ack_many`, a batch at a time (flush at `max_batch` items or `max_wait` after the first;
//! while every flush in flight is busy the waiting batch keeps growing, up to ten times
//! `max_batch`), so one transaction completes many tasks. Inline mode acks each task on its
//! own.
//!
//! An ack handed over is not yet written: a crash before the flush leaves the task `running`
//! until its lease expires, and then it runs again (at-least-once, never lost). Shutdown
//! flushes everything handed over. This is the sending side; the batching task is
//! `batcher.rs`, and the final write that hands acks over is `finish.rs`.

use std::sync::Arc;

use taskgate::AckItem;
use tokio::sync::mpsc;

use crate::queue::QueueRt;

/// One ack waiting for the flush.
pub(crate) struct Done {
    pub(crate) item: AckItem,
    pub(crate) queue: Arc<QueueRt>,
    /// The handler returned after shutdown's grace ran out (the shutdown report).
    pub(crate) after_grace: bool,
}

/// The sending side kept by the runtime.
pub(crate) enum Completer {
    /// Ack each task directly.
    Inline,
    /// Hand acks to the batching task.
    Batched(mpsc::Sender<Done>),
}

/// How many acks may wait before finished handlers wait for the flush (back-pressure).
fn backlog(max_batch: usize) -> usize {
    max_batch.saturating_mul(4).clamp(64, 20_000)
}

/// A batched completer's channel.
pub(crate) fn channel(max_batch: usize) -> (mpsc::Sender<Done>, mpsc::Receiver<Done>) {
    mpsc::channel(backlog(max_batch))
}

impl Completer {
    /// Hands `done` to the batch (waiting while the backlog is full); gives it back when it
    /// must be written here (inline mode, or the batching task is gone: shutdown flushed
    /// already).
    pub(crate) async fn hand_over(&self, done: Done) -> Option<Done> {
        match self {
            Completer::Batched(tx) => match tx.send(done).await {
                Ok(()) => None,
                Err(mpsc::error::SendError(done)) => Some(done),
            },
            Completer::Inline => Some(done),
        }
    }
}
