//! [`PgAdapter`]: the engine's [`Adapter`] on a sqlx `PgPool` — READ COMMITTED write
//! transactions, the single statements (one-statement writes and reads) on [`Lanes`] lent by
//! the same pool, a dedicated migration session, recovery from connections the server
//! dropped, and the wake-up notification sent after commit.
//!
//! Why lanes: sqlx 0.8.6's pool pings every connection it takes back, one round trip more
//! per statement; at batch 1 a claim and its ack are one statement each (taskgate_sql's
//! `lanes` module, benches/report-notes.md finding 29).
//!
//! Before a connection is taken from the pool the [`Reachability`] is asked: an unreachable
//! server is reported at once with the driver's cause ("Connection refused", a failed name
//! lookup), not after the pool's 30 s of retrying as "pool timed out".
//!
//! Behind a transaction pooler ([`Pooled`]) nothing runs outside an explicit transaction:
//! sqlx sends a statement as Parse + Describe + Sync, then Bind + Execute + Sync, and between
//! the two Syncs a transaction pooler may give the client another server connection, where
//! the (unnamed) statement does not exist. So the single statements run as `BEGIN`, the
//! statement, `COMMIT` on a pooled connection (no lanes), every statement is unnamed, and
//! each transaction opens with the settings (`SET LOCAL`) instead of a session's.
//!
//! # Why the wake-up is sent after commit
//!
//! The engine tells [`WriteTx::commit`] whether the transaction made work claimable.
//! A `pg_notify` inside that transaction would be the obvious place, but PostgreSQL serialises
//! the commits of all notifying transactions in the cluster under one lock held across the
//! WAL flush, which defeats group commit: on this machine 16 sessions doing `UPDATE` +
//! `COMMIT` reach 4.5k tps, with a `pg_notify` in the same transaction 1.75k. So after a
//! successful commit that woke work this adapter asks the
//! [`Notifier`](crate::notifier::Notifier) to send one coalesced notification (at most one in
//! flight per handle). Other processes still
//! hear about every commit after it happened; in-process waiters are woken by the engine.
//! Only an idle handle's one-task enqueue carries `pg_notify` in its own `INSERT`
//! ([`SqlConn::inline_notify`], or [`Adapter::inline_notify`] for the one-statement enqueue; at
//! most one per notifier gap): nothing is queued behind the lock then, and the notification
//! leaves with the commit instead of a round trip later.

use std::sync::Arc;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgPool};
use sqlx::{Connection, PgConnection, Postgres, Transaction};
use taskgate_sql::{
    Adapter, DbError, DbResult, Kind, Lanes, Reachability, Row, Session, SqlConn, Value, WriteTx,
};

use crate::conn::{execute, fetch, PgSession};
use crate::notifier::Notifier;

use crate::dialect::is_connection_lost;

/// The PostgreSQL adapter: one pool, its connections lent to [`Lanes`] for single statements.
#[derive(Debug)]
pub(crate) struct PgAdapter {
    pub(crate) pool: PgPool,
    /// The pool's connections lent to the one-statement writes and the reads, kept between
    /// them without the pool's ping on every release (taskgate_sql's `lanes` module).
    pub(crate) lanes: Lanes<Postgres>,
    /// The listener's own one-connection pool; closing it ends the listener task.
    pub(crate) listen_pool: PgPool,
    pub(crate) connect: PgConnectOptions,
    pub(crate) notifier: Notifier,
    /// How many times a first statement is retried on a fresh connection when the pooled one
    /// turned out to be dead (every idle connection may have been terminated at once).
    pub(crate) reconnect_attempts: u32,
    /// Whether the server was reachable lately; probes with one connection of its own when
    /// it does not know.
    pub(crate) reach: Reachability,
    /// The pool's connect options, for the reachability probe.
    pub(crate) probe: PgConnectOptions,
    /// Behind a transaction pooler: how transactions open; `None` without one.
    pub(crate) pooled: Option<Pooled>,
}

/// How a handle behind a transaction pooler opens its transactions.
#[derive(Debug)]
pub(crate) struct Pooled {
    /// `BEGIN` followed by the settings as `set_config(…, true)`; `None`: a plain `BEGIN`.
    pub(crate) begin: Option<Arc<str>>,
    /// How each transaction of the migration session opens: `BEGIN`, the settings, and
    /// `pg_advisory_xact_lock` on the migration key.
    pub(crate) session_begin: String,
}

impl PgAdapter {
    /// Whether a first statement that failed with `e` on attempt `attempt` is tried again on a
    /// fresh connection: only after a lost connection, and not once the reachability probe failed
    /// since the attempt began (`probes` before it) — the server cannot be reached, and each
    /// further attempt would wait for another probe.
    fn worth_another(&self, e: &DbError, attempt: u32, probes: u64) -> bool {
        is_connection_lost(e)
            && attempt < self.reconnect_attempts
            && self.reach.failed_probes() == probes
    }

