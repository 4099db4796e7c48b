//! [`Lanes`]: connections for single autocommit statements, kept between uses outside sqlx's
//! pool.
//!
//! sqlx 0.8.6's pool pings every connection it takes back (`PoolConnection`'s drop runs
//! `return_to_pool`, which always calls `ping`): one more round trip, and a spawned task, for
//! every statement run on a pooled connection. At batch 1 a PostgreSQL claim and its ack are
//! one statement each, so the pings were half of a job's round trips; without them the broker
//! went from 73–76 % of `pgbench`'s raw ceiling to 84–99 % (benches/report-notes.md, finding
//! 29). The pool has no setting that turns the ping off, so the adapters run their single
//! statements (the one-statement claim, ack and enqueue, and the reads) on lanes: at most
//! `size` connections, each opened when first needed and put back after a statement that ran
//! to its end.
//!
//! What the ping was for is kept another way. A lane whose statement did not finish (the
//! caller's future was dropped mid-statement, or the connection failed) is not put back: its
//! connection is dropped, which closes it, so no later statement can read an earlier one's
//! answer. A connection the server closed while it sat idle fails its next statement as a
//! lost connection, which the adapters retry on another lane.

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use sqlx::Connection;
use tokio::sync::{Semaphore, SemaphorePermit};

use crate::{DbError, DbResult};

/// Up to `size` connections for single statements (see the module documentation).
#[derive(Debug)]
pub struct Lanes<C> {
    idle: Mutex<Vec<C>>,
    permits: Semaphore,
    timeout: Duration,
}

/// One connection taken from [`Lanes`]: [`Lane::keep`] puts it back after a statement that
/// ran to its end; dropped without that, the connection is closed.
#[derive(Debug)]
pub struct Lane<'a, C> {
    lanes: &'a Lanes<C>,
    conn: Option<C>,
    _permit: SemaphorePermit<'a>,
}

impl<C: Connection> Lanes<C> {
    /// At most `size` connections (at least one); a caller waits up to `timeout` for one.
    pub fn new(size: usize, timeout: Duration) -> Self {
        Lanes { idle: Mutex::new(Vec::new()), permits: Semaphore::new(size.max(1)), timeout }
    }

    /// A lane: an idle connection (the one put back last), or a new one from `connect` when
    /// none is idle. Waiting while every lane is in use and connecting take the timeout
    /// together ([`sqlx::Error::PoolTimedOut`], as sqlx's pool); [`sqlx::Error::PoolClosed`]
    /// after [`Lanes::close`].
    pub async fn take<F>(&self, connect: F) -> DbResult<Lane<'_, C>>
    where
        F: Future<Output = DbResult<C>>,
    {
        let take = async {
            let Ok(permit) = self.permits.acquire().await else {
                return Err(DbError::PoolClosed);
            };
            let idle = self.idle_list().pop();
            let conn = match idle {
                Some(conn) => conn,
                None => connect.await?,
            };
            Ok(Lane { lanes: self, conn: Some(conn), _permit: permit })
        };
        tokio::time::timeout(self.timeout, take).await.unwrap_or(Err(DbError::PoolTimedOut))
    }

    /// Refuses every later [`Lanes::take`] and closes the idle connections (lanes in use close
    /// theirs when dropped, as `close` has refused them).
    pub async fn close(&self) {
        self.permits.close();
        let idle = std::mem::take(&mut *self.idle_list());
        for conn in idle {
            let _ = conn.close().await;
        }
    }

    /// How many connections sit idle.
    pub fn idle(&self) -> usize {
        self.idle_list().len()
    }

    fn idle_list(&self) -> std::sync::MutexGuard<'_, Vec<C>> {
        // Pushes and pops only: a poisoned list is still consistent.
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<C> Lane<'_, C> {
    /// The lane's connection.
    pub fn conn(&mut self) -> &mut C {
        self.conn.as_mut().expect("a lane holds its connection until kept or dropped")
    }

    /// Puts the connection back for the next statement; call it only after a statement that
    /// ran to its end (its answer read, or an error the server sent). After [`Lanes::close`]
    /// the connection is closed instead.
    pub fn keep(mut self) {
        if let Some(conn) = self.conn.take() {
            if !self.lanes.permits.is_closed() {
                self.lanes.idle.lock().unwrap_or_else(|p| p.into_inner()).push(conn);
            }
        }
    }
}
