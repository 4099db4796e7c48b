//! Random operation sequences: the `proptest-state-machine` reference machine whose state is
//! the [`Model`] and whose transitions are [`Op`]s drawn from small readable pools, weighted so
//! that short sequences reach claims, retries, caps, cascades, replays and resumes.

use std::time::Duration;

use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::Union;
use proptest_state_machine::ReferenceStateMachine;
use taskgate::{FailKind, OnParentFailure, Status};

use super::op::{
    ListSpec, Op, ReplayTarget, StepSpec, TaskSpec, TokenRef, KEYS, PRESET_IDS, QUEUES, TYPES,
};
use super::state::Model;

/// The reference state machine: generation and shrinking run on the pure [`Model`].
#[derive(Clone, Copy, Debug, Default)]
pub struct ContractMachine;

impl ReferenceStateMachine for ContractMachine {
    type State = Model;
    type Transition = Op;

    fn init_state() -> BoxedStrategy<Model> {
        Just(Model::default()).boxed()
    }

    fn transitions(state: &Model) -> BoxedStrategy<Op> {
        op_strategy(state)
    }

    fn apply(mut state: Model, op: &Op) -> Model {
        let call = state.bind(op);
        state.perform(&call);
        state
    }
}

fn pick(names: Vec<String>) -> BoxedStrategy<String> {
    select(names).boxed()
}

fn presets() -> Vec<String> {
    PRESET_IDS.iter().map(|s| (*s).to_owned()).collect()
}

/// Existing tasks mostly, any preset ID rarely (missing IDs exercise `NotFound`).
fn any_id(m: &Model) -> BoxedStrategy<String> {
    let existing = m.names();
    if existing.is_empty() {
        return pick(presets());
    }
    prop_oneof![8 => pick(existing), 1 => pick(presets())].boxed()
}

/// Tasks in `status` (when there are any) mostly, else any task.
fn in_status(m: &Model, keep: impl Fn(Status) -> bool) -> BoxedStrategy<String> {
    let names = names_in(m, keep);
    if names.is_empty() {
        return any_id(m);
    }
    prop_oneof![6 => pick(names), 1 => any_id(m)].boxed()
}

fn names_in(m: &Model, keep: impl Fn(Status) -> bool) -> Vec<String> {
    m.names().into_iter().filter(|n| m.task(n).is_some_and(|t| keep(t.status))).collect()
}

/// A preset ID not used yet (mostly), any preset, or a generated one.
fn new_id(m: &Model) -> BoxedStrategy<Option<&'static str>> {
    let unused: Vec<&'static str> =
        PRESET_IDS.iter().copied().filter(|id| m.task(id).is_none()).collect();
    let any = select(PRESET_IDS.to_vec()).prop_map(Some);
    if unused.is_empty() {
        return prop_oneof![1 => any, 3 => Just(None)].boxed();
    }
    prop_oneof![8 => select(unused).prop_map(Some), 1 => any, 2 => Just(None)].boxed()
}

/// Parents: none often; else mostly the latest tasks (so chains grow deep), other existing
/// tasks, and rarely a missing one.
fn parents(m: &Model) -> BoxedStrategy<Vec<String>> {
    let existing = m.names();
    if existing.is_empty() {
        return prop_oneof![9 => Just(Vec::new()), 1 => vec(pick(presets()), 1..=1)].boxed();
    }
    let listed = m.list(&taskgate::Filter::default());
    let recent: Vec<String> = listed.iter().rev().take(2).map(|t| t.id.clone()).collect();
    let parent = prop_oneof![8 => pick(recent), 6 => pick(existing), 1 => pick(presets())];
    prop_oneof![3 => Just(Vec::new()), 4 => vec(parent.clone(), 1..=1), 2 => vec(parent, 2..=3)]
        .boxed()
}

fn token_ref() -> impl Strategy<Value = TokenRef> {
    prop_oneof![
        10 => Just(TokenRef::Current),
        1 => Just(TokenRef::Previous),
        1 => Just(TokenRef::Empty),
        1 => Just(TokenRef::Bogus),
    ]
}

fn queues() -> impl Strategy<Value = Vec<&'static str>> {
    select(vec![vec!["qa"], vec!["qb"], vec!["qa", "qb"]])
}

