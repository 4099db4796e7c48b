//! Claims (contract §3.4 Dequeue, §11.2, §11.3, extensions §E8): the read-only probe an empty
//! poll costs, and the claim transaction in the dialect's shape — one
//! `UPDATE … RETURNING` (SQLite), one `UPDATE … RETURNING` over a `FOR UPDATE SKIP LOCKED`
//! candidate read that reads the server's time itself (PostgreSQL), or `SELECT … FOR UPDATE
//! SKIP LOCKED` then one `UPDATE` (MySQL/MariaDB). Every claimed task gets its own lease
//! token. Claims take tasks in `(priority, run_at, id)` order across the listed queues.

use std::sync::Arc;
use std::time::Duration;

use taskgate::{id, ResolvedOptions, Status, Task, Timestamp};

use super::decode_owned;
use crate::core::Core;
use crate::dialect::{placeholders, ClaimShape};
use crate::row::{TaskRow, TASK_COLUMN_COUNT, TASK_KINDS};
use crate::tx::{Tx, TxFail};
use crate::txrun::Leaving;
use crate::{Kind, Value};

/// The tasks table as a claim's candidate read names it: with the dialect's hint for the
/// `(queue, priority, run_at, id)` claim index.
fn claim_from(core: &Core) -> String {
    format!("{{tasks}}{}", core.dialect.claim_index_hint(&core.prefix))
}

/// The claimable tasks of `n` queues, due by `due` (`?`, or the server's time)
/// ([`Dialect::ready_condition`] with `= ?` for one queue, `IN (…)` for several). Paused
/// queues never match.
///
/// [`Dialect::ready_condition`]: crate::Dialect::ready_condition
fn ready_where(core: &Core, n: usize, due: &str) -> String {
    let test = if n == 1 { "= ?".to_owned() } else { format!("IN ({})", placeholders(n)) };
    format!(
        "{} AND run_at <= {due} AND queue NOT IN (SELECT queue FROM {{paused}})",
        core.dialect.ready_condition(&test)
    )
}

fn queue_args(queues: &[&str]) -> Vec<Value> {
    queues.iter().map(|q| Value::from(*q)).collect()
}

/// What the probe saw: the earliest claimable `run_at` among the watched, unpaused queues and
/// the medium's "now".
pub(crate) struct ProbeResult {
    pub(crate) earliest: Option<Timestamp>,
    pub(crate) now: Timestamp,
}

impl ProbeResult {
    /// `None` when something is ready now; else how long until the next due task, if any.
    pub(crate) fn wait(&self) -> Option<Option<Duration>> {
        match self.earliest {
            Some(at) if at <= self.now => None,
            Some(at) => Some(Some(at.duration_since(self.now))),
            None => Some(None),
        }
    }
}

/// The probe for `n` queues: the earliest claimable `run_at` of each unpaused queue, and the
/// medium's now. Arguments: now override, then the queues.
///
/// Per queue the first entry of the ready index (`ORDER BY run_at LIMIT 1`, one index entry
/// read), then the paused check on that one row — every ready row of the arm has the same
/// queue. A `MIN(run_at)` with the paused check per row makes MariaDB read every ready row of
/// the queue on each poll (about 250 ms at 50,000 ready tasks).
pub(crate) fn probe_sql(core: &Core, n: usize) -> Arc<str> {
    core.sql_sized("probe", (n, 0), || {
        let first = format!(
            "SELECT r.run_at AS m FROM (SELECT run_at, queue FROM {from} WHERE {ready} \
             ORDER BY run_at LIMIT 1) r WHERE r.queue NOT IN (SELECT queue FROM {{paused}})",
            from = core.ready_from(),
            ready = core.dialect.ready_condition("= ?"),
        );
        let per_queue = vec![first; n].join(" UNION ALL ");
        format!("SELECT MIN(m), COALESCE(?, {{now}}) FROM ({per_queue}) e")
    })
}

