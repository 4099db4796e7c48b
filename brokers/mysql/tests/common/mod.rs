//! Shared set-up of the MySQL integration tests: fresh storage on the test server (or a loud
//! skip when there is none and `TASKGATE_REQUIRE_DB` is not `1`), initialised handles, and
//! server-side helpers.

#![allow(dead_code, unreachable_pub, reason = "each test binary uses a different subset")]

use std::sync::Arc;

use sqlx::{Connection, MySqlConnection, Row};
use taskgate::{BoxError, Broker, BrokerOptions, ManualClock};
use taskgate_mysql::testing::{MySqlFactory, MySqlStorage};
use taskgate_mysql::MySqlBroker;

/// Fresh storage, or `None` (after a loud message) when no server is reachable and skipping is
/// allowed.
pub async fn storage(test: &str) -> Option<MySqlStorage> {
    storage_with(test, MySqlFactory::from_env()).await
}

/// Like [`storage`] with a custom factory (pool size).
pub async fn storage_with(test: &str, factory: MySqlFactory) -> Option<MySqlStorage> {
    let what = format!("mysql: {test}");
    let made = brokertest::within(brokertest::WAIT_LIMIT, &what, factory.mysql_storage()).await;
    brokertest::or_skip(&what, made).unwrap_or_else(|e| panic!("{what}: no storage: {e}"))
}

/// A handle on `storage`, initialised with `options`.
pub async fn handle(
    storage: &MySqlStorage,
    options: BrokerOptions,
) -> Result<Arc<MySqlBroker>, BoxError> {
    let broker = Arc::new(storage.mysql_handle()?);
    brokertest::within(brokertest::WAIT_LIMIT, "init", broker.init(options)).await?;
    Ok(broker)
}

/// Options with a manual clock at the contract epoch.
pub fn manual_options() -> (BrokerOptions, ManualClock) {
    let clock = ManualClock::at_contract_epoch();
    let options = BrokerOptions::default().with_clock(Arc::new(clock.clone()));
    (options, clock)
}

/// A direct connection to the test server (outside any broker).
pub async fn connect(storage: &MySqlStorage) -> Result<MySqlConnection, BoxError> {
    let url = storage.url().replacen("mariadb://", "mysql://", 1);
    Ok(MySqlConnection::connect(&url).await?)
}

/// `true` when the server is MariaDB.
/// True when a transaction waits for a lock on one of `storage`'s tables, read from `SHOW
/// ENGINE INNODB STATUS` (live). Not `information_schema.INNODB_TRX`: InnoDB refreshes that
/// table's cache only after 100 ms without a reader, so tests polling it at once all read a
/// stale copy.
pub async fn lock_wait(storage: &MySqlStorage) -> Result<bool, BoxError> {
    let mut conn = connect(storage).await?;
    let row = sqlx::query("SHOW ENGINE INNODB STATUS").fetch_one(&mut conn).await?;
    let status: String = row.try_get(2)?;
    conn.close().await?;
    let prefix = storage.prefix();
    Ok(status.split("---TRANSACTION").any(|trx| trx.contains("LOCK WAIT") && trx.contains(prefix)))
}

/// Waits (up to [`brokertest::WAIT_LIMIT`]) until a transaction waits for a lock on
/// `storage`'s tables; panics naming `what` otherwise.
pub async fn until_lock_wait(storage: &MySqlStorage, what: &str) {
    let limit = brokertest::WAIT_LIMIT;
    let start = std::time::Instant::now();
    loop {
        match lock_wait(storage).await {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) => panic!("{what}: cannot read the lock waits: {e}"),
        }
        if start.elapsed() > limit {
            panic!("{what}: nothing waited for a lock within {limit:?}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

pub async fn is_mariadb(conn: &mut MySqlConnection) -> Result<bool, BoxError> {
    let row = sqlx::query("SELECT VERSION()").fetch_one(&mut *conn).await?;
    Ok(row.try_get::<String, _>(0)?.to_ascii_lowercase().contains("mariadb"))
}
