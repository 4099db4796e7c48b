//! Input limits (extensions §E7, §E3; decisions "API shape").

use taskgate::validate::{validate_prefix, DEFAULT_MAX_PAYLOAD_BYTES};
use taskgate::{Broker, Error, ErrorKind, Failure, Limits, ReplayRequest, Status, Step, Task};

use super::check::{expect_err, expect_invalid, ids, stored_ids};
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

/// Given the limit the broker reports after `init` (`Broker::limits`: 16 MiB with the default
/// options, or less — at least 1 MiB — when the storage holds less, with the storage setting
/// that bound it), then a payload, a step cursor, a result and a replay payload of exactly that
/// many bytes are accepted, stored on one task together and read back byte for byte, and one
/// byte more is `InvalidInput` naming `payload`, `cursor`, `result` or `payload` (replay),
/// whose reason names the limit (and the setting, when one bound it), and changes nothing.
pub async fn c36_payload_limits(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    let limits = h.broker.limits()?;
    let max = limits.max_payload_bytes;
    assert!(max <= DEFAULT_MAX_PAYLOAD_BYTES, "{max} is over the configured 16 MiB");
    assert!(max >= 1024 * 1024, "a limit of {max} bytes is below 1 MiB");
    assert_eq!(limits.bound.is_some(), max < DEFAULT_MAX_PAYLOAD_BYTES, "{limits:?}");
    // One buffer of the largest size (a pattern, so a shifted or cut copy shows) and one
    // byte more; every write below passes clones of these two.
    let big: Vec<u8> = (0..max).map(|i| u8::try_from(i % 251).unwrap_or(0)).collect();
    let mut over = big.clone();
    over.push(0xff);
    let r = h.broker.enqueue(&task("over", "job", "qb").with_payload(over.clone())).await;
    refused(r, "payload", &limits, "enqueue with a payload one byte over the limit");
    h.enqueue(task("big", "job", "qb").with_payload(big.clone())).await;
    assert!(h.get("big").await.payload == Some(big.clone()), "payload read back differs");

    let claimed = h.dequeue(&["qb"]).await;
    let token = claimed.lease_token.as_str();
    let step = |cursor: &Vec<u8>| Step { cursor: Some(cursor.clone()), ..Step::default() };
    let r = h.broker.save_step("big", token, step(&over)).await;
    refused(r, "cursor", &limits, "save_step with a cursor one byte over the limit");
    h.broker.save_step("big", token, step(&big)).await?;
    let claimed = h.dequeue(&["qb"]).await;
    assert!(claimed.cursor == Some(big.clone()), "the cursor a claim returns differs");
    let token = claimed.lease_token.as_str();
    let r = h.broker.ack("big", token, Some(over.clone())).await;
    refused(r, "result", &limits, "ack with a result one byte over the limit");
    h.broker.ack("big", token, Some(big.clone())).await?;
    let done = h.get("big").await;
    assert_eq!(done.status, Status::Completed, "ack with the largest result");
    assert!(done.payload == Some(big.clone()), "payload after ack differs");
    assert!(done.cursor == Some(big.clone()), "cursor after ack differs");
    assert!(done.result == Some(big.clone()), "result after ack differs");
    drop(done);

    let request = ReplayRequest::by_id("big").allow_completed();
    let r = h.broker.replay(request.clone().with_payload(over)).await;
    refused(r, "payload", &limits, "replay with a payload one byte over the limit");
    let replay = h.broker.replay(request.with_payload(big.clone())).await?;
    assert!(h.get(&replay.id).await.payload == Some(big), "the replay's payload differs");
    assert_eq!(stored_ids(&*h.broker).await?, ids(&["big", replay.id.as_str()]), "stored");
    h.finish().await
}

/// Asserts `result` is `InvalidInput` naming `field`, with a reason that names the limit and,
/// when the storage bound it, the setting.
fn refused<T>(result: taskgate::Result<T>, field: &str, limits: &Limits, what: &str) {
    match expect_err(result, ErrorKind::InvalidInput, what) {
        Error::InvalidInput { field: got, reason } => {
            assert_eq!(got, field, "{what}: InvalidInput names the wrong field");
            let max = limits.max_payload_bytes.to_string();
            assert!(reason.contains(&max), "{what}: the reason names no limit: {reason}");
            if let Some(bound) = limits.bound {
                assert!(reason.contains(bound.setting), "{what}: {reason} names no setting");
            }
        }
        other => panic!("{what}: InvalidInput of another shape: {other:?}"),
    }
}
