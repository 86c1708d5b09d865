//! The thread-centric protocol of `@langchain/react` (`useStream` through
//! `@langchain/langgraph-sdk` ≥ 1.11): commands at `POST /threads/{id}/commands` and the
//! thread's event stream at `POST /threads/{id}/stream/events`. Commands create runs through
//! the same path as the runs API; the stream is `stream::thread_protocol`.
//!
//! Commands answer HTTP 200 with `{"type": "success" | "error", …}` (protocol errors are not
//! HTTP errors), 400 for an envelope that is not one, and 503 while the store is away.

use super::AppState;
use super::auth::Principal;
use super::error::{ApiResult, AppError};
use super::params::parse_id;
use super::response_bodies::sse_response;
use super::runs::{RunRequest, start_on_thread};
use crate::graph::state::StateBuilder;
use crate::ids::{CheckpointId, ThreadId};
use crate::runs::RunKwargs;
use crate::store::{CheckpointQuery, Run, Thread, ThreadStatus};
use crate::stream::thread_protocol::{Filter, ThreadTape, events_sse_body};
use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Map, Value, json};

pub(super) fn router() -> Router<AppState> {
    Router::new().route("/threads/{thread_id}/commands", post(command))
}

/// The stream modes of a run the protocol starts: what its channels are made from.
const RUN_MODES: [&str; 6] = [
    "values",
    "updates",
    "messages-tuple",
    "custom",
    "tasks",
    "checkpoints",
];

/// A command's failure, as the protocol names it.
pub(super) struct Refusal {
    code: &'static str,
    message: String,
}

impl Refusal {
    fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// How a command ended: a result, a refusal, or a server-side failure that stays an HTTP error
/// (a store that is down is a 503, which the SDK retries).
pub(super) enum Outcome {
    Done(Value),
    Refused(Refusal),
    Failed(AppError),
}

impl From<AppError> for Outcome {
    /// Run creation's 4xx become `unknown_error` with `"<status>: <detail>"`, as LangGraph words
    /// them; 5xx stay HTTP errors.
    fn from(error: AppError) -> Self {
        let status = error.status();
        if status.is_server_error() {
            return Self::Failed(error);
        }
        Self::Refused(Refusal::new(
            "unknown_error",
            format!("{}: {}", status.as_u16(), error.detail()),
        ))
    }
}

/// Runs a command.
#[utoipa::path(post, path = "/threads/{thread_id}/commands", tag = "threads",
    params(("thread_id" = String, Path)),
    request_body(content = Object, description = "`{\"id\": int, \"method\": string, \"params\": object}`: run.start, input.respond, state.get, state.listCheckpoints, state.fork"),
    responses((status = 200, description = "`{\"type\": \"success\", \"id\", \"result\", \"meta\"}` or `{\"type\": \"error\", \"id\", \"error\", \"message\"}`"),
        (status = 400, description = "not a command envelope"), (status = 503)))]
pub(super) async fn command(
    State(state): State<AppState>,
    who: Principal,
    Path(raw_thread): Path<String>,
    body: Bytes,
) -> Response {
    // A malformed path is the transport's error, like on the events stream.
    let thread_id = match parse_id::<ThreadId>(&raw_thread) {
        Ok(id) => id,
        Err(error) => return error.into_response(),
    };
    let Ok(envelope) = serde_json::from_slice::<Value>(&body) else {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"detail": "Invalid JSON body"})),
        )
            .into_response();
    };
    let (id, method, params) = match read_command(&envelope) {
        Ok(command) => command,
        Err(refusal) => return (StatusCode::BAD_REQUEST, Json(refusal)).into_response(),
    };
    if let Err(error) = super::lookups::not_anothers(&state, thread_id, &who.owner).await {
        return error.into_response();
    }
    match answer_of(
        id,
        dispatch(&state, &who, thread_id, &method, &params).await,
    ) {
        Ok(answer) => Json(answer).into_response(),
        Err(error) => error.into_response(),
    }
}

