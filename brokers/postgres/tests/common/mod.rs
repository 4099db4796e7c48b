//! Shared helpers of the PostgreSQL integration tests: fresh storage (or a loud skip),
//! initialised handles on the suite's manual clock, and SQL against the test server.

#![allow(
    dead_code,
    unreachable_pub,
    reason = "a shared helper module: each test binary uses a different subset, privately"
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use brokertest::WAIT_LIMIT;
use sqlx::PgConnection;
use taskgate::{BoxError, Broker, BrokerOptions, Clock, ManualClock};
use taskgate_postgres::testing::{PgFactory, PgStorage};
use taskgate_postgres::{PgBroker, PgOptions};

/// Fresh storage on the test server; `None` (after a loud message) when there is no server
/// and `TASKGATE_REQUIRE_DB` is not 1.
pub async fn storage(test: &str) -> Option<PgStorage> {
    let what = format!("postgres: {test}");
    let made = brokertest::within(WAIT_LIMIT, &what, PgFactory::from_env().pg_storage()).await;
    brokertest::or_skip(&what, made).unwrap_or_else(|e| panic!("{what}: no storage: {e}"))
}

/// The suite's options on `clock`: lease TTL 60 s, caps 3/100.
pub fn options(clock: &ManualClock) -> BrokerOptions {
    BrokerOptions {
        default_lease_ttl: Duration::from_secs(60),
        lease_lost_max: 3,
        throttled_max: 100,
        clock: Some(Arc::new(clock.clone()) as Arc<dyn Clock>),
        ..BrokerOptions::default()
    }
}

/// An initialised handle with `tune` applied to the storage's options.
pub async fn handle(
    s: &PgStorage,
    clock: &ManualClock,
    tune: impl FnOnce(PgOptions) -> PgOptions,
) -> Result<PgBroker, BoxError> {
    let broker = brokertest::within(WAIT_LIMIT, "connect", tune(s.options()?).connect()).await?;
    brokertest::within(WAIT_LIMIT, "init", broker.init(options(clock))).await?;
    Ok(broker)
}

/// Waits (up to 5 s) until `broker`'s listener session is connected; false if it never is.
pub async fn listens(s: &PgStorage, broker: &PgBroker) -> bool {
    let listener = format!("{}:listen", broker.application_name());
    eventually(Duration::from_secs(5), || async { sessions(s, &listener).await.unwrap_or(0) == 1 })
        .await
}

/// Runs one statement on a fresh admin connection and returns the rows affected.
pub async fn admin_exec(s: &PgStorage, sql: &str) -> Result<u64, BoxError> {
    let mut conn: PgConnection = s.admin().await?;
    Ok(sqlx::query(sql).execute(&mut conn).await?.rows_affected())
}

/// Terminates every server session whose `application_name` starts with `name`; returns how
/// many.
pub async fn terminate(s: &PgStorage, name: &str) -> Result<i64, BoxError> {
    let mut conn: PgConnection = s.admin().await?;
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE application_name LIKE $1 || '%' AND pid <> pg_backend_pid()) t",
    )
    .bind(name)
    .fetch_one(&mut conn)
    .await?;
    Ok(n)
}

/// How many server sessions have exactly this `application_name`.
pub async fn sessions(s: &PgStorage, name: &str) -> Result<i64, BoxError> {
    let mut conn: PgConnection = s.admin().await?;
    Ok(sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1")
        .bind(name)
        .fetch_one(&mut conn)
        .await?)
}

/// Waits (real time, up to `limit`) until `check` holds.
pub async fn eventually<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < limit {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// True when a session of `application_name` waits for a lock.
pub async fn lock_waiters(s: &PgStorage, application_name: &str) -> bool {
    let Ok(mut conn) = s.admin().await else { return false };
    let n: Result<i64, _> = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 \
         AND wait_event_type = 'Lock'",
    )
    .bind(application_name)
    .fetch_one(&mut conn)
    .await;
    n.is_ok_and(|n| n > 0)
}

/// Waits (up to [`WAIT_LIMIT`]) until a session of `application_name` waits for a lock;
/// panics naming `what` otherwise. The deterministic signal that a racing call reached its
/// lock wait (instead of a sleep that may be too short on a loaded machine).
pub async fn until_lock_wait(s: &PgStorage, application_name: &str, what: &str) {
    if !eventually(WAIT_LIMIT, || lock_waiters(s, application_name)).await {
        panic!("{what}: no session of {application_name} waited for a lock within {WAIT_LIMIT:?}");
    }
}

/// The median of some durations.
pub fn median(mut d: Vec<Duration>) -> Duration {
    d.sort_unstable();
    d.get(d.len() / 2).copied().unwrap_or_default()
}

/// Closes handles (errors ignored) and drops the storage's tables.
pub async fn finish(s: PgStorage, handles: &[&PgBroker]) -> Result<(), BoxError> {
    for (k, h) in handles.iter().enumerate() {
        brokertest::within(WAIT_LIMIT, format!("close of handle {k}"), h.close()).await?;
    }
    brokertest::within(WAIT_LIMIT, "the storage's cleanup", brokertest_cleanup(&s)).await
}

async fn brokertest_cleanup(s: &PgStorage) -> Result<(), BoxError> {
    brokertest::Storage::cleanup(s).await
}
