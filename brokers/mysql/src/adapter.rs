//! [`MySqlAdapter`]: the engine's [`Adapter`] on an sqlx MySQL pool — write transactions,
//! pooled reads, and one detached session for migrations.
//!
//! Every connection of the pool is set up once, when it opens: READ COMMITTED (extensions §E6:
//! at REPEATABLE READ concurrent inserts and completions deadlock on gap locks), a short
//! `innodb_lock_wait_timeout`, so a lock wait surfaces as 1205 in seconds, not in 50, and the
//! server's NO PAD binary collation. Statements go to the server exactly as the engine wrote
//! them for [`MySqlDialect`](crate::MySqlDialect).
//!
//! Before a connection is taken from the pool the [`Reachability`] is asked: an unreachable
//! server is reported at once with the driver's cause ("Connection refused", a failed name
//! lookup), not after the pool's 30 s of retrying as "pool timed out".
//!
//! Pooled connections are held as [`Conn`]s: one whose caller left in the middle of a
//! statement is closed, never handed back to the pool (see [`Conn`] for why).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sqlx::mysql::{MySql, MySqlConnectOptions, MySqlConnection, MySqlPool};
use sqlx::pool::PoolConnection;
use sqlx::Connection;
use taskgate_sql::{
    Adapter, DbResult, Kind, Reachability, Row, Session, SqlConn, StatementLimit, Value, WriteTx,
};

use crate::codec;
use crate::dialect::is_connection_lost;
use crate::galera;
use crate::server::{setup_session, ServerInfo};

/// How long after a lost connection every pooled connection is pinged before use.
const SUSPECT_FOR: Duration = Duration::from_secs(5);

/// Whether the pool's connections are under suspicion. Pinging every connection before use
/// costs a round trip per call (a third of a claim's time on a busy server), so connections
/// are pinged only after one was found dead — then every idle connection is checked for a
/// while, and dead ones are replaced instead of failing one call each — or when they sat idle
/// long enough for a server or middlebox timeout.
///
/// It also holds the pool's [`Reachability`]: a lost connection makes the next call check that
/// the server can be reached at all.
#[derive(Debug)]
pub(crate) struct Health {
    origin: Instant,
    suspect_until_ms: AtomicU64,
    pub(crate) reach: Reachability,
}

impl Health {
    /// Health of a new pool whose connection attempts give up after `connect_timeout`.
    pub(crate) fn new(connect_timeout: Duration) -> Health {
        Health {
            origin: Instant::now(),
            suspect_until_ms: AtomicU64::new(0),
            reach: Reachability::new(connect_timeout),
        }
    }
}

impl Health {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Notes a failed statement; a lost connection puts the pool under suspicion.
    pub(crate) fn observe(&self, error: &sqlx::Error) {
        if is_connection_lost(error) {
            self.reach.lost();
            let until =
                self.now_ms().saturating_add(u64::try_from(SUSPECT_FOR.as_millis()).unwrap_or(0));
            self.suspect_until_ms.fetch_max(until, Ordering::Relaxed);
        }
    }

    /// Notes a statement's outcome: a success tells the reachability check the server answers, a failure
    /// goes to [`Health::observe`].
    fn outcome(&self, error: Option<&sqlx::Error>) {
        match error {
            None => self.reach.contact(),
            Some(e) => self.observe(e),
        }
    }

    /// True while connections should be pinged before use.
    pub(crate) fn suspect(&self) -> bool {
        self.now_ms() < self.suspect_until_ms.load(Ordering::Relaxed)
    }
}

/// Runs statements on one connection, reporting lost connections to the pool's [`Health`].
#[derive(Clone, Debug)]
struct Runner {
    health: Arc<Health>,
}

impl Runner {
    async fn execute(
        &self,
        conn: &mut MySqlConnection,
        sql: &str,
        args: &[Value],
    ) -> DbResult<u64> {
        let done = codec::bind(sql, args)?.execute(conn).await;
        self.health.outcome(done.as_ref().err());
        done.map(|r| r.rows_affected())
    }

