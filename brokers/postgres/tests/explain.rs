//! Query plans of the hot statements (extensions §E6): claim, ack, reap and the next-due probe
//! must use an index whose leading columns exclude finished rows — also with many finished rows
//! present, and both as custom plans (first executions) and as the generic plans PostgreSQL
//! switches prepared statements to. The statements are the ones the engine really ran,
//! recorded by the adapter, planned with the arguments they really had. And a batch-1 worker's
//! two statements, the one-task claim and the one-item ack, must let the server keep their
//! generic plans instead of planning every run afresh.

mod common;

use std::time::Duration;

use brokertest::{within, TEST_LIMIT};
use sqlx::{Executor, PgConnection};
use taskgate::{Broker, ManualClock, Task};
use taskgate_sql::Value;

const FINISHED: i64 = 30_000;

/// The hot statement classes, how to recognise them, and the indexes they may use.
const CLASSES: &[(&str, &str, &[&str])] = &[
    // The claim's order (priority, run_at, id) is migration 0004's index, read in order (no
    // Sort node: checked below).
    ("claim", "ORDER BY priority, run_at, id LIMIT", &["idx_ready_prio"]),
    ("next-due probe", "SELECT MIN(m)", &["idx_claim"]),
    // One `UPDATE … RETURNING` joining the batch's (id, token) arrays by primary key: never
    // through `idx_status`, whose entries of running tasks include every dead row version.
    ("ack", "SET status = 'completed'", &["tasks_pkey"]),
    ("reap", "status = 'running' AND lease_until <", &["idx_status"]),
    ("repair", "status = 'blocked'", &["idx_status"]),
];

fn pg_type(v: &Value) -> &'static str {
    match v {
        Value::Int(_) | Value::Null(taskgate_sql::Kind::Int) => "bigint",
        Value::Text(_) | Value::Null(taskgate_sql::Kind::Text) => "text",
        Value::Bytes(_) | Value::Null(taskgate_sql::Kind::Bytes) => "bytea",
        Value::TextArray(_) => "text[]",
        Value::BytesArray(_) => "bytea[]",
    }
}

fn literal(v: &Value) -> String {
    match v {
        Value::Null(_) => "NULL".to_owned(),
        Value::Int(i) => i.to_string(),
        Value::Text(s) => format!("'{}'", s.replace('\'', "''")),
        Value::Bytes(b) => {
            let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
            format!("'\\x{hex}'::bytea")
        }
        Value::TextArray(v) => {
            let items: Vec<String> = v.iter().map(|s| literal(&Value::Text(s.clone()))).collect();
            format!("ARRAY[{}]::text[]", items.join(", "))
        }
        Value::BytesArray(v) => {
            let items: Vec<String> =
                v.iter().map(|b| literal(&Value::opt_bytes(b.as_deref()))).collect();
            format!("ARRAY[{}]::bytea[]", items.join(", "))
        }
    }
}

/// The plan of `sql` with `args`, as a custom or a generic plan.
async fn plan(
    conn: &mut PgConnection,
    sql: &str,
    args: &[Value],
    generic: bool,
) -> Result<String, taskgate::BoxError> {
    let types: Vec<&str> = args.iter().map(pg_type).collect();
    let values: Vec<String> = args.iter().map(literal).collect();
    let types = if types.is_empty() { String::new() } else { format!("({})", types.join(", ")) };
    let values = if values.is_empty() { String::new() } else { format!("({})", values.join(", ")) };
    conn.execute(&*format!("PREPARE tg_plan{types} AS {sql}")).await?;
    let mode = if generic { "force_generic_plan" } else { "force_custom_plan" };
    conn.execute(&*format!("SET plan_cache_mode = {mode}")).await?;
    let rows: Vec<(String,)> =
        sqlx::query_as(&format!("EXPLAIN EXECUTE tg_plan{values}")).fetch_all(&mut *conn).await?;
    conn.execute("DEALLOCATE tg_plan").await?;
    Ok(rows.into_iter().map(|(l,)| l).collect::<Vec<_>>().join("\n"))
}

