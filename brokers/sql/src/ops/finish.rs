//! The token-checked writes of a running task (ack, fail, finish_canceled, requeue, heartbeat,
//! save_step; contract §3.4, extensions §E3, §E8) and cancel.

use taskgate::decide::{fail_outcome, texts};
use taskgate::{AckItem, Error, Failure, Result, Status, Step, Timestamp};

use super::propagate::propagate;
use super::{check_token, finish, lock_task, release, write_row, Also};
use std::sync::Arc;

use crate::core::{args_bytes, Core, Tx, TxFail};
use crate::dialect::placeholders;
use crate::row::TaskRow;
use crate::{Kind, Value};

/// Locks `id` and checks `token`; returns the row.
async fn locked(tx: &mut Tx<'_>, id: &str, token: &str) -> Result<TaskRow, TxFail> {
    let row = lock_task(tx, id).await?;
    check_token(id, row.as_ref(), token)?;
    row.ok_or_else(|| TxFail::Op(Error::not_found(id)))
}

/// Ack of several tasks: one locking read, one set-based UPDATE, then propagation for those
/// with open child edges. Each item gets its own outcome.
///
/// Without a Notify observer there are no snapshots to take, so the locking read returns only
/// what the token check needs (`id, status, lease_token`) instead of every column: a batch of
/// acks does not carry its payloads back over the wire.
pub(crate) async fn ack_many(
    tx: &mut Tx<'_>,
    items: &[AckItem],
) -> std::result::Result<Vec<Result<()>>, TxFail> {
    let mut ids: Vec<&str> = items.iter().map(|i| i.id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    let full = tx.opts.notifier.is_active();
    let (rows, with_children) = lock_with_children(tx, &ids, full).await?;
    let now = tx.now().await?;
    let mut outcomes = Vec::with_capacity(items.len());
    let mut done: Vec<TaskRow> = Vec::new();
    for item in items {
        let row = rows.iter().find(|r| r.task.id == item.id);
        let already = done.iter().any(|r| r.task.id == item.id);
        let outcome = if already && row.is_some() {
            Err(Error::lease_lost(&item.id))
        } else {
            check_token(&item.id, row, &item.token)
        };
        if let (Ok(()), Some(row)) = (&outcome, row) {
            let mut row = row.clone();
            finish(&mut row, Status::Completed, now)?;
            row.task.result.clone_from(&item.result);
            done.push(row);
        }
        outcomes.push(outcome);
    }
    complete_rows(tx, &done, now).await?;
    let finished: Vec<(String, Status)> = done
        .iter()
        .filter(|r| with_children.contains(&r.task.id))
        .map(|r| (r.task.id.clone(), Status::Completed))
        .collect();
    for row in &done {
        tx.snapshot(&row.task);
    }
    propagate(tx, finished).await?;
    Ok(outcomes)
}

/// The ack's locking read of `n` tasks with their `has_children` flag (read from the locked
/// row itself, see [`ack_returning_sql`](super::ack::ack_returning_sql)) and the server's time
/// (piggybacked "now" when the transaction does not know it yet). Arguments: the IDs.
pub(crate) fn ack_lock_sql(core: &Core, n: usize) -> Arc<str> {
    core.sql_sized("ack_lock", (n, 0), || {
        format!(
            "SELECT {{cols}}, has_children, {{now}} FROM {{tasks}} WHERE id IN ({}) \
             ORDER BY id{{lock}}",
            placeholders(n)
        )
    })
}

/// [`ack_lock_sql`] returning only what the token check reads: `id, status, lease_token`,
/// then `has_children` and the server's time. Arguments: the IDs.
pub(crate) fn ack_lock_slim_sql(core: &Core, n: usize) -> Arc<str> {
    core.sql_sized("ack_lock_slim", (n, 0), || {
        format!(
            "SELECT id, status, lease_token, has_children, {{now}} FROM {{tasks}} \
             WHERE id IN ({}) ORDER BY id{{lock}}",
            placeholders(n)
        )
    })
}

/// The ack's write of `n` tasks. Arguments: (id, result) pairs when `results` (else every
/// result is NULL and the pairs are left out), now, the IDs.
pub(crate) fn ack_complete_sql(core: &Core, n: usize, results: bool) -> Arc<str> {
    core.sql_sized("ack_complete", (n, usize::from(results)), || {
        let mut sql = "UPDATE {tasks} SET status = 'completed', result = ".to_owned();
        if results {
            sql.push_str("CASE id");
            sql.push_str(&" WHEN ? THEN ?".repeat(n));
            sql.push_str(" END");
        } else {
            sql.push_str("NULL");
        }
        sql.push_str(", finished_at = ?, lease_token = '', lease_until = 0, ");
        sql.push_str(&format!("cancel_requested = 0 WHERE id IN ({})", placeholders(n)));
        sql
    })
}

/// Locks rows by ID and reports which have open child edges (so propagation is skipped for
/// the common childless task without another round trip). With `full` every column is read;
/// without, the rows hold only ID, status and token (the rest empty).
async fn lock_with_children(
    tx: &mut Tx<'_>,
    ids: &[&str],
    full: bool,
) -> std::result::Result<(Vec<TaskRow>, Vec<String>), TxFail> {
    if ids.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let args: Vec<Value> = ids.iter().map(|id| Value::from(*id)).collect();
    let (raw, flag) = if full {
        let sql = ack_lock_sql(tx.core, ids.len());
        let kinds = super::kinds_plus(&[Kind::Int, Kind::Int]);
        (tx.fetch(&sql, &args, &kinds).await?, crate::row::TASK_COLUMN_COUNT)
    } else {
        let sql = ack_lock_slim_sql(tx.core, ids.len());
        let kinds = [Kind::Text, Kind::Text, Kind::Text, Kind::Int, Kind::Int];
        (tx.fetch(&sql, &args, &kinds).await?, 3)
    };
    if let Some(Value::Int(ms)) = raw.first().and_then(|r| r.get(flag + 1)) {
        tx.set_now(Timestamp::from_millis(*ms));
    }
    let mut rows = Vec::with_capacity(raw.len());
    let mut with_children = Vec::new();
    for r in &raw {
        let row = if full { TaskRow::decode(r)? } else { slim_row(r)? };
        if crate::value::Cols(r).int(flag)? != 0 {
            with_children.push(row.task.id.clone());
        }
        rows.push(row);
    }
    Ok((rows, with_children))
}

/// A row of [`ack_lock_slim_sql`] as a [`TaskRow`] holding its ID, status and token.
fn slim_row(r: &[Value]) -> std::result::Result<TaskRow, TxFail> {
    let c = crate::value::Cols(r);
    let status = c
        .text(1)?
        .parse::<Status>()
        .map_err(|e| TxFail::from(crate::value::DecodeError(format!("bad status in row: {e}"))))?;
    let mut task = taskgate::Task::new("", "").with_id(c.text(0)?);
    task.status = status;
    task.lease_token = c.text(2)?;
    Ok(TaskRow { task, pending_parents: 0, lease_until: 0 })
}

/// Writes `completed` for every row: one statement (results bound per row), or as many as
/// keep each below the server's statement limit when the results are large.
async fn complete_rows(tx: &mut Tx<'_>, rows: &[TaskRow], now: Timestamp) -> Result<(), TxFail> {
    let Some(budget) = tx.core.statement_budget() else {
        return complete_chunk(tx, rows, now).await;
    };
    let mut start = 0;
    let mut bytes = args_bytes(&[Value::from(now)]);
    for (i, r) in rows.iter().enumerate() {
        let id = r.task.id.len() as u64;
        let row_bytes = 2 * id + r.task.result.as_ref().map_or(0, |b| b.len() as u64) + 33;
        if i > start && bytes + row_bytes > budget {
            complete_chunk(tx, &rows[start..i], now).await?;
            (start, bytes) = (i, args_bytes(&[Value::from(now)]));
        }
        bytes += row_bytes;
    }
    complete_chunk(tx, &rows[start..], now).await
}

/// One `UPDATE` completing `rows`.
async fn complete_chunk(tx: &mut Tx<'_>, rows: &[TaskRow], now: Timestamp) -> Result<(), TxFail> {
    if rows.is_empty() {
        return Ok(());
    }
    let n = rows.len();
    let results = rows.iter().any(|r| r.task.result.is_some());
    let sql = ack_complete_sql(tx.core, n, results);
    let mut args = Vec::with_capacity(3 * n + 1);
    if results {
        for r in rows {
            args.extend([Value::from(&r.task.id), Value::opt_bytes(r.task.result.as_deref())]);
        }
    }
    args.push(Value::from(now));
    args.extend(rows.iter().map(|r| Value::from(&r.task.id)));
    tx.exec(&sql, &args).await?;
    Ok(())
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
        finish(&mut row, Status::Failed, now)?;
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
    finish(&mut row, Status::Canceled, now)?;
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

/// Heartbeat: renews the lease; returns whether a cancel was requested (the caller reports
/// `Canceled` after commit, so the renewal sticks).
pub(crate) async fn heartbeat(tx: &mut Tx<'_>, id: &str, token: &str) -> Result<bool, TxFail> {
    let row = locked(tx, id, token).await?;
    let now = tx.now().await?;
    let until = now.saturating_add(tx.opts.ttl(&row.task.queue));
    let sql = tx.core.sql("UPDATE {tasks} SET lease_until = ? WHERE id = ?");
    tx.exec(&sql, &[Value::from(until), Value::from(id)]).await?;
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
        finish(&mut row, Status::Canceled, now)?;
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
