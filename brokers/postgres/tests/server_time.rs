//! Server time (extensions §E1): without an injected clock every "now" is the database
//! server's — stored times, delays, lease deadlines and quota windows — read in the same
//! statements that use it. (With a clock injected, as in the contract suite, the clock's time
//! fills the `COALESCE` override instead.)

mod common;

use std::time::{Duration, Instant};

use brokertest::{within, TEST_LIMIT, WAIT_LIMIT};
use sqlx::PgConnection;
use taskgate::{Broker, BrokerOptions, QuotaConfig, Task, Timestamp};

async fn server_ms(conn: &mut PgConnection) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT CAST(FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000) AS BIGINT)")
        .fetch_one(conn)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_clock_the_server_decides_time() -> Result<(), taskgate::BoxError> {
    within(TEST_LIMIT, "without_a_clock_the_server_decides_time", async move {
        let Some(s) = common::storage("server time").await else { return Ok(()) };
        let b = s.options()?.connect().await?;
        let ttl = Duration::from_millis(300);
        b.init(BrokerOptions::default().with_lease_ttl("short", ttl)).await?;
        let mut conn = s.admin().await?;

        // Stored times come from the server.
        let before = server_ms(&mut conn).await?;
        let t = b.enqueue(&Task::new("job", "q")).await?;
        let after = server_ms(&mut conn).await?;
        let created = t.created_at.as_millis();
        assert!((before..=after).contains(&created), "{before} <= {created} <= {after}");
        assert_eq!(t.run_at, t.created_at, "a zero run_at is the server's now");

        // A delay is waited out on the server's time.
        let due = Timestamp::from_millis(server_ms(&mut conn).await? + 400);
        b.enqueue(&Task::new("job", "later").with_id("later").with_run_at(due)).await?;
        let start = Instant::now();
        let got =
            within(WAIT_LIMIT, "the claim of the delayed task", b.dequeue(&["later"])).await?;
        let waited = start.elapsed();
        assert_eq!(got.id, "later");
        assert!(got.started_at.is_some_and(|s| s >= due), "claimed before its run_at");
        assert!(waited >= Duration::from_millis(250), "returned after {waited:?}");

        // Leases expire by the server's clock.
        b.enqueue(&Task::new("job", "short").with_id("leased")).await?;
        let claimed = b.dequeue(&["short"]).await?;
        assert_eq!(b.reap_expired().await?, 0, "the lease is still valid");
        tokio::time::sleep(ttl + Duration::from_millis(100)).await;
        assert_eq!(b.reap_expired().await?, 1, "the lease expired on the server's clock");
        assert!(b.ack(&claimed.id, &claimed.lease_token, None).await.is_err());

        // Quota windows are the server's unix seconds, floored to the period.
        let gate = b.quota_provider().ok_or("postgres has quota")?.queue_quota(
            "q",
            &QuotaConfig { limit: 5, period: Duration::from_secs(60), key: String::new() },
        )?;
        let secs_before = server_ms(&mut conn).await? / 1000;
        let window = gate.reserve().await?.ok_or("a unit is free")?.window;
        let secs_after = server_ms(&mut conn).await? / 1000;
        assert_eq!(window % 60, 0);
        assert!(window == secs_before / 60 * 60 || window == secs_after / 60 * 60, "{window}");
        common::finish(s, &[&b]).await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn now_and_retry_after_read_the_servers_clock() -> Result<(), taskgate::BoxError> {
    let Some(s) = common::storage("server now").await else { return Ok(()) };
    let b = s.options()?.connect().await?;
    b.init(BrokerOptions::default()).await?;
    let mut conn = s.admin().await?;

    // `now()` is one read of the server's clock.
    let before = server_ms(&mut conn).await?;
    let now = b.now().await?.as_millis();
    let after = server_ms(&mut conn).await?;
    assert!((before..=after).contains(&now), "{before} <= {now} <= {after}");

    // A retry after a delay is timed by the server inside the fail.
    b.enqueue(&Task::new("job", "q").with_id("ra").with_max_retry(1)).await?;
    let claimed = b.dequeue(&["q"]).await?;
    let delay = Duration::from_secs(3_600);
    let before = server_ms(&mut conn).await?;
    b.fail("ra", &claimed.lease_token, taskgate::Failure::business_after("later", delay)).await?;
    let after = server_ms(&mut conn).await?;
    let run_at = b.get("ra").await?.run_at.as_millis();
    let hour = 3_600_000;
    assert!((before + hour..=after + hour).contains(&run_at), "{before} + 1 h <= {run_at}");
    assert!(b.try_dequeue(&["q"]).await?.is_none(), "not claimable for an hour");
    common::finish(s, &[&b]).await
}
