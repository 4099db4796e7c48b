//! Backends and beds: which backends can run here, and a fresh isolated storage per
//! measurement, opened with each backend's public constructor (the same ones its test factory
//! uses), plus the harness's own pool on the same tables.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};
use sqlx::Executor;
use taskgate::{Broker, BrokerOptions};
use taskgate_memory::MemoryBroker;
use taskgate_mysql::MySqlOptions;
use taskgate_postgres::PgOptions;
use taskgate_sql::testing::TestPrefix;
use taskgate_sql::SqlBroker;
use taskgate_sqlite::{SqliteOptions, Synchronous};

use crate::Result;

/// The environment variable naming the PostgreSQL server (as in the contract tests).
pub const PG_URL_VAR: &str = "TASKGATE_PG_URL";
/// The environment variable naming the MySQL/MariaDB server (as in the contract tests).
pub const MYSQL_URL_VAR: &str = "TASKGATE_MYSQL_URL";
/// The environment variable naming PgBouncer (transaction pooling) in front of the PostgreSQL
/// server, with `?pooler=transaction` (`ci/pgbouncer.sh`).
pub const PGBOUNCER_URL_VAR: &str = "TASKGATE_PGBOUNCER_URL";
/// The environment variable naming the nodes of the MariaDB Galera cluster, comma-separated
/// (`ci/galera.sh`).
pub const GALERA_URLS_VAR: &str = "TASKGATE_GALERA_URLS";
/// `0` opts out of the Galera cluster (`ci/services.sh` does not start it).
pub const GALERA_OPT_VAR: &str = "TASKGATE_GALERA";

/// One taskgate backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Backend {
    /// `taskgate_memory::MemoryBroker`.
    Memory,
    /// `taskgate_sqlite::SqliteBroker` (synchronous = FULL, WAL).
    Sqlite,
    /// `taskgate_postgres::PgBroker`.
    Postgres,
    /// `taskgate_mysql::MySqlBroker`.
    MySql,
}

impl Backend {
    /// Every backend, in report order.
    pub const ALL: [Backend; 4] =
        [Backend::Memory, Backend::Sqlite, Backend::Postgres, Backend::MySql];

    /// The backend's short name.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
            Backend::MySql => "mysql",
        }
    }

    /// True for the SQL backends, which have a raw-SQL ceiling.
    pub fn is_sql(self) -> bool {
        self != Backend::Memory
    }

    /// True for the backends on a shared database server (their beds are table prefixes).
    pub fn is_server(self) -> bool {
        matches!(self, Backend::Postgres | Backend::MySql)
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Backend {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        Backend::ALL
            .into_iter()
            .find(|b| b.name() == s || (s == "mariadb" && *b == Backend::MySql))
            .ok_or_else(|| format!("unknown backend {s:?} (memory, sqlite, postgres, mysql)"))
    }
}

/// Where the server backends are, from the environment.
#[derive(Clone, Debug, Default)]
pub struct Env {
    /// `TASKGATE_PG_URL`, when set.
    pub pg_url: Option<String>,
    /// `TASKGATE_MYSQL_URL`, when set.
    pub mysql_url: Option<String>,
    /// `TASKGATE_PGBOUNCER_URL`, when set.
    pub pgbouncer_url: Option<String>,
    /// `TASKGATE_GALERA_URLS` split at commas (empty when unset).
    pub galera_urls: Vec<String>,
    /// `TASKGATE_GALERA=0`: the cluster was opted out of.
    pub galera_opted_out: bool,
}

impl Env {
    /// Reads `TASKGATE_PG_URL`, `TASKGATE_MYSQL_URL`, `TASKGATE_PGBOUNCER_URL`,
    /// `TASKGATE_GALERA_URLS` and `TASKGATE_GALERA` (blank counts as unset).
    pub fn from_env() -> Env {
        let var =
            |name| std::env::var(name).ok().map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let galera_urls = var(GALERA_URLS_VAR)
            .map(|list| {
                list.split(',').map(|u| u.trim().to_owned()).filter(|u| !u.is_empty()).collect()
            })
            .unwrap_or_default();
        Env {
            pg_url: var(PG_URL_VAR),
            mysql_url: var(MYSQL_URL_VAR),
            pgbouncer_url: var(PGBOUNCER_URL_VAR),
            galera_urls,
            galera_opted_out: var(GALERA_OPT_VAR).as_deref() == Some("0"),
        }
    }

