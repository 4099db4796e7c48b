//! [`Lanes`]: pooled connections lent to single autocommit statements and kept between them,
//! so they skip the ping sqlx's pool sends on every release.
//!
//! sqlx 0.8.6's pool pings every connection it takes back (`PoolConnection`'s drop runs
//! `return_to_pool`, which always calls `ping`): one more round trip, and a spawned task, for
//! every statement run on a pooled connection. At batch 1 a PostgreSQL claim and its ack are
//! one statement each, so the pings were half of a job's round trips; without them the broker
//! went from 67–86 % of `pgbench`'s raw ceiling to 86–91 % (benches/report-notes.md, finding
//! 29). The pool has no setting that turns the ping off, so an adapter runs its single
//! statements on lanes: connections taken from the same pool and, after a statement that ran
//! to its end, kept by the lanes instead of given back. The pool's size stays the handle's
//! one bound on connections:
//!
//! - the lanes hold at most `size` of the pool's connections (in use or idle; the adapter
//!   passes one less than the pool's size, so one is always left to transactions and to a
//!   caller's own use of the pool);
//! - a transaction of the handle that finds the pool exhausted takes an idle lane's connection
//!   back ([`Lanes::wanting`]), and while one waits no lane keeps its connection.
//!
//! What the ping is for stays where it is needed: a lane whose statement did not finish (the
//! caller's future was dropped mid-statement, or the connection failed) gives its connection
//! back to the pool, whose ping on release reads the unread answer to its end (or closes a
//! connection that failed), so no later statement can read an earlier one's answer. Closing
//! such a connection instead made every dropped call open a new one: under c29's thousands of
//! dropped claims the reconnects (each cancelled in turn by the next drop) starved the other
//! callers for minutes. A connection the server closed while it sat idle fails its next
//! statement as a lost connection, which the adapters handle as they did on the pool.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use sqlx::pool::PoolConnection;
use sqlx::{Database, Pool};
use tokio::sync::{Semaphore, SemaphorePermit};

use crate::{DbError, DbResult};

/// Pooled connections lent to single statements (see the module documentation).
#[derive(Debug)]
pub struct Lanes<DB: Database> {
    pool: Pool<DB>,
    idle: Mutex<Vec<PoolConnection<DB>>>,
    /// `None` when lanes are off (`size` 0): every statement takes a plain pooled connection.
    permits: Option<Semaphore>,
    /// Transactions of the handle waiting for a pooled connection ([`Lanes::wanting`]).
    wanted: AtomicUsize,
    closed: AtomicBool,
}

/// One connection taken from [`Lanes`]: [`Lane::keep`] keeps it for the next statement after
/// one that ran to its end; dropped without that, the connection goes back to the pool, whose
/// ping on release finishes reading it (or closes it).
#[derive(Debug)]
pub struct Lane<'a, DB: Database> {
    lanes: &'a Lanes<DB>,
    /// `None` only once kept.
    conn: Option<PoolConnection<DB>>,
    permit: Option<SemaphorePermit<'a>>,
}

/// A transaction of the handle waiting for a pooled connection: while it lives, lanes give
/// their connections back to the pool instead of keeping them.
#[derive(Debug)]
pub struct Wanting<'a, DB: Database> {
    lanes: &'a Lanes<DB>,
}

impl<DB: Database> Lanes<DB> {
    /// Lanes on `pool` holding at most `size` of its connections (0: lanes off).
    pub fn new(pool: Pool<DB>, size: usize) -> Self {
        Lanes {
            pool,
            idle: Mutex::new(Vec::new()),
            permits: (size > 0).then(|| Semaphore::new(size)),
            wanted: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
        }
    }

    /// A lane: an idle lane's connection (the one kept last), or one taken from the pool.
    /// While every lane is in use it waits for one, up to the pool's acquire timeout
    /// ([`sqlx::Error::PoolTimedOut`]); [`sqlx::Error::PoolClosed`] after [`Lanes::close`].
    pub async fn take(&self) -> DbResult<Lane<'_, DB>> {
        if self.closed.load(Ordering::Acquire) {
            return Err(DbError::PoolClosed);
        }
        let permit = match &self.permits {
            None => None,
            Some(permits) => {
                let timeout = self.pool.options().get_acquire_timeout();
                match tokio::time::timeout(timeout, permits.acquire()).await {
                    Ok(Ok(permit)) => Some(permit),
                    Ok(Err(_)) => return Err(DbError::PoolClosed),
                    Err(_) => return Err(DbError::PoolTimedOut),
                }
            }
        };
        let idle = self.idle_list().pop();
        let conn = match idle {
            Some(conn) => conn,
            None => self.pool.acquire().await?,
        };
        Ok(Lane { lanes: self, conn: Some(conn), permit })
    }

    /// Marks a transaction of the handle as waiting for a pooled connection until the guard
    /// is dropped. When the pool has no idle connection left to give, an idle lane's
    /// connection goes back to it now.
    pub fn wanting(&self) -> Wanting<'_, DB> {
        self.wanted.fetch_add(1, Ordering::AcqRel);
        let exhausted = self.pool.num_idle() == 0
            && self.pool.size() >= self.pool.options().get_max_connections();
        if exhausted {
            let given = self.idle_list().pop();
            drop(given);
        }
        Wanting { lanes: self }
    }

    /// Refuses every later [`Lanes::take`] and gives the idle connections back to the pool
    /// (which the adapter closes next); lanes in use give theirs back when done.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        if let Some(permits) = &self.permits {
            permits.close();
        }
        let idle = std::mem::take(&mut *self.idle_list());
        drop(idle);
    }

    /// How many connections idle lanes hold.
    pub fn idle(&self) -> usize {
        self.idle_list().len()
    }

    fn idle_list(&self) -> std::sync::MutexGuard<'_, Vec<PoolConnection<DB>>> {
        // Pushes and pops only: a poisoned list is still consistent.
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<DB: Database> Lane<'_, DB> {
    /// The lane's connection.
    pub fn conn(&mut self) -> &mut DB::Connection {
        self.conn.as_mut().expect("a lane holds its connection until kept")
    }

    /// Keeps the connection for the next statement; call it only after a statement that ran
    /// to its end (its answer read, or an error the server sent). The connection goes back to
    /// the pool instead when lanes are off or closed, or while a transaction of the handle
    /// waits for one ([`Lanes::wanting`]).
    pub fn keep(mut self) {
        let Some(conn) = self.conn.take() else { return };
        let wanted = self.lanes.wanted.load(Ordering::Acquire) > 0;
        if self.permit.is_some() && !wanted && !self.lanes.closed.load(Ordering::Acquire) {
            self.lanes.idle_list().push(conn);
        }
        // Otherwise `conn` drops here: back to the pool, which pings it first.
    }
}

impl<DB: Database> Drop for Wanting<'_, DB> {
    fn drop(&mut self) {
        self.lanes.wanted.fetch_sub(1, Ordering::AcqRel);
    }
}
