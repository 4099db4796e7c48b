//! Executing one claimed task (runtime spec §12.4): find the handler, run it with automatic
//! heartbeats, then the final write, first match wins: lease lost ⇒ nothing; user-cancelled
//! ⇒ `finish_canceled`; success ⇒ ack (or save the step); shutdown-interrupted ⇒ `requeue`;
//! else the error's kind: skip, throttled with its retry-after, business with back-off.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use taskgate::{AckItem, ErrorKind, FailKind, Failure, Task, Ticker};
use tokio::sync::OwnedSemaphorePermit;
use tracing::Instrument;

use crate::claim::QueueRt;
use crate::completer::Done;
use crate::context::heartbeat_failed;
use crate::error::chain_text;
use crate::handler::{BoxFuture, CatchUnwind, Handler, Outcome};
use crate::inner::{write_with_retry, Inner};
use crate::running::{INTERRUPTED, LEASE_LOST, RELEASED, USER_CANCELLED};
use crate::shutdown::Ended;
use crate::{FailureKind, JobContext, JobError};

/// Runs one claimed task to its final write; the slot is freed when this returns.
pub(crate) async fn execute(
    inner: Arc<Inner>,
    q: Arc<QueueRt>,
    task: Task,
    slot: Option<OwnedSemaphorePermit>,
) {
    let span = tracing::info_span!("taskgate.task", kind = %task.task_type, queue = %task.queue,
        id = %task.id, attempt = task.attempts);
    run(inner, q, task).instrument(span).await;
    drop(slot);
}

async fn run(inner: Arc<Inner>, q: Arc<QueueRt>, task: Task) {
    q.metrics.claimed.increment(1);
    let latency = inner.clock.now_ms().duration_since(task.run_at);
    q.metrics.queue_latency.record(latency.as_secs_f64());
    tracing::debug!(latency_ms = latency.as_millis(), "claimed");
    let Some(handler) = inner.handlers.get(&task.task_type).cloned() else {
        return no_handler(&inner, &q, &task).await;
    };
    let exec = inner.running.register(&task.id);
    q.active.fetch_add(1, Ordering::SeqCst);
    let ctx = JobContext::new(task, exec.clone(), inner.clone());
    let started = Instant::now();
    let outcome = supervise(&inner, &q, &ctx, handler).await;
    q.metrics.run_time.record(started.elapsed().as_secs_f64());
    final_write(&inner, &q, &ctx, outcome).await;
    inner.running.remove(ctx.id(), &exec);
    q.active.fetch_sub(1, Ordering::SeqCst);
}

/// A task of a type nobody here handles: dead letter at once (replayable).
async fn no_handler(inner: &Inner, q: &Arc<QueueRt>, task: &Task) {
    let message = format!("no handler registered for task type: {}", task.task_type);
    tracing::warn!("{message}");
    let failure = Failure::skip(message);
    let written = write_with_retry("fail", || {
        inner.broker.fail(&task.id, &task.lease_token, failure.clone())
    })
    .await;
    if report(inner, q, "fail", &task.id, written) {
        q.metrics.failed.increment(1);
        inner.ended(Ended::Finished { after_grace: false }, 1);
    }
    inner.finished();
}