fn spec(m: &Model) -> impl Strategy<Value = TaskSpec> {
    let id = new_id(m);
    let key = prop_oneof![3 => Just(None), 1 => select(KEYS.to_vec()).prop_map(Some)];
    let policy = prop_oneof![
        2 => Just(OnParentFailure::FailFast),
        1 => Just(OnParentFailure::IgnoreParentFailure),
    ];
    let delay = select(vec![0i64, 0, 0, 0, -10, 1, 30, 120]);
    let payload = option::of(0..3u8);
    let head = (id, select(TYPES.to_vec()), select(QUEUES.to_vec()), key);
    let priority = prop_oneof![30 => select(vec![0i16, 0, 0, -1, 2]), 1 => Just(101i16)];
    let tail = (parents(m), policy, delay, 0..=2u32, payload, priority);
    (head, tail).prop_map(
        |((id, task_type, queue, key), (parents, policy, delay, max_retry, payload, priority))| {
            TaskSpec {
                id,
                task_type,
                queue,
                key,
                parents,
                policy,
                delay_secs: delay,
                max_retry,
                payload,
                priority,
            }
        },
    )
}

fn fail(m: &Model) -> impl Strategy<Value = Op> {
    let kind = prop_oneof![
        4 => Just(FailKind::Business),
        3 => Just(FailKind::Throttled),
        2 => Just(FailKind::Skip),
    ];
    let retry = select(vec![None, Some(0i64), Some(1), Some(1), Some(30), Some(-5)]);
    (running(m), token_ref(), kind, retry).prop_map(|(id, token, kind, retry_secs)| Op::Fail {
        id,
        token,
        kind,
        retry_secs,
    })
}

fn save_step(m: &Model) -> impl Strategy<Value = Op> {
    let progress = prop_oneof![30 => option::of(0..=100u8), 1 => Just(Some(101u8))];
    let delay = prop_oneof![30 => select(vec![0u64, 0, 1, 5, 60]), 1 => Just(61u64)];
    (running(m), token_ref(), option::of(0..3u8), progress, delay).prop_map(
        |(id, token, cursor, progress, delay_secs)| Op::SaveStep {
            id,
            token,
            step: StepSpec { cursor, progress, delay_secs },
        },
    )
}

fn replay(m: &Model) -> impl Strategy<Value = Op> {
    let target = prop_oneof![
        6 => finished(m).prop_map(ReplayTarget::Id),
        2 => select(KEYS.to_vec()).prop_map(ReplayTarget::Key),
        1 => (any_id(m), select(KEYS.to_vec())).prop_map(|(id, k)| ReplayTarget::Both(id, k)),
        1 => Just(ReplayTarget::Neither),
    ];
    let priority = prop_oneof![
        8 => Just(None),
        2 => select(vec![-1i16, 3]).prop_map(Some),
        1 => Just(Some(-101i16)),
    ];
    (target, any::<bool>(), option::weighted(0.3, 0..3u8), priority).prop_map(
        |(target, allow_completed, payload, priority)| Op::Replay {
            target,
            allow_completed,
            payload,
            priority,
        },
    )
}

fn prune() -> impl Strategy<Value = Op> {
    let statuses = prop_oneof![
        4 => Just(vec![]),
        1 => Just(vec![Status::Failed]),
        1 => Just(vec![Status::Completed, Status::Canceled]),
        1 => Just(vec![Status::Pending]),
    ];
    let before = select(vec![1i64, 1, 0, -1_000, -30_000]);
    (before, statuses, select(vec![0usize, 0, 1, 2]), any::<bool>()).prop_map(
        |(before_ms, statuses, limit, include_keyed)| Op::Prune {
            before_ms,
            statuses,
            limit,
            include_keyed,
        },
    )
}

fn list() -> impl Strategy<Value = Op> {
    let dims = (
        option::weighted(0.3, select(TYPES.to_vec())),
        option::weighted(0.3, select(QUEUES.to_vec())),
        option::weighted(0.3, select(Status::ALL.to_vec())),
        option::weighted(0.3, select(KEYS.to_vec())),
    );
    (dims, select(vec![0usize, 0, 1, 2]), select(vec![0usize, 0, 1])).prop_map(
        |((task_type, queue, status, key), limit, offset)| {
            Op::List(ListSpec { task_type, queue, status, key, limit, offset })
        },
    )
}

fn advance() -> impl Strategy<Value = Op> {
    let ms = vec![1u64, 1_000, 19_999, 20_000, 20_001, 59_999, 60_000, 60_001, 61_000, 300_000];
    select(ms).prop_map(|ms| Op::Advance(Duration::from_millis(ms)))
}

/// A lapse to (just before, at, just after) a lease deadline, or far beyond.
fn lapse() -> impl Strategy<Value = Op> {
    let ms = vec![19_999u64, 20_000, 20_001, 59_999, 60_000, 60_001, 61_000, 300_000];
    select(ms).prop_map(|ms| Op::Lapse(Duration::from_millis(ms)))
}

