//! After every step: everything observable on the backend (every task in list order with all
//! its fields, Counts, QueueLen of every queue, the paused queues) must equal the model; a
//! difference is described field by field.

use taskgate::{Counts, Filter, Task, Timestamp, CONTRACT_EPOCH};

use super::exec::{bounded, Exec};
use super::op::QUEUES;
use super::state::Model;

/// Compares the backend's whole observable state with the model's.
pub(crate) async fn compare_state(model: &Model, exec: &Exec) -> Result<(), String> {
    let want = model.list(&Filter::default());
    let got = exec.list_all().await?;
    if want != got {
        return Err(format!("list differs:\n{}", diff_lists(&want, &got)));
    }
    let counts = match bounded("counts", exec.broker().counts()).await? {
        Ok(c) => without_zeros(c),
        Err(e) => return Err(format!("counts failed: {e}")),
    };
    if counts != model.counts() {
        return Err(format!("counts differ: expected {:?}, got {counts:?}", model.counts()));
    }
    for queue in QUEUES.iter().copied().chain(["no-such-queue"]) {
        match bounded("queue_len", exec.broker().queue_len(queue)).await? {
            Ok(n) if n == model.queue_len(queue) => {}
            Ok(n) => {
                return Err(format!(
                    "queue_len({queue}): expected {}, got {n}",
                    model.queue_len(queue)
                ))
            }
            Err(e) => return Err(format!("queue_len({queue}) failed: {e}")),
        }
    }
    match bounded("paused_queues", exec.broker().paused_queues()).await? {
        Ok(p) if p == model.paused_queues() => Ok(()),
        Ok(p) => Err(format!("paused_queues: expected {:?}, got {p:?}", model.paused_queues())),
        Err(e) => Err(format!("paused_queues failed: {e}")),
    }
}

fn without_zeros(mut counts: Counts) -> Counts {
    for by_status in counts.values_mut() {
        by_status.retain(|_, n| *n != 0);
    }
    counts.retain(|_, by_status| !by_status.is_empty());
    counts
}

/// Lines describing how two lists of snapshots differ.
pub(crate) fn diff_lists(want: &[Task], got: &[Task]) -> String {
    let ids = |ts: &[Task]| ts.iter().map(|t| t.id.clone()).collect::<Vec<_>>();
    if ids(want) != ids(got) {
        return format!("  expected ids {:?}\n  got ids      {:?}", ids(want), ids(got));
    }
    let mut lines = Vec::new();
    for (w, g) in want.iter().zip(got) {
        lines.extend(diff_task(w, g).into_iter().map(|d| format!("  {}: {d}", w.id)));
    }
    lines.join("\n")
}

/// `name: expected X, got Y` for every field that differs.
pub(crate) fn diff_task(want: &Task, got: &Task) -> Vec<String> {
    let mut out = Vec::new();
    let mut field = |name: &str, w: String, g: String| {
        if w != g {
            out.push(format!("{name}: expected {w}, got {g}"));
        }
    };
    field("business_key", want.business_key.clone(), got.business_key.clone());
    field("replay_of", want.replay_of.clone(), got.replay_of.clone());
    field("type", want.task_type.clone(), got.task_type.clone());
    field("queue", want.queue.clone(), got.queue.clone());
    field("payload", bytes(&want.payload), bytes(&got.payload));
    field("status", want.status.to_string(), got.status.to_string());
    field("result", bytes(&want.result), bytes(&got.result));
    field("last_error", format!("{:?}", want.last_error), format!("{:?}", got.last_error));
    field("attempts", want.attempts.to_string(), got.attempts.to_string());
    field("max_retry", want.max_retry.to_string(), got.max_retry.to_string());
    field("priority", want.priority.to_string(), got.priority.to_string());
    field("lease_lost", want.lease_lost.to_string(), got.lease_lost.to_string());
    field("throttled", want.throttled.to_string(), got.throttled.to_string());
    let lease = |t: &Task| format!("{:?}", t.lease_expires_at);
    field("lease_expires_at", lease(want), lease(got));
    let beat = |t: &Task| format!("{:?}", t.last_heartbeat_at);
    field("last_heartbeat_at", beat(want), beat(got));
    field("run_at", at(Some(want.run_at)), at(Some(got.run_at)));
    field("depends_on", format!("{:?}", want.depends_on), format!("{:?}", got.depends_on));
    field(
        "on_parent_failure",
        want.on_parent_failure.to_string(),
        got.on_parent_failure.to_string(),
    );
    field("lease_token", format!("{:?}", want.lease_token), format!("{:?}", got.lease_token));
    field("created_at", at(Some(want.created_at)), at(Some(got.created_at)));
    field("started_at", at(want.started_at), at(got.started_at));
    field("finished_at", at(want.finished_at), at(got.finished_at));
    field("cancel_requested", want.cancel_requested.to_string(), got.cancel_requested.to_string());
    field("cursor", bytes(&want.cursor), bytes(&got.cursor));
    field("progress", format!("{:?}", want.progress), format!("{:?}", got.progress));
    field("message", format!("{:?}", want.message), format!("{:?}", got.message));
    field("steps", want.steps.to_string(), got.steps.to_string());
    field("resumes", want.resumes.to_string(), got.resumes.to_string());
    field("owner", want.owner.clone(), got.owner.clone());
    if out.is_empty() && want.id != got.id {
        out.push(format!("id: expected {}, got {}", want.id, got.id));
    }
    out
}

fn bytes(b: &Option<Vec<u8>>) -> String {
    b.as_ref().map_or("none".to_owned(), |b| format!("{:?}", String::from_utf8_lossy(b)))
}

/// A time as an offset from the suite's epoch (`T+61s`), `none` when unset.
pub(crate) fn at(t: Option<Timestamp>) -> String {
    let epoch = i64::try_from(CONTRACT_EPOCH.as_millis()).unwrap_or(i64::MAX);
    match t {
        None => "none".to_owned(),
        Some(t) => {
            let ms = t.as_millis() - epoch;
            if ms % 1000 == 0 {
                format!("T{:+}s", ms / 1000)
            } else {
                format!("T{ms:+}ms")
            }
        }
    }
}
