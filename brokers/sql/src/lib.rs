//! `taskgate-sql`: the broker logic of every taskgate SQL backend, written once.
//!
//! SQLite, PostgreSQL and MySQL/MariaDB differ in syntax, locking clauses, the time expression,
//! error codes and a few statement shapes — not in what a broker does. So this crate holds the
//! whole [`Broker`](taskgate::Broker) contract as [`SqlBroker`], and a backend crate supplies:
//!
//! * an [`Adapter`] — binds [`Value`]s, decodes columns by [`Kind`], opens write transactions
//!   (`BEGIN IMMEDIATE` on SQLite), serves reads from a pool, hands out a migration
//!   [`Session`];
//! * a [`Dialect`] — placeholders (`?` / `$n`), server time in ms, row-lock clauses, the claim
//!   and quota statement shapes, how ready tasks are selected and which index serves them,
//!   table options, the DDL lock, and error classification
//!   on the driver's structured error (retry class, unique violations, already-applied DDL).
//!   Statements reach the driver exactly as the engine rendered them: an adapter never
//!   rewrites SQL;
//! * its migrations (`migrations/<dialect>/NNNN_name.sql`, see [`Migration`]);
//! * a public newtype (`SqliteBroker`, `PgBroker`, `MySqlBroker`) that forwards the trait with
//!   [`delegate_broker!`] and adds backend-only abilities (`enqueue_in`, LISTEN/NOTIFY).
//!
//! # What the engine guarantees (and what adapters may rely on)
//!
//! * Every write is one transaction run through the retry loop of contract §11.2: deadlocks and
//!   serialization failures ([`RetryClass::Immediate`]) are retried up to 5 attempts, lock-wait
//!   timeouts ([`RetryClass::Limited`]) up to 2, after a 5 ms << k back-off in real time; Notify
//!   snapshots of a failed attempt are dropped and the final attempt's are published after
//!   commit. [`SqlBroker::tx_retries`] counts retries.
//! * A COMMIT whose connection was lost ([`Dialect::is_connection_lost`]) is never retried
//!   blindly. Enqueue and ack settle it: their IDs are chosen before the first attempt and
//!   their tokens do not change, so running the transaction again finds what the lost attempt
//!   did — its rows stored as written, its tasks completed at its `finished_at` — and the call
//!   returns that truth, retrying an unreachable server for 5 s. If that is not enough the
//!   call fails with a [`CommitUnknown`] source and the handle remembers it: repeating the
//!   same call settles it without a duplicate. Other writes fail with [`CommitUnknown`].
//! * Adapters take pooled connections through a [`Reachability`] check, so an unreachable server is
//!   reported at once with the driver's cause.
//! * Writes lock their rows first (`{lock}` = [`Dialect::lock_clause`]); enqueue locks parent
//!   rows; propagation locks each child and converges the whole subtree in the transaction.
//! * Reads (get, list, counts, queue_len, paused_queues) and the empty-poll probe run through
//!   [`Adapter::read`], outside any transaction.
//! * Claims run on a spawned task and are handed over through a guard that requeues them if
//!   the caller's future was dropped (extensions §E0). A claimer whose caller went away while
//!   it waited for the writer leaves the queue without writing ([`Adapter::begin`] must be
//!   cancel-safe). `close` waits for claims in flight before closing the pools.
//! * An empty poll is one read ([`Adapter::read`]); after a claim that filled its batch the
//!   next claim skips that read.
//! * Ack is one `UPDATE … RETURNING` where [`Dialect::update_returning`] (token checked in the
//!   WHERE clause); otherwise a locking read (of ID, status and token only, unless a Notify
//!   observer wants snapshots), then one set-based UPDATE. Both ack shapes, and the
//!   `UpdateReturning` and `SelectThenUpdate` claim shapes, are proven by the contract suite
//!   on SQLite (`taskgate_sqlite::testing::ServerShapedDialect` runs the MySQL paths);
//!   [`ClaimShape::UpdateSkipLocked`] by the suite on PostgreSQL.
//! * A claim of [`ClaimShape::UpdateSkipLocked`] is one statement that reads the server's
//!   time itself, and runs as a transaction of its own ([`Adapter::write_one`]): one round
//!   trip. Only while a test's before-commit hook is installed does it run inside
//!   `BEGIN … COMMIT`, so the hook has a commit to hold.
//! * SQL uses `?` placeholders, never reused; with [`Placeholder::Dollar`] the engine rewrites
//!   them ([`rewrite_placeholders`]) before calling the adapter. Texts are built once per
//!   (dialect, prefix); `IN (…)` lists per call. The prefix is validated before any SQL.
//! * Stored times are unix ms. "Now" is the injected clock, else the local clock
//!   ([`TimeSource::Local`]), else the server's, read once per transaction (piggybacked on the
//!   first row lock where possible). `Broker::now` outside a transaction is one
//!   `SELECT <server now>` read; a fail's `RetryAt::After` is resolved on the transaction's now.
//! * A server that limits the size of one statement ([`Adapter::statement_limit`], MySQL's
//!   `max_allowed_packet`) lowers the payload limit at `init` to what fits beside an ID, and
//!   no statement goes over it: a row carrying more is inserted without its blobs, which follow
//!   one `UPDATE` each; multi-row inserts, acks and a step's cursor are split to fit.
//! * Argument checks are the core's (`taskgate::validate`), called before any transaction;
//!   `enqueue` and `ack` are the trait's provided forms over `enqueue_many` / `ack_many`.
//!
//! # Writing a new backend
//!
//! Implement [`Adapter`] (one generic `execute`/`fetch` per driver; decode [`Kind::Int`] from
//! any integer or boolean column type, [`Kind::Text`] from text or binary-collated strings;
//! bind [`Value::Null`] with its kind's SQL type), implement [`Dialect`], write the
//! migrations with the same numbers and names as `migrations/sqlite/`, and wrap [`SqlBroker`]
//! ([`EngineConfig::migrate_on_init`] = true for server databases; [`EngineConfig::capabilities`]
//! says what the backend declares). The schema must have the
//! columns of [`row::TASK_COLUMNS`] plus `has_children` (integer, default 0: set on a task
//! whenever it gets a child edge that is not done) and the tables `{prefix}tasks`, `{prefix}task_deps`,
//! `{prefix}quota` (`qkey, win, used, period`) and `{prefix}paused_queues(queue, paused_at)`.
//! Names (IDs, types, queues, keys, owners, tokens) must compare by bytes, without padding
//! (PostgreSQL: `COLLATE "C"`; MySQL/MariaDB: a NO PAD binary collation). Statements the
//! engine runs, and what they need from indexes, are listed by [`SqlBroker::hot_statements`]
//! (check them with `EXPLAIN` in a test, as `brokers/sqlite/tests/plans.rs` does).
//!
//! Then run the contract suite (`brokertest::contract_tests!`) on the backend. The engine's
//! `test-hooks` feature (never enabled by a shipped binary) gives `SqlBroker::set_before_commit_hook`
//! for crash tests and `RecordingAdapter` / `StatementLog`, the one statement recorder every
//! backend's `record_statements(log)` option wraps its adapter with.

