//! The brokertest factory for SQLite (feature `testing`): every case gets a fresh database
//! file in its own temporary directory, or, on a file the caller names
//! ([`SqliteFactory::on_file`], `taskgate check sqlite://PATH`), a fresh [`TestPrefix`] whose
//! tables are dropped afterwards (the engine's test kit); every handle is a new broker instance
//! on that file. With the server-shaped dialect the file also holds the clock the suite sets as
//! the "server's" ([`Storage::server_clock`]).

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use brokertest::{Factory, ServerClock, Storage};
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{Connection, SqliteConnection};
use taskgate::{BoxError, Broker, Timestamp};

pub use taskgate_sql::testing::TestPrefix;
use taskgate_sql::{
    ClaimShape, DbError, DdlLock, Dialect, Placeholder, QuotaShape, RetryClass, TimeSource,
    UniqueTarget,
};

use crate::{SqliteBroker, SqliteDialect, SqliteOptions, Synchronous};

/// Hands each contract case a fresh SQLite file.
#[derive(Clone, Debug)]
pub struct SqliteFactory {
    synchronous: Synchronous,
    poll_interval: Duration,
    server_shaped: bool,
    file: Option<PathBuf>,
}

impl Default for SqliteFactory {
    fn default() -> Self {
        SqliteFactory::new()
    }
}

impl SqliteFactory {
    /// A factory with the broker's defaults (synchronous FULL, 100 ms poll).
    pub fn new() -> Self {
        SqliteFactory {
            synchronous: Synchronous::Full,
            poll_interval: crate::DEFAULT_POLL_INTERVAL,
            server_shaped: false,
            file: None,
        }
    }

    /// A factory whose cases share the database file at `path` (created when missing), each
    /// under a fresh [`TestPrefix`] whose tables are dropped afterwards; the first storage
    /// drops test tables older than an hour from the file.
    pub fn on_file(path: impl Into<PathBuf>) -> Self {
        SqliteFactory { file: Some(path.into()), ..SqliteFactory::new() }
    }

    /// The same factory with [`ServerShapedDialect`]: the engine's PostgreSQL/MySQL paths
    /// (locking read then update, two-step quota, server time) run on SQLite.
    pub fn server_shaped(mut self) -> Self {
        self.server_shaped = true;
        self
    }

    /// The same factory with another `synchronous` setting.
    pub fn with_synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// A fresh, empty storage in a temporary directory, directly (for backend tests outside
    /// the contract suite).
    pub fn storage_now(&self) -> Result<SqliteStorage, BoxError> {
        let dir = tempfile::Builder::new().prefix("taskgate-sqlite-").tempdir()?;
        let path = dir.path().join("tasks.db");
        Ok(SqliteStorage { dir: Some(dir), path, prefix: None, factory: self.clone() })
    }
}

/// Drops the stale test tables of the file at `path` through a handle of `prefix` (opening a
/// SQLite handle migrates its prefix: never the file's default one); returns their prefixes.
async fn sweep(path: &Path, prefix: &TestPrefix) -> Result<Vec<TestPrefix>, BoxError> {
    let broker = SqliteOptions::new(path).prefix(prefix.as_str()).open().await?;
    let swept = broker.engine().sweep_stale_test_tables().await;
    let _ = broker.close().await;
    swept
}

#[async_trait]
impl Factory for SqliteFactory {
    fn name(&self) -> String {
        "sqlite".to_owned()
    }

    async fn storage(&self) -> Result<Box<dyn Storage>, BoxError> {
        let Some(path) = &self.file else { return Ok(Box::new(self.storage_now()?)) };
        let key = format!("sqlite://{}", path.display());
        let prefix = TestPrefix::new();
        let storage = SqliteStorage {
            dir: None,
            path: path.clone(),
            prefix: Some(prefix.clone()),
            factory: self.clone(),
        };
        taskgate_sql::testing::sweep_once(&key, || sweep(path, &prefix)).await?;
        Ok(Box::new(storage))
    }
}

/// One case's database: a temporary file, removed (with its `-wal` and `-shm`) at cleanup, or
/// a prefix on a named file, whose tables are dropped at cleanup.
#[derive(Debug)]
pub struct SqliteStorage {
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
    prefix: Option<TestPrefix>,
    factory: SqliteFactory,
}

