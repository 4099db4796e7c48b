//! The deadlock storm (contract §10.4 `TestConcurrentPropagate`): per round two claimed
//! parents with twelve fan-in children; both parents fail (FailSkip) while two reapers run
//! five times each. No caller may see an error and the final states must be exact. Propagation
//! locks a finishing parent, then its children in ID order; the reapers' defensive repair takes
//! the same order and skips rows another transaction holds, so the storm deadlocks no more
//! (before, repair locked children and then their parents, and every round cost deadlocks).
//!
//! That the retry loop absorbs a deadlock the server really reports is shown by a deadlock
//! made on purpose: a plain SQL transaction and an enqueue lock two parents in opposite order.

mod common;

use std::time::Duration;

use brokertest::{within, TEST_LIMIT, WAIT_LIMIT};
use sqlx::Executor;
use taskgate::{Broker, Failure, ManualClock, OnParentFailure, Status, Task};

const ROUNDS: usize = 20;
const CHILDREN: usize = 12;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_propagation_and_repair_never_deadlock() -> Result<(), taskgate::BoxError> {
    within(TEST_LIMIT, "concurrent_propagation_and_repair_never_deadlock", async move {
        let Some(s) = common::storage("deadlock storm").await else { return Ok(()) };
        let clock = ManualClock::at_contract_epoch();
        // Fast deadlock detection keeps the storm short; it changes latency, not outcomes.
        let fast = |o: taskgate_postgres::PgOptions| {
            o.pool_size(6).tune_connect(|c| c.options([("deadlock_timeout", "20ms")]))
        };
        let a = common::handle(&s, &clock, fast).await?;
        let b = common::handle(&s, &clock, fast).await?;
        for round in 0..ROUNDS {
            storm_round(&a, &b, round).await?;
        }
        let retries = a.tx_retries() + b.tx_retries();
        println!("deadlock storm: {ROUNDS} rounds, {retries} transaction retries absorbed");
        assert_eq!(retries, 0, "repair and propagation lock in one order and never deadlock");
        common::finish(s, &[&a, &b]).await
    })
    .await
}

async fn storm_round(
    a: &taskgate_postgres::PgBroker,
    b: &taskgate_postgres::PgBroker,
    round: usize,
) -> Result<(), taskgate::BoxError> {
    let (p1, p2) = (format!("r{round:02}-p1"), format!("r{round:02}-p2"));
    let qp = format!("qp{round}");
    a.enqueue(&Task::new("parent", &qp).with_id(&p1)).await?;
    a.enqueue(&Task::new("parent", &qp).with_id(&p2)).await?;
    let claimed = a.dequeue_many(&[&qp], 2).await?;
    assert_eq!(claimed.len(), 2, "round {round}: both parents claimed");
    let children: Vec<String> = (0..CHILDREN).map(|c| format!("r{round:02}-c{c:02}")).collect();
    for id in &children {
        let mut child = Task::new("child", "qc").with_id(id).with_depends_on([&p1, &p2]);
        child.on_parent_failure = OnParentFailure::FailFast;
        let stored = a.enqueue(&child).await?;
        assert_eq!(stored.status, Status::Blocked);
    }
    let mut jobs = tokio::task::JoinSet::new();
    for t in claimed {
        let broker = a.clone();
        jobs.spawn(async move { broker.fail(&t.id, &t.lease_token, Failure::skip("boom")).await });
    }
    for reaper in [a.clone(), b.clone()] {
        jobs.spawn(async move {
            for _ in 0..5 {
                reaper.reap_expired().await?;
            }
            Ok(())
        });
    }
    let what = format!("round {round}: two fails and two reapers");
    while let Some(joined) = within(WAIT_LIMIT, &what, jobs.join_next()).await {
        if let Err(e) = joined? {
            panic!("round {round}: an error reached a caller: {e}");
        }
    }
    check_round(a, &p1, &p2, &children).await
}

async fn check_round(
    a: &taskgate_postgres::PgBroker,
    p1: &str,
    p2: &str,
    children: &[String],
) -> Result<(), taskgate::BoxError> {
    for p in [p1, p2] {
        let t = a.get(p).await?;
        assert_eq!(t.status, Status::Failed, "{p}");
        assert_eq!(t.last_error, "boom");
    }
    for id in children {
        let t = a.get(id).await?;
        assert_eq!(t.status, Status::Canceled, "{id}");
        assert!(
            t.last_error == format!("parent {p1} failed")
                || t.last_error == format!("parent {p2} failed"),
            "{id}: {}",
            t.last_error
        );
        assert!(t.finished_at.is_some(), "{id} has no finished_at");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_the_server_reports_is_retried_and_never_reaches_the_caller(
) -> Result<(), taskgate::BoxError> {
    within(
        TEST_LIMIT,
        "a_deadlock_the_server_reports_is_retried_and_never_reaches_the_caller",
        async move {
            let Some(s) = common::storage("deadlock retry").await else { return Ok(()) };
            let clock = ManualClock::at_contract_epoch();
            // A waiting session checks for a deadlock once, `deadlock_timeout` after it began to wait,
            // and if it finds one it is the victim. The broker closes no cycle here but checks after
            // 1 s; the plain transaction closes it and would check only after 10 s: the broker's
            // transaction is the victim.
            let b = common::handle(&s, &clock, |o| {
                o.tune_connect(|c| c.options([("deadlock_timeout", "1s")]))
            })
            .await?;
            b.enqueue(&Task::new("job", "q").with_id("pa")).await?;
            b.enqueue(&Task::new("job", "q").with_id("pb")).await?;
            let mut other = s.admin().await?;
            other.execute("SET deadlock_timeout = '10s'").await?;
            other.execute("BEGIN").await?;
            let tasks = format!("{}tasks", s.prefix());
            other.execute(&*format!("SELECT 1 FROM {tasks} WHERE id = 'pb' FOR UPDATE")).await?;
            // The enqueue locks pa, then waits for pb.
            let child = Task::new("job", "q").with_id("c").with_depends_on(["pa", "pb"]);
            let enqueuer = {
                let b = b.clone();
                tokio::spawn(async move { b.enqueue(&child).await })
            };
            let name = b.application_name().to_owned();
            let waits =
                common::eventually(Duration::from_secs(10), || common::lock_waiters(&s, &name))
                    .await;
            assert!(waits, "the enqueue never waited for pb");
            // Waiting for pa closes the cycle; the server aborts the enqueue's transaction (40P01),
            // which frees pa; the retry then waits for pb again until this transaction ends.
            other.execute(&*format!("SELECT 1 FROM {tasks} WHERE id = 'pa' FOR UPDATE")).await?;
            assert!(!enqueuer.is_finished(), "the retried enqueue waits for pb");
            other.execute("ROLLBACK").await?;
            let stored = within(WAIT_LIMIT, "the retried enqueue", enqueuer).await??;
            assert_eq!(stored.status, Status::Blocked);
            assert_eq!(b.tx_retries(), 1, "one deadlock, absorbed by one retry");
            common::finish(s, &[&b]).await
        },
    )
    .await
}
