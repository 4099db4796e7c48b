//! The checks every server backend runs through the [`CutProxy`], written once: a COMMIT cut
//! before or after the server saw it, a lost answer followed by an outage or by a server that
//! stays away, every other write's lost COMMIT, and a server gone after `init`.

use std::future::Future;
use std::time::Duration;

use taskgate::{AckItem, BoxError, BoxFuture, Broker, ErrorKind, Filter, Status, Task};
use taskgate_sql::is_commit_unknown;

use super::proxy::{Cut, CutProxy};

/// Runs `call` with the proxy armed to cut the next `COMMIT` at `cut`; the call must answer
/// within 60 s (a hang detector) with `Ok`, and exactly one `COMMIT` must have been cut.
async fn cut_call<T>(
    proxy: &CutProxy,
    cut: Cut,
    what: &str,
    call: impl Future<Output = taskgate::Result<T>>,
) -> Result<T, BoxError> {
    let before = proxy.cuts();
    proxy.arm(cut);
    let answer = tokio::time::timeout(HANG, call).await;
    let result = answer.map_err(|_| format!("{what} ({cut:?}): no answer within {HANG:?}"))?;
    let value = result.map_err(|e| format!("{what} ({cut:?}) returned an error: {e}"))?;
    let cuts = proxy.cuts() - before;
    if cuts != 1 {
        return Err(format!("{what} ({cut:?}): the proxy cut {cuts} COMMITs, not 1").into());
    }
    Ok(value)
}

/// How long a test waits for any one call (a hang detector, not a timing assertion).
const HANG: Duration = Duration::from_secs(60);

/// The IDs of every task in `queue`, sorted.
async fn ids_in(direct: &dyn Broker, queue: &str) -> Result<Vec<String>, BoxError> {
    let filter = Filter { queue: queue.to_owned(), ..Filter::default() };
    let mut ids: Vec<String> = direct.list(&filter).await?.into_iter().map(|t| t.id).collect();
    ids.sort();
    Ok(ids)
}

/// For `enqueue` (generated ID; preset ID with a business key), `enqueue_many` (three tasks,
/// one depending on another) and `ack` (one item and two), each with its `COMMIT` cut before it
/// reached the server and again after the server applied it, the call through the proxy
/// returns the truth — `Ok`, the stored snapshots, every ack item `Ok` — and `direct` (a
/// handle straight on the server) finds every task exactly once, acked ones completed with
/// their result.
pub async fn check_commit_cuts(
    through: &dyn Broker,
    direct: &dyn Broker,
    proxy: &CutProxy,
) -> Result<(), BoxError> {
    for (round, cut) in [Cut::BeforeCommit, Cut::AfterCommit].into_iter().enumerate() {
        let q = format!("cut{round}");
        let one = Task::new("one", q.as_str()).with_payload(format!("one-{round}"));
        let one = cut_call(proxy, cut, "enqueue", through.enqueue(&one)).await?;
        let keyed = Task::new("keyed", q.as_str())
            .with_id(format!("k{round}"))
            .with_business_key(format!("key-{round}"));
        cut_call(proxy, cut, "enqueue with a preset ID and a key", through.enqueue(&keyed)).await?;
        let first = format!("m{round}");
        let many = [
            Task::new("many", q.as_str()).with_id(first.clone()),
            Task::new("many", q.as_str()).with_payload(b"second".to_vec()),
            Task::new("many", q.as_str()).with_depends_on([first.clone()]),
        ];
        let stored = cut_call(proxy, cut, "enqueue_many", through.enqueue_many(&many)).await?;
        let mut expected: Vec<String> = stored.iter().map(|t| t.id.clone()).collect();
        expected.extend([one.id.clone(), format!("k{round}")]);
        expected.sort();
        if stored.len() != 3 || ids_in(direct, &q).await? != expected {
            let found = ids_in(direct, &q).await?;
            return Err(
                format!("{cut:?}: stored {found:?}, the calls returned {expected:?}").into()
            );
        }
        let claimed = direct.dequeue_many(&[q.as_str()], 3).await?;
        let [a, b, c] = claimed.as_slice() else {
            return Err(format!("{cut:?}: claimed {} tasks, not 3", claimed.len()).into());
        };
        let result = Some(b"acked".to_vec());
        cut_call(proxy, cut, "ack", through.ack(&a.id, &a.lease_token, result.clone())).await?;
        let items: Vec<AckItem> = [b, c]
            .iter()
            .map(|t| AckItem { id: t.id.clone(), token: t.lease_token.clone(), result: None })
            .collect();
        let outcomes = cut_call(proxy, cut, "ack_many", through.ack_many(&items)).await?;
        for (item, outcome) in items.iter().zip(outcomes) {
            outcome.map_err(|e| format!("ack_many ({cut:?}) item {}: {e}", item.id))?;
        }
        let done = direct.get(&a.id).await?;
        if (done.status, done.result) != (Status::Completed, result) {
            return Err(format!("{cut:?}: {} after its ack is {}", a.id, done.status).into());
        }
        for t in [b, c] {
            let status = direct.get(&t.id).await?.status;
            if status != Status::Completed {
                return Err(format!("{cut:?}: {} after ack_many is {status}", t.id).into());
            }
        }
        if ids_in(direct, &q).await? != expected {
            return Err(format!("{cut:?}: the acks changed which tasks exist").into());
        }
    }
    Ok(())
}

