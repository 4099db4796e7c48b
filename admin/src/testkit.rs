//! The admin API's access rules as named tests any backend runs (feature `testkit`), like
//! `brokertest`'s cases for the broker contract.
//!
//! Each rule is a documented `pub async fn` that takes a [`Target`] — an admin API listening
//! on a socket with [`TOKEN_SPECS`]' tokens, and a broker handle on the same storage to seed
//! tasks and see what changed — and sends real HTTP/1.1 requests to it. Every rule walks
//! [`endpoints`](crate::endpoints), the router's own table, so an endpoint added later is held
//! to the rules without touching them. A backend's tests run them all with one line:
//!
//! ```ignore
//! taskgate_admin::admin_rule_tests!(taskgate_sqlite::testing::SqliteFactory::new());
//! ```
//!
//! which expands to one `#[tokio::test]` per rule (`read_token_cannot_mutate` …), each on
//! fresh storage behind [`serve`](crate::serve) on `127.0.0.1:0`. A process serving the API
//! another way (`taskgate serve`) runs [`RULES`] against its own [`Target`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use taskgate::{AuditQuery, BoxError, BoxFuture, Broker, BrokerOptions, Filter, Status, Task};
use tokio::net::TcpStream;

use crate::{endpoints, Access, AdminConfig, Endpoint, Reach};

/// What a rule returns: `Ok` when the API kept it.
pub type RuleResult = Result<(), BoxError>;

/// The write token's secret.
pub const WRITE_SECRET: &str = "rules-write-secret-0123456789";
/// The read token's secret.
pub const READ_SECRET: &str = "rules-read-secret-0123456789";
/// The owner-bound (write) token's secret.
pub const OWNER_SECRET: &str = "rules-owner-secret-0123456789";
/// The owner the owner-bound token is bound to.
pub const OWNER: &str = "alice";
/// The tokens a [`Target`] accepts, as `--token` specs (`name:scope[@owner]=secret`).
pub const TOKEN_SPECS: [&str; 3] = [
    "rules-write:write=rules-write-secret-0123456789",
    "rules-read:read=rules-read-secret-0123456789",
    "rules-alice:write@alice=rules-owner-secret-0123456789",
];

/// The longest one request may take (a hang detector, not a timing assertion).
const REQUEST_LIMIT: Duration = Duration::from_secs(30);
/// The longest one rule may take.
pub const RULE_LIMIT: Duration = Duration::from_secs(120);

/// [`TOKEN_SPECS`] as a configuration.
pub fn config() -> AdminConfig {
    // The specs are constants that parse (the rule tests prove it); an error here is a bug in
    // this module, reported as an empty configuration whose every request is a 401.
    AdminConfig::from_specs(TOKEN_SPECS).unwrap_or_default()
}

/// An admin API under test: its address, and a broker handle on its storage (initialised).
pub struct Target {
    addr: SocketAddr,
    broker: Arc<dyn Broker>,
}

/// One answer: the status and the body (JSON, else `null`).
#[derive(Debug)]
struct Answer {
    status: u16,
    body: Value,
}

impl Target {
    /// The API at `addr`, accepting [`TOKEN_SPECS`], over the storage `broker` reaches.
    pub fn new(addr: SocketAddr, broker: Arc<dyn Broker>) -> Target {
        Target { addr, broker }
    }

    /// Sends `method path` with `Authorization: Bearer <secret>` (none when `secret` is
    /// `None`) on a new connection.
    async fn send(
        &self,
        method: &str,
        path: &str,
        secret: Option<&[u8]>,
    ) -> Result<Answer, BoxError> {
        let exchange = async {
            let stream = TcpStream::connect(self.addr).await?;
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
            tokio::spawn(conn);
            let mut request = Request::builder().method(method).uri(path).header("host", "rules");
            if let Some(secret) = secret {
                let mut value = b"Bearer ".to_vec();
                value.extend_from_slice(secret);
                request = request.header("authorization", value);
            }
            let response = sender.send_request(request.body(Full::new(Bytes::new()))?).await?;
            let status = response.status().as_u16();
            let bytes = response.into_body().collect().await?.to_bytes();
            let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            Ok::<_, BoxError>(Answer { status, body })
        };
        match tokio::time::timeout(REQUEST_LIMIT, exchange).await {
            Ok(answer) => answer,
            Err(_) => Err(format!("{method} {path}: no answer within {REQUEST_LIMIT:?}").into()),
        }
    }

    /// How many audit records the storage holds.
    async fn audit_rows(&self) -> Result<usize, BoxError> {
        Ok(self.broker.audit_log(&AuditQuery::default()).await?.len())
    }

