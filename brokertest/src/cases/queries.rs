//! Queries: counts, queue length, list filters, ordering and pagination, key history
//! (contract §7, §8.3).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use taskgate::{Counts, Failure, Filter, ReplayRequest, Status, Task};

use super::check::must;
use crate::{task, CaseResult, Factory, Harness};

/// Given one task in each of the seven statuses (qa/llm: c1 completed, f1 failed, p1 pending;
/// qb/ocr: x1 canceled, r1 running, rt1 retrying; b1 llm in qb blocked on r1), then counts
/// equal the aggregation of the unfiltered list (7 rows) both ways and the expected matrix,
/// queue_len(qa) = 1, queue_len(qb) = 1 (retrying counts) and queue_len of an unknown queue is
/// 0 without error.
pub async fn c13_counts_consistency(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    build_seven_statuses(&h).await?;
    let expected = [
        ("c1", Status::Completed),
        ("f1", Status::Failed),
        ("p1", Status::Pending),
        ("x1", Status::Canceled),
        ("r1", Status::Running),
        ("rt1", Status::Retrying),
        ("b1", Status::Blocked),
    ];
    for (id, status) in expected {
        assert_eq!(h.get(id).await.status, status, "{id}: self-check of its status");
    }

    let all = must(h.broker.list(&Filter::default()).await, "list all")?;
    assert_eq!(all.len(), 7, "the unfiltered list must hold the 7 tasks");
    let counts = nonzero(must(h.broker.counts().await, "counts")?);
    assert_eq!(counts, aggregate(&all), "counts must equal the aggregation of list");
    let matrix = BTreeMap::from([
        (
            "llm".to_owned(),
            counts_of(&[Status::Completed, Status::Failed, Status::Pending, Status::Blocked]),
        ),
        ("ocr".to_owned(), counts_of(&[Status::Canceled, Status::Running, Status::Retrying])),
    ]);
    assert_eq!(counts, matrix, "counts by type and status");

    assert_eq!(must(h.broker.queue_len("qa").await, "queue_len qa")?, 1, "queue_len(qa): p1");
    assert_eq!(must(h.broker.queue_len("qb").await, "queue_len qb")?, 1, "queue_len(qb): rt1");
    let unknown = must(h.broker.queue_len("no-such-queue").await, "queue_len no-such-queue")?;
    assert_eq!(unknown, 0, "queue_len of an unknown queue");
    h.finish().await
}

async fn build_seven_statuses(h: &Harness) -> CaseResult {
    h.enqueue(task("c1", "llm", "qa")).await;
    h.ack_by_id("qa", "c1").await;
    h.enqueue(task("f1", "llm", "qa")).await;
    h.fail_by_id("qa", "f1").await;
    h.enqueue(task("p1", "llm", "qa")).await;

    h.enqueue(task("x1", "ocr", "qb")).await;
    must(h.broker.cancel("x1").await, "cancel x1")?;
    h.enqueue(task("r1", "ocr", "qb")).await;
    assert_eq!(h.dequeue(&["qb"]).await.id, "r1", "claim from qb must return r1");
    h.enqueue(task("rt1", "ocr", "qb").with_max_retry(3)).await;
    let claimed = h.dequeue(&["qb"]).await;
    assert_eq!(claimed.id, "rt1", "claim from qb must return rt1");
    let retry_at = h.now().saturating_add(Duration::from_secs(3600));
    must(
        h.broker.fail("rt1", &claimed.lease_token, Failure::business("boom", retry_at)).await,
        "fail rt1",
    )?;
    h.enqueue(task("b1", "llm", "qb").with_depends_on(["r1"])).await;
    Ok(())
}

fn counts_of(statuses: &[Status]) -> BTreeMap<Status, u64> {
    statuses.iter().map(|s| (*s, 1)).collect()
}

/// Drops zero entries (the contract lets a backend report or omit them).
fn nonzero(counts: Counts) -> Counts {
    counts
        .into_iter()
        .map(|(t, by_status)| (t, by_status.into_iter().filter(|(_, n)| *n > 0).collect()))
        .filter(|(_, by_status): &(String, BTreeMap<Status, u64>)| !by_status.is_empty())
        .collect()
}

fn aggregate(tasks: &[Task]) -> Counts {
    let mut counts = Counts::new();
    for t in tasks {
        *counts.entry(t.task_type.clone()).or_default().entry(t.status).or_default() += 1;
    }
    counts
}

