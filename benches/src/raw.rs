//! The database's own ceiling for the broker's claim+ack work: the same loop, batch and
//! session count as plain SQL on the same table and index, with no broker logic.
//!
//! A claim returns what a claim must return: every column of the task
//! ([`TASK_COLUMNS`], the payload included), each decoded into a Rust value as any client
//! would — so the ceiling carries the same rows over the wire as the broker's claim, and the
//! ratio measures the broker's own overhead, not the width of its rows.
//!
//! * PostgreSQL / MySQL: one transaction `SELECT <columns> … ORDER BY run_at, id LIMIT n FOR
//!   UPDATE SKIP LOCKED` + `UPDATE … SET status = 'running'`, then one autocommit completing
//!   `UPDATE … SET status = 'completed'` — two commits per claim. MySQL reads the ready index
//!   through `ready_queue` exactly as the broker's statements do.
//! * SQLite: `UPDATE … RETURNING <columns>` in a `BEGIN IMMEDIATE` transaction, then the
//!   completing `UPDATE`, on one connection with the broker's pragmas (WAL, synchronous FULL)
//!   shared by the claimers — the broker's own design (one writer per process), and the
//!   fastest one: several writer connections would only queue on the file lock through
//!   `busy_timeout`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sqlx::mysql::MySqlRow;
use sqlx::pool::PoolConnection;
use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;
use sqlx::{Acquire, MySql, Postgres, Row, Sqlite, SqlitePool};
use taskgate_sql::row::{TASK_COLUMNS, TASK_KINDS};
use taskgate_sql::Kind;

use crate::backend::{Bed, RawPool};
use crate::drive::{self, Claimed, Outcome, Spec, Stop, Worker};
use crate::Result;

/// When set, raw claims return the IDs alone (the ceiling as the report measured it before the
/// claim returned every column): only for comparing with earlier reports (`report
/// --raw-ids-only`).
static IDS_ONLY: AtomicBool = AtomicBool::new(false);

/// Makes raw claims return the IDs alone (`true`) or every task column (`false`, the default).
pub fn set_ids_only(ids_only: bool) {
    IDS_ONLY.store(ids_only, Ordering::Relaxed);
}

/// The columns a raw claim returns.
fn returned() -> &'static str {
    if IDS_ONLY.load(Ordering::Relaxed) {
        "id"
    } else {
        TASK_COLUMNS
    }
}

/// The kinds of the columns a raw claim returns.
fn returned_kinds() -> &'static [Kind] {
    if IDS_ONLY.load(Ordering::Relaxed) {
        &TASK_KINDS[..1]
    } else {
        &TASK_KINDS
    }
}

/// Lease length written by raw claims (the broker's default lease TTL).
const LEASE_MS: i64 = 60_000;

fn now_ms() -> i64 {
    taskgate::Timestamp::from_system_time(std::time::SystemTime::now()).as_millis()
}

/// Runs the raw loop for `spec` on `bed`, lane `i` holding `per_lane[i]` tasks (already
/// filled): claims and completes them with plain SQL, one session per claimer.
pub async fn raw_run(bed: &Bed, spec: Spec, per_lane: &[u64], stop: Stop) -> Result<Outcome> {
    let table: Arc<str> = bed.tasks_table().into();
    match &bed.raw {
        RawPool::Postgres(pool) => {
            let mut workers = Vec::new();
            for _ in 0..spec.claimers {
                workers.push(Some(PgRaw { conn: pool.acquire().await?, table: table.clone() }));
            }
            drive::run(spec, per_lane, stop, |i| take(&mut workers, i)).await
        }
        RawPool::MySql(pool) => {
            let mut workers = Vec::new();
            for _ in 0..spec.claimers {
                workers.push(Some(MySqlRaw { conn: pool.acquire().await?, table: table.clone() }));
            }
            drive::run(spec, per_lane, stop, |i| take(&mut workers, i)).await
        }
        RawPool::Sqlite(pool) => {
            let pool = pool.clone();
            drive::run(spec, per_lane, stop, |_| {
                Ok(SqliteRaw { pool: pool.clone(), table: table.clone() })
            })
            .await
        }
        RawPool::None => Err("the memory backend has no raw-SQL ceiling".into()),
    }
}

