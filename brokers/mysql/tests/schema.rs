//! The applied schema, read back from `information_schema` (an `insta` snapshot), and the
//! query plans of the hot statements (extensions §E6): after thousands of finished rows pile
//! up and statistics are gathered, claim, next-due, ack, reap and propagation still seek an
//! index whose leading columns exclude finished rows — the ready index, the status index, the
//! edge index or the primary key — never a scan of finished rows, and a claim never sorts.

mod common;

use std::collections::BTreeMap;

use brokertest::{within, TEST_LIMIT};
use sqlx::mysql::MySqlRow;
use sqlx::{Column, Executor, MySqlConnection, Row, TypeInfo, ValueRef};
use taskgate::{AckItem, BoxError, Broker, BrokerOptions, ErrorKind, Task};
use taskgate_mysql::{MySqlBroker, MySqlDialect, MARIADB_NOPAD_BIN, MIGRATIONS, MYSQL_NOPAD_BIN};
use taskgate_sql::Value;

/// Reads a column as text whatever its wire type (EXPLAIN and information_schema differ
/// between MySQL and MariaDB, and between the text and binary protocols).
fn text(row: &MySqlRow, name: &str) -> String {
    let Ok(raw) = row.try_get_raw(name) else { return String::new() };
    if raw.is_null() {
        return String::new();
    }
    let type_name = raw.type_info().name().to_owned();
    if type_name.ends_with("UNSIGNED") {
        return row.try_get_unchecked::<u64, _>(name).map(|n| n.to_string()).unwrap_or_default();
    }
    if type_name.ends_with("INT") {
        return row.try_get_unchecked::<i64, _>(name).map(|n| n.to_string()).unwrap_or_default();
    }
    if type_name == "DOUBLE" || type_name == "FLOAT" {
        return row.try_get_unchecked::<f64, _>(name).map(|n| n.to_string()).unwrap_or_default();
    }
    row.try_get_unchecked::<Vec<u8>, _>(name)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// Removes what differs between MySQL 8 and MariaDB in `information_schema` text: integer
/// display widths, quoting of defaults, charset introducers, `DEFAULT_GENERATED`.
fn normalise(s: &str) -> String {
    let mut out = s.replace("bigint(20)", "bigint").replace("DEFAULT_GENERATED", "");
    for noise in ["_utf8mb4", "\\'", "'"] {
        out = out.replace(noise, "");
    }
    if out == "NULL" {
        out.clear();
    }
    out.trim().to_owned()
}

/// The columns and indexes of `prefix`'s tables, one per line, with `{prefix}` for the prefix
/// and `{nopad_bin}` for the server's NO PAD binary collation (migration 0003: MariaDB
/// `utf8mb4_nopad_bin`, MySQL `utf8mb4_0900_bin`).
async fn schema_text(conn: &mut MySqlConnection, prefix: &str) -> Result<String, BoxError> {
    let text =
        format!("{}{}", columns_text(conn, prefix).await?, indexes_text(conn, prefix).await?);
    Ok(text.replace(MARIADB_NOPAD_BIN, "{nopad_bin}").replace(MYSQL_NOPAD_BIN, "{nopad_bin}"))
}

async fn columns_text(conn: &mut MySqlConnection, prefix: &str) -> Result<String, BoxError> {
    let columns = sqlx::query(
        "SELECT table_name AS t, column_name AS c, column_type AS ty, is_nullable AS n, \
         column_default AS d, collation_name AS co, extra AS x FROM information_schema.columns \
         WHERE table_schema = DATABASE() AND table_name LIKE CONCAT(?, '%') \
         ORDER BY table_name, ordinal_position",
    )
    .bind(prefix.replace('_', "\\_"))
    .fetch_all(&mut *conn)
    .await?;
    let mut out = String::new();
    for r in &columns {
        let line = format!(
            "{}.{} {} null={} default={} collation={} {}",
            text(r, "t"),
            text(r, "c"),
            normalise(&text(r, "ty")),
            text(r, "n"),
            normalise(&text(r, "d")),
            text(r, "co"),
            normalise(&text(r, "x")),
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    Ok(out.replace(prefix, "{prefix}"))
}

async fn indexes_text(conn: &mut MySqlConnection, prefix: &str) -> Result<String, BoxError> {
    let mut out = String::new();
    let indexes = sqlx::query(
        "SELECT table_name AS t, index_name AS i, non_unique AS u, seq_in_index AS s, \
         column_name AS c FROM information_schema.statistics WHERE table_schema = DATABASE() \
         AND table_name LIKE CONCAT(?, '%') ORDER BY table_name, index_name, seq_in_index",
    )
    .bind(prefix.replace('_', "\\_"))
    .fetch_all(&mut *conn)
    .await?;
    let mut by_index: BTreeMap<(String, String), (String, Vec<String>)> = BTreeMap::new();
    for r in &indexes {
        let entry = by_index.entry((text(r, "t"), text(r, "i"))).or_default();
        entry.0 = if text(r, "u") == "0" { "UNIQUE".into() } else { "INDEX".into() };
        entry.1.push(text(r, "c"));
    }
    for ((table, index), (kind, cols)) in by_index {
        out.push_str(&format!("{table} {kind} {index} ({})\n", cols.join(", ")));
    }
    Ok(out.replace(prefix, "{prefix}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applied_schema_matches_the_snapshot() -> Result<(), BoxError> {
    within(TEST_LIMIT, "applied_schema_matches_the_snapshot", async move {
        let Some(storage) = common::storage("applied_schema_matches_the_snapshot").await else {
            return Ok(());
        };
        let broker = common::handle(&storage, taskgate::BrokerOptions::default()).await?;
        let mut conn = common::connect(&storage).await?;
        let schema = schema_text(&mut conn, storage.prefix()).await?;
        insta::assert_snapshot!("schema", schema);
        broker.close().await?;
        storage.drop_tables().await
    })
    .await
}

/// Every column that holds a name, by table: migration 0003 gives each the server's NO PAD
/// binary collation.
const NAME_COLUMNS: &[(&str, &str)] = &[
    ("tasks", "id"),
    ("tasks", "type"),
    ("tasks", "queue"),
    ("tasks", "lease_token"),
    ("tasks", "business_key"),
    ("tasks", "replay_of"),
    ("tasks", "owner"),
    ("tasks", "chain_head_key"),
    ("tasks", "replay_of_uq"),
    ("tasks", "ready_queue"),
    ("task_deps", "child_id"),
    ("task_deps", "parent_id"),
    ("quota", "qkey"),
    ("paused_queues", "queue"),
];

/// The collation of every text column of `prefix`'s tables, by (table without prefix, column).
async fn collations(
    conn: &mut MySqlConnection,
    prefix: &str,
) -> Result<BTreeMap<(String, String), String>, BoxError> {
    let rows = sqlx::query(
        "SELECT table_name AS t, column_name AS c, collation_name AS co FROM \
         information_schema.columns WHERE table_schema = DATABASE() AND \
         table_name LIKE CONCAT(?, '%') AND collation_name IS NOT NULL",
    )
    .bind(prefix.replace('_', "\\_"))
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .iter()
        .map(|r| ((text(r, "t").replacen(prefix, "", 1), text(r, "c")), text(r, "co")))
        .collect())
}

/// A database migrated to version 2 (names `utf8mb4_bin`, PAD SPACE) and holding rows as a
/// version-2 broker wrote them, opened by this code: `init` applies migration 0003 (and 0005, the
/// audit table, left out of the comparisons),
/// which gives every name column and every table default the server's NO PAD binary
/// collation (chosen by its version) and leaves every other column, key and index as it was.
/// The STORED generated columns are recomputed (a one-space business key, NULL in the chain
/// head under PAD SPACE, now heads its chain), rows keep their bytes, sessions use the same
/// collation, and look-alike names are told apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_2_database_upgrades_to_names_by_bytes() -> Result<(), BoxError> {
    let Some(storage) = common::storage("a_version_2_database_upgrades").await else {
        return Ok(());
    };
    let p = storage.prefix().to_owned();
    let old = storage.mysql_handle()?;
    let adapter = old.engine().adapter().clone();
    let applied = taskgate_sql::migrate(&*adapter, &MySqlDialect, &p, &MIGRATIONS[..2]).await?;
    assert_eq!(applied, [1, 2], "a version-2 schema");
    old.close().await?;
    let mut admin = common::connect(&storage).await?;
    let nopad =
        if common::is_mariadb(&mut admin).await? { MARIADB_NOPAD_BIN } else { MYSQL_NOPAD_BIN };
    for (id, key) in [("a", "k"), ("sp", " ")] {
        sqlx::query(&format!(
            "INSERT INTO {p}tasks (id, type, queue, status, run_at, created_at, business_key, \
             owner) VALUES (?, 't', 'q', 'pending', 1, 1, ?, 'o')"
        ))
        .bind(id)
        .bind(key)
        .execute(&mut admin)
        .await?;
    }
    admin.execute(format!("INSERT INTO {p}paused_queues VALUES ('p', 1)").as_str()).await?;
    admin.execute(format!("INSERT INTO {p}quota VALUES ('key', 0, 1, 60)").as_str()).await?;
    let chain_head = format!("SELECT chain_head_key FROM {p}tasks WHERE id = 'sp'");
    let head: Option<Vec<u8>> = sqlx::query_scalar(&chain_head).fetch_one(&mut admin).await?;
    assert_eq!(head, None, "under PAD SPACE a one-space key equals '' and heads no chain");
    let old_collations = collations(&mut admin, &p).await?;
    assert!(old_collations.values().all(|c| c == "utf8mb4_bin"), "{old_collations:?}");
    let old_indexes = indexes_text(&mut admin, &p).await?;

    let broker = common::handle(&storage, BrokerOptions::default()).await?;
    let versions: Vec<i64> =
        sqlx::query_scalar(&format!("SELECT version FROM {p}schema_migrations ORDER BY version"))
            .fetch_all(&mut admin)
            .await?;
    assert_eq!(versions, [1, 2, 3, 4, 5, 6, 7], "init applied 0003 to 0007 only");
    let mut new_collations = collations(&mut admin, &p).await?;
    // Migration 0005 adds the audit table and 0006 `tasks.ack_token`; this test is about what
    // 0003 did to the columns that were there.
    new_collations.retain(|(table, column), _| table != "audit" && column != "ack_token");
    for (column, collation) in &new_collations {
        let is_name =
            NAME_COLUMNS.iter().any(|(t, c)| (*t, *c) == (column.0.as_str(), column.1.as_str()));
        let expected = if is_name { nopad } else { old_collations[column].as_str() };
        assert_eq!(collation, expected, "{column:?} after the upgrade");
    }
    assert_eq!(new_collations.len(), old_collations.len(), "no column came or went");
    let defaults: Vec<(String, String)> = sqlx::query_as(
        "SELECT table_name, table_collation FROM information_schema.tables WHERE \
         table_schema = DATABASE() AND table_name IN (?, ?, ?, ?)",
    )
    .bind(format!("{p}tasks"))
    .bind(format!("{p}task_deps"))
    .bind(format!("{p}quota"))
    .bind(format!("{p}paused_queues"))
    .fetch_all(&mut admin)
    .await?;
    assert_eq!(defaults.len(), 4, "{defaults:?}");
    assert!(defaults.iter().all(|(_, c)| c == nopad), "table defaults: {defaults:?}");
    // 0004 adds the claim index; every other key and index is unchanged.
    let with_prio = format!(
        "{old_indexes}{{prefix}}tasks INDEX {{prefix}}idx_ready_prio (ready_queue, priority, run_at, id)\n"
    );
    let mut want: Vec<&str> = with_prio.lines().collect();
    want.sort_unstable();
    let now_text = indexes_text(&mut admin, &p).await?;
    // Migration 0005 adds the audit table's keys; this test is about the task tables.
    let mut got: Vec<&str> =
        now_text.lines().filter(|l| !l.starts_with("{prefix}audit ")).collect();
    got.sort_unstable();
    assert_eq!(got, want, "keys and indexes after 0003 and 0004");
    assert_eq!(broker.get("a").await?.priority, 0, "an old row gets priority 0");
    let head: Option<Vec<u8>> = sqlx::query_scalar(&chain_head).fetch_one(&mut admin).await?;
    assert_eq!(head.as_deref(), Some(&b" "[..]), "the chain head column was recomputed");
    let session: String =
        sqlx::query_scalar("SELECT @@collation_connection").fetch_one(broker.pool()).await?;
    assert_eq!(session, nopad, "broker sessions use the same collation");

    assert_eq!(broker.get("a").await?.business_key, "k", "rows keep their bytes");
    assert!(broker.get("a ").await.is_err_and(|e| e.is(ErrorKind::NotFound)), "a ≠ a space");
    let keyed = |id: &str, key: &str| Task::new("t", "q2").with_id(id).with_business_key(key);
    broker.enqueue(&keyed("k-space", "k ")).await?;
    for key in ["k", " "] {
        let again = broker.enqueue(&keyed("dup", key)).await;
        assert!(again.is_err_and(|e| e.is(ErrorKind::TaskExists)), "key {key:?} is taken");
    }
    assert_eq!(broker.try_dequeue(&["q "]).await?.map(|t| t.id), None, "q ≠ q space");
    assert_eq!(broker.paused_queues().await?, ["p"], "the paused queue kept its name");
    assert_eq!(broker.try_dequeue(&["q"]).await?.map(|t| t.id).as_deref(), Some("a"));
    broker.close().await?;
    storage.drop_tables().await
}

const FINISHED: usize = 4_000;

async fn pile_up_finished(broker: &MySqlBroker) -> Result<(), BoxError> {
    for chunk in 0..FINISHED / 500 {
        let tasks: Vec<Task> = (0..500)
            .map(|i| Task::new("job", "hot").with_id(format!("f{chunk:03}-{i:03}")))
            .collect();
        broker.enqueue_many(&tasks).await?;
        let claimed = broker.dequeue_many(&["hot"], 500).await?;
        let items: Vec<AckItem> = claimed
            .iter()
            .map(|t| AckItem { id: t.id.clone(), token: t.lease_token.clone(), result: None })
            .collect();
        for outcome in broker.ack_many(&items).await? {
            outcome?;
        }
    }
    Ok(())
}

fn bind<'q>(
    sql: &'q str,
    args: &'q [Value],
) -> sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments> {
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

/// The sum of the session's `Handler_read_*` counters (rows the storage engine handed over).
async fn handler_reads(conn: &mut MySqlConnection) -> Result<u64, BoxError> {
    let rows =
        sqlx::query("SHOW SESSION STATUS LIKE 'Handler\\_read\\_%'").fetch_all(&mut *conn).await?;
    Ok(rows.iter().map(|r| text(r, "Value").parse::<u64>().unwrap_or(0)).sum())
}

/// How many rows running `sql` makes the server read (inside a transaction rolled back
/// afterwards, so claims and writes leave nothing behind). Counts what really happens, where
/// `EXPLAIN`'s `rows` is only an estimate.
async fn rows_touched(
    conn: &mut MySqlConnection,
    sql: &str,
    args: &[Value],
) -> Result<u64, BoxError> {
    conn.execute("BEGIN").await?;
    let idle_before = handler_reads(conn).await?;
    let idle_after = handler_reads(conn).await?;
    bind(sql, args).fetch_all(&mut *conn).await?;
    let after = handler_reads(conn).await?;
    conn.execute("ROLLBACK").await?;
    let status_cost = idle_after.saturating_sub(idle_before);
    Ok(after.saturating_sub(idle_after).saturating_sub(status_cost))
}

/// The indexes a hot statement may use on the tasks and edges tables.
fn allowed(name: &str, prefix: &str) -> Vec<String> {
    let keys: &[&str] = match name {
        "next_due" => &["idx_ready"],
        // The claim's order is (priority, run_at, id): migration 0004's index.
        "claim" => &["idx_ready_prio"],
        "ack_lock" | "ack_write" => &["PRIMARY", "idx_deps_parent"],
        "reap" | "repair" => &["idx_status"],
        "children" => &["idx_deps_parent"],
        _ => &[],
    };
    keys.iter()
        .map(|k| if *k == "PRIMARY" { (*k).to_owned() } else { format!("{prefix}{k}") })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_statements_seek_indexes_that_exclude_finished_rows() -> Result<(), BoxError> {
    within(TEST_LIMIT, "hot_statements_seek_indexes_that_exclude_finished_rows", async move {
        let Some(storage) = common::storage("hot_statements_seek_indexes").await else {
            return Ok(());
        };
        let (options, clock) = common::manual_options();
        let log = taskgate_sql::StatementLog::new();
        let broker = storage.options()?.record_statements(log.clone()).connect_lazy()?;
        broker.init(options).await?;
        pile_up_finished(&broker).await?;
        let live: Vec<Task> =
            (0..20).map(|i| Task::new("job", "hot").with_id(format!("live{i:02}"))).collect();
        broker.enqueue_many(&live).await?;
        broker
            .enqueue(&Task::new("job", "hot").with_id("child").with_depends_on(["live00"]))
            .await?;
        let running = broker.dequeue(&["hot"]).await?;
        broker.ack(&running.id, &running.lease_token, None).await?;
        broker.reap_expired().await?;
        let p = storage.prefix();
        let mut conn = common::connect(&storage).await?;
        for table in ["tasks", "task_deps", "paused_queues"] {
            conn.execute(format!("ANALYZE TABLE {p}{table}").as_str()).await?;
        }
        let now = taskgate::Clock::now_ms(&clock);
        let recorded = log.texts();
        let mut report = String::new();
        for hot in broker.hot_statements("hot", "live05", now) {
            if ["claim", "next_due", "ack_lock", "reap", "children", "repair"].contains(&hot.name) {
                assert!(
                    recorded.contains(&hot.sql),
                    "{}: the broker never ran this text:\n{}",
                    hot.name,
                    hot.sql
                );
            }
            let plan =
                bind(&format!("EXPLAIN {}", hot.sql), &hot.args).fetch_all(&mut conn).await?;
            let allowed = allowed(hot.name, p);
            let lines: Vec<String> = plan
                .iter()
                .map(|row| {
                    let (t, k, ty) = (text(row, "table"), text(row, "key"), text(row, "type"));
                    format!(
                        "{:<10} {t:<40} type={ty:<8} key={k:<45} {}",
                        hot.name,
                        text(row, "Extra")
                    )
                })
                .collect();
            let shown = lines.join("\n");
            report.push_str(&shown);
            report.push('\n');
            for row in &plan {
                let (table, key, extra) =
                    (text(row, "table"), text(row, "key"), text(row, "Extra"));
                let ours = table.starts_with(p)
                    && (table.ends_with("tasks") || table.ends_with("task_deps"));
                if !(ours || table == "d") {
                    continue;
                }
                assert!(
                    allowed.contains(&key),
                    "{}: {table} uses {key:?}, expected one of {allowed:?}\n{shown}\n{}",
                    hot.name,
                    hot.sql
                );
                if hot.name == "claim" {
                    assert!(
                        !extra.contains("filesort"),
                        "claim sorts (and locks every ready row):\n{shown}"
                    );
                }
            }
            assert!(!plan.is_empty(), "{}: no plan", hot.name);
            let touched = rows_touched(&mut conn, &hot.sql, &hot.args).await?;
            report.push_str(&format!("{:<10} touched {touched} index/table rows\n", hot.name));
            assert!(
                touched < 300,
                "{}: read {touched} rows with {FINISHED} finished rows stored",
                hot.name
            );
        }
        eprintln!("{report}");
        let columns: Vec<String> = bind("EXPLAIN SELECT 1", &[])
            .fetch_all(&mut conn)
            .await?
            .first()
            .map(|r| r.columns().iter().map(|c| c.name().to_owned()).collect())
            .unwrap_or_default();
        assert!(columns.iter().any(|c| c == "key"), "EXPLAIN has a key column: {columns:?}");
        broker.close().await?;
        storage.drop_tables().await
    })
    .await
}
