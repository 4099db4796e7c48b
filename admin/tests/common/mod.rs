//! The test server and client: the router on 127.0.0.1:0, a hyper HTTP/1 client, the backend
//! loop, and the scrubbing of generated IDs and times for snapshots. Several test binaries
//! share it, each using a part.
#![allow(dead_code, reason = "each test binary uses a different part of these helpers")]

use std::future::Future;
use std::sync::Arc;

use brokertest::Factory;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use taskgate::{BoxError, Broker, BrokerOptions};
use taskgate_admin::AdminConfig;
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Every request and the whole scenario get a deadline.
const REQUEST_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);
const SCENARIO_LIMIT: std::time::Duration = std::time::Duration::from_secs(300);

/// The admin API served on an ephemeral port.
pub(crate) struct Server {
    addr: std::net::SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Server {
    pub(crate) async fn start(broker: Arc<dyn Broker>, config: AdminConfig) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(taskgate_admin::serve(listener, broker, config, async move {
            let _ = stopped.await;
        }));
        Server { addr, stop: Some(stop), task }
    }

    /// The server's address.
    pub(crate) fn addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    /// The absolute URL of `path` on this server.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub(crate) async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let done = tokio::time::timeout(REQUEST_LIMIT, &mut self.task).await;
        done.expect("server stops").expect("server task").expect("server result");
    }

    /// Sends one request; returns the status and the body parsed as JSON (every answer is).
    pub(crate) async fn raw(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> (u16, Value) {
        tokio::time::timeout(REQUEST_LIMIT, self.send(method, path, token, body))
            .await
            .unwrap_or_else(|_| panic!("{method} {path}: no answer within {REQUEST_LIMIT:?}"))
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> (u16, Value) {
        let content_type = body.map(|_| "application/json");
        let body = body.unwrap_or_default().as_bytes().to_vec();
        self.request(method, path, token, content_type, body).await
    }

    /// Sends one request with any content type and body bytes; asserts the answer comes
    /// within the request limit, is not a 5xx and is JSON, and returns its status and body.
    pub(crate) async fn request(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> (u16, Value) {
        tokio::time::timeout(REQUEST_LIMIT, self.exchange(method, path, token, content_type, body))
            .await
            .unwrap_or_else(|_| panic!("{method} {path}: no answer within {REQUEST_LIMIT:?}"))
    }

    async fn exchange(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> (u16, Value) {
        let stream = TcpStream::connect(self.addr).await.expect("connect");
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.expect("handshake");
        tokio::spawn(conn);
        let mut request = Request::builder().method(method).uri(path).header("host", "test");
        if let Some(token) = token {
            let value =
                if token.contains(' ') { token.to_owned() } else { format!("Bearer {token}") };
            request = request.header("authorization", value);
        }
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        let request = request.body(Full::new(Bytes::from(body))).expect("request");
        let response = sender.send_request(request).await.expect("response");
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let bytes = response.into_body().collect().await.expect("body").to_bytes();
        assert!(status < 500, "{method} {path}: {status} {}", String::from_utf8_lossy(&bytes));
        assert_eq!(content_type, "application/json", "{method} {path}: every answer is JSON");
        let json = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            panic!("{method} {path}: not JSON ({e}): {}", String::from_utf8_lossy(&bytes))
        });
        (status, json)
    }

    /// A plain `GET` without a token, for the console's files: the status, the headers (names
    /// lowercase, in the order sent) and the body bytes.
    pub(crate) async fn fetch(&self, path: &str) -> (u16, Vec<(String, String)>, Vec<u8>) {
        let exchange = async {
            let stream = TcpStream::connect(self.addr).await.expect("connect");
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .expect("handshake");
            tokio::spawn(conn);
            let request = Request::builder()
                .uri(path)
                .header("host", "test")
                .body(Full::new(Bytes::new()))
                .expect("request");
            let response = sender.send_request(request).await.expect("response");
            let status = response.status().as_u16();
            let headers = response
                .headers()
                .iter()
                .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("<binary>").to_owned()))
                .collect();
            let body = response.into_body().collect().await.expect("body").to_bytes().to_vec();
            (status, headers, body)
        };
        tokio::time::timeout(REQUEST_LIMIT, exchange)
            .await
            .unwrap_or_else(|_| panic!("GET {path}: no answer within {REQUEST_LIMIT:?}"))
    }

    pub(crate) async fn get(&self, path: &str, token: Option<&str>) -> (u16, Value) {
        self.raw("GET", path, token, None).await
    }

    pub(crate) async fn post(
        &self,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> (u16, Value) {
        self.raw("POST", path, token, body).await
    }
}

/// `GET path` with bearer `token` on a new connection to `addr`; the answer's status.
pub(crate) async fn get_at(addr: std::net::SocketAddr, path: &str, token: &str) -> u16 {
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.expect("handshake");
    tokio::spawn(conn);
    let request = Request::builder()
        .uri(path)
        .header("host", "test")
        .header("authorization", format!("Bearer {token}"))
        .body(Full::new(Bytes::new()))
        .expect("request");
    let response = sender.send_request(request).await.expect("response");
    response.status().as_u16()
}

/// Runs `scenario` on a fresh initialised broker of `factory`'s backend; skips loudly (or
/// fails with `TASKGATE_REQUIRE_DB=1`) when its database is not reachable.
pub(crate) async fn run<F, Fut>(factory: Arc<dyn Factory>, scenario: F)
where
    F: FnOnce(Arc<dyn Broker>) -> Fut,
    Fut: Future<Output = Result<(), BoxError>>,
{
    let backend = factory.name();
    let storage = match brokertest::or_skip(&backend, factory.storage().await) {
        Ok(Some(storage)) => storage,
        Ok(None) => return,
        Err(e) => panic!("{backend}: no storage: {e}"),
    };
    let broker = storage.handle().await.expect("a handle");
    // Queue `lost` has a 1 s lease: a task claimed there and never heart-beaten shows a dead
    // worker's lease, expired (the console test).
    let options =
        BrokerOptions::default().with_lease_ttl("lost", std::time::Duration::from_secs(1));
    broker.init(options).await.expect("init");
    let outcome = tokio::time::timeout(SCENARIO_LIMIT, scenario(broker.clone())).await;
    let _ = broker.close().await;
    let _ = storage.cleanup().await;
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("{backend}: {e}"),
        Err(_) => panic!("{backend}: the scenario did not finish within {SCENARIO_LIMIT:?}"),
    }
}

/// Replaces what differs between runs and backends: times, ages, generated ULIDs (anywhere in
/// a string) and the backend's name.
pub(crate) fn scrub(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| {
                    let v = match k.as_str() {
                        "created_at" | "run_at" | "started_at" | "finished_at" | "at" | "now"
                            if !v.is_null() =>
                        {
                            Value::String("[time]".into())
                        }
                        "oldest_ready_age_ms" if !v.is_null() => Value::String("[age]".into()),
                        "backend" => Value::String("[backend]".into()),
                        _ => scrub(v),
                    };
                    (k, v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(scrub).collect()),
        Value::String(s) => Value::String(scrub_ulids(&s)),
        other => other,
    }
}

fn scrub_ulids(s: &str) -> String {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let bytes = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < bytes.len() {
        let run = bytes[i..].iter().take_while(|b| ALPHABET.contains(b)).count();
        if run == 26 {
            out.push_str("[ulid]");
            i += 26;
        } else if run > 0 {
            out.push_str(&s[i..i + run]);
            i += run;
        } else {
            let ch = s[i..].chars().next().unwrap_or_default();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}
