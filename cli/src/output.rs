//! What the verbs print: aligned tables and `key: value` blocks for people, one JSON document
//! for `--json`, and the task view both are made from.

use std::fmt::Write as _;

use base64::Engine as _;
use serde::Serialize;
use serde_json::Value as Json;
use taskgate::{LeaseState, Task, Timestamp};

/// How a verb prints its result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    /// Tables and sentences (the default).
    Human,
    /// One JSON document on stdout.
    Json,
}

/// Prints `human` or `json`, as `format` says.
pub(crate) fn emit(format: Format, human: &str, json: &Json) {
    match format {
        Format::Human => out(human.trim_end_matches('\n')),
        Format::Json => out(&serde_json::to_string_pretty(json).unwrap_or_default()),
    }
}

/// Writes `text` and a newline to stdout. A closed stdout (`taskgate list | head -1`) is not an
/// error worth a panic, as `println!` would make it: the text is dropped.
pub(crate) fn out(text: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stdout().lock(), "{text}");
}

/// Writes `text` and a newline to stderr, never panicking.
pub(crate) fn err(text: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

/// Opaque bytes (payload, result, cursor) as JSON: the JSON value itself when they parse as
/// JSON, else a base64 string with the flag `base64` set.
#[derive(Debug, Serialize)]
pub(crate) struct Bytes {
    /// The value: parsed JSON, or the base64 text.
    pub(crate) value: Json,
    /// True when `value` is base64 of bytes that are not JSON.
    pub(crate) base64: bool,
}

impl Bytes {
    /// `bytes` as a [`Bytes`], `None` when absent.
    pub(crate) fn of(bytes: Option<&[u8]>) -> Option<Bytes> {
        let bytes = bytes?;
        Some(match serde_json::from_slice::<Json>(bytes) {
            Ok(value) => Bytes { value, base64: false },
            Err(_) => Bytes {
                value: Json::String(base64::engine::general_purpose::STANDARD.encode(bytes)),
                base64: true,
            },
        })
    }

    /// For people: the text when the bytes are UTF-8, else their size and base64.
    pub(crate) fn human(bytes: Option<&[u8]>) -> String {
        match bytes {
            None => "-".to_owned(),
            Some(b) => match std::str::from_utf8(b) {
                Ok(text) if !text.chars().any(char::is_control) => text.to_owned(),
                _ => format!(
                    "{} bytes, base64 {}",
                    b.len(),
                    base64::engine::general_purpose::STANDARD.encode(b)
                ),
            },
        }
    }
}

/// A task as the CLI shows it (`--json`): every field of the task but its lease token, times
/// in RFC 3339 UTC.
#[derive(Debug, Serialize)]
pub(crate) struct TaskView {
    id: String,
    #[serde(rename = "type")]
    task_type: String,
    queue: String,
    status: String,
    cancel_requested: bool,
    business_key: String,
    replay_of: String,
    owner: String,
    payload: Option<Bytes>,
    result: Option<Bytes>,
    last_error: String,
    attempts: u32,
    max_retry: u32,
    lease_lost: u32,
    throttled: u32,
    resumes: u32,
    run_at: String,
    created_at: String,
    started_at: Option<String>,
    finished_at: Option<String>,
    depends_on: Vec<String>,
    on_parent_failure: String,
    steps: u32,
    progress: Option<u8>,
    message: String,
    cursor: Option<Bytes>,
    lease_expires_at: Option<String>,
    last_heartbeat_at: Option<String>,
}

impl TaskView {
    /// The view of `task`.
    pub(crate) fn of(task: &Task) -> TaskView {
        TaskView {
            id: task.id.clone(),
            task_type: task.task_type.clone(),
            queue: task.queue.clone(),
            status: task.status.to_string(),
            cancel_requested: task.cancel_requested,
            business_key: task.business_key.clone(),
            replay_of: task.replay_of.clone(),
            owner: task.owner.clone(),
            payload: Bytes::of(task.payload.as_deref()),
            result: Bytes::of(task.result.as_deref()),
            last_error: task.last_error.clone(),
            attempts: task.attempts,
            max_retry: task.max_retry,
            lease_lost: task.lease_lost,
            throttled: task.throttled,
            resumes: task.resumes,
            run_at: task.run_at.to_string(),
            created_at: task.created_at.to_string(),
            started_at: task.started_at.map(|t| t.to_string()),
            finished_at: task.finished_at.map(|t| t.to_string()),
            depends_on: task.depends_on.clone(),
            on_parent_failure: task.on_parent_failure.as_str().to_owned(),
            steps: task.steps,
            progress: task.progress,
            message: task.message.clone(),
            cursor: Bytes::of(task.cursor.as_deref()),
            lease_expires_at: task.lease_expires_at.map(|t| t.to_string()),
            last_heartbeat_at: task.last_heartbeat_at.map(|t| t.to_string()),
        }
    }

    /// The view as a JSON value.
    pub(crate) fn json(task: &Task) -> Json {
        serde_json::to_value(TaskView::of(task)).unwrap_or(Json::Null)
    }
}

/// The status as people read it: `running (cancel requested)` while a cancel waits for the
/// worker, `running (lease expired 12 s ago)` when the worker stopped heart-beating (by the
/// broker's clock `now`).
pub(crate) fn status_label(task: &Task, now: Timestamp) -> String {
    let mut notes = Vec::new();
    if task.cancel_requested {
        notes.push("cancel requested".to_owned());
    }
    if let LeaseState::Expired { ago } = task.lease_at(now) {
        notes.push(format!("lease expired {} s ago", ago.as_secs()));
    }
    match notes.is_empty() {
        true => task.status.to_string(),
        false => format!("{} ({})", task.status, notes.join(", ")),
    }
}

/// The lease line of `get`: the deadline and how it stands at `now`; empty when not running.
fn lease_line(task: &Task, now: Timestamp) -> String {
    match task.lease_expires_at {
        Some(at) if task.status == taskgate::Status::Running => {
            format!("{at}, {}", task.lease_at(now))
        }
        _ => String::new(),
    }
}

/// How long ago a running task's worker last sent a heartbeat, at `now`: `3 s ago`, `none`
/// (not since the claim); `-` when the task is not running.
pub(crate) fn heartbeat_age(task: &Task, now: Timestamp) -> String {
    if task.status != taskgate::Status::Running {
        return "-".to_owned();
    }
    match task.last_heartbeat_at {
        Some(at) => format!("{} s ago", now.duration_since(at).as_secs()),
        None => "none".to_owned(),
    }
}

/// The last-heartbeat line of `get`: its time and age at `now`, or `none since the claim`;
/// empty when not running.
fn heartbeat_line(task: &Task, now: Timestamp) -> String {
    match task.last_heartbeat_at {
        _ if task.status != taskgate::Status::Running => String::new(),
        Some(at) => format!("{at}, {}", heartbeat_age(task, now)),
        None => "none since the claim".to_owned(),
    }
}

/// One task as `key: value` lines, empty fields left out; the lease read at `now`.
pub(crate) fn task_block(task: &Task, now: Timestamp) -> String {
    let time = |t: Option<Timestamp>| t.map_or_else(|| "-".to_owned(), |t| t.to_string());
    let mut rows: Vec<(&str, String)> = vec![
        ("id", task.id.clone()),
        ("type", task.task_type.clone()),
        ("queue", task.queue.clone()),
        ("status", status_label(task, now)),
        ("lease", lease_line(task, now)),
        ("last heartbeat", heartbeat_line(task, now)),
        ("business key", task.business_key.clone()),
        ("replay of", task.replay_of.clone()),
        ("owner", task.owner.clone()),
        ("payload", Bytes::human(task.payload.as_deref())),
        ("result", Bytes::human(task.result.as_deref())),
        ("last error", task.last_error.clone()),
        ("attempts", format!("{} of {} retries", task.attempts, task.max_retry)),
        ("lease lost", task.lease_lost.to_string()),
        ("throttled", task.throttled.to_string()),
        ("resumes", task.resumes.to_string()),
        ("run at", task.run_at.to_string()),
        ("created", task.created_at.to_string()),
        ("started", time(task.started_at)),
        ("finished", time(task.finished_at)),
        ("depends on", task.depends_on.join(", ")),
        ("on parent failure", task.on_parent_failure.as_str().to_owned()),
    ];
    if task.steps > 0 {
        let progress = task.progress.map_or_else(String::new, |p| format!(", {p}%"));
        rows.push(("steps", format!("{}{progress}", task.steps)));
        rows.push(("step message", task.message.clone()));
        rows.push(("cursor", Bytes::human(task.cursor.as_deref())));
    }
    rows.retain(|(_, v)| !v.is_empty());
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (key, value) in rows {
        let _ =
            writeln!(out, "{:<width$}  {}", format!("{key}:"), one_line(&value), width = width + 1);
    }
    out
}

/// A table: a header row and aligned columns, two spaces apart, trailing spaces trimmed.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (cell, w) in row.iter().zip(&widths) {
            let _ = write!(line, "{cell:<w$}  ");
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}

