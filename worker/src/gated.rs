//! The claim loop of a queue with a rate or quota gate (runtime spec §12.3, contract §9.6):
//! free slots → rate tokens → (quota) → one `dequeue_many` for all of them, so one claim
//! transaction feeds many handlers. Queues without a gate claim ahead instead (`ahead/`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use taskgate::QuotaGate;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;

use crate::claim::{claim_failed, dequeue, Claim};
use crate::error::chain_text;
use crate::execute::Execs;
use crate::inner::Inner;
use crate::queue::QueueRt;

/// How long a busy queue's claim loop waits for more free slots before it claims.
const GATHER: Duration = Duration::from_millis(1);
/// The longest a reserved quota unit waits for a task (contract §9.6).
const QUOTA_DEQUEUE_TIMEOUT: Duration = Duration::from_secs(3);

/// Claims from `q` until shutdown, spawning one execution per claimed task on `execs`.
pub(crate) async fn claim_loop(inner: Arc<Inner>, q: Arc<QueueRt>, execs: Execs) {
    let stop = inner.stops.shutting_down.clone();
    let mut busy = false;
    loop {
        let Some(mut permit) = acquire_slots(&q, &stop, busy).await else { return };
        if q.quota.is_some() {
            // One task per quota reservation: keep one slot, take one token.
            drop(permit.split(permit.num_permits() - 1));
        }
        let mut want = permit.num_permits();
        if let Some(bucket) = &q.bucket {
            let got = tokio::select! {
                n = bucket.take(want) => n,
                () = stop.cancelled() => return,
            };
            drop(permit.split(want - got));
            want = got;
        }
        let claim = match &q.quota {
            Some(gate) => quota_claim(&inner, &q, gate, &stop).await,
            None => dequeue(&inner, &q, want, &stop).await,
        };
        let tasks = match claim {
            Claim::Tasks(tasks) => tasks,
            Claim::Retry => Vec::new(),
            Claim::Stop => {
                refund(&q, want);
                return;
            }
        };
        refund(&q, want.saturating_sub(tasks.len()));
        // A full claim means more work is waiting: the next claim gathers slots first.
        busy = want > 1 && tasks.len() == want;
        for task in tasks {
            execs.start(&inner, &q, task, permit.split(1));
        }
    }
}

fn refund(q: &QueueRt, tokens: usize) {
    if let Some(bucket) = &q.bucket {
        bucket.refund(tokens);
    }
}

/// Waits for one free slot, then takes every other free one too. When the queue is `busy`
/// (the last claim was full) it waits up to [`GATHER`] for half the workers to be free, so a
/// backlog is claimed in batches instead of one slot per claim.
async fn acquire_slots(
    q: &QueueRt,
    stop: &CancellationToken,
    busy: bool,
) -> Option<OwnedSemaphorePermit> {
    let mut permit = tokio::select! {
        p = q.slots.clone().acquire_owned() => p.ok()?,
        () = stop.cancelled() => return None,
    };
    take_free(q, &mut permit);
    let target = q.settings.workers.div_ceil(2);
    if busy && permit.num_permits() < target {
        let deadline = tokio::time::Instant::now() + GATHER;
        while permit.num_permits() < target {
            tokio::select! {
                p = q.slots.clone().acquire_owned() => permit.merge(p.ok()?),
                () = tokio::time::sleep_until(deadline) => break,
                () = stop.cancelled() => return None,
            }
            take_free(q, &mut permit);
        }
    }
    Some(permit)
}

fn take_free(q: &QueueRt, permit: &mut OwnedSemaphorePermit) {
    let free = u32::try_from(q.slots.available_permits()).unwrap_or(u32::MAX);
    if free > 0 {
        if let Ok(more) = q.slots.clone().try_acquire_many_owned(free) {
            permit.merge(more);
        }
    }
}

/// The quota steps (contract §9.6): skip empty queues, reserve a unit (exhausted or failing ⇒
/// wait, never admit), then claim one task within a bounded time, releasing the unit if none.
async fn quota_claim(
    inner: &Inner,
    q: &QueueRt,
    gate: &Arc<dyn QuotaGate>,
    stop: &CancellationToken,
) -> Claim {
    let period = q.settings.quota.as_ref().map_or(Duration::from_secs(1), |c| c.period);
    let wait = (period / 8).clamp(Duration::from_millis(10), Duration::from_secs(1));
    // The window turns on the broker's clock; other processes' writes and a recovering
    // storage show in real time: whichever comes first.
    let pause = || async {
        tokio::select! {
            () = inner.clock.sleep(wait) => Claim::Retry,
            () = tokio::time::sleep(wait) => Claim::Retry,
            () = stop.cancelled() => Claim::Stop,
        }
    };
    match inner.broker.queue_len(&q.name).await {
        Ok(0) => return pause().await,
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(queue = %q.name, error = %chain_text(&e), "queue length failed");
            return pause().await;
        }
    }
    let reservation = match gate.reserve().await {
        Ok(Some(r)) => r,
        Ok(None) => {
            q.exhausted.store(true, Ordering::SeqCst);
            return pause().await;
        }
        Err(e) => {
            if !q.stalled.swap(true, Ordering::SeqCst) {
                tracing::error!(queue = %q.name, error = %chain_text(&e), "quota unavailable; claims stop until it answers");
            }
            return pause().await;
        }
    };
    q.exhausted.store(false, Ordering::SeqCst);
    q.stalled.store(false, Ordering::SeqCst);
    let queues = [q.name.as_str()];
    let timeout = period.min(QUOTA_DEQUEUE_TIMEOUT);
    let claimed = tokio::select! {
        r = tokio::time::timeout(timeout, inner.broker.dequeue_many(&queues, 1)) => r,
        () = stop.cancelled() => Ok(Ok(Vec::new())),
    };
    match claimed {
        Ok(Ok(tasks)) if !tasks.is_empty() => Claim::Tasks(tasks),
        other => {
            if let Err(e) = gate.release(reservation).await {
                tracing::debug!(queue = %q.name, error = %chain_text(&e), "quota release failed (unit leaked)");
            }
            match other {
                Ok(Err(e)) => claim_failed(q, &e, stop).await,
                _ if stop.is_cancelled() => Claim::Stop,
                _ => Claim::Retry,
            }
        }
    }
}
