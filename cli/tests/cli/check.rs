//! `taskgate check` as a process: cases stream as they finish, `--json` is one document per
//! run, a filter that selects nothing is an error, a SQLite file keeps no tables of the run,
//! and Ctrl-C during a run on PostgreSQL removes every table the run made.

use std::process::Stdio;
use std::time::{Duration, Instant};

use sqlx::{Connection, PgConnection, Row};

use crate::common::{filters, reader, run, server_url, stop_child, taskgate};

#[test]
fn memory_cases_print_as_they_finish() {
    let out = run(taskgate().args(["check", "memory://", "--filter", "c0"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 11, "{}", out.stdout);
    assert!(lines[1].starts_with("[1/9] c01_round_trip "), "{}", out.stdout);
    assert!(lines[9].starts_with("[9/9] c09_retrying_reclaim "), "{}", out.stdout);
    insta::with_settings!({ filters => filters(), prepend_module_to_snapshot => false }, {
        insta::assert_snapshot!("check_memory", out.stdout);
    });
}

#[test]
fn check_json_has_every_case() {
    let out = run(taskgate().args(["--json", "check", "--filter", "c4", "--url", "memory://"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let doc: serde_json::Value = serde_json::from_str(&out.stdout).expect("one JSON document");
    let cases = doc["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 10, "c40..c49");
    assert_eq!(doc["total"], 10);
    assert_eq!(doc["passed"].as_u64().unwrap_or(0) + doc["unsupported"].as_u64().unwrap_or(0), 10);
    assert!(cases.iter().all(|c| c["elapsed_ms"].is_u64() && c["message"].is_string()));
    // Progress went to stderr, one line per case plus the header and the summary.
    assert_eq!(out.stderr.lines().count(), 12, "{}", out.stderr);
    insta::with_settings!({ filters => filters(), prepend_module_to_snapshot => false }, {
        insta::assert_snapshot!("check_memory_json", out.stdout);
    });
}

#[test]
fn a_filter_that_matches_nothing_fails() {
    let out = run(taskgate().args(["check", "memory://", "--filter", "no_such_case"]));
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert_eq!(
        out.stderr.trim(),
        "taskgate: --filter \"no_such_case\" matched no case (`taskgate check --list` prints their names)"
    );
}

#[test]
fn a_sqlite_file_keeps_no_tables_of_the_run() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("check.db");
    let url = format!("sqlite://{}", path.display());
    let out = run(taskgate().args(["check", &url, "--filter", "c01"]));
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let tables = tokio::runtime::Runtime::new().expect("runtime").block_on(async {
        let mut conn = sqlx::SqliteConnection::connect(&url).await.expect("open");
        let rows = sqlx::query("SELECT name FROM sqlite_master WHERE type = 'table'")
            .fetch_all(&mut conn)
            .await
            .expect("tables");
        rows.iter().map(|r| r.get::<String, _>(0)).collect::<Vec<_>>()
    });
    assert!(tables.iter().all(|t| !t.starts_with("tgtest_")), "{tables:?}");
}

/// A database of its own on the PostgreSQL server, so "no table left" means exactly this run's.
struct OwnDatabase {
    admin_url: String,
    name: String,
    url: String,
}

impl OwnDatabase {
    async fn create(server: &str) -> OwnDatabase {
        let base = server.split('?').next().unwrap_or(server);
        let root = base.rsplit_once('/').map_or(base, |(root, _)| root);
        let id = taskgate::id::new_ulid().to_ascii_lowercase();
        let name = format!("tgcli_sigint_{}", &id[id.len() - 10..]);
        let mut admin = PgConnection::connect(server).await.expect("connect to postgres");
        sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut admin).await.expect("create");
        admin.close().await.ok();
        OwnDatabase { admin_url: server.to_owned(), url: format!("{root}/{name}"), name }
    }

    /// Tables and schemas the run made (anything outside the catalogs).
    async fn leftovers(&self) -> Vec<String> {
        let mut conn = PgConnection::connect(&self.url).await.expect("connect");
        let rows = sqlx::query(
            "SELECT table_schema || '.' || table_name FROM information_schema.tables \
             WHERE table_schema NOT IN ('pg_catalog', 'information_schema') \
             UNION ALL SELECT nspname FROM pg_namespace WHERE nspname LIKE 'tgtest%'",
        )
        .fetch_all(&mut conn)
        .await
        .expect("list tables");
        conn.close().await.ok();
        rows.iter().map(|r| r.get::<String, _>(0)).collect()
    }

    async fn drop(self) {
        let mut admin = PgConnection::connect(&self.admin_url).await.expect("connect");
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        sqlx::query(&sql).execute(&mut admin).await.expect("drop database");
        admin.close().await.ok();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_removes_the_tables_of_the_interrupted_run() {
    let Some(server) = server_url("TASKGATE_PG_URL") else { return };
    let db = OwnDatabase::create(&server).await;
    let mut child = taskgate()
        .args(["check", &db.url])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start taskgate check");
    let out = reader(child.stdout.take());
    let err = reader(child.stderr.take());

    // Wait until the run has tables of a case in the database, then interrupt it.
    let started = Instant::now();
    loop {
        let left = db.leftovers().await;
        if left.iter().any(|t| t.contains("tgtest_")) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "no case made tables: {left:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let code = stop_child(&mut child, true, Duration::from_secs(60), "check after SIGINT");
    let (stdout, stderr) = (out.join().unwrap_or_default(), err.join().unwrap_or_default());
    assert_eq!(code, Some(130), "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("interrupted during "), "{stdout}");
    assert!(stdout.contains("removed the storage of 1 unfinished case(s)"), "{stdout}");
    let left = db.leftovers().await;
    db.drop().await;
    assert_eq!(left, Vec::<String>::new(), "tables left after Ctrl-C\n{stdout}");
}

#[test]
fn a_closed_stdout_is_not_a_panic() {
    for args in
        [&["check", "memory://", "--filter", "c0"][..], &["--json", "list", "--url", "memory://"]]
    {
        let mut child = taskgate()
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start taskgate");
        drop(child.stdout.take()); // `taskgate … | head -0`
        let err = reader(child.stderr.take());
        let code = stop_child(&mut child, false, Duration::from_secs(60), &format!("{args:?}"));
        let stderr = err.join().unwrap_or_default();
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
    }
}
