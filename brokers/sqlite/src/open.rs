//! Opening a database: checks before touching the file, connection settings, the two pools,
//! migrations and first statistics.

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::Executor;
use taskgate::{validate, Error, Result};
use taskgate_sql::{EngineConfig, SqlBroker};

use crate::adapter::{optimize_on, SqliteAdapter};
use crate::options::{Location, SqliteOptions, Synchronous};
use crate::{SqliteBroker, SqliteDialect, MIGRATIONS};

/// SQLITE_BUSY: another process holds the lock (first WAL switch of a new file).
const SQLITE_BUSY: &str = "5";
/// Tries to connect while another process creates the same file.
const OPEN_ATTEMPTS: u32 = 50;

/// Why a database could not be opened, naming the file (the driver's error is the source).
#[derive(Debug)]
struct OpenError {
    what: String,
    source: sqlx::Error,
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot open {}", self.what)
    }
}

impl std::error::Error for OpenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

fn describe(options: &SqliteOptions) -> String {
    match &options.location {
        Location::File(p) => format!("sqlite database {}", p.display()),
        Location::Memory => "in-memory sqlite database".to_owned(),
    }
}

/// The connection settings shared by every connection of the broker.
fn connect_options(options: &SqliteOptions) -> Result<SqliteConnectOptions> {
    let base = match &options.location {
        Location::File(path) => SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal),
        Location::Memory => SqliteConnectOptions::from_str("sqlite::memory:")
            .map_err(|e| Error::backend("sqlite", e))?,
    };
    let synchronous = match options.synchronous {
        Synchronous::Full => SqliteSynchronous::Full,
        Synchronous::Normal => SqliteSynchronous::Normal,
    };
    Ok(base
        .synchronous(synchronous)
        .busy_timeout(options.busy_timeout)
        .foreign_keys(false)
        .analysis_limit(Some(400))
        // Batches return up to 1,000 rows; a roomy channel lets the driver's worker thread
        // hand them over without waiting for the async side row by row.
        .row_buffer_size(1_024))
}

/// Checks what can be checked before SQLite touches the file.
fn precheck(options: &SqliteOptions) -> Result<()> {
    validate::validate_prefix(&options.prefix)?;
    let Location::File(path) = &options.location else { return Ok(()) };
    if path.as_os_str().is_empty() {
        return Err(Error::invalid("path", "must not be empty"));
    }
    if path.is_dir() {
        return Err(Error::invalid("path", format!("{} is a directory", path.display())));
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    if let Some(dir) = dir.filter(|d| !d.is_dir()) {
        let reason = format!("directory {} does not exist", dir.display());
        return Err(Error::invalid("path", reason));
    }
    Ok(())
}

fn is_busy(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.code().as_deref() == Some(SQLITE_BUSY))
}

/// The writer pool: one connection, retried while another process creates the file.
async fn writer_pool(
    connect: &SqliteConnectOptions,
) -> std::result::Result<SqlitePool, sqlx::Error> {
    let pool_options = || {
        SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .acquire_timeout(Duration::from_secs(120))
            .idle_timeout(None)
            .max_lifetime(None)
    };
    let mut attempt = 0;
    loop {
        attempt += 1;
        match pool_options().connect_with(connect.clone()).await {
            Err(e) if is_busy(&e) && attempt < OPEN_ATTEMPTS => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => return other,
        }
    }
}

async fn pools(
    options: &SqliteOptions,
) -> std::result::Result<(SqlitePool, SqlitePool, SqliteConnectOptions), sqlx::Error> {
    let connect = connect_options(options).map_err(|e| sqlx::Error::Configuration(e.into()))?;
    let writer = writer_pool(&connect).await?;
    // Prove the file is a database (the first query reads the header).
    writer.execute("SELECT count(*) FROM sqlite_master").await?;
    let readers = match options.location {
        Location::Memory => writer.clone(),
        Location::File(_) => {
            SqlitePoolOptions::new()
                .max_connections(options.read_connections)
                .min_connections(0)
                .acquire_timeout(Duration::from_secs(120))
                .connect_with(connect.clone().create_if_missing(false).pragma("query_only", "ON"))
                .await?
        }
    };
    Ok((writer, readers, connect))
}

/// Opens the database and applies migrations.
pub(crate) async fn open(options: SqliteOptions) -> Result<SqliteBroker> {
    precheck(&options)?;
    let what = describe(&options);
    let open_error = |source| Error::backend("sqlite", OpenError { what: what.clone(), source });
    let (writer, readers, session_options) = pools(&options).await.map_err(open_error)?;
    let adapter = Arc::new(SqliteAdapter {
        group: crate::group::GroupWriter::new(writer.clone()),
        writer,
        readers,
        session_options,
        last_optimize: Mutex::new(Instant::now()),
    });
    let dialect = options.dialect.clone().unwrap_or_else(|| Arc::new(SqliteDialect));
    let config = EngineConfig {
        prefix: options.prefix.clone(),
        poll_interval: options.poll_interval,
        migrations: MIGRATIONS,
        migrate_on_init: false,
        capabilities: crate::capabilities(&options.location, dialect.time_source()),
    };
    let engine_adapter: Arc<dyn taskgate_sql::Adapter> = adapter.clone();
    #[cfg(feature = "test-hooks")]
    let engine_adapter = match &options.log {
        Some(log) => taskgate_sql::RecordingAdapter::wrap(engine_adapter, log.clone()),
        None => engine_adapter,
    };
    let inner = SqlBroker::new(engine_adapter, dialect, config)?;
    if let Err(e) = migrate(&inner, &adapter).await {
        taskgate_sql::Adapter::close(&*adapter).await;
        return Err(e);
    }
    Ok(SqliteBroker { inner, adapter })
}

/// Applies migrations, then gathers statistics: a full (bounded) `ANALYZE` when the schema
/// changed, `PRAGMA optimize` otherwise.
async fn migrate(inner: &SqlBroker, adapter: &SqliteAdapter) -> Result<()> {
    let applied = inner.migrate().await?;
    let stats = if applied.is_empty() {
        optimize_on(&adapter.writer).await
    } else {
        adapter.writer.execute("ANALYZE").await.map(|_| ())
    };
    stats.map_err(|e| Error::backend("sqlite", e))
}
