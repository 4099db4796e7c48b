//! The admin API over a real socket (127.0.0.1:0, a hyper client) on every backend: memory,
//! SQLite, PostgreSQL (`TASKGATE_PG_URL`) and MariaDB/MySQL (`TASKGATE_MYSQL_URL`). One
//! scenario walks every endpoint; response bodies are insta snapshots shared by every backend
//! (IDs the broker generates and times redacted), so the four answer byte for byte alike.

mod common;

use std::sync::Arc;

use common::{run, Server};
use serde_json::{json, Value};
use taskgate::{AuditQuery, Broker, Status, Task};

const OPS: &str = "ops-secret-0123456789";
const VIEWER: &str = "viewer-secret-0123456789";
const ALICE: &str = "alice-secret-0123456789";

fn config() -> taskgate_admin::AdminConfig {
    taskgate_admin::AdminConfig::from_specs([
        &*format!("ops:write={OPS}"),
        &*format!("viewer:read={VIEWER}"),
        &*format!("alice-ui:write@alice={ALICE}"),
    ])
    .expect("valid token specs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory() {
    run(Arc::new(taskgate_memory::testing::MemoryFactory), scenario).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite() {
    run(Arc::new(taskgate_sqlite::testing::SqliteFactory::new()), scenario).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres() {
    run(Arc::new(taskgate_postgres::testing::PgFactory::from_env()), scenario).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql() {
    run(Arc::new(taskgate_mysql::testing::MySqlFactory::from_env()), scenario).await;
}

/// Seeds: a1 (email/mail, owner alice, JSON payload), a2 (email/mail, owner alice, binary
/// payload), b1 (email/mail, owner bob), c1 (report/reports, due tomorrow), d1
/// (report/reports, completed with a JSON result), and 105 bulk tasks p000…p104 (noop/bulk).
async fn seed(broker: &dyn Broker) -> taskgate::Result<()> {
    broker
        .enqueue(
            &Task::new("email", "mail")
                .with_id("a1")
                .with_owner("alice")
                .with_payload(br#"{"to":"a@example.com","n":1}"#.to_vec()),
        )
        .await?;
    broker
        .enqueue(
            &Task::new("email", "mail")
                .with_id("a2")
                .with_owner("alice")
                .with_payload(vec![0xff, 0x00, 0x01]),
        )
        .await?;
    broker.enqueue(&Task::new("email", "mail").with_id("b1").with_owner("bob")).await?;
    // c1 waits a day, so the claim takes d1 although c1 was submitted first.
    let tomorrow = broker.now().await?.saturating_add(std::time::Duration::from_secs(86_400));
    broker.enqueue(&Task::new("report", "reports").with_id("c1").with_run_at(tomorrow)).await?;
    broker.enqueue(&Task::new("report", "reports").with_id("d1")).await?;
    let d1 = broker.dequeue(&["reports"]).await?;
    assert_eq!(d1.id, "d1", "c1 is not due");
    broker.ack(&d1.id, &d1.lease_token, Some(br#"{"rows":42}"#.to_vec())).await?;
    let bulk: Vec<Task> =
        (0..105).map(|i| Task::new("noop", "bulk").with_id(format!("p{i:03}"))).collect();
    broker.enqueue_many(&bulk).await?;
    Ok(())
}

async fn audit_count(broker: &dyn Broker) -> usize {
    broker.audit_log(&AuditQuery::default()).await.expect("audit log").len()
}

async fn scenario(broker: Arc<dyn Broker>) -> Result<(), taskgate::BoxError> {
    seed(&*broker).await?;
    let server = Server::start(broker.clone(), config()).await;

    auth(&server).await;
    let before = audit_count(&*broker).await;
    listing(&server).await;
    reading(&server).await;
    bad_input(&server).await;
    assert_eq!(audit_count(&*broker).await, before, "reads and bad input write no audit row");

    mutations(&server, &*broker).await;
    queues(&server, &*broker).await;
    owner_bound(&server, &*broker).await;
    audit_endpoint(&server).await;
    server.stop().await;
    Ok(())
}

async fn auth(s: &Server) {
    let (status, body) = s.get("/api/v1/tasks", None).await;
    assert_eq!((status, body["code"].as_str()), (401, Some("auth.missing")), "{body}");
    let (status, body) = s.get("/api/v1/tasks", Some("not-a-token-at-all")).await;
    assert_eq!((status, body["code"].as_str()), (401, Some("auth.invalid")), "{body}");
    let (status, body) = s.raw("GET", "/api/v1/tasks", Some(&format!("Basic {OPS}")), None).await;
    assert_eq!((status, body["code"].as_str()), (401, Some("auth.invalid")), "{body}");
    let (status, _) = s.get("/api/v1/tasks", Some(VIEWER)).await;
    assert_eq!(status, 200, "a read token reads");
    // The scheme is case-insensitive (RFC 7235 §2.1), and may be followed by several spaces.
    for scheme in ["bearer", "BEARER", "bEaReR ", "Bearer  "] {
        let (status, body) =
            s.raw("GET", "/api/v1/tasks", Some(&format!("{scheme} {VIEWER}")), None).await;
        assert_eq!(status, 200, "{scheme:?}: {body}");
    }
    // A read token's 403 on every mutation: the named rule `read_token_cannot_mutate`
    // (tests/rules.rs).
    for path in [
        "/api/v1/tasks/a1/cancel",
        "/api/v1/tasks/a1/resume",
        "/api/v1/tasks/d1/replay",
        "/api/v1/queues/mail/pause",
        "/api/v1/queues/mail/resume",
    ] {
        let (status, _) = s.post(path, None, None).await;
        assert_eq!(status, 401, "{path} without a token");
    }
    insta::assert_json_snapshot!("error_unauthorized", s.get("/api/v1/stats", None).await.1);
}

fn ids(body: &Value) -> Vec<String> {
    body["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .collect()
}

async fn listing(s: &Server) {
    let (status, body) = s.get("/api/v1/tasks?queue=mail", Some(OPS)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(ids(&body), ["a1", "a2", "b1"], "queue filter, created order");
    let (_, body) = s.get("/api/v1/tasks?queue=mail&per_page=3", Some(OPS)).await;
    assert_eq!(
        (ids(&body).len(), body["has_more"].as_bool()),
        (3, Some(false)),
        "a full last page"
    );
    let (_, body) = s.get("/api/v1/tasks?owner=alice", Some(OPS)).await;
    assert_eq!(ids(&body), ["a1", "a2"], "owner filter");
    let (_, body) = s.get("/api/v1/tasks?type=report", Some(OPS)).await;
    assert_eq!(ids(&body), ["c1", "d1"], "type filter, created order");
    let (_, body) = s.get("/api/v1/tasks?status=completed", Some(OPS)).await;
    assert_eq!(ids(&body), ["d1"], "status filter");
    let (_, body) =
        s.get("/api/v1/tasks?type=email&owner=alice&queue=mail&status=pending", Some(OPS)).await;
    assert_eq!(ids(&body), ["a1", "a2"], "filters combine");
    let (_, body) = s.get("/api/v1/tasks?business_key=none", Some(OPS)).await;
    assert_eq!(ids(&body), Vec::<String>::new(), "business key filter");

    let (_, body) = s.get("/api/v1/tasks?queue=bulk&per_page=100", Some(OPS)).await;
    let page1 = ids(&body);
    assert_eq!((page1.len(), body["has_more"].as_bool()), (100, Some(true)), "page 1 of bulk");
    assert_eq!(page1.first().map(String::as_str), Some("p000"));
    let (_, body) = s.get("/api/v1/tasks?queue=bulk&per_page=100&page=2", Some(OPS)).await;
    assert_eq!(ids(&body), ["p100", "p101", "p102", "p103", "p104"], "page 2 of bulk");
    assert_eq!(body["has_more"], json!(false));
    let (_, body) = s.get("/api/v1/tasks?queue=bulk&per_page=7&page=3", Some(OPS)).await;
    assert_eq!(ids(&body), (14..21).map(|i| format!("p{i:03}")).collect::<Vec<_>>(), "page 3 of 7");
    let (_, body) = s.get("/api/v1/tasks", Some(OPS)).await;
    assert_eq!((ids(&body).len(), body["per_page"].as_u64()), (50, Some(50)), "default page");
    let (_, body) = s.get("/api/v1/tasks?queue=bulk&page=99", Some(OPS)).await;
    assert_eq!((ids(&body).len(), body["has_more"].as_bool()), (0, Some(false)), "past the end");
    let (_, body) = s.get("/api/v1/tasks?queue=mail&per_page=2", Some(VIEWER)).await;
    insta::assert_json_snapshot!("list_mail_page", common::scrub(body));
}

async fn reading(s: &Server) {
    let (status, body) = s.get("/api/v1/tasks/a1", Some(VIEWER)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["payload"], json!({"to": "a@example.com", "n": 1}), "JSON payload round trip");
    insta::assert_json_snapshot!("task_json_payload", common::scrub(body));
    let (_, body) = s.get("/api/v1/tasks/a2", Some(VIEWER)).await;
    assert_eq!(
        (body["payload"].as_str(), body["payload_encoding"].as_str()),
        (Some("/wAB"), Some("base64"))
    );
    let (_, body) = s.get("/api/v1/tasks/d1", Some(VIEWER)).await;
    assert_eq!((&body["result"], &body["status"]), (&json!({"rows": 42}), &json!("completed")));
    insta::assert_json_snapshot!("task_completed", common::scrub(body));
    let (status, body) = s.get("/api/v1/tasks/nope", Some(VIEWER)).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("task.not_found")), "{body}");
    insta::assert_json_snapshot!("error_not_found", body);
    let (_, body) = s.get("/api/v1/stats", Some(VIEWER)).await;
    assert_eq!(body["totals"]["completed"], json!(1));
    assert_eq!(body["totals"]["pending"], json!(109));
    insta::assert_json_snapshot!("stats", common::scrub(body));
}

async fn bad_input(s: &Server) {
    let long = "x".repeat(300);
    let cases: Vec<(&str, String, u16, &str)> = vec![
        ("GET", "/api/v1/tasks?status=bogus".into(), 400, "input.invalid"),
        ("GET", "/api/v1/tasks?page=0".into(), 400, "input.invalid"),
        ("GET", "/api/v1/tasks?per_page=101".into(), 400, "input.invalid"),
        ("GET", "/api/v1/tasks?per_page=0".into(), 400, "input.invalid"),
        ("GET", "/api/v1/tasks?per_page=abc".into(), 400, "input.invalid"),
        ("GET", "/api/v1/tasks?page=-1".into(), 400, "input.invalid"),
        (
            "GET",
            "/api/v1/tasks?page=18446744073709551615&per_page=100".into(),
            400,
            "input.invalid",
        ),
        ("GET", "/api/v1/tasks?colour=red".into(), 400, "input.invalid"),
        ("GET", "/api/v1/audit?per_page=1000".into(), 400, "input.invalid"),
        ("GET", format!("/api/v1/tasks/{long}"), 400, "input.invalid"),
        ("GET", "/api/v1/tasks/%FF%FE".into(), 400, "input.invalid"),
        ("POST", format!("/api/v1/tasks/{long}/cancel"), 400, "input.invalid"),
        ("POST", "/api/v1/tasks/%00/resume".into(), 400, "input.invalid"),
        ("POST", "/api/v1/queues/a%0Ab/pause".into(), 400, "input.invalid"),
        ("POST", format!("/api/v1/queues/{long}/pause"), 400, "input.invalid"),
        ("GET", "/api/v1/nothing".into(), 404, "route.not_found"),
        ("DELETE", "/api/v1/tasks/a1".into(), 405, "route.method_not_allowed"),
    ];
    for (method, path, want, code) in cases {
        let (status, body) = s.raw(method, &path, Some(OPS), None).await;
        assert_eq!((status, body["code"].as_str()), (want, Some(code)), "{method} {path}: {body}");
        assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "{path}: a message");
    }
    let (status, body) =
        s.raw("POST", "/api/v1/tasks/d1/replay", Some(OPS), Some("{not json")).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("input.invalid")), "{body}");
    let (status, body) =
        s.raw("POST", "/api/v1/tasks/d1/replay", Some(OPS), Some(r#"{"force":true}"#)).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("input.invalid")), "{body}");
    // A replay body is JSON or refused: never ignored for lack of a JSON content type.
    for content_type in [None, Some("text/plain"), Some("application/x-www-form-urlencoded")] {
        let body = br#"{"allow_completed": true}"#.to_vec();
        let (status, answer) =
            s.request("POST", "/api/v1/tasks/d1/replay", Some(OPS), content_type, body).await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (415, Some("input.unsupported_media_type")),
            "{content_type:?}: {answer}"
        );
    }
    let (_, answer) =
        s.request("POST", "/api/v1/tasks/d1/replay", Some(OPS), None, b"x".to_vec()).await;
    insta::assert_json_snapshot!("error_unsupported_media_type", answer);
    // Endpoints that take no body refuse one rather than ignore it.
    for path in [
        "/api/v1/tasks/a1/cancel",
        "/api/v1/tasks/a1/resume",
        "/api/v1/queues/mail/pause",
        "/api/v1/queues/mail/resume",
    ] {
        let (status, answer) =
            s.request("POST", path, Some(OPS), Some("application/json"), b"{}".to_vec()).await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (400, Some("input.invalid")),
            "{path}: {answer}"
        );
    }
    let (_, body) = s.get("/api/v1/tasks?status=bogus", Some(OPS)).await;
    insta::assert_json_snapshot!("error_bad_status", body);
}

async fn mutations(s: &Server, broker: &dyn Broker) {
    let n = audit_count(broker).await;
    let (status, body) = s.post("/api/v1/tasks/a1/cancel", Some(OPS), None).await;
    assert_eq!((status, body["status"].as_str()), (200, Some("canceled")), "{body}");
    assert_eq!(audit_count(broker).await, n + 1, "one audit row per cancel");
    assert_eq!(broker.get("a1").await.unwrap().status, Status::Canceled);

    let (status, body) = s.post("/api/v1/tasks/a1/resume", Some(OPS), None).await;
    assert_eq!(
        (status, body["status"].as_str(), body["attempts"].as_u64()),
        (200, Some("pending"), Some(0)),
        "{body}"
    );
    assert_eq!(body["resumes"], json!(1));
    assert_eq!(audit_count(broker).await, n + 2, "one audit row per resume");

    let (status, body) = s.post("/api/v1/tasks/d1/resume", Some(OPS), None).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("task.not_resumable")), "{body}");
    insta::assert_json_snapshot!("error_not_resumable", body);
    assert_eq!(broker.get("d1").await.unwrap().status, Status::Completed, "409 changed nothing");
    assert_eq!(audit_count(broker).await, n + 3, "a rejected resume is recorded too");

    let (status, body) = s.post("/api/v1/tasks/d1/cancel", Some(OPS), None).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("task.already_final")), "{body}");
    let (status, body) = s.post("/api/v1/tasks/zz/cancel", Some(OPS), None).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("task.not_found")), "{body}");
    let (status, body) = s.post("/api/v1/tasks/d1/replay", Some(OPS), None).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("task.completed_not_allowed")),
        "{body}"
    );
    assert_eq!(audit_count(broker).await, n + 6);

    let replay = r#"{"allow_completed": true, "payload": {"again": true}}"#;
    let (status, body) = s.raw("POST", "/api/v1/tasks/d1/replay", Some(OPS), Some(replay)).await;
    assert_eq!((status, body["replay_of"].as_str()), (201, Some("d1")), "{body}");
    assert_eq!((&body["payload"], &body["status"]), (&json!({"again": true}), &json!("pending")));
    insta::assert_json_snapshot!("task_replayed", common::scrub(body));
    let (status, body) = s.raw("POST", "/api/v1/tasks/d1/replay", Some(OPS), Some(replay)).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("task.already_replayed")), "{body}");
    assert_eq!(audit_count(broker).await, n + 8, "one row per mutation, rejected or not");
    let log = broker.audit_log(&AuditQuery { limit: 8, ..Default::default() }).await.unwrap();
    let got: Vec<(&str, &str, &str, &str)> = log
        .iter()
        .rev()
        .map(|r| (r.actor.as_str(), r.action.as_str(), r.target.as_str(), r.outcome.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("ops", "cancel", "task:a1", "ok"),
            ("ops", "resume", "task:a1", "ok"),
            ("ops", "resume", "task:d1", "task.not_resumable"),
            ("ops", "cancel", "task:d1", "task.already_final"),
            ("ops", "cancel", "task:zz", "task.not_found"),
            ("ops", "replay", "task:d1", "task.completed_not_allowed"),
            ("ops", "replay", "task:d1", "ok"),
            ("ops", "replay", "task:d1", "task.already_replayed"),
        ]
    );
}

