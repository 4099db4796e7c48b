//! Priorities (decisions "Priorities"): claims take the ready tasks of the listed queues in
//! `(priority, run_at, id)` order, smaller priority first; a task keeps its priority through
//! every status change; a replay inherits it unless the request overrides it; a priority
//! outside −100..=100 is refused before anything is written.

use std::time::Duration;

use taskgate::{Failure, ReplayRequest, Status, Task, Timestamp, MAX_PRIORITY, MIN_PRIORITY};

use super::check::{expect_invalid, ids, must, stored_ids};
use crate::{task, CaseResult, Factory, Harness};

/// `at` moved by `secs` seconds (negative: earlier).
fn shifted(at: Timestamp, secs: i64) -> Timestamp {
    Timestamp::from_millis(at.as_millis().saturating_add(secs.saturating_mul(1000)))
}

/// A task `id` in `queue` with `priority`, due `secs` seconds from `now` (an earlier `run_at`
/// is stored as given).
fn prio(id: &str, queue: &str, priority: i16, now: Timestamp, secs: i64) -> Task {
    task(id, "prio", queue).with_priority(priority).with_run_at(shifted(now, secs))
}

/// Claims one task from `queues`, asserts it is `want` with priority `priority`, acks it.
async fn take(h: &Harness, queues: &[&str], want: &str, priority: i16) -> CaseResult {
    let claimed = h.dequeue(queues).await;
    assert_eq!(claimed.id, want, "claim from {queues:?}: wrong task (claims order by priority)");
    assert_eq!(claimed.priority, priority, "claimed {want}: priority");
    must(h.broker.ack(&claimed.id, &claimed.lease_token, None).await, &format!("ack {want}"))
}

/// Given one queue holding tasks whose priority, `run_at` and ID orders all disagree — `a`
/// (priority 5, due 3 s ago), `b` (−3, due now), `c` (0, 1 s ago), `d` and `e` (0, both 2 s
/// ago), `f` (−3, due in 10 s) and `g` (−100, 1 s ago) — when they are claimed one at a time,
/// then the order is `g`, `b`, `d`, `e`, `c`, `a` (smaller priority first, then earlier
/// `run_at`, then smaller ID), `f` is not claimed before it is due and does not hold back the
/// others, and it is claimed once the clock reaches it. Every snapshot carries the priority
/// as stored (a task enqueued without one has 0). Across listed queues the same key decides:
/// with `x1` (qx, 1, 5 s ago), `x2` (qx, 0, 1 s ago) and `y1` (qy, 0, now),
/// `dequeue_many([qx, qy], 2)` takes `x2` then `y1` — the limit applies after the order —
/// and the next claim takes `x1`.
pub async fn c48_priority_orders_claims(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    let now = h.now();
    let plain = h.enqueue(task("plain", "prio", "q-plain")).await;
    assert_eq!(plain.priority, 0, "a task enqueued without a priority has 0");
    assert_eq!(h.get("plain").await.priority, 0, "get: default priority");
    let batch = [
        prio("a", "qp", 5, now, -3),
        prio("b", "qp", -3, now, 0),
        prio("c", "qp", 0, now, -1),
        prio("e", "qp", 0, now, -2),
        prio("d", "qp", 0, now, -2),
        prio("f", "qp", -3, now, 10),
        prio("g", "qp", MIN_PRIORITY, now, -1),
    ];
    let stored = must(h.broker.enqueue_many(&batch).await, "enqueue_many")?;
    let got: Vec<i16> = stored.iter().map(|t| t.priority).collect();
    assert_eq!(got, [5, -3, 0, 0, 0, -3, -100], "enqueue snapshots carry each priority");
    assert_eq!(h.get("f").await.priority, -3, "get returns the stored priority");
    for (id, priority) in [("g", -100), ("b", -3), ("d", 0), ("e", 0), ("c", 0), ("a", 5)] {
        take(&h, &["qp"], id, priority).await?;
    }
    let early = must(h.broker.try_dequeue(&["qp"]).await, "try_dequeue before f is due")?;
    assert_eq!(early.map(|t| t.id), None, "f (priority -3) was claimed before its run_at");
    h.advance(Duration::from_secs(10));
    take(&h, &["qp"], "f", -3).await?;

    h.enqueue(prio("x1", "qx", 1, now, -5)).await;
    h.enqueue(prio("x2", "qx", 0, now, -1)).await;
    h.enqueue(prio("y1", "qy", 0, now, 0)).await;
    let two = must(h.broker.dequeue_many(&["qx", "qy"], 2).await, "dequeue_many(2)")?;
    let order: Vec<&str> = two.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(order, ["x2", "y1"], "a claim across queues takes (priority, run_at, id) first");
    for t in &two {
        must(h.broker.ack(&t.id, &t.lease_token, None).await, &format!("ack {}", t.id))?;
    }
    take(&h, &["qy", "qx"], "x1", 1).await?;
    h.finish().await
}