    async fn fetch(
        &self,
        conn: &mut MySqlConnection,
        sql: &str,
        args: &[Value],
        kinds: &[Kind],
    ) -> DbResult<Vec<Row>> {
        let rows = codec::bind(sql, args)?.fetch_all(conn).await;
        self.health.outcome(rows.as_ref().err());
        codec::decode_rows(&rows?, kinds)
    }

    /// A transaction control statement (`BEGIN`, `COMMIT`, `ROLLBACK`), sent as text the way
    /// sqlx's own transactions send it.
    async fn command(&self, conn: &mut MySqlConnection, sql: &str) -> DbResult<()> {
        let done = sqlx::Executor::execute(conn, sql).await;
        self.health.outcome(done.as_ref().err());
        done.map(|_| ())
    }
}

/// How a write transaction begins on a Galera node: with `autocommit` off and a savepoint.
///
/// MariaDB 10.11 with galera-4 26.4 can end a transaction that lost to a replicated write
/// (brute-force abort, typically while a statement waits for `wsrep_sync_wait`) without
/// delivering the 1213 to its client: every later statement answered OK, ran in autocommit
/// mode and committed on its own, and the final `COMMIT` committed nothing. Measured with c56
/// (1,000 concurrent cancels and resumes of one task on three nodes): in about 1 run in 10 a
/// resume's `UPDATE` was rolled back while its audit row, inserted after the silent abort,
/// committed alone — an `ok` record without its change ("two successful cancels in a row").
/// With `autocommit = 0` the statements after such an abort stay in an implicit transaction
/// that nothing commits, and the savepoint, which a rollback destroys, tells at `COMMIT`
/// whether the transaction is still the one that began ([`GALERA_COMMIT`]).
const GALERA_BEGIN: &str = "SET autocommit = 0; BEGIN; SAVEPOINT taskgate_tx";
/// The `COMMIT` of a Galera transaction: `RELEASE SAVEPOINT` fails with 1305 when the
/// transaction ended silently (then nothing is committed: the rest of the batch does not run,
/// and [`GALERA_ROLLBACK`] follows), else the transaction commits and `autocommit` is back on.
const GALERA_COMMIT: &str = "RELEASE SAVEPOINT taskgate_tx; COMMIT; SET autocommit = 1";
/// The `ROLLBACK` of a Galera transaction, `autocommit` back on.
const GALERA_ROLLBACK: &str = "ROLLBACK; SET autocommit = 1";

/// A pooled connection that goes back to the pool only in a state its next user can rely on.
///
/// sqlx 0.8.6's MySQL connection is not cancel-safe: a statement whose future is dropped while
/// it waits for or reads the server's answer leaves the stream mid-reply, and the ping the pool
/// runs on every returned connection can then wait forever (launchbadge/sqlx#563, #4349) while
/// holding a pool permit — the broker's `close`, which waits for every permit, never returned
/// (the history check caught it: a caller's timeout dropped a claim mid-reply). So every
/// statement marks the connection busy until its answer is read, and a connection dropped
/// busy is closed (the server ends its session and rolls back what it held) and replaced,
/// never returned. One dropped between statements of an open transaction is rolled back on a
/// task of its own before it goes back.
struct Conn {
    /// The connection; `None` only once dropped.
    conn: Option<PoolConnection<MySql>>,
    runner: Runner,
    /// A statement was sent and its answer not yet read, or the connection was found lost:
    /// its state is unknown, so it is closed, not reused.
    busy: bool,
    /// `BEGIN` was sent and no `COMMIT` or `ROLLBACK` has ended the transaction.
    in_tx: bool,
    /// The server is a Galera node: transactions run as [`GALERA_BEGIN`] describes.
    galera: bool,
}

impl Conn {
    fn new(conn: PoolConnection<MySql>, runner: Runner) -> Conn {
        Conn { conn: Some(conn), runner, busy: false, in_tx: false, galera: false }
    }

    /// Marks a statement sent; returns the live connection (present until drop) and the runner.
    fn send(&mut self) -> DbResult<(&mut MySqlConnection, &Runner)> {
        self.busy = true;
        match self.conn.as_mut() {
            Some(conn) => Ok((&mut **conn, &self.runner)),
            None => Err(sqlx::Error::Protocol("mysql connection already released".into())),
        }
    }