/// The one-statement claim for `n` queues with lease expression `lease` (`lease_args`
/// arguments). Arguments: token prefix, lease args, now (started_at), queues, now, limit.
pub(crate) fn claim_update_sql(core: &Core, n: usize, lease: &str, lease_args: usize) -> Arc<str> {
    let token = core.dialect.claim_token_sql();
    core.sql_sized("claim_update", (n, lease_args), || {
        format!(
            "UPDATE {{tasks}} SET status = 'running', lease_token = {token}, \
             lease_until = {lease}, heartbeat_at = 0, started_at = CASE WHEN started_at = 0 \
             THEN ? ELSE started_at END WHERE id IN (SELECT id FROM {from} WHERE {ready} \
             ORDER BY priority, run_at, id LIMIT ?) RETURNING {{cols}}",
            from = claim_from(core),
            ready = ready_where(core, n, "?"),
        )
    })
}

/// The one-statement claim of [`ClaimShape::UpdateSkipLocked`] for `n` queues with lease
/// length expression `ttl` (`ttl_args` arguments, in ms). Arguments: now override (or NULL:
/// the server's time, read once for the statement), token prefix, ttl args, queues, limit —
/// except with `one` (a claim of one task), whose limit is the literal `1`.
///
/// The candidates are locked by the inner `FOR UPDATE SKIP LOCKED` read and collected into an
/// array (an init plan), so the update itself is a primary-key lookup whatever the plan's row
/// estimates. `lease_until` saturates at the largest BIGINT, like `Timestamp::saturating_add`.
///
/// Why a literal for one task: PostgreSQL plans a prepared statement afresh on every run
/// (a custom plan) while its generic plan looks dearer, and a generic plan prices `LIMIT $n`
/// as a tenth of the rows, so a bound limit kept every claim on custom plans. With `LIMIT 1`
/// the generic plan costs the same and the server keeps it: at batch 1, where a claim is one
/// task, that planning was a quarter of the server's CPU per claim+ack (benches/report-notes.md,
/// finding 22). Larger claims keep the bound limit, so their sizes share one statement.
pub(crate) fn claim_skip_locked_sql(
    core: &Core,
    n: usize,
    ttl: &str,
    ttl_args: usize,
    one: bool,
    autocommit: bool,
) -> Arc<str> {
    let token = core.dialect.claim_token_sql();
    let (name, limit) = match (one, autocommit) {
        (true, false) => ("claim_skip_locked_one", "1"),
        (false, false) => ("claim_skip_locked", "?"),
        (true, true) => ("claim_autocommit_one", "1"),
        (false, true) => ("claim_autocommit", "?"),
    };
    let marker = if autocommit { AUTOCOMMIT_CLAIM_MARKER } else { "" };
    core.sql_sized(name, (n, ttl_args), || {
        format!(
            "{marker}WITH n AS (SELECT COALESCE(?, {{now}}) AS now) \
             UPDATE {{tasks}} SET status = 'running', lease_token = {token}, \
             lease_until = (SELECT now FROM n) + LEAST({ttl}, 9223372036854775807 - \
             (SELECT now FROM n)), heartbeat_at = 0, started_at = CASE WHEN started_at = 0 \
             THEN (SELECT now FROM n) ELSE started_at END WHERE id = ANY(ARRAY(SELECT id \
             FROM {from} WHERE {ready} ORDER BY priority, run_at, id LIMIT {limit}{{skip_locked}})) \
             RETURNING {{cols}}",
            from = claim_from(core),
            ready = ready_where(core, n, "(SELECT now FROM n)"),
        )
    })
}

/// The claim's candidate read for `n` queues. Arguments: queues, now, limit.
///
/// With `server_now` (the transaction does not know "now" yet) the due test reads the
/// server's time itself (`(SELECT {now})`, one value per statement, usable by the index) and
/// each row carries the server's time as one more column, so the claim costs no separate
/// `SELECT {now}`; the now argument is then left out.
pub(crate) fn claim_select_sql(core: &Core, n: usize, server_now: bool) -> Arc<str> {
    let name = if server_now { "claim_select_now" } else { "claim_select" };
    core.sql_sized(name, (n, 0), || {
        let (due, extra) = if server_now { ("(SELECT {now})", ", {now}") } else { ("?", "") };
        format!(
            "SELECT {{cols}}{extra} FROM {} WHERE {} ORDER BY priority, run_at, id \
             LIMIT ?{{skip_locked}}",
            claim_from(core),
            ready_where(core, n, due)
        )
    })
}

