//! The `portable-adapter` binary speaks the long-horizon protocol of
//! hardbyte/postgresql-job-queue-benchmarking (CONTRIBUTING_ADAPTERS.md; issue 42): run for a
//! few seconds against a fresh PostgreSQL database, every line it prints is checked — the
//! descriptor (fields, types, a superset of `benches/portable/adapter.json`), every sample
//! record (exactly the protocol's fields and types, known metrics, their windows), the ticks
//! (wall-clock multiples of `SAMPLE_EVERY_S`, consecutive, each with every required metric) —
//! and SIGTERM ends it with exit code 0 within the protocol's 5 seconds. PostgreSQL comes from
//! `TASKGATE_PG_URL` (unset: a loud skip, or a failure with `TASKGATE_REQUIRE_DB=1`).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use benches::portable::{LATENCY_WINDOW, METRICS, SYSTEM};
use serde_json::Value;
use sqlx::postgres::PgPoolOptions;

/// Seconds between ticks in the run.
const EVERY_S: u64 = 1;
/// Ticks carrying all six metrics before SIGTERM is sent.
const FULL_TICKS: usize = 4;
/// The protocol's bound on the exit after SIGTERM.
const EXIT_WITHIN: Duration = Duration::from_secs(5);
/// The longest the test waits for the ticks (a debug build on a loaded machine starts slowly).
const PATIENCE: Duration = Duration::from_secs(120);

/// Unix milliseconds of `2026-04-17T09:00:10.000Z` (exactly that shape), else `None`.
fn parse_iso_ms(t: &str) -> Option<i64> {
    let b = t.as_bytes();
    let shape = b.len() == 24
        && [4, 7].iter().all(|&i| b[i] == b'-')
        && b[10] == b'T'
        && [13, 16].iter().all(|&i| b[i] == b':')
        && b[19] == b'.'
        && b[23] == b'Z';
    if !shape {
        return None;
    }
    let n = |from: usize, to: usize| t.get(from..to)?.parse::<i64>().ok();
    let (y, m, d) = (n(0, 4)?, n(5, 7)?, n(8, 10)?);
    let (h, min, s, ms) = (n(11, 13)?, n(14, 16)?, n(17, 19)?, n(20, 23)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || h > 23 || min > 59 || s > 59 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + h) * 60 + min) * 60_000 + s * 1_000 + ms)
}

fn strings(v: &Value, field: &str) -> Vec<String> {
    let list = v[field].as_array().unwrap_or_else(|| panic!("{field} is not an array: {v}"));
    list.iter()
        .map(|s| s.as_str().unwrap_or_else(|| panic!("{field} holds a non-string: {v}")).to_owned())
        .collect()
}

/// A database of its own for the run, dropped afterwards.
struct Database {
    admin: String,
    name: String,
}

impl Database {
    async fn create(url: &str) -> Database {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!("tg_portable_{}_{nanos}", std::process::id());
        let pool = PgPoolOptions::new().max_connections(1).connect(url).await.expect("connect");
        sqlx::query(&format!("CREATE DATABASE {name}")).execute(&pool).await.expect("create db");
        pool.close().await;
        Database { admin: url.to_owned(), name }
    }

    /// `TASKGATE_PG_URL` with the database replaced by ours (query kept).
    fn url(&self) -> String {
        let (base, query) = match self.admin.split_once('?') {
            Some((b, q)) => (b, format!("?{q}")),
            None => (self.admin.as_str(), String::new()),
        };
        let server = base.rsplit_once('/').map_or(base, |(s, _)| s);
        format!("{server}/{}{query}", self.name)
    }

    async fn drop(self) {
        let pool = PgPoolOptions::new().max_connections(1).connect(&self.admin).await;
        if let Ok(pool) = pool {
            let _ =
                sqlx::query(&format!("DROP DATABASE IF EXISTS {}", self.name)).execute(&pool).await;
            pool.close().await;
        }
    }
}