    async fn execute(&mut self, sql: &str, args: &[Value]) -> DbResult<u64> {
        let (conn, runner) = self.send()?;
        let done = runner.execute(conn, sql, args).await;
        self.answered(&done);
        done
    }

    async fn fetch(&mut self, sql: &str, args: &[Value], kinds: &[Kind]) -> DbResult<Vec<Row>> {
        let (conn, runner) = self.send()?;
        let rows = runner.fetch(conn, sql, args, kinds).await;
        self.answered(&rows);
        rows
    }

    /// Notes a statement's answer: read in full, unless the connection was lost.
    fn answered<T>(&mut self, answer: &DbResult<T>) {
        self.busy = answer.as_ref().is_err_and(is_connection_lost);
    }

    /// Sends `sql` (`BEGIN`, `COMMIT` or `ROLLBACK`, on a Galera node their
    /// [`GALERA_BEGIN`] forms); `in_tx` is what holds once it succeeded.
    async fn command(&mut self, sql: &str, in_tx: bool) -> DbResult<()> {
        let text = match (self.galera, sql) {
            (true, "BEGIN") => GALERA_BEGIN,
            (true, "COMMIT") => GALERA_COMMIT,
            (true, "ROLLBACK") => GALERA_ROLLBACK,
            _ => sql,
        };
        let (conn, runner) = self.send()?;
        let done = runner.command(conn, text).await;
        self.answered(&done);
        if done.is_ok() {
            self.in_tx = in_tx;
        } else if self.galera && sql == "COMMIT" && !self.busy {
            // Refused (the savepoint gone, a certification conflict): nothing was committed.
            // Roll back what is open and turn autocommit on again before the connection goes
            // back to the pool; if that fails too, the connection is closed instead.
            let (conn, runner) = self.send()?;
            let undone = runner.command(conn, GALERA_ROLLBACK).await;
            self.busy = undone.is_err();
            self.in_tx = false;
        }
        done
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let Some(mut conn) = self.conn.take() else { return };
        if self.busy {
            // Mid-reply or lost: closing (with sqlx's 5 s bound) is the only safe end; a
            // rollback could wait on a dead peer.
            conn.close_on_drop();
            return;
        }
        if !self.in_tx {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let mut conn = Conn::new(conn, self.runner.clone());
                conn.galera = self.galera;
                drop(runtime.spawn(async move {
                    // Failed, the connection is closed instead of returned (and a task that
                    // ends mid-statement leaves it busy, which closes it too).
                    if conn.command("ROLLBACK", false).await.is_err() {
                        if let Some(raw) = conn.conn.as_mut() {
                            raw.close_on_drop();
                        }
                    }
                }));
            }
            Err(_) => conn.close_on_drop(),
        }
    }
}

/// Opens one connection outside the pool and sets it up as the pool would: what the
/// [`Reachability`] runs to learn whether (and why not) the server can be reached.
#[derive(Clone, Debug)]
pub(crate) struct Probe {
    pub(crate) connect: MySqlConnectOptions,
    pub(crate) lock_wait: u64,
    pub(crate) server: Arc<ServerInfo>,
}

impl Probe {
    async fn run(&self) -> DbResult<()> {
        let mut conn = MySqlConnection::connect_with(&self.connect).await?;
        setup_session(&mut conn, self.lock_wait, &self.server).await?;
        conn.close().await
    }
}

/// The engine's adapter on one MySQL pool (reads and writes share it).
#[derive(Debug)]
pub(crate) struct MySqlAdapter {
    pool: MySqlPool,
    runner: Runner,
    probe: Probe,
    /// The cluster-wide migration lease a session takes on a Galera node (`<prefix>schema`).
    lock_name: String,
}

impl MySqlAdapter {
    /// The adapter on `pool` for the tables of `prefix`.
    pub(crate) fn new(
        pool: MySqlPool,
        health: Arc<Health>,
        probe: Probe,
        prefix: &str,
    ) -> MySqlAdapter {
        MySqlAdapter {
            pool,
            runner: Runner { health },
            probe,
            lock_name: format!("{prefix}schema"),
        }
    }

