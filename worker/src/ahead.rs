//! Claiming ahead on a queue with no rate or quota gate: claims feed a small local buffer of
//! claimed-but-unstarted tasks, and a worker that finishes a task starts the next buffered one
//! at once, so handlers do not wait for a claim round trip and one claim carries many tasks.
//!
//! - **How far ahead**: the buffer's target is what the workers can finish in about two claim
//!   round trips (their capacity, workers ÷ the measured time one task keeps a worker busy,
//!   × twice the measured claim time), at most the queue's `prefetch`. Slow handlers therefore
//!   never hoard tasks; no-op handlers claim in batches of hundreds. Capacity, not the observed
//!   finish rate: the observed rate is limited by the feed itself, so where one claim-and-start
//!   cycle outlasts the look-ahead window (a loaded machine) it would keep the target below one
//!   task and the queue claiming one task at a time for good. A claim is made when the buffer
//!   plus the claims in flight fall below the free workers plus that target (with a buffer left:
//!   below half of it, so claims stay large).
//! - **Claims in flight**: feeder 0 waits for work (`dequeue_many`, woken by the broker's
//!   wake-ups); the others claim without waiting (`try_dequeue_many`) only while the last claim
//!   came back full (a backlog), so an idle queue runs one waiting claim, not several.
//! - **Order**: the buffer keeps the claims' `(priority, run_at, id)` order — a landing claim
//!   is merged into it, since two claims in flight can land in either order — and a worker
//!   that stops frees its slot before the next claim is sized, so one worker facing a
//!   backlog claims it in one statement, not two racing ones.
//! - **Leases**: the keeper heartbeats every task held longer than a heartbeat period (TTL/3
//!   on the runtime's clock); a held task found cancelled is finished as cancelled, one whose
//!   lease was lost is dropped (the reaper owns it).
//! - **Cancels**: a held task whose cancel is known never starts: one cancelled through this
//!   runtime's client is taken out of the buffer and finished as cancelled at once
//!   ([`cancel_if_held`]), one cancelled elsewhere when the keeper's heartbeat answers
//!   `Canceled` (contract §12.3.6).
//! - **Shutdown**: no held task starts once shutdown began; the held tasks are requeued with
//!   no counter changed (`requeue`), like interrupted ones. A crash leaves them `running` until
//!   their leases expire, like running ones.

use std::collections::VecDeque;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use taskgate::{ErrorKind, Task, Timestamp};
use tokio::sync::{Notify, OwnedSemaphorePermit};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::claim::{claim_failed, Claim, QueueRt};
use crate::error::chain_text;
use crate::inner::{killable, write_with_retry, Inner};
use crate::shutdown::Ended;

/// Claims in flight at most per queue (one waiting, the others only during a backlog).
pub(crate) const FEEDERS: usize = 2;
/// The most tasks one claim asks for.
const MAX_CLAIM: usize = 1_000;
/// Bounds of the look-ahead window (twice the measured claim time).
const LOOKAHEAD: (f64, f64) = (0.002, 0.2);
/// The shortest time one task is taken to keep a worker busy (seconds).
const MIN_BUSY: f64 = 1e-7;
/// Requeues at once when shutdown returns the held tasks.
const REQUEUE_PARALLEL: usize = 16;

/// A claimed task waiting for a worker.
struct Held {
    task: Task,
    /// When its lease was last taken or renewed (runtime clock).
    renewed: Timestamp,
}

/// The claim-ahead state of one queue.
#[derive(Default)]
pub(crate) struct Ahead {
    state: Mutex<State>,
    /// Raised when the buffer shrinks, a worker frees its slot or a claim lands.
    demand: Notify,
    /// Tasks this queue's workers finished.
    finished: AtomicU64,
    /// Nanoseconds those tasks kept a worker busy (handler and final write).
    busy: AtomicU64,
}

#[derive(Default)]
struct State {
    buffer: VecDeque<Held>,
    /// Tasks asked for by claims in flight.
    inflight: usize,
    /// The last claim came back full: more is waiting.
    backlog: bool,
    pace: Pace,
}

/// The measured capacity and claim time.
#[derive(Default)]
struct Pace {
    /// Tasks finished and busy nanoseconds at the last estimate.
    finished: u64,
    busy: u64,
    /// Tasks the workers finish per second when never kept waiting for a claim.
    rate: f64,
    /// Seconds one full claim took.
    claim: f64,
}

