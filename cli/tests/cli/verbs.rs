//! Every operator verb through the built binary, on SQLite, PostgreSQL and MariaDB: the test
//! enqueues through the library, runs the verb, and checks both what it printed (insta
//! snapshots shared by every backend: the output must not depend on the backend) and what the
//! database holds afterwards.

use rstest::rstest;
use taskgate::{AuditQuery, Failure, Filter, Status, Task};

use crate::common::{filters, json, scrub, tg, Run, TestDb};

/// Asserts a successful run and returns it.
fn ok(run: Run) -> Run {
    assert_eq!(run.code, 0, "stdout: {}\nstderr: {}", run.stdout, run.stderr);
    run
}

/// Asserts a run that failed with `code` and returns its error text.
fn fails(run: Run, code: i32) -> String {
    assert_eq!(run.code, code, "stdout: {}\nstderr: {}", run.stdout, run.stderr);
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    run.stderr
}

macro_rules! snap {
    ($name:expr, $text:expr) => {
        insta::with_settings!({ filters => filters(), prepend_module_to_snapshot => false }, {
            insta::assert_snapshot!($name, $text);
        })
    };
}

#[rstest]
#[case::sqlite("sqlite")]
#[case::postgres("postgres")]
#[case::mysql("mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_verbs(#[case] backend: &'static str) {
    let Some(db) = TestDb::new(backend).await else { return };
    brokertest::within(brokertest::TEST_LIMIT, "the verbs scenario", scenario(&db)).await;
    db.remove().await;
}

