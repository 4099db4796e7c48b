//! Test provisioning (extensions §E11): a failed case cannot drop its tables, so the factory
//! sweeps `tgtest_` table sets (and server-clock schemas) made more than an hour ago — and only
//! those.

mod common;

use std::time::{Duration, SystemTime};

use brokertest::{within, TEST_LIMIT};
use taskgate::{Broker, ManualClock};
use taskgate_postgres::testing::{sweep, test_prefix_at};

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
        let old = test_prefix_at(SystemTime::now() - Duration::from_secs(2 * 3600));
        let recent = test_prefix_at(SystemTime::now() - Duration::from_secs(10 * 60));
        let all = i64::try_from(taskgate_postgres::testing::TABLES.len())?;
        for prefix in [&old, &recent] {
            let b = s.options()?.prefix(prefix.as_str()).connect().await?;
            b.init(common::options(&clock)).await?;
            b.close().await?;
            assert_eq!(tables(&s, prefix).await?, all, "{prefix} has all its tables");
            let create = format!("CREATE SCHEMA {prefix}clock");
            sqlx::query(&create).execute(&mut s.admin().await?).await?;
        }
        let current = common::handle(&s, &clock, |o| o).await?;
        let dropped = sweep(s.url()).await?;
        assert!(dropped >= 1, "the two-hour-old set was dropped");
        assert_eq!(tables(&s, &old).await?, 0, "stale tables survived");
        assert_eq!(tables(&s, &recent).await?, all, "a ten-minute-old set was dropped");
        assert_eq!(tables(&s, s.prefix()).await?, all, "the running case's tables were dropped");
        assert!(!schema_exists(&s, &format!("{old}clock")).await?, "a stale clock schema survived");
        assert!(schema_exists(&s, &format!("{recent}clock")).await?, "a recent clock was dropped");
        let mut conn = s.admin().await?;
        taskgate_postgres::testing::drop_tables(&mut conn, &recent).await?;
        sqlx::query(&format!("DROP SCHEMA {recent}clock")).execute(&mut conn).await?;
        common::finish(s, &[&current]).await
    })
    .await
}
