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
/// The URL query parameter that says a connection pooler stands between the broker and the
/// server: `?pooler=transaction` ([`Pooler::Transaction`]) or `?pooler=none` (the default).
/// Taken out of the URL before sqlx reads it.
pub const POOLER_PARAM: &str = "pooler";
/// The URL query parameter giving the direct URL (not through the pooler) of the one
/// connection that `LISTEN`s for other processes' wake-ups ([`PgOptions::listen_url`]);
/// percent-encoded or plain (a plain one must not contain `&` or `#`). Taken out of the URL
/// before sqlx reads it.
pub const LISTEN_URL_PARAM: &str = "listen_url";

/// What stands between the broker and the PostgreSQL server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pooler {
    /// Nothing, or a pooler in session mode (one server connection per client connection):
    /// named prepared statements, session settings, `LISTEN` and session advisory locks work.
    #[default]
    None,
    /// A pooler in transaction mode (PgBouncer `pool_mode = transaction`): a client
    /// connection holds a server connection only for the length of a transaction. The broker
    /// then uses no named prepared statements, runs every statement inside an explicit
    /// transaction, keeps no session state (settings are `SET LOCAL` per transaction,
    /// [`PgOptions::setting`]), takes the migration lock with `pg_advisory_xact_lock`, and
    /// `LISTEN`s only on a direct connection ([`PgOptions::listen_url`]; without one,
    /// waiters in other processes find work by polling and
    /// [`Capabilities::cross_process_wakeups`](taskgate::Capabilities) is false).
    Transaction,
}

impl Pooler {
    /// The URL parameter's value for this mode.
    pub fn as_str(self) -> &'static str {
        match self {
            Pooler::None => "none",
            Pooler::Transaction => "transaction",
        }
    }
}

impl FromStr for Pooler {
    type Err = Error;

    /// `none` or `transaction`; anything else is `InvalidInput { field: "pooler" }`.
    fn from_str(s: &str) -> Result<Pooler> {
        match s {
            "none" => Ok(Pooler::None),
            "transaction" => Ok(Pooler::Transaction),
            other => Err(Error::invalid(
                POOLER_PARAM,
                format!("{other:?}: expected `transaction` or `none`"),
            )),
        }
    }
}

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
    pub(crate) pooler: Pooler,
    pub(crate) listen_url: Option<String>,
    pub(crate) settings: Vec<(String, String)>,
    #[cfg(feature = "test-hooks")]
    pub(crate) log: Option<std::sync::Arc<taskgate_sql::StatementLog>>,
}

