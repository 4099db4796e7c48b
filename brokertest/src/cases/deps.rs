//! Dependencies: parent checks, wake-ups, fan-in, cascading cancellation, and cancel in every
//! status (contract §3.4 Cancel, §5).

use std::time::Duration;

use taskgate::{ErrorKind, Failure, Filter, OnParentFailure, Status, Task};

use super::check::{expect_kind, must};
use crate::{task, CaseResult, Factory, Harness};

/// Given no parent, enqueueing a child of `no-such-parent` fails with `NotFound` and stores
/// nothing (preset or generated ID). Given `p` and its child `c`, `c` is blocked and a dequeue
/// waiting on its queue receives it once `p` is acked. A fan-in child of `p1` and `p2` stays
/// blocked after `p1` completes and becomes pending after `p2`; a child of the completed `p`
/// is pending at once.
pub async fn c10_dep_wake(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    check_missing_parent(&h).await?;

    h.enqueue(task("p", "llm", "qp")).await;
    let c = h.enqueue(task("c", "llm", "qc").with_depends_on(["p"])).await;
    assert_eq!(c.status, Status::Blocked, "c: a child of pending p must be blocked");
    h.expect_blocked(&["qc"]).await;
    let mut waiter = h.spawn_dequeue(&["qc"]);
    waiter.still_blocked().await;
    h.ack_by_id("qp", "p").await;
    let woken = must(waiter.result().await, "waiter on qc")?;
    assert_eq!(woken.id, "c", "the waiter on qc must receive c once p completed");

    h.enqueue(task("p1", "llm", "qp")).await;
    h.enqueue(task("p2", "llm", "qp")).await;
    let fan = h.enqueue(task("fan", "llm", "qc").with_depends_on(["p1", "p2"])).await;
    assert_eq!(fan.status, Status::Blocked, "fan: must be blocked on p1 and p2");
    h.ack_by_id("qp", "p1").await;
    assert_eq!(h.get("fan").await.status, Status::Blocked, "fan: p2 is still pending");
    h.ack_by_id("qp", "p2").await;
    assert_eq!(h.get("fan").await.status, Status::Pending, "fan: both parents completed");

    let late = h.enqueue(task("late", "llm", "qc").with_depends_on(["p"])).await;
    assert_eq!(late.status, Status::Pending, "late: its parent p is already completed");
    assert_eq!(h.get("late").await.status, Status::Pending, "late: stored status");
    h.finish().await
}

async fn check_missing_parent(h: &Harness) -> CaseResult {
    let orphan = task("orphan", "llm", "q").with_depends_on(["no-such-parent"]);
    expect_kind(h.broker.enqueue(&orphan).await, ErrorKind::NotFound, "enqueue orphan");
    let unnamed = task("", "llm", "q").with_depends_on(["no-such-parent"]);
    expect_kind(h.broker.enqueue(&unnamed).await, ErrorKind::NotFound, "enqueue unnamed orphan");
    assert!(unnamed.id.is_empty(), "the caller's task must keep its empty ID");
    let stored = h.broker.list(&Filter::default()).await?;
    assert!(stored.is_empty(), "a rejected orphan was stored: {stored:?}");
    Ok(())
}

/// Given the fail_fast chain A ← B ← C, when A fails then B is canceled with "parent A failed"
/// and C with "parent B canceled", both with finished_at, by the time fail returns. An
/// ignore_parent_failure child B2 of a failed A2 becomes pending. A fail_fast child D enqueued
/// under the failed A is canceled at once ("parent A failed", finished_at); an
/// ignore_parent_failure child E is pending.
pub async fn c11_cascade_cancel(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    h.enqueue(task("A", "step", "qa")).await;
    h.enqueue(task("B", "step", "qb").with_depends_on(["A"])).await;
    h.enqueue(task("C", "step", "qc").with_depends_on(["B"])).await;
    h.fail_by_id("qa", "A").await;
    assert_eq!(h.get("A").await.status, Status::Failed, "A: must be failed");
    expect_canceled(&h.get("B").await, "parent A failed", &h);
    expect_canceled(&h.get("C").await, "parent B canceled", &h);

    h.enqueue(task("A2", "step", "qa")).await;
    let ignore = OnParentFailure::IgnoreParentFailure;
    h.enqueue(task("B2", "step", "qb").with_depends_on(["A2"]).with_on_parent_failure(ignore))
        .await;
    h.fail_by_id("qa", "A2").await;
    assert_eq!(h.get("B2").await.status, Status::Pending, "B2: ignores its failed parent");

    let d = h.enqueue(task("D", "step", "qd").with_depends_on(["A"])).await;
    expect_canceled(&d, "parent A failed", &h);
    expect_canceled(&h.get("D").await, "parent A failed", &h);
    let e = h
        .enqueue(task("E", "step", "qe").with_depends_on(["A"]).with_on_parent_failure(ignore))
        .await;
    assert_eq!(e.status, Status::Pending, "E: ignores its failed parent at enqueue");
    h.finish().await
}

