//! Runs: create (background, streamed, or waited on), list, read, cancel, join and delete, on a
//! thread or stateless (a temporary thread).

use super::AppState;
use super::assistants::{parse_enum, resolve};
use super::error::{ApiResult, AppError, Body, parse_id};
use super::threads::checkpoint_id_of;
use crate::ids;
use crate::runs::RunKwargs;
use crate::store::{
    CancelAction, EventId, JsonMap, MultitaskStrategy, Run, RunInsert, RunStatus, StoreError,
};
use crate::stream::{RunChannel, STORE_POLL, SseSource, StreamModes, bus::Subscription, sse_body};
use crate::time::Timestamp;
use axum::body::Body as HttpBody;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use uuid::Uuid;

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/threads/{thread_id}/runs", post(create).get(list))
        .route("/threads/{thread_id}/runs/stream", post(stream))
        .route("/threads/{thread_id}/runs/wait", post(wait))
        .route(
            "/threads/{thread_id}/runs/{run_id}",
            get(fetch).delete(remove),
        )
        .route("/threads/{thread_id}/runs/{run_id}/cancel", post(cancel))
        .route("/threads/{thread_id}/runs/{run_id}/join", get(join))
        .route(
            "/threads/{thread_id}/runs/{run_id}/stream",
            get(join_stream),
        )
        .route("/runs", post(create_stateless))
        .route("/runs/stream", post(stream_stateless))
        .route("/runs/wait", post(wait_stateless))
        .route("/runs/batch", post(batch))
        .route("/runs/cancel", post(cancel_many))
}

/// A run request (`RunCreate` in the reference), with every field the SDKs may send.
#[derive(Clone, Deserialize, utoipa::ToSchema)]
pub(super) struct NewRun {
    assistant_id: String,
    #[schema(value_type = Option<Object>)]
    input: Option<Value>,
    #[schema(value_type = Option<Object>)]
    command: Option<Value>,
    #[schema(value_type = Option<Object>)]
    config: Option<Value>,
    #[schema(value_type = Option<Object>)]
    context: Option<Value>,
    #[schema(value_type = Option<Object>)]
    metadata: Option<JsonMap>,
    #[schema(value_type = Option<Object>)]
    stream_mode: Option<Value>,
    stream_subgraphs: Option<bool>,
    stream_resumable: Option<bool>,
    #[schema(value_type = Option<Object>)]
    interrupt_before: Option<Value>,
    #[schema(value_type = Option<Object>)]
    interrupt_after: Option<Value>,
    multitask_strategy: Option<String>,
    if_not_exists: Option<String>,
    on_disconnect: Option<String>,
    on_completion: Option<String>,
    after_seconds: Option<f64>,
    #[schema(value_type = Option<Object>)]
    checkpoint: Option<Value>,
    checkpoint_id: Option<String>,
    durability: Option<String>,
    checkpoint_during: Option<bool>,
    webhook: Option<String>,
    #[schema(value_type = Option<Object>)]
    feedback_keys: Option<Value>,
}

/// Where the run's thread comes from.
#[derive(Clone, Copy)]
enum Target {
    Thread(Uuid),
    Stateless,
}

/// A run that was inserted, with its stream subscribed before anything could be published.
struct Started {
    run: Run,
    subscription: Subscription,
    result: watch::Receiver<Option<Option<Value>>>,
    resumable: bool,
    cancel_on_disconnect: bool,
    stateless: bool,
}

fn object(value: Option<Value>, field: &str) -> ApiResult<JsonMap> {
    match value {
        None | Some(Value::Null) => Ok(JsonMap::new()),
        Some(Value::Object(map)) => Ok(map),
        Some(_) => Err(AppError::Invalid(format!("{field} must be an object"))),
    }
}

