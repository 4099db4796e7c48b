//! The JSON views the API answers with, and `taskgate --json` prints: one shape per object
//! whichever door it comes out of (docs/decisions.md, "One task view").

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::Serialize;
use serde_json::Value;
use taskgate::{AuditRecord, Broker, Filter, QueueStats, Status, Task, Timestamp};

/// The most children a task view lists (`GET /api/v1/tasks?parent=ID` pages through all).
pub const MAX_CHILDREN: usize = 100;

/// How a byte field (payload, result, cursor) is rendered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// The bytes are valid UTF-8 JSON; the field holds that JSON value.
    Json,
    /// The bytes are not JSON; the field holds them in standard base64.
    Base64,
}

/// Renders bytes as their JSON value when they parse as JSON, else as base64; `None` for no
/// bytes.
pub(crate) fn render_bytes(bytes: Option<&[u8]>) -> (Value, Option<Encoding>) {
    match bytes {
        None => (Value::Null, None),
        Some(b) => match serde_json::from_slice::<Value>(b) {
            Ok(v) => (v, Some(Encoding::Json)),
            Err(_) => (
                Value::String(base64::engine::general_purpose::STANDARD.encode(b)),
                Some(Encoding::Base64),
            ),
        },
    }
}

fn time(t: Timestamp) -> String {
    t.to_string()
}

fn opt_time(t: Option<Timestamp>) -> Option<String> {
    t.filter(|t| !t.is_zero()).map(time)
}

/// One task: every field but its lease token. `taskgate --json` prints the same object.
// `TaskView::detail` is the view of `GET /api/v1/tasks/{id}` and `taskgate get`,
// `TaskView::at` an element of a list, and `From<&Task>` the answer of a mutation.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct TaskView {
    /// Execution ID.
    pub id: String,
    /// Task type.
    #[serde(rename = "type")]
    pub task_type: String,
    /// Queue.
    pub queue: String,
    /// Status (`pending`, `blocked`, `running`, `retrying`, `completed`, `failed`, `canceled`).
    #[schema(value_type = String, example = "pending")]
    pub status: Status,
    /// Submitting owner (empty when none).
    pub owner: String,
    /// Business key (empty when none).
    pub business_key: String,
    /// The execution this one replays (empty when none).
    pub replay_of: String,
    /// Payload: JSON, base64 (see `payload_encoding`) or null.
    #[schema(value_type = Value)]
    pub payload: Value,
    /// `json` or `base64`; null when there is no payload.
    pub payload_encoding: Option<Encoding>,
    /// Result, rendered like the payload.
    #[schema(value_type = Value)]
    pub result: Value,
    /// `json` or `base64`; null when there is no result.
    pub result_encoding: Option<Encoding>,
    /// Step checkpoint, rendered like the payload.
    #[schema(value_type = Value)]
    pub cursor: Value,
    /// `json` or `base64`; null when there is no cursor.
    pub cursor_encoding: Option<Encoding>,
    /// Step progress, 0–100.
    pub progress: Option<u8>,
    /// Step progress note.
    pub message: String,
    /// The last error text.
    pub last_error: String,
    /// Business failures counted.
    pub attempts: u32,
    /// The business retry budget.
    pub max_retry: u32,
    /// Lease losses counted.
    pub lease_lost: u32,
    /// Throttled failures counted.
    pub throttled: u32,
    /// Saved steps.
    pub steps: u32,
    /// Operator resumes.
    pub resumes: u32,
    /// A cancel was requested while running.
    pub cancel_requested: bool,
    /// Earliest run time (RFC 3339).
    pub run_at: String,
    /// Creation time (RFC 3339).
    pub created_at: String,
    /// Last start (RFC 3339), if any.
    pub started_at: Option<String>,
    /// Finish time (RFC 3339), if finished.
    pub finished_at: Option<String>,
    /// Parent task IDs (dependencies), as the task's `depends_on` lists them.
    pub parents: Vec<String>,
    /// The direct children's IDs (the tasks listing this one in `depends_on`), in creation
    /// order, at most 100 (`MAX_CHILDREN`); `GET /api/v1/tasks?parent=ID` pages through all
    /// of them. Filled by `GET /api/v1/tasks/{id}` only: null in lists and in the answers of
    /// mutations.
    pub children: Option<Vec<String>>,
    /// True when the task has more children than `children` holds (null where `children` is).
    pub more_children: Option<bool>,
    /// What happens when a parent fails (`fail_fast`, `ignore`, …).
    pub on_parent_failure: String,
    /// While running: when the lease expires unless the worker's next heartbeat extends it
    /// (RFC 3339); null in every other status.
    pub lease_expires_at: Option<String>,
    /// Running with its lease deadline passed (by the broker's clock when the list or get
    /// answered): the worker stopped heart-beating and the reaper will requeue the task.
    /// False in the answers of mutations.
    pub lease_expired: bool,
    /// The lease for people: `expires in 42 s`, `expired 12 s ago — the reaper will requeue
    /// it`, or empty (not running; and in the answers of mutations).
    pub lease_note: String,
    /// While running: when the worker holding the lease last sent a heartbeat (RFC 3339, the
    /// broker's clock); null right after the claim until the first heartbeat, and in every
    /// other status.
    pub last_heartbeat_at: Option<String>,
}

