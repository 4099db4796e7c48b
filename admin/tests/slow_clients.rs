//! Slow and many clients against `serve` over a real socket (issue 38, item 4), on the memory
//! backend — what is tested is the HTTP layer, the same on every backend: a connection that
//! sends half a request line, headers without their blank line, or a body shorter than its
//! `Content-Length` is closed after its timeout; at most `max_connections` are open at once,
//! and a request queued behind them is answered once they close; a stop with a slow client
//! connected still returns.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::Server;
use taskgate::{Broker, BrokerOptions};
use taskgate_admin::{AdminConfig, Limits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const OPS: &str = "ops-secret-0123456789";
/// The short timeouts of these tests.
const SHORT: Duration = Duration::from_millis(300);
/// Longest a test waits for the server to close a connection or answer (a bound, not a
/// measure: the server does it after `SHORT`).
const BOUND: Duration = Duration::from_secs(20);

async fn broker() -> Arc<dyn Broker> {
    let broker: Arc<dyn Broker> = Arc::new(taskgate_memory::MemoryBroker::new());
    broker.init(BrokerOptions::default()).await.expect("init");
    broker
}

fn config(limits: Limits) -> AdminConfig {
    AdminConfig::from_specs([&*format!("ops:write={OPS}")]).expect("token").with_limits(limits)
}

fn short(max_connections: usize) -> Limits {
    Limits { header_timeout: SHORT, body_timeout: SHORT, max_connections }
}

/// A connection that has sent `bytes` and nothing more.
async fn slow(server: &Server, bytes: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(server.addr()).await.expect("connect");
    stream.write_all(bytes).await.expect("send");
    stream
}

/// Everything the server sends until it closes `stream`; fails when it is still open after
/// [`BOUND`].
async fn until_closed(mut stream: TcpStream, what: &str) -> String {
    let mut got = Vec::new();
    let read = tokio::time::timeout(BOUND, async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "{what}: the connection is still open after {BOUND:?}");
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_closed_after_their_timeout() {
    let server = Server::start(broker().await, config(short(64))).await;
    let half_line = slow(&server, b"GET /api/v1/sta").await;
    let no_blank_line = slow(
        &server,
        format!("GET /api/v1/stats HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {OPS}\r\n")
            .as_bytes(),
    )
    .await;
    let short_body = slow(
        &server,
        format!(
            "POST /api/v1/tasks/x/replay HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {OPS}\r\n\
             Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"allow"
        )
        .as_bytes(),
    )
    .await;
    let silent = slow(&server, b"").await;

    until_closed(half_line, "half a request line").await;
    until_closed(no_blank_line, "headers without the blank line").await;
    until_closed(silent, "a connection that sends nothing").await;
    let answer = until_closed(short_body, "a body shorter than its Content-Length").await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains(r#""code":"request.timeout""#), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("connection: close"), "{answer}");

    // A kept-alive connection idle after its answer is closed too.
    let mut idle = slow(
        &server,
        format!("GET /api/v1/stats HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {OPS}\r\n\r\n")
            .as_bytes(),
    )
    .await;
    let mut first = [0u8; 12];
    idle.read_exact(&mut first).await.expect("an answer");
    assert_eq!(&first, b"HTTP/1.1 200");
    until_closed(idle, "an idle kept-alive connection").await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_limit_wait_and_are_answered_when_one_closes() {
    let limits = Limits { header_timeout: Duration::from_secs(600), ..short(3) };
    let server = Server::start(broker().await, config(limits)).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(slow(&server, b"GET /api/v1/sta").await);
    }
    let queued = tokio::spawn({
        let url = server.addr();
        async move { common::get_at(url, "/api/v1/stats", OPS).await }
    });
    // The limit holds: no answer while the three connections are open.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!queued.is_finished(), "a fourth connection is not served while three are open");
    drop(held.pop());
    let status = tokio::time::timeout(BOUND, queued).await.expect("answered").expect("join");
    assert_eq!(status, 200);
    drop(held);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_behind_many_slow_clients_is_answered() {
    let server = Server::start(broker().await, config(short(16))).await;
    let mut slow_ones = Vec::new();
    for i in 0..40 {
        let bytes: &[u8] = if i % 2 == 0 { b"GET /api" } else { b"" };
        slow_ones.push(slow(&server, bytes).await);
    }
    let status = tokio::time::timeout(BOUND, common::get_at(server.addr(), "/api/v1/stats", OPS))
        .await
        .expect("answered behind 40 slow clients");
    assert_eq!(status, 200);
    for (i, stream) in slow_ones.into_iter().enumerate() {
        until_closed(stream, &format!("slow client {i}")).await;
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_returns_with_slow_clients_connected() {
    let server = Server::start(broker().await, config(short(8))).await;
    let _half = slow(&server, b"GET /api/v1/sta").await;
    let _silent = slow(&server, b"").await;
    // Let the server accept them before it is told to stop.
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.stop().await;
}