/// Checks everything that can be checked without touching the store.
fn validate(body: &NewRun, target: Target) -> ApiResult<()> {
    if body.command.as_ref().is_some_and(|c| !c.is_null()) {
        if matches!(target, Target::Stateless) {
            return Err(AppError::BadRequest(
                "You must provide a thread_id when resuming.".into(),
            ));
        }
        return Err(AppError::Invalid(
            "command is not supported: the graphs served here do not use interrupts".into(),
        ));
    }
    for (field, value) in [
        ("interrupt_before", &body.interrupt_before),
        ("interrupt_after", &body.interrupt_after),
    ] {
        if value.as_ref().is_some_and(|v| !v.is_null()) {
            return Err(AppError::Invalid(format!(
                "{field} is not supported by this server"
            )));
        }
    }
    if body.webhook.is_some() {
        return Err(AppError::Invalid(
            "webhook is not supported by this server".into(),
        ));
    }
    if body
        .after_seconds
        .is_some_and(|s| !(0.0..=86_400.0 * 365.0).contains(&s))
    {
        return Err(AppError::Invalid(
            "after_seconds must be between 0 and one year".into(),
        ));
    }
    if let Some(d) = body
        .durability
        .as_deref()
        .filter(|d| !matches!(*d, "sync" | "async" | "exit"))
    {
        return Err(AppError::Invalid(format!(
            "durability: invalid value '{d}' (expected sync, async or exit)"
        )));
    }
    if matches!(target, Target::Stateless)
        && (body.checkpoint.is_some() || body.checkpoint_id.is_some())
    {
        return Err(AppError::Invalid(
            "checkpoint needs a thread: use /threads/{thread_id}/runs".into(),
        ));
    }
    Ok(())
}

