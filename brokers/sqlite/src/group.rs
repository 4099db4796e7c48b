//! Group commit on the writer connection: concurrent write transactions of one broker share
//! one SQLite transaction and one COMMIT (one fsync under `synchronous=FULL`).
//!
//! Callers queue for the writer (a fair lock). The holder of the turn opens the shared
//! `BEGIN IMMEDIATE` transaction if none is open — or, when earlier callers' work is already in
//! it, a `SAVEPOINT` — and runs its statements. When it commits, its work stays in the open
//! transaction and it is *covered*: if others are waiting it hands the open transaction to the
//! next one; the last of a group (or after [`MAX_MEMBERS`] callers, or [`MAX_WAIT`]) runs COMMIT
//! and answers every covered caller with that COMMIT's result. A caller therefore returns only
//! after the COMMIT that made its work durable, and post-commit effects (wake-ups, Notify) run
//! after it too. A caller that fails or goes away is undone alone: `ROLLBACK TO` its savepoint
//! (the first of a group has none: its failure rolls back the transaction, which holds nothing
//! else). A crash before the COMMIT loses the whole group, and none of its callers has returned.
//!
//! Every statement that decides the shared transaction's fate (BEGIN, SAVEPOINT, undo,
//! COMMIT) runs on a task of its own, so a caller dropped at any await leaves a consistent
//! state; an unfinished turn leaves its undo for the next holder and a flusher that commits
//! what others left covered.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sqlx::error::{DatabaseError, ErrorKind};
use sqlx::pool::PoolConnection;
use sqlx::sqlite::SqlitePool;
use sqlx::{Sqlite, SqliteConnection};
use taskgate_sql::{DbError, DbResult, Kind, Row, SqlConn, Value, WriteTx};
use tokio::sync::{oneshot, Mutex, OwnedMutexGuard};

use crate::conn::ConnRef;

/// The most callers one COMMIT covers.
pub(crate) const MAX_MEMBERS: usize = 64;
/// The longest the first call a shared transaction covers waits for its COMMIT while others
/// keep joining.
pub(crate) const MAX_WAIT: Duration = Duration::from_millis(20);
const SAVEPOINT: &str = "SAVEPOINT taskgate_member";
const ROLLBACK_TO: &str = "ROLLBACK TO taskgate_member";

/// A hook tests install to see (or stop) a group before its COMMIT; called with the number
/// of callers the COMMIT covers (feature `test-hooks`).
#[cfg(feature = "test-hooks")]
pub type GroupCommitHook = Arc<dyn Fn(usize) + Send + Sync>;

/// The writer connection's group-commit queue.
pub(crate) struct GroupWriter {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for GroupWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupWriter").field("waiting", &self.inner.waiting()).finish()
    }
}

struct Inner {
    pool: SqlitePool,
    state: Arc<Mutex<State>>,
    /// Callers queued for the turn (a holder hands the open transaction on while this is > 0).
    queued: AtomicUsize,
    /// [`MAX_WAIT`] in microseconds (tests lengthen it to form groups at their own pace).
    max_wait_us: AtomicU64,
    #[cfg(feature = "test-hooks")]
    hook: std::sync::RwLock<Option<GroupCommitHook>>,
}

impl Inner {
    fn waiting(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }
}

/// What the turn holder owns.
#[derive(Default)]
struct State {
    /// The shared transaction: the writer connection inside `BEGIN IMMEDIATE`.
    open: Option<PoolConnection<Sqlite>>,
    /// Callers whose work is in the open transaction, answered after its COMMIT.
    covered: Vec<oneshot::Sender<Result<(), GroupError>>>,
    /// When the first of `covered` was covered.
    covered_since: Option<Instant>,
    /// The work of a caller that ended without commit or rollback, undone by the next holder.
    undo: Option<Undo>,
}

/// How a caller's work is undone.
#[derive(Clone, Copy, Debug)]
enum Undo {
    /// `ROLLBACK TO` its savepoint (others' work stays).
    Savepoint,
    /// `ROLLBACK` the transaction (the caller opened it; it holds nothing else).
    Whole,
}

