//! Connections that fail the broker, through a TCP proxy in front of the test server
//! (`sqltest::cutproxy`): a COMMIT cut before it reached the server or after the server
//! applied it (enqueue, enqueue_many and ack return the truth, nothing doubled or lost), a
//! server that stays unreachable after a lost COMMIT (the repeated call resolves it without a
//! duplicate), and an unreachable server (a closed port, a name that does not resolve, a
//! server gone after `init`), reported at once with the driver's cause, as on PostgreSQL.

mod common;

use std::sync::Arc;
use std::time::Duration;

use sqltest::cutproxy::{self, CutProxy};
use taskgate::{BoxError, Broker, BrokerOptions, ErrorKind};
use taskgate_mysql::testing::MySqlStorage;
use taskgate_mysql::{MySqlBroker, MySqlOptions};

/// A handle on `storage` whose connections go through a new proxy, and that proxy.
async fn through_proxy(storage: &MySqlStorage) -> Result<(Arc<MySqlBroker>, CutProxy), BoxError> {
    let (proxy, url) = cutproxy::start_for_url(storage.url()).await?;
    let broker = MySqlOptions::from_url(&url)?.prefix(storage.prefix()).connect_lazy()?;
    broker.init(BrokerOptions::default()).await?;
    Ok((Arc::new(broker), proxy))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_cut_before_or_after_the_server_applied_it_returns_the_truth(
) -> Result<(), BoxError> {
    let Some(storage) = common::storage("a_commit_cut_returns_the_truth").await else {
        return Ok(());
    };
    let direct = common::handle(&storage, BrokerOptions::default()).await?;
    let (through, proxy) = through_proxy(&storage).await?;
    cutproxy::check_commit_cuts(&*through, &*direct, &proxy).await?;
    through.close().await?;
    direct.close().await?;
    storage.drop_tables().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_commit_on_a_server_that_stays_away_is_resolved_by_the_repeat(
) -> Result<(), BoxError> {
    let Some(storage) = common::storage("a_lost_commit_is_resolved_by_the_repeat").await else {
        return Ok(());
    };
    let direct = common::handle(&storage, BrokerOptions::default()).await?;
    let (through, proxy) = through_proxy(&storage).await?;
    cutproxy::check_unresolved_commits(&*through, &*direct, &proxy).await?;
    through.close().await?;
    direct.close().await?;
    storage.drop_tables().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_writes_with_a_lost_commit_report_an_unknown_outcome() -> Result<(), BoxError> {
    let Some(storage) = common::storage("other_writes_report_unknown").await else {
        return Ok(());
    };
    let direct = common::handle(&storage, BrokerOptions::default()).await?;
    let (through, proxy) = through_proxy(&storage).await?;
    cutproxy::check_other_writes_report_unknown(&*through, &*direct, &proxy).await?;
    through.close().await?;
    direct.close().await?;
    storage.drop_tables().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_gone_after_init_fails_the_next_call_at_once_naming_the_cause(
) -> Result<(), BoxError> {
    let Some(storage) = common::storage("a_server_gone_after_init").await else {
        return Ok(());
    };
    let (through, proxy) = through_proxy(&storage).await?;
    cutproxy::check_unreachable_fails_fast(&*through, &proxy).await?;
    through.close().await?;
    storage.drop_tables().await
}

/// `connect` and `init` against a closed port on 127.0.0.1 and against a host name that does
/// not resolve fail with the driver's cause in the error's text (the 60 s bound only catches
/// a hang).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_fails_at_once_naming_the_cause() -> Result<(), BoxError> {
    let port = cutproxy::closed_port()?;
    let cases = [
        (format!("mysql://root@127.0.0.1:{port}/test"), "Connection refused"),
        ("mysql://root@no-such-host.invalid:3306/test".to_owned(), "failed to lookup address"),
    ];
    let bound = Duration::from_secs(60);
    for (url, cause) in cases {
        let connect = tokio::time::timeout(bound, MySqlBroker::connect(&url)).await;
        match connect.map_err(|_| format!("connect {url} hung"))? {
            Err(e) if e.is(ErrorKind::Backend) && e.to_string().contains(cause) => {}
            other => return Err(format!("connect {url}: expected {cause:?}, got {other:?}").into()),
        }
        let lazy = MySqlOptions::from_url(&url)?.connect_lazy()?;
        let init = tokio::time::timeout(bound, lazy.init(BrokerOptions::default())).await;
        match init.map_err(|_| format!("init {url} hung"))? {
            Err(e) if e.is(ErrorKind::Backend) && e.to_string().contains(cause) => {}
            other => return Err(format!("init {url}: expected {cause:?}, got {other:?}").into()),
        }
    }
    Ok(())
}
