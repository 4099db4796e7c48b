//! Claiming: exclusion, blocking, delays, retry re-claims (contract §3.4 Dequeue, extensions
//! §E0 for cancellation by dropping futures).

use std::time::Duration;

use taskgate::{Error, Failure, Status, Task};
use tokio::task::JoinSet;
use tokio::time::{timeout_at, Instant};

use super::check::must;
use crate::{task, CaseResult, Factory, Harness, REAL_WINDOW, SAFETY_TIMEOUT};

/// How many claimers race for one task in c03.
const RACERS: usize = 100;

/// Given one ready task `only`, when 100 dequeues race for it, then exactly one claims it with
/// a token while the others keep blocking (observed for 100 ms after the first returned);
/// cancelled by dropping, they all stop within 5 s without a result, `only` is `running`
/// under the winner's token, and no dropped claimer takes a task enqueued afterwards.
pub async fn c03_claim_mutex(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    h.enqueue(task("only", "llm", "q")).await;
    let deadline = Instant::now() + SAFETY_TIMEOUT;
    let mut racers = JoinSet::new();
    for _ in 0..RACERS {
        let broker = h.broker.clone();
        racers.spawn(async move { broker.dequeue(&["q"]).await });
    }
    let winner = first_claim(&mut racers, deadline).await;
    // Every other claimer gets one observation window to try (and fail) to claim it too.
    tokio::time::sleep(REAL_WINDOW).await;
    if let Some(second) = racers.try_join_next() {
        panic!(
            "a second dequeue returned while the others must keep blocking: {}",
            describe(second)
        );
    }
    racers.abort_all();
    let cancelled = drain_cancelled(&mut racers, deadline).await;
    assert_eq!(cancelled, RACERS - 1, "every other dequeue must end cancelled");

    assert_eq!(winner.id, "only", "the winning claim returned the wrong task");
    assert!(!winner.lease_token.is_empty(), "the winning claim has no token");
    let stored = h.get("only").await;
    assert_eq!(stored.status, Status::Running, "only: must be running after the race");
    assert_eq!(stored.lease_token, winner.lease_token, "only: stored token is not the winner's");

    h.enqueue(task("after", "llm", "q")).await;
    tokio::time::sleep(REAL_WINDOW).await;
    let after = h.get("after").await;
    assert_eq!(after.status, Status::Pending, "after: a cancelled dequeue claimed it");
    assert_eq!(h.dequeue(&["q"]).await.id, "after", "after: must still be claimable");
    h.finish().await
}

async fn first_claim(racers: &mut JoinSet<taskgate::Result<Task>>, deadline: Instant) -> Task {
    match timeout_at(deadline, racers.join_next()).await {
        Err(_) => panic!("no dequeue returned within {SAFETY_TIMEOUT:?}"),
        Ok(None) => panic!("no dequeue was started"),
        Ok(Some(Ok(Ok(t)))) => t,
        Ok(Some(Ok(Err(e)))) => panic!("a racing dequeue failed: {e}"),
        Ok(Some(Err(join))) => panic!("a racing dequeue panicked: {join}"),
    }
}

fn describe(joined: Result<taskgate::Result<Task>, tokio::task::JoinError>) -> String {
    match joined {
        Ok(Ok(t)) => format!("claimed {} (token {})", t.id, t.lease_token),
        Ok(Err(e)) => format!("failed: {e}"),
        Err(join) => format!("ended: {join}"),
    }
}

/// Waits for every aborted racer; each must end cancelled (not with a task, not with an error).
async fn drain_cancelled(racers: &mut JoinSet<taskgate::Result<Task>>, deadline: Instant) -> usize {
    let mut cancelled = 0;
    loop {
        match timeout_at(deadline, racers.join_next()).await {
            Err(_) => panic!("{} cancelled dequeues did not stop within 5 s", racers.len()),
            Ok(None) => return cancelled,
            Ok(Some(Err(join))) if join.is_cancelled() => cancelled += 1,
            Ok(Some(Err(join))) => panic!("a cancelled dequeue panicked: {join}"),
            Ok(Some(Ok(Ok(t)))) => {
                panic!("a second dequeue claimed {} (token {})", t.id, t.lease_token)
            }
            Ok(Some(Ok(Err(e)))) => panic!("a racing dequeue returned an error instead: {e}"),
        }
    }
}