impl From<&Task> for TaskView {
    fn from(t: &Task) -> Self {
        let (payload, payload_encoding) = render_bytes(t.payload.as_deref());
        let (result, result_encoding) = render_bytes(t.result.as_deref());
        let (cursor, cursor_encoding) = render_bytes(t.cursor.as_deref());
        TaskView {
            id: t.id.clone(),
            task_type: t.task_type.clone(),
            queue: t.queue.clone(),
            status: t.status,
            owner: t.owner.clone(),
            business_key: t.business_key.clone(),
            replay_of: t.replay_of.clone(),
            payload,
            payload_encoding,
            result,
            result_encoding,
            cursor,
            cursor_encoding,
            progress: t.progress,
            message: t.message.clone(),
            last_error: t.last_error.clone(),
            attempts: t.attempts,
            max_retry: t.max_retry,
            lease_lost: t.lease_lost,
            throttled: t.throttled,
            steps: t.steps,
            resumes: t.resumes,
            cancel_requested: t.cancel_requested,
            run_at: time(t.run_at),
            created_at: time(t.created_at),
            started_at: opt_time(t.started_at),
            finished_at: opt_time(t.finished_at),
            parents: t.depends_on.clone(),
            children: None,
            more_children: None,
            on_parent_failure: t.on_parent_failure.as_str().to_owned(),
            lease_expires_at: t.lease_expires_at.map(time),
            lease_expired: false,
            lease_note: String::new(),
            last_heartbeat_at: t.last_heartbeat_at.map(time),
        }
    }
}

impl TaskView {
    /// The view of `t` with its lease read against the broker's `now` (an element of a list).
    pub fn at(t: &Task, now: Timestamp) -> Self {
        let lease = t.lease_at(now);
        TaskView { lease_expired: lease.is_expired(), lease_note: lease.to_string(), ..t.into() }
    }

    /// The whole view of one task (`GET /api/v1/tasks/{id}`, `taskgate get`): its lease read at
    /// the broker's time and its first [`MAX_CHILDREN`] children, only `owner`'s when given
    /// (an owner-bound token sees only its owner's).
    pub async fn detail(
        broker: &dyn Broker,
        task: &Task,
        owner: Option<&str>,
    ) -> taskgate::Result<TaskView> {
        let mut view = TaskView::at(task, broker.now().await?);
        let filter = Filter {
            parent: task.id.clone(),
            owner: owner.unwrap_or_default().to_owned(),
            limit: MAX_CHILDREN + 1,
            ..Filter::default()
        };
        let mut children = broker.list(&filter).await?;
        view.more_children = Some(children.len() > MAX_CHILDREN);
        children.truncate(MAX_CHILDREN);
        view.children = Some(children.into_iter().map(|c| c.id).collect());
        Ok(view)
    }
}

