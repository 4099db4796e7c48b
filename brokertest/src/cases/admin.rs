//! Operator tools (extensions §E13): audited actions and the queue view.

use taskgate::{
    AdminAction, AdminOutcome, AuditQuery, AuditRecord, Broker, ErrorKind, ReplayRequest, Status,
};

use crate::{task, CaseResult, Factory, Harness, Need};

/// Given a pending `p`, a running `r` and a completed `d` (owner-less, queue qa), an operator
/// `alice` cancels `p` (canceled, one `ok` record written with it), cancels it again
/// (`AlreadyFinal`, nothing changes, one `task.already_final` record), cancels unknown `nope`
/// (`NotFound`, one record), resumes `p` (pending, attempts 0, one record), resumes completed
/// `d` (`NotResumable`, `d` stays completed, one `task.not_resumable` record), cancels running
/// `r` (cancel requested, one record); `bob` replays `d` (a new execution, its ID the record's
/// detail), replays it again (`AlreadyReplayed`: no second execution, one record), pauses and
/// resumes qa (paused then not, a record each). Bad input (empty ID, empty actor, an actor
/// with a control character: NUL, U+0001, a newline) is `InvalidInput` and writes nothing. The log reads newest first at the clock's time, filters by actor, action and target,
/// pages with limit and offset, and a second handle on the storage reads the same rows.
pub async fn c51_audit_commits_with_mutation(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?.require(Need::Audit).await?;
    h.enqueue(task("d", "job", "qa")).await;
    h.ack_by_id("qa", "d").await;
    h.enqueue(task("r", "job", "qa")).await;
    let running = h.dequeue(&["qa"]).await;
    assert_eq!(running.id, "r", "the claim takes r");
    h.enqueue(task("p", "job", "qa")).await;
    let b = &*h.broker;
    let cancel = |id: &str| AdminAction::Cancel { id: id.to_owned() };
    let resume = |id: &str| AdminAction::Resume { id: id.to_owned() };

    assert_eq!(b.audited("alice", &cancel("p")).await?, AdminOutcome::Done, "cancel p");
    assert_eq!(h.get("p").await.status, Status::Canceled, "cancel p committed");
    expect_last(b, 1, ("alice", "cancel", "task:p", "ok")).await?;

    let again = b.audited("alice", &cancel("p")).await;
    assert_kind(again, ErrorKind::AlreadyFinal, "second cancel of p");
    assert_eq!(h.get("p").await.status, Status::Canceled, "p stays canceled");
    expect_last(b, 2, ("alice", "cancel", "task:p", "task.already_final")).await?;

    assert_kind(b.audited("alice", &cancel("nope")).await, ErrorKind::NotFound, "unknown");
    assert!(matches!(b.get("nope").await, Err(e) if e.kind() == ErrorKind::NotFound));
    expect_last(b, 3, ("alice", "cancel", "task:nope", "task.not_found")).await?;

    match b.audited("alice", &resume("p")).await? {
        AdminOutcome::Task(t) => {
            assert_eq!((t.id.as_str(), t.status, t.attempts), ("p", Status::Pending, 0));
        }
        other => panic!("resume returned {other:?}, not the resumed task"),
    }
    assert_eq!(h.get("p").await.status, Status::Pending, "resume of p committed");
    expect_last(b, 4, ("alice", "resume", "task:p", "ok")).await?;

    assert_kind(b.audited("alice", &resume("d")).await, ErrorKind::NotResumable, "resume d");
    assert_eq!(h.get("d").await.status, Status::Completed, "d stays completed");
    expect_last(b, 5, ("alice", "resume", "task:d", "task.not_resumable")).await?;

    assert_eq!(b.audited("alice", &cancel("r")).await?, AdminOutcome::Done, "cancel r");
    let r = h.get("r").await;
    assert!(r.status == Status::Running && r.cancel_requested, "r only gets a cancel request");
    expect_last(b, 6, ("alice", "cancel", "task:r", "ok")).await?;

    let replay = AdminAction::Replay(ReplayRequest::by_id("d").allow_completed());
    let new = match b.audited("bob", &replay).await? {
        AdminOutcome::Task(t) => *t,
        other => panic!("replay returned {other:?}, not the new execution"),
    };
    assert_eq!((new.replay_of.as_str(), new.status), ("d", Status::Pending), "replay of d");
    let last = expect_last(b, 7, ("bob", "replay", "task:d", "ok")).await?;
    assert_eq!(last.detail, new.id, "a replay's record names the new execution");
    let tasks = b.list(&Default::default()).await?.len();
    assert_kind(b.audited("bob", &replay).await, ErrorKind::AlreadyReplayed, "second replay");
    assert_eq!(b.list(&Default::default()).await?.len(), tasks, "no second execution");
    expect_last(b, 8, ("bob", "replay", "task:d", "task.already_replayed")).await?;

    let pause = AdminAction::PauseQueue { queue: "qa".to_owned() };
    assert_eq!(b.audited("bob", &pause).await?, AdminOutcome::Done, "pause qa");
    assert_eq!(b.paused_queues().await?, ["qa"], "pause committed");
    expect_last(b, 9, ("bob", "pause_queue", "queue:qa", "ok")).await?;
    let unpause = AdminAction::ResumeQueue { queue: "qa".to_owned() };
    assert_eq!(b.audited("bob", &unpause).await?, AdminOutcome::Done, "resume qa");
    assert!(b.paused_queues().await?.is_empty(), "queue resume committed");
    expect_last(b, 10, ("bob", "resume_queue", "queue:qa", "ok")).await?;

    assert_kind(b.audited("alice", &cancel("")).await, ErrorKind::InvalidInput, "empty id");
    assert_kind(b.audited("", &cancel("p")).await, ErrorKind::InvalidInput, "empty actor");
    for actor in ["al\0ice", "\u{1}", "alice\nbob: ok"] {
        let got = b.audited(actor, &cancel("p")).await;
        assert_kind(got, ErrorKind::InvalidInput, &format!("actor {actor:?}"));
    }
    assert_eq!(h.get("p").await.status, Status::Pending, "bad input changed nothing");
    let all = b.audit_log(&AuditQuery::default()).await?;
    assert_eq!(all.len(), 10, "bad input writes no record: {all:?}");
    assert!(all.iter().all(|r| r.at == h.now()), "records carry the broker's clock");
    let ids: Vec<&str> = all.iter().map(|r| r.id.as_str()).collect();
    let mut newest_first = ids.clone();
    newest_first.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(ids, newest_first, "records newest first");

    let q = |actor: &str, action: &str, target: &str| AuditQuery {
        actor: actor.to_owned(),
        action: action.to_owned(),
        target: target.to_owned(),
        ..AuditQuery::default()
    };
    assert_eq!(b.audit_log(&q("bob", "", "")).await?.len(), 4, "bob's records");
    assert_eq!(b.audit_log(&q("", "cancel", "")).await?.len(), 4, "cancel records");
    assert_eq!(b.audit_log(&q("alice", "", "task:p")).await?.len(), 3, "alice on p");
    assert_eq!(b.audit_log(&q("", "", "task:zz")).await?.len(), 0, "no such target");
    let page = AuditQuery { limit: 3, offset: 2, ..AuditQuery::default() };
    let paged = b.audit_log(&page).await?;
    assert_eq!(paged, all[2..5].to_vec(), "limit 3 offset 2");
    let rest = AuditQuery { offset: 8, ..AuditQuery::default() };
    assert_eq!(b.audit_log(&rest).await?, all[8..].to_vec(), "offset without limit");

    let second = h.second_handle().await?;
    assert_eq!(second.audit_log(&AuditQuery::default()).await?, all, "second handle");
    h.finish().await
}

