//! Concurrent calls are independent (contract §3.4.25): a backend that combines concurrent
//! writes into one transaction (SQLite's group commit) must not let one failing call undo or
//! change its neighbours.

use std::sync::Arc;

use taskgate::{AckItem, Broker, ErrorKind, Status, Task};

use crate::{task, CaseResult, Factory, Harness};

/// Given stored task `dup` (queue qd, payload `first`), 40 enqueues of new tasks `n00`..`n39` run at once
/// beside 10 enqueues of `dup` again (payload `second`), all on one handle: every new task is
/// stored once and each repeat fails alone with `TaskExists`, leaving `dup`'s payload `first`.
/// The 40 are claimed; then 40 acks with the right tokens (results `r00`..) run at once beside
/// 20 acks with wrong tokens and 10 acks of an unknown ID: each right ack is `Ok` and its task
/// completed with its own result, each wrong one `LeaseLost` and each unknown one `NotFound`,
/// and nothing else changed (`dup` still pending).
pub async fn c57_failing_call_spares_its_neighbours(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    h.enqueue(task("dup", "job", "qd").with_payload(b"first".to_vec())).await;
    let b: Arc<dyn Broker> = h.broker.clone();

    let mut calls = Vec::new();
    for i in 0..50 {
        let b = b.clone();
        let t = match i % 5 {
            4 => task("dup", "job", "qd").with_payload(b"second".to_vec()),
            _ => task(&format!("n{:02}", i - i / 5), "job", "qn"),
        };
        calls.push(tokio::spawn(async move { (t.id.clone(), b.enqueue(&t).await) }));
    }
    let (mut stored, mut refused) = (0, 0);
    for call in calls {
        match call.await? {
            (id, Ok(t)) => {
                assert_ne!(id, "dup", "a repeat of dup was stored: {t:?}");
                assert_eq!(t.id, id, "the enqueue returns its own task");
                stored += 1;
            }
            (id, Err(e)) => {
                assert_eq!((id.as_str(), e.kind()), ("dup", ErrorKind::TaskExists), "{e}");
                refused += 1;
            }
        }
    }
    assert_eq!((stored, refused), (40, 10), "40 stored, 10 repeats refused");
    let dup = h.get("dup").await;
    assert_eq!((dup.status, dup.payload.as_deref()), (Status::Pending, Some(&b"first"[..])));

    let mut claimed: Vec<Task> = Vec::new();
    while claimed.len() < 40 {
        claimed.extend(b.dequeue_many(&["qn"], 40 - claimed.len()).await?);
    }
    let mut acks = Vec::new();
    for (i, t) in claimed.iter().enumerate() {
        let right = AckItem {
            id: t.id.clone(),
            token: t.lease_token.clone(),
            result: Some(format!("r{i:02}").into_bytes()),
        };
        acks.push((ErrorKind::Backend, right)); // Backend stands for "Ok" below.
        if i % 2 == 0 {
            let wrong = AckItem { id: t.id.clone(), token: format!("x{i}"), result: None };
            acks.push((ErrorKind::LeaseLost, wrong));
        }
        if i % 4 == 0 {
            let unknown = AckItem { id: format!("ghost{i}"), token: "x".into(), result: None };
            acks.push((ErrorKind::NotFound, unknown));
        }
    }
    let mut calls = Vec::new();
    for (expected, item) in acks {
        let b = b.clone();
        calls.push(tokio::spawn(async move {
            let got = b.ack(&item.id, &item.token, item.result.clone()).await;
            (expected, item, got)
        }));
    }
    for call in calls {
        let (expected, item, got) = call.await?;
        match (expected, got) {
            (ErrorKind::Backend, Ok(())) => {}
            (ErrorKind::Backend, Err(e)) => panic!("the right ack of {} failed: {e}", item.id),
            (kind, Err(e)) => {
                assert_eq!(e.kind(), kind, "ack of {} ({}): {e}", item.id, item.token)
            }
            (kind, Ok(())) => {
                panic!("ack of {} with {} succeeded, not {kind:?}", item.id, item.token)
            }
        }
    }
    for (i, t) in claimed.iter().enumerate() {
        let done = h.get(&t.id).await;
        let result = format!("r{i:02}").into_bytes();
        assert_eq!((done.status, done.result), (Status::Completed, Some(result)), "{}", t.id);
    }
    assert_eq!(h.get("dup").await.status, Status::Pending, "dup untouched");
    h.finish().await
}