/// A command envelope's `(id, method, params)`, or the protocol's refusal of it (the
/// envelope's own errors, which HTTP answers with a 400 and a socket with an error frame).
pub(super) fn read_command(envelope: &Value) -> Result<(i64, String, Value), Value> {
    let (Some(id), Some(method)) = (envelope["id"].as_i64(), envelope["method"].as_str()) else {
        let id = envelope.get("id").filter(|v| v.is_i64()).cloned();
        return Err(
            json!({"type": "error", "id": id, "error": "invalid_argument",
            "message": "Protocol commands must include an integer id and string method."}),
        );
    };
    let params = match envelope.get("params") {
        None | Some(Value::Null) => json!({}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => {
            return Err(
                json!({"type": "error", "id": id, "error": "invalid_argument",
                              "message": "params must be an object"}),
            );
        }
    };
    Ok((id, method.to_owned(), params))
}

/// A command's answer: `success` with its result, or `error` with the protocol's code; a
/// server-side failure stays an error of the transport's own.
pub(super) fn answer_of(id: i64, outcome: Outcome) -> Result<Value, AppError> {
    match outcome {
        // Every event a client sees arrives on the thread's stream, never with a command:
        // nothing is held back behind a command's answer.
        Outcome::Done(result) => Ok(json!({"type": "success", "id": id, "result": result,
                                           "meta": {"applied_through_seq": 0}})),
        Outcome::Refused(r) => Ok(refusal(json!(id), r.code, &r.message)),
        Outcome::Failed(error) => Err(error),
    }
}

/// The protocol's error frame.
pub(super) fn refusal(id: Value, code: &str, message: &str) -> Value {
    json!({"type": "error", "id": id, "error": code, "message": message})
}

/// A thread that does not exist yet is fine (`run.start` creates it); another owner's is 404.
pub(super) async fn dispatch(
    state: &AppState,
    who: &Principal,
    thread_id: ThreadId,
    method: &str,
    params: &Value,
) -> Outcome {
    let result = match method {
        "run.start" => run_start(state, who, thread_id, params).await,
        "input.respond" => input_respond(state, who, thread_id, params).await,
        "state.get" => state_get(state, thread_id, params).await,
        "state.listCheckpoints" => list_checkpoints(state, thread_id, params).await,
        "state.fork" => fork(state, who, thread_id, params).await,
        "input.inject" => Err(Outcome::Refused(Refusal::new(
            "not_supported",
            "input.inject is not supported: a message reaches the graph by starting a run \
             (run.start), or by answering an interrupt (input.respond)",
        ))),
        "subscription.subscribe" | "subscription.unsubscribe" | "subscription.reconnect" => {
            Err(Outcome::Refused(Refusal::new(
                "not_supported",
                format!(
                    "{method} is a command of the WebSocket at GET /threads/{{thread_id}}/stream/\
                     events; over HTTP, POST the channels to that path for an SSE stream"
                ),
            )))
        }
        "agent.getTree" => Err(Outcome::Refused(Refusal::new(
            "not_supported",
            "agent.getTree is not supported: subscribe to the lifecycle channel, whose events \
             give every agent's namespace, graph and status",
        ))),
        other => Err(Outcome::Refused(Refusal::new(
            "unknown_command",
            format!("Unknown protocol command: {other}"),
        ))),
    };
    result.map_or_else(|outcome| outcome, Outcome::Done)
}

type Step<T> = Result<T, Outcome>;

fn refuse(code: &'static str, message: impl Into<String>) -> Outcome {
    Outcome::Refused(Refusal::new(code, message))
}

/// A run body with the protocol's fixed settings: every channel's mode, subgraphs, and frames
/// stored so every connection can replay them.
/// The run a command starts, read from the command's params as a request body is (the error
/// names the field).
fn run_body(assistant_id: Value, extra: Map<String, Value>) -> ApiResult<RunRequest> {
    let mut body = json!({"assistant_id": assistant_id, "stream_mode": RUN_MODES,
        "stream_subgraphs": true, "stream_resumable": true, "if_not_exists": "create"});
    if let Some(map) = body.as_object_mut() {
        map.extend(extra);
    }
    RunRequest::from_json(body)
}

fn copy_fields(params: &Value, fields: &[(&str, &str)]) -> Map<String, Value> {
    fields
        .iter()
        .filter_map(|(from, to)| {
            params
                .get(*from)
                .filter(|v| !v.is_null())
                .map(|v| ((*to).to_owned(), v.clone()))
        })
        .collect()
}

async fn thread_of(state: &AppState, thread_id: ThreadId) -> Step<Option<Thread>> {
    state
        .store
        .get_thread(thread_id)
        .await
        .map_err(|e| Outcome::from(AppError::from(e)))
}

/// `run.start {assistant_id, input?, config?, metadata?, multitaskStrategy?}` → `{run_id}`.
/// The thread is created on first use; input sent while interrupts wait answers them.
async fn run_start(
    state: &AppState,
    who: &Principal,
    thread_id: ThreadId,
    params: &Value,
) -> Step<Value> {
    let Some(assistant) = params.get("assistant_id").filter(|v| v.is_string()) else {
        return Err(refuse(
            "invalid_argument",
            "run.start requires an assistant_id.",
        ));
    };
    let mut extra = copy_fields(
        params,
        &[
            ("config", "config"),
            ("metadata", "metadata"),
            ("multitaskStrategy", "multitask_strategy"),
            ("multitask_strategy", "multitask_strategy"),
        ],
    );
    let input = params.get("input").cloned().unwrap_or(Value::Null);
    // Only a thread at rest on its interrupts is waiting: while a run is in flight the
    // thread's interrupts are the previous pause's, and the message is a new turn.
    let waiting = thread_of(state, thread_id)
        .await?
        .is_some_and(|t| paused(&t));
    if waiting && !input.is_null() {
        extra.insert("command".into(), json!({ "resume": input }));
    } else {
        extra.insert("input".into(), input);
    }
    // A fork point rides in `configurable.checkpoint_id`, as the SDK's `forkFrom` sends it.
    if let Some(cid) = params["config"]["configurable"]["checkpoint_id"].as_str() {
        extra.insert("checkpoint_id".into(), json!(cid));
    }
    let run = start_on_thread(state, who, thread_id, run_body(assistant.clone(), extra)?).await?;
    Ok(json!({"run_id": run.run_id}))
}

/// `input.respond {interrupt_id, response, namespace?}` or `{responses: [...]}`, with optional
/// `update`, `goto`, `config`, `metadata` → `{}`: a run that resumes the interrupts by id.
async fn input_respond(
    state: &AppState,
    who: &Principal,
    thread_id: ThreadId,
    params: &Value,
) -> Step<Value> {
    let answers: Vec<(String, Value)> = match params.get("responses") {
        Some(Value::Array(list)) if !list.is_empty() => {
            list.iter().map(answer).collect::<Step<_>>()?
        }
        Some(_) => {
            return Err(refuse(
                "invalid_argument",
                "input.respond: responses must be a non-empty list of {interrupt_id, response}",
            ));
        }
        None => vec![answer(params)?],
    };
    let Some(thread) = thread_of(state, thread_id).await? else {
        return Err(refuse(
            "no_such_run",
            "No interrupted run is bound to this thread.",
        ));
    };
    let Some(assistant) = thread.metadata.get("assistant_id").cloned() else {
        return Err(refuse(
            "no_such_run",
            "No interrupted run is bound to this thread.",
        ));
    };
    if !paused(&thread) {
        // A second answer (another tab, a retry) finds the thread busy or moved on.
        let id = &answers[0].0;
        return Err(refuse(
            "no_such_interrupt",
            format!(
                "Unknown or already-consumed interrupt: {id} (the thread is {})",
                thread.status.as_str()
            ),
        ));
    }
    let pending: Vec<&str> = thread
        .interrupts
        .as_object()
        .into_iter()
        .flat_map(|m| m.values())
        .flat_map(|list| list.as_array().into_iter().flatten())
        .filter_map(|i| i["id"].as_str())
        .collect();
    if let Some((id, _)) = answers
        .iter()
        .find(|(id, _)| !pending.contains(&id.as_str()))
    {
        return Err(refuse(
            "no_such_interrupt",
            format!("Unknown or already-consumed interrupt: {id}"),
        ));
    }
    let resume: Map<String, Value> = answers.into_iter().collect();
    let mut command = json!({"resume": resume});
    for key in ["update", "goto"] {
        if let (Some(v), Some(map)) = (
            params.get(key).filter(|v| !v.is_null()),
            command.as_object_mut(),
        ) {
            map.insert(key.into(), v.clone());
        }
    }
    let mut extra = copy_fields(params, &[("config", "config"), ("metadata", "metadata")]);
    extra.insert("command".into(), command);
    start_on_thread(state, who, thread_id, run_body(assistant, extra)?).await?;
    Ok(json!({}))
}

/// Whether the thread rests on interrupts waiting for answers.
fn paused(thread: &Thread) -> bool {
    thread.status == ThreadStatus::Interrupted
        && thread.interrupts.as_object().is_some_and(|m| !m.is_empty())
}

fn answer(entry: &Value) -> Step<(String, Value)> {
    let Some(id) = entry["interrupt_id"].as_str() else {
        return Err(refuse(
            "invalid_argument",
            "input.respond requires an interrupt_id.",
        ));
    };
    if !entry.get("namespace").is_none_or(|ns| {
        ns.is_null()
            || ns
                .as_array()
                .is_some_and(|a| a.iter().all(Value::is_string))
    }) {
        return Err(refuse(
            "invalid_argument",
            "input.respond requires namespace to be a list of strings.",
        ));
    }
    Ok((
        id.to_owned(),
        entry.get("response").cloned().unwrap_or(Value::Null),
    ))
}

/// The root namespace only: subgraph state is read through `/threads/{id}/history` with a
/// `checkpoint_ns`.
fn root_only(params: &Value) -> Step<()> {
    match params.get("namespace") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Array(ns)) if ns.is_empty() => Ok(()),
        Some(other) => Err(refuse(
            "no_such_namespace",
            format!(
                "state commands read the top-level graph (namespace []), not {other}; read a \
                 subgraph's checkpoints with POST /threads/{{thread_id}}/history and its checkpoint_ns"
            ),
        )),
    }
}

