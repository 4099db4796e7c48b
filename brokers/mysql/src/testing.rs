//! The brokertest factory for MySQL/MariaDB (extensions §E11): every case gets a fresh random
//! table prefix (`tgtest_<lowercase ulid>_`, 30 characters) on a shared server, and its tables
//! are dropped in [`Storage::cleanup`].
//!
//! The server is `TASKGATE_MYSQL_URL` when set. Otherwise, with the `containers` feature and a
//! reachable Docker, one MySQL 8.4 container is started per test process. Neither ⇒
//! [`brokertest::Unavailable`]: cases skip loudly, or fail with `TASKGATE_REQUIRE_DB=1`.
//! The first storage of a process on a server drops `tgtest_` tables older than an hour
//! (left behind by killed test runs).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use brokertest::{Factory, ServerClock, Storage, Unavailable};
use sqlx::{Connection, Executor, MySqlConnection, Row};
use taskgate::{BoxError, Broker, Timestamp};

use crate::{MySqlBroker, MySqlOptions};

/// The environment variable naming the test server.
pub const URL_VAR: &str = "TASKGATE_MYSQL_URL";
/// Every test prefix starts with this.
pub const TEST_PREFIX_START: &str = "tgtest_";
/// Test tables older than this are swept at factory start.
pub const STALE_AFTER: Duration = Duration::from_secs(3600);
/// Connections per test handle: small, so parallel tests stay far below `max_connections`.
pub const TEST_POOL_SIZE: u32 = 4;
/// Poll interval of test handles (the contract's integration tests use 20 ms).
pub const TEST_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// A fresh test prefix: `tgtest_` + a new lowercase ULID shortened to 22 characters + `_` (30
/// characters, the most a prefix may have). The ULID keeps its 10-character time part, which
/// dates the tables, and its last 12 characters: the generator is monotonic, so IDs made in
/// the same millisecond differ at the end.
pub fn fresh_prefix() -> String {
    let ulid = taskgate::id::new_ulid().to_ascii_lowercase();
    let time = ulid.get(..10).unwrap_or_default();
    let tail = ulid.get(ulid.len().saturating_sub(12)..).unwrap_or_default();
    format!("{TEST_PREFIX_START}{time}{tail}_")
}

/// When a test prefix was made, from its ULID's time part (`None` for other names).
pub fn prefix_created_at(table: &str) -> Option<SystemTime> {
    const CROCKFORD: &[u8] = b"0123456789abcdefghjkmnpqrstvwxyz";
    let time = table.strip_prefix(TEST_PREFIX_START)?.get(..10)?;
    let mut ms: u64 = 0;
    for c in time.bytes() {
        let digit = CROCKFORD.iter().position(|d| *d == c)?;
        ms = ms.checked_mul(32)?.checked_add(u64::try_from(digit).ok()?)?;
    }
    UNIX_EPOCH.checked_add(Duration::from_millis(ms))
}

/// Hands each contract case a fresh table prefix on a MySQL/MariaDB server.
#[derive(Clone, Debug)]
pub struct MySqlFactory {
    url: Option<String>,
    pool_size: u32,
}

impl MySqlFactory {
    /// A factory on the server at `url` (`mysql://` or `mariadb://`).
    pub fn from_url(url: impl Into<String>) -> MySqlFactory {
        MySqlFactory { url: Some(url.into()), pool_size: TEST_POOL_SIZE }
    }

    /// A factory on `TASKGATE_MYSQL_URL`, else a MySQL 8.4 container (feature `containers`,
    /// Docker reachable), else unavailable.
    pub fn from_env() -> MySqlFactory {
        let url = std::env::var(URL_VAR).ok().filter(|u| !u.trim().is_empty());
        MySqlFactory { url, pool_size: TEST_POOL_SIZE }
    }

    /// Connections per handle (default 4).
    pub fn with_pool_size(mut self, size: u32) -> MySqlFactory {
        self.pool_size = size.max(1);
        self
    }

    /// The server URL, starting the container if needed; `Unavailable` when there is none.
    pub async fn server_url(&self) -> Result<String, BoxError> {
        match &self.url {
            Some(url) => Ok(url.clone()),
            None => container_url().await,
        }
    }

    /// Fresh, swept storage (the same as [`Factory::storage`], with the concrete type).
    pub async fn mysql_storage(&self) -> Result<MySqlStorage, BoxError> {
        let url = self.server_url().await?;
        sweep_once(&url).await?;
        Ok(MySqlStorage { url, prefix: fresh_prefix(), pool_size: self.pool_size })
    }
}

#[async_trait]
impl Factory for MySqlFactory {
    fn name(&self) -> String {
        crate::NAME.to_owned()
    }