/// The read-only probe: one statement on a read connection, no transaction, no lock.
pub(crate) async fn probe(
    core: &Core,
    opts: &ResolvedOptions,
    queues: &[&str],
) -> taskgate::Result<ProbeResult> {
    let sql = probe_sql(core, queues.len());
    let mut args = vec![core.now_override(opts)];
    args.extend(queue_args(queues));
    let rows = core
        .adapter
        .read(&sql, &args, &[Kind::Int, Kind::Int])
        .await
        .map_err(|e| core.backend_error(e))?;
    let row = rows.first().map(Vec::as_slice).unwrap_or_default();
    let c = crate::value::Cols(row);
    let earliest = c.opt_int(0).map_err(|e| core.backend_error(decode(e)))?;
    let now = c.int(1).map_err(|e| core.backend_error(decode(e)))?;
    Ok(ProbeResult {
        earliest: earliest.map(Timestamp::from_millis),
        now: Timestamp::from_millis(now),
    })
}

fn decode(e: crate::value::DecodeError) -> crate::DbError {
    crate::DbError::Decode(Box::new(e))
}

/// Claims up to `max` ready tasks from `queues` inside the transaction, in
/// `(priority, run_at, id)` order.
pub(crate) async fn claim(
    tx: &mut Tx<'_>,
    queues: &[&str],
    max: usize,
) -> Result<Vec<Task>, TxFail> {
    let mut tasks = match tx.core.dialect.claim_shape() {
        ClaimShape::UpdateReturning => {
            let now = tx.now().await?;
            update_returning(tx, queues, max, now).await?
        }
        ClaimShape::UpdateSkipLocked => update_skip_locked(tx, queues, max).await?,
        ClaimShape::SelectThenUpdate => select_then_update(tx, queues, max).await?,
    };
    tasks.sort_by(|a, b| a.claim_order().cmp(&b.claim_order()));
    for task in &tasks {
        tx.snapshot(task);
    }
    Ok(tasks)
}

/// `lease_until` per queue: `CASE queue WHEN ? THEN ? … ELSE ? END`, or one `?` when every
/// watched queue has the default TTL.
fn lease_expr(opts: &ResolvedOptions, queues: &[&str], now: Timestamp) -> (String, Vec<Value>) {
    let deadline = |q: &str| Value::from(now.saturating_add(opts.ttl(q)));
    let special: Vec<&str> =
        queues.iter().copied().filter(|q| opts.ttl(q) != opts.default_lease_ttl).collect();
    if special.is_empty() {
        return ("?".to_owned(), vec![Value::from(now.saturating_add(opts.default_lease_ttl))]);
    }
    let mut args = Vec::new();
    let mut sql = "CASE queue".to_owned();
    for q in special {
        sql.push_str(" WHEN ? THEN ?");
        args.extend([Value::from(q), deadline(q)]);
    }
    sql.push_str(" ELSE ? END");
    args.push(Value::from(now.saturating_add(opts.default_lease_ttl)));
    (sql, args)
}

