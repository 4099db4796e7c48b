//! Init and close (contract §3.2, extensions §E10 case 30): every method is guarded.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use taskgate::{
    AckItem, Broker, Error, ErrorKind, Failure, Filter, PruneRequest, QuotaConfig, QuotaGate,
    ReplayRequest, Reservation, Status, Step, Timestamp,
};

use super::check::{expect_err, ids, stored_ids};
use crate::{spawn_dequeue_on, task, CaseResult, Factory, Harness, SAFETY_TIMEOUT};

/// Given a running task `live` (token T) and a failed task `done` on the storage, when every
/// Broker method (and a quota reserve) is called on a handle that was never initialised, then
/// each fails with `NotInitialized` and nothing changed; after `init` that handle works. When
/// the first handle closes, a blocked `dequeue` and `dequeue_many` return `Closed` within 5 s,
/// every method (`init` included) fails with `Closed`, nothing changed, and a second `close`
/// is `Ok`.
pub async fn c30_lifecycle(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    let token = setup(&h).await?;
    let raw = h.raw_handle().await?;
    check_every_method(&*raw, &token, ErrorKind::NotInitialized).await;
    check_quota(&*raw, ErrorKind::NotInitialized).await;
    check_unchanged(&*h.broker, &token).await?;
    raw.init(h.options()).await?;
    assert_eq!(raw.get("live").await?.lease_token, token, "live through the initialised handle");
    let early_gate = open_gate(&*h.broker)?;
    close_with_waiters(&h).await?;
    check_every_method(&*h.broker, &token, ErrorKind::Closed).await;
    check_quota(&*h.broker, ErrorKind::Closed).await;
    if let Some(gate) = early_gate {
        expect_err(bounded_reserve(&*gate).await, ErrorKind::Closed, "reserve on an earlier gate");
    }
    expect_err(h.broker.init(h.options()).await, ErrorKind::Closed, "init after close");
    h.broker.close().await?;
    check_unchanged(&*raw, &token).await?;
    h.finish().await
}

/// `live` running in q (returns its token) and `done` failed in qd.
async fn setup(h: &Harness) -> Result<String, Error> {
    h.enqueue(task("done", "t", "qd")).await;
    h.fail_by_id("qd", "done").await;
    h.enqueue(task("live", "t", "q")).await;
    Ok(h.dequeue(&["q"]).await.lease_token)
}

/// Nothing the guarded calls were asked to do happened.
async fn check_unchanged(b: &dyn Broker, token: &str) -> Result<(), Error> {
    let live = b.get("live").await?;
    assert_eq!((live.status, live.lease_token.as_str()), (Status::Running, token), "live changed");
    assert!(!live.cancel_requested, "live got a cancel request");
    assert_eq!(b.get("done").await?.status, Status::Failed, "done changed");
    assert_eq!(stored_ids(b).await?, ids(&["done", "live"]), "guarded calls stored tasks");
    assert!(b.paused_queues().await?.is_empty(), "a guarded pause_queue paused a queue");
    Ok(())
}

/// Starts a blocked `dequeue` and `dequeue_many`, closes the broker, and checks both return
/// `Closed` within 5 s.
async fn close_with_waiters(h: &Harness) -> Result<(), Error> {
    let mut one = spawn_dequeue_on(h.broker.clone(), &["qw"]);
    let broker = h.broker.clone();
    let many = tokio::spawn(async move { broker.dequeue_many(&["qw"], 5).await });
    one.still_blocked().await;
    assert!(!many.is_finished(), "dequeue_many on an empty queue returned");
    h.broker.close().await?;
    expect_err(one.result().await, ErrorKind::Closed, "blocked dequeue when the broker closed");
    let many = match tokio::time::timeout(SAFETY_TIMEOUT, many).await {
        Ok(Ok(result)) => result,
        Ok(Err(join)) => panic!("blocked dequeue_many panicked: {join}"),
        Err(_) => panic!("blocked dequeue_many still waiting {SAFETY_TIMEOUT:?} after close"),
    };
    expect_err(many, ErrorKind::Closed, "blocked dequeue_many when the broker closed");
    Ok(())
}

/// Calls every Broker method (except `init`, `close`, `backend`) with arguments that would
/// succeed on an open broker, and asserts each fails with `kind`.
async fn check_every_method(b: &dyn Broker, token: &str, kind: ErrorKind) {
    let mut wrong = Vec::new();
    for (name, outcome) in every_method(b, token).await {
        match outcome {
            Err(got) if got == kind => {}
            Err(got) => wrong.push(format!("{name}: {got}")),
            Ok(()) => wrong.push(format!("{name}: Ok")),
        }
    }
    assert!(wrong.is_empty(), "expected every method to fail with {kind}, but {wrong:?}");
}

