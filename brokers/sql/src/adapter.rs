//! The driver side of the engine: what a backend crate implements so the shared broker logic
//! can run statements on its database.
//!
//! An adapter is deliberately thin. It binds [`Value`]s, decodes columns by [`Kind`], opens
//! write transactions the way its database wants (`BEGIN IMMEDIATE` on SQLite, the driver
//! default on PostgreSQL and MySQL), serves reads from a pool, and hands out one dedicated
//! session for migrations. Everything else — which statements run, in which order, and what
//! they mean — lives in the engine.

use async_trait::async_trait;

use crate::value::{Kind, Row, Value};

/// The driver's error. Every taskgate SQL backend uses sqlx, so the engine classifies
/// `sqlx::Error` through the [`Dialect`](crate::Dialect) (structured codes, never message text).
pub type DbError = sqlx::Error;

/// Shorthand for a driver result.
pub type DbResult<T> = Result<T, DbError>;

impl Value {
    /// For adapters whose dialect has no array parameters: an encode error naming `backend`
    /// when `args` hold an array (the engine never sends one there).
    pub fn refuse_arrays(backend: &str, args: &[Value]) -> DbResult<()> {
        match args.iter().any(Value::is_array) {
            false => Ok(()),
            true => {
                Err(DbError::Encode(format!("{backend} statements take no array arguments").into()))
            }
        }
    }
}

/// A connection the engine can run statements on: inside a write transaction, a caller's
/// transaction (`enqueue_in`), or a migration session.
///
/// SQL texts use the dialect's placeholders already (the engine rewrites `?` to `$n` for
/// PostgreSQL before calling). Implementations should use prepared, cached statements
/// (`sqlx::query(sql)` with `persistent(true)`, the default): the engine's texts are stable.
#[async_trait]
pub trait SqlConn: Send {
    /// Runs a statement and returns the number of rows it affected.
    async fn execute(&mut self, sql: &str, args: &[Value]) -> DbResult<u64>;

    /// Runs a query and decodes every row: column `i` as `kinds[i]`, NULL as
    /// [`Value::Null`]. A row with fewer columns than `kinds` is a decode error.
    async fn fetch(&mut self, sql: &str, args: &[Value], kinds: &[Kind]) -> DbResult<Vec<Row>>;

    /// An SQL expression that tells other processes about this transaction's work when it
    /// commits (PostgreSQL: `pg_notify(…)`, delivered at COMMIT), if the adapter wants it
    /// carried inside a statement now; the engine then evaluates it exactly once in the next
    /// statement, and the transaction sends no notification of its own after the commit.
    /// Default `None`: notify after commit as [`WriteTx::commit`] says.
    fn inline_notify(&mut self) -> Option<String> {
        None
    }
}

/// A write transaction opened by [`Adapter::begin`]. Dropping it without commit rolls back.
#[async_trait]
pub trait WriteTx: SqlConn {
    /// Commits. `woke` is true when the transaction made work claimable (a ready task, a
    /// woken child, a resumed queue): an adapter that tells other processes (PostgreSQL's
    /// `NOTIFY`) does so after the commit; the others ignore it.
    async fn commit(self: Box<Self>, woke: bool) -> DbResult<()>;

    /// Rolls back.
    async fn rollback(self: Box<Self>) -> DbResult<()>;

    /// Access as a plain connection (the engine's operations are written against
    /// [`SqlConn`] so they run on a caller's transaction too).
    fn conn(&mut self) -> &mut dyn SqlConn;
}

/// A dedicated connection for migrations: the dialect's DDL lock is taken and released on
/// it (session-level locks such as `pg_advisory_lock` and `GET_LOCK` need the same session).
#[async_trait]
pub trait Session: SqlConn {
    /// Starts a transaction on this session (`BEGIN IMMEDIATE` on SQLite).
    async fn begin(&mut self) -> DbResult<()>;

    /// Commits the transaction started by [`Session::begin`].
    async fn commit(&mut self) -> DbResult<()>;

    /// Rolls back the transaction started by [`Session::begin`].
    async fn rollback(&mut self) -> DbResult<()>;

    /// Closes the session (returns it to its pool or closes the connection).
    async fn close(self: Box<Self>) -> DbResult<()>;

    /// The values of this backend's migration placeholders besides `{prefix}`, as
    /// `(name, value)` pairs (`("nopad_bin", "utf8mb4_nopad_bin")` fills `{nopad_bin}`), read
    /// from the server this session is connected to. Called once per migration run, before
    /// any migration is applied. Default: none.
    async fn migration_vars(&mut self) -> DbResult<Vec<(String, String)>> {
        Ok(Vec::new())
    }
}

/// A database server's limit on the size of one statement with its arguments (MySQL/MariaDB
/// `max_allowed_packet`): the engine keeps every statement below it and lowers the payload
/// limit so that a payload, result or cursor of the largest accepted size still fits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatementLimit {
    /// The server setting (`max_allowed_packet`).
    pub setting: &'static str,
    /// Its value in bytes, as this server applies it to a client's statements.
    pub bytes: u64,
}