    /// The backends that can run here, in report order.
    pub fn available(&self) -> Vec<Backend> {
        Backend::ALL.into_iter().filter(|b| self.skip_reason(*b).is_none()).collect()
    }

    /// Why `backend` cannot run here, if it cannot.
    pub fn skip_reason(&self, backend: Backend) -> Option<String> {
        let missing = |var: &str| Some(format!("{backend}: skipped, {var} is not set"));
        match backend {
            Backend::Postgres if self.pg_url.is_none() => missing(PG_URL_VAR),
            Backend::MySql if self.mysql_url.is_none() => missing(MYSQL_URL_VAR),
            _ => None,
        }
    }

    /// Prints a line on stderr for every backend that is skipped.
    pub fn announce_skips(&self) {
        for reason in Backend::ALL.into_iter().filter_map(|b| self.skip_reason(b)) {
            eprintln!("taskgate benches: {reason}");
        }
    }
}

/// Where the handles of a bed connect (issue 39's topologies: through a pooler, or spread
/// over the nodes of a cluster), for [`Bed::open_placed`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// PostgreSQL or MySQL.
    pub backend: Backend,
    /// One broker handle per URL, in order (a URL may repeat: several handles on one server).
    pub handles: Vec<String>,
    /// The harness's own pool (fills, counters): a direct URL of the same database.
    pub raw: String,
}

/// The harness's own pool on a bed's database (bulk fills, raw-SQL ceilings, counters).
#[derive(Clone, Debug)]
pub enum RawPool {
    /// The memory backend has no database.
    None,
    /// One connection on the SQLite file, with the broker's pragmas.
    Sqlite(SqlitePool),
    /// A PostgreSQL pool of the bed's session count.
    Postgres(PgPool),
    /// A MySQL pool of the bed's session count, at READ COMMITTED like the broker.
    MySql(MySqlPool),
}

/// One measurement's fresh storage: an initialised broker handle, its table prefix and the
/// harness's own pool on the same tables. Close it with [`Bed::close`].
pub struct Bed {
    /// Which backend.
    pub backend: Backend,
    /// The broker handle the workload runs on.
    pub broker: Arc<dyn Broker>,
    /// Further initialised handles on the same tables, each with a pool of its own and possibly
    /// on another server of a cluster ([`Bed::open_placed`]; empty for [`Bed::open`]).
    pub others: Vec<Arc<dyn Broker>>,
    /// The table prefix (a [`TestPrefix`] on the server backends, so the test factories'
    /// hourly sweep removes tables a killed run left behind).
    pub prefix: String,
    /// The harness's own pool.
    pub raw: RawPool,
    engine: Option<SqlBroker>,
    memory: Option<MemoryBroker>,
    sqlite_dir: Option<tempfile::TempDir>,
    url: Option<String>,
    sessions: u32,
}

impl fmt::Debug for Bed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bed").field("backend", &self.backend).field("prefix", &self.prefix).finish()
    }
}

impl Bed {
    /// Opens fresh storage on `backend`, sized for `sessions` concurrent claimers (the pool
    /// sizes of the server backends), and initialises the broker with default options (no
    /// injected clock: PostgreSQL and MySQL use the server's time).
    pub async fn open(env: &Env, backend: Backend, sessions: u32) -> Result<Bed> {
        let sessions = sessions.max(1);
        let mut bed = match backend {
            Backend::Memory => Bed::memory(),
            Backend::Sqlite => Bed::sqlite().await?,
            Backend::Postgres => Bed::postgres(url(&env.pg_url, PG_URL_VAR)?, sessions).await?,
            Backend::MySql => Bed::mysql(url(&env.mysql_url, MYSQL_URL_VAR)?, sessions).await?,
        };
        bed.sessions = sessions;
        bed.broker.init(BrokerOptions::default()).await?;
        Ok(bed)
    }