fn take<W>(workers: &mut [Option<W>], i: usize) -> Result<W> {
    workers.get_mut(i).and_then(Option::take).ok_or_else(|| "no worker for claimer".into())
}

fn ids_of(claimed: &[Claimed]) -> Vec<String> {
    claimed.iter().map(|c| c.id.clone()).collect()
}

/// A claimed row's values, decoded column by column ([`TASK_KINDS`]) as a client would and
/// handed to [`std::hint::black_box`] so none of the work is optimised away; the ID (the first
/// column) is kept.
fn claimed_row(id: Option<String>) -> Result<Claimed> {
    let id = id.ok_or("a claimed row without an ID")?;
    Ok(Claimed { id, token: String::new() })
}

/// Decodes columns 1.. of a row of [`TASK_COLUMNS`] by [`returned_kinds`], text through
/// `text` (MySQL's binary-collated text arrives as bytes), each value handed to
/// [`std::hint::black_box`].
fn decode_rest<R>(row: &R, text: impl Fn(usize) -> Result<Option<String>>) -> Result<()>
where
    R: sqlx::Row,
    usize: sqlx::ColumnIndex<R>,
    for<'r> Option<i64>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Option<Vec<u8>>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    for (i, kind) in returned_kinds().iter().enumerate().skip(1) {
        match kind {
            Kind::Int => {
                let _ = std::hint::black_box(row.try_get::<Option<i64>, _>(i)?);
            }
            Kind::Text => {
                let _ = std::hint::black_box(text(i)?);
            }
            Kind::Bytes => {
                let _ = std::hint::black_box(row.try_get::<Option<Vec<u8>>, _>(i)?);
            }
        }
    }
    Ok(())
}

/// Decodes a PostgreSQL row of [`TASK_COLUMNS`].
fn pg_row(row: &PgRow) -> Result<Claimed> {
    decode_rest(row, |i| Ok(row.try_get::<Option<String>, _>(i)?))?;
    claimed_row(row.try_get(0)?)
}

/// Decodes a MySQL row of [`TASK_COLUMNS`] (binary-collated text arrives as bytes).
fn mysql_row(row: &MySqlRow) -> Result<Claimed> {
    let text = |i: usize| -> Result<Option<String>> {
        let raw: Option<Vec<u8>> = row.try_get(i)?;
        Ok(raw.map(String::from_utf8).transpose()?)
    };
    decode_rest(row, text)?;
    claimed_row(text(0)?)
}

/// Decodes a SQLite row of [`TASK_COLUMNS`].
fn sqlite_row(row: &SqliteRow) -> Result<Claimed> {
    decode_rest(row, |i| Ok(row.try_get::<Option<String>, _>(i)?))?;
    claimed_row(row.try_get(0)?)
}

fn limit(max: usize) -> i64 {
    i64::try_from(max).unwrap_or(i64::MAX)
}

/// One PostgreSQL session.
struct PgRaw {
    conn: PoolConnection<Postgres>,
    table: Arc<str>,
}