/// Given `r` (priority −5, due now) and `o` (priority 0, due 10 s earlier) in one queue, when
/// `r` is claimed and then fails with a retry due now, is requeued, loses its lease to the
/// reaper, fails for good and is resumed, then after each of these `r` still has priority −5
/// and is claimed before `o`. When the completed `r` is replayed, the new execution inherits
/// −5 and is claimed before `o`; a replay of that one with priority 3 gets 3 and is claimed
/// after `o`; a replay request with priority 101 is `InvalidInput { field: "priority" }` and
/// stores nothing.
pub async fn c49_priority_survives_retry_and_replay(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    let now = h.now();
    h.enqueue(prio("r", "qr", -5, now, 0).with_max_retry(3)).await;
    h.enqueue(prio("o", "qr", 0, now, -10)).await;
    let claim_r = |step: &'static str| {
        let h = &h;
        async move {
            let t = h.dequeue(&["qr"]).await;
            assert_eq!(t.id, "r", "after {step}: r (priority -5) must be claimed before o");
            assert_eq!(t.priority, -5, "after {step}: r's priority");
            t
        }
    };
    let t = claim_r("enqueue").await;
    let retry = Failure::business("boom", h.now());
    must(h.broker.fail("r", &t.lease_token, retry).await, "fail r (retry now)")?;
    assert_eq!(h.get("r").await.status, Status::Retrying, "r retries");
    let t = claim_r("a retry").await;
    must(h.broker.requeue("r", &t.lease_token).await, "requeue r")?;
    claim_r("a requeue").await;
    h.advance(Duration::from_secs(61));
    assert_eq!(must(h.broker.reap_expired().await, "reap")?, 1, "the reaper took r's lease");
    let t = claim_r("a reap").await;
    must(h.broker.fail("r", &t.lease_token, Failure::skip("stop")).await, "fail r for good")?;
    must(h.broker.resume("r").await, "resume r")?;
    let t = claim_r("a resume").await;
    must(h.broker.ack("r", &t.lease_token, None).await, "ack r")?;

    let replay =
        must(h.broker.replay(ReplayRequest::by_id("r").allow_completed()).await, "replay")?;
    assert_eq!(replay.priority, -5, "a replay inherits its target's priority");
    take(&h, &["qr"], &replay.id, -5).await?;
    let before = stored_ids(&*h.broker).await?;
    let bad = ReplayRequest::by_id(&replay.id).allow_completed().with_priority(MAX_PRIORITY + 1);
    expect_invalid(h.broker.replay(bad).await, "priority", "replay with priority 101");
    assert_eq!(stored_ids(&*h.broker).await?, before, "a refused replay stored nothing");
    let lower = ReplayRequest::by_id(&replay.id).allow_completed().with_priority(3);
    let second = must(h.broker.replay(lower).await, "replay with priority 3")?;
    assert_eq!(second.priority, 3, "a replay request's priority overrides the target's");
    assert_eq!(h.get(&second.id).await.priority, 3, "get: the replay's priority");
    take(&h, &["qr"], "o", 0).await?;
    take(&h, &["qr"], &second.id, 3).await?;
    h.finish().await
}

/// Given the bounds −100 and 100, when tasks are enqueued with −100 and 100 they are stored
/// with exactly those priorities; with −101, 101, `i16::MIN` or `i16::MAX` the enqueue is
/// `InvalidInput { field: "priority" }`; an `enqueue_many` whose second task is out of range
/// fails whole with the same error and stores neither task.
pub async fn c50_priority_range(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    for (id, p) in [("lo", MIN_PRIORITY), ("hi", MAX_PRIORITY)] {
        let stored = h.enqueue(task(id, "prio", "qv").with_priority(p)).await;
        assert_eq!(stored.priority, p, "enqueue of {id}: stored priority");
        assert_eq!(h.get(id).await.priority, p, "get {id}: stored priority");
    }
    for p in [MIN_PRIORITY - 1, MAX_PRIORITY + 1, i16::MIN, i16::MAX] {
        let out = h.broker.enqueue(&task("bad", "prio", "qv").with_priority(p)).await;
        expect_invalid(out, "priority", &format!("enqueue with priority {p}"));
    }
    let batch = [task("ok1", "prio", "qv"), task("bad2", "prio", "qv").with_priority(-101)];
    expect_invalid(h.broker.enqueue_many(&batch).await, "priority", "enqueue_many with -101");
    assert_eq!(stored_ids(&*h.broker).await?, ids(&["hi", "lo"]), "nothing else was stored");
    h.finish().await
}
