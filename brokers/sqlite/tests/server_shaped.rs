//! The whole suite once more on SQLite, through the engine paths PostgreSQL and MySQL/MariaDB
//! take (`testing::ServerShapedDialect`): candidate read then UPDATE for claims, read then
//! UPDATE for acks, the two-step quota, and database time. The model test runs 64 sequences
//! here, as on the server backends whose paths these are.

brokertest::contract_tests!(
    taskgate_sqlite::testing::SqliteFactory::new().server_shaped(),
    model_cases = 64
);

mod database_time {
    use std::time::{Duration, SystemTime};

    use brokertest::{within, TEST_LIMIT};
    use taskgate::{Broker, BrokerOptions, QuotaConfig, Task, Timestamp};
    use taskgate_sqlite::testing::SqliteFactory;

    type TestResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

    /// Without an injected clock the server-shaped engine reads "now" from the database
    /// (piggybacked on the first row lock, or one `SELECT`), and quota windows use the
    /// medium's clock.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn operations_use_database_time_without_an_injected_clock() -> TestResult {
        let name = "operations_use_database_time_without_an_injected_clock";
        within(TEST_LIMIT, name, async move {
            let storage = SqliteFactory::new().server_shaped().storage_now()?;
            let broker = storage.open().await?;
            broker.init(BrokerOptions::default()).await?;
            let before = Timestamp::from_system_time(SystemTime::now());
            let stored = broker.enqueue(&Task::new("job", "q").with_id("t1")).await?;
            let claimed = broker.dequeue(&["q"]).await?;
            broker.heartbeat("t1", &claimed.lease_token).await?;
            broker.ack("t1", &claimed.lease_token, None).await?;
            let after = Timestamp::from_system_time(SystemTime::now());
            let done = broker.get("t1").await?;
            for t in [Some(stored.created_at), done.started_at, done.finished_at] {
                let t = t.ok_or("time not set")?;
                assert!(t >= before && t <= after, "{t} outside [{before}, {after}]");
            }
            assert_eq!(broker.reap_expired().await?, 0);
            let config =
                QuotaConfig { limit: 1, period: Duration::from_secs(3600), key: "k".into() };
            let gate = broker.quota_provider().ok_or("no quota")?.queue_quota("q", &config)?;
            let reserved = gate.reserve().await?.ok_or("exhausted at once")?;
            assert_eq!(reserved.window % 3600, 0);
            assert!(gate.reserve().await?.is_none());
            broker.close().await?;
            Ok(())
        })
        .await
    }
}