fn choice<'a>(raw: Option<&'a str>, field: &str, allowed: [&'a str; 2]) -> ApiResult<&'a str> {
    match raw {
        None => Ok(allowed[0]),
        Some(v) if allowed.contains(&v) => Ok(v),
        Some(v) => Err(AppError::Invalid(format!(
            "{field}: invalid value '{v}' (expected {} or {})",
            allowed[0], allowed[1]
        ))),
    }
}

/// Builds the run's config: the assistant's, the request's, and the ids nodes may read.
fn run_config(assistant_config: &Value, body: &NewRun, ids: &JsonMap) -> ApiResult<Value> {
    let mut config = assistant_config.as_object().cloned().unwrap_or_default();
    let request = object(body.config.clone(), "config")?;
    let mut configurable = config
        .get("configurable")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let request_configurable = object(request.get("configurable").cloned(), "config.configurable")?;
    let context = object(body.context.clone(), "context")?;
    if !request_configurable.is_empty() && !context.is_empty() {
        return Err(AppError::BadRequest(
            "Cannot specify both configurable and context. Prefer setting context alone.".into(),
        ));
    }
    for (k, v) in request {
        if k != "configurable" {
            config.insert(k, v);
        }
    }
    configurable.extend(request_configurable);
    configurable.extend(context);
    configurable.extend(ids.clone());
    if let Some(limit) = config.get("recursion_limit")
        && !limit.as_i64().is_some_and(|l| (1..=10_000).contains(&l))
    {
        return Err(AppError::Invalid(
            "config.recursion_limit must be an integer between 1 and 10000".into(),
        ));
    }
    config.insert("configurable".into(), Value::Object(configurable));
    Ok(Value::Object(config))
}

async fn start(state: &AppState, target: Target, body: NewRun) -> ApiResult<Started> {
    validate(&body, target)?;
    let modes = StreamModes::from_json(body.stream_mode.as_ref()).map_err(AppError::Invalid)?;
    let strategy = parse_enum(
        body.multitask_strategy.as_deref(),
        "multitask_strategy",
        MultitaskStrategy::Enqueue,
    )?;
    let if_not_exists = choice(
        body.if_not_exists.as_deref(),
        "if_not_exists",
        ["reject", "create"],
    )?;
    let on_disconnect = choice(
        body.on_disconnect.as_deref(),
        "on_disconnect",
        ["continue", "cancel"],
    )?;
    let on_completion = choice(
        body.on_completion.as_deref(),
        "on_completion",
        ["delete", "keep"],
    )?;
    let assistant = resolve(state, &body.assistant_id)
        .await
        .map_err(|e| match e {
            AppError::NotFound(_) => AppError::NotFound("Thread or assistant not found.".into()),
            other => other,
        })?;
    let (thread_id, stateless) = match target {
        Target::Thread(id) => (id, false),
        Target::Stateless => (ids::new_id(), true),
    };
    let checkpoint_id = match body.checkpoint_id.as_deref() {
        Some(raw) => Some(parse_id(raw, "checkpoint")?),
        None => checkpoint_id_of(body.checkpoint.as_ref())?,
    };
    if let Some(cid) = checkpoint_id
        && state
            .store
            .get_checkpoint(thread_id, "", cid)
            .await?
            .is_none()
    {
        return Err(AppError::NotFound(format!(
            "Checkpoint {cid} not found on thread {thread_id}"
        )));
    }
    let run_id = ids::new_id();
    let mut id_fields = JsonMap::new();
    id_fields.insert("run_id".into(), json!(run_id));
    id_fields.insert("thread_id".into(), json!(thread_id));
    id_fields.insert("graph_id".into(), json!(assistant.graph_id));
    id_fields.insert("assistant_id".into(), json!(assistant.assistant_id));
    if let Some(cid) = checkpoint_id {
        id_fields.insert("checkpoint_id".into(), json!(cid));
        id_fields.insert("checkpoint_ns".into(), json!(""));
    }
    let config = run_config(&assistant.config, &body, &id_fields)?;
    if let Some(graph) = state.registry.get(&assistant.graph_id) {
        graph.check_config(&config).map_err(AppError::Invalid)?;
    }
    let mut metadata = object(config.get("metadata").cloned(), "config.metadata")?;
    metadata.extend(object(
        body.metadata.clone().map(Value::Object),
        "metadata",
    )?);
    for reserved in ["thread_id", "assistant_id", "run_id", "cron_id"] {
        metadata.remove(reserved);
    }
    metadata.insert("assistant_id".into(), json!(assistant.assistant_id));
    let resumable = body.stream_resumable.unwrap_or(false);
    let kwargs = RunKwargs {
        input: body.input.clone().unwrap_or(Value::Null),
        command: Value::Null,
        config,
        context: Value::Object(object(body.context.clone(), "context")?),
        stream_mode: modes.names().into_iter().map(str::to_owned).collect(),
        interrupt_before: Value::Null,
        interrupt_after: Value::Null,
        webhook: Value::Null,
        feedback_keys: body.feedback_keys.clone().unwrap_or(Value::Null),
        temporary: stateless,
        delete_on_completion: stateless && on_completion == "delete",
        subgraphs: body.stream_subgraphs.unwrap_or(false),
        resumable,
        checkpoint_during: body.checkpoint_during.unwrap_or(true),
        durability: body.durability.clone().unwrap_or_else(|| "async".into()),
    };
    let now = Timestamp::now();
    let run = Run {
        run_id,
        thread_id,
        assistant_id: assistant.assistant_id,
        created_at: now.plus_secs(body.after_seconds.unwrap_or(0.0)),
        updated_at: now,
        status: RunStatus::Pending,
        metadata,
        multitask_strategy: strategy,
        kwargs: serde_json::to_value(&kwargs).map_err(|e| AppError::Internal(e.into()))?,
    };
    let mut thread_metadata = JsonMap::new();
    thread_metadata.insert("graph_id".into(), json!(assistant.graph_id));
    thread_metadata.insert("assistant_id".into(), json!(assistant.assistant_id));
    let insert = RunInsert {
        run: run.clone(),
        thread_metadata,
        create_thread: stateless || if_not_exists == "create",
    };
    // Subscribe before the insert: a worker may start the run the moment it is committed.
    let channel = state.bus.open(run_id, thread_id, resumable);
    let subscription = channel.subscribe();
    let result = channel.result();
    // The first event goes out now, not when a worker claims the run: a queued run's client
    // learns its run id at once. The worker sees the channel is not fresh and does not repeat it.
    let thread_tx = state.bus.thread_sender(thread_id);
    let metadata = json!({"run_id": run_id, "attempt": 1});
    channel.publish("metadata".into(), metadata.to_string(), thread_tx.as_ref());
    let affected = match state.store.insert_run(&insert).await {
        Ok(affected) => affected,
        Err(error) => {
            state.bus.close(run_id, None);
            return Err(match error {
                StoreError::NotFound(_) => {
                    AppError::NotFound("Thread or assistant not found.".into())
                }
                other => other.into(),
            });
        }
    };
    let action = match strategy {
        MultitaskStrategy::Rollback => CancelAction::Rollback,
        _ => CancelAction::Interrupt,
    };
    state.runner.cancelled(&affected, action).await;
    state.runner.wake();
    Ok(Started {
        run,
        subscription,
        result,
        resumable,
        cancel_on_disconnect: on_disconnect == "cancel",
        stateless,
    })
}

fn run_path(run: &Run, stateless: bool) -> String {
    if stateless {
        format!("/runs/{}", run.run_id)
    } else {
        format!("/threads/{}/runs/{}", run.thread_id, run.run_id)
    }
}

fn set_header(headers: &mut HeaderMap, name: header::HeaderName, value: &str) {
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

fn cancel_callback(state: &AppState, run_id: Uuid) -> Box<dyn FnOnce() + Send + Sync> {
    let state = state.clone();
    Box::new(move || {
        tokio::spawn(async move {
            match state
                .store
                .cancel_runs(&[run_id], CancelAction::Interrupt)
                .await
            {
                Ok(affected) => {
                    state
                        .runner
                        .cancelled(&affected, CancelAction::Interrupt)
                        .await
                }
                Err(error) => tracing::warn!(%error, %run_id, "could not cancel after disconnect"),
            }
        });
    })
}

fn stream_started(state: &AppState, started: Started) -> Response {
    let run = started.run;
    let path = run_path(&run, started.stateless);
    let source = SseSource {
        store: state.store.clone(),
        bus: state.bus.clone(),
        run_id: run.run_id,
        after: None,
        filter: None,
        with_ids: started.resumable,
        heartbeat: state.settings.heartbeat,
        shutdown: state.shutdown.clone(),
        subscription: Some(started.subscription),
        on_disconnect: started
            .cancel_on_disconnect
            .then(|| cancel_callback(state, run.run_id)),
    };
    sse_response(sse_body(source), Some((format!("{path}/stream"), path)))
}

/// A body that resolves with the run's final values once it has ended. While a worker of this
/// process runs it, that is the run's own result; otherwise — another replica claimed it, or it
/// was never live here — the store is read every 250 ms until the run is over. Newlines keep
/// the connection alive meanwhile.
fn wait_body(
    state: &AppState,
    run_id: Uuid,
    channel: Option<Arc<RunChannel>>,
    mut result: Option<watch::Receiver<Option<Option<Value>>>>,
) -> HttpBody {
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    let state = state.clone();
    tokio::spawn(async move {
        let heartbeat = state.settings.heartbeat;
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + heartbeat, heartbeat);
        let mut poll = tokio::time::interval(STORE_POLL);
        let value = loop {
            if let Some(done) = local_result(&mut result) {
                break done;
            }
            let here = channel.as_ref().is_some_and(|c| c.is_executing_here());
            tokio::select! {
                biased;
                open = changed(&mut result) => if !open { result = None },
                _ = poll.tick(), if !here => {
                    if let Some(ended) = ended_result(&state, run_id).await {
                        // A result that arrived meanwhile is the run's own: prefer it.
                        break local_result(&mut result).unwrap_or(ended);
                    }
                }
                _ = tick.tick() => if tx.send(Ok(Bytes::from_static(b"\n"))).await.is_err() { return },
                () = state.shutdown.cancelled() => break json!({}),
            }
        };
        let _ = tx.send(Ok(Bytes::from(value.to_string()))).await;
    });
    HttpBody::from_stream(ReceiverStream::new(rx))
}

/// The run's result if this process's worker has handed it over.
fn local_result(result: &mut Option<watch::Receiver<Option<Option<Value>>>>) -> Option<Value> {
    let done = result.as_mut()?.borrow_and_update().clone()?;
    Some(done.unwrap_or_else(|| {
        json!({"__error__": {"error": "InternalError", "message": "An internal error occurred"}})
    }))
}

/// Resolves when the local result changes: false once its sender is gone. Never without one.
async fn changed(result: &mut Option<watch::Receiver<Option<Option<Value>>>>) -> bool {
    match result.as_mut() {
        Some(rx) => rx.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}

/// The final values of a run the store says has ended; `None` while it is in flight.
async fn ended_result(state: &AppState, run_id: Uuid) -> Option<Value> {
    match state.store.get_run(run_id).await {
        Ok(Some(run)) if run.status.is_inflight() => None,
        Ok(Some(run)) => match finished_result(state, &run).await {
            Ok(values) => Some(values),
            Err(error) => {
                tracing::warn!(?error, %run_id, "could not read the finished run's values");
                None
            }
        },
        // Deleted once it ended (stateless runs).
        Ok(None) => Some(json!({})),
        Err(error) => {
            tracing::warn!(%error, %run_id, "could not read the run");
            None
        }
    }
}

fn json_response(body: HttpBody, paths: Option<(String, String)>) -> Response {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    set_header(headers, header::CONTENT_TYPE, "application/json");
    if let Some((location, content_location)) = paths {
        set_header(headers, header::LOCATION, &location);
        set_header(headers, header::CONTENT_LOCATION, &content_location);
    }
    response
}

fn created(run: Run, stateless: bool) -> Response {
    let path = run_path(&run, stateless);
    let mut response = Json(run).into_response();
    set_header(response.headers_mut(), header::CONTENT_LOCATION, &path);
    response
}

async fn thread_target(state: &AppState, raw: &str) -> ApiResult<Target> {
    let _ = state;
    Ok(Target::Thread(parse_id(raw, "thread")?))
}

/// Creates a run in the background.
#[utoipa::path(post, path = "/threads/{thread_id}/runs", tag = "runs", request_body = NewRun,
    params(("thread_id" = String, Path)), responses((status = 200, body = Run), (status = 404), (status = 409), (status = 422)))]
