//! `cargo test -p brokertest`: the whole suite — every contract case by its stable name, the
//! model test, the history checker and the regressions — against the in-memory broker, or
//! against the database `BROKERTEST_URL` names: `sqlite://` (a temporary file per case),
//! `sqlite:///path/to/dir/file.db`, `postgres://…` or `mysql://…` (a random table prefix per
//! case, removed afterwards). The same cases, with the same names, as `taskgate check <url>`
//! and each backend's own `tests/contract.rs`.
//!
//! ```text
//! cargo test -p brokertest
//! BROKERTEST_URL=postgres://postgres@127.0.0.1:5432/test cargo test -p brokertest
//! ```
//!
//! A URL this cannot use fails every test with a message that names it.

use std::sync::Arc;

use brokertest::Factory;

/// The factory for `BROKERTEST_URL` (the memory broker when it is unset or empty).
fn factory() -> Arc<dyn Factory> {
    let url = std::env::var("BROKERTEST_URL").unwrap_or_default();
    match for_url(&url) {
        Ok(factory) => factory,
        Err(why) => panic!("BROKERTEST_URL={url:?} cannot be used: {why}"),
    }
}

fn for_url(url: &str) -> Result<Arc<dyn Factory>, String> {
    if url.is_empty() || url == "memory://" {
        return Ok(Arc::new(taskgate_memory::testing::MemoryFactory));
    }
    if let Some(path) = url.strip_prefix("sqlite://") {
        return Ok(match path {
            "" => Arc::new(taskgate_sqlite::testing::SqliteFactory::new()),
            path => Arc::new(taskgate_sqlite::testing::SqliteFactory::on_file(path)),
        });
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let factory = taskgate_postgres::testing::PgFactory::from_url(url);
        return Ok(Arc::new(factory.map_err(|e| e.to_string())?));
    }
    if url.starts_with("mysql://") || url.starts_with("mariadb://") {
        return Ok(Arc::new(taskgate_mysql::testing::MySqlFactory::from_url(url)));
    }
    Err("expected memory://, sqlite://[path], postgres://… or mysql://…".to_owned())
}

brokertest::contract_tests!(factory());

#[test]
fn a_url_of_no_backend_is_refused_by_name() {
    let err = for_url("redis://127.0.0.1").err();
    assert_eq!(
        err.as_deref(),
        Some("expected memory://, sqlite://[path], postgres://… or mysql://…")
    );
}
