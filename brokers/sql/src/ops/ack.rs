//! Ack (contract §3.4), its two forms side by side:
//!
//! - **one statement** where the dialect has `UPDATE … RETURNING` (SQLite, PostgreSQL) and no
//!   statement limit applies: the token check is in the WHERE clause and the returned rows are
//!   the snapshots, so the common case costs one round trip; items not returned are then told
//!   apart (NotFound / LeaseLost) by one more read;
//! - **a locking read, then one set-based `UPDATE`** (MySQL/MariaDB, and a batch naming one ID
//!   twice), split below the server's statement limit when results are large.
//!
//! [`ack_many`] chooses; both propagate to children in the same transaction.
//!
//! Before either, where the dialect takes array parameters (PostgreSQL) and nothing needs the
//! rows back (no Notify observer), [`ack_autocommit`] completes the childless items in one
//! autocommit statement — no `BEGIN`, no `COMMIT` round trip — and leaves the rest (a parent to
//! wake, a wrong token, an unknown ID) to the transaction.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use taskgate::{AckItem, Error, ResolvedOptions, Result, Status, Timestamp};

use super::propagate::propagate;
use super::{check_token, finalize};
use crate::core::{args_bytes, Core, Tx, TxFail};
use crate::dialect::placeholders;
use crate::row::{TaskRow, TASK_COLUMN_COUNT};
use crate::value::Cols;
use crate::{DbError, Kind, Value};

/// The comment that opens [`ack_autocommit_sql`]: it names the statement in the server's
/// activity view, and [`CutProxy`](crate::cutproxy) finds the statement by it to cut the
/// connection where that ack commits.
pub(crate) const AUTOCOMMIT_ACK_MARKER: &str = "/* taskgate: one-statement ack */";

/// True when acks under `opts` start with [`ack_autocommit`]: one-statement writes are on
/// ([`super::one_statement_writes`]) and the dialect binds arrays.
pub(crate) fn autocommits(core: &Core, opts: &ResolvedOptions) -> bool {
    super::one_statement_writes(core, opts) && core.dialect.array_params()
}

/// The most items [`ack_autocommit`] takes in one statement. Larger batches (the worker
/// runtime's completer grows its batches up to 1,000 while its flushes are busy) take the
/// transaction: measured on PostgreSQL 15 with four such flushes at once, one-statement acks of
/// ~1,000 rows ran 250–900 ms each (the transaction's `UPDATE` of the same rows: under 100 ms)
/// and the runtime's drain fell from ~40,000 to 3,000–14,000 jobs/s (benches/report-notes.md,
/// finding 18). At batch 100 and below the one statement is the faster form.
pub(crate) const AUTOCOMMIT_MAX_ITEMS: usize = 100;

/// True when `items` can go to [`ack_autocommit`]: at most [`AUTOCOMMIT_MAX_ITEMS`], every ID
/// once and every token set (the transaction keeps the order rules of a batch naming one ID
/// twice).
pub(crate) fn fits_one_statement(items: &[AckItem]) -> bool {
    let mut ids = HashSet::with_capacity(items.len());
    items.len() <= AUTOCOMMIT_MAX_ITEMS
        && items.iter().all(|item| !item.token.is_empty() && ids.insert(item.id.as_str()))
}

