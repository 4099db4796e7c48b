//! The broker operations, written once against [`Tx`](crate::tx::Tx): lock the rows, decide
//! with the core's pure functions, write, propagate. Helpers shared by several operations live
//! here.

pub(crate) mod ack;
pub(crate) mod audit;
pub(crate) mod claim;
pub(crate) mod enqueue;
pub(crate) mod finish;
pub(crate) mod propagate;
pub(crate) mod prune;
pub(crate) mod read;
pub(crate) mod reap;
pub(crate) mod replay;

use taskgate::{Error, ResolvedOptions, Status, Timestamp};

use crate::core::{args_bytes, Core};
use crate::dialect::placeholders;
use crate::row::{TaskRow, TASK_COLUMN_COUNT, TASK_KINDS};
use crate::tx::{Tx, TxFail};
use crate::{Kind, Row, Value};

/// True when a write that is one statement may run as a transaction of its own
/// ([`Adapter::write_one`](crate::Adapter::write_one): the one-statement ack and enqueue):
/// the dialect has `UPDATE … RETURNING`, no statement limit splits writes, no Notify observer
/// needs the rows, writes do not share one writer (SQLite combines them instead), and no test
/// hook waits for a commit to stop at.
pub(crate) fn one_statement_writes(core: &Core, opts: &ResolvedOptions) -> bool {
    core.dialect.update_returning()
        && core.statement_budget().is_none()
        && !opts.notifier.is_active()
        && !core.adapter.shares_writer()
        && !core.has_before_commit_hook()
}

/// Locks and reads one task (`SELECT … FOR UPDATE`; SQLite's transaction already holds the
/// write lock). Piggybacks the server's "now" on the read when the transaction needs it.
pub(crate) async fn lock_task(tx: &mut Tx<'_>, id: &str) -> Result<Option<TaskRow>, TxFail> {
    let rows = if tx.needs_now() {
        let sql = tx.core.sql("SELECT {cols}, COALESCE(?, {now}) FROM {tasks} WHERE id = ?{lock}");
        let args = [tx.core.now_override(tx.opts), Value::from(id)];
        let rows = tx.fetch(&sql, &args, &kinds_plus(&[Kind::Int])).await?;
        if let Some(Value::Int(ms)) = rows.first().and_then(|r| r.get(TASK_COLUMN_COUNT)) {
            tx.set_now(Timestamp::from_millis(*ms));
        }
        rows
    } else {
        let sql = tx.core.sql("SELECT {cols} FROM {tasks} WHERE id = ?{lock}");
        tx.fetch(&sql, &[Value::from(id)], &TASK_KINDS).await?
    };
    rows.first().map(|r| TaskRow::decode(r)).transpose().map_err(TxFail::from)
}

/// Locks and reads several tasks by ID (in ID order, so concurrent writers lock alike).
pub(crate) async fn lock_tasks(tx: &mut Tx<'_>, ids: &[&str]) -> Result<Vec<TaskRow>, TxFail> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = tx.core.sql_sized("lock_tasks", (ids.len(), 0), || {
        format!(
            "SELECT {{cols}} FROM {{tasks}} WHERE id IN ({}) ORDER BY id{{lock}}",
            placeholders(ids.len())
        )
    });
    let args: Vec<Value> = ids.iter().map(|id| Value::from(*id)).collect();
    let rows = tx.fetch(&sql, &args, &TASK_KINDS).await?;
    decode_all(&rows)
}

/// Decodes task rows.
pub(crate) fn decode_all(rows: &[Row]) -> Result<Vec<TaskRow>, TxFail> {
    rows.iter().map(|r| TaskRow::decode(r).map_err(TxFail::from)).collect()
}

/// Decodes task rows, moving their values (claims: the payloads are not copied).
pub(crate) fn decode_owned(rows: Vec<Row>) -> Result<Vec<TaskRow>, TxFail> {
    rows.into_iter().map(|r| TaskRow::decode_owned(r).map_err(TxFail::from)).collect()
}

