//! Concurrent cold start (extensions §E6, E10): eight handles `init` at once on a fresh prefix;
//! the advisory lock serialises their migrations, every init succeeds, each migration is
//! applied and recorded once, and a second round of inits is a no-op.

mod common;

use brokertest::{within, TEST_LIMIT, WAIT_LIMIT};
use taskgate::{Broker, ManualClock, Task};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_handles_migrate_a_fresh_prefix_at_once() -> Result<(), taskgate::BoxError> {
    within(TEST_LIMIT, "eight_handles_migrate_a_fresh_prefix_at_once", async move {
        let Some(s) = common::storage("concurrent cold start").await else { return Ok(()) };
        let clock = ManualClock::at_contract_epoch();
        let mut handles = Vec::new();
        for _ in 0..8 {
            handles.push(s.options()?.pool_size(2).connect().await?);
        }
        let inits = handles.iter().map(|h| h.init(common::options(&clock)));
        let inits =
            within(WAIT_LIMIT, "8 concurrent inits", futures::future::join_all(inits)).await;
        for (i, r) in inits.into_iter().enumerate() {
            if let Err(e) = r {
                panic!("init {i} failed: {e}");
            }
        }
        let versions: Vec<(i64, String)> = sqlx::query_as(&format!(
            "SELECT version, name::text FROM {}schema_migrations ORDER BY version",
            s.prefix()
        ))
        .fetch_all(&mut s.admin().await?)
        .await?;
        let expected = [
            (1, "initial"),
            (2, "steps_pause_owner"),
            (3, "names_by_bytes"),
            (4, "priority"),
            (5, "audit"),
            (6, "ack_token"),
            (7, "heartbeat"),
        ];
        let expected: Vec<(i64, String)> =
            expected.iter().map(|(v, n)| (*v, (*n).to_owned())).collect();
        assert_eq!(versions, expected);
        let again = handles[0].engine().migrate().await?;
        assert!(again.is_empty(), "a second run applied {again:?}");
        for (i, h) in handles.iter().enumerate() {
            h.enqueue(&Task::new("job", "q").with_id(format!("t{i}"))).await?;
        }
        assert_eq!(handles[7].queue_len("q").await?, 8);
        let refs: Vec<&taskgate_postgres::PgBroker> = handles.iter().collect();
        common::finish(s, &refs).await
    })
    .await
}
