//! Claim+ack throughput through the broker on a real server (release mode):
//! `cargo run --release -p taskgate-mysql --features testing --example throughput -- \
//!  [--claimers N] [--batch B] [--jobs J] [--raw]` with `TASKGATE_MYSQL_URL` set. Prints jobs/s
//! and the mean claim and ack latency. `--raw` measures the same cycle in bare SQL (one
//! locking read, one UPDATE, COMMIT; one UPDATE, COMMIT) on a minimal table: the server's
//! ceiling on this machine, to read the broker's figures against. Tables go to a fresh
//! `tgtest_` prefix and are dropped afterwards.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use sqlx::{Connection, Executor, MySqlConnection};
use taskgate::{AckItem, BoxError, Broker, BrokerOptions, Task};
use taskgate_mysql::testing::{MySqlFactory, MySqlStorage};

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn raw_conn(storage: &MySqlStorage) -> Result<MySqlConnection, BoxError> {
    let mut conn = MySqlConnection::connect(storage.url()).await?;
    conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED").await?;
    Ok(conn)
}

/// The bare-SQL ceiling: the broker's claim+ack cycle without the broker.
async fn raw(
    storage: &MySqlStorage,
    claimers: usize,
    batch: usize,
    jobs: usize,
) -> Result<(), BoxError> {
    let t = format!("{}raw", storage.prefix());
    let mut conn = raw_conn(storage).await?;
    conn.execute(
        format!(
            "CREATE TABLE {t} (id VARCHAR(64) PRIMARY KEY, status VARCHAR(32) NOT NULL, \
        run_at BIGINT NOT NULL, token VARCHAR(64) NOT NULL DEFAULT '', ready VARCHAR(32) AS \
        (IF(status = 'pending', 'bench', NULL)) STORED, KEY {t}_ready (ready, run_at, id)) \
        ENGINE=InnoDB COLLATE=utf8mb4_bin"
        )
        .as_str(),
    )
    .await?;
    for chunk in (0..jobs).collect::<Vec<_>>().chunks(1_000) {
        let values: Vec<String> =
            chunk.iter().map(|i| format!("('j{i:08}', 'pending', {i})")).collect();
        conn.execute(
            format!("INSERT INTO {t} (id, status, run_at) VALUES {}", values.join(",")).as_str(),
        )
        .await?;
    }
    let started = Instant::now();
    let mut workers = Vec::new();
    for w in 0..claimers {
        let (mut conn, t) = (raw_conn(storage).await?, t.clone());
        workers.push(tokio::spawn(async move {
            let mut n = 0usize;
            loop {
                let mut tx = conn.begin().await?;
                // utf8mb4_bin text arrives flagged binary: read bytes.
                let ids: Vec<Vec<u8>> = sqlx::query_scalar(&format!(
                    "SELECT id FROM {t} WHERE ready = 'bench' ORDER BY run_at, id LIMIT {batch} FOR UPDATE SKIP LOCKED"
                ))
                .fetch_all(&mut *tx)
                .await?;
                if ids.is_empty() {
                    return Ok::<usize, sqlx::Error>(n);
                }
                let list = ids
                    .iter()
                    .map(|i| format!("'{}'", String::from_utf8_lossy(i)))
                    .collect::<Vec<_>>()
                    .join(",");
                tx.execute(format!("UPDATE {t} SET status = 'running', token = 'w{w}' WHERE id IN ({list})").as_str()).await?;
                tx.commit().await?;
                let mut tx = conn.begin().await?;
                tx.execute(format!("UPDATE {t} SET status = 'completed', token = '' WHERE id IN ({list})").as_str()).await?;
                tx.commit().await?;
                n += ids.len();
            }
        }));
    }
    let mut done = 0usize;
    for w in workers {
        done += w.await??;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "raw      claimers {claimers:>2} batch {batch:>3}: {done} jobs in {secs:.2} s = {:.0} jobs/s",
        f64::from(u32::try_from(done)?) / secs
    );
    storage.drop_tables().await
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<(), BoxError> {
    let (claimers, batch, jobs) = (arg("--claimers", 4), arg("--batch", 1), arg("--jobs", 20_000));
    let pool = u32::try_from(claimers + 2)?;
    let storage = MySqlFactory::from_env().with_pool_size(pool).mysql_storage().await?;
    if std::env::args().any(|a| a == "--raw") {
        return raw(&storage, claimers, batch, jobs).await;
    }
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