pub(super) async fn create(
    State(state): State<AppState>,
    Path(tid): Path<String>,
    Body(body): Body<NewRun>,
) -> ApiResult<Response> {
    let target = thread_target(&state, &tid).await?;
    let started = start(&state, target, body).await?;
    Ok(created(started.run, false))
}

/// Creates a run and streams its events.
#[utoipa::path(post, path = "/threads/{thread_id}/runs/stream", tag = "runs", request_body = NewRun,
    params(("thread_id" = String, Path)),
    responses((status = 200, content_type = "text/event-stream"), (status = 404), (status = 409), (status = 422)))]
pub(super) async fn stream(
    State(state): State<AppState>,
    Path(tid): Path<String>,
    Body(body): Body<NewRun>,
) -> ApiResult<Response> {
    let target = thread_target(&state, &tid).await?;
    let started = start(&state, target, body).await?;
    Ok(stream_started(&state, started))
}

/// Creates a run and returns its final values.
#[utoipa::path(post, path = "/threads/{thread_id}/runs/wait", tag = "runs", request_body = NewRun,
    params(("thread_id" = String, Path)), responses((status = 200), (status = 404), (status = 409), (status = 422)))]
pub(super) async fn wait(
    State(state): State<AppState>,
    Path(tid): Path<String>,
    Body(body): Body<NewRun>,
) -> ApiResult<Response> {
    let target = thread_target(&state, &tid).await?;
    Ok(wait_started(&state, start(&state, target, body).await?))
}

