//! Batched completion: finished handlers hand their acks to one task that writes them with
//! `ack_many`, a batch at a time (flush at `max_batch` items or `max_wait` after the first;
//! while every flush in flight is busy the waiting batch keeps growing, up to ten times
//! `max_batch`), so one transaction completes many tasks. Inline mode acks each task on its
//! own.
//!
//! An ack handed over is not yet written: a crash before the flush leaves the task `running`
//! until its lease expires, and then it runs again (at-least-once, never lost). Shutdown
//! flushes everything handed over.

use std::sync::Arc;
use std::time::Duration;

use taskgate::{AckItem, Broker, ErrorKind};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::claim::QueueRt;
use crate::error::chain_text;
use crate::inner::Inner;
use crate::shutdown::Ended;

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
    /// Acks `done`: handed to the batch (waiting while the backlog is full), or written now.
    pub(crate) async fn complete(&self, inner: &Inner, done: Done) {
        let done = match self {
            Completer::Batched(tx) => match tx.send(done).await {
                Ok(()) => return,
                // The batching task is gone (shutdown flushed already): write it here.
                Err(mpsc::error::SendError(done)) => done,
            },
            Completer::Inline => done,
        };
        let written = crate::inner::write_with_retry("ack", || {
            inner.broker.ack(&done.item.id, &done.item.token, done.item.result.clone())
        })
        .await;
        record(inner, &done, written).await;
        inner.finished();
    }
}

/// Flushes in flight at once: while one batch commits, the next fills and can commit too (on
/// a server database the commits overlap; SQLite's one writer takes them in turn).
const FLUSHES: usize = 4;
/// How far a waiting batch grows beyond `max_batch` while every flush is busy.
const GROWTH: usize = 10;

/// The batching task: collects, flushes (up to [`FLUSHES`] batches at once), and on `stop`
/// drains and flushes what is left, returning once every flush finished. Dropped (a crash),
/// it drops its flushes where they stand.
pub(crate) async fn run(
    inner: Arc<Inner>,
    mut rx: mpsc::Receiver<Done>,
    max_batch: usize,
    max_wait: Duration,
    stop: CancellationToken,
) {
    let mut flushes = JoinSet::new();
    let mut batch: Vec<Done> = Vec::with_capacity(max_batch);
    let mut open = true;
    while open {
        let first = tokio::select! {
            item = rx.recv() => item,
            () = stop.cancelled() => None,
        };
        let Some(first) = first else { break };
        batch.push(first);
        let deadline = Instant::now() + max_wait;
        while batch.len() < max_batch {
            tokio::select! {
                item = rx.recv() => match item {
                    Some(done) => batch.push(done),
                    None => break,
                },
                () = tokio::time::sleep_until(deadline) => break,
                () = stop.cancelled() => break,
            }
        }
        open = spawn_flush(&inner, &mut flushes, &mut batch, max_batch, Some(&mut rx)).await;
    }
    rx.close();
    while let Some(done) = rx.recv().await {
        batch.push(done);
        if batch.len() >= max_batch {
            spawn_flush(&inner, &mut flushes, &mut batch, max_batch, None).await;
        }
    }
    spawn_flush(&inner, &mut flushes, &mut batch, max_batch, None).await;
    while flushes.join_next().await.is_some() {}
}

/// Starts flushing `batch` once fewer than [`FLUSHES`] are in flight. While every flush is
/// busy, acks keep joining the waiting batch from `rx` (up to [`GROWTH`] × `max_batch`), so
/// when the database is the bottleneck the batches grow and the transactions get fewer —
/// what River's completer does with its backlog. False when `rx` turned out closed.
async fn spawn_flush(
    inner: &Arc<Inner>,
    flushes: &mut JoinSet<()>,
    batch: &mut Vec<Done>,
    max_batch: usize,
    mut rx: Option<&mut mpsc::Receiver<Done>>,
) -> bool {
    let mut open = true;
    if batch.is_empty() {
        return open;
    }
    let most = max_batch.saturating_mul(GROWTH);
    while flushes.len() >= FLUSHES {
        match rx.as_deref_mut() {
            Some(rx) if open && batch.len() < most => tokio::select! {
                _ = flushes.join_next() => {}
                item = rx.recv() => match item {
                    Some(done) => batch.push(done),
                    None => open = false,
                },
            },
            _ => drop(flushes.join_next().await),
        }
    }
    let full = std::mem::replace(batch, Vec::with_capacity(max_batch));
    let inner = inner.clone();
    flushes.spawn(async move {
        let mut full = full;
        flush(&inner, &mut full).await;
    });
    open
}

/// Writes one batch with `ack_many`, retrying storage failures; records each item's outcome.
async fn flush(inner: &Inner, batch: &mut Vec<Done>) {
    if batch.is_empty() {
        return;
    }
    let items: Vec<AckItem> = batch.iter().map(|d| d.item.clone()).collect();
    match ack_many_with_retry(&*inner.broker, &items).await {
        Ok(results) => {
            for (done, result) in batch.iter().zip(results) {
                record(inner, done, result).await;
            }
        }
        Err(e) => {
            // Nothing was written: the tasks stay running until their leases expire and then
            // run again. Nothing is lost.
            tracing::error!(error = %chain_text(&e), tasks = batch.len(),
                "batched ack failed; the tasks will run again after their leases expire");
            inner.ended(Ended::WriteFailed, batch.len());
        }
    }
    batch.clear();
    inner.finished();
}

async fn ack_many_with_retry(
    broker: &dyn Broker,
    items: &[AckItem],
) -> taskgate::Result<Vec<taskgate::Result<()>>> {
    crate::inner::write_with_retry("ack_many", || broker.ack_many(items)).await
}

/// Counts one ack's outcome: completed, lost (the reaper owns the task now), or rejected (a
/// result over the size limit: the task fails at once rather than rerunning forever).
async fn record(inner: &Inner, done: &Done, result: taskgate::Result<()>) {
    let (queue, item) = (&done.queue, &done.item);
    let id = item.id.as_str();
    let finished = Ended::Finished { after_grace: done.after_grace };
    match result {
        Ok(()) => {
            queue.metrics.completed.increment(1);
            inner.ended(finished, 1);
        }
        Err(e) if e.is(ErrorKind::LeaseLost) || e.is(ErrorKind::NotFound) => {
            queue.metrics.lease_lost.increment(1);
            tracing::warn!(task = id, "ack found the lease lost; the task runs again");
            inner.ended(Ended::LeaseLost, 1);
        }
        Err(e) if e.is(ErrorKind::InvalidInput) => {
            if crate::execute::reject(inner, queue, id, &item.token, "result", &e).await {
                inner.ended(finished, 1);
            }
        }
        Err(e) => {
            tracing::error!(task = id, error = %chain_text(&e),
                "ack failed; the task runs again after its lease expires");
            inner.ended(Ended::WriteFailed, 1);
        }
    }
}