fn assert_kind<T: std::fmt::Debug>(got: taskgate::Result<T>, kind: ErrorKind, what: &str) {
    match got {
        Err(e) => assert_eq!(e.kind(), kind, "{what}: {e}"),
        Ok(v) => panic!("{what}: expected {kind:?}, got Ok({v:?})"),
    }
}

/// Asserts the log holds `count` records, the newest being `(actor, action, target, outcome)`;
/// returns it.
async fn expect_last(
    b: &dyn Broker,
    count: usize,
    (actor, action, target, outcome): (&str, &str, &str, &str),
) -> Result<AuditRecord, taskgate::BoxError> {
    let log = b.audit_log(&AuditQuery::default()).await?;
    assert_eq!(log.len(), count, "one record per action: {log:?}");
    let last = log[0].clone();
    let got = (last.actor.as_str(), last.action.as_str(), last.target.as_str());
    assert_eq!(got, (actor, action, target), "newest record");
    assert_eq!(last.outcome, outcome, "outcome of {action} {target}: {}", last.detail);
    Ok(last)
}

/// Given queue `qa` with a completed, a running, a pending (run_at now), a delayed pending
/// (run_at now + 1 h) and a blocked task, queue `qb` with a retrying task (run_at now + 5 s)
/// and a canceled one, and `qc` paused but empty, `queue_stats` lists `qa` then `qb` (never the
/// empty `qc`) with exact counts by status; `qa`'s oldest run_at is the pending task's (the
/// delayed and blocked ones do not lower it), `qb`'s the retrying task's; a queue with no
/// pending or retrying task has none. After the pending task of `qa` is claimed, `qa`'s oldest
/// is the delayed task's.
pub async fn c52_queue_stats(factory: &dyn Factory) -> CaseResult {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use taskgate::{Failure, QueueStats};

    let h = Harness::new(factory).await?;
    let b = &*h.broker;
    assert!(b.queue_stats().await?.is_empty(), "empty storage has no queues");
    h.enqueue(task("done", "job", "qa")).await;
    h.ack_by_id("qa", "done").await;
    h.enqueue(task("run", "job", "qa")).await;
    assert_eq!(h.dequeue(&["qa"]).await.id, "run", "claim run");
    let hour = h.now().saturating_add(Duration::from_secs(3600));
    h.enqueue(task("later", "job", "qa").with_run_at(hour)).await;
    h.enqueue(task("ready", "job", "qa")).await;
    h.enqueue(task("blocked", "job", "qa").with_depends_on(["run"])).await;
    h.enqueue(task("rt", "job", "qb").with_max_retry(3)).await;
    let rt = h.dequeue(&["qb"]).await;
    let retry_at = h.now().saturating_add(Duration::from_secs(5));
    b.fail(&rt.id, &rt.lease_token, Failure::business("boom", retry_at)).await?;
    h.enqueue(task("cx", "job", "qb")).await;
    b.cancel("cx").await?;
    b.pause_queue("qc").await?;

    let counts = |pairs: &[(Status, u64)]| pairs.iter().copied().collect::<BTreeMap<_, _>>();
    let qa = |oldest| QueueStats {
        queue: "qa".to_owned(),
        counts: counts(&[
            (Status::Pending, 2),
            (Status::Running, 1),
            (Status::Completed, 1),
            (Status::Blocked, 1),
        ]),
        oldest_run_at: Some(oldest),
    };
    let qb = QueueStats {
        queue: "qb".to_owned(),
        counts: counts(&[(Status::Retrying, 1), (Status::Canceled, 1)]),
        oldest_run_at: Some(retry_at),
    };
    assert_eq!(b.queue_stats().await?, vec![qa(h.now()), qb.clone()], "queue stats");
    assert_eq!(h.dequeue(&["qa"]).await.id, "ready", "claim ready");
    let mut after = qa(hour);
    after.counts = counts(&[
        (Status::Pending, 1),
        (Status::Running, 2),
        (Status::Completed, 1),
        (Status::Blocked, 1),
    ]);
    assert_eq!(b.queue_stats().await?, vec![after, qb], "after claiming ready");
    h.finish().await
}

