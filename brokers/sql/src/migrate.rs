//! The migration runner (extensions §E6): `migrations/<dialect>/NNNN_name.sql`, embedded by
//! each backend, `{prefix}` and the backend's own placeholders substituted ([`substitute`]),
//! applied in order under the dialect's DDL lock on one dedicated session, each recorded in
//! `<prefix>schema_migrations(version, name, applied_at)`.
//! A second run is a no-op; concurrent cold starts serialise on the lock (or, on SQLite, on
//! `BEGIN IMMEDIATE`) and re-check each version inside it. [`schema_status`] reads what is
//! applied beside what the build knows, changing nothing (`taskgate migrate --status`, and the
//! check every other CLI verb makes before it opens a broker).

use std::time::SystemTime;

use taskgate::Timestamp;

use crate::adapter::Session;
use crate::dialect::{rewrite_placeholders, Placeholder};
use crate::{Adapter, DbResult, Dialect, Kind, SqlConn, Value};

/// One embedded migration file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Migration {
    /// The version number (`0001` ⇒ 1); the same in every dialect.
    pub version: i64,
    /// The file name without number and extension (`initial`, `steps_pause_owner`).
    pub name: &'static str,
    /// The SQL text. `{prefix}` is replaced by the table prefix and any other `{name}` by the
    /// value the backend's migration session gives it ([`Session::migration_vars`]);
    /// statements end with `;` at the end of a line; lines starting with `--` are comments.
    pub sql: &'static str,
}

/// A schema under one prefix: the versions applied beside the migrations this build knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaStatus {
    /// The applied versions, ascending; `None` when there is no schema (no
    /// `<prefix>schema_migrations` table).
    pub applied: Option<Vec<i64>>,
    /// Every migration this build knows, `(version, name)`, ascending.
    pub known: Vec<(i64, &'static str)>,
}

impl SchemaStatus {
    /// The newest applied version (0 when none).
    pub fn current(&self) -> i64 {
        self.applied.as_ref().and_then(|a| a.last().copied()).unwrap_or(0)
    }

    /// The newest version this build knows (0 when none).
    pub fn latest(&self) -> i64 {
        self.known.last().map_or(0, |(v, _)| *v)
    }

    /// The known migrations not applied yet.
    pub fn pending(&self) -> Vec<(i64, &'static str)> {
        let applied = self.applied.as_deref().unwrap_or_default();
        self.known.iter().filter(|(v, _)| !applied.contains(v)).copied().collect()
    }

    /// True when the schema is newer than this build: a version it does not know is applied.
    pub fn is_ahead(&self) -> bool {
        self.current() > self.latest()
    }

    /// True when the schema exists and is exactly as new as this build.
    pub fn is_current(&self) -> bool {
        self.applied.is_some() && !self.is_ahead() && self.pending().is_empty()
    }
}

/// The statement that finds a table by name in the connection's own schema (one `?`
/// argument), by dialect name.
fn table_exists_sql(dialect: &dyn Dialect) -> DbResult<String> {
    let sql = match dialect.name() {
        "sqlite" => "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
        "postgres" => {
            "SELECT 1 FROM information_schema.tables \
             WHERE table_schema = current_schema() AND table_name = ?"
        }
        "mysql" => {
            "SELECT 1 FROM information_schema.tables \
             WHERE table_schema = DATABASE() AND table_name = ?"
        }
        other => {
            return Err(crate::DbError::Protocol(format!(
                "no table listing for the {other} dialect: cannot read the schema's status"
            )))
        }
    };
    Ok(dialect_sql(dialect, sql))
}

