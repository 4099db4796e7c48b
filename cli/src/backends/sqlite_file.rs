//! `taskgate check sqlite://PATH`: the contract suite on one SQLite file the operator names,
//! each case isolated under its own random table prefix and its tables dropped afterwards.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use brokertest::{Factory, Storage};
use taskgate::{BoxError, Broker};
use taskgate_sql::{Kind, Value};
use taskgate_sqlite::{SqliteBroker, SqliteOptions};

/// Hands each case a fresh prefix on one SQLite file.
#[derive(Debug)]
pub(crate) struct SqliteFileFactory {
    path: PathBuf,
}

impl SqliteFileFactory {
    /// A factory on the file at `path` (created when missing).
    pub(crate) fn new(path: PathBuf) -> Self {
        SqliteFileFactory { path }
    }
}

#[async_trait]
impl Factory for SqliteFileFactory {
    fn name(&self) -> String {
        "sqlite".to_owned()
    }

    async fn storage(&self) -> Result<Box<dyn Storage>, BoxError> {
        let id = taskgate::id::new_ulid().to_ascii_lowercase();
        let prefix = format!("tgcheck_{}_", &id[id.len() - 12..]);
        Ok(Box::new(PrefixStorage { path: self.path.clone(), prefix }))
    }
}

/// One case's tables in the file.
#[derive(Debug)]
struct PrefixStorage {
    path: PathBuf,
    prefix: String,
}

impl PrefixStorage {
    async fn open(&self, prefix: &str) -> taskgate::Result<SqliteBroker> {
        SqliteOptions::new(&self.path).prefix(prefix).open().await
    }
}

#[async_trait]
impl Storage for PrefixStorage {
    async fn handle(&self) -> Result<Arc<dyn Broker>, BoxError> {
        Ok(Arc::new(self.open(&self.prefix).await?))
    }

    async fn handle_with_prefix(&self, prefix: &str) -> Option<taskgate::Result<Arc<dyn Broker>>> {
        Some(self.open(prefix).await.map(|b| Arc::new(b) as Arc<dyn Broker>))
    }

    async fn handle_polling_every(
        &self,
        interval: Duration,
    ) -> Option<Result<Arc<dyn Broker>, BoxError>> {
        let options = SqliteOptions::new(&self.path).prefix(&self.prefix).poll_interval(interval);
        Some(options.open().await.map(|b| Arc::new(b) as Arc<dyn Broker>).map_err(Into::into))
    }

    async fn cleanup(&self) -> Result<(), BoxError> {
        let broker = self.open(&self.prefix).await?;
        let mut session = broker.engine().adapter().session().await?;
        let pattern = format!("{}%", self.prefix.replace('_', "\\_"));
        let tables = session
            .fetch(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE ? ESCAPE '\\'",
                &[Value::Text(pattern)],
                &[Kind::Text],
            )
            .await?;
        for row in tables {
            if let Some(Value::Text(name)) = row.into_iter().next() {
                // The name comes from sqlite_master and starts with our validated prefix.
                session.execute(&format!("DROP TABLE IF EXISTS \"{name}\""), &[]).await?;
            }
        }
        session.close().await?;
        broker.close().await?;
        Ok(())
    }
}
