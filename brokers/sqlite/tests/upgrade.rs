//! Schema upgrade in place: a file made by migration 0001 only (`fixtures/sqlite/v1.db`, see
//! its README) opens, is upgraded to the current schema with every row intact, works like a
//! new one, and a second open is a no-op.

mod common;

use std::path::PathBuf;

use brokertest::{within, TEST_LIMIT};
use common::{manual_options, query_texts, TempDb, TestResult};
use taskgate::{Broker, ErrorKind, ReplayRequest, Status, Task};
use taskgate_sqlite::SqliteOptions;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/sqlite/v1.db")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_file_is_upgraded_in_place_and_keeps_its_rows() -> TestResult {
    within(TEST_LIMIT, "a_version_1_file_is_upgraded_in_place_and_keeps_its_rows", async move {
        let db = TempDb::new()?;
        std::fs::copy(fixture(), db.path())?;
        let (clock, options) = manual_options();
        let broker = db.broker(options.clone()).await?;
        assert_eq!(broker.schema_versions().await?, vec![1, 2, 3, 4, 5, 6, 7]);

        let done = broker.get("v1-done").await?;
        assert_eq!(done.status, Status::Completed);
        assert_eq!(done.payload.as_deref(), Some(&br#"{"day":1}"#[..]));
        assert_eq!(done.result.as_deref(), Some(&br#"{"ok":1}"#[..]));
        assert_eq!((done.max_retry, done.steps, done.resumes), (2, 0, 0));
        assert_eq!((done.cursor.as_deref(), done.progress, done.owner.as_str()), (None, None, ""));
        let failed = broker.get("v1-failed").await?;
        assert_eq!(
            (failed.status, failed.last_error.as_str(), failed.attempts),
            (Status::Failed, "smtp down", 3)
        );
        assert_eq!(broker.get("v1-child").await?.depends_on, vec!["v1-parent".to_owned()]);
        for id in ["v1-done", "v1-failed", "v1-child", "v1-parent"] {
            assert_eq!(broker.get(id).await?.priority, 0, "{id}: old rows get priority 0");
        }
        let index = query_texts(
            db.path(),
            "SELECT sql FROM sqlite_master WHERE name = 'taskgate_idx_ready_prio'",
        )
        .await?;
        assert!(
            index.first().is_some_and(|sql| sql.contains("(queue, priority, run_at, id)")),
            "the claim index of 0004: {index:?}"
        );

        // Key idempotency and replay work on old rows.
        let dup = broker.enqueue(&Task::new("fetch", "q1").with_business_key("v1-key")).await;
        match dup {
            Err(taskgate::Error::TaskExists { existing: Some(e), .. }) => {
                assert_eq!((e.execution_id.as_str(), e.status), ("v1-parent", Status::Pending));
            }
            other => panic!("expected TaskExists with the tail, got {other:?}"),
        }
        let again = broker.replay(ReplayRequest::by_id("v1-done").allow_completed()).await?;
        assert_eq!(again.replay_of, "v1-done");
        let twice = broker.replay(ReplayRequest::by_id("v1-done").allow_completed()).await;
        assert_eq!(twice.err().map(|e| e.kind()), Some(ErrorKind::AlreadyReplayed));

        // Old dependency edges still propagate; an urgent new task goes before the old rows.
        broker.enqueue(&Task::new("fetch", "q1").with_id("urgent").with_priority(-1)).await?;
        clock.advance(std::time::Duration::from_secs(1));
        let claimed = broker.dequeue_many(&["q1"], 10).await?;
        assert_eq!(claimed.first().map(|t| t.id.as_str()), Some("urgent"), "claim order");
        let parent =
            claimed.iter().find(|t| t.id == "v1-parent").ok_or("v1-parent not claimable")?;
        broker.ack(&parent.id, &parent.lease_token, None).await?;
        assert_eq!(broker.get("v1-child").await?.status, Status::Pending);
        broker.close().await?;

        // A second open applies nothing.
        let reopened = SqliteOptions::new(db.path()).open().await?;
        assert_eq!(reopened.engine().migrate().await?, Vec::<i64>::new());
        assert_eq!(reopened.schema_versions().await?, vec![1, 2, 3, 4, 5, 6, 7]);
        reopened.init(options).await?;
        assert_eq!(reopened.get("v1-done").await?.status, Status::Completed);
        reopened.close().await?;
        assert_eq!(query_texts(db.path(), "PRAGMA integrity_check").await?, vec!["ok".to_owned()]);
        Ok(())
    })
    .await
}
