//! The endpoints.

use std::collections::BTreeMap;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use taskgate::{AdminAction, AdminOutcome, AuditQuery, Filter, ReplayRequest, Status, Task};

use crate::auth::Caller;
use crate::body::{JsonBody, NoBody};
use crate::error::ApiError;
use crate::view::{AuditPage, AuditView, QueueOverview, QueueView, StatsView, TaskPage, TaskView};
use crate::AppState;

/// The largest `per_page`.
pub const MAX_PER_PAGE: usize = 100;
/// The `per_page` when none is given.
pub const DEFAULT_PER_PAGE: usize = 50;

type ApiResult<T> = Result<Json<T>, ApiError>;

/// One path segment (a task ID or a queue name), its rejection a JSON 400.
pub(crate) struct Segment(String);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Segment {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Segment, ApiError> {
        match Path::<String>::from_request_parts(parts, state).await {
            Ok(Path(segment)) => Ok(Segment(segment)),
            Err(e) => Err(ApiError::bad_input(format!("path: {}", e.body_text()))),
        }
    }
}

/// Paging parameters shared by the list endpoints.
fn paging(page: Option<usize>, per_page: Option<usize>) -> Result<(usize, usize), ApiError> {
    let page = page.unwrap_or(1);
    let per_page = per_page.unwrap_or(DEFAULT_PER_PAGE);
    if page == 0 {
        return Err(ApiError::bad_input("page: pages count from 1"));
    }
    if per_page == 0 || per_page > MAX_PER_PAGE {
        return Err(ApiError::bad_input(format!("per_page: must be 1 to {MAX_PER_PAGE}")));
    }
    // Far pages of a huge page number: the offset must not overflow.
    if (page - 1).checked_mul(per_page).is_none() {
        return Err(ApiError::bad_input("page: too large"));
    }
    Ok((page, per_page))
}

fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    q.map(|Query(v)| v).map_err(|e| ApiError::bad_input(format!("query: {}", e.body_text())))
}

/// `GET /api/v1/tasks` parameters.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListParams {
    /// Only this task type.
    #[serde(rename = "type", default)]
    task_type: String,
    /// Only this queue.
    #[serde(default)]
    queue: String,
    /// Only this status (`pending`, `blocked`, `running`, `retrying`, `completed`, `failed`,
    /// `canceled`).
    status: Option<String>,
    /// Only this owner's tasks (an owner-bound token always filters by its owner).
    #[serde(default)]
    owner: String,
    /// Only this business key's executions.
    #[serde(default)]
    business_key: String,
    /// Only the direct children of this task (the tasks listing it in `depends_on`).
    #[serde(default)]
    parent: String,
    /// The page, from 1 (default 1).
    page: Option<usize>,
    /// Tasks per page, 1 to 100 (default 50).
    per_page: Option<usize>,
}

/// Tasks in `(created_at, id)` order, filtered, a page at a time.
///
/// Filters `type`, `queue`, `status`, `owner`, `business_key`, `parent` (a task's direct
/// children); `page` (from 1), `per_page` (1–100, default 50); `has_more` says a later page
/// has tasks. An owner-bound token lists only its owner's tasks.
#[utoipa::path(get, path = "/api/v1/tasks", params(ListParams), responses((status = 200, body = TaskPage), (status = 400, body = ApiError, description = "Bad input (`input.invalid`)"), (status = 401, body = ApiError, description = "No or unknown token"), (status = 503, body = ApiError, description = "Storage unavailable")))]
pub(crate) async fn list_tasks(
    State(state): State<AppState>,
    caller: Caller,
    params: Result<Query<ListParams>, QueryRejection>,
) -> ApiResult<TaskPage> {
    let p = query(params)?;
    let (page, per_page) = paging(p.page, p.per_page)?;
    let status = match p.status.as_deref() {
        None | Some("") => None,
        Some(s) => Some(s.parse::<Status>().map_err(|_| {
            ApiError::bad_input(format!(
                "status: {s:?} is not one of pending, blocked, running, retrying, completed, \
                 failed, canceled"
            ))
        })?),
    };
    let owner = match &caller.owner {
        // An owner-bound token lists only its owner's tasks: another owner filters to none.
        Some(bound) if !p.owner.is_empty() && p.owner != *bound => {
            return Ok(Json(TaskPage { tasks: Vec::new(), page, per_page, has_more: false }));
        }
        Some(bound) => bound.clone(),
        None => p.owner,
    };
    let filter = Filter {
        task_type: p.task_type,
        queue: p.queue,
        status,
        business_key: p.business_key,
        owner,
        parent: p.parent,
        limit: per_page + 1,
        offset: (page - 1) * per_page,
    };
    let mut tasks = state.broker.list(&filter).await?;
    let now = state.broker.now().await?;
    let has_more = tasks.len() > per_page;
    tasks.truncate(per_page);
    let tasks = tasks.iter().map(|t| TaskView::at(t, now)).collect();
    Ok(Json(TaskPage { tasks, page, per_page, has_more }))
}

