//! The operations a generated sequence is made of, as people read them in a shrunk failure,
//! and how the model binds one to a concrete [`Call`] (resolving "the task's current token",
//! relative times, pool names).

use std::time::Duration;

use taskgate::{
    AckItem, FailKind, Failure, Filter, OnParentFailure, PruneRequest, ReplayRequest, Status, Step,
    Task, Timestamp,
};

use super::call::Call;
use super::state::Model;

/// Readable preset task IDs (they sort after every generated ULID, like any lowercase ID).
pub const PRESET_IDS: [&str; 6] = ["t1", "t2", "t3", "t4", "t5", "t6"];
/// The queues sequences use (`qb` has a 20 s lease TTL, `qa` the default 60 s).
pub const QUEUES: [&str; 2] = ["qa", "qb"];
/// The task types sequences use.
pub const TYPES: [&str; 2] = ["x", "y"];
/// The business keys sequences use.
pub const KEYS: [&str; 2] = ["k1", "k2"];

/// Which lease token a call presents, resolved when the step runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenRef {
    /// The latest token issued to the task (valid while that claim holds).
    Current,
    /// The token before the latest (always stale).
    Previous,
    /// The empty string (never valid).
    Empty,
    /// A token no claim ever issued.
    Bogus,
}

/// A task to enqueue, from the readable pools.
#[derive(Clone, PartialEq, Eq)]
pub struct TaskSpec {
    /// A preset ID, or `None` for a generated one.
    pub id: Option<&'static str>,
    /// Type.
    pub task_type: &'static str,
    /// Queue.
    pub queue: &'static str,
    /// Business key.
    pub key: Option<&'static str>,
    /// Parents by model name (verbatim: order and duplicates kept).
    pub parents: Vec<String>,
    /// Policy on parent failure.
    pub policy: OnParentFailure,
    /// `run_at` relative to now in seconds; 0 leaves it unset (now).
    pub delay_secs: i64,
    /// Business retries allowed.
    pub max_retry: u32,
    /// Payload number (`{"n":N}`), or none.
    pub payload: Option<u8>,
    /// Claim priority (outside −100..=100 is invalid).
    pub priority: i16,
}

/// A checkpoint to save.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct StepSpec {
    /// Cursor number (`cN`), or none.
    pub cursor: Option<u8>,
    /// Progress (over 100 is invalid).
    pub progress: Option<u8>,
    /// Delay in seconds (over 60 is invalid).
    pub delay_secs: u64,
}

