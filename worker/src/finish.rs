//! The final write of an execution (runtime spec §12.4 step 7), in one place: [`classify`]
//! reads what the run left (first match wins: lease lost ⇒ nothing; released by a saved step
//! ⇒ nothing more; user-cancelled ⇒ `finish_canceled`; success ⇒ ack or save the step;
//! shutdown-interrupted ⇒ `requeue`; else the error's kind: skip, throttled with its
//! retry-after, business with back-off), [`settle`] writes it — inline, or an ack through the
//! completer — and counts it: metrics, the log line, the shutdown report's ending, and the
//! wake-up of local waits. A write that finds the lease lost or the task gone leaves the task
//! to the reaper; one the broker refuses as invalid fails the task at once.

use std::sync::Arc;
use std::time::Duration;

use taskgate::{AckItem, ErrorKind, FailKind, Failure, RetryAt, Step, Task};

use crate::completer::Done;
use crate::error::chain_text;
use crate::inner::Inner;
use crate::queue::QueueRt;
use crate::retry::write_with_retry;
use crate::running::{Exec, INTERRUPTED, LEASE_LOST, RELEASED, USER_CANCELLED};
use crate::shutdown::Ended;
use crate::{FailureKind, JobError};

/// What a successful handler run asks the runtime to write.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Ack with this result.
    Done(Option<Vec<u8>>),
    /// Save this checkpoint and run again later (§E3).
    Step(Step),
}

/// One final write.
#[derive(Debug)]
pub(crate) enum Write {
    /// Ack with this result.
    Ack(Option<Vec<u8>>),
    /// Save this checkpoint (the task runs again after its delay).
    Step(Step),
    /// The handler's failure: retried after `retry_in`, or final (`None`).
    Fail { failure: Failure, retry_in: Option<Duration> },
    /// Failed at once, never retried: no handler for the type, or a result or checkpoint the
    /// broker refused.
    Reject(Failure),
    /// Finished as cancelled.
    Cancel,
    /// Back to `pending` with no counter changed (shutdown).
    Requeue,
}

/// What an execution's end asks of the final write.
#[derive(Debug)]
pub(crate) enum Ending {
    /// Write this.
    Write(Write),
    /// The lease is gone: the reaper owns the task, nothing is written.
    LeaseLost,
    /// The handler released the task itself (a saved step): nothing more is written.
    Released,
    /// Abandoned without an interrupt (cannot happen: abandoning follows the interrupt).
    Nothing,
}

impl Write {
    /// The broker call's name, as logs say it.
    fn op(&self) -> &'static str {
        match self {
            Write::Ack(_) => "ack",
            Write::Step(_) => "save_step",
            Write::Fail { .. } | Write::Reject(_) => "fail",
            Write::Cancel => "finish_canceled",
            Write::Requeue => "requeue",
        }
    }
}

/// True when a write's error means the lease is gone (lost, or the task no longer exists):
/// the reaper owns the task and this process writes nothing more for it.
pub(crate) fn lease_gone(e: &taskgate::Error) -> bool {
    e.is(ErrorKind::LeaseLost) || e.is(ErrorKind::NotFound)
}

/// The final write of one execution of `task`: classified, written, counted.
pub(crate) async fn finish(
    inner: &Inner,
    q: &Arc<QueueRt>,
    exec: &Exec,
    task: &Task,
    outcome: Option<Result<Outcome, JobError>>,
) {
    let retry_delay = &*inner.retry_delay;
    let ending = classify(exec, task, outcome, inner.config.throttled_max, retry_delay);
    settle(inner, q, task, ending, exec.has(INTERRUPTED)).await;
}

/// A task of a type nobody here handles: dead letter at once (replayable).
pub(crate) async fn no_handler(inner: &Inner, q: &Arc<QueueRt>, task: &Task) {
    let message = format!("no handler registered for task type: {}", task.task_type);
    tracing::warn!("{message}");
    settle(inner, q, task, Ending::Write(Write::Reject(Failure::skip(message))), false).await;
}

