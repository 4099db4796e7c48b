//! Names compare by bytes (decisions "SQL storage"): IDs, types, queues, business keys and
//! owners that differ only in padding, case or Unicode whitespace are different names.

use std::collections::BTreeMap;

use taskgate::{AckItem, ErrorKind, Filter, ReplayRequest, Status, Task};

use super::check::{expect_kind, must};
use crate::{task, CaseResult, Factory, Harness};

/// `base` and names a padding (`PAD SPACE`), case-folding or whitespace-trimming comparison
/// would take for it: trailing and leading spaces, upper case, NBSP (U+00A0), EM SPACE
/// (U+2003), IDEOGRAPHIC SPACE (U+3000), and 254- and 255-character multi-byte names that
/// differ only in a trailing space or the case of their last letter. All are distinct strings.
fn family(base: &str) -> Vec<String> {
    let wide = format!("{base}{}", "ü".repeat(254 - base.chars().count()));
    vec![
        base.to_owned(),
        format!("{base} "),
        format!(" {base}"),
        format!("{base}  "),
        base.to_uppercase(),
        format!("{base}\u{a0}"),
        format!("\u{a0}{base}"),
        format!("{base}\u{2003}"),
        format!("{base}\u{3000}"),
        wide.clone(),
        format!("{wide} "),
        format!("{wide}ü"),
        format!("{wide}Ü"),
    ]
}

/// Given names that differ only by trailing or leading spaces, case, NBSP, U+2003, U+3000, or
/// a trailing space or letter case at 255 multi-byte characters, then every one is its own
/// name: `get` of a look-alike ID is `NotFound` and each enqueues under a preset ID (the same
/// bytes again are `TaskExists`); a claim from a look-alike queue takes nothing and
/// `queue_len` counts only that queue; pausing one queue pauses no look-alike and
/// `paused_queues` lists each paused name once, in byte order; each business key takes its
/// own first execution, lists its own chain and replays its own execution; a list by owner
/// returns only that owner's task; and counts keep one entry per type.
pub async fn c35_names_by_bytes(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    ids(&h).await?;
    queues(&h).await?;
    paused(&h).await?;
    keys(&h).await?;
    owners_and_types(&h).await?;
    h.finish().await
}

/// IDs: `a` alone first (look-alikes are not found), then every look-alike under its own ID.
async fn ids(h: &Harness) -> CaseResult {
    let names = family("a");
    h.enqueue(task(&names[0], "names", "qa")).await;
    for id in &names[1..] {
        expect_kind(h.broker.get(id).await, ErrorKind::NotFound, &format!("get({id:?}) beside a"));
    }
    for id in &names[1..] {
        let stored = must(h.broker.enqueue(&task(id, "names", "qa")).await, &format!("{id:?}"))?;
        assert_eq!(&stored.id, id, "enqueue with preset ID {id:?} stored another ID");
    }
    for id in &names {
        assert_eq!(&h.get(id).await.id, id, "get({id:?}) returned another task");
        let again = h.broker.enqueue(&task(id, "names", "qa")).await;
        expect_kind(again, ErrorKind::TaskExists, &format!("enqueue of {id:?} again"));
    }
    Ok(())
}

/// Queues: a task in `q` only; no look-alike queue claims or counts it; then one task per
/// look-alike queue, each claimed from its own queue.
async fn queues(h: &Harness) -> CaseResult {
    let names = family("q");
    h.enqueue(task("in-0", "names", &names[0])).await;
    for queue in &names[1..] {
        let claimed = must(h.broker.try_dequeue(&[queue]).await, &format!("claim {queue:?}"))?;
        assert_eq!(claimed.map(|t| t.id), None, "a claim from {queue:?} took a task of q");
        assert_eq!(h.broker.queue_len(queue).await?, 0, "queue_len({queue:?}) beside q");
    }
    for (i, queue) in names.iter().enumerate().skip(1) {
        h.enqueue(task(&format!("in-{i}"), "names", queue)).await;
    }
    for (i, queue) in names.iter().enumerate() {
        assert_eq!(h.broker.queue_len(queue).await?, 1, "queue_len({queue:?})");
        let claimed = must(h.broker.try_dequeue(&[queue]).await, &format!("claim {queue:?}"))?;
        let claimed = claimed.map(|t| (t.id, t.queue));
        assert_eq!(claimed, Some((format!("in-{i}"), queue.clone())), "claim from {queue:?}");
    }
    Ok(())
}

