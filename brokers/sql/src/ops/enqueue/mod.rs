//! Enqueue (contract §3.4, §5.1, §5.2): key pre-check, preset-ID check, parents locked and
//! checked, the submit decision, the row and its distinct-parent edges.

pub(crate) mod choose;

use std::collections::HashSet;

use taskgate::decide::{submit_decision, SubmitDecision};
use taskgate::wake::Wakes;
use taskgate::{id, Error, ExistingTask, Status, Task, Timestamp};

use super::{id_status, lock_statuses, mark_has_children};
use crate::core::{args_bytes, Core};
use crate::dialect::placeholders;
use crate::row::{TaskRow, TASK_COLUMN_COUNT};
use crate::tx::{Tx, TxFail};
use crate::unresolved::Settled;
use crate::{DbError, Kind, Value};

/// True for a task [`enqueue_plain`] may store: no business key and no parents.
pub(crate) fn is_plain(task: &Task) -> bool {
    task.business_key.is_empty() && task.depends_on.is_empty()
}

/// The ID each task of a batch is stored under: its preset ID, or a new ULID. Chosen once per
/// call, before the first transaction, so a transaction that runs again (after a COMMIT whose
/// outcome was lost) stores the same rows under the same IDs and cannot make a second copy.
pub(crate) fn assign_ids(tasks: &[Task]) -> Vec<String> {
    tasks.iter().map(|t| if t.id.is_empty() { id::new_ulid() } else { t.id.clone() }).collect()
}

/// Stores a validated batch under the IDs it was assigned ([`assign_ids`]) and returns the
/// stored tasks in batch order: runs of [plain](is_plain) tasks (no key, no parents) go out
/// as multi-row `INSERT`s ([`enqueue_plain`]), the others one by one ([`enqueue`]) in batch
/// order (a later task may depend on an earlier one).
pub(crate) async fn enqueue_many(
    tx: &mut Tx<'_>,
    tasks: &[Task],
    ids: &[String],
) -> Result<Vec<Task>, TxFail> {
    let mut stored = Vec::with_capacity(tasks.len());
    let mut run: Vec<(&Task, &str)> = Vec::new();
    for (task, id) in tasks.iter().zip(ids) {
        if is_plain(task) {
            run.push((task, id));
            continue;
        }
        if !run.is_empty() {
            let rows = enqueue_plain(tx, &run).await?;
            stored.extend(rows.into_iter().map(|r| r.task));
            run.clear();
        }
        stored.push(enqueue(tx, task, id).await?.task);
    }
    if !run.is_empty() {
        let rows = enqueue_plain(tx, &run).await?;
        stored.extend(rows.into_iter().map(|r| r.task));
    }
    Ok(stored)
}

/// Stores a run of validated [plain](is_plain) tasks, each with the ID it was assigned
/// ([`assign_ids`]), with one multi-row `INSERT` per chunk (below the dialect's
/// bind-parameter limit) and returns the stored rows in order.
///
/// The outcome is the one [`enqueue`] per task gives: preset IDs are checked with one
/// `SELECT` per chunk, and the first task (in batch order) whose ID is stored already, or
/// used by an earlier task of the run, fails the batch with `TaskExists` naming that ID.
pub(crate) async fn enqueue_plain(
    tx: &mut Tx<'_>,
    tasks: &[(&Task, &str)],
) -> Result<Vec<TaskRow>, TxFail> {
    let preset: Vec<&str> =
        tasks.iter().filter(|(t, _)| !t.id.is_empty()).map(|(t, _)| t.id.as_str()).collect();
    let mut taken: HashSet<String> = HashSet::new();
    let per_select = tx.core.dialect.max_params().max(1);
    for chunk in preset.chunks(per_select) {
        let sql = tx.core.sql_sized("enqueue_plain_ids", (chunk.len(), 0), || {
            format!("SELECT id FROM {{tasks}} WHERE id IN ({})", placeholders(chunk.len()))
        });
        let args: Vec<Value> = chunk.iter().map(|id| Value::from(*id)).collect();
        for row in tx.fetch(&sql, &args, &[Kind::Text]).await? {
            if let Some(Value::Text(id)) = row.into_iter().next() {
                taken.insert(id);
            }
        }
    }
    let mut rows = Vec::with_capacity(tasks.len());
    let mut deferred = false;
    for (task, id) in tasks {
        if !task.id.is_empty() && !taken.insert(task.id.clone()) {
            return Err(Error::TaskExists { id: task.id.clone(), existing: None }.into());
        }
        let decision = submit_decision(std::iter::empty(), task.on_parent_failure);
        deferred = tasks.len() == 1 && defers_now(tx, &decision);
        rows.push(build_row(tx, task, (*id).to_owned(), &decision, deferred).await?);
    }
    match rows.as_mut_slice() {
        [row] if deferred => insert_now(tx, row).await?,
        _ => insert_rows(tx, &rows).await?,
    }
    for row in &rows {
        tx.snapshot(&row.task);
        if row.task.status == Status::Pending {
            tx.wake_ready(&row.task.queue);
        }
    }
    Ok(rows)
}

