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

/// Given lease TTL 60 s: a pending task's snapshot has no lease deadline, even when the
/// enqueued value carried one; claimed at T, the claim's snapshot, `get` and `list` show
/// `lease_expires_at` = T + 60 s; a heartbeat at T + 45 s moves it to T + 105 s; 106 s after
/// T, not yet reaped, the task is still `running` with its deadline in the past (what
/// operators' views mark as expired); the reaper returns it to `pending` without a deadline;
/// claimed again and acked, the completed task has none.
pub async fn c58_lease_deadline_in_snapshots(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    let mut sent = task("ld", "llm", "qd");
    sent.lease_expires_at = Some(h.now().saturating_add(Duration::from_secs(5)));
    let stored = h.enqueue(sent).await;
    assert_eq!(stored.lease_expires_at, None, "enqueue ignores the caller's lease deadline");
    assert_eq!(h.get("ld").await.lease_expires_at, None, "a pending task has no lease");
    let t = h.now();
    let claimed = h.dequeue(&["qd"]).await;
    let deadline = Some(t.saturating_add(Duration::from_secs(60)));
    assert_eq!(claimed.lease_expires_at, deadline, "the claim's snapshot: claim + TTL");
    assert_eq!(h.get("ld").await.lease_expires_at, deadline, "get: claim + TTL");
    let listed = must(h.broker.list(&taskgate::Filter::default()).await, "list")?;
    assert_eq!(listed.first().map(|t| t.lease_expires_at), Some(deadline), "list: claim + TTL");

    h.advance(Duration::from_secs(45));
    must(h.broker.heartbeat("ld", &claimed.lease_token).await, "heartbeat ld at +45 s")?;
    let renewed = Some(t.saturating_add(Duration::from_secs(105)));
    assert_eq!(h.get("ld").await.lease_expires_at, renewed, "a heartbeat moves it forward");
    h.advance(Duration::from_secs(61));
    let stale = h.get("ld").await;
    assert_eq!((stale.status, stale.lease_expires_at), (Status::Running, renewed), "not reaped");
    assert!(stale.lease_expires_at.is_some_and(|at| at < h.now()), "the deadline has passed");
    assert_eq!(reap(&h, "after the deadline").await?, 1, "the reaper takes ld back");
    let back = h.get("ld").await;
    assert_eq!((back.status, back.lease_expires_at), (Status::Pending, None), "reaped: no lease");

    let again = h.dequeue(&["qd"]).await;
    must(h.broker.ack("ld", &again.lease_token, None).await, "ack ld")?;
    let done = h.get("ld").await;
    assert_eq!((done.status, done.lease_expires_at), (Status::Completed, None), "finished");
    h.finish().await
}

/// Given lease TTL 60 s: the value a caller enqueues as `last_heartbeat_at` is ignored; claimed
/// at T, the claim's snapshot, `get` and `list` show no heartbeat; heartbeats at T + 45 s and
/// T + 50 s show as T + 45 s, then T + 50 s; the reaper takes the silent task back to
/// `pending` without one; claimed again, the earlier lease's heartbeat does not carry over, and
/// a heartbeat with the lost token changes nothing; a heartbeat of the new lease shows, and
/// the completed task has none.
pub async fn c59_last_heartbeat_in_snapshots(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    let mut sent = task("hb", "llm", "qh");
    sent.last_heartbeat_at = Some(h.now());
    let stored = h.enqueue(sent).await;
    assert_eq!(stored.last_heartbeat_at, None, "enqueue ignores the caller's heartbeat time");
    assert_eq!(h.get("hb").await.last_heartbeat_at, None, "a pending task has no heartbeat");
    let t = h.now();
    let claimed = h.dequeue(&["qh"]).await;
    assert_eq!(claimed.last_heartbeat_at, None, "the claim's snapshot: no heartbeat yet");
    assert_eq!(h.get("hb").await.last_heartbeat_at, None, "get: no heartbeat yet");

    h.advance(Duration::from_secs(45));
    must(h.broker.heartbeat("hb", &claimed.lease_token).await, "heartbeat hb at +45 s")?;
    let first = Some(t.saturating_add(Duration::from_secs(45)));
    assert_eq!(h.get("hb").await.last_heartbeat_at, first, "get: the heartbeat's time");
    let listed = must(h.broker.list(&taskgate::Filter::default()).await, "list")?;
    assert_eq!(listed.first().map(|t| t.last_heartbeat_at), Some(first), "list: the same");
    h.advance(Duration::from_secs(5));
    must(h.broker.heartbeat("hb", &claimed.lease_token).await, "heartbeat hb at +50 s")?;
    let latest = Some(t.saturating_add(Duration::from_secs(50)));
    assert_eq!(h.get("hb").await.last_heartbeat_at, latest, "the latest heartbeat's time");

    h.advance(Duration::from_secs(61));
    let silent = h.get("hb").await;
    assert_eq!((silent.status, silent.last_heartbeat_at), (Status::Running, latest), "silent");
    assert_eq!(reap(&h, "after the deadline").await?, 1, "the reaper takes hb back");
    let back = h.get("hb").await;
    assert_eq!((back.status, back.last_heartbeat_at), (Status::Pending, None), "reaped: none");

    let again = h.dequeue(&["qh"]).await;
    assert_eq!(again.last_heartbeat_at, None, "a new lease starts without a heartbeat");
    h.advance(Duration::from_secs(1));
    let lost = h.broker.heartbeat("hb", &claimed.lease_token).await;
    assert_eq!(lost.map_err(|e| e.kind()), Err(taskgate::ErrorKind::LeaseLost), "old token");
    assert_eq!(h.get("hb").await.last_heartbeat_at, None, "a refused heartbeat is not recorded");
    h.advance(Duration::from_secs(2));
    must(h.broker.heartbeat("hb", &again.lease_token).await, "heartbeat of the new lease")?;
    assert_eq!(h.get("hb").await.last_heartbeat_at, Some(h.now()), "the new lease's heartbeat");
    must(h.broker.ack("hb", &again.lease_token, None).await, "ack hb")?;
    let done = h.get("hb").await;
    assert_eq!((done.status, done.last_heartbeat_at), (Status::Completed, None), "finished");
    h.finish().await
}
