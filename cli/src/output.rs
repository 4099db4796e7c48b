//! What the verbs print: aligned tables and `key: value` blocks for people, one JSON document
//! for `--json` (a task is the admin API's [`TaskView`](taskgate_admin::TaskView)).

use std::fmt::Write as _;

use base64::Engine as _;
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

/// `value` (a view) as a JSON value.
pub(crate) fn to_json(value: &impl serde::Serialize) -> Json {
    serde_json::to_value(value).unwrap_or(Json::Null)
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

/// Opaque bytes (payload, result, cursor) for people: the text when the bytes are UTF-8
/// without control characters, else their size and base64; `-` when absent. (`--json` prints
/// the admin API's [`TaskView`](taskgate_admin::TaskView), which renders them as JSON or
/// base64.)
pub(crate) fn human_bytes(bytes: Option<&[u8]>) -> String {
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
        ("payload", human_bytes(task.payload.as_deref())),
        ("result", human_bytes(task.result.as_deref())),
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
        rows.push(("cursor", human_bytes(task.cursor.as_deref())));
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
    fn bytes_are_text_when_they_read_as_text_else_base64() {
        assert_eq!(human_bytes(Some(br#"{"to":"a@b"}"#)), r#"{"to":"a@b"}"#);
        assert_eq!(human_bytes(Some(&[0xff, 0x00])), "2 bytes, base64 /wA=");
        assert_eq!(human_bytes(None), "-");
    }

    #[test]
    fn clip_cuts_long_text_and_folds_lines() {
        assert_eq!(clip("a\n b", 10), "a b");
        assert_eq!(clip("abcdefghij", 5), "abcd…");
        assert_eq!(clip("abcde", 5), "abcde");
    }
}
