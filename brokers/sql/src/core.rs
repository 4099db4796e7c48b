//! The engine's shared state ([`Core`]), the per-transaction context ([`Tx`]) every operation
//! runs on, and the transaction retry loop of contract §11.2 ([`in_tx!`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use taskgate::wake::{Lifecycle, WakeHub};
use taskgate::{Error, ResolvedOptions, Task, Timestamp};

use crate::dialect::{rewrite_placeholders, Placeholder, RetryClass, TimeSource};
use crate::{Adapter, DbError, Dialect, Kind, Row, SqlConn, Value};

/// Attempts of one write transaction when the dialect says "retry at once" (§11.2).
pub(crate) const MAX_TX_ATTEMPTS: u32 = 5;
/// Attempts when the dialect says "retry at most once more" (MySQL 1205).
pub(crate) const LIMITED_TX_ATTEMPTS: u32 = 2;

/// Why a transaction body stopped: a driver error (classified by the retry loop) or a contract
/// outcome (returned as is, after rollback).
#[derive(Debug)]
pub(crate) enum TxFail {
    Db(DbError),
    Op(Error),
    /// The caller went away while waiting for the writer; nothing was done.
    Abandoned,
}

impl From<DbError> for TxFail {
    fn from(e: DbError) -> Self {
        TxFail::Db(e)
    }
}

impl From<Error> for TxFail {
    fn from(e: Error) -> Self {
        TxFail::Op(e)
    }
}

impl From<crate::value::DecodeError> for TxFail {
    fn from(e: crate::value::DecodeError) -> Self {
        TxFail::Db(DbError::Decode(Box::new(e)))
    }
}

/// A hook tests install to simulate a crash inside a write transaction, after its writes and
/// before its commit (contract §11.3 test 2). Called with the operation's name.
#[cfg(feature = "test-hooks")]
pub type BeforeCommitHook = Arc<dyn Fn(&str) + Send + Sync>;

