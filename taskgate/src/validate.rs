//! The contract's front door: input limits (extensions §E7) and every argument check the
//! decisions document fixes as contract (claim arguments and their order, replay requests,
//! prune statuses, ack items), written once and called by every backend before any write, so
//! a program gets the same error whichever backend it runs on.

use std::time::Duration;

use crate::task::{MAX_PRIORITY, MIN_PRIORITY};
use crate::{AckItem, Error, Failure, QueueList, ReplayRequest, Result, Status, Step, Task};

/// Longest id, type, queue, business key or owner, in Unicode scalar values.
pub const MAX_NAME_CHARS: usize = 255;
/// Most parents one task may list.
pub const MAX_PARENTS: usize = 1_000;
/// Longest step message, in Unicode scalar values.
pub const MAX_MESSAGE_CHARS: usize = 1_000;
/// Longest delay a saved step may ask for.
pub const MAX_STEP_DELAY: Duration = Duration::from_secs(60);
/// Default largest payload, result or cursor (16 MiB).
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 16 * 1024 * 1024;

/// Size limits that depend on configuration and on the storage, as a broker enforces them
/// after `init` ([`Broker::limits`](crate::Broker::limits)).
///
/// Build one with [`Limits::new`]; a backend whose storage holds less lowers it with
/// [`Limits::capped`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Largest payload, result or cursor in bytes: [`BrokerOptions::max_payload_bytes`]
    /// (16 MiB by default), or less when the storage cannot hold that much (then
    /// [`Limits::bound`] says why).
    ///
    /// [`BrokerOptions::max_payload_bytes`]: crate::BrokerOptions::max_payload_bytes
    pub max_payload_bytes: usize,
    /// The storage setting that lowered `max_payload_bytes` below the configured size, if one
    /// did (MySQL/MariaDB: `max_allowed_packet`).
    pub bound: Option<StorageBound>,
}

/// A storage setting that caps how large a payload, result or cursor can be (a database
/// server's statement-size limit), named in the `InvalidInput` an oversized value gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StorageBound {
    /// The setting's name (`max_allowed_packet`).
    pub setting: &'static str,
    /// Its value as the server reported it (bytes).
    pub value: u64,
}

impl Limits {
    /// Payloads, results and cursors of at most `max_payload_bytes` bytes, bound by nothing
    /// but configuration.
    pub const fn new(max_payload_bytes: usize) -> Limits {
        Limits { max_payload_bytes, bound: None }
    }

