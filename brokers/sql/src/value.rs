//! Bound arguments and decoded columns: the driver-neutral values every statement of the engine
//! passes to an adapter and gets back from it.

use std::fmt;

/// The type of a column or of a NULL argument. Adapters decode each fetched column by the kind
/// the engine declares for it, so one generic fetch per driver serves every statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A 64-bit signed integer (`INTEGER`, `BIGINT`).
    Int,
    /// UTF-8 text (`TEXT`, `VARCHAR`).
    Text,
    /// Opaque bytes (`BLOB`, `BYTEA`, `LONGBLOB`).
    Bytes,
}

/// One bound argument or one decoded column.
///
/// `Null` carries its kind because typed drivers (PostgreSQL) must send a typed NULL.
#[derive(Clone, PartialEq, Eq)]
pub enum Value {
    /// SQL NULL of the given kind.
    Null(Kind),
    /// An integer.
    Int(i64),
    /// Text.
    Text(String),
    /// Bytes.
    Bytes(Vec<u8>),
    /// A list of texts bound as one array argument (`TEXT[]`). Only dialects with
    /// [`Dialect::array_params`](crate::Dialect::array_params) are given one; the other
    /// adapters refuse it with an error. Never a decoded column.
    TextArray(Vec<String>),
    /// A list of nullable byte strings bound as one array argument (`BYTEA[]`), like
    /// [`Value::TextArray`].
    BytesArray(Vec<Option<Vec<u8>>>),
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null(kind) => write!(f, "NULL::{kind:?}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Text(s) => write!(f, "{s:?}"),
            Value::Bytes(b) => write!(f, "<{} bytes>", b.len()),
            Value::TextArray(v) => write!(f, "{v:?}"),
            Value::BytesArray(v) => write!(f, "<array of {} byte strings>", v.len()),
        }
    }
}

impl Value {
    /// True for the array arguments ([`Value::TextArray`], [`Value::BytesArray`]).
    pub fn is_array(&self) -> bool {
        matches!(self, Value::TextArray(_) | Value::BytesArray(_))
    }

    /// Optional bytes: `None` is a bytes-typed NULL.
    pub fn opt_bytes(bytes: Option<&[u8]>) -> Value {
        bytes.map_or(Value::Null(Kind::Bytes), |b| Value::Bytes(b.to_vec()))
    }

    /// Optional integer: `None` is an integer-typed NULL.
    pub fn opt_int(i: Option<i64>) -> Value {
        i.map_or(Value::Null(Kind::Int), Value::Int)
    }

    /// A boolean stored as 0/1.
    pub fn flag(b: bool) -> Value {
        Value::Int(i64::from(b))
    }
}

impl From<i64> for Value {
    fn from(i: i64) -> Self {
        Value::Int(i)
    }
}

impl From<u32> for Value {
    fn from(i: u32) -> Self {
        Value::Int(i64::from(i))
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Text(s.to_owned())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Text(s)
    }
}

impl From<&String> for Value {
    fn from(s: &String) -> Self {
        Value::Text(s.clone())
    }
}

impl From<taskgate::Timestamp> for Value {
    fn from(t: taskgate::Timestamp) -> Self {
        Value::Int(t.as_millis())
    }
}

/// A fetched row: one [`Value`] per selected column, in select order.
pub type Row = Vec<Value>;

/// Why a column could not be read as the type the engine expected.
#[derive(Debug)]
pub struct DecodeError(pub String);

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot decode row: {}", self.0)
    }
}

impl std::error::Error for DecodeError {}

/// Typed access to a row's columns by index.
pub(crate) struct Cols<'a>(pub(crate) &'a [Value]);

