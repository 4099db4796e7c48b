//! What a worker reports: ack, the three failure kinds, stale tokens, requeue, illegal
//! transitions (contract §3.3, §3.4, §4).

use std::time::Duration;

use taskgate::{Broker, ErrorKind, Failure, Status, Step, Task};

use super::check::{expect_kind, must};
use crate::{task, CaseResult, Factory, Harness};

/// Given `throttled_max = 3`, when `ok` is acked, `biz` (max_retry 2) fails three times with a
/// business failure, `skip` is skipped and `thr` is throttled three times, then: `ok` is
/// completed with its result and started_at/finished_at = now; `biz` retries at the given
/// time with attempts 1, 2 and fails on the third with attempts 3; `skip` fails with all
/// counters 0; `thr` retries twice (attempts 0) and fails with "throttled 3 times".
pub async fn c06_ack_fail(factory: &dyn Factory) -> CaseResult {
    let h = Harness::with_options(factory, |o| o.throttled_max = 3).await?;
    check_ack(&h).await?;
    check_business(&h).await?;
    check_skip(&h).await?;
    check_throttled(&h).await?;
    h.finish().await
}

async fn check_ack(h: &Harness) -> CaseResult {
    h.enqueue(task("ok", "llm", "q-ok")).await;
    let claimed = h.dequeue(&["q-ok"]).await;
    assert_eq!(claimed.id, "ok", "claim from q-ok returned the wrong task");
    assert_eq!(claimed.started_at, Some(h.now()), "ok: the claim must set started_at = now");
    let answer = br#"{"answer":42}"#.to_vec();
    must(h.broker.ack("ok", &claimed.lease_token, Some(answer.clone())).await, "ack ok")?;
    let done = h.get("ok").await;
    assert_eq!(done.status, Status::Completed, "ok: status after ack");
    assert_eq!(done.result, Some(answer), "ok: result after ack");
    assert_eq!(done.started_at, Some(h.now()), "ok: started_at after ack");
    assert_eq!(done.finished_at, Some(h.now()), "ok: finished_at after ack");
    assert!(done.lease_token.is_empty(), "ok: the token must be cleared by ack");
    Ok(())
}

async fn check_business(h: &Harness) -> CaseResult {
    h.enqueue(task("biz", "llm", "q-biz").with_max_retry(2)).await;
    for i in 1..=3u32 {
        let claimed = h.dequeue(&["q-biz"]).await;
        assert_eq!(claimed.id, "biz", "round {i}: claim from q-biz returned the wrong task");
        let retry_at = h.now().saturating_add(Duration::from_secs(1));
        let failure = Failure::business(format!("boom {i}"), retry_at);
        must(h.broker.fail("biz", &claimed.lease_token, failure).await, &format!("fail biz {i}"))?;
        let got = h.get("biz").await;
        assert_eq!(got.attempts, i, "biz round {i}: attempts");
        assert_eq!(got.last_error, format!("boom {i}"), "biz round {i}: last_error");
        assert!(got.lease_token.is_empty(), "biz round {i}: the token must be cleared");
        if i < 3 {
            assert_eq!(got.status, Status::Retrying, "biz round {i}: status");
            assert_eq!(got.run_at, retry_at, "biz round {i}: run_at must be the retry time");
            h.advance(Duration::from_secs(1));
        } else {
            assert_eq!(got.status, Status::Failed, "biz round 3: retries exhausted");
            assert_eq!(got.finished_at, Some(h.now()), "biz round 3: finished_at");
        }
    }
    Ok(())
}

async fn check_skip(h: &Harness) -> CaseResult {
    h.enqueue(task("skip", "llm", "q-skip")).await;
    let claimed = h.dequeue(&["q-skip"]).await;
    assert_eq!(claimed.id, "skip", "claim from q-skip returned the wrong task");
    must(
        h.broker.fail("skip", &claimed.lease_token, Failure::skip("no rescue")).await,
        "fail skip",
    )?;
    let got = h.get("skip").await;
    assert_eq!(got.status, Status::Failed, "skip: a skip failure is final");
    assert_eq!((got.attempts, got.lease_lost, got.throttled), (0, 0, 0), "skip: counters");
    assert_eq!(got.last_error, "no rescue", "skip: last_error");
    assert_eq!(got.finished_at, Some(h.now()), "skip: finished_at");
    Ok(())
}