/// Stores one validated task inside the transaction under `id` (its preset ID, or the one
/// [`assign_ids`] generated) and returns the stored row.
pub(crate) async fn enqueue(tx: &mut Tx<'_>, task: &Task, id: &str) -> Result<TaskRow, TxFail> {
    if !task.business_key.is_empty() {
        if let Some(existing) = key_tail(tx, &task.business_key).await? {
            return Err(Error::TaskExists { id: String::new(), existing: Some(existing) }.into());
        }
    }
    if !task.id.is_empty() {
        let sql = tx.core.sql("SELECT id FROM {tasks} WHERE id = ?");
        if !tx.fetch(&sql, &[Value::from(&task.id)], &[Kind::Text]).await?.is_empty() {
            return Err(Error::TaskExists { id: task.id.clone(), existing: None }.into());
        }
    }
    let id = id.to_owned();
    let parents = task.distinct_parents();
    let found = lock_statuses(tx, &parents).await?;
    let mut statuses = Vec::with_capacity(parents.len());
    for parent in &parents {
        match found.iter().find(|(pid, _)| pid == parent) {
            Some((pid, status)) => statuses.push((pid.as_str(), *status)),
            None => return Err(Error::not_found(*parent).into()),
        }
    }
    let decision = submit_decision(statuses.iter().copied(), task.on_parent_failure);
    let defer = defers_now(tx, &decision);
    let mut row = build_row(tx, task, id, &decision, defer).await?;
    match defer {
        true => insert_now(tx, &mut row).await?,
        false => insert_rows(tx, std::slice::from_ref(&row)).await?,
    }
    insert_edges(tx, &row.task.id, &statuses).await?;
    mark_has_children(tx, &statuses).await?;
    tx.snapshot(&row.task);
    if row.task.status == Status::Pending {
        tx.wake_ready(&row.task.queue);
    }
    Ok(row)
}

/// The blob columns of a task row: their index in [`TaskRow::insert_args`] and their column.
const BLOBS: [(usize, Blob); 3] = [(3, Blob::Payload), (5, Blob::Result), (23, Blob::Cursor)];

/// A blob column of the tasks table.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Blob {
    Payload,
    Result,
    Cursor,
}

/// Inserts `rows` (in order) with as few statements as fit: multi-row `INSERT`s below the
/// dialect's parameter limit and the server's statement limit
/// ([`Core::statement_budget`]). A row that
/// does not fit one statement on its own (a payload, result and cursor of the largest size at
/// once) is inserted without its blobs, which then follow one `UPDATE` each — every one of
/// them fits, because the payload limit leaves room for a value and an ID
/// ([`BLOB_HEADROOM`](crate::core::BLOB_HEADROOM)).
///
/// [`Core::statement_budget`]: crate::core::Core::statement_budget
pub(crate) async fn insert_rows(tx: &mut Tx<'_>, rows: &[TaskRow]) -> Result<(), TxFail> {
    let per_insert = (tx.core.dialect.max_params() / TASK_COLUMN_COUNT).max(1);
    let budget = tx.core.statement_budget().unwrap_or(u64::MAX);
    let (mut chunk, mut chunk_rows, mut chunk_bytes) = (Vec::new(), 0, 0u64);
    for row in rows {
        let args = row.insert_args();
        let bytes = args_bytes(&args);
        if chunk_rows > 0 && (chunk_rows == per_insert || chunk_bytes + bytes > budget) {
            insert_chunk(tx, std::mem::take(&mut chunk), chunk_rows).await?;
            (chunk_rows, chunk_bytes) = (0, 0);
        }
        if bytes > budget {
            insert_split(tx, args).await?;
            continue;
        }
        chunk.extend(args);
        chunk_rows += 1;
        chunk_bytes += bytes;
    }
    if chunk_rows > 0 {
        insert_chunk(tx, chunk, chunk_rows).await?;
    }
    Ok(())
}

