//! Connections that fail the broker, through a TCP proxy in front of the test server
//! (`sqltest::cutproxy`): a COMMIT cut before it reached the server or after the server
//! applied it (enqueue, enqueue_many and ack return the truth, nothing doubled or lost), a
//! server that stays unreachable after a lost COMMIT (the repeated call resolves it without a
//! duplicate; a childless task's ack and a plain task's enqueue are one-statement writes,
//! cut where that statement commits), and an unreachable server (a closed port, a name that does not resolve, a
//! server gone after `init`), reported at once with the driver's cause, as on MySQL.

mod common;

use std::time::Duration;

use brokertest::Storage as _;
use sqltest::cutproxy::{self, CutProxy};
use taskgate::{BoxError, Broker, BrokerOptions, ErrorKind};
use taskgate_postgres::testing::PgStorage;
use taskgate_postgres::{PgBroker, PgOptions};

/// A handle on `storage` whose connections go through a new proxy, and that proxy.
async fn through_proxy(storage: &PgStorage) -> Result<(PgBroker, CutProxy), BoxError> {
    let (proxy, url) = cutproxy::start_for_url(storage.url()).await?;
    let broker = PgOptions::from_url(&url)?.prefix(storage.prefix()).connect().await?;
    broker.init(BrokerOptions::default()).await?;
    Ok((broker, proxy))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_cut_before_or_after_the_server_applied_it_returns_the_truth(
) -> Result<(), BoxError> {
    let Some(storage) = common::storage("a_commit_cut_returns_the_truth").await else {
        return Ok(());
    };
    let direct = storage.broker().await?;
    direct.init(BrokerOptions::default()).await?;
    let (through, proxy) = through_proxy(&storage).await?;
    cutproxy::check_commit_cuts(&through, &direct, &proxy).await?;
    // The acks of childless tasks and the enqueue of a plain task run as one autocommit
    // statement: their cuts were there (the plain enqueue's, once per round).
    assert!(proxy.ack_cuts() > 0, "no one-statement ack was cut ({} cuts)", proxy.cuts());
    assert_eq!(proxy.enqueue_cuts(), 2, "the one-statement enqueue's cuts ({} cuts)", proxy.cuts());
    through.close().await?;
    direct.close().await?;
    storage.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_commit_on_a_server_that_stays_away_is_resolved_by_the_repeat(
) -> Result<(), BoxError> {
    let Some(storage) = common::storage("a_lost_commit_is_resolved_by_the_repeat").await else {
        return Ok(());
    };
    let direct = storage.broker().await?;
    direct.init(BrokerOptions::default()).await?;
    let (through, proxy) = through_proxy(&storage).await?;
    cutproxy::check_unresolved_commits(&through, &direct, &proxy).await?;
    // The lost ack was the one-statement ack, settled by its `ack_token`; the lost enqueue
    // was the one-statement enqueue, settled by its generated ID.
    assert_eq!(proxy.ack_cuts(), 1, "the ack's cut ({} cuts)", proxy.cuts());
    assert_eq!(proxy.enqueue_cuts(), 1, "the enqueue's cut ({} cuts)", proxy.cuts());
    through.close().await?;
    direct.close().await?;
    storage.cleanup().await
}

/// Issue 38's restart: a one-statement ack's (and enqueue's) answer lost, then the server
/// refuses connections for a second: the call keeps trying and returns the truth once it can
/// read it (before the fix the ack's fallback transaction reported `Connection refused`
/// although the ack had been applied).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_one_statement_write_then_a_short_outage_returns_the_truth() -> Result<(), BoxError>
{
    let Some(storage) = common::storage("a_lost_write_then_a_short_outage").await else {
        return Ok(());
    };
    let direct = storage.broker().await?;
    direct.init(BrokerOptions::default()).await?;
    let (through, proxy) = through_proxy(&storage).await?;
    cutproxy::check_lost_answer_then_outage(&through, &direct, &proxy).await?;
    assert_eq!(proxy.ack_cuts(), 1, "the one-statement ack's cut ({} cuts)", proxy.cuts());
    assert_eq!(proxy.enqueue_cuts(), 1, "the one-statement enqueue's cut ({} cuts)", proxy.cuts());
    through.close().await?;
    direct.close().await?;
    storage.cleanup().await
}

/// A one-statement claim whose answer is lost, on a server that then stays away: the claim
/// may have taken the task (it did: the task is running under a token nobody holds, until its
/// lease expires), so the call reports an unknown outcome, never a definite error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_claim_on_a_server_that_stays_away_is_an_unknown_outcome() -> Result<(), BoxError> {
    let Some(storage) = common::storage("a_lost_claim_is_unknown").await else {
        return Ok(());
    };
    let direct = storage.broker().await?;
    direct.init(BrokerOptions::default()).await?;
    let (through, proxy) = through_proxy(&storage).await?;
    let task = direct.enqueue(&taskgate::Task::new("job", "lostclaim")).await?;
    proxy.arm(cutproxy::Cut::AfterCommitThenRefuse);
    let claim = tokio::time::timeout(Duration::from_secs(60), through.try_dequeue(&["lostclaim"]));
    match claim.await.map_err(|_| "the claim hung")? {
        Err(e) if cutproxy::is_commit_unknown(&e) => {}
        other => return Err(format!("a lost claim answered {other:?}").into()),
    }
    assert_eq!(proxy.claim_cuts(), 1, "the one-statement claim's cut ({} cuts)", proxy.cuts());
    let stored = direct.get(&task.id).await?;
    assert_eq!(stored.status, taskgate::Status::Running, "the lost claim was applied");
    proxy.resume().await?;
    through.close().await?;
    direct.close().await?;
    storage.cleanup().await
}

/// Every other write with its COMMIT's answer lost reports `CommitUnknown`, and was applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_writes_with_a_lost_commit_report_an_unknown_outcome() -> Result<(), BoxError> {
    let Some(storage) = common::storage("other_writes_report_unknown").await else {
        return Ok(());
    };
    let direct = storage.broker().await?;
    direct.init(BrokerOptions::default()).await?;
    let (through, proxy) = through_proxy(&storage).await?;
    cutproxy::check_other_writes_report_unknown(&through, &direct, &proxy).await?;
    through.close().await?;
    direct.close().await?;
    storage.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_gone_after_init_fails_the_next_call_at_once_naming_the_cause(
) -> Result<(), BoxError> {
    let Some(storage) = common::storage("a_server_gone_after_init").await else {
        return Ok(());
    };
    let (through, proxy) = through_proxy(&storage).await?;
    cutproxy::check_unreachable_fails_fast(&through, &proxy).await?;
    through.close().await?;
    storage.cleanup().await
}

/// `init` against a closed port on 127.0.0.1 and against a host name that does not resolve
/// fails with the driver's cause in the error's text (`connect` does no I/O on PostgreSQL;
/// the 60 s bound only catches a hang).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_fails_at_once_naming_the_cause() -> Result<(), BoxError> {
    let port = cutproxy::closed_port()?;
    let cases = [
        (format!("postgres://postgres@127.0.0.1:{port}/test"), "Connection refused"),
        (
            "postgres://postgres@no-such-host.invalid:5432/test".to_owned(),
            "failed to lookup address",
        ),
    ];
    let bound = Duration::from_secs(60);
    for (url, cause) in cases {
        let connect = tokio::time::timeout(bound, PgBroker::connect(&url)).await;
        match connect.map_err(|_| format!("connect {url} hung"))? {
            Err(e) if e.is(ErrorKind::Backend) && e.to_string().contains(cause) => {}
            other => return Err(format!("connect {url}: expected {cause:?}, got {other:?}").into()),
        }
        let broker = PgBroker::connect_lazy(&url)?;
        let init = tokio::time::timeout(bound, broker.init(BrokerOptions::default())).await;
        match init.map_err(|_| format!("init {url} hung"))? {
            Err(e) if e.is(ErrorKind::Backend) && e.to_string().contains(cause) => {}
            other => return Err(format!("init {url}: expected {cause:?}, got {other:?}").into()),
        }
    }
    Ok(())
}
