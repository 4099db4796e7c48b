//! [`MySqlOptions`]: how a [`MySqlBroker`](crate::MySqlBroker) connects — the URL, the table
//! prefix, the pool size, the poll interval and the lock-wait timeout — and the pool it builds.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::Executor;
use taskgate::{Error, Result};

use crate::adapter::{Health, Probe};
use crate::server::{setup_session, ServerInfo};

/// The table prefix when none is set (the same in every backend).
pub const DEFAULT_PREFIX: &str = "taskgate_";
/// Most connections one broker opens (contract §11.2: blocking claimers poll, and a server's
/// `max_connections` is shared).
pub const DEFAULT_POOL_SIZE: u32 = 10;
/// How often a waiting claimer looks for other processes' writes.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(200);
/// `innodb_lock_wait_timeout` of broker sessions, in seconds, unless the URL sets it.
pub const DEFAULT_LOCK_WAIT_TIMEOUT_SECS: u64 = 5;
/// The URL query parameter that overrides [`DEFAULT_LOCK_WAIT_TIMEOUT_SECS`].
pub const LOCK_WAIT_TIMEOUT_PARAM: &str = "innodb_lock_wait_timeout";

/// How long a call waits for a free pooled connection before it fails.
pub(crate) const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);
/// Default bound on one connection attempt (TCP, TLS, handshake, session set-up): a server that
/// accepts the connection and never answers is given up after this long.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The URL query parameter that sets the connect timeout, in whole seconds.
pub const CONNECT_TIMEOUT_PARAM: &str = "connect_timeout";
/// Connections idle at least this long are pinged before use (server and middlebox timeouts).
const PING_AFTER_IDLE: Duration = Duration::from_secs(30);

/// Connection settings of a MySQL/MariaDB broker; build one with [`MySqlOptions::from_url`].
///
/// ```no_run
/// # async fn demo() -> taskgate::Result<()> {
/// use std::time::Duration;
/// let broker = taskgate_mysql::MySqlOptions::from_url("mysql://app@db:3306/jobs")?
///     .prefix("billing_")
///     .pool_size(20)
///     .poll_interval(Duration::from_millis(100))
///     .connect()
///     .await?;
/// # let _ = broker; Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct MySqlOptions {
    connect: MySqlConnectOptions,
    pub(crate) prefix: String,
    pool_size: u32,
    pub(crate) poll_interval: Duration,
    lock_wait_timeout_secs: u64,
    pub(crate) connect_timeout: Duration,
    #[cfg(feature = "test-hooks")]
    pub(crate) log: Option<Arc<taskgate_sql::StatementLog>>,
    /// The server time of every session, in unix ms (the test factory's server clock).
    #[cfg(feature = "testing")]
    pub(crate) session_clock: Option<Arc<std::sync::atomic::AtomicI64>>,
}

/// A bad URL or option, as the contract's input error.
fn invalid(field: &'static str, reason: impl Into<String>) -> Error {
    Error::invalid(field, reason)
}

/// `mariadb://` is an alias of `mysql://`; sqlx knows only the latter.
fn normalise_scheme(url: &str) -> Result<String> {
    match url.split_once("://") {
        Some(("mysql", rest)) | Some(("mariadb", rest)) => Ok(format!("mysql://{rest}")),
        _ => Err(invalid("url", "expected a mysql:// or mariadb:// URL")),
    }
}

/// The query parameter `name` of `url` in whole seconds (at least 1), if present.
fn seconds_param(url: &str, name: &str) -> Result<Option<u64>> {
    let Some((_, query)) = url.split_once('?') else { return Ok(None) };
    for pair in query.split('&') {
        if let Some(value) = pair.strip_prefix(name).and_then(|v| v.strip_prefix('=')) {
            return match value.parse::<u64>() {
                Ok(secs) if secs >= 1 => Ok(Some(secs)),
                _ => Err(invalid("url", format!("{name} must be a whole number of seconds ≥ 1"))),
            };
        }
    }
    Ok(None)
}