    /// Opens fresh storage on the servers `placement` names: one broker handle per
    /// `placement.handles` URL (all on the same table prefix; `sessions` connections spread
    /// over them, at least one each), each initialised with default options, and the harness's
    /// own pool on `placement.raw`. PostgreSQL and MySQL only.
    pub async fn open_placed(placement: &Placement, sessions: u32) -> Result<Bed> {
        let first = placement.handles.first().ok_or("a placement without handles")?;
        let n = u32::try_from(placement.handles.len()).unwrap_or(u32::MAX);
        let per_handle = sessions.max(1).div_ceil(n).max(1);
        let prefix = String::from(TestPrefix::new());
        let mut bed = match placement.backend {
            Backend::Postgres => {
                let broker = pg_options(first, &prefix, per_handle)?.connect().await?;
                let pool = PgPoolOptions::new()
                    .max_connections(sessions.max(1))
                    .connect_lazy(&placement.raw)?;
                let engine = broker.engine().clone();
                let mut bed =
                    Bed::new(Backend::Postgres, Arc::new(broker), prefix, RawPool::Postgres(pool));
                bed.engine = Some(engine);
                bed
            }
            Backend::MySql => {
                let broker = mysql_options(first, &prefix, per_handle)?.connect().await?;
                let pool = mysql_raw_pool(&placement.raw, sessions.max(1))?;
                let engine = broker.engine().clone();
                let mut bed =
                    Bed::new(Backend::MySql, Arc::new(broker), prefix, RawPool::MySql(pool));
                bed.engine = Some(engine);
                bed
            }
            other => return Err(format!("{other}: no placement on servers").into()),
        };
        bed.url = Some(first.clone());
        bed.sessions = per_handle;
        let opened = async {
            bed.broker.init(BrokerOptions::default()).await?;
            for url in &placement.handles[1..] {
                let handle: Arc<dyn Broker> = match placement.backend {
                    Backend::Postgres => {
                        Arc::new(pg_options(url, &bed.prefix, per_handle)?.connect().await?)
                    }
                    _ => Arc::new(mysql_options(url, &bed.prefix, per_handle)?.connect().await?),
                };
                handle.init(BrokerOptions::default()).await?;
                bed.others.push(handle);
            }
            Ok::<(), crate::BoxError>(())
        }
        .await;
        match opened {
            Ok(()) => Ok(bed),
            Err(e) => {
                let _ = bed.close().await;
                Err(e)
            }
        }
    }

    /// Every broker handle of the bed: [`Bed::broker`] first, then [`Bed::others`].
    pub fn handles(&self) -> Vec<Arc<dyn Broker>> {
        std::iter::once(self.broker.clone()).chain(self.others.iter().cloned()).collect()
    }

    fn new(backend: Backend, broker: Arc<dyn Broker>, prefix: String, raw: RawPool) -> Bed {
        Bed {
            backend,
            broker,
            others: Vec::new(),
            prefix,
            raw,
            engine: None,
            memory: None,
            sqlite_dir: None,
            url: None,
            sessions: 1,
        }
    }

    fn memory() -> Bed {
        let store = MemoryBroker::new();
        let mut bed =
            Bed::new(Backend::Memory, Arc::new(store.handle()), String::new(), RawPool::None);
        bed.memory = Some(store);
        bed
    }

    async fn sqlite() -> Result<Bed> {
        let dir = tempfile::Builder::new().prefix("taskgate-bench-").tempdir()?;
        let path = dir.path().join("tasks.db");
        let prefix = taskgate_sqlite::DEFAULT_PREFIX.to_owned();
        let broker = SqliteOptions::new(&path).synchronous(Synchronous::Full).open().await?;
        let connect = SqliteConnectOptions::new()
            .filename(&path)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
            .synchronous(sqlx::sqlite::SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(5));
        let pool = SqlitePoolOptions::new().max_connections(1).connect_with(connect).await?;
        let engine = broker.engine().clone();
        let mut bed = Bed::new(Backend::Sqlite, Arc::new(broker), prefix, RawPool::Sqlite(pool));
        bed.engine = Some(engine);
        bed.sqlite_dir = Some(dir);
        Ok(bed)
    }

    async fn postgres(url: &str, sessions: u32) -> Result<Bed> {
        let prefix = String::from(TestPrefix::new());
        let broker = pg_options(url, &prefix, sessions)?.connect().await?;
        let pool = PgPoolOptions::new().max_connections(sessions).connect_lazy(url)?;
        let engine = broker.engine().clone();
        let mut bed =
            Bed::new(Backend::Postgres, Arc::new(broker), prefix, RawPool::Postgres(pool));
        bed.engine = Some(engine);
        bed.url = Some(url.to_owned());
        Ok(bed)
    }

    async fn mysql(url: &str, sessions: u32) -> Result<Bed> {
        let prefix = String::from(TestPrefix::new());
        let broker = mysql_options(url, &prefix, sessions)?.connect().await?;
        let pool = mysql_raw_pool(url, sessions)?;
        let engine = broker.engine().clone();
        let mut bed = Bed::new(Backend::MySql, Arc::new(broker), prefix, RawPool::MySql(pool));
        bed.engine = Some(engine);
        bed.url = Some(url.to_owned());
        Ok(bed)
    }

