//! Combining (issue 13, `brokers/sql/src/combine.rs`): concurrent claims of one SQLite handle
//! become one claim and concurrent acks one `ack_many`, each caller answered with what a
//! serial order of the calls would have given it.
//!
//! The combined batch is formed on purpose: the first call's COMMIT is held (the group-commit
//! hook blocks) while the others queue for the leader, which takes them together when the
//! COMMIT is released. The group-commit hook records how many write calls each COMMIT covered:
//! a combined batch is one call.

mod common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use brokertest::{within, TEST_LIMIT, WAIT_LIMIT};
use common::{queued, Hold, TempDb, TestResult};
use taskgate::{AckItem, Broker, BrokerOptions, Error, Status, Task};
use taskgate_sqlite::SqliteBroker;

/// Holds the first COMMIT of `broker` until released; records the calls each COMMIT covers.
#[derive(Clone, Default)]
struct HeldCommit {
    hold: Hold,
    covered: Arc<Mutex<Vec<usize>>>,
}

impl HeldCommit {
    fn install(broker: &SqliteBroker) -> HeldCommit {
        let held = HeldCommit::default();
        let hook = held.clone();
        broker.set_group_commit_hook(Some(Arc::new(move |members: usize| {
            let first = {
                let mut covered = hook.covered.lock().unwrap_or_else(|p| p.into_inner());
                covered.push(members);
                covered.len() == 1
            };
            if first {
                hook.hold.block();
            }
        })));
        held
    }

    async fn entered(&self) -> TestResult {
        self.hold.entered().await
    }

    fn release(&self) {
        self.hold.release();
    }

