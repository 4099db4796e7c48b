//! Test isolation for every SQL backend (feature `testing`), written once: the test table
//! prefix ([`TestPrefix`]), dropping a prefix's tables ([`SqlBroker::drop_tables`]), and the
//! sweep of table sets a killed or failed run left behind ([`sweep_once`]).
//!
//! A test factory hands each case a fresh [`TestPrefix`] on a shared database; its storage's
//! cleanup calls [`SqlBroker::drop_tables`] on a handle of that prefix (brokertest runs the
//! cleanup whatever the case's outcome). A run killed before its cleanup leaves tables: the
//! prefix carries its creation time, so the first storage a process opens on a server drops
//! every test table set made more than [`STALE_AFTER`] ago ([`sweep_once`]). The same call
//! finds out once whether the server answers: an unreachable one is
//! [`brokertest::Unavailable`] for every storage of the process (the suite then skips loudly,
//! or fails under `TASKGATE_REQUIRE_DB=1`); a sweep that fails for another reason is reported
//! on stderr and never fails a case.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use brokertest::Unavailable;
use taskgate::{BoxError, Error, Result};

use crate::{Kind, SqlBroker, Value};

/// Every test prefix starts with this.
pub const TEST_PREFIX_START: &str = "tgtest_";

/// Test table sets older than this are dropped by the sweep.
pub const STALE_AFTER: Duration = Duration::from_secs(3600);

/// The length of every test prefix: the most a prefix may have.
pub const TEST_PREFIX_LEN: usize = 30;

/// Crockford's base32 alphabet, lowercase: the ULID's digits.
const CROCKFORD: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

/// A table prefix for one test's storage: `tgtest_`, the ten time characters of a new ULID
/// (which date the tables), its last twelve characters (the ones a monotonic ULID increments,
/// so prefixes made in the same millisecond differ), `_` — 30 characters, lowercase, a valid
/// prefix.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TestPrefix(String);

impl TestPrefix {
    /// A fresh prefix made now.
    #[allow(clippy::new_without_default, reason = "each call makes a different prefix")]
    pub fn new() -> TestPrefix {
        let ulid = taskgate::id::new_ulid().to_ascii_lowercase();
        TestPrefix(format!("{TEST_PREFIX_START}{}{}_", &ulid[..10], &ulid[ulid.len() - 12..]))
    }

    /// A fresh prefix dated `made` instead of now (to test the sweep).
    pub fn made_at(made: SystemTime) -> TestPrefix {
        let ms = made.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis());
        let time: String = (0..10)
            .rev()
            .map(|i| char::from(CROCKFORD[usize::try_from((ms >> (5 * i)) & 31).unwrap_or(0)]))
            .collect();
        let fresh = TestPrefix::new().0;
        TestPrefix(format!("{TEST_PREFIX_START}{time}{}", &fresh[TEST_PREFIX_START.len() + 10..]))
    }

    /// The test prefix a table (or schema) name starts with; `None` for other names.
    pub fn of(name: &str) -> Option<TestPrefix> {
        let prefix = name.get(..TEST_PREFIX_LEN)?;
        let valid = prefix.starts_with(TEST_PREFIX_START)
            && prefix.ends_with('_')
            && taskgate::validate::validate_prefix(prefix).is_ok();
        let candidate = TestPrefix(prefix.to_owned());
        (valid && candidate.made().is_some()).then_some(candidate)
    }

    /// The prefix.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// When the prefix was made, decoded from its time characters.
    pub fn made(&self) -> Option<SystemTime> {
        let time = self.0.strip_prefix(TEST_PREFIX_START)?.get(..10)?;
        let ms = time.bytes().try_fold(0u64, |acc, c| {
            let digit = u64::try_from(CROCKFORD.iter().position(|d| *d == c)?).ok()?;
            acc.checked_mul(32)?.checked_add(digit)
        })?;
        SystemTime::UNIX_EPOCH.checked_add(Duration::from_millis(ms))
    }

    /// True when the prefix was made more than [`STALE_AFTER`] before `now`.
    pub fn is_stale(&self, now: SystemTime) -> bool {
        self.made().and_then(|made| now.duration_since(made).ok()).is_some_and(|a| a > STALE_AFTER)
    }
}

