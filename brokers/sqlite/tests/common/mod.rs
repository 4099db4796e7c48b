//! Helpers shared by the SQLite backend tests: temporary files, broker handles, options.

#![allow(
    dead_code,
    unreachable_pub,
    reason = "a shared helper module: each test binary uses a different subset"
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use taskgate::{Broker, BrokerOptions, Clock, ManualClock};
use taskgate_sqlite::{SqliteBroker, SqliteOptions};

/// A test's error type: any error, reported with `?`.
pub type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// A temporary directory (removed on drop) and a database path inside it.
pub struct TempDb {
    pub dir: tempfile::TempDir,
    pub path: PathBuf,
}

impl TempDb {
    pub fn new() -> TestResult<TempDb> {
        let dir = tempfile::Builder::new().prefix("taskgate-sqlite-test-").tempdir()?;
        let path = dir.path().join("tasks.db");
        Ok(TempDb { dir, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A new broker instance on the file, initialised with `options`.
    pub async fn broker(&self, options: BrokerOptions) -> TestResult<Arc<SqliteBroker>> {
        let open = SqliteOptions::new(&self.path).open();
        let broker = brokertest::within(brokertest::WAIT_LIMIT, "open", open).await?;
        brokertest::within(brokertest::WAIT_LIMIT, "init", broker.init(options)).await?;
        Ok(Arc::new(broker))
    }
}

/// Options on a manual clock at the contract epoch, lease TTL 60 s.
pub fn manual_options() -> (ManualClock, BrokerOptions) {
    let clock = ManualClock::at_contract_epoch();
    let options = BrokerOptions {
        default_lease_ttl: Duration::from_secs(60),
        clock: Some(Arc::new(clock.clone()) as Arc<dyn Clock>),
        ..BrokerOptions::default()
    };
    (clock, options)
}

/// Runs `sql` on a plain connection to the file and returns the first column of every row
/// as text.
pub async fn query_texts(path: &Path, sql: &str) -> TestResult<Vec<String>> {
    use sqlx::{Connection, Row};
    let mut conn = sqlx::SqliteConnection::connect_with(
        &sqlx::sqlite::SqliteConnectOptions::new().filename(path),
    )
    .await?;
    let rows = sqlx::query(sql).fetch_all(&mut conn).await?;
    let mut out = Vec::new();
    for row in rows {
        let v: Option<String> = row.try_get_unchecked(0)?;
        out.push(v.unwrap_or_default());
    }
    conn.close().await?;
    Ok(out)
}

/// A call held on a database thread (a commit hook blocks in it) until released: `entered`
/// once it is held, `release` to let it go. Blocks for at most `brokertest::WAIT_LIMIT`.
#[derive(Clone, Default)]
pub struct Hold {
    entered: Arc<std::sync::atomic::AtomicBool>,
    release: Arc<std::sync::atomic::AtomicBool>,
}

impl Hold {
    /// Blocks the calling thread (the held call's) until released.
    pub fn block(&self) {
        use std::sync::atomic::Ordering;
        self.entered.store(true, Ordering::SeqCst);
        let until = std::time::Instant::now() + brokertest::WAIT_LIMIT;
        while !self.release.load(Ordering::SeqCst) && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Waits until the held call is held.
    pub async fn entered(&self) -> TestResult {
        brokertest::within(brokertest::WAIT_LIMIT, "the held call to be held", async {
            while !self.entered.load(std::sync::atomic::Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await;
        Ok(())
    }

    /// Lets the held call go.
    pub fn release(&self) {
        self.release.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Waits until `n` write calls of `broker` are queued for the writer.
pub async fn queued(broker: &SqliteBroker, n: usize) -> TestResult {
    let what = format!("{n} calls queued for the writer");
    brokertest::within(brokertest::WAIT_LIMIT, what, async {
        while broker.writers_waiting() < n {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await;
    Ok(())
}