/// A line of stdout, when it arrived.
type Line = (Instant, String);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_adapter_speaks_the_long_horizon_protocol() {
    let Some(admin) = std::env::var("TASKGATE_PG_URL").ok().filter(|u| !u.trim().is_empty()) else {
        assert!(
            std::env::var("TASKGATE_REQUIRE_DB").as_deref() != Ok("1"),
            "TASKGATE_PG_URL is not set and TASKGATE_REQUIRE_DB=1"
        );
        eprintln!("==== SKIPPED: the portable adapter's protocol test needs TASKGATE_PG_URL");
        return;
    };
    let db = Database::create(&admin).await;
    let outcome = tokio::task::spawn_blocking({
        let url = db.url();
        let name = db.name.clone();
        move || run_and_check(&url, &name)
    })
    .await;
    let checked = async {
        let pool = PgPoolOptions::new().max_connections(1).connect(&db.url()).await?;
        let done: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM taskgate_tasks WHERE status = 'completed' AND queue = $1",
        )
        .bind(benches::portable::QUEUE)
        .fetch_one(&pool)
        .await?;
        pool.close().await;
        Ok::<i64, sqlx::Error>(done)
    }
    .await;
    db.drop().await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic.into_panic());
    }
    let done = checked.expect("count the completed jobs");
    assert!(done > 0, "the jobs the adapter reported completed are in its database");
}

/// Runs the adapter against `url`, checks everything it prints, sends SIGTERM and checks the
/// exit.
fn run_and_check(url: &str, db_name: &str) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_portable-adapter"))
        .env("DATABASE_URL", url)
        .env("SCENARIO", "long_horizon")
        .env("PRODUCER_MODE", "fixed")
        .env("PRODUCER_RATE", "200")
        .env("WORKER_COUNT", "4")
        .env("JOB_PAYLOAD_BYTES", "256")
        .env("JOB_WORK_MS", "1")
        .env("SAMPLE_EVERY_S", EVERY_S.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the adapter");
    let stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let logs = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let (tx, rx) = mpsc::channel::<Line>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            match line {
                Ok(l) => {
                    if tx.send((Instant::now(), l)).is_err() {
                        return;
                    }
                }
                Err(e) => panic!("stdout is not UTF-8 lines: {e}"),
            }
        }
    });

    // Read until FULL_TICKS ticks carried all six metrics.
    let start = Instant::now();
    let mut lines: Vec<Line> = Vec::new();
    let mut full = 0;
    while full < FULL_TICKS {
        let left = PATIENCE.saturating_sub(start.elapsed());
        let Ok(line) = rx.recv_timeout(left) else {
            let _ = child.kill();
            panic!(
                "only {full} full ticks after {PATIENCE:?}; stdout so far:\n{}\nstderr:\n{}",
                lines.iter().map(|l| l.1.as_str()).collect::<Vec<_>>().join("\n"),
                logs.join().unwrap_or_default()
            );
        };
        lines.push(line);
        full = ticks(&lines[1..]).values().filter(|m| m.len() == METRICS.len()).count();
    }

    // SIGTERM, then the exit: code 0 within the protocol's bound.
    let term = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
    assert!(term.is_ok_and(|s| s.success()), "kill -TERM");
    let signalled = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the adapter") {
            break status;
        }
        if signalled.elapsed() > EXIT_WITHIN * 4 {
            let _ = child.kill();
            panic!("the adapter did not exit within {:?} of SIGTERM", EXIT_WITHIN * 4);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let exited_after = signalled.elapsed();
    reader.join().expect("the stdout reader");
    lines.extend(rx.try_iter());
    let logs = logs.join().unwrap_or_default();
    eprintln!("adapter stderr:\n{logs}");
    assert_eq!(status.code(), Some(0), "exit code after SIGTERM; stderr:\n{logs}");
    assert!(
        exited_after <= EXIT_WITHIN,
        "exited {exited_after:?} after SIGTERM; the protocol allows {EXIT_WITHIN:?}"
    );

    check_descriptor(&lines[0].1, db_name);
    let records: Vec<Value> = lines[1..].iter().map(|(_, l)| check_sample(l)).collect();
    check_ticks(&records);
    eprintln!(
        "checked {} records in {} ticks; exit 0 {:.0} ms after SIGTERM",
        records.len(),
        ticks(&lines[1..]).len(),
        exited_after.as_secs_f64() * 1e3
    );
}

