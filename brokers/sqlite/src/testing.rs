//! The brokertest factory for SQLite (feature `testing`): every case gets a fresh database
//! file in its own temporary directory; every handle is a new broker instance on that file.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use brokertest::{Factory, Storage};
use taskgate::{BoxError, Broker};

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
        }
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

    /// A fresh, empty storage directly (for backend tests outside the contract suite).
    pub fn storage_now(&self) -> Result<SqliteStorage, BoxError> {
        let dir = tempfile::Builder::new().prefix("taskgate-sqlite-").tempdir()?;
        let path = dir.path().join("tasks.db");
        Ok(SqliteStorage { dir: Some(dir), path, factory: self.clone() })
    }
}

#[async_trait]
impl Factory for SqliteFactory {
    fn name(&self) -> String {
        "sqlite".to_owned()
    }

    async fn storage(&self) -> Result<Box<dyn Storage>, BoxError> {
        Ok(Box::new(self.storage_now()?))
    }
}

/// One case's database file; removed (with its `-wal` and `-shm`) at cleanup.
#[derive(Debug)]
pub struct SqliteStorage {
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
    factory: SqliteFactory,
}

impl SqliteStorage {
    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Options for a new handle on this file.
    pub fn options(&self) -> SqliteOptions {
        let options = SqliteOptions::new(&self.path)
            .synchronous(self.factory.synchronous)
            .poll_interval(self.factory.poll_interval);
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

    async fn handle_with_prefix(&self, prefix: &str) -> Option<taskgate::Result<Arc<dyn Broker>>> {
        let opened = self.options().prefix(prefix).open().await;
        Some(opened.map(|b| Arc::new(b) as Arc<dyn Broker>))
    }

    async fn cleanup(&self) -> Result<(), BoxError> {
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir.path());
        }
        Ok(())
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