async fn scenario(db: &TestDb) {
    let names: Vec<(&str, &str)> = vec![(&db.url, "url")];
    let clean = |text: &str| scrub(text, &db.prefix, &names);

    // No schema yet: every verb but `migrate` refuses, and `migrate` creates it.
    let refused = fails(tg(db, &["list"]), 1);
    match db.backend {
        "sqlite" => assert!(refused.contains("no SQLite database at"), "{refused}"),
        _ => assert!(refused.contains("no taskgate schema with prefix"), "{refused}"),
    }
    snap!("migrate_apply", clean(&ok(tg(db, &["migrate"])).stdout));
    snap!("migrate_again", clean(&ok(tg(db, &["migrate"])).stdout));
    snap!("migrate_status_json", clean(&ok(tg(db, &["--json", "migrate", "--status"])).stdout));

    // Three tasks through the library: one pending, one failed, one completed.
    let broker = db.broker().await;
    let mut email = Task::new("email", "mail");
    email.payload = Some(br#"{"to":"ops@example.com"}"#.to_vec());
    email.owner = "billing".into();
    let email = broker.enqueue(&email).await.expect("enqueue email");
    let mut report = Task::new("report", "reports");
    report.payload = Some(vec![0xff, 0x00, 0x01]);
    report.max_retry = 2;
    let report = broker.enqueue(&report).await.expect("enqueue report");
    let mut invoice = Task::new("invoice", "billing");
    invoice.business_key = "inv-42".into();
    let invoice = broker.enqueue(&invoice).await.expect("enqueue invoice");
    let claimed = broker.try_dequeue(&["reports"]).await.expect("claim").expect("a report");
    broker
        .fail(&claimed.id, &claimed.lease_token, Failure::skip("printer on fire"))
        .await
        .expect("fail");
    let claimed = broker.try_dequeue(&["billing"]).await.expect("claim").expect("an invoice");
    broker.ack(&claimed.id, &claimed.lease_token, Some(b"ok".to_vec())).await.expect("ack");
    let names: Vec<(&str, &str)> = vec![
        (&db.url, "url"),
        (&email.id, "email"),
        (&report.id, "report"),
        (&invoice.id, "invoice"),
    ];
    let clean = |text: &str| scrub(text, &db.prefix, &names);

    // list, with filters.
    snap!("list", clean(&ok(tg(db, &["list"])).stdout));
    snap!("list_json", clean(&ok(tg(db, &["--json", "list"])).stdout));
    let failed = ok(tg(db, &["list", "--status", "failed"])).stdout;
    assert!(failed.contains(&report.id) && !failed.contains(&email.id), "{failed}");
    let mail = json(&ok(tg(db, &["list", "--queue", "mail", "--json"])));
    assert_eq!(mail["tasks"].as_array().map(Vec::len), Some(1), "{mail}");
    assert_eq!(mail["tasks"][0]["id"], email.id.as_str());
    let paged = json(&ok(tg(db, &["--json", "list", "--limit", "1", "--offset", "1"])));
    assert_eq!(paged["tasks"][0]["id"], report.id.as_str(), "{paged}");
    let by_owner = json(&ok(tg(db, &["--json", "list", "--owner", "billing", "--type", "email"])));
    assert_eq!(by_owner["tasks"].as_array().map(Vec::len), Some(1), "{by_owner}");

    // get.
    snap!("get_failed", clean(&ok(tg(db, &["get", &report.id])).stdout));
    // `--json get` prints the admin API's task view (its shape: the shared snapshot of
    // serve.rs's `json_task_is_the_api_task_view`).
    let got = json(&ok(tg(db, &["get", "--json", &email.id])));
    assert_eq!(got["payload"], serde_json::json!({"to": "ops@example.com"}), "{got}");
    assert_eq!(
        (&got["payload_encoding"], &got["parents"]),
        (&"json".into(), &serde_json::json!([]))
    );
    assert_eq!((&got["children"], &got["more_children"]), (&serde_json::json!([]), &false.into()));

    // resume: failed → pending under the same ID.
    snap!("resume", clean(&ok(tg(db, &["resume", &report.id])).stdout));
    let resumed = broker.get(&report.id).await.expect("get report");
    assert_eq!((resumed.status, resumed.resumes), (Status::Pending, 1));
    let again = fails(tg(db, &["resume", &report.id]), 1);
    snap!("resume_pending_refused", clean(&again));

    // cancel: pending → canceled; a second cancel is refused.
    snap!("cancel", clean(&ok(tg(db, &["cancel", &email.id])).stdout));
    assert_eq!(broker.get(&email.id).await.expect("get email").status, Status::Canceled);
    snap!("cancel_final_refused", clean(&fails(tg(db, &["cancel", &email.id]), 1)));

    // replay: a completed execution needs --allow-completed; by key it replays the tail.
    snap!("replay_completed_refused", clean(&fails(tg(db, &["replay", &invoice.id]), 1)));
    let replayed = json(&ok(tg(db, &["--json", "replay", "--key", "inv-42", "--allow-completed"])));
    let chain = broker
        .list(&Filter { business_key: "inv-42".into(), ..Filter::default() })
        .await
        .expect("list chain");
    assert_eq!(chain.len(), 2);
    assert_eq!(chain[1].replay_of, invoice.id);
    assert_eq!(replayed["id"], chain[1].id.as_str());
    assert_eq!(replayed["status"], "pending");
    let forked = fails(tg(db, &["replay", &invoice.id, "--allow-completed"]), 1);
    assert!(forked.contains("execution already replayed") && forked.contains("--key"), "{forked}");

    // pause / unpause.
    ok(tg(db, &["pause", "mail", "reports"]));
    assert_eq!(broker.paused_queues().await.expect("paused"), ["mail", "reports"]);
    snap!("unpause_json", clean(&ok(tg(db, &["--json", "unpause", "reports"])).stdout));
    assert_eq!(broker.paused_queues().await.expect("paused"), ["mail"]);

    // stats.
    snap!("stats", clean(&ok(tg(db, &["stats", "--queue", "reports", "--queue", "mail"])).stdout));
    let stats = json(&ok(tg(db, &["--json", "stats", "--queue", "reports"])));
    assert_eq!(stats["counts"]["invoice"]["completed"], 1, "{stats}");
    assert_eq!(stats["counts"]["invoice"]["pending"], 1, "{stats}");
    assert_eq!(stats["totals"]["canceled"], 1, "{stats}");
    assert_eq!(stats["queue_lengths"]["reports"], 1, "{stats}");
    assert_eq!(stats["paused_queues"], serde_json::json!(["mail"]));

    // prune: the canceled email goes; the keyed invoice chain stays without --include-keyed.
    snap!("prune_none", clean(&ok(tg(db, &["prune", "--older-than", "7d"])).stdout));
    snap!("prune", clean(&ok(tg(db, &["prune", "--before", "2999-01-01T00:00:00Z"])).stdout));
    assert!(matches!(broker.get(&email.id).await, Err(taskgate::Error::NotFound { .. })));
    assert_eq!(broker.get(&invoice.id).await.expect("invoice kept").status, Status::Completed);
    snap!("get_unknown", clean(&fails(tg(db, &["get", &email.id]), 1)));

    // cancel of a running task: only requested; the worker's final write makes it canceled.
    let long = broker.enqueue(&Task::new("long", "work")).await.expect("enqueue long");
    let running = broker.try_dequeue(&["work"]).await.expect("claim").expect("the long task");
    let said = ok(tg(db, &["cancel", &long.id])).stdout;
    assert_eq!(said, format!("cancel requested for {}: it is running; its worker stops it and finishes it as canceled\n", long.id));
    let stored = broker.get(&long.id).await.expect("get long");
    assert_eq!((stored.status, stored.cancel_requested), (Status::Running, true));
    let listed = json(&ok(tg(db, &["--json", "list", "--status", "running"])));
    assert_eq!(listed["tasks"][0]["cancel_requested"], true, "{listed}");
    broker.finish_canceled(&long.id, &running.lease_token).await.expect("finish canceled");
    assert_eq!(broker.get(&long.id).await.expect("get long").status, Status::Canceled);

    // Leases: a running task shows its deadline and its last heartbeat; one whose worker
    // stopped heart-beating (a 1 s lease, 2 s ago, no heartbeat since the claim) is marked
    // expired until the reaper takes it.
    let short = db
        .broker_with(taskgate::BrokerOptions {
            default_lease_ttl: std::time::Duration::from_secs(1),
            ..taskgate::BrokerOptions::default()
        })
        .await;
    let dead = broker.enqueue(&Task::new("crawl", "dead")).await.expect("enqueue dead");
    short.try_dequeue(&["dead"]).await.expect("claim").expect("the dead task");
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let live = broker.enqueue(&Task::new("crawl", "live")).await.expect("enqueue live");
    let beating = broker.try_dequeue(&["live"]).await.expect("claim").expect("the live task");
    broker.heartbeat(&live.id, &beating.lease_token).await.expect("heartbeat live");
    let names: Vec<(&str, &str)> = vec![(&dead.id, "dead"), (&live.id, "live")];
    let clean = |text: &str| scrub(text, &db.prefix, &names);
    snap!("get_lease_expired", clean(&ok(tg(db, &["get", &dead.id])).stdout));
    snap!("get_lease_live", clean(&ok(tg(db, &["get", &live.id])).stdout));
    // (No snapshot: the column widths follow the seconds the list happens to print.)
    let listed = ok(tg(db, &["list", "--status", "running"])).stdout;
    let dead_row = listed.lines().find(|l| l.starts_with(&dead.id)).unwrap_or_default();
    assert!(dead_row.contains("running (lease expired "), "{listed}");
    assert!(dead_row.contains(" none "), "no heartbeat since the claim: {listed}");
    let live_row = listed.lines().find(|l| l.starts_with(&live.id)).unwrap_or_default();
    assert!(live_row.contains("running") && !live_row.contains("expired"), "{listed}");
    assert!(live_row.contains(" s ago "), "the heartbeat's age: {listed}");
    let shown = json(&ok(tg(db, &["--json", "get", &live.id])));
    let deadline = broker.get(&live.id).await.expect("get live").lease_expires_at;
    assert_eq!(shown["lease_expires_at"], deadline.map(|t| t.to_string()).unwrap_or_default());
    let beat = broker.get(&live.id).await.expect("get live").last_heartbeat_at;
    assert!(beat.is_some(), "the heartbeat is stored");
    assert_eq!(shown["last_heartbeat_at"], beat.map(|t| t.to_string()).unwrap_or_default());
    let silent = json(&ok(tg(db, &["--json", "get", &dead.id])));
    assert_eq!(silent["last_heartbeat_at"], serde_json::Value::Null, "{silent}");
    short.close().await.expect("close the short-lease handle");

    audit(db, &broker, &email.id, &report.id, &long.id).await;
    broker.close().await.expect("close");
}

/// Every CLI mutation above went through `Broker::audited`: one record each, naming the OS
/// user (`cli:<user>`); `--actor` names someone else; a bad actor writes nothing; `taskgate
/// audit` lists and filters the records.
async fn audit(
    db: &TestDb,
    broker: &std::sync::Arc<dyn taskgate::Broker>,
    email: &str,
    report: &str,
    long: &str,
) {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    let me = format!("cli:{user}");
    let records = broker.audit_log(&AuditQuery::default()).await.expect("audit log");
    assert!(records.iter().all(|r| r.actor == me), "every record names {me}: {records:?}");
    let mut done: Vec<(String, String)> = records
        .iter()
        .filter(|r| r.outcome == "ok")
        .map(|r| (r.action.clone(), r.target.clone()))
        .collect();
    done.sort();
    let mut expected: Vec<(String, String)> = [
        ("cancel", format!("task:{email}")),
        ("cancel", format!("task:{long}")),
        ("pause_queue", "queue:mail".to_owned()),
        ("pause_queue", "queue:reports".to_owned()),
        ("replay", "key:inv-42".to_owned()),
        ("resume", format!("task:{report}")),
        ("resume_queue", "queue:reports".to_owned()),
    ]
    .into_iter()
    .map(|(a, t)| (a.to_owned(), t))
    .collect();
    expected.sort();
    assert_eq!(done, expected, "one ok record per CLI mutation");
    let refused: Vec<&str> =
        records.iter().filter(|r| r.outcome != "ok").map(|r| r.outcome.as_str()).collect();
    assert!(refused.contains(&"task.already_final"), "the second cancel is recorded: {refused:?}");

    ok(tg(db, &["--actor", "ops:bob", "pause", "audited"]));
    let bob = json(&ok(tg(db, &["--json", "audit", "--by", "ops:bob"])));
    let bob = bob["records"].as_array().cloned().unwrap_or_default();
    assert_eq!(bob.len(), 1, "{bob:?}");
    assert_eq!(
        (&bob[0]["action"], &bob[0]["target"], &bob[0]["outcome"]),
        (
            &serde_json::json!("pause_queue"),
            &serde_json::json!("queue:audited"),
            &serde_json::json!("ok")
        )
    );
    let bad = fails(tg(db, &["--actor", "bad\u{1}actor", "pause", "never"]), 1);
    assert!(bad.contains("invalid actor"), "{bad}");
    assert!(!broker.paused_queues().await.expect("paused").contains(&"never".to_owned()));
    let cancels = json(&ok(tg(
        db,
        &["--json", "audit", "--action", "cancel", "--target", &format!("task:{email}")],
    )));
    assert_eq!(cancels["records"].as_array().map(Vec::len), Some(2), "{cancels}");
    let human = ok(tg(db, &["audit", "--limit", "1"])).stdout;
    assert!(
        human.starts_with("AT") && human.contains("ops:bob") && human.contains("queue:audited"),
        "{human}"
    );
    assert_eq!(human.lines().count(), 2, "a header and one record: {human}");
}
