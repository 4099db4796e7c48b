//! The brokertest factory for PostgreSQL (extensions §E11): every case gets its own
//! [`TestPrefix`] on one server, and its tables are dropped afterwards
//! ([`SqlBroker::drop_tables`](taskgate_sql::SqlBroker::drop_tables), the engine's test kit).
//!
//! Where the server comes from, in order:
//! 1. `TASKGATE_PG_URL` (CI sets it, with `TASKGATE_REQUIRE_DB=1`);
//! 2. unset, built with the `containers` feature and Docker reachable: a PostgreSQL 16
//!    testcontainer, started once and reused by every later test process (a named, reusable
//!    container: it is never left behind twice);
//! 3. neither: [`brokertest::Unavailable`], so the suite skips loudly (or fails under
//!    `TASKGATE_REQUIRE_DB=1`).
//!
//! A killed run may not clean up, so the first storage of a process on a server also drops
//! every test table set (and server-clock schema) made more than an hour ago
//! ([`taskgate_sql::testing::sweep_once`]), and learns whether the server answers.
//!
//! The suite's server clock ([`Storage::server_clock`]) is a schema `<prefix>clock` holding a
//! one-row table and a function `clock_timestamp()` that reads it; handles on that clock put
//! the schema before `pg_catalog` in their `search_path`, so the engine's server-time
//! expression (`clock_timestamp()`, unqualified) reads the table instead of the server's
//! real clock.
//!
//! Behind a transaction pooler ([`PgFactory::pgbouncer_from_env`], `TASKGATE_PGBOUNCER_URL`
//! with `?pooler=transaction`) the same storages, with the handles' settings (`search_path`,
//! `deadlock_timeout`) set per transaction ([`PgOptions::setting`]); the kit's own statements
//! use the simple protocol, which passes a transaction pooler, and its admin connections go
//! to the listen URL (the direct one) when there is one.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use brokertest::{Factory, ServerClock, Storage, Unavailable};
use sqlx::{Connection, PgConnection};
use taskgate::{BoxError, Broker, Timestamp};
pub use taskgate_sql::testing::TestPrefix;
use taskgate_sql::testing::{stale_prefixes, sweep_once};

use crate::{PgBroker, PgOptions};

/// The environment variable naming the test server.
pub const URL_VAR: &str = "TASKGATE_PG_URL";
/// The environment variable naming the test server behind PgBouncer in transaction mode
/// (`postgres://…:6432/test?pooler=transaction&listen_url=…`; `ci/pgbouncer.sh` exports it).
pub const PGBOUNCER_URL_VAR: &str = "TASKGATE_PGBOUNCER_URL";
/// The [`Factory::name`] of [`PgFactory::pgbouncer_from_env`]'s factory.
pub const PGBOUNCER_NAME: &str = "postgres-pgbouncer";
/// Pool size of a test handle: small, since cases run in parallel on one server.
pub const TEST_POOL_SIZE: u32 = 4;
/// Poll interval of a test handle.
pub const TEST_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// `deadlock_timeout` of test sessions. PostgreSQL reports a deadlock only after this wait
/// (default 1 s), so every deadlock the retry loop absorbs costs that long; concurrent test
/// cases (the history checker allows 5 s per call) would time out on latency, not on a wrong
/// result. Only a superuser may set it; other users keep the server's value.
pub const TEST_DEADLOCK_TIMEOUT: &str = "100ms";

#[derive(Clone, Debug)]
enum Source {
    Url(String),
    Container,
    Broken(String),
    Unavailable(String),
}

/// Hands each contract case a fresh table prefix on a PostgreSQL server.
#[derive(Clone, Debug)]
pub struct PgFactory {
    source: Source,
    name: String,
    pool_size: u32,
    poll_interval: Duration,
}

impl PgFactory {
    /// A factory on the server at `url` (checked now: a bad URL is `InvalidInput { field:
    /// "url" }`).
    pub fn from_url(url: &str) -> taskgate::Result<PgFactory> {
        PgOptions::from_url(url)?;
        Ok(PgFactory::with_source(Source::Url(url.to_owned())))
    }

