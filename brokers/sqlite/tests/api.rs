//! The SQLite-only surface: URLs, options, `sqlite::memory:`, transactional enqueue, and the
//! errors opening a bad location gives.

mod common;

use std::time::Duration;

use brokertest::{within, TEST_LIMIT, WAIT_LIMIT};
use common::{query_texts, TempDb, TestResult};
use sqlx::Connection;
use taskgate::{Broker, BrokerOptions, ErrorKind, Task};
use taskgate_sqlite::{SqliteBroker, SqliteOptions, Synchronous};

#[tokio::test]
async fn memory_url_is_a_private_working_database() -> TestResult {
    within(TEST_LIMIT, "memory_url_is_a_private_working_database", async move {
        let broker = SqliteBroker::connect("sqlite::memory:").await?;
        broker.init(BrokerOptions::default()).await?;
        broker.enqueue(&Task::new("job", "q").with_id("m1")).await?;
        let t = broker.dequeue(&["q"]).await?;
        broker.ack(&t.id, &t.lease_token, None).await?;
        assert_eq!(broker.get("m1").await?.status, taskgate::Status::Completed);
        let other = SqliteBroker::connect("sqlite::memory:").await?;
        other.init(BrokerOptions::default()).await?;
        assert_eq!(other.get("m1").await.err().map(|e| e.kind()), Some(ErrorKind::NotFound));
        Ok(())
    })
    .await
}

