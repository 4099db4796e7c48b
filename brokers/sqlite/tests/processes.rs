//! Several OS processes on one file (contract §11.3, §11.4): tasks claimed by two processes
//! run exactly once; quota and pause are shared; a worker killed with SIGKILL loses its lease,
//! the reaper returns the task and it completes with LeaseLost 1 on an intact file; a file the
//! process cannot write is a clear error.
//!
//! Children are this test binary run again with `TASKGATE_SQLITE_CHILD=<role>`: the
//! `child_main` test does nothing in a normal run.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use brokertest::{within, TEST_LIMIT, WAIT_LIMIT};
use common::{query_texts, TempDb, TestResult};
use taskgate::{Broker, BrokerOptions, ErrorKind, QuotaConfig, Status, Task};
use taskgate_sqlite::SqliteOptions;
use tokio::process::{Child, Command};

const ROLE: &str = "TASKGATE_SQLITE_CHILD";
const DB: &str = "TASKGATE_SQLITE_DB";
const TAG: &str = "TASKGATE_SQLITE_TAG";

fn quota_config() -> QuotaConfig {
    QuotaConfig { limit: 3, period: Duration::from_secs(3600), key: "mp-key".into() }
}

fn crash_options() -> BrokerOptions {
    BrokerOptions::new().with_lease_ttl("crash", Duration::from_secs(1))
}

/// The children's entry point.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_main() -> TestResult {
    within(TEST_LIMIT, "child_main", async move {
        let Ok(role) = std::env::var(ROLE) else { return Ok(()) };
        let path = PathBuf::from(std::env::var(DB)?);
        match role.as_str() {
            "worker" => worker(&path).await,
            "quota" => quota_and_pause(&path).await,
            "hang" => claim_and_hang(&path).await,
            "readonly" => open_readonly(&path).await,
            other => Err(format!("unknown child role {other}").into()),
        }
    })
    .await
}

/// Claims from `mp` until all 100 tasks are completed; prints every claimed ID.
async fn worker(path: &Path) -> TestResult {
    let broker = SqliteOptions::new(path).poll_interval(Duration::from_millis(10)).open().await?;
    broker.init(BrokerOptions::default()).await?;
    let go = path.with_extension("go");
    while !go.exists() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let tag = std::env::var(TAG)?;
    loop {
        match tokio::time::timeout(Duration::from_millis(300), broker.dequeue(&["mp"])).await {
            Ok(task) => {
                let task = task?;
                println!("CLAIMED {}", task.id);
                tokio::time::sleep(Duration::from_millis(2)).await;
                broker.ack(&task.id, &task.lease_token, Some(tag.clone().into_bytes())).await?;
            }
            Err(_) if completed(&broker).await? == 100 => break,
            Err(_) => {}
        }
    }
    broker.close().await?;
    Ok(())
}

async fn completed(broker: &dyn Broker) -> TestResult<u64> {
    let counts = broker.counts().await?;
    Ok(counts.get("job").and_then(|c| c.get(&Status::Completed)).copied().unwrap_or(0))
}

/// Takes two quota units and pauses a queue, then exits.
async fn quota_and_pause(path: &Path) -> TestResult {
    let broker = SqliteOptions::new(path).open().await?;
    broker.init(BrokerOptions::default()).await?;
    let gate = broker.quota_provider().ok_or("no quota")?.queue_quota("mp", &quota_config())?;
    for _ in 0..2 {
        gate.reserve().await?.ok_or("quota exhausted in the child")?;
    }
    broker.pause_queue("mp-paused").await?;
    broker.close().await?;
    Ok(())
}

