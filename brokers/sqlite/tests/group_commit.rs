//! Group commit (issue 13): concurrent write calls of one handle share one transaction and one
//! COMMIT. A call that fails inside the shared transaction — a SQL error, a contract error, a
//! panic after its writes — is undone alone and the others commit; a caller that leaves the
//! queue never strands the calls handed to it; a process killed before the shared COMMIT
//! leaves none of the group's work, and none of its calls had returned.
//!
//! The group is formed on purpose: the first call is held at its commit (the engine's
//! before-commit hook) until the others are queued for the writer, and the group-commit hook
//! records how many calls each COMMIT covered.
//!
//! The crash child is this test binary run again with `TASKGATE_GROUP_CHILD=<db path>`: the
//! `group_child_main` test does nothing in a normal run.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use brokertest::{within, TEST_LIMIT, WAIT_LIMIT};
use common::{query_texts, queued, Hold, TempDb, TestResult};
use taskgate::{Broker, BrokerOptions, Error, Status, Task};
use taskgate_sqlite::{SqliteBroker, SqliteOptions};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tokio::task::JoinHandle;

const CHILD: &str = "TASKGATE_GROUP_CHILD";

/// Holds every `pause_queue` of `broker` at its commit until released.
fn hold_pause(broker: &SqliteBroker) -> Hold {
    let hold = Hold::default();
    let held = hold.clone();
    broker.engine().set_before_commit_hook(Some(Arc::new(move |op: &str| {
        if op == "pause_queue" {
            held.block();
        }
    })));
    hold
}

/// Records the number of calls each COMMIT covers. The group waits for its last member
/// however slow the machine is (the 20 ms default bounds the first call's wait).
fn record_groups(broker: &SqliteBroker) -> Arc<Mutex<Vec<usize>>> {
    broker.set_group_commit_max_wait(WAIT_LIMIT);
    let groups = Arc::new(Mutex::new(Vec::new()));
    let seen = groups.clone();
    broker.set_group_commit_hook(Some(Arc::new(move |members: usize| {
        seen.lock().unwrap_or_else(|p| p.into_inner()).push(members);
    })));
    groups
}

