//! Which backend a URL names, and the contract-suite factory for it.

use std::sync::Arc;

use brokertest::Factory;

mod sqlite_file;

/// The URL used when `check` gets none: a temporary SQLite file per case.
pub(crate) const DEFAULT_URL: &str = "sqlite://";

/// The schemes `check` understands, for error messages and `--help`.
pub(crate) const SCHEMES: &str =
    "memory://, sqlite:// (temporary files), sqlite://PATH, postgres://…, mysql://…, mariadb://…";

/// Why a URL cannot be checked.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct BadUrl(pub(crate) String);

impl std::fmt::Display for BadUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The factory for `url`: fresh isolated storage per case on that backend.
///
/// * `memory://` — a new in-memory store per case;
/// * `sqlite://` — a temporary file per case; `sqlite://PATH` — the file at PATH, each case
///   under its own random table prefix, its tables dropped afterwards;
/// * `postgres://…`, `mysql://…` (`mariadb://…`) — the server's database, each case under its
///   own random table prefix, dropped afterwards.
pub(crate) fn factory_for(url: &str) -> Result<Arc<dyn Factory>, BadUrl> {
    let scheme = url.split_once(':').map(|(s, _)| s).unwrap_or(url);
    match scheme {
        "memory" => Ok(Arc::new(taskgate_memory::testing::MemoryFactory)),
        "sqlite" => sqlite(url),
        "postgres" | "postgresql" => taskgate_postgres::testing::PgFactory::from_url(url)
            .map(|f| Arc::new(f) as Arc<dyn Factory>)
            .map_err(|e| BadUrl(format!("{url:?}: {e}"))),
        "mysql" | "mariadb" => {
            taskgate_mysql::MySqlOptions::from_url(url)
                .map_err(|e| BadUrl(format!("{url:?}: {e}")))?;
            Ok(Arc::new(taskgate_mysql::testing::MySqlFactory::from_url(url)))
        }
        "" => Err(BadUrl(format!("empty URL; supported: {SCHEMES}"))),
        other => {
            Err(BadUrl(format!("unsupported scheme {other:?} in {url:?}; supported: {SCHEMES}")))
        }
    }
}

fn sqlite(url: &str) -> Result<Arc<dyn Factory>, BadUrl> {
    if matches!(url, "sqlite://" | "sqlite:") {
        return Ok(Arc::new(taskgate_sqlite::testing::SqliteFactory::new()));
    }
    taskgate_sqlite::SqliteOptions::from_url(url).map_err(|e| BadUrl(format!("{e}")))?;
    let rest = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:")).unwrap_or("");
    if matches!(rest, ":memory:" | "memory:") {
        return Err(BadUrl(format!(
            "{url:?}: an in-memory SQLite database cannot be shared by a case's handles; \
             use sqlite:// for temporary files"
        )));
    }
    Ok(Arc::new(sqlite_file::SqliteFileFactory::new(rest.into())))
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
        let factory = factory_for(url).map_err(|e| e.0);
        assert_eq!(factory.map(|f| f.name()).as_deref(), Ok(backend));
    }

    #[rstest]
    #[case("redis://localhost", "unsupported scheme \"redis\"")]
    #[case("", "empty URL")]
    #[case("sqlite::memory:", "in-memory SQLite")]
    #[case("postgres://host:notaport/db", "postgres://host:notaport/db")]
    fn bad_urls_are_named(#[case] url: &str, #[case] expected: &str) {
        let err = factory_for(url).err().map(|e| e.0).unwrap_or_default();
        assert!(err.contains(expected), "{url:?}: {err}");
    }
}