async fn check_throttled(h: &Harness) -> CaseResult {
    h.enqueue(task("thr", "llm", "q-thr")).await;
    for i in 1..=3u32 {
        let claimed = h.dequeue(&["q-thr"]).await;
        assert_eq!(claimed.id, "thr", "round {i}: claim from q-thr returned the wrong task");
        let retry_at = h.now().saturating_add(Duration::from_secs(1));
        let failure = Failure::throttled("429 from gateway", retry_at);
        must(h.broker.fail("thr", &claimed.lease_token, failure).await, &format!("fail thr {i}"))?;
        let got = h.get("thr").await;
        assert_eq!(got.throttled, i, "thr round {i}: throttled");
        assert_eq!(got.attempts, 0, "thr round {i}: a throttle must not count as an attempt");
        if i < 3 {
            assert_eq!(got.status, Status::Retrying, "thr round {i}: status");
            assert_eq!(got.run_at, retry_at, "thr round {i}: run_at must be the retry time");
            assert_eq!(got.last_error, "429 from gateway", "thr round {i}: last_error");
            h.advance(Duration::from_secs(1));
        } else {
            assert_eq!(got.status, Status::Failed, "thr round 3: throttle cap reached");
            assert_eq!(got.last_error, "throttled 3 times", "thr round 3: last_error");
            assert_eq!(got.finished_at, Some(h.now()), "thr round 3: finished_at");
        }
    }
    Ok(())
}

/// The five token-checked calls, each with `token`: ack, fail (business), heartbeat, requeue,
/// finish_canceled. Asserts every one fails with `LeaseLost`.
async fn expect_five_lease_lost(
    broker: &dyn Broker,
    id: &str,
    token: &str,
    retry_at: taskgate::Timestamp,
) {
    let step = |call: &str| format!("{call} {id} with token {token:?}");
    expect_kind(broker.ack(id, token, None).await, ErrorKind::LeaseLost, &step("ack"));
    let failure = Failure::business("stale", retry_at);
    expect_kind(broker.fail(id, token, failure).await, ErrorKind::LeaseLost, &step("fail"));
    expect_kind(broker.heartbeat(id, token).await, ErrorKind::LeaseLost, &step("heartbeat"));
    expect_kind(broker.requeue(id, token).await, ErrorKind::LeaseLost, &step("requeue"));
    let finish = broker.finish_canceled(id, token).await;
    expect_kind(finish, ErrorKind::LeaseLost, &step("finish_canceled"));
}

/// Given `st` claimed, reaped after its lease expired and claimed again, when the five
/// token-checked calls present the old token they all fail with `LeaseLost` (the new token
/// differs and then acks fine); given a never-claimed `st-idle`, the five calls with an empty
/// token fail with `LeaseLost` and it stays `pending`.
pub async fn c08_stale_token(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    h.enqueue(task("st", "llm", "q")).await;
    let old = h.dequeue(&["q"]).await;
    h.advance(Duration::from_secs(61));
    assert_eq!(must(h.broker.reap_expired().await, "reap")?, 1, "reap must handle st's lease");
    let new = h.dequeue(&["q"]).await;
    assert_eq!(new.id, "st", "the re-claim must return st");
    assert_ne!(new.lease_token, old.lease_token, "st: the re-claim must issue a new token");
    expect_five_lease_lost(&*h.broker, "st", &old.lease_token, h.now()).await;
    assert_eq!(h.get("st").await.status, Status::Running, "st: stale calls changed it");
    must(h.broker.ack("st", &new.lease_token, None).await, "ack st with the new token")?;
    assert_eq!(h.get("st").await.status, Status::Completed, "st: ack with the new token");

    h.enqueue(task("st-idle", "llm", "q-idle")).await;
    expect_five_lease_lost(&*h.broker, "st-idle", "", h.now()).await;
    assert_eq!(h.get("st-idle").await.status, Status::Pending, "st-idle: must stay pending");
    h.finish().await
}