/// The task `id` as `caller` may see it: another owner's task is a 404.
async fn visible(state: &AppState, caller: &Caller, id: &str) -> Result<Task, ApiError> {
    let task = state.broker.get(id).await?;
    if !caller.sees(&task) {
        return Err(ApiError::task_not_found(id));
    }
    Ok(task)
}

/// One task, with its first 100 `children` and `more_children`.
#[utoipa::path(get, path = "/api/v1/tasks/{id}", params(("id" = String, Path, description = "Task ID")), responses((status = 200, body = TaskView), (status = 400, body = ApiError, description = "Bad input (`input.invalid`)"), (status = 401, body = ApiError, description = "No or unknown token"), (status = 404, body = ApiError, description = "Unknown task (or another owner's)"), (status = 503, body = ApiError, description = "Storage unavailable")))]
pub(crate) async fn get_task(
    State(state): State<AppState>,
    caller: Caller,
    Segment(id): Segment,
) -> ApiResult<TaskView> {
    let task = visible(&state, &caller, &id).await?;
    Ok(Json(TaskView::detail(&*state.broker, &task, caller.owner.as_deref()).await?))
}

/// What every task mutation checks before it acts: a write token, a valid ID, and (for an
/// owner-bound token) a task of its owner, else the 404 of a missing task.
async fn writable_task(state: &AppState, caller: &Caller, id: &str) -> Result<(), ApiError> {
    caller.require_write()?;
    taskgate::validate::validate_id(id)?;
    if caller.owner.is_some() {
        visible(state, caller, id).await?;
    }
    Ok(())
}

/// Runs an audited action as `caller`.
async fn act(
    state: &AppState,
    caller: &Caller,
    action: AdminAction,
) -> Result<AdminOutcome, ApiError> {
    Ok(state.broker.audited(&caller.name, &action).await?)
}

/// Cancels a task (a running one gets a cancel request); answers the task after.
#[utoipa::path(post, path = "/api/v1/tasks/{id}/cancel", params(("id" = String, Path, description = "Task ID")), responses((status = 200, body = TaskView, description = "The task after the cancel"), (status = 400, body = ApiError, description = "Bad input (`input.invalid`)"), (status = 401, body = ApiError, description = "No or unknown token"), (status = 403, body = ApiError, description = "Token scope or owner binding refuses"), (status = 404, body = ApiError, description = "Unknown task (or another owner's)"), (status = 409, body = ApiError, description = "State conflict"), (status = 503, body = ApiError, description = "Storage unavailable")))]
pub(crate) async fn cancel_task(
    State(state): State<AppState>,
    caller: Caller,
    Segment(id): Segment,
    _: NoBody,
) -> ApiResult<TaskView> {
    writable_task(&state, &caller, &id).await?;
    act(&state, &caller, AdminAction::Cancel { id: id.clone() }).await?;
    let task = state.broker.get(&id).await?;
    Ok(Json(TaskView::from(&task)))
}

/// Operator resume of a failed or cancelled task, under its own ID.
#[utoipa::path(post, path = "/api/v1/tasks/{id}/resume", params(("id" = String, Path, description = "Task ID")), responses((status = 200, body = TaskView, description = "The resumed task"), (status = 400, body = ApiError, description = "Bad input (`input.invalid`)"), (status = 401, body = ApiError, description = "No or unknown token"), (status = 403, body = ApiError, description = "Token scope or owner binding refuses"), (status = 404, body = ApiError, description = "Unknown task (or another owner's)"), (status = 409, body = ApiError, description = "State conflict"), (status = 503, body = ApiError, description = "Storage unavailable")))]
pub(crate) async fn resume_task(
    State(state): State<AppState>,
    caller: Caller,
    Segment(id): Segment,
    _: NoBody,
) -> ApiResult<TaskView> {
    writable_task(&state, &caller, &id).await?;
    match act(&state, &caller, AdminAction::Resume { id: id.clone() }).await? {
        AdminOutcome::Task(task) => Ok(Json(TaskView::from(&*task))),
        AdminOutcome::Done => Ok(Json(TaskView::from(&state.broker.get(&id).await?))),
    }
}

/// `POST /api/v1/tasks/{id}/replay` body (optional).
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReplayBody {
    /// Allow replaying a completed execution.
    #[serde(default)]
    allow_completed: bool,
    /// The new execution's payload as JSON; absent copies the target's.
    #[schema(value_type = Option<Value>)]
    payload: Option<serde_json::Value>,
}

