//! The calls the model and the backend both perform, in model space (model names for IDs and
//! tokens, absolute times), and what a call returned, in a form both sides produce and the
//! test compares.

use std::fmt;
use std::time::Duration;

use taskgate::{
    AckItem, Error, ErrorKind, Failure, Filter, PruneRequest, ReplayRequest, Status, Step, Task,
};

use super::state::Model;

/// One broker call with concrete arguments in model space.
#[derive(Clone, Debug, PartialEq)]
#[expect(
    clippy::large_enum_variant,
    reason = "one call is built per step and dropped after it; boxing the task adds only noise"
)]
pub enum Call {
    /// `enqueue(task)`; an empty `id` asks for a generated one.
    Enqueue(Task),
    /// `enqueue_many(tasks)`.
    EnqueueMany(Vec<Task>),
    /// `try_dequeue_many(queues, max)`.
    TryDequeueMany {
        /// Queues to claim from.
        queues: Vec<String>,
        /// Most tasks to claim.
        max: usize,
    },
    /// `try_dequeue(queues)`.
    TryDequeue {
        /// Queues to claim from.
        queues: Vec<String>,
    },
    /// The blocking `dequeue(queues)`: returns at once when a task is ready, else waits.
    Dequeue {
        /// Queues to claim from.
        queues: Vec<String>,
    },
    /// `ack(id, token, result)`.
    Ack {
        /// Task.
        id: String,
        /// Presented token.
        token: String,
        /// Result bytes.
        result: Option<Vec<u8>>,
    },
    /// `ack_many(items)`.
    AckMany(Vec<AckItem>),
    /// `fail(id, token, failure)`.
    Fail {
        /// Task.
        id: String,
        /// Presented token.
        token: String,
        /// The failure.
        failure: Failure,
    },
    /// `cancel(id)`.
    Cancel {
        /// Task.
        id: String,
    },
    /// `finish_canceled(id, token)`.
    FinishCanceled {
        /// Task.
        id: String,
        /// Presented token.
        token: String,
    },
    /// `requeue(id, token)`.
    Requeue {
        /// Task.
        id: String,
        /// Presented token.
        token: String,
    },
    /// `heartbeat(id, token)`.
    Heartbeat {
        /// Task.
        id: String,
        /// Presented token.
        token: String,
    },
    /// `save_step(id, token, step)`.
    SaveStep {
        /// Task.
        id: String,
        /// Presented token.
        token: String,
        /// The checkpoint.
        step: Step,
    },
    /// `pause_queue(queue)`.
    PauseQueue(String),
    /// `resume_queue(queue)`.
    ResumeQueue(String),
    /// `resume(id)` (operator resume).
    Resume {
        /// Task.
        id: String,
    },
    /// `replay(request)`.
    Replay(ReplayRequest),
    /// `prune(request)`.
    Prune(PruneRequest),
    /// `reap_expired()`.
    Reap,
    /// Moves the clock forward (no broker call).
    Advance(Duration),
    /// Moves the clock forward, then `reap_expired()`.
    Lapse(Duration),
    /// `get(id)`.
    Get {
        /// Task.
        id: String,
    },
    /// `list(filter)`.
    List(Filter),
}

/// What an error carries beyond its kind that the test compares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Detail {
    /// Nothing more to compare.
    None,
    /// The contract leaves the details open: only the kind is compared.
    Any,
    /// `InvalidInput { field }`.
    Field(&'static str),
    /// `TaskExists` carrying a business key's chain tail.
    Existing {
        /// The key.
        key: String,
        /// The tail's model name.
        id: String,
        /// The tail's status.
        status: Status,
    },
}

/// An error as the test compares it: its kind and the details that are contractual.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// The error kind.
    pub kind: ErrorKind,
    /// The compared details.
    pub detail: Detail,
}

impl Fault {
    /// A fault of `kind` with nothing more to compare.
    pub fn of(kind: ErrorKind) -> Self {
        Fault { kind, detail: Detail::None }
    }

    pub(crate) fn not_found() -> Self {
        Fault::of(ErrorKind::NotFound)
    }

    pub(crate) fn lease_lost() -> Self {
        Fault::of(ErrorKind::LeaseLost)
    }

    pub(crate) fn invalid(field: &'static str) -> Self {
        Fault { kind: ErrorKind::InvalidInput, detail: Detail::Field(field) }
    }

    /// The same kind, details left open.
    pub fn loose(self) -> Self {
        Fault { kind: self.kind, detail: Detail::Any }
    }

    /// A backend error in comparable form; `name` maps a backend ID to its model name.
    pub fn from_error(e: &Error, name: impl Fn(&str) -> String) -> Self {
        let detail = match e {
            Error::TaskExists { existing: Some(x), .. } => Detail::Existing {
                key: x.business_key.clone(),
                id: name(&x.execution_id),
                status: x.status,
            },
            Error::InvalidInput { field, .. } => Detail::Field(field),
            _ => Detail::None,
        };
        Fault { kind: e.kind(), detail }
    }

    /// True when `got` is what this expected fault allows.
    pub fn accepts(&self, got: &Fault) -> bool {
        self.kind == got.kind && (self.detail == Detail::Any || self.detail == got.detail)
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.detail {
            Detail::None | Detail::Any => write!(f, "{}", self.kind),
            Detail::Field(field) => write!(f, "{}({field})", self.kind),
            Detail::Existing { key, id, status } => {
                write!(f, "{}(key {key}: tail {id} is {status})", self.kind)
            }
        }
    }
}

