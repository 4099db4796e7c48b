//! Query plans must not decay as finished rows pile up (extensions §E6): with thousands of
//! finished tasks and statistics gathered, every hot statement still seeks an index whose
//! leading columns exclude finished rows (or the primary key) — never a table scan.

mod common;

use std::time::Instant;

use brokertest::{within, TEST_LIMIT};
use common::{manual_options, TempDb, TestResult};
use sqlx::{Connection, Row};
use taskgate::{AckItem, Broker, Task};
use taskgate_sql::Value;

const FINISHED: usize = 20_000;

async fn pile_up_finished(broker: &dyn Broker) -> TestResult {
    for chunk in 0..FINISHED / 500 {
        let tasks: Vec<Task> = (0..500)
            .map(|i| Task::new("job", "done-q").with_id(format!("f{chunk:03}-{i:03}")))
            .collect();
        broker.enqueue_many(&tasks).await?;
        let claimed = broker.dequeue_many(&["done-q"], 500).await?;
        let items: Vec<AckItem> = claimed
            .iter()
            .map(|t| AckItem { id: t.id.clone(), token: t.lease_token.clone(), result: None })
            .collect();
        broker.ack_many(&items).await?;
    }
    Ok(())
}

fn bind<'q>(
    sql: &'q str,
    args: &'q [Value],
) -> sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>> {
    let mut q = sqlx::query(sql);
    for a in args {
        q = match a {
            Value::Null(_) | Value::TextArray(_) | Value::BytesArray(_) => q.bind(None::<i64>),
            Value::Int(i) => q.bind(*i),
            Value::Text(s) => q.bind(s.as_str()),
            Value::Bytes(b) => q.bind(b.as_slice()),
        };
    }
    q
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_statements_seek_indexes_after_finished_rows_pile_up() -> TestResult {
    within(TEST_LIMIT, "hot_statements_seek_indexes_after_finished_rows_pile_up", async move {
        let db = TempDb::new()?;
        let (clock, options) = manual_options();
        let broker = db.broker(options).await?;
        pile_up_finished(&*broker).await?;
        broker.enqueue(&Task::new("job", "hot").with_id("live")).await?;
        broker.optimize().await?;
        let now = taskgate::Clock::now_ms(&clock);
        let mut conn = sqlx::SqliteConnection::connect_with(
            &sqlx::sqlite::SqliteConnectOptions::new().filename(db.path()),
        )
        .await?;
        for stmt in broker.engine().hot_statements("hot", "live", now) {
            let explain = format!("EXPLAIN QUERY PLAN {}", stmt.sql);
            let rows = bind(&explain, &stmt.args).fetch_all(&mut conn).await?;
            let plan: Vec<String> =
                rows.iter().map(|r| r.try_get::<String, _>(3)).collect::<Result<_, _>>()?;
            let text = plan.join(" | ");
            for line in &plan {
                // A scan is fine only over a partial index that holds no finished rows.
                let partial = ["idx_ready", "idx_running", "idx_blocked"];
                let scans_tasks = (line.starts_with("SCAN taskgate_tasks")
                    && !partial.iter().any(|p| line.contains(&format!("INDEX taskgate_{p}"))))
                    || line.starts_with("SCAN taskgate_task_deps");
                assert!(!scans_tasks, "{}: full scan in plan: {text}", stmt.name);
            }
            eprintln!("{}: {text}", stmt.name);
            let expected: &[&str] = match stmt.name {
                // Partial indexes: only claimable, running or blocked rows are in them.
                "next_due" => &["taskgate_idx_ready (queue=?"],
                // The claim's order (priority, run_at, id) is migration 0004's index.
                "claim" => &["taskgate_idx_ready_prio (queue=?"],
                "ack" | "ack_lock" | "ack_write" => &["sqlite_autoindex_taskgate_tasks_1 (id=?)"],
                "reap" => &["taskgate_idx_running"],
                "repair" => &["taskgate_idx_blocked"],
                "children" => &["taskgate_idx_deps_parent (parent_id=? AND done=?)"],
                other => panic!("unexpected hot statement {other}"),
            };
            let ok = expected.iter().any(|e| text.contains(e));
            assert!(ok, "{}: expected one of {expected:?}: {text}", stmt.name);
            if stmt.name == "claim" {
                assert!(
                    !text.contains("TEMP B-TREE"),
                    "claim sorts instead of reading in order: {text}"
                );
            }
        }
        conn.close().await?;

        // And the claim+ack cycle is not slowed down by the finished rows.
        let started = Instant::now();
        for i in 0..50 {
            broker.enqueue(&Task::new("job", "hot").with_id(format!("h{i:02}"))).await?;
        }
        for _ in 0..51 {
            let t = broker.dequeue(&["hot"]).await?;
            broker.ack(&t.id, &t.lease_token, None).await?;
        }
        assert_eq!(broker.queue_len("hot").await?, 0);
        assert!(started.elapsed().as_secs() < 20, "cycle took {:?}", started.elapsed());
        Ok(())
    })
    .await
}
