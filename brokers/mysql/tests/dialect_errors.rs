//! The dialect classifies real server errors (contract §10.4 "MySQL dialect unit tests"):
//! every error here is a genuine MySQL/MariaDB error packet — raised with `SIGNAL … SET
//! MYSQL_ERRNO`, or by a real duplicate — so the classification is proven on sqlx's
//! structured error, never on text.

mod common;

use brokertest::{within, TEST_LIMIT};
use sqlx::{Executor, MySqlConnection};
use taskgate::BoxError;
use taskgate_mysql::{error_number, MySqlDialect};
use taskgate_sql::{DbError, Dialect, RetryClass, UniqueTarget};

/// The error the server returns for `SIGNAL SQLSTATE '<state>' SET MYSQL_ERRNO = <n>`: run at
/// top level (MariaDB), else from a stored procedure (MySQL allows `SIGNAL` only in stored
/// programs).
async fn signal(
    conn: &mut MySqlConnection,
    state: &str,
    number: u16,
    message: &str,
) -> Result<DbError, BoxError> {
    let body =
        format!("SIGNAL SQLSTATE '{state}' SET MYSQL_ERRNO = {number}, MESSAGE_TEXT = '{message}'");
    let direct = conn.execute(body.as_str()).await.err().ok_or("SIGNAL did not fail")?;
    if error_number(&direct) == Some(number) {
        return Ok(direct);
    }
    conn.execute("DROP PROCEDURE IF EXISTS tg_signal").await?;
    conn.execute(format!("CREATE PROCEDURE tg_signal() {body}").as_str()).await?;
    let called = conn.execute("CALL tg_signal()").await.err().ok_or("CALL did not fail")?;
    conn.execute("DROP PROCEDURE IF EXISTS tg_signal").await?;
    Ok(called)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_are_classified_by_number() -> Result<(), BoxError> {
    within(TEST_LIMIT, "server_errors_are_classified_by_number", async move {
        let Some(storage) = common::storage("server_errors_are_classified_by_number").await else {
            return Ok(());
        };
        let mut conn = common::connect(&storage).await?;
        let d = MySqlDialect;

        let deadlock =
            signal(&mut conn, "40001", 1213, "Deadlock found when trying to get lock").await?;
        assert_eq!(error_number(&deadlock), Some(1213));
        assert_eq!(d.retry_class(&deadlock), RetryClass::Immediate);
        let timeout = signal(&mut conn, "HY000", 1205, "Lock wait timeout exceeded").await?;
        assert_eq!(d.retry_class(&timeout), RetryClass::Limited);
        let chain = signal(
            &mut conn,
            "23000",
            1062,
            "Duplicate entry \\'k\\' for key \\'p_uq_chain_head\\'",
        )
        .await?;
        assert_eq!(d.retry_class(&chain), RetryClass::Never, "1062 is not retryable");
        assert_eq!(d.unique_violation(&chain, "p_"), Some(UniqueTarget::ChainHead));
        let replay = signal(
            &mut conn,
            "23000",
            1062,
            "Duplicate entry \\'x\\' for key \\'p_tasks.p_uq_replay_of\\'",
        )
        .await?;
        assert_eq!(d.unique_violation(&replay, "p_"), Some(UniqueTarget::ReplayOf));
        // A 1213 whose text looks like a duplicate is still a deadlock and not a duplicate.
        let mislead = signal(
            &mut conn,
            "40001",
            1213,
            "Duplicate entry \\'k\\' for key \\'p_uq_chain_head\\'",
        )
        .await?;
        assert_eq!(d.unique_violation(&mislead, "p_"), None);
        for number in [1060u16, 1061, 1091] {
            let applied = signal(&mut conn, "42000", number, "already there").await?;
            assert!(d.is_already_applied(&applied), "{number}");
            assert_eq!(d.retry_class(&applied), RetryClass::Never);
        }
        let other = signal(&mut conn, "42S02", 1146, "Table does not exist").await?;
        assert!(!d.is_already_applied(&other));
        assert_eq!(d.unique_violation(&other, "p_"), None);
        storage.drop_tables().await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_primary_key_duplicate_is_a_plain_duplicate() -> Result<(), BoxError> {
    within(TEST_LIMIT, "a_real_primary_key_duplicate_is_a_plain_duplicate", async move {
        let Some(storage) = common::storage("a_real_primary_key_duplicate").await else {
            return Ok(());
        };
        let mut conn = common::connect(&storage).await?;
        let table = format!("{}dup", storage.prefix());
        conn.execute(format!("CREATE TABLE {table} (id VARCHAR(10) PRIMARY KEY, k VARCHAR(10), UNIQUE KEY {}uq_chain_head (k))", storage.prefix()).as_str()).await?;
        conn.execute(format!("INSERT INTO {table} VALUES ('a', 'k')").as_str()).await?;
        let pk = conn.execute(format!("INSERT INTO {table} VALUES ('a', 'z')").as_str()).await.err();
        let pk = pk.ok_or("duplicate primary key accepted")?;
        assert_eq!(
            MySqlDialect.unique_violation(&pk, storage.prefix()),
            Some(UniqueTarget::PrimaryKey)
        );
        let key = conn.execute(format!("INSERT INTO {table} VALUES ('b', 'k')").as_str()).await.err();
        let key = key.ok_or("duplicate unique key accepted")?;
        assert_eq!(
            MySqlDialect.unique_violation(&key, storage.prefix()),
            Some(UniqueTarget::ChainHead)
        );
        storage.drop_tables().await
    })
    .await
}
