//! The OpenAPI 3.1 document of the API, generated from the handlers' and views' annotations
//! (utoipa), served at `/api/v1/openapi.json`.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::error::ApiError;
use crate::routes;
use crate::view::{
    AuditPage, AuditView, Encoding, QueueList, QueueView, StatsView, TaskPage, TaskView,
};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "taskgate admin API",
        description = "List, inspect, cancel, resume and replay tasks; pause and resume queues; \
                       read the audit log. Every request needs `Authorization: Bearer <token>`."
    ),
    paths(
        routes::list_tasks,
        routes::get_task,
        routes::cancel_task,
        routes::resume_task,
        routes::replay_task,
        routes::list_queues,
        routes::pause_queue,
        routes::resume_queue,
        routes::stats,
        routes::audit,
    ),
    components(schemas(
        ApiError, AuditPage, AuditView, Encoding, QueueList, QueueView, StatsView, TaskPage,
        TaskView
    )),
    modifiers(&BearerAuth),
    security(("bearer" = []))
)]
struct ApiDoc;

/// Declares the bearer scheme every operation uses.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let scheme = HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build();
        components.add_security_scheme("bearer", SecurityScheme::Http(scheme));
    }
}

/// The API's OpenAPI document.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}
