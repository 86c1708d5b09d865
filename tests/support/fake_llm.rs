//! Scripted model servers for tests, over real HTTP on loopback: `FakeLlm` speaks OpenAI chat
//! completions (JSON and SSE streaming), `FakeAnthropic` the Anthropic messages API. A responder
//! looks at each request body and picks the reply; the handle records every request and how many
//! were in flight at once. Output is deterministic: ids come from a per-server counter, usage is
//! `10 × messages` input tokens and `7` output tokens.

#![allow(dead_code)]

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::StreamExt;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Picks the reply for a request body.
pub type Responder = Arc<dyn Fn(&Value) -> FakeReply + Send + Sync>;

/// Wraps a closure as a `Responder`.
pub fn responder(f: impl Fn(&Value) -> FakeReply + Send + Sync + 'static) -> Responder {
    Arc::new(f)
}

/// Always the same reply.
pub fn always(reply: FakeReply) -> Responder {
    Arc::new(move |_| reply.clone())
}

/// The replies in order, then the last one forever.
pub fn script(replies: Vec<FakeReply>) -> Responder {
    let next = AtomicUsize::new(0);
    Arc::new(move |_| {
        let i = next
            .fetch_add(1, Ordering::SeqCst)
            .min(replies.len().saturating_sub(1));
        replies.get(i).cloned().unwrap_or(FakeReply::Hang)
    })
}

/// What the fake answers.
#[derive(Clone, Debug)]
pub enum FakeReply {
    Text(String),
    /// `(name, args)` per call; several make parallel calls.
    ToolCalls(Vec<(String, Value)>),
    TextAndToolCalls(String, Vec<(String, Value)>),
    /// Structured output: OpenAI puts the JSON text in `content`; the Anthropic fake answers
    /// with the forced tool's input when the request forces one.
    Json(Value),
    /// One tool call whose arguments are exactly this text (may be malformed JSON).
    RawToolArgs {
        name: String,
        args_text: String,
    },
    Error {
        status: u16,
        body: Value,
        retry_after: Option<String>,
    },
    /// Waits (counted as in flight), then answers.
    Delay(Duration, Box<FakeReply>),
    /// Never answers.
    Hang,
    /// Streams this piece of text forever, ignoring `max_tokens` (non-streaming: hangs).
    Endless(String),
    /// Streams `text`, then `piece` over and over: a small model caught in a loop (OpenAI
    /// format; non-streaming: hangs, as the real server would until its output cap).
    Runaway {
        text: String,
        piece: String,
    },
    /// This exact body with status 200.
    Raw(Value),
    /// These exact chunks as an SSE stream with status 200 (OpenAI format only).
    RawStream(Vec<Value>),
    /// Streams the first frames of this text, then drops the connection mid-stream (no final
    /// chunk): a reset (OpenAI format; non-streaming: the same cut).
    ResetMidStream(String),
}

impl FakeReply {
    pub fn text(text: &str) -> Self {
        Self::Text(text.to_owned())
    }

    pub fn tool_calls(calls: &[(&str, Value)]) -> Self {
        Self::ToolCalls(
            calls
                .iter()
                .map(|(n, a)| ((*n).to_owned(), a.clone()))
                .collect(),
        )
    }

    pub fn delayed(wait: Duration, reply: FakeReply) -> Self {
        Self::Delay(wait, Box::new(reply))
    }

    /// 429 as OpenAI sends it; the text mentions tokens, which must not read as context overflow.
    pub fn rate_limited(retry_after: &str) -> Self {
        Self::Error {
            status: 429,
            body: json!({"error": {
                "message": "Rate limit reached for gpt-4.1 on tokens per min (TPM): Limit 30000, \
                            Used 29500, Requested 1200. Too many tokens; maximum context length \
                            is not the issue. Please try again in 1s.",
                "type": "tokens", "param": null, "code": "rate_limit_exceeded"}}),
            retry_after: Some(retry_after.to_owned()),
        }
    }

    pub fn server_error() -> Self {
        Self::Error {
            status: 500,
            body: json!({"error": {"message": "The server had an error while processing your request.",
                                   "type": "server_error", "param": null, "code": null}}),
            retry_after: None,
        }
    }

    /// llama.cpp's answer when the model half-followed the tool-call format (e.g. two calls in
    /// one turn): its own parser fails and the request gets a 500.
    pub fn llama_parse_error() -> Self {
        Self::Error {
            status: 500,
            body: json!({"error": {"code": 500, "message":
                "The model produced output that does not match the expected peg-native format",
                "type": "server_error"}}),
            retry_after: None,
        }
    }