    fn reach(&self) -> &Reachability {
        &self.runner.health.reach
    }

    /// A pooled connection, taken through the reachability check.
    async fn acquire(&self) -> DbResult<PoolConnection<MySql>> {
        self.reach().acquire(self.pool.acquire(), || self.probe.run()).await
    }

    /// A pooled connection held as a [`Conn`].
    async fn conn(&self) -> DbResult<Conn> {
        Ok(Conn::new(self.acquire().await?, self.runner.clone()))
    }
}

/// A write transaction on a pooled connection (dropped uncommitted, it is rolled back or,
/// dropped mid-statement, closed: see [`Conn`]).
struct MySqlTx {
    conn: Conn,
}

#[async_trait]
impl SqlConn for MySqlTx {
    async fn execute(&mut self, sql: &str, args: &[Value]) -> DbResult<u64> {
        self.conn.execute(sql, args).await
    }

    async fn fetch(&mut self, sql: &str, args: &[Value], kinds: &[Kind]) -> DbResult<Vec<Row>> {
        self.conn.fetch(sql, args, kinds).await
    }
}

#[async_trait]
impl WriteTx for MySqlTx {
    async fn commit(mut self: Box<Self>, _woke: bool) -> DbResult<()> {
        // A connection lost here leaves the outcome unknown: the engine settles it.
        self.conn.command("COMMIT", false).await
    }

    async fn rollback(mut self: Box<Self>) -> DbResult<()> {
        self.conn.command("ROLLBACK", false).await
    }

    fn conn(&mut self) -> &mut dyn SqlConn {
        self
    }
}

/// A caller's connection inside the caller's own transaction (`enqueue_in`).
pub(crate) struct BorrowedConn<'c> {
    conn: &'c mut MySqlConnection,
    runner: Runner,
}

impl<'c> BorrowedConn<'c> {
    pub(crate) fn new(conn: &'c mut MySqlConnection) -> BorrowedConn<'c> {
        let health = Arc::new(Health::new(Duration::from_secs(30)));
        BorrowedConn { conn, runner: Runner { health } }
    }
}

#[async_trait]
impl SqlConn for BorrowedConn<'_> {
    async fn execute(&mut self, sql: &str, args: &[Value]) -> DbResult<u64> {
        self.runner.execute(self.conn, sql, args).await
    }

    async fn fetch(&mut self, sql: &str, args: &[Value], kinds: &[Kind]) -> DbResult<Vec<Row>> {
        self.runner.fetch(self.conn, sql, args, kinds).await
    }
}

/// The migration session: a connection detached from the pool, so the session-level
/// `GET_LOCK` can never travel back into the pool with it — closing (or dropping) the
/// connection ends the session and the server releases anything it still held. On a Galera
/// node, where `GET_LOCK` holds only on that node, the session holds the cluster-wide lease of
/// its table prefix ([`crate::galera`]) from its opening to its close.
struct MySqlSession {
    conn: MySqlConnection,
    runner: Runner,
    lease: Option<galera::Lease>,
}

#[async_trait]
impl SqlConn for MySqlSession {
    async fn execute(&mut self, sql: &str, args: &[Value]) -> DbResult<u64> {
        self.runner.execute(&mut self.conn, sql, args).await
    }

    async fn fetch(&mut self, sql: &str, args: &[Value], kinds: &[Kind]) -> DbResult<Vec<Row>> {
        self.runner.fetch(&mut self.conn, sql, args, kinds).await
    }
}

#[async_trait]
impl Session for MySqlSession {
    async fn begin(&mut self) -> DbResult<()> {
        self.execute("BEGIN", &[]).await.map(|_| ())
    }

    async fn commit(&mut self) -> DbResult<()> {
        self.execute("COMMIT", &[]).await.map(|_| ())
    }

    async fn rollback(&mut self) -> DbResult<()> {
        self.execute("ROLLBACK", &[]).await.map(|_| ())
    }

    async fn close(mut self: Box<Self>) -> DbResult<()> {
        let released = match &self.lease {
            Some(lease) => lease.release(&mut self.conn).await,
            None => Ok(()),
        };
        let closed = self.conn.close().await;
        released.and(closed)
    }

