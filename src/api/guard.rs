//! Request hygiene before any handler runs: the `Host` header must name this server, and a
//! body must arrive whole within `server.body_read_timeout_ms`.

use super::AppState;
use super::error::AppError;
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
    use super::host_name;

    #[test]
    fn host_names_lose_their_port() {
        assert_eq!(host_name("127.0.0.1:2024"), "127.0.0.1");
        assert_eq!(host_name("LocalHost"), "localhost");
        assert_eq!(host_name("[::1]:8080"), "[::1]");
        assert_eq!(host_name("[::1]"), "[::1]");
    }
}
