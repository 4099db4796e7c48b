//! Binding the engine's [`Value`]s to MySQL statements and decoding result columns by the
//! [`Kind`] the engine declares — one generic path for every statement.
//!
//! Decoding is lenient about the wire type, because MySQL derives expression types at prepare
//! time (`COALESCE(?, <bigint>)` may come back as BIGINT, DECIMAL or a string depending on the
//! server and the bound NULL) and binary-collated text may be flagged BINARY.

use sqlx::mysql::{MySql, MySqlArguments, MySqlRow, MySqlValueRef};
use sqlx::query::Query;
use sqlx::{Decode, Row as _, TypeInfo, ValueRef};
use taskgate_sql::{DbError, Kind, Row, Value};

/// A statement with `args` bound in order; array arguments are refused (MySQL has none,
/// and the dialect never asks for them).
pub(crate) fn bind<'q>(
    sql: &'q str,
    args: &'q [Value],
) -> Result<Query<'q, MySql, MySqlArguments>, DbError> {
    Value::refuse_arrays("mysql", args)?;
    let mut query = sqlx::query(sql);
    for arg in args {
        query = match arg {
            Value::Null(Kind::Int) | Value::TextArray(_) | Value::BytesArray(_) => {
                query.bind(None::<i64>)
            }
            Value::Null(Kind::Text) => query.bind(None::<&str>),
            Value::Null(Kind::Bytes) => query.bind(None::<&[u8]>),
            Value::Int(i) => query.bind(*i),
            Value::Text(s) => query.bind(s.as_str()),
            Value::Bytes(b) => query.bind(b.as_slice()),
        };
    }
    Ok(query)
}

/// Decodes every row: column `i` as `kinds[i]`.
pub(crate) fn decode_rows(rows: &[MySqlRow], kinds: &[Kind]) -> Result<Vec<Row>, DbError> {
    rows.iter().map(|r| decode_row(r, kinds)).collect()
}

fn decode_row(row: &MySqlRow, kinds: &[Kind]) -> Result<Row, DbError> {
    if row.len() < kinds.len() {
        return Err(DbError::ColumnIndexOutOfBounds { index: kinds.len() - 1, len: row.len() });
    }
    kinds.iter().enumerate().map(|(i, kind)| decode_column(row, i, *kind)).collect()
}

fn decode_column(row: &MySqlRow, index: usize, kind: Kind) -> Result<Value, DbError> {
    let raw = row.try_get_raw(index)?;
    if raw.is_null() {
        return Ok(Value::Null(kind));
    }
    let decoded = match kind {
        Kind::Int => decode_int(raw).map(Value::Int),
        Kind::Text => decode_text(raw).map(Value::Text),
        Kind::Bytes => <&[u8] as Decode<MySql>>::decode(raw).map(|b| Value::Bytes(b.to_vec())),
    };
    decoded.map_err(|source| DbError::ColumnDecode { index: index.to_string(), source })
}

type DecodeResult<T> = Result<T, sqlx::error::BoxDynError>;

fn decode_int(raw: MySqlValueRef<'_>) -> DecodeResult<i64> {
    let type_name = raw.type_info().name().to_owned();
    if type_name.ends_with("UNSIGNED") {
        let n = <u64 as Decode<MySql>>::decode(raw)?;
        return Ok(i64::try_from(n)?);
    }
    if type_name.ends_with("INT") || type_name == "BOOLEAN" {
        return <i64 as Decode<MySql>>::decode(raw);
    }
    if type_name == "DOUBLE" || type_name == "FLOAT" {
        return float_to_int(<f64 as Decode<MySql>>::decode(raw)?);
    }
    // DECIMAL and strings arrive as text in both protocols.
    let bytes = <&[u8] as Decode<MySql>>::decode(raw)?;
    parse_int(std::str::from_utf8(bytes)?)
}

fn float_to_int(f: f64) -> DecodeResult<i64> {
    let floored = f.floor();
    if !floored.is_finite() || floored.abs() >= 9.0e18 {
        return Err(format!("{f} is not a 64-bit integer").into());
    }
    format!("{floored:.0}").parse::<i64>().map_err(Into::into)
}

/// Parses an integer written as text, flooring a decimal fraction (`"12.000"`, `"-1.5"`).
fn parse_int(text: &str) -> DecodeResult<i64> {
    let text = text.trim();
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let n: i64 = whole.parse()?;
    let has_fraction = fraction.bytes().any(|b| b != b'0');
    if has_fraction && whole.starts_with('-') {
        return n.checked_sub(1).ok_or_else(|| "integer overflow".into());
    }
    Ok(n)
}

fn decode_text(raw: MySqlValueRef<'_>) -> DecodeResult<String> {
    let type_name = raw.type_info().name().to_owned();
    if type_name.ends_with("INT") {
        return Ok(<i64 as Decode<MySql>>::decode(raw)?.to_string());
    }
    let bytes = <&[u8] as Decode<MySql>>::decode(raw)?;
    Ok(String::from_utf8(bytes.to_vec())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_written_as_text_are_floored() {
        assert_eq!(parse_int("1767225600000").ok(), Some(1_767_225_600_000));
        assert_eq!(parse_int("12.000").ok(), Some(12));
        assert_eq!(parse_int("12.9").ok(), Some(12));
        assert_eq!(parse_int("-1.5").ok(), Some(-2));
        assert!(parse_int("abc").is_err());
    }

    #[test]
    fn floats_are_floored() {
        assert_eq!(float_to_int(3.99).ok(), Some(3));
        assert!(float_to_int(f64::NAN).is_err());
        assert!(float_to_int(1e300).is_err());
    }
}
