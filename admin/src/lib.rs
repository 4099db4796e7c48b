//! `taskgate-admin`: the operators' HTTP API and web console over any [`Broker`]
//! (extensions §E13).
//!
//! [`router`] builds an [`axum::Router`] an application mounts in its own server (nest it
//! anywhere; the API's paths start with `/api/v1`, the console's with `/console/`), and
//! [`serve`] runs it standalone on a listener (what `taskgate serve` does). Every API answer is
//! JSON; every error is `{"code": "task.not_resumable", "message": "…"}` with its status
//! ([`ApiError`]).
//!
//! The routes, the token each needs and what it reaches are one table, [`endpoints`] (its
//! source is the list to read): the router is built from it, the OpenAPI document
//! ([`openapi::document`], served at `GET /api/v1/openapi.json` without a token) describes its
//! API routes from it and from each handler's annotation (what it does, its parameters and
//! answers), and the rule tests walk it. The API's paths start with `/api/v1`; the console is
//! at `/console/` (`/` and `/console` answer 303 to it).
//!
//! **Console.** A page with three views: the queues (counts by status, oldest ready age,
//! pause and resume buttons), the task list (filters by type, queue, status, owner and business
//! key; paging) and one task (its
//! fields, steps' progress, message and cursor, payload and result, the replay chain, parents
//! and children, cancel, resume and replay buttons); each re-reads its data every 5 s, and an
//! audit view lists the log. No build step and nothing from another origin: the HTML, CSS and
//! plain DOM script are compiled in. The operator enters a token, which the page keeps in the
//! tab's `sessionStorage` and sends as `Authorization: Bearer` to the API, which checks it as
//! for any client; the files themselves hold no data and need none. They are served with a
//! Content-Security-Policy that allows only the console's own script, style and API, and the
//! script writes API values as text only (never as HTML).
//!
//! Task views render `payload`, `result` and `cursor` as JSON when the bytes are JSON, else as
//! base64, with `payload_encoding` (`json` / `base64` / null) and the same for the others;
//! times are RFC 3339 in UTC. `taskgate --json` prints the same [`TaskView`].
//!
//! **Bodies.** Only replay takes a body: optional, and JSON with `Content-Type:
//! application/json` (or `application/*+json`); a body with another or no content type is a
//! 415 (`input.unsupported_media_type`), never ignored. The other mutations take none: a
//! non-empty body is a 400.
//!
//! **Slow and many clients** ([`Limits`], set with [`AdminConfig::with_limits`]). [`serve`]
//! closes a connection whose request line and headers do not arrive within
//! [`Limits::header_timeout`] (default 10 s, counted from the connection's start or its
//! previous answer, so it also ends idle kept-alive connections), and holds at most
//! [`Limits::max_connections`] open (default: the open-files limit less [`RESERVED_FDS`]);
//! further connections wait unaccepted in the listen backlog ([`bind`] chooses it, default
//! [`DEFAULT_BACKLOG`] in `taskgate serve`) until one closes. The [`router`] reads each
//! body whole before its handler, within [`Limits::body_timeout`] (default 30 s; else 408
//! `request.timeout` and the connection closes) and [`MAX_BODY_BYTES`] (else 413). An
//! application that mounts the router in its own server keeps the body timeout and sets the
//! others in that server.
//!
//! **Authentication.** Every request carries `Authorization: Bearer <secret>` of a configured
//! [`Token`] ([`AdminConfig`]): none or an unknown one is 401, a read token on a mutation 403.
//! The scheme is case-insensitive (`bearer` works, RFC 7235).
//! Secrets are compared in constant time. A token bound to an owner
//! ([`Token::for_owner`]) lists, reads, cancels, resumes and replays only that owner's tasks;
//! another owner's task answers 404 (never 403, which would confirm it exists), and the
//! endpoints that span every owner (queues, stats, audit) answer 403.
//!
//! **Rules as tests.** [`endpoints`] lists every route with the token it needs ([`Access`])
//! and what it reaches ([`Reach`]); the router is built from the same table. With the
//! `testkit` feature, `taskgate_admin::testkit` holds the access rules above as named rule
//! functions that walk that table over HTTP, and `admin_rule_tests!(factory)` makes one test
//! per rule for a backend.
//!
//! **Audit.** Every mutation runs through [`Broker::audited`]: the backend writes one record
//! (the token's name, the action, the task or queue, the broker's time, the outcome) in the
//! same transaction as the change, or alone with the error's code when the contract rejects
//! the action (cancel of a finished task, resume of a completed one). Requests refused before
//! reaching the broker (bad input, 401, 403, another owner's 404) write no record.
//!
//! ```no_run
//! use std::sync::Arc;
//! use taskgate::{Broker, BrokerOptions};
//! use taskgate_admin::{AdminConfig, Token};
//!
//! # async fn demo(broker: Arc<dyn Broker>) -> Result<(), Box<dyn std::error::Error>> {
//! broker.init(BrokerOptions::default()).await?;
//! let config = AdminConfig::from_specs(["ops:write=change-me-to-a-long-secret"])?;
//! let listener = taskgate_admin::bind("127.0.0.1:8080", taskgate_admin::DEFAULT_BACKLOG).await?;
//! taskgate_admin::serve(listener, broker, config, std::future::pending()).await?;
//! # Ok(()) }
//! ```