/// Given `rq` (max_retry 3) failed once and claimed again, with a cancel requested while it
/// runs, when it is requeued 1 s after the claim then it is `pending` with attempts,
/// lease_lost, throttled and run_at unchanged, no token and the cancel request cleared (a new claim heartbeats fine).
pub async fn c15_requeue_no_count(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    h.enqueue(task("rq", "llm", "q").with_max_retry(3)).await;
    let first = h.dequeue(&["q"]).await;
    let retry_at = h.now().saturating_add(Duration::from_secs(1));
    must(
        h.broker.fail("rq", &first.lease_token, Failure::business("once", retry_at)).await,
        "fail rq",
    )?;
    h.advance(Duration::from_secs(1));
    let claimed = h.dequeue(&["q"]).await;
    assert_eq!(claimed.id, "rq", "the re-claim must return rq");
    let before = h.get("rq").await;
    // Time passes while it runs, so a requeue that rewrote run_at to now would show.
    h.advance(Duration::from_secs(1));

    must(h.broker.cancel("rq").await, "cancel running rq")?;
    let flagged = h.get("rq").await;
    assert_eq!(flagged.status, Status::Running, "rq: cancel of a running task keeps it running");
    assert!(flagged.cancel_requested, "rq: cancel of a running task must set cancel_requested");
    must(h.broker.requeue("rq", &claimed.lease_token).await, "requeue rq")?;
    check_requeued(&h.get("rq").await, &before);

    let again = h.dequeue(&["q"]).await;
    assert_eq!(again.id, "rq", "the claim after requeue must return rq");
    must(h.broker.heartbeat("rq", &again.lease_token).await, "heartbeat rq after requeue")?;
    h.finish().await
}

fn check_requeued(got: &Task, before: &Task) {
    assert_eq!(got.status, Status::Pending, "rq: status after requeue");
    assert_eq!(got.attempts, before.attempts, "rq: requeue changed attempts");
    assert_eq!(got.lease_lost, before.lease_lost, "rq: requeue changed lease_lost");
    assert_eq!(got.throttled, before.throttled, "rq: requeue changed throttled");
    assert_eq!(got.run_at, before.run_at, "rq: requeue changed run_at");
    assert!(got.lease_token.is_empty(), "rq: requeue must clear the token");
    assert!(!got.cancel_requested, "rq: requeue must clear cancel_requested");
}

/// Given `fin` completed, the five token-checked calls with its last token fail with
/// `LeaseLost` and cancel with `AlreadyFinal`, and it stays completed; given a pending `idle`,
/// the five calls with token "no-such-token" fail with `LeaseLost` and it stays pending; get,
/// cancel and ack of the unknown `ghost` fail with `NotFound`.
pub async fn c16_illegal_transition(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    h.enqueue(task("fin", "llm", "q")).await;
    let claimed = h.ack_by_id("q", "fin").await;
    expect_five_lease_lost(&*h.broker, "fin", &claimed.lease_token, h.now()).await;
    expect_kind(h.broker.cancel("fin").await, ErrorKind::AlreadyFinal, "cancel completed fin");
    assert_eq!(h.get("fin").await.status, Status::Completed, "fin: must stay completed");

    h.enqueue(task("idle", "llm", "q2")).await;
    expect_five_lease_lost(&*h.broker, "idle", "no-such-token", h.now()).await;
    assert_eq!(h.get("idle").await.status, Status::Pending, "idle: must stay pending");

    expect_kind(h.broker.get("ghost").await, ErrorKind::NotFound, "get ghost");
    expect_kind(h.broker.cancel("ghost").await, ErrorKind::NotFound, "cancel ghost");
    expect_kind(h.broker.ack("ghost", "any-token", None).await, ErrorKind::NotFound, "ack ghost");
    h.finish().await
}

