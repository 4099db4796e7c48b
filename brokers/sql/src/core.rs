//! The engine's shared state ([`Core`]): what one broker handle shares between its operations
//! and spawned claim tasks — the adapter and dialect, rendered statements, "now", the retry
//! policy of contract §11.2, and the test hooks. A transaction's context is `tx.rs`, the retry
//! loop `txrun.rs`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use taskgate::wake::{Lifecycle, WakeHub};
use taskgate::{Error, ResolvedOptions, Timestamp};

use crate::adapter::{Adapter, DbError, StatementLimit};
use crate::dialect::{rewrite_placeholders, Dialect, Placeholder, RetryClass, TimeSource};
use crate::inflight::{ClaimBounds, ClaimsUnderWay};
use crate::unresolved::Unresolved;
use crate::value::{Kind, Value};

/// Attempts of one write transaction when the dialect says "retry at once" (§11.2).
pub(crate) const MAX_TX_ATTEMPTS: u32 = 5;
/// Attempts when the dialect says "retry at most once more" (MySQL 1205).
pub(crate) const LIMITED_TX_ATTEMPTS: u32 = 2;
/// Attempts of a transaction that keeps losing conflicts where row locks are local (a Galera
/// node; see [`Core::should_retry`]).
pub(crate) const CLUSTER_TX_ATTEMPTS: u32 = 30;

/// Bytes a server's statement limit keeps free beside the largest accepted payload, result or
/// cursor: what a one-value statement (`UPDATE … SET payload = ? WHERE id = ?`, an ack with
/// its ID twice) needs besides the value itself, with room to spare.
pub(crate) const BLOB_HEADROOM: u64 = 8 * 1024;
/// Bytes of a statement limit kept free for the protocol's framing when the engine sizes a
/// statement by its arguments ([`args_bytes`]).
pub(crate) const STATEMENT_SLACK: u64 = 1024;

