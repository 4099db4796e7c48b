//! A worker service on a SQLite file: a typed job, 4 workers, a fan-in, a retry, Ctrl-C.
//!
//! `cargo run --example worker [-- DB_FILE] [--serve]` counts the words of three pages and
//! sums them in a fourth job that waits for the three, then shuts down gracefully. With
//! `--serve` it keeps working until Ctrl-C (SIGINT or SIGTERM); Ctrl-C at any time stops it
//! gracefully.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use taskgate_sqlite::SqliteBroker;
use taskgate_worker::{
    shutdown_signal, Config, Job, JobContext, JobError, JobId, QueueConfig, Runtime, SubmitOptions,
};

/// Counts the words of one page.
#[derive(Serialize, Deserialize)]
struct CountWords {
    page: String,
}

impl Job for CountWords {
    const KIND: &'static str = "count_words";
    const QUEUE: Option<&'static str> = Some("pages");
    type Output = usize;
}

/// Sums the counts of the pages it depends on.
#[derive(Serialize, Deserialize)]
struct Total;

impl Job for Total {
    const KIND: &'static str = "total";
    const QUEUE: Option<&'static str> = Some("pages");
    type Output = usize;
}

async fn count_words(job: CountWords, ctx: JobContext) -> Result<usize, JobError> {
    if job.page.contains("flaky") && ctx.attempts() == 0 {
        // Any error is retried (after ~1 s of back-off here, up to 3 times by default).
        return Err(JobError::msg("the page server timed out"));
    }
    Ok(job.page.split_whitespace().count())
}

async fn total(_: Total, ctx: JobContext) -> Result<usize, JobError> {
    let mut sum = 0;
    for parent in ctx.parents() {
        sum += ctx.client().wait(&JobId::<CountWords>::from_raw(parent)).await?;
    }
    Ok(sum)
}

/// Runs the service on `db_file`; returns the total, or `None` when stopped by a signal first.
pub(crate) async fn run(db_file: &str, serve: bool) -> Result<Option<usize>, taskgate::BoxError> {
    let broker = Arc::new(SqliteBroker::open(db_file).await?);
    let runtime = Runtime::builder(broker)
        .config(Config::new().queue("pages", QueueConfig::workers(4)))
        .register(count_words)
        .register(total)
        .start()
        .await?;

    // A fan-in, stored in one transaction: three pages, and a total that waits for them.
    let client = runtime.client();
    let mut group = client.group();
    let mut after_pages = SubmitOptions::new();
    for page in ["the quick brown fox", "a flaky page", "jumps over the lazy dog"] {
        let id = group.add(CountWords { page: page.into() }, SubmitOptions::new());
        after_pages = after_pages.depends_on(&id);
    }
    let sum = group.add(Total, after_pages);
    group.submit().await?;

    let total = tokio::select! {
        total = client.wait(&sum) => Some(total?),
        () = shutdown_signal() => None,
    };
    if serve && total.is_some() {
        shutdown_signal().await; // keep working for other producers until Ctrl-C
    }
    // Stop claiming, give running handlers 30 s, requeue the rest, flush the acks. Running
    // out of grace is no error: the report says what finished and what was requeued.
    let report = runtime.shutdown(Duration::from_secs(30)).await?;
    println!("{report}");
    Ok(total)
}

#[tokio::main]
async fn main() -> Result<(), taskgate::BoxError> {
    // The runtime reports retries, reaped tasks, lost leases and shutdown through `tracing`:
    // print them (`info` and up; `RUST_LOG=taskgate_worker=debug` adds every claim).
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let serve = args.iter().any(|a| a == "--serve");
    let default = std::env::temp_dir().join("taskgate-worker-example.db");
    let db_file = match args.iter().find(|a| !a.starts_with("--")) {
        Some(path) => path.clone(),
        None => default.to_string_lossy().into_owned(),
    };
    match run(&db_file, serve).await? {
        Some(total) => println!("{total} words in three pages ({db_file})"),
        None => println!("stopped by a signal ({db_file})"),
    }
    Ok(())
}
