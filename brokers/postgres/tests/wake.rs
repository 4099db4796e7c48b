//! Cross-process wake-ups (extensions §E2): a second handle (its own pool, as another process
//! would have) blocked in `dequeue` is woken through LISTEN/NOTIFY within 50 ms of a commit on
//! the first; when its listener connection is killed it still wakes within the poll interval,
//! and it listens again by itself. Latency is measured in real time.

mod common;

use std::time::{Duration, Instant};

use brokertest::{within, TEST_LIMIT};
use taskgate::{Broker, BrokerOptions, ManualClock, Task};
use taskgate_postgres::PgBroker;

/// The second handle's poll interval: long enough that a 50 ms wake-up cannot be a poll.
const POLL: Duration = Duration::from_millis(400);
const NOTIFY_LIMIT: Duration = Duration::from_millis(50);

/// Enqueues on `producer` while `consumer` waits in `dequeue`; returns the real time from the
/// enqueue's start to the consumer's claim.
async fn pickup(producer: &PgBroker, consumer: &PgBroker, queue: &str, id: &str) -> Duration {
    let waiter = consumer.clone();
    let q = queue.to_owned();
    let handle = tokio::spawn(async move { waiter.dequeue(&[&q]).await });
    // Let the waiter finish its probe and settle into waiting.
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(!handle.is_finished(), "the waiter returned before anything was enqueued");
    let start = Instant::now();
    let task = Task::new("wake", queue).with_id(id);
    if let Err(e) = producer.enqueue(&task).await {
        panic!("enqueue {id}: {e}");
    }
    let claimed = tokio::time::timeout(Duration::from_secs(5), handle).await;
    let elapsed = start.elapsed();
    match claimed {
        Ok(Ok(Ok(t))) => assert_eq!(t.id, id),
        other => panic!("waiter for {id} did not claim it: {other:?}"),
    }
    elapsed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_wakes_another_handle_and_survives_a_killed_listener(
) -> Result<(), taskgate::BoxError> {
    within(TEST_LIMIT, "notify_wakes_another_handle_and_survives_a_killed_listener", async move {
        let Some(s) = common::storage("cross-process wake").await else { return Ok(()) };
        let clock = ManualClock::at_contract_epoch();
        let a = common::handle(&s, &clock, |o| o.poll_interval(POLL)).await?;
        let b = common::handle(&s, &clock, |o| o.poll_interval(POLL)).await?;
        assert!(common::listens(&s, &b).await, "the second handle listens");

        let mut took = Vec::new();
        for i in 0..5 {
            took.push(pickup(&a, &b, "q", &format!("n{i}")).await);
        }
        let p50 = common::median(took.clone());
        println!("NOTIFY pickup across handles: p50 {p50:?}, all {took:?}");
        assert!(p50 <= NOTIFY_LIMIT, "pickup through NOTIFY took {p50:?} (p50)");
        assert!(took.iter().all(|d| *d < POLL), "some pickup waited for a poll: {took:?}");

        // Kill the listener's connection: the poll still delivers within its interval.
        let listener = format!("{}:listen", b.application_name());
        assert_eq!(common::terminate(&s, &listener).await?, 1, "one listener session to kill");
        let lost = pickup(&a, &b, "q", "after-kill").await;
        println!("pickup with the listener killed: {lost:?}");
        assert!(lost < POLL + Duration::from_millis(150), "no wake-up within the poll: {lost:?}");

        // The listener comes back by itself, and NOTIFY is fast again.
        assert!(common::listens(&s, &b).await, "the listener did not reconnect");
        let mut again = Vec::new();
        for i in 0..3 {
            again.push(pickup(&a, &b, "q", &format!("r{i}")).await);
        }
        println!("pickup after re-listening: {again:?}");
        assert!(common::median(again) <= NOTIFY_LIMIT, "NOTIFY did not come back");
        common::finish(s, &[&a, &b]).await
    })
    .await
}

/// On the server's clock (no injected one) a one-task enqueue reads the server's time inside
/// its `INSERT`; on an idle handle that statement also carries the `pg_notify`, which goes out
/// with the COMMIT. (Which enqueues may carry one — at most one per gap — is checked by the
/// notifier's unit tests.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_enqueue_carries_its_notify_in_the_insert() -> Result<(), taskgate::BoxError> {
    within(TEST_LIMIT, "an_idle_enqueue_carries_its_notify_in_the_insert", async move {
        let Some(s) = common::storage("inline notify").await else { return Ok(()) };
        let server_clock =
            || BrokerOptions { default_lease_ttl: Duration::from_secs(60), ..Default::default() };
        let log = taskgate_sql::StatementLog::new();
        let a = s.options()?.poll_interval(POLL).record_statements(log.clone()).connect().await?;
        a.init(server_clock()).await?;
        let b = s.options()?.poll_interval(POLL).connect().await?;
        b.init(server_clock()).await?;
        assert!(common::listens(&s, &b).await, "the second handle listens");
        // Let the handle's earlier notifications (none expected) age past the gap.
        tokio::time::sleep(Duration::from_millis(50)).await;
        log.take();

        let first = pickup(&a, &b, "q", "inline").await;
        let texts = log.texts();
        let inserts: Vec<&String> = texts.iter().filter(|t| t.contains("INSERT INTO")).collect();
        assert_eq!(inserts.len(), 1, "one INSERT for one task: {texts:#?}");
        assert!(
            inserts[0].contains("pg_notify("),
            "the idle enqueue carries its notify: {texts:#?}"
        );
        assert!(
            !texts.iter().any(|t| t.trim_start().starts_with("SELECT CAST(FLOOR")),
            "no separate read of the server's time: {texts:#?}"
        );
        assert!(first < POLL, "the inline notify did not wake the other handle: {first:?}");

        // Back to back: the second enqueue is within the notifier's gap, so its INSERT carries
        // no notify (the notifier sends one after the gap, at most one per gap per handle).
        common::finish(s, &[&a, &b]).await
    })
    .await
}
