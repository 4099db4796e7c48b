//! Model-based tests (extensions §E12) against PostgreSQL: random operation sequences (64 by
//! default; `TASKGATE_MODEL_CASES` overrides), each on a fresh table prefix and compared step by
//! step with brokertest's reference model; the history checker with several handles at once;
//! and the shrunk failures the model found, kept as fixed sequences.

use brokertest::model::{
    check_sequence, history_test, HistoryConfig, Op, ReplayTarget, TaskSpec, TokenRef,
};
use taskgate::OnParentFailure;
use taskgate_postgres::testing::PgFactory;

#[test]
fn postgres_matches_the_model() {
    brokertest::model::model_test(PgFactory::from_env(), 64);
}

#[test]
fn concurrent_histories_on_postgres_are_consistent() {
    history_test(PgFactory::from_env(), HistoryConfig::default());
}

fn keyed(id: &'static str) -> TaskSpec {
    TaskSpec {
        id: Some(id),
        task_type: "x",
        queue: "qa",
        key: Some("k1"),
        parents: Vec::new(),
        policy: OnParentFailure::FailFast,
        delay_secs: 0,
        max_retry: 0,
        payload: None,
    }
}

/// Found by the model test: a replay made in the same millisecond as its target (a preset ID,
/// which sorts after every generated ULID) is the key's chain tail, so enqueue's
/// `TaskExists` must name the replay, not the target. The engine's tail query orders by
/// `(created_at, id)` instead (brokers/sql/src/ops/enqueue.rs `KEY_TAIL_SQL`).
#[test]
fn key_tail_is_the_execution_nobody_replayed_even_within_one_millisecond() {
    let ops = [
        Op::Enqueue(keyed("t1")),
        Op::Cancel { id: "t1".into() },
        Op::Replay { target: ReplayTarget::Key("k1"), allow_completed: false, payload: None },
        Op::Enqueue(keyed("t5")),
    ];
    if let Err(failure) = check_sequence(PgFactory::from_env(), &ops) {
        panic!("{failure}");
    }
}

/// Found by the model test: `ack_many` treats its items in order, so a stale token for a task
/// followed by the current one fails the first item and acks the task with the second. The
/// engine's one-statement ack only tries each ID's first item
/// (brokers/sql/src/ops/ack.rs `ack_many`).
#[test]
fn ack_many_tries_a_later_item_after_a_stale_token_for_the_same_task() {
    let mut t1 = keyed("t1");
    t1.key = None;
    let ops = [
        Op::Enqueue(t1),
        Op::ClaimOne { queues: vec!["qa"] },
        Op::AckMany(vec![("t1".into(), TokenRef::Previous), ("t1".into(), TokenRef::Current)]),
    ];
    if let Err(failure) = check_sequence(PgFactory::from_env(), &ops) {
        panic!("{failure}");
    }
}