impl SqliteStorage {
    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Options for a new handle on this file.
    pub fn options(&self) -> SqliteOptions {
        let mut options = SqliteOptions::new(&self.path)
            .synchronous(self.factory.synchronous)
            .poll_interval(self.factory.poll_interval);
        if let Some(prefix) = &self.prefix {
            options = options.prefix(prefix.as_str());
        }
        match self.factory.server_shaped {
            true => options.dialect(Arc::new(ServerShapedDialect)),
            false => options,
        }
    }

    /// A new broker instance on this file (not initialised).
    pub async fn open(&self) -> taskgate::Result<SqliteBroker> {
        self.options().open().await
    }
}

#[async_trait]
impl Storage for SqliteStorage {
    async fn handle(&self) -> Result<Arc<dyn Broker>, BoxError> {
        Ok(Arc::new(self.open().await?))
    }

    async fn handle_polling_every(
        &self,
        interval: Duration,
    ) -> Option<Result<Arc<dyn Broker>, BoxError>> {
        let opened = self.options().poll_interval(interval).open().await;
        Some(opened.map(|b| Arc::new(b) as Arc<dyn Broker>).map_err(Into::into))
    }

    /// The server-shaped dialect reads "now" from the database: the clock is a one-row table
    /// in the file that [`ClockedServerShapedDialect`] reads instead of SQLite's time. The
    /// plain dialect's time is local (no server clock).
    async fn server_clock(
        &self,
        start: Timestamp,
    ) -> Option<Result<Box<dyn ServerClock>, BoxError>> {
        if !self.factory.server_shaped {
            return None;
        }
        let clock = TableClock { path: self.path.clone(), options: self.options() };
        Some(clock.create(start).await.map(|c| Box::new(c) as Box<dyn ServerClock>))
    }

    async fn handle_with_prefix(&self, prefix: &str) -> Option<taskgate::Result<Arc<dyn Broker>>> {
        let opened = self.options().prefix(prefix).open().await;
        Some(opened.map(|b| Arc::new(b) as Arc<dyn Broker>))
    }

    async fn cleanup(&self) -> Result<(), BoxError> {
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir.path());
        } else {
            let broker = self.open().await?;
            let dropped = broker.engine().drop_tables().await;
            broker.close().await?;
            dropped?;
        }
        Ok(())
    }
}

/// The table a [`ClockedServerShapedDialect`] reads "now" from (milliseconds, one row).
pub const CLOCK_TABLE: &str = "tgtest_server_now";

/// The server clock of a server-shaped storage: a one-row table in the file.
struct TableClock {
    path: PathBuf,
    options: SqliteOptions,
}

impl TableClock {
    async fn connect(&self) -> Result<SqliteConnection, BoxError> {
        let url = format!("sqlite://{}", self.path.display());
        let options = SqliteConnectOptions::from_str(&url)?.create_if_missing(true);
        Ok(SqliteConnection::connect_with(&options).await?)
    }

    /// Creates the table at `start`.
    async fn create(self, start: Timestamp) -> Result<TableClock, BoxError> {
        let mut conn = self.connect().await?;
        let create = format!("CREATE TABLE {CLOCK_TABLE} (ms INTEGER NOT NULL)");
        sqlx::query(&create).execute(&mut conn).await?;
        let insert = format!("INSERT INTO {CLOCK_TABLE} (ms) VALUES (?)");
        sqlx::query(&insert).bind(start.as_millis()).execute(&mut conn).await?;
        conn.close().await?;
        Ok(self)
    }
}

#[async_trait]
impl ServerClock for TableClock {
    async fn handle(&self) -> Result<Arc<dyn Broker>, BoxError> {
        let options = self.options.clone().dialect(Arc::new(ClockedServerShapedDialect));
        Ok(Arc::new(options.open().await?))
    }

    async fn set(&self, at: Timestamp) -> Result<(), BoxError> {
        let mut conn = self.connect().await?;
        let update = format!("UPDATE {CLOCK_TABLE} SET ms = ?");
        sqlx::query(&update).bind(at.as_millis()).execute(&mut conn).await?;
        conn.close().await?;
        Ok(())
    }
}

/// [`ServerShapedDialect`] whose "server time" is the [`CLOCK_TABLE`] row, which the suite
/// sets ([`Storage::server_clock`]): the engine's server-time paths with a server clock a test
/// controls.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClockedServerShapedDialect;

/// The clock row, in milliseconds.
const TABLE_NOW_MS: &str = "(SELECT ms FROM tgtest_server_now)";

