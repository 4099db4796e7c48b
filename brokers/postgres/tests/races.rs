//! The races of `brokertest::races`, forced into their bad interleaving on PostgreSQL: handle
//! A's transaction is held before its commit (the engine's test hook) while handle B, its own
//! pool, runs the racing call; B waiting for a lock is seen in `pg_stat_activity`.
//!
//! The deadlock race's other writer is a plain connection. PostgreSQL makes a waiting session
//! check for a deadlock once, `deadlock_timeout` after it began to wait, and the session that
//! finds the cycle is its victim: B checks after [`B_DEADLOCK_TIMEOUT`], long after the writer
//! closes the cycle, and the writer only after [`WRITER_DEADLOCK_TIMEOUT`], so B is the victim.

use std::sync::Arc;

use async_trait::async_trait;
use std::time::Duration;

use brokertest::races::{CommitHook, ForeignWriter, RacePair, RaceRig};
use brokertest::{within, Storage as _, WAIT_LIMIT};
use sqlx::{Connection as _, Executor as _, PgConnection};
use taskgate::{BoxError, Broker, BrokerOptions};
use taskgate_postgres::testing::{PgFactory, PgStorage};
use taskgate_postgres::PgBroker;

struct Pg;

/// B's `deadlock_timeout`: B's check must come after the other writer closes the cycle.
const B_DEADLOCK_TIMEOUT: Duration = Duration::from_secs(4);
/// The other writer's `deadlock_timeout`: it must never be the one that finds the cycle.
const WRITER_DEADLOCK_TIMEOUT: &str = "60s";

struct PgPair {
    storage: PgStorage,
    a: PgBroker,
    b: PgBroker,
}

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
        within(WAIT_LIMIT, "init of A", a.init(options.clone())).await?;
        within(WAIT_LIMIT, "init of B", b.init(options)).await?;
        Ok(Box::new(PgPair { storage, a, b }))
    }
}

#[async_trait]
impl RacePair for PgPair {
    fn a(&self) -> Arc<dyn Broker> {
        Arc::new(self.a.clone())
    }

    fn b(&self) -> Arc<dyn Broker> {
        Arc::new(self.b.clone())
    }

    fn set_a_hook(&self, hook: Option<CommitHook>) {
        self.a.engine().set_before_commit_hook(hook);
    }

    async fn b_waits(&self) -> Option<bool> {
        let look = async {
            let mut conn = self.storage.admin().await?;
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 \
                 AND wait_event_type = 'Lock'",
            )
            .bind(self.b.application_name())
            .fetch_one(&mut conn)
            .await?;
            Ok::<_, BoxError>(waiting > 0)
        };
        match within(WAIT_LIMIT, "pg_stat_activity", look).await {
            Ok(waiting) => Some(waiting),
            Err(e) => panic!("cannot read B's lock waits: {e}"),
        }
    }

    async fn finish(self: Box<Self>) -> Result<(), BoxError> {
        within(WAIT_LIMIT, "close of A", self.a.close()).await?;
        within(WAIT_LIMIT, "close of B", self.b.close()).await?;
        within(WAIT_LIMIT, "the storage's cleanup", self.storage.cleanup()).await
    }

    async fn foreign_writer(&self) -> Option<Result<Box<dyn ForeignWriter>, BoxError>> {
        let open = async {
            let mut conn = self.storage.admin().await?;
            conn.execute(&*format!("SET deadlock_timeout = '{WRITER_DEADLOCK_TIMEOUT}'")).await?;
            conn.execute("BEGIN").await?;
            let tasks = format!("{}tasks", self.storage.prefix());
            Ok::<_, BoxError>(Box::new(PgWriter { conn, tasks }) as Box<dyn ForeignWriter>)
        };
        Some(within(WAIT_LIMIT, "the other writer's transaction", open).await)
    }
}

/// The deadlock race's other writer: a plain transaction on its own connection.
struct PgWriter {
    conn: PgConnection,
    tasks: String,
}

#[async_trait]
impl ForeignWriter for PgWriter {
    async fn lock(&mut self, id: &str) -> Result<(), BoxError> {
        let sql = format!(
            "UPDATE {} SET last_error = 'held by another writer' WHERE id = $1",
            self.tasks
        );
        sqlx::query(&sql).bind(id).execute(&mut self.conn).await?;
        Ok(())
    }

    async fn rollback(mut self: Box<Self>) -> Result<(), BoxError> {
        self.conn.execute("ROLLBACK").await?;
        self.conn.close().await?;
        Ok(())
    }
}

brokertest::race_tests!(Pg);