impl fmt::Display for TestPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for TestPrefix {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<TestPrefix> for String {
    fn from(prefix: TestPrefix) -> String {
        prefix.0
    }
}

/// The stale test prefixes among `names` (table or schema names), sorted, each once.
pub fn stale_prefixes<'a>(
    names: impl IntoIterator<Item = &'a str>,
    now: SystemTime,
) -> Vec<TestPrefix> {
    let mut out: Vec<TestPrefix> =
        names.into_iter().filter_map(TestPrefix::of).filter(|p| p.is_stale(now)).collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The tables `CREATE TABLE [IF NOT EXISTS] {prefix}<name>` makes in `sql`, in order.
fn created_tables(sql: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for (at, _) in sql.match_indices("CREATE TABLE ") {
        let rest = &sql[at + "CREATE TABLE ".len()..];
        let rest = rest.strip_prefix("IF NOT EXISTS ").unwrap_or(rest);
        if let Some(rest) = rest.strip_prefix("{prefix}") {
            let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
            out.push(&rest[..end.unwrap_or(rest.len())]);
        }
    }
    out
}

/// The statement listing the database's tables whose names start with `tgtest_` (one text
/// column), for the dialect named `dialect`.
fn test_tables_sql(dialect: &str) -> Option<&'static str> {
    Some(match dialect {
        "sqlite" => {
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'tgtest\\_%' \
             ESCAPE '\\'"
        }
        "postgres" => {
            "SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema() \
             AND tablename LIKE 'tgtest\\_%'"
        }
        "mysql" => {
            "SELECT CAST(table_name AS CHAR) FROM information_schema.tables \
             WHERE table_schema = DATABASE() AND table_name LIKE 'tgtest\\_%'"
        }
        _ => return None,
    })
}

impl SqlBroker {
    /// The tables of this broker's prefix, children first: every table its migrations
    /// create, newest first, then `schema_migrations`.
    pub fn tables(&self) -> Vec<String> {
        tables_of(self.prefix(), self.migrations())
    }

    /// Drops every table of this broker's prefix ([`SqlBroker::tables`]), on a session of its
    /// own; tables that do not exist are passed over. For tests: the storage of a case, a
    /// benchmark's bed, `taskgate check` on a named database.
    pub async fn drop_tables(&self) -> Result<()> {
        let backend = self.core().dialect.name();
        let mut session = self.adapter().session().await.map_err(|e| Error::backend(backend, e))?;
        let dropped = self.drop_on(&mut *session, self.prefix()).await;
        let closed = session.close().await.map_err(|e| Error::backend(backend, e));
        dropped.and(closed)
    }

    /// Drops the tables of `prefix` (validated: it is spliced into the statements) on
    /// `session`.
    async fn drop_on(&self, session: &mut dyn crate::Session, prefix: &str) -> Result<()> {
        taskgate::validate::validate_prefix(prefix)?;
        let backend = self.core().dialect.name();
        for table in tables_of(prefix, self.migrations()) {
            let sql = format!("DROP TABLE IF EXISTS {table}");
            session.execute(&sql, &[]).await.map_err(|e| Error::backend(backend, e))?;
        }
        Ok(())
    }

    /// Drops the tables of every test prefix on this broker's database made more than
    /// [`STALE_AFTER`] ago (never a recent one, so never a running test's); returns the
    /// prefixes dropped. A database that cannot be reached is [`Unavailable`].
    pub async fn sweep_stale_test_tables(&self) -> std::result::Result<Vec<TestPrefix>, BoxError> {
        let dialect = self.core().dialect.name();
        let list = test_tables_sql(dialect)
            .ok_or_else(|| format!("no test-table listing for the {dialect} dialect"))?;
        let mut session = match self.adapter().session().await {
            Ok(session) => session,
            Err(e) => return Err(Box::new(Unavailable(format!("{dialect}: {e}")))),
        };
        let swept = async {
            let rows = session.fetch(list, &[], &[Kind::Text]).await?;
            let names: Vec<String> = rows
                .into_iter()
                .filter_map(|row| match row.into_iter().next() {
                    Some(Value::Text(name)) => Some(name),
                    _ => None,
                })
                .collect();
            let stale = stale_prefixes(names.iter().map(String::as_str), SystemTime::now());
            for prefix in &stale {
                self.drop_on(&mut *session, prefix.as_str()).await?;
            }
            Ok::<_, BoxError>(stale)
        }
        .await;
        let _ = session.close().await;
        swept
    }
}

/// The tables of `prefix` that `migrations` create, children first (newest first), then
/// `schema_migrations`.
fn tables_of(prefix: &str, migrations: &[crate::Migration]) -> Vec<String> {
    let mut names: Vec<&str> = migrations.iter().flat_map(|m| created_tables(m.sql)).collect();
    names.reverse();
    names.push("schema_migrations");
    names.into_iter().map(|t| format!("{prefix}{t}")).collect()
}

