//! The one-statement enqueue: a plain task (no business key, no parents, no preset ID) is
//! stored by one autocommit `INSERT` (no `BEGIN`, no `COMMIT` round trip) at the server's time
//! or the injected clock's, and wakes waiters of its own handle and of another one; every other
//! enqueue takes the transaction. The cuts of that statement's commit (before and after it,
//! and with the server then unreachable) are in `cut_connections.rs`.

mod common;

use std::time::Duration;

use brokertest::{within, TEST_LIMIT};
use taskgate::{Broker, BrokerOptions, Clock, ManualClock, Status, Task, Timestamp};

/// The marker comment that opens the one-statement enqueue (see `taskgate_sql`'s enqueue
/// module).
const MARKER: &str = "/* taskgate: one-statement enqueue */";

/// A poll interval long enough that a pickup within it was a wake-up, not a poll.
const POLL: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_enqueue_is_one_autocommit_statement() -> Result<(), taskgate::BoxError> {
    within(TEST_LIMIT, "a_plain_enqueue_is_one_autocommit_statement", async move {
        let Some(s) = common::storage("one-statement enqueue").await else { return Ok(()) };
        let log = taskgate_sql::StatementLog::new();
        let b = s.options()?.record_statements(log.clone()).connect().await?;
        b.init(BrokerOptions::default()).await?;
        let before = b.now().await?;

        // A plain task: one statement, the marked one, at the server's time.
        log.take();
        let plain = b.enqueue(&Task::new("job", "q").with_payload(b"p".to_vec())).await?;
        let texts = log.texts();
        assert_eq!(texts.len(), 1, "one statement for a plain enqueue: {texts:#?}");
        assert!(texts[0].starts_with(MARKER), "the one-statement enqueue: {texts:#?}");
        assert_eq!(plain.status, Status::Pending);
        assert!(plain.created_at >= before, "{} is before {before}", plain.created_at);
        assert_eq!(plain.run_at, plain.created_at, "an open run_at is the creation time");
        let stored = b.get(&plain.id).await?;
        assert_eq!(stored, plain, "the call returns the row as stored");

        // A delayed plain task keeps its run_at.
        let later = Timestamp::from_millis(before.as_millis() + 3_600_000);
        let delayed = b.enqueue(&Task::new("job", "q").with_run_at(later)).await?;
        assert_eq!((delayed.run_at, b.get(&delayed.id).await?.run_at), (later, later));

        // A preset ID, a business key or a parent: the transaction, no marked statement.
        for task in [
            Task::new("job", "q").with_id("preset"),
            Task::new("job", "q").with_business_key("key"),
            Task::new("job", "q").with_depends_on([plain.id.clone()]),
        ] {
            log.take();
            b.enqueue(&task).await?;
            let texts = log.texts();
            assert!(texts.iter().any(|t| t.contains("INSERT INTO")), "stored: {texts:#?}");
            assert!(!texts.iter().any(|t| t.contains(MARKER)), "not one statement: {texts:#?}");
        }
        // The one-statement enqueue never stores a second copy of an ID.
        let mut stored_ids = Vec::new();
        for _ in 0..20 {
            stored_ids.push(b.enqueue(&Task::new("job", "many")).await?.id);
        }
        stored_ids.sort();
        stored_ids.dedup();
        assert_eq!(stored_ids.len(), 20, "twenty tasks, twenty IDs");
        assert_eq!(b.queue_len("many").await?, 20);
        common::finish(s, &[&b]).await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_statement_enqueue_takes_the_injected_clock_and_wakes_waiters(
) -> Result<(), taskgate::BoxError> {
    within(TEST_LIMIT, "a_one_statement_enqueue_wakes_waiters", async move {
        let Some(s) = common::storage("one-statement enqueue wakes").await else { return Ok(()) };
        let clock = ManualClock::at_contract_epoch();
        let log = taskgate_sql::StatementLog::new();
        let a =
            common::handle(&s, &clock, |o| o.poll_interval(POLL).record_statements(log.clone()))
                .await?;
        let b = common::handle(&s, &clock, |o| o.poll_interval(POLL)).await?;
        assert!(common::listens(&s, &b).await, "the second handle listens");

        // The injected clock's time, not the server's.
        log.take();
        let task = a.enqueue(&Task::new("job", "clock")).await?;
        assert!(log.texts()[0].starts_with(MARKER), "{:#?}", log.texts());
        assert_eq!((task.created_at, task.run_at), (clock.now_ms(), clock.now_ms()));
        assert_eq!(a.get(&task.id).await?.created_at, clock.now_ms());

        // A waiter on the same handle and one on another handle are woken, not polled.
        for (queue, waiter) in [("same", a.clone()), ("other", b.clone())] {
            let q = queue.to_owned();
            let waiting = tokio::spawn(async move { waiter.dequeue(&[q.as_str()]).await });
            tokio::time::sleep(Duration::from_millis(150)).await;
            assert!(!waiting.is_finished(), "{queue}: the waiter returned early");
            log.take();
            let task = a.enqueue(&Task::new("job", queue)).await?;
            assert!(log.texts()[0].starts_with(MARKER), "{queue}: {:#?}", log.texts());
            let claimed = tokio::time::timeout(POLL / 2, waiting).await;
            match claimed {
                Ok(Ok(Ok(t))) => assert_eq!(t.id, task.id, "{queue}"),
                other => panic!("{queue}: the waiter was not woken: {other:?}"),
            }
        }
        common::finish(s, &[&a, &b]).await
    })
    .await
}