/// A new execution of a finished one (201).
///
/// The body `{"allow_completed": bool, "payload": any}` is optional.
#[utoipa::path(post, path = "/api/v1/tasks/{id}/replay", params(("id" = String, Path, description = "Task ID")), request_body(content = Option<ReplayBody>, content_type = "application/json", description = "Optional; a body must be sent as `application/json`"), responses((status = 201, body = TaskView, description = "The new execution"), (status = 400, body = ApiError, description = "Bad input (`input.invalid`)"), (status = 401, body = ApiError, description = "No or unknown token"), (status = 403, body = ApiError, description = "Token scope or owner binding refuses"), (status = 404, body = ApiError, description = "Unknown task (or another owner's)"), (status = 409, body = ApiError, description = "State conflict"), (status = 415, body = ApiError, description = "A body that is not `application/json` (`input.unsupported_media_type`)"), (status = 503, body = ApiError, description = "Storage unavailable")))]
pub(crate) async fn replay_task(
    State(state): State<AppState>,
    caller: Caller,
    Segment(id): Segment,
    JsonBody(body): JsonBody<ReplayBody>,
) -> Result<(StatusCode, Json<TaskView>), ApiError> {
    writable_task(&state, &caller, &id).await?;
    // No body means the defaults; a body is JSON or refused (415), never ignored.
    let body = body.unwrap_or_default();
    let mut request = ReplayRequest::by_id(&id);
    request.allow_completed = body.allow_completed;
    if let Some(payload) = body.payload {
        let bytes = serde_json::to_vec(&payload)
            .map_err(|e| ApiError::bad_input(format!("payload: {e}")))?;
        request.payload = Some(bytes);
    }
    match act(&state, &caller, AdminAction::Replay(request)).await? {
        AdminOutcome::Task(task) => Ok((StatusCode::CREATED, Json(TaskView::from(&*task)))),
        AdminOutcome::Done => Err(ApiError::from(taskgate::Error::backend(
            state.broker.backend(),
            "replay returned no execution",
        ))),
    }
}

/// Every queue: length, running, paused, counts by status, oldest ready age.
#[utoipa::path(get, path = "/api/v1/queues", responses((status = 200, body = QueueOverview), (status = 401, body = ApiError, description = "No or unknown token"), (status = 403, body = ApiError, description = "Token scope or owner binding refuses"), (status = 503, body = ApiError, description = "Storage unavailable")))]
pub(crate) async fn list_queues(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<QueueOverview> {
    caller.require_unbound()?;
    let now = state.broker.now().await?;
    let stats = state.broker.queue_stats().await?;
    let paused = state.broker.paused_queues().await?;
    let mut names: Vec<&str> = stats.iter().map(|s| s.queue.as_str()).collect();
    names.extend(paused.iter().map(String::as_str));
    names.sort_unstable();
    names.dedup();
    let queues = names
        .iter()
        .map(|name| {
            let s = stats.iter().find(|s| s.queue == *name);
            QueueView::new(name, s, paused.iter().any(|p| p == name), now)
        })
        .collect();
    Ok(Json(QueueOverview { queues, now: now.to_string() }))
}

async fn queue_action(
    state: &AppState,
    caller: &Caller,
    queue: String,
    pause: bool,
) -> ApiResult<QueueView> {
    caller.require_write()?;
    caller.require_unbound()?;
    taskgate::validate::validate_queue(&queue)?;
    let action = if pause {
        AdminAction::PauseQueue { queue: queue.clone() }
    } else {
        AdminAction::ResumeQueue { queue: queue.clone() }
    };
    act(state, caller, action).await?;
    let now = state.broker.now().await?;
    let stats = state.broker.queue_stats().await?;
    let paused = state.broker.paused_queues().await?.contains(&queue);
    let s = stats.iter().find(|s| s.queue == queue);
    Ok(Json(QueueView::new(&queue, s, paused, now)))
}

/// Pauses claims from a queue.
#[utoipa::path(post, path = "/api/v1/queues/{queue}/pause", params(("queue" = String, Path, description = "Queue name")), responses((status = 200, body = QueueView), (status = 400, body = ApiError, description = "Bad input (`input.invalid`)"), (status = 401, body = ApiError, description = "No or unknown token"), (status = 403, body = ApiError, description = "Token scope or owner binding refuses"), (status = 503, body = ApiError, description = "Storage unavailable")))]
pub(crate) async fn pause_queue(
    State(state): State<AppState>,
    caller: Caller,
    Segment(queue): Segment,
    _: NoBody,
) -> ApiResult<QueueView> {
    queue_action(&state, &caller, queue, true).await
}

/// Resumes claims from a paused queue.
#[utoipa::path(post, path = "/api/v1/queues/{queue}/resume", params(("queue" = String, Path, description = "Queue name")), responses((status = 200, body = QueueView), (status = 400, body = ApiError, description = "Bad input (`input.invalid`)"), (status = 401, body = ApiError, description = "No or unknown token"), (status = 403, body = ApiError, description = "Token scope or owner binding refuses"), (status = 503, body = ApiError, description = "Storage unavailable")))]
pub(crate) async fn resume_queue(
    State(state): State<AppState>,
    caller: Caller,
    Segment(queue): Segment,
    _: NoBody,
) -> ApiResult<QueueView> {
    queue_action(&state, &caller, queue, false).await
}

/// Counts by status and by type, paused queues, the broker's time.
#[utoipa::path(get, path = "/api/v1/stats", responses((status = 200, body = StatsView), (status = 401, body = ApiError, description = "No or unknown token"), (status = 403, body = ApiError, description = "Token scope or owner binding refuses"), (status = 503, body = ApiError, description = "Storage unavailable")))]
pub(crate) async fn stats(State(state): State<AppState>, caller: Caller) -> ApiResult<StatsView> {
    caller.require_unbound()?;
    let now = state.broker.now().await?;
    let by_type = state.broker.counts().await?;
    let mut totals: BTreeMap<Status, u64> = Status::ALL.iter().map(|s| (*s, 0)).collect();
    for counts in by_type.values() {
        for (status, n) in counts {
            *totals.entry(*status).or_default() += n;
        }
    }
    Ok(Json(StatsView {
        backend: state.broker.backend().to_owned(),
        now: now.to_string(),
        totals,
        by_type,
        paused_queues: state.broker.paused_queues().await?,
    }))
}

/// `GET /api/v1/audit` parameters.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuditParams {
    /// Only this actor's records (a token name).
    #[serde(default)]
    actor: String,
    /// Only this action (`cancel`, `resume`, `replay`, `pause_queue`, `resume_queue`).
    #[serde(default)]
    action: String,
    /// Only this target (`task:<id>`, `key:<business key>`, `queue:<name>`).
    #[serde(default)]
    target: String,
    /// The page, from 1 (default 1).
    page: Option<usize>,
    /// Records per page, 1 to 100 (default 50).
    per_page: Option<usize>,
}

