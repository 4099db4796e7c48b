//! The claim loop of a queue with a rate or quota gate (runtime spec §12.3, contract §9.6):
//! free slots → rate tokens → (quota) → one `dequeue_many` for all of them, so one claim
//! transaction feeds many handlers. Queues without a gate claim ahead instead (`ahead.rs`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use taskgate::{ErrorKind, QuotaGate, Task};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::ahead::Ahead;
use crate::config::QueueSettings;
use crate::error::chain_text;
use crate::inner::{killable, Inner};
use crate::obs::QueueMetrics;

/// Back-off after a failed claim (real time: infrastructure, not task time).
const CLAIM_ERROR_BACKOFF: Duration = Duration::from_millis(100);
/// How long a busy queue's claim loop waits for more free slots before it claims.
const GATHER: Duration = Duration::from_millis(1);
/// The longest a reserved quota unit waits for a task (contract §9.6).
const QUOTA_DEQUEUE_TIMEOUT: Duration = Duration::from_secs(3);

/// One consumed queue's runtime state.
pub(crate) struct QueueRt {
    pub(crate) name: String,
    pub(crate) settings: QueueSettings,
    /// One permit per worker: held while a handler (or a worker's run of held tasks) runs.
    pub(crate) slots: Arc<Semaphore>,
    bucket: Option<TokenBucket>,
    quota: Option<Arc<dyn QuotaGate>>,
    /// The last quota reservation found the window exhausted.
    pub(crate) exhausted: AtomicBool,
    /// The last quota reservation failed (the storage is down): claims are stopped.
    pub(crate) stalled: AtomicBool,
    /// Handlers running now.
    pub(crate) active: AtomicUsize,
    pub(crate) metrics: QueueMetrics,
    /// Tasks claimed ahead (queues without a rate or quota gate).
    pub(crate) ahead: Ahead,
}

impl QueueRt {
    pub(crate) fn new(
        name: String,
        settings: QueueSettings,
        quota: Option<Arc<dyn QuotaGate>>,
    ) -> QueueRt {
        let bucket = (settings.rps > 0.0).then(|| TokenBucket::new(settings.rps, settings.burst));
        QueueRt {
            slots: Arc::new(Semaphore::new(settings.workers)),
            metrics: QueueMetrics::new(&name),
            name,
            settings,
            bucket,
            quota,
            exhausted: AtomicBool::new(false),
            stalled: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            ahead: Ahead::default(),
        }
    }

    /// True when a rate or quota gate counts this queue's handler starts: it claims only for
    /// free workers, never ahead.
    pub(crate) fn gated(&self) -> bool {
        self.bucket.is_some() || self.quota.is_some()
    }
}

/// What one claim attempt produced.
pub(crate) enum Claim {
    Tasks(Vec<Task>),
    Retry,
    Stop,
}

/// Claims from `q` until shutdown, spawning one execution per claimed task on `execs`.
pub(crate) async fn claim_loop(inner: Arc<Inner>, q: Arc<QueueRt>, execs: TaskTracker) {
    let stop = inner.shutting_down.clone();
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
            let slot = permit.split(1);
            let run = crate::execute::execute(inner.clone(), q.clone(), task, slot);
            execs.spawn(killable(inner.kill.clone(), run));
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
    match claimed {
        Ok(tasks) => Claim::Tasks(tasks),
        Err(e) => claim_failed(q, &e, stop).await,
    }
}

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

/// The local token bucket of a rate-limited queue (real time: the spec's one exemption from
/// clock injection). Starts full.
pub(crate) struct TokenBucket {
    rate: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    pub(crate) fn new(rate: f64, burst: u32) -> TokenBucket {
        let burst = f64::from(burst.max(1));
        TokenBucket { rate, burst, state: Mutex::new((burst, Instant::now())) }
    }

    fn refill(&self, state: &mut (f64, Instant)) {
        let now = Instant::now();
        let earned = now.duration_since(state.1).as_secs_f64() * self.rate;
        state.0 = (state.0 + earned).min(self.burst);
        state.1 = now;
    }

    /// Takes between 1 and `max` tokens, waiting for the first.
    pub(crate) async fn take(&self, max: usize) -> usize {
        loop {
            let wait = {
                let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
                self.refill(&mut state);
                if state.0 >= 1.0 {
                    let n = whole(state.0).clamp(1, max.max(1));
                    state.0 -= n as f64;
                    return n;
                }
                Duration::from_secs_f64((1.0 - state.0) / self.rate)
            };
            tokio::time::sleep(wait).await;
        }
    }

    /// Gives unused tokens back.
    pub(crate) fn refund(&self, n: usize) {
        if n == 0 {
            return;
        }
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.refill(&mut state);
        state.0 = (state.0 + n as f64).min(self.burst);
    }
}

#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "a token count: non-negative and at most the burst, a u32"
)]
fn whole(tokens: f64) -> usize {
    tokens.floor().max(0.0) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_bucket_starts_full_and_takes_refunds_back() {
        let bucket = TokenBucket::new(0.001, 3);
        assert_eq!(bucket.take(5).await, 3, "a full bucket gives at most its burst");
        bucket.refund(2);
        assert_eq!(bucket.take(1).await, 1);
        assert_eq!(bucket.take(5).await, 1, "one refunded token left");
        bucket.refund(10);
        assert_eq!(bucket.take(10).await, 3, "refunds never exceed the burst");
    }
}
