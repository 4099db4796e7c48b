//! Wake-ups (extensions §E2, `docs/decisions.md` "Wake-ups"): every write that makes a task
//! claimable wakes waiting claimers at once. The handles here poll for other handles' writes
//! only once a minute, so a poll cannot hide a missing wake-up: the 5 s each waiter is given
//! is a hang bound, far shorter than the poll.

use std::time::Duration;

use taskgate::{Failure, ReplayRequest, Status, Step, Task};

use super::check::must;
use crate::{spawn_dequeue_on, task, CaseResult, Factory, Harness, Need, Waiter, SAFETY_TIMEOUT};

/// How seldom the handles of these cases poll.
const SLOW_POLL: Duration = Duration::from_secs(60);

/// A waiter on queue qw that is waiting now (checked for 100 ms).
async fn waiting(h: &Harness) -> Waiter {
    let mut waiter = h.spawn_dequeue(&["qw"]);
    waiter.still_blocked().await;
    waiter
}

/// The waiter's claim, which must be `id`.
async fn woken(waiter: Waiter, id: &str, by: &str) -> Result<Task, taskgate::BoxError> {
    let what = format!("the waiter to be woken by {by}");
    let claimed = must(waiter.result_for(&what).await, &what)?;
    assert_eq!(claimed.id, id, "the waiter woken by {by} claimed the wrong task");
    Ok(claimed)
}

/// Waits (5 s at most) until the waiter sleeps on the case's clock: woken by a write that made
/// a task due later, it looked again and now waits for that time. Without the wake-up it never
/// learns of the task.
async fn waits_on_the_clock(h: &Harness, by: &str) {
    let deadline = tokio::time::Instant::now() + SAFETY_TIMEOUT;
    while h.clock.sleeper_count() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the waiter never waited for the due time of {by}: the write did not wake it"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Given a handle that polls once a minute and a claimer waiting on queue qw, each write that
/// makes a task of qw claimable hands it to the waiter at once (within the 5 s hang bound):
/// a business failure retried now; one retried in 5 s (the waiter learns the new due time,
/// waits on the clock for it, and claims when the clock gets there, not before); a saved step with no delay; one with a 3 s
/// delay; a requeue; a reap of an expired lease; a parent's ack that wakes a blocked child;
/// an operator resume; a replay; resuming a paused queue.
pub async fn c41_writes_wake_waiters(factory: &dyn Factory) -> CaseResult {
    let h = Harness::polling_every(factory, SLOW_POLL).await?;
    h.enqueue(task("w", "job", "qw").with_max_retry(5)).await;
    let mut token = h.dequeue(&["qw"]).await.lease_token;

    let waiter = waiting(&h).await;
    h.broker.fail("w", &token, Failure::business("retry now", h.now())).await?;
    token = woken(waiter, "w", "a retry due now").await?.lease_token;

    let mut waiter = waiting(&h).await;
    let later = Failure::business_after("retry in 5 s", Duration::from_secs(5));
    h.broker.fail("w", &token, later).await?;
    waits_on_the_clock(&h, "a retry due in 5 s").await;
    waiter.still_blocked().await;
    h.advance(Duration::from_secs(5));
    token = woken(waiter, "w", "a retry due in 5 s").await?.lease_token;

    let waiter = waiting(&h).await;
    h.broker.save_step("w", &token, Step::default()).await?;
    token = woken(waiter, "w", "a step with no delay").await?.lease_token;

    let mut waiter = waiting(&h).await;
    let step = Step { delay: Duration::from_secs(3), ..Step::default() };
    h.broker.save_step("w", &token, step).await?;
    waits_on_the_clock(&h, "a step due in 3 s").await;
    waiter.still_blocked().await;
    h.advance(Duration::from_secs(3));
    token = woken(waiter, "w", "a step with a 3 s delay").await?.lease_token;

    let waiter = waiting(&h).await;
    h.broker.requeue("w", &token).await?;
    woken(waiter, "w", "a requeue").await?;

    let waiter = waiting(&h).await;
    h.advance(Duration::from_secs(61));
    assert_eq!(h.broker.reap_expired().await?, 1, "the reap of w's expired lease");
    let claimed = woken(waiter, "w", "a reap").await?;
    assert_eq!(claimed.lease_lost, 1, "w after the reap");

    h.enqueue(task("p", "job", "qp")).await;
    h.enqueue(task("c", "job", "qw").with_depends_on(["p"])).await;
    let parent = h.dequeue(&["qp"]).await;
    let waiter = waiting(&h).await;
    h.broker.ack("p", &parent.lease_token, None).await?;
    woken(waiter, "c", "the parent's ack").await?;

    h.broker.fail("w", &claimed.lease_token, Failure::skip("give up")).await?;
    assert_eq!(h.get("w").await.status, Status::Failed, "w after a skip");
    let waiter = waiting(&h).await;
    h.broker.resume("w").await?;
    let resumed = woken(waiter, "w", "an operator resume").await?;

    h.broker.fail("w", &resumed.lease_token, Failure::skip("give up again")).await?;
    let waiter = waiting(&h).await;
    let replay = h.broker.replay(ReplayRequest::by_id("w")).await?;
    woken(waiter, &replay.id, "a replay").await?;

    h.broker.pause_queue("qw").await?;
    h.enqueue(task("held", "job", "qw")).await;
    let waiter = waiting(&h).await;
    h.broker.resume_queue("qw").await?;
    woken(waiter, "held", "resuming the queue").await?;
    h.finish().await
}

/// Given two handles on one storage that each poll once a minute, on a backend that declares
/// cross-process wake-ups, a claimer waiting on the second handle gets at once (within the
/// 5 s hang bound) a task the first handle enqueues, and then one the first handle's failure
/// makes due again. Unsupported where the backend declares none (its other processes find
/// work by polling).
pub async fn c47_cross_process_wakeup(factory: &dyn Factory) -> CaseResult {
    let h = Harness::polling_every(factory, SLOW_POLL).await?;
    let h = h.require(Need::CrossProcessWakeups).await?;
    let other = h.second_handle().await?;
    let mut waiter = spawn_dequeue_on(other.clone(), &["qx"]);
    waiter.still_blocked().await;
    h.enqueue(task("x", "job", "qx").with_max_retry(1)).await;
    let what = "the other handle's waiter, after an enqueue on the first";
    let claimed = must(waiter.result_for(what).await, what)?;
    assert_eq!(claimed.id, "x", "the other handle's waiter claimed the wrong task");
    h.broker.requeue("x", &claimed.lease_token).await?;
    let first = h.dequeue(&["qx"]).await;
    let mut waiter = spawn_dequeue_on(other, &["qx"]);
    waiter.still_blocked().await;
    h.broker.fail("x", &first.lease_token, Failure::business("again", h.now())).await?;
    let what = "the other handle's waiter, after a retry on the first";
    let again = must(waiter.result_for(what).await, what)?;
    assert_eq!((again.id.as_str(), again.attempts), ("x", 1), "the retried task");
    h.finish().await
}