/// The one-statement ack ([`ack_autocommit`]): completes each `(id, token[, result])` whose
/// task is running under that token and has no child edges, at the server's time (with
/// `server_now`) or at the bound "now" (its first argument), writing the token into
/// `ack_token`; returns the IDs it completed. The `has_children = 0` test sits in the
/// WHERE clause, so a child enqueue that committed while this statement waited for the row
/// (READ COMMITTED re-checks the clause on the new row version) leaves the task to the
/// transaction, which wakes the child. Status is tested as in [`ack_unnest_sql`] (no index).
///
/// Several items come as arrays (`unnest` of ids, tokens and results). One item (`one`)
/// comes as plain arguments — now, result, id, token — and `ack_token` takes the row's old
/// `lease_token` (`SET` reads the old row), which the WHERE clause matched to the token: a
/// custom plan prices an array argument by its length and a generic plan as ten rows, so
/// PostgreSQL re-planned every one-item `unnest` ack, while the plain form keeps its generic
/// plan (benches/report-notes.md, finding 22).
pub(crate) fn ack_autocommit_sql(
    core: &Core,
    results: bool,
    server_now: bool,
    one: bool,
) -> Arc<str> {
    let key = usize::from(results) | usize::from(server_now) << 1 | usize::from(one) << 2;
    core.sql_sized("ack_autocommit", (0, key), || {
        let finished = if server_now { "(SELECT {now})" } else { "?" };
        if one {
            let result = if results { "CAST(? AS BYTEA)" } else { "NULL" };
            return format!(
                "{AUTOCOMMIT_ACK_MARKER} UPDATE {{tasks}} SET status = 'completed', \
                 finished_at = {finished}, result = {result}, lease_token = '', \
                 lease_until = 0, cancel_requested = 0, ack_token = lease_token \
                 WHERE id = ? AND status || '' = 'running' AND lease_token = ? \
                 AND has_children = 0 \
                 RETURNING id"
            );
        }
        let (result, result_arg, result_col) = if results {
            ("a.ack_result", ", CAST(? AS BYTEA[])", ", ack_result")
        } else {
            ("NULL", "", "")
        };
        format!(
            "{AUTOCOMMIT_ACK_MARKER} UPDATE {{tasks}} SET status = 'completed', \
             result = {result}, finished_at = {finished}, lease_token = '', \
             lease_until = 0, cancel_requested = 0, ack_token = a.ack_token \
             FROM unnest(CAST(? AS TEXT[]), CAST(? AS TEXT[]){result_arg}) \
             AS a(ack_id, ack_token{result_col}) \
             WHERE id = a.ack_id AND status || '' = 'running' AND lease_token = a.ack_token \
             AND has_children = 0 \
             RETURNING id"
        )
    })
}

/// Completes the childless items of `items` (see [`fits_one_statement`]) in one autocommit
/// statement, finishing them at `now` when Rust knows it ([`Core::local_now`]: an injected
/// clock) and else at the server's time, and returns the IDs it completed; the caller acks
/// the others in a transaction. The statement is the whole transaction: it wakes nobody (no task it completes has
/// children) and publishes nothing (no Notify observer). An error leaves nothing written,
/// except a lost connection ([`Dialect::is_connection_lost`](crate::Dialect)), after which
/// the statement may have been applied: the task's `ack_token` then tells.
pub(crate) async fn ack_autocommit(
    core: &Core,
    items: &[AckItem],
    now: Option<Timestamp>,
) -> std::result::Result<HashSet<String>, DbError> {
    let results = items.iter().any(|item| item.result.is_some());
    let mut args = Vec::with_capacity(4);
    args.extend(now.map(Value::from));
    let one = match items {
        [item] => {
            args.extend(item.result.clone().map(Value::Bytes));
            args.extend([Value::from(&item.id), Value::from(&item.token)]);
            true
        }
        _ => {
            args.push(Value::TextArray(items.iter().map(|item| item.id.clone()).collect()));
            args.push(Value::TextArray(items.iter().map(|item| item.token.clone()).collect()));
            if results {
                let list = items.iter().map(|item| item.result.clone()).collect();
                args.push(Value::BytesArray(list));
            }
            false
        }
    };
    let sql = ack_autocommit_sql(core, results, now.is_none(), one);
    let rows = core.adapter.write_one(&sql, &args, &[Kind::Text]).await?;
    rows.iter().map(|r| Cols(r).text(0).map_err(|e| DbError::Decode(Box::new(e)))).collect()
}