/// One `INSERT` of `n` rows whose arguments are `args`.
async fn insert_chunk(tx: &mut Tx<'_>, args: Vec<Value>, n: usize) -> Result<(), TxFail> {
    let sql = if n == 1 {
        tx.core.sql(INSERT_SQL)
    } else {
        tx.core.sql_sized("enqueue_plain_insert", (n, 0), || {
            let row = format!("({})", placeholders(TASK_COLUMN_COUNT));
            format!("INSERT INTO {{tasks}} ({{cols}}) VALUES {}", vec![row; n].join(", "))
        })
    };
    tx.exec(&sql, &args).await?;
    Ok(())
}

/// A row too big for one statement: inserted with NULL blobs, then each blob by its own
/// `UPDATE … WHERE id = ?`.
async fn insert_split(tx: &mut Tx<'_>, mut args: Vec<Value>) -> Result<(), TxFail> {
    let mut blobs = Vec::new();
    for (index, column) in BLOBS {
        let value = std::mem::replace(&mut args[index], Value::Null(Kind::Bytes));
        if !matches!(value, Value::Null(_)) {
            blobs.push((column, value));
        }
    }
    let id = args[0].clone();
    insert_chunk(tx, args, 1).await?;
    for (column, value) in blobs {
        write_blob(tx, column, value, id.clone()).await?;
    }
    Ok(())
}

/// `UPDATE {tasks} SET <column> = ? WHERE id = ?` for one blob column.
pub(crate) async fn write_blob(
    tx: &mut Tx<'_>,
    column: Blob,
    value: Value,
    id: Value,
) -> Result<(), TxFail> {
    let sql = tx.core.sql(match column {
        Blob::Payload => "UPDATE {tasks} SET payload = ? WHERE id = ?",
        Blob::Result => "UPDATE {tasks} SET result = ? WHERE id = ?",
        Blob::Cursor => "UPDATE {tasks} SET step_cursor = ? WHERE id = ?",
    });
    tx.exec(&sql, &[value, id]).await?;
    Ok(())
}

/// The stored form of `task` under `decision`: broker-owned fields overwritten, times floored.
async fn build_row(
    tx: &mut Tx<'_>,
    task: &Task,
    id: String,
    decision: &SubmitDecision,
    defer_now: bool,
) -> Result<TaskRow, TxFail> {
    // Deferred: `created_at` (and a `run_at` the task leaves open) stay zero until
    // [`insert_now`] stores the server's time.
    let now = match defer_now {
        true => Timestamp::ZERO,
        false => tx.now().await?,
    };
    Ok(stored_form(task, id, decision, now))
}

/// The stored form of `task` under `decision` at `now` (zero: the server's time, filled in
/// by the `INSERT` that reads it): broker-owned fields overwritten.
fn stored_form(task: &Task, id: String, decision: &SubmitDecision, now: Timestamp) -> TaskRow {
    let mut t = task.clone();
    t.id = id;
    t.status = decision.status();
    t.created_at = now;
    if t.run_at.is_zero() {
        t.run_at = now;
    }
    t.lease_token.clear();
    t.lease_expires_at = None;
    t.last_heartbeat_at = None;
    t.cancel_requested = false;
    t.steps = 0;
    t.resumes = 0;
    if let SubmitDecision::Canceled { last_error } = decision {
        t.last_error = last_error.clone();
        t.finished_at = Some(now);
    }
    TaskRow { task: t, pending_parents: decision.pending_parents(), lease_until: 0 }
}