/// The server stays unreachable after a `COMMIT` it applied but whose answer was lost: the
/// `enqueue` and the `ack` through the proxy report a storage failure (their outcome is
/// unknown) instead of hanging, and once the server is back, repeating the same call returns
/// the truth without a duplicate: the task exists once, under the ID the repeat returns, and
/// the repeated ack is `Ok` with the task completed.
pub async fn check_unresolved_commits(
    through: &dyn Broker,
    direct: &dyn Broker,
    proxy: &CutProxy,
) -> Result<(), BoxError> {
    let q = "unresolved";
    let task = Task::new("lost", q).with_payload(b"lost".to_vec());
    let before = proxy.cuts();
    proxy.arm(Cut::AfterCommitThenRefuse);
    let first = tokio::time::timeout(HANG, through.enqueue(&task)).await;
    match first.map_err(|_| "enqueue on an unreachable server hung")? {
        Err(e) if is_commit_unknown(&e) => {}
        other => return Err(format!("enqueue while unreachable: {other:?}").into()),
    }
    if proxy.cuts() != before + 1 {
        return Err("the enqueue's COMMIT was not cut".into());
    }
    proxy.resume().await?;
    let again = tokio::time::timeout(HANG, through.enqueue(&task)).await.map_err(|_| "hung")??;
    let found = ids_in(direct, q).await?;
    if found != [again.id.clone()] {
        return Err(format!("after the repeat {q} holds {found:?}, not [{}]", again.id).into());
    }

    let claimed = direct.dequeue(&[q]).await?;
    let result = Some(b"done".to_vec());
    proxy.arm(Cut::AfterCommitThenRefuse);
    let first = through.ack(&claimed.id, &claimed.lease_token, result.clone());
    match tokio::time::timeout(HANG, first).await.map_err(|_| "ack while unreachable hung")? {
        Err(e) if is_commit_unknown(&e) => {}
        other => return Err(format!("ack while unreachable: {other:?}").into()),
    }
    proxy.resume().await?;
    let again = through.ack(&claimed.id, &claimed.lease_token, result.clone());
    tokio::time::timeout(HANG, again).await.map_err(|_| "hung")??;
    let done = direct.get(&claimed.id).await?;
    if (done.status, done.result) != (Status::Completed, result) {
        return Err(format!("the repeated ack left {} {}", claimed.id, done.status).into());
    }
    Ok(())
}

/// The server's answer to a write is lost and the server refuses connections for `OUTAGE`
/// (a restart): `enqueue` and `ack` through the proxy keep trying to find out and return the
/// truth once it is back — the task stored once under the ID returned, the ack `Ok` with the
/// task completed — never a definite error for a write that was applied.
pub async fn check_lost_answer_then_outage(
    through: &dyn Broker,
    direct: &dyn Broker,
    proxy: &CutProxy,
) -> Result<(), BoxError> {
    let q = "outage";
    let task = Task::new("lost", q).with_payload(b"lost".to_vec());
    proxy.arm(Cut::AfterCommitThenRefuse);
    let (stored, ()) = tokio::join!(
        tokio::time::timeout(HANG, through.enqueue(&task)),
        resume_after(proxy, OUTAGE)
    );
    let stored = stored.map_err(|_| "enqueue across an outage hung")?;
    let stored = stored.map_err(|e| format!("enqueue across a {OUTAGE:?} outage: {e}"))?;
    let found = ids_in(direct, q).await?;
    if found != [stored.id.clone()] {
        return Err(format!("{q} holds {found:?}, the enqueue returned {}", stored.id).into());
    }
    let claimed = direct.dequeue(&[q]).await?;
    let result = Some(b"done".to_vec());
    proxy.arm(Cut::AfterCommitThenRefuse);
    let (acked, ()) = tokio::join!(
        tokio::time::timeout(HANG, through.ack(&claimed.id, &claimed.lease_token, result.clone())),
        resume_after(proxy, OUTAGE)
    );
    acked
        .map_err(|_| "ack across an outage hung")?
        .map_err(|e| format!("ack across a {OUTAGE:?} outage: {e}"))?;
    let done = direct.get(&claimed.id).await?;
    if (done.status, done.result) != (Status::Completed, result) {
        return Err(format!("the ack across an outage left {} {}", claimed.id, done.status).into());
    }
    Ok(())
}

