//! A fake Tavily `/search` endpoint on a loopback port, with deterministic results, recorded
//! requests, an in-flight high-water mark and fault injection.

#![allow(dead_code)]

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::task::JoinHandle;

/// The key the fake accepts unless told otherwise.
pub const API_KEY: &str = "tvly-test-key";

/// An injected failure for one call or for every call.
#[derive(Clone, Debug)]
pub enum Fault {
    /// 429, with this `Retry-After` header value if given.
    RateLimited {
        retry_after: Option<String>,
    },
    ServerError,
    Unauthorized,
    /// Never answers.
    Hang,
}

/// One result as the fake serves it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FakeHit {
    pub title: String,
    pub url: String,
    pub content: String,
    pub raw_content: Option<String>,
    pub score: f64,
}

/// What a client sent.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    pub body: Value,
    pub authorization: Option<String>,
}

struct Knobs {
    required_key: Option<String>,
    result_count: usize,
    raw_len: usize,
    shared_urls: usize,
    latency: Duration,
    faults_by_call: HashMap<usize, Fault>,
    fault_always: Option<Fault>,
    overrides: HashMap<String, Vec<FakeHit>>,
    /// Served for any query without an override, in place of the generated pages.
    any_query: Option<Vec<FakeHit>>,
}

impl Default for Knobs {
    fn default() -> Self {
        Self {
            required_key: Some(API_KEY.to_owned()),
            result_count: 5,
            raw_len: 4096,
            shared_urls: 0,
            latency: Duration::ZERO,
            faults_by_call: HashMap::new(),
            fault_always: None,
            overrides: HashMap::new(),
            any_query: None,
        }
    }
}

