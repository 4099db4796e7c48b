//! Request bodies: read whole, within a deadline and a size limit, before any handler runs
//! ([`read_within_limits`]), then taken as optional JSON ([`JsonBody`]) by the one endpoint
//! that has a body, or refused ([`NoBody`]) by the mutations that take none — a body is never
//! silently ignored.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// The largest request body the API reads, in bytes (2 MiB).
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

/// Reads the whole request body within `timeout` and [`MAX_BODY_BYTES`] before the handler
/// runs: a body that does not arrive in time is a 408 (`request.timeout`), a larger one a 413
/// (`input.too_large`); both close the connection, whose rest of body is never read.
pub(crate) async fn read_within_limits(
    State(timeout): State<Duration>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    let read = Limited::new(body, MAX_BODY_BYTES).collect();
    let bytes = match tokio::time::timeout(timeout, read).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) if e.is::<LengthLimitError>() => {
            return closing(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "input.too_large",
                format!("body: larger than {MAX_BODY_BYTES} bytes"),
            ));
        }
        Ok(Err(e)) => return closing(ApiError::bad_input(format!("body: cannot be read: {e}"))),
        Err(_) => {
            return closing(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request.timeout",
                format!("body: not received within {} ms", timeout.as_millis()),
            ));
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes))).await
}

/// `error` as an answer after which the server closes the connection.
fn closing(error: ApiError) -> Response {
    let mut response = error.into_response();
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// True when `headers` declare a JSON body: `application/json` or `application/*+json`, any
/// parameters, any case.
fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    essence == "application/json"
        || essence.strip_prefix("application/").is_some_and(|sub| sub.ends_with("+json"))
}

/// An optional JSON body: none (an empty body) is `JsonBody(None)`; a body with another or no
/// content type is a 415 (`input.unsupported_media_type`); JSON that does not fit `T` a 400.
pub(crate) struct JsonBody<T>(pub(crate) Option<T>);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<JsonBody<T>, ApiError> {
        let json = is_json(request.headers());
        let bytes = body_bytes(request, state).await?;
        if bytes.is_empty() {
            return Ok(JsonBody(None));
        }
        if !json {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "input.unsupported_media_type",
                "body: send it with Content-Type: application/json",
            ));
        }
        let value = serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::bad_input(format!("body: {e}")))?;
        Ok(JsonBody(Some(value)))
    }
}

/// The body of an endpoint that takes none: a non-empty one is a 400 (`input.invalid`).
pub(crate) struct NoBody;

impl<S: Send + Sync> FromRequest<S> for NoBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<NoBody, ApiError> {
        if body_bytes(request, state).await?.is_empty() {
            Ok(NoBody)
        } else {
            Err(ApiError::bad_input("body: this endpoint takes no body"))
        }
    }
}

async fn body_bytes<S: Send + Sync>(request: Request, state: &S) -> Result<Bytes, ApiError> {
    Bytes::from_request(request, state)
        .await
        .map_err(|e| ApiError::new(e.status(), "input.invalid", format!("body: {}", e.body_text())))
}