/// The ack of `n` tasks as one `UPDATE … RETURNING`: every column (`full`, for Notify
/// snapshots) or just the ID, then the row's `has_children` flag. Arguments: (id, result)
/// pairs, now, the IDs, (id, token) pairs.
///
/// With `server_now` (the transaction does not know "now" yet) `finished_at` is the server's
/// time (`(SELECT {now})`, one value for the statement), the now argument is left out and
/// every row returns its `finished_at` last: the ack costs no separate `SELECT {now}`.
///
/// The flag is read from the updated row, never from `task_deps`: when this statement waits
/// for a row a child's enqueue holds (§5.2), READ COMMITTED re-reads the row after the wait but
/// keeps the statement's old snapshot for every other table, so an `EXISTS` over the edges
/// would miss the child that enqueue just committed. The enqueue sets the flag on the row.
///
/// Without `results` (no item has one) the statement sets `result = NULL` and the (id, result)
/// pairs are left out.
pub(crate) fn ack_returning_sql(
    core: &Core,
    n: usize,
    full: bool,
    server_now: bool,
    results: bool,
) -> Arc<str> {
    let shape = Returning::new(full, server_now);
    core.sql_sized("ack_returning", (n, shape.key(results)), || {
        let cases = " WHEN ? THEN ?".repeat(n);
        let result = if results { format!("CASE id{cases} END") } else { "NULL".to_owned() };
        format!(
            "UPDATE {{tasks}} SET {set} \
             WHERE id IN ({ids}) AND status = 'running' AND lease_token = CASE id{cases} END \
             RETURNING {returning}",
            set = shape.set(&result),
            ids = placeholders(n),
            returning = shape.returning(),
        )
    })
}

/// What the two one-statement ack forms share: the completing `SET`, and what `RETURNING`
/// lists — every column (`full`) or the ID, then `has_children`, then `finished_at` when the
/// statement reads the server's time itself (`server_now`).
#[derive(Clone, Copy)]
struct Returning {
    full: bool,
    server_now: bool,
}

impl Returning {
    fn new(full: bool, server_now: bool) -> Returning {
        Returning { full, server_now }
    }

    /// The statement cache's key for this shape, with or without results.
    fn key(self, results: bool) -> usize {
        usize::from(results) | usize::from(self.full) << 1 | usize::from(self.server_now) << 2
    }

    /// The `SET` list completing a row with `result` (an expression).
    fn set(self, result: &str) -> String {
        let finished = if self.server_now { "(SELECT {now})" } else { "?" };
        format!(
            "status = 'completed', result = {result}, finished_at = {finished}, \
             lease_token = '', lease_until = 0, cancel_requested = 0"
        )
    }

    /// The `RETURNING` list.
    fn returning(self) -> String {
        let returned = if self.full { "{cols}" } else { "id" };
        let extra = if self.server_now { ", finished_at" } else { "" };
        format!("{returned}, has_children{extra}")
    }
}

/// [`ack_returning_sql`] for dialects with array parameters ([`Dialect::array_params`],
/// PostgreSQL): the batch's `(id, token[, result])` triples arrive as arrays and are joined to
/// the tasks by primary key, so the statement's text (and its prepared plan) is the same for
/// every batch size and no `CASE` is evaluated per row. Arguments: now (unless
/// `server_now`), the IDs, the tokens, then the results when `results`.
///
/// The status test is written `status || '' = 'running'` so that no index can serve it: a
/// plain `status = 'running'` lets the planner intersect the primary key with `idx_status`,
/// or drive the whole update from it when few tasks run, and its entries of running tasks
/// include every dead row version, read on every ack (a tenth of the server's time at batch
/// 100 on a busy queue, profiled). Each row is one primary-key probe, status and token
/// checked on the row.
///
/// [`Dialect::array_params`]: crate::Dialect::array_params
pub(crate) fn ack_unnest_sql(core: &Core, full: bool, server_now: bool, results: bool) -> Arc<str> {
    let shape = Returning::new(full, server_now);
    core.sql_sized("ack_unnest", (0, shape.key(results)), || {
        let (result, result_arg, result_col) = if results {
            ("a.ack_result", ", CAST(? AS BYTEA[])", ", ack_result")
        } else {
            ("NULL", "", "")
        };
        format!(
            "UPDATE {{tasks}} SET {set} \
             FROM unnest(CAST(? AS TEXT[]), CAST(? AS TEXT[]){result_arg}) \
             AS a(ack_id, ack_token{result_col}) \
             WHERE id = a.ack_id AND status || '' = 'running' AND lease_token = a.ack_token \
             RETURNING {returning}",
            set = shape.set(result),
            returning = shape.returning(),
        )
    })
}

