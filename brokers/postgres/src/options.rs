//! [`PgOptions`]: how a [`PgBroker`](crate::PgBroker) connects — the URL, table prefix, pool
//! size and poll interval — validated before anything touches the network.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use taskgate::{redact_url as redact, validate, Error, Result};

/// Default table prefix.
pub const DEFAULT_PREFIX: &str = "taskgate_";
/// Default connection pool size (contract §11.2).
pub const DEFAULT_POOL_SIZE: u32 = 10;
/// Default interval at which a waiting claimer polls for other processes' writes; the safety
/// net under LISTEN/NOTIFY.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(200);
/// Default wait for a free pooled connection.
pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);

/// Connection options of a PostgreSQL broker.
///
/// ```no_run
/// # async fn demo() -> taskgate::Result<()> {
/// use std::time::Duration;
/// use taskgate_postgres::PgOptions;
///
/// let broker = PgOptions::from_url("postgres://app@db.internal/app")?
///     .prefix("billing_")
///     .pool_size(20)
///     .poll_interval(Duration::from_millis(500))
///     .connect()
///     .await?;
/// # let _ = broker; Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct PgOptions {
    pub(crate) connect: PgConnectOptions,
    pub(crate) prefix: String,
    pub(crate) pool_size: u32,
    pub(crate) poll_interval: Duration,
    pub(crate) acquire_timeout: Duration,
    pub(crate) application_name: Option<String>,
    #[cfg(feature = "test-hooks")]
    pub(crate) log: Option<std::sync::Arc<taskgate_sql::StatementLog>>,
}

impl PgOptions {
    /// Options for `url` (`postgres://user:password@host:port/database?…`), with the
    /// defaults: prefix `taskgate_`, 10 connections, 200 ms poll. A URL sqlx cannot parse is
    /// `InvalidInput { field: "url" }`, naming the URL (password hidden).
    pub fn from_url(url: &str) -> Result<PgOptions> {
        let scheme = url.split_once("://").map(|(s, _)| s);
        if !matches!(scheme, Some("postgres" | "postgresql")) {
            let why = "expected a postgres:// or postgresql:// URL";
            return Err(Error::invalid("url", format!("{}: {why}", redact(url))));
        }
        let connect = PgConnectOptions::from_str(url)
            .map_err(|e| Error::invalid("url", format!("{}: {e}", redact(url))))?;
        Ok(PgOptions::new(connect))
    }

    /// Options for already-built sqlx connect options, with the defaults.
    pub fn new(connect: PgConnectOptions) -> PgOptions {
        PgOptions {
            connect,
            prefix: DEFAULT_PREFIX.to_owned(),
            pool_size: DEFAULT_POOL_SIZE,
            poll_interval: DEFAULT_POLL_INTERVAL,
            acquire_timeout: DEFAULT_ACQUIRE_TIMEOUT,
            application_name: None,
            #[cfg(feature = "test-hooks")]
            log: None,
        }
    }

    /// The table prefix (`^[a-z][a-z0-9_]{0,29}$`, checked by [`PgOptions::connect`]).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Most pooled connections (at least 1). A listener connection comes on top. Up to one less
    /// than this many are lent to single statements (the one-statement claims, acks and
    /// enqueues, and the reads), which keep them between statements (`taskgate_sql::Lanes`).
    pub fn pool_size(mut self, size: u32) -> Self {
        self.pool_size = size;
        self
    }

    /// How often a waiting claimer polls when no notification arrives (real time, > 0).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// How long an operation waits for a free pooled connection.
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = timeout;
        self
    }

    /// The `application_name` of the pooled connections (the listener's gets `:listen`
    /// appended). Default: `taskgate:<handle tag>`.
    pub fn application_name(mut self, name: impl Into<String>) -> Self {
        self.application_name = Some(name.into());
        self
    }

    /// Records every statement the handle runs, with its arguments, into `log` (tests read
    /// query plans with them; feature `test-hooks`).
    #[cfg(feature = "test-hooks")]
    pub fn record_statements(mut self, log: std::sync::Arc<taskgate_sql::StatementLog>) -> Self {
        self.log = Some(log);
        self
    }

    /// Adjusts the sqlx connect options (server settings, TLS, timeouts …).
    pub fn tune_connect(mut self, tune: impl FnOnce(PgConnectOptions) -> PgConnectOptions) -> Self {
        self.connect = tune(self.connect);
        self
    }

    /// Checks every option; the prefix first, since it is spliced into SQL.
    pub(crate) fn check(&self) -> Result<()> {
        validate::validate_prefix(&self.prefix)?;
        if self.pool_size == 0 {
            return Err(Error::invalid("pool_size", "must be at least 1"));
        }
        if self.poll_interval.is_zero() {
            return Err(Error::invalid("poll_interval", "must be longer than zero"));
        }
        Ok(())
    }

    /// Builds the broker without touching the server: the pools connect on first use, and
    /// `init` fails if the server cannot be reached. Fails only on bad options (a bad prefix
    /// is `InvalidInput { field: "prefix" }`). Must be called inside a Tokio runtime.
    pub fn connect_lazy(self) -> Result<crate::PgBroker> {
        crate::PgBroker::build(self)
    }

    /// Builds the broker and checks that the server answers: an unreachable server fails at
    /// once with the driver's cause (`Connection refused`, a failed name lookup).
    pub async fn connect(self) -> Result<crate::PgBroker> {
        let broker = self.connect_lazy()?;
        let probe = broker.engine().adapter().read("SELECT 1", &[], &[taskgate_sql::Kind::Int]);
        if let Err(e) = probe.await {
            // Closed, not dropped: the listener task stops now instead of retrying its
            // connection until the pool's acquire timeout.
            let _ = taskgate::Broker::close(&broker).await;
            return Err(taskgate::Error::backend("postgres", e));
        }
        Ok(broker)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_urls_name_the_url() {
        let e = PgOptions::from_url("mysql://u:pw@h/db").err();
        match e {
            Some(Error::InvalidInput { field: "url", reason }) => {
                assert!(reason.contains("mysql://u:***@h/db"), "{reason}");
                assert!(!reason.contains("pw"), "{reason}");
            }
            other => panic!("expected InvalidInput url, got {other:?}"),
        }
    }

    #[test]
    fn bad_options_are_rejected_before_io() {
        let ok = PgOptions::from_url("postgres://u@h/db").ok();
        let Some(ok) = ok else { panic!("a plain URL parses") };
        assert!(ok.clone().check().is_ok());
        let bad = |o: PgOptions, field: &str| match o.check() {
            Err(Error::InvalidInput { field: f, .. }) => assert_eq!(f, field),
            other => panic!("expected InvalidInput {field}, got {other:?}"),
        };
        bad(ok.clone().prefix("x; DROP TABLE"), "prefix");
        bad(ok.clone().pool_size(0), "pool_size");
        bad(ok.poll_interval(Duration::ZERO), "poll_interval");
    }
}
