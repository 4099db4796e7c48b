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

mod common;

use brokertest::{within, TEST_LIMIT};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use taskgate::{Broker, Clock, Failure, ManualClock, PruneRequest, Status, Task};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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
        let acker = spawn_waiting_ack(&b, &parent.lease_token).await;
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
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(!pruner.is_finished(), "the prune did not wait for the parent's row lock");
            tx.commit().await?;
            let pruned = tokio::time::timeout(Duration::from_secs(5), pruner).await???;

            assert_eq!(pruned, 0, "the parent of a pending child was pruned");
            assert_eq!(b.get("p").await?.status, Status::Completed);
            common::finish(s, &[&b]).await
        },
    )
    .await
}

/// Spawns the ack of `p` with `token` and checks, 300 ms later, that it is still waiting for
/// the parent's row lock.
async fn spawn_waiting_ack(
    b: &taskgate_postgres::PgBroker,
    token: &str,
) -> tokio::task::JoinHandle<taskgate::Result<()>> {
    let acker = {
        let (b, token) = (b.clone(), token.to_owned());
        tokio::spawn(async move { b.ack("p", &token, None).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!acker.is_finished(), "the ack did not wait for the parent's row lock");
    acker
}

/// Makes the next `op` transaction of `b` stop before its commit until `go` is sent; `entered`
/// receives once it stopped (its row locks are then held).
fn hold_before_commit(
    b: &taskgate_postgres::PgBroker,
    op: &'static str,
) -> (mpsc::Receiver<()>, mpsc::Sender<()>) {
    let (entered_tx, entered) = mpsc::channel();
    let (go, go_rx) = mpsc::channel::<()>();
    let (entered_tx, go_rx) = (Mutex::new(entered_tx), Mutex::new(go_rx));
    b.engine().set_before_commit_hook(Some(Arc::new(move |name: &str| {
        if name == op {
            let _ = entered_tx.lock().map(|t| t.send(()));
            let _ = go_rx.lock().map(|r| r.recv_timeout(Duration::from_secs(10)));
        }
    })));
    (entered, go)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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
        let (entered, go) = hold_before_commit(&b, "resume");
        let resumer = {
            let b = b.clone();
            tokio::spawn(async move { b.resume("c").await })
        };
        tokio::task::spawn_blocking(move || entered.recv_timeout(Duration::from_secs(10)))
            .await??;
        // p's ack now waits for that lock.
        let acker = spawn_waiting_ack(&b, &parent.lease_token).await;
        go.send(())?;
        let resumed = tokio::time::timeout(Duration::from_secs(5), resumer).await???;
        assert_eq!(resumed.status, Status::Blocked, "c waits for its running parent");
        tokio::time::timeout(Duration::from_secs(5), acker).await???;
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
