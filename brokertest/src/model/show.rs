//! How a step prints in a shrunk failure: one readable line per operation, defaults left out
//! (`Debug` prints the same, so proptest's own output reads the same way).

use std::fmt;

use taskgate::{FailKind, OnParentFailure};

use super::op::{ListSpec, Op, ReplayTarget, StepSpec, TaskSpec, TokenRef};

impl fmt::Display for TokenRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TokenRef::Current => "current token",
            TokenRef::Previous => "previous token",
            TokenRef::Empty => "empty token",
            TokenRef::Bogus => "bogus token",
        })
    }
}

fn secs(offset: i64) -> String {
    if offset >= 0 {
        format!("now+{offset}s")
    } else {
        format!("now{offset}s")
    }
}

impl fmt::Display for TaskSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {{{} in {}",
            self.id.unwrap_or("<generated id>"),
            self.task_type,
            self.queue
        )?;
        if let Some(key) = self.key {
            write!(f, ", key {key}")?;
        }
        if !self.parents.is_empty() {
            write!(f, ", after [{}]", self.parents.join(", "))?;
            if self.policy == OnParentFailure::IgnoreParentFailure {
                write!(f, " ignoring failures")?;
            }
        }
        if self.delay_secs != 0 {
            write!(f, ", run_at {}", secs(self.delay_secs))?;
        }
        if self.max_retry != 0 {
            write!(f, ", max_retry {}", self.max_retry)?;
        }
        if let Some(n) = self.payload {
            write!(f, ", payload n={n}")?;
        }
        if self.priority != 0 {
            write!(f, ", priority {}", self.priority)?;
        }
        write!(f, "}}")
    }
}

impl fmt::Display for StepSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cursor = self.cursor.map_or("none".to_owned(), |n| format!("c{n}"));
        let progress = self.progress.map_or("none".to_owned(), |p| p.to_string());
        write!(f, "cursor {cursor}, progress {progress}, delay {}s", self.delay_secs)
    }
}

impl fmt::Display for ListSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(t) = self.task_type {
            parts.push(format!("type {t}"));
        }
        if let Some(q) = self.queue {
            parts.push(format!("queue {q}"));
        }
        if let Some(s) = self.status {
            parts.push(format!("status {s}"));
        }
        if let Some(k) = self.key {
            parts.push(format!("key {k}"));
        }
        if self.limit != 0 {
            parts.push(format!("limit {}", self.limit));
        }
        if self.offset != 0 {
            parts.push(format!("offset {}", self.offset));
        }
        write!(f, "{{{}}}", parts.join(", "))
    }
}

fn kind(k: FailKind) -> &'static str {
    match k {
        FailKind::Business => "business",
        FailKind::Throttled => "throttled",
        FailKind::Skip => "skip",
    }
}

fn replay_target(t: &ReplayTarget) -> String {
    match t {
        ReplayTarget::Id(id) => id.clone(),
        ReplayTarget::Key(k) => format!("key {k}"),
        ReplayTarget::Both(id, k) => format!("{id} and key {k} (invalid)"),
        ReplayTarget::Neither => "nothing (invalid)".to_owned(),
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Enqueue(spec) => write!(f, "enqueue {spec}"),
            Op::EnqueueMany(specs) => {
                let items: Vec<String> = specs.iter().map(ToString::to_string).collect();
                write!(f, "enqueue_many [{}]", items.join("; "))
            }
            Op::Claim { queues, max } => write!(f, "try_dequeue_many {queues:?} max {max}"),
            Op::ClaimOne { queues } => write!(f, "try_dequeue {queues:?}"),
            Op::Dequeue { queues } => write!(f, "dequeue {queues:?} (blocking)"),
            Op::Ack { id, token, result } => {
                write!(f, "ack {id} with {token}")?;
                result.map_or(Ok(()), |n| write!(f, ", result r={n}"))
            }
            Op::AckMany(items) => {
                let items: Vec<String> = items.iter().map(|(id, t)| format!("{id} {t}")).collect();
                write!(f, "ack_many [{}]", items.join(", "))
            }
            Op::Fail { id, token, kind: k, retry_secs } => {
                let retry = retry_secs.map_or("zero".to_owned(), secs);
                write!(f, "fail {id} with {token}: {}, retry_at {retry}", kind(*k))
            }
            Op::Cancel { id } => write!(f, "cancel {id}"),
            Op::FinishCanceled { id, token } => write!(f, "finish_canceled {id} with {token}"),
            Op::Requeue { id, token } => write!(f, "requeue {id} with {token}"),
            Op::Heartbeat { id, token } => write!(f, "heartbeat {id} with {token}"),
            Op::SaveStep { id, token, step } => write!(f, "save_step {id} with {token}: {step}"),
            Op::Pause(q) => write!(f, "pause_queue {q}"),
            Op::Unpause(q) => write!(f, "resume_queue {q}"),
            Op::Resume { id } => write!(f, "resume {id}"),
            Op::Replay { target, allow_completed, payload, priority } => {
                write!(f, "replay {}", replay_target(target))?;
                if *allow_completed {
                    write!(f, ", allow_completed")?;
                }
                if let Some(p) = priority {
                    write!(f, ", priority {p}")?;
                }
                payload.map_or(Ok(()), |n| write!(f, ", payload p={n}"))
            }
            Op::Prune { before_ms, statuses, limit, include_keyed } => {
                let names: Vec<&str> = statuses.iter().map(|s| s.as_str()).collect();
                write!(
                    f,
                    "prune finished before now{before_ms:+}ms, statuses {names:?}, limit {limit}"
                )?;
                if *include_keyed {
                    write!(f, ", include_keyed")?;
                }
                Ok(())
            }
            Op::Reap => write!(f, "reap_expired"),
            Op::Advance(d) => write!(f, "advance {d:?}"),
            Op::Lapse(d) => write!(f, "advance {d:?}, then reap_expired"),
            Op::Get { id } => write!(f, "get {id}"),
            Op::List(spec) => write!(f, "list {spec}"),
        }
    }
}

impl fmt::Debug for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Debug for TaskSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Debug for StepSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Debug for ReplayTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&replay_target(self))
    }
}

impl fmt::Debug for ListSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