    /// The reachability probe: one connection outside the pool, closed at once.
    async fn probe(&self) -> DbResult<()> {
        PgConnection::connect_with(&self.probe).await?.close().await
    }

    /// Runs one statement on a lane: an idle lane's connection, or one from the pool. The lane
    /// keeps it when the server answered, with rows or with an error of its own; a connection
    /// that failed (or a call dropped mid-statement) goes back to the pool, whose ping on
    /// release drains or closes it.
    /// With `left`, a caller that left while the statement waited for its lane gets nothing
    /// sent (`Ok(None)`).
    async fn on_lane(
        &self,
        sql: &str,
        args: &[Value],
        kinds: &[Kind],
        left: Option<&(dyn Fn() -> bool + Send + Sync)>,
    ) -> DbResult<Option<Vec<Row>>> {
        let mut lane = self.reach.acquire(self.lanes.take(), || self.probe()).await?;
        if left.is_some_and(|left| left()) {
            lane.keep();
            return Ok(None);
        }
        let rows = fetch(lane.conn(), sql, args, kinds, true).await;
        match &rows {
            Ok(_) => {
                self.reach.contact();
                lane.keep();
            }
            Err(e) if is_connection_lost(e) => self.reach.lost(),
            Err(e) if answered(e) => lane.keep(),
            Err(_) => {}
        }
        rows.map(Some)
    }

    /// Opens a transaction, replacing pooled connections the server has dropped: `BEGIN` is
    /// the first statement on the connection and cannot have committed anything, so retrying
    /// it on another connection is always safe.
    async fn begin_tx(&self) -> DbResult<Transaction<'static, Postgres>> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            // Waiting for a pooled connection, it takes an idle lane's back.
            let _wanting = self.lanes.wanting();
            let probes = self.reach.failed_probes();
            let begin = begin_detached(&self.pool, self.begin_sql(), self.pooled.is_some());
            match self.reach.acquire(begin, || self.probe()).await {
                Err(e) if self.worth_another(&e, attempt, probes) => {}
                other => return other,
            }
        }
    }

    /// The custom opening of a transaction (behind a transaction pooler with settings).
    fn begin_sql(&self) -> Option<Arc<str>> {
        self.pooled.as_ref().and_then(|p| p.begin.clone())
    }

    /// One statement in a transaction of its own (behind a transaction pooler, where nothing
    /// may run outside one): `BEGIN`, `left` asked (when given; `Ok(None)` after a rollback
    /// when the caller left), the statement, `COMMIT`. A COMMIT that lost its connection
    /// returns that error, which the engine takes as "may have been applied", as it does for
    /// an autocommit statement's.
    async fn in_own_tx(
        &self,
        sql: &str,
        args: &[Value],
        kinds: &[Kind],
        left: Option<&(dyn Fn() -> bool + Send + Sync)>,
    ) -> DbResult<Option<Vec<Row>>> {
        let mut tx = self.begin_tx().await?;
        if left.is_some_and(|left| left()) {
            tx.rollback().await?;
            return Ok(None);
        }
        let out = async move {
            let rows = fetch(&mut tx, sql, args, kinds, false).await?;
            tx.commit().await?;
            Ok(rows)
        }
        .await;
        match &out {
            Ok(_) => self.reach.contact(),
            Err(e) if is_connection_lost(e) => self.reach.lost(),
            Err(_) => {}
        }
        let rows = out?;
        Ok(Some(rows))
    }
}

/// `pool.begin()` on a task of its own, so it always runs to completion.
///
/// sqlx 0.8.6 sends `BEGIN` and only counts the transaction once the server answered; a
/// `begin` future dropped in between leaves the pooled connection inside a transaction that
/// nothing rolls back (its rollback guard sees depth 0). The next user of the connection then
/// runs in that stale transaction ("there is already a transaction in progress"), and a read
/// there would hold its table locks until some later commit. Detached, the begin finishes; if
/// nobody takes the transaction, dropping it rolls back properly.
async fn begin_detached(
    pool: &PgPool,
    begin: Option<Arc<str>>,
    pooled: bool,
) -> DbResult<Transaction<'static, Postgres>> {
    let statement = begin.map(|sql| std::borrow::Cow::Owned(sql.to_string()));
    let task = if pooled {
        // Behind a transaction pooler every single statement is a transaction, so claimers
        // that leave often would leave a begin each waiting in the pool's queue, ahead of
        // every later caller. The connection is awaited here (a caller that leaves leaves the
        // queue); only the BEGIN is detached.
        let conn = pool.acquire().await?;
        tokio::spawn(Transaction::begin(conn, statement))
    } else {
        let pool = pool.clone();
        tokio::spawn(async move {
            match statement {
                Some(sql) => pool.begin_with(sql).await,
                None => pool.begin().await,
            }
        })
    };
    match task.await {
        Ok(result) => result,
        Err(join) => Err(DbError::Protocol(format!("begin task ended: {join}"))),
    }
}