/// Runs the handler; heartbeats every TTL/3 on the clock unless heartbeats are manual. The
/// in-flight heartbeat is awaited before returning, so none lands after the final write.
/// `None` means the handler was abandoned (still running after shutdown's stop timeout).
async fn supervise(
    inner: &Inner,
    q: &QueueRt,
    ctx: &JobContext,
    handler: Handler,
) -> Option<Result<Outcome, JobError>> {
    let exec = ctx.exec();
    let mut handler = CatchUnwind(handler(ctx.clone()));
    let period = (q.settings.lease_ttl / 3).max(Duration::from_millis(1));
    let mut ticker = (!q.settings.manual_heartbeat).then(|| inner.clock.ticker(period));
    let mut beat: Option<BoxFuture<taskgate::Result<()>>> = None;
    let outcome = loop {
        tokio::select! {
            // A handler that returned wins over everything else, so its result is written
            // even when it returns after the stop timeout (it blocked its thread).
            biased;
            out = &mut handler => break Some(out),
            // Fired only after every execution was interrupted and given the stop timeout.
            () = inner.abandon.cancelled() => break None,
            () = tick(&mut ticker), if beat.is_none() && exec.holds_lease() => {
                let (broker, task) = (inner.broker.clone(), ctx.task());
                let (id, token) = (task.id.clone(), task.lease_token.clone());
                beat = Some(Box::pin(async move { broker.heartbeat(&id, &token).await }));
            }
            r = in_flight(&mut beat) => {
                beat = None;
                heartbeat_done(ctx, r);
            }
        }
    };
    drop(ticker);
    if let Some(b) = beat.take() {
        heartbeat_done(ctx, b.await);
    }
    outcome
}

async fn tick(ticker: &mut Option<Ticker>) {
    match ticker {
        Some(t) => t.tick().await,
        None => std::future::pending().await,
    }
}

async fn in_flight(beat: &mut Option<BoxFuture<taskgate::Result<()>>>) -> taskgate::Result<()> {
    match beat {
        Some(b) => b.await,
        None => std::future::pending().await,
    }
}

fn heartbeat_done(ctx: &JobContext, result: taskgate::Result<()>) {
    if let Err(e) = result {
        let e = heartbeat_failed(ctx.exec(), ctx.id(), e);
        if !e.is(ErrorKind::Canceled) && !e.is(ErrorKind::LeaseLost) {
            tracing::warn!(error = %chain_text(&e), "heartbeat failed (tolerated)");
        }
    }
}

/// The final write, first match wins (runtime spec §12.4 step 7).
async fn final_write(
    inner: &Inner,
    q: &Arc<QueueRt>,
    ctx: &JobContext,
    outcome: Option<Result<Outcome, JobError>>,
) {
    let (exec, task) = (ctx.exec(), ctx.task());
    let (id, token) = (task.id.as_str(), task.lease_token.as_str());
    let after_grace = exec.has(INTERRUPTED);
    let finished = Ended::Finished { after_grace };
    if exec.has(LEASE_LOST) {
        q.metrics.lease_lost.increment(1);
        tracing::warn!("lease lost: the reaper owns the task; nothing written");
        return inner.ended(Ended::LeaseLost, 1);
    }
    if exec.has(RELEASED) {
        return inner.ended(finished, 1);
    }
    if exec.has(USER_CANCELLED) && exec.cancel.is_cancelled() {
        let written =
            write_with_retry("finish_canceled", || inner.broker.finish_canceled(id, token));
        if report(inner, q, "finish_canceled", id, written.await) {
            q.metrics.canceled.increment(1);
            tracing::info!("cancelled");
            inner.ended(finished, 1);
        }
        return inner.finished();
    }
    match outcome {
        Some(Ok(Outcome::Done(result))) => {
            let item = AckItem { id: id.to_owned(), token: token.to_owned(), result };
            let done = Done { item, queue: q.clone(), after_grace };
            inner.completer.complete(inner, done).await;
        }
        Some(Ok(Outcome::Step(step))) => save_step(inner, q, task, step, finished).await,
        _ if after_grace => {
            let written = write_with_retry("requeue", || inner.broker.requeue(id, token));
            if report(inner, q, "requeue", id, written.await) {
                q.metrics.requeued.increment(1);
                tracing::info!("interrupted by shutdown; requeued");
                inner.ended(Ended::Requeued, 1);
            }
            inner.finished();
        }
        Some(Err(e)) => fail(inner, q, task, e).await,
        None => {}
    }
}

