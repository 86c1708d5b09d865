//! A2A (agent to agent) over JSON-RPC at `POST /a2a/{assistant_id}`, on the same threads, runs,
//! owners and limits as the rest of the API: a message is a task (a run), its `contextId` the
//! thread (a new one when the message names none), the report the task's artifact, progress
//! (brief, researchers, searches, pages) status updates, a clarifying question or a plan to
//! review `input-required` (the next message on the context answers it). Both the v1.0 methods
//! (`SendMessage`, `SendStreamingMessage`, `GetTask`, `CancelTask`, `ListTasks`,
//! `SubscribeToTask`) and the v0.3 names (`message/send`, `message/stream`, `tasks/get`,
//! `tasks/cancel`, `tasks/resubscribe`) are answered, each in its own dialect. JSON-RPC errors
//! are HTTP 200 with `{code, message}`, as A2A clients expect.

pub(super) mod card;
mod task;

use super::AppState;
use super::assistants::resolve;
use super::auth::Principal;
use super::error::AppError;
use super::turns::{self, Outcome, Reading};
use crate::ids::{AssistantId, RunId, ThreadId};
use crate::research::progress::{LineId, RunProgress};
use crate::store::{CancelAction, Run, SortOrder, StoreError, Thread, ThreadQuery};
use crate::time::Timestamp;
use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Map, Value, json};
use task::{Detail, Dialect, Task, TaskState};
use tokio::sync::mpsc;
use uuid::Uuid;

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/a2a/{assistant_id}", post(rpc))
        .route("/.well-known/agent-card.json", get(card::well_known))
        .route(
            "/a2a/{assistant_id}/.well-known/agent-card.json",
            get(card::of_assistant),
        )
}

/// The stream modes of the runs A2A starts: progress comes from `updates`; frames are stored,
/// so a stream can be resumed (`SubscribeToTask`).
/// A JSON-RPC error. Only `code` and `message`: strict clients refuse other keys.
#[derive(Debug)]
struct RpcError {
    code: i64,
    message: String,
}

impl RpcError {
    fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
    fn invalid_request(m: impl Into<String>) -> Self {
        Self::new(-32600, m)
    }
    fn invalid_params(m: impl Into<String>) -> Self {
        Self::new(-32602, m)
    }
    fn task_not_found(id: impl std::fmt::Display) -> Self {
        Self::new(-32001, format!("Task {id} not found"))
    }
    fn unsupported(m: impl Into<String>) -> Self {
        Self::new(-32004, m)
    }
}

impl From<AppError> for RpcError {
    /// The API's refusals keep their words; a store that is down says to retry.
    fn from(error: AppError) -> Self {
        let status = error.status().as_u16();
        match status {
            409 => Self::unsupported(error.detail()),
            400 | 404 | 422 => Self::invalid_params(error.detail()),
            s if s >= 500 => Self::new(
                -32603,
                format!("The server cannot do this now ({s}); retry later"),
            ),
            _ => Self::new(-32603, format!("{status}: {}", error.detail())),
        }
    }
}

impl From<StoreError> for RpcError {
    fn from(error: StoreError) -> Self {
        Self::from(AppError::from(error))
    }
}

type RpcResult<T> = Result<T, RpcError>;

/// A JSON-RPC response, always HTTP 200.
fn reply(id: &Value, outcome: RpcResult<Value>) -> Response {
    let body = match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(e) => json!({"jsonrpc": "2.0", "id": id,
                         "error": {"code": e.code, "message": e.message}}),
    };
    Json(body).into_response()
}

/// Answers one JSON-RPC request (batches are not supported).
#[utoipa::path(post, path = "/a2a/{assistant_id}", tag = "a2a",
    params(("assistant_id" = String, Path)),
    request_body(content = Value, description = "A JSON-RPC 2.0 request: SendMessage, SendStreamingMessage, GetTask, CancelTask, ListTasks, SubscribeToTask (A2A v1.0), or message/send, message/stream, tasks/get, tasks/cancel, tasks/resubscribe (v0.3)"),
    responses((status = 200, description = "A JSON-RPC response; the streaming methods answer `text/event-stream`, one JSON-RPC response a `data:` line"),
        (status = 404, description = "no such assistant"), (status = 422, description = "not an assistant id or graph name")))]
