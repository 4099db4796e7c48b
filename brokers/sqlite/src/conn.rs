//! Engine statements on a SQLite connection ([`ConnRef`]): engine values bound to a query,
//! rows decoded by the kinds the engine declares. The writer, a migration session and a
//! caller's transaction (`enqueue_in`) all run statements this way.

use async_trait::async_trait;
use sqlx::sqlite::{SqliteArguments, SqliteRow};
use sqlx::{Row as _, Sqlite, SqliteConnection, ValueRef};
use taskgate_sql::{DbResult, Kind, Row, SqlConn, Value};

type Query<'q> = sqlx::query::Query<'q, Sqlite, SqliteArguments<'q>>;

/// Binds engine values to a query, borrowing text and bytes; array arguments are refused
/// (SQLite has none, and the dialect never asks for them).
pub(crate) fn bind<'q>(sql: &'q str, args: &'q [Value]) -> DbResult<Query<'q>> {
    Value::refuse_arrays("sqlite", args)?;
    let mut query = sqlx::query(sql);
    for arg in args {
        query = match arg {
            Value::Null(_) | Value::TextArray(_) | Value::BytesArray(_) => query.bind(None::<i64>),
            Value::Int(i) => query.bind(*i),
            Value::Text(s) => query.bind(s.as_str()),
            Value::Bytes(b) => query.bind(b.as_slice()),
        };
    }
    Ok(query)
}

/// Decodes a row by the declared kinds.
pub(crate) fn decode(row: &SqliteRow, kinds: &[Kind]) -> DbResult<Row> {
    let mut out = Vec::with_capacity(kinds.len());
    for (i, kind) in kinds.iter().enumerate() {
        if row.try_get_raw(i)?.is_null() {
            out.push(Value::Null(*kind));
            continue;
        }
        out.push(match kind {
            Kind::Int => Value::Int(row.try_get_unchecked::<i64, _>(i)?),
            Kind::Text => Value::Text(row.try_get_unchecked::<String, _>(i)?),
            Kind::Bytes => Value::Bytes(row.try_get_unchecked::<Vec<u8>, _>(i)?),
        });
    }
    Ok(out)
}

/// Runs engine statements on any SQLite connection (the writer, a session, or a caller's
/// transaction for `enqueue_in`).
pub(crate) struct ConnRef<'c>(pub(crate) &'c mut SqliteConnection);

#[async_trait]
impl SqlConn for ConnRef<'_> {
    async fn execute(&mut self, sql: &str, args: &[Value]) -> DbResult<u64> {
        Ok(bind(sql, args)?.execute(&mut *self.0).await?.rows_affected())
    }

    async fn fetch(&mut self, sql: &str, args: &[Value], kinds: &[Kind]) -> DbResult<Vec<Row>> {
        let rows = bind(sql, args)?.fetch_all(&mut *self.0).await?;
        rows.iter().map(|r| decode(r, kinds)).collect()
    }
}
