//! Shrunk failures the model test found, kept as fixed sequences every backend replays.

use taskgate::{OnParentFailure, Status};

use super::op::{Op, ReplayTarget, TaskSpec, TokenRef};
use super::run::{check_sequence, ModelFailure};
use crate::Factory;

/// One fixed sequence: a name, what it pins down, and the steps.
pub struct Regression {
    /// Short stable name.
    pub name: &'static str,
    /// What went wrong, and where the fix lives.
    pub found: &'static str,
    /// The steps, compared with the model one by one.
    pub ops: Vec<Op>,
}

fn task(id: &'static str, key: Option<&'static str>, parents: &[&str]) -> TaskSpec {
    TaskSpec {
        id: Some(id),
        task_type: "x",
        queue: "qa",
        key,
        parents: parents.iter().map(|p| (*p).to_owned()).collect(),
        policy: OnParentFailure::FailFast,
        delay_secs: 0,
        max_retry: 0,
        payload: None,
        priority: 0,
    }
}

/// Every kept sequence.
pub fn regressions() -> Vec<Regression> {
    vec![
        Regression {
            name: "key_tail_within_one_millisecond",
            found: "a replay made in the same millisecond as its target (a preset ID, which sorts \
                    after every generated ULID) is the key's chain tail, so enqueue's TaskExists \
                    names the replay (SQL engine: KEY_TAIL_SQL orders by created_at, id)",
            ops: vec![
                Op::Enqueue(task("t1", Some("k1"), &[])),
                Op::Cancel { id: "t1".into() },
                Op::Replay {
                    target: ReplayTarget::Key("k1"),
                    allow_completed: false,
                    payload: None,
                    priority: None,
                },
                Op::Enqueue(task("t5", Some("k1"), &[])),
            ],
        },
        Regression {
            name: "ack_many_later_item_after_stale_token",
            found: "ack_many treats its items in order: a stale token for a task followed by the \
                    current one fails the first item and acks with the second (SQL engine: \
                    duplicate IDs take the ordered path)",
            ops: vec![
                Op::Enqueue(task("t1", None, &[])),
                Op::ClaimOne { queues: vec!["qa"] },
                Op::AckMany(vec![
                    ("t1".into(), TokenRef::Previous),
                    ("t1".into(), TokenRef::Current),
                ]),
            ],
        },
        Regression {
            name: "resume_relinks_a_parent_pruned_and_enqueued_again",
            found: "a canceled parent pruned and enqueued again under its ID lost its edges; \
                    resuming the child must link it again, so canceling the parent cascades \
                    (SQL engine: rearm_edges writes the edges anew)",
            ops: vec![
                Op::Enqueue(task("t1", None, &[])),
                Op::Cancel { id: "t1".into() },
                Op::Enqueue(task("t2", None, &["t1"])),
                Op::Prune {
                    before_ms: 1,
                    statuses: vec![Status::Canceled],
                    limit: 1,
                    include_keyed: false,
                },
                Op::Enqueue(task("t1", None, &[])),
                Op::Resume { id: "t2".into() },
                Op::Cancel { id: "t1".into() },
            ],
        },
        Regression {
            name: "replay_chain_pruned_whole",
            found: "a key-less execution pruned while its replay stayed left the replay's \
                    replay_of naming a free ID; enqueued again with a key, the model saw it \
                    replayed (no chain tail) and the backends did not. A key-less replay chain \
                    goes whole (here once the replay finished too) or not at all \
                    (docs/decisions.md \"Retention\"; memory: prune.rs, SQL engine: \
                    ops/prune.rs replay_chains)",
            ops: vec![
                Op::Enqueue(task("t1", None, &[])),
                Op::Cancel { id: "t1".into() },
                Op::Advance(std::time::Duration::from_millis(59_999)),
                Op::Replay {
                    target: ReplayTarget::Id("t1".into()),
                    allow_completed: false,
                    payload: None,
                    priority: None,
                },
                Op::Prune { before_ms: 1, statuses: Vec::new(), limit: 0, include_keyed: false },
                Op::Enqueue(task("t1", Some("k1"), &[])),
                Op::Enqueue(task("t2", Some("k1"), &[])),
                Op::Cancel { id: "g1".into() },
                Op::Prune { before_ms: 1, statuses: Vec::new(), limit: 0, include_keyed: false },
                Op::Enqueue(task("t1", None, &[])),
            ],
        },
    ]
}

/// Replays every kept sequence on fresh storage from `factory()`; the first failure names its
/// sequence. Call it from a plain `#[test]`.
pub fn check_regressions<F: Factory + 'static>(
    factory: impl Fn() -> F,
) -> Result<(), ModelFailure> {
    for r in regressions() {
        check_sequence(factory(), &r.ops).map_err(|mut f| {
            f.reason = format!("fixed sequence {} ({}): {}", r.name, r.found, f.reason);
            f
        })?;
    }
    Ok(())
}