fn wait_started(state: &AppState, started: Started) -> Response {
    let path = run_path(&started.run, started.stateless);
    json_response(
        wait_body(
            state,
            started.run.run_id,
            state.bus.get(started.run.run_id),
            Some(started.result),
        ),
        Some((format!("{path}/join"), path)),
    )
}

/// Creates a stateless run (on a temporary thread).
#[utoipa::path(post, path = "/runs", tag = "stateless runs", request_body = NewRun,
    responses((status = 200, body = Run), (status = 404), (status = 422)))]
pub(super) async fn create_stateless(
    State(state): State<AppState>,
    Body(body): Body<NewRun>,
) -> ApiResult<Response> {
    let started = start(&state, Target::Stateless, body).await?;
    Ok(created(started.run, true))
}

/// Creates a stateless run and streams it.
#[utoipa::path(post, path = "/runs/stream", tag = "stateless runs", request_body = NewRun,
    responses((status = 200, content_type = "text/event-stream"), (status = 404), (status = 422)))]
pub(super) async fn stream_stateless(
    State(state): State<AppState>,
    Body(body): Body<NewRun>,
) -> ApiResult<Response> {
    let started = start(&state, Target::Stateless, body).await?;
    Ok(stream_started(&state, started))
}

/// Creates a stateless run and returns its final values.
#[utoipa::path(post, path = "/runs/wait", tag = "stateless runs", request_body = NewRun,
    responses((status = 200), (status = 404), (status = 422)))]