    /// OpenAI's real context-length body.
    pub fn context_length() -> Self {
        Self::Error {
            status: 400,
            body: json!({"error": {
                "message": "This model's maximum context length is 128000 tokens. However, your \
                            messages resulted in 130412 tokens. Please reduce the length of the messages.",
                "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}),
            retry_after: None,
        }
    }

    pub fn unauthorized() -> Self {
        Self::Error {
            status: 401,
            body: json!({"error": {"message": "Incorrect API key provided.",
                                   "type": "invalid_request_error", "param": null, "code": "invalid_api_key"}}),
            retry_after: None,
        }
    }

    /// Anthropic's 529.
    pub fn overloaded() -> Self {
        Self::Error {
            status: 529,
            body: json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
            retry_after: None,
        }
    }

    /// Anthropic's context-length 400.
    pub fn prompt_too_long() -> Self {
        Self::Error {
            status: 400,
            body: json!({"type": "error", "error": {"type": "invalid_request_error",
                         "message": "prompt is too long: 208397 tokens > 200000 maximum"}}),
            retry_after: None,
        }
    }
}

/// A running fake server.
pub struct FakeLlm {
    shared: Arc<Shared>,
    base_url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeLlm {
    /// An OpenAI-compatible server; `base_url()` ends in `/v1`.
    pub async fn start(responder: Responder) -> Self {
        let router = Router::new().route("/v1/chat/completions", post(openai_handler));
        Self::serve(responder, router, "/v1").await
    }

    /// llama.cpp's server: chat completions and `GET /props` with this context window.
    pub async fn start_llama_cpp(responder: Responder, n_ctx: u64) -> Self {
        let props = json!({"default_generation_settings": {"n_ctx": n_ctx, "params": {}},
                           "total_slots": 1, "model_path": "/models/small.gguf"});
        let router = Router::new()
            .route("/v1/chat/completions", post(openai_handler))
            .route(
                "/props",
                axum::routing::get(move || {
                    let props = props.clone();
                    async move { axum::Json(props) }
                }),
            );
        Self::serve(responder, router, "/v1").await
    }

    /// Azure OpenAI: chat completions at `/openai/deployments/{deployment}/chat/completions`,
    /// which need `?api-version=` and the key in `api-key` (`AZURE_KEY`), answering Azure's own
    /// errors otherwise. `base_url()` is the resource's endpoint.
    pub async fn start_azure(responder: Responder) -> Self {
        let router = Router::new().route(
            "/openai/deployments/{deployment}/chat/completions",
            post(azure_handler),
        );
        Self::serve(responder, router, "").await
    }

    /// OpenAI's Responses API at `/v1/responses`. The responder sees the request as chat
    /// completions (`messages`, function `tools`, `response_format`) so scripted workloads work
    /// unchanged; its reply is answered as a Responses `output` (a `Raw` reply is sent as is),
    /// streamed as `response.*` events when asked.
    pub async fn start_responses(responder: Responder) -> Self {
        let router = Router::new()
            .route("/v1/responses", post(responses_handler))
            .route("/v1/chat/completions", post(openai_handler));
        Self::serve(responder, router, "/v1").await
    }

    /// Google's Gemini API at `/v1beta/models/{model}:generateContent` (and
    /// `:streamGenerateContent?alt=sse`). The responder sees the request as chat completions;
    /// its reply is answered as a `GenerateContentResponse` (a `Raw` reply is sent as is).
    /// `base_url()` is the API's root.
    pub async fn start_gemini(responder: Responder) -> Self {
        let router = Router::new().route("/v1beta/models/{*call}", post(gemini_handler));
        Self::serve(responder, router, "").await
    }

    /// Query strings of the requests received.
    pub fn queries(&self) -> Vec<String> {
        self.shared.queries.lock().unwrap().clone()
    }

    async fn serve(responder: Responder, router: Router<Arc<Shared>>, path: &str) -> Self {
        let shared = Arc::new(Shared::new(responder));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let app = router.with_state(Arc::clone(&shared));
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            shared,
            base_url: format!("http://{addr}{path}"),
            task,
        }
    }

    pub fn base_url(&self) -> String {
        self.base_url.clone()
    }

    /// Every request body received, in arrival order.
    pub fn requests(&self) -> Vec<Value> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// The headers of every request, in arrival order.
    pub fn headers(&self) -> Vec<HeaderMap> {
        self.shared.headers.lock().unwrap().clone()
    }

    pub fn calls(&self) -> usize {
        self.shared.calls.load(Ordering::SeqCst)
    }

    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::SeqCst)
    }

    /// The most requests ever in flight at once.
    pub fn max_in_flight(&self) -> usize {
        self.shared.max_in_flight.load(Ordering::SeqCst)
    }

    /// Pause before each streamed chunk of an OpenAI answer (default: none, the whole answer
    /// at once). Paces a long streamed answer like a model generating tokens.
    pub fn set_chunk_interval(&self, every: Duration) {
        *self.shared.chunk_interval.lock().unwrap() = every;
    }

    /// Keep request bodies and headers for `requests()`/`headers()` (on by default). A load
    /// benchmark turns it off: tens of thousands of bodies would only cost memory.
    pub fn set_recording(&self, on: bool) {
        self.shared.record.store(on, Ordering::SeqCst);
    }
}

/// An Anthropic-shaped server (`/v1/messages`); `base_url()` has no `/v1`.
pub struct FakeAnthropic;

impl FakeAnthropic {
    pub async fn start(responder: Responder) -> FakeLlm {
        let router = Router::new().route("/v1/messages", post(anthropic_handler));
        FakeLlm::serve(responder, router, "").await
    }
}

struct Shared {
    responder: Responder,
    requests: Mutex<Vec<Value>>,
    headers: Mutex<Vec<HeaderMap>>,
    queries: Mutex<Vec<String>>,
    record: AtomicBool,
    chunk_interval: Mutex<Duration>,
    calls: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    ids: AtomicUsize,
}

impl Shared {
    fn new(responder: Responder) -> Self {
        Self {
            responder,
            requests: Mutex::default(),
            headers: Mutex::default(),
            queries: Mutex::default(),
            record: AtomicBool::new(true),
            chunk_interval: Mutex::new(Duration::ZERO),
            calls: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            ids: AtomicUsize::new(0),
        }
    }

