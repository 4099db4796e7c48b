//! The worker runtime against SQLite: the runtime spec §12.7 scenarios (one test each, a
//! fresh database file each), and a worker process killed with SIGKILL mid-task whose tasks
//! this process's runtime runs again after their leases.
//!
//! The child is this test binary run again with `TASKGATE_WORKER_CHILD` set: the
//! `kill_child` test does nothing in a normal run.

use std::process::Stdio;
use std::sync::Arc;

use taskgate::BoxError;
use taskgate_sqlite::testing::SqliteFactory;
use taskgate_sqlite::SqliteOptions;
use tokio::process::Command;
use workertest::kill::{doomed_worker, killed_worker_reruns, CHILD_ENV};

workertest::worker_tests!(SqliteFactory::new());

const DB_ENV: &str = "TASKGATE_WORKER_DB";

/// The child's entry point.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_child() -> Result<(), BoxError> {
    let Ok(claimed) = std::env::var(CHILD_ENV) else { return Ok(()) };
    let broker = SqliteOptions::new(std::env::var(DB_ENV)?).open().await?;
    doomed_worker(Arc::new(broker), claimed.as_ref()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_worker_process_tasks_rerun_once_after_the_lease() -> Result<(), BoxError> {
    let storage = SqliteFactory::new().storage_now()?;
    let claimed = storage.path().with_extension("claimed");
    let child = Command::new(std::env::current_exe()?)
        .args(["kill_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &claimed)
        .env(DB_ENV, storage.path())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let producer = Arc::new(storage.open().await?);
    let rescuer = Arc::new(storage.open().await?);
    let report = killed_worker_reruns(producer, rescuer, &claimed, child).await?;
    eprintln!("sqlite kill -9: {report:?}");
    Ok(())
}
