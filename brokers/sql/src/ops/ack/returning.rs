//! The one-statement ack form where the dialect has `UPDATE … RETURNING` (SQLite, PostgreSQL)
//! and no statement limit applies: the token check is in the WHERE clause and the returned rows
//! are the snapshots, so the common case costs one round trip; items not returned are then
//! told apart (NotFound / LeaseLost) by one more read. A batch naming one ID twice takes the
//! locking form.

use std::collections::HashMap;
use std::sync::Arc;

use taskgate::{AckItem, Error, Result, Status};

use super::locking::ack_locking;
use crate::core::Core;
use crate::dialect::placeholders;
use crate::ops::kinds_plus;
use crate::ops::propagate::propagate;
use crate::row::{TaskRow, TASK_COLUMN_COUNT};
use crate::tx::{Tx, TxFail};
use crate::value::{Cols, Kind, Value};

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

/// The one-statement form.
pub(super) async fn ack_returning(
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
    let mut kinds = if full { kinds_plus(&[Kind::Int]) } else { vec![Kind::Text, Kind::Int] };
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
