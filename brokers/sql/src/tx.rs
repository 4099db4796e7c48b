//! One write transaction's context ([`Tx`]), which every operation runs on, and why a
//! transaction body stopped ([`TxFail`]).

use taskgate::wake::Wakes;
use taskgate::{Error, ResolvedOptions, Task, Timestamp};

use crate::adapter::{DbError, SqlConn};
use crate::core::Core;
use crate::value::{DecodeError, Kind, Row, Value};

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

impl From<DecodeError> for TxFail {
    fn from(e: DecodeError) -> Self {
        TxFail::Db(DbError::Decode(Box::new(e)))
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