/// The IDs of a list, after checking it is in `(created_at, id)` order.
fn ids(tasks: &[Task], what: &str) -> Vec<String> {
    for pair in tasks.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert!(
            (a.created_at, a.id.as_bytes()) < (b.created_at, b.id.as_bytes()),
            "{what}: {} ({}) listed before {} ({}) breaks (created_at, id) order",
            a.id,
            a.created_at,
            b.id,
            b.created_at
        );
    }
    tasks.iter().map(|t| t.id.clone()).collect()
}

async fn list_ids(
    h: &Harness,
    filter: Filter,
    what: &str,
) -> Result<Vec<String>, taskgate::BoxError> {
    let tasks = must(h.broker.list(&filter).await, &format!("list {what}"))?;
    Ok(ids(&tasks, what))
}

/// Given a1, a2 (llm, qa), b1 (ocr, qa), d1 (ocr, qb, completed) and c1 (llm, qb), each filter
/// returns exactly its ID set: type, queue, status, type+queue, type+status, an unknown type
/// (none) and no filter (all five); type llm with limit 2 returns two llm rows.
pub async fn c14_list_filter(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    h.enqueue(task("a1", "llm", "qa")).await;
    h.enqueue(task("a2", "llm", "qa")).await;
    h.enqueue(task("b1", "ocr", "qa")).await;
    h.enqueue(task("d1", "ocr", "qb")).await;
    h.ack_by_id("qb", "d1").await;
    h.enqueue(task("c1", "llm", "qb")).await;

    let by = |task_type: &str, queue: &str, status: Option<Status>| Filter {
        task_type: task_type.into(),
        queue: queue.into(),
        status,
        ..Filter::default()
    };
    let cases = [
        ("type llm", by("llm", "", None), vec!["a1", "a2", "c1"]),
        ("queue qa", by("", "qa", None), vec!["a1", "a2", "b1"]),
        ("status pending", by("", "", Some(Status::Pending)), vec!["a1", "a2", "b1", "c1"]),
        ("llm in qa", by("llm", "qa", None), vec!["a1", "a2"]),
        ("ocr completed", by("ocr", "", Some(Status::Completed)), vec!["d1"]),
        ("unknown type", by("no-such-type", "", None), vec![]),
        ("no filter", Filter::default(), vec!["a1", "a2", "b1", "c1", "d1"]),
    ];
    for (what, filter, expected) in cases {
        let got: BTreeSet<String> = list_ids(&h, filter, what).await?.into_iter().collect();
        let expected: BTreeSet<String> = expected.into_iter().map(str::to_owned).collect();
        assert_eq!(got, expected, "list {what}: ID set");
    }

    let limited =
        must(h.broker.list(&Filter { limit: 2, ..by("llm", "", None) }).await, "list llm limit 2")?;
    assert_eq!(limited.len(), 2, "list llm limit 2: row count");
    assert!(limited.iter().all(|t| t.task_type == "llm"), "list llm limit 2: {limited:?}");
    h.finish().await
}

/// Given 25 tasks in qp created 1 ms apart with IDs z24 … z00 (ID order is the reverse of
/// creation order; even creation index llm, odd ocr), list returns creation order; limit and
/// offset slice it exactly (pages 10/10/5 with no loss or duplicate, an offset past the end is
/// empty, an offset alone skips); filters page the same way. Three tasks b, a, c created
/// 100 µs apart share one millisecond: enqueue returns the stored created_at, all three are
/// equal, and list orders them by ID.
pub async fn c18_list_pagination(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    let mut created = Vec::new();
    for i in 0..25u32 {
        let id = format!("z{:02}", 24 - i);
        let task_type = if i % 2 == 0 { "llm" } else { "ocr" };
        created.push(h.enqueue(task(&id, task_type, "qp")).await);
        h.advance(Duration::from_millis(1));
    }
    let order: Vec<String> = created.iter().map(|t| t.id.clone()).collect();
    let llm: Vec<String> =
        created.iter().filter(|t| t.task_type == "llm").map(|t| t.id.clone()).collect();
    assert_eq!(llm.len(), 13, "13 llm tasks were enqueued");
    check_pages(&h, &order, &llm).await?;
    check_same_millisecond(&h).await?;
    h.finish().await
}