/// Claims `crash-1`, says so through a sentinel file, and hangs until killed.
async fn claim_and_hang(path: &Path) -> TestResult {
    let broker = SqliteOptions::new(path).open().await?;
    broker.init(crash_options()).await?;
    let task = broker.dequeue(&["crash"]).await?;
    std::fs::write(path.with_extension("claimed"), task.id.as_bytes())?;
    loop {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
}

/// Opens a file this process may not write; prints the error kind and message.
async fn open_readonly(path: &Path) -> TestResult {
    match SqliteOptions::new(path).open().await {
        Ok(broker) => {
            broker.init(BrokerOptions::default()).await?;
            let write = broker.enqueue(&Task::new("job", "q")).await;
            println!("KIND opened write={:?}", write.map(|t| t.id).map_err(|e| chain(&e)));
        }
        Err(e) => println!("KIND {:?} {}", e.kind(), chain(&e)),
    }
    Ok(())
}

fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Starts this binary as a child with `role` on `path`.
fn spawn_child(role: &str, path: &Path, tag: &str, as_nobody: bool) -> TestResult<Child> {
    let exe = std::env::current_exe()?;
    let mut cmd = if as_nobody {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"]).arg(exe);
        c
    } else {
        Command::new(exe)
    };
    cmd.args(["child_main", "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env(DB, path)
        .env(TAG, tag)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    Ok(cmd.spawn()?)
}

/// Waits for a child and returns its marked stdout lines (`PREFIX rest`), failing when the
/// child failed.
async fn finish_child(child: Child, prefix: &str) -> TestResult<Vec<String>> {
    let what = format!("the child process printing {prefix} lines to exit");
    let out = within(WAIT_LIMIT, what, child.wait_with_output()).await?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!("child failed: {}\n{stdout}\n{stderr}", out.status).into());
    }
    // libtest prints "test child_main ... " without a newline before the first output line.
    let marker = format!("{prefix} ");
    let marked = stdout.lines().filter_map(|l| l.find(&marker).map(|at| &l[at + marker.len()..]));
    Ok(marked.map(str::to_owned).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_run_each_of_100_tasks_exactly_once() -> TestResult {
    within(TEST_LIMIT, "two_processes_run_each_of_100_tasks_exactly_once", async move {
        let db = TempDb::new()?;
        let broker = db.broker(BrokerOptions::default()).await?;
        let tasks: Vec<Task> =
            (0..100).map(|i| Task::new("job", "mp").with_id(format!("mp{i:03}"))).collect();
        broker.enqueue_many(&tasks).await?;
        let a = spawn_child("worker", db.path(), "A", false)?;
        let b = spawn_child("worker", db.path(), "B", false)?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        std::fs::write(db.path().with_extension("go"), b"go")?;
        let claimed_a = finish_child(a, "CLAIMED").await?;
        let claimed_b = finish_child(b, "CLAIMED").await?;
        assert!(!claimed_a.is_empty() && !claimed_b.is_empty(), "both processes must claim");
        let mut runs: BTreeMap<String, usize> = BTreeMap::new();
        for id in claimed_a.iter().chain(&claimed_b) {
            *runs.entry(id.clone()).or_default() += 1;
        }
        assert_eq!(runs.len(), 100, "every task ran");
        assert!(runs.values().all(|n| *n == 1), "a task ran twice: {runs:?}");
        for (i, task) in tasks.iter().enumerate() {
            let stored = broker.get(&task.id).await?;
            assert_eq!(stored.status, Status::Completed, "{}", task.id);
            assert_eq!(stored.lease_lost, 0);
            let by = if claimed_a.contains(&task.id) { "A" } else { "B" };
            assert_eq!(
                stored.result.as_deref(),
                Some(by.as_bytes()),
                "task {i} acked by its runner"
            );
        }
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_and_pause_are_shared_between_processes() -> TestResult {
    within(TEST_LIMIT, "quota_and_pause_are_shared_between_processes", async move {
        let db = TempDb::new()?;
        let broker = db.broker(BrokerOptions::default()).await?;
        finish_child(spawn_child("quota", db.path(), "Q", false)?, "-").await?;
        let gate = broker.quota_provider().ok_or("no quota")?.queue_quota("mp", &quota_config())?;
        assert!(gate.reserve().await?.is_some(), "one unit of three is left");
        assert!(gate.reserve().await?.is_none(), "the child's two units count here");
        assert_eq!(broker.paused_queues().await?, vec!["mp-paused".to_owned()]);
        broker.enqueue(&Task::new("job", "mp-paused").with_id("held")).await?;
        assert!(broker.try_dequeue(&["mp-paused"]).await?.is_none());
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_loses_its_lease_and_the_task_completes_on_rerun() -> TestResult {
    within(
        TEST_LIMIT,
        "a_killed_worker_loses_its_lease_and_the_task_completes_on_rerun",
        async move {
            let db = TempDb::new()?;
            let producer = db.broker(crash_options()).await?;
            producer.enqueue(&Task::new("crash", "crash").with_id("crash-1")).await?;
            producer.close().await?;

            let mut child = spawn_child("hang", db.path(), "K", false)?;
            let sentinel = db.path().with_extension("claimed");
            let started = Instant::now();
            while !sentinel.exists() {
                assert!(started.elapsed() < Duration::from_secs(30), "child never claimed");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            child.kill().await?; // SIGKILL
            let status = within(WAIT_LIMIT, "the killed child to end", child.wait()).await?;
            assert!(!status.success(), "the child was killed: {status}");

            let broker: Arc<dyn Broker> = db.broker(crash_options()).await?;
            assert_eq!(broker.get("crash-1").await?.status, Status::Running);
            let reaped = loop {
                let n = broker.reap_expired().await?;
                if n > 0 || started.elapsed() > Duration::from_secs(30) {
                    break n;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            };
            assert_eq!(reaped, 1);
            let task = broker.dequeue(&["crash"]).await?;
            assert_eq!((task.id.as_str(), task.lease_lost), ("crash-1", 1));
            broker.ack(&task.id, &task.lease_token, Some(b"\"recovered\"".to_vec())).await?;
            let done = broker.get("crash-1").await?;
            assert_eq!(done.status, Status::Completed);
            assert_eq!(done.result.as_deref(), Some(&b"\"recovered\""[..]));
            assert_eq!(done.lease_lost, 1);
            broker.close().await?;
            assert_eq!(
                query_texts(db.path(), "PRAGMA integrity_check").await?,
                vec!["ok".to_owned()]
            );
            Ok(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_the_process_cannot_write_is_a_backend_error() -> TestResult {
    within(TEST_LIMIT, "a_file_the_process_cannot_write_is_a_backend_error", async move {
        use std::os::unix::fs::PermissionsExt;
        let db = TempDb::new()?;
        db.broker(BrokerOptions::default()).await?.close().await?;
        for leftover in ["tasks.db-wal", "tasks.db-shm"] {
            let _ = std::fs::remove_file(db.dir.path().join(leftover));
        }
        std::fs::set_permissions(db.path(), std::fs::Permissions::from_mode(0o444))?;
        std::fs::set_permissions(db.dir.path(), std::fs::Permissions::from_mode(0o555))?;
        // Root ignores permission bits, so the child drops to `nobody` when we are root.
        let root = std::process::Command::new("id").arg("-u").output()?.stdout == b"0\n";
        let child = spawn_child("readonly", db.path(), "R", root)?;
        let lines = finish_child(child, "KIND").await;
        std::fs::set_permissions(db.dir.path(), std::fs::Permissions::from_mode(0o755))?;
        let lines = lines?;
        let line = lines.first().ok_or("the child opened a read-only file without error")?;
        assert!(line.starts_with(&format!("{:?} ", ErrorKind::Backend)), "{line}");
        assert!(line.contains("cannot open sqlite database"), "{line}");
        Ok(())
    })
    .await
}
