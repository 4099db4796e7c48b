//! [`SqliteDialect`]: what SQLite says differently — `?` placeholders, local time, no row locks
//! (`BEGIN IMMEDIATE` serialises writers), one-statement claims and quota upserts with
//! `RETURNING`, and error classification by extended result code.

use taskgate_sql::{
    ClaimShape, DbError, DdlLock, Dialect, Placeholder, QuotaShape, RetryClass, TimeSource,
    UniqueTarget,
};

/// SQLITE_CONSTRAINT_PRIMARYKEY.
const CONSTRAINT_PRIMARYKEY: &str = "1555";
/// SQLITE_CONSTRAINT_UNIQUE.
const CONSTRAINT_UNIQUE: &str = "2067";

/// The SQLite dialect.
#[derive(Clone, Copy, Debug, Default)]
pub struct SqliteDialect;

/// The extended result code of a database error, as sqlx reports it.
fn code(error: &DbError) -> Option<String> {
    match error {
        DbError::Database(db) => db.code().map(|c| c.into_owned()),
        _ => None,
    }
}

impl Dialect for SqliteDialect {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn placeholder(&self) -> Placeholder {
        Placeholder::Question
    }

    fn time_source(&self) -> TimeSource {
        TimeSource::Local
    }

    fn now_ms_sql(&self) -> &'static str {
        "CAST(unixepoch('subsec') * 1000 AS INTEGER)"
    }

    fn lock_clause(&self) -> &'static str {
        ""
    }

    fn skip_locked_clause(&self) -> &'static str {
        ""
    }

    fn claim_shape(&self) -> ClaimShape {
        ClaimShape::UpdateReturning
    }

    fn claim_token_sql(&self) -> &'static str {
        "? || lower(hex(randomblob(10)))"
    }

    fn update_returning(&self) -> bool {
        true
    }

    fn limit_all(&self) -> &'static str {
        "-1"
    }

    fn insert_ignore(&self, table: &str, columns: &str, values: &str, key: &str) -> String {
        format!("INSERT INTO {table} ({columns}) VALUES ({values}) ON CONFLICT ({key}) DO NOTHING")
    }

    fn quota_shape(&self, table: &str) -> QuotaShape {
        QuotaShape::UpsertReturning {
            sql: format!(
                "INSERT INTO {table} (qkey, win, used, period) VALUES (?, \
                 CAST(COALESCE(?, strftime('%s', 'now')) AS INTEGER) / ? * ?, 1, ?) \
                 ON CONFLICT (qkey, win) DO UPDATE SET used = used + 1 WHERE used < ? \
                 RETURNING win"
            ),
        }
    }

    fn ddl_lock(&self, _key: &str) -> Option<DdlLock> {
        None
    }

    fn transactional_ddl(&self) -> bool {
        true
    }

    fn retry_class(&self, error: &DbError) -> RetryClass {
        // One writer connection and BEGIN IMMEDIATE: no deadlocks; SQLITE_BUSY only after
        // busy_timeout, which is the "medium unreachable" threshold. A call whose shared
        // transaction another call's failure rolled back applied nothing: it runs again.
        match crate::group::GroupError::is_aborted(error) {
            true => RetryClass::Immediate,
            false => RetryClass::Never,
        }
    }

    fn unique_violation(&self, error: &DbError, _prefix: &str) -> Option<UniqueTarget> {
        match code(error)?.as_str() {
            CONSTRAINT_PRIMARYKEY => Some(UniqueTarget::PrimaryKey),
            // SQLite names the columns, not the index; the engine decides by operation.
            CONSTRAINT_UNIQUE => Some(UniqueTarget::Unnamed),
            _ => None,
        }
    }

    fn max_params(&self) -> usize {
        32_766
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::error::Error as StdError;
    use std::fmt;

    use sqlx::error::{DatabaseError, ErrorKind};

    use super::*;

    /// A driver error with a given extended result code and message.
    #[derive(Debug)]
    struct Coded(&'static str, &'static str);

    impl fmt::Display for Coded {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.1)
        }
    }

    impl StdError for Coded {}

    impl DatabaseError for Coded {
        fn message(&self) -> &str {
            self.1
        }
        fn code(&self) -> Option<Cow<'_, str>> {
            Some(Cow::Borrowed(self.0))
        }
        fn as_error(&self) -> &(dyn StdError + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn StdError + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn StdError + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> ErrorKind {
            ErrorKind::Other
        }
    }

    fn db(code: &'static str, message: &'static str) -> DbError {
        DbError::Database(Box::new(Coded(code, message)))
    }

    #[test]
    fn unique_violations_are_classified_by_code_not_text() {
        let d = SqliteDialect;
        let pk = db("1555", "UNIQUE constraint failed: taskgate_tasks.id");
        assert_eq!(d.unique_violation(&pk, "taskgate_"), Some(UniqueTarget::PrimaryKey));
        let key = db("2067", "UNIQUE constraint failed: taskgate_tasks.business_key");
        assert_eq!(d.unique_violation(&key, "taskgate_"), Some(UniqueTarget::Unnamed));
        let text_only = db("1", "UNIQUE constraint failed: taskgate_tasks.id");
        assert_eq!(d.unique_violation(&text_only, "taskgate_"), None);
        assert_eq!(d.unique_violation(&DbError::RowNotFound, "taskgate_"), None);
    }

    #[test]
    fn nothing_is_retried() {
        let d = SqliteDialect;
        assert_eq!(d.retry_class(&db("5", "database is locked")), RetryClass::Never);
        assert_eq!(d.retry_class(&db("2067", "unique")), RetryClass::Never);
    }

    #[test]
    fn a_call_rolled_back_with_its_group_runs_again() {
        let aborted = DbError::Database(Box::new(crate::group::GroupError::Aborted));
        assert_eq!(SqliteDialect.retry_class(&aborted), RetryClass::Immediate);
        let failed = crate::group::GroupError::Failed { code: None, message: "x".into() };
        let failed = DbError::Database(Box::new(failed));
        assert_eq!(SqliteDialect.retry_class(&failed), RetryClass::Never, "not by its text");
    }
}
