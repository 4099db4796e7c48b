//! `taskgate-mysql`: the taskgate broker on MySQL 8.0.17+ and MariaDB 10.6+ (InnoDB).
//!
//! All broker logic is the shared SQL engine ([`taskgate_sql::SqlBroker`]); this crate supplies
//! what is MySQL's own:
//!
//! * **Sessions** at READ COMMITTED with `innodb_lock_wait_timeout` 5 s (unless the URL sets
//!   `?innodb_lock_wait_timeout=N`), `utf8mb4` with the server's NO PAD binary collation, UTC.
//!   At the default REPEATABLE READ, concurrent inserts and completions deadlock on gap locks.
//! * **Names compare by bytes**: every column holding an ID, type, queue, business key, owner
//!   or lease token uses the server's NO PAD binary collation (migration 0003;
//!   [`nopad_collation`] picks it from `SELECT VERSION()`: MariaDB `utf8mb4_nopad_bin`, MySQL
//!   8.0.17+ `utf8mb4_0900_bin`). `utf8mb4_bin` is PAD SPACE on both servers and would make
//!   `"q "` the same queue as `"q"`.
//! * **The retry loop's classification** on the server's error number (never message text):
//!   1213 (deadlock) retried at once up to 5 attempts, 1205 (lock wait timeout) once more,
//!   everything else returned as it is. A connection lost *before* COMMIT (killed, server
//!   restart) is retried too: the server rolled the transaction back with it. One lost
//!   *during* COMMIT leaves the outcome unknown: enqueue, `enqueue_many` and ack find out
//!   (the engine runs them again under the same IDs and tokens and compares) and return the
//!   truth; other writes report it (`taskgate_sql::CommitUnknown`). [`MySqlBroker::tx_retries`]
//!   counts retries.
//! * **An unreachable server** is reported at once with the driver's cause, by
//!   [`MySqlBroker::connect`], `init` and every later call: the pool's reachability check opens a
//!   connection of its own when it does not know the server is up, instead of letting the
//!   pool retry a refused connection for 30 s and report "pool timed out". A server that
//!   accepts the connection and never answers is given up after the connect timeout
//!   ([`MySqlOptions::connect_timeout`], 10 s by default, `?connect_timeout=N` in the URL), and
//!   the error names it.
//! * **Claims** with `SELECT … ORDER BY run_at, id LIMIT n FOR UPDATE SKIP LOCKED` on the ready
//!   index, then one `UPDATE` by primary key — no `RETURNING`, no reused placeholders.
//! * **Server time** through `COALESCE(?, CAST(FLOOR(UNIX_TIMESTAMP(NOW(3)) * 1000) AS
//!   SIGNED))`; an injected clock fills the `?` (extensions §E1).
//! * **Quota** in the two-step form that is correct whether or not the connection reports found
//!   rows (sqlx 0.8.6 always sets `CLIENT_FOUND_ROWS`; notes §15.1). It is the only statement
//!   whose affected-row count the engine reads: every other write decides from rows it
//!   locked and read, so the flag changes nothing else.
//! * **Unique violations** (1062) translated by index name: `uq_chain_head` ⇒ `TaskExists`
//!   with the key's tail, `uq_replay_of` ⇒ `AlreadyReplayed`, anything else ⇒ plain
//!   `TaskExists` (the dialect's `unique_target_of` holds the one message match).
//! * **Migrations** (`migrations/mysql/`) applied by `init` under `GET_LOCK` on one dedicated
//!   session; every statement is idempotent because MySQL DDL is not transactional (1060,
//!   1061 and 1091 on a re-run mean "already applied").
//! * **Wake-ups**: in-process at once; other processes find new work by polling (200 ms by
//!   default, [`MySqlOptions::poll_interval`]).
//! * [`MySqlBroker::enqueue_in`]: enqueue inside the caller's own transaction (extensions §E15).
//! * **MariaDB Galera** (detected from `wsrep_on`): sessions set `wsrep_sync_wait` =
//!   [`GALERA_SYNC_WAIT`] (read-your-writes across nodes), migrations hold a cluster-wide lease
//!   row ([`galera`]) instead of `GET_LOCK`, an enqueue writes its open parents' rows (row
//!   locks are node-local) and certification conflicts (1213) are retried up to 30 times.
//!   docs/scaling.md has the settings and the limits.
//!
//! # MySQL and MariaDB
//!
//! Every statement is accepted by both. Differences that matter: MariaDB's 1062 message names
//! the key without its table (`for key 'p_uq_chain_head'`, MySQL 8: `'p_tasks.p_uq_chain_head'`);
//! `SKIP LOCKED` needs MySQL 8.0 / MariaDB 10.6; MariaDB would allow `ADD COLUMN IF NOT
//! EXISTS`, MySQL does not, so migrations swallow 1060/1061/1091 instead; the NO PAD binary
//! collation is `utf8mb4_nopad_bin` on MariaDB and `utf8mb4_0900_bin` on MySQL (8.0.17+, the
//! oldest MySQL taskgate runs on).
//!
//! # Limits
//!
//! `id`, `type`, `queue` and `business_key` hold at most 255 characters (checked before any
//! I/O, the same limit as every backend). A payload, result or cursor holds at most the
//! configured `max_payload_bytes` (16 MiB) or the server's `max_allowed_packet` less 8 KiB,
//! whichever is smaller: `init` reads `@@max_allowed_packet` (a client cannot raise its session
//! value, and taskgate does not change the server's), [`Broker::limits`](taskgate::Broker::limits)
//! reports the result, and a larger value is `InvalidInput` naming the limit and the setting.
//! On MariaDB's default 16 MiB packet that is 16 MiB − 8 KiB; MySQL 8's default (64 MiB) keeps
//! 16 MiB. The engine keeps every statement below the packet: a row with several values that
//! large is inserted without them and each value follows in its own `UPDATE`, and batches
//! (`enqueue_many`, `ack_many`) are split into as many statements as fit. A claim over several queues at once cannot walk the ready index in
//! order and locks every ready row of those queues until it commits; single-queue claims lock
//! only what they take.
//!
//! ```no_run
//! # async fn demo() -> taskgate::Result<()> {
//! use taskgate::{Broker, BrokerOptions, Task};
//! let broker = taskgate_mysql::MySqlBroker::connect("mysql://root@127.0.0.1:3306/test").await?;
//! broker.init(BrokerOptions::default()).await?;
//! broker.enqueue(&Task::new("email", "default")).await?;
//! # Ok(()) }
//! ```