pub(super) async fn rpc(
    State(state): State<AppState>,
    who: Principal,
    Path(assistant): Path<String>,
    body: Bytes,
) -> Response {
    // A wrong address is the transport's error, before the request is read.
    let assistant = match resolve(&state, &assistant, &who.owner).await {
        Ok(a) => a,
        Err(error) => return error.into_response(),
    };
    let Ok(envelope) = serde_json::from_slice::<Value>(&body) else {
        return reply(
            &Value::Null,
            Err(RpcError::new(-32700, "Invalid JSON payload")),
        );
    };
    drop(body);
    let Value::Object(mut request) = envelope else {
        return reply(
            &Value::Null,
            Err(RpcError::invalid_request(
                "Send one JSON-RPC request object (batches are not supported)",
            )),
        );
    };
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    if request.get("jsonrpc") != Some(&json!("2.0")) {
        return reply(
            &id,
            Err(RpcError::invalid_request("jsonrpc must be \"2.0\"")),
        );
    }
    let Some(method) = request
        .get("method")
        .and_then(Value::as_str)
        .map(str::to_owned)
    else {
        return reply(
            &id,
            Err(RpcError::invalid_request("method must be a string")),
        );
    };
    // Taken, not copied: a message of many small parts weighs several times its bytes.
    let params = match request.remove("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(p)) => p,
        Some(_) => {
            return reply(
                &id,
                Err(RpcError::invalid_params("params must be an object")),
            );
        }
    };
    // A call that holds its response open until a run ends counts against the owner's
    // streams, as a LangGraph stream or wait does.
    let method = method.as_str();
    let slot = if holds_open(method, &params) {
        match state.admission.hold_open(&who.owner) {
            Ok(slot) => slot,
            Err(refused) => return refused.into_response(),
        }
    } else {
        None
    };
    let call = Call {
        state: &state,
        who: &who,
        assistant_id: assistant.assistant_id,
        id: id.clone(),
    };
    let response = dispatch(&call, method, &params).await;
    crate::api::runs::admission::with_slot(response, slot)
}

/// Whether this call's response stays open until its task ends: the streaming methods, and
/// a message sent without `returnImmediately` (or with `blocking`).
fn holds_open(method: &str, params: &Map<String, Value>) -> bool {
    match method {
        "SendStreamingMessage" | "message/stream" | "SubscribeToTask" | "tasks/resubscribe" => true,
        "SendMessage" | "message/send" => {
            let configuration = params.get("configuration").unwrap_or(&Value::Null);
            !(configuration["returnImmediately"] == true || configuration["blocking"] == false)
        }
        _ => false,
    }
}

async fn dispatch(call: &Call<'_>, method: &str, params: &Map<String, Value>) -> Response {
    let (id, params) = (&call.id, params);
    use Dialect::{V1, V03};
    match method {
        "SendMessage" => reply(id, call.send(V1, params).await),
        "message/send" => reply(id, call.send(V03, params).await),
        "SendStreamingMessage" => call.send_streaming(V1, params).await,
        "message/stream" => call.send_streaming(V03, params).await,
        "GetTask" => reply(id, call.get(V1, params).await),
        "tasks/get" => reply(id, call.get(V03, params).await),
        "CancelTask" => reply(id, call.cancel(V1, params).await),
        "tasks/cancel" => reply(id, call.cancel(V03, params).await),
        "ListTasks" => reply(id, call.list(V1, params).await),
        "SubscribeToTask" => call.subscribe(V1, params).await,
        "tasks/resubscribe" => call.subscribe(V03, params).await,
        m if m.contains("PushNotificationConfig")
            || m.starts_with("tasks/pushNotificationConfig") =>
        {
            reply(
                id,
                Err(RpcError::new(
                    -32003,
                    "Push notifications are not supported: stream the task or poll it with GetTask",
                )),
            )
        }
        "GetExtendedAgentCard" | "agent/getAuthenticatedExtendedCard" => reply(
            id,
            Err(RpcError::new(
                -32007,
                "This agent has no extended card: the public one is all there is",
            )),
        ),
        other => reply(
            id,
            Err(RpcError::new(
                -32601,
                format!(
                    "Method '{other}' is not supported. Methods: SendMessage, SendStreamingMessage, GetTask, CancelTask, ListTasks, SubscribeToTask (v1.0); message/send, message/stream, tasks/get, tasks/cancel, tasks/resubscribe (v0.3)"
                ),
            )),
        ),
    }
}