impl MySqlOptions {
    /// Settings for the server at `url` (`mysql://user:password@host:port/database`, or
    /// `mariadb://…`), with the defaults: prefix `taskgate_`, 10 connections, 200 ms polling,
    /// `innodb_lock_wait_timeout` 5 s unless the URL has `?innodb_lock_wait_timeout=N`, a
    /// 10 s connect timeout unless it has `?connect_timeout=N` (seconds, at least 1).
    ///
    /// Sessions always use `utf8mb4` with the server's NO PAD binary collation
    /// (`utf8mb4_nopad_bin` on MariaDB, `utf8mb4_0900_bin` on MySQL) and UTC, whatever the URL
    /// says: names compare by bytes, and server time is read through `UNIX_TIMESTAMP(NOW(3))`.
    pub fn from_url(url: &str) -> Result<MySqlOptions> {
        let normalised = normalise_scheme(url)?;
        let lock_wait = seconds_param(&normalised, LOCK_WAIT_TIMEOUT_PARAM)?;
        let connect_timeout = seconds_param(&normalised, CONNECT_TIMEOUT_PARAM)?
            .map_or(DEFAULT_CONNECT_TIMEOUT, Duration::from_secs);
        let connect = MySqlConnectOptions::from_str(&normalised)
            .map_err(|e| invalid("url", e.to_string()))?
            .charset("utf8mb4")
            .collation("utf8mb4_bin")
            .timezone(Some("+00:00".to_owned()));
        Ok(MySqlOptions {
            connect,
            prefix: DEFAULT_PREFIX.to_owned(),
            pool_size: DEFAULT_POOL_SIZE,
            poll_interval: DEFAULT_POLL_INTERVAL,
            lock_wait_timeout_secs: lock_wait.unwrap_or(DEFAULT_LOCK_WAIT_TIMEOUT_SECS),
            connect_timeout,
            #[cfg(feature = "test-hooks")]
            log: None,
            #[cfg(feature = "testing")]
            session_clock: None,
        })
    }

    /// The table prefix (`^[a-z][a-z0-9_]{0,29}$`, checked when the broker is built).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Most connections the broker opens (at least 1).
    pub fn pool_size(mut self, size: u32) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// How often waiting claimers poll for other processes' writes (real time).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// `innodb_lock_wait_timeout` of broker sessions in seconds (at least 1).
    pub fn lock_wait_timeout_secs(mut self, secs: u64) -> Self {
        self.lock_wait_timeout_secs = secs.max(1);
        self
    }

    /// How long one connection attempt may take — the check `connect` makes, the one a call
    /// makes when the server was lost — before it fails with an error naming this bound
    /// (default 10 s; at least 1 ms). A refused connection fails at once whatever this is.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// The configured connect timeout ([`MySqlOptions::connect_timeout`]).
    pub fn get_connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The configured lock-wait timeout in seconds.
    pub fn get_lock_wait_timeout_secs(&self) -> u64 {
        self.lock_wait_timeout_secs
    }

    /// The configured table prefix.
    pub fn get_prefix(&self) -> &str {
        &self.prefix
    }

    /// Records every statement the broker runs, with its arguments, into `log` (query-plan
    /// tests; feature `test-hooks`).
    #[cfg(feature = "test-hooks")]
    pub fn record_statements(mut self, log: Arc<taskgate_sql::StatementLog>) -> Self {
        self.log = Some(log);
        self
    }

    /// The probe the reachability check runs: one connection outside the pool, set up as the pool
    /// sets up its own.
    pub(crate) fn probe(&self, server: Arc<ServerInfo>) -> Probe {
        Probe { connect: self.connect.clone(), lock_wait: self.lock_wait_timeout_secs, server }
    }

    /// Fixes the server time of every session of the broker to `ms` (unix milliseconds,
    /// read again each time a connection is taken from the pool): the test factory's server
    /// clock (`SET timestamp`, which `NOW()` and `UNIX_TIMESTAMP()` follow).
    #[cfg(feature = "testing")]
    pub(crate) fn session_clock(mut self, ms: Arc<std::sync::atomic::AtomicI64>) -> Self {
        self.session_clock = Some(ms);
        self
    }