async fn known_thread(state: &AppState, thread_id: ThreadId) -> Step<Thread> {
    thread_of(state, thread_id)
        .await?
        .ok_or_else(|| refuse("invalid_argument", format!("Thread {thread_id} not found")))
}

/// `state.get {namespace, keys?}` → `{values, checkpoint?: {id, ns}}`.
async fn state_get(state: &AppState, thread_id: ThreadId, params: &Value) -> Step<Value> {
    root_only(params)?;
    let thread = known_thread(state, thread_id).await?;
    let store = &*state.store;
    let head = store
        .latest_checkpoint(thread_id, "")
        .await
        .map_err(|e| Outcome::from(AppError::from(e)))?;
    let graph = thread
        .metadata
        .get("graph_id")
        .and_then(Value::as_str)
        .and_then(|g| state.registry.get(g));
    let (Some(head), Some(graph)) = (head, graph) else {
        return Ok(json!({"values": {}}));
    };
    let mut values = StateBuilder::new(store, &graph, thread_id)
        .values(&head)
        .await
        .map_err(|e| Outcome::from(AppError::from(e)))?;
    graph.channels.hide_in(&mut values);
    if let Some(keys) = params["keys"].as_array() {
        let keep: Vec<&str> = keys.iter().filter_map(Value::as_str).collect();
        values.retain(|k, _| keep.contains(&k.as_str()));
    }
    Ok(json!({"values": values, "checkpoint": {"id": head.checkpoint_id, "ns": ""}}))
}