#[async_trait]
impl Worker for PgRaw {
    async fn claim(&mut self, queue: &str, max: usize) -> Result<Vec<Claimed>> {
        let t = &self.table;
        let now = now_ms();
        let cols = returned();
        let mut tx = self.conn.begin().await?;
        let rows = sqlx::query(&format!(
            "SELECT {cols} FROM {t} WHERE queue = $1 AND status IN ('pending', \
             'retrying') AND run_at <= $2 ORDER BY run_at, id LIMIT $3 FOR UPDATE SKIP LOCKED"
        ))
        .bind(queue)
        .bind(now)
        .bind(limit(max))
        .fetch_all(&mut *tx)
        .await?;
        let claimed = rows.iter().map(pg_row).collect::<Result<Vec<_>>>()?;
        if !claimed.is_empty() {
            sqlx::query(&format!(
                "UPDATE {t} SET status = 'running', lease_token = $1, lease_until = $2, \
                 started_at = $3 WHERE id = ANY($4)"
            ))
            .bind(taskgate::id::new_ulid())
            .bind(now + LEASE_MS)
            .bind(now)
            .bind(ids_of(&claimed))
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(claimed)
    }

    async fn complete(&mut self, claimed: Vec<Claimed>) -> Result<()> {
        let t = &self.table;
        sqlx::query(&format!(
            "UPDATE {t} SET status = 'completed', finished_at = $1, lease_token = '', \
             lease_until = 0 WHERE id = ANY($2)"
        ))
        .bind(now_ms())
        .bind(ids_of(&claimed))
        .execute(&mut *self.conn)
        .await?;
        Ok(())
    }
}

/// `?, ?, …` for `n` values.
fn marks(n: usize) -> String {
    vec!["?"; n].join(", ")
}

/// One MySQL session (READ COMMITTED, like the broker's).
struct MySqlRaw {
    conn: PoolConnection<MySql>,
    table: Arc<str>,
}

#[async_trait]
impl Worker for MySqlRaw {
    async fn claim(&mut self, queue: &str, max: usize) -> Result<Vec<Claimed>> {
        let t = &self.table;
        let now = now_ms();
        let cols = returned();
        let mut tx = self.conn.begin().await?;
        let rows = sqlx::query(&format!(
            "SELECT {cols} FROM {t} WHERE ready_queue = ? AND run_at <= ? \
             ORDER BY run_at, id LIMIT ? FOR UPDATE SKIP LOCKED"
        ))
        .bind(queue)
        .bind(now)
        .bind(limit(max))
        .fetch_all(&mut *tx)
        .await?;
        let claimed = rows.iter().map(mysql_row).collect::<Result<Vec<_>>>()?;
        if !claimed.is_empty() {
            let sql = format!(
                "UPDATE {t} SET status = 'running', lease_token = ?, lease_until = ?, \
                 started_at = ? WHERE id IN ({})",
                marks(claimed.len())
            );
            let mut q =
                sqlx::query(&sql).bind(taskgate::id::new_ulid()).bind(now + LEASE_MS).bind(now);
            for c in &claimed {
                q = q.bind(&c.id);
            }
            q.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(claimed)
    }

    async fn complete(&mut self, claimed: Vec<Claimed>) -> Result<()> {
        let sql = format!(
            "UPDATE {} SET status = 'completed', finished_at = ?, lease_token = '', \
             lease_until = 0 WHERE id IN ({})",
            self.table,
            marks(claimed.len())
        );
        let mut q = sqlx::query(&sql).bind(now_ms());
        for c in &claimed {
            q = q.bind(&c.id);
        }
        q.execute(&mut *self.conn).await?;
        Ok(())
    }
}

/// A claimer on the shared SQLite connection.
struct SqliteRaw {
    pool: SqlitePool,
    table: Arc<str>,
}

#[async_trait]
impl Worker for SqliteRaw {
    async fn claim(&mut self, queue: &str, max: usize) -> Result<Vec<Claimed>> {
        let t = &self.table;
        let now = now_ms();
        let mut conn = self.pool.acquire().await?;
        let cols = returned();
        let mut tx = sqlx::Connection::begin_with(&mut *conn, "BEGIN IMMEDIATE").await?;
        let rows = sqlx::query(&format!(
            "UPDATE {t} SET status = 'running', lease_token = ?1, lease_until = ?2, \
             started_at = ?3 WHERE id IN (SELECT id FROM {t} WHERE queue = ?4 AND status IN \
             ('pending', 'retrying') AND run_at <= ?3 ORDER BY run_at, id LIMIT ?5) \
             RETURNING {cols}"
        ))
        .bind(taskgate::id::new_ulid())
        .bind(now + LEASE_MS)
        .bind(now)
        .bind(queue)
        .bind(limit(max))
        .fetch_all(&mut *tx)
        .await?;
        let claimed = rows.iter().map(sqlite_row).collect::<Result<Vec<_>>>()?;
        tx.commit().await?;
        Ok(claimed)
    }