fn running(m: &Model) -> BoxedStrategy<String> {
    in_status(m, |s| s == Status::Running)
}

fn finished(m: &Model) -> BoxedStrategy<String> {
    in_status(m, Status::is_terminal)
}

/// Weights that follow the state: claims when something is claimable, worker calls when
/// something runs, operator calls when something finished.
struct Weights {
    claim: u32,
    work: u32,
    finished: u32,
}

impl Weights {
    fn of(m: &Model) -> Self {
        let count =
            |keep: fn(Status) -> bool| u32::try_from(names_in(m, keep).len()).unwrap_or(u32::MAX);
        let scale = |n: u32| if n == 0 { 1 } else { 4 };
        Weights {
            claim: scale(count(Status::is_claimable)),
            work: scale(count(|s| s == Status::Running)),
            finished: scale(count(Status::is_terminal)),
        }
    }
}

fn claims(w: &Weights) -> Vec<(u32, BoxedStrategy<Op>)> {
    let max = prop_oneof![40 => 1..=3usize, 1 => Just(0usize)];
    let some_queues = prop_oneof![40 => queues(), 1 => Just(Vec::new())];
    vec![
        (
            4 * w.claim,
            (some_queues, max).prop_map(|(queues, max)| Op::Claim { queues, max }).boxed(),
        ),
        (w.claim, queues().prop_map(|queues| Op::ClaimOne { queues }).boxed()),
        (1, queues().prop_map(|queues| Op::Dequeue { queues }).boxed()),
    ]
}

fn worker_ops(m: &Model, w: &Weights) -> Vec<(u32, BoxedStrategy<Op>)> {
    let held = || (running(m), token_ref());
    vec![
        (
            4 * w.work,
            (held(), option::of(0..3u8))
                .prop_map(|((id, token), result)| Op::Ack { id, token, result })
                .boxed(),
        ),
        (w.work, vec(held(), 1..=3).prop_map(Op::AckMany).boxed()),
        (4 * w.work, fail(m).boxed()),
        (w.work, held().prop_map(|(id, token)| Op::FinishCanceled { id, token }).boxed()),
        (w.work, held().prop_map(|(id, token)| Op::Requeue { id, token }).boxed()),
        (2 * w.work, held().prop_map(|(id, token)| Op::Heartbeat { id, token }).boxed()),
        (2 * w.work, save_step(m).boxed()),
    ]
}

/// Unfinished tasks that a blocked task waits for (cancelling one cascades), else any
/// unfinished task.
fn cancel_target(m: &Model) -> BoxedStrategy<String> {
    let awaited: Vec<String> = m
        .list(&taskgate::Filter { status: Some(Status::Blocked), ..taskgate::Filter::default() })
        .iter()
        .flat_map(|t| t.depends_on.clone())
        .filter(|p| m.task(p).is_some_and(|t| !t.status.is_terminal()))
        .collect();
    let live = in_status(m, |s| !s.is_terminal());
    if awaited.is_empty() {
        return live;
    }
    prop_oneof![2 => pick(awaited), 1 => live].boxed()
}

fn admin_ops(m: &Model, w: &Weights) -> Vec<(u32, BoxedStrategy<Op>)> {
    let live = cancel_target(m);
    vec![
        (16, spec(m).prop_map(Op::Enqueue).boxed()),
        (3, vec(spec(m), 1..=3).prop_map(Op::EnqueueMany).boxed()),
        (5, live.prop_map(|id| Op::Cancel { id }).boxed()),
        (1, select(QUEUES.to_vec()).prop_map(Op::Pause).boxed()),
        (2, select(QUEUES.to_vec()).prop_map(Op::Unpause).boxed()),
        (w.finished, finished(m).prop_map(|id| Op::Resume { id }).boxed()),
        (w.finished, replay(m).boxed()),
        (w.finished, prune().boxed()),
        (2 + 2 * w.work, Just(Op::Reap).boxed()),
        (4 + w.work, advance().boxed()),
        (2 * w.work, lapse().boxed()),
        (1, any_id(m).prop_map(|id| Op::Get { id }).boxed()),
        (2, list().boxed()),
    ]
}

/// Every kind of step, weighted by the state.
fn op_strategy(m: &Model) -> BoxedStrategy<Op> {
    let w = Weights::of(m);
    let mut arms = claims(&w);
    arms.extend(worker_ops(m, &w));
    arms.extend(admin_ops(m, &w));
    Union::new_weighted(arms).boxed()
}