/// The lease length per queue in ms: `CASE queue WHEN ? THEN ? … ELSE ? END`, or one `?`
/// when every watched queue has the default TTL.
fn ttl_expr(opts: &ResolvedOptions, queues: &[&str]) -> (String, Vec<Value>) {
    let ms = |d: Duration| Value::Int(i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let special: Vec<&str> =
        queues.iter().copied().filter(|q| opts.ttl(q) != opts.default_lease_ttl).collect();
    if special.is_empty() {
        return ("?".to_owned(), vec![ms(opts.default_lease_ttl)]);
    }
    let mut args = Vec::new();
    let mut sql = "CASE queue".to_owned();
    for q in special {
        sql.push_str(" WHEN ? THEN ?");
        args.extend([Value::from(q), ms(opts.ttl(q))]);
    }
    sql.push_str(" ELSE ? END");
    args.push(ms(opts.default_lease_ttl));
    (sql, args)
}

/// The statement and arguments of a [`ClaimShape::UpdateSkipLocked`] claim, with "now" from
/// `now` when known (else the server's, read inside the statement) and a fresh token prefix.
fn skip_locked_claim(
    core: &Core,
    opts: &ResolvedOptions,
    queues: &[&str],
    max: usize,
    now: Option<Timestamp>,
    autocommit: bool,
) -> (Arc<str>, Vec<Value>) {
    let (ttl, ttl_args) = ttl_expr(opts, queues);
    let sql = claim_skip_locked_sql(core, queues.len(), &ttl, ttl_args.len(), max == 1, autocommit);
    let mut args = Vec::with_capacity(queues.len() + ttl_args.len() + 3);
    args.push(now.map_or(Value::Null(Kind::Int), Value::from));
    args.push(Value::Text(id::new_ulid()));
    args.extend(ttl_args);
    args.extend(queue_args(queues));
    if max != 1 {
        args.push(Value::Int(i64::try_from(max).unwrap_or(i64::MAX)));
    }
    (sql, args)
}

/// [`ClaimShape::UpdateSkipLocked`] inside a transaction: one statement.
async fn update_skip_locked(
    tx: &mut Tx<'_>,
    queues: &[&str],
    max: usize,
) -> Result<Vec<Task>, TxFail> {
    let (sql, args) = skip_locked_claim(tx.core, tx.opts, queues, max, tx.known_now(), false);
    let rows = tx.fetch(&sql, &args, &TASK_KINDS).await?;
    Ok(decode_owned(rows)?.into_iter().map(|r| r.task).collect())
}

/// Waits for room under the dialect's bounds on claims and claimed rows in flight
/// ([`Dialect::claims_in_flight`](crate::Dialect::claims_in_flight),
/// [`Dialect::claim_rows_in_flight`](crate::Dialect::claim_rows_in_flight)) for a claim of
/// `max` tasks; the slot is held until dropped. `Ok(None)` without a bound, and while a test
/// hook stops transactions before their commit (a claim held there must not keep others out).
/// [`TxFail::Abandoned`] when `caller` leaves first.
pub(crate) async fn claim_slot(
    core: &Core,
    max: usize,
    caller: &mut dyn Leaving,
) -> Result<Option<crate::inflight::ClaimSlot>, TxFail> {
    let Some(bounds) = core.claim_bounds.as_ref() else { return Ok(None) };
    if core.has_before_commit_hook() {
        return Ok(None);
    }
    tokio::select! {
        biased;
        permit = bounds.enter(max) => Ok(permit),
        () = caller.left() => Err(TxFail::Abandoned),
    }
}

/// True when claims run as one autocommit statement ([`claim_autocommit`]): the dialect's
/// claim is one statement, and no test hook waits for a commit to stop at.
pub(crate) fn autocommits(core: &Core) -> bool {
    core.dialect.claim_shape() == ClaimShape::UpdateSkipLocked && !core.has_before_commit_hook()
}

/// The comment that opens the one-statement claim's SQL, so that a test proxy can tell the
/// statement that commits the claim (as it does the one-statement ack and enqueue).
pub(crate) const AUTOCOMMIT_CLAIM_MARKER: &str = "/* taskgate: one-statement claim */ ";

/// A [`ClaimShape::UpdateSkipLocked`] claim as a transaction of its own
/// ([`Adapter::write_one_unless`](crate::Adapter::write_one_unless)): one round trip for the
/// whole claim. The statement is the whole transaction, so it is as atomic as the claim in a
/// transaction (its row locks last until its own commit); deadlocks, serialization failures
/// and a connection lost before the answer are retried like a transaction (§11.2). A lost
/// connection's statement may have been applied: its tasks then run under a token nobody
/// holds until their lease expires and the reaper returns them, as after a worker crash.
/// Returns the tasks in claim order and publishes their Notify snapshots;
/// [`TxFail::Abandoned`] when the caller had `left` by the time a connection was in hand
/// (nothing was sent).
pub(crate) async fn claim_autocommit(
    core: &Core,
    opts: &ResolvedOptions,
    queues: &[&str],
    max: usize,
    left: &(dyn Fn() -> bool + Send + Sync),
) -> Result<Vec<Task>, TxFail> {
    let mut attempt: u32 = 0;
    // An attempt lost its connection: it may have claimed tasks (for nobody, until they are
    // reaped), so a failure that ends the call is an unknown outcome, never a definite one.
    let mut lost = false;
    let rows = loop {
        attempt += 1;
        let (sql, args) = skip_locked_claim(core, opts, queues, max, core.local_now(opts), true);
        match core.adapter.write_one_unless(&sql, &args, &TASK_KINDS, left).await {
            Ok(Some(rows)) => break rows,
            Ok(None) => return Err(TxFail::Abandoned),
            Err(e) => {
                lost |= core.maybe_applied(&e);
                if core.should_retry(&e, attempt) {
                    tokio::time::sleep(core.retry_backoff(attempt)).await;
                } else if lost {
                    return Err(TxFail::Unknown(e));
                } else {
                    return Err(TxFail::Db(e));
                }
            }
        }
    };
    let mut tasks: Vec<Task> = decode_owned(rows)?.into_iter().map(|r| r.task).collect();
    tasks.sort_by(|a, b| a.claim_order().cmp(&b.claim_order()));
    if opts.notifier.is_active() {
        opts.notifier.publish(tasks.clone());
    }
    Ok(tasks)
}

async fn update_returning(
    tx: &mut Tx<'_>,
    queues: &[&str],
    max: usize,
    now: Timestamp,
) -> Result<Vec<Task>, TxFail> {
    let (lease, lease_args) = lease_expr(tx.opts, queues, now);
    let sql = claim_update_sql(tx.core, queues.len(), &lease, lease_args.len());
    let mut args = vec![Value::Text(id::new_ulid())];
    args.extend(lease_args);
    args.push(Value::from(now));
    args.extend(queue_args(queues));
    args.push(Value::from(now));
    args.push(Value::Int(i64::try_from(max).unwrap_or(i64::MAX)));
    let rows = tx.fetch(&sql, &args, &TASK_KINDS).await?;
    Ok(decode_owned(rows)?.into_iter().map(|r| r.task).collect())
}

async fn select_then_update(
    tx: &mut Tx<'_>,
    queues: &[&str],
    max: usize,
) -> Result<Vec<Task>, TxFail> {
    let server_now = tx.needs_now();
    let sql = claim_select_sql(tx.core, queues.len(), server_now);
    let mut args = queue_args(queues);
    if !server_now {
        args.push(Value::from(tx.now().await?));
    }
    args.push(Value::Int(i64::try_from(max).unwrap_or(i64::MAX)));
    let raw = if server_now {
        let raw = tx.fetch(&sql, &args, &super::kinds_plus(&[Kind::Int])).await?;
        // The latest of the rows' times: every claimed row was due by it.
        let latest = raw.iter().filter_map(|r| match r.get(TASK_COLUMN_COUNT) {
            Some(Value::Int(ms)) => Some(*ms),
            _ => None,
        });
        if let Some(ms) = latest.max() {
            tx.set_now(Timestamp::from_millis(ms));
        }
        raw
    } else {
        tx.fetch(&sql, &args, &TASK_KINDS).await?
    };
    if raw.is_empty() {
        return Ok(Vec::new());
    }
    let rows = decode_owned(raw)?;
    let now = tx.now().await?;
    let claimed: Vec<TaskRow> = rows.into_iter().map(|r| mark_claimed(tx.opts, r, now)).collect();
    let n = claimed.len();
    // The lease deadline is one value per queue (the claim has one "now"): the per-queue
    // expression, not a per-row CASE.
    let (lease, lease_args) = lease_expr(tx.opts, queues, now);
    let sql = tx.core.sql_sized("claim_mark", (n, lease_args.len()), || {
        let mut sql = "UPDATE {tasks} SET status = 'running', lease_token = CASE id".to_owned();
        sql.push_str(&" WHEN ? THEN ?".repeat(n));
        sql.push_str(&format!(" END, lease_until = {lease}, heartbeat_at = 0, "));
        sql.push_str("started_at = CASE WHEN started_at = 0 THEN ? ELSE started_at END ");
        sql.push_str(&format!("WHERE id IN ({})", placeholders(n)));
        sql
    });
    let mut args = Vec::with_capacity(3 * n + lease_args.len() + 1);
    for r in &claimed {
        args.extend([Value::from(&r.task.id), Value::from(&r.task.lease_token)]);
    }
    args.extend(lease_args);
    args.push(Value::from(now));
    args.extend(claimed.iter().map(|r| Value::from(&r.task.id)));
    tx.exec(&sql, &args).await?;
    Ok(claimed.into_iter().map(|r| r.task).collect())
}

/// The in-memory image of a claim: running, a fresh token, the lease, `started_at` if unset.
fn mark_claimed(opts: &ResolvedOptions, mut row: TaskRow, now: Timestamp) -> TaskRow {
    row.task.status = Status::Running;
    row.task.lease_token = id::new_ulid();
    row.lease_until = now.saturating_add(opts.ttl(&row.task.queue)).as_millis();
    row.task.lease_expires_at = Some(Timestamp::from_millis(row.lease_until));
    row.task.last_heartbeat_at = None;
    if row.task.started_at.is_none() {
        row.task.started_at = Some(now);
    }
    row
}

/// Returns claimed tasks nobody received to `pending` (token-checked, no counter changed):
/// the cancel-safety path of extensions §E0.
///
/// One set-based `UPDATE` per chunk (below the dialect's bind-parameter limit): the IDs, then
/// each row's token checked with `CASE id WHEN ? THEN ? END`. With array parameters
/// (PostgreSQL) one `UPDATE` joining the (id, token) arrays by primary key, its status test
/// unindexable for the reason given at [`ack_unnest_sql`](super::ack::ack_unnest_sql).
pub(crate) async fn unclaim(tx: &mut Tx<'_>, tasks: &[Task]) -> Result<(), TxFail> {
    if tx.core.dialect.array_params() && !tasks.is_empty() {
        let sql = tx.core.sql(
            "UPDATE {tasks} SET status = 'pending', lease_token = '', lease_until = 0 \
             FROM unnest(CAST(? AS TEXT[]), CAST(? AS TEXT[])) AS a(ack_id, ack_token) \
             WHERE id = a.ack_id AND status || '' = 'running' AND lease_token = a.ack_token",
        );
        let args = [
            Value::TextArray(tasks.iter().map(|t| t.id.clone()).collect()),
            Value::TextArray(tasks.iter().map(|t| t.lease_token.clone()).collect()),
        ];
        tx.exec(&sql, &args).await?;
        tx.wake();
        return Ok(());
    }
    let per_chunk = (tx.core.dialect.max_params() / 3).max(1);
    for chunk in tasks.chunks(per_chunk) {
        let n = chunk.len();
        let sql = tx.core.sql_sized("unclaim", (n, 0), || {
            format!(
                "UPDATE {{tasks}} SET status = 'pending', lease_token = '', lease_until = 0 \
                 WHERE id IN ({}) AND status = 'running' AND lease_token = CASE id{} END",
                placeholders(n),
                " WHEN ? THEN ?".repeat(n)
            )
        });
        let mut args: Vec<Value> = chunk.iter().map(|t| Value::from(&t.id)).collect();
        for task in chunk {
            args.extend([Value::from(&task.id), Value::from(&task.lease_token)]);
        }
        tx.exec(&sql, &args).await?;
    }
    tx.wake();
    Ok(())
}
