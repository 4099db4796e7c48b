//! The races of `brokertest::races`, forced into their bad interleaving on MySQL/MariaDB:
//! handle A's transaction is held before its commit (the engine's test hook) while handle B,
//! its own pool, runs the racing call; B waiting for a lock is seen in `SHOW ENGINE INNODB
//! STATUS` (a transaction in `LOCK WAIT` on this storage's tables).
//!
//! The deadlock race's other writer is a plain connection. InnoDB finds a deadlock when the lock
//! request that closes the cycle is made and rolls back the transaction of less weight (fewer
//! changed rows and locks): the writer has changed more rows than B, so B is the victim.

mod common;

use async_trait::async_trait;
use brokertest::races::{RacePair, RaceRig};
use brokertest::{within, WAIT_LIMIT};
use sqltest::races::{SqlRacePair, SqlRaceStorage};
use sqlx::{MySql as MySqlDb, MySqlConnection};
use taskgate::{BoxError, BrokerOptions};
use taskgate_mysql::testing::{MySqlFactory, MySqlStorage};
use taskgate_mysql::MySqlBroker;

struct MySql;

#[async_trait]
impl RaceRig for MySql {
    async fn open(&self, options: BrokerOptions) -> Result<Box<dyn RacePair>, BoxError> {
        let factory = MySqlFactory::from_env();
        let storage = within(WAIT_LIMIT, "new storage", factory.mysql_storage()).await?;
        let (a, b) = (storage.mysql_handle()?, storage.mysql_handle()?);
        let a = (a.clone(), a.engine().clone());
        SqlRacePair::init(MySqlRace(storage), a, b, options).await
    }
}

/// What is MySQL's own in the race pair.
struct MySqlRace(MySqlStorage);

#[async_trait]
impl SqlRaceStorage for MySqlRace {
    type Broker = MySqlBroker;
    type Db = MySqlDb;

    /// A is idle in its held transaction, so a lock wait on this storage's tables is B's.
    async fn b_waits(&self, _b: &MySqlBroker) -> Result<bool, BoxError> {
        common::lock_wait(&self.0).await
    }

    async fn cleanup(&self) -> Result<(), BoxError> {
        self.0.drop_tables().await
    }

    async fn writer_connection(&self) -> Result<MySqlConnection, BoxError> {
        common::connect(&self.0).await
    }

    fn writer_lock_sql(&self) -> String {
        let tasks = format!("{}tasks", self.0.prefix());
        format!("UPDATE {tasks} SET last_error = 'held by another writer' WHERE id = ?")
    }
}

brokertest::race_tests!(MySql);
