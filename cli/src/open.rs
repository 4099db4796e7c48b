//! Opening the database an operator verb works on: the URL (`--url` or `TASKGATE_URL`), the
//! table prefix, the schema's version, and an initialised broker through each backend's public
//! constructor. Only `migrate` creates or changes a schema; every other verb refuses a database
//! whose schema is missing, older or newer than this taskgate.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use taskgate::{Broker, BrokerOptions};
use taskgate_sql::SchemaStatus;

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

/// `Ok` when a verb may use the schema: present and exactly as new as this taskgate.
fn usable(status: &SchemaStatus, db: &Resolved) -> Result<(), CliError> {
    let (current, latest) = (status.current(), status.latest());
    let prefix = db.prefix.clone();
    match status.applied {
        None => Err(CliError::NoSchema { url: redact(&db.url), prefix }),
        Some(_) if status.is_ahead() => Err(CliError::SchemaAhead { prefix, current, latest }),
        Some(_) if !status.pending().is_empty() => {
            Err(CliError::SchemaBehind { prefix, current, latest })
        }
        Some(_) => Ok(()),
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
            usable(&status(&db).await?, &db)?;
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

/// The schema under `db.prefix`, read by the engine ([`taskgate_sql::schema_status`])
/// without changing anything: a SQLite file through a read-only connection (opening the
/// broker would migrate), a server through a broker that is constructed but not initialised.
/// A missing SQLite file is [`CliError::NoDatabaseFile`].
pub(crate) async fn status(db: &Resolved) -> Result<SchemaStatus, CliError> {
    let unreachable = |e: taskgate::Error| unreachable_db(db, e);
    match &db.target {
        Target::Memory | Target::Sqlite(None) => {
            Ok(SchemaStatus { applied: Some(Vec::new()), known: Vec::new() })
        }
        Target::Sqlite(Some(path)) if !path.is_file() => {
            Err(CliError::NoDatabaseFile { path: path.display().to_string(), url: db.url.clone() })
        }
        Target::Sqlite(Some(path)) => {
            let options = taskgate_sqlite::SqliteOptions::new(path).prefix(&db.prefix);
            options.schema_status().await.map_err(unreachable)
        }
        Target::Postgres(url) => {
            let options = taskgate_postgres::PgOptions::from_url(url)?.prefix(&db.prefix);
            let broker = options.pool_size(1).connect().await.map_err(unreachable)?;
            server_status(broker.engine()).await.map_err(unreachable)
        }
        Target::MySql(url) => {
            let options = taskgate_mysql::MySqlOptions::from_url(url)?.prefix(&db.prefix);
            let broker = options.pool_size(1).connect().await.map_err(unreachable)?;
            server_status(broker.engine()).await.map_err(unreachable)
        }
    }
}

/// A server's schema status through `engine`, which is closed after.
async fn server_status(engine: &taskgate_sql::SqlBroker) -> taskgate::Result<SchemaStatus> {
    let status = engine.schema_status().await;
    engine.close().await.ok();
    status
}
