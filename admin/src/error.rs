//! [`ApiError`]: every failure the API answers, as `{"code": …, "message": …}` with its HTTP
//! status.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use taskgate::{Error, ErrorKind};

/// An error answer: an HTTP status, a stable machine-readable `code` and a human message.
///
/// | status | codes |
/// |---|---|
/// | 400 | `input.invalid` (a bad ID, queue, filter, page or body) |
/// | 401 | `auth.missing`, `auth.invalid` |
/// | 403 | `auth.forbidden` |
/// | 404 | `task.not_found`, `route.not_found` |
/// | 408 | `request.timeout` (a body not received within the body timeout) |
/// | 409 | `task.already_final`, `task.not_resumable`, `task.replay_not_final`, `task.already_replayed`, `task.completed_not_allowed`, `task.exists`, … |
/// | 413 | `input.too_large` (a body over 2 MiB) |
/// | 415 | `input.unsupported_media_type` (a replay body not sent as `application/json`) |
/// | 503 | `storage.unavailable`, `broker.closed`, `broker.not_initialized` |
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ApiError {
    #[serde(skip)]
    #[schema(ignore)]
    status: StatusCode,
    code: String,
    message: String,
}

impl ApiError {
    /// An error with `status`, `code` and `message`.
    pub fn new(status: StatusCode, code: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError { status, code: code.into(), message: message.into() }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The stable code (`task.not_resumable`, …).
    pub fn code(&self) -> &str {
        &self.code
    }

    /// The human message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// 400 `input.invalid`.
    pub(crate) fn bad_input(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "input.invalid", message)
    }

    /// 401 with `code`.
    pub(crate) fn unauthorized(code: &str, message: &str) -> Self {
        ApiError::new(StatusCode::UNAUTHORIZED, code, message)
    }

    /// 403 `auth.forbidden`.
    pub(crate) fn forbidden(message: String) -> Self {
        ApiError::new(StatusCode::FORBIDDEN, "auth.forbidden", message)
    }

    /// 404 `task.not_found` for `id`.
    pub(crate) fn task_not_found(id: &str) -> Self {
        ApiError::from(Error::not_found(id))
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let status = match e.kind() {
            ErrorKind::InvalidInput => StatusCode::BAD_REQUEST,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::Backend | ErrorKind::Closed | ErrorKind::NotInitialized => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ErrorKind::TaskExists
            | ErrorKind::LeaseLost
            | ErrorKind::Canceled
            | ErrorKind::AlreadyFinal
            | ErrorKind::ReplayNotFinal
            | ErrorKind::AlreadyReplayed
            | ErrorKind::CompletedNotAllowed
            | ErrorKind::NotResumable
            | ErrorKind::IllegalTransition => StatusCode::CONFLICT,
            // A kind added to the core later: not a client's fault until mapped here.
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        if status == StatusCode::SERVICE_UNAVAILABLE {
            tracing::warn!(error = %e, "admin API: storage unavailable");
        }
        ApiError::new(status, taskgate::audit::error_code(&e), e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(&self)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
        }
        response
    }
}