impl Pace {
    /// Tasks to hold ahead: what `workers` finish in two claim times, at most `cap`, from the
    /// totals of tasks finished and of the nanoseconds they kept a worker busy. Until a task
    /// finishes nothing is known, and an estimate stands while nothing finishes (a blocked
    /// handler says nothing yet).
    fn target(&mut self, finished: u64, busy: u64, workers: usize, cap: usize) -> usize {
        if cap == 0 {
            return 0;
        }
        let done = finished.saturating_sub(self.finished);
        if done > 0 {
            let secs = busy.saturating_sub(self.busy) as f64 / 1e9;
            let each = (secs / done as f64).max(MIN_BUSY);
            let rate = workers as f64 / each;
            self.rate = if self.rate == 0.0 { rate } else { 0.6 * self.rate + 0.4 * rate };
            self.finished = finished;
            self.busy = busy;
        }
        let window = (2.0 * self.claim).clamp(LOOKAHEAD.0, LOOKAHEAD.1);
        whole(self.rate * window).min(cap)
    }

    fn claimed(&mut self, took: Duration) {
        let secs = took.as_secs_f64();
        self.claim = if self.claim == 0.0 { secs } else { 0.7 * self.claim + 0.3 * secs };
    }
}

#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "a task count: finite, non-negative, saturating at usize::MAX"
)]
fn whole(tasks: f64) -> usize {
    tasks.floor().max(0.0) as usize
}

impl Ahead {
    fn state(&self) -> MutexGuard<'_, State> {
        // Every update is a few plain field writes: a poisoned state is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Tasks held here now.
    pub(crate) fn held(&self) -> usize {
        self.state().buffer.len()
    }

    /// How many tasks a claim should ask for now (0: none yet).
    fn want(&self, q: &QueueRt, st: &mut State) -> usize {
        let free = q.slots.available_permits();
        let (finished, busy) =
            (self.finished.load(Ordering::Relaxed), self.busy.load(Ordering::Relaxed));
        let ahead = st.pace.target(finished, busy, q.settings.workers, q.settings.prefetch);
        let target = free + ahead;
        let have = st.buffer.len() + st.inflight;
        let need = target.saturating_sub(have);
        // Idle workers and nothing held: claim whatever is needed now. Otherwise wait until
        // half the target is missing, so claims stay large.
        let least = match st.buffer.is_empty() && free > 0 {
            true => 1,
            false => (target / 2).max(1),
        };
        match need >= least {
            true => need.min(MAX_CLAIM),
            false => 0,
        }
    }

    /// Wakes the feeders when a claim is due.
    fn poke(&self, q: &QueueRt) {
        let due = {
            let mut st = self.state();
            self.want(q, &mut st) > 0
        };
        if due {
            self.demand.notify_waiters();
        }
    }
}

/// One feeder of `q` until shutdown: reserve what the queue needs, claim it, hand it over.
pub(crate) async fn feed_loop(inner: Arc<Inner>, q: Arc<QueueRt>, execs: TaskTracker, n: usize) {
    let stop = inner.shutting_down.clone();
    loop {
        let Some(want) = reserve(&q, &stop, n).await else { return };
        let started = Instant::now();
        let claim = match n {
            0 => crate::claim::dequeue(&inner, &q, want, &stop).await,
            _ => try_dequeue(&inner, &q, want, &stop).await,
        };
        match claim {
            Claim::Tasks(tasks) => deliver(&inner, &q, &execs, want, tasks, started.elapsed()),
            Claim::Retry => release(&q, want),
            Claim::Stop => {
                release(&q, want);
                return;
            }
        }
    }
}

/// Waits until a claim is due (feeder `n` > 0: and a backlog is known); reserves its size.
async fn reserve(q: &QueueRt, stop: &CancellationToken, n: usize) -> Option<usize> {
    loop {
        let mut notified = pin!(q.ahead.demand.notified());
        notified.as_mut().enable();
        {
            let mut st = q.ahead.state();
            if n == 0 || st.backlog {
                let want = q.ahead.want(q, &mut st);
                if want > 0 {
                    st.inflight += want;
                    return Some(want);
                }
            }
        }
        tokio::select! {
            () = notified => {}
            () = stop.cancelled() => return None,
        }
    }
}

fn release(q: &QueueRt, want: usize) {
    {
        let mut st = q.ahead.state();
        st.inflight = st.inflight.saturating_sub(want);
    }
    q.ahead.demand.notify_waiters();
}

/// One `try_dequeue_many` (a backlog is known; an empty answer ends it).
async fn try_dequeue(inner: &Inner, q: &QueueRt, max: usize, stop: &CancellationToken) -> Claim {
    let queues = [q.name.as_str()];
    let claimed = tokio::select! {
        r = inner.broker.try_dequeue_many(&queues, max) => r,
        () = stop.cancelled() => return Claim::Stop,
    };
    match claimed {
        Ok(tasks) => Claim::Tasks(tasks),
        Err(e) => claim_failed(q, &e, stop).await,
    }
}

