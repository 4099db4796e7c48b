//! The task row: the column list every statement selects, its decoding into a [`Task`] with
//! checked conversions, and the argument list an INSERT binds.

use taskgate::{OnParentFailure, Status, Task, Timestamp};

use crate::value::{Cols, DecodeError, TakeCols};
use crate::{Kind, Value};

/// Every column of `<prefix>tasks`, in the order statements select and insert them
/// (contract §11.1 order, then the 0002 extension columns, then 0004's `priority`, then 0007's
/// `heartbeat_at`).
pub const TASK_COLUMNS: &str = "id, type, queue, payload, status, result, last_error, attempts, \
max_retry, lease_lost, throttled, run_at, depends_on, on_parent_fail, pending_parents, \
lease_token, lease_until, cancel_requested, created_at, started_at, finished_at, business_key, \
replay_of, step_cursor, progress, message, steps, resumes, owner, priority, heartbeat_at";

/// The kinds of [`TASK_COLUMNS`], in order.
pub const TASK_KINDS: [Kind; 31] = [
    Kind::Text,  // id
    Kind::Text,  // type
    Kind::Text,  // queue
    Kind::Bytes, // payload
    Kind::Text,  // status
    Kind::Bytes, // result
    Kind::Text,  // last_error
    Kind::Int,   // attempts
    Kind::Int,   // max_retry
    Kind::Int,   // lease_lost
    Kind::Int,   // throttled
    Kind::Int,   // run_at
    Kind::Text,  // depends_on
    Kind::Text,  // on_parent_fail
    Kind::Int,   // pending_parents
    Kind::Text,  // lease_token
    Kind::Int,   // lease_until
    Kind::Int,   // cancel_requested
    Kind::Int,   // created_at
    Kind::Int,   // started_at
    Kind::Int,   // finished_at
    Kind::Text,  // business_key
    Kind::Text,  // replay_of
    Kind::Bytes, // step_cursor (Task::cursor)
    Kind::Int,   // progress
    Kind::Text,  // message
    Kind::Int,   // steps
    Kind::Int,   // resumes
    Kind::Text,  // owner
    Kind::Int,   // priority
    Kind::Int,   // heartbeat_at (Task::last_heartbeat_at)
];

/// Number of task columns.
pub const TASK_COLUMN_COUNT: usize = TASK_KINDS.len();

/// A decoded task row: the public [`Task`] plus the internal columns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskRow {
    /// The task as callers see it.
    pub task: Task,
    /// Distinct parents not yet satisfied.
    pub pending_parents: u32,
    /// The lease deadline in unix ms (0 = none).
    pub lease_until: i64,
}

fn count(field: &str, v: i64) -> Result<u32, DecodeError> {
    u32::try_from(v).map_err(|_| DecodeError(format!("{field} out of range: {v}")))
}

fn priority(v: i64) -> Result<i16, DecodeError> {
    i16::try_from(v).map_err(|_| DecodeError(format!("priority out of range: {v}")))
}

fn opt_time(ms: i64) -> Option<Timestamp> {
    (ms != 0).then_some(Timestamp::from_millis(ms))
}

/// Parses the stored `depends_on` JSON text; `''`, `'[]'` and `'null'` are all empty.
pub fn parse_depends_on(text: &str) -> Result<Vec<String>, DecodeError> {
    match text.trim() {
        "" | "null" | "[]" => Ok(Vec::new()),
        json => serde_json::from_str(json)
            .map_err(|e| DecodeError(format!("depends_on is not a JSON string array: {e}"))),
    }
}

/// The stored text of a `depends_on` list (verbatim: order and duplicates kept).
pub fn depends_on_text(parents: &[String]) -> String {
    serde_json::to_string(parents).unwrap_or_else(|_| "[]".to_owned())
}