/// Concurrent audited actions on one task are recorded in the order their changes took effect
/// (extensions §E13.6). Given one pending task `t` and four handles on the storage's real clock
/// (no injected clock: the server's on PostgreSQL and MySQL), 500 cancels and 500 resumes of `t`
/// at once, spread over four handles: each call is `Ok`, `AlreadyFinal` (a cancel of the
/// canceled task) or `NotResumable` (a resume of the pending one); the log's `ok` records on
/// `task:t`, newest first, are one per successful call and alternate between cancel and resume
/// (a cancel only succeeds on the pending task, a resume only on the canceled one), the oldest
/// is a cancel, and the newest says what `t` is now (canceled after a cancel, pending after a
/// resume).
pub async fn c56_audit_order_follows_changes(factory: &dyn Factory) -> CaseResult {
    const OPS: usize = 1_000;
    let h = Harness::with_options(factory, |o| o.clock = None).await?;
    let h = h.require(Need::Audit).await?;
    h.enqueue(task("t", "job", "qo")).await;
    let handles = [
        h.broker.clone(),
        h.second_handle().await?,
        h.second_handle().await?,
        h.second_handle().await?,
    ];
    let mut calls = Vec::new();
    for i in 0..OPS {
        let b = handles[i % handles.len()].clone();
        let action = match i % 8 < 4 {
            true => AdminAction::Cancel { id: "t".to_owned() },
            false => AdminAction::Resume { id: "t".to_owned() },
        };
        calls.push(tokio::spawn(async move { b.audited("op", &action).await }));
    }
    let mut succeeded = 0;
    for call in calls {
        match call.await? {
            Ok(_) => succeeded += 1,
            Err(e) if matches!(e.kind(), ErrorKind::AlreadyFinal | ErrorKind::NotResumable) => {}
            Err(e) => panic!("a concurrent cancel or resume failed: {e}"),
        }
    }
    let query = AuditQuery { target: "task:t".to_owned(), ..AuditQuery::default() };
    let log = h.broker.audit_log(&query).await?;
    assert_eq!(log.len(), OPS, "one record per call");
    let ok: Vec<&AuditRecord> = log.iter().filter(|r| r.outcome == "ok").collect();
    assert_eq!(ok.len(), succeeded, "one ok record per successful call");
    for pair in ok.windows(2) {
        assert_ne!(
            pair[0].action, pair[1].action,
            "two successful {}s in a row, newest first: {:?} then {:?}",
            pair[0].action, pair[0], pair[1]
        );
    }
    assert_eq!(ok.last().map(|r| r.action.as_str()), Some("cancel"), "the first success");
    let now = h.get("t").await.status;
    let expected = match ok.first().map(|r| r.action.as_str()) {
        Some("cancel") => Status::Canceled,
        _ => Status::Pending,
    };
    assert_eq!(now, expected, "the newest ok record says what t is now");
    h.finish().await
}