mod adapter;
mod codec;
mod dialect;
pub mod galera;
mod migrations;
mod options;
mod server;
#[cfg(feature = "testing")]
pub mod testing;

use std::sync::Arc;

use sqlx::mysql::{MySql, MySqlPool};
use taskgate::{CallerTx, Capabilities, Error, Result, Task, Timestamp, TxEnqueue};
use taskgate_sql::{EngineConfig, HotStatement, Kind, SqlBroker};

use crate::adapter::{BorrowedConn, Health, MySqlAdapter};
pub use crate::dialect::{error_number, MySqlDialect};
pub use crate::migrations::MIGRATIONS;
pub use crate::options::{
    MySqlOptions, CONNECT_TIMEOUT_PARAM, DEFAULT_CONNECT_TIMEOUT, DEFAULT_LOCK_WAIT_TIMEOUT_SECS,
    DEFAULT_POLL_INTERVAL, DEFAULT_POOL_SIZE, DEFAULT_PREFIX, LOCK_WAIT_TIMEOUT_PARAM,
};
use crate::server::ServerInfo;
pub use crate::server::{nopad_collation, GALERA_SYNC_WAIT, MARIADB_NOPAD_BIN, MYSQL_NOPAD_BIN};
/// The sqlx this backend is built on (0.8.6), so a caller's transaction for `enqueue_in` has
/// the same types: `taskgate_<backend>::sqlx::Transaction`.
pub use sqlx;

/// The backend's name in errors and reports.
pub const NAME: &str = "mysql";

/// What a MySQL broker declares ([`Broker::capabilities`](taskgate::Broker::capabilities)):
/// quota, audit, `enqueue_in`, shared durable storage and the server's clock; other processes' writes
/// are found by polling (no cross-process wake-ups).
pub const CAPABILITIES: Capabilities = Capabilities::NONE
    .with_quota(true)
    .with_audit(true)
    .with_transactional_enqueue(true)
    .with_shared_storage(true)
    .with_durable(true)
    .with_server_clock(true);

/// A taskgate broker on MySQL/MariaDB. Build it with [`MySqlBroker::connect`] or
/// [`MySqlOptions`]; [`init`](taskgate::Broker::init) applies the migrations.
///
/// Clones share one handle (one pool, one lifecycle, one wake hub).
#[derive(Clone, Debug)]
pub struct MySqlBroker {
    inner: SqlBroker,
    pool: MySqlPool,
}

taskgate_sql::delegate_broker!(MySqlBroker, inner, tx_enqueue);

/// [`MySqlBroker::enqueue_in`] for callers that hold a `dyn Broker` (the worker runtime's
/// `Client::submit_in`): `tx` is a `sqlx::Transaction<'static, MySql>` (`pool.begin()`) or the
/// connection of an open transaction (`&mut *tx`); a connection outside a transaction is
/// `InvalidInput`.
#[async_trait::async_trait]
impl TxEnqueue for MySqlBroker {
    async fn enqueue_in_tx(&self, tx: CallerTx<'_>, task: &Task) -> Result<Task> {
        let conn = tx.connection::<sqlx::Transaction<'static, MySql>>("mysql")?;
        match sqlx::Connection::is_in_transaction(&*conn) {
            true => self.enqueue_on_conn(conn, task).await,
            false => {
                Err(Error::invalid("transaction", "the connection is not inside a transaction"))
            }
        }
    }
}

impl MySqlBroker {
    /// Connects to the server at `url` with the default options and checks it is reachable.
    /// Call [`init`](taskgate::Broker::init) before use.
    pub async fn connect(url: &str) -> Result<MySqlBroker> {
        MySqlOptions::from_url(url)?.connect().await
    }

