//! The web console: three static files (`admin/console/`) embedded in the binary with
//! `include_str!` — no build step, nothing fetched from elsewhere. They need no token: they
//! hold no data. The page asks the operator for a bearer token, keeps it in the tab's
//! `sessionStorage`, and calls the JSON API with it, which checks it as for any client.
//!
//! Every answer carries a Content-Security-Policy that allows only the console's own script,
//! style and API (no inline script, no framing, no other origin), and the script writes every
//! value from the API as text, never as HTML.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// The page.
pub(crate) const INDEX_HTML: &str = include_str!("../console/index.html");
/// The app (plain DOM JavaScript).
pub(crate) const CONSOLE_JS: &str = include_str!("../console/console.js");
/// The style sheet.
pub(crate) const CONSOLE_CSS: &str = include_str!("../console/console.css");

/// The policy of every console answer: the console's own files and API only.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
    style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let headers = [
        (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
        // Small files: revalidate each time, so a new binary's console shows at once.
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY)),
        (header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        (header::REFERRER_POLICY, HeaderValue::from_static("no-referrer")),
    ];
    (StatusCode::OK, headers, body).into_response()
}

/// `GET /console/`: the page.
pub(crate) async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

/// `GET /console/console.js`.
pub(crate) async fn script() -> Response {
    asset("text/javascript; charset=utf-8", CONSOLE_JS)
}

/// `GET /console/console.css`.
pub(crate) async fn style() -> Response {
    asset("text/css; charset=utf-8", CONSOLE_CSS)
}

/// `GET /` and `GET /console`: a redirect to `console/`, relative so that it works wherever
/// the router is mounted (the page finds the API at `../api/v1/` the same way).
pub(crate) async fn to_console() -> Response {
    (StatusCode::SEE_OTHER, [(header::LOCATION, HeaderValue::from_static("console/"))])
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The script builds the page from text only: no HTML parsing of anything, no eval.
    #[test]
    fn the_script_never_parses_html_or_code() {
        for sink in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "new Function",
            "setTimeout('",
            "createContextualFragment",
            "srcdoc",
        ] {
            assert!(!CONSOLE_JS.contains(sink), "console.js uses {sink}");
        }
    }

    /// Nothing is loaded from another origin, and the page has no inline script or style.
    #[test]
    fn the_files_load_nothing_from_elsewhere() {
        for (name, text) in [("index.html", INDEX_HTML), ("console.css", CONSOLE_CSS)] {
            assert!(!text.contains("http://") && !text.contains("https://"), "{name}");
            assert!(!text.contains("@import"), "{name}");
        }
        assert!(!CONSOLE_JS.contains("http://") && !CONSOLE_JS.contains("https://"));
        assert!(!INDEX_HTML.contains("<script>") && !INDEX_HTML.contains("style="));
        assert!(INDEX_HTML.contains(r#"<script src="console.js" defer></script>"#));
    }
}
