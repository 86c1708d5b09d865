//! The thread protocol over a WebSocket at `GET /threads/{thread_id}/stream/events`, as the
//! official clients open it (`transport: "websocket"` in `@langchain/langgraph-sdk` and
//! `useStream`, `transport="websocket"` in the Python SDK). Every text frame the client sends
//! is a command `{id, method, params}` and gets one answer frame with its `id`:
//!
//! - `subscription.subscribe {channels, namespaces?, depth?}` → `{subscription_id}`: the
//!   thread's runs, replayed then followed, arrive on the socket as event frames, filtered as
//!   on the SSE stream; `subscription.reconnect` is the same with a required `since` (and may
//!   keep the client's `subscription_id`); `subscription.unsubscribe {subscription_id}` ends one.
//! - every other command is the one `POST /threads/{thread_id}/commands` runs.
//!
//! An event two subscriptions pass goes out once. Limits: the socket holds one of its owner's
//! open-stream slots while it is open, at most `MAX_SUBSCRIPTIONS` subscriptions, frames up to
//! the body limit; a page of another site that `server.cors_origins` does not list is refused
//! before the upgrade (a socket starts runs: it is a write). The server closes its sockets
//! with 1001 when it shuts down.

use super::AppState;
use super::auth::Principal;
use super::params::parse_id;
use super::runs::admission::HeldOpen;
use super::thread_protocol::{answer_of, describe_run, dispatch, read_command, refusal};
use crate::ids::ThreadId;
use crate::stream::thread_protocol::{Filter, SocketEvents, ThreadTape};
use axum::Json;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::task::AbortOnDropHandle;

/// Subscriptions one socket may hold at once (`useStream` opens three or four).
const MAX_SUBSCRIPTIONS: usize = 16;

/// The thread's event stream: over SSE (`POST`, the protocol's) or this socket (`GET`).
pub(super) fn router() -> axum::Router<AppState> {
    axum::Router::new().route(
        "/threads/{thread_id}/stream/events",
        axum::routing::post(super::thread_protocol::events).get(socket),
    )
}

/// Opens the socket.
pub(super) async fn socket(
    State(state): State<AppState>,
    who: Principal,
    Path(raw_thread): Path<String>,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    let upgrade = match upgrade {
        Ok(upgrade) => upgrade,
        Err(rejection) => {
            let detail = format!(
                "{}: this path is a WebSocket for GET, and an SSE stream for a POST of the \
                 channels",
                rejection.body_text()
            );
            return (rejection.status(), Json(json!({ "detail": detail }))).into_response();
        }
    };
    let thread_id = match parse_id::<ThreadId>(&raw_thread) {
        Ok(id) => id,
        Err(error) => return error.into_response(),
    };
    if let Err(error) = super::lookups::not_anothers(&state, thread_id, &who.owner).await {
        return error.into_response();
    }
    let held = match state.admission.hold_open(&who.owner) {
        Ok(held) => held,
        Err(error) => return error.into_response(),
    };
    let limit = state.settings.max_body_bytes;
    upgrade
        .max_message_size(limit)
        .max_frame_size(limit)
        .on_upgrade(move |ws| serve(Connection::new(state, who, thread_id, held), ws))
}

/// One open socket.
struct Connection {
    state: AppState,
    who: Principal,
    thread_id: ThreadId,
    events: SocketEvents,
    /// Text frames for the socket: command answers and events.
    out: mpsc::Sender<String>,
    frames: Option<mpsc::Receiver<String>>,
    /// The socket's tape and the replays of late subscriptions.
    tapes: Vec<AbortOnDropHandle<()>>,
    _held: Option<HeldOpen>,
}

impl Connection {
    fn new(state: AppState, who: Principal, thread_id: ThreadId, held: Option<HeldOpen>) -> Self {
        let (out, frames) = mpsc::channel(64);
        Self {
            events: SocketEvents::new(out.clone()),
            state,
            who,
            thread_id,
            out,
            frames: Some(frames),
            tapes: Vec::new(),
            _held: held,
        }
    }