async fn check_pages(h: &Harness, order: &[String], llm: &[String]) -> CaseResult {
    let page = |task_type: &str, limit: usize, offset: usize| Filter {
        task_type: task_type.into(),
        limit,
        offset,
        ..Filter::default()
    };
    assert_eq!(list_ids(h, page("", 0, 0), "all").await?, order, "list all: creation order");
    let mut seen = Vec::new();
    for (offset, len) in [(0, 10), (10, 10), (20, 5)] {
        let got = list_ids(h, page("", 10, offset), &format!("limit 10 offset {offset}")).await?;
        assert_eq!(got, order[offset..offset + len], "limit 10 offset {offset}: slice");
        seen.extend(got);
    }
    assert_eq!(seen, order, "the three pages together must be every task once, in order");
    let past = list_ids(h, page("", 10, 100), "limit 10 offset 100").await?;
    assert!(past.is_empty(), "limit 10 offset 100 must be empty: {past:?}");
    let rest = list_ids(h, page("", 0, 5), "offset 5").await?;
    assert_eq!(rest, order[5..], "offset 5 without limit: the remaining 20");
    let llm_page = list_ids(h, page("llm", 5, 5), "llm limit 5 offset 5").await?;
    assert_eq!(llm_page, llm[5..10], "llm limit 5 offset 5");
    let llm_past = list_ids(h, page("llm", 5, 13), "llm limit 5 offset 13").await?;
    assert!(llm_past.is_empty(), "llm limit 5 offset 13 must be empty: {llm_past:?}");
    Ok(())
}

async fn check_same_millisecond(h: &Harness) -> CaseResult {
    let mut stamps = Vec::new();
    for (i, id) in ["b", "a", "c"].into_iter().enumerate() {
        if i > 0 {
            h.advance(Duration::from_micros(100));
        }
        let stored = h.enqueue(task(id, "llm", "qtie")).await;
        let read = h.get(id).await;
        assert_eq!(stored.created_at, read.created_at, "{id}: enqueue's created_at vs get's");
        stamps.push(read.created_at);
    }
    assert!(stamps.iter().all(|s| *s == stamps[0]), "b, a, c share one millisecond: {stamps:?}");
    let tie = Filter { queue: "qtie".into(), ..Filter::default() };
    assert_eq!(list_ids(h, tie, "queue qtie").await?, ["a", "b", "c"], "same-ms ties order by ID");
    Ok(())
}

/// Given key k's chain E1 (failed) ← E2 (failed) ← E3 (pending), created 1 s apart, and two
/// distractors (another key, no key), list by key k returns `[E1, E2, E3]`; with status failed
/// two rows; offset 1 limit 1 returns `[E2]`; an unknown key returns an empty list, no error.
pub async fn c21_business_key_query(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    h.enqueue(task("", "report", "q2").with_business_key("k-other")).await;
    let e1 = h.enqueue(task("", "report", "q").with_business_key("k")).await;
    h.fail_by_id("q", &e1.id).await;
    h.advance(Duration::from_secs(1));
    let e2 = must(h.broker.replay(ReplayRequest::by_id(&e1.id)).await, "replay E1")?;
    h.fail_by_id("q", &e2.id).await;
    h.advance(Duration::from_secs(1));
    let e3 = must(h.broker.replay(ReplayRequest::by_id(&e2.id)).await, "replay E2")?;
    h.enqueue(task("", "report", "q2")).await;
    assert_eq!(h.get(&e3.id).await.status, Status::Pending, "E3: must be pending");

    let key = |status: Option<Status>, limit: usize, offset: usize| Filter {
        business_key: "k".into(),
        status,
        limit,
        offset,
        ..Filter::default()
    };
    let chain = vec![e1.id.clone(), e2.id.clone(), e3.id.clone()];
    assert_eq!(list_ids(&h, key(None, 0, 0), "key k").await?, chain, "key k: chain order");
    let failed = list_ids(&h, key(Some(Status::Failed), 0, 0), "key k failed").await?;
    assert_eq!(failed, chain[..2], "key k + status failed: E1, E2");
    let second = list_ids(&h, key(None, 1, 1), "key k offset 1 limit 1").await?;
    assert_eq!(second, chain[1..2], "key k offset 1 limit 1: E2");
    let unknown = Filter { business_key: "no-such-key".into(), ..Filter::default() };
    assert!(list_ids(&h, unknown, "unknown key").await?.is_empty(), "unknown key: empty list");
    h.finish().await
}
