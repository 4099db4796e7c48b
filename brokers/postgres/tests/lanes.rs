//! `taskgate_sql::Lanes` on the test server: a connection is reused only after a statement
//! that ran to its end; one cut short (its call dropped) or failed is closed, never handed to
//! the next statement; callers wait for a lane up to the timeout; `close` closes the idle
//! connections and refuses later takers. And the broker's single statements run on lanes:
//! a handle's claims, acks and reads reuse a few connections instead of opening new ones.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use brokertest::Storage as _;
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection};
use taskgate::{BoxError, Broker, ManualClock, Task};
use taskgate_sql::{cutproxy, Lanes};

/// Opens a connection to `url`, counting the opens.
async fn open(url: &str, opened: &AtomicUsize) -> sqlx::Result<PgConnection> {
    opened.fetch_add(1, Ordering::SeqCst);
    let options: PgConnectOptions = url.parse()?;
    PgConnection::connect_with(&options.application_name("taskgate-lanes-test")).await
}

async fn backend_pid(conn: &mut PgConnection) -> sqlx::Result<i32> {
    sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(conn).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lane_is_reused_only_after_a_statement_that_ran_to_its_end() -> Result<(), BoxError> {
    let Some(s) = common::storage("lanes reuse").await else { return Ok(()) };
    let opened = AtomicUsize::new(0);
    let lanes: Lanes<PgConnection> = Lanes::new(2, Duration::from_secs(5));

    // A finished statement puts its connection back; the next take gets the same session.
    let mut lane = lanes.take(open(s.url(), &opened)).await?;
    let first = backend_pid(lane.conn()).await?;
    lane.keep();
    assert_eq!(lanes.idle(), 1);
    let mut lane = lanes.take(open(s.url(), &opened)).await?;
    assert_eq!(backend_pid(lane.conn()).await?, first, "the idle connection is reused");
    assert_eq!(opened.load(Ordering::SeqCst), 1, "no second connection was opened");

    // An error the server answered leaves the connection in step: it is kept.
    let failed = sqlx::query("SELECT 1/0").execute(lane.conn()).await;
    assert!(matches!(failed, Err(sqlx::Error::Database(_))), "{failed:?}");
    lane.keep();
    let mut lane = lanes.take(open(s.url(), &opened)).await?;
    assert_eq!(backend_pid(lane.conn()).await?, first);

    // A statement cut short (its call dropped mid-flight) does not put its lane back: the
    // next statement runs on a new session, never reading the old one's late answer.
    let cut = tokio::time::timeout(
        Duration::from_millis(100),
        sqlx::query("SELECT pg_sleep(2)").execute(lane.conn()),
    )
    .await;
    assert!(cut.is_err(), "the sleep was cut short");
    drop(lane);
    assert_eq!(lanes.idle(), 0, "the cut lane's connection was not put back");
    let mut lane = lanes.take(open(s.url(), &opened)).await?;
    let second = backend_pid(lane.conn()).await?;
    assert_ne!(second, first, "a new session after the cut");
    assert_eq!(opened.load(Ordering::SeqCst), 2);
    let one: i32 = sqlx::query_scalar("SELECT 1").fetch_one(lane.conn()).await?;
    assert_eq!(one, 1, "the new session answers its own statement");
    lane.keep();

    // The cut session goes away on the server (its socket was closed).
    let gone = common::eventually(Duration::from_secs(5), || async {
        let mut conn = match s.admin().await {
            Ok(conn) => conn,
            Err(_) => return false,
        };
        let n: Result<i64, _> =
            sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1")
                .bind("taskgate-lanes-test")
                .fetch_one(&mut conn)
                .await;
        n.is_ok_and(|n| n == 1)
    })
    .await;
    assert!(gone, "only the kept lane's session is left");
    lanes.close().await;
    s.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takers_wait_for_a_lane_and_close_refuses_them() -> Result<(), BoxError> {
    let Some(s) = common::storage("lanes wait").await else { return Ok(()) };
    let opened = AtomicUsize::new(0);
    let lanes: Lanes<PgConnection> = Lanes::new(1, Duration::from_millis(300));
    let busy = lanes.take(open(s.url(), &opened)).await?;
    let waited = lanes.take(open(s.url(), &opened)).await.err();
    assert!(matches!(waited, Some(sqlx::Error::PoolTimedOut)), "{waited:?}");
    busy.keep();
    let lane = lanes.take(open(s.url(), &opened)).await?;
    assert_eq!(opened.load(Ordering::SeqCst), 1, "the freed lane was taken, not a new one");
    lane.keep();
    lanes.close().await;
    assert_eq!(lanes.idle(), 0, "close closed the idle connection");
    let refused = lanes.take(open(s.url(), &opened)).await.err();
    assert!(matches!(refused, Some(sqlx::Error::PoolClosed)), "{refused:?}");
    s.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handles_single_statements_reuse_its_connections() -> Result<(), BoxError> {
    let Some(s) = common::storage("lanes in the broker").await else { return Ok(()) };
    let clock = ManualClock::at_contract_epoch();
    // Through a proxy that counts the connections the handle opens.
    let (proxy, _) = cutproxy::start_for_url(s.url()).await?;
    let at = proxy.addr();
    let b = common::handle(&s, &clock, |o| {
        o.pool_size(4).tune_connect(|c| c.host(&at.ip().to_string()).port(at.port()))
    })
    .await?;
    // One at a time: every one-task enqueue, claim, ack and read is one statement.
    let round = |i: usize| {
        let b = &b;
        async move {
            b.enqueue(&Task::new("job", "q").with_id(format!("t{i}"))).await?;
            let claimed = b.try_dequeue_many(&["q"], 1).await?;
            let [task] = claimed.as_slice() else { panic!("one task claimed: {claimed:?}") };
            b.ack(&task.id, &task.lease_token, None).await?;
            assert_eq!(b.get(&task.id).await?.status, taskgate::Status::Completed);
            Ok::<(), BoxError>(())
        }
    };
    for i in 0..20 {
        round(i).await?;
    }
    let warm = proxy.accepted();
    for i in 20..70 {
        round(i).await?;
    }
    // The 200 statements after the first 80 opened no connection: each one's connection went
    // back to its lane, not closed and opened again.
    assert_eq!(proxy.accepted(), warm, "connections opened after the first 80 statements");
    assert!(warm <= 9, "{warm} connections: at most 4 lanes, 4 pooled and the listener");
    common::finish(s, &[&b]).await?;
    Ok(())
}