/// A sized statement's cache key: its name and the list lengths it was built for.
type SizedKey = (&'static str, (usize, usize));

/// Everything one broker handle shares between its operations and spawned claim tasks.
pub(crate) struct Core {
    pub(crate) adapter: Arc<dyn Adapter>,
    pub(crate) dialect: Arc<dyn Dialect>,
    pub(crate) prefix: String,
    pub(crate) poll_interval: Duration,
    pub(crate) life: Lifecycle,
    pub(crate) hub: WakeHub,
    pub(crate) retries: AtomicU64,
    /// The last claim filled its batch: the next one skips the read-only probe.
    pub(crate) last_claim_full: std::sync::atomic::AtomicBool,
    /// Claims in flight hold a read guard until their tasks are delivered or requeued;
    /// `close` takes the write side to wait for them.
    pub(crate) inflight: Arc<tokio::sync::RwLock<()>>,
    sql_cache: RwLock<HashMap<(usize, usize), Arc<str>>>,
    sized_cache: RwLock<HashMap<SizedKey, Arc<str>>>,
    wake_sql: Option<String>,
    #[cfg(feature = "test-hooks")]
    pub(crate) before_commit: RwLock<Option<BeforeCommitHook>>,
}

impl Core {
    pub(crate) fn new(
        adapter: Arc<dyn Adapter>,
        dialect: Arc<dyn Dialect>,
        prefix: String,
        poll_interval: Duration,
    ) -> Core {
        let wake_sql = dialect.wake_sql(&prefix);
        Core {
            adapter,
            dialect,
            prefix,
            poll_interval,
            life: Lifecycle::new(),
            hub: WakeHub::new(),
            retries: AtomicU64::new(0),
            last_claim_full: std::sync::atomic::AtomicBool::new(false),
            inflight: Arc::new(tokio::sync::RwLock::new(())),
            sql_cache: RwLock::new(HashMap::new()),
            sized_cache: RwLock::new(HashMap::new()),
            wake_sql,
            #[cfg(feature = "test-hooks")]
            before_commit: RwLock::new(None),
        }
    }

    /// The backend name for errors.
    pub(crate) fn name(&self) -> &'static str {
        self.dialect.name()
    }

    /// A driver error as the contract's storage failure.
    pub(crate) fn backend_error(&self, e: DbError) -> Error {
        Error::backend(self.name(), e)
    }

    /// A statement template rendered for this dialect and prefix, built once and cached.
    ///
    /// Templates name tables as `{tasks}`, `{deps}`, `{quota}`, `{paused}`; `{lock}` and
    /// `{skip_locked}` are the dialect's locking suffixes, `{now}` its server-time expression
    /// and `{limit_all}` its "no limit" value; `{cols}` is every task column. `?` placeholders are rewritten when the dialect
    /// uses `$n`.
    pub(crate) fn sql(&self, template: &'static str) -> Arc<str> {
        let key = (template.as_ptr().addr(), template.len());
        if let Some(hit) = self.sql_cache.read().unwrap_or_else(|p| p.into_inner()).get(&key) {
            return hit.clone();
        }
        let rendered: Arc<str> = self.render(template).into();
        self.sql_cache.write().unwrap_or_else(|p| p.into_inner()).insert(key, rendered.clone());
        rendered
    }

    /// A statement that varies with list lengths, built by `build` (then rendered) once per
    /// `(name, sizes)` and cached.
    pub(crate) fn sql_sized(
        &self,
        name: &'static str,
        sizes: (usize, usize),
        build: impl FnOnce() -> String,
    ) -> Arc<str> {
        let key = (name, sizes);
        let cache = self.sized_cache.read().unwrap_or_else(|p| p.into_inner());
        if let Some(hit) = cache.get(&key) {
            return hit.clone();
        }
        drop(cache);
        let rendered: Arc<str> = self.render(&build()).into();
        let mut cache = self.sized_cache.write().unwrap_or_else(|p| p.into_inner());
        if cache.len() > 4_096 {
            cache.clear();
        }
        cache.insert(key, rendered.clone());
        rendered
    }

    /// Renders a template built at run time (dynamic `IN (…)` lists); not cached.
    pub(crate) fn render(&self, template: &str) -> String {
        render(template, &self.prefix, &*self.dialect)
    }

    /// The override argument of `COALESCE(?, {now})`: the injected clock's time, the local
    /// clock's for [`TimeSource::Local`], else NULL (the server decides).
    pub(crate) fn now_override(&self, opts: &ResolvedOptions) -> Value {
        match self.local_now(opts) {
            Some(t) => Value::Int(t.as_millis()),
            None => Value::Null(Kind::Int),
        }
    }

    /// "Now" when Rust knows it without asking the server: the injected clock, else the
    /// local clock (`BrokerOptions::local_clock`, by default the system clock) for a dialect
    /// whose time is local. A server's time is never replaced by the local clock.
    pub(crate) fn local_now(&self, opts: &ResolvedOptions) -> Option<Timestamp> {
        match (&opts.injected_clock, self.dialect.time_source()) {
            (Some(clock), _) => Some(clock.now_ms()),
            (None, TimeSource::Local) => Some(opts.clock.now_ms()),
            (None, TimeSource::Server) => None,
        }
    }

    /// True when a failed attempt `attempt` (1-based) should run again; counts the retry.
    pub(crate) fn should_retry(&self, e: &DbError, attempt: u32) -> bool {
        let again = retry_allowed(self.dialect.retry_class(e), attempt);
        if again {
            self.retries.fetch_add(1, Ordering::Relaxed);
        }
        again
    }

    /// The in-transaction wake statement, when the dialect has one.
    pub(crate) fn wake_sql(&self) -> Option<&str> {
        self.wake_sql.as_deref()
    }

    #[cfg(feature = "test-hooks")]
    pub(crate) fn run_before_commit_hook(&self, op: &str) {
        let hook = self.before_commit.read().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(hook) = hook {
            hook(op);
        }
    }

    #[cfg(not(feature = "test-hooks"))]
    pub(crate) fn run_before_commit_hook(&self, _op: &str) {}
}

/// Renders a statement template for `prefix` and `dialect` (see [`Core::sql`]).
pub(crate) fn render(template: &str, prefix: &str, dialect: &dyn Dialect) -> String {
    let p = prefix;
    let sql = template
        .replace("{cols}", crate::row::TASK_COLUMNS)
        .replace("{tasks}", &format!("{p}tasks"))
        .replace("{deps}", &format!("{p}task_deps"))
        .replace("{quota}", &format!("{p}quota"))
        .replace("{paused}", &format!("{p}paused_queues"))
        .replace("{lock}", dialect.lock_clause())
        .replace("{skip_locked}", dialect.skip_locked_clause())
        .replace("{now}", dialect.now_ms_sql())
        .replace("{limit_all}", dialect.limit_all());
    match dialect.placeholder() {
        Placeholder::Question => sql,
        Placeholder::Dollar => rewrite_placeholders(&sql),
    }
}

/// True when a transaction that failed with `class` on attempt `attempt` (1-based) may run
/// again (contract §11.2: 5 attempts for deadlocks, 2 for lock-wait timeouts, else none).
pub(crate) fn retry_allowed(class: RetryClass, attempt: u32) -> bool {
    match class {
        RetryClass::Immediate => attempt < MAX_TX_ATTEMPTS,
        RetryClass::Limited => attempt < LIMITED_TX_ATTEMPTS,
        RetryClass::Never => false,
    }
}

