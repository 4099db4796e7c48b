//! Running the engine's statements on sqlx's PostgreSQL driver: binding [`Value`]s, decoding
//! columns by [`Kind`], and the [`SqlConn`] views the engine runs on — a caller's connection
//! (`enqueue_in`) and the dedicated migration session.

use async_trait::async_trait;
use sqlx::postgres::{PgArguments, PgRow, PgValueRef};
use sqlx::query::Query;
use sqlx::{Connection, PgConnection, Postgres, Row as _, TypeInfo, ValueRef};
use taskgate_sql::{DbError, DbResult, DecodeError, Kind, Row, Session, SqlConn, Value};

/// Binds the engine's arguments in order; NULLs are typed (PostgreSQL needs the type).
pub(crate) fn bind<'q>(
    sql: &'q str,
    args: &'q [Value],
    persistent: bool,
) -> Query<'q, Postgres, PgArguments> {
    args.iter().fold(sqlx::query(sql).persistent(persistent), |q, v| match v {
        Value::Null(Kind::Int) => q.bind(None::<i64>),
        Value::Null(Kind::Text) => q.bind(None::<&str>),
        Value::Null(Kind::Bytes) => q.bind(None::<&[u8]>),
        Value::Int(i) => q.bind(*i),
        Value::Text(s) => q.bind(s.as_str()),
        Value::Bytes(b) => q.bind(b.as_slice()),
        Value::TextArray(v) => q.bind(v.as_slice()),
        Value::BytesArray(v) => q.bind(v.as_slice()),
    })
}

fn decode_error(i: usize, what: impl std::fmt::Display) -> DbError {
    DbError::Decode(Box::new(DecodeError(format!("column {i}: {what}"))))
}

/// Decodes column `i` as `kind`: integers from any integer or boolean type, text from text
/// (or UTF-8 bytes), bytes from `BYTEA` (or text).
fn column(row: &PgRow, i: usize, kind: Kind) -> DbResult<Value> {
    let raw: PgValueRef<'_> = row.try_get_raw(i)?;
    if raw.is_null() {
        return Ok(Value::Null(kind));
    }
    let info = raw.type_info();
    let value = match (kind, info.name()) {
        (Kind::Int, "INT8") => Value::Int(row.try_get::<i64, _>(i)?),
        (Kind::Int, "INT4") => Value::Int(i64::from(row.try_get::<i32, _>(i)?)),
        (Kind::Int, "INT2") => Value::Int(i64::from(row.try_get::<i16, _>(i)?)),
        (Kind::Int, "BOOL") => Value::Int(i64::from(row.try_get::<bool, _>(i)?)),
        (Kind::Int, other) => return Err(decode_error(i, format!("{other} is not an integer"))),
        (Kind::Text, "BYTEA") => Value::Text(
            String::from_utf8(row.try_get::<Vec<u8>, _>(i)?)
                .map_err(|_| decode_error(i, "bytes are not UTF-8"))?,
        ),
        (Kind::Text, _) => Value::Text(row.try_get::<String, _>(i)?),
        (Kind::Bytes, "BYTEA") => Value::Bytes(row.try_get::<Vec<u8>, _>(i)?),
        (Kind::Bytes, _) => Value::Bytes(row.try_get::<String, _>(i)?.into_bytes()),
    };
    Ok(value)
}

/// Decodes a row by the declared kinds (extra columns are ignored).
pub(crate) fn decode(row: &PgRow, kinds: &[Kind]) -> DbResult<Row> {
    if row.len() < kinds.len() {
        return Err(decode_error(
            row.len(),
            format!("row has {} of {} columns", row.len(), kinds.len()),
        ));
    }
    kinds.iter().enumerate().map(|(i, k)| column(row, i, *k)).collect()
}

/// Runs a statement on `conn`; returns rows affected.
pub(crate) async fn execute(
    conn: &mut PgConnection,
    sql: &str,
    args: &[Value],
    persistent: bool,
) -> DbResult<u64> {
    Ok(bind(sql, args, persistent).execute(conn).await?.rows_affected())
}

/// Runs a query on `conn` and decodes every row.
pub(crate) async fn fetch(
    conn: &mut PgConnection,
    sql: &str,
    args: &[Value],
    kinds: &[Kind],
    persistent: bool,
) -> DbResult<Vec<Row>> {
    let rows = bind(sql, args, persistent).fetch_all(conn).await?;
    rows.iter().map(|r| decode(r, kinds)).collect()
}