/// `text` on one line (whitespace runs folded), at most `max` characters (`…` marks a cut).
pub(crate) fn clip(text: &str, max: usize) -> String {
    let line = one_line(text);
    match line.char_indices().nth(max.saturating_sub(1)) {
        Some((cut, _)) if line.chars().count() > max => format!("{}…", &line[..cut]),
        _ => line,
    }
}

/// `text` with every whitespace run folded to one space.
pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_json_when_they_parse_else_base64() {
        let json = Bytes::of(Some(br#"{"to":"a@b"}"#)).map(|b| (b.value.to_string(), b.base64));
        assert_eq!(json, Some((r#"{"to":"a@b"}"#.to_owned(), false)));
        let raw = Bytes::of(Some(&[0xff, 0x00])).map(|b| (b.value, b.base64));
        assert_eq!(raw, Some((Json::String("/wA=".into()), true)));
        assert!(Bytes::of(None).is_none());
        assert_eq!(Bytes::human(Some(&[0xff, 0x00])), "2 bytes, base64 /wA=");
    }

    #[test]
    fn clip_cuts_long_text_and_folds_lines() {
        assert_eq!(clip("a\n b", 10), "a b");
        assert_eq!(clip("abcdefghij", 5), "abcd…");
        assert_eq!(clip("abcde", 5), "abcde");
    }
}
