//! The races of `brokertest::races`, forced into their bad interleaving on PostgreSQL: handle
//! A's transaction is held before its commit (the engine's test hook) while handle B, its own
//! pool, runs the racing call; B waiting for a lock is seen in `pg_stat_activity`.

use std::sync::Arc;

use async_trait::async_trait;
use brokertest::races::{CommitHook, RacePair, RaceRig};
use brokertest::{within, Storage as _, WAIT_LIMIT};
use taskgate::{BoxError, Broker, BrokerOptions};
use taskgate_postgres::testing::{PgFactory, PgStorage};
use taskgate_postgres::PgBroker;

struct Pg;

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
        let b = within(WAIT_LIMIT, "handle B", storage.broker()).await?;
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
}

brokertest::race_tests!(Pg);