impl PgOptions {
    /// Options for `url` (`postgres://user:password@host:port/database?…`), with the
    /// defaults: prefix `taskgate_`, 10 connections, 200 ms poll, a 10 s connect timeout
    /// unless the URL sets `?connect_timeout=N` (seconds, at least 1). A URL sqlx cannot parse
    /// is `InvalidInput { field: "url" }`, naming the URL (password hidden).
    ///
    /// Behind a transaction pooler (PgBouncer `pool_mode = transaction`) add
    /// `?pooler=transaction` ([`Pooler::Transaction`]) and, for wake-ups across processes,
    /// `&listen_url=<direct URL>` ([`PgOptions::listen_url`]); both are taken out before sqlx
    /// reads the URL. A bad value is `InvalidInput` naming the parameter (`pooler`,
    /// `listen_url`).
    pub fn from_url(url: &str) -> Result<PgOptions> {
        let scheme = url.split_once("://").map(|(s, _)| s);
        if !matches!(scheme, Some("postgres" | "postgresql")) {
            let why = "expected a postgres:// or postgresql:// URL";
            return Err(Error::invalid("url", format!("{}: {why}", redact(url))));
        }
        let (url, ours) = take_params(url, &[POOLER_PARAM, LISTEN_URL_PARAM]);
        let url = url.as_str();
        let connect = PgConnectOptions::from_str(url)
            .map_err(|e| Error::invalid("url", format!("{}: {e}", redact(url))))?;
        let mut options = PgOptions::new(connect);
        for (key, value) in ours {
            let value = percent_decode(&value).ok_or_else(|| {
                Error::invalid(
                    if key == POOLER_PARAM { POOLER_PARAM } else { LISTEN_URL_PARAM },
                    "bad percent-encoding",
                )
            })?;
            options = match key.as_str() {
                POOLER_PARAM => options.pooler(value.parse()?),
                _ => options.listen_url(value),
            };
        }
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
            pooler: Pooler::None,
            listen_url: None,
            settings: Vec::new(),
            #[cfg(feature = "test-hooks")]
            log: None,
        }
    }

    /// Says what stands between the broker and the server ([`Pooler`]; `?pooler=…` in the
    /// URL). There is no detection: a transaction pooler is transparent by design (it passes
    /// the server's parameters through and answers as the server would), so only the
    /// symptoms would tell — a named prepared statement that "already exists" or an unnamed
    /// one that "does not exist" — and by then a statement has failed.
    pub fn pooler(mut self, pooler: Pooler) -> Self {
        self.pooler = pooler;
        self
    }

    /// The pooler mode ([`PgOptions::pooler`]).
    pub fn get_pooler(&self) -> Pooler {
        self.pooler
    }

    /// The URL of the one connection that `LISTEN`s for other processes' wake-ups, when it
    /// must differ from the pool's: behind a transaction pooler, a direct URL of the same
    /// database (`LISTEN` holds a session, which a transaction pooler cannot give). Checked
    /// by [`PgOptions::connect`]: a bad URL is `InvalidInput { field: "listen_url" }`.
    pub fn listen_url(mut self, url: impl Into<String>) -> Self {
        self.listen_url = Some(url.into());
        self
    }

    /// The listen URL ([`PgOptions::listen_url`]), if set.
    pub fn get_listen_url(&self) -> Option<&str> {
        self.listen_url.as_deref()
    }

    /// A server setting (`name`, `value`) for the broker's statements, such as
    /// `("statement_timeout", "5s")` or a `search_path`. Without a pooler it is sent at
    /// connect as a startup option (`-c name=value`, like [`PgOptions::tune_connect`] with
    /// `options`); behind a transaction pooler, which cannot carry session state, it is set
    /// with `set_config(name, value, true)` (`SET LOCAL`) at the start of every transaction
    /// the broker runs. The name must be a setting's name (letters, digits, `_` and `.`):
    /// anything else is `InvalidInput { field: "setting" }` at connect.
    pub fn setting(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.settings.push((name.into(), value.into()));
        self
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
        for (name, value) in &self.settings {
            check_setting(name, value)?;
        }
        if self.pooler == Pooler::Transaction && self.connect.get_options().is_some() {
            return Err(Error::invalid(
                "options",
                "startup options (the URL's `options`, PGOPTIONS, tune_connect) cannot pass a \
                 transaction pooler: use PgOptions::setting, set per transaction",
            ));
        }
        self.listen_connect().map(|_| ())
    }

    /// The connect options of the pooled connections, as the pooler mode needs them: behind
    /// a transaction pooler no statement cache (sqlx still names a statement it was asked to
    /// keep, so every statement is also sent unnamed) and no `extra_float_digits` startup
    /// parameter (PgBouncer refuses unknown ones unless told to ignore them); without a
    /// pooler the settings as startup options.
    pub(crate) fn pool_connect(&self) -> PgConnectOptions {
        match self.pooler {
            Pooler::Transaction => {
                self.connect.clone().statement_cache_capacity(0).extra_float_digits(None)
            }
            Pooler::None if self.settings.is_empty() => self.connect.clone(),
            Pooler::None => self.connect.clone().options(self.settings.iter().cloned()),
        }
    }

    /// The connect options of the listening connection: the listen URL's when set (with the
    /// settings as startup options: it is a direct connection), else `None` when behind a
    /// transaction pooler (nobody listens), else the pool's.
    pub(crate) fn listen_connect(&self) -> Result<Option<PgConnectOptions>> {
        let Some(url) = &self.listen_url else {
            return Ok(match self.pooler {
                Pooler::Transaction => None,
                Pooler::None => Some(self.pool_connect()),
            });
        };
        let bad = |why: String| Error::invalid(LISTEN_URL_PARAM, format!("{}: {why}", redact(url)));
        if !matches!(url.split_once("://").map(|(s, _)| s), Some("postgres" | "postgresql")) {
            return Err(bad("expected a postgres:// or postgresql:// URL".to_owned()));
        }
        if url.contains('?') {
            let (_, ours) = take_params(url, &[POOLER_PARAM, LISTEN_URL_PARAM]);
            if !ours.is_empty() {
                return Err(bad("the direct URL takes no pooler or listen_url".to_owned()));
            }
        }
        let connect = PgConnectOptions::from_str(url).map_err(|e| bad(e.to_string()))?;
        Ok(Some(match self.settings.is_empty() {
            true => connect,
            false => connect.options(self.settings.iter().cloned()),
        }))
    }

    /// What a transaction opens with behind a transaction pooler: `BEGIN`, then each setting
    /// as `set_config(name, value, true)` (`SET LOCAL`), in one simple-protocol message. `None`
    /// without a pooler (plain `BEGIN`, settings are startup options) or without settings.
    pub(crate) fn begin_sql(&self) -> Option<String> {
        if self.pooler != Pooler::Transaction || self.settings.is_empty() {
            return None;
        }
        let sets: Vec<String> = self
            .settings
            .iter()
            .map(|(name, value)| format!("set_config('{name}', {}, true)", quote_literal(value)))
            .collect();
        Some(format!("BEGIN; SELECT {}", sets.join(", ")))
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

/// Checks one [`PgOptions::setting`]: the name is a setting's name (so it can be spliced
/// into `set_config('<name>', …)`), the value holds no NUL.
fn check_setting(name: &str, value: &str) -> Result<()> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.') {
        return Err(Error::invalid(
            "setting",
            format!("{name:?} is not a setting name (letters, digits, `_` and `.`)"),
        ));
    }
    if value.contains('\0') {
        return Err(Error::invalid("setting", format!("the value of {name} contains NUL")));
    }
    Ok(())
}

