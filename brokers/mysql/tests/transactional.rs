//! Transactional enqueue (extensions §E15): a task enqueued in the caller's transaction is
//! invisible until the caller commits, gone when it rolls back, and claimable (by polling)
//! after the commit; validation and errors are `enqueue`'s.

mod common;

use std::time::Duration;

use brokertest::{within, TEST_LIMIT, WAIT_LIMIT};
use sqlx::Executor;
use taskgate::{BoxError, Broker, Error, Task};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncommitted_tasks_are_invisible_and_commit_publishes_them() -> Result<(), BoxError> {
    within(TEST_LIMIT, "uncommitted_tasks_are_invisible_and_commit_publishes_them", async move {
        let Some(storage) = common::storage("uncommitted_tasks_are_invisible").await else {
            return Ok(());
        };
        let (options, _clock) = common::manual_options();
        let broker = common::handle(&storage, options.clone()).await?;
        let other = common::handle(&storage, options).await?;
        let orders = format!("{}orders", storage.prefix());
        broker
            .pool()
            .execute(format!("CREATE TABLE {orders} (id INT PRIMARY KEY) ENGINE=InnoDB").as_str())
            .await?;

        let waiter = {
            let other = other.clone();
            tokio::spawn(async move { other.dequeue(&["outbox"]).await })
        };
        let mut tx = broker.pool().begin().await?;
        tx.execute(format!("INSERT INTO {orders} (id) VALUES (1)").as_str()).await?;
        let stored =
            broker.enqueue_in(&mut tx, &Task::new("ship", "outbox").with_id("ship-1")).await?;
        assert_eq!(stored.id, "ship-1");
        assert!(
            matches!(other.get("ship-1").await, Err(Error::NotFound { .. })),
            "visible before commit"
        );
        assert!(other.try_dequeue(&["outbox"]).await?.is_none(), "claimable before commit");
        assert_eq!(other.queue_len("outbox").await?, 0);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiter.is_finished(), "a waiter claimed an uncommitted task");
        tx.commit().await?;

        let claimed = within(WAIT_LIMIT, "the waiter on the other handle", waiter).await??;
        assert_eq!(claimed.id, "ship-1", "the waiter finds the committed task by polling");
        let rows: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {orders}"))
            .fetch_one(broker.pool())
            .await?;
        assert_eq!(rows, 1);
        broker.close().await?;
        other.close().await?;
        storage.drop_tables().await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_removes_the_task_with_the_application_rows() -> Result<(), BoxError> {
    within(TEST_LIMIT, "rollback_removes_the_task_with_the_application_rows", async move {
        let Some(storage) = common::storage("rollback_removes_the_task").await else {
            return Ok(());
        };
        let (options, _clock) = common::manual_options();
        let broker = common::handle(&storage, options).await?;
        let orders = format!("{}orders", storage.prefix());
        broker
            .pool()
            .execute(format!("CREATE TABLE {orders} (id INT PRIMARY KEY) ENGINE=InnoDB").as_str())
            .await?;
        broker.enqueue(&Task::new("parent", "p").with_id("parent")).await?;

        let mut tx = broker.pool().begin().await?;
        tx.execute(format!("INSERT INTO {orders} (id) VALUES (7)").as_str()).await?;
        let child = Task::new("ship", "outbox")
            .with_id("ship-7")
            .with_depends_on(["parent"])
            .with_business_key("order-7");
        let stored = broker.enqueue_in(&mut tx, &child).await?;
        assert_eq!(stored.status, taskgate::Status::Blocked);
        tx.rollback().await?;

        assert!(matches!(broker.get("ship-7").await, Err(Error::NotFound { .. })));
        let rows: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {orders}"))
            .fetch_one(broker.pool())
            .await?;
        assert_eq!(rows, 0);
        let edges: i64 =
            sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {}task_deps", storage.prefix()))
                .fetch_one(broker.pool())
                .await?;
        assert_eq!(edges, 0, "the dependency edge rolled back too");
        // The key is free again: nothing of the rolled-back execution remains.
        broker.enqueue(&Task::new("ship", "outbox").with_business_key("order-7")).await?;
        broker.close().await?;
        storage.drop_tables().await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_in_validates_and_reports_like_enqueue() -> Result<(), BoxError> {
    within(TEST_LIMIT, "enqueue_in_validates_and_reports_like_enqueue", async move {
        let Some(storage) = common::storage("enqueue_in_validates").await else { return Ok(()) };
        let (options, _clock) = common::manual_options();
        let broker = common::handle(&storage, options).await?;
        let first = broker.enqueue(&Task::new("t", "q").with_business_key("k")).await?;

        let mut tx = broker.pool().begin().await?;
        let long = broker.enqueue_in(&mut tx, &Task::new("t", "q").with_id("x".repeat(256))).await;
        assert!(matches!(long, Err(Error::InvalidInput { field: "id", .. })), "{long:?}");
        let again = broker.enqueue_in(&mut tx, &Task::new("t", "q").with_business_key("k")).await;
        match again {
            Err(Error::TaskExists { existing: Some(e), .. }) => {
                assert_eq!(e.execution_id, first.id)
            }
            other => panic!("expected TaskExists with the tail, got {other:?}"),
        }
        let missing =
            broker.enqueue_in(&mut tx, &Task::new("t", "q").with_depends_on(["nope"])).await;
        assert!(matches!(missing, Err(Error::NotFound { .. })), "{missing:?}");
        tx.commit().await?;
        assert_eq!(broker.queue_len("q").await?, 1);
        broker.close().await?;
        storage.drop_tables().await
    })
    .await
}
