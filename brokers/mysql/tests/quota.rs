//! The quota stays a hard limit on a connection that reports found rows (notes §15.1): sqlx
//! 0.8.6 always sets `CLIENT_FOUND_ROWS`, under which the predecessor's one-statement form
//! cannot tell "exhausted" from "inserted". These tests show the hazard is live on this
//! server and exhaust windows through the broker, on the server's own clock.

mod common;

use std::time::Duration;

use brokertest::{within, TEST_LIMIT, WAIT_LIMIT};
use futures::future::join_all;
use sqlx::Executor;
use taskgate::{BoxError, Broker, BrokerOptions, QuotaConfig};

fn config(key: &str, limit: u32) -> QuotaConfig {
    // An hour-long window: the server clock cannot rotate it during the test.
    QuotaConfig { limit, period: Duration::from_secs(3600), key: key.to_owned() }
}

async fn used(broker: &taskgate_mysql::MySqlBroker, key: &str) -> Result<i64, BoxError> {
    let sql = format!(
        "SELECT CAST(COALESCE(SUM(used), 0) AS SIGNED) FROM {}quota WHERE qkey = ?",
        broker.prefix()
    );
    Ok(sqlx::query_scalar(&sql).bind(key).fetch_one(broker.pool()).await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_reports_found_rows() -> Result<(), BoxError> {
    within(TEST_LIMIT, "the_connection_reports_found_rows", async move {
        let Some(storage) = common::storage("the_connection_reports_found_rows").await else {
            return Ok(());
        };
        let broker = common::handle(&storage, BrokerOptions::default()).await?;
        let table = format!("{}quota", broker.prefix());
        broker
            .pool()
            .execute(format!("INSERT INTO {table} (qkey, win, used) VALUES ('full', 0, 1)").as_str())
            .await?;
        // The predecessor's exhaustion test: 0 affected rows would mean "unchanged, exhausted".
        let naive = format!(
            "INSERT INTO {table} (qkey, win, used) VALUES ('full', 0, 1) \
             ON DUPLICATE KEY UPDATE used = IF(used < 1, used + 1, used)"
        );
        let affected = broker.pool().execute(naive.as_str()).await?.rows_affected();
        assert_eq!(
            affected, 1,
            "an unchanged row reports 1 affected row: the connection uses CLIENT_FOUND_ROWS, so the \
             one-statement quota would over-admit (if this fails, the driver changed: revisit notes §15.1)"
        );
        broker.close().await?;
        storage.drop_tables().await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_exhausts_on_the_server_clock() -> Result<(), BoxError> {
    within(TEST_LIMIT, "a_window_exhausts_on_the_server_clock", async move {
        let Some(storage) = common::storage("a_window_exhausts_on_the_server_clock").await else {
            return Ok(());
        };
        let broker = common::handle(&storage, BrokerOptions::default()).await?;
        let provider = broker.quota_provider().ok_or("no quota provider")?;
        let gate = provider.queue_quota("q", &config("exhaust", 3))?;
        let mut windows = Vec::new();
        for _ in 0..3 {
            windows.push(gate.reserve().await?.ok_or("reservation refused below the limit")?);
        }
        assert!(windows.windows(2).all(|w| w[0] == w[1]), "one window: {windows:?}");
        assert_eq!(windows[0].window % 3600, 0, "windows align to the epoch");
        for _ in 0..5 {
            assert_eq!(gate.reserve().await?, None, "over-admitted past the limit");
        }
        assert_eq!(used(&broker, "exhaust").await?, 3);
        gate.release(windows[0]).await?;
        assert!(gate.reserve().await?.is_some(), "a released unit is reservable again");
        assert_eq!(gate.reserve().await?, None);
        assert_eq!(used(&broker, "exhaust").await?, 3);
        broker.close().await?;
        storage.drop_tables().await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_reserves_admit_exactly_the_limit() -> Result<(), BoxError> {
    within(TEST_LIMIT, "concurrent_reserves_admit_exactly_the_limit", async move {
        let Some(storage) = common::storage("concurrent_reserves_admit_exactly_the_limit").await
        else {
            return Ok(());
        };
        let first = common::handle(&storage, BrokerOptions::default()).await?;
        let second = common::handle(&storage, BrokerOptions::default()).await?;
        let gates = [
            first
                .quota_provider()
                .ok_or("no quota provider")?
                .queue_quota("q", &config("race", 5))?,
            second
                .quota_provider()
                .ok_or("no quota provider")?
                .queue_quota("q", &config("race", 5))?,
        ];
        let racing = join_all((0..32).map(|i| gates[i % 2].reserve()));
        let results = within(WAIT_LIMIT, "32 concurrent reserves", racing).await;
        let mut admitted = 0;
        for r in results {
            if r?.is_some() {
                admitted += 1;
            }
        }
        assert_eq!(admitted, 5, "exactly the limit is admitted across two handles");
        assert_eq!(used(&first, "race").await?, 5);
        first.close().await?;
        second.close().await?;
        storage.drop_tables().await
    })
    .await
}
