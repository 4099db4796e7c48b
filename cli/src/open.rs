//! Opening the database an operator verb works on: the URL (`--url` or `TASKGATE_URL`), the
//! table prefix, the schema's version, and an initialised broker through each backend's public
//! constructor. Only `migrate` creates or changes a schema; every other verb refuses a database
//! whose schema is missing, older or newer than this taskgate.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use taskgate::{Broker, BrokerOptions};
use taskgate_sql::{Kind, Migration, Value};

use crate::error::{redact, CliError};

/// The database a verb works on.
#[derive(Clone, Debug, Args)]
pub(crate) struct Db {
    /// The database: memory:// (private to this process), sqlite://PATH, postgres://…,
    /// mysql://… or mariadb://….
    #[arg(long, env = "TASKGATE_URL", value_name = "URL", global = true)]
    pub(crate) url: Option<String>,
    /// The table prefix the application uses.
    #[arg(long, env = "TASKGATE_PREFIX", default_value = "taskgate_", global = true)]
    pub(crate) prefix: String,
}

/// Which backend a URL names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// A new in-memory store, private to this process.
    Memory,
    /// A SQLite file (`None`: `sqlite::memory:`, private like memory://).
    Sqlite(Option<PathBuf>),
    /// A PostgreSQL server.
    Postgres(String),
    /// A MySQL or MariaDB server.
    MySql(String),
}

impl Target {
    /// The backend `url` names, with the URL checked by that backend's own parser.
    pub(crate) fn parse(url: &str) -> Result<Target, CliError> {
        let scheme = url.split_once(':').map_or(url, |(s, _)| s);
        let bad =
            |e: taskgate::Error| CliError::BadUrl { url: redact(url), reason: reason(url, e) };
        match scheme {
            "memory" if matches!(url, "memory" | "memory:" | "memory://") => Ok(Target::Memory),
            "memory" => Err(CliError::BadUrl {
                url: url.to_owned(),
                reason: "memory:// takes no path".into(),
            }),
            "sqlite" => {
                let is_memory = matches!(url, "sqlite::memory:" | "sqlite://:memory:");
                taskgate_sqlite::SqliteOptions::from_url(url).map_err(bad)?;
                let rest = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:"));
                Ok(Target::Sqlite((!is_memory).then(|| PathBuf::from(rest.unwrap_or_default()))))
            }
            "postgres" | "postgresql" => {
                taskgate_postgres::PgOptions::from_url(url).map_err(bad)?;
                Ok(Target::Postgres(url.to_owned()))
            }
            "mysql" | "mariadb" => {
                taskgate_mysql::MySqlOptions::from_url(url).map_err(bad)?;
                Ok(Target::MySql(url.to_owned()))
            }
            "" => Err(CliError::BadUrl { url: url.to_owned(), reason: "empty URL".into() }),
            other => Err(CliError::UnknownScheme { scheme: other.to_owned(), url: redact(url) }),
        }
    }

    /// The migrations this taskgate knows for the backend (none for memory).
    fn migrations(&self) -> &'static [Migration] {
        match self {
            Target::Memory | Target::Sqlite(None) => &[],
            Target::Sqlite(Some(_)) => taskgate_sqlite::MIGRATIONS,
            Target::Postgres(_) => taskgate_postgres::MIGRATIONS,
            Target::MySql(_) => taskgate_mysql::MIGRATIONS,
        }
    }

    /// True for a store that lives only as long as this process.
    pub(crate) fn is_private(&self) -> bool {
        matches!(self, Target::Memory | Target::Sqlite(None))
    }
}

/// The reason inside an `InvalidInput` error (without the URL the message repeats), else the
/// whole message.
fn reason(url: &str, e: taskgate::Error) -> String {
    let text = match e {
        taskgate::Error::InvalidInput { reason, .. } => reason,
        e => e.to_string(),
    };
    let quoted = format!("{url:?}: ");
    let plain = format!("{url}: ");
    let text = text.strip_prefix(&quoted).or_else(|| text.strip_prefix(&plain)).unwrap_or(&text);
    text.to_owned()
}

/// The schema under one prefix: what is applied and what this taskgate knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SchemaStatus {
    /// The applied versions, ascending; `None` when there is no schema at all.
    pub(crate) applied: Option<Vec<i64>>,
    /// Every migration this taskgate knows, `(version, name)`.
    pub(crate) known: Vec<(i64, &'static str)>,
}