#[async_trait]
impl Adapter for PgAdapter {
    async fn begin(&self) -> DbResult<Box<dyn WriteTx>> {
        let tx = self.begin_tx().await?;
        let persistent = self.pooled.is_none();
        Ok(Box::new(PgWriteTx { tx, notifier: self.notifier.clone(), notified: false, persistent }))
    }

    async fn read(&self, sql: &str, args: &[Value], kinds: &[Kind]) -> DbResult<Vec<Row>> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let probes = self.reach.failed_probes();
            let rows = match self.pooled {
                Some(_) => self.in_own_tx(sql, args, kinds, None).await,
                None => self.on_lane(sql, args, kinds, None).await,
            };
            match rows {
                Err(e) if self.worth_another(&e, attempt, probes) => {}
                other => return other.map(Option::unwrap_or_default),
            }
        }
    }

    async fn write_one(&self, sql: &str, args: &[Value], kinds: &[Kind]) -> DbResult<Vec<Row>> {
        let rows = match self.pooled {
            Some(_) => self.in_own_tx(sql, args, kinds, None).await?,
            None => self.on_lane(sql, args, kinds, None).await?,
        };
        Ok(rows.unwrap_or_default())
    }

    async fn write_one_unless(
        &self,
        sql: &str,
        args: &[Value],
        kinds: &[Kind],
        left: &(dyn Fn() -> bool + Send + Sync),
    ) -> DbResult<Option<Vec<Row>>> {
        match self.pooled {
            Some(_) => self.in_own_tx(sql, args, kinds, Some(left)).await,
            None => self.on_lane(sql, args, kinds, Some(left)).await,
        }
    }

    fn inline_notify(&self) -> Option<String> {
        self.notifier.inline()
    }

    fn woke(&self) {
        self.notifier.poke();
    }

    async fn session(&self) -> DbResult<Box<dyn Session>> {
        let conn = self.reach.within(PgConnection::connect_with(&self.connect)).await?;
        let pooled = self.pooled.as_ref().map(|p| p.session_begin.clone());
        Ok(Box::new(PgSession::new(conn, pooled)))
    }

    async fn close(&self) {
        self.listen_pool.close().await;
        self.lanes.close();
        self.pool.close().await;
    }
}

/// True when the server answered the statement (an error of its own, or rows that did not
/// decode): the connection is in step and can run the next one.
fn answered(e: &DbError) -> bool {
    matches!(
        e,
        DbError::Database(_)
            | DbError::RowNotFound
            | DbError::ColumnNotFound(_)
            | DbError::ColumnIndexOutOfBounds { .. }
            | DbError::ColumnDecode { .. }
            | DbError::Decode(_)
            | DbError::TypeNotFound { .. }
    )
}

/// One write transaction.
struct PgWriteTx {
    tx: Transaction<'static, Postgres>,
    notifier: Notifier,
    /// A statement carried this transaction's notification ([`SqlConn::inline_notify`]): it
    /// goes out with the COMMIT, so the commit asks the notifier for none.
    notified: bool,
    /// False behind a transaction pooler: statements are unnamed.
    persistent: bool,
}

#[async_trait]
impl SqlConn for PgWriteTx {
    async fn execute(&mut self, sql: &str, args: &[Value]) -> DbResult<u64> {
        execute(&mut self.tx, sql, args, self.persistent).await
    }

    async fn fetch(&mut self, sql: &str, args: &[Value], kinds: &[Kind]) -> DbResult<Vec<Row>> {
        fetch(&mut self.tx, sql, args, kinds, self.persistent).await
    }

    fn inline_notify(&mut self) -> Option<String> {
        if self.notified {
            return None;
        }
        let expr = self.notifier.inline()?;
        self.notified = true;
        Some(expr)
    }
}

#[async_trait]
impl WriteTx for PgWriteTx {
    async fn commit(self: Box<Self>, woke: bool) -> DbResult<()> {
        let PgWriteTx { tx, notifier, notified, .. } = *self;
        tx.commit().await?;
        if woke && !notified {
            notifier.poke();
        }
        Ok(())
    }

    async fn rollback(self: Box<Self>) -> DbResult<()> {
        self.tx.rollback().await
    }

    fn conn(&mut self) -> &mut dyn SqlConn {
        self
    }
}