/// A page of tasks.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct TaskPage {
    /// The tasks, in `(created_at, id)` order.
    pub tasks: Vec<TaskView>,
    /// This page's number (from 1).
    pub page: usize,
    /// The page size.
    pub per_page: usize,
    /// True when a later page has tasks.
    pub has_more: bool,
}

/// One queue.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct QueueView {
    /// The queue's name.
    pub name: String,
    /// Claimable or delayed tasks (`pending` + `retrying`), as `queue_len` counts them.
    pub length: u64,
    /// Tasks running now.
    pub running: u64,
    /// Claims from this queue are paused.
    pub paused: bool,
    /// Tasks by status (every status, zeros included).
    #[schema(value_type = BTreeMap<String, u64>)]
    pub counts: BTreeMap<Status, u64>,
    /// How long the oldest ready task has waited, in milliseconds (null when none is ready).
    pub oldest_ready_age_ms: Option<i64>,
}

impl QueueView {
    /// The view of `stats` (or of an empty queue named `name`) at `now`.
    pub(crate) fn new(
        name: &str,
        stats: Option<&QueueStats>,
        paused: bool,
        now: Timestamp,
    ) -> Self {
        let mut counts: BTreeMap<Status, u64> = Status::ALL.iter().map(|s| (*s, 0)).collect();
        if let Some(s) = stats {
            counts.extend(s.counts.iter().map(|(k, v)| (*k, *v)));
        }
        let oldest = stats.and_then(|s| s.oldest_run_at).filter(|at| *at <= now);
        QueueView {
            name: name.to_owned(),
            length: counts[&Status::Pending] + counts[&Status::Retrying],
            running: counts[&Status::Running],
            paused,
            counts,
            oldest_ready_age_ms: oldest.map(|at| now.as_millis() - at.as_millis()),
        }
    }
}

/// Every queue at a glance.
// Not `taskgate::QueueList`, the queues a claim reads from.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct QueueOverview {
    /// The queues that hold tasks or are paused, by name.
    pub queues: Vec<QueueView>,
    /// The broker's time the ages were computed at (RFC 3339).
    pub now: String,
}

/// The whole store at a glance.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct StatsView {
    /// The backend (`memory`, `sqlite`, `postgres`, `mysql`).
    pub backend: String,
    /// The broker's time (RFC 3339).
    pub now: String,
    /// Tasks by status over every type (every status, zeros included).
    #[schema(value_type = BTreeMap<String, u64>)]
    pub totals: BTreeMap<Status, u64>,
    /// Tasks by type, then status.
    #[schema(value_type = BTreeMap<String, BTreeMap<String, u64>>)]
    pub by_type: BTreeMap<String, BTreeMap<Status, u64>>,
    /// Paused queues.
    pub paused_queues: Vec<String>,
}

/// One audit record.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct AuditView {
    /// The record's ID.
    pub id: String,
    /// When (RFC 3339, the broker's clock).
    pub at: String,
    /// Who: the token's name.
    pub actor: String,
    /// `cancel`, `resume`, `replay`, `pause_queue` or `resume_queue`.
    pub action: String,
    /// `task:<id>`, `key:<business key>` or `queue:<name>`.
    pub target: String,
    /// `ok` or the error code that rejected the action.
    pub outcome: String,
    /// The replay's new execution ID, or the rejection's message.
    pub detail: String,
}

impl From<AuditRecord> for AuditView {
    fn from(r: AuditRecord) -> Self {
        AuditView {
            id: r.id,
            at: time(r.at),
            actor: r.actor,
            action: r.action,
            target: r.target,
            outcome: r.outcome,
            detail: r.detail,
        }
    }
}

/// A page of audit records.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct AuditPage {
    /// The records, newest first.
    pub records: Vec<AuditView>,
    /// This page's number (from 1).
    pub page: usize,
    /// The page size.
    pub per_page: usize,
    /// True when a later page has records.
    pub has_more: bool,
}
