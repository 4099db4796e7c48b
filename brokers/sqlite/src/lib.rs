//! `taskgate-sqlite`: the embedded taskgate broker — one SQLite file, crash-safe, shared by
//! every process on the machine that opens it.
//!
//! The broker logic is the shared SQL engine (`taskgate-sql`); this crate supplies the sqlx
//! adapter, the SQLite dialect, the migrations in `migrations/sqlite/` and the connection
//! policy:
//!
//! * WAL journal, `busy_timeout` (default 5 s), `synchronous` FULL by default (NORMAL on
//!   request, [`Synchronous`]);
//! * one writer connection per broker; every write transaction is `BEGIN IMMEDIATE`, so
//!   check-then-write is serialised across processes and there are no deadlocks;
//! * group commit: concurrent write calls of one broker share that transaction, each in its
//!   own savepoint (a failing call rolls back only its own work), and one COMMIT — one fsync —
//!   covers them all; every call returns after the COMMIT that covers it, so `synchronous`
//!   FULL still means a returned call survives power loss;
//! * a small read pool (default 4) that never waits for the writer: gets, lists, counts and the
//!   empty-poll probe are reads, not write transactions;
//! * in-process waiters wake at once; other processes' writes are found by a 100 ms poll
//!   (configurable);
//! * migrations run when the file is opened (before `init`), under `BEGIN IMMEDIATE`, then
//!   `PRAGMA optimize`; optimize runs again every 10 minutes of writes so query plans follow the
//!   data (extensions §E6).
//!
//! ```no_run
//! # async fn demo() -> taskgate::Result<()> {
//! use taskgate::{Broker, BrokerOptions, Task};
//! let broker = taskgate_sqlite::SqliteBroker::connect("sqlite://tasks.db").await?;
//! broker.init(BrokerOptions::default()).await?;
//! broker.enqueue(&Task::new("email", "default")).await?;
//! # Ok(()) }
//! ```
//!
//! `sqlite::memory:` opens a private in-memory database served by one connection (reads wait
//! for writes); it is not shared with other handles or processes.

mod adapter;
mod conn;
mod dialect;
mod group;
mod migrations;
mod open;
mod options;
#[cfg(feature = "testing")]
pub mod testing;

use std::sync::Arc;

use sqlx::Sqlite;
use taskgate::{CallerTx, Capabilities, Error, Result, Task, TxEnqueue};
use taskgate_sql::SqlBroker;

pub use dialect::SqliteDialect;
#[cfg(feature = "test-hooks")]
pub use group::GroupCommitHook;
pub use migrations::MIGRATIONS;
pub use options::{
    SqliteOptions, Synchronous, DEFAULT_BUSY_TIMEOUT, DEFAULT_POLL_INTERVAL, DEFAULT_PREFIX,
};
/// The sqlx this backend is built on (0.8.6), so a caller's transaction for `enqueue_in` has
/// the same types: `taskgate_<backend>::sqlx::Transaction`.
pub use sqlx;

/// What a SQLite broker on `location` declares: quota, `enqueue_in`, and for a file shared
/// durable storage (every process on the machine that opens it); other processes' writes are
/// found by polling, and time is the local clock. `sqlite::memory:` is neither shared nor
/// durable. A test dialect whose time is the database's (`time`
/// [`TimeSource::Server`](taskgate_sql::TimeSource::Server), the server-shaped one of
/// [`testing`](crate::testing)) declares a server clock.
pub(crate) fn capabilities(
    location: &options::Location,
    time: taskgate_sql::TimeSource,
) -> Capabilities {
    let file = matches!(location, options::Location::File(_));
    Capabilities::NONE
        .with_quota(true)
        .with_audit(true)
        .with_transactional_enqueue(true)
        .with_shared_storage(file)
        .with_durable(file)
        .with_server_clock(time == taskgate_sql::TimeSource::Server)
}

/// A taskgate broker on a SQLite database. Implements [`taskgate::Broker`] and the quota
/// capability; every handle opened on the same file shares tasks, quota and pause flags.
#[derive(Clone, Debug)]
pub struct SqliteBroker {
    inner: SqlBroker,
    adapter: Arc<adapter::SqliteAdapter>,
}

taskgate_sql::delegate_broker!(SqliteBroker, inner, tx_enqueue);

impl SqliteBroker {
    /// Opens (creating if needed) the database file at `path` with default options.
    pub async fn open(path: impl AsRef<std::path::Path>) -> Result<SqliteBroker> {
        SqliteOptions::new(path).open().await
    }

    /// Opens a `sqlite://<path>` or `sqlite::memory:` URL with default options.
    pub async fn connect(url: &str) -> Result<SqliteBroker> {
        SqliteOptions::from_url(url)?.open().await
    }

    /// Opens with `options`: validates the prefix, connects (WAL, busy timeout,
    /// synchronous), applies the migrations not yet recorded and refreshes statistics.
    /// A missing directory or a bad prefix is `InvalidInput`; a file that is not a database,
    /// or one that cannot be written, is `Backend`.
    pub async fn open_with(options: SqliteOptions) -> Result<SqliteBroker> {
        open::open(options).await
    }

    /// Transactional enqueue (extensions §E15): stores `task` inside the caller's open
    /// transaction on the same database file. It is invisible to claimers until the caller
    /// commits and gone if it rolls back; waiters find it by their next poll. Notify is not
    /// called. Open the transaction with `begin_with("BEGIN IMMEDIATE")` so the write lock is
    /// taken up front (a deferred transaction that read first can fail with `SQLITE_BUSY`).
    pub async fn enqueue_in(
        &self,
        tx: &mut sqlx::Transaction<'_, Sqlite>,
        task: &Task,
    ) -> Result<Task> {
        self.enqueue_on_conn(tx, task).await
    }

