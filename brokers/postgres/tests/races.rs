//! The races of `brokertest::races`, forced into their bad interleaving on PostgreSQL: handle
//! A's transaction is held before its commit (the engine's test hook) while handle B, its own
//! pool, runs the racing call; B waiting for a lock is seen in `pg_stat_activity`.
//!
//! The deadlock race's other writer is a plain connection. PostgreSQL makes a waiting session
//! check for a deadlock once, `deadlock_timeout` after it began to wait, and the session that
//! finds the cycle is its victim: B checks after [`B_DEADLOCK_TIMEOUT`], long after the writer
//! closes the cycle, and the writer only after [`WRITER_DEADLOCK_TIMEOUT`], so B is the victim.

use std::time::Duration;

use async_trait::async_trait;
use brokertest::races::{RacePair, RaceRig};
use brokertest::{within, Storage as _, WAIT_LIMIT};
use sqltest::races::{SqlRacePair, SqlRaceStorage};
use sqlx::{Executor as _, PgConnection, Postgres};
use taskgate::{BoxError, BrokerOptions};
use taskgate_postgres::testing::{PgFactory, PgStorage};
use taskgate_postgres::PgBroker;

struct Pg;

/// B's `deadlock_timeout`: B's check must come after the other writer closes the cycle.
const B_DEADLOCK_TIMEOUT: Duration = Duration::from_secs(4);
/// The other writer's `deadlock_timeout`: it must never be the one that finds the cycle.
const WRITER_DEADLOCK_TIMEOUT: &str = "60s";

#[async_trait]
impl RaceRig for Pg {
    async fn open(&self, options: BrokerOptions) -> Result<Box<dyn RacePair>, BoxError> {
        let storage = within(WAIT_LIMIT, "new storage", PgFactory::from_env().pg_storage()).await?;
        let a = within(WAIT_LIMIT, "handle A", storage.broker()).await?;
        let b_timeout = format!("{}ms", B_DEADLOCK_TIMEOUT.as_millis());
        let b_options = storage
            .options()?
            .tune_connect(move |c| c.options([("deadlock_timeout", b_timeout.as_str())]));
        let b = within(WAIT_LIMIT, "handle B", b_options.connect()).await?;
        let a = (a.clone(), a.engine().clone());
        SqlRacePair::init(PgRace(storage), a, b, options).await
    }
}

/// What is PostgreSQL's own in the race pair.
struct PgRace(PgStorage);

#[async_trait]
impl SqlRaceStorage for PgRace {
    type Broker = PgBroker;
    type Db = Postgres;

    /// B waiting for a lock is seen in `pg_stat_activity`, by its application name.
    async fn b_waits(&self, b: &PgBroker) -> Result<bool, BoxError> {
        let mut conn = self.0.admin().await?;
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 \
             AND wait_event_type = 'Lock'",
        )
        .bind(b.application_name())
        .fetch_one(&mut conn)
        .await?;
        Ok(waiting > 0)
    }

    async fn cleanup(&self) -> Result<(), BoxError> {
        self.0.cleanup().await
    }

    async fn writer_connection(&self) -> Result<PgConnection, BoxError> {
        let mut conn = self.0.admin().await?;
        conn.execute(&*format!("SET deadlock_timeout = '{WRITER_DEADLOCK_TIMEOUT}'")).await?;
        Ok(conn)
    }

    fn writer_lock_sql(&self) -> String {
        let tasks = format!("{}tasks", self.0.prefix());
        format!("UPDATE {tasks} SET last_error = 'held by another writer' WHERE id = $1")
    }
}

brokertest::race_tests!(Pg);