/// The metrics of each tick (`t` in unix ms), from sample lines.
fn ticks(lines: &[Line]) -> BTreeMap<i64, BTreeSet<String>> {
    let mut out: BTreeMap<i64, BTreeSet<String>> = BTreeMap::new();
    for (_, line) in lines {
        let Ok(v) = serde_json::from_str::<Value>(line) else { continue };
        let (Some(t), Some(m)) = (v["t"].as_str().and_then(parse_iso_ms), v["metric"].as_str())
        else {
            continue;
        };
        out.entry(t).or_default().insert(m.to_owned());
    }
    out
}

fn check_descriptor(line: &str, db_name: &str) {
    let d: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("descriptor {line}: {e}"));
    let keys: BTreeSet<&str> =
        d.as_object().expect("an object").keys().map(String::as_str).collect();
    let want: BTreeSet<&str> = [
        "kind",
        "system",
        "event_tables",
        "event_indexes",
        "extensions",
        "version",
        "schema_version",
        "db_name",
        "started_at",
    ]
    .into();
    assert_eq!(keys, want, "descriptor fields: {line}");
    assert_eq!(d["kind"], "descriptor");
    assert_eq!(d["system"], SYSTEM);
    assert_eq!(d["db_name"], db_name);
    for field in ["version", "schema_version"] {
        assert!(d[field].as_str().is_some_and(|s| !s.is_empty()), "{field}: {line}");
    }
    assert!(d["started_at"].as_str().and_then(parse_iso_ms).is_some(), "started_at: {line}");
    let tables = strings(&d, "event_tables");
    assert!(tables.iter().all(|t| t.contains('.')), "schema-qualified tables: {line}");
    assert!(tables.contains(&"public.taskgate_tasks".to_owned()), "the tasks table: {line}");
    let indexes = strings(&d, "event_indexes");
    assert!(indexes.iter().all(|t| t.contains('.')), "schema-qualified indexes: {line}");
    let extensions = strings(&d, "extensions");

    // The static manifest: the runtime descriptor must be a superset of it (the harness's
    // drift check), and it names the same system.
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/portable/adapter.json");
    let manifest: Value = serde_json::from_str(&std::fs::read_to_string(path).expect(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(manifest["system"], SYSTEM, "{path}");
    assert!(manifest["db_name"].as_str().is_some_and(|s| !s.is_empty()), "{path}: db_name");
    for (field, runtime) in [("event_tables", &tables), ("extensions", &extensions)] {
        let declared = strings(&manifest, field);
        assert!(!declared.is_empty() || field == "extensions", "{path}: {field} is empty");
        for name in declared {
            assert!(
                runtime.contains(&name),
                "{path} declares {name} in {field}; the adapter made {runtime:?}"
            );
        }
    }
    for name in strings(&manifest, "event_indexes") {
        assert!(
            indexes.contains(&name),
            "{path} declares index {name}; the adapter has {indexes:?}"
        );
    }
}

/// One sample record: exactly the protocol's fields, with their types and windows.
fn check_sample(line: &str) -> Value {
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON: {line}: {e}"));
    let keys: BTreeSet<&str> =
        v.as_object().expect("an object").keys().map(String::as_str).collect();
    let want: BTreeSet<&str> =
        ["t", "system", "kind", "subject_kind", "subject", "metric", "value", "window_s"].into();
    assert_eq!(keys, want, "sample fields: {line}");
    assert!(v["t"].as_str().and_then(parse_iso_ms).is_some(), "t: {line}");
    assert_eq!(v["system"], SYSTEM, "{line}");
    assert_eq!(v["kind"], "adapter", "{line}");
    assert_eq!(v["subject_kind"], "adapter", "{line}");
    assert_eq!(v["subject"], "", "{line}");
    let metric = v["metric"].as_str().expect("metric is a string");
    assert!(METRICS.contains(&metric), "unknown metric: {line}");
    let value = v["value"].as_f64().unwrap_or_else(|| panic!("value is not a number: {line}"));
    assert!(value.is_finite() && value >= 0.0, "value: {line}");
    let window = v["window_s"].as_f64().unwrap_or_else(|| panic!("window_s: {line}"));
    let expected = match metric {
        m if m.starts_with("claim_") => LATENCY_WINDOW.as_secs_f64(),
        "queue_depth" => 0.0,
        _ => EVERY_S as f64,
    };
    assert_eq!(window, expected, "window_s of {metric}: {line}");
    v
}

/// Ticks on wall-clock multiples of `SAMPLE_EVERY_S`, consecutive; each with the rates and the
/// depth once, the claim percentiles all three or none (none only before the first job ran),
/// ordered p50 ≤ p95 ≤ p99; jobs flowed.
fn check_ticks(records: &[Value]) {
    let mut by_tick: BTreeMap<i64, Vec<&Value>> = BTreeMap::new();
    for r in records {
        let t = r["t"].as_str().and_then(parse_iso_ms).expect("checked");
        by_tick.entry(t).or_default().push(r);
    }
    let step = i64::try_from(EVERY_S).unwrap() * 1_000;
    let times: Vec<i64> = by_tick.keys().copied().collect();
    assert!(times.iter().all(|t| t % step == 0), "ticks off the {EVERY_S} s boundaries: {times:?}");
    assert!(times.windows(2).all(|w| w[1] - w[0] == step), "ticks not consecutive: {times:?}");
    // Records of one tick are printed together, ticks in order.
    let order: Vec<i64> =
        records.iter().map(|r| r["t"].as_str().and_then(parse_iso_ms).unwrap()).collect();
    assert!(order.windows(2).all(|w| w[0] <= w[1]), "records out of tick order");
    let mut claimed = false;
    let (mut enqueued, mut completed) = (0.0, 0.0);
    for (t, rows) in &by_tick {
        let value = |m: &str| -> Vec<f64> {
            rows.iter().filter(|r| r["metric"] == m).map(|r| r["value"].as_f64().unwrap()).collect()
        };
        for m in ["enqueue_rate", "completion_rate", "queue_depth"] {
            assert_eq!(value(m).len(), 1, "tick {t}: {m} once");
        }
        enqueued += value("enqueue_rate")[0];
        completed += value("completion_rate")[0];
        let claims: Vec<Vec<f64>> =
            ["claim_p50_ms", "claim_p95_ms", "claim_p99_ms"].iter().map(|m| value(m)).collect();
        match claims.iter().map(Vec::len).collect::<Vec<_>>().as_slice() {
            [1, 1, 1] => {
                claimed = true;
                let (p50, p95, p99) = (claims[0][0], claims[1][0], claims[2][0]);
                assert!(p50 <= p95 && p95 <= p99, "tick {t}: {p50} ≤ {p95} ≤ {p99}");
            }
            [0, 0, 0] => assert!(!claimed, "tick {t}: claim percentiles missing after jobs ran"),
            other => panic!("tick {t}: claim percentiles {other:?}"),
        }
    }
    assert!(
        enqueued > 0.0 && completed > 0.0,
        "jobs flowed: {enqueued} enqueued/s, {completed} completed/s summed"
    );
}