#[derive(Default)]
struct Shared {
    knobs: Mutex<Knobs>,
    requests: Mutex<Vec<RecordedRequest>>,
    calls: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

impl Shared {
    fn knobs(&self) -> MutexGuard<'_, Knobs> {
        self.knobs.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running fake; the server stops when this is dropped.
pub struct FakeTavily {
    base_url: String,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

impl Drop for FakeTavily {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeTavily {
    pub async fn start() -> Self {
        let shared = Arc::new(Shared::default());
        let app = Router::new()
            .route("/search", post(search))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fake Tavily");
        let addr = listener.local_addr().expect("fake Tavily address");
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

    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Requests received, faulted ones included.
    pub fn calls(&self) -> usize {
        self.shared.calls.load(Ordering::SeqCst)
    }

    /// Most requests being handled at the same moment.
    pub fn max_in_flight(&self) -> usize {
        self.shared.max_in_flight.load(Ordering::SeqCst)
    }

    /// `None` accepts any (or no) key.
    pub fn require_key(&self, key: Option<&str>) {
        self.shared.knobs().required_key = key.map(str::to_owned);
    }

    pub fn set_result_count(&self, count: usize) {
        self.shared.knobs().result_count = count;
    }

    /// Length of generated `raw_content`; 0 serves `null`.
    pub fn set_raw_content_len(&self, len: usize) {
        self.shared.knobs().raw_len = len;
    }

    /// The first `n` results of every query use the same URLs (`https://example.com/shared/{i}`).
    pub fn share_urls(&self, n: usize) {
        self.shared.knobs().shared_urls = n;
    }

    pub fn set_latency(&self, latency: Duration) {
        self.shared.knobs().latency = latency;
    }

    /// Fails the `call`-th request (1-based, counted across all queries).
    pub fn fail_call(&self, call: usize, fault: Fault) {
        self.shared.knobs().faults_by_call.insert(call, fault);
    }

    pub fn fail_always(&self, fault: Fault) {
        self.shared.knobs().fault_always = Some(fault);
    }

    /// Serves exactly these results for `query`.
    pub fn set_hits(&self, query: &str, hits: Vec<FakeHit>) {
        self.shared.knobs().overrides.insert(query.to_owned(), hits);
    }

    /// Serves these results for every query `set_hits` does not name: pages with something
    /// to say, for a real model whose queries cannot be known in advance.
    pub fn set_hits_for_any_query(&self, hits: Vec<FakeHit>) {
        self.shared.knobs().any_query = Some(hits);
    }
}

/// Lowercase alphanumerics, every other run of characters becomes one `-`.
pub fn slug(query: &str) -> String {
    let mut out = String::new();
    for c in query.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_owned()
}

/// Deterministic page text mentioning `query`, exactly `len` (ASCII) characters.
pub fn raw_text(query: &str, len: usize) -> String {
    let mut text = String::with_capacity(len + 64);
    let mut n = 0;
    while text.len() < len {
        n += 1;
        text.push_str(&format!("Paragraph {n} of a page about {query}. "));
    }
    text.truncate(len);
    text
}

/// The `i`-th (1-based) default result for `query`.
pub fn default_hit(query: &str, i: usize, raw_len: usize) -> FakeHit {
    FakeHit {
        title: format!("{query} result {i}"),
        url: format!("https://example.com/{}/{i}", slug(query)),
        content: format!("Snippet {i} about {query}."),
        raw_content: (raw_len > 0).then(|| raw_text(query, raw_len)),
        score: 1.0 / i as f64,
    }
}

fn hits_for(knobs: &Knobs, query: &str, max_results: usize) -> Vec<FakeHit> {
    if let Some(hits) = knobs.overrides.get(query).or(knobs.any_query.as_ref()) {
        return hits.clone();
    }
    (1..=knobs.result_count.min(max_results))
        .map(|i| {
            let mut hit = default_hit(query, i, knobs.raw_len);
            if i <= knobs.shared_urls {
                hit.url = format!("https://example.com/shared/{i}");
            }
            hit
        })
        .collect()
}

/// Counts a request as in flight for as long as its handler future lives.
struct InFlight(Arc<Shared>);

impl InFlight {
    fn enter(shared: &Arc<Shared>) -> Self {
        let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        shared.max_in_flight.fetch_max(now, Ordering::SeqCst);
        Self(shared.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn search(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let call = shared.calls.fetch_add(1, Ordering::SeqCst) + 1;
    let _guard = InFlight::enter(&shared);
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    shared
        .requests
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(RecordedRequest {
            body: body.clone(),
            authorization: authorization.clone(),
        });
    let (latency, fault, required_key) = {
        let knobs = shared.knobs();
        let fault = knobs
            .faults_by_call
            .get(&call)
            .or(knobs.fault_always.as_ref())
            .cloned();
        (knobs.latency, fault, knobs.required_key.clone())
    };
    tokio::time::sleep(latency).await;
    if let Some(fault) = fault {
        return fault_response(fault).await;
    }
    if !key_ok(required_key.as_deref(), authorization.as_deref()) {
        return unauthorized();
    }
    answer(&shared, &body)
}

fn key_ok(required: Option<&str>, authorization: Option<&str>) -> bool {
    match required {
        None => true,
        Some(key) => authorization.and_then(|a| a.strip_prefix("Bearer ")) == Some(key),
    }
}

fn unauthorized() -> Response {
    let body = json!({"detail": {"error": "Unauthorized: missing or invalid API key."}});
    (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response()
}

async fn fault_response(fault: Fault) -> Response {
    match fault {
        Fault::RateLimited { retry_after } => {
            let body = axum::Json(json!({"detail": {"error": "Too many requests"}}));
            let mut response = (StatusCode::TOO_MANY_REQUESTS, body).into_response();
            if let Some(value) = retry_after.and_then(|v| v.parse().ok()) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
            response
        }
        Fault::ServerError => (StatusCode::INTERNAL_SERVER_ERROR, "internal error").into_response(),
        Fault::Unauthorized => unauthorized(),
        Fault::Hang => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            StatusCode::GATEWAY_TIMEOUT.into_response()
        }
    }
}

fn answer(shared: &Shared, body: &Value) -> Response {
    let Some(query) = body.get("query").and_then(Value::as_str) else {
        let detail = json!({"detail": {"error": "query is required"}});
        return (StatusCode::BAD_REQUEST, axum::Json(detail)).into_response();
    };
    let max_results = body
        .get("max_results")
        .and_then(Value::as_u64)
        .map_or(5, |n| n as usize);
    let results = hits_for(&shared.knobs(), query, max_results);
    axum::Json(json!({
        "query": query,
        "follow_up_questions": null,
        "answer": null,
        "images": [],
        "results": results,
        "response_time": 0.01,
    }))
    .into_response()
}