#[tokio::test]
async fn file_url_prefix_and_synchronous_options_apply() -> TestResult {
    within(TEST_LIMIT, "file_url_prefix_and_synchronous_options_apply", async move {
        let db = TempDb::new()?;
        let url = format!("sqlite://{}", db.path().display());
        let broker = SqliteOptions::from_url(&url)?
            .prefix("app_")
            .synchronous(Synchronous::Normal)
            .poll_interval(Duration::from_millis(20))
            .open()
            .await?;
        broker.init(BrokerOptions::default()).await?;
        broker.enqueue(&Task::new("job", "q").with_id("u1")).await?;
        let tables = query_texts(
            db.path(),
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name",
        )
        .await?;
        assert!(tables.contains(&"app_tasks".to_owned()), "{tables:?}");
        assert!(tables.contains(&"app_schema_migrations".to_owned()), "{tables:?}");
        assert_eq!(query_texts(db.path(), "PRAGMA journal_mode").await?, vec!["wal".to_owned()]);
        assert_eq!(broker.schema_versions().await?, vec![1, 2, 3, 4, 5, 6, 7]);
        let bad = SqliteOptions::new(db.path()).prefix("Bad-Prefix").open().await;
        assert_eq!(bad.err().map(|e| e.kind()), Some(ErrorKind::InvalidInput));
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enqueue_in_commits_and_rolls_back_with_the_callers_transaction() -> TestResult {
    within(
        TEST_LIMIT,
        "enqueue_in_commits_and_rolls_back_with_the_callers_transaction",
        async move {
            let db = TempDb::new()?;
            let broker = db.broker(BrokerOptions::default()).await?;
            let mut app = sqlx::SqliteConnection::connect_with(
                &sqlx::sqlite::SqliteConnectOptions::new()
                    .filename(db.path())
                    .busy_timeout(Duration::from_secs(5)),
            )
            .await?;
            sqlx::query("CREATE TABLE orders (id TEXT PRIMARY KEY)").execute(&mut app).await?;

            // Committed: the order row and its job appear together.
            let mut tx = app.begin_with("BEGIN IMMEDIATE").await?;
            sqlx::query("INSERT INTO orders (id) VALUES ('o1')").execute(&mut *tx).await?;
            let stored =
                broker.enqueue_in(&mut tx, &Task::new("ship", "orders").with_id("ship-o1")).await?;
            assert_eq!(stored.status, taskgate::Status::Pending);
            assert_eq!(
                broker.get("ship-o1").await.err().map(|e| e.kind()),
                Some(ErrorKind::NotFound)
            );
            assert!(broker.try_dequeue(&["orders"]).await?.is_none(), "invisible before commit");
            let waiter = {
                let b = broker.clone();
                tokio::spawn(async move { b.dequeue(&["orders"]).await })
            };
            tx.commit().await?;
            let got = within(WAIT_LIMIT, "the waiter on the other handle", waiter).await??;
            assert_eq!(got.id, "ship-o1");

            // Rolled back: neither exists.
            let mut tx = app.begin_with("BEGIN IMMEDIATE").await?;
            sqlx::query("INSERT INTO orders (id) VALUES ('o2')").execute(&mut *tx).await?;
            broker.enqueue_in(&mut tx, &Task::new("ship", "orders").with_id("ship-o2")).await?;
            tx.rollback().await?;
            assert_eq!(
                broker.get("ship-o2").await.err().map(|e| e.kind()),
                Some(ErrorKind::NotFound)
            );

            // Same validation and errors as enqueue; the caller's transaction stays usable.
            let mut tx = app.begin_with("BEGIN IMMEDIATE").await?;
            let dup =
                broker.enqueue_in(&mut tx, &Task::new("ship", "orders").with_id("ship-o1")).await;
            assert_eq!(dup.err().map(|e| e.kind()), Some(ErrorKind::TaskExists));
            let bad = broker.enqueue_in(&mut tx, &Task::new("", "orders")).await;
            assert_eq!(bad.err().map(|e| e.kind()), Some(ErrorKind::InvalidInput));
            tx.commit().await?;
            app.close().await?;
            Ok(())
        },
    )
    .await
}

#[tokio::test]
async fn a_missing_directory_is_invalid_input() -> TestResult {
    within(TEST_LIMIT, "a_missing_directory_is_invalid_input", async move {
        let db = TempDb::new()?;
        let path = db.dir.path().join("no-such-dir").join("tasks.db");
        let err = SqliteBroker::open(&path).await.err().ok_or("opened a missing directory")?;
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
        assert!(err.to_string().contains("does not exist"), "{err}");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_a_backend_error() -> TestResult {
    within(TEST_LIMIT, "a_file_that_is_not_a_database_is_a_backend_error", async move {
        let db = TempDb::new()?;
        std::fs::write(db.path(), b"this is not a sqlite database, just text; ".repeat(200))?;
        let err = SqliteBroker::open(db.path()).await.err().ok_or("opened a text file")?;
        assert_eq!(err.kind(), ErrorKind::Backend, "{err}");
        let chain = error_chain(&err);
        assert!(chain.contains("cannot open sqlite database"), "{chain}");
        assert!(chain.contains("not a database"), "{chain}");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_directory_path_is_invalid_input() -> TestResult {
    within(TEST_LIMIT, "a_directory_path_is_invalid_input", async move {
        let db = TempDb::new()?;
        let err = SqliteBroker::open(db.dir.path()).await.err().ok_or("opened a directory")?;
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
        Ok(())
    })
    .await
}

/// `err` and its sources, joined.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[tokio::test]
async fn recorded_statements_show_what_ran_and_that_bad_input_ran_nothing() -> TestResult {
    let db = TempDb::new()?;
    let log = taskgate_sql::StatementLog::new();
    let broker = SqliteOptions::new(db.path()).record_statements(log.clone()).open().await?;
    broker.init(BrokerOptions::default()).await?;
    log.take();
    let before = log.count();
    let refused = broker.enqueue(&Task::new("", "q")).await;
    assert_eq!(refused.err().map(|e| e.kind()), Some(ErrorKind::InvalidInput));
    assert_eq!(
        broker.dequeue_many(&["q"], 0).await.err().map(|e| e.kind()),
        Some(ErrorKind::InvalidInput)
    );
    assert_eq!(log.count(), before, "refused input ran a statement");
    broker.enqueue(&Task::new("job", "q").with_id("r1")).await?;
    let t = broker.dequeue(&["q"]).await?;
    broker.ack(&t.id, &t.lease_token, None).await?;
    let texts = log.texts();
    assert!(texts.iter().any(|s| s.starts_with("INSERT INTO taskgate_tasks")), "{texts:#?}");
    assert!(texts.iter().any(|s| s.contains("SET status = 'completed'")), "{texts:#?}");
    let ran = log.take();
    assert!(ran.iter().any(|(_, args)| args.contains(&taskgate_sql::Value::from("r1"))));
    assert!(log.take().is_empty(), "take drains the log");
    Ok(())
}
