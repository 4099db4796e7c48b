//! The sqlx SQLite adapter: one writer connection whose transactions are `BEGIN IMMEDIATE`
//! and shared by concurrent callers (group commit, [`crate::group`]), a small read pool that
//! never waits for the writer (WAL), and a dedicated connection for migrations.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sqlx::pool::PoolConnection;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};
use sqlx::{Connection, Executor, Sqlite, SqliteConnection};
use taskgate_sql::{Adapter, DbResult, Kind, Row, Session, SqlConn, Value, WriteTx};

use crate::conn::{bind, decode, ConnRef};
use crate::group::GroupWriter;

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