/// `state.listCheckpoints {namespace?, limit?, before?}` → `{checkpoints: [...]}`, newest first.
async fn list_checkpoints(state: &AppState, thread_id: ThreadId, params: &Value) -> Step<Value> {
    root_only(params)?;
    known_thread(state, thread_id).await?;
    let limit = params["limit"].as_i64().unwrap_or(10);
    if !(1..=1000).contains(&limit) {
        return Err(refuse(
            "invalid_argument",
            format!("limit must be between 1 and 1000, got {limit}"),
        ));
    }
    let before = match params["before"].as_str() {
        Some(raw) => Some(raw.parse::<CheckpointId>().map_err(|_| {
            refuse(
                "invalid_argument",
                format!("before must be a checkpoint id, got '{raw}'"),
            )
        })?),
        None => None,
    };
    let q = CheckpointQuery {
        checkpoint_ns: String::new(),
        before,
        limit,
        metadata: Map::new(),
    };
    let list = state
        .store
        .list_checkpoints(thread_id, &q)
        .await
        .map_err(|e| Outcome::from(AppError::from(e)))?;
    let checkpoints: Vec<Value> = list
        .iter()
        .map(|cp| {
            json!({"id": cp.checkpoint_id, "timestamp": cp.created_at, "step": cp.step,
                   "metadata": cp.metadata})
        })
        .collect();
    Ok(json!({ "checkpoints": checkpoints }))
}

