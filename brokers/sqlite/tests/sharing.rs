//! Two broker instances on one file share everything: tasks (each claimed once), quota
//! budgets and pause flags. (Two OS processes: `processes.rs`.)

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use brokertest::{within, TEST_LIMIT, WAIT_LIMIT};
use common::{manual_options, TempDb, TestResult};
use taskgate::{Broker, BrokerOptions, QuotaConfig, Task};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_brokers_on_one_file_share_tasks_quota_and_pause() -> TestResult {
    within(TEST_LIMIT, "two_brokers_on_one_file_share_tasks_quota_and_pause", async move {
        let db = TempDb::new()?;
        let (_clock, options) = manual_options();
        let a = db.broker(options.clone()).await?;
        let b = db.broker(options).await?;

        // Tasks: enqueued by one, seen and claimed by the other, each claimed once.
        let tasks: Vec<Task> =
            (0..40).map(|i| Task::new("job", "shared").with_id(format!("t{i:02}"))).collect();
        a.enqueue_many(&tasks).await?;
        assert_eq!(b.queue_len("shared").await?, 40);
        let mut seen = BTreeSet::new();
        let mut claims = Vec::new();
        for broker in [a.clone(), b.clone()] {
            claims.push(tokio::spawn(async move {
                let mut got = Vec::new();
                while let Some(t) = broker.try_dequeue(&["shared"]).await? {
                    broker.ack(&t.id, &t.lease_token, Some(b"done".to_vec())).await?;
                    got.push(t.id);
                }
                Ok::<_, taskgate::Error>(got)
            }));
        }
        for claim in claims {
            for id in within(WAIT_LIMIT, "a claim loop", claim).await?? {
                assert!(seen.insert(id.clone()), "{id} claimed twice");
            }
        }
        assert_eq!(seen.len(), 40);
        assert_eq!(a.get("t07").await?.result.as_deref(), Some(&b"done"[..]));

        // Pause: set by one handle, honoured and reported by the other.
        a.pause_queue("paused-q").await?;
        b.enqueue(&Task::new("job", "paused-q").with_id("p1")).await?;
        assert_eq!(b.paused_queues().await?, vec!["paused-q".to_owned()]);
        assert!(b.try_dequeue(&["paused-q"]).await?.is_none());
        a.resume_queue("paused-q").await?;
        assert_eq!(b.try_dequeue(&["paused-q"]).await?.map(|t| t.id).as_deref(), Some("p1"));

        // Quota: one budget across both handles.
        let config =
            QuotaConfig { limit: 3, period: Duration::from_secs(3600), key: "shared-key".into() };
        let qa = a.quota_provider().ok_or("no quota")?.queue_quota("q", &config)?;
        let qb = b.quota_provider().ok_or("no quota")?.queue_quota("q", &config)?;
        assert!(qa.reserve().await?.is_some());
        assert!(qb.reserve().await?.is_some());
        assert!(qa.reserve().await?.is_some());
        assert!(qb.reserve().await?.is_none(), "the fourth unit must be refused");
        a.close().await?;
        b.close().await?;
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_finds_another_handles_write_by_polling() -> TestResult {
    within(TEST_LIMIT, "a_waiter_finds_another_handles_write_by_polling", async move {
        let db = TempDb::new()?;
        let a = db.broker(BrokerOptions::default()).await?;
        let b = db.broker(BrokerOptions::default()).await?;
        let waiter = {
            let b: Arc<dyn Broker> = b.clone();
            tokio::spawn(async move { b.dequeue(&["poll-q"]).await })
        };
        tokio::time::sleep(Duration::from_millis(150)).await;
        a.enqueue(&Task::new("job", "poll-q").with_id("w1")).await?;
        let got = within(WAIT_LIMIT, "the polling waiter", waiter).await??;
        assert_eq!(got.id, "w1");
        Ok(())
    })
    .await
}