impl GroupWriter {
    /// A group-commit queue over the writer pool (one connection).
    pub(crate) fn new(pool: SqlitePool) -> GroupWriter {
        GroupWriter {
            inner: Arc::new(Inner {
                pool,
                state: Arc::new(Mutex::new(State::default())),
                queued: AtomicUsize::new(0),
                max_wait_us: AtomicU64::new(micros(MAX_WAIT)),
                #[cfg(feature = "test-hooks")]
                hook: std::sync::RwLock::new(None),
            }),
        }
    }

    /// Waits for the turn and opens this caller's part of the shared transaction.
    /// Cancel-safe: a caller dropped while queued leaves the queue; one dropped after that
    /// finds its turn undone and ended by the task that opened it.
    pub(crate) async fn begin(&self) -> DbResult<Box<dyn WriteTx>> {
        let queued = Queued::enter(&self.inner);
        let guard = self.inner.state.clone().lock_owned().await;
        queued.leave();
        let mut turn = Turn { inner: self.inner.clone(), guard, undo: None, done: false };
        let (send, receive) = oneshot::channel();
        tokio::spawn(async move {
            let started = turn.start().await.map(|()| turn);
            // If our caller went away, the turn comes back here and is undone as it drops.
            let _ = send.send(started);
        });
        let turn = receive
            .await
            .map_err(|_| sqlx::Error::Protocol("the writer's begin task ended".to_owned()))??;
        Ok(Box::new(GroupTx { turn: Some(turn) }))
    }

    /// Callers queued for the writer.
    #[cfg(feature = "test-hooks")]
    pub(crate) fn waiting(&self) -> usize {
        self.inner.waiting()
    }

    /// Installs (or removes) the before-COMMIT hook.
    #[cfg(feature = "test-hooks")]
    pub(crate) fn set_hook(&self, hook: Option<GroupCommitHook>) {
        *self.inner.hook.write().unwrap_or_else(|p| p.into_inner()) = hook;
    }

    /// Sets how long the first covered call may wait for its COMMIT while others join.
    #[cfg(feature = "test-hooks")]
    pub(crate) fn set_max_wait(&self, wait: Duration) {
        self.inner.max_wait_us.store(micros(wait), Ordering::SeqCst);
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// A caller in the queue; leaving it without the turn (cancelled) starts a flusher, since a
/// holder may have handed the open transaction on to this caller.
struct Queued<'a> {
    inner: &'a Arc<Inner>,
    armed: bool,
}

impl<'a> Queued<'a> {
    fn enter(inner: &'a Arc<Inner>) -> Queued<'a> {
        inner.queued.fetch_add(1, Ordering::SeqCst);
        Queued { inner, armed: true }
    }

    fn leave(mut self) {
        self.armed = false;
        self.inner.queued.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.inner.queued.fetch_sub(1, Ordering::SeqCst);
            spawn_flusher(self.inner.clone());
        }
    }
}

/// Takes the turn on a task of its own, undoes what an unfinished caller left, and commits
/// or hands on what others left covered.
fn spawn_flusher(inner: Arc<Inner>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
    runtime.spawn(async move {
        let guard = inner.state.clone().lock_owned().await;
        let mut turn = Turn { inner, guard, undo: None, done: false };
        turn.settle_undo().await;
        turn.end().await;
    });
}

/// Holding the writer: the lock on [`State`], and how to undo this caller's work.
struct Turn {
    inner: Arc<Inner>,
    guard: OwnedMutexGuard<State>,
    undo: Option<Undo>,
    /// The turn ended cleanly (handed on, committed or nothing open).
    done: bool,
}

impl Turn {
    fn conn(&mut self) -> DbResult<&mut SqliteConnection> {
        match self.guard.open.as_mut() {
            Some(conn) => Ok(&mut **conn),
            None => Err(sqlx::Error::Protocol("no write transaction is open".to_owned())),
        }
    }

    async fn exec(&mut self, sql: &'static str) -> DbResult<()> {
        let conn = self.conn()?;
        sqlx::query(sql).execute(conn).await.map(|_| ())
    }

