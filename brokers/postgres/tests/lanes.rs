//! `taskgate_sql::Lanes` on the test server: a connection is kept only after a statement that
//! ran to its end; one cut short (its call dropped) goes back to the pool, whose ping on
//! release drains it, never handed to the next statement with an answer unread; lanes hold
//! no more connections than their size, all from the pool, and give them back to a
//! transaction of the handle that waits for one; `close` refuses later takers. And
//! the broker's single statements run on lanes: a handle's one-statement enqueues, claims,
//! acks and reads open no connection once warm, and it opens no more than its pool's size.

mod common;

use std::time::Duration;

use brokertest::Storage as _;
use sqltest::cutproxy;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{PgConnection, Postgres};
use taskgate::{BoxError, Broker, ManualClock, Task};
use taskgate_sql::Lanes;

const APP: &str = "taskgate-lanes-test";

/// A pool of at most `max` connections on `url`, named [`APP`].
fn pool(url: &str, max: u32, timeout: Duration) -> Result<PgPool, BoxError> {
    let options: PgConnectOptions = url.parse()?;
    Ok(PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(timeout)
        .connect_lazy_with(options.application_name(APP)))
}

async fn backend_pid(conn: &mut PgConnection) -> sqlx::Result<i32> {
    sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(conn).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lane_is_reused_only_after_a_statement_that_ran_to_its_end() -> Result<(), BoxError> {
    let Some(s) = common::storage("lanes reuse").await else { return Ok(()) };
    let pool = pool(s.url(), 3, Duration::from_secs(5))?;
    let lanes: Lanes<Postgres> = Lanes::new(pool.clone(), 2);

    // A finished statement keeps its connection; the next take gets the same session.
    let mut lane = lanes.take().await?;
    let first = backend_pid(lane.conn()).await?;
    lane.keep();
    assert_eq!((lanes.idle(), pool.num_idle()), (1, 0), "kept by the lanes, not the pool");
    let mut lane = lanes.take().await?;
    assert_eq!(backend_pid(lane.conn()).await?, first, "the idle lane is reused");
    assert_eq!(pool.size(), 1, "no second connection was opened");

    // An error the server answered leaves the connection in step: it is kept.
    let failed = sqlx::query("SELECT 1/0").execute(&mut *lane.conn()).await;
    assert!(matches!(failed, Err(sqlx::Error::Database(_))), "{failed:?}");
    lane.keep();
    let mut lane = lanes.take().await?;
    assert_eq!(backend_pid(lane.conn()).await?, first);

    // A statement cut short (its call dropped mid-flight) does not keep its connection: it
    // goes back to the pool, whose ping on release reads the late answer to its end, and no
    // later statement reads it. (Closing it instead cost a reconnect per dropped call.)
    let cut = tokio::time::timeout(
        Duration::from_millis(100),
        sqlx::query("SELECT pg_sleep(1)").execute(&mut *lane.conn()),
    )
    .await;
    assert!(cut.is_err(), "the sleep was cut short");
    drop(lane);
    assert_eq!(lanes.idle(), 0, "the cut connection was not kept by the lanes");
    let mut lane = lanes.take().await?;
    let one: i32 = sqlx::query_scalar("SELECT 41 + 1").fetch_one(&mut *lane.conn()).await?;
    assert_eq!(one, 42, "the next statement reads its own answer");
    lane.keep();
    let drained =
        common::eventually(Duration::from_secs(5), || async { pool.num_idle() == 1 }).await;
    assert!(drained, "the cut connection is back in the pool once its answer was read");
    let mut conn = pool.acquire().await?;
    let pid = backend_pid(&mut conn).await?;
    assert_eq!(pid, first, "the cut session itself is back in the pool, its answer read");
    drop(conn);
    lanes.close();
    pool.close().await;
    s.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lanes_share_the_pools_bound_and_give_way_to_transactions() -> Result<(), BoxError> {
    let Some(s) = common::storage("lanes bound").await else { return Ok(()) };
    let pool = pool(s.url(), 2, Duration::from_millis(300))?;
    let lanes: Lanes<Postgres> = Lanes::new(pool.clone(), 1);

    // At most one lane: a second taker waits, and times out while the first is in use.
    let mut busy = lanes.take().await?;
    let pid = backend_pid(busy.conn()).await?;
    let waited = lanes.take().await.err();
    assert!(matches!(waited, Some(sqlx::Error::PoolTimedOut)), "{waited:?}");
    busy.keep();
    let mut lane = lanes.take().await?;
    assert_eq!(backend_pid(lane.conn()).await?, pid, "the freed lane was taken");
    lane.keep();

    // The pool is exhausted (the idle lane holds one connection, a caller the other): a
    // transaction of the handle that waits gets the idle lane's connection back.
    let held = pool.acquire().await?;
    assert_eq!((pool.size(), pool.num_idle(), lanes.idle()), (2, 0, 1));
    let wanting = lanes.wanting();
    let mut tx = pool.begin().await?;
    assert_eq!(backend_pid(&mut tx).await?, pid, "the lane's connection went back to the pool");
    assert_eq!(lanes.idle(), 0);
    // While a transaction waits, a finished statement gives its connection back as well.
    tx.commit().await?;
    let tx = pool.begin().await?;
    let lane = lanes.take().await.err();
    assert!(matches!(lane, Some(sqlx::Error::PoolTimedOut)), "the pool is in use: {lane:?}");
    tx.rollback().await?;
    let lane = lanes.take().await?;
    lane.keep();
    assert_eq!(lanes.idle(), 0, "kept while a transaction waits: given back");
    drop(wanting);
    drop(held);

    lanes.close();
    assert_eq!(lanes.idle(), 0);
    let refused = lanes.take().await.err();
    assert!(matches!(refused, Some(sqlx::Error::PoolClosed)), "{refused:?}");
    pool.close().await;
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
    // The pool's 4, the listener, the migration session and the connect gate's probe.
    assert!(warm <= 7, "{warm} connections for a pool of 4");
    common::finish(s, &[&b]).await?;
    Ok(())
}
