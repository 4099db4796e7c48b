//! The token-checked writes of a running task other than ack (fail, finish_canceled, requeue,
//! heartbeat, save_step; contract §4.1, extensions §E3, §E8), cancel, and pausing a queue.
//! Ack, the hot path, has its own module ([`super::ack`]).

use taskgate::decide::{fail_outcome, texts};
use taskgate::{Error, Failure, Result, Status, Step};

use super::propagate::propagate;
use super::{check_token, finalize, lock_task, release, write_row, Also};
use crate::row::TaskRow;
use crate::tx::{Tx, TxFail};
use crate::Value;

/// Locks `id` and checks `token`; returns the row.
async fn locked(tx: &mut Tx<'_>, id: &str, token: &str) -> Result<TaskRow, TxFail> {
    let row = lock_task(tx, id).await?;
    check_token(id, row.as_ref(), token)?;
    row.ok_or_else(|| TxFail::Op(Error::not_found(id)))
}

/// Fail (contract §4.1).
pub(crate) async fn fail(
    tx: &mut Tx<'_>,
    id: &str,
    token: &str,
    failure: &Failure,
) -> Result<(), TxFail> {
    let mut row = locked(tx, id, token).await?;
    let now = tx.now().await?;
    let t = &row.task;
    let out =
        fail_outcome(t.attempts, t.max_retry, t.throttled, tx.opts.throttled_max, failure, now);
    row.task.attempts = out.attempts;
    row.task.throttled = out.throttled;
    row.task.last_error = out.last_error;
    if out.status == Status::Failed {
        finalize(&mut row, Status::Failed, now)?;
    } else {
        taskgate::transition(row.task.status, out.status)?;
        row.task.status = out.status;
        row.task.run_at = out.run_at.unwrap_or(now);
        release(&mut row);
    }
    write_row(tx, &row, Also::Nothing).await?;
    tx.snapshot(&row.task);
    if out.status == Status::Failed {
        // Claimers wake only if propagation made a child claimable.
        propagate(tx, vec![(row.task.id.clone(), Status::Failed)]).await?;
    } else {
        tx.wake();
    }
    Ok(())
}

/// Cancel (contract §3.4): running ⇒ flag only; otherwise canceled and propagated.
pub(crate) async fn cancel(tx: &mut Tx<'_>, id: &str) -> Result<(), TxFail> {
    let mut row = lock_task(tx, id).await?.ok_or_else(|| Error::not_found(id))?;
    let status = row.task.status;
    if status.is_terminal() {
        return Err(Error::AlreadyFinal { id: id.to_owned(), status }.into());
    }
    if status == Status::Running {
        row.task.cancel_requested = true;
        return write_row(tx, &row, Also::Nothing).await;
    }
    cancel_row(tx, row).await
}

/// Cancels a non-running row ("canceled"), writes it and propagates.
async fn cancel_row(tx: &mut Tx<'_>, mut row: TaskRow) -> Result<(), TxFail> {
    let now = tx.now().await?;
    finalize(&mut row, Status::Canceled, now)?;
    row.task.last_error = texts::CANCELED.to_owned();
    write_row(tx, &row, Also::Nothing).await?;
    tx.snapshot(&row.task);
    propagate(tx, vec![(row.task.id.clone(), Status::Canceled)]).await
}

/// FinishCanceled: the worker's final write for a cancelled task.
pub(crate) async fn finish_canceled(tx: &mut Tx<'_>, id: &str, token: &str) -> Result<(), TxFail> {
    let row = locked(tx, id, token).await?;
    cancel_row(tx, row).await
}

/// Requeue: back to pending, nothing counted, `run_at` kept.
pub(crate) async fn requeue(tx: &mut Tx<'_>, id: &str, token: &str) -> Result<(), TxFail> {
    let mut row = locked(tx, id, token).await?;
    taskgate::transition(row.task.status, Status::Pending)?;
    row.task.status = Status::Pending;
    row.task.cancel_requested = false;
    release(&mut row);
    write_row(tx, &row, Also::Nothing).await?;
    tx.snapshot(&row.task);
    tx.wake();
    Ok(())
}

/// Heartbeat: renews the lease and records the heartbeat's time (the server's, as the lease's);
/// returns whether a cancel was requested (the caller reports `Canceled` after commit, so the
/// renewal sticks).
pub(crate) async fn heartbeat(tx: &mut Tx<'_>, id: &str, token: &str) -> Result<bool, TxFail> {
    let row = locked(tx, id, token).await?;
    let now = tx.now().await?;
    let until = now.saturating_add(tx.opts.ttl(&row.task.queue));
    let sql = tx.core.sql("UPDATE {tasks} SET lease_until = ?, heartbeat_at = ? WHERE id = ?");
    tx.exec(&sql, &[Value::from(until), Value::from(now), Value::from(id)]).await?;
    Ok(row.task.cancel_requested)
}

/// save_step (§E3); returns whether the task was cancelled instead of released.
pub(crate) async fn save_step(
    tx: &mut Tx<'_>,
    id: &str,
    token: &str,
    step: &Step,
) -> Result<bool, TxFail> {
    let mut row = locked(tx, id, token).await?;
    let now = tx.now().await?;
    row.task.cursor.clone_from(&step.cursor);
    row.task.progress = step.progress;
    row.task.message.clone_from(&step.message);
    row.task.steps = row.task.steps.saturating_add(1);
    let canceled = row.task.cancel_requested;
    if canceled {
        finalize(&mut row, Status::Canceled, now)?;
        row.task.last_error = texts::CANCELED.to_owned();
    } else {
        taskgate::transition(row.task.status, Status::Pending)?;
        row.task.status = Status::Pending;
        row.task.attempts = 0;
        row.task.run_at = now.saturating_add(step.delay);
        release(&mut row);
    }
    write_row(tx, &row, Also::Cursor).await?;
    tx.snapshot(&row.task);
    if canceled {
        propagate(tx, vec![(row.task.id.clone(), Status::Canceled)]).await?;
    } else {
        tx.wake();
    }
    Ok(canceled)
}

/// Pauses a queue (idempotent).
pub(crate) async fn pause_queue(tx: &mut Tx<'_>, queue: &str) -> Result<(), TxFail> {
    let now = tx.now().await?;
    let table = format!("{}paused_queues", tx.core.prefix);
    let sql = tx.core.sql_sized("pause", (0, 0), || {
        tx.core.dialect.insert_ignore(&table, "queue, paused_at", "?, ?", "queue")
    });
    tx.exec(&sql, &[Value::from(queue), Value::from(now)]).await?;
    Ok(())
}

/// Resumes a queue and wakes claimers.
pub(crate) async fn resume_queue(tx: &mut Tx<'_>, queue: &str) -> Result<(), TxFail> {
    let sql = tx.core.sql("DELETE FROM {paused} WHERE queue = ?");
    tx.exec(&sql, &[Value::from(queue)]).await?;
    tx.wake();
    Ok(())
}