/// `value` as a dollar-quoted literal (no escape processing, whatever
/// `standard_conforming_strings` says), with a tag that first occurs in `value` + tag at the
/// closing position.
fn quote_literal(value: &str) -> String {
    (0u32..)
        .map(|n| format!("$s{n}$"))
        .find(|tag| format!("{value}{tag}").find(tag.as_str()) == Some(value.len()))
        .map(|tag| format!("{tag}{value}{tag}"))
        .unwrap_or_default()
}

/// Splits the query parameters named `keys` out of `url`: the URL without them (the `?` gone
/// when nothing is left), and the taken `(key, raw value)` pairs in order.
fn take_params(url: &str, keys: &[&str]) -> (String, Vec<(String, String)>) {
    let Some((base, query)) = url.split_once('?') else { return (url.to_owned(), Vec::new()) };
    let (query, fragment) = match query.split_once('#') {
        Some((q, f)) => (q, Some(f)),
        None => (query, None),
    };
    let mut kept = Vec::new();
    let mut taken = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if keys.contains(&key) {
            taken.push((key.to_owned(), value.to_owned()));
        } else {
            kept.push(pair);
        }
    }
    let mut out = base.to_owned();
    if !kept.is_empty() {
        out.push('?');
        out.push_str(&kept.join("&"));
    }
    if let Some(f) = fragment {
        out.push('#');
        out.push_str(f);
    }
    (out, taken)
}