    /// Enqueues a task of queue `queue` (owned by `owner` unless empty); returns its ID.
    async fn seed(&self, queue: &str, owner: &str) -> Result<String, BoxError> {
        let mut task = Task::new("rules", queue);
        if !owner.is_empty() {
            task = task.with_owner(owner);
        }
        Ok(self.broker.enqueue(&task).await?.id)
    }

    /// What a rule checks is unchanged: each task's status and cancel request, the paused
    /// queues, how many tasks and audit records there are.
    async fn snapshot(&self, ids: &[&str]) -> Result<Value, BoxError> {
        let mut tasks = Vec::new();
        for id in ids {
            let t = self.broker.get(id).await?;
            tasks.push(serde_json::json!([t.id, t.status.as_str(), t.cancel_requested]));
        }
        let all = self.broker.list(&Filter::default()).await?.len();
        Ok(serde_json::json!({
            "tasks": tasks,
            "paused": self.broker.paused_queues().await?,
            "task_count": all,
            "audit_rows": self.audit_rows().await?,
        }))
    }
}

/// `endpoint`'s path with `{id}` and `{queue}` filled in; an unknown placeholder is an error
/// (a new endpoint this kit must learn to fill).
fn concrete(endpoint: &Endpoint, id: &str, queue: &str) -> Result<String, BoxError> {
    let path = endpoint.path.replace("{id}", id).replace("{queue}", queue);
    match path.contains('{') {
        true => Err(format!("{}: a path segment this kit cannot fill", endpoint.path).into()),
        false => Ok(path),
    }
}

/// The endpoints that need a token, with `keep`.
fn guarded(keep: impl Fn(&Endpoint) -> bool) -> Result<Vec<Endpoint>, BoxError> {
    let list: Vec<Endpoint> =
        endpoints().into_iter().filter(|e| e.access != Access::Public && keep(e)).collect();
    match list.is_empty() {
        true => Err("no endpoint of this kind: the rule would check nothing".into()),
        false => Ok(list),
    }
}

fn expect(what: &str, got: &Answer, status: u16, code: &str) -> RuleResult {
    if got.status == status && got.body["code"].as_str() == Some(code) {
        return Ok(());
    }
    Err(format!("{what}: expected {status} {code}, got {} {}", got.status, got.body).into())
}

/// A read token cannot mutate: every write endpoint of the router answers a read token
/// 403 `auth.forbidden` and changes nothing (the task, the queue's pause, the number of tasks,
/// no audit record) — on a pending task the write token then cancels, so the refusal was the
/// token's scope, not the task's state. Every write endpoint is a `POST` and every `POST` is a
/// write endpoint.
pub async fn read_token_cannot_mutate(target: &Target) -> RuleResult {
    for e in endpoints() {
        if (e.method == crate::Method::Post) != (e.access == Access::Write) {
            return Err(
                format!("{} {}: POST and write scope disagree", e.method.as_str(), e.path).into()
            );
        }
    }
    let queue = "rules-read-only";
    let id = target.seed(queue, "").await?;
    let before = target.snapshot(&[&id]).await?;
    for e in guarded(|e| e.access == Access::Write)? {
        let path = concrete(&e, &id, queue)?;
        let what = format!("{} {path} with the read token", e.method.as_str());
        let got = target.send(e.method.as_str(), &path, Some(READ_SECRET.as_bytes())).await?;
        expect(&what, &got, 403, "auth.forbidden")?;
        let after = target.snapshot(&[&id]).await?;
        if after != before {
            return Err(format!("{what} changed {before} into {after}").into());
        }
    }
    let path = format!("/api/v1/tasks/{id}/cancel");
    let got = target.send("POST", &path, Some(WRITE_SECRET.as_bytes())).await?;
    if got.status != 200 || target.broker.get(&id).await?.status != Status::Canceled {
        return Err(
            format!("the write token could not cancel {id}: {} {}", got.status, got.body).into()
        );
    }
    Ok(())
}

