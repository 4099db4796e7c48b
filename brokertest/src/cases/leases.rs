//! Lease expiry and the reaper (contract §6).

use std::time::Duration;

use taskgate::Status;

use super::check::must;
use crate::{task, CaseResult, Factory, Harness};

/// Given lease TTL 60 s and cap 3, when `lr` is claimed and the reaper runs: a lease ending
/// exactly now is still valid (0); 1 s later it is reaped (1) back to `pending` with
/// lease_lost 1, no token, run_at and started_at kept; a heartbeat 45 s into the next claim
/// keeps it running 90 s after the claim (0) until 61 s later (1, lease_lost 2); the third
/// expiry fails it with lease_lost 3, "lease expired 3 times" and finished_at = now.
pub async fn c07_lease_reap(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    h.enqueue(task("lr", "llm", "q")).await;
    let first = h.dequeue(&["q"]).await;
    assert_eq!(reap(&h, "before expiry").await?, 0, "reap before expiry must handle nothing");
    h.advance(Duration::from_secs(60));
    assert_eq!(reap(&h, "at the deadline").await?, 0, "a lease ending exactly now is valid");
    h.advance(Duration::from_secs(1));
    assert_eq!(reap(&h, "after 61 s").await?, 1, "reap after 61 s must handle lr");
    let got = h.get("lr").await;
    assert_eq!(got.status, Status::Pending, "lr: first expiry returns it to pending");
    assert_eq!(got.lease_lost, 1, "lr: lease_lost after the first expiry");
    assert!(got.lease_token.is_empty(), "lr: the reaper must clear the token");
    assert_eq!(got.started_at, first.started_at, "lr: the reaper must keep started_at");
    assert_eq!(got.run_at, first.run_at, "lr: the reaper must keep run_at");

    let second = h.dequeue(&["q"]).await;
    h.advance(Duration::from_secs(45));
    must(h.broker.heartbeat("lr", &second.lease_token).await, "heartbeat lr at +45 s")?;
    h.advance(Duration::from_secs(45));
    assert_eq!(reap(&h, "45 s after the heartbeat").await?, 0, "the heartbeat renewed lr's lease");
    assert_eq!(h.get("lr").await.status, Status::Running, "lr: must still be running");
    h.advance(Duration::from_secs(61));
    assert_eq!(reap(&h, "61 s after renewal + 45 s").await?, 1, "reap must handle lr again");
    let got = h.get("lr").await;
    assert_eq!((got.status, got.lease_lost), (Status::Pending, 2), "lr: after the second expiry");

    h.dequeue(&["q"]).await;
    h.advance(Duration::from_secs(61));
    assert_eq!(reap(&h, "third expiry").await?, 1, "reap must handle lr a third time");
    let got = h.get("lr").await;
    assert_eq!(got.status, Status::Failed, "lr: the third expiry reaches the cap");
    assert_eq!(got.lease_lost, 3, "lr: lease_lost after the third expiry");
    assert_eq!(got.last_error, "lease expired 3 times", "lr: last_error at the cap");
    assert_eq!(got.finished_at, Some(h.now()), "lr: finished_at at the cap");
    h.finish().await
}

async fn reap(h: &Harness, when: &str) -> Result<u64, taskgate::BoxError> {
    must(h.broker.reap_expired().await, &format!("reap_expired {when}"))
}