/// True when a one-row enqueue should read the server's time inside its `INSERT`
/// ([`insert_now`]) instead of a `SELECT {now}` first: the transaction has not read it yet,
/// the dialect returns rows from writes, no statement limit applies, and the task is not
/// cancelled at submit (that writes `finished_at` from the same "now").
fn defers_now(tx: &Tx<'_>, decision: &SubmitDecision) -> bool {
    tx.needs_now()
        && tx.core.dialect.update_returning()
        && tx.core.statement_budget().is_none()
        && !matches!(decision, SubmitDecision::Canceled { .. })
}

/// Inserts one row built with a deferred "now" ([`build_row`] with `defer_now`): one
/// [`insert_now_sql`] whose `created_at` — and `run_at`, when the task left it open — is the
/// server's time, read once in the statement and returned. That time becomes the
/// transaction's "now" and is written into `row`. An idle enqueue on PostgreSQL is then
/// `BEGIN`, `INSERT`, `COMMIT`: one round trip fewer than with a `SELECT {now}` first. A
/// ready task also carries the adapter's [`inline_notify`](crate::SqlConn::inline_notify)
/// expression when it offers one (an idle PostgreSQL handle), so other processes hear of it
/// at the COMMIT rather than from a notification sent after it.
async fn insert_now(tx: &mut Tx<'_>, row: &mut TaskRow) -> Result<(), TxFail> {
    let args = insert_now_args(row);
    let notify = match row.task.status == Status::Pending {
        true => tx.conn.inline_notify(),
        false => None,
    };
    let sql = match notify {
        // The expression is the handle's own constant: one cached text per handle.
        Some(expr) => {
            tx.core.sql_sized("insert_now_notify", (0, 0), || insert_now_sql(Some(&expr)))
        }
        None => tx.core.sql_sized("insert_now", (0, 0), || insert_now_sql(None)),
    };
    let rows = tx.fetch(&sql, &args, &[Kind::Int]).await?;
    let now = created_at(&rows).map_err(|e| TxFail::Op(tx.core.backend_error(e)))?;
    tx.set_now(now);
    stamp(row, now);
    Ok(())
}

/// The arguments of [`insert_now_sql`] for `row`: NULL for `created_at`, and for `run_at` when
/// the task left it open (zero), so the statement stores the server's time there.
fn insert_now_args(row: &TaskRow) -> Vec<Value> {
    let mut args = row.insert_args();
    if row.task.run_at.is_zero() {
        args[RUN_AT_ARG] = Value::Null(Kind::Int);
    }
    if row.task.created_at.is_zero() {
        args[CREATED_AT_ARG] = Value::Null(Kind::Int);
    }
    args
}

/// The `created_at` an [`insert_now_sql`] statement returned.
fn created_at(rows: &[crate::Row]) -> Result<Timestamp, DbError> {
    match rows.first().and_then(|r| r.first()) {
        Some(Value::Int(ms)) => Ok(Timestamp::from_millis(*ms)),
        _ => Err(DbError::RowNotFound),
    }
}

/// Writes the time an [`insert_now_sql`] statement stored into `row`: its `created_at`, and
/// its `run_at` when the task left it open.
fn stamp(row: &mut TaskRow, now: Timestamp) {
    if row.task.run_at.is_zero() {
        row.task.run_at = now;
    }
    if row.task.created_at.is_zero() {
        row.task.created_at = now;
    }
}

/// The comment that opens the one-statement enqueue's SQL ([`enqueue_autocommit`]): the
/// test proxy that cuts connections finds that statement's commit by it
/// (`test_hooks::ONE_STATEMENT_ENQUEUE`).
pub(crate) const AUTOCOMMIT_ENQUEUE_MARKER: &str = "/* taskgate: one-statement enqueue */";

/// True when `task` may be stored by [`enqueue_autocommit`]: [plain](is_plain) (no business
/// key, no parents: the enqueue is one `INSERT` with nothing to check or lock first) and
/// without a preset ID, so its row is found by the ULID this call generated — which no other
/// call uses — if the statement's answer is lost.
pub(crate) fn fits_one_statement(task: &Task) -> bool {
    is_plain(task) && task.id.is_empty()
}

/// The row [`enqueue_autocommit`] writes for `task` under `id`, created at `now`, or with
/// `created_at` (and an open `run_at`) zero when the statement reads the server's time.
fn one_statement_row(task: &Task, id: &str, now: Option<Timestamp>) -> TaskRow {
    let decision = submit_decision(std::iter::empty(), task.on_parent_failure);
    stored_form(task, id.to_owned(), &decision, now.unwrap_or(Timestamp::ZERO))
}

