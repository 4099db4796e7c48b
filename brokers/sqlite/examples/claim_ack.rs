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

/// The same cycle on a bare table through sqlx, no broker: a claim transaction
/// (`UPDATE … RETURNING`) and a complete transaction per batch. The ceiling the broker is
/// compared with, measured under the same machine load.
async fn raw(synchronous: Synchronous, batch: usize, budget: Duration) -> AnyResult<f64> {
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
    use sqlx::{Connection, Row};
    let dir = tempfile::tempdir()?;
    let sync = match synchronous {
        Synchronous::Full => SqliteSynchronous::Full,
        Synchronous::Normal => SqliteSynchronous::Normal,
    };
    let options = SqliteConnectOptions::new()
        .filename(dir.path().join("raw.db"))
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(sync);
    let mut conn = sqlx::SqliteConnection::connect_with(&options).await?;
    sqlx::query("CREATE TABLE t (id INTEGER PRIMARY KEY, status TEXT NOT NULL, token TEXT)")
        .execute(&mut conn)
        .await?;
    sqlx::query("CREATE INDEX t_ready ON t (id) WHERE status = 'pending'")
        .execute(&mut conn)
        .await?;
    let backlog = (batch * 4_000).clamp(4_000, 200_000);
    sqlx::query(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) \
                 INSERT INTO t (id, status) SELECT i, 'pending' FROM n",
    )
    .bind(i64::try_from(backlog)?)
    .execute(&mut conn)
    .await?;
    let started = Instant::now();
    let mut done = 0usize;
    while started.elapsed() < budget && done + batch <= backlog {
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        let rows = sqlx::query(
            "UPDATE t SET status = 'running', token = 'x' WHERE id IN \
             (SELECT id FROM t WHERE status = 'pending' ORDER BY id LIMIT ?) RETURNING id",
        )
        .bind(i64::try_from(batch)?)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
        let list = ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        sqlx::query(&format!("UPDATE t SET status = 'done', token = NULL WHERE id IN ({list})"))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        done += ids.len();
    }
    Ok(done as f64 / started.elapsed().as_secs_f64())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> AnyResult<()> {
    let secs = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(3u64);
    let only = std::env::args().nth(2).unwrap_or_default().to_uppercase();
    let budget = Duration::from_secs(secs);
    for (name, sync) in [("FULL", Synchronous::Full), ("NORMAL", Synchronous::Normal)] {
        if !only.is_empty() && only != name {
            continue;
        }
        for batch in [1, 10, 100] {
            let rate = run(sync, batch, budget).await?;
            let ceiling = raw(sync, batch, budget).await?;
            println!(
                "synchronous={name:<6} batch={batch:<3} broker {rate:>8.0} jobs/s   \
                 bare table, same 2 transactions {ceiling:>8.0} jobs/s"
            );
        }
    }
    Ok(())
}