/// Hands claimed tasks to the buffer and starts as many as there are free workers.
fn deliver(
    inner: &Arc<Inner>,
    q: &Arc<QueueRt>,
    execs: &TaskTracker,
    want: usize,
    tasks: Vec<Task>,
    took: Duration,
) {
    let renewed = inner.clock.now_ms();
    {
        let mut st = q.ahead.state();
        st.inflight = st.inflight.saturating_sub(want);
        let full = tasks.len() >= want;
        st.backlog = full;
        if full {
            st.pace.claimed(took);
        }
        for task in tasks {
            hold(&mut st.buffer, Held { task, renewed });
        }
    }
    q.ahead.demand.notify_waiters();
    pump(inner, q, execs);
}

/// Puts `held` into the buffer in claim order ([`Task::claim_order`]). Two claims in flight
/// can land in either order (and the one that started later can hold the better tasks), so a
/// landing claim is merged, not appended: a worker always starts the best task held. Claims of
/// a backlog take later tasks than the ones held, so the common case is one comparison and a
/// push at the back.
fn hold(buffer: &mut VecDeque<Held>, held: Held) {
    let key = held.task.claim_order();
    match buffer.back() {
        Some(last) if last.task.claim_order() > key => {
            let at = buffer.partition_point(|h| h.task.claim_order() <= key);
            buffer.insert(at, held);
        }
        _ => buffer.push_back(held),
    }
}

/// Starts held tasks while workers are free (none once shutdown began).
pub(crate) fn pump(inner: &Arc<Inner>, q: &Arc<QueueRt>, execs: &TaskTracker) {
    loop {
        let task = {
            let mut st = q.ahead.state();
            if inner.shutting_down.is_cancelled() || st.buffer.is_empty() {
                break;
            }
            let Ok(slot) = q.slots.clone().try_acquire_owned() else { break };
            match st.buffer.pop_front() {
                Some(held) => (held.task, slot),
                None => break,
            }
        };
        let (task, slot) = task;
        let run = worker(inner.clone(), q.clone(), execs.clone(), task, slot);
        execs.spawn(killable(inner.kill.clone(), run));
    }
}

/// One worker: runs `task`, then the next held task while there is one, then frees its slot.
async fn worker(
    inner: Arc<Inner>,
    q: Arc<QueueRt>,
    execs: TaskTracker,
    mut task: Task,
    slot: OwnedSemaphorePermit,
) {
    loop {
        let started = Instant::now();
        crate::execute::execute(inner.clone(), q.clone(), task, None).await;
        let busy = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        q.ahead.busy.fetch_add(busy, Ordering::Relaxed);
        q.ahead.finished.fetch_add(1, Ordering::Relaxed);
        let next = {
            let mut st = q.ahead.state();
            match inner.shutting_down.is_cancelled() {
                true => None,
                false => st.buffer.pop_front(),
            }
        };
        // A worker that stops sizes the next claim only once its slot is free (below): sized
        // now, while it still counts as busy, the claim would leave its slot to a second claim
        // in flight beside it, and two claims can land in either order.
        let Some(held) = next else { break };
        task = held.task;
        q.ahead.poke(&q);
    }
    drop(slot);
    q.ahead.demand.notify_waiters();
    // A claim may have landed while this worker still held its slot.
    pump(&inner, &q, &execs);
}

/// Renews the leases of tasks held longer than a heartbeat period, every period, until
/// shutdown (a round in progress finishes, so every held task is back before shutdown
/// requeues them).
pub(crate) async fn keeper(inner: Arc<Inner>, q: Arc<QueueRt>, execs: TaskTracker) {
    let period = (q.settings.lease_ttl / 3).max(Duration::from_millis(1));
    let mut ticker = inner.clock.ticker(period);
    loop {
        tokio::select! {
            () = ticker.tick() => {}
            () = inner.shutting_down.cancelled() => return,
        }
        let now = inner.clock.now_ms();
        let due: VecDeque<Held> = {
            let mut st = q.ahead.state();
            let (due, keep): (VecDeque<Held>, VecDeque<Held>) = std::mem::take(&mut st.buffer)
                .into_iter()
                .partition(|h| now.duration_since(h.renewed) >= period);
            st.buffer = keep;
            due
        };
        if due.is_empty() {
            continue;
        }
        let mut back = Vec::with_capacity(due.len());
        for mut held in due {
            let (id, token) = (&held.task.id, &held.task.lease_token);
            match inner.broker.heartbeat(id, token).await {
                Ok(()) => {
                    held.renewed = inner.clock.now_ms();
                    back.push(held);
                }
                Err(e) if e.is(ErrorKind::Canceled) => cancel_held(&inner, &q, &held.task).await,
                Err(e) if e.is(ErrorKind::LeaseLost) || e.is(ErrorKind::NotFound) => {
                    q.metrics.lease_lost.increment(1);
                    tracing::warn!(task = %id, "a held task's lease was lost; the reaper owns it");
                }
                Err(e) => {
                    tracing::warn!(task = %id, error = %chain_text(&e),
                        "heartbeat of a held task failed (tolerated)");
                    back.push(held);
                }
            }
        }
        {
            let mut st = q.ahead.state();
            for held in back {
                hold(&mut st.buffer, held);
            }
        }
        pump(&inner, &q, &execs);
    }
}