/// What an [`enqueue_autocommit`] of `task` under `id` whose answer was lost may have written,
/// as a lost attempt for the enqueue's settle ([`TxRun::settle`](crate::txrun::TxRun)): the
/// stored task (with a zero `created_at` when the server's time was to be read: the settle
/// then compares without it and takes it from the row, [`crate::resolve::same_submission`])
/// and the wake-up of its queue.
pub(crate) fn lost_one_statement(
    task: &Task,
    id: &str,
    now: Option<Timestamp>,
) -> Settled<Vec<Task>> {
    let row = one_statement_row(task, id, now);
    let mut wakes = Wakes::default();
    if row.task.status == Status::Pending {
        wakes.ready(&row.task.queue);
    }
    (vec![row.task], Vec::new(), wakes)
}

/// Stores one validated task that [`fits_one_statement`] under its generated `id` in one
/// autocommit statement (one round trip; a transaction takes three: `BEGIN`, `INSERT`,
/// `COMMIT`) and returns the stored task. It is created at `now` when Rust knows it
/// ([`Core::local_now`]: an injected clock), else at the server's time, read in the statement.
/// A ready task carries the adapter's [`inline_notify`](crate::Adapter::inline_notify)
/// expression when it offers one, or the adapter is told after the statement
/// ([`woke`](crate::Adapter::woke)); in-process waiters are woken here.
///
/// An error leaves nothing written, except a lost connection
/// ([`Dialect::is_connection_lost`](crate::Dialect)), after which the statement may have been
/// applied: then a row with `id` exists.
pub(crate) async fn enqueue_autocommit(
    core: &Core,
    task: &Task,
    id: &str,
    now: Option<Timestamp>,
) -> Result<Task, DbError> {
    let mut row = one_statement_row(task, id, now);
    let pending = row.task.status == Status::Pending;
    let notify = if pending { core.adapter.inline_notify() } else { None };
    let sql = match &notify {
        Some(expr) => core.sql_sized("enqueue_autocommit", (1, 0), || {
            format!("{AUTOCOMMIT_ENQUEUE_MARKER} {}", insert_now_sql(Some(expr)))
        }),
        None => core.sql_sized("enqueue_autocommit", (0, 0), || {
            format!("{AUTOCOMMIT_ENQUEUE_MARKER} {}", insert_now_sql(None))
        }),
    };
    let rows = core.adapter.write_one(&sql, &insert_now_args(&row), &[Kind::Int]).await?;
    stamp(&mut row, created_at(&rows)?);
    if pending {
        if notify.is_none() {
            core.adapter.woke();
        }
        let mut wakes = Wakes::default();
        wakes.ready(&row.task.queue);
        core.hub.wake_for(&wakes);
    }
    Ok(row.task)
}

/// Where `run_at` and `created_at` are among [`TaskRow::insert_args`].
const RUN_AT_ARG: usize = 11;
const CREATED_AT_ARG: usize = 18;

/// The one-row `INSERT` of [`insert_now`]: `run_at` and `created_at` default to the server's
/// time (`COALESCE(?, n.now)`, "now" read once for the statement in the `n` CTE). Arguments:
/// every column of [`TASK_COLUMNS`](crate::row::TASK_COLUMNS), NULL for those two to take the
/// server's time.
pub(crate) const INSERT_FROM_NOW: &str = "INSERT INTO {tasks} ({cols}) SELECT ?, ?, ?, ?, ?, \
    ?, ?, ?, ?, ?, ?, COALESCE(?, n.now), ?, ?, ?, ?, ?, ?, COALESCE(?, n.now), ?, ?, ?, ?, ?, \
    ?, ?, ?, ?, ?, ?, ? FROM n";

/// [`INSERT_FROM_NOW`] with the server's time and returning `created_at`; with `notify` (an
/// adapter's [`inline_notify`](crate::SqlConn::inline_notify) expression) evaluated once in a
/// CTE the result joins, so the notification goes out with the COMMIT.
pub(crate) fn insert_now_sql(notify: Option<&str>) -> String {
    let now = "n AS (SELECT {now} AS now)";
    match notify {
        None => format!("WITH {now} {INSERT_FROM_NOW} RETURNING created_at"),
        Some(expr) => format!(
            "WITH {now}, i AS ({INSERT_FROM_NOW} RETURNING created_at), \
             w AS (SELECT {expr} AS v) SELECT i.created_at FROM i, w"
        ),
    }
}