pub(super) async fn wait_stateless(
    State(state): State<AppState>,
    Body(body): Body<NewRun>,
) -> ApiResult<Response> {
    Ok(wait_started(
        &state,
        start(&state, Target::Stateless, body).await?,
    ))
}

/// Creates several stateless runs.
#[utoipa::path(post, path = "/runs/batch", tag = "stateless runs", request_body = Vec<NewRun>,
    responses((status = 200, body = Vec<Run>), (status = 422)))]
pub(super) async fn batch(
    State(state): State<AppState>,
    Body(bodies): Body<Vec<NewRun>>,
) -> ApiResult<Json<Vec<Run>>> {
    if bodies.len() > 100 {
        return Err(AppError::Invalid("a batch holds at most 100 runs".into()));
    }
    for body in &bodies {
        validate(body, Target::Stateless)?;
    }
    let mut runs = Vec::with_capacity(bodies.len());
    for body in bodies {
        runs.push(start(&state, Target::Stateless, body).await?.run);
    }
    Ok(Json(runs))
}

/// Query-string pairs, keeping repeated keys.
fn query_pairs(raw: Option<&str>) -> Vec<(String, String)> {
    form_urlencoded::parse(raw.unwrap_or_default().as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

fn query_values(pairs: &[(String, String)], key: &str) -> Vec<String> {
    pairs
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
        .collect()
}

fn query_flag(pairs: &[(String, String)], key: &str) -> ApiResult<bool> {
    match query_values(pairs, key)
        .last()
        .map(|v| v.to_ascii_lowercase())
    {
        None => Ok(false),
        Some(v) if matches!(v.as_str(), "true" | "1" | "yes") => Ok(true),
        Some(v) if matches!(v.as_str(), "false" | "0" | "no" | "") => Ok(false),
        Some(v) => Err(AppError::Invalid(format!(
            "{key}: expected a boolean, got '{v}'"
        ))),
    }
}

fn query_int(pairs: &[(String, String)], key: &str, default: i64) -> ApiResult<i64> {
    match query_values(pairs, key).last() {
        None => Ok(default),
        Some(v) => v
            .parse()
            .map_err(|_| AppError::Invalid(format!("{key}: expected an integer, got '{v}'"))),
    }
}

/// A thread's runs, newest first.
#[utoipa::path(get, path = "/threads/{thread_id}/runs", tag = "runs", params(("thread_id" = String, Path)),
    responses((status = 200, body = Vec<Run>), (status = 404), (status = 422)))]
pub(super) async fn list(
    State(state): State<AppState>,
    Path(tid): Path<String>,
    RawQuery(q): RawQuery,
) -> ApiResult<Json<Vec<Value>>> {
    let thread = super::threads::load(&state, &tid).await?;
    let pairs = query_pairs(q.as_deref());
    let limit = query_int(&pairs, "limit", 10)?;
    let offset = query_int(&pairs, "offset", 0)?;
    super::check_paging(limit, offset)?;
    let raw_status = query_values(&pairs, "status")
        .pop()
        .filter(|s| !s.is_empty());
    let status = super::optional_enum::<RunStatus>(raw_status.as_deref(), "status")?;
    let select = query_values(&pairs, "select");
    let runs = state
        .store
        .list_runs(thread.thread_id, status, limit, offset)
        .await?;
    Ok(Json(
        runs.into_iter()
            .map(|r| super::project(json!(r), &select))
            .collect(),
    ))
}

