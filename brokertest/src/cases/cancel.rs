//! Cancel requests of running tasks (contract §3.4 Cancel, Heartbeat, Fail, Ack; §6): the
//! request is a flag the worker learns of through its heartbeat; it survives retries and
//! claims, and every terminal write clears it.

use std::time::Duration;

use taskgate::{AckItem, ErrorKind, Failure, ReplayRequest, Status};

use super::check::{expect_err, must};
use crate::{task, CaseResult, Factory, Harness};

const MS: Duration = Duration::from_millis(1);

/// A heartbeat renews the lease before it reports a cancel request. Given `hc` claimed at T
/// (lease TTL 60 s) and a cancel requested, when the worker heartbeats at T + 45 s, then the
/// heartbeat is `Canceled` and `hc` still runs with the request set; a reap at T + 61 s and
/// at T + 105 s handles nothing (the lease was renewed to T + 105 s); at T + 105.001 s the
/// reaper handles `hc` and, the cancel being requested, cancels it ("canceled", finished_at
/// now, lease_lost 0, request cleared).
pub async fn c39_heartbeat_renews_before_canceled(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    h.enqueue(task("hc", "job", "qh")).await;
    let claimed = h.dequeue(&["qh"]).await;
    must(h.broker.cancel("hc").await, "cancel running hc")?;
    h.advance(Duration::from_secs(45));
    let beat = h.broker.heartbeat("hc", &claimed.lease_token).await;
    expect_err(beat, ErrorKind::Canceled, "heartbeat of hc with a cancel requested");
    let got = h.get("hc").await;
    let running = (Status::Running, true, claimed.lease_token.as_str());
    assert_eq!(
        (got.status, got.cancel_requested, got.lease_token.as_str()),
        running,
        "hc after the heartbeat: (status, cancel_requested, token)"
    );
    h.advance(Duration::from_secs(16));
    let reaped = h.broker.reap_expired().await?;
    assert_eq!(reaped, 0, "reap at T + 61 s: the Canceled heartbeat at T + 45 s renewed the lease");
    h.advance(Duration::from_secs(44));
    assert_eq!(h.broker.reap_expired().await?, 0, "reap at T + 105 s: the lease ends exactly now");
    h.advance(MS);
    assert_eq!(h.broker.reap_expired().await?, 1, "reap at T + 105.001 s must handle hc");
    let got = h.get("hc").await;
    let expected = (Status::Canceled, "canceled", Some(h.now()), 0, false);
    let fields = (got.status, got.last_error.as_str(), got.finished_at, got.lease_lost);
    assert_eq!(
        (fields.0, fields.1, fields.2, fields.3, got.cancel_requested),
        expected,
        "hc after the reap: (status, last_error, finished_at, lease_lost, cancel_requested)"
    );
    h.finish().await
}

/// A cancel request survives a retry and the next claim. Given `cr` (max_retry 3) claimed and
/// a cancel requested, when the worker fails it with a business error retried now, then `cr`
/// is retrying with attempts 1 and the request kept; claimed again, the claim's snapshot
/// carries the request, the heartbeat is `Canceled`, and finish_canceled cancels it
/// ("canceled", request cleared). Given `ct` claimed, a cancel requested and a throttled
/// failure, `ct` is retrying with the request; cancelling it then cancels it at once
/// ("canceled", request cleared).
pub async fn c40_cancel_request_survives_retry(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    h.enqueue(task("cr", "job", "qc").with_max_retry(3)).await;
    let first = h.dequeue(&["qc"]).await;
    h.broker.cancel("cr").await?;
    h.broker.fail("cr", &first.lease_token, Failure::business("flaky", h.now())).await?;
    let got = h.get("cr").await;
    let expected = (Status::Retrying, 1, true);
    let fields = (got.status, got.attempts, got.cancel_requested);
    assert_eq!(fields, expected, "cr after a business failure: (status, attempts, request)");
    let again = h.dequeue(&["qc"]).await;
    assert_eq!((again.id.as_str(), again.cancel_requested), ("cr", true), "cr re-claimed");
    assert!(h.get("cr").await.cancel_requested, "cr: the claim cleared the cancel request");
    let beat = h.broker.heartbeat("cr", &again.lease_token).await;
    expect_err(beat, ErrorKind::Canceled, "heartbeat of cr after the retry");
    h.broker.finish_canceled("cr", &again.lease_token).await?;
    let got = h.get("cr").await;
    let expected = (Status::Canceled, "canceled", false);
    let fields = (got.status, got.last_error.as_str(), got.cancel_requested);
    assert_eq!(fields, expected, "cr after finish_canceled: (status, last_error, request)");

    h.enqueue(task("ct", "job", "qt")).await;
    let claimed = h.dequeue(&["qt"]).await;
    h.broker.cancel("ct").await?;
    h.broker.fail("ct", &claimed.lease_token, Failure::throttled("429", h.now())).await?;
    let got = h.get("ct").await;
    let expected = (Status::Retrying, 1, true);
    let fields = (got.status, got.throttled, got.cancel_requested);
    assert_eq!(fields, expected, "ct after a throttled failure: (status, throttled, request)");
    h.broker.cancel("ct").await?;
    let got = h.get("ct").await;
    let expected = (Status::Canceled, "canceled", Some(h.now()), false);
    let fields = (got.status, got.last_error.as_str(), got.finished_at, got.cancel_requested);
    assert_eq!(
        fields, expected,
        "ct cancelled while retrying: (status, last_error, finished_at, request)"
    );
    h.finish().await
}

