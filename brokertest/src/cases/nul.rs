//! A NUL character in any string argument (contract §E7.3): never a storage error. No stored
//! name, token or text holds one, so a read filtering on one finds nothing, a token holding one
//! is not the current token, and a value to be stored holding one is `InvalidInput`.

use taskgate::{
    AckItem, AdminAction, AuditQuery, ErrorKind, Failure, Filter, ReplayRequest, Status, Step, Task,
};

use super::check::{expect_invalid, expect_kind, must};
use crate::{task, CaseResult, Factory, Harness};

/// Given `n1` (type `job`, queue `qa`, key `k`, owner `o`) claimed and its child `n2`
/// blocked, then a NUL anywhere is `InvalidInput` or an empty answer, never `Backend`:
/// * `list` by type, queue, business key, owner or parent holding a NUL (`"qa\0"`, `"\0"`) is
///   empty, and `queue_len` of such a queue is 0;
/// * an ID holding a NUL (`get`, `cancel`, `resume`, replay by execution or by key, and a
///   queue to claim from or pause) is `InvalidInput` naming the argument;
/// * a token holding a NUL (`ack`, an `ack_many` item, `fail`, `heartbeat`, `requeue`,
///   `finish_canceled`, `save_step`) is `LeaseLost` on `n1` and `NotFound` on an unknown ID,
///   and `n1` stays running under its token;
/// * a value to be stored holding a NUL — a task's name, key, owner, parent or message, a
///   step's message, a failure's message, an audit actor — is `InvalidInput` naming the field,
///   and nothing is written;
/// * where audit is declared: an audit filter holding a NUL reads no record.
///
/// Then `n1` acks with its token and `n2` becomes pending.
pub async fn c55_nul_in_arguments(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    h.enqueue(task("n1", "job", "qa").with_business_key("k").with_owner("o")).await;
    h.enqueue(task("n2", "job", "qa").with_depends_on(["n1"])).await;
    let claimed = h.dequeue(&["qa"]).await;
    assert_eq!(claimed.id, "n1", "the claim takes n1");
    reads(&h).await?;
    lookups(&h).await;
    tokens(&h, &claimed.lease_token).await?;
    stored(&h, &claimed.lease_token).await?;
    if h.broker.capabilities().audit {
        audit(&h).await?;
    }
    must(h.broker.ack("n1", &claimed.lease_token, None).await, "ack n1 with its token")?;
    assert_eq!(h.get("n2").await.status, Status::Pending, "n2 woke when n1 completed");
    h.finish().await
}

/// Filters holding a NUL find nothing; the same filters without it find the tasks.
async fn reads(h: &Harness) -> CaseResult {
    let b = &*h.broker;
    let filters = |value: &str| {
        let v = value.to_owned();
        [
            ("type", Filter { task_type: v.clone(), ..Filter::default() }),
            ("queue", Filter { queue: v.clone(), ..Filter::default() }),
            ("business_key", Filter { business_key: v.clone(), ..Filter::default() }),
            ("owner", Filter { owner: v.clone(), ..Filter::default() }),
            ("parent", Filter { parent: v, ..Filter::default() }),
        ]
    };
    for value in ["\0", "qa\0", "job\0", "k\0", "o\0", "n1\0", "n\0x"] {
        for (field, filter) in filters(value) {
            let found = must(b.list(&filter).await, &format!("list by {field} {value:?}"))?;
            assert!(found.is_empty(), "list by {field} {value:?} found {} tasks", found.len());
        }
        assert_eq!(must(b.queue_len(value).await, &format!("queue_len({value:?})"))?, 0);
    }
    let by_queue = Filter { queue: "qa".into(), ..Filter::default() };
    assert_eq!(must(b.list(&by_queue).await, "list by queue qa")?.len(), 2, "qa holds n1, n2");
    let children = Filter { parent: "n1".into(), ..Filter::default() };
    let children = must(b.list(&children).await, "list by parent n1")?;
    assert_eq!(children.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), ["n2"]);
    Ok(())
}

/// IDs, keys and queue names holding a NUL are `InvalidInput` naming the argument.
async fn lookups(h: &Harness) {
    let b = &*h.broker;
    for id in ["n1\0", "\0"] {
        expect_invalid(b.get(id).await, "id", &format!("get({id:?})"));
        expect_invalid(b.cancel(id).await, "id", &format!("cancel({id:?})"));
        expect_invalid(b.resume(id).await, "id", &format!("resume({id:?})"));
        let replay = ReplayRequest { execution_id: id.into(), ..ReplayRequest::default() };
        expect_invalid(b.replay(replay).await, "id", &format!("replay of {id:?}"));
    }
    let by_key = ReplayRequest { business_key: "k\0".into(), ..ReplayRequest::default() };
    expect_invalid(b.replay(by_key).await, "business_key", "replay of key \"k\\0\"");
    expect_invalid(b.try_dequeue(&["qa\0"]).await, "queue", "claim from \"qa\\0\"");
    expect_invalid(b.pause_queue("qa\0").await, "queue", "pause \"qa\\0\"");
    expect_invalid(b.resume_queue("qa\0").await, "queue", "resume queue \"qa\\0\"");
}

