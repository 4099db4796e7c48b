//! Crash before commit (contract §11.3 test 2): a test-only hook inside Ack runs after all its
//! writes (status, result, the child's wake-up) and before the commit, and panics. Nothing of
//! the ack is visible; the lease expires, the reaper returns the task, and on the rerun it
//! completes with LeaseLost 1 — the blocked child stays blocked until then.

mod common;

use std::sync::Arc;
use std::time::Duration;

use brokertest::{within, TEST_LIMIT, WAIT_LIMIT};
use common::{manual_options, TempDb, TestResult};
use taskgate::{Broker, Status, Task};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_the_ack_commits_leaves_nothing_and_the_task_recovers() -> TestResult {
    within(
        TEST_LIMIT,
        "a_crash_before_the_ack_commits_leaves_nothing_and_the_task_recovers",
        async move {
            let db = TempDb::new()?;
            let (clock, options) = manual_options();
            let broker = db.broker(options.clone()).await?;
            let observer = db.broker(options).await?;
            broker.enqueue(&Task::new("parent", "qp").with_id("p")).await?;
            broker.enqueue(&Task::new("child", "qc").with_id("c").with_depends_on(["p"])).await?;
            assert_eq!(broker.get("c").await?.status, Status::Blocked);
            let claimed = broker.dequeue(&["qp"]).await?;

            broker.engine().set_before_commit_hook(Some(Arc::new(|op: &str| {
                if op == "ack" {
                    panic!("simulated crash before the ack commits");
                }
            })));
            let crashing = {
                let (b, token) = (broker.clone(), claimed.lease_token.clone());
                tokio::spawn(async move { b.ack("p", &token, Some(b"\"lost\"".to_vec())).await })
            };
            let crashed = within(WAIT_LIMIT, "the crashing ack", crashing).await;
            assert!(crashed.as_ref().is_err_and(|e| e.is_panic()), "the hook must abort the ack");
            broker.engine().set_before_commit_hook(None);

            for handle in [&broker, &observer] {
                let p = handle.get("p").await?;
                assert_eq!((p.status, p.result.as_deref()), (Status::Running, None), "ack leaked");
                assert_eq!(p.lease_token, claimed.lease_token);
                assert_eq!(
                    handle.get("c").await?.status,
                    Status::Blocked,
                    "child woken by a lost ack"
                );
            }
            // The writer is usable after the crash.
            broker.enqueue(&Task::new("other", "qx").with_id("x")).await?;

            assert_eq!(broker.reap_expired().await?, 0, "the lease has not expired yet");
            clock.advance(Duration::from_secs(61));
            assert_eq!(broker.reap_expired().await?, 1);
            assert_eq!(
                broker.get("c").await?.status,
                Status::Blocked,
                "still waiting for its parent"
            );
            let rerun = broker.dequeue(&["qp"]).await?;
            assert_eq!((rerun.id.as_str(), rerun.lease_lost), ("p", 1));
            broker.ack("p", &rerun.lease_token, Some(b"\"recovered\"".to_vec())).await?;
            let p = observer.get("p").await?;
            assert_eq!((p.status, p.lease_lost), (Status::Completed, 1));
            assert_eq!(p.result.as_deref(), Some(&b"\"recovered\""[..]));
            assert_eq!(observer.get("c").await?.status, Status::Pending);
            Ok(())
        },
    )
    .await
}
