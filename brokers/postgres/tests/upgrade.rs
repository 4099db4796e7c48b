//! Schema upgrade to version 4 (priorities): a database at version 3 holding rows opens with
//! this code, `init` applies 0004 only, every existing task gets priority 0 and keeps its claim
//! order, the new claim index exists, and new tasks with priorities are claimed around the old
//! ones in `(priority, run_at, id)` order.

mod common;

use brokertest::{within, TEST_LIMIT};
use sqlx::Executor;
use taskgate::{Broker, ManualClock, Task};
use taskgate_postgres::{PgDialect, MIGRATIONS};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_3_database_upgrades_to_priorities() -> Result<(), taskgate::BoxError> {
    within(TEST_LIMIT, "a_version_3_database_upgrades_to_priorities", async move {
        let Some(s) = common::storage("a_version_3_database_upgrades").await else {
            return Ok(());
        };
        let p = s.prefix().to_owned();
        let old = s.options()?.connect().await?;
        let adapter = old.engine().adapter().clone();
        let applied =
            taskgate_sql::migrate(&*adapter, &PgDialect::default(), &p, &MIGRATIONS[..3]).await?;
        assert_eq!(applied, [1, 2, 3], "a version-3 schema");
        old.close().await?;
        let mut admin = s.admin().await?;
        for (id, run_at) in [("old-b", 2), ("old-a", 1)] {
            admin
                .execute(&*format!(
                    "INSERT INTO {p}tasks (id, type, queue, status, run_at, created_at) \
                     VALUES ('{id}', 't', 'q', 'pending', {run_at}, 1)"
                ))
                .await?;
        }

        let clock = ManualClock::at_contract_epoch();
        let broker = common::handle(&s, &clock, |o| o).await?;
        let versions: Vec<(i64,)> =
            sqlx::query_as(&format!("SELECT version FROM {p}schema_migrations ORDER BY version"))
                .fetch_all(&mut admin)
                .await?;
        assert_eq!(
            versions,
            [(1,), (2,), (3,), (4,), (5,), (6,), (7,)],
            "init applied 0004 to 0007"
        );
        let index: Vec<(String,)> = sqlx::query_as(
            "SELECT indexdef FROM pg_indexes WHERE tablename = $1 AND indexname = $2",
        )
        .bind(format!("{p}tasks"))
        .bind(format!("{p}idx_ready_prio"))
        .fetch_all(&mut admin)
        .await?;
        let def = index.first().map(|(d,)| d.as_str()).unwrap_or_default();
        assert!(def.contains("(queue, priority, run_at, id)"), "the claim index: {def:?}");
        assert!(def.contains("WHERE"), "the claim index is partial: {def:?}");
        for id in ["old-a", "old-b"] {
            assert_eq!(broker.get(id).await?.priority, 0, "{id} got the default priority");
        }

        broker.enqueue(&Task::new("t", "q").with_id("urgent").with_priority(-1)).await?;
        broker.enqueue(&Task::new("t", "q").with_id("later").with_priority(1)).await?;
        let claimed = broker.dequeue_many(&["q"], 4).await?;
        let order: Vec<&str> = claimed.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(order, ["urgent", "old-a", "old-b", "later"], "claims after the upgrade");
        let again = broker.engine().migrate().await?;
        assert!(again.is_empty(), "a second run applied {again:?}");
        common::finish(s, &[&broker]).await
    })
    .await
}