    async fn complete(&mut self, claimed: Vec<Claimed>) -> Result<()> {
        let sql = format!(
            "UPDATE {} SET status = 'completed', finished_at = ?, lease_token = '', \
             lease_until = 0 WHERE id IN ({})",
            self.table,
            marks(claimed.len())
        );
        let mut q = sqlx::query::<Sqlite>(&sql).bind(now_ms());
        for c in &claimed {
            q = q.bind(&c.id);
        }
        q.execute(&self.pool).await?;
        Ok(())
    }
}

/// Longest wait for one raw pickup before the sample fails.
const PICKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// The raw-SQL ceiling of the worker runtime's idle pickup on PostgreSQL (insert → handler
/// start), with no broker code: a producer connection inserts one task carrying its
/// `pg_notify` in one autocommit statement (the broker's plain enqueue is that too), a
/// `LISTEN` connection receives the notification, and a claimer connection claims with one
/// autocommit `UPDATE … WHERE id = (SELECT … FOR UPDATE SKIP LOCKED) RETURNING <columns>` and
/// decodes the row. One sample is the start of the insert to the decoded row; the producer
/// waits `idle` before each insert, as the runtime's pickup does. The claimer completes the
/// task after the sample (off the timed path, as the runtime's batched ack is). Needs three
/// connections in the bed's raw pool.
pub async fn pg_pickups(
    bed: &Bed,
    queue: &str,
    samples: usize,
    idle: Duration,
) -> Result<Vec<Duration>> {
    let RawPool::Postgres(pool) = &bed.raw else {
        return Err("the raw pickup ceiling is PostgreSQL's".into());
    };
    let t = bed.tasks_table();
    let channel = format!("{}raw_pickup", bed.prefix);
    let mut listener = sqlx::postgres::PgListener::connect_with(pool).await?;
    listener.listen(&channel).await?;
    let mut producer = pool.acquire().await?;
    let mut claimer = pool.acquire().await?;
    let claim = format!(
        "UPDATE {t} SET status = 'running', lease_token = $1, lease_until = $2, started_at = $3, \
         attempts = attempts + 1 WHERE id = (SELECT id FROM {t} WHERE queue = $4 AND status IN \
         ('pending', 'retrying') AND run_at <= $3 ORDER BY run_at, id LIMIT 1 FOR UPDATE SKIP \
         LOCKED) RETURNING {cols}",
        cols = returned()
    );
    let complete = format!(
        "UPDATE {t} SET status = 'completed', finished_at = $1, lease_token = '', \
         lease_until = 0 WHERE id = $2"
    );
    let insert = format!(
        "WITH w AS (SELECT pg_notify($1, '')) INSERT INTO {t} (id, type, queue, status, run_at, \
         created_at) SELECT $2, $3, $4, 'pending', $5, $5 FROM w"
    );
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let queue_owned = queue.to_owned();
    let claiming = tokio::spawn(async move {
        for _ in 0..samples {
            listener.recv().await?;
            let now = now_ms();
            let row = sqlx::query(&claim)
                .bind(taskgate::id::new_ulid())
                .bind(now + LEASE_MS)
                .bind(now)
                .bind(&queue_owned)
                .fetch_optional(&mut *claimer)
                .await?;
            let Some(row) = row else { continue };
            let claimed = pg_row(&row)?;
            let _ = tx.send(Instant::now());
            sqlx::query(&complete).bind(now_ms()).bind(&claimed.id).execute(&mut *claimer).await?;
        }
        Ok::<_, crate::BoxError>(())
    });
    let mut out = Vec::with_capacity(samples);
    for _ in 0..samples {
        tokio::time::sleep(idle).await;
        let begin = Instant::now();
        sqlx::query(&insert)
            .bind(&channel)
            .bind(taskgate::id::new_ulid())
            .bind(crate::fill::TASK_TYPE)
            .bind(queue)
            .bind(now_ms())
            .execute(&mut *producer)
            .await?;
        match tokio::time::timeout(PICKUP_TIMEOUT, rx.recv()).await {
            Ok(Some(at)) => out.push(at.saturating_duration_since(begin)),
            Ok(None) => break,
            Err(_) => {
                claiming.abort();
                return Err(format!("no raw pickup within {PICKUP_TIMEOUT:?}").into());
            }
        }
    }
    claiming.await??;
    if out.len() < samples {
        return Err("the raw claimer stopped early".into());
    }
    Ok(out)
}
