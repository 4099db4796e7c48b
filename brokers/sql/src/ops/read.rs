//! Reads (contract §7): get, list, queue_len, counts, paused queues, the server's time — plain
//! pooled queries, no transaction, no row locks.

use std::collections::HashMap;

use taskgate::{Counts, Filter, Result, Status, Task, Timestamp};

use crate::core::Core;
use crate::dialect::placeholders;
use crate::row::{TaskRow, TASK_KINDS};
use crate::value::{Cols, DecodeError};
use crate::{Kind, Row, Value};

async fn read(core: &Core, sql: &str, args: &[Value], kinds: &[Kind]) -> Result<Vec<Row>> {
    core.adapter.read(sql, args, kinds).await.map_err(|e| core.backend_error(e))
}

fn decoded<T>(core: &Core, r: std::result::Result<T, DecodeError>) -> Result<T> {
    r.map_err(|e| core.backend_error(crate::DbError::Decode(Box::new(e))))
}

/// The server's current time (`SELECT {now}`, the dialect's server-now-ms expression).
pub(crate) async fn now(core: &Core) -> Result<Timestamp> {
    let rows = read(core, &core.sql("SELECT {now}"), &[], &[Kind::Int]).await?;
    let ms = decoded(core, Cols(rows.first().map(Vec::as_slice).unwrap_or_default()).int(0))?;
    Ok(Timestamp::from_millis(ms))
}

/// One task by ID.
pub(crate) async fn get(core: &Core, id: &str) -> Result<Option<Task>> {
    let sql = core.sql("SELECT {cols} FROM {tasks} WHERE id = ?");
    let rows = read(core, &sql, &[Value::from(id)], &TASK_KINDS).await?;
    match rows.first() {
        None => Ok(None),
        Some(r) => Ok(Some(decoded(core, TaskRow::decode(r))?.task)),
    }
}

/// `SELECT {cols} FROM {tasks} WHERE id IN (…)` over `ids`, in chunks below the dialect's
/// parameter limit (`name` keys the statement cache), each row decoded by `decode` into an
/// (ID, value) pair. Shared by the task read by IDs and the ack's token read.
async fn by_ids_with<T>(
    core: &Core,
    name: &'static str,
    cols: &str,
    kinds: &[Kind],
    ids: &[&str],
    decode: impl Fn(&Row) -> std::result::Result<(String, T), DecodeError>,
) -> Result<HashMap<String, T>> {
    let mut found = HashMap::with_capacity(ids.len());
    for chunk in ids.chunks(core.dialect.max_params().max(1)) {
        let sql = core.sql_sized(name, (chunk.len(), 0), || {
            format!("SELECT {cols} FROM {{tasks}} WHERE id IN ({})", placeholders(chunk.len()))
        });
        let args: Vec<Value> = chunk.iter().map(|id| Value::from(*id)).collect();
        for r in read(core, &sql, &args, kinds).await? {
            let (id, value) = decoded(core, decode(&r))?;
            found.insert(id, value);
        }
    }
    Ok(found)
}

/// The stored tasks among `ids`, by ID (chunked below the dialect's parameter limit).
pub(crate) async fn by_ids(core: &Core, ids: &[&str]) -> Result<HashMap<String, Task>> {
    by_ids_with(core, "tasks_by_ids", "{cols}", &TASK_KINDS, ids, |r| {
        let task = TaskRow::decode(r)?.task;
        Ok((task.id.clone(), task))
    })
    .await
}

/// The `ack_token` of each stored task among `ids`, by ID: what settles an ack whose answer
/// was lost (the token is written only by a completing one-statement ack).
pub(crate) async fn ack_tokens(core: &Core, ids: &[&str]) -> Result<HashMap<String, String>> {
    by_ids_with(core, "ack_tokens", "id, ack_token", &[Kind::Text, Kind::Text], ids, |r| {
        let c = Cols(r);
        Ok((c.text(0)?, c.text(1)?))
    })
    .await
}

/// A paged query: `select` (ending in its FROM), each condition's predicate (with one `?`,
/// e.g. `owner = ?`) for every non-empty value, `order`, then `limit` (0 = all) and `offset`.
/// Returns the statement (not yet rendered) and its arguments. Shared by the task list and the
/// audit log.
pub(crate) fn paged_query(
    select: &str,
    conditions: &[(&str, &str)],
    order: &str,
    limit: usize,
    offset: usize,
) -> (String, Vec<Value>) {
    let mut sql = format!("{select} WHERE 1 = 1");
    let mut args = Vec::new();
    for (predicate, value) in conditions {
        if !value.is_empty() {
            sql.push_str(&format!(" AND {predicate}"));
            args.push(Value::from(*value));
        }
    }
    sql.push_str(" ORDER BY ");
    sql.push_str(order);
    let as_int = |n: usize| Value::Int(i64::try_from(n).unwrap_or(i64::MAX));
    match (limit, offset) {
        (0, 0) => {}
        (0, offset) => {
            sql.push_str(" LIMIT {limit_all} OFFSET ?");
            args.push(as_int(offset));
        }
        (limit, offset) => {
            sql.push_str(" LIMIT ? OFFSET ?");
            args.extend([as_int(limit), as_int(offset)]);
        }
    }
    (sql, args)
}

