//! Round trip and business-key idempotency (contract §1, §8.2).

use std::time::Duration;

use taskgate::{Error, ExistingTask, Failure, Filter, OnParentFailure, Status, Task};

use super::check::must;
use crate::{task, CaseResult, Factory, Harness};

/// Given a pending parent `p1`, when `t1` (payload, max_retry 5, run_at now+3 min, depends on
/// `p1`, ignore_parent_failure), `t2` (no run_at) and `t3` (preset last_error, started_at,
/// finished_at) are enqueued, then every field reads back exactly (`t1` blocked, `t2`'s run_at
/// = now), and mutating a returned snapshot does not change storage.
pub async fn c01_round_trip(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    h.enqueue(task("p1", "ocr", "q-ocr")).await;
    check_t1(&h).await?;

    let t2 = h.enqueue(task("t2", "llm", "q-llm")).await;
    assert_eq!(t2.run_at, h.now(), "t2: enqueue without run_at must store now");
    assert_eq!(h.get("t2").await.run_at, h.now(), "t2: stored run_at must be now");

    check_t3(&h).await;
    check_deep_copy(&h).await;
    h.finish().await
}

async fn check_t1(h: &Harness) -> CaseResult {
    let payload = br#"{"prompt":"hi"}"#.to_vec();
    let run_at = h.now().saturating_add(Duration::from_secs(180));
    let input = task("t1", "llm", "q-llm")
        .with_payload(payload.clone())
        .with_max_retry(5)
        .with_run_at(run_at)
        .with_depends_on(["p1"])
        .with_on_parent_failure(OnParentFailure::IgnoreParentFailure);
    let stored = h.enqueue(input).await;
    let got = h.get("t1").await;
    assert_eq!(stored, got, "t1: the snapshot enqueue returned must equal what get returns");
    assert_eq!(got.id, "t1", "t1: id");
    assert_eq!(got.task_type, "llm", "t1: type");
    assert_eq!(got.queue, "q-llm", "t1: queue");
    assert_eq!(got.payload, Some(payload), "t1: payload bytes");
    assert_eq!(got.max_retry, 5, "t1: max_retry");
    assert_eq!(got.run_at, run_at, "t1: run_at");
    assert_eq!(got.depends_on, vec!["p1".to_owned()], "t1: depends_on");
    assert_eq!(got.on_parent_failure, OnParentFailure::IgnoreParentFailure, "t1: policy");
    assert!(!got.created_at.is_zero(), "t1: created_at must be set");
    assert_eq!(got.status, Status::Blocked, "t1: parent p1 is pending, so t1 is blocked");
    Ok(())
}

async fn check_t3(h: &Harness) {
    let started = h.now().saturating_sub(Duration::from_secs(2 * 3600));
    let finished = h.now().saturating_sub(Duration::from_secs(3600));
    let mut input = task("t3", "llm", "q-llm");
    input.last_error = "imported: last failure".into();
    input.started_at = Some(started);
    input.finished_at = Some(finished);
    h.enqueue(input).await;
    let got = h.get("t3").await;
    assert_eq!(got.last_error, "imported: last failure", "t3: preset last_error");
    assert_eq!(got.started_at, Some(started), "t3: preset started_at");
    assert_eq!(got.finished_at, Some(finished), "t3: preset finished_at");
}

async fn check_deep_copy(h: &Harness) {
    let before = h.get("t1").await;
    let mut mutated = before.clone();
    if let Some(p) = mutated.payload.as_mut() {
        p[0] = b'X';
    }
    mutated.depends_on[0] = "hijacked".into();
    mutated.status = Status::Completed;
    assert_eq!(h.get("t1").await, before, "t1: mutating a returned snapshot changed storage");
}

/// Given an execution with key `bk-dup`, when the key is enqueued again (while pending, and
/// after it failed), then each attempt fails with `TaskExists` carrying the key, the first
/// execution's ID and its current status, and the first execution is untouched; a preset ID
/// used twice fails with plain `TaskExists`; a non-empty `replay_of` is rejected.
pub async fn c02_business_key_idempotent(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    let first =
        task("", "llm", "q").with_business_key("bk-dup").with_payload(b"\"original\"".to_vec());
    let first = h.enqueue(first).await;
    assert_eq!(first.business_key, "bk-dup", "(a) enqueue must return the key");
    assert_eq!(h.get(&first.id).await.business_key, "bk-dup", "(a) key must round-trip");

    let again =
        task("", "other", "q2").with_business_key("bk-dup").with_payload(b"\"overwrite\"".to_vec());
    expect_key_taken(h.broker.enqueue(&again).await, &first.id, Status::Pending, "(b) key reused");
    let kept = h.get(&first.id).await;
    assert_eq!(
        (kept.task_type.as_str(), kept.queue.as_str(), kept.payload.as_deref()),
        ("llm", "q", Some(&b"\"original\""[..])),
        "(c) the first execution must be unchanged"
    );
    let in_q2 = h.broker.list(&Filter { queue: "q2".into(), ..Filter::default() }).await?;
    assert!(in_q2.is_empty(), "(c) the rejected enqueue stored {in_q2:?}");

    let claimed = h.dequeue(&["q"]).await;
    assert_eq!(claimed.id, first.id, "(d) claim from q must return the first execution");
    must(h.broker.fail(&first.id, &claimed.lease_token, Failure::skip("boom")).await, "(d) fail")?;
    assert_eq!(h.get(&first.id).await.status, Status::Failed, "(d) first execution not failed");
    expect_key_taken(h.broker.enqueue(&again).await, &first.id, Status::Failed, "(d) key reused");

    check_preset_id_and_replay_of(&h).await?;
    h.finish().await
}