mod auth;
mod body;
mod console;
mod error;
mod limits;
pub mod openapi;
mod routes;
mod server;
#[cfg(feature = "testkit")]
pub mod testkit;
mod view;

use std::sync::Arc;

use axum::routing::{on, MethodFilter, MethodRouter};
use axum::Router;
use taskgate::Broker;

pub use auth::{split_token_list, AdminConfig, Scope, Token, TokenError, MIN_SECRET_BYTES};
pub use body::MAX_BODY_BYTES;
pub use error::ApiError;
pub use limits::{
    Limits, DEFAULT_BACKLOG, DEFAULT_BODY_TIMEOUT, DEFAULT_HEADER_TIMEOUT, MAX_DEFAULT_CONNECTIONS,
    RESERVED_FDS,
};
pub use routes::{DEFAULT_PER_PAGE, MAX_PER_PAGE};
pub use server::{bind, serve};
pub use view::{
    AuditPage, AuditView, Encoding, QueueOverview, QueueView, StatsView, TaskPage, TaskView,
    MAX_CHILDREN,
};

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) broker: Arc<dyn Broker>,
    pub(crate) config: Arc<AdminConfig>,
}

/// The admin API over `broker` (initialised by the caller), accepting `config`'s tokens.
///
/// Paths start with `/api/v1`; unknown paths answer a JSON 404 (`route.not_found`), a known
/// path with the wrong method a JSON 405. Every request's body is read whole before its
/// handler runs, within [`Limits::body_timeout`] (else 408) and [`MAX_BODY_BYTES`] (else 413).
/// The routes are [`endpoints`], built from the same table.
pub fn router(broker: Arc<dyn Broker>, config: AdminConfig) -> Router {
    let body_timeout = config.limits.body_timeout;
    let state = AppState { broker, config: Arc::new(config) };
    let mut router = Router::new();
    for route in routes() {
        router = router.route(route.endpoint.path, route.handler);
    }
    router
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(body_timeout, body::read_within_limits))
        .with_state(state)
}

/// An endpoint's HTTP method.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Method {
    /// `GET` (a read; `HEAD` is answered too).
    Get,
    /// `POST` (a mutation).
    Post,
}

impl Method {
    /// The method's name: `GET`, `POST`.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
        }
    }
}

/// The token an endpoint needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// None (the console's files, the OpenAPI document: no data).
    Public,
    /// Any configured token.
    Read,
    /// A write token (a read token gets 403).
    Write,
}

/// What an endpoint reaches, which decides what an owner-bound token gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// No task data.
    Nothing,
    /// The task its `{id}` segment names: another owner's task answers the 404 of a missing
    /// task.
    Task,
    /// A listing of tasks: an owner-bound token lists only its owner's.
    OwnTasks,
    /// Data of every owner (queues, stats, audit): an owner-bound token gets 403.
    AllOwners,
}

