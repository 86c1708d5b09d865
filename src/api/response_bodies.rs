//! Response shapes shared by handlers: SSE and streamed-JSON bodies with the reference server's
//! headers.

use axum::body::Body as HttpBody;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;

pub(super) fn set_header(headers: &mut HeaderMap, name: header::HeaderName, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        headers.insert(name, v);
    }
}

/// An SSE response with the reference's headers.
pub(super) fn sse_response(body: HttpBody, paths: Option<(String, String)>) -> Response {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    set_header(
        headers,
        header::CONTENT_TYPE,
        "text/event-stream; charset=utf-8",
    );
    set_header(headers, header::CACHE_CONTROL, "no-store");
    set_header(headers, header::CONNECTION, "keep-alive");
    set_header(
        headers,
        header::HeaderName::from_static("x-accel-buffering"),
        "no",
    );
    if let Some((location, content_location)) = paths {
        set_header(headers, header::LOCATION, &location);
        set_header(headers, header::CONTENT_LOCATION, &content_location);
    }
    response
}

pub(super) fn json_response(body: HttpBody, paths: Option<(String, String)>) -> Response {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    set_header(headers, header::CONTENT_TYPE, "application/json");
    if let Some((location, content_location)) = paths {
        set_header(headers, header::LOCATION, &location);
        set_header(headers, header::CONTENT_LOCATION, &content_location);
    }
    response
}
