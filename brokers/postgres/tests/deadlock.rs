//! The deadlock storm (contract §10.4 `TestConcurrentPropagate`): per round two claimed
//! parents with twelve fan-in children; both parents fail (FailSkip) while two reapers run
//! five times each. Propagation locks children while the reapers' repair locks children and
//! then their parents, so PostgreSQL reports deadlocks (40P01); the retry loop must absorb
//! every one: no caller sees an error, and the final states are exact.

mod common;

use taskgate::{Broker, Failure, ManualClock, OnParentFailure, Status, Task};

const ROUNDS: usize = 20;
const CHILDREN: usize = 12;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_propagation_absorbs_every_deadlock() -> Result<(), taskgate::BoxError> {
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
    assert!(retries > 0, "the storm produced no deadlock, so it proved nothing");
    common::finish(s, &[&a, &b]).await
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
    while let Some(joined) = jobs.join_next().await {
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
