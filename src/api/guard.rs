//! Request hygiene before any handler runs: the `Host` header must name this server, a web
//! page of another origin may not write unless `cors_origins` lists it, and a body must be
//! JSON and arrive whole within `server.body_read_timeout_ms`.

use super::AppState;
use super::error::AppError;
use super::error::is_json;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Refuses a `Host` the server was not configured to answer to (400). A page on an attacker's
/// domain that rebinds its DNS name to 127.0.0.1 would otherwise reach a local server with the
/// browser's blessing.
pub(super) async fn check_host(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let allowed = &state.settings.allowed_hosts;
    if allowed.iter().any(|h| h == "*") {
        return next.run(req).await;
    }
    // HTTP/2 carries the host in the URI's authority instead of a header.
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned)
        .or_else(|| req.uri().authority().map(|a| a.as_str().to_owned()))
        .unwrap_or_default();
    if allowed.iter().any(|h| *h == host_name(&host)) {
        return next.run(req).await;
    }
    AppError::BadRequest(format!(
        "Host '{host}' is not one this server answers to (server.allowed_hosts)"
    ))
    .into_response()
}

/// The host without its port, lower-cased (`[::1]:2024` → `[::1]`).
fn host_name(host: &str) -> String {
    let name = if host.starts_with('[') {
        host.split_inclusive(']').next().unwrap_or(host)
    } else {
        host.rsplit_once(':').map_or(host, |(name, _)| name)
    };
    name.to_ascii_lowercase()
}

/// Refuses a write (any method but GET, HEAD and OPTIONS) that a browser says comes from a
/// page of another origin, unless `server.cors_origins` lists that origin (or is `["*"]`).
/// CORS keeps such pages from reading answers, not from sending requests: a form or a
/// `no-cors` fetch needs no preflight, so without this a page on any site could create
/// threads and runs on a server on the visitor's machine. The check holds on keyed servers too
/// (a browser may hold a cookie-less key in a page of its own origin, never in another's).
/// Clients that are not browsers send neither `Origin` nor `Sec-Fetch-Site` and pass.
pub(super) async fn refuse_cross_site_writes(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    // A WebSocket opens with a GET, but commands on it start runs: it is a write.
    let safe = matches!(
        *req.method(),
        axum::http::Method::GET | axum::http::Method::HEAD | axum::http::Method::OPTIONS
    ) && !is_websocket(&req);
    if safe || !is_cross_site(&req) {
        return next.run(req).await;
    }
    let origin = header_text(&req, header::ORIGIN).unwrap_or_default();
    let listed = state
        .settings
        .cors_origins
        .iter()
        .any(|o| o == "*" || o.trim_end_matches('/').eq_ignore_ascii_case(origin));
    if listed {
        return next.run(req).await;
    }
    let shown = if origin.is_empty() { "(none)" } else { origin };
    AppError::Forbidden(format!(
        "Cross-site request refused: origin {shown} is not in server.cors_origins"
    ))
    .into_response()
}

/// Whether the browser marks the request as sent by a page of another origin: `Sec-Fetch-Site`
/// (`cross-site`, `same-site`) when present, else an `Origin` whose host is not the `Host`.
fn is_cross_site(req: &Request) -> bool {
    if let Some(site) = header_text(req, "sec-fetch-site") {
        return matches!(site, "cross-site" | "same-site");
    }
    let Some(origin) = header_text(req, header::ORIGIN) else {
        return false;
    };
    let host = header_text(req, header::HOST)
        .map(str::to_owned)
        .or_else(|| req.uri().authority().map(|a| a.as_str().to_owned()))
        .unwrap_or_default();
    // `Origin: null` (sandboxed frames, files) never matches.
    let origin_host = origin.split_once("://").map_or("", |(_, rest)| rest);
    !origin_host.eq_ignore_ascii_case(&host)
}

/// Whether the request asks to become a WebSocket.
pub(super) fn is_websocket(req: &Request) -> bool {
    header_text(req, header::UPGRADE).is_some_and(|u| u.eq_ignore_ascii_case("websocket"))
}

fn header_text(req: &Request, name: impl header::AsHeaderName) -> Option<&str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

/// Reads a request's body within the time limit (408 otherwise), so a client that announces a
/// large body and never sends it, or trickles it, cannot hold a connection and a task forever.
/// Over-long bodies are a 413 here already.
pub(super) async fn read_body_in_time(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let (parts, body) = req.into_parts();
    let limit = state.settings.max_body_bytes;
    let read = axum::body::to_bytes(body, limit);
    let bytes = match tokio::time::timeout(state.settings.body_read_timeout, read).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(error)) if too_large(&error) => {
            return AppError::TooLarge("Request body is too large".into()).into_response();
        }
        Ok(Err(error)) => {
            return AppError::BadRequest(format!("Could not read the request body: {error}"))
                .into_response();
        }
        Err(_) => {
            return AppError::Timeout("The request body was not sent in time".into())
                .into_response();
        }
    };
    // A body that is not declared JSON is what a page of any origin can send without a
    // preflight (text/plain, a form, or no type at all): refused on every route, whether it
    // reads the body as `Body<T>` or as raw bytes.
    let declared = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    if !bytes.iter().all(u8::is_ascii_whitespace) && !declared.is_some_and(is_json) {
        let got = declared.unwrap_or("none");
        return AppError::UnsupportedMedia(format!(
            "Request bodies must be JSON: send Content-Type: application/json (got {got})"
        ))
        .into_response();
    }
    // What a body costs once parsed, on every route and protocol (`body_shape`).
    if let Err(refused) = super::body_shape::check_values(&bytes) {
        return refused.into_response();
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

fn too_large(error: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::{host_name, is_json};

    #[test]
    fn json_content_types() {
        assert!(is_json("application/json"));
        assert!(is_json("Application/JSON; charset=utf-8"));
        assert!(is_json("application/merge-patch+json"));
        assert!(!is_json("text/plain"));
        assert!(!is_json("text/x+json"));
        assert!(!is_json("multipart/form-data; boundary=x"));
    }

    #[test]
    fn host_names_lose_their_port() {
        assert_eq!(host_name("127.0.0.1:2024"), "127.0.0.1");
        assert_eq!(host_name("LocalHost"), "localhost");
        assert_eq!(host_name("[::1]:8080"), "[::1]");
        assert_eq!(host_name("[::1]"), "[::1]");
    }
}
