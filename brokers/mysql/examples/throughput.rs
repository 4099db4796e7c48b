//! Claim+ack throughput through the broker on a real server (release mode):
//! `cargo run --release -p taskgate-mysql --features testing --example throughput -- \
//!  [--claimers N] [--batch B] [--jobs J]` with `TASKGATE_MYSQL_URL` set. Prints jobs/s,
//! round trips are whatever the engine does; tables go to a fresh `tgtest_` prefix and are
//! dropped afterwards.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use taskgate::{AckItem, BoxError, Broker, BrokerOptions, Task};
use taskgate_mysql::testing::MySqlFactory;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<(), BoxError> {
    let (claimers, batch, jobs) = (arg("--claimers", 4), arg("--batch", 1), arg("--jobs", 20_000));
    let pool = u32::try_from(claimers + 2)?;
    let storage = MySqlFactory::from_env().with_pool_size(pool).mysql_storage().await?;
    let broker = Arc::new(storage.mysql_handle()?);
    broker.init(BrokerOptions::default()).await?;
    let tasks: Vec<Task> = (0..jobs).map(|_| Task::new("bench", "bench")).collect();
    for chunk in tasks.chunks(1_000) {
        broker.enqueue_many(chunk).await?;
    }
    let done = Arc::new(AtomicU64::new(0));
    let claim_us = Arc::new(AtomicU64::new(0));
    let ack_us = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..claimers {
        let (broker, done) = (broker.clone(), done.clone());
        let (claim_us, ack_us) = (claim_us.clone(), ack_us.clone());
        workers.push(tokio::spawn(async move {
            loop {
                let t0 = Instant::now();
                let claimed = broker.try_dequeue_many(&["bench"], batch).await?;
                claim_us.fetch_add(
                    u64::try_from(t0.elapsed().as_micros()).unwrap_or(0),
                    Ordering::Relaxed,
                );
                if claimed.is_empty() {
                    return Ok::<(), taskgate::Error>(());
                }
                let items: Vec<AckItem> = claimed
                    .iter()
                    .map(|t| AckItem {
                        id: t.id.clone(),
                        token: t.lease_token.clone(),
                        result: None,
                    })
                    .collect();
                let t1 = Instant::now();
                for outcome in broker.ack_many(&items).await? {
                    outcome?;
                }
                ack_us.fetch_add(
                    u64::try_from(t1.elapsed().as_micros()).unwrap_or(0),
                    Ordering::Relaxed,
                );
                done.fetch_add(u64::try_from(items.len()).unwrap_or(0), Ordering::Relaxed);
            }
        }));
    }
    for w in workers {
        w.await??;
    }
    let secs = started.elapsed().as_secs_f64();
    let n = done.load(Ordering::Relaxed);
    let cycles = (n / u64::try_from(batch)?).max(1);
    println!(
        "claimers {claimers:>2} batch {batch:>3}: {n} jobs in {secs:.2} s = {:.0} jobs/s (claim {} µs, ack {} µs per call; tx retries {})",
        f64::from(u32::try_from(n)?) / secs,
        claim_us.load(Ordering::Relaxed) / cycles,
        ack_us.load(Ordering::Relaxed) / cycles,
        broker.tx_retries()
    );
    broker.close().await?;
    storage.drop_tables().await?;
    Ok(())
}