/// What a user's message brings.
struct Incoming {
    text: String,
    /// A `data` part: sent as it is when the message answers an interrupt.
    data: Option<Value>,
    context_id: Option<ThreadId>,
    task_id: Option<RunId>,
    return_immediately: bool,
    history_length: Option<usize>,
    /// Research settings for the run (`metadata.configurable`).
    configurable: Option<Map<String, Value>>,
    /// The run's `context` (`params.context`, as LangGraph's server reads it).
    context: Option<Map<String, Value>>,
}

fn uuid_field<T: From<Uuid>>(value: Option<&Value>, field: &str) -> RpcResult<Option<T>> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Uuid::parse_str(s).map(|id| Some(T::from(id))).map_err(|_| {
            RpcError::invalid_params(format!(
                "{field} must be a UUID (this server's ids), got '{s}'"
            ))
        }),
        Some(_) => Err(RpcError::invalid_params(format!(
            "{field} must be a string"
        ))),
    }
}

fn history_length(value: Option<&Value>) -> RpcResult<Option<usize>> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(|n| Some(n.min(1000) as usize))
            .ok_or_else(|| RpcError::invalid_params("historyLength must be a whole number")),
    }
}

impl Incoming {
    fn parse(params: &Map<String, Value>) -> RpcResult<Self> {
        let Some(message) = params.get("message").and_then(Value::as_object) else {
            return Err(RpcError::invalid_params("params.message is required"));
        };
        if let Some(role) = message.get("role").and_then(Value::as_str)
            && !matches!(role, "ROLE_USER" | "user")
        {
            return Err(RpcError::invalid_params(format!(
                "message.role must be the user's (ROLE_USER or user), got '{role}'"
            )));
        }
        let Some(parts) = message
            .get("parts")
            .and_then(Value::as_array)
            .filter(|p| !p.is_empty())
        else {
            return Err(RpcError::invalid_params(
                "message.parts must list at least one part",
            ));
        };
        if parts.len() > super::body_shape::MAX_INPUT_PARTS {
            return Err(RpcError::invalid_params(format!(
                "message.parts: {} parts, the most one message may bring is {}",
                parts.len(),
                super::body_shape::MAX_INPUT_PARTS
            )));
        }
        let mut texts = Vec::new();
        let mut data = None;
        for part in parts {
            let kind = part["kind"].as_str();
            if let Some(text) = part["text"].as_str() {
                texts.push(text.to_owned());
            } else if part.get("data").is_some() && matches!(kind, None | Some("data")) {
                data = Some(part["data"].clone());
            } else {
                return Err(RpcError::new(
                    -32005,
                    "Only text and data parts are read here: send the question as text",
                ));
            }
        }
        let text = texts.join("\n");
        if text.trim().is_empty() && data.is_none() {
            return Err(RpcError::invalid_params("The message has no text"));
        }
        let configuration = params.get("configuration").cloned().unwrap_or(Value::Null);
        check_configuration(&configuration)?;
        let configurable = match params.get("metadata").map(|m| &m["configurable"]) {
            None | Some(Value::Null) => None,
            Some(Value::Object(c)) => Some(c.clone()),
            Some(_) => {
                return Err(RpcError::invalid_params(
                    "metadata.configurable must be an object of research settings",
                ));
            }
        };
        let context = match params.get("context") {
            None | Some(Value::Null) => None,
            Some(Value::Object(c)) => Some(c.clone()),
            Some(_) => {
                return Err(RpcError::invalid_params(
                    "params.context must be an object (the run's context)",
                ));
            }
        };
        Ok(Self {
            text,
            data,
            context,
            context_id: uuid_field(message.get("contextId"), "message.contextId")?,
            task_id: uuid_field(message.get("taskId"), "message.taskId")?,
            return_immediately: configuration["returnImmediately"] == true
                || configuration["blocking"] == false,
            history_length: history_length(configuration.get("historyLength"))?,
            configurable,
        })
    }
}

