//! Queue pause (extensions §E4).

use std::sync::Arc;
use std::time::Duration;

use taskgate::{Broker, Failure, Status, Task};

use crate::{task, CaseResult, Factory, Harness, REAL_WINDOW, SAFETY_TIMEOUT};

/// Given `fin` and `rt` running from queue qp, pending `p1` (qp), `o1` and `par` (qo) and `pc`
/// (qp) blocked on `par`, when qp is paused (twice; `ahead` was paused before it had tasks),
/// then queue_len and counts are unchanged, both handles list `[ahead, qp]` and neither claims
/// from qp while a claim over `[qp, qo]` gets `o1`. While paused, `pc` wakes when `par` is acked,
/// a new `p2` lands pending, `fin` completes, `rt` fails into retrying, `cx` cancels, and qp
/// holds 4 claimable tasks. resume_queue wakes a dequeue waiting on qp, which gets `p1`; both
/// handles then list `[ahead]` and the second handle claims `p2`; resuming again is fine.
pub async fn c25_queue_pause(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    let second = h.second_handle().await?;
    h.broker.pause_queue("ahead").await?;
    let (fin, rt) = setup(&h).await;
    let before = (h.broker.queue_len("qp").await?, h.broker.counts().await?);
    h.broker.pause_queue("qp").await?;
    h.broker.pause_queue("qp").await?;
    let after = (h.broker.queue_len("qp").await?, h.broker.counts().await?);
    assert_eq!(after, before, "pausing changed queue_len(qp) or counts");
    paused_everywhere(&h, &second, &["ahead", "qp"]).await?;
    let other = claim_on(&*h.broker, &["qp", "qo"]).await;
    assert_eq!(other.id, "o1", "a claim over [qp, qo] must skip paused qp");
    h.broker.ack("o1", &other.lease_token, None).await?;
    still_lands_while_paused(&h, &fin, &rt).await?;
    paused_everywhere(&h, &second, &["ahead", "qp"]).await?;
    let mut waiter = h.spawn_dequeue(&["qp"]);
    waiter.still_blocked().await;
    h.broker.resume_queue("qp").await?;
    assert_eq!(waiter.result().await?.id, "p1", "resume_queue wakes the waiter with p1");
    for b in [&h.broker, &second] {
        assert_eq!(b.paused_queues().await?, ["ahead"], "paused queues after resume");
    }
    assert_eq!(claim_on(&*second, &["qp"]).await.id, "p2", "second handle after resume");
    h.broker.resume_queue("qp").await?;
    h.broker.resume_queue("never-paused").await?;
    h.finish().await
}

/// Both handles list `paused` and neither claims from qp.
async fn paused_everywhere(h: &Harness, second: &Arc<dyn Broker>, paused: &[&str]) -> CaseResult {
    for b in [&h.broker, second] {
        assert_eq!(b.paused_queues().await?, paused, "paused queues on {}", b.backend());
        expect_blocked_on(&**b, &["qp"]).await;
    }
    Ok(())
}

/// Claims `fin` and `rt` (max_retry 3) from qp, then enqueues p1 (qp), o1 and par (qo) and pc
/// (qp, blocked on par). Returns the two running claims.
async fn setup(h: &Harness) -> (Task, Task) {
    h.enqueue(task("fin", "job", "qp")).await;
    h.enqueue(task("rt", "job", "qp").with_max_retry(3)).await;
    let fin = h.dequeue(&["qp"]).await;
    let rt = h.dequeue(&["qp"]).await;
    assert_eq!((fin.id.as_str(), rt.id.as_str()), ("fin", "rt"), "claim order in qp");
    h.enqueue(task("p1", "job", "qp")).await;
    h.enqueue(task("o1", "job", "qo")).await;
    h.enqueue(task("par", "job", "qo")).await;
    let pc = h.enqueue(task("pc", "job", "qp").with_depends_on(["par"])).await;
    assert_eq!(pc.status, Status::Blocked, "pc waits for par");
    (fin, rt)
}

/// Dependency wake, enqueue, running outcomes, retries and cancel all proceed in paused qp.
async fn still_lands_while_paused(h: &Harness, fin: &Task, rt: &Task) -> CaseResult {
    h.ack_by_id("qo", "par").await;
    assert_eq!(h.get("pc").await.status, Status::Pending, "pc woken while qp is paused");
    assert_eq!(h.enqueue(task("p2", "job", "qp")).await.status, Status::Pending, "p2 enqueued");
    h.broker.ack("fin", &fin.lease_token, None).await?;
    assert_eq!(h.get("fin").await.status, Status::Completed, "running fin finishes");
    let retry_at = h.now().saturating_add(Duration::from_secs(1));
    h.broker.fail("rt", &rt.lease_token, Failure::business("later", retry_at)).await?;
    assert_eq!(h.get("rt").await.status, Status::Retrying, "running rt fails into a retry");
    h.advance(Duration::from_secs(1));
    h.enqueue(task("cx", "job", "qp")).await;
    h.broker.cancel("cx").await?;
    assert_eq!(h.get("cx").await.status, Status::Canceled, "cancel in a paused queue");
    assert_eq!(h.broker.queue_len("qp").await?, 4, "qp holds p1, p2, pc and rt");
    Ok(())
}

/// A dequeue on `broker` must still be waiting after 100 ms (real time).
async fn expect_blocked_on(broker: &dyn Broker, queues: &[&str]) {
    match tokio::time::timeout(REAL_WINDOW, broker.dequeue(&queues)).await {
        Err(_) => {}
        Ok(Ok(t)) => panic!("expected {queues:?} to block, but claimed {}", t.id),
        Ok(Err(e)) => panic!("expected {queues:?} to block, but dequeue failed: {e}"),
    }
}

/// A dequeue on `broker` that must succeed within 5 s.
async fn claim_on(broker: &dyn Broker, queues: &[&str]) -> Task {
    match tokio::time::timeout(SAFETY_TIMEOUT, broker.dequeue(&queues)).await {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => panic!("dequeue {queues:?} failed: {e}"),
        Err(_) => panic!("dequeue {queues:?}: nothing claimed within {SAFETY_TIMEOUT:?}"),
    }
}