/// One route the [`router`] serves: method, path (with `{id}` or `{queue}` segments), the
/// token it needs and what it reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The method.
    pub method: Method,
    /// The path, as the router matches it.
    pub path: &'static str,
    /// The token it needs.
    pub access: Access,
    /// What it reaches.
    pub reach: Reach,
}

/// Every route the [`router`] serves, from the table the router is built from (`routes` in
/// this file: method, path, [`Access`], [`Reach`], handler, and the handler's OpenAPI
/// description), so a new endpoint is listed here, held to the rule tests that walk this list
/// and described in the OpenAPI document by construction.
pub fn endpoints() -> Vec<Endpoint> {
    routes().into_iter().map(|route| route.endpoint).collect()
}

/// One row of the routing table: the endpoint, how the OpenAPI document describes it (the
/// handler's `#[utoipa::path]`; none for the console's files and the document itself), and
/// its handler.
pub(crate) struct Route {
    pub(crate) endpoint: Endpoint,
    pub(crate) doc: Option<openapi::Doc>,
    handler: MethodRouter<AppState>,
}

/// The routing table.
pub(crate) fn routes() -> Vec<Route> {
    use openapi::doc;
    use routes as r;
    use Access::{Public, Read, Write};
    use Method::{Get, Post};
    use Reach::{AllOwners, Nothing, OwnTasks, Task};
    vec![
        route(Get, "/api/v1/tasks", Read, OwnTasks, r::list_tasks, doc::<r::__path_list_tasks>()),
        route(Get, "/api/v1/tasks/{id}", Read, Task, r::get_task, doc::<r::__path_get_task>()),
        route(
            Post,
            "/api/v1/tasks/{id}/cancel",
            Write,
            Task,
            r::cancel_task,
            doc::<r::__path_cancel_task>(),
        ),
        route(
            Post,
            "/api/v1/tasks/{id}/resume",
            Write,
            Task,
            r::resume_task,
            doc::<r::__path_resume_task>(),
        ),
        route(
            Post,
            "/api/v1/tasks/{id}/replay",
            Write,
            Task,
            r::replay_task,
            doc::<r::__path_replay_task>(),
        ),
        route(
            Get,
            "/api/v1/queues",
            Read,
            AllOwners,
            r::list_queues,
            doc::<r::__path_list_queues>(),
        ),
        route(
            Post,
            "/api/v1/queues/{queue}/pause",
            Write,
            AllOwners,
            r::pause_queue,
            doc::<r::__path_pause_queue>(),
        ),
        route(
            Post,
            "/api/v1/queues/{queue}/resume",
            Write,
            AllOwners,
            r::resume_queue,
            doc::<r::__path_resume_queue>(),
        ),
        route(Get, "/api/v1/stats", Read, AllOwners, r::stats, doc::<r::__path_stats>()),
        route(Get, "/api/v1/audit", Read, AllOwners, r::audit, doc::<r::__path_audit>()),
        route(Get, "/api/v1/openapi.json", Public, Nothing, r::openapi, None),
        route(Get, "/", Public, Nothing, console::to_console, None),
        route(Get, "/console", Public, Nothing, console::to_console, None),
        route(Get, "/console/", Public, Nothing, console::index, None),
        route(Get, "/console/console.js", Public, Nothing, console::script, None),
        route(Get, "/console/console.css", Public, Nothing, console::style, None),
    ]
}

fn route<H, T>(
    method: Method,
    path: &'static str,
    access: Access,
    reach: Reach,
    handler: H,
    doc: Option<openapi::Doc>,
) -> Route
where
    H: axum::handler::Handler<T, AppState>,
    T: 'static,
{
    let filter = match method {
        Method::Get => MethodFilter::GET,
        Method::Post => MethodFilter::POST,
    };
    Route { endpoint: Endpoint { method, path, access, reach }, doc, handler: on(filter, handler) }
}
