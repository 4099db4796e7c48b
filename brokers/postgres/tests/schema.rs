//! The applied schema, read back from the catalog and snapshotted, so every migration change
//! shows up in review (`cargo insta review` after changing `migrations/postgres/`). The random
//! test prefix is written as `{prefix}`.

mod common;

use brokertest::{within, TEST_LIMIT};
use sqlx::PgConnection;
use taskgate::ManualClock;

/// One `information_schema.columns` row: table, column, type, nullable, default, collation.
type Column = (String, String, String, String, Option<String>, Option<String>);

async fn columns(conn: &mut PgConnection, prefix: &str) -> Result<Vec<String>, sqlx::Error> {
    let rows: Vec<Column> = sqlx::query_as(
        "SELECT table_name::text, column_name::text, data_type::text, is_nullable::text, \
             column_default::text, collation_name::text FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name LIKE $1 || '%' \
             ORDER BY table_name, ordinal_position",
    )
    .bind(prefix)
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(table, column, ty, nullable, default, collation)| {
            let null = if nullable == "YES" { "NULL" } else { "NOT NULL" };
            let default = default.map(|d| format!(" DEFAULT {d}")).unwrap_or_default();
            let collation = collation.map(|c| format!(" COLLATE {c}")).unwrap_or_default();
            format!("{table}.{column}: {ty}{collation} {null}{default}")
        })
        .collect())
}

async fn indexes(conn: &mut PgConnection, prefix: &str) -> Result<Vec<String>, sqlx::Error> {
    let rows: Vec<(String,)> = sqlx::query_as(
        "SELECT indexdef::text FROM pg_indexes WHERE schemaname = current_schema() \
         AND tablename LIKE $1 || '%' ORDER BY indexname",
    )
    .bind(prefix)
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|(def,)| def.replace("public.", "")).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applied_schema_matches_the_snapshot() -> Result<(), taskgate::BoxError> {
    within(TEST_LIMIT, "applied_schema_matches_the_snapshot", async move {
        let Some(s) = common::storage("schema snapshot").await else { return Ok(()) };
        let b = common::handle(&s, &ManualClock::at_contract_epoch(), |o| o).await?;
        let mut conn = s.admin().await?;
        let mut text = String::from("-- columns\n");
        for line in columns(&mut conn, s.prefix()).await? {
            text.push_str(&line);
            text.push('\n');
        }
        text.push_str("-- indexes\n");
        for line in indexes(&mut conn, s.prefix()).await? {
            text.push_str(&line);
            text.push('\n');
        }
        insta::assert_snapshot!(text.replace(s.prefix(), "{prefix}"));
        common::finish(s, &[&b]).await
    })
    .await
}
