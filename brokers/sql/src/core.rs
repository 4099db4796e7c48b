//! The engine's shared state ([`Core`]), the per-transaction context ([`Tx`]) every operation
//! runs on, and the transaction retry loop of contract §11.2 ([`TxRun`]).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use taskgate::wake::{Lifecycle, WakeHub, Wakes};
use taskgate::{BoxError, Error, ResolvedOptions, Task, Timestamp};

use crate::dialect::{rewrite_placeholders, Placeholder, RetryClass, TimeSource};
use crate::{Adapter, DbError, Dialect, Kind, Row, SqlConn, Value};

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

/// Why a transaction body stopped: a driver error (classified by the retry loop) or a contract
/// outcome (returned as is, after rollback).
#[derive(Debug)]
pub(crate) enum TxFail {
    Db(DbError),
    Op(Error),
    /// The caller went away while waiting for the writer; nothing was done.
    Abandoned,
    /// The connection was lost during COMMIT and whether the transaction was applied could
    /// not be found out (not settled, or the server stayed unreachable).
    Unknown(DbError),
}

/// A write's outcome is unknown: the connection was lost while its COMMIT (or its one
/// autocommit statement) was on its way, so the server may or may not have applied it, and
/// finding out failed too. The source of an [`Error::Backend`] that says so; every write path
/// reports a lost outcome with it, never with a definite error.
#[derive(Debug)]
pub struct CommitUnknown {
    /// The last error: the driver's on the COMMIT, or on the last attempt to find out.
    pub source: BoxError,
}

impl std::fmt::Display for CommitUnknown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "connection lost during COMMIT: the write may or may not have been applied \
             (for enqueue and ack: the server could not be asked; repeating the same call on \
             this handle settles it): {}",
            self.source
        )
    }
}