/// `state.fork {checkpoint_id, input?, config?}` → `{run_id, thread_id}`: a run from that
/// checkpoint (with no input it re-runs the checkpoint's pending nodes).
async fn fork(
    state: &AppState,
    who: &Principal,
    thread_id: ThreadId,
    params: &Value,
) -> Step<Value> {
    let Some(cid) = params["checkpoint_id"].as_str() else {
        return Err(refuse(
            "invalid_argument",
            "state.fork requires a checkpoint_id.",
        ));
    };
    let thread = known_thread(state, thread_id).await?;
    let Some(assistant) = thread.metadata.get("assistant_id").cloned() else {
        return Err(refuse(
            "no_such_run",
            "No run has used this thread yet: nothing to fork.",
        ));
    };
    let known = match cid.parse::<CheckpointId>() {
        Ok(id) => state
            .store
            .get_checkpoint(thread_id, "", id)
            .await
            .map_err(|e| Outcome::from(AppError::from(e)))?
            .is_some(),
        Err(_) => false,
    };
    if !known {
        return Err(refuse(
            "no_such_checkpoint",
            format!("Checkpoint {cid} not found on this thread"),
        ));
    }
    let mut extra = copy_fields(params, &[("input", "input"), ("config", "config")]);
    extra.insert("checkpoint_id".into(), json!(cid));
    let run = start_on_thread(state, who, thread_id, run_body(assistant, extra)?).await?;
    Ok(json!({"run_id": run.run_id, "thread_id": thread_id}))
}

/// The thread's event stream.
#[utoipa::path(post, path = "/threads/{thread_id}/stream/events", tag = "threads",
    params(("thread_id" = String, Path)),
    request_body(content = Object, description = "`{\"channels\": [...], \"namespaces\"?: [[...]], \"depth\"?: int, \"since\"?: int}`"),
    responses((status = 200, content_type = "text/event-stream",
        description = "every run of the thread, replayed then live, as protocol events"),
        (status = 400), (status = 422)))]
pub(super) async fn events(
    State(state): State<AppState>,
    who: Principal,
    Path(raw_thread): Path<String>,
    body: Bytes,
) -> Response {
    let thread_id = match parse_id::<ThreadId>(&raw_thread) {
        Ok(id) => id,
        Err(error) => return error.into_response(),
    };
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return AppError::BadRequest("Invalid JSON body".into()).into_response();
    };
    let filter = match Filter::parse(&body) {
        Ok(filter) => filter,
        Err(why) => return AppError::BadRequest(why).into_response(),
    };
    // A thread that does not exist yet is fine: its first run (`run.start` creates it) shows
    // up on this stream. Another owner's is not.
    if let Err(error) = super::lookups::not_anothers(&state, thread_id, &who.owner).await {
        return error.into_response();
    }
    let tape = ThreadTape {
        store: state.store.clone(),
        describe: describe_run,
        bus: state.bus.clone(),
        thread_id,
        owner: who.owner.clone(),
        shutdown: state.shutdown.clone(),
        heartbeat: state.settings.heartbeat,
    };
    sse_response(events_sse_body(tape, filter), None)
}

pub(super) fn describe_run(run: &Run) -> (bool, String) {
    let kwargs = RunKwargs::decode(&run.kwargs).unwrap_or_default();
    let graph = kwargs
        .graph_id()
        .map_or_else(|| run.assistant_id.to_string(), str::to_owned);
    (kwargs.resumable, graph)
}
