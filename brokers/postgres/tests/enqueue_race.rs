//! Races between a child's enqueue and a write on its parent, made deterministic on
//! PostgreSQL: the child is enqueued with `enqueue_in` (its transaction holds the parent's row
//! lock, §5.2, and has inserted the edge) while the parent's write waits for that lock. Under
//! READ COMMITTED the waiting statement must not decide from a snapshot taken before the wait:
//! * ack: the child must be woken (a child left `blocked` under a completed parent is the lost
//!   wake-up the contract forbids);
//! * prune: the parent of a live child must stay (extensions §E16).
//!
//! The same holds for a resume that re-arms a child's edge to a running parent while the
//! parent's ack waits: the ack must wake the resumed child.
//!
//! The waiting call is released only once `pg_stat_activity` shows it waiting for a lock, so
//! the race runs as planned however loaded the machine is.

mod common;

use std::time::Duration;

use brokertest::races::CommitHold;
use brokertest::{within, TEST_LIMIT, WAIT_LIMIT};
use taskgate::{Broker, Clock, Failure, ManualClock, PruneRequest, Status, Task};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_ack_waiting_for_the_parent_lock_sees_the_new_child() -> Result<(), taskgate::BoxError> {
    within(TEST_LIMIT, "an_ack_waiting_for_the_parent_lock_sees_the_new_child", async move {
        let Some(s) = common::storage("enqueue/ack race").await else { return Ok(()) };
        let clock = ManualClock::at_contract_epoch();
        let b = common::handle(&s, &clock, |o| o).await?;
        b.enqueue(&Task::new("job", "qp").with_id("p")).await?;
        let parent = b.dequeue(&["qp"]).await?;

        // The child's enqueue locks the parent row and inserts the edge, not yet committed.
        let mut tx = b.pool().begin().await?;
        let child = b
            .enqueue_in(&mut tx, &Task::new("job", "qc").with_id("c").with_depends_on(["p"]))
            .await?;
        assert_eq!(child.status, Status::Blocked);

        // The parent's ack now waits for that lock.
        let acker = spawn_waiting_ack(&s, &b, &parent.lease_token).await;
        tx.commit().await?;
        within(WAIT_LIMIT, "the ack of p", acker).await??;

        assert_eq!(b.get("p").await?.status, Status::Completed);
        let c = b.get("c").await?;
        assert_eq!(
            c.status,
            Status::Pending,
            "lost wake-up: the child stayed blocked under a completed parent"
        );
        common::finish(s, &[&b]).await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_prune_waiting_for_the_parent_lock_keeps_a_parent_with_a_new_child(
) -> Result<(), taskgate::BoxError> {
    within(
        TEST_LIMIT,
        "a_prune_waiting_for_the_parent_lock_keeps_a_parent_with_a_new_child",
        async move {
            let Some(s) = common::storage("enqueue/prune race").await else { return Ok(()) };
            let clock = ManualClock::at_contract_epoch();
            let b = common::handle(&s, &clock, |o| o).await?;
            b.enqueue(&Task::new("job", "qp").with_id("p")).await?;
            let parent = b.dequeue(&["qp"]).await?;
            b.ack("p", &parent.lease_token, None).await?;
            clock.advance(Duration::from_secs(3600));

            let mut tx = b.pool().begin().await?;
            let child = b
                .enqueue_in(&mut tx, &Task::new("job", "qc").with_id("c").with_depends_on(["p"]))
                .await?;
            assert_eq!(child.status, Status::Pending);
            let pruner = {
                let b = b.clone();
                let cutoff = clock.now_ms();
                tokio::spawn(async move {
                    b.prune(PruneRequest { finished_before: cutoff, ..PruneRequest::default() })
                        .await
                })
            };
            let what = "the prune to wait for the parent's row lock";
            common::until_lock_wait(&s, b.application_name(), what).await;
            tx.commit().await?;
            let pruned = within(WAIT_LIMIT, "the prune", pruner).await??;

            assert_eq!(pruned, 0, "the parent of a pending child was pruned");
            assert_eq!(b.get("p").await?.status, Status::Completed);
            common::finish(s, &[&b]).await
        },
    )
    .await
}

/// Spawns the ack of `p` with `token` and returns once it waits for the parent's row lock.
async fn spawn_waiting_ack(
    s: &taskgate_postgres::testing::PgStorage,
    b: &taskgate_postgres::PgBroker,
    token: &str,
) -> tokio::task::JoinHandle<taskgate::Result<()>> {
    let acker = {
        let (b, token) = (b.clone(), token.to_owned());
        tokio::spawn(async move { b.ack("p", &token, None).await })
    };
    common::until_lock_wait(s, b.application_name(), "the ack to wait for p's row lock").await;
    acker
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_ack_waiting_for_a_resume_wakes_the_resumed_child() -> Result<(), taskgate::BoxError> {
    within(TEST_LIMIT, "an_ack_waiting_for_a_resume_wakes_the_resumed_child", async move {
        let Some(s) = common::storage("resume/ack race").await else { return Ok(()) };
        let clock = ManualClock::at_contract_epoch();
        let b = common::handle(&s, &clock, |o| o).await?;
        b.enqueue(&Task::new("job", "qp").with_id("p")).await?;
        b.enqueue(&Task::new("job", "qc").with_id("c").with_depends_on(["p"])).await?;
        let first = b.dequeue(&["qp"]).await?;
        b.fail("p", &first.lease_token, Failure::skip("boom")).await?;
        assert_eq!(b.get("c").await?.status, Status::Canceled, "c follows its failed parent");
        b.resume("p").await?;
        let parent = b.dequeue(&["qp"]).await?;

        // Resuming c re-arms its edge to the running p, under p's row lock, and waits to commit.
        let mut held = CommitHold::arm(|hook| b.engine().set_before_commit_hook(hook), "resume");
        let resumer = {
            let b = b.clone();
            tokio::spawn(async move { b.resume("c").await })
        };
        held.entered().await;
        // p's ack now waits for that lock.
        let acker = spawn_waiting_ack(&s, &b, &parent.lease_token).await;
        held.release();
        let resumed = within(WAIT_LIMIT, "the resume of c", resumer).await??;
        assert_eq!(resumed.status, Status::Blocked, "c waits for its running parent");
        within(WAIT_LIMIT, "the ack of p", acker).await??;
        b.engine().set_before_commit_hook(None);

        assert_eq!(b.get("p").await?.status, Status::Completed);
        assert_eq!(
            b.get("c").await?.status,
            Status::Pending,
            "lost wake-up: the resumed child stayed blocked under a completed parent"
        );
        common::finish(s, &[&b]).await
    })
    .await
}