impl SchemaStatus {
    /// The newest applied version (0 when none).
    pub(crate) fn current(&self) -> i64 {
        self.applied.as_ref().and_then(|a| a.last().copied()).unwrap_or(0)
    }

    /// The newest version this taskgate knows (0 when none).
    pub(crate) fn latest(&self) -> i64 {
        self.known.last().map_or(0, |(v, _)| *v)
    }

    /// The known migrations not applied yet.
    pub(crate) fn pending(&self) -> Vec<(i64, &'static str)> {
        let applied = self.applied.clone().unwrap_or_default();
        self.known.iter().filter(|(v, _)| !applied.contains(v)).copied().collect()
    }

    /// `Ok` when a verb may use the schema: present and exactly as new as this taskgate.
    fn usable(&self, db: &Resolved) -> Result<(), CliError> {
        let (current, latest) = (self.current(), self.latest());
        let prefix = db.prefix.clone();
        match self.applied {
            None => Err(CliError::NoSchema { url: redact(&db.url), prefix }),
            Some(_) if current > latest => Err(CliError::SchemaAhead { prefix, current, latest }),
            Some(_) if !self.pending().is_empty() => {
                Err(CliError::SchemaBehind { prefix, current, latest })
            }
            Some(_) => Ok(()),
        }
    }
}

/// A URL resolved to its backend, with the prefix checked.
#[derive(Clone, Debug)]
pub(crate) struct Resolved {
    /// The URL as given.
    pub(crate) url: String,
    /// Its backend.
    pub(crate) target: Target,
    /// The table prefix.
    pub(crate) prefix: String,
}

impl Db {
    /// The URL and prefix, checked; nothing is opened.
    pub(crate) fn resolve(&self) -> Result<Resolved, CliError> {
        let url = self.url.as_deref().map(str::trim).filter(|u| !u.is_empty());
        let url = url.ok_or(CliError::NoUrl)?.to_owned();
        let target = Target::parse(&url)?;
        taskgate::validate::validate_prefix(&self.prefix)?;
        if target.is_private() {
            crate::output::err(&format!(
                "taskgate: note: {url} is private to this process: it starts empty and is gone \
                 when taskgate exits"
            ));
        }
        Ok(Resolved { url, target, prefix: self.prefix.clone() })
    }

    /// An initialised broker on a schema this taskgate can use (never creates or migrates one).
    pub(crate) async fn open(&self) -> Result<Arc<dyn Broker>, CliError> {
        let db = self.resolve()?;
        if !db.target.is_private() {
            status(&db).await?.usable(&db)?;
        }
        let broker = connect(&db).await?;
        init(&db, &*broker).await?;
        Ok(broker)
    }
}

/// A broker on `db`, constructed but not initialised. Opening a SQLite file applies its
/// missing migrations (the SQLite backend migrates on open), so verbs other than `migrate`
/// check the schema first.
pub(crate) async fn connect(db: &Resolved) -> Result<Arc<dyn Broker>, CliError> {
    let unreachable = |e: taskgate::Error| unreachable_db(db, e);
    Ok(match &db.target {
        Target::Memory => Arc::new(taskgate_memory::MemoryBroker::new()),
        Target::Sqlite(None) => Arc::new(
            taskgate_sqlite::SqliteOptions::memory()
                .prefix(&db.prefix)
                .open()
                .await
                .map_err(unreachable)?,
        ),
        Target::Sqlite(Some(path)) => Arc::new(
            taskgate_sqlite::SqliteOptions::new(path)
                .prefix(&db.prefix)
                .open()
                .await
                .map_err(unreachable)?,
        ),
        Target::Postgres(url) => Arc::new(
            taskgate_postgres::PgOptions::from_url(url)?
                .prefix(&db.prefix)
                .pool_size(2)
                .connect()
                .await
                .map_err(unreachable)?,
        ),
        Target::MySql(url) => Arc::new(
            taskgate_mysql::MySqlOptions::from_url(url)?
                .prefix(&db.prefix)
                .pool_size(2)
                .connect()
                .await
                .map_err(unreachable)?,
        ),
    })
}

/// `init` with the default options; a storage failure here means the database is unreachable.
pub(crate) async fn init(db: &Resolved, broker: &dyn Broker) -> Result<(), CliError> {
    broker.init(BrokerOptions::default()).await.map_err(|e| unreachable_db(db, e))
}

/// A backend error while connecting is an unreachable database; other errors keep their kind.
fn unreachable_db(db: &Resolved, e: taskgate::Error) -> CliError {
    match e {
        taskgate::Error::Backend { source, .. } => {
            CliError::Unreachable { url: redact(&db.url), cause: source.to_string() }
        }
        e => e.into(),
    }
}

