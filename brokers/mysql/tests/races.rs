//! The races of `brokertest::races`, forced into their bad interleaving on MySQL/MariaDB:
//! handle A's transaction is held before its commit (the engine's test hook) while handle B,
//! its own pool, runs the racing call; B waiting for a lock is seen in `SHOW ENGINE INNODB
//! STATUS` (a transaction in `LOCK WAIT` on this storage's tables).

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use brokertest::races::{CommitHook, RacePair, RaceRig};
use brokertest::{within, WAIT_LIMIT};
use taskgate::{BoxError, Broker, BrokerOptions};
use taskgate_mysql::testing::{MySqlFactory, MySqlStorage};
use taskgate_mysql::MySqlBroker;

struct MySql;

struct MySqlPair {
    storage: MySqlStorage,
    a: MySqlBroker,
    b: MySqlBroker,
}

#[async_trait]
impl RaceRig for MySql {
    async fn open(&self, options: BrokerOptions) -> Result<Box<dyn RacePair>, BoxError> {
        let factory = MySqlFactory::from_env();
        let storage = within(WAIT_LIMIT, "new storage", factory.mysql_storage()).await?;
        let (a, b) = (storage.mysql_handle()?, storage.mysql_handle()?);
        within(WAIT_LIMIT, "init of A", a.init(options.clone())).await?;
        within(WAIT_LIMIT, "init of B", b.init(options)).await?;
        Ok(Box::new(MySqlPair { storage, a, b }))
    }
}

#[async_trait]
impl RacePair for MySqlPair {
    fn a(&self) -> Arc<dyn Broker> {
        Arc::new(self.a.clone())
    }

    fn b(&self) -> Arc<dyn Broker> {
        Arc::new(self.b.clone())
    }

    fn set_a_hook(&self, hook: Option<CommitHook>) {
        self.a.engine().set_before_commit_hook(hook);
    }

    /// A is idle in its held transaction, so a lock wait on this storage's tables is B's.
    async fn b_waits(&self) -> Option<bool> {
        match within(WAIT_LIMIT, "SHOW ENGINE INNODB STATUS", common::lock_wait(&self.storage))
            .await
        {
            Ok(waiting) => Some(waiting),
            Err(e) => panic!("cannot read B's lock waits: {e}"),
        }
    }

    async fn finish(self: Box<Self>) -> Result<(), BoxError> {
        within(WAIT_LIMIT, "close of A", self.a.close()).await?;
        within(WAIT_LIMIT, "close of B", self.b.close()).await?;
        within(WAIT_LIMIT, "dropping the tables", self.storage.drop_tables()).await
    }
}

brokertest::race_tests!(MySql);