    /// A factory from the environment: `TASKGATE_PG_URL`, else a testcontainer when Docker is
    /// reachable (feature `containers`), else one whose storage is [`Unavailable`].
    pub fn from_env() -> PgFactory {
        let source = match std::env::var(URL_VAR) {
            Ok(url) if !url.trim().is_empty() => match PgOptions::from_url(url.trim()) {
                Ok(_) => Source::Url(url.trim().to_owned()),
                Err(e) => Source::Broken(format!("{URL_VAR}: {e}")),
            },
            _ if cfg!(feature = "containers") && docker_reachable() => Source::Container,
            _ if cfg!(feature = "containers") => Source::Unavailable(format!(
                "{URL_VAR} is not set and Docker is not reachable: no PostgreSQL server"
            )),
            _ => Source::Unavailable(format!(
                "{URL_VAR} is not set (and taskgate-postgres was built without the containers \
                 feature): no PostgreSQL server"
            )),
        };
        PgFactory::with_source(source)
    }

    /// A factory on the server behind PgBouncer in transaction mode named by
    /// `TASKGATE_PGBOUNCER_URL` (which must say `pooler=transaction`), named
    /// [`PGBOUNCER_NAME`]; unset, one whose storage is [`Unavailable`] (a loud skip, or a
    /// failure under `TASKGATE_REQUIRE_DB=1`).
    pub fn pgbouncer_from_env() -> PgFactory {
        let var = PGBOUNCER_URL_VAR;
        let source = match std::env::var(var) {
            Ok(url) if !url.trim().is_empty() => match PgOptions::from_url(url.trim()) {
                Ok(o) if o.get_pooler() == crate::Pooler::Transaction => {
                    Source::Url(url.trim().to_owned())
                }
                Ok(_) => Source::Broken(format!("{var} does not say ?pooler=transaction")),
                Err(e) => Source::Broken(format!("{var}: {e}")),
            },
            _ => Source::Unavailable(format!(
                "{var} is not set (ci/pgbouncer.sh starts PgBouncer and sets it): no PostgreSQL \
                 server behind a transaction pooler"
            )),
        };
        PgFactory { name: PGBOUNCER_NAME.to_owned(), ..PgFactory::with_source(source) }
    }

    fn with_source(source: Source) -> PgFactory {
        PgFactory {
            source,
            name: "postgres".to_owned(),
            pool_size: TEST_POOL_SIZE,
            poll_interval: TEST_POLL_INTERVAL,
        }
    }

    /// The pool size of every handle this factory's storages open.
    pub fn pool_size(mut self, size: u32) -> Self {
        self.pool_size = size;
        self
    }

    /// The poll interval of every handle this factory's storages open.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// The server's URL (starting the container if that is the source); [`Unavailable`] when
    /// there is no server.
    pub async fn url(&self) -> Result<String, BoxError> {
        match &self.source {
            Source::Url(url) => Ok(url.clone()),
            Source::Container => container_url().await,
            Source::Broken(why) => Err(why.clone().into()),
            Source::Unavailable(why) => Err(Box::new(Unavailable(why.clone()))),
        }
    }

    /// Fresh storage with the concrete type (tests that need the prefix or the URL).
    pub async fn pg_storage(&self) -> Result<PgStorage, BoxError> {
        let url = self.url().await?;
        sweep_once(&url, || sweep(&url)).await?;
        let fast_deadlocks = may_set_deadlock_timeout(&url).await;
        Ok(PgStorage {
            url,
            fast_deadlocks,
            prefix: TestPrefix::new(),
            pool_size: self.pool_size,
            poll_interval: self.poll_interval,
            clock_schema: Mutex::new(None),
        })
    }
}

#[async_trait]
impl Factory for PgFactory {
    fn name(&self) -> String {
        self.name.clone()
    }

    async fn storage(&self) -> Result<Box<dyn Storage>, BoxError> {
        Ok(Box::new(self.pg_storage().await?))
    }
}

/// One case's table prefix on the test server.
#[derive(Debug)]
pub struct PgStorage {
    url: String,
    fast_deadlocks: bool,
    prefix: TestPrefix,
    pool_size: u32,
    poll_interval: Duration,
    clock_schema: Mutex<Option<String>>,
}

