//! Runs `examples/worker.rs` to completion on a fresh SQLite file, with a deadline, so the
//! README's quick start cannot rot: it must finish on its own (fan-in, one retry, graceful
//! shutdown) and print the right total.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use taskgate::{Broker, BrokerOptions, Filter, Status};

#[path = "../examples/worker.rs"]
#[allow(dead_code, reason = "the example's `main` is not called here; `run` is")]
mod example;

/// Generous: the demo takes ~1 s (one retry's back-off); this only detects a hang.
const DEADLINE: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_example_finishes_on_its_own_with_the_total() {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir().join(format!("taskgate-example-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let db = dir.join("worker.db");
    let outcome = tokio::time::timeout(DEADLINE, example::run(&db.to_string_lossy(), false)).await;
    let total = outcome.expect("the example did not finish within the deadline").expect("run");
    assert_eq!(total, Some(12), "4 + 3 + 5 words");

    // What the file holds after the graceful shutdown: four completed tasks, the flaky page
    // with one business failure behind it, nothing left running.
    let broker = taskgate_sqlite::SqliteBroker::open(&db).await.expect("reopen");
    broker.init(BrokerOptions::default()).await.expect("init");
    let tasks = broker.list(&Filter::default()).await.expect("list");
    broker.close().await.expect("close");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(tasks.len(), 4);
    assert!(tasks.iter().all(|t| t.status == Status::Completed), "{tasks:?}");
    let attempts: Vec<u32> = tasks.iter().map(|t| t.attempts).collect();
    assert_eq!(attempts.iter().sum::<u32>(), 1, "exactly one retry: {attempts:?}");
}

/// The README's quick start is this example: its first code block under "## Quick start" is
/// the example file without its header comment.
#[test]
fn the_readme_quick_start_is_the_example() {
    let readme = include_str!("../../README.md");
    let example = include_str!("../examples/worker.rs");
    let section = readme.split("## Quick start\n").nth(1).expect("README has a Quick start");
    let block = section
        .split("```rust\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("a rust code block in the Quick start");
    let body: Vec<&str> = example.lines().skip_while(|l| l.starts_with("//!")).collect();
    let body = body.join("\n");
    assert_eq!(block.trim(), body.trim(), "README's quick start differs from examples/worker.rs");
}