async fn save_step(inner: &Inner, q: &QueueRt, task: &Task, step: taskgate::Step, ended: Ended) {
    let written = write_with_retry("save_step", || {
        inner.broker.save_step(&task.id, &task.lease_token, step.clone())
    })
    .await;
    match written {
        Err(e) if e.is(ErrorKind::Canceled) => {
            q.metrics.canceled.increment(1);
            tracing::info!("cancel requested: the step was saved and the task cancelled");
            inner.ended(ended, 1);
        }
        Err(e) if e.is(ErrorKind::InvalidInput) => {
            if reject(inner, q, &task.id, &task.lease_token, "step", &e).await {
                inner.ended(ended, 1);
            }
        }
        written => {
            if report(inner, q, "save_step", &task.id, written) {
                q.metrics.steps.increment(1);
                inner.ended(ended, 1);
            }
        }
    }
    inner.finished();
}

/// A final write the broker refused as invalid (a result or checkpoint over the limits): the
/// task fails at once with the reason, instead of running again after every lease expiry.
/// True when the failure was written.
pub(crate) async fn reject(
    inner: &Inner,
    q: &QueueRt,
    id: &str,
    token: &str,
    what: &str,
    e: &taskgate::Error,
) -> bool {
    let failure = Failure::skip(storable(&format!("{what} rejected: {e}")));
    tracing::warn!(task = id, error = %failure.message, "failed");
    let written = write_with_retry("fail", || inner.broker.fail(id, token, failure.clone())).await;
    let written = report(inner, q, "fail", id, written);
    if written {
        q.metrics.failed.increment(1);
    }
    written
}

/// Classifies a handler error and writes the failure: skip first, then throttled, else a
/// business failure retried after the back-off of the claim-time attempts.
async fn fail(inner: &Inner, q: &QueueRt, task: &Task, e: JobError) {
    let message = storable(e.message());
    let (failure, delay, is_final) = match e.kind() {
        FailureKind::Skip => (Failure::skip(message), Duration::ZERO, true),
        FailureKind::Throttled { retry_after } => (
            Inner::retry_failure(FailKind::Throttled, message, retry_after),
            retry_after,
            task.throttled + 1 >= inner.config.throttled_max,
        ),
        FailureKind::Retry => {
            let delay = (inner.retry_delay)(task.attempts);
            let failure = Inner::retry_failure(FailKind::Business, message, delay);
            (failure, delay, task.attempts >= task.max_retry)
        }
    };
    let written = write_with_retry("fail", || {
        inner.broker.fail(&task.id, &task.lease_token, failure.clone())
    })
    .await;
    if report(inner, q, "fail", &task.id, written) {
        inner.ended(Ended::Finished { after_grace: false }, 1);
        if is_final {
            q.metrics.failed.increment(1);
            tracing::error!(error = %failure.message, "failed for good: no retry left");
        } else {
            q.metrics.retried.increment(1);
            let retry_in = crate::duration::format(delay);
            tracing::warn!(error = %failure.message, %retry_in, "failed; retrying");
        }
    }
    inner.finished();
}

/// Logs a failed final write (and counts it for the shutdown report); true when it
/// succeeded. A lost lease means the reaper owns the task; any other error leaves the task
/// running until its lease expires (it runs again).
pub(crate) fn report(
    inner: &Inner,
    q: &QueueRt,
    what: &str,
    id: &str,
    written: taskgate::Result<()>,
) -> bool {
    match written {
        Ok(()) => true,
        Err(e) if e.is(ErrorKind::LeaseLost) || e.is(ErrorKind::NotFound) => {
            q.metrics.lease_lost.increment(1);
            tracing::warn!(task = id, "{what} found the lease lost; the reaper owns the task");
            inner.ended(Ended::LeaseLost, 1);
            false
        }
        Err(e) => {
            tracing::error!(task = id, error = %chain_text(&e),
                "{what} failed; the task runs again after its lease expires");
            inner.ended(Ended::WriteFailed, 1);
            false
        }
    }
}

/// An error text as a store keeps it: a NUL (which no backend stores, contract §E7.3) becomes
/// U+FFFD, so a handler's error is never refused for its text.
fn storable(message: &str) -> String {
    message.replace('\0', "\u{fffd}")
}
