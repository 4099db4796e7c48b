//! Transactional enqueue (extensions §E15): a task enqueued inside the caller's transaction is
//! invisible before commit, gone after rollback, claimable after commit — and a waiter in
//! another handle wakes at the caller's commit (the NOTIFY is part of the transaction).

mod common;

use std::time::{Duration, Instant};

use brokertest::{within, TEST_LIMIT, WAIT_LIMIT};
use taskgate::{Broker, ErrorKind, ManualClock, Status, Task};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_in_follows_the_callers_transaction() -> Result<(), taskgate::BoxError> {
    within(TEST_LIMIT, "enqueue_in_follows_the_callers_transaction", async move {
        let Some(s) = common::storage("transactional enqueue").await else { return Ok(()) };
        let clock = ManualClock::at_contract_epoch();
        let a = common::handle(&s, &clock, |o| o.pool_size(3)).await?;
        let other = common::handle(&s, &clock, |o| o.poll_interval(Duration::from_secs(5))).await?;

        // Rolled back: never visible, gone afterwards.
        let mut tx = a.pool().begin().await?;
        let stored = a.enqueue_in(&mut tx, &Task::new("job", "q").with_id("rolled")).await?;
        assert_eq!(stored.status, Status::Pending);
        assert!(other.get("rolled").await.is_err_and(|e| e.is(ErrorKind::NotFound)));
        assert!(other.try_dequeue(&["q"]).await?.is_none(), "uncommitted task claimable");
        tx.rollback().await?;
        assert!(other.get("rolled").await.is_err_and(|e| e.is(ErrorKind::NotFound)));

        // Committed: a waiter in another handle wakes at the commit, not at a poll.
        let waiter = {
            let other = other.clone();
            tokio::spawn(async move { other.dequeue(&["q"]).await })
        };
        tokio::time::sleep(Duration::from_millis(150)).await;
        let mut tx = a.pool().begin().await?;
        sqlx::query("SELECT 1").execute(&mut *tx).await?;
        a.enqueue_in(&mut tx, &Task::new("job", "q").with_id("kept")).await?;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiter.is_finished(), "the waiter saw an uncommitted task");
        assert!(other.get("kept").await.is_err_and(|e| e.is(ErrorKind::NotFound)));
        let committed = Instant::now();
        tx.commit().await?;
        let claimed = within(WAIT_LIMIT, "the waiter on the other handle", waiter).await??;
        let took = committed.elapsed();
        assert_eq!(claimed.id, "kept");
        assert!(took < Duration::from_secs(1), "woken by a poll, not by the commit: {took:?}");

        // Same validation and errors as enqueue; a rejected task leaves the transaction usable.
        let mut tx = a.pool().begin().await?;
        let bad = a.enqueue_in(&mut tx, &Task::new("", "q")).await;
        assert!(bad.is_err_and(|e| e.is(ErrorKind::InvalidInput)));
        let dup = a.enqueue_in(&mut tx, &Task::new("job", "q").with_id("kept")).await;
        assert!(dup.is_err_and(|e| e.is(ErrorKind::TaskExists)));
        a.enqueue_in(&mut tx, &Task::new("job", "q2").with_id("late")).await?;
        tx.commit().await?;
        assert_eq!(other.get("late").await?.status, Status::Pending);
        common::finish(s, &[&a, &other]).await
    })
    .await
}
