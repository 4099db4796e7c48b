//! Connection loss: after `pg_terminate_backend` of every connection a handle has (its pool and
//! its listener), the next calls succeed on fresh connections — the dead ones are noticed on
//! their first statement (`BEGIN`, or a read), which cannot have committed anything, and
//! replaced. No task is lost or doubled.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use brokertest::{within, TEST_LIMIT, WAIT_LIMIT};
use taskgate::{Broker, Filter, ManualClock, Status, Task};
use taskgate_postgres::PgBroker;

async fn enqueue_batch(b: &PgBroker, from: usize, to: usize) -> Result<(), taskgate::BoxError> {
    for i in from..to {
        b.enqueue(&Task::new("job", "q").with_id(format!("t{i:03}"))).await?;
    }
    Ok(())
}

/// Claims and acks until the queue is empty; returns the IDs in claim order.
async fn drain(b: &PgBroker) -> Result<Vec<String>, taskgate::BoxError> {
    let mut seen = Vec::new();
    loop {
        let batch = b.try_dequeue_many(&["q"], 7).await?;
        if batch.is_empty() {
            return Ok(seen);
        }
        for t in batch {
            b.ack(&t.id, &t.lease_token, Some(b"1".to_vec())).await?;
            seen.push(t.id);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_after_every_connection_was_killed_succeed() -> Result<(), taskgate::BoxError> {
    within(TEST_LIMIT, "calls_after_every_connection_was_killed_succeed", async move {
        let Some(s) = common::storage("connection loss").await else { return Ok(()) };
        let clock = ManualClock::at_contract_epoch();
        let b = common::handle(&s, &clock, |o| o.pool_size(4)).await?;
        let app = b.application_name().to_owned();
        enqueue_batch(&b, 0, 20).await?;
        // Warm several pooled connections, and hold one claim across the kill.
        let held = b.dequeue(&["q"]).await?;
        let reads: Vec<_> = (0..8).map(|_| b.get("t000")).collect();
        for r in within(WAIT_LIMIT, "8 concurrent reads", futures::future::join_all(reads)).await {
            r?;
        }

        let killed = common::terminate(&s, &app).await?;
        println!("terminated {killed} sessions of {app}");
        assert!(
            killed >= 2,
            "expected the pool and the listener to have sessions, killed {killed}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;

        // Every kind of call works at once: a read, a write on a held lease, enqueue, claims.
        assert_eq!(b.get("t005").await?.status, Status::Pending);
        b.ack(&held.id, &held.lease_token, None).await?;
        enqueue_batch(&b, 20, 30).await?;
        let mut seen = vec![held.id.clone()];
        seen.extend(drain_half(&b).await?);

        common::terminate(&s, &app).await?;
        tokio::time::sleep(Duration::from_millis(50)).await;
        enqueue_batch(&b, 30, 40).await?;
        seen.extend(drain(&b).await?);

        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for id in &seen {
            *counts.entry(id.clone()).or_default() += 1;
        }
        assert_eq!(counts.len(), 40, "every task claimed once: {counts:?}");
        assert!(counts.values().all(|n| *n == 1), "a task was claimed twice: {counts:?}");
        let all = b.list(&Filter::default()).await?;
        assert_eq!(all.len(), 40);
        assert!(all.iter().all(|t| t.status == Status::Completed), "{all:?}");
        common::finish(s, &[&b]).await
    })
    .await
}

/// Claims and acks about half of what is ready.
async fn drain_half(b: &PgBroker) -> Result<Vec<String>, taskgate::BoxError> {
    let mut seen = Vec::new();
    for _ in 0..2 {
        for t in b.try_dequeue_many(&["q"], 7).await? {
            b.ack(&t.id, &t.lease_token, None).await?;
            seen.push(t.id);
        }
    }
    Ok(seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_claimer_survives_a_killed_connection() -> Result<(), taskgate::BoxError> {
    within(TEST_LIMIT, "a_waiting_claimer_survives_a_killed_connection", async move {
        let Some(s) = common::storage("connection loss while waiting").await else { return Ok(()) };
        let clock = ManualClock::at_contract_epoch();
        let b = common::handle(&s, &clock, |o| o.pool_size(2)).await?;
        let waiter = {
            let b = b.clone();
            tokio::spawn(async move { b.dequeue(&["w"]).await })
        };
        tokio::time::sleep(Duration::from_millis(150)).await;
        common::terminate(&s, b.application_name()).await?;
        tokio::time::sleep(Duration::from_millis(50)).await;
        b.enqueue(&Task::new("job", "w").with_id("w1")).await?;
        let got = within(WAIT_LIMIT, "the waiter whose connection was killed", waiter).await?;
        assert_eq!(got?.id, "w1");
        common::finish(s, &[&b]).await
    })
    .await
}