/// What a replay names.
#[derive(Clone, PartialEq, Eq)]
pub enum ReplayTarget {
    /// An execution ID.
    Id(String),
    /// A business key's chain tail.
    Key(&'static str),
    /// Both (an invalid request).
    Both(String, &'static str),
    /// Neither (an invalid request).
    Neither,
}

/// A filtered list.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct ListSpec {
    /// Only this type.
    pub task_type: Option<&'static str>,
    /// Only this queue.
    pub queue: Option<&'static str>,
    /// Only this status.
    pub status: Option<Status>,
    /// Only this key.
    pub key: Option<&'static str>,
    /// Limit (0 = all).
    pub limit: usize,
    /// Offset.
    pub offset: usize,
}

/// One step of a generated sequence.
#[derive(Clone, PartialEq, Eq)]
pub enum Op {
    /// Enqueue one task.
    Enqueue(TaskSpec),
    /// Enqueue a batch.
    EnqueueMany(Vec<TaskSpec>),
    /// `try_dequeue_many(queues, max)`.
    Claim {
        /// Queues.
        queues: Vec<&'static str>,
        /// Most tasks.
        max: usize,
    },
    /// `try_dequeue(queues)`.
    ClaimOne {
        /// Queues.
        queues: Vec<&'static str>,
    },
    /// The blocking `dequeue(queues)`.
    Dequeue {
        /// Queues.
        queues: Vec<&'static str>,
    },
    /// `ack`.
    Ack {
        /// Task.
        id: String,
        /// Token.
        token: TokenRef,
        /// Result number (`{"r":N}`), or none.
        result: Option<u8>,
    },
    /// `ack_many`.
    AckMany(Vec<(String, TokenRef)>),
    /// `fail`.
    Fail {
        /// Task.
        id: String,
        /// Token.
        token: TokenRef,
        /// Kind.
        kind: FailKind,
        /// Retry time relative to now in seconds; `None` passes zero (= now).
        retry_secs: Option<i64>,
    },
    /// `cancel`.
    Cancel {
        /// Task.
        id: String,
    },
    /// `finish_canceled`.
    FinishCanceled {
        /// Task.
        id: String,
        /// Token.
        token: TokenRef,
    },
    /// `requeue`.
    Requeue {
        /// Task.
        id: String,
        /// Token.
        token: TokenRef,
    },
    /// `heartbeat`.
    Heartbeat {
        /// Task.
        id: String,
        /// Token.
        token: TokenRef,
    },
    /// `save_step`.
    SaveStep {
        /// Task.
        id: String,
        /// Token.
        token: TokenRef,
        /// Checkpoint.
        step: StepSpec,
    },
    /// `pause_queue`.
    Pause(&'static str),
    /// `resume_queue`.
    Unpause(&'static str),
    /// Operator `resume`.
    Resume {
        /// Task.
        id: String,
    },
    /// `replay`.
    Replay {
        /// Target.
        target: ReplayTarget,
        /// Allow a completed target.
        allow_completed: bool,
        /// Payload override number, or none (copy the target's).
        payload: Option<u8>,
        /// Priority override, or none (copy the target's).
        priority: Option<i16>,
    },
    /// `prune`.
    Prune {
        /// Cutoff relative to now, in milliseconds.
        before_ms: i64,
        /// Statuses (empty = all terminal).
        statuses: Vec<Status>,
        /// Limit (0 = none).
        limit: usize,
        /// Also whole keyed chains.
        include_keyed: bool,
    },
    /// `reap_expired`.
    Reap,
    /// Move the clock forward.
    Advance(Duration),
    /// Move the clock forward, then `reap_expired`.
    Lapse(Duration),
    /// `get`.
    Get {
        /// Task.
        id: String,
    },
    /// `list` with a filter.
    List(ListSpec),
}

fn json(field: &str, n: u8) -> Vec<u8> {
    format!("{{\"{field}\":{n}}}").into_bytes()
}

fn at(now: Timestamp, offset_ms: i64) -> Timestamp {
    Timestamp::from_millis(now.as_millis().saturating_add(offset_ms))
}

fn owned(queues: &[&'static str]) -> Vec<String> {
    queues.iter().map(|q| (*q).to_owned()).collect()
}

impl TaskSpec {
    /// The task an enqueue hands the broker, with `run_at` resolved against `now`.
    pub fn to_task(&self, now: Timestamp) -> Task {
        Task {
            id: self.id.unwrap_or_default().to_owned(),
            business_key: self.key.unwrap_or_default().to_owned(),
            task_type: self.task_type.to_owned(),
            queue: self.queue.to_owned(),
            payload: self.payload.map(|n| json("n", n)),
            max_retry: self.max_retry,
            run_at: if self.delay_secs == 0 {
                Timestamp::ZERO
            } else {
                at(now, self.delay_secs * 1000)
            },
            depends_on: self.parents.clone(),
            on_parent_failure: self.policy,
            priority: self.priority,
            ..Task::default()
        }
    }
}

impl Model {
    /// The token `which` names for task `id` right now (model space).
    pub fn token(&self, id: &str, which: TokenRef) -> String {
        let issued = self.tasks.get(id).map(|e| e.tokens.as_slice()).unwrap_or_default();
        let pick = match which {
            TokenRef::Current => issued.last(),
            TokenRef::Previous => issued.len().checked_sub(2).and_then(|i| issued.get(i)),
            TokenRef::Empty => return String::new(),
            TokenRef::Bogus => None,
        };
        pick.cloned().unwrap_or_else(|| "no-such-token".to_owned())
    }

    /// Binds `op` to a concrete call against the model's current state and clock.
    pub fn bind(&self, op: &Op) -> Call {
        let now = self.now;
        let token = |id: &String, which: &TokenRef| self.token(id, *which);
        match op {
            Op::Enqueue(spec) => Call::Enqueue(spec.to_task(now)),
            Op::EnqueueMany(specs) => {
                Call::EnqueueMany(specs.iter().map(|s| s.to_task(now)).collect())
            }
            Op::Claim { queues, max } => Call::TryDequeueMany { queues: owned(queues), max: *max },
            Op::ClaimOne { queues } => Call::TryDequeue { queues: owned(queues) },
            Op::Dequeue { queues } => Call::Dequeue { queues: owned(queues) },
            Op::Ack { id, token: t, result } => Call::Ack {
                id: id.clone(),
                token: token(id, t),
                result: result.map(|n| json("r", n)),
            },
            Op::AckMany(items) => Call::AckMany(
                items
                    .iter()
                    .map(|(id, t)| AckItem { id: id.clone(), token: token(id, t), result: None })
                    .collect(),
            ),
            Op::Fail { id, token: t, kind, retry_secs } => {
                let retry_at = retry_secs.map_or(Timestamp::ZERO, |s| at(now, s * 1000));
                let failure = Failure::new(*kind, format!("boom {id}"), retry_at);
                Call::Fail { id: id.clone(), token: token(id, t), failure }
            }
            Op::Cancel { id } => Call::Cancel { id: id.clone() },
            Op::FinishCanceled { id, token: t } => {
                Call::FinishCanceled { id: id.clone(), token: token(id, t) }
            }
            Op::Requeue { id, token: t } => Call::Requeue { id: id.clone(), token: token(id, t) },
            Op::Heartbeat { id, token: t } => {
                Call::Heartbeat { id: id.clone(), token: token(id, t) }
            }
            Op::SaveStep { id, token: t, step } => {
                Call::SaveStep { id: id.clone(), token: token(id, t), step: step.to_step(id) }
            }
            Op::Pause(q) => Call::PauseQueue((*q).to_owned()),
            Op::Unpause(q) => Call::ResumeQueue((*q).to_owned()),
            Op::Resume { id } => Call::Resume { id: id.clone() },
            Op::Replay { target, allow_completed, payload, priority } => {
                Call::Replay(replay_request(target, *allow_completed, *payload, *priority))
            }
            Op::Prune { before_ms, statuses, limit, include_keyed } => Call::Prune(PruneRequest {
                finished_before: at(now, *before_ms),
                statuses: statuses.clone(),
                limit: *limit,
                include_keyed: *include_keyed,
            }),
            Op::Reap => Call::Reap,
            Op::Advance(d) => Call::Advance(*d),
            Op::Lapse(d) => Call::Lapse(*d),
            Op::Get { id } => Call::Get { id: id.clone() },
            Op::List(spec) => Call::List(spec.filter()),
        }
    }
}

impl StepSpec {
    /// The checkpoint `id`'s worker saves.
    pub fn to_step(&self, id: &str) -> Step {
        Step {
            cursor: self.cursor.map(|n| format!("c{n}").into_bytes()),
            progress: self.progress,
            message: format!("step of {id}"),
            delay: Duration::from_secs(self.delay_secs),
        }
    }
}

fn replay_request(
    target: &ReplayTarget,
    allow_completed: bool,
    payload: Option<u8>,
    priority: Option<i16>,
) -> ReplayRequest {
    let (execution_id, business_key) = match target {
        ReplayTarget::Id(id) => (id.clone(), String::new()),
        ReplayTarget::Key(k) => (String::new(), (*k).to_owned()),
        ReplayTarget::Both(id, k) => (id.clone(), (*k).to_owned()),
        ReplayTarget::Neither => (String::new(), String::new()),
    };
    ReplayRequest {
        execution_id,
        business_key,
        allow_completed,
        payload: payload.map(|n| json("p", n)),
        priority,
    }
}

impl ListSpec {
    /// The filter this spec describes.
    pub fn filter(&self) -> Filter {
        Filter {
            task_type: self.task_type.unwrap_or_default().to_owned(),
            queue: self.queue.unwrap_or_default().to_owned(),
            status: self.status,
            business_key: self.key.unwrap_or_default().to_owned(),
            owner: String::new(),
            parent: String::new(),
            limit: self.limit,
            offset: self.offset,
        }
    }
}