    fn next_id(&self) -> usize {
        self.ids.fetch_add(1, Ordering::SeqCst) + 1
    }
}

/// Counts a request in flight until dropped (also when the client goes away mid-request).
struct InFlight(Arc<Shared>);

impl InFlight {
    fn enter(shared: &Arc<Shared>, headers: HeaderMap, body: &Value) -> Self {
        if shared.record.load(Ordering::Relaxed) {
            shared.requests.lock().unwrap().push(body.clone());
            shared.headers.lock().unwrap().push(headers);
        }
        shared.calls.fetch_add(1, Ordering::SeqCst);
        let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        shared.max_in_flight.fetch_max(now, Ordering::SeqCst);
        Self(Arc::clone(shared))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs delays and hangs; returns the reply to send.
async fn settle(mut reply: FakeReply, streaming: bool) -> FakeReply {
    loop {
        reply = match reply {
            FakeReply::Delay(wait, inner) => {
                tokio::time::sleep(wait).await;
                *inner
            }
            FakeReply::Hang => std::future::pending().await,
            FakeReply::Endless(_) | FakeReply::Runaway { .. } if !streaming => {
                std::future::pending().await
            }
            other => return other,
        }
    }
}

fn error_response(status: u16, body: Value, retry_after: Option<String>) -> Response {
    let status = StatusCode::from_u16(status).unwrap();
    let mut response = (status, axum::Json(body)).into_response();
    if let Some(wait) = retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, wait.parse().unwrap());
    }
    response
}

fn sse_response(frames: Vec<String>) -> Response {
    let stream = futures::stream::iter(frames).map(|f| Ok::<_, Infallible>(Bytes::from(f)));
    sse_body(Body::from_stream(stream))
}

/// `frames`, then an error in the body: the server drops the connection mid-response.
fn reset_sse_response(frames: Vec<String>) -> Response {
    let head = futures::stream::iter(frames).map(|f| Ok::<_, std::io::Error>(Bytes::from(f)));
    let cut = futures::stream::once(async {
        Err::<Bytes, _>(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "connection reset by the fake",
        ))
    });
    sse_body(Body::from_stream(head.chain(cut)))
}

/// Like `sse_response`, with a pause before every frame.
fn paced_sse_response(frames: Vec<String>, every: Duration) -> Response {
    let stream = futures::stream::iter(frames).then(move |f| async move {
        tokio::time::sleep(every).await;
        Ok::<_, Infallible>(Bytes::from(f))
    });
    sse_body(Body::from_stream(stream))
}

fn sse_body(body: Body) -> Response {
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(body)
        .unwrap()
}

/// An SSE stream repeating `frame` until the client hangs up.
fn endless(frame: String) -> Response {
    endless_after(Vec::new(), frame)
}

/// `first`, then `frame` repeated until the client hangs up.
fn endless_after(first: Vec<String>, frame: String) -> Response {
    let head = futures::stream::iter(first).map(|f| Ok::<_, Infallible>(Bytes::from(f)));
    let tail = futures::stream::unfold(frame, |frame| async move {
        tokio::task::yield_now().await;
        Some((Ok::<_, Infallible>(Bytes::from(frame.clone())), frame))
    });
    sse_body(Body::from_stream(head.chain(tail)))
}

