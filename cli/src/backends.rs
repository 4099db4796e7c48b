//! Which backend a URL names, and the contract-suite factory for it.

use std::sync::Arc;

use brokertest::Factory;

use crate::error::CliError;
use crate::open::{Resolved, Target};

/// The URL used when `check` gets none: a temporary SQLite file per case.
pub(crate) const DEFAULT_URL: &str = "sqlite://";

/// The schemes `check` understands, for error messages and `--help`.
pub(crate) const SCHEMES: &str =
    "memory://, sqlite:// (temporary files), sqlite://PATH, postgres://…, mysql://…, mariadb://…";

/// The factory for `url`: fresh isolated storage per case on that backend.
///
/// * `memory://` — a new in-memory store per case;
/// * `sqlite://` — a temporary file per case; `sqlite://PATH` — the file at PATH, each case
///   under its own random table prefix, its tables dropped afterwards;
/// * `postgres://…`, `mysql://…` (`mariadb://…`) — the server's database, each case under its
///   own random table prefix, dropped afterwards.
pub(crate) fn factory_for(url: &str) -> Result<Arc<dyn Factory>, CliError> {
    if matches!(url, "sqlite://" | "sqlite:") {
        return Ok(Arc::new(taskgate_sqlite::testing::SqliteFactory::new()));
    }
    Ok(match Target::parse(url)? {
        Target::Memory => Arc::new(taskgate_memory::testing::MemoryFactory),
        Target::Sqlite(None) => {
            return Err(CliError::BadUrl {
                url: url.to_owned(),
                reason: "an in-memory SQLite database cannot be shared by a case's handles; \
                         use sqlite:// for temporary files"
                    .into(),
            })
        }
        Target::Sqlite(Some(path)) => {
            Arc::new(taskgate_sqlite::testing::SqliteFactory::on_file(path))
        }
        Target::Postgres(url) => Arc::new(taskgate_postgres::testing::PgFactory::from_url(&url)?),
        Target::MySql(url) => Arc::new(taskgate_mysql::testing::MySqlFactory::from_url(&url)),
    })
}

/// Checks once, before any case runs, that the database `url` names can be reached (a SQLite
/// file: that its directory exists), so an unreachable one is one message, not one per case.
pub(crate) async fn probe(url: &str) -> Result<(), CliError> {
    match Target::parse(url) {
        Ok(Target::Sqlite(Some(path))) => {
            let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
            match dir {
                Some(dir) if !dir.is_dir() => Err(CliError::BadUrl {
                    url: url.to_owned(),
                    reason: format!("directory {} does not exist", dir.display()),
                }),
                _ => Ok(()),
            }
        }
        Ok(target @ (Target::Postgres(_) | Target::MySql(_))) => {
            // The read-only schema look-up the operator verbs make: it connects like a broker
            // handle and reports an unreachable server as one error.
            let db = Resolved { url: url.to_owned(), target, prefix: "taskgate_".to_owned() };
            crate::open::status(&db).await.map(drop)
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("memory://", "memory")]
    #[case("memory", "memory")]
    #[case("sqlite://", "sqlite")]
    #[case("sqlite:///tmp/taskgate-check.db", "sqlite")]
    #[case("postgres://postgres@127.0.0.1:5432/test", "postgres")]
    #[case("postgresql://postgres@127.0.0.1/test", "postgres")]
    #[case("mysql://root@127.0.0.1:3306/test", "mysql")]
    fn known_urls(#[case] url: &str, #[case] backend: &str) {
        let factory = factory_for(url).map_err(|e| e.to_string());
        assert_eq!(factory.map(|f| f.name()).as_deref(), Ok(backend));
    }

    #[rstest]
    #[case("redis://localhost", "unsupported scheme \"redis\"")]
    #[case("", "empty URL")]
    #[case("sqlite://:memory:", "in-memory SQLite")]
    #[case("sqlite::memory:", "in-memory SQLite")]
    #[case("postgres://host:notaport/db", "postgres://host:notaport/db")]
    fn bad_urls_are_named(#[case] url: &str, #[case] expected: &str) {
        let err = factory_for(url).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains(expected), "{url:?}: {err}");
    }
}