/// Runs a statement without arguments through the simple protocol (no prepared statement).
pub(crate) async fn simple(conn: &mut PgConnection, sql: &str) -> DbResult<()> {
    sqlx::Executor::execute(conn, sql).await.map(|_| ())
}

/// A connection the caller owns, usually inside the caller's transaction (`enqueue_in`);
/// `persistent` is false behind a transaction pooler (no named statements).
pub(crate) struct ConnRef<'a>(pub(crate) &'a mut PgConnection, pub(crate) bool);

#[async_trait]
impl SqlConn for ConnRef<'_> {
    async fn execute(&mut self, sql: &str, args: &[Value]) -> DbResult<u64> {
        execute(self.0, sql, args, self.1).await
    }

    async fn fetch(&mut self, sql: &str, args: &[Value], kinds: &[Kind]) -> DbResult<Vec<Row>> {
        fetch(self.0, sql, args, kinds, self.1).await
    }
}

/// The migration session: a dedicated connection outside the pool, so the session-level
/// advisory lock can never be left behind in a pooled connection (closing the socket releases
/// it).
///
/// Behind a transaction pooler (`pooled`) the session holds no lock between transactions: each
/// of its transactions opens with `pooled` (`BEGIN`, the settings, and
/// `pg_advisory_xact_lock` on the migration key, released by its COMMIT), and a statement run
/// outside [`Session::begin`] runs in a transaction of its own that opens the same way. So the
/// runner's `CREATE TABLE IF NOT EXISTS` and each migration with its version check hold the
/// lock, and the pooler may hand each transaction to another server connection.
pub(crate) struct PgSession {
    pub(crate) conn: PgConnection,
    pub(crate) pooled: Option<String>,
    pub(crate) in_tx: bool,
}

impl PgSession {
    /// A session on `conn`; `pooled` as [`PgSession`] says.
    pub(crate) fn new(conn: PgConnection, pooled: Option<String>) -> PgSession {
        PgSession { conn, pooled, in_tx: false }
    }

    /// Behind a transaction pooler and outside the session's own transaction: opens a
    /// transaction for one statement (true). Otherwise nothing (false).
    async fn enter(&mut self) -> DbResult<bool> {
        match self.pooled.as_deref() {
            Some(begin) if !self.in_tx => simple(&mut self.conn, begin).await.map(|()| true),
            _ => Ok(false),
        }
    }

    /// Ends the transaction [`PgSession::enter`] opened (`own`): commits after `out` succeeded,
    /// rolls back after it failed.
    async fn leave<T>(&mut self, own: bool, out: DbResult<T>) -> DbResult<T> {
        if !own {
            return out;
        }
        match out {
            Ok(value) => simple(&mut self.conn, "COMMIT").await.map(|()| value),
            Err(e) => {
                let _ = simple(&mut self.conn, "ROLLBACK").await;
                Err(e)
            }
        }
    }
}

#[async_trait]
impl SqlConn for PgSession {
    async fn execute(&mut self, sql: &str, args: &[Value]) -> DbResult<u64> {
        let own = self.enter().await?;
        let out = execute(&mut self.conn, sql, args, false).await;
        self.leave(own, out).await
    }

    async fn fetch(&mut self, sql: &str, args: &[Value], kinds: &[Kind]) -> DbResult<Vec<Row>> {
        let own = self.enter().await?;
        let out = fetch(&mut self.conn, sql, args, kinds, false).await;
        self.leave(own, out).await
    }
}

#[async_trait]
impl Session for PgSession {
    async fn begin(&mut self) -> DbResult<()> {
        simple(&mut self.conn, self.pooled.as_deref().unwrap_or("BEGIN")).await?;
        self.in_tx = true;
        Ok(())
    }

    async fn commit(&mut self) -> DbResult<()> {
        self.in_tx = false;
        simple(&mut self.conn, "COMMIT").await
    }

    async fn rollback(&mut self) -> DbResult<()> {
        self.in_tx = false;
        simple(&mut self.conn, "ROLLBACK").await
    }

    async fn close(self: Box<Self>) -> DbResult<()> {
        self.conn.close().await
    }
}