async fn queues(s: &Server, broker: &dyn Broker) {
    let (status, body) = s.get("/api/v1/queues", Some(VIEWER)).await;
    assert_eq!(status, 200, "{body}");
    let names: Vec<&str> =
        body["queues"].as_array().unwrap().iter().map(|q| q["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["bulk", "mail", "reports"]);
    insta::assert_json_snapshot!("queues", common::scrub(body));
    let n = audit_count(broker).await;
    let (status, body) = s.post("/api/v1/queues/mail/pause", Some(OPS), None).await;
    assert_eq!(
        (status, &body["paused"], &body["length"]),
        (200, &json!(true), &json!(3)),
        "{body}"
    );
    assert_eq!(broker.paused_queues().await.unwrap(), ["mail"]);
    let (_, body) = s.get("/api/v1/queues", Some(VIEWER)).await;
    assert_eq!(body["queues"][1]["paused"], json!(true), "{body}");
    let (status, body) = s.post("/api/v1/queues/idle/pause", Some(OPS), None).await;
    assert_eq!((status, &body["length"]), (200, &json!(0)), "an empty queue can be paused: {body}");
    let (_, body) = s.get("/api/v1/queues", Some(VIEWER)).await;
    let names: Vec<&str> =
        body["queues"].as_array().unwrap().iter().map(|q| q["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["bulk", "idle", "mail", "reports"], "a paused empty queue is listed");
    for q in ["mail", "idle"] {
        let (status, body) = s.post(&format!("/api/v1/queues/{q}/resume"), Some(OPS), None).await;
        assert_eq!((status, &body["paused"]), (200, &json!(false)), "{body}");
    }
    assert!(broker.paused_queues().await.unwrap().is_empty());
    assert_eq!(audit_count(broker).await, n + 4, "one row per pause and resume");
}

async fn owner_bound(s: &Server, broker: &dyn Broker) {
    let n = audit_count(broker).await;
    let (_, body) = s.get("/api/v1/tasks", Some(ALICE)).await;
    assert_eq!(ids(&body), ["a1", "a2"], "alice's token lists only alice's tasks");
    let (_, body) = s.get("/api/v1/tasks?owner=bob", Some(ALICE)).await;
    assert_eq!(ids(&body), Vec::<String>::new(), "and never bob's");
    let (_, body) = s.get("/api/v1/tasks?queue=mail&owner=alice", Some(ALICE)).await;
    assert_eq!(ids(&body), ["a1", "a2"]);
    // Another owner's task answers the 404 of a missing one, and the endpoints that span every
    // owner 403: the named rules `owner_bound_token_sees_404_like_missing` and
    // `owner_bound_token_403_on_queues_stats_audit` (tests/rules.rs).
    assert_eq!(audit_count(broker).await, n, "listings write no audit row");
    let (status, body) = s.post("/api/v1/tasks/a2/cancel", Some(ALICE), None).await;
    assert_eq!((status, body["status"].as_str()), (200, Some("canceled")), "{body}");
    let log = broker.audit_log(&AuditQuery { limit: 1, ..Default::default() }).await.unwrap();
    assert_eq!((log[0].actor.as_str(), log[0].target.as_str()), ("alice-ui", "task:a2"));
    assert_eq!(audit_count(broker).await, n + 1);
}

async fn audit_endpoint(s: &Server) {
    let (status, body) = s.get("/api/v1/audit?per_page=3", Some(VIEWER)).await;
    assert_eq!((status, body["has_more"].as_bool()), (200, Some(true)), "{body}");
    insta::assert_json_snapshot!("audit_page", common::scrub(body));
    let (_, body) = s.get("/api/v1/audit?action=pause_queue", Some(VIEWER)).await;
    let targets: Vec<&str> =
        body["records"].as_array().unwrap().iter().map(|r| r["target"].as_str().unwrap()).collect();
    assert_eq!(targets, ["queue:idle", "queue:mail"], "newest first, filtered by action");
    let (_, body) =
        s.get("/api/v1/audit?target=task:d1&actor=ops&per_page=100", Some(VIEWER)).await;
    assert_eq!(body["records"].as_array().unwrap().len(), 5, "{body}");
    // Page 2 continues page 1: its offset is (page - 1) × per_page.
    let (_, six) = s.get("/api/v1/audit?per_page=6", Some(VIEWER)).await;
    let (_, second) = s.get("/api/v1/audit?per_page=3&page=2", Some(VIEWER)).await;
    let rest = Value::Array(six["records"].as_array().expect("records")[3..].to_vec());
    assert_eq!(second["records"], rest, "page 2 of 3 records is records 4 to 6");
}

/// The OpenAPI document: served without a token, generated from the code (snapshot), and
/// naming every endpoint the router serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_document() {
    run(Arc::new(taskgate_memory::testing::MemoryFactory), |broker| async move {
        let server = Server::start(broker, config()).await;
        let (status, body) = server.get("/api/v1/openapi.json", None).await;
        assert_eq!(status, 200, "{body}");
        let expected = serde_json::to_value(taskgate_admin::openapi::document())?;
        assert_eq!(body, expected, "the served document is the generated one");
        let paths: Vec<&str> =
            body["paths"].as_object().expect("paths").keys().map(String::as_str).collect();
        assert_eq!(
            paths,
            [
                "/api/v1/audit",
                "/api/v1/queues",
                "/api/v1/queues/{queue}/pause",
                "/api/v1/queues/{queue}/resume",
                "/api/v1/stats",
                "/api/v1/tasks",
                "/api/v1/tasks/{id}",
                "/api/v1/tasks/{id}/cancel",
                "/api/v1/tasks/{id}/replay",
                "/api/v1/tasks/{id}/resume",
            ]
        );
        insta::assert_json_snapshot!("openapi", body);
        server.stop().await;
        Ok(())
    })
    .await;
}

/// Bad input never answers 5xx: arbitrary query strings (known and unknown keys, any values,
/// raw and percent-encoded, invalid UTF-8), path segments (any bytes, percent-encoded) and
/// bodies (any JSON, any bytes, any content type) on every endpoint, with every kind of token
/// (write, read, owner-bound, unknown, none), against the seeded SQLite and memory brokers.
/// Every answer is 2xx or 4xx and JSON; every 4xx is `{code, message}` with both non-empty.
/// `PROPTEST_CASES` sets the number of requests per backend (default 600).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_never_500_sqlite() {
    let factory = Arc::new(taskgate_sqlite::testing::SqliteFactory::new());
    run(factory, |broker| fuzz_backend(broker, "sqlite")).await;
}

/// [`bad_input_never_500_sqlite`] on the memory broker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_never_500_memory() {
    run(Arc::new(taskgate_memory::testing::MemoryFactory), |broker| fuzz_backend(broker, "memory"))
        .await;
}

async fn fuzz_backend(broker: Arc<dyn Broker>, backend: &str) -> Result<(), taskgate::BoxError> {
    seed(&*broker).await?;
    let server = Arc::new(Server::start(broker, config()).await);
    let handle = tokio::runtime::Handle::current();
    let runner_server = server.clone();
    let figures = tokio::task::spawn_blocking(move || fuzz::run(&handle, &runner_server)).await??;
    eprintln!("bad input ({backend}): {figures}");
    assert!(figures.server_errors == 0 && figures.requests > 0, "{figures}");
    let server = Arc::try_unwrap(server).map_err(|_| "the server is still shared")?;
    server.stop().await;
    Ok(())
}

mod fuzz {
    use std::collections::BTreeMap;
    use std::fmt;
    use std::sync::Mutex;

    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    use serde_json::Value;

    use super::{ALICE, OPS, VIEWER};
    use crate::common::Server;

    /// What one run sent and got.
    #[derive(Debug, Default)]
    pub(super) struct Figures {
        pub(super) requests: usize,
        pub(super) server_errors: usize,
        by_kind: BTreeMap<&'static str, usize>,
        by_status: BTreeMap<u16, usize>,
    }

    impl fmt::Display for Figures {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(
                f,
                "{} requests {:?}, statuses {:?}, {} server errors",
                self.requests, self.by_kind, self.by_status, self.server_errors
            )
        }
    }

    /// One request: its kind, method, path with query, token, content type and body.
    #[derive(Clone, Debug)]
    struct Probe {
        kind: &'static str,
        method: &'static str,
        path: String,
        token: Option<&'static str>,
        content_type: Option<String>,
        body: Vec<u8>,
    }

    /// Every byte but the unreserved ones as `%XX`.
    fn encode(bytes: &[u8]) -> String {
        bytes
            .iter()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b"-._~".contains(b) {
                    char::from(*b).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect()
    }

    /// Text as a client might send it: arbitrary Unicode, bytes that are not UTF-8, numbers
    /// at and past every limit, and the known values.
    fn text() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            any::<String>().prop_map(String::into_bytes),
            proptest::collection::vec(any::<u8>(), 0..40),
            prop_oneof![
                Just("0"),
                Just("-1"),
                Just("1"),
                Just("100"),
                Just("101"),
                Just("18446744073709551615"),
                Just("18446744073709551616"),
                Just("1e3"),
                Just(" 5"),
                Just(""),
                Just("pending"),
                Just("completed"),
                Just("a1"),
                Just("d1"),
                Just("mail"),
                Just("alice"),
                Just("task:a1"),
            ]
            .prop_map(|s| s.as_bytes().to_vec()),
            any::<u64>().prop_map(|n| n.to_string().into_bytes()),
        ]
    }

    const KEYS: &[&str] = &[
        "page",
        "per_page",
        "status",
        "type",
        "queue",
        "owner",
        "business_key",
        "parent",
        "actor",
        "action",
        "target",
    ];

    /// A query string: encoded pairs of known or arbitrary keys, or raw URI characters.
    fn query() -> impl Strategy<Value = String> {
        let key = prop_oneof![
            4 => proptest::sample::select(KEYS).prop_map(|k| k.as_bytes().to_vec()),
            1 => text(),
        ];
        let pairs = proptest::collection::vec((key, text()), 0..5).prop_map(|pairs| {
            pairs
                .iter()
                .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
                .collect::<Vec<_>>()
                .join("&")
        });
        prop_oneof![3 => pairs, 1 => "[A-Za-z0-9%&=+._~!$'()*,;:@/?-]{0,40}"]
    }

    fn token() -> impl Strategy<Value = Option<&'static str>> {
        prop_oneof![
            4 => Just(Some(OPS)),
            1 => Just(Some(VIEWER)),
            1 => Just(Some(ALICE)),
            1 => Just(Some("not-a-configured-token")),
            1 => Just(None),
        ]
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            any::<String>().prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(
                    prop_oneof![
                        Just("allow_completed".to_owned()),
                        Just("payload".to_owned()),
                        any::<String>()
                    ],
                    inner,
                    0..4
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn body() -> impl Strategy<Value = (Option<String>, Vec<u8>)> {
        let content_type = prop_oneof![
            4 => Just(Some("application/json".to_owned())),
            1 => Just(None),
            1 => Just(Some("text/plain".to_owned())),
            1 => Just(Some("application/json; charset=utf-8".to_owned())),
        ];
        let bytes = prop_oneof![
            3 => json_value().prop_map(|v| serde_json::to_vec(&v).expect("JSON")),
            1 => any::<bool>().prop_map(|allow| {
                format!(r#"{{"allow_completed":{allow},"payload":{{"n":1}}}}"#).into_bytes()
            }),
            1 => proptest::collection::vec(any::<u8>(), 0..64),
        ];
        (content_type, bytes)
    }

    const LISTS: &[&str] = &["/api/v1/tasks", "/api/v1/audit"];
    const ENDPOINTS: &[(&str, &str)] = &[
        ("GET", "/api/v1/tasks/{}"),
        ("POST", "/api/v1/tasks/{}/cancel"),
        ("POST", "/api/v1/tasks/{}/resume"),
        ("POST", "/api/v1/tasks/{}/replay"),
        ("POST", "/api/v1/queues/{}/pause"),
        ("POST", "/api/v1/queues/{}/resume"),
    ];
    const POSTS: &[&str] = &["replay", "cancel", "resume"];

    fn probe() -> impl Strategy<Value = Probe> {
        let list =
            (proptest::sample::select(LISTS), query(), token()).prop_map(|(path, q, token)| {
                Probe {
                    kind: "query",
                    method: "GET",
                    path: format!("{path}?{q}"),
                    token,
                    content_type: None,
                    body: Vec::new(),
                }
            });
        let segment = prop_oneof![
            3 => text().prop_map(|s| encode(&s)),
            1 => "[A-Za-z0-9%!$&'()*+,;=:@._~-]{0,30}",
        ];
        let path = (proptest::sample::select(ENDPOINTS), segment, token()).prop_map(
            |((method, template), seg, token)| Probe {
                kind: "segment",
                method,
                path: template.replace("{}", &seg),
                token,
                content_type: None,
                body: Vec::new(),
            },
        );
        let target = prop_oneof![
            Just("d1".to_owned()),
            Just("a1".to_owned()),
            Just("c1".to_owned()),
            Just("nope".to_owned()),
            "[a-z0-9]{1,8}",
        ];
        let bodies = (target, proptest::sample::select(POSTS), body(), token()).prop_map(
            |(id, action, (content_type, body), token)| Probe {
                kind: "body",
                method: "POST",
                path: format!("/api/v1/tasks/{id}/{action}"),
                token,
                content_type,
                body,
            },
        );
        prop_oneof![list, path, bodies]
    }

    /// Sends `cases` arbitrary requests; a 5xx, a non-JSON answer or a 4xx without
    /// `{code, message}` fails (and proptest shrinks it to the smallest such request).
    pub(super) fn run(
        handle: &tokio::runtime::Handle,
        server: &Server,
    ) -> Result<Figures, taskgate::BoxError> {
        let cases =
            std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(600);
        let config = Config { cases, failure_persistence: None, ..Config::default() };
        let figures = Mutex::new(Figures::default());
        let mut runner = TestRunner::new(config);
        let outcome = runner.run(&probe(), |p| {
            let (status, body) = handle.block_on(server.request(
                p.method,
                &p.path,
                p.token,
                p.content_type.as_deref(),
                p.body.clone(),
            ));
            let mut f = figures.lock().unwrap_or_else(|e| e.into_inner());
            f.requests += 1;
            *f.by_kind.entry(p.kind).or_default() += 1;
            *f.by_status.entry(status).or_default() += 1;
            if status >= 500 {
                f.server_errors += 1;
            }
            drop(f);
            prop_assert!((200..500).contains(&status), "{p:?}: {status} {body}");
            if status >= 400 {
                let code = body["code"].as_str().unwrap_or_default();
                let message = body["message"].as_str().unwrap_or_default();
                prop_assert!(!code.is_empty() && !message.is_empty(), "{p:?}: {status} {body}");
            }
            Ok(())
        });
        let figures = figures.into_inner().unwrap_or_else(|e| e.into_inner());
        match outcome {
            Ok(()) => Ok(figures),
            Err(e) => Err(format!("{e} after {figures}").into()),
        }
    }
}

/// The console's files: served without a token (they hold no data) from the binary, with the
/// headers that keep the page to its own script, style and API (snapshot of the page's status
/// and headers, `date` and `content-length` aside); `/` and `/console` lead to it; the API still wants a token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_files() {
    run(Arc::new(taskgate_memory::testing::MemoryFactory), |broker| async move {
        let server = Server::start(broker, config()).await;
        let (status, headers, body) = server.fetch("/console/").await;
        let headers: Vec<(String, String)> =
            headers.into_iter().filter(|(k, _)| k != "date" && k != "content-length").collect();
        insta::assert_debug_snapshot!("console_index", (status, headers));
        assert_eq!(body, include_bytes!("../console/index.html"), "the embedded page");
        for (path, content_type, file) in [
            (
                "/console/console.js",
                "text/javascript; charset=utf-8",
                &include_bytes!("../console/console.js")[..],
            ),
            (
                "/console/console.css",
                "text/css; charset=utf-8",
                &include_bytes!("../console/console.css")[..],
            ),
        ] {
            let (status, headers, body) = server.fetch(path).await;
            let header =
                |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
            assert_eq!((status, header("content-type")), (200, Some(content_type)), "{path}");
            assert!(header("content-security-policy").is_some(), "{path}: a policy");
            assert_eq!(body, file, "{path}: the embedded file");
        }
        for path in ["/", "/console"] {
            let (status, headers, _) = server.fetch(path).await;
            let location = headers.iter().find(|(k, _)| k == "location").map(|(_, v)| v.as_str());
            assert_eq!((status, location), (303, Some("console/")), "{path}");
        }
        let (status, body) = server.get("/api/v1/tasks", None).await;
        assert_eq!((status, body["code"].as_str()), (401, Some("auth.missing")), "{body}");
        let (status, _, _) = server.fetch("/console/nothing.js").await;
        assert_eq!(status, 404, "only the three files");
        server.stop().await;
        Ok(())
    })
    .await;
}
