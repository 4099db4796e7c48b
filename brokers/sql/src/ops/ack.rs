//! Ack in one statement where the dialect has `UPDATE … RETURNING` (SQLite, PostgreSQL): the
//! token check is in the WHERE clause and the returned rows are the snapshots, so the common
//! case costs one round trip; items not returned are then told apart (NotFound / LeaseLost)
//! by one more read. Dialects without it use the locking read in `finish::ack_many`.

use std::collections::HashMap;
use std::sync::Arc;

use taskgate::{AckItem, Error, Result, Status};

use super::propagate::propagate;
use crate::core::{Core, Tx, TxFail};
use crate::dialect::placeholders;
use crate::row::{TaskRow, TASK_COLUMN_COUNT};
use crate::value::Cols;
use crate::{Kind, Value};

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
    let name = match (full, server_now) {
        (true, false) => "ack_returning_full",
        (false, false) => "ack_returning",
        (true, true) => "ack_returning_full_now",
        (false, true) => "ack_returning_now",
    };
    core.sql_sized(name, (n, usize::from(results)), || {
        let cases = " WHEN ? THEN ?".repeat(n);
        let result = if results { format!("CASE id{cases} END") } else { "NULL".to_owned() };
        let returned = if full { "{cols}" } else { "id" };
        let (finished, extra) =
            if server_now { ("(SELECT {now})", ", finished_at") } else { ("?", "") };
        format!(
            "UPDATE {{tasks}} SET status = 'completed', result = {result}, \
             finished_at = {finished}, lease_token = '', lease_until = 0, cancel_requested = 0 \
             WHERE id IN ({ids}) AND status = 'running' AND lease_token = CASE id{cases} END \
             RETURNING {returned}, has_children{extra}",
            ids = placeholders(n)
        )
    })
}

/// Acks `items`; each gets its own outcome.
pub(crate) async fn ack_many(
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
        return super::finish::ack_many(tx, items).await;
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
    let mut args = Vec::with_capacity(5 * n + 1);
    if results {
        for item in items {
            args.extend([Value::from(&item.id), Value::opt_bytes(item.result.as_deref())]);
        }
    }
    if !server_now {
        args.push(Value::from(tx.now().await?));
    }
    args.extend(items.iter().map(|item| Value::from(&item.id)));
    for item in items {
        args.extend([Value::from(&item.id), Value::from(&item.token)]);
    }
    let full = tx.opts.notifier.is_active();
    let sql = ack_returning_sql(tx.core, n, full, server_now, results);
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
