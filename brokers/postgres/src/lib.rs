//! `taskgate-postgres`: the PostgreSQL taskgate broker.
//!
//! [`PgBroker`] is the shared SQL engine ([`taskgate_sql::SqlBroker`]) on PostgreSQL:
//!
//! * **Claims** take `SELECT … FOR UPDATE SKIP LOCKED` then one `UPDATE` (single and
//!   `dequeue_many`), so concurrent claimers never wait for each other nor share a task; every
//!   write locks its row first, enqueue locks the parent rows, reads take no locks.
//! * **Time** is the server's (`clock_timestamp()`, floored to milliseconds) unless a clock is
//!   injected: every statement passes `COALESCE($n, <server now>)`, so workers on many
//!   machines judge leases and delays by one clock (extensions §E1).
//! * **Deadlocks** (`40P01`) and serialization failures (`40001`) are retried up to five
//!   attempts with a real-time back-off, and so is a transaction whose connection was lost
//!   before its COMMIT; everything else is returned as is (contract §11.2). A connection lost
//!   *during* COMMIT leaves the outcome unknown: enqueue, `enqueue_many` and ack find out and
//!   return the truth; other writes report it (`taskgate_sql::CommitUnknown`).
//!   [`PgBroker::tx_retries`] counts the retries.
//! * **An unreachable server** is reported at once with the driver's cause (by `connect`,
//!   `init`, and every later call: the pool's reachability check opens a connection of its own when
//!   it does not know the server is up, instead of letting the pool retry for its acquire
//!   timeout). A server that accepts the connection and never answers is given up after the
//!   connect timeout ([`PgOptions::connect_timeout`], 10 s by default, `?connect_timeout=N` in
//!   the URL), and the error names it.
//! * **Wake-ups**: in-process waiters at once; other processes through `LISTEN/NOTIFY` on the
//!   channel `<prefix>wake`, sent after commit; polling (200 ms by default) stays as the net,
//!   and the listener re-listens by itself after its connection drops (extensions §E2).
//! * **Schema**: `migrations/postgres/` applied by `init` under `pg_advisory_lock` on a
//!   dedicated connection, recorded in `<prefix>schema_migrations` (extensions §E6).
//! * **Transactional enqueue**: [`PgBroker::enqueue_in`] enqueues inside the caller's
//!   transaction (extensions §E15).
//! * **Behind a transaction pooler** (PgBouncer `pool_mode = transaction`): say so with
//!   `?pooler=transaction` in the URL or [`PgOptions::pooler`], and give the one `LISTEN`
//!   connection a direct URL (`&listen_url=…`, [`PgOptions::listen_url`]). The broker then
//!   sends no named prepared statements and runs every statement inside an explicit
//!   transaction (the pooler may switch server connections between transactions), keeps no
//!   session state ([`PgOptions::setting`] becomes `SET LOCAL` per transaction), and takes the
//!   migration lock with `pg_advisory_xact_lock` in each migration transaction. Without a
//!   listen URL other processes' waiters find new work by polling, and
//!   `cross_process_wakeups` is false. See docs/scaling.md.
//!
//! ```no_run
//! # async fn demo() -> taskgate::Result<()> {
//! use taskgate::{Broker, BrokerOptions, Task};
//! use taskgate_postgres::PgBroker;
//!
//! let broker = PgBroker::connect("postgres://app@localhost/app").await?;
//! broker.init(BrokerOptions::default()).await?;
//! broker.enqueue(&Task::new("email", "mail")).await?;
//! let claimed = broker.dequeue(&["mail"]).await?;
//! broker.ack(&claimed.id, &claimed.lease_token, None).await?;
//! # Ok(()) }
//! ```

mod adapter;
mod conn;
mod dialect;
mod migrations;
mod notifier;
mod options;
#[cfg(feature = "testing")]
pub mod testing;

use std::sync::Arc;

use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::Postgres;
use taskgate::{CallerTx, Capabilities, Error, Result, Status, Task, TxEnqueue};
use taskgate_sql::{EngineConfig, SqlBroker};

pub use dialect::{sqlstate, PgDialect};
pub use migrations::MIGRATIONS;
pub use options::{
    PgOptions, Pooler, CONNECT_TIMEOUT_PARAM, DEFAULT_ACQUIRE_TIMEOUT, DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_POLL_INTERVAL, DEFAULT_POOL_SIZE, DEFAULT_PREFIX, LISTEN_URL_PARAM, POOLER_PARAM,
};
/// The sqlx this backend is built on (0.8.6), so a caller's transaction for `enqueue_in` has
/// the same types: `taskgate_<backend>::sqlx::Transaction`.
pub use sqlx;

use adapter::{PgAdapter, Pooled};
use dialect::{advisory_key, wake_channel};
use notifier::Notifier;

