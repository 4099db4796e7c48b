//! The enqueue/propagation race of contract §5.2, made deterministic on MySQL: a child is
//! enqueued (in a transaction that holds its parent's row lock) while the parent's ack waits
//! for that lock; once the ack gets the lock it must see the child's edge and wake the child.
//! A child left `blocked` under a completed parent is the lost wake-up the contract forbids.
//! The transaction commits only once `SHOW ENGINE INNODB STATUS` shows the ack waiting.

mod common;

use brokertest::{within, TEST_LIMIT, WAIT_LIMIT};
use taskgate::{BoxError, Broker, Status, Task};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_waiting_for_the_parent_lock_sees_the_new_child() -> Result<(), BoxError> {
    within(TEST_LIMIT, "an_ack_waiting_for_the_parent_lock_sees_the_new_child", async move {
        let Some(storage) = common::storage("enqueue/ack race").await else { return Ok(()) };
        let (options, _clock) = common::manual_options();
        let b = common::handle(&storage, options).await?;
        b.enqueue(&Task::new("job", "qp").with_id("p")).await?;
        let parent = b.dequeue(&["qp"]).await?;

        let mut tx = b.pool().begin().await?;
        let child = b
            .enqueue_in(&mut tx, &Task::new("job", "qc").with_id("c").with_depends_on(["p"]))
            .await?;
        assert_eq!(child.status, Status::Blocked);

        let acker = {
            let b = b.clone();
            let token = parent.lease_token.clone();
            tokio::spawn(async move { b.ack("p", &token, None).await })
        };
        common::until_lock_wait(&storage, "the ack to wait for the parent's row lock").await;
        tx.commit().await?;
        within(WAIT_LIMIT, "the ack of p", acker).await??;

        assert_eq!(b.get("p").await?.status, Status::Completed);
        let c = b.get("c").await?;
        assert_eq!(
            c.status,
            Status::Pending,
            "lost wake-up: the child stayed blocked under a completed parent"
        );
        b.close().await?;
        storage.drop_tables().await
    })
    .await
}