/// What this server cannot honour in a message's configuration is refused, not ignored.
fn check_configuration(configuration: &Value) -> RpcResult<()> {
    let push = ["taskPushNotificationConfig", "pushNotificationConfig"];
    if push
        .iter()
        .any(|k| configuration.get(*k).is_some_and(|v| !v.is_null()))
    {
        return Err(RpcError::new(
            -32003,
            "Push notifications are not supported: stream the task or poll it with GetTask",
        ));
    }
    let accepted: Vec<&str> = configuration["acceptedOutputModes"]
        .as_array()
        .map(|modes| modes.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let ours = ["text/plain", "text/markdown", "text/*", "*/*"];
    if !accepted.is_empty() && !accepted.iter().any(|m| ours.contains(m)) {
        return Err(RpcError::new(
            -32005,
            "This agent answers in text/plain and text/markdown; acceptedOutputModes lists neither",
        ));
    }
    Ok(())
}

/// One request's context.
struct Call<'a> {
    state: &'a AppState,
    who: &'a Principal,
    assistant_id: AssistantId,
    id: Value,
}

impl Call<'_> {
    /// The caller's run with this id (another owner's is as missing).
    async fn owned_run(&self, task_id: RunId) -> RpcResult<Run> {
        let run = self
            .state
            .store
            .get_run(task_id)
            .await?
            .ok_or_else(|| RpcError::task_not_found(task_id))?;
        super::lookups::thread(self.state, run.thread_id, self.who)
            .await
            .map_err(|_| RpcError::task_not_found(task_id))?;
        Ok(run)
    }

    /// Starts the run a message asks for: on its context (new when it names none), answering
    /// the interrupt the context waits on, if any.
    async fn start(&self, m: &Incoming) -> RpcResult<Run> {
        let mut context = m.context_id;
        if let Some(task_id) = m.task_id {
            let run = self.owned_run(task_id).await?;
            if context.is_some_and(|c| c != run.thread_id) {
                return Err(RpcError::invalid_params(format!(
                    "Task {task_id} belongs to another contextId"
                )));
            }
            let task = task_of(self.state, &run).await?;
            if task.state != TaskState::InputRequired {
                return Err(RpcError::unsupported(format!(
                    "Task {task_id} does not wait for input (it is {:?}): send the next message \
                     with its contextId and no taskId",
                    task.state
                )));
            }
            context = Some(run.thread_id);
        }
        let turn = turns::Turn {
            assistant_id: self.assistant_id,
            thread_id: context,
            text: m.text.clone(),
            data: m.data.clone(),
            configurable: m.configurable.clone(),
            context: m.context.clone(),
            protocol: "a2a",
        };
        Ok(turns::start(self.state, self.who, turn).await?)
    }

    async fn send(&self, dialect: Dialect, params: &Map<String, Value>) -> RpcResult<Value> {
        let m = Incoming::parse(params)?;
        let run = self.start(&m).await?;
        let detail = Detail {
            artifacts: true,
            history: m.history_length,
        };
        let run = if m.return_immediately {
            run
        } else {
            wait_for_end(self.state, run.run_id).await?
        };
        Ok(task::task_result(
            dialect,
            &task_of(self.state, &run).await?,
            detail,
        ))
    }

    async fn send_streaming(&self, dialect: Dialect, params: &Map<String, Value>) -> Response {
        let run = match Incoming::parse(params) {
            Ok(m) => self.start(&m).await,
            Err(e) => Err(e),
        };
        match run {
            Ok(run) => self.follow(dialect, run),
            Err(e) => reply(&self.id, Err(e)),
        }
    }

    async fn get(&self, dialect: Dialect, params: &Map<String, Value>) -> RpcResult<Value> {
        let id = required_id(params)?;
        let run = self.owned_run(id).await?;
        let detail = Detail {
            artifacts: true,
            history: history_length(params.get("historyLength"))?,
        };
        Ok(task::task_json(
            dialect,
            &task_of(self.state, &run).await?,
            detail,
        ))
    }

    async fn cancel(&self, dialect: Dialect, params: &Map<String, Value>) -> RpcResult<Value> {
        let id = required_id(params)?;
        let run = self.owned_run(id).await?;
        if !run.status.is_inflight() {
            return Err(RpcError::new(
                -32002,
                format!(
                    "Task {id} cannot be canceled: it has ended ({})",
                    run.status.as_str()
                ),
            ));
        }
        let affected = self
            .state
            .store
            .cancel_runs(&[id], CancelAction::Interrupt)
            .await?;
        self.state
            .runner
            .cancelled(&affected, CancelAction::Interrupt)
            .await;
        let run = wait_for_end(self.state, id).await?;
        let detail = Detail {
            artifacts: true,
            history: None,
        };
        Ok(task::task_json(
            dialect,
            &task_of(self.state, &run).await?,
            detail,
        ))
    }

    /// `ListTasks`: the caller's tasks, newest first; of one context, or of their 100 most
    /// recently updated contexts.
    async fn list(&self, dialect: Dialect, params: &Map<String, Value>) -> RpcResult<Value> {
        let page_size = match params.get("pageSize") {
            None | Some(Value::Null) => 50,
            Some(v) => v
                .as_u64()
                .filter(|n| (1..=100).contains(n))
                .ok_or_else(|| RpcError::invalid_params("pageSize must be between 1 and 100"))?
                as usize,
        };
        let offset = match params.get("pageToken").and_then(Value::as_str) {
            None | Some("") => 0,
            Some(token) => token
                .parse::<usize>()
                .map_err(|_| RpcError::invalid_params("pageToken is not one this server gave"))?,
        };
        let status = match params.get("status").and_then(Value::as_str) {
            None | Some("TASK_STATE_UNSPECIFIED") => None,
            Some(raw) => Some(TaskState::parse(raw).ok_or_else(|| {
                RpcError::invalid_params(format!("status '{raw}' is not a task state"))
            })?),
        };
        let after = match params.get("statusTimestampAfter") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_str().and_then(Timestamp::parse).ok_or_else(|| {
                RpcError::invalid_params("statusTimestampAfter must be an ISO 8601 timestamp")
            })?),
        };
        let detail = Detail {
            artifacts: params.get("includeArtifacts") == Some(&json!(true)),
            history: history_length(params.get("historyLength"))?,
        };
        let threads = self.listed_threads(params).await?;
        let mut tasks = Vec::new();
        for thread in &threads {
            let runs = self
                .state
                .store
                .list_runs(thread.thread_id, None, 1000, 0)
                .await?;
            let latest = runs.first().map(|r| r.run_id);
            tasks.extend(runs.iter().map(|run| {
                task_from(
                    run,
                    turns::read(run, Some(thread), latest == Some(run.run_id)),
                )
            }));
        }
        tasks.retain(|t| {
            status.is_none_or(|s| t.state == s)
                && after.is_none_or(|a| t.timestamp.millis() > a.millis())
        });
        tasks.sort_by_key(|t| std::cmp::Reverse(t.timestamp.millis()));
        let total = tasks.len();
        let page: Vec<Value> = tasks
            .iter()
            .skip(offset)
            .take(page_size)
            .map(|t| task::task_json(dialect, t, detail))
            .collect();
        let next = if offset + page_size < total {
            (offset + page_size).to_string()
        } else {
            String::new()
        };
        Ok(json!({"tasks": page, "nextPageToken": next, "pageSize": page_size, "totalSize": total}))
    }

    /// The threads `ListTasks` reads: the one context named, or the caller's 100 most
    /// recently updated.
    async fn listed_threads(&self, params: &Map<String, Value>) -> RpcResult<Vec<Thread>> {
        Ok(match uuid_field(params.get("contextId"), "contextId")? {
            Some(id) => vec![super::lookups::thread(self.state, id, self.who).await?],
            None => {
                let query = ThreadQuery {
                    owner: self.who.owner.clone(),
                    metadata: Map::new(),
                    values: Map::new(),
                    ids: Vec::new(),
                    status: None,
                    limit: 100,
                    offset: 0,
                    sort_by: Some(crate::store::ThreadSort::UpdatedAt),
                    sort_order: Some(SortOrder::Desc),
                };
                self.state.store.search_threads(&query).await?.items
            }
        })
    }

    async fn subscribe(&self, dialect: Dialect, params: &Map<String, Value>) -> Response {
        let run = match required_id(params) {
            Ok(id) => self.owned_run(id).await,
            Err(e) => Err(e),
        };
        match run {
            Ok(run) if !run.status.is_inflight() => reply(
                &self.id,
                Err(RpcError::unsupported(format!(
                    "Task {} has ended: read it with GetTask",
                    run.run_id
                ))),
            ),
            Ok(run) => self.follow(dialect, run),
            Err(e) => reply(&self.id, Err(e)),
        }
    }

    /// The task's stream: the task, a status update per step and researcher, the report as an
    /// artifact, and the last status. The run goes on if the client leaves.
    fn follow(&self, dialect: Dialect, run: Run) -> Response {
        let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(32);
        let state = self.state.clone();
        let id = self.id.clone();
        tokio::spawn(async move {
            let out = Out { tx, id };
            let _ = stream_task(&state, dialect, run, &out).await;
        });
        turns::event_stream(rx)
    }
}