    /// A broker on `url` with the default options, without touching the server (the pool
    /// connects on first use; `init` fails if the server cannot be reached).
    pub fn connect_lazy(url: &str) -> Result<MySqlBroker> {
        MySqlOptions::from_url(url)?.connect_lazy()
    }

    fn build(options: MySqlOptions) -> Result<MySqlBroker> {
        let health = Arc::new(Health::new(options.connect_timeout));
        let server = Arc::new(ServerInfo::default());
        let pool = options.pool(health.clone(), server.clone());
        let probe = options.probe(server);
        let adapter: Arc<dyn taskgate_sql::Adapter> =
            Arc::new(MySqlAdapter::new(pool.clone(), health, probe, &options.prefix));
        #[cfg(feature = "test-hooks")]
        let adapter = match &options.log {
            Some(log) => taskgate_sql::RecordingAdapter::wrap(adapter, log.clone()),
            None => adapter,
        };
        let config = EngineConfig {
            prefix: options.prefix.clone(),
            poll_interval: options.poll_interval,
            migrations: MIGRATIONS,
            migrate_on_init: true,
            capabilities: CAPABILITIES,
        };
        let inner = SqlBroker::new(adapter, Arc::new(MySqlDialect), config)?;
        Ok(MySqlBroker { inner, pool })
    }

    /// Transactional enqueue (extensions §E15): enqueues `task` inside the caller's open
    /// transaction, with the same validation and errors as `enqueue`. The task is invisible to
    /// claimers until the caller commits and gone if it rolls back; waiters find it by their
    /// next poll after the commit. Notify is not called.
    ///
    /// After an `Err(Backend)` the transaction may have been rolled back by the server (a
    /// deadlock victim is rolled back whole); roll back and retry the unit of work.
    pub async fn enqueue_in(
        &self,
        tx: &mut sqlx::Transaction<'_, MySql>,
        task: &Task,
    ) -> Result<Task> {
        self.enqueue_on_conn(tx, task).await
    }

    async fn enqueue_on_conn(&self, conn: &mut sqlx::MySqlConnection, task: &Task) -> Result<Task> {
        self.inner.enqueue_on(&mut BorrowedConn::new(conn), task).await
    }

    /// Applies the migrations not yet recorded (also done by `init`); returns the versions run.
    pub async fn migrate(&self) -> Result<Vec<i64>> {
        self.inner.migrate().await
    }

    /// The connection pool (for `enqueue_in`: begin a transaction on it, or on your own pool).
    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    /// The table prefix.
    pub fn prefix(&self) -> &str {
        self.inner.prefix()
    }

    /// How many transactions this handle retried after a deadlock (1213), a lock-wait timeout
    /// (1205) or a connection lost before its commit.
    pub fn tx_retries(&self) -> u64 {
        self.inner.tx_retries()
    }

    /// The engine's hot statements (claim, next-due, ack, reap, propagation, repair) exactly as
    /// this backend sends them to the server, with representative arguments, for `EXPLAIN`
    /// checks (extensions §E6).
    pub fn hot_statements(&self, queue: &str, id: &str, now: Timestamp) -> Vec<HotStatement> {
        self.inner.hot_statements(queue, id, now)
    }

    /// The engine broker inside.
    pub fn engine(&self) -> &SqlBroker {
        &self.inner
    }
}

impl MySqlOptions {
    /// Builds the broker without touching the server (the pool connects on first use).
    /// Fails only on a bad prefix (`InvalidInput { field: "prefix" }`).
    pub fn connect_lazy(self) -> Result<MySqlBroker> {
        MySqlBroker::build(self)
    }

    /// Builds the broker and checks that the server is reachable: an unreachable server fails
    /// at once with the driver's cause (`Connection refused`, a failed name lookup).
    pub async fn connect(self) -> Result<MySqlBroker> {
        let broker = self.connect_lazy()?;
        let adapter = broker.inner.adapter();
        adapter.read("SELECT 1", &[], &[Kind::Int]).await.map_err(|e| Error::backend(NAME, e))?;
        Ok(broker)
    }
}

#[cfg(test)]
mod tests {
    use taskgate::{Broker, Capabilities};

    use super::{MySqlOptions, CAPABILITIES};

    #[tokio::test]
    async fn declares_all_but_cross_process_wakeups() -> taskgate::Result<()> {
        let broker = MySqlOptions::from_url("mysql://nobody@127.0.0.1:9/none")?.connect_lazy()?;
        assert_eq!(broker.capabilities(), CAPABILITIES);
        let everything = Capabilities::NONE
            .with_quota(true)
            .with_audit(true)
            .with_transactional_enqueue(true)
            .with_shared_storage(true)
            .with_durable(true)
            .with_server_clock(true);
        assert_eq!(CAPABILITIES, everything, "polling, no LISTEN/NOTIFY");
        assert!(broker.quota_provider().is_some(), "quota declared, quota given");
        Ok(())
    }
}
