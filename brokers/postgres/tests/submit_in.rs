//! Typed transactional submit (`Client::submit_in`, extensions §E15) on PostgreSQL: the job
//! the runtime's client builds (kind, routed queue, JSON payload, default retry budget) is
//! stored inside the caller's transaction and vanishes when it rolls back.

mod common;

use std::sync::Arc;
use std::time::Duration;

use brokertest::{within, TEST_LIMIT};
use taskgate::{BoxError, Broker, ErrorKind, Status, DEFAULT_MAX_RETRY};
use taskgate_worker::{Config, Job, Runtime, SubmitOptions};
use workertest::jobs::Work;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_in_commits_and_rolls_back_with_the_callers_transaction() -> Result<(), BoxError> {
    within(TEST_LIMIT, "submit_in_commits_and_rolls_back_with_the_callers_transaction", async {
        let Some(s) = common::storage("typed transactional submit").await else { return Ok(()) };
        let pg = Arc::new(s.options()?.connect().await?);
        let broker: Arc<dyn Broker> = pg.clone();
        let config = Config::new().route(Work::KIND, "outbox");
        let runtime = Runtime::builder(broker.clone()).config(config).start().await?;
        let client = runtime.client();

        let mut tx = pg.pool().begin().await?;
        let kept = client.submit_in(&mut tx, Work { n: 1 }, SubmitOptions::new()).await?;
        let unseen = broker.get(kept.as_str()).await.err().map(|e| e.kind());
        assert_eq!(unseen, Some(ErrorKind::NotFound), "visible before the commit");
        tx.commit().await?;
        let task = broker.get(kept.as_str()).await?;
        let got = (task.task_type.as_str(), task.queue.as_str(), task.status, task.max_retry);
        assert_eq!(got, (Work::KIND, "outbox", Status::Pending, DEFAULT_MAX_RETRY));
        assert_eq!(task.payload.as_deref(), Some(br#"{"n":1}"#.as_slice()));

        let mut tx = pg.pool().begin().await?;
        let gone = client.submit_in(&mut *tx, Work { n: 2 }, SubmitOptions::new()).await?;
        tx.rollback().await?;
        let after = broker.get(gone.as_str()).await.err().map(|e| e.kind());
        assert_eq!(after, Some(ErrorKind::NotFound), "a rolled-back submit left its job");

        let mut wrong = 0u8;
        let other = client.submit_in(&mut wrong, Work { n: 3 }, SubmitOptions::new()).await;
        let text = other.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(text.contains("the postgres broker enqueues in a"), "{text}");
        assert_eq!(broker.list(&taskgate::Filter::default()).await?.len(), 1, "only the kept job");
        runtime.shutdown(Duration::from_secs(5)).await?;
        common::finish(s, &[&pg]).await
    })
    .await
}