    /// Opens this caller's part: BEGIN IMMEDIATE when nothing is open, else a savepoint.
    async fn start(&mut self) -> DbResult<()> {
        self.settle_undo().await;
        if self.guard.open.is_some() {
            self.exec(SAVEPOINT).await?;
            self.undo = Some(Undo::Savepoint);
            return Ok(());
        }
        let mut conn = self.inner.pool.acquire().await?;
        sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await?;
        self.guard.open = Some(conn);
        self.undo = Some(Undo::Whole);
        Ok(())
    }

    /// Undoes the work an unfinished caller left.
    async fn settle_undo(&mut self) {
        // When `ROLLBACK TO` fails, an error already rolled the transaction back: so is the
        // others' work.
        let undone = match self.guard.undo.take() {
            None => return,
            Some(Undo::Whole) => false,
            Some(Undo::Savepoint) => self.exec(ROLLBACK_TO).await.is_ok(),
        };
        if !undone {
            self.abort().await;
        }
    }

    /// Rolls the shared transaction back; callers covered by it run again (nothing of theirs
    /// was applied).
    async fn abort(&mut self) {
        self.guard.covered_since = None;
        if let Some(mut conn) = self.guard.open.take() {
            if sqlx::query("ROLLBACK").execute(&mut *conn).await.is_err() {
                // Already rolled back by SQLite, or in doubt: a fresh connection is certain.
                conn.close_on_drop();
            }
        }
        for caller in self.guard.covered.drain(..) {
            let _ = caller.send(Err(GroupError::Aborted));
        }
    }

    /// True when the open transaction should wait for the next caller rather than commit.
    fn hand_on(&self) -> bool {
        let max_wait = Duration::from_micros(self.inner.max_wait_us.load(Ordering::Relaxed));
        let waited = self.guard.covered_since.map_or(Duration::ZERO, |t| t.elapsed());
        self.guard.open.is_some()
            && self.inner.waiting() > 0
            && self.guard.covered.len() < MAX_MEMBERS
            && waited < max_wait
    }

    /// Keeps this caller's work in the open transaction, answered by its COMMIT.
    fn cover(&mut self, answer: oneshot::Sender<Result<(), GroupError>>) {
        self.guard.covered.push(answer);
        self.guard.covered_since.get_or_insert_with(Instant::now);
        self.undo = None;
    }

    /// Ends the turn: hands the open transaction on, commits it, or rolls back one that covers
    /// nobody.
    async fn end(mut self) {
        if self.guard.covered.is_empty() {
            self.abort().await;
        } else if !self.hand_on() {
            let answers = self.commit().await;
            self.done = true;
            drop(self);
            answers.send();
            return;
        }
        self.done = true;
    }

    /// COMMITs the open transaction; the answers go out after the turn is released.
    async fn commit(&mut self) -> Answers {
        let callers = std::mem::take(&mut self.guard.covered);
        self.guard.covered_since = None;
        #[cfg(feature = "test-hooks")]
        {
            let hook = self.inner.hook.read().unwrap_or_else(|p| p.into_inner()).clone();
            if let Some(hook) = hook {
                hook(callers.len());
            }
        }
        let outcome = match self.guard.open.take() {
            None => Err(GroupError::Aborted),
            Some(mut conn) => match sqlx::query("COMMIT").execute(&mut *conn).await {
                Ok(_) => Ok(()),
                Err(e) => {
                    // Whatever SQLite left open is rolled back; the callers get the COMMIT's
                    // error, as a lone transaction's caller does.
                    if sqlx::query("ROLLBACK").execute(&mut *conn).await.is_err() {
                        conn.close_on_drop();
                    }
                    Err(GroupError::from_db(&e))
                }
            },
        };
        Answers { callers, outcome }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // Unfinished (cancelled, panicked, rolled back, or failed to start): leave the undo
        // to the next holder, and make sure there is one.
        self.guard.undo = self.undo.take();
        if self.guard.open.is_some() {
            spawn_flusher(self.inner.clone());
        }
    }
}

/// The callers one COMMIT covers and its outcome.
struct Answers {
    callers: Vec<oneshot::Sender<Result<(), GroupError>>>,
    outcome: Result<(), GroupError>,
}

impl Answers {
    fn send(self) {
        for caller in self.callers {
            let _ = caller.send(self.outcome.clone());
        }
    }
}

/// One caller's write transaction: its turn on the writer, inside the shared transaction.
struct GroupTx {
    turn: Option<Turn>,
}

impl GroupTx {
    fn turn(&mut self) -> DbResult<&mut Turn> {
        self.turn.as_mut().ok_or_else(|| sqlx::Error::Protocol("transaction ended".to_owned()))
    }
}

#[async_trait]
impl SqlConn for GroupTx {
    async fn execute(&mut self, sql: &str, args: &[Value]) -> DbResult<u64> {
        ConnRef(self.turn()?.conn()?).execute(sql, args).await
    }