/// The task kinds followed by `extra` columns.
pub(crate) fn kinds_plus(extra: &[Kind]) -> Vec<Kind> {
    TASK_KINDS.iter().chain(extra).copied().collect()
}

/// Reads `(id, status)` of the given IDs, locking them (in ID order), waiting for locks.
pub(crate) async fn lock_statuses(
    tx: &mut Tx<'_>,
    ids: &[&str],
) -> Result<Vec<(String, Status)>, TxFail> {
    statuses_locked(tx, ids, false).await
}

/// Like [`lock_statuses`], but leaves out the rows another transaction holds (`SKIP LOCKED`).
pub(crate) async fn lock_statuses_skip(
    tx: &mut Tx<'_>,
    ids: &[&str],
) -> Result<Vec<(String, Status)>, TxFail> {
    statuses_locked(tx, ids, true).await
}

async fn statuses_locked(
    tx: &mut Tx<'_>,
    ids: &[&str],
    skip_held: bool,
) -> Result<Vec<(String, Status)>, TxFail> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let (name, clause) = if skip_held {
        ("lock_statuses_skip", "{skip_locked}")
    } else {
        ("lock_statuses", "{lock}")
    };
    let sql = tx.core.sql_sized(name, (ids.len(), 0), || {
        format!(
            "SELECT id, status FROM {{tasks}} WHERE id IN ({}) ORDER BY id{clause}",
            placeholders(ids.len())
        )
    });
    let args: Vec<Value> = ids.iter().map(|id| Value::from(*id)).collect();
    let rows = tx.fetch(&sql, &args, &[Kind::Text, Kind::Text]).await?;
    rows.iter().map(|r| id_status(r)).collect()
}

/// Sets `has_children` on the parents of new not-done edges (the non-terminal ones of
/// `parents`), which the caller has locked: an ack reads the flag from the row it completes
/// (see [`ack::ack_returning_sql`]). Over-marking is harmless; a missed mark is a lost wake-up.
pub(crate) async fn mark_has_children(
    tx: &mut Tx<'_>,
    parents: &[(&str, Status)],
) -> Result<(), TxFail> {
    let open: Vec<&str> =
        parents.iter().filter(|(_, s)| !s.is_terminal()).map(|(id, _)| *id).collect();
    if open.is_empty() {
        return Ok(());
    }
    let sql = if tx.core.adapter.row_locks_are_local() {
        // Locks are local (Galera): every open parent's row is written — has_children moves
        // between 1 and 2, both "has children" — so that the parent's final write on another
        // node and this enqueue touch a common row and certification orders them; with the
        // row only locked, the parent could finish there without seeing this child's edge.
        tx.core.sql_sized("touch_parents", (open.len(), 0), || {
            format!(
                "UPDATE {{tasks}} SET has_children = IF(has_children = 1, 2, 1) WHERE id IN ({})",
                placeholders(open.len())
            )
        })
    } else {
        tx.core.sql_sized("mark_has_children", (open.len(), 0), || {
            format!(
                "UPDATE {{tasks}} SET has_children = 1 WHERE id IN ({}) AND has_children = 0",
                placeholders(open.len())
            )
        })
    };
    let args: Vec<Value> = open.iter().map(|id| Value::from(*id)).collect();
    tx.exec(&sql, &args).await?;
    Ok(())
}

/// Decodes an `(id, status)` row.
pub(crate) fn id_status(row: &[Value]) -> Result<(String, Status), TxFail> {
    let c = crate::value::Cols(row);
    let status = c
        .text(1)?
        .parse::<Status>()
        .map_err(|e| TxFail::from(crate::value::DecodeError(format!("bad status in row: {e}"))))?;
    Ok((c.text(0)?, status))
}

/// Which optional columns a row write also stores.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Also {
    /// Only the state columns.
    Nothing,
    /// The state columns and `step_cursor` (save_step).
    Cursor,
}