/// Pause: pausing `p` leaves every look-alike claimable; pausing all lists each once, sorted
/// by bytes; resuming one resumes only that one.
async fn paused(h: &Harness) -> CaseResult {
    let names = family("p");
    h.broker.pause_queue(&names[0]).await?;
    assert_eq!(h.broker.paused_queues().await?, [names[0].clone()], "only p is paused");
    for (i, queue) in names.iter().enumerate().skip(1) {
        let id = format!("pq-{i}");
        h.enqueue(task(&id, "names", queue)).await;
        let claimed = must(h.broker.try_dequeue(&[queue]).await, &format!("claim {queue:?}"))?;
        assert_eq!(claimed.map(|t| t.id), Some(id), "{queue:?} is not paused, p is");
    }
    for queue in &names {
        h.broker.pause_queue(queue).await?;
    }
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(h.broker.paused_queues().await?, sorted, "every name paused once, byte order");
    h.broker.resume_queue(&names[1]).await?;
    sorted.retain(|q| q != &names[1]);
    assert_eq!(h.broker.paused_queues().await?, sorted, "resuming {:?} resumed only it", names[1]);
    Ok(())
}

/// Business keys: each look-alike key starts its own chain beside `k`, lists only its own
/// execution, and replays by key its own execution.
async fn keys(h: &Harness) -> CaseResult {
    let names = family("k");
    let keyed = |i: usize| task(&format!("key-{i}"), "names", "qk").with_business_key(&names[i]);
    h.enqueue(keyed(0)).await;
    for (i, key) in names.iter().enumerate().skip(1) {
        let stored = must(h.broker.enqueue(&keyed(i)).await, &format!("enqueue with key {key:?}"))?;
        assert_eq!(&stored.business_key, key, "stored key of key-{i}");
    }
    let claimed = h.broker.dequeue_many(&["qk"], names.len()).await?;
    assert_eq!(claimed.len(), names.len(), "every keyed task claimed");
    let items: Vec<AckItem> = claimed
        .iter()
        .map(|t| AckItem { id: t.id.clone(), token: t.lease_token.clone(), result: None })
        .collect();
    for outcome in h.broker.ack_many(&items).await? {
        outcome?;
    }
    for (i, key) in names.iter().enumerate() {
        let id = format!("key-{i}");
        let by_key = Filter { business_key: key.clone(), ..Filter::default() };
        let chain: Vec<String> = h.broker.list(&by_key).await?.into_iter().map(|t| t.id).collect();
        assert_eq!(chain, std::slice::from_ref(&id), "list by key {key:?}");
        let replay = h.broker.replay(ReplayRequest::by_key(key).allow_completed()).await?;
        let got = (replay.business_key.as_str(), replay.replay_of.as_str());
        assert_eq!(got, (key.as_str(), id.as_str()), "replay by key {key:?}");
        let again = h.broker.enqueue(&task("", "names", "qk").with_business_key(key)).await;
        expect_kind(again, ErrorKind::TaskExists, &format!("a second chain for key {key:?}"));
    }
    Ok(())
}

/// Owners and types: a list by owner returns only that owner's task; counts and a list by type
/// keep one entry per type.
async fn owners_and_types(h: &Harness) -> CaseResult {
    let owners = family("o");
    for (i, owner) in owners.iter().enumerate() {
        h.enqueue(task(&format!("own-{i}"), "owned", "qo").with_owner(owner)).await;
    }
    for (i, owner) in owners.iter().enumerate() {
        let by_owner = Filter { owner: owner.clone(), ..Filter::default() };
        let ids: Vec<String> = h.broker.list(&by_owner).await?.into_iter().map(|t| t.id).collect();
        assert_eq!(ids, [format!("own-{i}")], "list by owner {owner:?}");
    }
    let types = family("t");
    for (i, task_type) in types.iter().enumerate() {
        h.enqueue(Task::new(task_type.clone(), "qt").with_id(format!("typ-{i}"))).await;
    }
    let counts = h.broker.counts().await?;
    for (i, task_type) in types.iter().enumerate() {
        let expected = BTreeMap::from([(Status::Pending, 1)]);
        let got: BTreeMap<Status, u64> = counts
            .get(task_type)
            .map(|by_status| by_status.iter().filter(|(_, n)| **n > 0).map(|(s, n)| (*s, *n)))
            .into_iter()
            .flatten()
            .collect();
        assert_eq!(got, expected, "counts of type {task_type:?}");
        let by_type = Filter { task_type: task_type.clone(), ..Filter::default() };
        let ids: Vec<String> = h.broker.list(&by_type).await?.into_iter().map(|t| t.id).collect();
        assert_eq!(ids, [format!("typ-{i}")], "list by type {task_type:?}");
    }
    Ok(())
}
