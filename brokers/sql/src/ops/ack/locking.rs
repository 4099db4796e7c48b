//! The locking ack form (MySQL/MariaDB, a statement limit, a batch naming one ID twice): one
//! locking read, then one set-based `UPDATE`, split below the server's statement limit when
//! results are large.

use std::sync::Arc;

use taskgate::{AckItem, Error, Result, Status, Timestamp};

use crate::core::{args_bytes, Core};
use crate::dialect::placeholders;
use crate::ops::propagate::propagate;
use crate::ops::{check_token, finalize, kinds_plus};
use crate::row::{TaskRow, TASK_COLUMN_COUNT};
use crate::tx::{Tx, TxFail};
use crate::value::{Cols, DecodeError, Kind, Value};

/// The locking-read form: one locking read, one set-based UPDATE, then propagation for those
/// with open child edges. Each item gets its own outcome.
///
/// Without a Notify observer there are no snapshots to take, so the locking read returns only
/// what the token check needs (`id, status, lease_token`) instead of every column: a batch of
/// acks does not carry its payloads back over the wire.
pub(super) async fn ack_locking(
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
            finalize(&mut row, Status::Completed, now)?;
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
        let kinds = kinds_plus(&[Kind::Int, Kind::Int]);
        (tx.fetch(&sql, &args, &kinds).await?, TASK_COLUMN_COUNT)
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
        if Cols(r).int(flag)? != 0 {
            with_children.push(row.task.id.clone());
        }
        rows.push(row);
    }
    Ok((rows, with_children))
}

/// A row of [`ack_lock_slim_sql`] as a [`TaskRow`] holding its ID, status and token.
fn slim_row(r: &[Value]) -> std::result::Result<TaskRow, TxFail> {
    let c = Cols(r);
    let status = c
        .text(1)?
        .parse::<Status>()
        .map_err(|e| TxFail::from(DecodeError(format!("bad status in row: {e}"))))?;
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