/// Decodes `%XX` escapes (`+` stays a `+`: a plain URL's password may hold one); `None` for a
/// bad escape or bytes that are not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
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

    #[test]
    fn the_url_says_transaction_pooler_and_gives_the_listen_url() {
        let encoded = "postgres://u@h:6432/db?pooler=transaction&sslmode=disable\
                       &listen_url=postgres%3A%2F%2Fu%40h%3A5432%2Fdb&connect_timeout=3";
        let plain = "postgres://u@h:6432/db?pooler=transaction&listen_url=postgres://u@h:5432/db";
        for url in [encoded, plain] {
            let Ok(o) = PgOptions::from_url(url) else { panic!("{url} parses") };
            assert_eq!(o.get_pooler(), Pooler::Transaction);
            assert_eq!(o.get_listen_url(), Some("postgres://u@h:5432/db"));
            assert!(o.check().is_ok(), "{url}");
            let listen = o.listen_connect().ok().flatten().map(|c| c.get_port());
            assert_eq!(listen, Some(5432), "the listener goes direct");
        }
        let Ok(o) = PgOptions::from_url(encoded) else { panic!("parses") };
        assert_eq!(o.get_connect_timeout(), Duration::from_secs(3));
        assert_eq!(o.connect.get_port(), 6432, "the pool goes through the pooler");
        let plain = PgOptions::from_url("postgres://u@h/db?pooler=none").map(|o| o.get_pooler());
        assert_eq!(plain.ok(), Some(Pooler::None));
        let default = PgOptions::from_url("postgres://u@h/db").map(|o| o.get_pooler());
        assert_eq!(default.ok(), Some(Pooler::None));
    }

    #[test]
    fn the_pooler_params_are_taken_out_of_the_url_sqlx_reads() {
        let (rest, ours) = take_params(
            "postgres://u@h/db?a=1&pooler=transaction&listen_url=x#frag",
            &[POOLER_PARAM, LISTEN_URL_PARAM],
        );
        assert_eq!(rest, "postgres://u@h/db?a=1#frag");
        let keys: Vec<&str> = ours.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, [POOLER_PARAM, LISTEN_URL_PARAM]);
        let (rest, _) = take_params("postgres://u@h/db?pooler=transaction", &[POOLER_PARAM]);
        assert_eq!(rest, "postgres://u@h/db");
    }

    #[test]
    fn bad_pooler_options_name_their_parameter() {
        let field = |r: Result<PgOptions>| match r.and_then(|o| o.check().map(|()| o)) {
            Err(Error::InvalidInput { field, reason }) => (field, reason),
            other => panic!("expected InvalidInput, got {other:?}"),
        };
        let (f, why) = field(PgOptions::from_url("postgres://u:pw@h/db?pooler=statement"));
        assert_eq!(f, POOLER_PARAM);
        assert!(why.contains("statement") && why.contains("transaction"), "{why}");
        let (f, _) =
            field(PgOptions::from_url("postgres://u@h/db?pooler=transaction&listen_url=%zz"));
        assert_eq!(f, LISTEN_URL_PARAM);
        let (f, why) = field(PgOptions::from_url(
            "postgres://u@h/db?pooler=transaction&listen_url=mysql%3A%2F%2Fu%3Asecret%40h%2Fdb",
        ));
        assert_eq!(f, LISTEN_URL_PARAM);
        assert!(!why.contains("secret"), "{why}");
        let Ok(ok) = PgOptions::from_url("postgres://u@h/db?pooler=transaction") else {
            panic!("parses")
        };
        let (f, _) = field(Ok(ok.clone().setting("search_path; DROP TABLE x", "a")));
        assert_eq!(f, "setting");
        let (f, _) = field(Ok(ok.clone().setting("work_mem", "1\0")));
        assert_eq!(f, "setting");
        let (f, why) = field(Ok(ok.tune_connect(|c| c.options([("work_mem", "64MB")]))));
        assert_eq!(f, "options");
        assert!(why.contains("PgOptions::setting"), "{why}");
    }

    #[test]
    fn settings_are_startup_options_direct_and_set_local_behind_a_pooler() {
        let Ok(direct) = PgOptions::from_url("postgres://u@h/db") else { panic!("parses") };
        let direct = direct.setting("deadlock_timeout", "100ms");
        assert_eq!(direct.begin_sql(), None);
        assert_eq!(direct.pool_connect().get_options(), Some("-c deadlock_timeout=100ms"));
        let Ok(pooled) = PgOptions::from_url("postgres://u@h/db?pooler=transaction") else {
            panic!("parses")
        };
        assert_eq!(pooled.begin_sql(), None, "no settings: a plain BEGIN");
        let pooled = pooled.setting("deadlock_timeout", "100ms").setting("search_path", "a,'b'");
        assert_eq!(pooled.pool_connect().get_options(), None, "no startup options");
        assert_eq!(
            pooled.begin_sql().as_deref(),
            Some(
                "BEGIN; SELECT set_config('deadlock_timeout', $s0$100ms$s0$, true), \
                 set_config('search_path', $s0$a,'b'$s0$, true)"
            )
        );
    }

    #[test]
    fn literals_never_close_early() {
        assert_eq!(quote_literal("plain"), "$s0$plain$s0$");
        assert_eq!(quote_literal("has $s0$ inside"), "$s1$has $s0$ inside$s1$");
        // `x$s0` followed by `$s0$` would hold `$s0$` one character early.
        assert_eq!(quote_literal("x$s0"), "$s1$x$s0$s1$");
        assert_eq!(quote_literal(""), "$s0$$s0$");
    }
}