/// What one ack transaction returns: each item's outcome, and the time it wrote as
/// `finished_at` (when it completed any).
pub(crate) type AckRun = (Vec<Result<()>>, Option<Timestamp>);

/// Acks `items` in one transaction, each with its own outcome: in one statement when
/// `returning` (the dialect has `UPDATE … RETURNING` and no statement limit applies), else by
/// a locking read.
pub(crate) async fn ack_many(
    tx: &mut Tx<'_>,
    items: &[AckItem],
    returning: bool,
) -> std::result::Result<AckRun, TxFail> {
    let outcomes = match returning {
        true => ack_returning(tx, items).await?,
        false => ack_locking(tx, items).await?,
    };
    Ok((outcomes, tx.known_now()))
}

/// The one-statement form.
async fn ack_returning(
    tx: &mut Tx<'_>,
    items: &[AckItem],
) -> std::result::Result<Vec<Result<()>>, TxFail> {
    let mut first: HashMap<&str, usize> = HashMap::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        first.entry(item.id.as_str()).or_insert(i);
    }
    if first.len() < items.len() {
        // One ID twice: items count in order (a stale token first, the right one second must
        // still win), which one statement cannot tell apart. Rare: take the general path.
        return ack_locking(tx, items).await;
    }
    let candidates: Vec<&AckItem> = items
        .iter()
        .enumerate()
        .filter(|(i, item)| first.get(item.id.as_str()) == Some(i) && !item.token.is_empty())
        .map(|(_, item)| item)
        .collect();
    let acked = complete(tx, &candidates).await?;
    let unacked: Vec<&str> = first.keys().copied().filter(|id| !acked.contains_key(*id)).collect();
    let existing = existing_ids(tx, &unacked).await?;
    let outcomes = items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            match (acked.contains_key(item.id.as_str()), first.get(item.id.as_str())) {
                (true, Some(f)) if *f == i => Ok(()),
                (true, _) => Err(Error::lease_lost(&item.id)),
                (false, _) if existing.contains(&item.id) => Err(Error::lease_lost(&item.id)),
                (false, _) => Err(Error::not_found(&item.id)),
            }
        })
        .collect();
    let mut finished = Vec::new();
    for (id, (row, has_children)) in &acked {
        if let Some(row) = row {
            tx.snapshot(&row.task);
        }
        if *has_children {
            finished.push((id.clone(), Status::Completed));
        }
    }
    finished.sort();
    propagate(tx, finished).await?;
    Ok(outcomes)
}