/// The text and `(name, args text)` calls a reply stands for.
fn parts(reply: FakeReply) -> (String, Vec<(String, String)>) {
    let calls =
        |calls: Vec<(String, Value)>| calls.into_iter().map(|(n, a)| (n, a.to_string())).collect();
    match reply {
        FakeReply::Text(text) => (text, Vec::new()),
        FakeReply::ToolCalls(list) => (String::new(), calls(list)),
        FakeReply::TextAndToolCalls(text, list) => (text, calls(list)),
        FakeReply::Json(value) => (value.to_string(), Vec::new()),
        FakeReply::RawToolArgs { name, args_text } => (String::new(), vec![(name, args_text)]),
        other => panic!("no text/tool parts in {other:?}"),
    }
}

/// `text` in pieces of `size` characters.
fn pieces(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

fn input_tokens(request: &Value) -> usize {
    10 * request["messages"].as_array().map_or(0, Vec::len)
}

const OUTPUT_TOKENS: usize = 7;

// ---- OpenAI chat completions ----

/// The key the Azure fake accepts.
pub const AZURE_KEY: &str = "azure-test-key-93f1";

async fn azure_handler(
    State(shared): State<Arc<Shared>>,
    axum::extract::Path(deployment): axum::extract::Path<String>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    headers: HeaderMap,
    axum::Json(mut request): axum::Json<Value>,
) -> Response {
    let raw = query.clone().unwrap_or_default();
    let refuse = |shared: &Shared| shared.queries.lock().unwrap().push(raw.clone());
    if !raw.contains("api-version=") {
        refuse(&shared);
        return error_response(
            404,
            json!({"error": {"code": "404", "message": "Resource not found"}}),
            None,
        );
    }
    if headers.get("api-key").and_then(|v| v.to_str().ok()) != Some(AZURE_KEY) {
        refuse(&shared);
        return error_response(
            401,
            json!({"error": {"code": "401", "message":
            "Access denied due to invalid subscription key or wrong API endpoint. Make sure to \
             provide a valid key for an active subscription and use a correct regional API \
             endpoint for your resource."}}),
            None,
        );
    }
    // The deployment names the model; answers carry the model behind it.
    request["deployment"] = json!(deployment);
    openai_handler(
        State(shared),
        axum::extract::RawQuery(query),
        headers,
        axum::Json(request),
    )
    .await
}

async fn openai_handler(
    State(shared): State<Arc<Shared>>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    headers: HeaderMap,
    axum::Json(request): axum::Json<Value>,
) -> Response {
    shared
        .queries
        .lock()
        .unwrap()
        .push(query.unwrap_or_default());
    let _in_flight = InFlight::enter(&shared, headers, &request);
    let streaming = request["stream"] == true;
    let reply = settle((shared.responder)(&request), streaming).await;
    let id = format!("chatcmpl-{}", shared.next_id());
    match reply {
        FakeReply::Error {
            status,
            body,
            retry_after,
        } => error_response(status, body, retry_after),
        FakeReply::Raw(body) => axum::Json(body).into_response(),
        FakeReply::RawStream(chunks) => sse_response(chunks.iter().map(frame).collect()),
        FakeReply::ResetMidStream(text) => {
            let mut frames = openai_stream(&id, &request, (text, Vec::new()));
            frames.truncate(2);
            reset_sse_response(frames)
        }
        FakeReply::Endless(piece) => {
            let delta = json!({"content": piece});
            endless(frame(&openai_chunk(&id, &request, delta, Value::Null)))
        }
        FakeReply::Runaway { text, piece } => {
            // The opening frame and the text's frames; no finish, usage or [DONE].
            let keep = 1 + pieces(&text, 4).len();
            let mut first = openai_stream(&id, &request, (text, Vec::new()));
            first.truncate(keep);
            let delta = json!({"content": piece});
            endless_after(
                first,
                frame(&openai_chunk(&id, &request, delta, Value::Null)),
            )
        }
        reply if streaming => {
            let frames = openai_stream(&id, &request, parts(reply));
            let every = *shared.chunk_interval.lock().unwrap();
            if every.is_zero() {
                sse_response(frames)
            } else {
                paced_sse_response(frames, every)
            }
        }
        reply => axum::Json(openai_completion(&id, &request, parts(reply))).into_response(),
    }
}

fn openai_usage(request: &Value) -> Value {
    let input = input_tokens(request);
    json!({"prompt_tokens": input, "completion_tokens": OUTPUT_TOKENS, "total_tokens": input + OUTPUT_TOKENS})
}

fn openai_call_id(id: &str, i: usize) -> String {
    format!("call_{}_{i}", id.trim_start_matches("chatcmpl-"))
}

fn openai_completion(
    id: &str,
    request: &Value,
    (text, calls): (String, Vec<(String, String)>),
) -> Value {
    let mut message = json!({"role": "assistant", "content": text, "refusal": null});
    if !calls.is_empty() {
        message["tool_calls"] = calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| {
                json!({"id": openai_call_id(id, i), "type": "function",
                       "function": {"name": name, "arguments": args}})
            })
            .collect();
        if text.is_empty() {
            message["content"] = Value::Null;
        }
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    json!({
        "id": id, "object": "chat.completion", "created": 1_700_000_000, "model": request["model"],
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
        "usage": openai_usage(request),
    })
}

fn openai_chunk(id: &str, request: &Value, delta: Value, finish: Value) -> Value {
    json!({
        "id": id, "object": "chat.completion.chunk", "created": 1_700_000_000, "model": request["model"],
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
    })
}

/// The part of a stream chunk that is the same in every chunk of one answer, rendered once:
/// the load driver streams thousands of chunks per report, and building each as a `Value`
/// made the fake a sizeable share of the benchmark machine's CPU.
struct ChunkEnvelope {
    head: String,
}

impl ChunkEnvelope {
    fn new(id: &str, request: &Value) -> Self {
        let head = format!(
            r#"data: {{"id":{},"object":"chat.completion.chunk","created":1700000000,"model":{},"choices":[{{"index":0,"delta":"#,
            json_str(id),
            request["model"]
        );
        Self { head }
    }

    /// One SSE frame; `delta` and `finish` are JSON text.
    fn frame(&self, delta: &str, finish: &str) -> String {
        format!(
            "{}{delta},\"logprobs\":null,\"finish_reason\":{finish}}}]}}\n\n",
            self.head
        )
    }
}

fn json_str(text: &str) -> String {
    Value::from(text).to_string()
}

fn frame(data: &Value) -> String {
    format!("data: {data}\n\n")
}

fn openai_stream(
    id: &str,
    request: &Value,
    (text, calls): (String, Vec<(String, String)>),
) -> Vec<String> {
    let envelope = ChunkEnvelope::new(id, request);
    let mut frames = vec![envelope.frame(r#"{"role":"assistant","content":""}"#, "null")];
    frames.extend(
        pieces(&text, 4)
            .iter()
            .map(|p| envelope.frame(&format!(r#"{{"content":{}}}"#, json_str(p)), "null")),
    );
    for (i, (name, args)) in calls.iter().enumerate() {
        let opening = json!({"index": i, "id": openai_call_id(id, i), "type": "function",
                             "function": {"name": name, "arguments": ""}});
        frames.push(envelope.frame(&format!(r#"{{"tool_calls":[{opening}]}}"#), "null"));
        for fragment in pieces(args, 5) {
            let more = format!(
                r#"{{"tool_calls":[{{"index":{i},"function":{{"arguments":{}}}}}]}}"#,
                json_str(&fragment)
            );
            frames.push(envelope.frame(&more, "null"));
        }
    }
    let finish = if calls.is_empty() {
        r#""stop""#
    } else {
        r#""tool_calls""#
    };
    frames.push(envelope.frame("{}", finish));
    if request["stream_options"]["include_usage"] == true {
        let mut last = openai_chunk(id, request, json!({}), Value::Null);
        last["choices"] = json!([]);
        last["usage"] = openai_usage(request);
        frames.push(frame(&last));
    }
    frames.push("data: [DONE]\n\n".to_owned());
    frames
}

// ---- Anthropic messages ----

async fn anthropic_handler(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    axum::Json(request): axum::Json<Value>,
) -> Response {
    let _in_flight = InFlight::enter(&shared, headers, &request);
    let streaming = request["stream"] == true;
    let reply = settle((shared.responder)(&request), streaming).await;
    let id = format!("msg_{:04}", shared.next_id());
    match reply {
        FakeReply::Error {
            status,
            body,
            retry_after,
        } => error_response(status, body, retry_after),
        FakeReply::Raw(body) => axum::Json(body).into_response(),
        FakeReply::Endless(piece) => {
            let delta = json!({"type": "content_block_delta", "index": 0,
                               "delta": {"type": "text_delta", "text": piece}});
            let mut start = anthropic_opening(&id, &request);
            start.push(event(&json!({"type": "content_block_start", "index": 0,
                                     "content_block": {"type": "text", "text": ""}})));
            let repeated =
                futures::stream::iter(start).chain(futures::stream::repeat(event(&delta)));
            let stream = repeated.then(|f| async move {
                tokio::task::yield_now().await;
                Ok::<_, Infallible>(Bytes::from(f))
            });
            sse_body(Body::from_stream(stream))
        }
        reply => {
            let blocks = anthropic_blocks(&id, &request, reply);
            if streaming {
                sse_response(anthropic_stream(&id, &request, &blocks))
            } else {
                axum::Json(anthropic_message(&id, &request, blocks)).into_response()
            }
        }
    }
}

/// The content blocks of a reply. Structured output answers with the forced tool's input.
fn anthropic_blocks(id: &str, request: &Value, reply: FakeReply) -> Vec<Value> {
    let forced = request["tool_choice"]["name"]
        .as_str()
        .filter(|_| request["tool_choice"]["type"] == "tool");
    let (text, calls) = match (reply, forced) {
        (FakeReply::Json(value), Some(tool)) => {
            (String::new(), vec![(tool.to_owned(), value.to_string())])
        }
        (reply, _) => parts(reply),
    };
    let mut blocks = Vec::new();
    if !text.is_empty() {
        blocks.push(json!({"type": "text", "text": text}));
    }
    for (i, (name, args)) in calls.into_iter().enumerate() {
        // Whole messages carry an object; malformed raw text can only be streamed.
        let input: Value = serde_json::from_str(&args).unwrap_or_else(|_| json!({"_raw": args}));
        blocks.push(
            json!({"type": "tool_use", "id": format!("toolu_{id}_{i}"), "name": name,
                           "input": input, "_raw": args}),
        );
    }
    blocks
}

fn anthropic_stop_reason(blocks: &[Value]) -> &'static str {
    if blocks.iter().any(|b| b["type"] == "tool_use") {
        "tool_use"
    } else {
        "end_turn"
    }
}

fn anthropic_message(id: &str, request: &Value, mut blocks: Vec<Value>) -> Value {
    for block in &mut blocks {
        if let Some(map) = block.as_object_mut() {
            map.remove("_raw");
        }
    }
    json!({
        "id": id, "type": "message", "role": "assistant", "model": request["model"],
        "stop_reason": anthropic_stop_reason(&blocks), "stop_sequence": null,
        "content": blocks,
        "usage": {"input_tokens": input_tokens(request), "output_tokens": OUTPUT_TOKENS},
    })
}

fn event(data: &Value) -> String {
    format!(
        "event: {}\ndata: {data}\n\n",
        data["type"].as_str().unwrap_or("message")
    )
}

fn anthropic_opening(id: &str, request: &Value) -> Vec<String> {
    let start = json!({"type": "message_start", "message": {
        "id": id, "type": "message", "role": "assistant", "model": request["model"], "content": [],
        "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": input_tokens(request), "output_tokens": 1}}});
    vec![event(&start), event(&json!({"type": "ping"}))]
}

fn anthropic_stream(id: &str, request: &Value, blocks: &[Value]) -> Vec<String> {
    let mut frames = anthropic_opening(id, request);
    for (index, block) in blocks.iter().enumerate() {
        let delta = |delta: Value| {
            event(&json!({"type": "content_block_delta", "index": index, "delta": delta}))
        };
        if block["type"] == "text" {
            let start = json!({"type": "text", "text": ""});
            frames.push(event(
                &json!({"type": "content_block_start", "index": index, "content_block": start}),
            ));
            for piece in pieces(block["text"].as_str().unwrap_or_default(), 4) {
                frames.push(delta(json!({"type": "text_delta", "text": piece})));
            }
        } else {
            let start =
                json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}});
            frames.push(event(
                &json!({"type": "content_block_start", "index": index, "content_block": start}),
            ));
            for piece in pieces(block["_raw"].as_str().unwrap_or_default(), 5) {
                frames.push(delta(
                    json!({"type": "input_json_delta", "partial_json": piece}),
                ));
            }
        }
        frames.push(event(
            &json!({"type": "content_block_stop", "index": index}),
        ));
    }
    frames.push(event(&json!({"type": "message_delta",
        "delta": {"stop_reason": anthropic_stop_reason(blocks), "stop_sequence": null},
        "usage": {"output_tokens": OUTPUT_TOKENS}})));
    frames.push(event(&json!({"type": "message_stop"})));
    frames
}

/// A Responses request read as the chat-completions request the responders understand.
fn as_chat_request(request: &Value) -> Value {
    let mut messages = Vec::new();
    for item in request["input"].as_array().into_iter().flatten() {
        match item["type"].as_str() {
            Some("function_call") => messages.push(json!({"role": "assistant", "content": null,
                "tool_calls": [{"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}]})),
            Some("function_call_output") => messages.push(json!({"role": "tool",
                "tool_call_id": item["call_id"], "content": item["output"]})),
            _ => messages.push(json!({"role": item["role"], "content": item["content"]})),
        }
    }
    let tools: Vec<Value> = request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| match t["type"].as_str() {
            Some("function") => json!({"type": "function", "function": {
                "name": t["name"], "description": t["description"], "parameters": t["parameters"]}}),
            _ => t.clone(),
        })
        .collect();
    let mut chat = json!({"model": request["model"], "messages": messages, "tools": tools,
                          "stream": request["stream"], "max_tokens": request["max_output_tokens"]});
    if let Some(format) = request["text"]["format"].as_object() {
        chat["response_format"] = json!({"type": "json_schema", "json_schema": format});
    }
    chat
}

/// A reply as a Responses `output`.
fn responses_output(reply: &FakeReply, id: &str) -> Vec<Value> {
    let text = |t: &str| {
        json!({"type": "message", "id": format!("msg_{id}"), "role": "assistant",
        "status": "completed", "content": [{"type": "output_text", "text": t, "annotations": []}]})
    };
    let calls = |calls: &[(String, Value)]| -> Vec<Value> {
        calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| {
                json!({"type": "function_call",
            "id": format!("fc_{id}_{i}"), "call_id": format!("call_{id}_{i}"), "name": name,
            "arguments": args.to_string(), "status": "completed"})
            })
            .collect()
    };
    match reply {
        FakeReply::Text(t) => vec![text(t)],
        FakeReply::Json(v) => vec![text(&v.to_string())],
        FakeReply::ToolCalls(c) => calls(c),
        FakeReply::TextAndToolCalls(t, c) => {
            let mut out = vec![text(t)];
            out.extend(calls(c));
            out
        }
        FakeReply::RawToolArgs { name, args_text } => vec![json!({"type": "function_call",
            "id": format!("fc_{id}"), "call_id": format!("call_{id}"), "name": name,
            "arguments": args_text, "status": "completed"})],
        _ => vec![text("ok")],
    }
}

async fn responses_handler(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    axum::Json(request): axum::Json<Value>,
) -> Response {
    let chat = as_chat_request(&request);
    let _in_flight = InFlight::enter(&shared, headers, &request);
    let streaming = request["stream"] == true;
    let reply = settle((shared.responder)(&chat), streaming).await;
    let id = format!("resp_{}", shared.next_id());
    let body = match reply {
        FakeReply::Error {
            status,
            body,
            retry_after,
        } => {
            return error_response(status, body, retry_after);
        }
        FakeReply::Raw(body) => body,
        other => json!({"id": id, "object": "response", "status": "completed",
            "model": request["model"], "output": responses_output(&other, &id),
            "usage": {"input_tokens": 20, "output_tokens": 7, "total_tokens": 27}}),
    };
    if !streaming {
        return axum::Json(body).into_response();
    }
    // The events a client needs: created, text deltas and call items as they come, completed.
    let mut events = vec![json!({"type": "response.created",
        "response": {"id": body["id"], "status": "in_progress", "output": []}})];
    for (i, item) in body["output"].as_array().into_iter().flatten().enumerate() {
        events.push(json!({"type": "response.output_item.added", "output_index": i, "item": item}));
        if item["type"] == "message" {
            let text = item["content"][0]["text"].as_str().unwrap_or_default();
            for piece in text.as_bytes().chunks(8) {
                events.push(
                    json!({"type": "response.output_text.delta", "output_index": i,
                    "item_id": item["id"], "content_index": 0,
                    "delta": String::from_utf8_lossy(piece)}),
                );
            }
        }
        if item["type"] == "function_call" {
            events.push(json!({"type": "response.function_call_arguments.delta",
                "output_index": i, "item_id": item["id"], "delta": item["arguments"]}));
        }
        events.push(json!({"type": "response.output_item.done", "output_index": i, "item": item}));
    }
    let closing = if body["status"] == "incomplete" {
        "response.incomplete"
    } else {
        "response.completed"
    };
    events.push(json!({"type": closing, "response": body}));
    let frames = events
        .iter()
        .map(|e| {
            format!(
                "event: {}\ndata: {}\n\n",
                e["type"].as_str().unwrap_or_default(),
                e
            )
        })
        .collect();
    sse_response(frames)
}

/// A Gemini request read as the chat-completions request the responders understand.
fn gemini_as_chat(request: &Value) -> Value {
    let mut messages = Vec::new();
    if let Some(parts) = request["systemInstruction"]["parts"].as_array() {
        let text: String = parts.iter().filter_map(|p| p["text"].as_str()).collect();
        messages.push(json!({"role": "system", "content": text}));
    }
    for content in request["contents"].as_array().into_iter().flatten() {
        for part in content["parts"].as_array().into_iter().flatten() {
            if let Some(call) = part.get("functionCall") {
                messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": "x", "type": "function", "function": {"name": call["name"],
                     "arguments": call["args"].to_string()}}]}));
            } else if let Some(result) = part.get("functionResponse") {
                messages.push(json!({"role": "tool", "tool_call_id": "x",
                                     "content": result["response"]["content"]}));
            } else {
                let role = if content["role"] == "model" {
                    "assistant"
                } else {
                    "user"
                };
                messages.push(json!({"role": role, "content": part["text"]}));
            }
        }
    }
    let tools: Vec<Value> = request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| match t["functionDeclarations"].as_array() {
            Some(decls) => decls
                .iter()
                .map(|d| {
                    json!({"type": "function", "function": {"name": d["name"],
                    "description": d["description"], "parameters": d["parametersJsonSchema"]}})
                })
                .collect::<Vec<_>>(),
            None => vec![t.clone()],
        })
        .collect();
    json!({"messages": messages, "tools": tools,
           "max_tokens": request["generationConfig"]["maxOutputTokens"]})
}

