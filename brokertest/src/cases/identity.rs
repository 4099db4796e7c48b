//! Replay and the identity invariants under concurrency (contract §8).

use std::sync::Arc;
use std::time::Duration;

use taskgate::{Broker, ErrorKind, Failure, Filter, ReplayRequest, Status, Task};
use tokio::sync::Barrier;

use super::check::expect_err;
use crate::{task, CaseResult, Factory, Harness, SAFETY_TIMEOUT};

const SECOND: Duration = Duration::from_secs(1);

/// Given E1 (key job-1, report, queue q, payload `{"day":"2026-07-16"}`, max_retry 2, owner
/// ops) claimed and acked with `{"ok":1}` and a child C depending on it, when E1 is replayed,
/// then without allow_completed it is `CompletedNotAllowed`; with it (1 s later) E2 is a new
/// pending execution replaying E1 with the key, type, queue, max_retry, owner and payload
/// copied and everything else fresh, while E1 is unchanged field by field and C (and a new
/// child C2) still see E1 and its result. E2 fails twice (business, then skip) and its replay
/// with payload `{"fix":true}` is E3 with that payload, attempts 0 and no last error.
pub async fn c19_replay_basic(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    let e1 = completed_e1(&h).await?;
    let child = h.enqueue(task("c", "child", "qc").with_depends_on([e1.id.as_str()])).await;
    assert_eq!(child.status, Status::Pending, "child of a completed parent");
    let err = h.broker.replay(ReplayRequest::by_id(&e1.id)).await;
    expect_err(err, ErrorKind::CompletedNotAllowed, "replay of completed E1 without the flag");
    h.advance(SECOND);
    let e2 = h.broker.replay(ReplayRequest::by_id(&e1.id).allow_completed()).await?;
    check_fresh_replay(&h, &e2, &e1, e1.payload.as_deref());
    assert_eq!(h.get(&e2.id).await, e2, "E2 read back differs from the replay's snapshot");
    assert_eq!(h.get(&e1.id).await, e1, "replay wrote to its target E1");
    parents_still_see_e1(&h, &e1).await;
    fail_e2_twice(&h, &e2.id).await;
    h.advance(SECOND);
    let e2 = h.get(&e2.id).await;
    let e3 =
        h.broker.replay(ReplayRequest::by_id(&e2.id).with_payload(&br#"{"fix":true}"#[..])).await?;
    check_fresh_replay(&h, &e3, &e2, Some(br#"{"fix":true}"#));
    assert_eq!(h.get(&e2.id).await, e2, "replay wrote to its target E2");
    h.finish().await
}

/// E1 claimed and acked with `{"ok":1}`; returns its stored snapshot.
async fn completed_e1(h: &Harness) -> Result<Task, taskgate::Error> {
    let e1 = Task::new("report", "q")
        .with_business_key("job-1")
        .with_payload(&br#"{"day":"2026-07-16"}"#[..])
        .with_max_retry(2)
        .with_owner("ops");
    let e1 = h.enqueue(e1).await;
    let claimed = h.dequeue(&["q"]).await;
    assert_eq!(claimed.id, e1.id, "claim from q returned the wrong task");
    h.broker.ack(&e1.id, &claimed.lease_token, Some(br#"{"ok":1}"#.to_vec())).await?;
    let e1 = h.get(&e1.id).await;
    assert_eq!(e1.status, Status::Completed, "E1 after ack");
    Ok(e1)
}

/// A replay of `target` is a new pending execution: copied identity fields, the given payload,
/// fresh counters, no dependencies, created and runnable now (contract §8.3, decisions).
fn check_fresh_replay(h: &Harness, new: &Task, target: &Task, payload: Option<&[u8]>) {
    assert!(!new.id.is_empty() && new.id != target.id, "replay must create a new ID");
    assert_eq!(new.replay_of, target.id, "replay_of");
    let copied = (&new.business_key, &new.task_type, &new.queue, new.max_retry, &new.owner);
    let expected =
        (&target.business_key, &target.task_type, &target.queue, target.max_retry, &target.owner);
    assert_eq!(copied, expected, "key, type, queue, max_retry and owner are copied");
    assert_eq!(new.on_parent_failure, target.on_parent_failure, "on_parent_failure is copied");
    assert_eq!(new.payload.as_deref(), payload, "replay payload");
    assert_eq!((new.attempts, new.lease_lost, new.throttled), (0, 0, 0), "counters");
    assert_eq!(new.status, Status::Pending, "a replay is pending");
    assert!(new.result.as_deref().is_none_or(<[u8]>::is_empty), "a replay has no result");
    assert_eq!(new.last_error, "", "a replay has no last error");
    assert!(new.depends_on.is_empty(), "a replay has no parents");
    assert_eq!((new.created_at, new.run_at), (h.now(), h.now()), "created_at and run_at = now");
    assert_eq!((new.started_at, new.finished_at), (None, None), "started_at and finished_at");
    assert_eq!(new.lease_token, "", "a replay holds no lease");
    let step = (&new.cursor, new.progress, new.message.as_str(), new.steps, new.resumes);
    assert_eq!(step, (&None, None, "", 0, 0), "a replay starts with no checkpoint");
}

/// C's parent is still E1 with its result; a new child C2 of E1 sees the same.
async fn parents_still_see_e1(h: &Harness, e1: &Task) {
    let c = h.get("c").await;
    assert_eq!(c.depends_on, vec![e1.id.clone()], "C's parents after the replay");
    assert_eq!(h.get(&c.depends_on[0]).await, *e1, "C's parent is E1, unchanged");
    let c2 = h.enqueue(task("c2", "child", "qc").with_depends_on([e1.id.as_str()])).await;
    assert_eq!(c2.status, Status::Pending, "a new child of completed E1");
    let parent = h.get(&c2.depends_on[0]).await;
    assert_eq!(parent.result.as_deref(), Some(br#"{"ok":1}"#.as_slice()), "C2's parent result");
}

/// Claims E2 (the only claimable task in q), fails it with a business error retried now, then
/// with skip: failed with attempts 1.
async fn fail_e2_twice(h: &Harness, e2: &str) {
    let claimed = h.dequeue(&["q"]).await;
    assert_eq!(claimed.id, e2, "only E2 is claimable in q");
    let failure = Failure::business("biz fail", h.now());
    if let Err(e) = h.broker.fail(e2, &claimed.lease_token, failure).await {
        panic!("business fail of E2: {e}");
    }
    assert_eq!(h.get(e2).await.status, Status::Retrying, "E2 after a business failure");
    let claimed = h.fail_now("q", taskgate::FailKind::Skip).await;
    assert_eq!(claimed.id, e2, "the retry claim returned the wrong task");
    let e2 = h.get(e2).await;
    assert_eq!(e2.status, Status::Failed, "E2 after skip");
    assert!(e2.attempts > 0, "E2 kept its business failure: attempts {}", e2.attempts);
}

/// Given E1 (key k1) failed, when replays extend and probe the chain, then: E1 replays to E2;
/// E1 again is `AlreadyReplayed`; pending E2 (by ID or by key) is `ReplayNotFinal`; after E2
/// fails, replay by key gives E3 replaying E2; cancelled E3 replays to E4 without the flag; the
/// key lists E1..E4 in order. A key-less failed task replays once (empty key, replay_of set),
/// then `AlreadyReplayed`. Unknown ID or key is `NotFound`; an empty request and one with both
/// fields are `InvalidInput`.
pub async fn c20_replay_chain(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    h.enqueue(Task::new("job", "q").with_id("e1").with_business_key("k1")).await;
    h.fail_by_id("q", "e1").await;
    h.advance(SECOND);
    let e2 = h.broker.replay(ReplayRequest::by_id("e1")).await?;
    assert_eq!((e2.replay_of.as_str(), e2.business_key.as_str()), ("e1", "k1"), "E2");
    let again = h.broker.replay(ReplayRequest::by_id("e1")).await;
    expect_err(again, ErrorKind::AlreadyReplayed, "second replay of E1");
    let pending = h.broker.replay(ReplayRequest::by_id(&e2.id)).await;
    expect_err(pending, ErrorKind::ReplayNotFinal, "replay of pending E2");
    let by_key = h.broker.replay(ReplayRequest::by_key("k1")).await;
    expect_err(by_key, ErrorKind::ReplayNotFinal, "replay of k1 while its tail E2 is pending");
    h.fail_by_id("q", &e2.id).await;
    h.advance(SECOND);
    let e3 = h.broker.replay(ReplayRequest::by_key("k1")).await?;
    assert_eq!(e3.replay_of, e2.id, "replay by key replays the tail E2");
    h.broker.cancel(&e3.id).await?;
    h.advance(SECOND);
    let e4 = h.broker.replay(ReplayRequest::by_id(&e3.id)).await?;
    assert_eq!(e4.replay_of, e3.id, "E4 replays cancelled E3");
    let chain: Vec<String> = h
        .broker
        .list(&Filter { business_key: "k1".into(), ..Filter::default() })
        .await?
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(chain, vec!["e1".to_owned(), e2.id, e3.id, e4.id], "k1's chain in order");
    keyless_replay(&h).await?;
    bad_requests(&h).await;
    h.finish().await
}

async fn keyless_replay(h: &Harness) -> Result<(), taskgate::Error> {
    h.enqueue(task("nk", "job", "q2")).await;
    h.fail_by_id("q2", "nk").await;
    let replay = h.broker.replay(ReplayRequest::by_id("nk")).await?;
    assert_eq!((replay.business_key.as_str(), replay.replay_of.as_str()), ("", "nk"), "key-less");
    let again = h.broker.replay(ReplayRequest::by_id("nk")).await;
    expect_err(again, ErrorKind::AlreadyReplayed, "second replay of key-less nk");
    Ok(())
}

async fn bad_requests(h: &Harness) {
    let r = h.broker.replay(ReplayRequest::by_id("no-such")).await;
    expect_err(r, ErrorKind::NotFound, "replay of an unknown ID");
    let r = h.broker.replay(ReplayRequest::by_key("no-such-key")).await;
    expect_err(r, ErrorKind::NotFound, "replay of an unknown key");
    let r = h.broker.replay(ReplayRequest::default()).await;
    expect_err(r, ErrorKind::InvalidInput, "replay with neither ID nor key");
    let both = ReplayRequest { business_key: "k1".into(), ..ReplayRequest::by_id("e1") };
    let r = h.broker.replay(both).await;
    expect_err(r, ErrorKind::InvalidInput, "replay with both ID and key");
}

/// How many callers race in c22.
const RACERS: usize = 50;

/// Given two handles on one storage, when 50 concurrent enqueues use key `race-key`, then
/// exactly one succeeds, every other fails with `TaskExists`, and the key lists one execution;
/// when that execution has failed and 50 concurrent replays target it, then exactly one
/// succeeds, every other fails with `AlreadyReplayed`, and the key lists two executions.
pub async fn c22_identity_race(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    let handles = [h.broker.clone(), h.second_handle().await?];
    let winners = race(&handles, ErrorKind::TaskExists, |b| async move {
        b.enqueue(&Task::new("job", "q").with_business_key("race-key")).await
    })
    .await;
    let [first] = winners.as_slice() else { panic!("{} enqueues succeeded", winners.len()) };
    assert_eq!(key_ids(&h).await?, vec![first.id.clone()], "race-key after the enqueue race");
    h.fail_by_id("q", &first.id).await;
    let target = first.id.clone();
    let winners = race(&handles, ErrorKind::AlreadyReplayed, move |b| {
        let target = target.clone();
        async move { b.replay(ReplayRequest::by_id(target)).await }
    })
    .await;
    let [replay] = winners.as_slice() else { panic!("{} replays succeeded", winners.len()) };
    assert_eq!(replay.replay_of, first.id, "the winning replay's target");
    assert_eq!(key_ids(&h).await?, vec![first.id.clone(), replay.id.clone()], "race-key chain");
    h.finish().await
}

async fn key_ids(h: &Harness) -> Result<Vec<String>, taskgate::Error> {
    let filter = Filter { business_key: "race-key".into(), ..Filter::default() };
    Ok(h.broker.list(&filter).await?.into_iter().map(|t| t.id).collect())
}

/// Runs `op` 50 times at once, alternating the handles; returns the successes and asserts
/// every failure is of `loser`.
async fn race<F, Fut>(handles: &[Arc<dyn Broker>; 2], loser: ErrorKind, op: F) -> Vec<Task>
where
    F: Fn(Arc<dyn Broker>) -> Fut,
    Fut: std::future::Future<Output = taskgate::Result<Task>> + Send + 'static,
{
    let barrier = Arc::new(Barrier::new(RACERS));
    let calls: Vec<_> = (0..RACERS)
        .map(|i| {
            let call = op(handles[i % 2].clone());
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                call.await
            })
        })
        .collect();
    let mut winners = Vec::new();
    for call in calls {
        match tokio::time::timeout(SAFETY_TIMEOUT, call).await {
            Ok(Ok(Ok(t))) => winners.push(t),
            Ok(Ok(Err(e))) => assert_eq!(e.kind(), loser, "a losing racer failed with: {e}"),
            Ok(Err(join)) => panic!("a racer panicked: {join}"),
            Err(_) => panic!("a racer did not return within {SAFETY_TIMEOUT:?}"),
        }
    }
    winners
}

/// Replay checks its target in the reference order (contract §8.3 step 3, notes §14 item 12):
/// not final (`ReplayNotFinal`), then already replayed (`AlreadyReplayed`), then completed
/// without the flag (`CompletedNotAllowed`). Given `ro` (key ko) completed and replayed with
/// the flag to `ro2`, a replay of `ro` without the flag is `AlreadyReplayed`, not
/// `CompletedNotAllowed` (and with it too); a replay of running `ro2`, or of key ko whose
/// tail it is, is `ReplayNotFinal` even with the flag. Given completed `rp` never replayed,
/// without the flag it is `CompletedNotAllowed`. No refused replay stores anything.
pub async fn c44_replay_check_order(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    h.enqueue(Task::new("job", "qo").with_id("ro").with_business_key("ko")).await;
    h.ack_by_id("qo", "ro").await;
    h.advance(SECOND);
    let ro2 = h.broker.replay(ReplayRequest::by_id("ro").allow_completed()).await?;
    let r = h.broker.replay(ReplayRequest::by_id("ro")).await;
    expect_err(r, ErrorKind::AlreadyReplayed, "replay of replayed, completed ro without the flag");
    let r = h.broker.replay(ReplayRequest::by_id("ro").allow_completed()).await;
    expect_err(r, ErrorKind::AlreadyReplayed, "replay of replayed, completed ro with the flag");
    let running = h.dequeue(&["qo"]).await;
    assert_eq!(running.id, ro2.id, "the claim from qo must return ro's replay");
    let r = h.broker.replay(ReplayRequest::by_id(&ro2.id).allow_completed()).await;
    expect_err(r, ErrorKind::ReplayNotFinal, "replay of running ro2 with the flag");
    let r = h.broker.replay(ReplayRequest::by_key("ko").allow_completed()).await;
    expect_err(r, ErrorKind::ReplayNotFinal, "replay of key ko (tail ro2 running) with the flag");

    h.enqueue(task("rp", "job", "qp")).await;
    h.ack_by_id("qp", "rp").await;
    let r = h.broker.replay(ReplayRequest::by_id("rp")).await;
    expect_err(r, ErrorKind::CompletedNotAllowed, "replay of completed rp without the flag");
    let ids: Vec<String> =
        h.broker.list(&Filter::default()).await?.into_iter().map(|t| t.id).collect();
    assert_eq!(ids.len(), 3, "tasks after the refused replays: {ids:?}");
    h.finish().await
}
