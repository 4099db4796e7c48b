//! The races of `brokertest::races`, forced into their bad interleaving on MySQL/MariaDB:
//! handle A's transaction is held before its commit (the engine's test hook) while handle B,
//! its own pool, runs the racing call; B waiting for a lock is seen in `SHOW ENGINE INNODB
//! STATUS` (a transaction in `LOCK WAIT` on this storage's tables).
//!
//! The deadlock race's other writer is a plain connection. InnoDB finds a deadlock when the lock
//! request that closes the cycle is made and rolls back the transaction of less weight (fewer
//! changed rows and locks): the writer has changed more rows than B, so B is the victim.

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use brokertest::races::{CommitHook, ForeignWriter, RacePair, RaceRig};
use brokertest::{within, WAIT_LIMIT};
use sqlx::{Connection as _, Executor as _, MySqlConnection};
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

    async fn foreign_writer(&self) -> Option<Result<Box<dyn ForeignWriter>, BoxError>> {
        let open = async {
            let mut conn = common::connect(&self.storage).await?;
            conn.execute("BEGIN").await?;
            let tasks = format!("{}tasks", self.storage.prefix());
            Ok::<_, BoxError>(Box::new(MySqlWriter { conn, tasks }) as Box<dyn ForeignWriter>)
        };
        Some(within(WAIT_LIMIT, "the other writer's transaction", open).await)
    }
}

/// The deadlock race's other writer: a plain transaction on its own connection.
struct MySqlWriter {
    conn: MySqlConnection,
    tasks: String,
}

#[async_trait]
impl ForeignWriter for MySqlWriter {
    async fn lock(&mut self, id: &str) -> Result<(), BoxError> {
        let sql =
            format!("UPDATE {} SET last_error = 'held by another writer' WHERE id = ?", self.tasks);
        sqlx::query(&sql).bind(id).execute(&mut self.conn).await?;
        Ok(())
    }

    async fn rollback(mut self: Box<Self>) -> Result<(), BoxError> {
        self.conn.execute("ROLLBACK").await?;
        self.conn.close().await?;
        Ok(())
    }
}

brokertest::race_tests!(MySql);
