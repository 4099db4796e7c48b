//! A caller that leaves in the middle of a statement (its future dropped by a timeout or a
//! `select!`) costs the pool one connection, closed, never returned: sqlx 0.8.6's MySQL
//! connection cannot resume a reply it stopped reading, and the ping the pool runs on a
//! returned connection could then wait forever, holding a permit, so `close` never returned
//! (the history check's hang). The session the dropped call ran on ends, its transaction is
//! rolled back, the broker goes on with a fresh connection, and `close` returns.

mod common;

use std::time::Duration;

use brokertest::{within, TEST_LIMIT, WAIT_LIMIT};
use sqlx::{Connection, Executor, MySqlConnection};
use taskgate::{BoxError, Broker, Status, Task};
use taskgate_mysql::testing::MySqlFactory;

/// The server-side ID of the session (other than `admin`'s) whose statement mentions
/// `needle`, if one runs.
async fn session_running(
    admin: &mut MySqlConnection,
    needle: &str,
) -> Result<Option<u64>, BoxError> {
    let sql = "SELECT CAST(ID AS UNSIGNED) FROM information_schema.PROCESSLIST \
               WHERE ID <> CONNECTION_ID() AND INFO LIKE CONCAT('%', ?, '%')";
    Ok(sqlx::query_scalar(sql).bind(needle).fetch_optional(&mut *admin).await?)
}

/// True while the server still has session `id`.
async fn session_exists(admin: &mut MySqlConnection, id: u64) -> Result<bool, BoxError> {
    let sql = "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?";
    let n: i64 = sqlx::query_scalar(sql).bind(id).fetch_one(&mut *admin).await?;
    Ok(n > 0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_dropped_mid_statement_closes_its_connection() -> Result<(), BoxError> {
    within(TEST_LIMIT, "a_call_dropped_mid_statement_closes_its_connection", async move {
        let factory = MySqlFactory::from_env().with_pool_size(2);
        let Some(storage) = common::storage_with("dropped_mid_statement", factory).await else {
            return Ok(());
        };
        let (options, _clock) = common::manual_options();
        let broker = common::handle(&storage, options).await?;
        broker.enqueue(&Task::new("t", "q").with_id("held")).await?;
        let claimed = broker.dequeue_many(&["q"], 1).await?;
        let [task] = &claimed[..] else { panic!("claimed {} tasks, not 1", claimed.len()) };

        // Another session locks the task's row: the broker's ack waits inside its statement.
        let mut locker = common::connect(&storage).await?;
        locker.execute("BEGIN").await?;
        let lock = format!("SELECT id FROM {}tasks WHERE id = 'held' FOR UPDATE", storage.prefix());
        locker.execute(lock.as_str()).await?;
        let mut admin = common::connect(&storage).await?;
        let ack = broker.ack(&task.id, &task.lease_token, None);
        let waiting = async {
            common::until_lock_wait(&storage, "the ack's lock wait").await;
            session_running(&mut admin, storage.prefix()).await
        };
        let session = tokio::select! {
            acked = ack => panic!("the ack answered while its row was locked: {acked:?}"),
            session = waiting => session?,
        };
        // The ack's future is gone, its statement still waits on the server.
        let session = session.expect("the ack's statement is running");
        locker.execute("ROLLBACK").await?;

        // The dropped call's session ends (its transaction rolled back), not kept in the pool.
        let start = std::time::Instant::now();
        while session_exists(&mut admin, session).await? {
            assert!(
                start.elapsed() < WAIT_LIMIT,
                "session {session} still open: returned to the pool"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let stored = broker.get(&task.id).await?;
        assert_eq!(stored.status, Status::Running, "the dropped ack was rolled back");

        // The broker goes on with a fresh connection, and closes.
        broker.ack(&task.id, &task.lease_token, None).await?;
        assert_eq!(broker.get(&task.id).await?.status, Status::Completed);
        within(WAIT_LIMIT, "close", broker.close()).await?;
        admin.close().await?;
        locker.close().await?;
        storage.drop_tables().await
    })
    .await
}
