//! Fakes of Exa (`POST /search`), Brave Search (`GET /res/v1/web/search`) and SearXNG
//! (`GET /search?format=json`) on one loopback port, answering in each one's documented wire
//! format, errors included, and recording what they were sent.

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::task::JoinHandle;

/// Keys the fakes accept.
pub const EXA_KEY: &str = "exa-test-key-5d1c";
pub const BRAVE_KEY: &str = "brave-test-key-77aa";

/// One request as received.
#[derive(Clone, Debug)]
pub struct Seen {
    pub engine: &'static str,
    pub headers: HeaderMap,
    pub query: HashMap<String, String>,
    pub body: Value,
}

/// A failure the next request of an engine gets.
#[derive(Clone, Debug)]
pub enum Fault {
    RateLimited { retry_after: &'static str },
    ServerError,
}

#[derive(Default)]
struct Shared {
    seen: Mutex<Vec<Seen>>,
    faults: Mutex<Vec<(&'static str, Fault)>>,
}

pub struct FakeEngines {
    base_url: String,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

impl Drop for FakeEngines {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeEngines {
    pub async fn start() -> Self {
        let shared = Arc::new(Shared::default());
        let app = Router::new()
            .route("/search", post(exa).get(searxng))
            .route("/res/v1/web/search", get(brave))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fake engines");
        let addr = listener.local_addr().expect("address");
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            base_url: format!("http://{addr}"),
            shared,
            server,
        }
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().unwrap().clone()
    }

    /// The next request to `engine` fails with `fault`.
    pub fn fail_next(&self, engine: &'static str, fault: Fault) {
        self.shared.faults.lock().unwrap().push((engine, fault));
    }
}

fn record(
    shared: &Shared,
    engine: &'static str,
    headers: &HeaderMap,
    query: HashMap<String, String>,
    body: Value,
) -> Option<Fault> {
    shared.seen.lock().unwrap().push(Seen {
        engine,
        headers: headers.clone(),
        query,
        body,
    });
    let mut faults = shared.faults.lock().unwrap();
    let at = faults.iter().position(|(e, _)| *e == engine)?;
    Some(faults.remove(at).1)
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

/// Three results per query, on `{site}.example.com` and one on `other.example.org`.
fn urls(q: &str) -> Vec<String> {
    let slug: String = q
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    vec![
        format!("https://news.example.com/{slug}/1"),
        format!("https://docs.example.com/{slug}/2"),
        format!("https://other.example.org/{slug}/3"),
    ]
}

async fn exa(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: axum::Json<Value>,
) -> Response {
    let fault = record(&shared, "exa", &headers, HashMap::new(), body.0.clone());
    // Exa's errors: {"requestId", "error", "tag"} with the HTTP status.
    if header(&headers, "x-api-key") != EXA_KEY {
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({
            "requestId": "req-1", "error": "Invalid API key", "tag": "INVALID_API_KEY"})),
        )
            .into_response();
    }
    if let Some(resp) = fault_response(
        fault,
        json!({"requestId": "req-2", "error": "Rate limit exceeded", "tag": "RATE_LIMITED"}),
    ) {
        return resp;
    }
    let q = body["query"].as_str().unwrap_or_default();
    let n = body["numResults"].as_u64().unwrap_or(10) as usize;
    let results: Vec<Value> = urls(q)
        .into_iter()
        .take(n)
        .enumerate()
        .map(|(i, url)| {
            json!({"id": url, "url": url, "title": format!("Exa result {i} for {q}"),
            "publishedDate": "2026-01-01T00:00:00.000Z", "author": null, "score": 0.9,
            "text": format!("Full page text {i} about {q}.")})
        })
        .collect();
    axum::Json(
        json!({"requestId": "req-3", "resolvedSearchType": "neural", "results": results,
                      "costDollars": {"total": 0.005}}),
    )
    .into_response()
}

async fn brave(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let fault = record(&shared, "brave", &headers, query.clone(), Value::Null);
    // Brave's errors: {"type": "ErrorResponse", "error": {"id", "status", "code", "detail", "meta"}}.
    if header(&headers, "x-subscription-token") != BRAVE_KEY {
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"type": "ErrorResponse", "error": {
            "id": "e1", "status": 401, "code": "SUBSCRIPTION_TOKEN_INVALID",
            "detail": "The provided subscription token is invalid.", "meta": {}}})),
        )
            .into_response();
    }
    if let Some(resp) = fault_response(
        fault,
        json!({"type": "ErrorResponse", "error": {
        "id": "e2", "status": 429, "code": "RATE_LIMITED", "detail": "Request rate limit exceeded for plan.", "meta": {}}}),
    ) {
        return resp;
    }
    let q = query.get("q").cloned().unwrap_or_default();
    let n: usize = query
        .get("count")
        .and_then(|c| c.parse().ok())
        .unwrap_or(20);
    let results: Vec<Value> = urls(&q)
        .into_iter()
        .take(n)
        .enumerate()
        .map(|(i, url)| {
            json!({"type": "search_result", "url": url,
            "title": format!("Brave result {i}"),
            "description": format!("A <strong>snippet</strong> {i} &amp; more"),
            "extra_snippets": [format!("extra {i}")], "language": "en"})
        })
        .collect();
    axum::Json(json!({"type": "search", "query": {"original": q},
                      "web": {"type": "search", "results": results}}))
    .into_response()
}

async fn searxng(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let fault = record(&shared, "searxng", &headers, query.clone(), Value::Null);
    // SearXNG without `json` among its formats answers 403 with an HTML page.
    if query.get("format").map(String::as_str) != Some("json") {
        return (StatusCode::FORBIDDEN, "<html>403 Forbidden</html>").into_response();
    }
    if let Some(resp) = fault_response(fault, json!({"error": "Too Many Requests"})) {
        return resp;
    }
    let q = query.get("q").cloned().unwrap_or_default();
    let results: Vec<Value> = urls(&q)
        .into_iter()
        .enumerate()
        .map(|(i, url)| {
            json!({"url": url, "title": format!("SearXNG result {i}"),
            "content": format!("snippet {i}"), "engine": "wikipedia", "engines": ["wikipedia"],
            "score": 1.0 / (i as f64 + 1.0), "category": "general"})
        })
        .collect();
    axum::Json(
        json!({"query": q, "number_of_results": 0, "results": results, "answers": [],
                      "suggestions": [], "unresponsive_engines": []}),
    )
    .into_response()
}

fn fault_response(fault: Option<Fault>, rate_body: Value) -> Option<Response> {
    match fault? {
        Fault::RateLimited { retry_after } => Some(
            (
                StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", retry_after)],
                axum::Json(rate_body),
            )
                .into_response(),
        ),
        Fault::ServerError => {
            Some((StatusCode::BAD_GATEWAY, "<html>502 Bad Gateway</html>").into_response())
        }
    }
}