async fn seed_finished(conn: &mut PgConnection, p: &str) -> Result<(), taskgate::BoxError> {
    conn.execute(&*format!(
        "INSERT INTO {p}tasks (id, type, queue, status, run_at, created_at, finished_at, \
         business_key) SELECT 'old' || g, 'job', CASE WHEN g % 2 = 0 THEN 'q' ELSE 'qc' END, \
         CASE WHEN g % 3 = 0 THEN 'failed' ELSE 'completed' END, g, g, g + 1, \
         CASE WHEN g % 5 = 0 THEN 'key' || g ELSE '' END FROM generate_series(1, {FINISHED}) g"
    ))
    .await?;
    conn.execute(&*format!(
        "INSERT INTO {p}task_deps (child_id, parent_id, done) SELECT 'old' || (g + 1), \
         'old' || g, 1 FROM generate_series(1, {FINISHED} - 1) g"
    ))
    .await?;
    conn.execute(&*format!("ANALYZE {p}tasks")).await?;
    conn.execute(&*format!("ANALYZE {p}task_deps")).await?;
    Ok(())
}

/// Runs every hot path once through the broker.
async fn workload(b: &taskgate_postgres::PgBroker, clock: &ManualClock) -> taskgate::Result<()> {
    b.enqueue(&Task::new("job", "q").with_id("p")).await?;
    b.enqueue(&Task::new("job", "qc").with_id("c").with_depends_on(["p"])).await?;
    b.enqueue(&Task::new("job", "qc").with_id("keyed").with_business_key("k")).await?;
    let p = b.dequeue(&["q"]).await?;
    b.ack(&p.id, &p.lease_token, Some(b"{}".to_vec())).await?;
    let both = b.dequeue_many(&["q", "qc"], 5).await?;
    assert_eq!(both.len(), 2);
    assert!(b.try_dequeue(&["empty"]).await?.is_none());
    clock.advance(Duration::from_secs(61));
    assert_eq!(b.reap_expired().await?, 2);
    Ok(())
}

/// A handle on `s` that records its statements, `s` seeded with finished rows, and the
/// statements [`workload`] ran through that handle; plus an admin connection to plan them.
async fn recorded_workload(
    s: &taskgate_postgres::testing::PgStorage,
) -> Result<
    (taskgate_postgres::PgBroker, PgConnection, Vec<(String, Vec<Value>)>),
    taskgate::BoxError,