    /// The statement that sets a session's time from the test clock, if there is one.
    fn clock_statement(&self) -> impl Fn() -> Option<String> + Send + Sync + Clone + 'static {
        #[cfg(feature = "testing")]
        let clock = self.session_clock.clone();
        move || {
            #[cfg(feature = "testing")]
            if let Some(ms) = &clock {
                let ms = ms.load(std::sync::atomic::Ordering::SeqCst);
                return Some(format!("SET timestamp = {}.{:03}", ms / 1000, ms % 1000));
            }
            None
        }
    }

    /// The pool, opened lazily: no connection is made until the first statement. Each new
    /// connection is set up by [`setup_session`] (READ COMMITTED, the configured lock-wait
    /// timeout, the NO PAD collation `server` names). An idle connection is pinged before use
    /// only when it idled long or `health` suspects the pool.
    pub(crate) fn pool(&self, health: Arc<Health>, server: Arc<ServerInfo>) -> MySqlPool {
        let lock_wait = self.lock_wait_timeout_secs;
        let clock = self.clock_statement();
        let clock_on_connect = clock.clone();
        MySqlPoolOptions::new()
            .max_connections(self.pool_size)
            .min_connections(0)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .test_before_acquire(false)
            .before_acquire(move |conn, meta| {
                let check = health.suspect() || meta.idle_for >= PING_AFTER_IDLE;
                let set_clock = clock();
                Box::pin(async move {
                    if check {
                        sqlx::Connection::ping(conn).await?;
                    }
                    if let Some(sql) = set_clock {
                        conn.execute(sql.as_str()).await?;
                    }
                    Ok(true)
                })
            })
            .after_connect(move |conn, _meta| {
                let server = server.clone();
                let set_clock = clock_on_connect();
                Box::pin(async move {
                    setup_session(conn, lock_wait, &server).await?;
                    if let Some(sql) = set_clock {
                        conn.execute(sql.as_str()).await?;
                    }
                    Ok(())
                })
            })
            .connect_lazy_with(self.connect.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_schemes_are_accepted() {
        assert!(MySqlOptions::from_url("mysql://root@127.0.0.1:3306/test").is_ok());
        assert!(MySqlOptions::from_url("mariadb://root@127.0.0.1:3306/test").is_ok());
        let bad = MySqlOptions::from_url("postgres://x/y").err();
        assert!(matches!(bad, Some(Error::InvalidInput { field: "url", .. })));
    }

    #[test]
    fn lock_wait_timeout_defaults_to_five_unless_the_url_sets_it() {
        let default = MySqlOptions::from_url("mysql://root@h/db").ok();
        assert_eq!(default.map(|o| o.get_lock_wait_timeout_secs()), Some(5));
        let set = MySqlOptions::from_url("mysql://root@h/db?innodb_lock_wait_timeout=12").ok();
        assert_eq!(set.map(|o| o.get_lock_wait_timeout_secs()), Some(12));
        let bad = MySqlOptions::from_url("mysql://root@h/db?innodb_lock_wait_timeout=soon").err();
        assert!(matches!(bad, Some(Error::InvalidInput { field: "url", .. })));
    }

    #[test]
    fn connect_timeout_defaults_to_ten_seconds_unless_the_url_sets_it() {
        let timeout = |url: &str| MySqlOptions::from_url(url).map(|o| o.get_connect_timeout());
        assert_eq!(timeout("mysql://root@h/db").ok(), Some(DEFAULT_CONNECT_TIMEOUT));
        let set = timeout("mysql://root@h/db?connect_timeout=3").ok();
        assert_eq!(set, Some(Duration::from_secs(3)));
        let bad = timeout("mysql://root@h/db?connect_timeout=0").err();
        assert!(matches!(bad, Some(Error::InvalidInput { field: "url", .. })));
    }

    #[test]
    fn defaults() {
        let o = MySqlOptions::from_url("mysql://root@h/db").ok();
        assert_eq!(o.as_ref().map(MySqlOptions::get_prefix), Some(DEFAULT_PREFIX));
        assert_eq!(o.map(|o| (o.pool_size, o.poll_interval)), Some((10, DEFAULT_POLL_INTERVAL)));
    }
}
