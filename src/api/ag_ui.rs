//! AG-UI (the agent–UI event protocol, 1.0) at `POST /ag-ui/{assistant_id}`: a `RunAgentInput`
//! in, an SSE stream of AG-UI events out, on the same threads, runs, owners and limits as the
//! rest of the API. `threadId` is the thread (created on first use, the caller's own). The
//! thread keeps the conversation, so only the input's last user message is read: it is the
//! question, or the answer to a clarifying question. A plan to review ends the run with an
//! `interrupt` outcome, and the next input's `resume` answers it. What the run does comes as
//! events: graph steps as `STEP_*`, researchers as subagents with an activity each, the research
//! state as `STATE_SNAPSHOT` then `STATE_DELTA`, cost and notes as `CUSTOM`, the report or the
//! question as a `TEXT_MESSAGE_*`, and `RUN_FINISHED` or `RUN_ERROR` last. A client that goes
//! away interrupts the run.

use super::AppState;
use super::assistants::resolve;
use super::auth::Principal;
use super::error::{ApiResult, AppError};
use super::turns::{self, Outcome, Turn};
use crate::ids::{AssistantId, ThreadId};
use crate::research::progress::{LineId, RunProgress};
use crate::store::{CancelAction, Run, RunStatus};
use crate::stream::Frame;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::Response;
use axum::routing::post;
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;
use tokio::sync::mpsc;

pub(super) fn router() -> Router<AppState> {
    Router::new().route("/ag-ui/{assistant_id}", post(run_agent))
}

/// Runs the assistant on a `RunAgentInput` and streams AG-UI events.
#[utoipa::path(post, path = "/ag-ui/{assistant_id}", tag = "ag-ui",
    params(("assistant_id" = String, Path, description = "An assistant id or a graph id")),
    request_body(content = Object, description = "An AG-UI RunAgentInput: threadId (a UUID), runId, messages (the last user message is read), resume (answers to a pending interrupt), forwardedProps.configurable (research settings)", content_type = "application/json"),
    responses(
        (status = 200, description = "AG-UI events as server-sent events (`data: {json}`), RUN_STARTED first and RUN_FINISHED or RUN_ERROR last", content_type = "text/event-stream"),
        (status = 404, description = "No such assistant, or the thread is another owner's"),
        (status = 409, description = "The thread has a run in progress, or no interrupt to resume"),
        (status = 422, description = "The input is not a RunAgentInput this server can run")))]
pub(super) async fn run_agent(
    State(state): State<AppState>,
    who: Principal,
    Path(raw): Path<String>,
    body: Bytes,
) -> ApiResult<Response> {
    let assistant = resolve(&state, &raw, &who.owner).await?;
    let input: Value = serde_json::from_slice(&body)
        .map_err(|e| AppError::BadRequest(format!("The body is not JSON: {e}")))?;
    drop(body);
    let mut input = RunInput::parse(&input)?;
    // The event stream stays open until the run ends: one of the owner's streams.
    let slot = state.admission.hold_open(&who.owner)?;
    let turn = input.turn(&state, &who, assistant.assistant_id).await?;
    let run = turns::start(&state, &who, turn).await?;
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(32);
    let out = Out {
        tx,
        thread_id: input.thread_id.to_string(),
        run_id: input.run_id.clone(),
    };
    tokio::spawn(async move {
        if stream_run(&state, &run, &input, &out).await.is_err() {
            // The client went away: the run stops, as a cancelled call should.
            if let Ok(affected) = state
                .store
                .cancel_runs(&[run.run_id], CancelAction::Interrupt)
                .await
            {
                state
                    .runner
                    .cancelled(&affected, CancelAction::Interrupt)
                    .await;
            }
        }
    });
    Ok(crate::api::runs::admission::with_slot(
        turns::event_stream(rx),
        slot,
    ))
}

/// The parts of a `RunAgentInput` this server reads.
struct RunInput {
    thread_id: ThreadId,
    run_id: String,
    /// The last user message's text, if the last message is the user's.
    text: Option<String>,
    /// The answer to the pending interrupt (`resume[0]`), when the input resumes.
    resume: Option<Resume>,
    configurable: Option<Map<String, Value>>,
    /// The client's copy of the state (what this endpoint streamed it, unless the UI edited it).
    state: Map<String, Value>,
    /// Input fields the research agent has no use for, reported back in a `CUSTOM` event.
    unused: Map<String, Value>,
}

