//! The broker's clock as callers see it: `now()` reads the clock every stored time is judged
//! by, and a retry asked for "after a delay" is timed on that clock inside the fail itself.

use std::time::Duration;

use taskgate::{ErrorKind, FailKind, Failure, Status};

use crate::{task, CaseResult, Factory, Harness};

/// `now()` is the broker's clock: with the suite's manual clock at 2026-01-01T00:00:00Z it
/// returns exactly that, moves with every advance (to the millisecond), agrees with the
/// `created_at` it stamps and with a second handle on the same storage; before `init` it is
/// `NotInitialized`, after `close` `Closed`.
pub async fn c33_broker_now(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    assert_eq!(h.broker.now().await?, h.now(), "now() before any advance");
    assert_eq!(h.now().to_string(), "2026-01-01T00:00:00.000Z", "the suite's epoch");
    h.advance(Duration::from_millis(1_500));
    let now = h.broker.now().await?;
    assert_eq!(now, h.now(), "now() after advancing 1.5 s");
    assert_eq!(now.to_string(), "2026-01-01T00:00:01.500Z");
    let stored = h.enqueue(task("n1", "job", "qn")).await;
    assert_eq!(stored.created_at, now, "created_at is the broker's now");
    assert_eq!(stored.run_at, now, "a zero run_at is the broker's now");
    h.advance(Duration::from_secs(3_600));
    let second = h.second_handle().await?;
    assert_eq!(second.now().await?, h.now(), "a second handle reads the same clock");
    assert_eq!(h.broker.now().await?, h.now(), "now() after advancing an hour");

    let fresh = h.raw_handle().await?;
    match fresh.now().await {
        Err(e) => assert_eq!(e.kind(), ErrorKind::NotInitialized, "now() before init: {e}"),
        Ok(t) => panic!("now() before init returned {t}"),
    }
    fresh.init(h.options()).await?;
    assert_eq!(fresh.now().await?, h.now(), "now() after init");
    fresh.close().await?;
    match fresh.now().await {
        Err(e) => assert_eq!(e.kind(), ErrorKind::Closed, "now() after close: {e}"),
        Ok(t) => panic!("now() after close returned {t}"),
    }
    h.finish().await
}

/// A retry asked for "after a delay" is timed on the broker's clock: with the clock at T, a
/// business failure retried after 5 s is `retrying` with `run_at` = T + 5 s, not claimable at
/// T + 4.999 s, claimable at T + 5 s; a throttled one after 2 s likewise (and counts
/// `throttled`, not `attempts`). A delay of zero retries at once.
pub async fn c34_retry_after(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    h.enqueue(task("ra", "job", "qra").with_max_retry(1)).await;
    let claimed = h.dequeue(&["qra"]).await;
    h.advance(Duration::from_secs(10));
    let failed_at = h.now();
    let failure = Failure::business_after("try later", Duration::from_secs(5));
    h.broker.fail("ra", &claimed.lease_token, failure).await?;
    let got = h.get("ra").await;
    assert_eq!(got.status, Status::Retrying, "business failure with a retry left");
    assert_eq!(got.run_at, failed_at.saturating_add(Duration::from_secs(5)), "run_at = T + 5 s");
    assert_eq!((got.attempts, got.last_error.as_str()), (1, "try later"));
    assert!(h.broker.try_dequeue(&["qra"]).await?.is_none(), "claimable at T");
    h.advance(Duration::from_millis(4_999));
    assert!(h.broker.try_dequeue(&["qra"]).await?.is_none(), "claimable at T + 4.999 s");
    h.advance(Duration::from_millis(1));
    let again = h.broker.try_dequeue(&["qra"]).await?.ok_or("not claimable at T + 5 s")?;
    assert_eq!(again.id, "ra");

    let throttled_at = h.now();
    let failure = Failure::throttled_after("429", Duration::from_secs(2));
    assert_eq!(failure.kind, FailKind::Throttled);
    h.broker.fail("ra", &again.lease_token, failure).await?;
    let got = h.get("ra").await;
    assert_eq!(got.status, Status::Retrying, "throttled failure below the cap");
    assert_eq!(
        got.run_at,
        throttled_at.saturating_add(Duration::from_secs(2)),
        "run_at = T' + 2 s"
    );
    assert_eq!((got.attempts, got.throttled), (1, 1), "throttled counts throttled only");
    h.advance(Duration::from_millis(1_999));
    assert!(h.broker.try_dequeue(&["qra"]).await?.is_none(), "claimable at T' + 1.999 s");
    h.advance(Duration::from_millis(1));
    let third = h.broker.try_dequeue(&["qra"]).await?.ok_or("not claimable at T' + 2 s")?;

    let failure = Failure::throttled_after("429 again", Duration::ZERO);
    h.broker.fail("ra", &third.lease_token, failure).await?;
    assert_eq!(h.get("ra").await.run_at, h.now(), "a zero delay retries at the broker's now");
    assert!(h.broker.try_dequeue(&["qra"]).await?.is_some(), "claimable at once");
    h.finish().await
}