impl TaskRow {
    /// Decodes a row selected with [`TASK_COLUMNS`] (extra columns after them are ignored).
    pub fn decode(row: &[Value]) -> Result<TaskRow, DecodeError> {
        let c = Cols(row);
        let status: Status = c.text(4)?.parse().map_err(|e| DecodeError(format!("{e}")))?;
        let policy: OnParentFailure =
            c.text(13)?.parse().map_err(|e| DecodeError(format!("{e}")))?;
        let progress = match c.opt_int(24)? {
            None => None,
            Some(p) => Some(
                u8::try_from(p).map_err(|_| DecodeError(format!("progress out of range: {p}")))?,
            ),
        };
        let task = Task {
            id: c.text(0)?,
            task_type: c.text(1)?,
            queue: c.text(2)?,
            payload: c.bytes(3)?,
            status,
            result: c.bytes(5)?,
            last_error: c.text(6)?,
            attempts: count("attempts", c.int(7)?)?,
            max_retry: count("max_retry", c.int(8)?)?,
            lease_lost: count("lease_lost", c.int(9)?)?,
            throttled: count("throttled", c.int(10)?)?,
            run_at: Timestamp::from_millis(c.int(11)?),
            depends_on: parse_depends_on(&c.text(12)?)?,
            on_parent_failure: policy,
            lease_token: c.text(15)?,
            created_at: Timestamp::from_millis(c.int(18)?),
            started_at: opt_time(c.int(19)?),
            finished_at: opt_time(c.int(20)?),
            cancel_requested: c.int(17)? != 0,
            business_key: c.text(21)?,
            replay_of: c.text(22)?,
            cursor: c.bytes(23)?,
            progress,
            message: c.text(25)?,
            steps: count("steps", c.int(26)?)?,
            resumes: count("resumes", c.int(27)?)?,
            owner: c.text(28)?,
            priority: priority(c.int(29)?)?,
            lease_expires_at: None,
            last_heartbeat_at: opt_time(c.int(30)?),
        };
        Ok(TaskRow {
            task,
            pending_parents: count("pending_parents", c.int(14)?)?,
            lease_until: c.int(16)?,
        }
        .with_lease_shown())
    }

    /// Decodes a row like [`TaskRow::decode`], moving its text and byte values (the payload
    /// above all) into the task instead of copying them.
    pub fn decode_owned(mut row: Vec<Value>) -> Result<TaskRow, DecodeError> {
        let c = Cols(&row);
        let progress = match c.opt_int(24)? {
            None => None,
            Some(p) => Some(
                u8::try_from(p).map_err(|_| DecodeError(format!("progress out of range: {p}")))?,
            ),
        };
        let attempts = count("attempts", c.int(7)?)?;
        let max_retry = count("max_retry", c.int(8)?)?;
        let lease_lost = count("lease_lost", c.int(9)?)?;
        let throttled = count("throttled", c.int(10)?)?;
        let run_at = Timestamp::from_millis(c.int(11)?);
        let pending_parents = count("pending_parents", c.int(14)?)?;
        let lease_until = c.int(16)?;
        let cancel_requested = c.int(17)? != 0;
        let created_at = Timestamp::from_millis(c.int(18)?);
        let started_at = opt_time(c.int(19)?);
        let finished_at = opt_time(c.int(20)?);
        let steps = count("steps", c.int(26)?)?;
        let resumes = count("resumes", c.int(27)?)?;
        let priority = priority(c.int(29)?)?;
        let last_heartbeat_at = opt_time(c.int(30)?);
        let mut t = TakeCols(&mut row);
        let status: Status = t.text(4)?.parse().map_err(|e| DecodeError(format!("{e}")))?;
        let policy: OnParentFailure =
            t.text(13)?.parse().map_err(|e| DecodeError(format!("{e}")))?;
        let task = Task {
            id: t.text(0)?,
            task_type: t.text(1)?,
            queue: t.text(2)?,
            payload: t.bytes(3)?,
            status,
            result: t.bytes(5)?,
            last_error: t.text(6)?,
            attempts,
            max_retry,
            lease_lost,
            throttled,
            run_at,
            depends_on: parse_depends_on(&t.text(12)?)?,
            on_parent_failure: policy,
            lease_token: t.text(15)?,
            created_at,
            started_at,
            finished_at,
            cancel_requested,
            business_key: t.text(21)?,
            replay_of: t.text(22)?,
            cursor: t.bytes(23)?,
            progress,
            message: t.text(25)?,
            steps,
            resumes,
            owner: t.text(28)?,
            priority,
            lease_expires_at: None,
            last_heartbeat_at,
        };
        Ok(TaskRow { task, pending_parents, lease_until }.with_lease_shown())
    }