struct Resume {
    interrupt_id: String,
    payload: Option<Value>,
}

impl RunInput {
    fn parse(input: &Value) -> ApiResult<Self> {
        let invalid = |m: &str| AppError::Invalid(m.to_owned());
        if !input.is_object() {
            return Err(invalid("The body must be a RunAgentInput object"));
        }
        let thread_id = input["threadId"]
            .as_str()
            .ok_or_else(|| invalid("threadId is required (a string)"))?;
        let thread_id = thread_id.parse::<ThreadId>().map_err(|_| {
            AppError::Invalid(format!(
                "threadId '{thread_id}' is not a UUID: this server's threads are named by UUIDs"
            ))
        })?;
        let run_id = input["runId"]
            .as_str()
            .filter(|r| !r.is_empty())
            .ok_or_else(|| invalid("runId is required (a string)"))?
            .to_owned();
        let messages = input["messages"]
            .as_array()
            .ok_or_else(|| invalid("messages is required (a list)"))?;
        super::body_shape::check_messages(messages, "messages")?;
        let text = messages
            .iter()
            .rfind(|m| m["role"] != "activity")
            .filter(|m| m["role"] == "user")
            .map(user_text)
            .filter(|t| !t.trim().is_empty());
        let resume = match &input["resume"] {
            Value::Null => None,
            Value::Array(entries) if entries.is_empty() => None,
            Value::Array(entries) => Some(Resume::parse(entries)?),
            _ => return Err(invalid("resume must be a list of answers to interrupts")),
        };
        if text.is_none() && resume.is_none() {
            return Err(invalid(
                "Nothing to run: the last message must be the user's (with text), or resume \
                 must answer the pending interrupt",
            ));
        }
        let configurable = match &input["forwardedProps"]["configurable"] {
            Value::Null => None,
            Value::Object(c) => Some(c.clone()),
            _ => {
                return Err(invalid(
                    "forwardedProps.configurable must be an object of research settings",
                ));
            }
        };
        let state = match &input["state"] {
            Value::Null => Map::new(),
            Value::Object(map) => map.clone(),
            _ => return Err(invalid("state must be an object")),
        };
        let mut unused = Map::new();
        for key in ["tools", "context"] {
            if input[key].as_array().is_some_and(|a| !a.is_empty()) {
                unused.insert(key.to_owned(), input[key].clone());
            }
        }
        Ok(Self {
            thread_id,
            run_id,
            text,
            resume,
            configurable,
            state,
            unused,
        })
    }