/// Real-time back-off before attempt `attempt + 1`: 5 ms << (attempt − 1) (extensions §E1:
/// infrastructure back-off never waits on the injected clock).
pub(crate) fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(5u64 << attempt.saturating_sub(1).min(6))
}

/// One transaction's context: its connection, the options, "now" (read once), and the
/// snapshots and wake-up it will publish after commit.
pub(crate) struct Tx<'c> {
    pub(crate) conn: &'c mut dyn SqlConn,
    pub(crate) core: &'c Core,
    pub(crate) opts: &'c ResolvedOptions,
    now: Option<Timestamp>,
    pub(crate) snapshots: Vec<Task>,
    pub(crate) woke: bool,
}

impl<'c> Tx<'c> {
    pub(crate) fn new(
        conn: &'c mut dyn SqlConn,
        core: &'c Core,
        opts: &'c ResolvedOptions,
    ) -> Tx<'c> {
        let now = core.local_now(opts);
        Tx { conn, core, opts, now, snapshots: Vec::new(), woke: false }
    }

    /// Runs a statement; returns rows affected.
    pub(crate) async fn exec(&mut self, sql: &str, args: &[Value]) -> Result<u64, TxFail> {
        Ok(self.conn.execute(sql, args).await?)
    }

    /// Runs a query.
    pub(crate) async fn fetch(
        &mut self,
        sql: &str,
        args: &[Value],
        kinds: &[Kind],
    ) -> Result<Vec<Row>, TxFail> {
        Ok(self.conn.fetch(sql, args, kinds).await?)
    }

    /// "Now" for this transaction: the injected or local clock, else the server's time read
    /// once (or piggybacked by [`Tx::set_now`]).
    pub(crate) async fn now(&mut self) -> Result<Timestamp, TxFail> {
        if let Some(now) = self.now {
            return Ok(now);
        }
        let sql = self.core.sql("SELECT {now}");
        let rows = self.fetch(&sql, &[], &[Kind::Int]).await?;
        let now = rows
            .first()
            .and_then(|r| r.first())
            .and_then(|v| if let Value::Int(ms) = v { Some(*ms) } else { None })
            .ok_or_else(|| TxFail::Op(self.core.backend_error(DbError::RowNotFound)))?;
        let now = Timestamp::from_millis(now);
        self.now = Some(now);
        Ok(now)
    }

    /// True when "now" is not known yet (a statement may piggyback it).
    pub(crate) fn needs_now(&self) -> bool {
        self.now.is_none()
    }

    /// Records "now" read by a piggybacked column.
    pub(crate) fn set_now(&mut self, now: Timestamp) {
        self.now.get_or_insert(now);
    }

    /// Records a state-change snapshot for Notify (only when an observer is installed).
    pub(crate) fn snapshot(&mut self, task: &Task) {
        if self.opts.notifier.is_active() {
            self.snapshots.push(task.clone());
        }
    }

    /// Marks that waiters must be woken after commit.
    pub(crate) fn wake(&mut self) {
        self.woke = true;
    }
}

/// Runs `$body` (an expression using `$tx: &mut Tx`) in a write transaction with the retry
/// loop of contract §11.2: rollback and classify on a driver error, retry deadlocks at once
/// (up to 5 attempts; lock-wait timeouts at most 2) after a real-time back-off, return
/// contract errors as they are. Snapshots of a failed attempt are dropped; the last attempt's
/// are published after commit, and waiters are woken. Evaluates to `Result<T, TxFail>`.
///
/// With `abandon = <future>`, the wait for the writer ends with [`TxFail::Abandoned`] when
/// that future completes first (a claimer whose caller went away leaves the queue; adapters'
/// `begin` is cancel-safe).
macro_rules! in_tx {
    ($core:expr, $opts:expr, $op:expr, |$tx:ident| $body:expr) => {
        $crate::core::in_tx!($core, $opts, $op, abandon = std::future::pending::<()>(), |$tx| $body)
    };
    ($core:expr, $opts:expr, $op:expr, abandon = $gone:expr, |$tx:ident| $body:expr) => {{
        let core: &$crate::core::Core = $core;
        let opts: &taskgate::ResolvedOptions = $opts;
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            let outcome: Result<_, $crate::core::TxFail> = async {
                let mut wtx = tokio::select! {
                    biased;
                    begun = core.adapter.begin() => begun?,
                    _ = $gone => return Err($crate::core::TxFail::Abandoned),
                };
                let result = {
                    let mut $tx = $crate::core::Tx::new(wtx.conn(), core, opts);
                    match $body.await {
                        Ok(value) => {
                            if $tx.woke {
                                if let Some(sql) = core.wake_sql() {
                                    $tx.exec(sql, &[]).await?;
                                }
                            }
                            Ok((value, std::mem::take(&mut $tx.snapshots), $tx.woke))
                        }
                        Err(e) => Err(e),
                    }
                };
                match result {
                    Ok(done) => {
                        core.run_before_commit_hook($op);
                        wtx.commit().await?;
                        Ok(done)
                    }
                    Err(e) => {
                        let _ = wtx.rollback().await;
                        Err(e)
                    }
                }
            }
            .await;
            match outcome {
                Ok((value, snapshots, woke)) => {
                    if woke {
                        core.hub.wake();
                    }
                    opts.notifier.publish(snapshots);
                    break Ok(value);
                }
                Err($crate::core::TxFail::Db(e)) if core.should_retry(&e, attempt) => {
                    tokio::time::sleep($crate::core::backoff(attempt)).await;
                }
                Err(e) => break Err(e),
            }
        }
    }};
}