    /// The answer to one text frame.
    async fn answer(&mut self, text: &str) -> Value {
        // as every HTTP body is: counted before it is parsed, so a frame of many tiny values
        // costs no memory
        if let Err(too_many) = super::body_shape::check_values(text.as_bytes()) {
            return refusal(Value::Null, "invalid_argument", &too_many.detail());
        }
        let Ok(envelope) = serde_json::from_str::<Value>(text) else {
            return refusal(
                Value::Null,
                "invalid_argument",
                "Protocol commands must be valid JSON.",
            );
        };
        let (id, method, params) = match read_command(&envelope) {
            Ok(command) => command,
            Err(refused) => return refused,
        };
        match method.as_str() {
            "subscription.subscribe" => self.subscribe(id, &params, None),
            "subscription.reconnect" => match params.get("since").and_then(Value::as_u64) {
                Some(_) => {
                    let keep = params["subscription_id"].as_str().map(str::to_owned);
                    self.subscribe(id, &params, keep)
                }
                None => refusal(
                    json!(id),
                    "invalid_argument",
                    "subscription.reconnect requires a non-negative integer since.",
                ),
            },
            "subscription.unsubscribe" => self.unsubscribe(id, &params),
            _ => {
                let outcome =
                    dispatch(&self.state, &self.who, self.thread_id, &method, &params).await;
                answer_of(id, outcome).unwrap_or_else(|error| {
                    let message = format!("{}: {}", error.status().as_u16(), error.detail());
                    refusal(json!(id), "unknown_error", &message)
                })
            }
        }
    }

    fn subscribe(&mut self, id: i64, params: &Value, keep: Option<String>) -> Value {
        let filter = match Filter::parse(params) {
            Ok(filter) => filter,
            Err(why) => return refusal(json!(id), "invalid_argument", &why),
        };
        let replaces = keep.is_some();
        if self.events.count() >= MAX_SUBSCRIPTIONS && !replaces {
            let message = format!(
                "A socket holds at most {MAX_SUBSCRIPTIONS} subscriptions: unsubscribe one first"
            );
            return refusal(json!(id), "invalid_argument", &message);
        }
        let subscription_id = keep.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let tape = self.tape();
        if let Some(play) = self.events.subscribe(subscription_id.clone(), tape, filter) {
            self.tapes.retain(|task| !task.is_finished());
            self.tapes.push(AbortOnDropHandle::new(tokio::spawn(play)));
        }
        json!({"type": "success", "id": id, "result": {"subscription_id": subscription_id}})
    }

    fn unsubscribe(&mut self, id: i64, params: &Value) -> Value {
        let Some(subscription_id) = params["subscription_id"].as_str() else {
            return refusal(
                json!(id),
                "invalid_argument",
                "subscription.unsubscribe requires a subscription_id.",
            );
        };
        match self.events.unsubscribe(subscription_id) {
            true => json!({"type": "success", "id": id, "result": {}}),
            false => refusal(
                json!(id),
                "no_such_subscription",
                &format!("No subscription {subscription_id} on this socket"),
            ),
        }
    }

    fn tape(&self) -> ThreadTape {
        ThreadTape {
            store: self.state.store.clone(),
            describe: describe_run,
            bus: self.state.bus.clone(),
            thread_id: self.thread_id,
            owner: self.who.owner.clone(),
            shutdown: self.state.shutdown.clone(),
            heartbeat: self.state.settings.heartbeat,
        }
    }
}

/// Reads commands and writes answers and events until either side closes or the server stops.
async fn serve(mut connection: Connection, ws: WebSocket) {
    let (mut sink, mut incoming) = ws.split();
    let Some(mut frames) = connection.frames.take() else {
        return;
    };
    let shutdown = connection.state.shutdown.clone();
    let heartbeat = connection.state.settings.heartbeat;
    // Frames go out from one task, so a slow reader holds up no command; pings keep proxies
    // from closing a quiet socket.
    let writer = AbortOnDropHandle::new(tokio::spawn(async move {
        let mut beat = tokio::time::interval_at(tokio::time::Instant::now() + heartbeat, heartbeat);
        loop {
            let message = tokio::select! {
                biased;
                () = shutdown.cancelled() => {
                    let going = CloseFrame { code: close_code::AWAY, reason: "server stopping".into() };
                    let _ = sink.send(Message::Close(Some(going))).await;
                    return;
                }
                frame = frames.recv() => match frame {
                    Some(text) => Message::Text(text.into()),
                    None => break,
                },
                _ = beat.tick() => Message::Ping(Vec::new().into()),
            };
            if sink.send(message).await.is_err() {
                return;
            }
        }
    }));
    loop {
        let message = tokio::select! {
            message = incoming.next() => message,
            () = connection.state.shutdown.cancelled() => break,
        };
        let answer = match message {
            Some(Ok(Message::Text(text))) => connection.answer(text.as_str()).await,
            Some(Ok(Message::Binary(_))) => refusal(
                Value::Null,
                "invalid_argument",
                "Protocol commands are text frames of JSON.",
            ),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            Some(Ok(Message::Close(_)) | Err(_)) | None => break,
        };
        if connection.out.send(answer.to_string()).await.is_err() {
            break;
        }
    }
    // The subscriptions stop with the connection; the writer sends what is queued, or the
    // close frame when the server stops.
    connection.tapes.clear();
    drop(connection);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), writer).await;
}