/// The schema under `prefix` on `conn`, beside `migrations` (what this build knows); reads
/// only: nothing is created, locked or migrated.
pub async fn schema_status<C: SqlConn + ?Sized>(
    conn: &mut C,
    dialect: &dyn Dialect,
    prefix: &str,
    migrations: &[Migration],
) -> DbResult<SchemaStatus> {
    let known = migrations.iter().map(|m| (m.version, m.name)).collect();
    let table = format!("{prefix}schema_migrations");
    let exists = table_exists_sql(dialect)?;
    if conn.fetch(&exists, &[Value::Text(table.clone())], &[Kind::Int]).await?.is_empty() {
        return Ok(SchemaStatus { applied: None, known });
    }
    // The table name is the caller's validated prefix plus a constant.
    let versions = format!("SELECT version FROM {table} ORDER BY version");
    let rows = conn.fetch(&versions, &[], &[Kind::Int]).await?;
    let version = |row: Vec<Value>| match row.first() {
        Some(Value::Int(v)) => Some(*v),
        _ => None,
    };
    let applied = rows.into_iter().filter_map(version).collect();
    Ok(SchemaStatus { applied: Some(applied), known })
}

/// Splits a migration into statements: a statement ends with `;` at the end of a line.
/// Comment lines (`--`) and blank lines are dropped.
pub fn split_statements(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in sql.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with("--") {
            continue;
        }
        if !current.is_empty() {
            current.push('\n');
        }
        current.push_str(line.trim_end());
        if trimmed.ends_with(';') {
            current.pop();
            out.push(std::mem::take(&mut current).trim().to_owned());
        }
    }
    if !current.trim().is_empty() {
        out.push(current.trim().to_owned());
    }
    out
}

/// The runner's own table; created by the runner, not by a migration.
fn migrations_table(prefix: &str, dialect: &dyn Dialect) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {prefix}schema_migrations (version BIGINT NOT NULL PRIMARY KEY, \
         name VARCHAR(255) NOT NULL, applied_at BIGINT NOT NULL){}",
        dialect.table_options()
    )
}

fn dialect_sql(dialect: &dyn Dialect, sql: &str) -> String {
    match dialect.placeholder() {
        Placeholder::Question => sql.to_owned(),
        Placeholder::Dollar => rewrite_placeholders(sql),
    }
}

/// Applies every migration not yet recorded; returns the versions it applied.
pub async fn migrate(
    adapter: &dyn Adapter,
    dialect: &dyn Dialect,
    prefix: &str,
    migrations: &[Migration],
) -> DbResult<Vec<i64>> {
    let mut session = adapter.session().await?;
    let lock = dialect.ddl_lock(&format!("{prefix}schema"));
    let result: DbResult<Vec<i64>> = async {
        if let Some(lock) = &lock {
            take_lock(session.as_mut(), dialect, lock).await?;
        }
        session.execute(&migrations_table(prefix, dialect), &[]).await?;
        let mut vars = vec![("prefix".to_owned(), prefix.to_owned())];
        vars.extend(session.migration_vars().await?);
        let mut applied = Vec::new();
        for m in migrations {
            if apply(session.as_mut(), dialect, prefix, &vars, m).await? {
                applied.push(m.version);
            }
        }
        Ok(applied)
    }
    .await;
    if let Some(lock) = &lock {
        let unlock = dialect_sql(dialect, &lock.unlock_sql);
        let released = session.fetch(&unlock, &lock.unlock_args, &[]).await;
        if result.is_ok() {
            released?;
        }
    }
    let closed = session.close().await;
    let applied = result?;
    closed?;
    Ok(applied)
}

async fn take_lock(
    session: &mut dyn Session,
    dialect: &dyn Dialect,
    lock: &crate::DdlLock,
) -> DbResult<()> {
    let sql = dialect_sql(dialect, &lock.lock_sql);
    if !lock.lock_returns_one {
        session.fetch(&sql, &lock.lock_args, &[]).await?;
        return Ok(());
    }
    let rows = session.fetch(&sql, &lock.lock_args, &[Kind::Int]).await?;
    match rows.first().and_then(|r| r.first()) {
        Some(Value::Int(1)) => Ok(()),
        other => Err(crate::DbError::Protocol(format!(
            "could not take the schema lock ({other:?}); another process holds it"
        ))),
    }
}

