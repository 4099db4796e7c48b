//! The sqlx SQLite adapter: one writer connection whose transactions are `BEGIN IMMEDIATE`
//! and shared by concurrent callers (group commit, [`crate::group`]), a small read pool that
//! never waits for the writer (WAL), and a dedicated connection for migrations.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sqlx::pool::PoolConnection;
use sqlx::sqlite::{SqliteArguments, SqliteConnectOptions, SqlitePool, SqliteRow};
use sqlx::{Connection, Executor, Row as _, Sqlite, SqliteConnection, ValueRef};
use taskgate_sql::{Adapter, DbResult, Kind, Row, Session, SqlConn, Value, WriteTx};

use crate::group::GroupWriter;

type Query<'q> = sqlx::query::Query<'q, Sqlite, SqliteArguments<'q>>;

/// Binds engine values to a query, borrowing text and bytes; array arguments are refused
/// (SQLite has none, and the dialect never asks for them).
pub(crate) fn bind<'q>(sql: &'q str, args: &'q [Value]) -> DbResult<Query<'q>> {
    Value::refuse_arrays("sqlite", args)?;
    let mut query = sqlx::query(sql);
    for arg in args {
        query = match arg {
            Value::Null(_) | Value::TextArray(_) | Value::BytesArray(_) => query.bind(None::<i64>),
            Value::Int(i) => query.bind(*i),
            Value::Text(s) => query.bind(s.as_str()),
            Value::Bytes(b) => query.bind(b.as_slice()),
        };
    }
    Ok(query)
}

/// Decodes a row by the declared kinds.
pub(crate) fn decode(row: &SqliteRow, kinds: &[Kind]) -> DbResult<Row> {
    let mut out = Vec::with_capacity(kinds.len());
    for (i, kind) in kinds.iter().enumerate() {
        if row.try_get_raw(i)?.is_null() {
            out.push(Value::Null(*kind));
            continue;
        }
        out.push(match kind {
            Kind::Int => Value::Int(row.try_get_unchecked::<i64, _>(i)?),
            Kind::Text => Value::Text(row.try_get_unchecked::<String, _>(i)?),
            Kind::Bytes => Value::Bytes(row.try_get_unchecked::<Vec<u8>, _>(i)?),
        });
    }
    Ok(out)
}

/// Runs engine statements on any SQLite connection (the writer, a session, or a caller's
/// transaction for `enqueue_in`).
pub(crate) struct ConnRef<'c>(pub(crate) &'c mut SqliteConnection);

#[async_trait]
impl SqlConn for ConnRef<'_> {
    async fn execute(&mut self, sql: &str, args: &[Value]) -> DbResult<u64> {
        Ok(bind(sql, args)?.execute(&mut *self.0).await?.rows_affected())
    }

    async fn fetch(&mut self, sql: &str, args: &[Value], kinds: &[Kind]) -> DbResult<Vec<Row>> {
        let rows = bind(sql, args)?.fetch_all(&mut *self.0).await?;
        rows.iter().map(|r| decode(r, kinds)).collect()
    }
}

/// A migration session on its own connection.
struct SqliteSession(SqliteConnection);

#[async_trait]
impl SqlConn for SqliteSession {
    async fn execute(&mut self, sql: &str, args: &[Value]) -> DbResult<u64> {
        ConnRef(&mut self.0).execute(sql, args).await
    }

    async fn fetch(&mut self, sql: &str, args: &[Value], kinds: &[Kind]) -> DbResult<Vec<Row>> {
        ConnRef(&mut self.0).fetch(sql, args, kinds).await
    }
}

#[async_trait]
impl Session for SqliteSession {
    async fn begin(&mut self) -> DbResult<()> {
        self.0.execute("BEGIN IMMEDIATE").await.map(|_| ())
    }

    async fn commit(&mut self) -> DbResult<()> {
        self.0.execute("COMMIT").await.map(|_| ())
    }

    async fn rollback(&mut self) -> DbResult<()> {
        self.0.execute("ROLLBACK").await.map(|_| ())
    }

    async fn close(self: Box<Self>) -> DbResult<()> {
        self.0.close().await
    }
}

/// How often writes trigger a background `PRAGMA optimize` (extensions §E6).
const OPTIMIZE_EVERY: Duration = Duration::from_secs(600);

/// The SQLite adapter: the writer pool (one connection), the group-commit queue of write
/// transactions on it, and the read pool.
#[derive(Debug)]
pub(crate) struct SqliteAdapter {
    pub(crate) writer: SqlitePool,
    /// The queue of in-process writers; concurrent ones share a transaction and its COMMIT.
    pub(crate) group: GroupWriter,
    pub(crate) readers: SqlitePool,
    pub(crate) session_options: SqliteConnectOptions,
    pub(crate) last_optimize: Mutex<Instant>,
}

impl SqliteAdapter {
    /// Runs `PRAGMA optimize` on the writer connection (queued like any write).
    pub(crate) async fn optimize(&self) -> DbResult<()> {
        optimize_on(&self.writer).await
    }

    /// Starts a background optimize when the last one is older than [`OPTIMIZE_EVERY`].
    fn optimize_if_due(&self) {
        let mut last = self.last_optimize.lock().unwrap_or_else(|p| p.into_inner());
        if last.elapsed() < OPTIMIZE_EVERY {
            return;
        }
        *last = Instant::now();
        let writer = self.writer.clone();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move { optimize_on(&writer).await });
        }
    }
}

/// `PRAGMA optimize` on a pool's connection.
pub(crate) async fn optimize_on(pool: &SqlitePool) -> DbResult<()> {
    let mut conn: PoolConnection<Sqlite> = pool.acquire().await?;
    conn.execute("PRAGMA optimize").await.map(|_| ())
}

#[async_trait]
impl Adapter for SqliteAdapter {
    async fn begin(&self) -> DbResult<Box<dyn WriteTx>> {
        self.optimize_if_due();
        self.group.begin().await
    }

    async fn read(&self, sql: &str, args: &[Value], kinds: &[Kind]) -> DbResult<Vec<Row>> {
        let rows = bind(sql, args)?.fetch_all(&self.readers).await?;
        rows.iter().map(|r| decode(r, kinds)).collect()
    }

    async fn session(&self) -> DbResult<Box<dyn Session>> {
        let conn = SqliteConnection::connect_with(&self.session_options).await?;
        Ok(Box::new(SqliteSession(conn)))
    }

    fn shares_writer(&self) -> bool {
        true
    }

    async fn close(&self) {
        self.readers.close().await;
        self.writer.close().await;
    }
}