/// Every other write is not settled: a `COMMIT` whose answer is lost makes `heartbeat`,
/// `save_step`, `fail` and `cancel` through the proxy return `CommitUnknown` (the one error
/// after which a write may have been applied), and `direct` finds each of them applied.
pub async fn check_other_writes_report_unknown(
    through: &dyn Broker,
    direct: &dyn Broker,
    proxy: &CutProxy,
) -> Result<(), BoxError> {
    let q = "others";
    for id in ["hb", "st", "fl"] {
        direct.enqueue(&Task::new("other", q).with_id(id)).await?;
    }
    let claimed = direct.dequeue_many(&[q], 3).await?;
    // Enqueued after the claim, so that no equal timestamp can order it before the others.
    direct.enqueue(&Task::new("other", q).with_id("cn")).await?;
    let token = |id: &str| claimed.iter().find(|t| t.id == id).map(|t| t.lease_token.clone());
    let (Some(hb), Some(st), Some(fl)) = (token("hb"), token("st"), token("fl")) else {
        return Err(format!("claimed {:?}, not hb, st and fl", ids(&claimed)).into());
    };
    let calls: [(&str, BoxFuture<'_, taskgate::Result<()>>); 4] = [
        ("heartbeat", Box::pin(through.heartbeat("hb", &hb))),
        ("save_step", Box::pin(through.save_step("st", &st, step("one")))),
        ("fail", Box::pin(through.fail("fl", &fl, taskgate::Failure::skip("lost")))),
        ("cancel", Box::pin(through.cancel("cn"))),
    ];
    for (what, call) in calls {
        proxy.arm(Cut::AfterCommit);
        match tokio::time::timeout(HANG, call).await.map_err(|_| format!("{what} hung"))? {
            Err(e) if is_commit_unknown(&e) => {}
            other => return Err(format!("{what} with its answer lost: {other:?}").into()),
        }
    }
    let saved = direct.get("st").await?;
    if (saved.steps, saved.message.as_str()) != (1, "one") {
        return Err(format!("the lost save_step was not applied: {saved:?}").into());
    }
    for (id, status) in [("fl", Status::Failed), ("cn", Status::Canceled)] {
        let got = direct.get(id).await?.status;
        if got != status {
            return Err(format!("{id} is {got} after its lost write, not {status}").into());
        }
    }
    Ok(())
}

/// A step with progress note `message`.
fn step(message: &str) -> taskgate::Step {
    taskgate::Step { message: message.to_owned(), ..taskgate::Step::default() }
}

/// The IDs of `tasks`.
fn ids(tasks: &[Task]) -> Vec<&str> {
    tasks.iter().map(|t| t.id.as_str()).collect()
}

/// How long [`check_lost_answer_then_outage`] keeps the server away: well inside the window
/// in which a write keeps trying to find out (5 s).
const OUTAGE: Duration = Duration::from_secs(1);

/// Waits until the armed cut happened, then `outage`, then accepts again.
async fn resume_after(proxy: &CutProxy, outage: Duration) {
    let before = proxy.cuts();
    let deadline = tokio::time::Instant::now() + HANG;
    while proxy.cuts() == before && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(outage).await;
    let _ = proxy.resume().await;
}

/// ("Connection refused") in the error's text, and calls succeed again once it is back.
pub async fn check_unreachable_fails_fast(
    through: &dyn Broker,
    proxy: &CutProxy,
) -> Result<(), BoxError> {
    proxy.refuse().await;
    let task = Task::new("t", "gone");
    let call = through.enqueue(&task);
    match tokio::time::timeout(HANG, call).await.map_err(|_| "enqueue while refused hung")? {
        Err(e) if e.is(ErrorKind::Backend) && e.to_string().contains("Connection refused") => {}
        other => return Err(format!("enqueue while refused: {other:?}").into()),
    }
    proxy.resume().await?;
    let call = through.enqueue(&task);
    tokio::time::timeout(HANG, call).await.map_err(|_| "enqueue after resume hung")??;
    Ok(())
}