/// What a backend crate implements to run the engine on its driver.
///
/// Connection policy is the adapter's: SQLite keeps one writer connection (every write
/// transaction queues for it) and a small read pool; PostgreSQL and MySQL use one pool for
/// both. The engine never holds a connection across an await on anything but the database.
#[async_trait]
pub trait Adapter: Send + Sync + 'static {
    /// Opens a write transaction. SQLite: `BEGIN IMMEDIATE` on the single writer connection,
    /// so check-then-write is serialised across processes. PostgreSQL: READ COMMITTED.
    /// MySQL/MariaDB: READ COMMITTED (extensions §E6).
    ///
    /// Must be cancel-safe: when the returned future is dropped (a claimer whose caller went
    /// away stops waiting for the writer), no transaction may stay open on the connection and
    /// the waiter must leave any queue. Waiting for a connection is cancel-safe in sqlx; the
    /// `BEGIN` itself should run on a spawned task (a dropped begin then rolls back).
    async fn begin(&self) -> DbResult<Box<dyn WriteTx>>;

    /// Runs a read-only query outside any transaction, on a pooled read connection, with no
    /// row locks (get, list, counts, the empty-poll probe).
    async fn read(&self, sql: &str, args: &[Value], kinds: &[Kind]) -> DbResult<Vec<Row>>;

    /// A dedicated session for migrations.
    async fn session(&self) -> DbResult<Box<dyn Session>>;

    /// Runs one write statement as a transaction of its own (autocommit) on a pooled write
    /// connection and decodes its rows: one round trip, where [`Adapter::begin`], the
    /// statement and the commit take three. The engine uses it for writes that are one
    /// statement and need no hold point (PostgreSQL's claim); the commit is the server's, with
    /// its durability settings, like any other. A statement that failed because the
    /// connection was lost may or may not have been applied.
    ///
    /// Default: [`Adapter::begin`], the statement, commit.
    async fn write_one(&self, sql: &str, args: &[Value], kinds: &[Kind]) -> DbResult<Vec<Row>> {
        let mut tx = self.begin().await?;
        let rows = tx.fetch(sql, args, kinds).await?;
        tx.commit(false).await?;
        Ok(rows)
    }

    /// [`Adapter::write_one`] for a caller that may leave while the write waits for a
    /// connection (a claimer whose `dequeue` was dropped): `left` is asked once a connection
    /// is in hand, just before the statement is sent, and `Ok(None)` says the caller had left
    /// and nothing was sent. A claim that waited behind others would otherwise take tasks for
    /// nobody, to be handed back a moment later.
    ///
    /// Default: [`Adapter::begin`], `left`, then the statement and commit.
    async fn write_one_unless(
        &self,
        sql: &str,
        args: &[Value],
        kinds: &[Kind],
        left: &(dyn Fn() -> bool + Send + Sync),
    ) -> DbResult<Option<Vec<Row>>> {
        let mut tx = self.begin().await?;
        if left() {
            tx.rollback().await?;
            return Ok(None);
        }
        let rows = tx.fetch(sql, args, kinds).await?;
        tx.commit(false).await?;
        Ok(Some(rows))
    }

    /// For an autocommit write ([`Adapter::write_one`]) that makes work claimable: an SQL
    /// expression that tells other processes when it commits, to carry inside the statement
    /// now (as [`SqlConn::inline_notify`] does for a transaction). `None` (the default): the
    /// engine calls [`Adapter::woke`] after the statement instead.
    fn inline_notify(&self) -> Option<String> {
        None
    }

    /// An autocommit write made work claimable and carried no [`Adapter::inline_notify`]
    /// expression: an adapter that tells other processes (PostgreSQL's `NOTIFY`) does so now,
    /// as [`WriteTx::commit`] does after a commit that woke work. Default: nothing.
    fn woke(&self) {}

    /// The server's limit on one statement's size, read at every `init`; `None` (the default)
    /// when statements are bounded by nothing a payload could reach (SQLite's 1 GB blobs,
    /// PostgreSQL's 1 GB fields).
    async fn statement_limit(&self) -> DbResult<Option<StatementLimit>> {
        Ok(None)
    }

    /// True when every write transaction queues for one writer connection (SQLite). The
    /// engine then combines concurrent claims of one handle into one claim and concurrent
    /// acks into one `ack_many` (`combine.rs`): one turn on the writer instead of one each.
    ///
    /// Default: false.
    fn shares_writer(&self) -> bool {
        false
    }

    /// True when a row lock (`SELECT … FOR UPDATE`) holds only against writers on the same
    /// server, as on a MariaDB Galera node: a transaction on another node is not blocked by it,
    /// and a row that is locked but not written takes no part in the cluster's certification.
    /// The engine then *writes* the rows whose locked state a write depends on (the open
    /// parents an enqueue found), so that a concurrent write of them on another node conflicts
    /// and one of the two is retried. Asked per transaction; known once a connection is open.
    ///
    /// Default: false (one server: locks hold for every writer).
    fn row_locks_are_local(&self) -> bool {
        false
    }

    /// Closes the pools. Called once by the broker's `close`.
    async fn close(&self);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_are_refused_by_name_where_the_dialect_has_none() {
        let plain = [Value::Int(1), Value::Text("a".into()), Value::Null(Kind::Bytes)];
        assert!(Value::refuse_arrays("sqlite", &plain).is_ok());
        for array in [Value::TextArray(vec!["a".into()]), Value::BytesArray(vec![None])] {
            assert!(array.is_array());
            let err = Value::refuse_arrays("mysql", &[Value::Int(1), array])
                .expect_err("an array argument is refused");
            assert!(err.to_string().contains("mysql statements take no array arguments"), "{err}");
        }
    }
}
