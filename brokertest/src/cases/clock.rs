//! The broker's clock as callers see it: `now()` reads the clock every stored time is judged
//! by, and a retry asked for "after a delay" is timed on that clock inside the fail itself.

use std::time::Duration;

use taskgate::ErrorKind;

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