/// Tokens holding a NUL are no current token: `LeaseLost` on n1, `NotFound` on an unknown ID,
/// and n1 keeps its lease.
async fn tokens(h: &Harness, token: &str) -> CaseResult {
    let b = &*h.broker;
    let with_nul = [format!("{token}\0"), "\0".to_owned(), format!("\0{token}")];
    for bad in &with_nul {
        let step = |what: &str| format!("{what} of n1 with token {bad:?}");
        expect_kind(b.ack("n1", bad, None).await, ErrorKind::LeaseLost, &step("ack"));
        let item = AckItem { id: "n1".into(), token: bad.clone(), result: None };
        let many = must(b.ack_many(&[item]).await, &step("ack_many"))?;
        assert_eq!(many.len(), 1, "{}: one answer per item", step("ack_many"));
        for answer in many {
            expect_kind(answer, ErrorKind::LeaseLost, &step("ack_many item"));
        }
        let failure = Failure::skip("boom");
        expect_kind(b.fail("n1", bad, failure).await, ErrorKind::LeaseLost, &step("fail"));
        expect_kind(b.heartbeat("n1", bad).await, ErrorKind::LeaseLost, &step("heartbeat"));
        expect_kind(b.requeue("n1", bad).await, ErrorKind::LeaseLost, &step("requeue"));
        let finish = b.finish_canceled("n1", bad).await;
        expect_kind(finish, ErrorKind::LeaseLost, &step("finish_canceled"));
        let saved = b.save_step("n1", bad, Step::default()).await;
        expect_kind(saved, ErrorKind::LeaseLost, &step("save_step"));
        expect_kind(b.ack("zz", bad, None).await, ErrorKind::NotFound, "ack of unknown zz");
        expect_kind(b.heartbeat("zz", bad).await, ErrorKind::NotFound, "heartbeat of zz");
    }
    let n1 = h.get("n1").await;
    assert_eq!(n1.status, Status::Running, "n1 stays running");
    assert_eq!(n1.lease_token, token, "n1 keeps its token");
    must(b.heartbeat("n1", token).await, "heartbeat of n1 with its token")
}

/// Values to be stored holding a NUL are `InvalidInput` naming the field; nothing is written.
async fn stored(h: &Harness, token: &str) -> CaseResult {
    let b = &*h.broker;
    let cases: [(&str, Task); 8] = [
        ("id", task("x\0", "job", "qa")),
        ("type", task("x", "job\0", "qa")),
        ("queue", task("x", "job", "qa\0")),
        ("business_key", task("x", "job", "qa").with_business_key("k\0")),
        ("owner", task("x", "job", "qa").with_owner("\0")),
        ("depends_on", task("x", "job", "qa").with_depends_on(["n1\0"])),
        ("message", Task { message: "half\0way".into(), ..task("x", "job", "qa") }),
        ("message", Task { message: "\0".into(), ..task("x", "job", "qa") }),
    ];
    for (field, t) in &cases {
        expect_invalid(b.enqueue(t).await, field, &format!("enqueue with a NUL in {field}"));
    }
    let step = Step { message: "step\0".into(), ..Step::default() };
    expect_invalid(b.save_step("n1", token, step).await, "message", "save_step message");
    let failure = Failure::skip("bo\0om");
    expect_invalid(b.fail("n1", token, failure).await, "message", "fail message");
    expect_kind(b.get("x").await, ErrorKind::NotFound, "no task x was written");
    let n1 = h.get("n1").await;
    assert_eq!((n1.status, n1.message.as_str()), (Status::Running, ""), "n1 unchanged");
    assert_eq!(n1.last_error, "", "the failure with a NUL wrote nothing");
    Ok(())
}

/// An actor holding a NUL is `InvalidInput` and records nothing; filters holding one read no
/// record.
async fn audit(h: &Harness) -> CaseResult {
    let b = &*h.broker;
    let pause = AdminAction::PauseQueue { queue: "qp".into() };
    for actor in ["al\0ice", "\0"] {
        expect_invalid(b.audited(actor, &pause).await, "actor", &format!("actor {actor:?}"));
    }
    assert!(b.paused_queues().await?.is_empty(), "no queue was paused");
    assert!(b.audit_log(&AuditQuery::default()).await?.is_empty(), "nothing was recorded");
    must(b.audited("alice", &pause).await, "pause qp as alice")?;
    must(b.resume_queue("qp").await, "resume qp")?;
    let queries = [
        AuditQuery { actor: "alice\0".into(), ..AuditQuery::default() },
        AuditQuery { actor: "\0".into(), ..AuditQuery::default() },
        AuditQuery { action: "pause_queue\0".into(), ..AuditQuery::default() },
        AuditQuery { target: "queue:qp\0".into(), ..AuditQuery::default() },
    ];
    for query in &queries {
        let found = must(b.audit_log(query).await, &format!("audit_log {query:?}"))?;
        assert!(found.is_empty(), "audit_log {query:?} found {} records", found.len());
    }
    let alice = AuditQuery { actor: "alice".into(), ..AuditQuery::default() };
    assert_eq!(must(b.audit_log(&alice).await, "audit_log by alice")?.len(), 1);
    Ok(())
}
