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
/// Default bound on one connection attempt (TCP, TLS, start-up and authentication): a server
/// that accepts the connection and never answers is given up after this long.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The URL query parameter that sets the connect timeout, in whole seconds (libpq's name).
pub const CONNECT_TIMEOUT_PARAM: &str = "connect_timeout";

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
    pub(crate) connect_timeout: Duration,
    pub(crate) application_name: Option<String>,
    #[cfg(feature = "test-hooks")]
    pub(crate) log: Option<std::sync::Arc<taskgate_sql::StatementLog>>,
}

impl PgOptions {
    /// Options for `url` (`postgres://user:password@host:port/database?…`), with the
    /// defaults: prefix `taskgate_`, 10 connections, 200 ms poll, a 10 s connect timeout
    /// unless the URL sets `?connect_timeout=N` (seconds, at least 1). A URL sqlx cannot parse
    /// is `InvalidInput { field: "url" }`, naming the URL (password hidden).
    pub fn from_url(url: &str) -> Result<PgOptions> {
        let scheme = url.split_once("://").map(|(s, _)| s);
        if !matches!(scheme, Some("postgres" | "postgresql")) {
            let why = "expected a postgres:// or postgresql:// URL";
            return Err(Error::invalid("url", format!("{}: {why}", redact(url))));
        }
        let connect = PgConnectOptions::from_str(url)
            .map_err(|e| Error::invalid("url", format!("{}: {e}", redact(url))))?;
        let options = PgOptions::new(connect);
        Ok(match connect_timeout_param(url)? {
            Some(timeout) => options.connect_timeout(timeout),
            None => options,
        })
    }

    /// Options for already-built sqlx connect options, with the defaults.
    pub fn new(connect: PgConnectOptions) -> PgOptions {
        PgOptions {
            connect,
            prefix: DEFAULT_PREFIX.to_owned(),
            pool_size: DEFAULT_POOL_SIZE,
            poll_interval: DEFAULT_POLL_INTERVAL,
            acquire_timeout: DEFAULT_ACQUIRE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
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

    /// How long one connection attempt may take — the check `connect` makes, the one a call
    /// makes when the server was lost, the migration session `init` opens — before it fails
    /// with an error naming this bound (default 10 s; more than zero). A refused connection
    /// fails at once whatever this is.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The connect timeout ([`PgOptions::connect_timeout`]).
    pub fn get_connect_timeout(&self) -> Duration {
        self.connect_timeout
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
        if self.connect_timeout.is_zero() {
            return Err(Error::invalid("connect_timeout", "must be longer than zero"));
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
    /// once with the driver's cause (`Connection refused`, a failed name lookup), and a server
    /// that does not answer fails after the connect timeout, naming it.
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

/// The `connect_timeout` query parameter of `url` in seconds, if present (libpq's meaning,
/// except that it must be at least 1: taskgate never waits without a bound).
fn connect_timeout_param(url: &str) -> Result<Option<Duration>> {
    let Some((_, query)) = url.split_once('?') else { return Ok(None) };
    let value = query.split('&').find_map(|pair| {
        pair.strip_prefix(CONNECT_TIMEOUT_PARAM).and_then(|rest| rest.strip_prefix('='))
    });
    match value.map(str::parse::<u64>) {
        None => Ok(None),
        Some(Ok(secs)) if secs >= 1 => Ok(Some(Duration::from_secs(secs))),
        Some(_) => Err(Error::invalid(
            "url",
            format!(
                "{}: {CONNECT_TIMEOUT_PARAM} must be a whole number of seconds, at least 1",
                redact(url)
            ),
        )),
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
        bad(ok.clone().poll_interval(Duration::ZERO), "poll_interval");
        bad(ok.connect_timeout(Duration::ZERO), "connect_timeout");
    }

    #[test]
    fn the_url_may_set_the_connect_timeout_in_seconds() {
        let timeout = |url: &str| PgOptions::from_url(url).map(|o| o.get_connect_timeout());
        assert_eq!(timeout("postgres://u@h/db").ok(), Some(DEFAULT_CONNECT_TIMEOUT));
        let set = timeout("postgres://u@h/db?sslmode=disable&connect_timeout=3").ok();
        assert_eq!(set, Some(Duration::from_secs(3)));
        for bad in
            ["postgres://u:pw@h/db?connect_timeout=0", "postgres://u:pw@h/db?connect_timeout=soon"]
        {
            match timeout(bad) {
                Err(Error::InvalidInput { field: "url", reason }) => {
                    assert!(
                        reason.contains("connect_timeout") && !reason.contains("pw"),
                        "{reason}"
                    );
                }
                other => panic!("{bad}: expected InvalidInput url, got {other:?}"),
            }
        }
    }
}