/// A cancel made through this runtime: when task `id` is held here it leaves the buffer and is
/// finished as cancelled without running (the broker already recorded the cancel request).
pub(crate) async fn cancel_if_held(inner: &Inner, id: &str) {
    for q in inner.queues.values() {
        let held = {
            let mut st = q.ahead.state();
            let at = st.buffer.iter().position(|h| h.task.id == id);
            at.and_then(|at| st.buffer.remove(at))
        };
        if let Some(held) = held {
            cancel_held(inner, q, &held.task).await;
            // The buffer shrank: a claim may be due.
            q.ahead.poke(q);
            return;
        }
    }
}

/// A held task cancelled meanwhile: finished as cancelled without running.
async fn cancel_held(inner: &Inner, q: &QueueRt, task: &Task) {
    let (id, token) = (task.id.as_str(), task.lease_token.as_str());
    match write_with_retry("finish_canceled", || inner.broker.finish_canceled(id, token)).await {
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
    let held: Vec<Held> = q.ahead.state().buffer.drain(..).collect();
    let mut requeued = 0;
    for chunk in held.chunks(REQUEUE_PARALLEL) {
        let mut set = tokio::task::JoinSet::new();
        for h in chunk {
            let (broker, id, token) =
                (inner.broker.clone(), h.task.id.clone(), h.task.lease_token.clone());
            set.spawn(async move {
                let r = write_with_retry("requeue", || broker.requeue(&id, &token)).await;
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
                    let lost = e.is(ErrorKind::LeaseLost) || e.is(ErrorKind::NotFound);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_follows_the_capacity_and_the_cap() {
        const MS: u64 = 1_000_000;
        let mut pace = Pace::default();
        pace.claimed(Duration::from_millis(5));
        // 1,000 finished, 0.1 ms each, one worker: 10,000/s × 10 ms window = 100.
        let t = pace.target(1_000, 100 * MS, 1, 512);
        assert!((99..=101).contains(&t), "{t}");
        assert_eq!(pace.target(1_000, 100 * MS, 1, 0), 0, "cap 0: never ahead");
        let mut slow = Pace::default();
        slow.claimed(Duration::from_millis(5));
        assert_eq!(slow.target(4, 1_000 * MS, 1, 512), 0, "4/s handlers hold nothing ahead");
        let mut many = Pace::default();
        many.claimed(Duration::from_millis(5));
        // 250 ms handlers on 400 workers: 1,600/s × 10 ms = 16.
        let t = many.target(4, 1_000 * MS, 400, 512);
        assert!((15..=16).contains(&t), "capacity counts every worker: {t}");
        let mut fast = Pace::default();
        fast.claimed(Duration::from_millis(20));
        assert_eq!(fast.target(1_000_000, 1_000 * MS, 1, 512), 512, "capped by prefetch");
    }

    #[test]
    fn one_at_a_time_claims_do_not_hide_fast_handlers() {
        // Claim-and-start cycles of 10 ms (a loaded machine) around 20 µs handlers: the
        // observed finish rate (100/s × 2 ms window) would hold nothing ahead.
        let mut pace = Pace::default();
        pace.claimed(Duration::from_micros(500));
        let t = pace.target(5, 100_000, 1, 512);
        assert!((99..=100).contains(&t), "50,000/s capacity × 2 ms: {t}");
        // Nothing finished since (the one worker blocks): the estimate stands.
        assert_eq!(pace.target(5, 100_000, 1, 512), t);
    }

    #[test]
    fn landing_claims_merge_in_claim_order() {
        let held = |id: &str, priority: i16, run_at: i64| Held {
            task: Task {
                id: id.into(),
                priority,
                run_at: Timestamp::from_millis(run_at),
                ..Task::default()
            },
            renewed: Timestamp::ZERO,
        };
        let mut buffer = VecDeque::new();
        // A later claim lands first with the worse task; the earlier one brings the better
        // ones; a backlog claim appends; equal priority and time fall back to the id.
        for h in [
            held("late", 5, 10),
            held("plain", 0, 20),
            held("urgent", -5, 30),
            held("next", 5, 40),
            held("b", 0, 20),
            held("a", 0, 20),
        ] {
            hold(&mut buffer, h);
        }
        let ids: Vec<&str> = buffer.iter().map(|h| h.task.id.as_str()).collect();
        assert_eq!(ids, ["urgent", "a", "b", "plain", "late", "next"]);
    }
}
