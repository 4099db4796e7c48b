//! The kill -9 test, shared by the backends whose storage outlives a process (SQLite,
//! PostgreSQL): a child process runs a worker whose handlers hang; it is SIGKILLed with four
//! tasks claimed; a runtime in this process (its own reaper) runs them again once their
//! leases expire — LeaseLost 1 each, every task completed exactly once here, nothing lost.
//!
//! The backend's test file runs itself as the child (a test that does nothing unless
//! [`CHILD_ENV`] is set) and calls [`doomed_worker`] there, [`killed_worker_reruns`] here.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use taskgate::{Broker, Filter, Status};
use taskgate_worker::{Config, JobContext, JobError, QueueConfig, Runtime};
use tokio::process::Child;

use crate::jobs::Work;
use crate::{eventually, TestResult, DEADLINE};

/// Set (to the claimed-IDs file) in the child's environment.
pub const CHILD_ENV: &str = "TASKGATE_WORKER_CHILD";
/// Tasks submitted.
pub const TASKS: u32 = 20;
/// Workers in each process: the child holds this many tasks when it dies.
pub const WORKERS: u32 = 4;
/// The lease: the killed tasks run again 1–1.5 leases after the kill.
pub const LEASE: Duration = Duration::from_secs(1);

fn config() -> Config {
    Config::new().queue("work", QueueConfig::workers(WORKERS).lease_ttl(LEASE))
}

/// The child: a worker whose handlers append their task ID to `claimed` and hang.
pub async fn doomed_worker(broker: Arc<dyn Broker>, claimed: &Path) -> TestResult {
    let path = claimed.to_owned();
    let _runtime = Runtime::builder(broker)
        .config(config())
        .register(move |_job: Work, ctx: JobContext| {
            let line = format!("{}\n", ctx.id());
            let written = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .and_then(|mut f| f.write_all(line.as_bytes()));
            async move {
                written?;
                std::future::pending::<Result<u32, JobError>>().await
            }
        })
        .start()
        .await?;
    std::future::pending::<()>().await;
    Ok(())
}

/// What the kill test measured.
#[derive(Debug)]
pub struct KillReport {
    /// Tasks the child held when it was killed.
    pub killed: usize,
    /// From the kill to the last of them completed here.
    pub recovered_in: Duration,
}

/// The parent: submits [`TASKS`] on `producer`, waits until `child` (started with
/// [`CHILD_ENV`] on the same storage) claimed [`WORKERS`], kills it, and runs a runtime on
/// `rescuer` until every task completed.
pub async fn killed_worker_reruns(
    producer: Arc<dyn Broker>,
    rescuer: Arc<dyn Broker>,
    claimed: &Path,
    mut child: Child,
) -> TestResult<KillReport> {
    let submitter = Runtime::builder(producer).config(config()).start().await?;
    let client = submitter.client();
    let mut group = client.group();
    for n in 0..TASKS {
        group.add(Work { n }, Default::default());
    }
    group.submit().await?;
    let read_claimed = || std::fs::read_to_string(claimed).unwrap_or_default();
    let started = Instant::now();
    while read_claimed().lines().count() < WORKERS as usize {
        if let Some(status) = child.try_wait()? {
            return Err(format!("the child exited early: {status}").into());
        }
        if started.elapsed() > DEADLINE {
            return Err(format!("the child claimed no {WORKERS} tasks within {DEADLINE:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    child.kill().await?; // SIGKILL
    let killed_at = Instant::now();
    let doomed: Vec<String> = read_claimed().lines().map(str::to_owned).collect();
    for id in &doomed {
        assert_eq!(client.get(id).await?.status, Status::Running, "{id} is held by the dead child");
    }
    let runs: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    let r = runs.clone();
    let rescue = Runtime::builder(rescuer)
        .config(config())
        .register(move |job: Work, ctx: JobContext| {
            *r.lock().unwrap_or_else(|p| p.into_inner()).entry(ctx.id().to_owned()).or_default() +=
                1;
            async move { Ok::<_, JobError>(job.n) }
        })
        .start()
        .await?;
    let work = Filter { task_type: "work".into(), ..Filter::default() };
    eventually("every task completed", || async {
        let tasks = client.list(&work).await?;
        Ok(tasks.len() == TASKS as usize && tasks.iter().all(|t| t.status == Status::Completed))
    })
    .await?;
    let recovered_in = killed_at.elapsed();
    rescue.shutdown(Duration::from_secs(5)).await?;
    submitter.shutdown(Duration::from_secs(5)).await?;
    let runs = runs.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for task in client.list(&work).await? {
        let expected_lost = u32::from(doomed.contains(&task.id));
        assert_eq!(task.lease_lost, expected_lost, "{}", task.id);
        assert_eq!(runs.get(&task.id), Some(&1), "{} ran here exactly once", task.id);
        assert!(task.result.is_some(), "{} has its result", task.id);
    }
    Ok(KillReport { killed: doomed.len(), recovered_in })
}
