//! One turn of a conversation with an assistant, shared by the agent protocols (A2A, MCP,
//! AG-UI). A message starts a run on a thread: a new question, or the answer to the interrupt
//! the thread waits on. A run that has ended reads as a report, a question back, a failure or a
//! cancellation. The protocols differ only in how they carry these.

use super::AppState;
use super::auth::Principal;
use super::error::ApiResult;
use super::runs::{RunConfig, RunRequest, start_on_thread};
use crate::graph::interrupts::{Resume, ResumeCommand};
use crate::ids::{AssistantId, RunId, ThreadId};
use crate::runs::options::IfNotExists;
use crate::store::{JsonMap, MultitaskStrategy, Run, RunStatus, StoreResult, Thread, ThreadStatus};
use crate::stream::{Frame, STORE_POLL, StreamMode, StreamModes, follow_run};
use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

/// The stream modes a turn's run records, so a protocol can follow it live.
fn run_modes() -> StreamModes {
    StreamModes::of(&[StreamMode::Values, StreamMode::Updates, StreamMode::Custom])
}

/// What a protocol hands over to start a turn.
pub(super) struct Turn {
    pub(super) assistant_id: AssistantId,
    /// The thread to continue (it must be the caller's or not exist yet); none starts one.
    pub(super) thread_id: Option<ThreadId>,
    pub(super) text: String,
    /// A structured answer to an interrupt (a plan review), used instead of `text` there.
    pub(super) data: Option<Value>,
    /// Research settings for this run.
    pub(super) configurable: Option<JsonMap>,
    /// The run's `context` (LangGraph's newer name for its settings), as the protocol's
    /// caller sent it; with `configurable` too, the run is refused as on `POST /runs`.
    pub(super) context: Option<JsonMap>,
    /// Recorded in the run's metadata (`{"a2a": true}`), so runs say where they came from.
    pub(super) protocol: &'static str,
}

/// Starts the run a turn asks for, as the caller: an interrupted thread gets the text (or the
/// data) as its resume value, any other thread a new human message.
pub(super) async fn start(state: &AppState, who: &Principal, turn: Turn) -> ApiResult<Run> {
    let thread_id = match turn.thread_id {
        Some(id) => {
            super::lookups::not_anothers(state, id, &who.owner).await?;
            id
        }
        None => ThreadId::new(),
    };
    let thread = state.store.get_thread(thread_id).await?;
    let mut body = RunRequest {
        stream_mode: Some(run_modes()),
        stream_subgraphs: Some(true),
        stream_resumable: Some(true),
        if_not_exists: Some(IfNotExists::Create),
        multitask_strategy: Some(MultitaskStrategy::Reject),
        metadata: Some(Map::from_iter([(turn.protocol.to_owned(), json!(true))])),
        context: turn.context,
        ..RunRequest::for_assistant(turn.assistant_id.to_string())
    };
    if thread.as_ref().is_some_and(waits_for_input) {
        let answer = turn.data.unwrap_or_else(|| json!(turn.text));
        body.command = Some(ResumeCommand {
            resume: Some(Resume::Value(answer)),
            ..ResumeCommand::default()
        });
    } else {
        body.input = Some(json!({"messages": [{"type": "human", "content": turn.text}]}));
    }
    if let Some(configurable) = turn.configurable {
        body.config = Some(RunConfig {
            configurable: Some(configurable),
            ..RunConfig::default()
        });
    }
    start_on_thread(state, who, thread_id, body).await
}

/// The run once it has ended (the store is read every `STORE_POLL`). `None` when it vanished
/// or the server is shutting down: the run goes on, and the caller says how to read it later.
pub(super) async fn wait_for_end(state: &AppState, run_id: RunId) -> StoreResult<Option<Run>> {
    loop {
        match state.store.get_run(run_id).await? {
            Some(run) if !run.status.is_inflight() => return Ok(Some(run)),
            Some(_) => {}
            None => return Ok(None),
        }
        tokio::select! {
            () = tokio::time::sleep(STORE_POLL) => {}
            () = state.shutdown.cancelled() => return Ok(None),
        }
    }
}

/// A thread at rest on interrupts: the next message answers them.
pub(super) fn waits_for_input(thread: &Thread) -> bool {
    thread.status == ThreadStatus::Interrupted
        && thread.interrupts.as_object().is_some_and(|m| {
            m.values()
                .any(|v| v.as_array().is_some_and(|a| !a.is_empty()))
        })
}

/// Where a run stands, in the terms every agent protocol has.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Outcome {
    Pending,
    Running,
    /// Ended well; the report, if one was written, is in `Reading::report`.
    Completed,
    /// The agent waits for the caller: a clarifying question or a plan to review, in words.
    NeedsInput(Option<String>),
    Failed(String),
    Cancelled,
}

/// A run read together with its thread.
pub(super) struct Reading {
    pub(super) outcome: Outcome,
    pub(super) report: Option<String>,
    /// The thread's messages, oldest first (empty for an earlier run of the thread).
    pub(super) messages: Vec<Value>,
}