    async fn storage(&self) -> Result<Box<dyn Storage>, BoxError> {
        Ok(Box::new(self.mysql_storage().await?))
    }
}

/// One case's tables: a prefix on the test server.
#[derive(Clone, Debug)]
pub struct MySqlStorage {
    url: String,
    prefix: String,
    pool_size: u32,
}

impl MySqlStorage {
    /// The server URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// This storage's table prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Options for a handle on this storage: its prefix, the test pool size and poll interval.
    pub fn options(&self) -> taskgate::Result<MySqlOptions> {
        Ok(MySqlOptions::from_url(&self.url)?
            .prefix(self.prefix.clone())
            .pool_size(self.pool_size)
            .poll_interval(TEST_POLL_INTERVAL))
    }

    /// A new, not initialised handle with the concrete type.
    pub fn mysql_handle(&self) -> taskgate::Result<MySqlBroker> {
        self.options()?.connect_lazy()
    }

    /// Drops every table of this storage.
    pub async fn drop_tables(&self) -> Result<(), BoxError> {
        let mut conn = MySqlConnection::connect(&mysql_url(&self.url)).await?;
        let dropped = drop_tables_like(&mut conn, &self.prefix).await;
        conn.close().await?;
        dropped
    }
}

#[async_trait]
impl Storage for MySqlStorage {
    async fn handle(&self) -> Result<Arc<dyn Broker>, BoxError> {
        Ok(Arc::new(self.mysql_handle()?))
    }

    async fn handle_with_prefix(&self, prefix: &str) -> Option<taskgate::Result<Arc<dyn Broker>>> {
        let built = MySqlOptions::from_url(&self.url).and_then(|o| {
            o.prefix(prefix)
                .pool_size(self.pool_size)
                .poll_interval(TEST_POLL_INTERVAL)
                .connect_lazy()
        });
        Some(built.map(|b| Arc::new(b) as Arc<dyn Broker>))
    }

    async fn handle_polling_every(
        &self,
        interval: Duration,
    ) -> Option<Result<Arc<dyn Broker>, BoxError>> {
        let built = self.options().and_then(|o| o.poll_interval(interval).connect_lazy());
        Some(built.map(|b| Arc::new(b) as Arc<dyn Broker>).map_err(Into::into))
    }

    /// Every session of a handle on this clock runs `SET timestamp = <the clock>` when the
    /// pool hands it out: `NOW()` and `UNIX_TIMESTAMP()`, the engine's server time, follow.
    async fn server_clock(
        &self,
        start: Timestamp,
    ) -> Option<Result<Box<dyn ServerClock>, BoxError>> {
        let ms = Arc::new(std::sync::atomic::AtomicI64::new(start.as_millis()));
        Some(Ok(Box::new(SessionClock { storage: self.clone(), ms })))
    }

    async fn cleanup(&self) -> Result<(), BoxError> {
        self.drop_tables().await
    }
}

/// The server clock of one storage: the time its handles' sessions are set to.
struct SessionClock {
    storage: MySqlStorage,
    ms: Arc<std::sync::atomic::AtomicI64>,
}

#[async_trait]
impl ServerClock for SessionClock {
    async fn handle(&self) -> Result<Arc<dyn Broker>, BoxError> {
        let options = self.storage.options()?.session_clock(self.ms.clone());
        Ok(Arc::new(options.connect_lazy()?))
    }

