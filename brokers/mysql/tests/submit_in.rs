//! Typed transactional submit (`Client::submit_in`, extensions §E15) on MySQL/MariaDB: the
//! job the runtime's client builds (kind, routed queue, JSON payload, default retry budget)
//! is stored inside the caller's transaction and vanishes when it rolls back.

mod common;

use std::sync::Arc;
use std::time::Duration;

use brokertest::{within, TEST_LIMIT};
use taskgate::{BoxError, Broker};
use taskgate_worker::{Runtime, SubmitOptions};
use workertest::jobs::Work;
use workertest::txsubmit;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_in_commits_and_rolls_back_with_the_callers_transaction() -> Result<(), BoxError> {
    within(TEST_LIMIT, "submit_in_commits_and_rolls_back_with_the_callers_transaction", async {
        let Some(storage) = common::storage("typed transactional submit").await else {
            return Ok(());
        };
        let my = Arc::new(storage.mysql_handle()?);
        let broker: Arc<dyn Broker> = my.clone();
        let runtime = Runtime::builder(broker.clone()).config(txsubmit::config()).start().await?;
        let client = runtime.client();

        let mut tx = my.pool().begin().await?;
        let kept = client.submit_in(&mut tx, Work { n: 1 }, SubmitOptions::new()).await?;
        txsubmit::assert_invisible(&*broker, kept.as_str(), "before the commit").await;
        tx.commit().await?;
        txsubmit::assert_committed(&*broker, kept.as_str()).await?;

        let mut tx = my.pool().begin().await?;
        let gone = client.submit_in(&mut *tx, Work { n: 2 }, SubmitOptions::new()).await?;
        tx.rollback().await?;
        txsubmit::assert_invisible(&*broker, gone.as_str(), "after a rollback").await;

        let mut wrong = 0u8;
        let other = client.submit_in(&mut wrong, Work { n: 3 }, SubmitOptions::new()).await;
        txsubmit::assert_refused(&*broker, other, "the mysql broker enqueues in a").await?;
        runtime.shutdown(Duration::from_secs(5)).await?;
        my.close().await?;
        storage.drop_tables().await
    })
    .await
}