fn required_id(params: &Map<String, Value>) -> RpcResult<RunId> {
    uuid_field(params.get("id"), "id")?.ok_or_else(|| RpcError::invalid_params("id is required"))
}

/// Where a task's stream goes; sending fails once the client left.
struct Out {
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    id: Value,
}

impl Out {
    async fn send(&self, result: Value) -> Result<(), ()> {
        let body = json!({"jsonrpc": "2.0", "id": self.id, "result": result});
        let frame = format!("data: {body}\n\n");
        self.tx.send(Ok(Bytes::from(frame))).await.map_err(|_| ())
    }

    async fn keep_alive(&self) -> Result<(), ()> {
        let ping = Bytes::from_static(b": ping\n\n");
        self.tx.send(Ok(ping)).await.map_err(|_| ())
    }
}

async fn stream_task(state: &AppState, dialect: Dialect, run: Run, out: &Out) -> Result<(), ()> {
    let first = task_of(state, &run).await.map_err(|_| ())?;
    let start = Detail {
        artifacts: false,
        history: None,
    };
    out.send(task::task_result(dialect, &first, start)).await?;
    let working = Task {
        state: TaskState::Working,
        message: None,
        report: None,
        timestamp: Timestamp::now(),
        history: Vec::new(),
        ..first
    };
    let (mut frames, _following) = turns::follow(state, run.run_id);
    let mut progress = RunProgress::new();
    let mut heartbeat = tokio::time::interval(state.settings.heartbeat);
    heartbeat.tick().await;
    loop {
        tokio::select! {
            frame = frames.recv() => {
                let Some(frame) = frame else { break };
                for change in progress.on_event(&frame.event, &frame.data) {
                    // A step when it is over; a researcher at each search and page count.
                    if change.done || matches!(change.line, LineId::Researcher(_)) {
                        out.send(task::status_update(dialect, &working, Some(&change.text), false)).await?;
                    }
                }
            }
            _ = heartbeat.tick() => out.keep_alive().await?,
        }
    }
    let ended = wait_for_end(state, run.run_id).await.map_err(|_| ())?;
    let last = task_of(state, &ended).await.map_err(|_| ())?;
    if let Some(report) = &last.report {
        out.send(task::artifact_update(dialect, &last, report))
            .await?;
    }
    out.send(task::status_update(
        dialect,
        &last,
        last.message.as_deref(),
        true,
    ))
    .await
}