/// Given no ready task, when dequeue is called with no queues it fails at once with
/// `InvalidInput { field: "queues" }`; a waiting dequeue stays blocked until `wake` is
/// enqueued and then returns it; a second waiter cancelled by dropping stops promptly and
/// claimed nothing (the task enqueued afterwards is still claimable).
pub async fn c04_blocking_dequeue(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    match tokio::time::timeout(SAFETY_TIMEOUT, h.broker.dequeue(&[] as &[&str; 0])).await {
        Err(_) => panic!("dequeue with no queues blocked instead of failing"),
        Ok(Err(Error::InvalidInput { field, .. })) => {
            assert_eq!(field, "queues", "dequeue with no queues must name the queues argument");
        }
        Ok(Err(e)) => panic!("dequeue with no queues: expected InvalidInput, got {e}"),
        Ok(Ok(t)) => panic!("dequeue with no queues claimed {}", t.id),
    }

    let mut waiter = h.spawn_dequeue(&["q"]);
    waiter.still_blocked().await;
    h.enqueue(task("wake", "llm", "q")).await;
    let woken = must(waiter.result().await, "waiter for wake")?;
    assert_eq!(woken.id, "wake", "the waiter must receive wake");
    assert_eq!(h.get("wake").await.status, Status::Running, "wake: must be running");

    let mut second = h.spawn_dequeue(&["q"]);
    second.still_blocked().await;
    second.cancel().await;
    h.enqueue(task("after", "llm", "q")).await;
    tokio::time::sleep(REAL_WINDOW).await;
    let after = h.get("after").await;
    assert_eq!(after.status, Status::Pending, "after: the cancelled waiter claimed it");
    assert_eq!(h.dequeue(&["q"]).await.id, "after", "after: must still be claimable");
    h.finish().await
}

/// Given `later` with run_at now+5 min, when time advances to 1 s before run_at it is not
/// claimable, and a dequeue waiting from then on returns `later` as soon as the clock reaches
/// run_at (the wait is registered on the injected clock, not only on write signals).
pub async fn c05_delayed_task(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    let run_at = h.now().saturating_add(Duration::from_secs(300));
    h.enqueue(task("later", "llm", "q").with_run_at(run_at)).await;
    h.expect_blocked(&["q"]).await;
    h.advance(Duration::from_secs(299));
    h.expect_blocked(&["q"]).await;

    let mut waiter = h.spawn_dequeue(&["q"]);
    waiter.still_blocked().await;
    h.advance(Duration::from_secs(1));
    assert_eq!(h.now(), run_at, "the clock must now be exactly at later's run_at");
    let claimed = must(waiter.result().await, "waiter for later")?;
    assert_eq!(claimed.id, "later", "the waiter must receive later once run_at is reached");
    h.finish().await
}

/// Given `rt` (max_retry 5) claimed and failed with a business failure retrying at now+30 s,
/// when the clock has not reached the retry time it is not claimable; after 30 s a claim
/// returns `rt` with a new token and attempts 1.
pub async fn c09_retrying_reclaim(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    h.enqueue(task("rt", "llm", "q").with_max_retry(5)).await;
    let first = h.dequeue(&["q"]).await;
    let retry_at = h.now().saturating_add(Duration::from_secs(30));
    must(
        h.broker.fail("rt", &first.lease_token, Failure::business("flaky", retry_at)).await,
        "fail rt",
    )?;
    assert_eq!(
        h.get("rt").await.status,
        Status::Retrying,
        "rt: must be retrying after the failure"
    );
    h.expect_blocked(&["q"]).await;

    h.advance(Duration::from_secs(30));
    let second = h.dequeue(&["q"]).await;
    assert_eq!(second.id, "rt", "the re-claim must return rt");
    assert_ne!(second.lease_token, first.lease_token, "rt: the re-claim must issue a new token");
    assert_eq!(second.attempts, 1, "rt: the re-claim must carry attempts 1");
    h.finish().await
}
