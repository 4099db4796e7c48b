//! Claim+ack throughput through the broker (`dequeue_many` + `ack_many`), one worker, at batch
//! sizes 1, 10 and 100, with `synchronous` FULL and NORMAL. A quick measurement until the
//! criterion benches exist:
//!
//! ```text
//! cargo run --release -p taskgate-sqlite --example claim_ack [seconds-per-run]
//! ```

use std::time::{Duration, Instant};

use taskgate::{AckItem, Broker, BrokerOptions, Task};
use taskgate_sqlite::{SqliteOptions, Synchronous};

type AnyResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Jobs per second for one (synchronous, batch) pair.
async fn run(synchronous: Synchronous, batch: usize, budget: Duration) -> AnyResult<f64> {
    let dir = tempfile::tempdir()?;
    let broker =
        SqliteOptions::new(dir.path().join("bench.db")).synchronous(synchronous).open().await?;
    broker.init(BrokerOptions::default()).await?;
    let backlog = (batch * 4_000).clamp(4_000, 200_000);
    for chunk in (0..backlog).collect::<Vec<_>>().chunks(1_000) {
        let tasks: Vec<Task> = chunk.iter().map(|_| Task::new("noop", "bench")).collect();
        broker.enqueue_many(&tasks).await?;
    }
    let started = Instant::now();
    let mut done = 0usize;
    while started.elapsed() < budget && done + batch <= backlog {
        let claimed = broker.dequeue_many(&["bench"], batch).await?;
        let items: Vec<AckItem> = claimed
            .iter()
            .map(|t| AckItem { id: t.id.clone(), token: t.lease_token.clone(), result: None })
            .collect();
        for outcome in broker.ack_many(&items).await? {
            outcome?;
        }
        done += claimed.len();
    }
    let rate = done as f64 / started.elapsed().as_secs_f64();
    broker.close().await?;
    Ok(rate)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> AnyResult<()> {
    let secs = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(3u64);
    let budget = Duration::from_secs(secs);
    for (name, sync) in [("FULL", Synchronous::Full), ("NORMAL", Synchronous::Normal)] {
        for batch in [1, 10, 100] {
            let rate = run(sync, batch, budget).await?;
            println!("synchronous={name:<6} batch={batch:<3} {rate:>9.0} jobs/s");
        }
    }
    Ok(())
}
