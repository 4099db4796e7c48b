//! The brokertest factory for SQLite (feature `testing`): every case gets a fresh database
//! file in its own temporary directory; every handle is a new broker instance on that file.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use brokertest::{Factory, Storage};
use taskgate::{BoxError, Broker};

use crate::{SqliteBroker, SqliteOptions, Synchronous};

/// Hands each contract case a fresh SQLite file.
#[derive(Clone, Debug)]
pub struct SqliteFactory {
    synchronous: Synchronous,
    poll_interval: Duration,
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
        }
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
        SqliteOptions::new(&self.path)
            .synchronous(self.factory.synchronous)
            .poll_interval(self.factory.poll_interval)
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