/// Asserts `t` was canceled now with `last_error`.
fn expect_canceled(t: &Task, last_error: &str, h: &Harness) {
    assert_eq!(t.status, Status::Canceled, "{}: status", t.id);
    assert_eq!(t.last_error, last_error, "{}: last_error", t.id);
    assert_eq!(t.finished_at, Some(h.now()), "{}: finished_at", t.id);
}

/// Cancel in every non-terminal status: pending `pd` is canceled at once (finished_at = now)
/// and its blocked child gets "parent pd canceled"; blocked `bk` is canceled and its parent
/// stays pending; retrying `rt` is canceled; running `rn` only gets the request (heartbeat
/// then fails with `Canceled`, finish_canceled cancels it, a second cancel is
/// `AlreadyFinal`); running `rp` whose worker vanished is canceled by the reaper (returns 1,
/// lease_lost 0) and its child gets "parent rp canceled", with nothing claimable left.
pub async fn c12_cancel_states(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    cancel_pending_and_blocked(&h).await?;
    cancel_retrying(&h).await?;
    cancel_running(&h).await?;
    cancel_running_then_reap(&h).await?;
    h.finish().await
}

async fn cancel_pending_and_blocked(h: &Harness) -> CaseResult {
    h.enqueue(task("pd", "llm", "q-pd")).await;
    h.enqueue(task("pd-child", "llm", "q-pdc").with_depends_on(["pd"])).await;
    must(h.broker.cancel("pd").await, "cancel pending pd")?;
    expect_canceled(&h.get("pd").await, "canceled", h);
    expect_canceled(&h.get("pd-child").await, "parent pd canceled", h);

    h.enqueue(task("bp", "llm", "q-bp")).await;
    h.enqueue(task("bk", "llm", "q-bk").with_depends_on(["bp"])).await;
    assert_eq!(h.get("bk").await.status, Status::Blocked, "bk: must start blocked");
    must(h.broker.cancel("bk").await, "cancel blocked bk")?;
    expect_canceled(&h.get("bk").await, "canceled", h);
    assert_eq!(h.get("bp").await.status, Status::Pending, "bp: cancelling its child changed it");
    Ok(())
}

async fn cancel_retrying(h: &Harness) -> CaseResult {
    h.enqueue(task("rt", "llm", "q-rt").with_max_retry(5)).await;
    let claimed = h.dequeue(&["q-rt"]).await;
    let retry_at = h.now().saturating_add(Duration::from_secs(3600));
    must(
        h.broker.fail("rt", &claimed.lease_token, Failure::business("boom", retry_at)).await,
        "fail rt",
    )?;
    assert_eq!(h.get("rt").await.status, Status::Retrying, "rt: must be retrying");
    must(h.broker.cancel("rt").await, "cancel retrying rt")?;
    expect_canceled(&h.get("rt").await, "canceled", h);
    Ok(())
}

async fn cancel_running(h: &Harness) -> CaseResult {
    h.enqueue(task("rn", "llm", "q3")).await;
    let claimed = h.dequeue(&["q3"]).await;
    must(h.broker.cancel("rn").await, "cancel running rn")?;
    assert_eq!(
        h.get("rn").await.status,
        Status::Running,
        "rn: cancel keeps a running task running"
    );
    let beat = h.broker.heartbeat("rn", &claimed.lease_token).await;
    expect_kind(beat, ErrorKind::Canceled, "heartbeat rn after cancel");
    must(h.broker.finish_canceled("rn", &claimed.lease_token).await, "finish_canceled rn")?;
    expect_canceled(&h.get("rn").await, "canceled", h);
    expect_kind(h.broker.cancel("rn").await, ErrorKind::AlreadyFinal, "cancel rn again");
    Ok(())
}