/// What a PostgreSQL broker declares ([`Broker::capabilities`](taskgate::Broker::capabilities)):
/// everything — quota, audit, `enqueue_in`, `LISTEN/NOTIFY` wake-ups across processes, shared
/// durable storage, the server's clock. Behind a transaction pooler without a listen URL
/// ([`PgOptions::listen_url`]) the same but `cross_process_wakeups` (nobody listens).
pub const CAPABILITIES: Capabilities = Capabilities::NONE
    .with_quota(true)
    .with_audit(true)
    .with_transactional_enqueue(true)
    .with_cross_process_wakeups(true)
    .with_shared_storage(true)
    .with_durable(true)
    .with_server_clock(true);

/// The PostgreSQL broker. Clones share one handle (one pool, one listener).
#[derive(Clone, Debug)]
pub struct PgBroker {
    inner: SqlBroker,
    handle: Arc<Handle>,
}

/// What a handle owns besides the engine: its pool, its identity and its listener task.
#[derive(Debug)]
struct Handle {
    pool: PgPool,
    tag: String,
    application_name: String,
    /// False behind a transaction pooler: the caller's connections get unnamed statements.
    persistent: bool,
    listener: tokio::task::JoinHandle<()>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

taskgate_sql::delegate_broker!(PgBroker, inner, tx_enqueue);

/// [`PgBroker::enqueue_in`] for callers that hold a `dyn Broker` (the worker runtime's
/// `Client::submit_in`): `tx` is a `sqlx::Transaction<'static, Postgres>` (`pool.begin()`) or the
/// connection of an open transaction (`&mut *tx`); a connection outside a transaction is
/// `InvalidInput`.
#[async_trait::async_trait]
impl TxEnqueue for PgBroker {
    async fn enqueue_in_tx(&self, tx: CallerTx<'_>, task: &Task) -> Result<Task> {
        let conn = tx.connection::<sqlx::Transaction<'static, Postgres>>("postgres")?;
        match sqlx::Connection::is_in_transaction(&*conn) {
            true => self.enqueue_on_conn(conn, task).await,
            false => {
                Err(Error::invalid("transaction", "the connection is not inside a transaction"))
            }
        }
    }
}

impl PgBroker {
    /// A broker on `url` with the default options (prefix `taskgate_`, 10 connections,
    /// 200 ms poll), after checking that the server answers: an unreachable server fails at
    /// once with the driver's cause. `init` then migrates.
    pub async fn connect(url: &str) -> Result<PgBroker> {
        PgOptions::from_url(url)?.connect().await
    }

    /// A broker on `url` with the default options, without touching the server: the pools
    /// connect on first use, and `init` fails if the server cannot be reached. Must be called
    /// inside a Tokio runtime (the wake-up listener is spawned here).
    pub fn connect_lazy(url: &str) -> Result<PgBroker> {
        PgOptions::from_url(url)?.connect_lazy()
    }

    /// Builds the broker from `options`, checked before anything else (a bad prefix is
    /// `InvalidInput { field: "prefix" }` and no SQL is ever built with it). No I/O.
    fn build(options: PgOptions) -> Result<PgBroker> {
        options.check()?;
        let tag = handle_tag();
        let app = options.application_name.clone().unwrap_or_else(|| format!("taskgate:{tag}"));
        let connect = options.pool_connect().application_name(&app);
        let listen = options.listen_connect()?;
        let pool = PgPoolOptions::new()
            .max_connections(options.pool_size)
            .min_connections(0)
            .test_before_acquire(false)
            .acquire_timeout(options.acquire_timeout)
            .connect_lazy_with(connect.clone());
        let listen_connect = listen.clone().unwrap_or_else(|| connect.clone());
        let listen_pool = PgPoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            .acquire_timeout(options.acquire_timeout)
            .connect_lazy_with(listen_connect.application_name(&format!("{app}:listen")));
        let pooled = (options.pooler == Pooler::Transaction).then(|| {
            let begin = options.begin_sql();
            let key = advisory_key(&format!("{}schema", options.prefix));
            let opening = begin.as_deref().unwrap_or("BEGIN");
            Pooled {
                session_begin: format!("{opening}; SELECT pg_advisory_xact_lock({key})"),
                begin: begin.map(Arc::from),
            }
        });
        let persistent = pooled.is_none();
        let dialect = match pooled {
            Some(_) => PgDialect::new(tag.clone()).behind_transaction_pooler(),
            None => PgDialect::new(tag.clone()),
        };
        let channel = wake_channel(&options.prefix);
        let adapter = PgAdapter {
            pool: pool.clone(),
            // One connection is never lent, so transactions and a caller's own use of the
            // pool always have one to wait for.
            lanes: taskgate_sql::Lanes::new(
                pool.clone(),
                usize::try_from(options.pool_size.saturating_sub(1)).unwrap_or(usize::MAX),
            ),
            listen_pool: listen_pool.clone(),
            connect: connect.clone().application_name(&format!("{app}:migrate")),
            notifier: Notifier::spawn(pool.clone(), &channel, &tag),
            reconnect_attempts: options.pool_size.saturating_add(2),
            reach: taskgate_sql::Reachability::new(options.connect_timeout),
            probe: connect.application_name(&format!("{app}:probe")),
            pooled,
        };
        let adapter: Arc<dyn taskgate_sql::Adapter> = Arc::new(adapter);
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
            capabilities: CAPABILITIES.with_cross_process_wakeups(listen.is_some()),
        };
        let inner = SqlBroker::new(adapter, Arc::new(dialect), config)?;
        let listener = match listen {
            Some(_) => {
                tokio::spawn(notifier::listen(inner.clone(), listen_pool, channel, tag.clone()))
            }
            // Behind a transaction pooler with no direct URL nobody listens: polling finds
            // other processes' work.
            None => tokio::spawn(async {}),
        };
        let handle = Handle { pool, tag, application_name: app, persistent, listener };
        Ok(PgBroker { inner, handle: Arc::new(handle) })
    }