/// The retry budget is exactly `max_retry` business failures, and nothing else consumes it
/// (contract §4.1, §4.2; extensions §E3). Given `rb` (max_retry 2): the first claim shows
/// attempts 0; business failure 1 ⇒ retrying, attempts 1; the next claim shows attempts 1; a
/// throttled failure, a requeue and an expired lease then cost nothing (attempts 1, throttled
/// 1, lease_lost 1); business failure 2 ⇒ retrying, attempts 2 (the claim after it shows 2);
/// failure 3 ⇒ failed, attempts 3, last_error "boom 3". Given `rz` (max_retry 0), the first
/// business failure is final (attempts 1). Given `rs` (max_retry 1): failure 1 ⇒ retrying; a
/// saved step resets attempts to 0, so failure 2 ⇒ retrying again and failure 3 ⇒ failed.
pub async fn c46_retry_budget(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    h.enqueue(task("rb", "job", "qb").with_max_retry(2)).await;
    let first = h.dequeue(&["qb"]).await;
    assert_eq!(first.attempts, 0, "rb: the first claim's attempts");
    business(&h, "rb", &first.lease_token, 1).await?;
    expect_rb(&h, Status::Retrying, (1, 0, 0), "after business failure 1").await;
    let second = h.dequeue(&["qb"]).await;
    assert_eq!(second.attempts, 1, "rb: the claim after one failure");
    h.broker.fail("rb", &second.lease_token, Failure::throttled("429", h.now())).await?;
    let third = h.dequeue(&["qb"]).await;
    h.broker.requeue("rb", &third.lease_token).await?;
    h.dequeue(&["qb"]).await;
    h.advance(Duration::from_secs(61));
    assert_eq!(must(h.broker.reap_expired().await, "reap rb")?, 1, "the reap of rb's lease");
    expect_rb(&h, Status::Pending, (1, 1, 1), "after a throttle, a requeue and a reap").await;
    let claimed = h.dequeue(&["qb"]).await;
    assert_eq!(claimed.attempts, 1, "rb: the claim after the free outcomes");
    business(&h, "rb", &claimed.lease_token, 2).await?;
    expect_rb(&h, Status::Retrying, (2, 1, 1), "after business failure 2").await;
    let claimed = h.dequeue(&["qb"]).await;
    assert_eq!(claimed.attempts, 2, "rb: the claim after two failures");
    business(&h, "rb", &claimed.lease_token, 3).await?;
    expect_rb(&h, Status::Failed, (3, 1, 1), "after business failure 3").await;
    assert_eq!(h.get("rb").await.last_error, "boom 3", "rb: last_error");

    h.enqueue(task("rz", "job", "qz").with_max_retry(0)).await;
    let claimed = h.dequeue(&["qz"]).await;
    business(&h, "rz", &claimed.lease_token, 1).await?;
    let rz = h.get("rz").await;
    assert_eq!((rz.status, rz.attempts), (Status::Failed, 1), "rz: max_retry 0 fails at once");

    h.enqueue(task("rs", "job", "qs").with_max_retry(1)).await;
    let claimed = h.dequeue(&["qs"]).await;
    business(&h, "rs", &claimed.lease_token, 1).await?;
    let claimed = h.dequeue(&["qs"]).await;
    h.broker.save_step("rs", &claimed.lease_token, Step::default()).await?;
    assert_eq!(h.get("rs").await.attempts, 0, "rs: a saved step resets attempts");
    let claimed = h.dequeue(&["qs"]).await;
    business(&h, "rs", &claimed.lease_token, 2).await?;
    let rs = h.get("rs").await;
    assert_eq!((rs.status, rs.attempts), (Status::Retrying, 1), "rs: a failure after the step");
    let claimed = h.dequeue(&["qs"]).await;
    business(&h, "rs", &claimed.lease_token, 3).await?;
    let rs = h.get("rs").await;
    assert_eq!((rs.status, rs.attempts), (Status::Failed, 2), "rs: the budget after the step");
    h.finish().await
}

/// Fails `id` with business failure `n` ("boom n"), retried now.
async fn business(h: &Harness, id: &str, token: &str, n: u32) -> Result<(), taskgate::BoxError> {
    let failure = Failure::business(format!("boom {n}"), h.now());
    must(h.broker.fail(id, token, failure).await, &format!("business failure {n} of {id}"))?;
    Ok(())
}

/// Asserts rb's status and (attempts, throttled, lease_lost).
async fn expect_rb(h: &Harness, status: Status, counters: (u32, u32, u32), when: &str) {
    let rb = h.get("rb").await;
    let got = (rb.status, (rb.attempts, rb.throttled, rb.lease_lost));
    assert_eq!(got, (status, counters), "rb {when}: (status, (attempts, throttled, lease_lost))");
}
