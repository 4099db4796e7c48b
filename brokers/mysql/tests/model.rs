//! The model-based test (extensions §E12) and the concurrency history checker against
//! MySQL/MariaDB: 64 random sequences by default (`TASKGATE_MODEL_CASES` overrides), each on a
//! fresh table prefix; histories with 4 workers on separate handles, 3 rounds
//! (`TASKGATE_HISTORY_ROUNDS` overrides); and the shrunk failures the model found, kept as
//! fixed sequences.

use brokertest::model::{
    check_sequence, history_test, model_test, HistoryConfig, Op, ReplayTarget, TaskSpec,
};
use taskgate::OnParentFailure;
use taskgate_mysql::testing::MySqlFactory;

#[test]
fn mysql_matches_the_model() {
    model_test(MySqlFactory::from_env(), 64);
}

#[test]
fn mysql_histories_hold_the_lease_and_dependency_properties() {
    history_test(MySqlFactory::from_env(), HistoryConfig::default());
}

fn keyed(id: &'static str) -> TaskSpec {
    TaskSpec {
        id: Some(id),
        task_type: "x",
        queue: "qa",
        key: Some("k2"),
        parents: Vec::new(),
        policy: OnParentFailure::FailFast,
        delay_secs: 0,
        max_retry: 0,
        payload: None,
    }
}

/// Found by the model test on MariaDB (seed 1796011854750135936): a replay made in the same
/// millisecond as its target (a preset ID, which sorts after every generated ULID) is the
/// key's chain tail, so enqueue's `TaskExists` must name the replay. The engine's tail query
/// orders by `(created_at, id)` (brokers/sql/src/ops/enqueue.rs `KEY_TAIL_SQL`).
#[test]
fn key_tail_is_the_execution_nobody_replayed_even_within_one_millisecond() {
    let ops = [
        Op::Enqueue(keyed("t1")),
        Op::Cancel { id: "t1".into() },
        Op::Replay { target: ReplayTarget::Key("k2"), allow_completed: false, payload: None },
        Op::Enqueue(keyed("t5")),
    ];
    if let Err(failure) = check_sequence(MySqlFactory::from_env(), &ops) {
        panic!("{failure}");
    }
}