/// Resolves once the run has ended.
async fn wait_for_end(state: &AppState, run_id: RunId) -> RpcResult<Run> {
    match turns::wait_for_end(state, run_id).await? {
        Some(run) => Ok(run),
        None if state.shutdown.is_cancelled() => Err(RpcError::new(
            -32603,
            format!("The server is shutting down; task {run_id} goes on: read it with GetTask"),
        )),
        None => Err(RpcError::task_not_found(run_id)),
    }
}

async fn task_of(state: &AppState, run: &Run) -> RpcResult<Task> {
    Ok(task_from(run, turns::read_run(state, run).await?))
}

/// A run as a task.
fn task_from(run: &Run, reading: Reading) -> Task {
    let (state, message) = match reading.outcome {
        Outcome::Pending => (TaskState::Submitted, None),
        Outcome::Running => (TaskState::Working, None),
        Outcome::Completed => (TaskState::Completed, None),
        Outcome::NeedsInput(text) => (TaskState::InputRequired, text),
        Outcome::Failed(why) => (TaskState::Failed, Some(why)),
        Outcome::Cancelled => (TaskState::Canceled, None),
    };
    let history = reading
        .messages
        .iter()
        .filter(|m| m["type"] == "human" || turns::is_answer(m))
        .map(|m| (m["type"] == "human", turns::text_of(m)))
        .filter(|(_, text)| !text.trim().is_empty())
        .collect();
    Task {
        id: run.run_id,
        context_id: run.thread_id,
        state,
        message,
        report: reading.report,
        timestamp: run.updated_at,
        history,
    }
}