/// `sql` with every `{name}` of `vars` replaced by its value. A `{name}` left over (lower-case
/// letters and `_` between braces) is an error naming it: the backend did not supply it.
pub fn substitute(sql: &str, vars: &[(String, String)]) -> DbResult<String> {
    let mut out = sql.to_owned();
    for (name, value) in vars {
        out = out.replace(&format!("{{{name}}}"), value);
    }
    let mut rest = out.as_str();
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let name_len = after.find(|c: char| !(c.is_ascii_lowercase() || c == '_'));
        if let Some(len) = name_len.filter(|len| *len > 0 && after[*len..].starts_with('}')) {
            return Err(crate::DbError::Protocol(format!(
                "migration placeholder {{{}}} has no value on this backend",
                &after[..len]
            )));
        }
        rest = after;
    }
    Ok(out)
}

/// Applies one migration unless recorded; true when it ran.
async fn apply(
    session: &mut dyn Session,
    dialect: &dyn Dialect,
    prefix: &str,
    vars: &[(String, String)],
    m: &Migration,
) -> DbResult<bool> {
    let transactional = dialect.transactional_ddl();
    if transactional {
        session.begin().await?;
    }
    let outcome = apply_inside(session, dialect, prefix, vars, m).await;
    match (transactional, &outcome) {
        (true, Ok(_)) => session.commit().await?,
        (true, Err(_)) => {
            let _ = session.rollback().await;
        }
        (false, _) => {}
    }
    outcome
}

async fn apply_inside(
    session: &mut dyn Session,
    dialect: &dyn Dialect,
    prefix: &str,
    vars: &[(String, String)],
    m: &Migration,
) -> DbResult<bool> {
    let check = dialect_sql(
        dialect,
        &format!("SELECT version FROM {prefix}schema_migrations WHERE version = ?"),
    );
    if !session.fetch(&check, &[Value::Int(m.version)], &[Kind::Int]).await?.is_empty() {
        return Ok(false);
    }
    for statement in split_statements(&substitute(m.sql, vars)?) {
        match session.execute(&statement, &[]).await {
            Ok(_) => {}
            Err(e) if dialect.is_already_applied(&e) => {}
            Err(e) => return Err(e),
        }
    }
    let record = dialect_sql(
        dialect,
        &format!(
            "INSERT INTO {prefix}schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"
        ),
    );
    let now = Timestamp::from_system_time(SystemTime::now());
    let args = [Value::Int(m.version), Value::from(m.name), Value::from(now)];
    session.execute(&record, &args).await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_split_at_line_end_semicolons() {
        let sql =
            "-- header\nCREATE TABLE a (\n  x TEXT DEFAULT ';'\n);\n\nCREATE INDEX i ON a (x);\n";
        assert_eq!(
            split_statements(sql),
            vec![
                "CREATE TABLE a (\n  x TEXT DEFAULT ';'\n)".to_owned(),
                "CREATE INDEX i ON a (x)".to_owned()
            ]
        );
    }

    #[test]
    fn placeholders_are_substituted_and_a_missing_one_is_named() {
        let vars = [("prefix".to_owned(), "p_".to_owned()), ("coll".to_owned(), "c1".to_owned())];
        let sql = "ALTER TABLE {prefix}t MODIFY x TEXT COLLATE {coll}";
        assert_eq!(
            substitute(sql, &vars).ok(),
            Some("ALTER TABLE p_t MODIFY x TEXT COLLATE c1".into())
        );
        let missing = substitute("ALTER TABLE {prefix}t COLLATE {other}", &vars);
        assert!(matches!(missing, Err(crate::DbError::Protocol(m)) if m.contains("{other}")));
        let json = substitute("SELECT '{\"a\": 1}', '{}', '{X}'", &vars);
        assert!(json.is_ok(), "braces that are no placeholder pass: {json:?}");
    }

    #[test]
    fn trailing_statement_without_semicolon_is_kept() {
        assert_eq!(split_statements("SELECT 1"), vec!["SELECT 1".to_owned()]);
    }
}