    async fn migration_vars(&mut self) -> DbResult<Vec<(String, String)>> {
        // `{nopad_bin}` (migration 0003): the NO PAD binary collation of this server.
        let collation = crate::server::nopad_of(&mut self.conn).await?;
        Ok(vec![("nopad_bin".to_owned(), collation.to_owned())])
    }
}

/// A pooled connection, then its `BEGIN` on a task of its own, so the `BEGIN` always runs to
/// completion: if nobody wants the transaction any more its drop rolls it back ([`Conn`]).
/// The wait for the connection stays in the caller's future (sqlx's acquire is cancel-safe):
/// a caller that leaves while it waits takes no connection. When the acquire ran on the task
/// too, every claim whose caller had given up (c29 drops claims every few milliseconds) still
/// queued for a connection, began and rolled back; on a Galera node, where each of those
/// statements waits for the cluster, they queued faster than they drained, and an enqueue on
/// the same handle waited 30 s for a connection ("pool timed out").
async fn begin_detached(
    pool: &MySqlPool,
    runner: &Runner,
    server: &Arc<ServerInfo>,
) -> DbResult<Conn> {
    let pooled = pool.acquire().await?;
    let mut conn = Conn::new(pooled, runner.clone());
    // Known once the pool's first connection was set up (`setup_session`).
    conn.galera = server.known_galera() == Some(true);
    let begin = async move {
        // Counted open before it is sent: a `BEGIN` whose answer is lost may have started one.
        conn.in_tx = true;
        conn.command("BEGIN", true).await?;
        Ok(conn)
    };
    match tokio::spawn(begin).await {
        Ok(begun) => begun,
        Err(join) => Err(sqlx::Error::Protocol(format!("begin task ended: {join}"))),
    }
}

#[async_trait]
impl Adapter for MySqlAdapter {
    async fn begin(&self) -> DbResult<Box<dyn WriteTx>> {
        let begin = begin_detached(&self.pool, &self.runner, &self.probe.server);
        let begun = self.reach().acquire(begin, || self.probe.run()).await;
        let conn = begun.inspect_err(|e| self.runner.health.observe(e))?;
        Ok(Box::new(MySqlTx { conn }))
    }

    async fn read(&self, sql: &str, args: &[Value], kinds: &[Kind]) -> DbResult<Vec<Row>> {
        let mut conn = self.conn().await?;
        match conn.fetch(sql, args, kinds).await {
            // A read is safe to repeat; after a lost connection the pool pings before use.
            Err(e) if is_connection_lost(&e) => {
                drop(conn);
                self.conn().await?.fetch(sql, args, kinds).await
            }
            other => other,
        }
    }

    async fn session(&self) -> DbResult<Box<dyn Session>> {
        let mut conn = self.acquire().await?.detach();
        let lease = match self.probe.server.known_galera() {
            Some(true) => Some(galera::take(&mut conn, &self.lock_name).await?),
            _ => None,
        };
        Ok(Box::new(MySqlSession { conn, runner: self.runner.clone(), lease }))
    }

    /// A Galera node's row locks hold only on that node ([`Adapter::row_locks_are_local`]);
    /// known from the first connection the handle opened.
    fn row_locks_are_local(&self) -> bool {
        self.probe.server.known_galera() == Some(true)
    }

    async fn close(&self) {
        self.pool.close().await;
    }

    async fn statement_limit(&self) -> DbResult<Option<StatementLimit>> {
        // The session value (read-only for a client) is the global value at connect time; a
        // statement above it is refused with ER_NET_PACKET_TOO_LARGE and the connection lost.
        let sql = "SELECT CAST(@@max_allowed_packet AS SIGNED)";
        let rows = self.read(sql, &[], &[Kind::Int]).await?;
        match rows.first().and_then(|r| r.first()) {
            Some(Value::Int(bytes)) => Ok(Some(StatementLimit {
                setting: "max_allowed_packet",
                bytes: u64::try_from(*bytes).unwrap_or(0),
            })),
            other => Err(sqlx::Error::Protocol(format!("max_allowed_packet read as {other:?}"))),
        }
    }
}