impl PgStorage {
    /// The table prefix of this storage.
    pub fn prefix(&self) -> &str {
        self.prefix.as_str()
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The options every handle of this storage is built with: a small pool, and (when the
    /// test user may set it) [`TEST_DEADLOCK_TIMEOUT`].
    pub fn options(&self) -> taskgate::Result<PgOptions> {
        let options = PgOptions::from_url(&self.url)?
            .prefix(self.prefix.as_str())
            .pool_size(self.pool_size)
            .poll_interval(self.poll_interval);
        Ok(match self.fast_deadlocks {
            true => options.setting("deadlock_timeout", TEST_DEADLOCK_TIMEOUT),
            false => options,
        })
    }

    /// A new, uninitialised handle on this storage.
    pub async fn broker(&self) -> taskgate::Result<PgBroker> {
        self.options()?.connect().await
    }

    /// A plain connection to the test server (for inspecting or breaking things): to the
    /// listen URL when the storage's URL has one (the direct URL behind a pooler), else to
    /// the URL itself.
    pub async fn admin(&self) -> Result<PgConnection, BoxError> {
        admin_connect(&self.url).await
    }
}

#[async_trait]
impl Storage for PgStorage {
    async fn handle(&self) -> Result<Arc<dyn Broker>, BoxError> {
        Ok(Arc::new(self.broker().await?))
    }

    async fn handle_with_prefix(&self, prefix: &str) -> Option<taskgate::Result<Arc<dyn Broker>>> {
        let made = match self.options() {
            Ok(options) => options.prefix(prefix).connect_lazy(),
            Err(e) => Err(e),
        };
        Some(made.map(|b| Arc::new(b) as Arc<dyn Broker>))
    }

    async fn handle_polling_every(
        &self,
        interval: Duration,
    ) -> Option<Result<Arc<dyn Broker>, BoxError>> {
        let built = match self.options() {
            Ok(options) => options.poll_interval(interval).connect().await,
            Err(e) => Err(e),
        };
        Some(built.map(|b| Arc::new(b) as Arc<dyn Broker>).map_err(Into::into))
    }

    async fn server_clock(
        &self,
        start: Timestamp,
    ) -> Option<Result<Box<dyn ServerClock>, BoxError>> {
        Some(self.make_clock(start).await.map(|c| Box::new(c) as Box<dyn ServerClock>))
    }

    async fn cleanup(&self) -> Result<(), BoxError> {
        let broker = self.options()?.connect_lazy()?;
        let dropped = broker.engine().drop_tables().await;
        let _ = broker.close().await;
        dropped?;
        let schema = self.clock_schema.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(schema) = schema {
            let mut conn = self.admin().await?;
            drop_clock_schema(&mut conn, &schema).await?;
            conn.close().await?;
        }
        Ok(())
    }
}

impl PgStorage {
    /// Creates this storage's clock schema at `start`.
    async fn make_clock(&self, start: Timestamp) -> Result<PgServerClock, BoxError> {
        let schema = format!("{}clock", self.prefix);
        let mut conn = self.admin().await?;
        let row = sqlx::Executor::fetch_one(&mut conn, "SELECT current_schema()::text").await?;
        let tables: String = sqlx::Row::try_get(&row, 0)?;
        *self.clock_schema.lock().unwrap_or_else(|p| p.into_inner()) = Some(schema.clone());
        crate::conn::simple(&mut conn, &format!("CREATE SCHEMA {schema}")).await?;
        let create = format!("CREATE TABLE {schema}.server_now (ms BIGINT NOT NULL)");
        crate::conn::simple(&mut conn, &create).await?;
        let insert = format!("INSERT INTO {schema}.server_now (ms) VALUES ({})", start.as_millis());
        crate::conn::simple(&mut conn, &insert).await?;
        let function = format!(
            "CREATE FUNCTION {schema}.clock_timestamp() RETURNS timestamptz LANGUAGE sql \
             VOLATILE AS $$ SELECT timestamptz 'epoch' + ms * interval '1 millisecond' \
             FROM {schema}.server_now $$"
        );
        crate::conn::simple(&mut conn, &function).await?;
        conn.close().await?;
        // No spaces: the startup `options` parameter splits on them.
        let path = format!("\"{tables}\",{schema},pg_catalog");
        let options = self.options()?.setting("search_path", path);
        Ok(PgServerClock { url: self.url.clone(), schema, options })
    }
}

/// The server clock of one storage: its schema's `server_now` row.
struct PgServerClock {
    url: String,
    schema: String,
    options: PgOptions,
}

#[async_trait]
impl ServerClock for PgServerClock {
    async fn handle(&self) -> Result<Arc<dyn Broker>, BoxError> {
        Ok(Arc::new(self.options.clone().connect().await?))
    }

    async fn set(&self, at: Timestamp) -> Result<(), BoxError> {
        let mut conn = admin_connect(&self.url).await?;
        let update = format!("UPDATE {}.server_now SET ms = {}", self.schema, at.as_millis());
        crate::conn::simple(&mut conn, &update).await?;
        conn.close().await?;
        Ok(())
    }
}

/// Drops a server-clock schema (`<validated prefix>clock`) with its table and function.
async fn drop_clock_schema(conn: &mut PgConnection, schema: &str) -> Result<(), BoxError> {
    let prefix = schema.strip_suffix("clock").unwrap_or_default();
    taskgate::validate::validate_prefix(prefix)?;
    crate::conn::simple(conn, &format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).await?;
    Ok(())
}

static SUPERUSER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// True when the test user may set `deadlock_timeout` (a superuser); asked once per process.
async fn may_set_deadlock_timeout(url: &str) -> bool {
    if let Some(known) = SUPERUSER.get() {
        return *known;
    }
    let asked: Result<bool, BoxError> = async {
        let mut conn = admin_connect(url).await?;
        let rolsuper = "SELECT rolsuper FROM pg_roles WHERE rolname = current_user";
        let row = sqlx::Executor::fetch_one(&mut conn, rolsuper).await?;
        let yes: bool = sqlx::Row::try_get(&row, 0)?;
        conn.close().await?;
        Ok(yes)
    }
    .await;
    *SUPERUSER.get_or_init(|| asked.unwrap_or(false))
}

/// Drops every test table set and server-clock schema on the server at `url` made more than
/// an hour ago; returns the table sets' prefixes. An unreachable server is [`Unavailable`].
pub async fn sweep(url: &str) -> Result<Vec<TestPrefix>, BoxError> {
    let broker = PgOptions::from_url(url)?.connect_lazy()?;
    let swept = broker.engine().sweep_stale_test_tables().await;
    let _ = taskgate::Broker::close(&broker).await;
    let swept = swept?;
    let mut conn = admin_connect(url).await?;
    let list = "SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 'tgtest\\_%clock'";
    let rows = sqlx::Executor::fetch_all(&mut conn, list).await?;
    let schemas: Vec<String> =
        rows.iter().map(|r| sqlx::Row::try_get(r, 0)).collect::<Result<_, _>>()?;
    for prefix in stale_prefixes(schemas.iter().map(String::as_str), SystemTime::now()) {
        drop_clock_schema(&mut conn, &format!("{prefix}clock")).await?;
    }
    conn.close().await?;
    Ok(swept)
}

/// A plain connection for the kit's own statements on the server of `url`: to its listen URL
/// when it has one (behind a pooler, the direct URL), else through the URL itself, with the
/// pool's connect options (no statement cache behind a pooler). The kit sends its statements
/// with the simple protocol, so they pass a transaction pooler too.
async fn admin_connect(url: &str) -> Result<PgConnection, BoxError> {
    let options = PgOptions::from_url(url)?;
    let connect = match options.listen_url {
        Some(_) => options.listen_connect()?.unwrap_or_else(|| options.pool_connect()),
        None => options.pool_connect(),
    };
    Ok(PgConnection::connect_with(&connect).await?)
}

/// True when a Docker engine answers on `DOCKER_HOST` or the default socket.
fn docker_reachable() -> bool {
    if std::env::var_os("DOCKER_HOST").is_some() {
        return true;
    }
    std::os::unix::net::UnixStream::connect("/var/run/docker.sock").is_ok()
}

#[cfg(feature = "containers")]
static CONTAINER: tokio::sync::OnceCell<Result<String, String>> =
    tokio::sync::OnceCell::const_new();

/// The URL of the shared PostgreSQL 16 testcontainer, started on first use.
#[cfg(feature = "containers")]
async fn container_url() -> Result<String, BoxError> {
    let url = CONTAINER.get_or_init(start_container).await;
    url.clone().map_err(|why| Box::new(Unavailable(why)) as BoxError)
}

/// Without the `containers` feature there is no container to start.
#[cfg(not(feature = "containers"))]
async fn container_url() -> Result<String, BoxError> {
    Err(Box::new(Unavailable(format!(
        "{URL_VAR} is not set (and taskgate-postgres was built without the containers feature)"
    ))))
}

#[cfg(feature = "containers")]
async fn start_container() -> Result<String, String> {
    use testcontainers::runners::AsyncRunner;
    use testcontainers::{ImageExt, ReuseDirective};
    use testcontainers_modules::postgres::Postgres;

    let container = Postgres::default()
        .with_tag("16")
        .with_container_name("taskgate-test-postgres-16")
        .with_reuse(ReuseDirective::Always)
        .start()
        .await
        .map_err(|e| format!("starting a PostgreSQL 16 testcontainer failed: {e}"))?;
    let host = container.get_host().await.map_err(|e| e.to_string())?;
    let port = container.get_host_port_ipv4(5432).await.map_err(|e| e.to_string())?;
    // A reusable container outlives this handle (and this process) by design.
    Ok(format!("postgres://postgres:postgres@{host}:{port}/postgres"))
}
