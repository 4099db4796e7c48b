//! [`SqliteOptions`]: where the database is, the table prefix, durability and polling — and
//! how `sqlite://` URLs map onto them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use taskgate::{Error, Result};

/// Default table prefix.
pub const DEFAULT_PREFIX: &str = "taskgate_";
/// Default cross-process poll interval (contract §11.4).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Default busy timeout: how long a writer waits for another process's write lock.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// SQLite's `synchronous` setting for the broker's connections.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Synchronous {
    /// Every commit is fsynced before it returns: durable across power loss (the default).
    #[default]
    Full,
    /// WAL commits are fsynced at checkpoints: durable across a process crash, may lose the
    /// last commits on power loss. Faster.
    Normal,
}

/// Where the database lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Location {
    /// A file (created if missing; its directory must exist).
    File(PathBuf),
    /// A private in-memory database (one connection serves reads and writes).
    Memory,
}

/// How to open a [`SqliteBroker`](crate::SqliteBroker).
///
/// ```no_run
/// # async fn demo() -> taskgate::Result<()> {
/// use taskgate_sqlite::{SqliteOptions, Synchronous};
/// let broker = SqliteOptions::new("/var/lib/app/tasks.db")
///     .prefix("app_")
///     .synchronous(Synchronous::Normal)
///     .open()
///     .await?;
/// # drop(broker); Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct SqliteOptions {
    pub(crate) location: Location,
    pub(crate) prefix: String,
    pub(crate) synchronous: Synchronous,
    pub(crate) poll_interval: Duration,
    pub(crate) busy_timeout: Duration,
    pub(crate) read_connections: u32,
    pub(crate) dialect: Option<std::sync::Arc<dyn taskgate_sql::Dialect>>,
    #[cfg(feature = "test-hooks")]
    pub(crate) log: Option<std::sync::Arc<taskgate_sql::StatementLog>>,
}

impl SqliteOptions {
    /// Options for the database file at `path`, with every default.
    pub fn new(path: impl AsRef<Path>) -> SqliteOptions {
        SqliteOptions::at(Location::File(path.as_ref().to_path_buf()))
    }

    /// Options for a private in-memory database (gone when the broker closes).
    pub fn memory() -> SqliteOptions {
        SqliteOptions::at(Location::Memory)
    }

    fn at(location: Location) -> SqliteOptions {
        SqliteOptions {
            location,
            prefix: DEFAULT_PREFIX.to_owned(),
            synchronous: Synchronous::Full,
            poll_interval: DEFAULT_POLL_INTERVAL,
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            read_connections: 4,
            dialect: None,
            #[cfg(feature = "test-hooks")]
            log: None,
        }
    }

    /// Parses `sqlite://<path>`, `sqlite:<path>` or `sqlite::memory:`. A relative path is
    /// relative to the working directory (`sqlite://data/t.db`); an absolute one keeps its
    /// slash (`sqlite:///var/lib/t.db`). Query parameters are not accepted (use the setters).
    pub fn from_url(url: &str) -> Result<SqliteOptions> {
        let rest = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
            .ok_or_else(|| Error::invalid("url", format!("{url:?} is not a sqlite: URL")))?;
        if rest == ":memory:" || rest == "memory:" {
            return Ok(SqliteOptions::memory());
        }
        if rest.is_empty() || rest.contains('?') {
            let reason = format!("{url:?}: expected sqlite://<path> without query parameters");
            return Err(Error::invalid("url", reason));
        }
        Ok(SqliteOptions::new(rest))
    }

    /// Sets the table prefix (validated when opening: `^[a-z][a-z0-9_]{0,29}$`).
    pub fn prefix(mut self, prefix: impl Into<String>) -> SqliteOptions {
        self.prefix = prefix.into();
        self
    }

    /// Sets `synchronous` (default [`Synchronous::Full`]).
    pub fn synchronous(mut self, synchronous: Synchronous) -> SqliteOptions {
        self.synchronous = synchronous;
        self
    }

    /// Sets how often waiting claimers look for other processes' writes (default 100 ms).
    pub fn poll_interval(mut self, interval: Duration) -> SqliteOptions {
        self.poll_interval = interval.max(Duration::from_millis(1));
        self
    }

    /// Sets how long a write waits for another process's lock before failing (default 5 s).
    pub fn busy_timeout(mut self, timeout: Duration) -> SqliteOptions {
        self.busy_timeout = timeout;
        self
    }

    /// Sets the size of the read pool (default 4, at least 1).
    pub fn read_connections(mut self, n: u32) -> SqliteOptions {
        self.read_connections = n.max(1);
        self
    }

    /// Runs the engine with another dialect on this SQLite file (tests only: the
    /// server-shaped dialect of [`testing`](crate::testing) exercises the PostgreSQL/MySQL
    /// statement shapes on SQLite).
    #[cfg(feature = "testing")]
    pub fn dialect(mut self, dialect: std::sync::Arc<dyn taskgate_sql::Dialect>) -> SqliteOptions {
        self.dialect = Some(dialect);
        self
    }

    /// Records every statement the broker runs, with its arguments, into `log` (tests; feature
    /// `test-hooks`).
    #[cfg(feature = "test-hooks")]
    pub fn record_statements(
        mut self,
        log: std::sync::Arc<taskgate_sql::StatementLog>,
    ) -> SqliteOptions {
        self.log = Some(log);
        self
    }

    /// Opens the database, applying migrations (see [`SqliteBroker::open_with`](crate::SqliteBroker::open_with)).
    pub async fn open(self) -> Result<crate::SqliteBroker> {
        crate::SqliteBroker::open_with(self).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let loc = |u: &str| SqliteOptions::from_url(u).map(|o| o.location);
        assert_eq!(loc("sqlite://data/t.db").ok(), Some(Location::File("data/t.db".into())));
        assert_eq!(loc("sqlite:///var/t.db").ok(), Some(Location::File("/var/t.db".into())));
        assert_eq!(loc("sqlite:t.db").ok(), Some(Location::File("t.db".into())));
        assert_eq!(loc("sqlite::memory:").ok(), Some(Location::Memory));
        assert!(loc("postgres://x").is_err());
        assert!(loc("sqlite://").is_err());
        assert!(loc("sqlite://t.db?mode=ro").is_err());
    }
}