/// Completes the candidates whose token matches; returns them by ID with their row (when
/// Notify needs snapshots) and their "has open child edges" flag.
async fn complete(
    tx: &mut Tx<'_>,
    items: &[&AckItem],
) -> std::result::Result<HashMap<String, (Option<TaskRow>, bool)>, TxFail> {
    if items.is_empty() {
        return Ok(HashMap::new());
    }
    let server_now = tx.needs_now();
    let n = items.len();
    let results = items.iter().any(|item| item.result.is_some());
    let full = tx.opts.notifier.is_active();
    let arrays = tx.core.dialect.array_params();
    let mut args = Vec::with_capacity(if arrays { 4 } else { 5 * n + 1 });
    if results && !arrays {
        for item in items {
            args.extend([Value::from(&item.id), Value::opt_bytes(item.result.as_deref())]);
        }
    }
    if !server_now {
        args.push(Value::from(tx.now().await?));
    }
    let sql = if arrays {
        args.push(Value::TextArray(items.iter().map(|item| item.id.clone()).collect()));
        args.push(Value::TextArray(items.iter().map(|item| item.token.clone()).collect()));
        if results {
            args.push(Value::BytesArray(items.iter().map(|item| item.result.clone()).collect()));
        }
        ack_unnest_sql(tx.core, full, server_now, results)
    } else {
        args.extend(items.iter().map(|item| Value::from(&item.id)));
        for item in items {
            args.extend([Value::from(&item.id), Value::from(&item.token)]);
        }
        ack_returning_sql(tx.core, n, full, server_now, results)
    };
    let mut kinds =
        if full { super::kinds_plus(&[Kind::Int]) } else { vec![Kind::Text, Kind::Int] };
    if server_now {
        kinds.push(Kind::Int);
    }
    let rows = tx.fetch(&sql, &args, &kinds).await?;
    if server_now {
        if let Some(Value::Int(ms)) = rows.first().and_then(|r| r.get(kinds.len() - 1)) {
            tx.set_now(taskgate::Timestamp::from_millis(*ms));
        }
    }
    let mut acked = HashMap::with_capacity(rows.len());
    for r in &rows {
        let c = Cols(r);
        if full {
            let row = TaskRow::decode(r)?;
            let has_children = c.int(TASK_COLUMN_COUNT)? != 0;
            acked.insert(row.task.id.clone(), (Some(row), has_children));
        } else {
            acked.insert(c.text(0)?, (None, c.int(1)? != 0));
        }
    }
    Ok(acked)
}

/// Which of `ids` exist.
async fn existing_ids(tx: &mut Tx<'_>, ids: &[&str]) -> std::result::Result<Vec<String>, TxFail> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let sql = tx.core.sql_sized("existing_ids", (ids.len(), 0), || {
        format!("SELECT id FROM {{tasks}} WHERE id IN ({})", placeholders(ids.len()))
    });
    let args: Vec<Value> = ids.iter().map(|id| Value::from(*id)).collect();
    let rows = tx.fetch(&sql, &args, &[Kind::Text]).await?;
    rows.iter().map(|r| Cols(r).text(0).map_err(TxFail::from)).collect()
}

/// The locking-read form: one locking read, one set-based UPDATE, then propagation for those
/// with open child edges. Each item gets its own outcome.
///
/// Without a Notify observer there are no snapshots to take, so the locking read returns only
/// what the token check needs (`id, status, lease_token`) instead of every column: a batch of
/// acks does not carry its payloads back over the wire.
async fn ack_locking(
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

#[cfg(test)]
mod tests {
    use super::*;

    fn items(n: usize) -> Vec<AckItem> {
        (0..n)
            .map(|i| AckItem { id: format!("t{i}"), token: format!("k{i}"), result: None })
            .collect()
    }

    #[test]
    fn one_statement_takes_distinct_items_with_tokens_up_to_the_cap() {
        assert!(fits_one_statement(&items(1)));
        assert!(fits_one_statement(&items(AUTOCOMMIT_MAX_ITEMS)));
        assert!(!fits_one_statement(&items(AUTOCOMMIT_MAX_ITEMS + 1)), "over the cap");
        let mut twice = items(3);
        twice[2].id = "t0".into();
        assert!(!fits_one_statement(&twice), "one ID twice");
        let mut tokenless = items(3);
        tokenless[1].token.clear();
        assert!(!fits_one_statement(&tokenless), "an empty token");
    }
}