/// What the first use of a server found: nothing (`Ok`), or why it cannot be reached.
type FirstUse = Arc<tokio::sync::OnceCell<std::result::Result<(), String>>>;

/// Once per process and `server` (its URL): runs `sweep` (a backend's sweep of stale test
/// storage, [`SqlBroker::sweep_stale_test_tables`] and whatever else it makes) and remembers
/// whether the server answered. Returns [`Unavailable`] for every call on a server whose sweep
/// was [`Unavailable`], `Ok` otherwise: a sweep that fails for another reason is reported on
/// stderr, never fatal.
pub async fn sweep_once<F, Fut>(server: &str, sweep: F) -> std::result::Result<(), BoxError>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<Vec<TestPrefix>, BoxError>>,
{
    static SERVERS: OnceLock<Mutex<HashMap<String, FirstUse>>> = OnceLock::new();
    let cell = SERVERS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .entry(server.to_owned())
        .or_default()
        .clone();
    let found = cell
        .get_or_init(|| async {
            match sweep().await {
                Ok(_) => Ok(()),
                Err(e) => match e.downcast::<Unavailable>() {
                    Ok(unavailable) => Err(unavailable.0),
                    Err(other) => {
                        use std::io::Write as _;
                        let _ = writeln!(
                            std::io::stderr(),
                            "\n*** sweeping stale {TEST_PREFIX_START} tables failed: {other} \
                             (the run goes on) ***"
                        );
                        Ok(())
                    }
                },
            }
        })
        .await;
    found.clone().map_err(|why| Box::new(Unavailable(why)) as BoxError)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_prefixes_are_valid_unique_and_dated() {
        let a = TestPrefix::new();
        let b = TestPrefix::new();
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), TEST_PREFIX_LEN);
        assert!(taskgate::validate::validate_prefix(a.as_str()).is_ok(), "{a}");
        let age = a.made().and_then(|t| SystemTime::now().duration_since(t).ok());
        assert!(age.is_some_and(|age| age < Duration::from_secs(60)), "{a}: {age:?}");
        assert_eq!(TestPrefix::of(&format!("{a}tasks")), Some(a));
    }

    #[test]
    fn dated_prefixes_decode_to_their_time() {
        let two_hours_ago = SystemTime::now() - Duration::from_secs(7200);
        let p = TestPrefix::made_at(two_hours_ago);
        assert_eq!(p.as_str().len(), TEST_PREFIX_LEN);
        assert!(taskgate::validate::validate_prefix(p.as_str()).is_ok(), "{p}");
        let back = p.made().and_then(|t| two_hours_ago.duration_since(t).ok());
        assert!(back.is_some_and(|d| d < Duration::from_millis(1)), "{p}");
        assert!(p.is_stale(SystemTime::now()));
        assert!(!TestPrefix::new().is_stale(SystemTime::now()));
    }

    #[test]
    fn only_old_test_tables_are_stale() {
        let fresh = format!("{}tasks", TestPrefix::new());
        let now = SystemTime::now() + Duration::from_secs(2 * 3600);
        let later = format!("{}tasks", TestPrefix::new());
        let names = [fresh.as_str(), fresh.as_str(), "tgtest_x_tasks", "taskgate_tasks", "tgtest_"];
        let stale = stale_prefixes(names, now);
        assert_eq!(stale, vec![TestPrefix::of(&fresh).expect("a test table")]);
        assert!(stale_prefixes([later.as_str()], SystemTime::now()).is_empty());
        assert_eq!(TestPrefix::of("taskgate_tasks"), None);
    }

    #[test]
    fn the_tables_are_read_from_the_migrations() {
        let sql = "CREATE TABLE {prefix}tasks (id TEXT);\n\
                   CREATE TABLE IF NOT EXISTS {prefix}task_deps (a TEXT);\n\
                   CREATE INDEX {prefix}idx ON {prefix}tasks (id);\n\
                   -- CREATE TABLE).\nALTER TABLE {prefix}tasks ADD COLUMN x INTEGER;";
        assert_eq!(created_tables(sql), ["tasks", "task_deps"]);
        for dialect in ["sqlite", "postgres", "mysql"] {
            assert!(test_tables_sql(dialect).is_some(), "{dialect}");
        }
    }
}