impl Dialect for ClockedServerShapedDialect {
    fn name(&self) -> &'static str {
        ServerShapedDialect.name()
    }
    fn placeholder(&self) -> Placeholder {
        ServerShapedDialect.placeholder()
    }
    fn time_source(&self) -> TimeSource {
        TimeSource::Server
    }
    fn now_ms_sql(&self) -> &'static str {
        TABLE_NOW_MS
    }
    fn lock_clause(&self) -> &'static str {
        ServerShapedDialect.lock_clause()
    }
    fn skip_locked_clause(&self) -> &'static str {
        ServerShapedDialect.skip_locked_clause()
    }
    fn claim_shape(&self) -> ClaimShape {
        ServerShapedDialect.claim_shape()
    }
    fn update_returning(&self) -> bool {
        ServerShapedDialect.update_returning()
    }
    fn limit_all(&self) -> &'static str {
        ServerShapedDialect.limit_all()
    }
    fn insert_ignore(&self, table: &str, columns: &str, values: &str, key: &str) -> String {
        ServerShapedDialect.insert_ignore(table, columns, values, key)
    }
    fn quota_shape(&self, table: &str) -> QuotaShape {
        match ServerShapedDialect.quota_shape(table) {
            QuotaShape::EnsureThenUpdate { ensure_sql, update_sql, .. } => {
                QuotaShape::EnsureThenUpdate {
                    now_sql: format!("SELECT CAST(COALESCE(?, {TABLE_NOW_MS} / 1000) AS INTEGER)"),
                    ensure_sql,
                    update_sql,
                }
            }
            other => other,
        }
    }
    fn ddl_lock(&self, key: &str) -> Option<DdlLock> {
        ServerShapedDialect.ddl_lock(key)
    }
    fn transactional_ddl(&self) -> bool {
        ServerShapedDialect.transactional_ddl()
    }
    fn retry_class(&self, error: &DbError) -> RetryClass {
        ServerShapedDialect.retry_class(error)
    }
    fn unique_violation(&self, error: &DbError, prefix: &str) -> Option<UniqueTarget> {
        ServerShapedDialect.unique_violation(error, prefix)
    }
}

/// SQLite speaking like a server database: claims as a candidate read then one UPDATE with
/// per-task tokens, acks as a read then an UPDATE (no `UPDATE … RETURNING`), quota in the
/// flag-independent two-step form, and "now" read from the database once per transaction. It
/// runs the engine paths PostgreSQL and MySQL/MariaDB take against a real database here, so
/// the contract suite proves them before those backends exist.
#[derive(Clone, Copy, Debug, Default)]
pub struct ServerShapedDialect;

impl Dialect for ServerShapedDialect {
    fn name(&self) -> &'static str {
        "sqlite"
    }
    fn placeholder(&self) -> Placeholder {
        SqliteDialect.placeholder()
    }
    fn time_source(&self) -> TimeSource {
        TimeSource::Server
    }
    fn now_ms_sql(&self) -> &'static str {
        SqliteDialect.now_ms_sql()
    }
    fn lock_clause(&self) -> &'static str {
        SqliteDialect.lock_clause()
    }
    fn skip_locked_clause(&self) -> &'static str {
        SqliteDialect.skip_locked_clause()
    }
    fn claim_shape(&self) -> ClaimShape {
        ClaimShape::SelectThenUpdate
    }
    fn limit_all(&self) -> &'static str {
        SqliteDialect.limit_all()
    }
    fn insert_ignore(&self, table: &str, columns: &str, values: &str, _key: &str) -> String {
        format!("INSERT OR IGNORE INTO {table} ({columns}) VALUES ({values})")
    }
    fn quota_shape(&self, table: &str) -> QuotaShape {
        QuotaShape::EnsureThenUpdate {
            now_sql: "SELECT CAST(COALESCE(?, strftime('%s', 'now')) AS INTEGER)".to_owned(),
            ensure_sql: format!(
                "INSERT INTO {table} (qkey, win, used, period) VALUES (?, ?, 0, ?) \
                 ON CONFLICT (qkey, win) DO UPDATE SET used = used"
            ),
            update_sql: format!(
                "UPDATE {table} SET used = used + 1 WHERE qkey = ? AND win = ? AND used < ?"
            ),
        }
    }
    fn ddl_lock(&self, key: &str) -> Option<DdlLock> {
        SqliteDialect.ddl_lock(key)
    }
    fn transactional_ddl(&self) -> bool {
        SqliteDialect.transactional_ddl()
    }
    fn retry_class(&self, error: &DbError) -> RetryClass {
        SqliteDialect.retry_class(error)
    }
    fn unique_violation(&self, error: &DbError, prefix: &str) -> Option<UniqueTarget> {
        SqliteDialect.unique_violation(error, prefix)
    }
}
