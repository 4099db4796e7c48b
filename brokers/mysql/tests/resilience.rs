//! The broker survives what servers do to it: killed connections (the transaction that meets
//! one is retried on a fresh connection, and the pool checks the others before use), eight processes starting
//! on one empty schema at once, and a migration that died half-way (MySQL DDL is not
//! transactional).

mod common;

use std::sync::Arc;

use brokertest::{within, TEST_LIMIT, WAIT_LIMIT};
use futures::future::join_all;
use sqlx::{Executor, MySqlConnection, Row};
use taskgate::{BoxError, Broker, BrokerOptions, Filter, Status, Task};
use taskgate_mysql::testing::MySqlFactory;
use taskgate_mysql::MySqlBroker;

/// The server-side IDs of every connection in the broker's pool (opens all of them).
async fn connection_ids(broker: &MySqlBroker, size: usize) -> Result<Vec<u64>, BoxError> {
    let mut held = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..size {
        let mut conn = broker.pool().acquire().await?;
        let id: u64 = sqlx::query_scalar("SELECT CONNECTION_ID()").fetch_one(&mut *conn).await?;
        ids.push(id);
        held.push(conn);
    }
    Ok(ids)
}

async fn kill_all(admin: &mut MySqlConnection, ids: &[u64]) -> Result<(), BoxError> {
    for id in ids {
        admin.execute(format!("KILL {id}").as_str()).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_connections_lose_and_double_nothing() -> Result<(), BoxError> {
    within(TEST_LIMIT, "killed_connections_lose_and_double_nothing", async move {
        const POOL: usize = 6;
        let factory = MySqlFactory::from_env().with_pool_size(6);
        let Some(storage) = common::storage_with("killed_connections", factory).await else {
            return Ok(());
        };
        let (options, _clock) = common::manual_options();
        let broker = common::handle(&storage, options).await?;
        let mut admin = common::connect(&storage).await?;
        let tasks: Vec<Task> =
            (0..20).map(|i| Task::new("t", "q").with_id(format!("t{i:02}"))).collect();
        broker.enqueue_many(&tasks).await?;
        let held = broker.dequeue_many(&["q"], 5).await?;

        // Every round kills every pooled connection, then works; the next round's pool must
        // hold none of the killed ones (the broker met them dead and replaced them). Whether a
        // write meets a dead connection inside its transaction (a retry) or the pool's check
        // finds it first depends on when the server finishes the KILL; both are fine, neither
        // may lose or double a task. The retry itself is proven by `cut_connections.rs`.
        let first = connection_ids(&broker, POOL).await?;
        kill_all(&mut admin, &first).await?;
        for t in &held {
            broker.ack(&t.id, &t.lease_token, None).await?;
        }
        let second = connection_ids(&broker, POOL).await?;
        assert!(second.iter().all(|id| !first.contains(id)), "killed connections reused");
        kill_all(&mut admin, &second).await?;
        while let Some(t) = broker.try_dequeue(&["q"]).await? {
            broker.ack(&t.id, &t.lease_token, None).await?;
        }
        let third = connection_ids(&broker, POOL).await?;
        assert!(third.iter().all(|id| !second.contains(id)), "killed connections reused");
        kill_all(&mut admin, &third).await?;
        let all = broker.list(&Filter::default()).await?;
        let ids: Vec<&str> = all.iter().map(|t| t.id.as_str()).collect();
        let expected: Vec<String> = (0..20).map(|i| format!("t{i:02}")).collect();
        assert_eq!(ids, expected, "every task exactly once");
        assert!(all.iter().all(|t| t.status == Status::Completed), "every task completed");
        broker.close().await?;
        storage.drop_tables().await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_concurrent_cold_starts_all_succeed() -> Result<(), BoxError> {
    within(TEST_LIMIT, "eight_concurrent_cold_starts_all_succeed", async move {
        let Some(storage) = common::storage("eight_concurrent_cold_starts").await else {
            return Ok(());
        };
        let handles: Vec<Arc<MySqlBroker>> =
            (0..8).map(|_| storage.mysql_handle().map(Arc::new)).collect::<Result<_, _>>()?;
        let inits = join_all(handles.iter().map(|h| h.init(BrokerOptions::default())));
        let inits = within(WAIT_LIMIT, "8 concurrent inits (migrations)", inits).await;
        for (i, result) in inits.into_iter().enumerate() {
            result.map_err(|e| format!("handle {i}: {e}"))?;
        }
        for (i, h) in handles.iter().enumerate() {
            h.enqueue(&Task::new("t", "q").with_id(format!("h{i}"))).await?;
        }
        assert_eq!(handles[0].queue_len("q").await?, 8);
        let mut admin = common::connect(&storage).await?;
        let versions: Vec<i64> = sqlx::query_scalar(&format!(
            "SELECT version FROM {}schema_migrations ORDER BY version",
            storage.prefix()
        ))
        .fetch_all(&mut admin)
        .await?;
        assert_eq!(versions, [1, 2, 3, 4, 5, 6, 7], "each migration recorded once");
        let free: i64 = sqlx::query_scalar("SELECT IS_FREE_LOCK(?)")
            // The DDL lock's name: `taskgate:<key>` for keys this short (the dialect's unit
            // tests cover the hashed form of long keys).
            .bind(format!("taskgate:{}schema", storage.prefix()))
            .fetch_one(&mut admin)
            .await?;
        assert_eq!(free, 1, "the schema lock was released");
        for h in &handles {
            h.close().await?;
        }
        storage.drop_tables().await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_applied_migration_completes_on_the_next_start() -> Result<(), BoxError> {
    within(TEST_LIMIT, "a_half_applied_migration_completes_on_the_next_start", async move {
        let Some(storage) = common::storage("a_half_applied_migration").await else {
            return Ok(());
        };
        let first = common::handle(&storage, BrokerOptions::default()).await?;
        first.enqueue(&Task::new("t", "q").with_id("kept")).await?;
        first.close().await?;
        // Simulate a crash inside 0002: some of its changes are missing and it is not recorded.
        let p = storage.prefix();
        let mut admin = common::connect(&storage).await?;
        admin.execute(format!("ALTER TABLE {p}tasks DROP KEY {p}idx_ready").as_str()).await?;
        admin.execute(format!("ALTER TABLE {p}tasks DROP COLUMN owner").as_str()).await?;
        admin
            .execute(format!("DELETE FROM {p}schema_migrations WHERE version = 2").as_str())
            .await?;

        let second = Arc::new(storage.mysql_handle()?);
        assert_eq!(second.migrate().await?, [2], "only the unrecorded migration runs");
        second.init(BrokerOptions::default()).await?;
        let row = sqlx::query(&format!(
            "SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = DATABASE() \
             AND table_name = '{p}tasks' AND index_name = '{p}idx_ready'"
        ))
        .fetch_one(&mut admin)
        .await?;
        assert!(row.try_get::<i64, _>(0)? > 0, "idx_ready restored");
        let kept = second.get("kept").await?;
        assert_eq!(kept.owner, "", "the re-added column has its default");
        let claimed = second.dequeue(&["q"]).await?;
        assert_eq!(claimed.id, "kept");
        assert!(second.migrate().await?.is_empty(), "a further run is a no-op");
        second.close().await?;
        storage.drop_tables().await
    })
    .await
}