fn spawn<T: Send + 'static>(
    call: impl std::future::Future<Output = taskgate::Result<T>> + Send + 'static,
) -> JoinHandle<taskgate::Result<T>> {
    tokio::spawn(call)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_call_in_a_shared_transaction_leaves_the_others_committed() -> TestResult {
    within(
        TEST_LIMIT,
        "a_failing_call_in_a_shared_transaction_leaves_the_others_committed",
        async move {
            let db = TempDb::new()?;
            let broker = db.broker(BrokerOptions::default()).await?;
            let observer = db.broker(BrokerOptions::default()).await?;
            broker.enqueue(&Task::new("job", "q").with_id("dup").with_payload("first")).await?;
            broker.enqueue(&Task::new("job", "q").with_id("victim")).await?;
            let hold = hold_pause(&broker);
            let groups = record_groups(&broker);
            // The first call, held at its commit: the others queue behind it in this order.
            let b = broker.clone();
            let held = spawn(async move { b.pause_queue("held").await });
            hold.entered().await?;
            let b = broker.clone();
            let first = spawn(async move { b.enqueue(&Task::new("job", "q").with_id("a")).await });
            queued(&broker, 1).await?;
            let b = broker.clone();
            let duplicate = spawn(async move {
                b.enqueue(&Task::new("job", "q").with_id("dup").with_payload("second")).await
            });
            queued(&broker, 2).await?;
            let b = broker.clone();
            let wrong_token = spawn(async move { b.heartbeat("victim", "not-the-token").await });
            queued(&broker, 3).await?;
            let b = broker.clone();
            let last = spawn(async move { b.enqueue(&Task::new("job", "q").with_id("b")).await });
            queued(&broker, 4).await?;
            hold.release();

            within(WAIT_LIMIT, "the held call", held).await??;
            within(WAIT_LIMIT, "the first enqueue", first).await??;
            let dup = within(WAIT_LIMIT, "the duplicate enqueue", duplicate).await?;
            assert!(matches!(dup, Err(Error::TaskExists { .. })), "{dup:?}");
            let beat = within(WAIT_LIMIT, "the heartbeat with a wrong token", wrong_token).await?;
            assert!(beat.is_err(), "a heartbeat without the lease must fail: {beat:?}");
            within(WAIT_LIMIT, "the last enqueue", last).await??;

            let covered = groups.lock().unwrap_or_else(|p| p.into_inner()).clone();
            assert_eq!(covered, vec![3], "one COMMIT covers the three calls that succeeded");
            assert_eq!(observer.paused_queues().await?, vec!["held".to_owned()]);
            for id in ["a", "b"] {
                assert_eq!(observer.get(id).await?.status, Status::Pending, "{id}");
            }
            assert_eq!(observer.get("dup").await?.payload, Some(b"first".to_vec()));
            assert_eq!(observer.get("victim").await?.status, Status::Pending);
            Ok(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_call_that_panics_after_its_writes_is_undone_alone() -> TestResult {
    within(TEST_LIMIT, "a_call_that_panics_after_its_writes_is_undone_alone", async move {
        let db = TempDb::new()?;
        let broker = db.broker(BrokerOptions::default()).await?;
        let observer = db.broker(BrokerOptions::default()).await?;
        broker.enqueue(&Task::new("job", "q").with_id("victim")).await?;
        let hold = Hold::default();
        let held_call = hold.clone();
        // `pause_queue` is held until the others queue; `cancel` panics after its writes.
        broker.engine().set_before_commit_hook(Some(Arc::new(move |op: &str| match op {
            "pause_queue" => held_call.block(),
            "cancel" => panic!("simulated crash of one call inside the shared transaction"),
            _ => {}
        })));
        let groups = record_groups(&broker);
        let b = broker.clone();
        let held = spawn(async move { b.pause_queue("held").await });
        hold.entered().await?;
        let b = broker.clone();
        let before = spawn(async move { b.enqueue(&Task::new("job", "q").with_id("a")).await });
        queued(&broker, 1).await?;
        let b = broker.clone();
        let crashing = tokio::spawn(async move { b.cancel("victim").await });
        queued(&broker, 2).await?;
        let b = broker.clone();
        let after = spawn(async move { b.enqueue(&Task::new("job", "q").with_id("b")).await });
        queued(&broker, 3).await?;
        hold.release();

        within(WAIT_LIMIT, "the held call", held).await??;
        within(WAIT_LIMIT, "the enqueue before", before).await??;
        let crashed = within(WAIT_LIMIT, "the panicking cancel", crashing).await;
        assert!(crashed.as_ref().is_err_and(|e| e.is_panic()), "the hook must abort the cancel");
        within(WAIT_LIMIT, "the enqueue after", after).await??;
        broker.engine().set_before_commit_hook(None);

        let covered = groups.lock().unwrap_or_else(|p| p.into_inner()).clone();
        assert_eq!(covered.iter().sum::<usize>(), 3, "three calls committed: {covered:?}");
        assert_eq!(covered.first(), Some(&3), "in one COMMIT: {covered:?}");
        assert_eq!(observer.get("victim").await?.status, Status::Pending, "cancel leaked");
        assert_eq!(observer.get("a").await?.status, Status::Pending);
        assert_eq!(observer.get("b").await?.status, Status::Pending);
        assert_eq!(observer.paused_queues().await?, vec!["held".to_owned()]);
        // The writer works after the crash, alone and in groups.
        broker.cancel("victim").await?;
        assert_eq!(observer.get("victim").await?.status, Status::Canceled);
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_caller_that_leaves_the_queue_never_strands_the_group() -> TestResult {
    within(TEST_LIMIT, "a_caller_that_leaves_the_queue_never_strands_the_group", async move {
        let db = TempDb::new()?;
        let broker = db.broker(BrokerOptions::default()).await?;
        let observer = db.broker(BrokerOptions::default()).await?;
        for round in 0..20 {
            // The held call is released just as the only caller behind it is aborted: the
            // holder hands the open transaction on to it or commits, and either way returns.
            let leaving: Arc<Mutex<Option<tokio::task::AbortHandle>>> = Arc::default();
            let hold = Hold::default();
            let (abort, held_call) = (leaving.clone(), hold.clone());
            broker.engine().set_before_commit_hook(Some(Arc::new(move |op: &str| {
                if op != "pause_queue" {
                    return;
                }
                held_call.block();
                if let Some(handle) = abort.lock().unwrap_or_else(|p| p.into_inner()).take() {
                    handle.abort();
                }
            })));
            let queue = format!("held-{round}");
            let (b, q) = (broker.clone(), queue.clone());
            let held = spawn(async move { b.pause_queue(&q).await });
            hold.entered().await?;
            let b = broker.clone();
            let id = format!("left-{round}");
            let gone = spawn(async move { b.enqueue(&Task::new("job", "q").with_id(id)).await });
            *leaving.lock().unwrap_or_else(|p| p.into_inner()) = Some(gone.abort_handle());
            queued(&broker, 1).await?;
            hold.release();
            within(WAIT_LIMIT, "the held call after its follower left", held).await??;
            let _ = gone.await;
            assert!(observer.paused_queues().await?.contains(&queue), "round {round}");
        }
        broker.engine().set_before_commit_hook(None);
        broker.enqueue(&Task::new("job", "q").with_id("after")).await?;
        assert_eq!(observer.get("after").await?.status, Status::Pending);
        Ok(())
    })
    .await
}

/// The crash child: forms a group of three calls, says so, and hangs before its COMMIT.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn group_child_main() -> TestResult {
    let Ok(path) = std::env::var(CHILD) else { return Ok(()) };
    let broker = Arc::new(SqliteOptions::new(&path).open().await?);
    broker.init(BrokerOptions::default()).await?;
    let hold = hold_pause(&broker);
    broker.set_group_commit_max_wait(WAIT_LIMIT);
    broker.set_group_commit_hook(Some(Arc::new(|members: usize| {
        println!("GROUP {members}");
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    })));
    let b = broker.clone();
    let mut calls = vec![spawn(async move { b.pause_queue("held").await.map(|()| "held".into()) })];
    hold.entered().await?;
    for (n, id) in ["a", "b"].into_iter().enumerate() {
        let b = broker.clone();
        let task = Task::new("job", "q").with_id(id);
        calls.push(spawn(async move { b.enqueue(&task).await.map(|t| t.id) }));
        queued(&broker, n + 1).await?;
    }
    hold.release();
    for call in calls {
        println!("RETURNED {:?}", call.await?);
    }
    Ok(())
}

/// Runs the crash child on `path` and returns its marked lines once it is killed.
async fn crash_child(path: &Path) -> TestResult<Vec<String>> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(["group_child_main", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let mut seen = Vec::new();
    let group = within(WAIT_LIMIT, "the child's group before its COMMIT", async {
        while let Some(line) = lines.next_line().await? {
            seen.push(line.clone());
            if line.contains("GROUP ") {
                return Ok::<_, std::io::Error>(true);
            }
        }
        Ok(false)
    })
    .await?;
    assert!(group, "the child ended before its COMMIT: {seen:?}");
    child.kill().await?; // SIGKILL, before the shared COMMIT
    let status = within(WAIT_LIMIT, "the killed child to end", child.wait()).await?;
    assert!(!status.success(), "the child was killed: {status}");
    while let Ok(Some(line)) = lines.next_line().await {
        seen.push(line);
    }
    Ok(seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_the_shared_commit_leaves_none_of_its_calls() -> TestResult {
    within(TEST_LIMIT, "a_crash_before_the_shared_commit_leaves_none_of_its_calls", async move {
        let db = TempDb::new()?;
        db.broker(BrokerOptions::default()).await?.close().await?;
        let lines = crash_child(db.path()).await?;
        let group = lines.iter().find_map(|l| l.split("GROUP ").nth(1)).ok_or("no group")?;
        assert_eq!(group.trim(), "3", "the COMMIT covered the three calls: {lines:?}");
        assert!(!lines.iter().any(|l| l.contains("RETURNED")), "a call returned: {lines:?}");

        let broker = db.broker(BrokerOptions::default()).await?;
        assert!(broker.paused_queues().await?.is_empty(), "the pause survived the crash");
        for id in ["a", "b"] {
            let got = broker.get(id).await;
            assert!(matches!(got, Err(Error::NotFound { .. })), "{id} survived: {got:?}");
        }
        broker.enqueue(&Task::new("job", "q").with_id("a")).await?;
        broker.close().await?;
        assert_eq!(query_texts(db.path(), "PRAGMA integrity_check").await?, vec!["ok".to_owned()]);
        Ok(())
    })
    .await
}