/// Writes a task's mutable state columns back (after the operation decided in Rust).
pub(crate) async fn write_row(tx: &mut Tx<'_>, row: &TaskRow, also: Also) -> Result<(), TxFail> {
    const STATE: &str = "UPDATE {tasks} SET status = ?, last_error = ?, attempts = ?, \
        lease_lost = ?, throttled = ?, run_at = ?, pending_parents = ?, lease_token = ?, \
        lease_until = ?, cancel_requested = ?, started_at = ?, finished_at = ?, progress = ?, \
        message = ?, steps = ?, resumes = ? WHERE id = ?";
    const WITH_CURSOR: &str = "UPDATE {tasks} SET status = ?, last_error = ?, attempts = ?, \
        lease_lost = ?, throttled = ?, run_at = ?, pending_parents = ?, lease_token = ?, \
        lease_until = ?, cancel_requested = ?, started_at = ?, finished_at = ?, progress = ?, \
        message = ?, steps = ?, resumes = ?, step_cursor = ? WHERE id = ?";
    let t = &row.task;
    let ms = |ts: Option<Timestamp>| Value::Int(ts.map_or(0, Timestamp::as_millis));
    let mut args = vec![
        Value::from(t.status.as_str()),
        Value::from(&t.last_error),
        Value::from(t.attempts),
        Value::from(t.lease_lost),
        Value::from(t.throttled),
        Value::from(t.run_at),
        Value::from(row.pending_parents),
        Value::from(&t.lease_token),
        Value::Int(row.lease_until),
        Value::flag(t.cancel_requested),
        ms(t.started_at),
        ms(t.finished_at),
        Value::opt_int(t.progress.map(i64::from)),
        Value::from(&t.message),
        Value::from(t.steps),
        Value::from(t.resumes),
    ];
    let id = Value::from(&t.id);
    if also == Also::Cursor {
        let tail = [Value::opt_bytes(t.cursor.as_deref()), id];
        let budget = tx.core.statement_budget();
        if budget.is_none_or(|b| args_bytes(&args) + args_bytes(&tail) <= b) {
            args.extend(tail);
            let sql = tx.core.sql(WITH_CURSOR);
            tx.exec(&sql, &args).await?;
            return Ok(());
        }
        // Over the server's statement limit: the cursor goes by itself (it fits alone).
        let [cursor, id] = tail;
        args.push(id.clone());
        let sql = tx.core.sql(STATE);
        tx.exec(&sql, &args).await?;
        return enqueue::write_blob(tx, enqueue::Blob::Cursor, cursor, id).await;
    }
    args.push(id);
    let sql = tx.core.sql(STATE);
    tx.exec(&sql, &args).await?;
    Ok(())
}

/// The lease-token check of contract §3.3: missing ⇒ NotFound; not running, empty token or a
/// different token ⇒ LeaseLost.
pub(crate) fn check_token(id: &str, row: Option<&TaskRow>, token: &str) -> Result<(), Error> {
    let Some(row) = row else { return Err(Error::not_found(id)) };
    let t = &row.task;
    if t.status != Status::Running || token.is_empty() || t.lease_token != token {
        return Err(Error::lease_lost(id));
    }
    Ok(())
}

/// Puts a task into a terminal status with the fixed bookkeeping: `finished_at = now`, lease
/// and token cleared, cancel request cleared.
pub(crate) fn finalize(row: &mut TaskRow, status: Status, now: Timestamp) -> Result<(), Error> {
    taskgate::transition(row.task.status, status)?;
    let t = &mut row.task;
    t.status = status;
    t.finished_at = Some(now);
    t.lease_token.clear();
    t.cancel_requested = false;
    t.lease_expires_at = None;
    row.lease_until = 0;
    Ok(())
}

/// Releases a running task's lease (token and deadline cleared).
pub(crate) fn release(row: &mut TaskRow) {
    row.task.lease_token.clear();
    row.task.lease_expires_at = None;
    row.lease_until = 0;
}