/// Tasks matching `filter` in `(created_at, id)` order, paged.
pub(crate) async fn list(core: &Core, filter: &Filter) -> Result<Vec<Task>> {
    let status = filter.status.map(Status::as_str).unwrap_or_default();
    let conditions = [
        ("type = ?", filter.task_type.as_str()),
        ("queue = ?", filter.queue.as_str()),
        ("status = ?", status),
        ("business_key = ?", filter.business_key.as_str()),
        ("owner = ?", filter.owner.as_str()),
        // The children by their edges (contract §7.1.2): `idx_deps_parent` (parent_id, done)
        // finds them, the primary key fetches each; the edge table holds one row per distinct
        // parent of a stored child, as `depends_on` lists them.
        ("id IN (SELECT child_id FROM {deps} WHERE parent_id = ?)", filter.parent.as_str()),
    ];
    // No stored name holds a NUL (contract §E7.3), and PostgreSQL's text cannot carry one.
    if conditions.iter().any(|(_, value)| taskgate::validate::has_nul(value)) {
        return Ok(Vec::new());
    }
    let (sql, args) = paged_query(
        "SELECT {cols} FROM {tasks}",
        &conditions,
        "created_at, id",
        filter.limit,
        filter.offset,
    );
    let rows = read(core, &core.render(&sql), &args, &TASK_KINDS).await?;
    rows.iter().map(|r| decoded(core, TaskRow::decode(r)).map(|r| r.task)).collect()
}

/// Pending and retrying tasks of `queue`, delayed ones included.
pub(crate) async fn queue_len(core: &Core, queue: &str) -> Result<u64> {
    if taskgate::validate::has_nul(queue) {
        return Ok(0); // No queue is named with a NUL (contract §E7.3).
    }
    let sql = core.sql_sized("queue_len", (0, 0), || {
        let from = core.ready_from();
        format!("SELECT COUNT(*) FROM {from} WHERE {}", core.dialect.ready_condition("= ?"))
    });
    let rows = read(core, &sql, &[Value::from(queue)], &[Kind::Int]).await?;
    let n = decoded(core, Cols(rows.first().map(Vec::as_slice).unwrap_or_default()).int(0))?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Counts by type and status.
pub(crate) async fn counts(core: &Core) -> Result<Counts> {
    let sql = core.sql("SELECT type, status, COUNT(*) FROM {tasks} GROUP BY type, status");
    let rows = read(core, &sql, &[], &[Kind::Text, Kind::Text, Kind::Int]).await?;
    let mut counts = Counts::new();
    for r in &rows {
        let c = Cols(r);
        let status: Status = decoded(core, c.text(1))?.parse()?;
        let n = u64::try_from(decoded(core, c.int(2))?).unwrap_or(0);
        counts.entry(decoded(core, c.text(0))?).or_default().insert(status, n);
    }
    Ok(counts)
}

/// The paused queues, sorted by bytes (in Rust: database collations differ).
pub(crate) async fn paused_queues(core: &Core) -> Result<Vec<String>> {
    let sql = core.sql("SELECT queue FROM {paused}");
    let rows = read(core, &sql, &[], &[Kind::Text]).await?;
    let mut queues =
        rows.iter().map(|r| decoded(core, Cols(r).text(0))).collect::<Result<Vec<_>>>()?;
    queues.sort_unstable();
    Ok(queues)
}

/// Every queue's counts by status and the earliest `run_at` of its pending and retrying tasks,
/// sorted by bytes (in Rust: database collations differ).
pub(crate) async fn queue_stats(core: &Core) -> Result<Vec<taskgate::QueueStats>> {
    let sql =
        core.sql("SELECT queue, status, COUNT(*), MIN(run_at) FROM {tasks} GROUP BY queue, status");
    let rows = read(core, &sql, &[], &[Kind::Text, Kind::Text, Kind::Int, Kind::Int]).await?;
    let mut stats: std::collections::BTreeMap<String, taskgate::QueueStats> = Default::default();
    for r in &rows {
        let c = Cols(r);
        let queue = decoded(core, c.text(0))?;
        let status: Status = decoded(core, c.text(1))?.parse()?;
        let n = u64::try_from(decoded(core, c.int(2))?).unwrap_or(0);
        let min_run_at = Timestamp::from_millis(decoded(core, c.int(3))?);
        let entry = stats
            .entry(queue.clone())
            .or_insert_with(|| taskgate::QueueStats { queue, ..Default::default() });
        entry.counts.insert(status, n);
        if matches!(status, Status::Pending | Status::Retrying) {
            let oldest = entry.oldest_run_at.get_or_insert(min_run_at);
            *oldest = (*oldest).min(min_run_at);
        }
    }
    Ok(stats.into_values().collect())
}
