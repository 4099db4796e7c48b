//! Test provisioning (extensions §E11): a killed run cannot drop its tables, so the factory
//! sweeps `tgtest_` table sets (the engine's kit, `taskgate_sql::testing`) and server-clock
//! schemas made more than an hour ago — and only those; `SqlBroker::drop_tables` drops every
//! table of a prefix.

mod common;

use std::time::{Duration, SystemTime};

use brokertest::{within, TEST_LIMIT};
use taskgate::{Broker, ManualClock};
use taskgate_postgres::testing::{sweep, TestPrefix};

async fn schema_exists(
    s: &taskgate_postgres::testing::PgStorage,
    schema: &str,
) -> Result<bool, taskgate::BoxError> {
    Ok(sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
        .bind(schema)
        .fetch_one(&mut s.admin().await?)
        .await?)
}

async fn tables(
    s: &taskgate_postgres::testing::PgStorage,
    prefix: &str,
) -> Result<i64, taskgate::BoxError> {
    Ok(sqlx::query_scalar(
        "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() \
         AND starts_with(tablename, $1)",
    )
    .bind(prefix)
    .fetch_one(&mut s.admin().await?)
    .await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_drops_only_test_tables_older_than_an_hour() -> Result<(), taskgate::BoxError> {
    within(TEST_LIMIT, "the_sweep_drops_only_test_tables_older_than_an_hour", async move {
        let Some(s) = common::storage("stale table sweep").await else { return Ok(()) };
        let clock = ManualClock::at_contract_epoch();
        let old = TestPrefix::made_at(SystemTime::now() - Duration::from_secs(2 * 3600));
        let recent = TestPrefix::made_at(SystemTime::now() - Duration::from_secs(10 * 60));
        let lazy = s.options()?.connect_lazy()?;
        let all = i64::try_from(lazy.engine().tables().len())?;
        lazy.close().await?;
        assert_eq!(all, 6, "tasks, task_deps, paused_queues, quota, audit, schema_migrations");
        for prefix in [&old, &recent] {
            let b = s.options()?.prefix(prefix.as_str()).connect().await?;
            b.init(common::options(&clock)).await?;
            b.close().await?;
            assert_eq!(tables(&s, prefix.as_str()).await?, all, "{prefix} has all its tables");
            let create = format!("CREATE SCHEMA {prefix}clock");
            sqlx::query(&create).execute(&mut s.admin().await?).await?;
        }
        let current = common::handle(&s, &clock, |o| o).await?;
        let dropped = sweep(s.url()).await?;
        assert!(dropped.contains(&old), "the two-hour-old set was dropped: {dropped:?}");
        assert!(!dropped.contains(&recent), "{dropped:?}");
        assert_eq!(tables(&s, old.as_str()).await?, 0, "stale tables survived");
        assert_eq!(tables(&s, recent.as_str()).await?, all, "a ten-minute-old set was dropped");
        assert_eq!(tables(&s, s.prefix()).await?, all, "the running case's tables were dropped");
        assert!(!schema_exists(&s, &format!("{old}clock")).await?, "a stale clock schema survived");
        assert!(schema_exists(&s, &format!("{recent}clock")).await?, "a recent clock was dropped");
        let recent_handle = s.options()?.prefix(recent.as_str()).connect_lazy()?;
        recent_handle.engine().drop_tables().await?;
        recent_handle.close().await?;
        assert_eq!(tables(&s, recent.as_str()).await?, 0, "drop_tables left a table");
        let mut conn = s.admin().await?;
        sqlx::query(&format!("DROP SCHEMA {recent}clock")).execute(&mut conn).await?;
        common::finish(s, &[&current]).await
    })
    .await
}