    /// Fills the snapshot's `lease_expires_at` from `lease_until` while the task is running
    /// (`None` otherwise, and in the stored form), and keeps `last_heartbeat_at` (the stored
    /// `heartbeat_at`) only while running: a stale value of an earlier lease never shows.
    pub fn with_lease_shown(mut self) -> TaskRow {
        let running = self.task.status == Status::Running && self.lease_until != 0;
        self.task.lease_expires_at = running.then(|| Timestamp::from_millis(self.lease_until));
        if !running {
            self.task.last_heartbeat_at = None;
        }
        self
    }

    /// The INSERT arguments, in [`TASK_COLUMNS`] order.
    pub fn insert_args(&self) -> Vec<Value> {
        let t = &self.task;
        let ms = |ts: Option<Timestamp>| Value::Int(ts.map_or(0, Timestamp::as_millis));
        vec![
            Value::from(&t.id),
            Value::from(&t.task_type),
            Value::from(&t.queue),
            Value::opt_bytes(t.payload.as_deref()),
            Value::from(t.status.as_str()),
            Value::opt_bytes(t.result.as_deref()),
            Value::from(&t.last_error),
            Value::from(t.attempts),
            Value::from(t.max_retry),
            Value::from(t.lease_lost),
            Value::from(t.throttled),
            Value::from(t.run_at),
            Value::Text(depends_on_text(&t.depends_on)),
            Value::from(t.on_parent_failure.as_str()),
            Value::from(self.pending_parents),
            Value::from(&t.lease_token),
            Value::Int(self.lease_until),
            Value::flag(t.cancel_requested),
            Value::from(t.created_at),
            ms(t.started_at),
            ms(t.finished_at),
            Value::from(&t.business_key),
            Value::from(&t.replay_of),
            Value::opt_bytes(t.cursor.as_deref()),
            Value::opt_int(t.progress.map(i64::from)),
            Value::from(&t.message),
            Value::from(t.steps),
            Value::from(t.resumes),
            Value::from(&t.owner),
            Value::Int(i64::from(t.priority)),
            ms(t.last_heartbeat_at),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> TaskRow {
        let mut task = Task::new("llm", "q")
            .with_id("t1")
            .with_payload(b"{\"a\":1}".to_vec())
            .with_depends_on(["p", "p", "o"]);
        task.status = Status::Blocked;
        task.created_at = Timestamp::from_millis(1_767_225_600_000);
        task.started_at = Some(Timestamp::from_millis(5));
        task.progress = Some(40);
        task.priority = -7;
        TaskRow { task, pending_parents: 2, lease_until: 0 }
    }

    #[test]
    fn insert_args_decode_back() {
        let row = sample();
        let args = row.insert_args();
        assert_eq!(args.len(), TASK_COLUMN_COUNT);
        let decoded = TaskRow::decode(&args).ok();
        assert_eq!(decoded, Some(row));
    }

    #[test]
    fn owned_decoding_matches_borrowed() {
        let row = sample();
        let args = row.insert_args();
        assert_eq!(TaskRow::decode_owned(args.clone()).ok(), TaskRow::decode(&args).ok());
        assert_eq!(TaskRow::decode_owned(args).ok(), Some(row));
        let mut short = sample().insert_args();
        short.truncate(20);
        assert!(TaskRow::decode_owned(short).is_err());
    }

    #[test]
    fn empty_depends_on_forms() {
        for text in ["", "[]", " [] ", "null", " null "] {
            assert_eq!(parse_depends_on(text).ok(), Some(Vec::new()), "{text:?}");
        }
        assert_eq!(parse_depends_on("[\"a\",\"a\"]").ok(), Some(vec!["a".into(), "a".into()]));
        assert!(parse_depends_on("{").is_err());
    }

    #[test]
    fn out_of_range_counters_are_errors() {
        let mut args = sample().insert_args();
        args[7] = Value::Int(-1);
        assert!(TaskRow::decode(&args).is_err());
        let mut args = sample().insert_args();
        args[24] = Value::Int(300);
        assert!(TaskRow::decode(&args).is_err());
        let mut args = sample().insert_args();
        args[4] = Value::from("done");
        assert!(TaskRow::decode(&args).is_err());
        let mut args = sample().insert_args();
        args[29] = Value::Int(40_000);
        assert!(TaskRow::decode(&args).is_err());
    }

    #[test]
    fn zero_times_read_as_unset() {
        let mut args = sample().insert_args();
        args[19] = Value::Int(0);
        let decoded = TaskRow::decode(&args).ok().map(|r| r.task.started_at);
        assert_eq!(decoded, Some(None));
    }
}