    async fn fetch(&mut self, sql: &str, args: &[Value], kinds: &[Kind]) -> DbResult<Vec<Row>> {
        ConnRef(self.turn()?.conn()?).fetch(sql, args, kinds).await
    }
}

#[async_trait]
impl WriteTx for GroupTx {
    async fn commit(mut self: Box<Self>, _woke: bool) -> DbResult<()> {
        let mut turn = self.turn.take().ok_or(sqlx::Error::PoolClosed)?;
        let (answer, outcome) = oneshot::channel();
        turn.cover(answer);
        if turn.hand_on() {
            turn.done = true;
            drop(turn);
        } else {
            // COMMIT runs on a task of its own: the callers it covers are answered even if
            // this one goes away.
            tokio::spawn(turn.end());
        }
        match outcome.await {
            Ok(result) => result.map_err(GroupError::into_db),
            Err(_) => Err(sqlx::Error::Protocol(
                "the shared COMMIT ended without an answer: its outcome is unknown".to_owned(),
            )),
        }
    }

    async fn rollback(mut self: Box<Self>) -> DbResult<()> {
        // Dropping the turn leaves its undo to the next holder (a flusher if nobody waits).
        drop(self.turn.take());
        Ok(())
    }

    fn conn(&mut self) -> &mut dyn SqlConn {
        self
    }
}

/// A shared transaction's failure, handed to every caller it covered (the driver's error
/// is not `Clone`). The dialect tells a caller to run again by this type, never by text or a
/// made-up code ([`GroupError::is_aborted`]).
#[derive(Clone, Debug)]
pub(crate) enum GroupError {
    /// Another caller's failure rolled back the shared transaction: nothing of this caller
    /// was applied, so it may run again.
    Aborted,
    /// The shared transaction failed itself (its COMMIT, say): the extended result code and
    /// message of the original.
    Failed { code: Option<String>, message: String },
}

impl GroupError {
    fn from_db(e: &DbError) -> GroupError {
        match e {
            DbError::Database(db) => GroupError::Failed {
                code: db.code().map(|c| c.into_owned()),
                message: db.message().to_owned(),
            },
            other => GroupError::Failed { code: None, message: other.to_string() },
        }
    }

    fn into_db(self) -> DbError {
        DbError::Database(Box::new(self))
    }

    /// True when `e` is a caller's [`GroupError::Aborted`].
    pub(crate) fn is_aborted(e: &DbError) -> bool {
        match e {
            DbError::Database(db) => {
                matches!(db.try_downcast_ref::<GroupError>(), Some(GroupError::Aborted))
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for GroupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for GroupError {}

impl DatabaseError for GroupError {
    fn message(&self) -> &str {
        match self {
            GroupError::Aborted => {
                "another call's failure rolled back the shared write transaction; nothing of \
                 this call was applied"
            }
            GroupError::Failed { message, .. } => message,
        }
    }

    fn code(&self) -> Option<std::borrow::Cow<'_, str>> {
        match self {
            GroupError::Aborted => None,
            GroupError::Failed { code, .. } => code.as_deref().map(std::borrow::Cow::Borrowed),
        }
    }

    fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
        self
    }

    fn kind(&self) -> ErrorKind {
        ErrorKind::Other
    }
}