/// What a call returned, in model space.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// `Ok(())`.
    Done,
    /// One task snapshot.
    Task(Task),
    /// Several snapshots, in the returned order.
    Tasks(Vec<Task>),
    /// `try_dequeue`'s optional claim.
    MaybeTask(Option<Task>),
    /// A count (reap, prune).
    Count(u64),
    /// `ack_many`'s per-item results.
    Items(Vec<Result<(), Fault>>),
    /// A blocking dequeue that is still waiting.
    Blocks,
    /// An error.
    Failed(Fault),
}

impl Outcome {
    /// True when `got` is what this expected outcome allows (faults may leave details open).
    pub fn accepts(&self, got: &Outcome) -> bool {
        match (self, got) {
            (Outcome::Failed(want), Outcome::Failed(have)) => want.accepts(have),
            (Outcome::Items(want), Outcome::Items(have)) => {
                want.len() == have.len()
                    && want.iter().zip(have).all(|pair| match pair {
                        (Err(w), Err(h)) => w.accepts(h),
                        (w, h) => w == h,
                    })
            }
            (want, have) => want == have,
        }
    }

    pub(crate) fn from_unit(r: Result<(), Fault>) -> Self {
        r.map_or_else(Outcome::Failed, |()| Outcome::Done)
    }

    pub(crate) fn from_task(r: Result<Task, Fault>) -> Self {
        r.map_or_else(Outcome::Failed, Outcome::Task)
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Done => write!(f, "Ok(())"),
            Outcome::Task(t) => write!(f, "Ok({})", brief(t)),
            Outcome::MaybeTask(None) => write!(f, "Ok(None)"),
            Outcome::MaybeTask(Some(t)) => write!(f, "Ok(Some({}))", brief(t)),
            Outcome::Tasks(ts) => {
                let items: Vec<String> = ts.iter().map(brief).collect();
                write!(f, "Ok([{}])", items.join(", "))
            }
            Outcome::Count(n) => write!(f, "Ok({n})"),
            Outcome::Items(items) => {
                let items: Vec<String> = items
                    .iter()
                    .map(|r| r.as_ref().map_or_else(|e| format!("Err({e})"), |()| "Ok".into()))
                    .collect();
                write!(f, "Ok([{}])", items.join(", "))
            }
            Outcome::Blocks => write!(f, "still waiting"),
            Outcome::Failed(e) => write!(f, "Err({e})"),
        }
    }
}

/// A one-line summary of a snapshot: ID, status and the counters.
pub fn brief(t: &Task) -> String {
    let token =
        if t.lease_token.is_empty() { String::new() } else { format!(" {}", t.lease_token) };
    format!("{} {}{token} a{}/l{}/t{}", t.id, t.status, t.attempts, t.lease_lost, t.throttled)
}

impl Model {
    /// Performs `call` on the model and returns what the contract says the broker returns.
    pub fn perform(&mut self, call: &Call) -> Outcome {
        match call {
            Call::Enqueue(task) => Outcome::from_task(self.enqueue(task)),
            Call::EnqueueMany(tasks) => self.enqueue_many(tasks),
            Call::TryDequeueMany { queues, max } => self.try_dequeue_many(queues, *max),
            Call::TryDequeue { queues } => self.try_dequeue(queues),
            Call::Dequeue { queues } => self.dequeue(queues),
            Call::Ack { id, token, result } => Outcome::from_unit(self.ack(id, token, result)),
            Call::AckMany(items) => Outcome::Items(self.ack_many(items)),
            Call::Fail { id, token, failure } => Outcome::from_unit(self.fail(id, token, failure)),
            Call::Cancel { id } => Outcome::from_unit(self.cancel(id)),
            Call::FinishCanceled { id, token } => {
                Outcome::from_unit(self.finish_canceled(id, token))
            }
            Call::Requeue { id, token } => Outcome::from_unit(self.requeue(id, token)),
            Call::Heartbeat { id, token } => Outcome::from_unit(self.heartbeat(id, token)),
            Call::SaveStep { id, token, step } => {
                Outcome::from_unit(self.save_step(id, token, step))
            }
            Call::PauseQueue(q) => self.set_paused(q, true),
            Call::ResumeQueue(q) => self.set_paused(q, false),
            Call::Resume { id } => Outcome::from_task(self.resume(id)),
            Call::Replay(request) => Outcome::from_task(self.replay(request)),
            Call::Prune(request) => {
                self.prune(request).map_or_else(Outcome::Failed, Outcome::Count)
            }
            Call::Reap => self.reap().map_or_else(Outcome::Failed, Outcome::Count),
            Call::Advance(d) => {
                self.now = self.now.saturating_add(*d);
                Outcome::Done
            }
            Call::Lapse(d) => {
                self.now = self.now.saturating_add(*d);
                self.reap().map_or_else(Outcome::Failed, Outcome::Count)
            }
            Call::Get { id } => Outcome::from_task(self.entry(id).map(|e| e.task.clone())),
            Call::List(filter) => Outcome::Tasks(self.list(filter)),
        }
    }

    fn set_paused(&mut self, queue: &str, paused: bool) -> Outcome {
        if paused {
            self.paused.insert(queue.to_owned());
        } else {
            self.paused.remove(queue);
        }
        Outcome::Done
    }
}
