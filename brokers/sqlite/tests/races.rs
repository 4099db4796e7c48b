//! The races of `brokertest::races` on SQLite, with both engine paths (the one-statement claim
//! and quota, and the server-shaped read-then-update ones): handle A's transaction is held
//! before its commit (the engine's test hook) while handle B, another broker instance on the
//! file, runs the racing call. SQLite has one writer, so B waits for the database's write
//! lock inside the driver, where nothing can see it: A is released at once and the database
//! orders the two; the races check that order's outcome.

use std::sync::Arc;

use async_trait::async_trait;
use brokertest::races::{CommitHook, RacePair, RaceRig};
use brokertest::{within, Storage as _, WAIT_LIMIT};
use taskgate::{BoxError, Broker, BrokerOptions};
use taskgate_sqlite::testing::{SqliteFactory, SqliteStorage};
use taskgate_sqlite::SqliteBroker;

struct Sqlite(SqliteFactory);

struct SqlitePair {
    storage: SqliteStorage,
    a: Arc<SqliteBroker>,
    b: Arc<SqliteBroker>,
}

#[async_trait]
impl RaceRig for Sqlite {
    async fn open(&self, options: BrokerOptions) -> Result<Box<dyn RacePair>, BoxError> {
        let storage = self.0.storage_now()?;
        let a = within(WAIT_LIMIT, "handle A", storage.open()).await?;
        let b = within(WAIT_LIMIT, "handle B", storage.open()).await?;
        within(WAIT_LIMIT, "init of A", a.init(options.clone())).await?;
        within(WAIT_LIMIT, "init of B", b.init(options)).await?;
        Ok(Box::new(SqlitePair { storage, a: Arc::new(a), b: Arc::new(b) }))
    }
}

#[async_trait]
impl RacePair for SqlitePair {
    fn a(&self) -> Arc<dyn Broker> {
        self.a.clone()
    }

    fn b(&self) -> Arc<dyn Broker> {
        self.b.clone()
    }

    fn set_a_hook(&self, hook: Option<CommitHook>) {
        self.a.engine().set_before_commit_hook(hook);
    }

    async fn b_waits(&self) -> Option<bool> {
        None
    }

    async fn finish(self: Box<Self>) -> Result<(), BoxError> {
        within(WAIT_LIMIT, "close of A", self.a.close()).await?;
        within(WAIT_LIMIT, "close of B", self.b.close()).await?;
        self.storage.cleanup().await
    }
}

mod one_statement {
    brokertest::race_tests!(super::Sqlite(taskgate_sqlite::testing::SqliteFactory::new()));
}

mod server_shaped {
    brokertest::race_tests!(super::Sqlite(
        taskgate_sqlite::testing::SqliteFactory::new().server_shaped()
    ));
}
