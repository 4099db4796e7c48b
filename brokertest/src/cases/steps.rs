//! Stepwise tasks (extensions §E3).

use std::time::Duration;

use taskgate::{ErrorKind, Failure, Status, Step, Task};

use super::check::{expect_err, expect_invalid};
use crate::{task, CaseResult, Factory, Harness};

const MS: Duration = Duration::from_millis(1);

fn step(cursor: &[u8], progress: u8, message: &str, delay: Duration) -> Step {
    Step { cursor: Some(cursor.to_vec()), progress: Some(progress), message: message.into(), delay }
}

/// Given `st` (queue qs, max_retry 3, imported with lease_lost 1 and throttled 2) claimed after
/// a business failure (attempts 1), when it saves a step (cursor "a", progress 40, delay 5 s),
/// then it is pending with steps 1, attempts 0, lease_lost and throttled unchanged, no token
/// and run_at now + 5 s; it is not claimable at +4.999 s, and a dequeue waiting
/// then gets it at +5 s with cursor "a" and progress 40. The old token (and an empty one) is
/// `LeaseLost`; delay 61 s or progress 101 is `InvalidInput` (delay, progress) and nothing
/// changed; delay 60 s and progress 100 are accepted.
pub async fn c23_step_checkpoint(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    let old_token = claim_after_failure(&h).await?;
    let first = step(b"a", 40, "40 of 100 pages", Duration::from_secs(5));
    h.broker.save_step("st", &old_token, first).await?;
    let saved = h.get("st").await;
    let expected = (Status::Pending, 1, 0, "", h.now().saturating_add(Duration::from_secs(5)));
    let got = (saved.status, saved.steps, saved.attempts, saved.lease_token.as_str(), saved.run_at);
    assert_eq!(got, expected, "st after save_step: (status, steps, attempts, token, run_at)");
    assert_checkpoint(&saved, b"a", 40, "40 of 100 pages");
    assert_eq!((saved.lease_lost, saved.throttled), (1, 2), "save_step keeps the other counters");
    h.advance(Duration::from_secs(5) - MS);
    h.expect_blocked(&["qs"]).await;
    let mut waiter = h.spawn_dequeue(&["qs"]);
    waiter.still_blocked().await;
    h.advance(MS);
    let claimed = waiter.result().await?;
    assert_eq!(claimed.id, "st", "the waiter claimed the wrong task");
    assert_checkpoint(&claimed, b"a", 40, "40 of 100 pages");
    assert_ne!(claimed.lease_token, old_token, "a new claim gets a new token");
    stale_and_invalid(&h, &old_token, &claimed.lease_token).await;
    let last = step(b"b", 100, "done", Duration::from_secs(60));
    h.broker.save_step("st", &claimed.lease_token, last).await?;
    let saved = h.get("st").await;
    assert_eq!((saved.status, saved.steps), (Status::Pending, 2), "st after the second step");
    assert_eq!(saved.run_at, h.now().saturating_add(Duration::from_secs(60)), "60 s delay");
    assert_checkpoint(&saved, b"b", 100, "done");
    h.finish().await
}

/// Claims `st`, fails it with a business error retried now, and claims it again (attempts 1);
/// returns the second claim's token.
async fn claim_after_failure(h: &Harness) -> Result<String, taskgate::Error> {
    let imported =
        Task { lease_lost: 1, throttled: 2, ..task("st", "job", "qs").with_max_retry(3) };
    h.enqueue(imported).await;
    let first = h.dequeue(&["qs"]).await;
    h.broker.fail("st", &first.lease_token, Failure::business("flaky", h.now())).await?;
    let again = h.dequeue(&["qs"]).await;
    assert_eq!((again.id.as_str(), again.attempts), ("st", 1), "st re-claimed after a failure");
    Ok(again.lease_token)
}

fn assert_checkpoint(t: &Task, cursor: &[u8], progress: u8, message: &str) {
    let got = (t.cursor.as_deref(), t.progress, t.message.as_str());
    assert_eq!(
        got,
        (Some(cursor), Some(progress), message),
        "{}: (cursor, progress, message)",
        t.id
    );
}

/// A stale or empty token is `LeaseLost`; an over-long delay or progress over 100 is
/// `InvalidInput`; none of them changes the running task.
async fn stale_and_invalid(h: &Harness, old: &str, current: &str) {
    let before = h.get("st").await;
    let ok = || step(b"z", 50, "z", Duration::ZERO);
    let r = h.broker.save_step("st", old, ok()).await;
    expect_err(r, ErrorKind::LeaseLost, "save_step with the previous claim's token");
    let r = h.broker.save_step("st", "", ok()).await;
    expect_err(r, ErrorKind::LeaseLost, "save_step with an empty token");
    let r = h.broker.save_step("st", current, step(b"z", 50, "z", Duration::from_secs(61))).await;
    expect_invalid(r, "delay", "save_step with a 61 s delay");
    let r = h.broker.save_step("st", current, step(b"z", 101, "z", Duration::ZERO)).await;
    expect_invalid(r, "progress", "save_step with progress 101");
    assert_eq!(h.get("st").await, before, "rejected save_step calls changed st");
}

/// Given running `sc` (queue qs) with a blocked child `sc-child` (queue qc), when a cancel is
/// requested and the worker then saves a step (cursor "c7", progress 70, "step 7"), then
/// save_step is `Canceled`; `sc` is canceled ("canceled", finished_at now, no token) with the
/// checkpoint stored and steps 1; the child is canceled "parent sc canceled"; nothing in qs is
/// claimable and the old token is `LeaseLost`.
pub async fn c24_step_cancel(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    h.enqueue(task("sc", "job", "qs")).await;
    let child = h.enqueue(task("sc-child", "job", "qc").with_depends_on(["sc"])).await;
    assert_eq!(child.status, Status::Blocked, "child of a pending parent");
    let claimed = h.dequeue(&["qs"]).await;
    h.broker.cancel("sc").await?;
    let running = h.get("sc").await;
    assert_eq!((running.status, running.cancel_requested), (Status::Running, true), "cancelling");
    let cp = step(b"c7", 70, "step 7", Duration::from_secs(10));
    let r = h.broker.save_step("sc", &claimed.lease_token, cp.clone()).await;
    expect_err(r, ErrorKind::Canceled, "save_step of a task with a cancel request");
    let sc = h.get("sc").await;
    let got = (sc.status, sc.last_error.as_str(), sc.finished_at, sc.lease_token.as_str());
    assert_eq!(got, (Status::Canceled, "canceled", Some(h.now()), ""), "sc after save_step");
    assert_checkpoint(&sc, b"c7", 70, "step 7");
    assert_eq!(sc.steps, 1, "the cancelled step still counts");
    let child = h.get("sc-child").await;
    let got = (child.status, child.last_error.as_str(), child.finished_at);
    assert_eq!(got, (Status::Canceled, "parent sc canceled", Some(h.now())), "sc-child");
    h.expect_blocked(&["qs"]).await;
    let r = h.broker.save_step("sc", &claimed.lease_token, cp).await;
    expect_err(r, ErrorKind::LeaseLost, "save_step after the task was cancelled");
    h.finish().await
}