/// One edge per distinct parent; `done = 1` when the parent is already terminal.
pub(crate) async fn insert_edges(
    tx: &mut Tx<'_>,
    child: &str,
    parents: &[(&str, Status)],
) -> Result<(), TxFail> {
    if parents.is_empty() {
        return Ok(());
    }
    let values = vec!["(?, ?, ?)"; parents.len()].join(", ");
    let sql = tx
        .core
        .render(&format!("INSERT INTO {{deps}} (child_id, parent_id, done) VALUES {values}"));
    let mut args = Vec::with_capacity(parents.len() * 3);
    for (parent, status) in parents {
        args.extend([Value::from(child), Value::from(*parent), Value::flag(status.is_terminal())]);
    }
    tx.exec(&sql, &args).await?;
    Ok(())
}

/// The chain tail of `key` by time order (contract §3.4 step 2), if the key has executions.
pub(crate) async fn key_tail(tx: &mut Tx<'_>, key: &str) -> Result<Option<ExistingTask>, TxFail> {
    let sql = tx.core.sql(KEY_TAIL_SQL);
    let rows = tx.fetch(&sql, &[Value::from(key)], &[Kind::Text, Kind::Text]).await?;
    let Some(row) = rows.first() else { return Ok(None) };
    let (execution_id, status) = id_status(row)?;
    Ok(Some(ExistingTask { business_key: key.to_owned(), execution_id, status }))
}

/// Inserts one task row: every column of [`TASK_COLUMNS`](crate::row::TASK_COLUMNS).
pub(crate) const INSERT_SQL: &str = "INSERT INTO {tasks} ({cols}) VALUES (?, ?, ?, ?, ?, ?, ?, \
    ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

/// The key's chain tail: the execution no execution replays (as replay finds it). The
/// predecessor's time order (`ORDER BY created_at DESC, id DESC`) names the wrong execution
/// when a replay lands in the same millisecond as its target and sorts before it by ID.
pub(crate) const KEY_TAIL_SQL: &str = "SELECT id, status FROM {tasks} WHERE business_key = ? \
    AND NOT EXISTS (SELECT 1 FROM {tasks} c WHERE c.replay_of = {tasks}.id) LIMIT 1";

#[cfg(test)]
mod tests {
    use super::{insert_now_sql, CREATED_AT_ARG, INSERT_FROM_NOW, INSERT_SQL, RUN_AT_ARG};
    use crate::row::{TASK_COLUMNS, TASK_COLUMN_COUNT};

    #[test]
    fn the_single_row_insert_binds_every_column() {
        assert_eq!(INSERT_SQL.matches('?').count(), TASK_COLUMN_COUNT);
        assert_eq!(INSERT_FROM_NOW.matches('?').count(), TASK_COLUMN_COUNT);
        for notify in [None, Some("pg_notify('c', 't')")] {
            assert_eq!(insert_now_sql(notify).matches('?').count(), TASK_COLUMN_COUNT);
        }
    }

    #[test]
    fn the_server_time_insert_defaults_run_at_and_created_at() {
        let columns: Vec<&str> = TASK_COLUMNS.split(',').map(str::trim).collect();
        assert_eq!(columns[RUN_AT_ARG], "run_at");
        assert_eq!(columns[CREATED_AT_ARG], "created_at");
        let select = INSERT_FROM_NOW.split(") SELECT ").nth(1).unwrap_or_default();
        let select = select.strip_suffix(" FROM n").unwrap_or_default();
        let select = select.replace("COALESCE(?, n.now)", "now");
        let values: Vec<&str> = select.split(", ").collect();
        assert_eq!(values.len(), TASK_COLUMN_COUNT);
        for (i, value) in values.iter().enumerate() {
            let expected = if i == RUN_AT_ARG || i == CREATED_AT_ARG { "now" } else { "?" };
            assert_eq!(*value, expected, "value {i} ({})", columns[i]);
        }
    }
}