/// What the run left, as the final write reads it: first match wins (runtime spec §12.4
/// step 7). `outcome` is `None` when the handler was abandoned.
pub(crate) fn classify(
    exec: &Exec,
    task: &Task,
    outcome: Option<Result<Outcome, JobError>>,
    throttled_max: u32,
    retry_delay: &dyn Fn(u32) -> Duration,
) -> Ending {
    if exec.has(LEASE_LOST) {
        return Ending::LeaseLost;
    }
    if exec.has(RELEASED) {
        return Ending::Released;
    }
    if exec.has(USER_CANCELLED) && exec.cancel.is_cancelled() {
        return Ending::Write(Write::Cancel);
    }
    Ending::Write(match outcome {
        Some(Ok(Outcome::Done(result))) => Write::Ack(result),
        Some(Ok(Outcome::Step(step))) => Write::Step(step),
        _ if exec.has(INTERRUPTED) => Write::Requeue,
        Some(Err(e)) => failed(task, &e, throttled_max, retry_delay),
        None => return Ending::Nothing,
    })
}

/// A handler error's failure: skip first, then throttled (final once the task was throttled
/// `throttled_max` times), else a business failure retried after the back-off of the
/// claim-time attempts (final once the retries are used up).
fn failed(
    task: &Task,
    e: &JobError,
    throttled_max: u32,
    retry_delay: &dyn Fn(u32) -> Duration,
) -> Write {
    let message = storable(e.message());
    let (kind, delay, is_final) = match e.kind() {
        FailureKind::Skip => return Write::Fail { failure: Failure::skip(message), retry_in: None },
        FailureKind::Throttled { retry_after } => {
            (FailKind::Throttled, retry_after, task.throttled + 1 >= throttled_max)
        }
        FailureKind::Retry => {
            (FailKind::Business, retry_delay(task.attempts), task.attempts >= task.max_retry)
        }
    };
    // The broker adds the delay to its own clock inside the fail's transaction (the server's
    // for PostgreSQL and MySQL), so a worker whose clock is off never shifts a retry.
    let failure = Failure::new(kind, message, RetryAt::After(delay));
    Write::Fail { failure, retry_in: (!is_final).then_some(delay) }
}

/// Writes and counts `ending` for `task`; `after_grace` when shutdown's grace ran out while
/// it ran (the shutdown report). Wakes local waits once something was written.
pub(crate) async fn settle(
    inner: &Inner,
    q: &Arc<QueueRt>,
    task: &Task,
    ending: Ending,
    after_grace: bool,
) {
    let write = match ending {
        Ending::Write(write) => write,
        Ending::LeaseLost => {
            q.metrics.lease_lost.increment(1);
            tracing::warn!("lease lost: the reaper owns the task; nothing written");
            return inner.ended(Ended::LeaseLost, 1);
        }
        Ending::Released => return inner.ended(Ended::Finished { after_grace }, 1),
        Ending::Nothing => return,
    };
    let (id, token) = (task.id.as_str(), task.lease_token.as_str());
    let write = match write {
        Write::Ack(result) => {
            let item = AckItem { id: id.to_owned(), token: token.to_owned(), result };
            let done = Done { item, queue: q.clone(), after_grace };
            // Handed to the batch: the batching task writes and counts it.
            let Some(done) = inner.completer.hand_over(done).await else { return };
            Write::Ack(done.item.result)
        }
        write => write,
    };
    let written = self::write(inner, id, token, &write).await;
    count(inner, q, id, token, &write, after_grace, written).await;
    inner.finished();
}

/// Counts one ack the batching task wrote (`written`: its own result in the batch).
pub(crate) async fn acked(inner: &Inner, done: &Done, written: taskgate::Result<()>) {
    let (id, token) = (done.item.id.as_str(), done.item.token.as_str());
    // Only the kind of write matters to the count: the result is in the batch.
    count(inner, &done.queue, id, token, &Write::Ack(None), done.after_grace, written).await;
}