type Outcome = (&'static str, Result<(), ErrorKind>);

async fn every_method(b: &dyn Broker, token: &str) -> Vec<Outcome> {
    let mut out = writes(b, token).await;
    out.extend(claims(b).await);
    out.extend(reads(b).await);
    out
}

async fn writes(b: &dyn Broker, token: &str) -> Vec<Outcome> {
    let item = AckItem { id: "live".into(), token: token.into(), result: None };
    vec![
        bounded("enqueue", b.enqueue(&task("lc-new", "t", "q"))).await,
        bounded("enqueue_many", b.enqueue_many(&[task("lc-many", "t", "q")])).await,
        bounded("ack", b.ack("live", token, None)).await,
        bounded("ack_many", b.ack_many(&[item])).await,
        bounded("fail", b.fail("live", token, Failure::skip("x"))).await,
        bounded("cancel", b.cancel("live")).await,
        bounded("finish_canceled", b.finish_canceled("live", token)).await,
        bounded("requeue", b.requeue("live", token)).await,
        bounded("heartbeat", b.heartbeat("live", token)).await,
        bounded("save_step", b.save_step("live", token, Step::default())).await,
        bounded("replay", b.replay(ReplayRequest::by_id("done"))).await,
        bounded("resume", b.resume("done")).await,
        bounded("reap_expired", b.reap_expired()).await,
        bounded("pause_queue", b.pause_queue("q")).await,
        bounded("resume_queue", b.resume_queue("q")).await,
        bounded("prune", b.prune(prune_everything())).await,
    ]
}

async fn claims(b: &dyn Broker) -> Vec<Outcome> {
    vec![
        bounded("dequeue", b.dequeue(&["q"])).await,
        bounded("dequeue_many", b.dequeue_many(&["q"], 2)).await,
        bounded("try_dequeue", b.try_dequeue(&["q"])).await,
        bounded("try_dequeue_many", b.try_dequeue_many(&["q"], 2)).await,
    ]
}

async fn reads(b: &dyn Broker) -> Vec<Outcome> {
    vec![
        bounded("get", b.get("live")).await,
        bounded("list", b.list(&Filter::default())).await,
        bounded("queue_len", b.queue_len("q")).await,
        bounded("counts", b.counts()).await,
        bounded("paused_queues", b.paused_queues()).await,
        bounded("limits", std::future::ready(b.limits())).await,
    ]
}

fn prune_everything() -> PruneRequest {
    PruneRequest {
        finished_before: Timestamp::from_millis(i64::MAX),
        statuses: Vec::new(),
        limit: 0,
        include_keyed: true,
    }
}

/// Runs one call, which must return within 5 s (a guarded call never waits).
async fn bounded<T>(
    name: &'static str,
    call: impl Future<Output = taskgate::Result<T>>,
) -> Outcome {
    match tokio::time::timeout(SAFETY_TIMEOUT, call).await {
        Ok(result) => (name, result.map(drop).map_err(|e| e.kind())),
        Err(_) => panic!("{name} did not return within {SAFETY_TIMEOUT:?}"),
    }
}

fn quota_config() -> QuotaConfig {
    QuotaConfig { limit: 3, period: Duration::from_secs(10), key: "lc".into() }
}

/// A quota gate from an open broker, when the backend has quota.
fn open_gate(b: &dyn Broker) -> Result<Option<Arc<dyn QuotaGate>>, Error> {
    b.quota_provider().map(|p| p.queue_quota("q", &quota_config())).transpose()
}

/// A quota reserve through a gate from `b` fails with `kind` (getting the gate may already fail
/// with it). Backends without quota have nothing to check.
async fn check_quota(b: &dyn Broker, kind: ErrorKind) {
    let Some(provider) = b.quota_provider() else { return };
    let gate = match provider.queue_quota("q", &quota_config()) {
        Ok(gate) => gate,
        Err(e) => {
            assert_eq!(e.kind(), kind, "queue_quota: {e}");
            return;
        }
    };
    expect_err(bounded_reserve(&*gate).await, kind, "quota reserve");
}

async fn bounded_reserve(gate: &dyn QuotaGate) -> taskgate::Result<Option<Reservation>> {
    match tokio::time::timeout(SAFETY_TIMEOUT, gate.reserve()).await {
        Ok(result) => result,
        Err(_) => panic!("quota reserve did not return within {SAFETY_TIMEOUT:?}"),
    }
}
