//! The research app: one page, its scripts and its style, embedded in the binary and served at
//! `/` (`server.web_app`). The page is a client of this API like any other: it sends the key
//! the user gave it, and the API decides what it may see. Serving it needs no key, so its
//! responses carry a strict Content-Security-Policy: only this origin's script, style and
//! API, no frames around it, no form posts elsewhere.

use super::AppState;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

const INDEX: &str = include_str!("index.html");
const SCRIPT: &str = include_str!("app.js");
const MARKDOWN: &str = include_str!("markdown.js");
const STYLE: &str = include_str!("app.css");

/// Where the page's parts are served; all public (no key needed to load the page).
pub const PATHS: [&str; 4] = ["/", "/ui/app.js", "/ui/markdown.js", "/ui/app.css"];

const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(index))
        .route(
            "/ui/app.js",
            get(|| async { asset(SCRIPT, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/ui/markdown.js",
            get(|| async { asset(MARKDOWN, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/ui/app.css",
            get(|| async { asset(STYLE, "text/css; charset=utf-8") }),
        )
}

/// The page, told whether this server wants a key: without one stored, the page asks for it
/// before calling anything.
async fn index(State(state): State<AppState>) -> Response {
    let auth = if state.settings.auth.disabled {
        "none"
    } else {
        "required"
    };
    let page = INDEX.replace("data-auth=\"\"", &format!("data-auth=\"{auth}\""));
    asset(page, "text/html; charset=utf-8")
}

fn asset(body: impl IntoResponse, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // The binary is the version: a new one serves new files, which a cached copy would hide.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // Links to sources open without telling the source which research cited it.
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}