/// An owner-bound token gets the same 404 as a missing task on every task endpoint: another
/// owner's task and an ownerless one answer exactly what an ID never stored answers
/// (`task.not_found`, `task not found: <id>`), whatever the endpoint, and nothing changes;
/// the token reads its own owner's task.
pub async fn owner_bound_token_sees_404_like_missing(target: &Target) -> RuleResult {
    let queue = "rules-owner-tasks";
    let own = target.seed(queue, OWNER).await?;
    let bobs = target.seed(queue, "bob").await?;
    let nobodys = target.seed(queue, "").await?;
    let missing = format!("{own}-never-stored");
    let before = target.snapshot(&[&own, &bobs, &nobodys]).await?;
    let secret = Some(OWNER_SECRET.as_bytes());
    for e in guarded(|e| e.reach == Reach::Task)? {
        let method = e.method.as_str();
        let path = concrete(&e, &missing, queue)?;
        let absent = target.send(method, &path, secret).await?;
        expect(&format!("{method} {path} (missing)"), &absent, 404, "task.not_found")?;
        let expected = absent.body["message"].as_str().unwrap_or_default();
        if expected != format!("task not found: {missing}") {
            return Err(format!("{method} {path}: message {expected:?}").into());
        }
        for alien in [&bobs, &nobodys] {
            let path = concrete(&e, alien, queue)?;
            let got = target.send(method, &path, secret).await?;
            let alike = expected.replace(&missing, alien);
            let same = got.status == absent.status
                && got.body["code"] == absent.body["code"]
                && got.body["message"].as_str() == Some(&*alike)
                && got.body.as_object().map(|o| o.len())
                    == absent.body.as_object().map(|o| o.len());
            if !same {
                return Err(format!(
                    "{method} {path} with the owner-bound token: {} {}, not the 404 of a \
                     missing task ({} {})",
                    got.status, got.body, absent.status, absent.body
                )
                .into());
            }
        }
    }
    let after = target.snapshot(&[&own, &bobs, &nobodys]).await?;
    if after != before {
        return Err(format!("refused requests changed {before} into {after}").into());
    }
    let got = target.send("GET", &format!("/api/v1/tasks/{own}"), secret).await?;
    if got.status != 200 || got.body["id"].as_str() != Some(&*own) {
        return Err(format!("the owner-bound token cannot read its own task: {}", got.body).into());
    }
    Ok(())
}

/// An owner-bound token gets 403 `auth.forbidden` on every endpoint that spans every owner
/// (queues, queue pause and resume, stats, audit), and nothing changes; an unbound token
/// reads them.
pub async fn owner_bound_token_403_on_queues_stats_audit(target: &Target) -> RuleResult {
    let queue = "rules-owner-queues";
    let own = target.seed(queue, OWNER).await?;
    let before = target.snapshot(&[&own]).await?;
    for e in guarded(|e| e.reach == Reach::AllOwners)? {
        let method = e.method.as_str();
        let path = concrete(&e, &own, queue)?;
        let got = target.send(method, &path, Some(OWNER_SECRET.as_bytes())).await?;
        expect(
            &format!("{method} {path} with the owner-bound token"),
            &got,
            403,
            "auth.forbidden",
        )?;
        if e.access == Access::Read {
            let got = target.send(method, &path, Some(READ_SECRET.as_bytes())).await?;
            if got.status != 200 {
                return Err(format!("{method} {path}: the read token gets {}", got.status).into());
            }
        }
    }
    let after = target.snapshot(&[&own]).await?;
    match after == before {
        true => Ok(()),
        false => Err(format!("refused requests changed {before} into {after}").into()),
    }
}

/// The near misses of `secret`: a prefix, a suffix, one byte more, and one byte changed at
/// its start, middle and end.
fn near_misses(secret: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut out = vec![
        ("the secret less its last byte".to_owned(), secret[..secret.len() - 1].to_vec()),
        ("the secret less its first byte".to_owned(), secret[1..].to_vec()),
        ("the secret and one byte more".to_owned(), [secret, b"x"].concat()),
    ];
    for at in [0, secret.len() / 2, secret.len() - 1] {
        let mut off = secret.to_vec();
        off[at] = if off[at] == b'z' { b'y' } else { b'z' };
        out.push((format!("byte {at} changed"), off));
    }
    out
}

/// A prefix, a suffix, one byte more or one byte off of any configured secret is 401
/// `auth.invalid` on every endpoint that needs a token, and writes nothing; the secret
/// itself is accepted there (no 401).
pub async fn near_miss_secrets_are_401(target: &Target) -> RuleResult {
    let queue = "rules-near-miss";
    let id = target.seed(queue, OWNER).await?;
    let before = target.snapshot(&[&id]).await?;
    let list = guarded(|_| true)?;
    for secret in [WRITE_SECRET, READ_SECRET, OWNER_SECRET] {
        for (how, wrong) in near_misses(secret.as_bytes()) {
            for e in &list {
                let method = e.method.as_str();
                let path = concrete(e, &id, queue)?;
                let got = target.send(method, &path, Some(&wrong)).await?;
                let what = format!("{method} {path} with {how} of {secret:?}");
                expect(&what, &got, 401, "auth.invalid")?;
            }
        }
    }
    let after = target.snapshot(&[&id]).await?;
    if after != before {
        return Err(format!("refused requests changed {before} into {after}").into());
    }
    // The exact secrets pass the token check (what follows is each endpoint's business).
    for secret in [WRITE_SECRET, READ_SECRET, OWNER_SECRET] {
        let got =
            target.send("GET", &format!("/api/v1/tasks/{id}"), Some(secret.as_bytes())).await?;
        if got.status == 401 {
            return Err(format!("{secret:?} itself is refused: {}", got.body).into());
        }
    }
    Ok(())
}

