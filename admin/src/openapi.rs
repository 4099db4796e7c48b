//! The OpenAPI 3.1 document of the API, served at `/api/v1/openapi.json`: the operations of
//! the routing table ([`endpoints`](crate::endpoints)), each described by its handler's
//! `#[utoipa::path]` annotation and doc comment and tagged by its path's first segment, and
//! the views' schemas (utoipa).

use utoipa::openapi::path::{HttpMethod, Operation};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::error::ApiError;
use crate::routes::ReplayBody;
use crate::view::{
    AuditPage, AuditView, Encoding, QueueOverview, QueueView, StatsView, TaskPage, TaskView,
};

/// The document without its operations: they come from the routing table.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "taskgate admin API",
        description = "List, inspect, cancel, resume and replay tasks; pause and resume queues; \
                       read the audit log. Every request needs `Authorization: Bearer <token>`."
    ),
    components(schemas(
        ApiError,
        AuditPage,
        AuditView,
        Encoding,
        QueueOverview,
        QueueView,
        ReplayBody,
        StatsView,
        TaskPage,
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

/// How the document describes one route: its handler's `#[utoipa::path]` annotation. The
/// annotation repeats the route's method and path (utoipa requires them);
/// `tests::annotations_match_the_table` holds them equal to the table's.
#[derive(Clone, Copy)]
pub(crate) struct Doc {
    path: fn() -> String,
    methods: fn() -> Vec<HttpMethod>,
    operation: fn() -> Operation,
}

/// The description of the handler whose `#[utoipa::path]` generated `P`.
pub(crate) fn doc<P: utoipa::Path>() -> Option<Doc> {
    Some(Doc { path: P::path, methods: P::methods, operation: P::operation })
}

/// The API's OpenAPI document.
pub fn document() -> utoipa::openapi::OpenApi {
    let mut document = ApiDoc::openapi();
    for route in crate::routes() {
        if let Some(doc) = route.doc {
            let (path, method) = (route.endpoint.path, vec![http_method(route.endpoint.method)]);
            let annotated = (doc.path)() == path && (doc.methods)() == method;
            debug_assert!(annotated, "{path}: #[utoipa::path] names another method or path");
            let mut operation = (doc.operation)();
            operation.tags = Some(vec![tag(path).to_owned()]);
            document.paths.add_path_operation(path, method, operation);
        }
    }
    document
}

/// The tag that groups an operation: its path's first segment after `/api/v1/` (`tasks`,
/// `queues`, `stats`, `audit`).
fn tag(path: &str) -> &str {
    let rest = path.strip_prefix("/api/v1/").unwrap_or(path);
    rest.split('/').next().unwrap_or(rest)
}

fn http_method(method: crate::Method) -> HttpMethod {
    match method {
        crate::Method::Get => HttpMethod::Get,
        crate::Method::Post => HttpMethod::Post,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotations_match_the_table() {
        for route in crate::routes() {
            let Some(doc) = route.doc else { continue };
            let endpoint = route.endpoint;
            let method = vec![http_method(endpoint.method)];
            assert_eq!((doc.path)(), endpoint.path, "{endpoint:?}");
            assert!((doc.methods)() == method, "{endpoint:?}: the annotation's method differs");
        }
    }
}
