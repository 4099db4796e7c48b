//! Operator resume (extensions §E5).

use std::time::Duration;

use taskgate::{ErrorKind, Failure, ReplayRequest, Status, Step, Task};

use super::check::expect_err;
use crate::{task, CaseResult, Factory, Harness};

/// Given `rs` (queue qr, max_retry 1) that lost a lease, was throttled, saved a step (cursor
/// "c1", progress 30) and then failed twice ("boom 2"), cascading a cancel to its child, when
/// it is resumed 1 s later, then it is the same task pending with the three counters 0,
/// resumes 1, the checkpoint and last_error kept, no finished_at and run_at now; the child
/// stays canceled; the next claim hands over the checkpoint. Completed, pending and running
/// tasks are `NotResumable`, a replayed task `AlreadyReplayed`, an unknown ID `NotFound`; the
/// cancelled child resumes to pending once its parent completed.
pub async fn c26_operator_resume(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    let before = failed_with_history(&h).await?;
    h.advance(Duration::from_secs(1));
    let resumed = h.broker.resume("rs").await?;
    assert_eq!(resumed, expected_resume(&before, &h), "rs resumed (expected vs got)");
    assert_eq!(h.get("rs").await, resumed, "rs read back differs from resume's snapshot");
    let child = h.get("rs-child").await;
    assert_eq!((child.status, child.resumes), (Status::Canceled, 0), "rs-child stays canceled");
    let claimed = h.dequeue(&["qr"]).await;
    assert_eq!(claimed.id, "rs", "the resumed task is claimable at once");
    assert_eq!((claimed.cursor.as_deref(), claimed.progress), (Some(&b"c1"[..]), Some(30)), "cp");
    h.broker.ack("rs", &claimed.lease_token, None).await?;
    not_resumable(&h).await;
    let child = h.broker.resume("rs-child").await?;
    let got = (child.status, child.resumes, child.last_error.as_str());
    assert_eq!(
        got,
        (Status::Pending, 1, "parent rs failed"),
        "rs-child resumed after rs completed"
    );
    resumed_parent_and_child(&h).await?;
    h.finish().await
}

/// Builds `rs` with every counter used and a checkpoint, then fails it for good; returns it.
async fn failed_with_history(h: &Harness) -> Result<Task, taskgate::Error> {
    h.enqueue(task("rs", "job", "qr").with_max_retry(1).with_payload(&b"payload"[..])).await;
    h.enqueue(task("rs-child", "job", "qrc").with_depends_on(["rs"])).await;
    h.dequeue(&["qr"]).await;
    h.advance(Duration::from_secs(61));
    assert_eq!(h.broker.reap_expired().await?, 1, "rs's lease expired");
    let c = h.dequeue(&["qr"]).await;
    h.broker.fail("rs", &c.lease_token, Failure::throttled("429", h.now())).await?;
    let c = h.dequeue(&["qr"]).await;
    let step = Step {
        cursor: Some(b"c1".to_vec()),
        progress: Some(30),
        message: "m".into(),
        ..Step::default()
    };
    h.broker.save_step("rs", &c.lease_token, step).await?;
    for message in ["boom 1", "boom 2"] {
        let c = h.dequeue(&["qr"]).await;
        h.broker.fail("rs", &c.lease_token, Failure::business(message, h.now())).await?;
    }
    let rs = h.get("rs").await;
    let counters = (rs.status, rs.attempts, rs.lease_lost, rs.throttled, rs.steps);
    assert_eq!(counters, (Status::Failed, 2, 1, 1, 1), "rs before the resume");
    let child = h.get("rs-child").await;
    assert_eq!(child.last_error, "parent rs failed", "rs-child was cascade-cancelled");
    Ok(rs)
}

/// `before` as a resume leaves it (§E5, decisions): counters zeroed, resumes + 1, finished_at,
/// token and cancel request cleared, run_at now, pending; everything else kept.
fn expected_resume(before: &Task, h: &Harness) -> Task {
    Task {
        status: Status::Pending,
        attempts: 0,
        lease_lost: 0,
        throttled: 0,
        resumes: before.resumes + 1,
        finished_at: None,
        lease_token: String::new(),
        cancel_requested: false,
        run_at: h.now(),
        ..before.clone()
    }
}

/// Completed, pending and running tasks do not resume; a replayed one is `AlreadyReplayed`; an
/// unknown ID is `NotFound`.
async fn not_resumable(h: &Harness) {
    expect_err(h.broker.resume("rs").await, ErrorKind::NotResumable, "resume of completed rs");
    h.enqueue(task("np", "job", "qn")).await;
    expect_err(h.broker.resume("np").await, ErrorKind::NotResumable, "resume of pending np");
    h.dequeue(&["qn"]).await;
    expect_err(h.broker.resume("np").await, ErrorKind::NotResumable, "resume of running np");
    h.enqueue(task("rp", "job", "qp")).await;
    h.fail_by_id("qp", "rp").await;
    if let Err(e) = h.broker.replay(ReplayRequest::by_id("rp")).await {
        panic!("replay of failed rp: {e}");
    }
    expect_err(h.broker.resume("rp").await, ErrorKind::AlreadyReplayed, "resume of replayed rp");
    expect_err(h.broker.resume("ghost").await, ErrorKind::NotFound, "resume of an unknown ID");
}

/// `pa` (qa) fails and cancels its child `ch` (qb). `ch` cannot resume while `pa` is failed;
/// resuming `pa` wakes a waiting claimer; `ch` then resumes to blocked and is woken (to a
/// waiting claimer) only when `pa` completes.
async fn resumed_parent_and_child(h: &Harness) -> CaseResult {
    h.enqueue(task("pa", "job", "qa")).await;
    h.enqueue(task("ch", "job", "qb").with_depends_on(["pa"])).await;
    h.fail_by_id("qa", "pa").await;
    let ch = h.get("ch").await;
    let r = h.broker.resume("ch").await;
    expect_err(r, ErrorKind::NotResumable, "resume of ch while its fail_fast parent is failed");
    assert_eq!(h.get("ch").await, ch, "a refused resume changed ch");
    let mut waiter = h.spawn_dequeue(&["qa"]);
    waiter.still_blocked().await;
    assert_eq!(h.broker.resume("pa").await?.status, Status::Pending, "pa resumed");
    let pa = waiter.result().await?;
    assert_eq!(pa.id, "pa", "resume wakes a waiting claimer");
    let ch = h.broker.resume("ch").await?;
    assert_eq!((ch.status, ch.resumes), (Status::Blocked, 1), "ch resumed under running pa");
    h.expect_blocked(&["qb"]).await;
    let mut waiter = h.spawn_dequeue(&["qb"]);
    waiter.still_blocked().await;
    h.broker.ack("pa", &pa.lease_token, None).await?;
    assert_eq!(waiter.result().await?.id, "ch", "pa's completion wakes resumed ch");
    Ok(())
}