> {
    let clock = ManualClock::at_contract_epoch();
    let log = taskgate_sql::StatementLog::new();
    let b = common::handle(s, &clock, |o| o.record_statements(log.clone())).await?;
    let mut conn = s.admin().await?;
    seed_finished(&mut conn, s.prefix()).await?;
    log.take();
    workload(&b, &clock).await?;
    Ok((b, conn, log.take()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_statements_use_indexes_that_skip_finished_rows() -> Result<(), taskgate::BoxError> {
    within(TEST_LIMIT, "hot_statements_use_indexes_that_skip_finished_rows", async move {
        let Some(s) = common::storage("explain hot statements").await else { return Ok(()) };
        let (b, mut conn, statements) = recorded_workload(&s).await?;
        let tasks = format!("{}tasks", s.prefix());
        for (name, marker, allowed) in CLASSES {
            let seen: Vec<&(String, Vec<Value>)> =
                statements.iter().filter(|(sql, _)| sql.contains(marker)).collect();
            assert!(!seen.is_empty(), "the workload ran no {name} statement");
            for (sql, args) in seen {
                for generic in [false, true] {
                    let text = plan(&mut conn, sql, args, generic).await?;
                    let kind = if generic { "generic" } else { "custom" };
                    if std::env::var_os("SHOW_PLANS").is_some() {
                        println!("== {name} ({kind})\n{text}");
                    }
                    assert!(
                        !text.contains(&format!("Seq Scan on {tasks}")),
                        "{name} ({kind}) scans every row:\n{sql}\n{text}"
                    );
                    assert!(
                        allowed.iter().any(|i| text.contains(&format!("{}{i}", s.prefix()))),
                        "{name} ({kind}) uses none of {allowed:?}:\n{sql}\n{text}"
                    );
                    if *name == "ack" {
                        assert!(
                            !text.contains(&format!("{}idx_status", s.prefix())),
                            "{name} ({kind}) reads idx_status:\n{text}"
                        );
                    }
                    // One queue: the index range is already in claim order. Several
                    // (`queue IN (…)`) merge their ranges with a sort, as before priorities.
                    if *name == "claim" && !sql.contains("queue IN (") {
                        assert!(
                            !text.contains("Sort"),
                            "{name} ({kind}) sorts instead of reading the index in order:\n{text}"
                        );
                    }
                }
            }
        }
        common::finish(s, &[&b]).await
    })
    .await
}

/// How many times PostgreSQL planned `sql` afresh (custom) and how many it ran its cached
/// generic plan, over `runs` executions of one prepared statement with `args` under the
/// server's default `plan_cache_mode` (inside a transaction rolled back after).
async fn plan_choices(
    conn: &mut PgConnection,
    sql: &str,
    args: &[Value],
    runs: usize,
) -> Result<(i64, i64), taskgate::BoxError> {
    let types: Vec<&str> = args.iter().map(pg_type).collect();
    let values: Vec<String> = args.iter().map(literal).collect();
    conn.execute("BEGIN").await?;
    conn.execute(&*format!("PREPARE tg_keep({}) AS {sql}", types.join(", "))).await?;
    for _ in 0..runs {
        conn.execute(&*format!("EXECUTE tg_keep({})", values.join(", "))).await?;
    }
    let (custom, generic): (i64, i64) = sqlx::query_as(
        "SELECT custom_plans, generic_plans FROM pg_prepared_statements WHERE name = 'tg_keep'",
    )
    .fetch_one(&mut *conn)
    .await?;
    conn.execute("ROLLBACK").await?;
    conn.execute("DEALLOCATE tg_keep").await?;
    Ok((custom, generic))
}

/// A one-task claim and a one-item ack are the whole of a batch-1 worker's statements, and
/// re-planning them on every run cost a quarter of the server's CPU per claim+ack: PostgreSQL
/// keeps a prepared statement's generic plan only where it looks no dearer than the custom
/// ones, which a bound `LIMIT` or an array argument never does. So the one-task claim says
/// `LIMIT 1` and the one-item ack takes plain arguments, and the server settles on their
/// generic plans after its five custom ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_task_claims_and_acks_keep_their_generic_plans() -> Result<(), taskgate::BoxError> {
    within(TEST_LIMIT, "one_task_claims_and_acks_keep_their_generic_plans", async move {
        let Some(s) = common::storage("generic plans").await else { return Ok(()) };
        let (b, mut conn, statements) = recorded_workload(&s).await?;
        let kinds = [
            ("one-task claim", "ORDER BY priority, run_at, id LIMIT 1 "),
            ("one-item ack", "/* taskgate: one-statement ack */"),
        ];
        for (name, marker) in kinds {
            let (sql, args) = statements
                .iter()
                .find(|(sql, _)| sql.contains(marker))
                .ok_or_else(|| format!("the workload ran no {name}"))?;
            assert!(!sql.contains("unnest"), "the {name} binds arrays:\n{sql}");
            let (custom, generic) = plan_choices(&mut conn, sql, args, 10).await?;
            assert!(
                generic >= 4 && custom <= 6,
                "the {name} was planned {custom} times and ran its generic plan {generic} \
                 times in 10 runs:\n{sql}"
            );
        }
        common::finish(s, &[&b]).await
    })
    .await
}