/// One rule: its stable name and how to run it.
#[derive(Clone, Copy)]
pub struct Rule {
    /// The stable test name.
    pub name: &'static str,
    /// Runs the rule against a target.
    pub run: for<'a> fn(&'a Target) -> BoxFuture<'a, RuleResult>,
}

impl std::fmt::Debug for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rule").field("name", &self.name).finish()
    }
}

/// Calls `$callback!` with the rule list, written once.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_admin_rules {
    ($callback:ident ! ($($arg:tt)*)) => {
        $crate::$callback! { ($($arg)*)
            read_token_cannot_mutate,
            owner_bound_token_sees_404_like_missing,
            owner_bound_token_403_on_queues_stats_audit,
            near_miss_secrets_are_401,
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __admin_rule_table {
    (() $($name:ident),* $(,)?) => {
        &[$($crate::testkit::Rule {
            name: stringify!($name),
            run: |target| Box::pin($crate::testkit::$name(target)),
        }),*]
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __admin_rule_fns {
    (($factory:expr) $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let factory: ::std::sync::Arc<dyn $crate::testkit::__Factory> =
                    ::std::sync::Arc::new($factory);
                $crate::testkit::run_rule_test(stringify!($name), factory).await;
            }
        )*
    };
}

#[doc(hidden)]
pub use brokertest::Factory as __Factory;

/// Expands to one `#[tokio::test]` per rule, each against `$factory` (evaluated afresh in
/// every test; the calling crate depends on `tokio` with `macros` and `rt-multi-thread`).
#[macro_export]
macro_rules! admin_rule_tests {
    ($factory:expr) => {
        $crate::__with_admin_rules!(__admin_rule_fns!($factory));
    };
}

/// Every rule, in order.
pub static RULES: &[Rule] = __with_admin_rules!(__admin_rule_table!());

/// Runs every rule against `target` in turn; the first failure names its rule.
pub async fn run_all(target: &Target) -> RuleResult {
    for rule in RULES {
        match tokio::time::timeout(RULE_LIMIT, (rule.run)(target)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(format!("{}: {e}", rule.name).into()),
            Err(_) => {
                return Err(format!("{}: did not finish within {RULE_LIMIT:?}", rule.name).into())
            }
        }
    }
    Ok(())
}

/// The body of one generated test: rule `name` on fresh storage of `factory`'s backend behind
/// [`serve`](crate::serve) on `127.0.0.1:0`; panics naming the backend and the rule when it
/// fails, skips loudly (or fails, with `TASKGATE_REQUIRE_DB=1`) when the backend is
/// unavailable.
pub async fn run_rule_test(name: &str, factory: Arc<dyn brokertest::Factory>) {
    let backend = factory.name();
    let Some(rule) = RULES.iter().find(|r| r.name == name) else {
        panic!("unknown admin rule {name}");
    };
    let storage = match brokertest::or_skip(&backend, factory.storage().await) {
        Ok(Some(storage)) => storage,
        Ok(None) => return,
        Err(e) => panic!("{backend}: {name}: no storage: {e}"),
    };
    let outcome = async {
        let broker = storage.handle().await?;
        broker.init(BrokerOptions::default()).await?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(crate::serve(listener, broker.clone(), config(), async move {
            let _ = stopped.await;
        }));
        let target = Target::new(addr, broker.clone());
        let result = match tokio::time::timeout(RULE_LIMIT, (rule.run)(&target)).await {
            Ok(result) => result,
            Err(_) => Err(format!("did not finish within {RULE_LIMIT:?}").into()),
        };
        let _ = stop.send(());
        let _ = tokio::time::timeout(REQUEST_LIMIT, server).await;
        let _ = broker.close().await;
        result
    }
    .await;
    let _ = storage.cleanup().await;
    if let Err(e) = outcome {
        panic!("{backend}: {name} failed: {e}");
    }
}