    /// Transactional enqueue (extensions §E15): the task is stored inside `tx`, invisible to
    /// claimers until the caller commits and gone if it rolls back. A task that is ready at
    /// once sends its wake-up notification in `tx` too, so waiters everywhere wake when (and
    /// only when) the caller commits. Same validation and errors as `enqueue`; Notify is not
    /// called. After a database error PostgreSQL has aborted `tx`: roll it back.
    pub async fn enqueue_in(
        &self,
        tx: &mut sqlx::Transaction<'_, Postgres>,
        task: &Task,
    ) -> Result<Task> {
        self.enqueue_on_conn(tx, task).await
    }

    async fn enqueue_on_conn(&self, conn: &mut sqlx::PgConnection, task: &Task) -> Result<Task> {
        let persistent = self.handle.persistent;
        let stored =
            self.inner.enqueue_on(&mut conn::ConnRef(&mut *conn, persistent), task).await?;
        if stored.status == Status::Pending {
            sqlx::query("SELECT pg_notify($1, '')")
                .persistent(persistent)
                .bind(wake_channel(self.inner.prefix()))
                .execute(conn)
                .await
                .map_err(|e| Error::backend("postgres", e))?;
        }
        Ok(stored)
    }

    /// How many transactions this handle retried after a deadlock or serialization failure.
    pub fn tx_retries(&self) -> u64 {
        self.inner.tx_retries()
    }

    /// The table prefix.
    pub fn prefix(&self) -> &str {
        self.inner.prefix()
    }

    /// The pool this handle runs on (for the caller's own transactions around
    /// [`PgBroker::enqueue_in`]). Behind a transaction pooler, run your own statements on it
    /// inside a transaction and unnamed (`sqlx::query(…).persistent(false)`): sqlx names a
    /// statement it was asked to keep even with its cache off.
    pub fn pool(&self) -> &PgPool {
        &self.handle.pool
    }

    /// The `application_name` of this handle's pooled connections; the listener's adds
    /// `:listen`, the migration session's `:migrate`.
    pub fn application_name(&self) -> &str {
        &self.handle.application_name
    }

    /// The payload of this handle's wake-up notifications (unique per handle).
    pub fn tag(&self) -> &str {
        &self.handle.tag
    }

    /// The engine underneath.
    pub fn engine(&self) -> &SqlBroker {
        &self.inner
    }
}

/// A short identifier of one broker handle: the random tail of a ULID, lowercase.
fn handle_tag() -> String {
    let ulid = taskgate::id::new_ulid().to_ascii_lowercase();
    ulid[ulid.len() - 10..].to_owned()
}

#[cfg(test)]
mod tests {
    use taskgate::Broker;

    use super::{PgBroker, CAPABILITIES};

    #[tokio::test]
    async fn declares_everything() -> taskgate::Result<()> {
        // A lazy broker does no I/O: no server is needed to read what it declares.
        let broker = PgBroker::connect_lazy("postgres://nobody@127.0.0.1:9/none")?;
        assert_eq!(broker.capabilities(), CAPABILITIES);
        let c = CAPABILITIES;
        assert!(c.quota && c.transactional_enqueue && c.cross_process_wakeups);
        assert!(c.shared_storage && c.durable && c.server_clock && c.audit);
        assert!(broker.quota_provider().is_some(), "quota declared, quota given");
        Ok(())
    }

    #[tokio::test]
    async fn behind_a_transaction_pooler_wakeups_cross_processes_only_with_a_listen_url(
    ) -> taskgate::Result<()> {
        let pooled = "postgres://nobody@127.0.0.1:9/none?pooler=transaction";
        let polling = PgBroker::connect_lazy(pooled)?;
        assert_eq!(polling.capabilities(), CAPABILITIES.with_cross_process_wakeups(false));
        let listening = PgBroker::connect_lazy(&format!(
            "{pooled}&listen_url=postgres%3A%2F%2Fnobody%40127.0.0.1%3A8%2Fnone"
        ))?;
        assert_eq!(listening.capabilities(), CAPABILITIES);
        Ok(())
    }
}