    /// A second, initialised broker handle on the same storage (another pool and, on
    /// PostgreSQL, another listener): what a second worker process would have.
    pub async fn second_handle(&self) -> Result<Arc<dyn Broker>> {
        let handle: Arc<dyn Broker> = match self.backend {
            Backend::Memory => match &self.memory {
                Some(store) => Arc::new(store.handle()),
                None => return Err("memory bed without its store".into()),
            },
            Backend::Sqlite => Arc::new(self.sqlite_options()?.open().await?),
            Backend::Postgres => {
                Arc::new(pg_options(self.url()?, &self.prefix, self.sessions)?.connect().await?)
            }
            Backend::MySql => {
                Arc::new(mysql_options(self.url()?, &self.prefix, self.sessions)?.connect().await?)
            }
        };
        handle.init(BrokerOptions::default()).await?;
        Ok(handle)
    }

    fn sqlite_options(&self) -> Result<SqliteOptions> {
        let dir = self.sqlite_dir.as_ref().ok_or("sqlite bed without its directory")?;
        Ok(SqliteOptions::new(dir.path().join("tasks.db")).synchronous(Synchronous::Full))
    }

    fn url(&self) -> Result<&str> {
        self.url.as_deref().ok_or_else(|| "server bed without its URL".into())
    }

    /// The tasks table's name.
    pub fn tasks_table(&self) -> String {
        format!("{}tasks", self.prefix)
    }

    /// Every table of the bed (the backend's migrations under the bed's prefix; none for
    /// memory).
    pub fn tables(&self) -> Vec<String> {
        self.engine.as_ref().map_or_else(Vec::new, SqlBroker::tables)
    }

    /// The SQLite database file (its WAL is the same path with `-wal` appended).
    pub fn sqlite_file(&self) -> Option<std::path::PathBuf> {
        self.sqlite_dir.as_ref().map(|dir| dir.path().join("tasks.db"))
    }

    /// Transactions the engine retried after deadlocks or lock timeouts (0 for memory).
    pub fn tx_retries(&self) -> u64 {
        self.engine.as_ref().map_or(0, SqlBroker::tx_retries)
    }

    /// Drops the bed's tables (server backends; SQLite's directory goes with the bed) and
    /// closes the broker and the harness's pool.
    pub async fn close(self) -> Result<()> {
        for other in &self.others {
            let _ = other.close().await;
        }
        if let (Some(engine), true) = (&self.engine, self.backend.is_server()) {
            engine.drop_tables().await?;
        }
        self.broker.close().await?;
        match self.raw {
            RawPool::Postgres(pool) => pool.close().await,
            RawPool::MySql(pool) => pool.close().await,
            RawPool::Sqlite(pool) => pool.close().await,
            RawPool::None => {}
        }
        Ok(())
    }
}

fn url<'a>(url: &'a Option<String>, var: &str) -> Result<&'a str> {
    url.as_deref().ok_or_else(|| format!("{var} is not set").into())
}

/// The broker's PostgreSQL options: one pooled connection per claimer.
fn pg_options(url: &str, prefix: &str, sessions: u32) -> Result<PgOptions> {
    Ok(PgOptions::from_url(url)?.prefix(prefix).pool_size(sessions))
}

/// The broker's MySQL options: one pooled connection per claimer.
fn mysql_options(url: &str, prefix: &str, sessions: u32) -> Result<MySqlOptions> {
    Ok(MySqlOptions::from_url(url)?.prefix(prefix).pool_size(sessions))
}

/// The harness's MySQL pool, with the broker's session settings (READ COMMITTED, utf8mb4_bin).
fn mysql_raw_pool(url: &str, sessions: u32) -> Result<MySqlPool> {
    let url = url.replacen("mariadb://", "mysql://", 1);
    let connect = MySqlConnectOptions::from_str(&url)?
        .charset("utf8mb4")
        .collation("utf8mb4_bin")
        .timezone(Some("+00:00".to_owned()));
    Ok(MySqlPoolOptions::new()
        .max_connections(sessions)
        .after_connect(|conn, _| {
            Box::pin(async move {
                conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED").await?;
                Ok(())
            })
        })
        .connect_lazy_with(connect))
}