/// Runs one final write on the broker, retrying storage failures.
pub(crate) async fn write(
    inner: &Inner,
    id: &str,
    token: &str,
    write: &Write,
) -> taskgate::Result<()> {
    let (broker, op) = (&inner.broker, write.op());
    match write {
        Write::Ack(result) => write_with_retry(op, || broker.ack(id, token, result.clone())).await,
        Write::Step(step) => write_with_retry(op, || broker.save_step(id, token, step.clone())).await,
        Write::Fail { failure, .. } | Write::Reject(failure) => {
            write_with_retry(op, || broker.fail(id, token, failure.clone())).await
        }
        Write::Cancel => write_with_retry(op, || broker.finish_canceled(id, token)).await,
        Write::Requeue => write_with_retry(op, || broker.requeue(id, token)).await,
    }
}

/// Counts a written (or refused) final write. A result or checkpoint the broker refused as
/// invalid fails the task at once instead of running it again after every lease expiry; a
/// step refused because a cancel was requested was saved and the task cancelled.
async fn count(
    inner: &Inner,
    q: &QueueRt,
    id: &str,
    token: &str,
    write: &Write,
    after_grace: bool,
    written: taskgate::Result<()>,
) {
    match (write, written) {
        (Write::Step(_), Err(e)) if e.is(ErrorKind::Canceled) => {
            q.metrics.canceled.increment(1);
            tracing::info!("cancel requested: the step was saved and the task cancelled");
            inner.ended(Ended::Finished { after_grace }, 1);
        }
        (Write::Ack(_) | Write::Step(_), Err(e)) if e.is(ErrorKind::InvalidInput) => {
            let what = if matches!(write, Write::Ack(_)) { "result" } else { "step" };
            let failure = Failure::skip(storable(&format!("{what} rejected: {e}")));
            tracing::warn!(task = id, error = %failure.message, "failed");
            let reject = Write::Reject(failure);
            let written = self::write(inner, id, token, &reject).await;
            tally(inner, q, id, &reject, after_grace, written);
        }
        (write, written) => tally(inner, q, id, write, after_grace, written),
    }
}

/// Counts a final write that landed, or says why it did not: a lost lease (the reaper owns the
/// task) or a storage failure (the task runs again after its lease expires).
fn tally(
    inner: &Inner,
    q: &QueueRt,
    id: &str,
    write: &Write,
    after_grace: bool,
    written: taskgate::Result<()>,
) {
    let finished = Ended::Finished { after_grace };
    let (op, e) = match written {
        Ok(()) => return landed(inner, q, write, finished),
        Err(e) => (write.op(), e),
    };
    if lease_gone(&e) {
        q.metrics.lease_lost.increment(1);
        let owner = match write {
            Write::Ack(_) => "the task runs again",
            _ => "the reaper owns the task",
        };
        tracing::warn!(task = id, "{op} found the lease lost; {owner}");
        inner.ended(Ended::LeaseLost, 1);
    } else {
        tracing::error!(task = id, error = %chain_text(&e),
            "{op} failed; the task runs again after its lease expires");
        inner.ended(Ended::WriteFailed, 1);
    }
}

/// Counts a final write that landed.
fn landed(inner: &Inner, q: &QueueRt, write: &Write, finished: Ended) {
    let metrics = &q.metrics;
    let ended = match write {
        Write::Ack(_) => {
            metrics.completed.increment(1);
            finished
        }
        Write::Step(_) => {
            metrics.steps.increment(1);
            finished
        }
        Write::Fail { failure, retry_in: None } => {
            metrics.failed.increment(1);
            tracing::error!(error = %failure.message, "failed for good: no retry left");
            finished
        }
        Write::Fail { failure, retry_in: Some(delay) } => {
            metrics.retried.increment(1);
            let retry_in = crate::duration::format(*delay);
            tracing::warn!(error = %failure.message, %retry_in, "failed; retrying");
            finished
        }
        Write::Reject(_) => {
            metrics.failed.increment(1);
            finished
        }
        Write::Cancel => {
            metrics.canceled.increment(1);
            tracing::info!("cancelled");
            finished
        }
        Write::Requeue => {
            metrics.requeued.increment(1);
            tracing::info!("interrupted by shutdown; requeued");
            Ended::Requeued
        }
    };
    inner.ended(ended, 1);
}

/// An error text as a store keeps it: a NUL (which no backend stores, contract §E7.3) becomes
/// U+FFFD, so a handler's error is never refused for its text.
fn storable(message: &str) -> String {
    message.replace('\0', "\u{fffd}")
}