mod adapter;
mod broker;
mod claimed;
mod combine;
mod core;
mod deliver;
mod dialect;
mod inflight;
mod lanes;
mod migrate;
mod ops;
mod plans;
mod quota;
mod reachability;
#[cfg(feature = "test-hooks")]
mod recording;
mod resolve;
pub mod row;
#[cfg(feature = "test-hooks")]
pub mod test_hooks;
#[cfg(feature = "testing")]
pub mod testing;
mod tx;
mod txrun;
mod unresolved;
mod value;

pub use adapter::{Adapter, DbError, DbResult, Session, SqlConn, StatementLimit, WriteTx};
pub use broker::{EngineConfig, SqlBroker};
#[cfg(feature = "test-hooks")]
pub use core::BeforeCommitHook;
pub use dialect::{
    placeholders, rewrite_placeholders, ClaimShape, DdlLock, Dialect, Placeholder, QuotaShape,
    RetryClass, TimeSource, UniqueTarget,
};
pub use lanes::{Lane, Lanes};
pub use migrate::{migrate, schema_status, split_statements, substitute, Migration, SchemaStatus};
pub use plans::HotStatement;
pub use reachability::{Reachability, SLOW_ACQUIRE};
#[cfg(feature = "test-hooks")]
pub use recording::{RecordingAdapter, StatementLog};
pub use resolve::{is_commit_unknown, CommitUnknown};
pub use value::{DecodeError, Kind, Row, Value};

