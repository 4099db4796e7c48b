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

/// A claimer blocked in `dequeue_many(queues, max)` on `h`'s broker.
fn claimer(h: &Harness, queues: &'static [&'static str], max: usize) -> Claimer {
    let broker = h.broker.clone();
    tokio::spawn(async move { broker.dequeue_many(&queues, max).await })
}

type Claimer = tokio::task::JoinHandle<taskgate::Result<Vec<Task>>>;

/// Waits (5 s at most) until the claimers finished have claimed `n` tasks between them;
/// returns their IDs and how many claimers returned, then checks for 100 ms that no other
/// claimer returns (none has anything left to claim).
async fn claimed_by(claimers: &mut Vec<Claimer>, n: usize, by: &str) -> (Vec<String>, usize) {
    let deadline = tokio::time::Instant::now() + SAFETY_TIMEOUT;
    let mut ids = Vec::new();
    let mut returned = 0;
    loop {
        let mut i = 0;
        while i < claimers.len() {
            if !claimers[i].is_finished() {
                i += 1;
                continue;
            }
            let joined = claimers.swap_remove(i).await;
            let tasks = match joined {
                Ok(Ok(tasks)) => tasks,
                Ok(Err(e)) => panic!("a claimer waiting for {by} failed: {e}"),
                Err(e) => panic!("a claimer waiting for {by} ended abnormally: {e}"),
            };
            assert!(!tasks.is_empty(), "a claimer waiting for {by} returned no task");
            returned += 1;
            ids.extend(tasks.into_iter().map(|t| t.id));
        }
        if ids.len() >= n {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{by}: only {} of {n} tasks claimed by the waiting claimers within {SAFETY_TIMEOUT:?} \
             (a commit that made work ready left a waiter asleep)",
            ids.len()
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(crate::REAL_WINDOW).await;
    let extra = claimers.iter().filter(|c| c.is_finished()).count();
    assert_eq!(extra, 0, "{by}: a claimer returned with nothing left to claim");
    ids.sort();
    (ids, returned)
}

/// `n` ready tasks `{prefix}0`… on `queue`.
fn batch(prefix: &str, queue: &str, n: usize) -> Vec<Task> {
    (0..n).map(|i| task(&format!("{prefix}{i}"), "job", queue)).collect()
}

/// Given a handle that polls once a minute, one `enqueue_many` that makes several tasks
/// ready wakes enough waiting claimers to take every one of them at once (within the 5 s hang
/// bound), however few waiters the backend wakes per commit (§E2.5, "Wake-ups" in
/// `docs/decisions.md`): six claimers of one task wait on qw (the oldest also on
/// qa), one on qa only; four tasks on qw go to four claimers, each task once, and the others
/// stay blocked. Three claimers of up to three tasks wait on qb: seven tasks go to them
/// whole (3 + 3 + 1). A claimer whose wake another took first is woken by the next commit:
/// one more task on qw goes to one of the two left.
pub async fn c54_enqueue_wakes_enough_waiters(factory: &dyn Factory) -> CaseResult {
    let h = Harness::polling_every(factory, SLOW_POLL).await?;
    let qa = vec![claimer(&h, &["qa"], 1)];
    let mut qw = vec![claimer(&h, &["qa", "qw"], 1)];
    for _ in 0..5 {
        qw.push(claimer(&h, &["qw"], 1));
    }
    tokio::time::sleep(crate::REAL_WINDOW).await;
    assert!(qw.iter().chain(&qa).all(|c| !c.is_finished()), "a claimer returned with no work");
    h.broker.enqueue_many(&batch("w", "qw", 4)).await?;
    let (ids, returned) = claimed_by(&mut qw, 4, "four tasks on qw").await;
    assert_eq!(ids, ["w0", "w1", "w2", "w3"], "each of the four tasks claimed once");
    assert_eq!(returned, 4, "four claimers of one task each");
    assert!(!qa[0].is_finished(), "the claimer on qa only stays blocked");

    let mut qb: Vec<Claimer> = (0..3).map(|_| claimer(&h, &["qb"], 3)).collect();
    tokio::time::sleep(crate::REAL_WINDOW).await;
    h.broker.enqueue_many(&batch("b", "qb", 7)).await?;
    let (ids, returned) = claimed_by(&mut qb, 7, "seven tasks on qb").await;
    assert_eq!(ids.len(), 7, "each of the seven tasks claimed once: {ids:?}");
    assert_eq!(returned, 3, "three claimers took them (3 + 3 + 1)");

    h.enqueue(task("late", "job", "qw")).await;
    let (ids, _) = claimed_by(&mut qw, 1, "one more task on qw").await;
    assert_eq!(ids, ["late"], "the next commit reached a claimer left waiting");
    for c in qw.iter().chain(&qa) {
        c.abort();
    }
    h.finish().await
}