async fn load_run(state: &AppState, tid: &str, rid: &str) -> ApiResult<Run> {
    let thread_id = parse_id(tid, "thread")?;
    let run_id = parse_id(rid, "run")?;
    match state.store.get_run(run_id).await? {
        Some(run) if run.thread_id == thread_id => Ok(run),
        _ => Err(AppError::NotFound(format!(
            "Run {run_id} not found on thread {thread_id}"
        ))),
    }
}

/// One run.
#[utoipa::path(get, path = "/threads/{thread_id}/runs/{run_id}", tag = "runs",
    params(("thread_id" = String, Path), ("run_id" = String, Path)), responses((status = 200, body = Run), (status = 404), (status = 422)))]
pub(super) async fn fetch(
    State(state): State<AppState>,
    Path((tid, rid)): Path<(String, String)>,
) -> ApiResult<Json<Run>> {
    Ok(Json(load_run(&state, &tid, &rid).await?))
}

/// Deletes a run (cancelling it first if it is in flight).
#[utoipa::path(delete, path = "/threads/{thread_id}/runs/{run_id}", tag = "runs",
    params(("thread_id" = String, Path), ("run_id" = String, Path)), responses((status = 204), (status = 404), (status = 422)))]
pub(super) async fn remove(
    State(state): State<AppState>,
    Path((tid, rid)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    let run = load_run(&state, &tid, &rid).await?;
    if run.status.is_inflight() {
        let affected = state
            .store
            .cancel_runs(&[run.run_id], CancelAction::Rollback)
            .await?;
        state
            .runner
            .cancelled(&affected, CancelAction::Rollback)
            .await;
    }
    state.store.delete_run(run.run_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The result of a finished run, as `/join` returns it.
async fn finished_result(state: &AppState, run: &Run) -> ApiResult<Value> {
    let thread = state.store.get_thread(run.thread_id).await?;
    let values = thread
        .as_ref()
        .and_then(|t| t.values.clone())
        .unwrap_or_else(|| json!({}));
    if run.status == RunStatus::Error {
        let error = thread
            .and_then(|t| t.error)
            .unwrap_or_else(|| json!({"error": "Error", "message": "run failed"}));
        return Ok(json!({"__error__": error}));
    }
    Ok(values)
}

/// A body that resolves when the run ends (or at once when it already has).
fn result_body(state: &AppState, run: &Run) -> HttpBody {
    let channel = state.bus.get(run.run_id);
    let result = channel.as_ref().map(|c| c.result());
    wait_body(state, run.run_id, channel, result)
}

/// Waits for a run to end and returns its final values.
#[utoipa::path(get, path = "/threads/{thread_id}/runs/{run_id}/join", tag = "runs",
    params(("thread_id" = String, Path), ("run_id" = String, Path)), responses((status = 200), (status = 404), (status = 422)))]
pub(super) async fn join(
    State(state): State<AppState>,
    Path((tid, rid)): Path<(String, String)>,
) -> ApiResult<Response> {
    let run = load_run(&state, &tid, &rid).await?;
    Ok(json_response(result_body(&state, &run), None))
}

/// Cancels a run; with `wait=1` answers with its final values once it stopped.
#[utoipa::path(post, path = "/threads/{thread_id}/runs/{run_id}/cancel", tag = "runs",
    params(("thread_id" = String, Path), ("run_id" = String, Path)), responses((status = 202), (status = 200), (status = 404), (status = 422)))]
pub(super) async fn cancel(
    State(state): State<AppState>,
    Path((tid, rid)): Path<(String, String)>,
    RawQuery(q): RawQuery,
) -> ApiResult<Response> {
    let pairs = query_pairs(q.as_deref());
    let wait = query_flag(&pairs, "wait")?;
    let action_raw = query_values(&pairs, "action").last().cloned();
    let action = parse_enum(action_raw.as_deref(), "action", CancelAction::Interrupt)?;
    let run = load_run(&state, &tid, &rid).await.map_err(|e| match e {
        AppError::NotFound(_) => AppError::NotFound("No runs found to cancel.".into()),
        other => other,
    })?;
    let channel = state.bus.get(run.run_id);
    let affected = state.store.cancel_runs(&[run.run_id], action).await?;
    state.runner.cancelled(&affected, action).await;
    if !wait {
        return Ok(StatusCode::ACCEPTED.into_response());
    }
    let result = channel.as_ref().map(|c| c.result());
    let body = wait_body(&state, run.run_id, channel, result);
    let path = run_path(&run, false);
    Ok(json_response(body, Some((format!("{path}/join"), path))))
}

