//! Races between a child's enqueue and a write on its parent, made deterministic on
//! PostgreSQL: the child is enqueued with `enqueue_in` (its transaction holds the parent's row
//! lock, §5.2, and has inserted the edge) while the parent's write waits for that lock. Under
//! READ COMMITTED the waiting statement must not decide from a snapshot taken before the wait:
//! * ack: the child must be woken (a child left `blocked` under a completed parent is the lost
//!   wake-up the contract forbids);
//! * prune: the parent of a live child must stay (extensions §E16).

mod common;

use std::time::Duration;

use taskgate::{Broker, Clock, ManualClock, PruneRequest, Status, Task};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_waiting_for_the_parent_lock_sees_the_new_child() -> Result<(), taskgate::BoxError> {
    let Some(s) = common::storage("enqueue/ack race").await else { return Ok(()) };
    let clock = ManualClock::at_contract_epoch();
    let b = common::handle(&s, &clock, |o| o).await?;
    b.enqueue(&Task::new("job", "qp").with_id("p")).await?;
    let parent = b.dequeue(&["qp"]).await?;

    // The child's enqueue locks the parent row and inserts the edge, not yet committed.
    let mut tx = b.pool().begin().await?;
    let child =
        b.enqueue_in(&mut tx, &Task::new("job", "qc").with_id("c").with_depends_on(["p"])).await?;
    assert_eq!(child.status, Status::Blocked);

    // The parent's ack now waits for that lock.
    let acker = {
        let b = b.clone();
        let token = parent.lease_token.clone();
        tokio::spawn(async move { b.ack("p", &token, None).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!acker.is_finished(), "the ack did not wait for the parent's row lock");
    tx.commit().await?;
    tokio::time::timeout(Duration::from_secs(5), acker).await???;

    assert_eq!(b.get("p").await?.status, Status::Completed);
    let c = b.get("c").await?;
    assert_eq!(
        c.status,
        Status::Pending,
        "lost wake-up: the child stayed blocked under a completed parent"
    );
    common::finish(s, &[&b]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prune_waiting_for_the_parent_lock_keeps_a_parent_with_a_new_child(
) -> Result<(), taskgate::BoxError> {
    let Some(s) = common::storage("enqueue/prune race").await else { return Ok(()) };
    let clock = ManualClock::at_contract_epoch();
    let b = common::handle(&s, &clock, |o| o).await?;
    b.enqueue(&Task::new("job", "qp").with_id("p")).await?;
    let parent = b.dequeue(&["qp"]).await?;
    b.ack("p", &parent.lease_token, None).await?;
    clock.advance(Duration::from_secs(3600));

    let mut tx = b.pool().begin().await?;
    let child =
        b.enqueue_in(&mut tx, &Task::new("job", "qc").with_id("c").with_depends_on(["p"])).await?;
    assert_eq!(child.status, Status::Pending);
    let pruner = {
        let b = b.clone();
        let cutoff = clock.now_ms();
        tokio::spawn(async move {
            b.prune(PruneRequest { finished_before: cutoff, ..PruneRequest::default() }).await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!pruner.is_finished(), "the prune did not wait for the parent's row lock");
    tx.commit().await?;
    let pruned = tokio::time::timeout(Duration::from_secs(5), pruner).await???;

    assert_eq!(pruned, 0, "the parent of a pending child was pruned");
    assert_eq!(b.get("p").await?.status, Status::Completed);
    common::finish(s, &[&b]).await
}
