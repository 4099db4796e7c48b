//! Typed transactional submit (`Client::submit_in`, extensions §E15) on SQLite: the job the
//! runtime's client builds (kind, routed queue, JSON payload, default retry budget) is stored
//! inside the caller's transaction — a pool's `Transaction<'static, Sqlite>` or the connection
//! of a transaction begun on the caller's own connection — and vanishes when it rolls back.

mod common;

use std::sync::Arc;
use std::time::Duration;

use brokertest::{within, TEST_LIMIT};
use common::{TempDb, TestResult};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use sqlx::Connection;
use taskgate::Broker;
use taskgate_sqlite::SqliteOptions;
use taskgate_worker::{Runtime, SubmitOptions};
use workertest::jobs::Work;
use workertest::txsubmit;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_in_commits_and_rolls_back_with_the_callers_transaction() -> TestResult {
    within(TEST_LIMIT, "submit_in_commits_and_rolls_back_with_the_callers_transaction", async {
        let db = TempDb::new()?;
        let broker: Arc<dyn Broker> = Arc::new(SqliteOptions::new(db.path()).open().await?);
        let runtime = Runtime::builder(broker.clone()).config(txsubmit::config()).start().await?;
        let client = runtime.client();
        let connect =
            SqliteConnectOptions::new().filename(db.path()).busy_timeout(Duration::from_secs(5));
        let pool =
            SqlitePoolOptions::new().max_connections(1).connect_with(connect.clone()).await?;
        sqlx::query("CREATE TABLE orders (id INTEGER PRIMARY KEY)").execute(&pool).await?;

        // A pool's transaction, committed: the order and its job appear together.
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
        sqlx::query("INSERT INTO orders (id) VALUES (1)").execute(&mut *tx).await?;
        let kept = client.submit_in(&mut tx, Work { n: 1 }, SubmitOptions::new()).await?;
        txsubmit::assert_invisible(&*broker, kept.as_str(), "before the commit").await;
        tx.commit().await?;
        txsubmit::assert_committed(&*broker, kept.as_str()).await?;

        // The connection of a transaction on the caller's own connection, rolled back.
        let mut app = sqlx::SqliteConnection::connect_with(&connect).await?;
        let mut tx = app.begin_with("BEGIN IMMEDIATE").await?;
        sqlx::query("INSERT INTO orders (id) VALUES (2)").execute(&mut *tx).await?;
        let options = SubmitOptions::new().max_retry(2).priority(-5);
        let gone = client.submit_in(&mut *tx, Work { n: 2 }, options).await?;
        tx.rollback().await?;
        txsubmit::assert_invisible(&*broker, gone.as_str(), "after a rollback").await;

        // A connection outside a transaction, or another type, is refused by name.
        let outside = client.submit_in(&mut app, Work { n: 3 }, SubmitOptions::new()).await;
        txsubmit::assert_refused(&*broker, outside, "not inside a transaction").await?;
        let mut wrong = String::new();
        let other = client.submit_in(&mut wrong, Work { n: 4 }, SubmitOptions::new()).await;
        txsubmit::assert_refused(&*broker, other, "not a alloc::string::String").await?;
        app.close().await?;
        pool.close().await;
        runtime.shutdown(Duration::from_secs(5)).await?;
        Ok(())
    })
    .await
}