#[derive(Deserialize, utoipa::ToSchema)]
pub(super) struct CancelMany {
    thread_id: Option<String>,
    run_ids: Option<Vec<String>>,
    status: Option<String>,
}

/// Cancels runs by id, or every pending/running run.
#[utoipa::path(post, path = "/runs/cancel", tag = "runs", request_body = CancelMany,
    responses((status = 204), (status = 404), (status = 422)))]
pub(super) async fn cancel_many(
    State(state): State<AppState>,
    RawQuery(q): RawQuery,
    Body(body): Body<CancelMany>,
) -> ApiResult<StatusCode> {
    let pairs = query_pairs(q.as_deref());
    let action_raw = query_values(&pairs, "action").last().cloned();
    let action = parse_enum(action_raw.as_deref(), "action", CancelAction::Interrupt)?;
    let ids: Vec<Uuid> = match (&body.run_ids, &body.status) {
        (Some(ids), None) => ids
            .iter()
            .map(|r| parse_id(r, "run"))
            .collect::<ApiResult<_>>()?,
        (None, Some(_)) => {
            return Err(AppError::Invalid(
                "cancelling by status is not supported: pass thread_id and run_ids".into(),
            ));
        }
        _ => {
            return Err(AppError::Invalid(
                "pass either run_ids (with thread_id) or status".into(),
            ));
        }
    };
    if let Some(tid) = body.thread_id.as_deref() {
        parse_id(tid, "thread")?;
    }
    let affected = state.store.cancel_runs(&ids, action).await?;
    if affected.is_empty() {
        return Err(AppError::NotFound("No runs found to cancel.".into()));
    }
    state.runner.cancelled(&affected, action).await;
    Ok(StatusCode::NO_CONTENT)
}

/// Streams a run's events: a replay after `Last-Event-ID` (`-1` = all), then live ones.
#[utoipa::path(get, path = "/threads/{thread_id}/runs/{run_id}/stream", tag = "runs",
    params(("thread_id" = String, Path), ("run_id" = String, Path)),
    responses((status = 200, content_type = "text/event-stream"), (status = 404), (status = 422)))]
pub(super) async fn join_stream(
    State(state): State<AppState>,
    Path((tid, rid)): Path<(String, String)>,
    headers: HeaderMap,
    RawQuery(q): RawQuery,
) -> ApiResult<Response> {
    let run = load_run(&state, &tid, &rid).await?;
    let pairs = query_pairs(q.as_deref());
    let mut modes = query_values(&pairs, "stream_mode");
    modes.extend(query_values(&pairs, "stream_modes"));
    let filter = StreamModes::from_query(&modes).map_err(AppError::Invalid)?;
    let cancel_on_disconnect = query_flag(&pairs, "cancel_on_disconnect")?;
    let after = match headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
    {
        None | Some("") => None,
        Some("-1") => Some(EventId { ms: -1, seq: -1 }),
        Some(raw) => Some(
            raw.parse::<EventId>()
                .map_err(|e| AppError::Invalid(format!("Last-Event-ID: {e}")))?,
        ),
    };
    let kwargs: RunKwargs = serde_json::from_value(run.kwargs.clone()).unwrap_or_default();
    let live = state.bus.get(run.run_id).is_some();
    let source = SseSource {
        store: state.store.clone(),
        bus: state.bus.clone(),
        run_id: run.run_id,
        after: if kwargs.resumable { after } else { None },
        filter,
        with_ids: kwargs.resumable,
        heartbeat: state.settings.heartbeat,
        shutdown: state.shutdown.clone(),
        subscription: None,
        on_disconnect: (cancel_on_disconnect && live).then(|| cancel_callback(&state, run.run_id)),
    };
    let path = run_path(&run, false);
    Ok(sse_response(
        sse_body(source),
        Some((format!("{path}/stream"), path)),
    ))
}
