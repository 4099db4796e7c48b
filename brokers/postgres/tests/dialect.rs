//! PostgreSQL dialect checks on errors the server really raises (contract §10.4 "PG dialect
//! unit tests"): unique violations are recognised by SQLSTATE 23505 and constraint name on the
//! structured error; deadlocks (40P01) and serialization failures (40001) retry, 23505 does not.
//! The offline half (placeholders, DDL, advisory keys, plain text) is in `src/dialect.rs`.

mod common;

use std::time::Duration;

use brokertest::{within, TEST_LIMIT};
use sqlx::{Connection, Executor, PgConnection};
use taskgate::ManualClock;
use taskgate_postgres::PgDialect;
use taskgate_sql::{Dialect, RetryClass, UniqueTarget};

async fn insert(
    conn: &mut PgConnection,
    prefix: &str,
    id: &str,
    key: &str,
    replay_of: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(&format!(
        "INSERT INTO {prefix}tasks (id, type, queue, status, run_at, created_at, business_key, \
         replay_of) VALUES ($1, 't', 'q', 'completed', 0, 0, $2, $3)"
    ))
    .bind(id)
    .bind(key)
    .bind(replay_of)
    .execute(conn)
    .await
    .map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unique_violations_name_their_index() -> Result<(), taskgate::BoxError> {
    within(TEST_LIMIT, "unique_violations_name_their_index", async move {
        let Some(s) = common::storage("dialect unique violations").await else { return Ok(()) };
        let b = common::handle(&s, &ManualClock::at_contract_epoch(), |o| o).await?;
        let (d, p) = (PgDialect::default(), s.prefix().to_owned());
        let mut conn = s.admin().await?;
        insert(&mut conn, &p, "a", "k", "").await?;
        insert(&mut conn, &p, "b", "", "a").await?;
        let cases = [
            (("a", "", ""), UniqueTarget::PrimaryKey),
            (("c", "k", ""), UniqueTarget::ChainHead),
            (("d", "", "a"), UniqueTarget::ReplayOf),
        ];
        for ((id, key, replay_of), want) in cases {
            let e = insert(&mut conn, &p, id, key, replay_of).await.err();
            let e = e.unwrap_or_else(|| panic!("{id}: the insert must violate {want:?}"));
            assert_eq!(taskgate_postgres::sqlstate(&e).as_deref(), Some("23505"));
            assert_eq!(d.unique_violation(&e, &p), Some(want.clone()), "{e}");
            assert_eq!(d.retry_class(&e), RetryClass::Never, "23505 is not retryable");
        }
        // Another prefix's names are not ours; a non-unique error is no violation at all.
        let e = insert(&mut conn, &p, "a", "", "").await.err();
        assert_eq!(
            e.as_ref().and_then(|e| d.unique_violation(e, "other_")),
            Some(UniqueTarget::Unnamed)
        );
        let e = conn.execute("SELECT 1/0").await.err();
        assert_eq!(e.as_ref().and_then(|e| d.unique_violation(e, &p)), None);
        assert_eq!(e.as_ref().map(|e| d.retry_class(e)), Some(RetryClass::Never));
        common::finish(s, &[&b]).await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadlocks_and_serialization_failures_retry() -> Result<(), taskgate::BoxError> {
    within(TEST_LIMIT, "deadlocks_and_serialization_failures_retry", async move {
        let Some(s) = common::storage("dialect retry classes").await else { return Ok(()) };
        let d = PgDialect::default();
        let table = format!("{}deadlock_probe", s.prefix());
        let mut setup = s.admin().await?;
        setup.execute(&*format!("CREATE TABLE {table} (id INT PRIMARY KEY, v INT)")).await?;
        setup.execute(&*format!("INSERT INTO {table} VALUES (1, 0), (2, 0)")).await?;

        // 40P01: two sessions lock 1 and 2, then each wants the other's row.
        let (mut c1, mut c2) = (s.admin().await?, s.admin().await?);
        for c in [&mut c1, &mut c2] {
            c.execute("SET deadlock_timeout = '20ms'").await?;
            c.execute("BEGIN").await?;
        }
        c1.execute(&*format!("UPDATE {table} SET v = 1 WHERE id = 1")).await?;
        c2.execute(&*format!("UPDATE {table} SET v = 1 WHERE id = 2")).await?;
        let second = format!("UPDATE {table} SET v = 2 WHERE id = 1");
        let first = format!("UPDATE {table} SET v = 2 WHERE id = 2");
        let (r1, r2) = tokio::join!(c1.execute(&*first), async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            c2.execute(&*second).await
        });
        let e = r1.err().or(r2.err()).unwrap_or_else(|| panic!("one session must be the victim"));
        assert_eq!(taskgate_postgres::sqlstate(&e).as_deref(), Some("40P01"), "{e}");
        assert_eq!(d.retry_class(&e), RetryClass::Immediate);
        assert_eq!(d.unique_violation(&e, s.prefix()), None);
        c1.execute("ROLLBACK").await?;
        c2.execute("ROLLBACK").await?;

        // 40001: a REPEATABLE READ transaction updates a row changed after its snapshot.
        c1.execute("BEGIN ISOLATION LEVEL REPEATABLE READ").await?;
        c1.execute(&*format!("SELECT v FROM {table} WHERE id = 1")).await?;
        c2.execute(&*format!("UPDATE {table} SET v = 5 WHERE id = 1")).await?;
        let e = c1.execute(&*format!("UPDATE {table} SET v = 6 WHERE id = 1")).await.err();
        let e = e.unwrap_or_else(|| panic!("the update must fail to serialise"));
        assert_eq!(taskgate_postgres::sqlstate(&e).as_deref(), Some("40001"), "{e}");
        assert_eq!(d.retry_class(&e), RetryClass::Immediate);
        c1.execute("ROLLBACK").await?;
        for c in [c1, c2] {
            c.close().await?;
        }
        setup.execute(&*format!("DROP TABLE {table}")).await?;
        setup.close().await?;
        Ok(())
    })
    .await
}