async fn cancel_running_then_reap(h: &Harness) -> CaseResult {
    h.enqueue(task("rp", "llm", "q-rp")).await;
    h.enqueue(task("rp-child", "llm", "q-rp2").with_depends_on(["rp"])).await;
    h.dequeue(&["q-rp"]).await;
    must(h.broker.cancel("rp").await, "cancel running rp")?;
    h.advance(Duration::from_secs(61));
    assert_eq!(must(h.broker.reap_expired().await, "reap")?, 1, "reap must handle rp only");
    let rp = h.get("rp").await;
    expect_canceled(&rp, "canceled", h);
    assert_eq!(rp.lease_lost, 0, "rp: a reaped cancel must not count a lost lease");
    expect_canceled(&h.get("rp-child").await, "parent rp canceled", h);
    h.expect_blocked(&["q-rp"]).await;
    Ok(())
}

/// Duplicate parents are stored as given and count once (contract §5.1: the decision reads
/// the distinct parents; notes §15.11: `depends_on` verbatim; decisions: each edge counts
/// once). Given pending `p` and `q`, `c` (queue qd) on [p, p, q] reads back [p, p, q] and is
/// blocked; after p completes it stays blocked (q is open); after q completes it is pending and
/// claimable once (then nothing is left in qd, queue_len 0). Given `i` (ignore parent
/// failure) on [r, r, s]: r fails, i stays blocked; r is resumed and completes, i stays
/// blocked (r's edges counted once, also the second time r finishes); s completes, i is
/// pending. Given `d` (fail fast) on [f, f], f failing cancels d with "parent f failed". Given
/// `e` on [done, done] with done completed, e is pending at once.
pub async fn c43_duplicate_parents(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    h.enqueue(task("p", "job", "qp")).await;
    h.enqueue(task("q", "job", "qq")).await;
    let c = h.enqueue(task("c", "job", "qd").with_depends_on(["p", "p", "q"])).await;
    assert_eq!(c.depends_on, ["p", "p", "q"], "c: depends_on as given");
    assert_eq!(h.get("c").await.depends_on, ["p", "p", "q"], "c: depends_on read back");
    assert_eq!(c.status, Status::Blocked, "c: two open parents");
    h.ack_by_id("qp", "p").await;
    assert_eq!(h.get("c").await.status, Status::Blocked, "c after p completed: q is open");
    h.ack_by_id("qq", "q").await;
    assert_eq!(h.get("c").await.status, Status::Pending, "c after p and q completed");
    assert_eq!(h.dequeue(&["qd"]).await.id, "c", "the claim from qd");
    assert!(h.broker.try_dequeue(&["qd"]).await?.is_none(), "c was claimable twice");
    assert_eq!(h.broker.queue_len("qd").await?, 0, "queue_len of qd after c's claim");

    h.enqueue(task("r", "job", "qr")).await;
    h.enqueue(task("s", "job", "qs")).await;
    let ignore = OnParentFailure::IgnoreParentFailure;
    let i = task("i", "job", "qi").with_depends_on(["r", "r", "s"]).with_on_parent_failure(ignore);
    h.enqueue(i).await;
    h.fail_by_id("qr", "r").await;
    assert_eq!(h.get("i").await.status, Status::Blocked, "i after r failed: s is open");
    h.broker.resume("r").await?;
    h.ack_by_id("qr", "r").await;
    assert_eq!(h.get("i").await.status, Status::Blocked, "i after r finished a second time");
    h.ack_by_id("qs", "s").await;
    assert_eq!(h.get("i").await.status, Status::Pending, "i after s completed");

    h.enqueue(task("f", "job", "qf")).await;
    h.enqueue(task("d", "job", "qx").with_depends_on(["f", "f"])).await;
    h.fail_by_id("qf", "f").await;
    let d = h.get("d").await;
    let got = (d.status, d.last_error.as_str());
    assert_eq!(got, (Status::Canceled, "parent f failed"), "d after f failed");

    h.enqueue(task("done", "job", "qo")).await;
    h.ack_by_id("qo", "done").await;
    let e = h.enqueue(task("e", "job", "qe").with_depends_on(["done", "done"])).await;
    assert_eq!((e.status, e.depends_on.len()), (Status::Pending, 2), "e on a completed parent");
    h.finish().await
}