impl std::error::Error for CommitUnknown {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
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
    /// Claim calls of this handle under way (from asking to receiving their tasks), per
    /// queue: a claim that found every ready row held while others on its queues were under
    /// way was held by them.
    pub(crate) claims_running: ClaimsUnderWay,
    /// Claims in flight hold a read guard until their tasks are delivered or requeued;
    /// `close` takes the write side to wait for them.
    pub(crate) inflight: Arc<tokio::sync::RwLock<()>>,
    /// Calls whose COMMIT's outcome could not be settled, kept until they are repeated.
    pub(crate) unresolved: crate::resolve::Unresolved,
    /// The dialect's bounds on claims and claimed rows in flight
    /// ([`Dialect::claims_in_flight`], [`Dialect::claim_rows_in_flight`]).
    pub(crate) claim_gate: Option<ClaimGate>,
    /// The server's statement limit as read at the last `init` (`None`: unbounded).
    statement_limit: RwLock<Option<crate::StatementLimit>>,
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
        let claim_gate = ClaimGate::of(&*dialect);
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
            unresolved: crate::resolve::Unresolved::default(),
            claim_gate,
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
    pub(crate) fn set_statement_limit(&self, limit: Option<crate::StatementLimit>) {
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

    /// True when a one-statement (autocommit) write that failed with `e` may have been
    /// applied: its connection was lost ([`Dialect::is_connection_lost`]) after it could
    /// have reached the server. A connection that was never made (refused, no such host, no
    /// pooled connection in time) sent nothing.
    pub(crate) fn maybe_applied(&self, e: &DbError) -> bool {
        self.dialect.is_connection_lost(e) && !never_connected(e)
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

/// The claims of one broker handle under way, counted per queue they claim from.
#[derive(Debug, Default)]
pub(crate) struct ClaimsUnderWay(std::sync::Mutex<HashMap<String, usize>>);

/// One claim counted as under way until dropped (a caller that gives up mid-claim included).
pub(crate) struct UnderWay<'a> {
    claims: &'a ClaimsUnderWay,
    queues: &'a [String],
}

impl ClaimsUnderWay {
    fn counts(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a claim from `queues` as under way until the guard is dropped.
    pub(crate) fn enter<'a>(&'a self, queues: &'a [String]) -> UnderWay<'a> {
        let mut counts = self.counts();
        for queue in queues {
            *counts.entry(queue.clone()).or_default() += 1;
        }
        UnderWay { claims: self, queues }
    }

    /// True when a claim from any of `queues` is under way.
    pub(crate) fn any(&self, queues: &[String]) -> bool {
        let counts = self.counts();
        queues.iter().any(|q| counts.contains_key(q))
    }
}

impl Drop for UnderWay<'_> {
    fn drop(&mut self) {
        let mut counts = self.claims.counts();
        for queue in self.queues {
            if let Some(n) = counts.get_mut(queue) {
                *n -= 1;
                if *n == 0 {
                    counts.remove(queue);
                }
            }
        }
    }
}

/// The bounds on claims in flight of one broker handle ([`Dialect::claim_rows_in_flight`],
/// [`Dialect::claims_in_flight`]): fair (first come, first served) semaphores, one permit per
/// claim and one per row. A claim takes its claim permit first, then its rows, so the two
/// never wait for each other in opposite orders.
pub(crate) struct ClaimGate {
    claims: Option<Arc<tokio::sync::Semaphore>>,
    rows: Option<(Arc<tokio::sync::Semaphore>, u32)>,
}

/// Room for one claim under the [`ClaimGate`], held until dropped.
#[derive(Debug)]
pub(crate) struct ClaimSlot {
    _claim: Option<tokio::sync::OwnedSemaphorePermit>,
    _rows: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl ClaimSlot {
    /// The rows this claim holds room for (`None` without a row bound).
    #[cfg(test)]
    fn rows(&self) -> Option<usize> {
        self._rows.as_ref().map(tokio::sync::OwnedSemaphorePermit::num_permits)
    }

    /// True when it holds one of the bounded claims.
    #[cfg(test)]
    fn counted(&self) -> bool {
        self._claim.is_some()
    }
}

impl ClaimGate {
    /// The gate `dialect` asks for, if any.
    fn of(dialect: &dyn Dialect) -> Option<ClaimGate> {
        let gate =
            ClaimGate::with_bounds(dialect.claim_rows_in_flight(), dialect.claims_in_flight());
        (gate.claims.is_some() || gate.rows.is_some()).then_some(gate)
    }

    /// A gate of at most `rows` rows and `claims` claims in flight (each at least one).
    fn with_bounds(rows: Option<usize>, claims: Option<usize>) -> ClaimGate {
        let max = tokio::sync::Semaphore::MAX_PERMITS;
        let semaphore = |n: usize| Arc::new(tokio::sync::Semaphore::new(n.clamp(1, max)));
        ClaimGate {
            claims: claims.map(semaphore),
            rows: rows.map(|n| {
                let bound = u32::try_from(n.clamp(1, max)).unwrap_or(u32::MAX);
                (semaphore(n), bound)
            }),
        }
    }

    /// Waits until a claim for `max` tasks may go ahead: one claim permit, then `min(max,
    /// bound)` row permits (at least one), held until the returned slot is dropped, so a claim
    /// larger than the row bound runs alone rather than never. `None` only if a semaphore
    /// were closed, which they never are.
    pub(crate) async fn enter(&self, max: usize) -> Option<ClaimSlot> {
        let claim = match &self.claims {
            Some(claims) => Some(claims.clone().acquire_owned().await.ok()?),
            None => None,
        };
        let rows = match &self.rows {
            Some((rows, bound)) => {
                let n = u32::try_from(max).unwrap_or(u32::MAX).clamp(1, *bound);
                Some(rows.clone().acquire_many_owned(n).await.ok()?)
            }
            None => None,
        };
        Some(ClaimSlot { _claim: claim, _rows: rows })
    }
}

/// One transaction's context: its connection, the options, "now" (read once), and the
/// snapshots and wake-up it will publish after commit.
pub(crate) struct Tx<'c> {
    pub(crate) conn: &'c mut dyn SqlConn,
    pub(crate) core: &'c Core,
    pub(crate) opts: &'c ResolvedOptions,
    now: Option<Timestamp>,
    pub(crate) snapshots: Vec<Task>,
    pub(crate) wakes: Wakes,
}

impl<'c> Tx<'c> {
    pub(crate) fn new(
        conn: &'c mut dyn SqlConn,
        core: &'c Core,
        opts: &'c ResolvedOptions,
    ) -> Tx<'c> {
        let now = core.local_now(opts);
        Tx { conn, core, opts, now, snapshots: Vec::new(), wakes: Wakes::default() }
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

    /// "Now" read again after this transaction's writes (never the cached reading): the time
    /// of an audit record, so that records of changes to one row follow the order of those
    /// changes. A cached reading can be older than a change another transaction committed
    /// while this one waited for the row's lock (MySQL's `NOW(3)` is the time its statement
    /// started, before the wait); a reading taken while holding the lock is not. Never
    /// earlier than the cached reading.
    pub(crate) async fn now_after_writes(&mut self) -> Result<Timestamp, TxFail> {
        let cached = self.now;
        let fresh = match self.core.local_now(self.opts) {
            Some(now) => now,
            None => {
                self.now = None;
                self.now().await?
            }
        };
        self.now = cached.or(Some(fresh));
        Ok(cached.map_or(fresh, |cached| cached.max(fresh)))
    }

    /// "Now" if this transaction knows it already (read, piggybacked or local).
    pub(crate) fn known_now(&self) -> Option<Timestamp> {
        self.now
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

    /// Marks that every waiter must be woken after commit.
    pub(crate) fn wake(&mut self) {
        self.wakes.all();
    }

    /// Marks one task made ready on `queue`: after commit, waiters on it are woken as far as
    /// their batches need (a counted wake).
    pub(crate) fn wake_ready(&mut self, queue: &str) {
        self.wakes.ready(queue);
    }
}

/// True for an error that means no connection was made, so no statement was sent: a refused
/// connection, a host that cannot be found or reached, a pool that handed out no connection.
/// (A connection that was made and then lost fails with a reset, a broken pipe or an
/// unexpected end of stream instead.)
pub(crate) fn never_connected(e: &DbError) -> bool {
    use std::io::ErrorKind as Io;
    match e {
        DbError::Io(io) => matches!(
            io.kind(),
            Io::ConnectionRefused
                | Io::NotFound
                | Io::AddrNotAvailable
                | Io::HostUnreachable
                | Io::NetworkUnreachable
        ),
        DbError::PoolTimedOut | DbError::PoolClosed => true,
        _ => false,
    }
}

/// How one attempt of a write transaction ended (what [`TxRun::run`] decides on).
pub(crate) enum Attempt<T> {
    /// Committed; the value, the Notify snapshots and whether waiters must be woken.
    Done(Settled<T>),
    /// Failed before or at a COMMIT that the server answered (rolled back, or never sent).
    Failed(TxFail),
    /// The connection was lost during COMMIT: the server may or may not have applied it.
    /// Carries what the attempt would have returned.
    CommitUnknown(DbError, Settled<T>),
}

/// A transaction body's value with the Notify snapshots and the wake-up it produced.
pub(crate) type Settled<T> = (T, Vec<Task>, Wakes);

/// How long a write whose COMMIT's outcome is unknown keeps trying to find out (retrying on a
/// fresh connection while the server cannot be reached) before it reports the outcome as
/// unknown.
pub(crate) const RESOLVE_WINDOW: Duration = Duration::from_secs(5);

/// A transaction body's future for one attempt: it borrows the transaction and the body's
/// arguments for that attempt only.
pub(crate) type TxFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, TxFail>> + Send + 'a>>;

/// A caller that may go away while its write waits for a connection (a claimer whose
/// `dequeue` was dropped): [`TxRun::abandon`] stops waiting when it leaves.
pub(crate) trait Leaving: Send {
    /// Completes when the caller has left.
    fn left(&mut self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
    /// True when the caller has left.
    fn has_left(&self) -> bool;
}

impl<M: Send> Leaving for tokio::sync::oneshot::Sender<M> {
    fn left(&mut self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(self.closed())
    }

    fn has_left(&self) -> bool {
        self.is_closed()
    }
}

/// One write transaction with the retry loop of contract §11.2, built by [`Core::tx`] and run
/// by [`TxRun::run`]: rollback and classify on a driver error, retry deadlocks at once (up to
/// 5 attempts; lock-wait timeouts at most 2) after a real-time back-off, return contract
/// errors as they are. Snapshots of a failed attempt are dropped; the last attempt's are
/// published after commit, and waiters are woken when the body called [`Tx::wake`].
///
/// A COMMIT whose connection was lost ([`Dialect::is_connection_lost`]) may or may not have
/// been applied. By default that ends the loop with [`TxFail::Unknown`]. With
/// [`TxRun::settle`] the operation settles it instead (enqueue, ack): the attempt's would-be
/// result is pushed to the given list and the transaction runs again — its body must make a
/// second run find out what the first did (the same IDs; a token check) — retrying lost
/// connections for [`RESOLVE_WINDOW`] before it gives up with [`TxFail::Unknown`] (from the
/// first attempt when the list holds attempts already). The caller compares the outcome with
/// the list.
///
/// With [`TxRun::abandon`], the wait for a connection (the writer, on SQLite) ends with
/// [`TxFail::Abandoned`] when the caller leaves first, and a caller that left while it waited
/// gets nothing written (adapters' `begin` is cancel-safe).
pub(crate) struct TxRun<'r, T> {
    core: &'r Core,
    opts: &'r ResolvedOptions,
    op: &'static str,
    settle: Option<&'r mut Vec<Settled<T>>>,
    /// An earlier write of this call lost its outcome (a one-statement write whose answer
    /// never came): settle from the first attempt, as with a non-empty `settle` list.
    lost_before: bool,
    leaving: Option<&'r mut dyn Leaving>,
}

impl Core {
    /// A write transaction named `op` (the name test hooks see) under `opts`.
    pub(crate) fn tx<'r, T>(&'r self, opts: &'r ResolvedOptions, op: &'static str) -> TxRun<'r, T> {
        TxRun { core: self, opts, op, settle: None, lost_before: false, leaving: None }
    }
}

impl<'r, T: Send> TxRun<'r, T> {
    /// Settles a COMMIT of unknown outcome by running again; see [`TxRun`].
    pub(crate) fn settle(mut self, unknown: &'r mut Vec<Settled<T>>) -> Self {
        self.settle = Some(unknown);
        self
    }

