//! What the numbers were measured on: the machine (cores, RAM, kernel, load) and each
//! database's version and durability settings, read from the servers themselves; and the
//! servers' write-transaction counters, from which the report derives commits per job.

use std::time::Duration;

use sqlx::Row;

use crate::backend::{Bed, RawPool};
use crate::Result;

/// The machine.
#[derive(Clone, Debug, Default)]
pub struct Machine {
    /// Logical cores.
    pub cores: usize,
    /// Total memory in GiB.
    pub ram_gib: f64,
    /// `uname -r`.
    pub kernel: String,
    /// CPU model name.
    pub cpu: String,
}

impl Machine {
    /// Reads `/proc` (fields it cannot read stay empty).
    pub fn read() -> Machine {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let kib: f64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_owned())
            .unwrap_or_default();
        Machine {
            cores: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            ram_gib: kib / 1_048_576.0,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_owned())
                .unwrap_or_default(),
            cpu,
        }
    }
}

/// Latency of `fdatasync` after an 8 KiB write, `samples` times, in a file under the temp
/// directory (on this machine the same file system as the database servers' data): the
/// durability floor every commit of every backend pays.
pub fn fsync_latency(samples: usize) -> Result<Vec<Duration>> {
    use std::io::Write;
    let dir = tempfile::Builder::new().prefix("taskgate-fsync-").tempdir()?;
    let mut file = std::fs::File::create(dir.path().join("probe"))?;
    let block = [0x5au8; 8192];
    let mut out = Vec::with_capacity(samples);
    for _ in 0..samples {
        let start = std::time::Instant::now();
        file.write_all(&block)?;
        file.sync_data()?;
        out.push(start.elapsed());
    }
    Ok(out)
}

/// The 1-minute load average, from `/proc/loadavg`.
pub fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN)
}