/// Audit records, newest first; filters `actor`, `action`, `target`; paging as tasks.
#[utoipa::path(get, path = "/api/v1/audit", params(AuditParams), responses((status = 200, body = AuditPage), (status = 400, body = ApiError, description = "Bad input (`input.invalid`)"), (status = 401, body = ApiError, description = "No or unknown token"), (status = 403, body = ApiError, description = "Token scope or owner binding refuses"), (status = 503, body = ApiError, description = "Storage unavailable")))]
pub(crate) async fn audit(
    State(state): State<AppState>,
    caller: Caller,
    params: Result<Query<AuditParams>, QueryRejection>,
) -> ApiResult<AuditPage> {
    caller.require_unbound()?;
    let p = query(params)?;
    let (page, per_page) = paging(p.page, p.per_page)?;
    let q = AuditQuery {
        actor: p.actor,
        action: p.action,
        target: p.target,
        limit: per_page + 1,
        offset: (page - 1) * per_page,
    };
    let mut records = state.broker.audit_log(&q).await?;
    let has_more = records.len() > per_page;
    records.truncate(per_page);
    let records = records.into_iter().map(AuditView::from).collect();
    Ok(Json(AuditPage { records, page, per_page, has_more }))
}

pub(crate) async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "route.not_found", "no such endpoint")
}

pub(crate) async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "route.method_not_allowed",
        "method not allowed here",
    )
}

/// `GET /api/v1/openapi.json`: the OpenAPI document (no token needed: it describes the API,
/// not the data).
pub(crate) async fn openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(crate::openapi::document())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paging_refuses_only_an_offset_that_overflows() {
        // The last page whose offset, (page - 1) × per_page, still fits.
        let last = usize::MAX / 2 + 1;
        assert_eq!(paging(Some(last), Some(2)).ok(), Some((last, 2)));
        let err = paging(Some(last + 1), Some(2)).err().map(|e| e.message().to_owned());
        assert_eq!(err.as_deref(), Some("page: too large"));
        assert_eq!(paging(None, None).ok(), Some((1, DEFAULT_PER_PAGE)));
        assert!(paging(Some(0), None).is_err() && paging(None, Some(MAX_PER_PAGE + 1)).is_err());
    }
}