    fn covered(&self) -> Vec<usize> {
        self.covered.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Waits until `claims` claim calls and `acks` ack calls wait for their leader.
async fn waiting(broker: &SqliteBroker, claims: usize, acks: usize) -> TestResult {
    let what = format!("{claims} claims and {acks} acks waiting to be combined");
    within(WAIT_LIMIT, what, async {
        loop {
            let (c, a) = broker.engine().combining_waiting();
            if c >= claims && a >= acks {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    Ok(())
}

/// `n` tasks in queue `q`, priorities descending with the index so claim order is known.
async fn fill(broker: &SqliteBroker, n: usize) -> TestResult<Vec<String>> {
    let mut ids = Vec::new();
    for i in 0..n {
        let id = format!("t{i:02}");
        let priority = i16::try_from(i)?;
        broker.enqueue(&Task::new("job", "q").with_id(&id).with_priority(priority)).await?;
        ids.push(id);
    }
    Ok(ids)
}

/// Tasks in `status` (0 when the counts cannot be read).
async fn in_status(broker: &SqliteBroker, status: Status) -> u64 {
    let counts = broker.counts().await.unwrap_or_default();
    counts.values().filter_map(|by_status| by_status.get(&status)).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_claims_become_one_claim_shared_out_in_claim_order() -> TestResult {
    within(TEST_LIMIT, "concurrent_claims_become_one_claim_shared_out_in_claim_order", async {
        let db = TempDb::new()?;
        let broker = db.broker(BrokerOptions::default()).await?;
        let ids = fill(&broker, 20).await?;
        let held = HeldCommit::install(&broker);
        let b = broker.clone();
        let first = tokio::spawn(async move { b.dequeue_many(&["q"], 1).await });
        held.entered().await?;
        let mut calls = Vec::new();
        for _ in 0..8 {
            let b = broker.clone();
            calls.push(tokio::spawn(async move { b.dequeue_many(&["q"], 2).await }));
        }
        waiting(&broker, 8, 0).await?;
        held.release();

        let first = within(WAIT_LIMIT, "the first claim", first).await??;
        assert_eq!(first.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), ["t00"]);
        let mut claimed = BTreeSet::new();
        for call in calls {
            let tasks = within(WAIT_LIMIT, "a combined claim", call).await??;
            assert_eq!(tasks.len(), 2, "each caller gets its own batch size");
            assert!(tasks[0].priority < tasks[1].priority, "each share in claim order");
            for task in tasks {
                assert_eq!(task.status, Status::Running);
                assert!(claimed.insert(task.id.clone()), "{} claimed twice", task.id);
            }
        }
        let expected: BTreeSet<String> = ids[1..17].iter().cloned().collect();
        assert_eq!(claimed, expected, "the 16 next tasks in claim order, each once");
        assert_eq!(held.covered(), vec![1, 1], "the eight claims were one call on the writer");
        // Every claimed task has its own lease.
        let mut tokens = BTreeSet::new();
        for id in &claimed {
            assert!(tokens.insert(broker.get(id).await?.lease_token), "a shared lease token");
        }
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_combined_ack_answers_each_item_as_a_lone_ack_would() -> TestResult {
    within(TEST_LIMIT, "a_combined_ack_answers_each_item_as_a_lone_ack_would", async {
        let db = TempDb::new()?;
        let broker = db.broker(BrokerOptions::default()).await?;
        let observer = db.broker(BrokerOptions::default()).await?;
        fill(&broker, 6).await?;
        let tasks = broker.dequeue_many(&["q"], 6).await?;
        assert_eq!(tasks.len(), 6);
        let held = HeldCommit::install(&broker);
        let (b, t) = (broker.clone(), tasks[0].clone());
        let first = tokio::spawn(async move { b.ack(&t.id, &t.lease_token, None).await });
        held.entered().await?;
        let mut calls = Vec::new();
        for (i, task) in tasks.iter().enumerate().skip(1) {
            // t02 with a stale token; t04 twice in one call (the second is lease lost).
            let token = if i == 2 { "not-the-token".to_owned() } else { task.lease_token.clone() };
            let result = Some(vec![u8::try_from(i)?]);
            let mut items = vec![AckItem { id: task.id.clone(), token, result }];
            if i == 4 {
                let token = task.lease_token.clone();
                items.push(AckItem { id: task.id.clone(), token, result: None });
            }
            let b = broker.clone();
            calls.push(tokio::spawn(async move { b.ack_many(&items).await }));
        }
        waiting(&broker, 0, 5).await?;
        held.release();

        within(WAIT_LIMIT, "the first ack", first).await??;
        let mut answers = Vec::new();
        for call in calls {
            answers.push(within(WAIT_LIMIT, "a combined ack", call).await??);
        }
        assert_eq!(answers.iter().map(Vec::len).collect::<Vec<_>>(), [1, 1, 1, 2, 1]);
        assert!(matches!(answers[1][0], Err(Error::LeaseLost { .. })), "{:?}", answers[1]);
        assert!(answers[3][0].is_ok(), "{:?}", answers[3]);
        assert!(matches!(answers[3][1], Err(Error::LeaseLost { .. })), "{:?}", answers[3]);
        for i in [0, 2, 4] {
            assert!(answers[i][0].is_ok(), "{i}: {:?}", answers[i]);
        }
        assert_eq!(held.covered(), vec![1, 1], "the five ack calls were one call on the writer");
        for (i, task) in tasks.iter().enumerate() {
            let stored = observer.get(&task.id).await?;
            if i == 2 {
                assert_eq!(stored.status, Status::Running, "a stale token acks nothing");
            } else {
                assert_eq!(stored.status, Status::Completed, "{}", task.id);
                let result = if i == 0 { None } else { Some(vec![u8::try_from(i)?]) };
                assert_eq!(stored.result, result, "{}: its own result", task.id);
            }
        }
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claimer_gone_before_the_combined_claim_runs_claims_nothing() -> TestResult {
    within(TEST_LIMIT, "a_claimer_gone_before_the_combined_claim_runs_claims_nothing", async {
        let db = TempDb::new()?;
        let broker = db.broker(BrokerOptions::default()).await?;
        let observer = db.broker(BrokerOptions::default()).await?;
        fill(&broker, 10).await?;
        let held = HeldCommit::install(&broker);
        let b = broker.clone();
        let first = tokio::spawn(async move { b.dequeue_many(&["q"], 1).await });
        held.entered().await?;
        let (b, c) = (broker.clone(), broker.clone());
        let stays = tokio::spawn(async move { b.dequeue_many(&["q"], 2).await });
        let leaves = tokio::spawn(async move { c.dequeue_many(&["q"], 3).await });
        waiting(&broker, 2, 0).await?;
        leaves.abort();
        assert!(leaves.await.is_err_and(|e| e.is_cancelled()));
        held.release();

        within(WAIT_LIMIT, "the first claim", first).await??;
        let kept = within(WAIT_LIMIT, "the claim that stayed", stays).await??;
        assert_eq!(kept.len(), 2);
        // Nothing else is running: the leaver's share was never claimed (or was requeued).
        within(WAIT_LIMIT, "only delivered tasks running", async {
            while in_status(&observer, Status::Running).await != 3 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        assert_eq!(in_status(&observer, Status::Pending).await, 7);
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_queued_while_the_combined_claim_waited_for_the_writer_joins_it() -> TestResult {
    within(TEST_LIMIT, "a_claim_queued_while_the_combined_claim_waited_for_the_writer", async {
        let db = TempDb::new()?;
        let broker = db.broker(BrokerOptions::default()).await?;
        let ids = fill(&broker, 10).await?;
        let held = HeldCommit::install(&broker);
        // An enqueue holds the writer in its COMMIT.
        let b = broker.clone();
        let enqueue = tokio::spawn(async move { b.enqueue(&Task::new("job", "other")).await });
        held.entered().await?;
        // A claim is taken by its leader, whose transaction then waits for the writer.
        let b = broker.clone();
        let first = tokio::spawn(async move { b.dequeue_many(&["q"], 2).await });
        queued(&broker, 1).await?;
        // A claim that queues meanwhile rides along once the writer is free.
        let b = broker.clone();
        let second = tokio::spawn(async move { b.dequeue_many(&["q"], 3).await });
        waiting(&broker, 1, 0).await?;
        held.release();

        within(WAIT_LIMIT, "the enqueue", enqueue).await??;
        let first = within(WAIT_LIMIT, "the first claim", first).await??;
        let second = within(WAIT_LIMIT, "the second claim", second).await??;
        let names = |tasks: &[Task]| tasks.iter().map(|t| t.id.clone()).collect::<Vec<_>>();
        assert_eq!(names(&first), ids[0..2], "the first caller's share comes first");
        assert_eq!(names(&second), ids[2..5]);
        assert_eq!(held.covered(), vec![1, 1], "the enqueue, then both claims as one call");
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_ack_waiting_for_its_leader_rides_along_in_a_combined_claim() -> TestResult {
    within(TEST_LIMIT, "an_ack_waiting_for_its_leader_rides_along_in_a_combined_claim", async {
        let db = TempDb::new()?;
        let broker = db.broker(BrokerOptions::default()).await?;
        let observer = db.broker(BrokerOptions::default()).await?;
        let ids = fill(&broker, 6).await?;
        let done = broker.dequeue_many(&["q"], 2).await?;
        let held = HeldCommit::install(&broker);
        // An enqueue holds the writer in its COMMIT; a combined claim queues behind it, then
        // an ack that runs on its caller's task (nobody else acking), then one that waits
        // for a leader.
        let b = broker.clone();
        let enqueue = tokio::spawn(async move { b.enqueue(&Task::new("job", "other")).await });
        held.entered().await?;
        let b = broker.clone();
        let claim = tokio::spawn(async move { b.dequeue_many(&["q"], 2).await });
        queued(&broker, 1).await?;
        let (b, t) = (broker.clone(), done[0].clone());
        let inline = tokio::spawn(async move { b.ack(&t.id, &t.lease_token, None).await });
        queued(&broker, 2).await?;
        let (b, t) = (broker.clone(), done[1].clone());
        let result = Some(b"rode".to_vec());
        let r = result.clone();
        let riding = tokio::spawn(async move { b.ack(&t.id, &t.lease_token, r).await });
        waiting(&broker, 0, 1).await?;
        held.release();

        within(WAIT_LIMIT, "the enqueue", enqueue).await??;
        let claimed = within(WAIT_LIMIT, "the claim", claim).await??;
        within(WAIT_LIMIT, "the inline ack", inline).await??;
        within(WAIT_LIMIT, "the riding ack", riding).await??;
        let names: Vec<String> = claimed.iter().map(|t| t.id.clone()).collect();
        assert_eq!(names, ids[2..4]);
        let rode = observer.get(&done[1].id).await?;
        assert_eq!((rode.status, rode.result), (Status::Completed, result));
        assert_eq!(observer.get(&done[0].id).await?.status, Status::Completed);
        // The enqueue alone; then the claim (with the waiting ack in its transaction) and
        // the inline ack, which queued for the writer behind it, under one COMMIT.
        assert_eq!(held.covered(), vec![1, 2], "the waiting ack was no call of its own");
        Ok(())
    })
    .await
}