    /// Settles from the first attempt when `lost` (an earlier write of the call, outside this
    /// transaction, lost its outcome): lost connections are retried for [`RESOLVE_WINDOW`]
    /// and then end with [`TxFail::Unknown`], never with a definite error.
    pub(crate) fn after_lost(mut self, lost: bool) -> Self {
        self.lost_before = lost;
        self
    }

    /// Gives up when `caller` leaves before the transaction starts; see [`TxRun`].
    pub(crate) fn abandon(mut self, caller: &'r mut dyn Leaving) -> Self {
        self.leaving = Some(caller);
        self
    }

    /// Runs `body(tx, args)` in the transaction until it commits or fails for good.
    ///
    /// The body borrows `args` (not its own captures) so that its future may hold them
    /// across awaits; an `async` closure cannot be used here because its future cannot be
    /// proven `Send` for every borrow of the transaction on stable Rust.
    pub(crate) async fn run<A, F>(mut self, args: &A, mut body: F) -> Result<T, TxFail>
    where
        A: Sync + ?Sized,
        F: for<'a, 'c> FnMut(&'a mut Tx<'c>, &'a A) -> TxFuture<'a, T> + Send,
    {
        let (core, opts) = (self.core, self.opts);
        let mut attempt: u32 = 0;
        // A list that holds attempts already (a lost one-statement write, the lost COMMITs of
        // an earlier call) is being settled from the start.
        let settling = self.lost_before || self.settle.as_ref().is_some_and(|u| !u.is_empty());
        let mut resolve_until = settling.then(|| std::time::Instant::now() + RESOLVE_WINDOW);
        loop {
            attempt += 1;
            let outcome = self.attempt(args, &mut body).await;
            match outcome {
                Attempt::Done((value, snapshots, wakes)) => {
                    core.hub.wake_for(&wakes);
                    opts.notifier.publish(snapshots);
                    break Ok(value);
                }
                Attempt::CommitUnknown(e, done) => match self.settle.as_mut() {
                    None => break Err(TxFail::Unknown(e)),
                    Some(unknown) => {
                        unknown.push(done);
                        resolve_until
                            .get_or_insert_with(|| std::time::Instant::now() + RESOLVE_WINDOW);
                        core.count_retry();
                        tokio::time::sleep(backoff(attempt)).await;
                    }
                },
                Attempt::Failed(TxFail::Db(e))
                    if resolve_until.is_some() && core.dialect.is_connection_lost(&e) =>
                {
                    // Settling an unknown COMMIT: keep trying while the server cannot be
                    // reached, within the window.
                    if resolve_until.is_some_and(|until| std::time::Instant::now() >= until) {
                        break Err(TxFail::Unknown(e));
                    }
                    core.count_retry();
                    tokio::time::sleep(backoff(attempt)).await;
                }
                Attempt::Failed(TxFail::Db(e)) if core.should_retry(&e, attempt) => {
                    tokio::time::sleep(core.retry_backoff(attempt)).await;
                }
                Attempt::Failed(e) => break Err(e),
            }
        }
    }

    /// One attempt: begin (or leave with the caller), run the body, commit or roll back.
    async fn attempt<A, F>(&mut self, args: &A, body: &mut F) -> Attempt<T>
    where
        A: Sync + ?Sized,
        F: for<'a, 'c> FnMut(&'a mut Tx<'c>, &'a A) -> TxFuture<'a, T> + Send,
    {
        let core = self.core;
        // A caller that left already (a claim whose `dequeue` was dropped, before its first
        // attempt or while a conflict's back-off ran) costs no connection and no `BEGIN`.
        if self.leaving.as_ref().is_some_and(|caller| caller.has_left()) {
            return Attempt::Failed(TxFail::Abandoned);
        }
        let begun = match self.leaving.as_mut() {
            None => core.adapter.begin().await,
            Some(caller) => tokio::select! {
                biased;
                begun = core.adapter.begin() => begun,
                () = caller.left() => return Attempt::Failed(TxFail::Abandoned),
            },
        };
        let mut wtx = match begun {
            Ok(wtx) => wtx,
            Err(e) => return Attempt::Failed(TxFail::Db(e)),
        };
        // The wait for a connection can be long; a caller that left meanwhile gets nothing
        // written (instead of a write that must be undone).
        if self.leaving.as_ref().is_some_and(|caller| caller.has_left()) {
            let _ = wtx.rollback().await;
            return Attempt::Failed(TxFail::Abandoned);
        }
        let result = {
            let mut tx = Tx::new(wtx.conn(), core, self.opts);
            match body(&mut tx, args).await {
                Ok(value) => {
                    Ok((value, std::mem::take(&mut tx.snapshots), std::mem::take(&mut tx.wakes)))
                }
                Err(e) => Err(e),
            }
        };
        match result {
            Ok(done) => {
                core.run_before_commit_hook(self.op);
                match wtx.commit(done.2.any()).await {
                    Ok(()) => Attempt::Done(done),
                    Err(e) if core.dialect.is_connection_lost(&e) => {
                        Attempt::CommitUnknown(e, done)
                    }
                    Err(e) => Attempt::Failed(TxFail::Db(e)),
                }
            }
            Err(e) => {
                let _ = wtx.rollback().await;
                Attempt::Failed(e)
            }
        }
    }
}

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

    #[tokio::test]
    async fn the_claim_gate_bounds_rows_in_flight_and_lets_a_larger_claim_run_alone() {
        assert!(ClaimGate::of(&DollarDialect).is_none());
        let gate = ClaimGate::with_bounds(Some(250), None);
        let a = gate.enter(100).await.expect("room for the first claim");
        let b = gate.enter(100).await.expect("room for the second claim");
        // 50 rows left: a third claim of 100 waits until one of the first two ends.
        let third = tokio::time::timeout(Duration::from_millis(50), gate.enter(100)).await;
        assert!(third.is_err(), "a third claim of 100 must wait");
        drop(a);
        let c = gate.enter(100).await.expect("room once a claim ended");
        drop((b, c));
        // A claim larger than the bound takes the whole bound, never more.
        let big = gate.enter(10_000).await.expect("a claim above the bound runs alone");
        assert_eq!((big.rows(), big.counted()), (Some(250), false));
        // Claims of one are bounded at one row each.
        drop(big);
        let ones: Vec<_> = hold_ones(&gate, 250).await;
        assert_eq!(ones.len(), 250);
    }

    #[tokio::test]
    async fn the_claim_gate_bounds_claims_in_flight_whatever_their_size() {
        let gate = ClaimGate::with_bounds(Some(800), Some(4));
        // Four claims of one: the claim bound, not the rows, keeps the fifth out.
        let ones = hold_ones(&gate, 4).await;
        assert!(ones.iter().all(|slot| slot.counted() && slot.rows() == Some(1)));
        let fifth = tokio::time::timeout(Duration::from_millis(50), gate.enter(1)).await;
        assert!(fifth.is_err(), "a fifth claim must wait for one of the four");
        drop(ones);
        // Rows still bound: two claims of 400 fill them, a third claim waits for rows while
        // holding its claim permit, and enters once one of the two ends.
        let (a, b) = (gate.enter(400).await.expect("a"), gate.enter(400).await.expect("b"));
        let third = tokio::time::timeout(Duration::from_millis(50), gate.enter(1)).await;
        assert!(third.is_err(), "no row left for a third claim");
        drop(a);
        let c = gate.enter(400).await.expect("room once a claim ended");
        drop((b, c));
        // Claims alone: no row permits taken.
        let counted = ClaimGate::with_bounds(None, Some(2));
        let slot = counted.enter(5_000).await.expect("a claim under the claim bound");
        assert_eq!((slot.rows(), slot.counted()), (None, true));
    }

    #[test]
    fn claims_under_way_are_counted_per_queue_until_dropped() {
        let claims = ClaimsUnderWay::default();
        let (ab, b) = (["a".to_owned(), "b".to_owned()], ["b".to_owned()]);
        let (c, a) = (["c".to_owned()], ["a".to_owned()]);
        assert!(!claims.any(&ab));
        let first = claims.enter(&ab);
        let second = claims.enter(&b);
        assert!(claims.any(&a) && claims.any(&b) && !claims.any(&c));
        drop(first);
        assert!(!claims.any(&a) && claims.any(&b), "b is still claimed by the second");
        drop(second);
        assert!(!claims.any(&ab));
    }

    async fn hold_ones(gate: &ClaimGate, n: usize) -> Vec<ClaimSlot> {
        let mut held = Vec::with_capacity(n);
        for _ in 0..n {
            held.push(gate.enter(1).await.expect("room for a claim of one"));
        }
        held
    }

    #[test]
    fn backoff_doubles_from_five_ms() {
        let ms: Vec<u128> = (1..=4).map(|a| backoff(a).as_millis()).collect();
        assert_eq!(ms, vec![5, 10, 20, 40]);
    }
}