/// About how many bytes `args` take in a prepared statement's execute packet, rounded up:
/// each value with a 9-byte length prefix and 2 type bytes, plus the packet's header. The
/// engine compares this with the server's statement limit.
pub(crate) fn args_bytes(args: &[Value]) -> u64 {
    let values: usize = args
        .iter()
        .map(|v| match v {
            Value::Text(s) => s.len(),
            Value::Bytes(b) => b.len(),
            Value::Int(_) | Value::Null(_) => 8,
            Value::TextArray(v) => v.iter().map(|s| s.len() + 4).sum(),
            Value::BytesArray(v) => v.iter().map(|b| b.as_ref().map_or(0, Vec::len) + 4).sum(),
        })
        .sum();
    u64::try_from(values + 11 * args.len() + 64).unwrap_or(u64::MAX)
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
    /// Claim calls of this handle under way (from asking to receiving their tasks), per
    /// queue: a claim that found every ready row held while others on its queues were under
    /// way was held by them.
    pub(crate) claims_running: ClaimsUnderWay,
    /// Claims in flight hold a read guard until their tasks are delivered or requeued;
    /// `close` takes the write side to wait for them.
    pub(crate) inflight: Arc<tokio::sync::RwLock<()>>,
    /// Calls whose COMMIT's outcome could not be settled, kept until they are repeated.
    pub(crate) unresolved: Unresolved,
    /// The dialect's bounds on claims and claimed rows in flight
    /// ([`Dialect::claims_in_flight`], [`Dialect::claim_rows_in_flight`]).
    pub(crate) claim_bounds: Option<ClaimBounds>,
    /// The server's statement limit as read at the last `init` (`None`: unbounded).
    statement_limit: RwLock<Option<StatementLimit>>,
    sql_cache: RwLock<HashMap<(usize, usize), Arc<str>>>,
    sized_cache: RwLock<HashMap<SizedKey, Arc<str>>>,
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
        let claim_bounds = ClaimBounds::of(&*dialect);
        Core {
            adapter,
            dialect,
            prefix,
            poll_interval,
            life: Lifecycle::new(),
            hub: WakeHub::new(),
            retries: AtomicU64::new(0),
            last_claim_full: std::sync::atomic::AtomicBool::new(false),
            claims_running: ClaimsUnderWay::default(),
            inflight: Arc::new(tokio::sync::RwLock::new(())),
            statement_limit: RwLock::new(None),
            unresolved: Unresolved::default(),
            claim_bounds,
            sql_cache: RwLock::new(HashMap::new()),
            sized_cache: RwLock::new(HashMap::new()),
            #[cfg(feature = "test-hooks")]
            before_commit: RwLock::new(None),
        }
    }

    /// The backend name for errors.
    pub(crate) fn name(&self) -> &'static str {
        self.dialect.name()
    }

    /// Records the server's statement limit (read by `init`).
    pub(crate) fn set_statement_limit(&self, limit: Option<StatementLimit>) {
        *self.statement_limit.write().unwrap_or_else(|p| p.into_inner()) = limit;
    }

    /// How many argument bytes ([`args_bytes`]) one statement may carry, when the server
    /// limits statements.
    pub(crate) fn statement_budget(&self) -> Option<u64> {
        let limit = *self.statement_limit.read().unwrap_or_else(|p| p.into_inner());
        limit.map(|l| l.bytes.saturating_sub(STATEMENT_SLACK))
    }

    /// A driver error as the contract's storage failure.
    pub(crate) fn backend_error(&self, e: DbError) -> Error {
        Error::backend(self.name(), e)
    }

    /// A statement template rendered for this dialect and prefix, built once and cached.
    ///
    /// Templates name tables as `{tasks}`, `{deps}`, `{quota}`, `{paused}`, `{audit}`; `{lock}` and
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

    /// The tasks table as statements reading ready tasks in `run_at` order name it (the
    /// next-due probe, `queue_len`): with the dialect's index hint.
    pub(crate) fn ready_from(&self) -> String {
        format!("{{tasks}}{}", self.dialect.ready_index_hint(&self.prefix))
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

    /// Real-time back-off before attempt `attempt + 1` of a transaction that lost a conflict:
    /// [`backoff`], spread over ½–1½ of it where row locks are local (see
    /// [`Core::should_retry`]).
    pub(crate) fn retry_backoff(&self, attempt: u32) -> Duration {
        let base = backoff(attempt);
        if !self.adapter.row_locks_are_local() {
            return base;
        }
        use std::hash::{BuildHasher, Hasher};
        let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
        let span = u64::try_from(base.as_micros()).unwrap_or(u64::MAX).max(1);
        base / 2 + Duration::from_micros(random % span)
    }

    /// Counts one retried transaction.
    pub(crate) fn count_retry(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }

    /// True when a failed attempt `attempt` (1-based) should run again; counts the retry.
    ///
    /// Where row locks are local ([`Adapter::row_locks_are_local`], a Galera node) writers of
    /// one row on different nodes are ordered by certification, not by waiting: the losers
    /// are rolled back (1213) and run again, and a hot row (c56: 1,000 concurrent cancels and
    /// resumes of one task on three nodes) can lose more than 5 times in a row. There a
    /// conflict is retried up to [`CLUSTER_TX_ATTEMPTS`] times, after a jittered back-off
    /// ([`Core::retry_backoff`]) so that the same contenders do not meet again.
    pub(crate) fn should_retry(&self, e: &DbError, attempt: u32) -> bool {
        let again = match self.dialect.retry_class(e) {
            RetryClass::Immediate if self.adapter.row_locks_are_local() => {
                attempt < CLUSTER_TX_ATTEMPTS
            }
            class => retry_allowed(class, attempt),
        };
        if again {
            self.retries.fetch_add(1, Ordering::Relaxed);
        }
        again
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

    /// True when a test installed a before-commit hook: writes that could skip their
    /// transaction (the autocommit claim) then take it, so the hook has a commit to stop at.
    #[cfg(feature = "test-hooks")]
    pub(crate) fn has_before_commit_hook(&self) -> bool {
        self.before_commit.read().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    #[cfg(not(feature = "test-hooks"))]
    pub(crate) fn has_before_commit_hook(&self) -> bool {
        false
    }
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
        .replace("{audit}", &format!("{p}audit"))
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    use crate::{ClaimShape, DdlLock, QuotaShape, UniqueTarget};

    /// A PostgreSQL-like dialect for rendering tests.
    #[derive(Debug)]
    pub(crate) struct DollarDialect;

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
