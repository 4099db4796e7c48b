//! `taskgate serve` as a process on SQLite, PostgreSQL and MariaDB: it refuses to start without
//! a token, serves the admin API over a real socket (a read token reads, cancels need a write
//! token and leave an audit record), and stops with exit 0 on SIGINT.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::Duration;

use rstest::rstest;
use taskgate::{Status, Task};

use crate::common::{stop_child, taskgate, tg, TestDb, RUN_LIMIT};

const READ: &str = "ops-read:read=read-secret-0123456789";
const WRITE: &str = "ops-write:write=write-secret-0123456789";

/// One HTTP/1.1 request with `Connection: close`; returns the status code and the body.
fn http(addr: &str, method: &str, path: &str, secret: &str) -> (u16, serde_json::Value) {
    let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    stream.set_read_timeout(Some(Duration::from_secs(30))).expect("read timeout");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {secret}\r\n\
         Content-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).expect("send the request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read the response");
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        unchunk(body)
    } else {
        body.to_owned()
    };
    let json = serde_json::from_str(&body).unwrap_or(serde_json::Value::Null);
    (status, json)
}

/// The body of a chunked response.
fn unchunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else { break };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

#[rstest]
#[case::sqlite("sqlite")]
#[case::postgres("postgres")]
#[case::mysql("mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_over_a_socket_and_stops_on_sigint(#[case] backend: &'static str) {
    let Some(db) = TestDb::new(backend).await else { return };
    assert_eq!(tg(&db, &["migrate"]).code, 0, "migrate");
    let refused = tg(&db, &["serve", "--listen", "127.0.0.1:0"]);
    assert_eq!(refused.code, 1, "no token: {}", refused.stderr);
    assert!(refused.stderr.contains("--token"), "{}", refused.stderr);

    let broker = db.broker().await;
    let task = broker.enqueue(&Task::new("email", "mail")).await.expect("enqueue");
    let mut child = taskgate()
        .args(["serve", "--listen", "127.0.0.1:0", "--token", READ, "--token", WRITE])
        .env("TASKGATE_URL", &db.url)
        .env("TASKGATE_PREFIX", &db.prefix)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start taskgate serve");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let banner = lines.next().and_then(Result::ok).unwrap_or_default();
    let addr = banner
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no address in {banner:?}"))
        .to_owned();

    let (status, body) =
        http(&addr, "GET", &format!("/api/v1/tasks/{}", task.id), "read-secret-0123456789");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "pending", "{body}");
    let (status, body) =
        http(&addr, "POST", &format!("/api/v1/tasks/{}/cancel", task.id), "read-secret-0123456789");
    assert_eq!(status, 403, "a read token cannot cancel: {body}");
    let (status, body) = http(&addr, "GET", "/api/v1/stats", "wrong-secret-0123456789");
    assert_eq!(status, 401, "{body}");
    let (status, body) = http(
        &addr,
        "POST",
        &format!("/api/v1/tasks/{}/cancel", task.id),
        "write-secret-0123456789",
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(broker.get(&task.id).await.expect("get").status, Status::Canceled);
    let (status, body) = http(&addr, "GET", "/api/v1/audit", "write-secret-0123456789");
    assert_eq!(status, 200, "{body}");
    assert!(body.to_string().contains("ops-write"), "the cancel is audited: {body}");

    let code = stop_child(&mut child, true, RUN_LIMIT, "serve after SIGINT");
    assert_eq!(code, Some(0), "serve stops cleanly on SIGINT");
    broker.close().await.ok();
    db.remove().await;
}
