//! Input limits (extensions §E7, §E3; decisions "API shape").

use taskgate::validate::{validate_prefix, DEFAULT_MAX_PAYLOAD_BYTES};
use taskgate::{Broker, Failure, ReplayRequest, Status, Step, Task};

use super::check::{expect_invalid, ids, stored_ids};
use crate::{task, CaseResult, Factory, Harness};

/// Given an empty broker, when tasks break a limit — a 256-character id, type, queue or
/// business key; a control character in each; an empty type or queue; a payload one byte over
/// 16 MiB; 1,001 parents — then enqueue is `InvalidInput` naming that field, and so are
/// lookups with an empty or 256-character ID, a claim with no queues, an oversized result,
/// cursor or replay payload, a 1,001-character step message, and a bad table prefix. A task
/// of 255 multi-byte characters in every name is accepted and round-trips. Afterwards only the
/// tasks that were accepted are stored, and the rejected writes changed nothing.
pub async fn c27_input_limits(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    for (field, bad) in bad_tasks() {
        let what = format!("enqueue with a bad {field} ({})", bad.id);
        expect_invalid(h.broker.enqueue(&bad).await, field, &what);
    }
    let wide = wide_task();
    let stored = h.broker.enqueue(&wide).await?;
    assert_eq!((stored.id.as_str(), stored.status), (wide.id.as_str(), Status::Pending), "wide");
    let read = h.get(&wide.id).await;
    let names = (&read.task_type, &read.queue, &read.business_key);
    assert_eq!(names, (&wide.task_type, &wide.queue, &wide.business_key), "255-char names");
    assert_eq!(h.dequeue(&[wide.queue.as_str()]).await.id, wide.id, "claim from the wide queue");
    bad_lookups(&*h.broker).await;
    let replay = bad_worker_writes(&h).await?;
    bad_prefixes(&h).await;
    let expected = ids(&[wide.id.as_str(), "worker", "failed", replay.as_str()]);
    assert_eq!(stored_ids(&*h.broker).await?, expected, "only accepted tasks are stored");
    h.finish().await
}

fn over_limit() -> Vec<u8> {
    vec![b'x'; DEFAULT_MAX_PAYLOAD_BYTES + 1]
}

/// One task per broken rule, each with a valid preset ID unless the ID is the broken field.
fn bad_tasks() -> Vec<(&'static str, Task)> {
    let long = "x".repeat(256);
    let ok = |id: &str| task(id, "job", "q");
    vec![
        ("id", ok(&long)),
        ("type", Task::new(long.clone(), "q").with_id("long-type")),
        ("queue", Task::new("job", long.clone()).with_id("long-queue")),
        ("business_key", ok("long-key").with_business_key(long)),
        ("id", ok("tab\there")),
        ("type", Task::new("job\n", "q").with_id("ctl-type")),
        ("queue", Task::new("job", "q\0").with_id("ctl-queue")),
        ("business_key", ok("ctl-key").with_business_key("key\u{7f}")),
        ("type", Task::new("", "q").with_id("empty-type")),
        ("queue", Task::new("job", "").with_id("empty-queue")),
        ("payload", ok("big-payload").with_payload(over_limit())),
        ("depends_on", ok("many-parents").with_depends_on((0..1001).map(|i| format!("p{i}")))),
    ]
}

/// 255 characters of 2, 3 and 4 bytes in the id, type, queue and business key.
fn wide_task() -> Task {
    Task::new("中".repeat(255), "𝄞".repeat(255))
        .with_id("é".repeat(255))
        .with_business_key("ü".repeat(255))
}

async fn bad_lookups(b: &dyn Broker) {
    expect_invalid(b.get("").await, "id", "get with an empty ID");
    expect_invalid(b.get(&"x".repeat(256)).await, "id", "get with a 256-character ID");
    expect_invalid(b.dequeue(&[] as &[&str; 0]).await, "queues", "dequeue with no queues");
}

/// A claimed `worker` and a failed `failed`: an oversized result, cursor or replay payload and
/// an over-long step message are rejected and leave both unchanged: `failed` still replays
/// (the rejected replay recorded nothing). Returns that replay's ID.
async fn bad_worker_writes(h: &Harness) -> Result<String, taskgate::Error> {
    h.enqueue(task("worker", "job", "qw")).await;
    let claimed = h.dequeue(&["qw"]).await;
    let before = h.get("worker").await;
    let token = claimed.lease_token.as_str();
    let r = h.broker.ack("worker", token, Some(over_limit())).await;
    expect_invalid(r, "result", "ack with an oversized result");
    let step = Step { cursor: Some(over_limit()), ..Step::default() };
    expect_invalid(h.broker.save_step("worker", token, step).await, "cursor", "oversized cursor");
    let step = Step { message: "m".repeat(1001), ..Step::default() };
    let r = h.broker.save_step("worker", token, step).await;
    expect_invalid(r, "message", "save_step with a 1,001-character message");
    assert_eq!(h.get("worker").await, before, "rejected worker writes changed the task");
    h.enqueue(task("failed", "job", "qf")).await;
    let c = h.dequeue(&["qf"]).await;
    h.broker.fail("failed", &c.lease_token, Failure::skip("boom")).await?;
    let r = h.broker.replay(ReplayRequest::by_id("failed").with_payload(over_limit())).await;
    expect_invalid(r, "payload", "replay with an oversized payload");
    let replay = h.broker.replay(ReplayRequest::by_id("failed")).await?;
    Ok(replay.id)
}

/// Bad table prefixes: through the storage when the backend has prefixes, and always through
/// the shared validator.
async fn bad_prefixes(h: &Harness) {
    let bad = ["", "1abc", "Upper", "x; DROP TABLE tasks", "a-b", &"p".repeat(31)];
    for prefix in bad {
        expect_invalid(validate_prefix(prefix), "prefix", &format!("validate_prefix({prefix:?})"));
        if let Some(result) = h.handle_with_prefix(prefix).await {
            expect_invalid(result, "prefix", &format!("a handle with prefix {prefix:?}"));
        }
    }
    let good = validate_prefix("taskgate_");
    assert!(good.is_ok(), "the default prefix is valid: {good:?}");
}
