//! The batching task of the completer (`completer.rs`): it collects the acks finished
//! handlers hand over and writes them with `ack_many`, a batch at a time (flush at `max_batch`
//! items or `max_wait` after the first; while every flush in flight is busy the waiting batch
//! keeps growing, up to ten times `max_batch`), then counts each ack's own result through the
//! final write (`finish.rs`).

use std::sync::Arc;
use std::time::Duration;

use taskgate::{AckItem, Broker};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::completer::Done;
use crate::error::chain_text;
use crate::finish::acked;
use crate::inner::Inner;
use crate::retry::write_with_retry;
use crate::shutdown::Ended;

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
                acked(inner, done, result).await;
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
    write_with_retry("ack_many", || broker.ack_many(items)).await
}