#[doc(hidden)]
pub mod __private {
    pub use async_trait::async_trait;
    pub use taskgate;
}

/// Implements [`taskgate::Broker`] for a backend's newtype by forwarding every method to a
/// [`SqlBroker`] field.
///
/// ```ignore
/// pub struct SqliteBroker { inner: taskgate_sql::SqlBroker, /* … */ }
/// taskgate_sql::delegate_broker!(SqliteBroker, inner);
/// ```
///
/// With a third argument, `tx_enqueue`, `Broker::tx_enqueue` returns the backend itself, which
/// then implements `taskgate::TxEnqueue` (transactional enqueue through `dyn Broker`).
#[macro_export]
macro_rules! delegate_broker {
    ($ty:ty, $field:ident) => {
        $crate::delegate_broker!(@impl $ty, $field, None);
    };
    // The backend also implements `taskgate::TxEnqueue` (transactional enqueue, §E15).
    ($ty:ty, $field:ident, tx_enqueue) => {
        $crate::delegate_broker!(@impl $ty, $field, Some);
    };
    (@impl $ty:ty, $field:ident, $tx:ident) => {
        #[$crate::__private::async_trait]
        impl $crate::__private::taskgate::Broker for $ty {
            fn backend(&self) -> &'static str {
                $crate::__private::taskgate::Broker::backend(&self.$field)
            }
            async fn init(
                &self,
                options: $crate::__private::taskgate::BrokerOptions,
            ) -> $crate::__private::taskgate::Result<()> {
                $crate::__private::taskgate::Broker::init(&self.$field, options).await
            }
            async fn close(&self) -> $crate::__private::taskgate::Result<()> {
                $crate::__private::taskgate::Broker::close(&self.$field).await
            }
            async fn now(
                &self,
            ) -> $crate::__private::taskgate::Result<$crate::__private::taskgate::Timestamp> {
                $crate::__private::taskgate::Broker::now(&self.$field).await
            }
            async fn enqueue_many(
                &self,
                tasks: &[$crate::__private::taskgate::Task],
            ) -> $crate::__private::taskgate::Result<Vec<$crate::__private::taskgate::Task>> {
                $crate::__private::taskgate::Broker::enqueue_many(&self.$field, tasks).await
            }
            async fn try_dequeue_many(
                &self,
                queues: &dyn $crate::__private::taskgate::QueueList,
                max: usize,
            ) -> $crate::__private::taskgate::Result<Vec<$crate::__private::taskgate::Task>> {
                $crate::__private::taskgate::Broker::try_dequeue_many(&self.$field, queues, max)
                    .await
            }
            async fn dequeue_many(
                &self,
                queues: &dyn $crate::__private::taskgate::QueueList,
                max: usize,
            ) -> $crate::__private::taskgate::Result<Vec<$crate::__private::taskgate::Task>> {
                $crate::__private::taskgate::Broker::dequeue_many(&self.$field, queues, max).await
            }
            async fn ack_many(
                &self,
                items: &[$crate::__private::taskgate::AckItem],
            ) -> $crate::__private::taskgate::Result<Vec<$crate::__private::taskgate::Result<()>>>
            {
                $crate::__private::taskgate::Broker::ack_many(&self.$field, items).await
            }
            async fn fail(
                &self,
                id: &str,
                token: &str,
                failure: $crate::__private::taskgate::Failure,
            ) -> $crate::__private::taskgate::Result<()> {
                $crate::__private::taskgate::Broker::fail(&self.$field, id, token, failure).await
            }
            async fn cancel(&self, id: &str) -> $crate::__private::taskgate::Result<()> {
                $crate::__private::taskgate::Broker::cancel(&self.$field, id).await
            }
            async fn finish_canceled(
                &self,
                id: &str,
                token: &str,
            ) -> $crate::__private::taskgate::Result<()> {
                $crate::__private::taskgate::Broker::finish_canceled(&self.$field, id, token).await
            }
            async fn requeue(
                &self,
                id: &str,
                token: &str,
            ) -> $crate::__private::taskgate::Result<()> {
                $crate::__private::taskgate::Broker::requeue(&self.$field, id, token).await
            }
            async fn heartbeat(
                &self,
                id: &str,
                token: &str,
            ) -> $crate::__private::taskgate::Result<()> {
                $crate::__private::taskgate::Broker::heartbeat(&self.$field, id, token).await
            }
            async fn save_step(
                &self,
                id: &str,
                token: &str,
                step: $crate::__private::taskgate::Step,
            ) -> $crate::__private::taskgate::Result<()> {
                $crate::__private::taskgate::Broker::save_step(&self.$field, id, token, step).await
            }
            async fn get(
                &self,
                id: &str,
            ) -> $crate::__private::taskgate::Result<$crate::__private::taskgate::Task> {
                $crate::__private::taskgate::Broker::get(&self.$field, id).await
            }
            async fn replay(
                &self,
                request: $crate::__private::taskgate::ReplayRequest,
            ) -> $crate::__private::taskgate::Result<$crate::__private::taskgate::Task> {
                $crate::__private::taskgate::Broker::replay(&self.$field, request).await
            }
            async fn resume(
                &self,
                id: &str,
            ) -> $crate::__private::taskgate::Result<$crate::__private::taskgate::Task> {
                $crate::__private::taskgate::Broker::resume(&self.$field, id).await
            }
            async fn list(
                &self,
                filter: &$crate::__private::taskgate::Filter,
            ) -> $crate::__private::taskgate::Result<Vec<$crate::__private::taskgate::Task>> {
                $crate::__private::taskgate::Broker::list(&self.$field, filter).await
            }
            async fn queue_len(&self, queue: &str) -> $crate::__private::taskgate::Result<u64> {
                $crate::__private::taskgate::Broker::queue_len(&self.$field, queue).await
            }
            async fn counts(
                &self,
            ) -> $crate::__private::taskgate::Result<$crate::__private::taskgate::Counts> {
                $crate::__private::taskgate::Broker::counts(&self.$field).await
            }
            async fn reap_expired(&self) -> $crate::__private::taskgate::Result<u64> {
                $crate::__private::taskgate::Broker::reap_expired(&self.$field).await
            }
            async fn pause_queue(&self, queue: &str) -> $crate::__private::taskgate::Result<()> {
                $crate::__private::taskgate::Broker::pause_queue(&self.$field, queue).await
            }
            async fn resume_queue(&self, queue: &str) -> $crate::__private::taskgate::Result<()> {
                $crate::__private::taskgate::Broker::resume_queue(&self.$field, queue).await
            }
            async fn paused_queues(&self) -> $crate::__private::taskgate::Result<Vec<String>> {
                $crate::__private::taskgate::Broker::paused_queues(&self.$field).await
            }
            async fn prune(
                &self,
                request: $crate::__private::taskgate::PruneRequest,
            ) -> $crate::__private::taskgate::Result<u64> {
                $crate::__private::taskgate::Broker::prune(&self.$field, request).await
            }
            async fn queue_stats(
                &self,
            ) -> $crate::__private::taskgate::Result<Vec<$crate::__private::taskgate::QueueStats>>
            {
                $crate::__private::taskgate::Broker::queue_stats(&self.$field).await
            }
            async fn audited(
                &self,
                actor: &str,
                action: &$crate::__private::taskgate::AdminAction,
            ) -> $crate::__private::taskgate::Result<$crate::__private::taskgate::AdminOutcome>
            {
                $crate::__private::taskgate::Broker::audited(&self.$field, actor, action).await
            }
            async fn audit_log(
                &self,
                query: &$crate::__private::taskgate::AuditQuery,
            ) -> $crate::__private::taskgate::Result<Vec<$crate::__private::taskgate::AuditRecord>>
            {
                $crate::__private::taskgate::Broker::audit_log(&self.$field, query).await
            }
            fn capabilities(&self) -> $crate::__private::taskgate::Capabilities {
                $crate::__private::taskgate::Broker::capabilities(&self.$field)
            }
            fn limits(
                &self,
            ) -> $crate::__private::taskgate::Result<$crate::__private::taskgate::Limits> {
                $crate::__private::taskgate::Broker::limits(&self.$field)
            }
            fn quota_provider(&self) -> Option<&dyn $crate::__private::taskgate::QuotaProvider> {
                $crate::__private::taskgate::Broker::quota_provider(&self.$field)
            }
            fn tx_enqueue(&self) -> Option<&dyn $crate::__private::taskgate::TxEnqueue> {
                $crate::delegate_broker!(@tx $tx, self)
            }
        }
    };
    (@tx None, $self:ident) => {
        None
    };
    (@tx Some, $self:ident) => {
        Some($self)
    };
}