impl Reading {
    /// What the run answered: its report, or else the thread's last message to the user.
    pub(super) fn answer(&self) -> Option<String> {
        self.report.clone().or_else(|| {
            self.messages
                .iter()
                .rev()
                .find(|m| is_answer(m))
                .map(text_of)
        })
    }
}

/// The run's stream frames as they come, ending with the run. Following stops when the
/// returned guard is dropped.
pub(super) fn follow(
    state: &AppState,
    run_id: RunId,
) -> (
    mpsc::Receiver<Frame>,
    tokio_util::task::AbortOnDropHandle<bool>,
) {
    let (tx, frames) = mpsc::channel::<Frame>(64);
    let follower = tokio::spawn(follow_run(
        state.store.clone(),
        state.bus.clone(),
        run_id,
        state.shutdown.clone(),
        tx,
    ));
    (frames, tokio_util::task::AbortOnDropHandle::new(follower))
}

/// A `text/event-stream` response whose body is what `rx` yields.
pub(super) fn event_stream(rx: mpsc::Receiver<Result<Bytes, std::io::Error>>) -> Response {
    let mut response = Body::from_stream(ReceiverStream::new(rx)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-cache"),
    );
    response
}

/// Reads a run. The thread's state is its latest run's: an earlier run is read from its status
/// alone.
pub(super) fn read(run: &Run, thread: Option<&Thread>, latest: bool) -> Reading {
    let values = thread
        .filter(|_| latest)
        .and_then(|t| t.values.clone())
        .unwrap_or(Value::Null);
    let messages = values["messages"].as_array().cloned().unwrap_or_default();
    let last_answer = messages.last().filter(|m| is_answer(m)).map(text_of);
    // A question on a written report that was answered from its sources: the answer is what
    // the run said (the report stays the thread's, unchanged).
    let report = if values["follow_up"]["mode"] == "answered" {
        last_answer.clone()
    } else {
        values["final_report"].as_str().map(str::to_owned)
    };
    let outcome = match run.status {
        RunStatus::Pending => Outcome::Pending,
        RunStatus::Running => Outcome::Running,
        RunStatus::Success if report.is_some() => Outcome::Completed,
        RunStatus::Success if latest && last_answer.is_some() => Outcome::NeedsInput(last_answer),
        RunStatus::Success => Outcome::Completed,
        RunStatus::Error | RunStatus::Timeout => Outcome::Failed(
            thread
                .filter(|_| latest)
                .and_then(|t| t.error.as_ref())
                .map(|e| e.message.clone())
                .unwrap_or_else(|| format!("The research ended in {}", run.status.as_str())),
        ),
        RunStatus::Interrupted => match thread.filter(|t| latest && waits_for_input(t)) {
            Some(t) => Outcome::NeedsInput(interrupt_text(&t.interrupts)),
            None => Outcome::Cancelled,
        },
    };
    Reading {
        outcome,
        report,
        messages,
    }
}

/// Reads a run, looking up its thread and whether it is the thread's latest run.
pub(super) async fn read_run(state: &AppState, run: &Run) -> StoreResult<Reading> {
    let thread = state.store.get_thread(run.thread_id).await?;
    let latest = state
        .store
        .list_runs(run.thread_id, None, 1, 0)
        .await?
        .first()
        .is_some_and(|r| r.run_id == run.run_id);
    Ok(read(run, thread.as_ref(), latest))
}

/// An AI message that speaks to the user (not one that only calls tools).
pub(super) fn is_answer(message: &Value) -> bool {
    message["type"] == "ai" && message["tool_calls"].as_array().is_none_or(Vec::is_empty)
}

/// A message's text, whether its content is a string or a list of parts.
pub(super) fn text_of(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    }
}

/// What an interrupt asks, in words: its question, the brief and topics of a plan to review,
/// and how to answer.
pub(super) fn interrupt_text(interrupts: &Value) -> Option<String> {
    let by_task: &Map<String, Value> = interrupts.as_object()?;
    let first = by_task
        .values()
        .filter_map(Value::as_array)
        .flatten()
        .next()?;
    let value = &first["value"];
    let Some(fields) = value.as_object() else {
        return Some(
            value
                .as_str()
                .map_or_else(|| value.to_string(), str::to_owned),
        );
    };
    let mut parts: Vec<String> = Vec::new();
    if let Some(q) = fields.get("question").and_then(Value::as_str) {
        parts.push(q.to_owned());
    }
    if let Some(brief) = fields.get("research_brief").and_then(Value::as_str) {
        parts.push(format!("Research brief: {brief}"));
    }
    if let Some(topics) = fields.get("topics").and_then(Value::as_array) {
        let lines: Vec<String> = topics
            .iter()
            .filter_map(Value::as_str)
            .map(|t| format!("- {t}"))
            .collect();
        parts.push(format!("Planned topics:\n{}", lines.join("\n")));
    }
    if let Some(how) = fields.get("how_to_answer").and_then(Value::as_str) {
        parts.push(how.to_owned());
    }
    if parts.is_empty() {
        parts.push(value.to_string());
    }
    Some(parts.join("\n\n"))
}