    /// These limits lowered to `max_payload_bytes` because of `bound`, when that is smaller
    /// than the current limit; otherwise unchanged.
    pub fn capped(self, max_payload_bytes: usize, bound: StorageBound) -> Limits {
        if max_payload_bytes < self.max_payload_bytes {
            Limits { max_payload_bytes, bound: Some(bound) }
        } else {
            self
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::new(DEFAULT_MAX_PAYLOAD_BYTES)
    }
}

/// Checks a name-like value: `min_len`–255 characters, no control characters.
pub fn validate_name(field: &'static str, value: &str, allow_empty: bool) -> Result<()> {
    // Fast path (every ack item's ID comes through here): a short ASCII value without control
    // bytes passes, and for ASCII the byte length is the character count.
    if value.len() <= MAX_NAME_CHARS
        && (allow_empty || !value.is_empty())
        // Every byte printable ASCII (0x20..=0x7e); `fold` without a short cut vectorises.
        && value.bytes().fold(true, |ok, b| ok & (b.wrapping_sub(0x20) < 0x5f))
    {
        return Ok(());
    }
    let chars = value.chars().count();
    if chars == 0 && !allow_empty {
        return Err(Error::invalid(field, "must not be empty"));
    }
    if chars > MAX_NAME_CHARS {
        return Err(Error::invalid(
            field,
            format!("too long: {chars} characters exceeds max {MAX_NAME_CHARS}"),
        ));
    }
    if let Some(pos) = value.chars().position(char::is_control) {
        return Err(Error::invalid(field, format!("control character at position {pos}")));
    }
    Ok(())
}

/// Checks a task ID presented to a lookup (get, cancel, token operations, replay, resume).
pub fn validate_id(id: &str) -> Result<()> {
    validate_name("id", id, false)
}

/// Checks a queue name.
pub fn validate_queue(queue: &str) -> Result<()> {
    validate_name("queue", queue, false)
}

/// Checks a claim's queue list: at least one queue, each a valid name.
pub fn validate_queues(queues: &dyn QueueList) -> Result<()> {
    if queues.is_empty() {
        return Err(Error::invalid("queues", "at least one queue is required"));
    }
    queues.iter().try_for_each(validate_queue)
}

/// Checks a claim's arguments in the contract's order: the queue list first (at least one
/// queue, each a valid name: `InvalidInput { field: "queues" }` or `"queue"`), then `max`
/// (at least 1: `InvalidInput { field: "max" }`).
pub fn validate_claim(queues: &dyn QueueList, max: usize) -> Result<()> {
    validate_queues(queues)?;
    if max == 0 {
        return Err(Error::invalid("max", "must be at least 1"));
    }
    Ok(())
}

/// Checks a replay request's shape: exactly one of `execution_id` and `business_key`
/// (`InvalidInput { field: "request" }`), that one well-formed, and the new payload within
/// `limits` — and a priority override, when given, within
/// [`MIN_PRIORITY`]..=[`MAX_PRIORITY`].
pub fn validate_replay_request(request: &ReplayRequest, limits: &Limits) -> Result<()> {
    match (request.execution_id.is_empty(), request.business_key.is_empty()) {
        (true, true) => Err(Error::invalid("request", "set execution_id or business_key")),
        (false, false) => {
            Err(Error::invalid("request", "set only one of execution_id and business_key"))
        }
        (false, true) => validate_id(&request.execution_id),
        (true, false) => validate_name("business_key", &request.business_key, false),
    }?;
    if let Some(priority) = request.priority {
        validate_priority(priority)?;
    }
    validate_bytes("payload", request.payload.as_deref(), limits)
}

/// The statuses a prune deletes: empty means all three terminal ones; a non-terminal status is
/// `InvalidInput { field: "statuses" }`.
pub fn prune_statuses(statuses: &[Status]) -> Result<Vec<Status>> {
    if let Some(bad) = statuses.iter().find(|s| !s.is_terminal()) {
        return Err(Error::invalid("statuses", format!("{bad} is not a terminal status")));
    }
    if statuses.is_empty() {
        return Ok(vec![Status::Completed, Status::Failed, Status::Canceled]);
    }
    Ok(statuses.to_vec())
}

/// Checks one item of an `ack_many` batch: a valid ID and a result within `limits`. A failing
/// item fails only itself.
pub fn validate_ack_item(item: &AckItem, limits: &Limits) -> Result<()> {
    validate_id(&item.id)?;
    validate_bytes("result", item.result.as_deref(), limits)
}

/// Checks opaque bytes (payload, result, cursor) against the size limit. The reason names the
/// limit and, when the storage lowered it, the setting that did.
pub fn validate_bytes(field: &'static str, bytes: Option<&[u8]>, limits: &Limits) -> Result<()> {
    match bytes {
        Some(b) if b.len() > limits.max_payload_bytes => {
            let mut reason =
                format!("too large: {} bytes exceeds max {}", b.len(), limits.max_payload_bytes);
            if let Some(bound) = limits.bound {
                reason.push_str(&format!(
                    " (the storage's {} is {} bytes)",
                    bound.setting, bound.value
                ));
            }
            Err(Error::invalid(field, reason))
        }
        _ => Ok(()),
    }
}

/// Checks a task handed to enqueue; nothing is written when this fails.
pub fn validate_task(task: &Task, limits: &Limits) -> Result<()> {
    if !task.id.is_empty() {
        validate_name("id", &task.id, false)?;
    }
    validate_name("type", &task.task_type, false)?;
    validate_name("queue", &task.queue, false)?;
    validate_name("business_key", &task.business_key, true)?;
    validate_name("owner", &task.owner, true)?;
    validate_priority(task.priority)?;
    if !task.replay_of.is_empty() {
        return Err(Error::invalid("replay_of", "only replay sets replay_of"));
    }
    validate_bytes("payload", task.payload.as_deref(), limits)?;
    validate_bytes("result", task.result.as_deref(), limits)?;
    validate_bytes("cursor", task.cursor.as_deref(), limits)?;
    if task.depends_on.len() > MAX_PARENTS {
        return Err(Error::invalid(
            "depends_on",
            format!("too many parents: {} exceeds max {MAX_PARENTS}", task.depends_on.len()),
        ));
    }
    task.depends_on.iter().try_for_each(|p| validate_name("depends_on", p, false))?;
    validate_progress(task.progress)?;
    validate_message(&task.message)
}

/// Checks every task of a batch; the first failure is returned. With more than one task, an
/// `InvalidInput` reason names the failing item's index; a batch of one (what `enqueue` sends)
/// gets exactly [`validate_task`]'s error.
pub fn validate_tasks(tasks: &[Task], limits: &Limits) -> Result<()> {
    if let [task] = tasks {
        return validate_task(task, limits);
    }
    for (i, task) in tasks.iter().enumerate() {
        validate_task(task, limits).map_err(|e| match e {
            Error::InvalidInput { field, reason } => {
                Error::InvalidInput { field, reason: format!("task {i}: {reason}") }
            }
            other => other,
        })?;
    }
    Ok(())
}

/// Checks a task's priority: [`MIN_PRIORITY`]..=[`MAX_PRIORITY`] (−100 to 100), else
/// `InvalidInput { field: "priority" }` naming the bounds.
pub fn validate_priority(priority: i16) -> Result<()> {
    if (MIN_PRIORITY..=MAX_PRIORITY).contains(&priority) {
        Ok(())
    } else {
        Err(Error::invalid(
            "priority",
            format!("{priority} is outside {MIN_PRIORITY}..={MAX_PRIORITY}"),
        ))
    }
}

fn validate_progress(progress: Option<u8>) -> Result<()> {
    match progress {
        Some(p) if p > 100 => Err(Error::invalid("progress", format!("{p} exceeds 100"))),
        _ => Ok(()),
    }
}

fn validate_message(message: &str) -> Result<()> {
    if let Some(pos) = message.chars().position(|c| c == '\0') {
        return Err(Error::invalid("message", format!("NUL character at position {pos}")));
    }
    let chars = message.chars().count();
    if chars > MAX_MESSAGE_CHARS {
        return Err(Error::invalid(
            "message",
            format!("too long: {chars} characters exceeds max {MAX_MESSAGE_CHARS}"),
        ));
    }
    Ok(())
}

/// Checks a failure handed to `fail`: its message holds no NUL (`InvalidInput { field:
/// "message" }`, contract §E7.3). Its length is not limited.
pub fn validate_failure(failure: &Failure) -> Result<()> {
    match failure.message.chars().position(|c| c == '\0') {
        Some(pos) => Err(Error::invalid("message", format!("NUL character at position {pos}"))),
        None => Ok(()),
    }
}

/// True when `value` holds a NUL character. No stored name, token or text holds one (contract
/// §E7.3: names reject every control character, texts reject NUL), so a read that filters on
/// such a value matches nothing, and a token holding one is not the current token. SQL
/// backends answer so without sending it: PostgreSQL's text cannot carry a NUL.
pub fn has_nul(value: &str) -> bool {
    value.as_bytes().contains(&0)
}

/// Checks a saved step (§E3): delay 0–60 s, progress ≤ 100, message ≤ 1,000 characters,
/// cursor within the size limit.
pub fn validate_step(step: &Step, limits: &Limits) -> Result<()> {
    if step.delay > MAX_STEP_DELAY {
        return Err(Error::invalid(
            "delay",
            format!("{:?} exceeds max {:?}", step.delay, MAX_STEP_DELAY),
        ));
    }
    validate_progress(step.progress)?;
    validate_message(&step.message)?;
    validate_bytes("cursor", step.cursor.as_deref(), limits)
}

/// Checks a SQL table prefix: `^[a-z][a-z0-9_]{0,29}$` (extensions §E6). It is spliced into
/// statements, so nothing else may pass.
pub fn validate_prefix(prefix: &str) -> Result<()> {
    let mut chars = prefix.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if first_ok && rest_ok && prefix.len() <= 30 {
        Ok(())
    } else {
        Err(Error::invalid("prefix", format!("{prefix:?} must match ^[a-z][a-z0-9_]{{0,29}}$")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn field_of(r: Result<()>) -> Option<&'static str> {
        match r {
            Err(Error::InvalidInput { field, .. }) => Some(field),
            _ => None,
        }
    }

    #[rstest]
    #[case::ok(Task::new("t", "q"), None)]
    #[case::empty_type(Task::new("", "q"), Some("type"))]
    #[case::empty_queue(Task::new("t", ""), Some("queue"))]
    #[case::long_id(Task::new("t", "q").with_id("x".repeat(256)), Some("id"))]
    #[case::multibyte_255(Task::new("t", "é".repeat(255)), None)]
    #[case::long_key(Task::new("t", "q").with_business_key("k".repeat(256)), Some("business_key"))]
    #[case::control(Task::new("t\n", "q"), Some("type"))]
    #[case::nul_in_parent(Task::new("t", "q").with_depends_on(["a\0b"]), Some("depends_on"))]
    #[case::too_many_parents(Task::new("t", "q").with_depends_on((0..1001).map(|i| i.to_string())), Some("depends_on"))]
    #[case::replay_of(Task { replay_of: "e1".into(), ..Task::new("t", "q") }, Some("replay_of"))]
    #[case::nul_in_message(Task { message: "a\0b".into(), ..Task::new("t", "q") }, Some("message"))]
    #[case::newline_in_message(Task { message: "a\nb\t".into(), ..Task::new("t", "q") }, None)]
    #[case::most_urgent(Task::new("t", "q").with_priority(-100), None)]
    #[case::least_urgent(Task::new("t", "q").with_priority(100), None)]
    #[case::below_range(Task::new("t", "q").with_priority(-101), Some("priority"))]
    #[case::above_range(Task::new("t", "q").with_priority(i16::MAX), Some("priority"))]
    fn task_limits(#[case] task: Task, #[case] field: Option<&'static str>) {
        assert_eq!(field_of(validate_task(&task, &Limits::default())), field);
    }

    #[test]
    fn a_nul_in_a_text_to_store_is_invalid_and_a_nul_is_found_anywhere() {
        let step = Step { message: "\0".into(), ..Step::default() };
        assert_eq!(field_of(validate_step(&step, &Limits::default())), Some("message"));
        assert_eq!(field_of(validate_failure(&Failure::skip("bo\0om"))), Some("message"));
        assert_eq!(field_of(validate_failure(&Failure::skip("line\nline"))), None);
        assert!(has_nul("\0") && has_nul("a\0") && has_nul("é\0x"));
        assert!(!has_nul("") && !has_nul("a\u{1}b"));
    }

    #[rstest]
    #[case::ascii_255("x".repeat(255), None)]
    #[case::ascii_256("x".repeat(256), Some("too long: 256 characters exceeds max 255"))]
    #[case::del("ab\u{7f}", Some("control character at position 2"))]
    #[case::c1_after_multibyte("é\u{85}", Some("control character at position 1"))]
    #[case::multibyte_256("é".repeat(256), Some("too long: 256 characters exceeds max 255"))]
    #[case::empty("", Some("must not be empty"))]
    fn names_ascii_fast_path_and_general_path_agree(
        #[case] value: String,
        #[case] reason: Option<&str>,
    ) {
        let got = match validate_name("id", &value, false) {
            Ok(()) => None,
            Err(Error::InvalidInput { reason, .. }) => Some(reason),
            Err(other) => Some(other.to_string()),
        };
        assert_eq!(got.as_deref(), reason);
    }

    #[test]
    fn batch_errors_name_the_index_only_in_batches_of_several() {
        let reason = |tasks: &[Task]| match validate_tasks(tasks, &Limits::default()) {
            Err(Error::InvalidInput { field, reason }) => format!("{field}: {reason}"),
            other => format!("{other:?}"),
        };
        let bad = Task::new("", "q");
        assert_eq!(reason(std::slice::from_ref(&bad)), "type: must not be empty");
        assert_eq!(reason(&[Task::new("t", "q"), bad]), "type: task 1: must not be empty");
    }

    #[test]
    fn payload_limit_is_configurable() {
        let limits = Limits::new(4);
        let task = Task::new("t", "q").with_payload(vec![0u8; 5]);
        assert_eq!(field_of(validate_task(&task, &limits)), Some("payload"));
        let task = Task::new("t", "q").with_payload(vec![0u8; 4]);
        assert_eq!(field_of(validate_task(&task, &limits)), None);
    }

    #[test]
    fn a_storage_bound_lowers_the_limit_and_is_named() {
        let bound = StorageBound { setting: "max_allowed_packet", value: 16 };
        let limits = Limits::new(10).capped(8, bound);
        assert_eq!((limits.max_payload_bytes, limits.bound), (8, Some(bound)));
        assert_eq!(Limits::new(10).capped(12, bound), Limits::new(10), "a larger cap is no cap");
        let task = Task::new("t", "q").with_payload(vec![0u8; 9]);
        match validate_task(&task, &limits) {
            Err(Error::InvalidInput { field: "payload", reason }) => assert_eq!(
                reason,
                "too large: 9 bytes exceeds max 8 (the storage's max_allowed_packet is 16 bytes)"
            ),
            other => panic!("expected InvalidInput payload, got {other:?}"),
        }
        let task = Task::new("t", "q").with_payload(vec![0u8; 8]);
        assert_eq!(field_of(validate_task(&task, &limits)), None);
    }

    #[rstest]
    #[case("taskgate_", true)]
    #[case("a", true)]
    #[case("tgtest_01j0abc_", true)]
    #[case("", false)]
    #[case("1abc", false)]
    #[case("Upper", false)]
    #[case("x; DROP TABLE", false)]
    #[case("abcdefghijklmnopqrstuvwxyz01234", false)]
    fn prefixes(#[case] prefix: &str, #[case] ok: bool) {
        assert_eq!(validate_prefix(prefix).is_ok(), ok, "{prefix:?}");
    }

    #[rstest]
    #[case::ok(&["a", "b"], 1, None)]
    #[case::no_queues(&[], 1, Some("queues"))]
    #[case::queues_before_max(&[], 0, Some("queues"))]
    #[case::bad_name_before_max(&["a", ""], 0, Some("queue"))]
    #[case::zero_max(&["a"], 0, Some("max"))]
    fn claim_arguments(
        #[case] queues: &[&str],
        #[case] max: usize,
        #[case] field: Option<&'static str>,
    ) {
        assert_eq!(field_of(validate_claim(&queues, max)), field);
    }

    #[rstest]
    #[case::by_id(ReplayRequest::by_id("e1"), None)]
    #[case::by_key(ReplayRequest::by_key("k"), None)]
    #[case::neither(ReplayRequest::default(), Some("request"))]
    #[case::both(ReplayRequest { business_key: "k".into(), ..ReplayRequest::by_id("e1") }, Some("request"))]
    #[case::bad_id(ReplayRequest::by_id("x".repeat(256)), Some("id"))]
    #[case::bad_key(ReplayRequest::by_key("k\n"), Some("business_key"))]
    #[case::priority(ReplayRequest::by_id("e1").with_priority(-100), None)]
    #[case::bad_priority(ReplayRequest::by_id("e1").with_priority(101), Some("priority"))]
    #[case::payload(ReplayRequest::by_id("e1").with_payload(vec![0u8; 5]), Some("payload"))]
    fn replay_requests(#[case] request: ReplayRequest, #[case] field: Option<&'static str>) {
        let limits = Limits::new(4);
        assert_eq!(field_of(validate_replay_request(&request, &limits)), field);
    }

    #[rstest]
    #[case::empty_means_terminal(&[], Ok(vec![Status::Completed, Status::Failed, Status::Canceled]))]
    #[case::kept(&[Status::Failed], Ok(vec![Status::Failed]))]
    #[case::non_terminal(&[Status::Failed, Status::Running], Err("statuses"))]
    fn prune_status_lists(
        #[case] statuses: &[Status],
        #[case] expected: Result<Vec<Status>, &str>,
    ) {
        let got = prune_statuses(statuses).map_err(|e| match e {
            Error::InvalidInput { field, .. } => field,
            _ => "other",
        });
        assert_eq!(got, expected);
    }

    #[test]
    fn ack_items() {
        let limits = Limits::new(1);
        let item = |id: &str, result: Option<Vec<u8>>| AckItem {
            id: id.into(),
            token: "t".into(),
            result,
        };
        assert_eq!(field_of(validate_ack_item(&item("a", Some(vec![1])), &limits)), None);
        assert_eq!(field_of(validate_ack_item(&item("", None), &limits)), Some("id"));
        assert_eq!(
            field_of(validate_ack_item(&item("a", Some(vec![1, 2])), &limits)),
            Some("result")
        );
    }

    #[test]
    fn step_limits() {
        let limits = Limits::default();
        let step = |delay: u64, progress: u8| Step {
            delay: Duration::from_secs(delay),
            progress: Some(progress),
            ..Step::default()
        };
        assert_eq!(field_of(validate_step(&step(60, 100), &limits)), None);
        assert_eq!(field_of(validate_step(&step(61, 0), &limits)), Some("delay"));
        assert_eq!(field_of(validate_step(&step(0, 101), &limits)), Some("progress"));
    }
}