/// An ack completes a running task whose cancel was requested, and clears the request (the
/// finished work is kept). Given `ac` claimed and a cancel requested, when it is acked with
/// "r", then the ack succeeds and `ac` is completed with result "r", no token and the request
/// cleared; its replay (allow_completed) starts without a request. Through `ack_many`:
/// `am1` (cancel requested) and `am2` (not) acked in one call both complete with no request,
/// and `am3` (cancel requested) acked as [stale token, current token] (the ordered path)
/// fails the first item with `LeaseLost` and completes with the second, request cleared.
pub async fn c45_ack_clears_cancel_request(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    h.enqueue(task("ac", "job", "qa")).await;
    let claimed = h.dequeue(&["qa"]).await;
    h.broker.cancel("ac").await?;
    must(h.broker.ack("ac", &claimed.lease_token, Some(b"r".to_vec())).await, "ack ac")?;
    let got = h.get("ac").await;
    let expected = (Status::Completed, Some(&b"r"[..]), "", false);
    let fields =
        (got.status, got.result.as_deref(), got.lease_token.as_str(), got.cancel_requested);
    assert_eq!(fields, expected, "ac after the ack: (status, result, token, request)");
    let replay = h.broker.replay(ReplayRequest::by_id("ac").allow_completed()).await?;
    assert!(!replay.cancel_requested, "the replay of ac carries a cancel request");

    for id in ["am1", "am2", "am3"] {
        h.enqueue(task(id, "job", "qm")).await;
    }
    let mut tokens = Vec::new();
    for id in ["am1", "am2", "am3"] {
        let claimed = h.dequeue(&["qm"]).await;
        assert_eq!(claimed.id, id, "claims from qm in ID order");
        tokens.push(claimed.lease_token);
    }
    h.broker.cancel("am1").await?;
    h.broker.cancel("am3").await?;
    let item = |id: &str, token: &str| AckItem {
        id: id.into(),
        token: token.into(),
        result: Some(id.as_bytes().to_vec()),
    };
    let outcomes = h.broker.ack_many(&[item("am1", &tokens[0]), item("am2", &tokens[1])]).await?;
    assert!(outcomes.iter().all(Result::is_ok), "ack_many of am1 and am2: {outcomes:?}");
    let outcomes = h.broker.ack_many(&[item("am3", "stale"), item("am3", &tokens[2])]).await?;
    let kinds: Vec<Option<ErrorKind>> =
        outcomes.iter().map(|o| o.as_ref().err().map(taskgate::Error::kind)).collect();
    assert_eq!(kinds, [Some(ErrorKind::LeaseLost), None], "ack_many of am3: stale, then current");
    for id in ["am1", "am2", "am3"] {
        let got = h.get(id).await;
        let expected = (Status::Completed, Some(id.as_bytes()), false);
        let fields = (got.status, got.result.as_deref(), got.cancel_requested);
        assert_eq!(fields, expected, "{id} after ack_many: (status, result, request)");
    }
    h.finish().await
}