pub(crate) use in_tx;

#[cfg(test)]
mod tests {
    use super::*;

    use crate::{ClaimShape, DdlLock, QuotaShape, UniqueTarget};

    /// A PostgreSQL-like dialect for rendering tests.
    #[derive(Debug)]
    struct DollarDialect;

    impl Dialect for DollarDialect {
        fn name(&self) -> &'static str {
            "test"
        }
        fn placeholder(&self) -> Placeholder {
            Placeholder::Dollar
        }
        fn time_source(&self) -> TimeSource {
            TimeSource::Server
        }
        fn now_ms_sql(&self) -> &'static str {
            "NOW_MS()"
        }
        fn lock_clause(&self) -> &'static str {
            " FOR UPDATE"
        }
        fn skip_locked_clause(&self) -> &'static str {
            " FOR UPDATE SKIP LOCKED"
        }
        fn claim_shape(&self) -> ClaimShape {
            ClaimShape::SelectThenUpdate
        }
        fn limit_all(&self) -> &'static str {
            "9223372036854775807"
        }
        fn insert_ignore(&self, table: &str, columns: &str, values: &str, key: &str) -> String {
            format!(
                "INSERT INTO {table} ({columns}) VALUES ({values}) ON CONFLICT ({key}) DO NOTHING"
            )
        }
        fn quota_shape(&self, _table: &str) -> QuotaShape {
            QuotaShape::UpsertReturning { sql: String::new() }
        }
        fn ddl_lock(&self, _key: &str) -> Option<DdlLock> {
            None
        }
        fn transactional_ddl(&self) -> bool {
            true
        }
        fn retry_class(&self, _error: &DbError) -> RetryClass {
            RetryClass::Never
        }
        fn unique_violation(&self, _error: &DbError, _prefix: &str) -> Option<UniqueTarget> {
            None
        }
    }

    #[test]
    fn templates_render_tables_clauses_and_dollar_placeholders() {
        let sql = render(
            "SELECT id FROM {tasks} WHERE id = ? AND run_at <= COALESCE(?, {now}){lock}",
            "app_",
            &DollarDialect,
        );
        assert_eq!(
            sql,
            "SELECT id FROM app_tasks WHERE id = $1 AND run_at <= COALESCE($2, NOW_MS()) FOR UPDATE"
        );
        let claim = render(
            "SELECT 1 FROM {deps}, {quota}, {paused} LIMIT ?{skip_locked}",
            "p_",
            &DollarDialect,
        );
        assert_eq!(
            claim,
            "SELECT 1 FROM p_task_deps, p_quota, p_paused_queues LIMIT $1 FOR UPDATE SKIP LOCKED"
        );
        assert!(render("SELECT {cols} FROM {tasks}", "t_", &DollarDialect).contains("business_key"));
    }

    #[test]
    fn retry_limits_follow_the_class() {
        let allowed = |class| (1..=6).filter(|a| retry_allowed(class, *a)).count();
        assert_eq!(allowed(RetryClass::Immediate), 4, "5 attempts in all");
        assert_eq!(allowed(RetryClass::Limited), 1, "2 attempts in all");
        assert_eq!(allowed(RetryClass::Never), 0);
    }

    #[test]
    fn backoff_doubles_from_five_ms() {
        let ms: Vec<u128> = (1..=4).map(|a| backoff(a).as_millis()).collect();
        assert_eq!(ms, vec![5, 10, 20, 40]);
    }
}