    /// The turn this input asks for. A resume must meet a thread that waits on that interrupt.
    /// A client state that differs from the thread's is not applied (the thread's state is the
    /// server's): it is reported as unused.
    async fn turn(
        &mut self,
        state: &AppState,
        who: &Principal,
        assistant_id: AssistantId,
    ) -> ApiResult<Turn> {
        let thread = super::lookups::own_or_none(state, self.thread_id, &who.owner).await?;
        let current = thread
            .as_ref()
            .and_then(|t| t.values.as_ref())
            .and_then(Value::as_object)
            .map(shown_state)
            .unwrap_or_default();
        if self.state.iter().any(|(k, v)| current.get(k) != Some(v)) {
            self.unused
                .insert("state".into(), Value::Object(self.state.clone()));
        }
        let waiting = thread.as_ref().filter(|t| turns::waits_for_input(t));
        if let Some(resume) = &self.resume {
            let Some(thread) = waiting else {
                return Err(AppError::Conflict(format!(
                    "Thread {} has no pending interrupt to resume",
                    self.thread_id
                )));
            };
            let ids = interrupts(&thread.interrupts);
            if !ids.iter().any(|i| i["id"] == resume.interrupt_id.as_str()) {
                return Err(AppError::Invalid(format!(
                    "resume answers interrupt '{}', but the thread waits on {}",
                    resume.interrupt_id,
                    ids.iter()
                        .filter_map(|i| i["id"].as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
        Ok(Turn {
            assistant_id,
            thread_id: Some(self.thread_id),
            text: self.text.clone().unwrap_or_default(),
            data: self.resume.as_ref().and_then(|r| r.payload.clone()),
            configurable: self.configurable.clone(),
            context: None,
            protocol: "ag_ui",
        })
    }
}

impl Resume {
    fn parse(entries: &[Value]) -> ApiResult<Self> {
        let [entry] = entries else {
            return Err(AppError::Invalid(
                "resume: this agent waits on one interrupt at a time; answer it alone".into(),
            ));
        };
        let interrupt_id = entry["interruptId"]
            .as_str()
            .ok_or_else(|| AppError::Invalid("resume[0].interruptId is required".into()))?
            .to_owned();
        match entry["status"].as_str() {
            Some("resolved") => {}
            Some("cancelled") => {
                return Err(AppError::Invalid(
                    "resume: a plan review cannot be cancelled, only answered: resolve it with \
                     {\"action\": \"reject\", \"feedback\": \"...\"} to have it planned again"
                        .into(),
                ));
            }
            _ => {
                return Err(AppError::Invalid(
                    "resume[0].status must be resolved or cancelled".into(),
                ));
            }
        }
        Ok(Self {
            interrupt_id,
            payload: entry.get("payload").filter(|p| !p.is_null()).cloned(),
        })
    }
}

/// A user message's text: its content string, or its text parts joined.
fn user_text(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter(|p| p["type"] == "text")
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The thread's pending interrupts as AG-UI `Interrupt`s: `{id, reason, message}`.
fn interrupts(pending: &Value) -> Vec<Value> {
    let Some(by_task) = pending.as_object() else {
        return Vec::new();
    };
    by_task
        .iter()
        .flat_map(|(task, list)| {
            list.as_array()
                .into_iter()
                .flatten()
                .map(move |i| (task, i))
        })
        .map(|(task, interrupt)| {
            let id = interrupt["id"].as_str().unwrap_or(task);
            let value = &interrupt["value"];
            let reason = if value.get("topics").is_some() {
                "plan_review"
            } else {
                "input"
            };
            let one = json!({ task: [interrupt] });
            let message = turns::interrupt_text(&one).unwrap_or_default();
            json!({"id": id, "reason": reason, "message": message,
                   "metadata": {"value": value}})
        })
        .collect()
}

/// Where the events go; sending fails once the client left.
struct Out {
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    thread_id: String,
    run_id: String,
}

type Sent = Result<(), ()>;

impl Out {
    async fn send(&self, event: Value) -> Sent {
        let line = format!("data: {event}\n\n");
        self.tx.send(Ok(Bytes::from(line))).await.map_err(|_| ())
    }

    async fn keep_alive(&self) -> Sent {
        let ping = Bytes::from_static(b": ping\n\n");
        self.tx.send(Ok(ping)).await.map_err(|_| ())
    }

    async fn finished(&self, extra: Value) -> Sent {
        let mut event = json!({"type": "RUN_FINISHED", "threadId": self.thread_id,
                               "runId": self.run_id});
        merge(&mut event, extra);
        self.send(event).await
    }
}

fn merge(into: &mut Value, extra: Value) {
    if let (Some(into), Value::Object(extra)) = (into.as_object_mut(), extra) {
        into.extend(extra);
    }
}

/// What has been opened and must be closed before the run's last event.
#[derive(Default)]
struct Open {
    steps: Vec<&'static str>,
    subagents: BTreeSet<usize>,
    finished_subagents: BTreeSet<usize>,
    /// The research state last sent, for deltas.
    state: Option<Map<String, Value>>,
}

async fn stream_run(state: &AppState, run: &Run, input: &RunInput, out: &Out) -> Sent {
    out.send(
        json!({"type": "RUN_STARTED", "threadId": out.thread_id, "runId": out.run_id,
                    "metadata": {"run_id": run.run_id, "assistant_id": run.assistant_id}}),
    )
    .await?;
    if !input.unused.is_empty() {
        out.send(json!({"type": "CUSTOM", "name": "unused_input", "value": {
            "fields": input.unused.keys().collect::<Vec<_>>(),
            "why": "The research agent calls only its own tools (search, think, research) and \
                    reads only the last user message: frontend tools and context are not used, \
                    and a state that differs from the thread's is not applied."}}))
            .await?;
    }
    let (mut frames, _following) = turns::follow(state, run.run_id);
    let mut progress = RunProgress::new();
    let mut open = Open::default();
    let mut heartbeat = tokio::time::interval(state.settings.heartbeat);
    heartbeat.tick().await;
    loop {
        tokio::select! {
            frame = frames.recv() => {
                let Some(frame) = frame else { break };
                on_frame(&frame, &mut progress, &mut open, out).await?;
            }
            _ = heartbeat.tick() => out.keep_alive().await?,
        }
    }
    let Some(ended) = turns::wait_for_end(state, run.run_id).await.ok().flatten() else {
        close_all(&mut open, out).await?;
        return out
            .send(json!({"type": "RUN_ERROR", "code": "shutting_down",
                "message": format!("The server is shutting down; the run goes on (thread {}, run {})",
                                   run.thread_id, run.run_id)}))
            .await;
    };
    close_all(&mut open, out).await?;
    finish(state, &ended, out).await
}

/// One stream frame as AG-UI events.
async fn on_frame(frame: &Frame, progress: &mut RunProgress, open: &mut Open, out: &Out) -> Sent {
    let (mode, namespace) = frame.event.split_once('|').unwrap_or((&frame.event, ""));
    let data: Value = serde_json::from_str(&frame.data).unwrap_or(Value::Null);
    match mode {
        "values" if namespace.is_empty() => return send_state(&data, open, out).await,
        "custom" => {
            if let Some(kind) = data["type"].as_str() {
                let value = if kind == "usage" {
                    data["run"].clone()
                } else {
                    data.clone()
                };
                out.send(json!({"type": "CUSTOM", "name": kind, "value": value}))
                    .await?;
            }
        }
        _ => {}
    }
    for change in progress.on_event(&frame.event, &frame.data) {
        match change.line {
            LineId::Step(step) => {
                if !open.steps.contains(&step) {
                    open.steps.push(step);
                    out.send(json!({"type": "STEP_STARTED", "stepName": step}))
                        .await?;
                }
                if change.done {
                    open.steps.retain(|s| *s != step);
                    out.send(json!({"type": "STEP_FINISHED", "stepName": step}))
                        .await?;
                }
            }
            LineId::Researcher(n) => on_researcher(n, &change.text, change.done, open, out).await?,
        }
    }
    Ok(())
}

/// A researcher is a subagent with one activity: what it searched and read so far.
async fn on_researcher(n: usize, text: &str, done: bool, open: &mut Open, out: &Out) -> Sent {
    if open.finished_subagents.contains(&n) {
        return Ok(());
    }
    let id = format!("researcher-{}", n + 1);
    if open.subagents.insert(n) {
        out.send(json!({"type": "SUBAGENT_STARTED", "subagentRunId": id,
                        "name": format!("Researcher {}", n + 1)}))
            .await?;
    }
    out.send(
        json!({"type": "ACTIVITY_SNAPSHOT", "messageId": format!("{id}-activity"),
                    "activityType": "research", "subagentRunId": id,
                    "content": {"text": text, "done": done}}),
    )
    .await?;
    if done {
        open.subagents.remove(&n);
        open.finished_subagents.insert(n);
        out.send(json!({"type": "SUBAGENT_FINISHED", "subagentRunId": id,
                        "outcome": {"type": "success"}}))
            .await?;
    }
    Ok(())
}

/// The research state, without the conversations and raw notes a UI has no use for: a
/// snapshot first, then the keys that changed as a JSON Patch.
async fn send_state(values: &Value, open: &mut Open, out: &Out) -> Sent {
    let Some(values) = values.as_object() else {
        return Ok(());
    };
    let shown = shown_state(values);
    let event = match &open.state {
        None => json!({"type": "STATE_SNAPSHOT", "snapshot": shown}),
        Some(before) => {
            let delta = diff(before, &shown);
            if delta.is_empty() {
                return Ok(());
            }
            json!({"type": "STATE_DELTA", "delta": delta})
        }
    };
    open.state = Some(shown);
    out.send(event).await
}

/// The research state as a UI sees it: without the conversations and raw notes, each source
/// its address and title.
fn shown_state(values: &Map<String, Value>) -> Map<String, Value> {
    let mut shown: Map<String, Value> = values
        .iter()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "messages" | "supervisor_messages" | "raw_notes" | "notes"
            )
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Some(sources) = shown.get_mut("sources").and_then(Value::as_array_mut) {
        for source in sources {
            *source = json!({"url": source["url"], "title": source["title"]});
        }
    }
    shown
}

/// A JSON Patch from `before` to `after`, one operation per top-level key that changed.
fn diff(before: &Map<String, Value>, after: &Map<String, Value>) -> Vec<Value> {
    let pointer = |key: &str| format!("/{}", key.replace('~', "~0").replace('/', "~1"));
    let mut ops = Vec::new();
    for (key, value) in after {
        match before.get(key) {
            None => ops.push(json!({"op": "add", "path": pointer(key), "value": value})),
            Some(old) if old != value => {
                ops.push(json!({"op": "replace", "path": pointer(key), "value": value}));
            }
            Some(_) => {}
        }
    }
    for key in before.keys().filter(|k| !after.contains_key(*k)) {
        ops.push(json!({"op": "remove", "path": pointer(key)}));
    }
    ops
}

async fn close_all(open: &mut Open, out: &Out) -> Sent {
    for n in std::mem::take(&mut open.subagents) {
        out.send(json!({"type": "SUBAGENT_FINISHED",
                        "subagentRunId": format!("researcher-{}", n + 1)}))
            .await?;
    }
    for step in std::mem::take(&mut open.steps) {
        out.send(json!({"type": "STEP_FINISHED", "stepName": step}))
            .await?;
    }
    Ok(())
}

/// The run's end: the report or the question as a message, then how the run finished.
async fn finish(state: &AppState, run: &Run, out: &Out) -> Sent {
    let reading = turns::read_run(state, run).await.map_err(|_| ())?;
    let message_id = format!("{}-answer", run.run_id);
    let say = |text: String| {
        let id = message_id.clone();
        async move {
            out.send(json!({"type": "TEXT_MESSAGE_START", "messageId": id, "role": "assistant"}))
                .await?;
            out.send(json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": text}))
                .await?;
            out.send(json!({"type": "TEXT_MESSAGE_END", "messageId": id}))
                .await
        }
    };
    let ids = json!({"thread_id": run.thread_id, "run_id": run.run_id});
    match reading.outcome {
        Outcome::Completed => {
            if let Some(text) = reading.answer() {
                say(text).await?;
            }
            let mut result = ids;
            merge(&mut result, json!({"status": "completed"}));
            out.finished(json!({"result": result})).await
        }
        Outcome::NeedsInput(question) if run.status != RunStatus::Interrupted => {
            say(question.unwrap_or_default()).await?;
            let mut result = ids;
            merge(&mut result, json!({"status": "needs_input"}));
            out.finished(json!({"result": result})).await
        }
        Outcome::NeedsInput(_) => {
            let thread = state
                .store
                .get_thread(run.thread_id)
                .await
                .map_err(|_| ())?;
            let pending = thread
                .map(|t| interrupts(&t.interrupts))
                .unwrap_or_default();
            if pending.is_empty() {
                return out
                    .finished(json!({"outcome": {"type": "cancelled"}}))
                    .await;
            }
            out.finished(json!({"outcome": {"type": "interrupt", "interrupts": pending}}))
                .await
        }
        Outcome::Failed(why) => {
            out.send(json!({"type": "RUN_ERROR", "code": "research_failed", "message": why}))
                .await
        }
        Outcome::Cancelled | Outcome::Pending | Outcome::Running => {
            out.finished(json!({"outcome": {"type": "cancelled"}}))
                .await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    #[test]
    fn a_delta_names_each_changed_key() {
        let before = json!({"a": 1, "b": 2, "c/d": 3});
        let after = json!({"a": 1, "b": 5, "e": 6});
        let (Value::Object(before), Value::Object(after)) = (before, after) else {
            unreachable!()
        };
        let ops = diff(&before, &after);
        assert_eq!(
            ops,
            vec![
                json!({"op": "replace", "path": "/b", "value": 5}),
                json!({"op": "add", "path": "/e", "value": 6}),
                json!({"op": "remove", "path": "/c~1d"}),
            ]
        );
    }

    #[test]
    fn input_is_checked() {
        let ok = json!({"threadId": Uuid::nil().to_string(), "runId": "r1",
                        "messages": [{"id": "1", "role": "user", "content": "Why?"}]});
        assert!(RunInput::parse(&ok).is_ok_and(|i| i.text.as_deref() == Some("Why?")));
        let mut bad = ok.clone();
        bad["threadId"] = json!("t-1");
        assert!(RunInput::parse(&bad).is_err());
        let mut none = ok.clone();
        none["messages"] = json!([]);
        assert!(RunInput::parse(&none).is_err());
        let mut cancelled = ok;
        cancelled["resume"] = json!([{"interruptId": "i", "status": "cancelled"}]);
        assert!(RunInput::parse(&cancelled).is_err());
    }
}