/// Waits up to `patience` for the 1-minute load average to fall to `below`; returns the last
/// reading.
pub async fn wait_for_quiet(below: f64, patience: Duration) -> f64 {
    let start = std::time::Instant::now();
    loop {
        let load = load_average();
        if load <= below || start.elapsed() >= patience {
            return load;
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

/// What [`settle_writes`] did before a backend's cells.
#[derive(Clone, Debug, Default)]
pub struct Settled {
    /// Seconds the PostgreSQL `CHECKPOINT` and the OS `sync` took together.
    pub secs: f64,
    /// Why a step could not run, if one could not (the run goes on without it).
    pub skipped: Vec<String>,
}

/// Lets earlier writes land before the next backend is measured: a PostgreSQL `CHECKPOINT`
/// (when `TASKGATE_PG_URL` is set; needs a superuser or `pg_checkpoint`), then `sync`, which
/// flushes every file system's dirty pages. Without it, one backend's leftovers — a server's
/// checkpoint writing out a million retained rows, a deleted SQLite file's pages, another
/// program's writes — land on the next backend's fsyncs (a full report measured `fdatasync` at
/// p50 0.24 ms at its start and 0.13 ms at its end). No durability setting is touched.
pub async fn settle_writes(pg_url: Option<&str>) -> Settled {
    let start = std::time::Instant::now();
    let mut skipped = Vec::new();
    if let Some(url) = pg_url {
        let checkpoint = async {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(url).await?;
            sqlx::query("CHECKPOINT").execute(&mut conn).await?;
            conn.close().await
        };
        if let Err(e) = checkpoint.await {
            skipped.push(format!("PostgreSQL CHECKPOINT: {e}"));
        }
    }
    let sync = tokio::task::spawn_blocking(|| std::process::Command::new("sync").status()).await;
    match sync {
        Ok(Ok(status)) if status.success() => {}
        Ok(Ok(status)) => skipped.push(format!("sync: {status}")),
        Ok(Err(e)) => skipped.push(format!("sync: {e}")),
        Err(e) => skipped.push(format!("sync: {e}")),
    }
    Settled { secs: start.elapsed().as_secs_f64(), skipped }
}

/// A database's version and settings, as `(name, value)` pairs read from the server.
pub async fn database_settings(bed: &Bed) -> Result<Vec<(String, String)>> {
    match &bed.raw {
        RawPool::Postgres(pool) => pg_settings(pool).await,
        RawPool::MySql(pool) => mysql_settings(pool).await,
        RawPool::Sqlite(pool) => sqlite_settings(pool).await,
        RawPool::None => Ok(vec![("storage".to_owned(), "process memory".to_owned())]),
    }
}

async fn pg_settings(pool: &sqlx::PgPool) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for name in [
        "server_version",
        "fsync",
        "synchronous_commit",
        "wal_sync_method",
        "full_page_writes",
        "shared_buffers",
        "max_connections",
        "autovacuum",
        "autovacuum_naptime",
    ] {
        let value: String = sqlx::query_scalar(&format!("SHOW {name}")).fetch_one(pool).await?;
        out.push((name.to_owned(), value));
    }
    Ok(out)
}

async fn mysql_settings(pool: &sqlx::MySqlPool) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for name in [
        "version",
        "innodb_flush_log_at_trx_commit",
        "sync_binlog",
        "log_bin",
        "innodb_flush_method",
        "innodb_doublewrite",
        "innodb_buffer_pool_size",
    ] {
        let row = sqlx::query(&format!("SELECT CAST(@@{name} AS CHAR)")).fetch_one(pool).await?;
        // utf8mb4_bin strings arrive as VARBINARY.
        let value: Option<Vec<u8>> = row.try_get(0)?;
        out.push((
            name.to_owned(),
            String::from_utf8_lossy(&value.unwrap_or_default()).into_owned(),
        ));
    }
    Ok(out)
}

async fn sqlite_settings(pool: &sqlx::SqlitePool) -> Result<Vec<(String, String)>> {
    let version: String = sqlx::query_scalar("SELECT sqlite_version()").fetch_one(pool).await?;
    let journal: String = sqlx::query_scalar("PRAGMA journal_mode").fetch_one(pool).await?;
    let sync: i64 = sqlx::query_scalar("PRAGMA synchronous").fetch_one(pool).await?;
    let sync = match sync {
        0 => "OFF",
        1 => "NORMAL",
        2 => "FULL",
        3 => "EXTRA",
        _ => "?",
    };
    let dir = std::env::temp_dir();
    Ok(vec![
        ("sqlite_version".to_owned(), version),
        ("journal_mode".to_owned(), journal),
        ("synchronous".to_owned(), sync.to_owned()),
        ("file system".to_owned(), format!("{} ({})", filesystem_of(&dir), dir.display())),
    ])
}

/// The file system type of the mount holding `path`, from `/proc/mounts`.
pub fn filesystem_of(path: &std::path::Path) -> String {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, point, kind) = (f.next()?, f.next()?, f.next()?);
            path.starts_with(point).then(|| (point.len(), kind.to_owned()))
        })
        .max()
        .map(|(_, kind)| kind)
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The server's count of write transactions started so far, when it has one: PostgreSQL's
/// next transaction ID; InnoDB's transaction counter, which advances by two per read-write
/// transaction (its ID and its commit number), halved. Server-wide: exact only while nothing
/// else writes. `None` for SQLite and memory.
pub async fn write_transactions(bed: &Bed) -> Result<Option<u64>> {
    match &bed.raw {
        RawPool::Postgres(pool) => {
            let next: String =
                sqlx::query_scalar("SELECT pg_snapshot_xmax(pg_current_snapshot())::text")
                    .fetch_one(pool)
                    .await?;
            Ok(Some(next.parse()?))
        }
        RawPool::MySql(pool) => {
            let row = sqlx::query("SHOW ENGINE INNODB STATUS").fetch_one(pool).await?;
            let status: Vec<u8> = row.try_get(2)?;
            let status = String::from_utf8_lossy(&status); // columns: Type, Name, Status
            let counter = status
                .lines()
                .find_map(|l| l.strip_prefix("Trx id counter "))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or("no 'Trx id counter' in SHOW ENGINE INNODB STATUS")?;
            Ok(Some(counter / 2))
        }
        _ => Ok(None),
    }
}

/// A Galera node's replication settings and state, read through the bed's harness pool
/// (MySQL/MariaDB only; empty elsewhere): `wsrep_on`, the provider's version, the cluster's
/// size, the applier threads and the row image replicated.
pub async fn galera_settings(bed: &Bed) -> Result<Vec<(String, String)>> {
    let RawPool::MySql(pool) = &bed.raw else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for (name, sql) in [
        ("wsrep_on", "SHOW GLOBAL VARIABLES LIKE 'wsrep_on'"),
        ("wsrep_provider_version", "SHOW GLOBAL STATUS LIKE 'wsrep_provider_version'"),
        ("wsrep_cluster_size", "SHOW GLOBAL STATUS LIKE 'wsrep_cluster_size'"),
        ("wsrep_slave_threads", "SHOW GLOBAL VARIABLES LIKE 'wsrep_slave_threads'"),
        ("binlog_row_image", "SHOW GLOBAL VARIABLES LIKE 'binlog_row_image'"),
    ] {
        let row = sqlx::query(sql).fetch_optional(pool).await?;
        let value = match row {
            // Columns: Variable_name, Value (VARBINARY under utf8mb4_bin, or text).
            Some(row) => row
                .try_get::<Vec<u8>, _>(1)
                .map(|v| String::from_utf8_lossy(&v).into_owned())
                .or_else(|_| row.try_get::<String, _>(1))?,
            None => "—".to_owned(),
        };
        out.push((name.to_owned(), value));
    }
    Ok(out)
}
