//! Release-mode throughput and pickup-latency probe of the PostgreSQL broker (criterion benches
//! come later): claim+ack of no-op jobs by N concurrent sessions at batch 1, 10 and 100, and
//! the enqueue-to-claim latency of an idle waiter in another handle (LISTEN/NOTIFY).
//!
//! ```text
//! TASKGATE_PG_URL=postgres://postgres@127.0.0.1:5432/test \
//!   cargo run --release -p taskgate-postgres --example pg_throughput
//! ```
//! Knobs: `SESSIONS` (16), `BATCHES` (`1,10,100`), `JOBS` (jobs per batch size, default
//! 20000), `CLOCK=injected` (a manual clock instead of the server's), `LATENCY` (samples, 200).

use std::sync::Arc;
use std::time::{Duration, Instant};

use taskgate::{AckItem, Broker, BrokerOptions, Clock, ManualClock, Task};
use taskgate_postgres::testing::{drop_tables, test_prefix};
use taskgate_postgres::{PgBroker, PgOptions};

type Res<T> = Result<T, taskgate::BoxError>;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn broker_options() -> BrokerOptions {
    match std::env::var("CLOCK").as_deref() {
        Ok("injected") => BrokerOptions::default()
            .with_clock(Arc::new(ManualClock::at_contract_epoch()) as Arc<dyn Clock>),
        _ => BrokerOptions::default(),
    }
}

async fn broker(url: &str, prefix: &str, pool: u32) -> Res<PgBroker> {
    let b = PgOptions::from_url(url)?.prefix(prefix).pool_size(pool).connect().await?;
    b.init(broker_options()).await?;
    Ok(b)
}

async fn fill(b: &PgBroker, jobs: usize) -> Res<()> {
    let tasks: Vec<Task> = (0..1000).map(|_| Task::new("noop", "q")).collect();
    let mut left = jobs;
    while left > 0 {
        let n = left.min(1000);
        b.enqueue_many(&tasks[..n]).await?;
        left -= n;
    }
    Ok(())
}

/// One session: claim up to `batch`, ack them, until the queue is empty; returns jobs done
/// and the time spent claiming and acking.
async fn session(b: PgBroker, batch: usize) -> Res<(usize, Duration, Duration)> {
    let (mut done, mut claiming, mut acking) = (0, Duration::ZERO, Duration::ZERO);
    loop {
        let c = Instant::now();
        let claimed = b.try_dequeue_many(&["q"], batch).await?;
        claiming += c.elapsed();
        if claimed.is_empty() {
            return Ok((done, claiming, acking));
        }
        done += claimed.len();
        let a = Instant::now();
        if batch == 1 {
            for t in claimed {
                b.ack(&t.id, &t.lease_token, None).await?;
            }
        } else {
            let items: Vec<AckItem> = claimed
                .into_iter()
                .map(|t| AckItem { id: t.id, token: t.lease_token, result: None })
                .collect();
            for r in b.ack_many(&items).await? {
                r?;
            }
        }
        acking += a.elapsed();
    }
}

async fn throughput(url: &str, sessions: u32, batch: usize, jobs: usize) -> Res<f64> {
    let prefix = test_prefix();
    let b = broker(url, &prefix, env_or("POOL", sessions)).await?;
    fill(&b, jobs).await?;
    let start = Instant::now();
    let workers: Vec<_> = (0..sessions).map(|_| tokio::spawn(session(b.clone(), batch))).collect();
    let (mut done, mut claiming, mut acking) = (0, Duration::ZERO, Duration::ZERO);
    for w in workers {
        let (d, c, a) = w.await??;
        done += d;
        claiming += c;
        acking += a;
    }
    let calls = u32::try_from((jobs / batch).max(1)).unwrap_or(u32::MAX);
    let rate = done as f64 / start.elapsed().as_secs_f64();
    assert_eq!(done, jobs, "every job exactly once");
    println!(
        "batch {batch:>3}: {done} jobs by {sessions} sessions in {:.2?}: {rate:.0} jobs/s \
         ({} deadlock retries; per call: claim {:.2?}, ack {:.2?})",
        start.elapsed(),
        b.tx_retries(),
        claiming / calls,
        acking / calls,
    );
    b.close().await?;
    drop_tables(&mut sqlx::Connection::connect(url).await?, &prefix).await?;
    Ok(rate)
}

async fn pickup_latency(url: &str, samples: usize) -> Res<()> {
    let prefix = test_prefix();
    let producer = broker(url, &prefix, 2).await?;
    let consumer = broker(url, &prefix, 2).await?;
    let (mut took, mut after_commit) = (Vec::new(), Vec::new());
    for i in 0..samples {
        let c = consumer.clone();
        let waiter = tokio::spawn(async move { c.dequeue(&["idle"]).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let start = Instant::now();
        producer.enqueue(&Task::new("noop", "idle").with_id(format!("p{i}"))).await?;
        let committed = Instant::now();
        let t = waiter.await??;
        took.push(start.elapsed());
        after_commit.push(committed.elapsed());
        consumer.ack(&t.id, &t.lease_token, None).await?;
    }
    for (what, mut d) in [("enqueue start", took), ("enqueue commit", after_commit)] {
        d.sort_unstable();
        let at = |percent: usize| d[(d.len() - 1) * percent / 100];
        println!(
            "idle pickup through NOTIFY, from {what} to the claim on another handle: \
             p50 {:.2?}, p90 {:.2?}, p99 {:.2?}",
            at(50),
            at(90),
            at(99)
        );
    }
    producer.close().await?;
    consumer.close().await?;
    drop_tables(&mut sqlx::Connection::connect(url).await?, &prefix).await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Res<()> {
    let url = std::env::var("TASKGATE_PG_URL").map_err(|_| "set TASKGATE_PG_URL")?;
    let sessions = env_or("SESSIONS", 16u32);
    let jobs = env_or("JOBS", 20_000usize);
    let batches = std::env::var("BATCHES").unwrap_or_else(|_| "1,10,100".to_owned());
    let clock = std::env::var("CLOCK").unwrap_or_else(|_| "server".to_owned());
    println!("clock: {clock}; {sessions} sessions; {jobs} jobs per batch size");
    for batch in batches.split(',').filter_map(|b| b.trim().parse::<usize>().ok()) {
        throughput(&url, sessions, batch, jobs).await?;
    }
    let samples = env_or("LATENCY", 200usize);
    if samples == 0 {
        return Ok(());
    }
    pickup_latency(&url, samples).await
}