fn expect_key_taken(result: taskgate::Result<Task>, tail: &str, status: Status, step: &str) {
    let expected =
        ExistingTask { business_key: "bk-dup".into(), execution_id: tail.into(), status };
    match result {
        Err(Error::TaskExists { existing: Some(existing), .. }) => {
            assert_eq!(existing, expected, "{step}: TaskExists must carry the chain tail");
        }
        Err(e) => panic!("{step}: expected TaskExists carrying {expected:?}, got error {e}"),
        Ok(t) => panic!("{step}: expected TaskExists, but enqueue stored {}", t.id),
    }
}

async fn check_preset_id_and_replay_of(h: &Harness) -> CaseResult {
    h.enqueue(task("dup-id", "llm", "q3")).await;
    match h.broker.enqueue(&task("dup-id", "other", "q3")).await {
        Err(Error::TaskExists { id, existing: None }) => {
            assert_eq!(id, "dup-id", "(e) TaskExists must name the preset ID");
        }
        Err(e) => panic!("(e) preset ID dup-id twice: expected plain TaskExists, got {e}"),
        Ok(t) => panic!("(e) preset ID dup-id twice: expected TaskExists, stored {}", t.id),
    }
    assert_eq!(h.get("dup-id").await.task_type, "llm", "(e) dup-id was overwritten");

    let before = h.broker.list(&Filter::default()).await?.len();
    let mut replayed = task("", "llm", "q4");
    replayed.replay_of = "dup-id".into();
    if let Ok(t) = h.broker.enqueue(&replayed).await {
        panic!("(f) enqueue with replay_of set must fail, but stored {}", t.id);
    }
    let after = h.broker.list(&Filter::default()).await?.len();
    assert_eq!(after, before, "(f) the rejected enqueue with replay_of stored a task");
    Ok(())
}

/// A cancelled execution keeps its business key (contract §8.2: a key with an execution of
/// any status is taken; re-running is replay's job). Given `kc1` with key `kc` cancelled while
/// pending, when `kc` is enqueued again, then it fails with `TaskExists` naming `kc1` as
/// canceled and nothing is stored; a replay by key creates the next execution, and enqueuing
/// `kc` once more names that one (pending). Given `kd1` with key `kd`, claimed, cancelled
/// while running and finished with finish_canceled, `kd` is taken the same way.
pub async fn c42_business_key_after_cancel(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    h.enqueue(task("kc1", "job", "qk").with_business_key("kc")).await;
    h.broker.cancel("kc1").await?;
    let again = task("", "job", "qk").with_business_key("kc");
    let taken = h.broker.enqueue(&again).await;
    expect_tail(taken, "kc", "kc1", Status::Canceled, "kc after its execution was cancelled");
    let filter = Filter { business_key: "kc".into(), ..Filter::default() };
    let chain: Vec<String> = h.broker.list(&filter).await?.into_iter().map(|t| t.id).collect();
    assert_eq!(chain, ["kc1"], "kc's executions after the refused enqueue");
    let replay = h.broker.replay(taskgate::ReplayRequest::by_key("kc")).await?;
    assert_eq!(replay.replay_of, "kc1", "the replay by key replays the cancelled kc1");
    let taken = h.broker.enqueue(&again).await;
    expect_tail(taken, "kc", &replay.id, Status::Pending, "kc after its replay");

    h.enqueue(task("kd1", "job", "qd").with_business_key("kd")).await;
    let claimed = h.dequeue(&["qd"]).await;
    h.broker.cancel("kd1").await?;
    h.broker.finish_canceled("kd1", &claimed.lease_token).await?;
    let taken = h.broker.enqueue(&task("", "job", "qd").with_business_key("kd")).await;
    expect_tail(taken, "kd", "kd1", Status::Canceled, "kd after finish_canceled");
    h.finish().await
}

fn expect_tail(result: taskgate::Result<Task>, key: &str, tail: &str, status: Status, step: &str) {
    let expected = ExistingTask { business_key: key.into(), execution_id: tail.into(), status };
    match result {
        Err(Error::TaskExists { existing: Some(existing), .. }) => {
            assert_eq!(existing, expected, "{step}: TaskExists must name the chain tail");
        }
        Err(e) => panic!("{step}: expected TaskExists naming {expected:?}, got error {e}"),
        Ok(t) => panic!("{step}: expected TaskExists, but enqueue stored {}", t.id),
    }
}