/// The schema under `db.prefix`, read without changing anything.
pub(crate) async fn status(db: &Resolved) -> Result<SchemaStatus, CliError> {
    let known = db.target.migrations().iter().map(|m| (m.version, m.name)).collect();
    let applied = match &db.target {
        Target::Memory | Target::Sqlite(None) => Some(Vec::new()),
        Target::Sqlite(Some(path)) => sqlite_versions(db, path).await?,
        Target::Postgres(_) | Target::MySql(_) => server_versions(db).await?,
    };
    Ok(SchemaStatus { applied, known })
}

/// A SQLite file's applied versions through a read-only connection (opening the broker would
/// migrate). A missing file is [`CliError::NoDatabaseFile`].
async fn sqlite_versions(db: &Resolved, path: &PathBuf) -> Result<Option<Vec<i64>>, CliError> {
    use sqlx::{Connection, Row};
    if !path.is_file() {
        return Err(CliError::NoDatabaseFile {
            path: path.display().to_string(),
            url: db.url.clone(),
        });
    }
    let fail = |e: sqlx::Error| unreachable_db(db, taskgate::Error::backend("sqlite", e));
    let options = sqlx::sqlite::SqliteConnectOptions::new().filename(path).read_only(true);
    let mut conn = sqlx::SqliteConnection::connect_with(&options).await.map_err(fail)?;
    let table = format!("{}schema_migrations", db.prefix);
    let exists = sqlx::query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?")
        .bind(&table)
        .fetch_optional(&mut conn)
        .await
        .map_err(fail)?;
    let versions = match exists {
        None => None,
        // The table name is the validated prefix plus a constant.
        Some(_) => Some(
            sqlx::query(&format!("SELECT version FROM {table} ORDER BY version"))
                .fetch_all(&mut conn)
                .await
                .map_err(fail)?
                .iter()
                .map(|row| row.try_get::<i64, _>(0))
                .collect::<Result<Vec<_>, _>>()
                .map_err(fail)?,
        ),
    };
    conn.close().await.map_err(fail)?;
    Ok(versions)
}

/// A server's applied versions through the broker's own pooled reads (no `init`, no DDL).
async fn server_versions(db: &Resolved) -> Result<Option<Vec<i64>>, CliError> {
    let (engine, exists_sql, backend) = match &db.target {
        Target::Postgres(url) => {
            let options = taskgate_postgres::PgOptions::from_url(url)?.prefix(&db.prefix);
            let broker = options.pool_size(1).connect().await.map_err(|e| unreachable_db(db, e))?;
            (broker.engine().clone(), PG_TABLE_EXISTS, "postgres")
        }
        Target::MySql(url) => {
            let options = taskgate_mysql::MySqlOptions::from_url(url)?.prefix(&db.prefix);
            let broker = options.pool_size(1).connect().await.map_err(|e| unreachable_db(db, e))?;
            (broker.engine().clone(), MYSQL_TABLE_EXISTS, "mysql")
        }
        Target::Memory | Target::Sqlite(_) => return Ok(Some(Vec::new())),
    };
    let versions = read_versions(&engine, exists_sql, &db.prefix).await;
    engine.close().await.ok();
    versions.map_err(|e| unreachable_db(db, taskgate::Error::backend(backend, e)))
}

const PG_TABLE_EXISTS: &str = "SELECT 1 FROM information_schema.tables \
     WHERE table_schema = current_schema() AND table_name = $1";
const MYSQL_TABLE_EXISTS: &str = "SELECT 1 FROM information_schema.tables \
     WHERE table_schema = DATABASE() AND table_name = ?";

async fn read_versions(
    engine: &taskgate_sql::SqlBroker,
    exists_sql: &str,
    prefix: &str,
) -> Result<Option<Vec<i64>>, taskgate_sql::DbError> {
    let adapter = engine.adapter();
    let table = format!("{prefix}schema_migrations");
    if adapter.read(exists_sql, &[Value::Text(table.clone())], &[Kind::Int]).await?.is_empty() {
        return Ok(None);
    }
    // The table name is the validated prefix plus a constant.
    let sql = format!("SELECT version FROM {table} ORDER BY version");
    let rows = adapter.read(&sql, &[], &[Kind::Int]).await?;
    let version = |row: Vec<Value>| match row.first() {
        Some(Value::Int(v)) => Some(*v),
        _ => None,
    };
    Ok(Some(rows.into_iter().filter_map(version).collect()))
}