    async fn enqueue_on_conn(
        &self,
        conn: &mut sqlx::SqliteConnection,
        task: &Task,
    ) -> Result<Task> {
        self.inner.enqueue_on(&mut conn::ConnRef(conn), task).await
    }

    /// The shared engine under this broker (retry counter, test hooks).
    pub fn engine(&self) -> &SqlBroker {
        &self.inner
    }

    /// Refreshes the query planner's statistics (`PRAGMA optimize`). Runs by itself after
    /// migrations and every 10 minutes of writes.
    pub async fn optimize(&self) -> Result<()> {
        self.adapter.optimize().await.map_err(|e| taskgate::Error::backend("sqlite", e))
    }

    /// The applied schema versions, ascending (the engine's [`taskgate_sql::schema_status`]
    /// on a read connection).
    pub async fn schema_versions(&self) -> Result<Vec<i64>> {
        let backend = |e: taskgate_sql::DbError| Error::backend("sqlite", e);
        let mut conn = self.adapter.readers.acquire().await.map_err(backend)?;
        let mut conn = conn::ConnRef(&mut conn);
        let status =
            taskgate_sql::schema_status(&mut conn, &SqliteDialect, self.inner.prefix(), MIGRATIONS);
        Ok(status.await.map_err(backend)?.applied.unwrap_or_default())
    }

    /// Installs (or removes) a hook called before each shared COMMIT with the number of calls
    /// it covers (group commit; tests, feature `test-hooks`).
    #[cfg(feature = "test-hooks")]
    pub fn set_group_commit_hook(&self, hook: Option<GroupCommitHook>) {
        self.adapter.group.set_hook(hook);
    }

    /// Sets how long the first call a shared transaction covers may wait for its COMMIT while
    /// others join (default 20 ms; tests lengthen it to form groups at their own pace; feature
    /// `test-hooks`).
    #[cfg(feature = "test-hooks")]
    pub fn set_group_commit_max_wait(&self, wait: std::time::Duration) {
        self.adapter.group.set_max_wait(wait);
    }

    /// The write calls of this handle queued for the writer connection (tests, feature
    /// `test-hooks`).
    #[cfg(feature = "test-hooks")]
    pub fn writers_waiting(&self) -> usize {
        self.adapter.group.waiting()
    }
}

impl SqliteOptions {
    /// The schema under this prefix in the database file, beside the migrations this build
    /// knows ([`taskgate_sql::schema_status`]), read through a read-only connection: unlike
    /// [`open`](SqliteOptions::open), it creates and migrates nothing. A file that does not
    /// exist is `InvalidInput`; `sqlite::memory:` has no schema until it is opened
    /// (`applied: None`).
    pub async fn schema_status(&self) -> Result<taskgate_sql::SchemaStatus> {
        use sqlx::Connection as _;
        let path = match &self.location {
            options::Location::Memory => {
                let known = MIGRATIONS.iter().map(|m| (m.version, m.name)).collect();
                return Ok(taskgate_sql::SchemaStatus { applied: None, known });
            }
            options::Location::File(path) if !path.is_file() => {
                let reason = format!("no SQLite database at {}", path.display());
                return Err(Error::invalid("path", reason));
            }
            options::Location::File(path) => path,
        };
        taskgate::validate::validate_prefix(&self.prefix)?;
        let backend = |e: taskgate_sql::DbError| Error::backend("sqlite", e);
        let connect = sqlx::sqlite::SqliteConnectOptions::new().filename(path).read_only(true);
        let mut conn = sqlx::SqliteConnection::connect_with(&connect).await.map_err(backend)?;
        let status = taskgate_sql::schema_status(
            &mut conn::ConnRef(&mut conn),
            &SqliteDialect,
            &self.prefix,
            MIGRATIONS,
        )
        .await;
        let _ = conn.close().await;
        status.map_err(backend)
    }
}

/// [`SqliteBroker::enqueue_in`] for callers that hold a `dyn Broker` (the worker runtime's
/// `Client::submit_in`): `tx` is a `sqlx::Transaction<'static, Sqlite>` (`pool.begin()`) or the
/// connection of an open transaction (`&mut *tx`); a connection outside a transaction is
/// `InvalidInput`.
#[async_trait::async_trait]
impl TxEnqueue for SqliteBroker {
    async fn enqueue_in_tx(&self, tx: CallerTx<'_>, task: &Task) -> Result<Task> {
        let conn = tx.connection::<sqlx::Transaction<'static, Sqlite>>("sqlite")?;
        match sqlx::Connection::is_in_transaction(&*conn) {
            true => self.enqueue_on_conn(conn, task).await,
            false => {
                Err(Error::invalid("transaction", "the connection is not inside a transaction"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use taskgate::{Broker, Capabilities};

    use crate::{SqliteBroker, SqliteOptions};

    #[tokio::test]
    async fn a_file_is_shared_and_durable_memory_is_neither() -> taskgate::Result<()> {
        let base =
            Capabilities::NONE.with_quota(true).with_audit(true).with_transactional_enqueue(true);
        let memory: Arc<dyn Broker> = Arc::new(SqliteBroker::connect("sqlite::memory:").await?);
        assert_eq!(memory.capabilities(), base);
        let dir = tempfile::tempdir().map_err(|e| taskgate::Error::backend("sqlite", e))?;
        let file: Arc<dyn Broker> =
            Arc::new(SqliteOptions::new(dir.path().join("t.db")).open().await?);
        assert_eq!(file.capabilities(), base.with_shared_storage(true).with_durable(true));
        assert!(file.quota_provider().is_some(), "quota declared, quota given");
        memory.close().await?;
        file.close().await
    }
}