async fn gemini_handler(
    State(shared): State<Arc<Shared>>,
    axum::extract::Path(call): axum::extract::Path<String>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    headers: HeaderMap,
    axum::Json(request): axum::Json<Value>,
) -> Response {
    shared
        .queries
        .lock()
        .unwrap()
        .push(query.clone().unwrap_or_default());
    let Some((model, action)) = call.split_once(':') else {
        return error_response(
            404,
            json!({"error": {"code": 404, "message": "Not found", "status": "NOT_FOUND"}}),
            None,
        );
    };
    if headers.get("x-goog-api-key").is_none() {
        return error_response(
            403,
            json!({"error": {"code": 403, "message":
            "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.",
            "status": "PERMISSION_DENIED"}}),
            None,
        );
    }
    let streaming = action == "streamGenerateContent";
    let chat = gemini_as_chat(&request);
    let _in_flight = InFlight::enter(&shared, headers, &request);
    let reply = settle((shared.responder)(&chat), streaming).await;
    let id = format!("gem-{}", shared.next_id());
    let parts: Vec<Value> = match &reply {
        FakeReply::Error {
            status,
            body,
            retry_after,
        } => {
            return error_response(*status, body.clone(), retry_after.clone());
        }
        FakeReply::Raw(body) if !streaming => return axum::Json(body.clone()).into_response(),
        FakeReply::Raw(_) => vec![],
        FakeReply::Text(t) => vec![json!({"text": t})],
        FakeReply::Json(v) => vec![json!({"text": v.to_string()})],
        FakeReply::ToolCalls(calls) => calls
            .iter()
            .map(|(name, args)| json!({"functionCall": {"name": name, "args": args}}))
            .collect(),
        FakeReply::TextAndToolCalls(t, calls) => std::iter::once(json!({"text": t}))
            .chain(
                calls
                    .iter()
                    .map(|(name, args)| json!({"functionCall": {"name": name, "args": args}})),
            )
            .collect(),
        _ => vec![json!({"text": "ok"})],
    };
    let usage = json!({"promptTokenCount": 20, "candidatesTokenCount": 7, "totalTokenCount": 27});
    let whole = json!({"candidates": [{"content": {"role": "model", "parts": parts},
                        "finishReason": "STOP", "index": 0}],
                       "usageMetadata": usage, "modelVersion": model, "responseId": id});
    if !streaming {
        return axum::Json(whole).into_response();
    }
    let mut frames = Vec::new();
    let mut send = |body: Value| frames.push(format!("data: {body}\r\n\r\n"));
    if let FakeReply::Raw(body) = &reply {
        for chunk in body.as_array().into_iter().flatten() {
            send(chunk.clone());
        }
        return sse_response(frames);
    }
    for part in &parts {
        match part["text"].as_str() {
            Some(text) => {
                for piece in text.as_bytes().chunks(8) {
                    send(json!({"candidates": [{"content": {"role": "model",
                        "parts": [{"text": String::from_utf8_lossy(piece)}]}, "index": 0}],
                        "modelVersion": model, "responseId": id}));
                }
            }
            None => send(
                json!({"candidates": [{"content": {"role": "model", "parts": [part]},
                "index": 0}], "modelVersion": model, "responseId": id}),
            ),
        }
    }
    send(
        json!({"candidates": [{"content": {"role": "model", "parts": []}, "finishReason": "STOP",
        "index": 0}], "usageMetadata": usage, "modelVersion": model, "responseId": id}),
    );
    sse_response(frames)
}