impl Cols<'_> {
    fn at(&self, i: usize) -> Result<&Value, DecodeError> {
        self.0.get(i).ok_or_else(|| DecodeError(format!("column {i} missing")))
    }

    /// A non-null integer.
    pub(crate) fn int(&self, i: usize) -> Result<i64, DecodeError> {
        match self.at(i)? {
            Value::Int(v) => Ok(*v),
            other => Err(DecodeError(format!("column {i}: expected integer, got {other:?}"))),
        }
    }

    /// A nullable integer.
    pub(crate) fn opt_int(&self, i: usize) -> Result<Option<i64>, DecodeError> {
        match self.at(i)? {
            Value::Null(_) => Ok(None),
            _ => self.int(i).map(Some),
        }
    }

    /// Text; NULL reads as empty (MySQL's nullable `last_error`).
    pub(crate) fn text(&self, i: usize) -> Result<String, DecodeError> {
        match self.at(i)? {
            Value::Text(s) => Ok(s.clone()),
            Value::Null(_) => Ok(String::new()),
            Value::Bytes(b) => String::from_utf8(b.clone())
                .map_err(|_| DecodeError(format!("column {i}: text is not UTF-8"))),
            Value::Int(v) => Err(DecodeError(format!("column {i}: expected text, got {v}"))),
            other => Err(DecodeError(format!("column {i}: expected text, got {other:?}"))),
        }
    }

    /// Nullable bytes.
    pub(crate) fn bytes(&self, i: usize) -> Result<Option<Vec<u8>>, DecodeError> {
        match self.at(i)? {
            Value::Null(_) => Ok(None),
            Value::Bytes(b) => Ok(Some(b.clone())),
            Value::Text(s) => Ok(Some(s.clone().into_bytes())),
            Value::Int(v) => Err(DecodeError(format!("column {i}: expected bytes, got {v}"))),
            other => Err(DecodeError(format!("column {i}: expected bytes, got {other:?}"))),
        }
    }
}

/// Typed access to a row's columns, taking the text and byte values out of the row instead of
/// copying them (a claimed task's payload is moved, not copied). A column taken is left NULL.
pub(crate) struct TakeCols<'a>(pub(crate) &'a mut [Value]);

impl TakeCols<'_> {
    fn take(&mut self, i: usize) -> Result<Value, DecodeError> {
        let slot = self.0.get_mut(i).ok_or_else(|| DecodeError(format!("column {i} missing")))?;
        Ok(std::mem::replace(slot, Value::Null(Kind::Int)))
    }

    /// Text; NULL reads as empty.
    pub(crate) fn text(&mut self, i: usize) -> Result<String, DecodeError> {
        match self.take(i)? {
            Value::Text(s) => Ok(s),
            Value::Null(_) => Ok(String::new()),
            Value::Bytes(b) => String::from_utf8(b)
                .map_err(|_| DecodeError(format!("column {i}: text is not UTF-8"))),
            Value::Int(v) => Err(DecodeError(format!("column {i}: expected text, got {v}"))),
            other => Err(DecodeError(format!("column {i}: expected text, got {other:?}"))),
        }
    }

    /// Nullable bytes.
    pub(crate) fn bytes(&mut self, i: usize) -> Result<Option<Vec<u8>>, DecodeError> {
        match self.take(i)? {
            Value::Null(_) => Ok(None),
            Value::Bytes(b) => Ok(Some(b)),
            Value::Text(s) => Ok(Some(s.into_bytes())),
            Value::Int(v) => Err(DecodeError(format!("column {i}: expected bytes, got {v}"))),
            other => Err(DecodeError(format!("column {i}: expected bytes, got {other:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cols_read_by_kind() {
        let row = vec![
            Value::Int(7),
            Value::Null(Kind::Int),
            Value::Null(Kind::Text),
            Value::Bytes(b"x".to_vec()),
            Value::Text("t".into()),
        ];
        let c = Cols(&row);
        assert_eq!(c.int(0).ok(), Some(7));
        assert_eq!(c.opt_int(1).ok(), Some(None));
        assert_eq!(c.text(2).ok().as_deref(), Some(""));
        assert_eq!(c.bytes(3).ok(), Some(Some(b"x".to_vec())));
        assert_eq!(c.text(3).ok().as_deref(), Some("x"));
        assert!(c.int(4).is_err());
        assert!(c.int(9).is_err());
    }

    #[test]
    fn take_cols_move_values_out() {
        let mut row =
            vec![Value::Text("t".into()), Value::Bytes(b"x".to_vec()), Value::Null(Kind::Bytes)];
        let mut c = TakeCols(&mut row);
        assert_eq!(c.text(0).ok().as_deref(), Some("t"));
        assert_eq!(c.bytes(1).ok(), Some(Some(b"x".to_vec())));
        assert_eq!(c.bytes(2).ok(), Some(None));
        assert!(c.text(5).is_err());
        assert_eq!(row[0], Value::Null(Kind::Int), "a taken column is left NULL");
    }
}