    async fn set(&self, at: Timestamp) -> Result<(), BoxError> {
        self.ms.store(at.as_millis(), std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

/// sqlx knows only `mysql://`.
fn mysql_url(url: &str) -> String {
    match url.strip_prefix("mariadb://") {
        Some(rest) => format!("mysql://{rest}"),
        None => url.to_owned(),
    }
}

/// `LIKE` pattern matching names that start with `prefix` (`_` and `%` escaped).
fn like_prefix(prefix: &str) -> String {
    let mut pattern = prefix.replace('\\', "\\\\").replace('_', "\\_").replace('%', "\\%");
    pattern.push('%');
    pattern
}

async fn tables_like(conn: &mut MySqlConnection, prefix: &str) -> Result<Vec<String>, BoxError> {
    let rows = sqlx::query(
        "SELECT CAST(table_name AS CHAR) FROM information_schema.tables \
         WHERE table_schema = DATABASE() AND table_name LIKE ?",
    )
    .bind(like_prefix(prefix))
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.iter().map(|r| r.try_get::<String, _>(0)).collect::<Result<_, _>>()?)
}

async fn drop_tables_like(conn: &mut MySqlConnection, prefix: &str) -> Result<(), BoxError> {
    let tables = tables_like(conn, prefix).await?;
    if tables.is_empty() {
        return Ok(());
    }
    let list = tables.iter().map(|t| format!("`{t}`")).collect::<Vec<_>>().join(", ");
    conn.execute(format!("DROP TABLE IF EXISTS {list}").as_str()).await?;
    Ok(())
}

/// Drops `tgtest_` tables older than an hour, once per server per process.
async fn sweep_once(url: &str) -> Result<(), BoxError> {
    static SWEPT: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    let first = SWEPT
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(url.to_owned());
    if !first {
        return Ok(());
    }
    let mut conn = match MySqlConnection::connect(&mysql_url(url)).await {
        Ok(conn) => conn,
        Err(e) => return Err(Box::new(Unavailable(format!("{}: {e}", redact(url))))),
    };
    let stale = SystemTime::now().checked_sub(STALE_AFTER).unwrap_or(UNIX_EPOCH);
    let mut prefixes: Vec<String> = tables_like(&mut conn, TEST_PREFIX_START)
        .await?
        .into_iter()
        .filter(|t| prefix_created_at(t).is_some_and(|at| at < stale))
        .filter_map(|t| t.get(..30).map(str::to_owned))
        .collect();
    prefixes.dedup();
    for prefix in prefixes {
        drop_tables_like(&mut conn, &prefix).await?;
    }
    conn.close().await?;
    Ok(())
}

/// The URL without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://…@{}", &url[..s], &url[at + 1..]),
        _ => url.to_owned(),
    }
}

#[cfg(feature = "containers")]
async fn container_url() -> Result<String, BoxError> {
    static STARTED: OnceLock<Result<String, String>> = OnceLock::new();
    if let Some(done) = STARTED.get() {
        return done.clone().map_err(|why| Box::new(Unavailable(why)) as BoxError);
    }
    let started = tokio::task::spawn_blocking(|| STARTED.get_or_init(container::start).clone())
        .await
        .map_err(|e| Box::new(Unavailable(format!("container start panicked: {e}"))) as BoxError)?;
    started.map_err(|why| Box::new(Unavailable(why)) as BoxError)
}

#[cfg(not(feature = "containers"))]
async fn container_url() -> Result<String, BoxError> {
    Err(Box::new(Unavailable(format!(
        "{URL_VAR} is not set (and taskgate-mysql was built without the containers feature)"
    ))))
}

#[cfg(feature = "containers")]
mod container {
    //! One MySQL 8.4 container per test process, kept for the life of the process.

    use std::sync::OnceLock;

    use testcontainers::runners::SyncRunner;
    use testcontainers::{Container, ImageExt};
    use testcontainers_modules::mysql::Mysql;

    static CONTAINER: OnceLock<Container<Mysql>> = OnceLock::new();

    fn docker_reachable() -> bool {
        std::env::var_os("DOCKER_HOST").is_some()
            || std::path::Path::new("/var/run/docker.sock").exists()
    }

    /// Starts the container; the URL, or why there is none.
    pub(super) fn start() -> Result<String, String> {
        if !docker_reachable() {
            return Err(format!("{} is not set and Docker is not reachable", super::URL_VAR));
        }
        let container = Mysql::default().with_tag("8.4").start().map_err(|e| {
            format!("{} is not set and the MySQL 8.4 container did not start: {e}", super::URL_VAR)
        })?;
        let host = container.get_host().map_err(|e| e.to_string())?;
        let port = container.get_host_port_ipv4(3306).map_err(|e| e.to_string())?;
        let url = format!("mysql://root@{host}:{port}/test");
        let _ = CONTAINER.set(container);
        Ok(url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_valid_unique_and_dated() {
        let a = fresh_prefix();
        let b = fresh_prefix();
        assert_ne!(a, b);
        assert_eq!(a.len(), 30);
        assert!(taskgate::validate::validate_prefix(&a).is_ok(), "{a}");
        let made = prefix_created_at(&format!("{a}tasks")).and_then(|t| t.elapsed().ok());
        assert!(made.is_some_and(|age| age < Duration::from_secs(60)), "{a}: {made:?}");
        assert_eq!(prefix_created_at("other_tasks"), None);
    }

    #[test]
    fn like_patterns_escape_underscores() {
        assert_eq!(like_prefix("tg_a_"), "tg\\_a\\_%");
    }

    #[test]
    fn redaction_hides_credentials() {
        assert_eq!(redact("mysql://u:secret@h:3306/db"), "mysql://…@h:3306/db");
        assert_eq!(redact("mysql://h/db"), "mysql://h/db");
    }
}
