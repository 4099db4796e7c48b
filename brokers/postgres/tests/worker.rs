//! The worker runtime against PostgreSQL: the runtime spec §12.7 scenarios (one test each,
//! a fresh table prefix each), and a worker process killed with SIGKILL mid-task whose tasks
//! this process's runtime runs again after their leases.
//!
//! The child is this test binary run again with `TASKGATE_WORKER_CHILD` set: the
//! `kill_child` test does nothing in a normal run.

use std::process::Stdio;
use std::sync::Arc;

use brokertest::Storage as _;
use taskgate::BoxError;
use taskgate_postgres::testing::PgFactory;
use taskgate_postgres::PgOptions;
use tokio::process::Command;
use workertest::kill::{doomed_worker, killed_worker_reruns, CHILD_ENV};

workertest::worker_tests!(PgFactory::from_env());

const PREFIX_ENV: &str = "TASKGATE_WORKER_PREFIX";

/// The child's entry point.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_child() -> Result<(), BoxError> {
    let Ok(claimed) = std::env::var(CHILD_ENV) else { return Ok(()) };
    let url = std::env::var(taskgate_postgres::testing::URL_VAR)?;
    let broker = PgOptions::from_url(&url)?.prefix(std::env::var(PREFIX_ENV)?).connect().await?;
    doomed_worker(Arc::new(broker), claimed.as_ref()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_worker_process_tasks_rerun_once_after_the_lease() -> Result<(), BoxError> {
    let made = PgFactory::from_env().pg_storage().await;
    let Some(storage) = brokertest::or_skip("postgres: kill -9 test", made)? else {
        return Ok(());
    };
    let claimed = std::env::temp_dir().join(format!("{}claimed", storage.prefix()));
    let child = Command::new(std::env::current_exe()?)
        .args(["kill_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &claimed)
        .env(taskgate_postgres::testing::URL_VAR, storage.url())
        .env(PREFIX_ENV, storage.prefix())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let producer = Arc::new(storage.broker().await?);
    let rescuer = Arc::new(storage.broker().await?);
    let report = killed_worker_reruns(producer, rescuer, &claimed, child).await;
    let _ = std::fs::remove_file(&claimed);
    storage.cleanup().await?;
    eprintln!("postgres kill -9: {:?}", report?);
    Ok(())
}
