//! The migration lock on a MariaDB Galera cluster: `GET_LOCK` holds only on the node that
//! granted it, so two processes on two nodes could migrate the same tables at once. On a
//! Galera node the migration session first takes a lease row in [`LOCK_TABLE`] instead, which
//! the cluster orders: an `INSERT` of the same key on two nodes is a duplicate key on one of
//! them (1062, read after `wsrep_sync_wait`) or a certification conflict (1213), never two
//! grants. The lease ends when the session closes, or [`LEASE`] after a holder that died.

use std::time::{Duration, Instant};

use sqlx::{Executor, MySqlConnection};

use crate::dialect::{error_number, ER_DUP_ENTRY, ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT};

/// The table holding cluster-wide migration leases, one row per table prefix.
pub const LOCK_TABLE: &str = "taskgate_galera_locks";
/// How long a lease lasts if its holder never releases it (a process killed mid-migration).
pub const LEASE: Duration = Duration::from_secs(60);
/// How long a migration waits for another process's lease before `init` fails.
pub const LOCK_WAIT: Duration = Duration::from_secs(60);
/// Pause between two attempts to take a held lease.
const RETRY_EVERY: Duration = Duration::from_millis(50);

/// The lease this session holds, released by [`Lease::release`].
#[derive(Debug)]
pub(crate) struct Lease {
    name: String,
    holder: String,
}

/// `UNIX_TIMESTAMP` in ms on the server (every node of the cluster shares one clock source
/// closely enough for a lease measured in minutes).
const NOW_MS: &str = "CAST(FLOOR(UNIX_TIMESTAMP(NOW(3)) * 1000) AS SIGNED)";

/// Takes the cluster-wide lease `name` on `conn` (autocommit), waiting up to [`LOCK_WAIT`]
/// for another holder; an expired lease is taken over.
pub(crate) async fn take(conn: &mut MySqlConnection, name: &str) -> sqlx::Result<Lease> {
    create_table(conn).await?;
    let holder: String = sqlx::query_scalar("SELECT UUID()").fetch_one(&mut *conn).await?;
    let give_up = Instant::now() + LOCK_WAIT;
    loop {
        let expire = format!("DELETE FROM {LOCK_TABLE} WHERE name = ? AND expires_at < {NOW_MS}");
        match sqlx::query(&expire).bind(name).execute(&mut *conn).await {
            Ok(_) => {}
            // Aborted by a concurrent write of the same rows on another node: try again.
            Err(e) if conflict(&e) && Instant::now() < give_up => {
                tokio::time::sleep(RETRY_EVERY).await;
                continue;
            }
            Err(e) => return Err(e),
        }
        let insert = format!(
            "INSERT INTO {LOCK_TABLE} (name, holder, expires_at) VALUES (?, ?, {NOW_MS} + ?)"
        );
        let lease_ms = i64::try_from(LEASE.as_millis()).unwrap_or(i64::MAX);
        let taken =
            sqlx::query(&insert).bind(name).bind(&holder).bind(lease_ms).execute(&mut *conn).await;
        match taken {
            Ok(_) => return Ok(Lease { name: name.to_owned(), holder }),
            Err(e) if held(&e) && Instant::now() < give_up => tokio::time::sleep(RETRY_EVERY).await,
            Err(e) if held(&e) => {
                return Err(sqlx::Error::Protocol(format!(
                    "could not take the schema lock {name:?} within {} s: another process \
                     holds it (row in {LOCK_TABLE})",
                    LOCK_WAIT.as_secs()
                )))
            }
            Err(e) => return Err(e),
        }
    }
}

/// Creates [`LOCK_TABLE`] unless it exists. Asked first: even `CREATE TABLE IF NOT EXISTS`
/// is replicated in total order and aborts the lease writes of other sessions in flight.
async fn create_table(conn: &mut MySqlConnection) -> sqlx::Result<()> {
    let exists: Option<i64> = sqlx::query_scalar(
        "SELECT 1 FROM information_schema.tables WHERE table_schema = DATABASE() \
         AND table_name = ?",
    )
    .bind(LOCK_TABLE)
    .fetch_optional(&mut *conn)
    .await?;
    if exists.is_none() {
        let create = format!(
            "CREATE TABLE IF NOT EXISTS {LOCK_TABLE} (name VARCHAR(255) NOT NULL PRIMARY KEY, \
             holder VARCHAR(64) NOT NULL, expires_at BIGINT NOT NULL) ENGINE=InnoDB"
        );
        conn.execute(create.as_str()).await?;
    }
    Ok(())
}

/// True when a lease write was rolled back for a conflict (certification, a replicated write
/// or DDL aborting it, a deadlock): it can run again.
fn conflict(error: &sqlx::Error) -> bool {
    matches!(error_number(error), Some(ER_LOCK_DEADLOCK | ER_LOCK_WAIT_TIMEOUT))
}

/// True when an `INSERT` of the lease failed because someone else holds it: a duplicate key,
/// or a write of the same key on another node that won certification.
fn held(error: &sqlx::Error) -> bool {
    matches!(error_number(error), Some(ER_DUP_ENTRY | ER_LOCK_DEADLOCK | ER_LOCK_WAIT_TIMEOUT))
}

impl Lease {
    /// Gives the lease back (only if still this session's: an expired one may be another's).
    pub(crate) async fn release(&self, conn: &mut MySqlConnection) -> sqlx::Result<()> {
        let sql = format!("DELETE FROM {LOCK_TABLE} WHERE name = ? AND holder = ?");
        let give_up = Instant::now() + LOCK_WAIT;
        loop {
            let done = sqlx::query(&sql).bind(&self.name).bind(&self.holder).execute(&mut *conn);
            match done.await {
                Err(e) if conflict(&e) && Instant::now() < give_up => {
                    tokio::time::sleep(RETRY_EVERY).await;
                }
                done => return done.map(|_| ()),
            }
        }
    }
}
