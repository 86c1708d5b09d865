//! Runs: create (background, streamed, or waited on), list, read, cancel, join and delete, on a
//! thread or stateless (a temporary thread).

pub(crate) mod admission;
mod create;
mod request;
mod waiting;

use super::AppState;
use super::auth::Principal;
use super::error::{ApiResult, AppError, Body, BodyList};
use super::params::{Ids, parse_id};
use super::params::{optional_enum, parse_enum};
use super::query::{query_flag, query_int, query_pairs, query_values};
use super::response_bodies::{json_response, set_header, sse_response};
use crate::ids::{RunId, ThreadId};
use crate::runs::RunKwargs;
use crate::store::retry::patiently;
use crate::store::{CancelAction, EventId, Owner, Run, RunStatus};
use crate::stream::{SseSource, StreamModes, sse_body};
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use create::{IdempotencyKey, Started, start};
use serde::Deserialize;
use serde_json::{Value, json};
use waiting::{result_body, wait_body};

pub(super) use create::Target;
pub(crate) use request::{RunConfig, RunRequest};

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

/// Creates a run on a thread for another API (the agent protocols' turns, the thread-centric
/// protocol's commands), with the same checks as `POST /threads/{id}/runs`.
pub(super) async fn start_on_thread(
    state: &AppState,
    who: &Principal,
    thread_id: ThreadId,
    body: RunRequest,
) -> ApiResult<Run> {
    let target = Target::Thread(thread_id);
    let started = start(state, &who.owner, target, body, IdempotencyKey(None)).await?;
    Ok(started.run)
}

/// Checks a cron's run request without creating anything; returns the assistant it names.
pub(super) async fn check_run_request(
    state: &AppState,
    owner: &Owner,
    target: Target,
    body: &RunRequest,
) -> ApiResult<crate::store::Assistant> {
    create::check(state, owner, target, body).await
}

/// Creates the run of a cron's tick: nothing when another replica already started it
/// (`StoreError::Conflict("cron tick")`).
pub(super) async fn start_for_cron(
    state: &AppState,
    owner: &Owner,
    target: Target,
    body: RunRequest,
    tick: crate::store::CronTick,
) -> ApiResult<Run> {
    let started =
        create::start_ticked(state, owner, target, body, IdempotencyKey(None), Some(tick)).await?;
    Ok(started.run)
}

/// Fields a run has (what `select` may name).
const RUN_FIELDS: [&str; 9] = [
    "run_id",
    "thread_id",
    "assistant_id",
    "created_at",
    "updated_at",
    "status",
    "metadata",
    "multitask_strategy",
    "kwargs",
];

fn run_path(run: &Run, stateless: bool) -> String {
    if stateless {
        format!("/runs/{}", run.run_id)
    } else {
        format!("/threads/{}/runs/{}", run.thread_id, run.run_id)
    }
}

fn cancel_callback(state: &AppState, run_id: RunId) -> Box<dyn FnOnce() + Send + Sync> {
    let state = state.clone();
    Box::new(move || {
        tokio::spawn(async move {
            // Retried while the database is busy: the client is gone and cannot ask again.
            let ids = [run_id];
            let cancelled = patiently(
                state.settings.store_patience,
                &state.shutdown,
                "cancel a run whose client left",
                || state.store.cancel_runs(&ids, CancelAction::Interrupt),
            )
            .await;
            match cancelled {
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

fn created(run: Run, stateless: bool) -> Response {
    let path = run_path(&run, stateless);
    let mut response = Json(run).into_response();
    set_header(response.headers_mut(), header::CONTENT_LOCATION, &path);
    response
}

/// Creates a run in the background.
#[utoipa::path(post, path = "/threads/{thread_id}/runs", tag = "runs", request_body = RunRequest,
    params(("thread_id" = String, Path), ("Idempotency-Key" = Option<String>, Header, description = "Retrying with the same key starts no second run: 409 names the first")), responses((status = 200, body = Run), (status = 404), (status = 409), (status = 422)))]
pub(super) async fn create(
    State(state): State<AppState>,
    who: Principal,
    Ids(tid): Ids<ThreadId>,
    key: IdempotencyKey,
    Body(body): Body<RunRequest>,
) -> ApiResult<Response> {
    let target = Target::Thread(tid);
    let started = start(&state, &who.owner, target, body, key).await?;
    Ok(created(started.run, false))
}

/// Creates a run and streams its events.
#[utoipa::path(post, path = "/threads/{thread_id}/runs/stream", tag = "runs", request_body = RunRequest,
    params(("thread_id" = String, Path), ("Idempotency-Key" = Option<String>, Header, description = "Retrying with the same key starts no second run: 409 names the first")),
    responses((status = 200, content_type = "text/event-stream"), (status = 404), (status = 409), (status = 422)))]
pub(super) async fn stream(
    State(state): State<AppState>,
    who: Principal,
    Ids(tid): Ids<ThreadId>,
    key: IdempotencyKey,
    Body(body): Body<RunRequest>,
) -> ApiResult<Response> {
    let target = Target::Thread(tid);
    let started = start(&state, &who.owner, target, body, key).await?;
    Ok(stream_started(&state, started))
}

/// Creates a run and returns its final values.
#[utoipa::path(post, path = "/threads/{thread_id}/runs/wait", tag = "runs", request_body = RunRequest,
    params(("thread_id" = String, Path), ("Idempotency-Key" = Option<String>, Header, description = "Retrying with the same key starts no second run: 409 names the first")), responses((status = 200), (status = 404), (status = 409), (status = 422)))]
pub(super) async fn wait(
    State(state): State<AppState>,
    who: Principal,
    Ids(tid): Ids<ThreadId>,
    key: IdempotencyKey,
    Body(body): Body<RunRequest>,
) -> ApiResult<Response> {
    let target = Target::Thread(tid);
    Ok(wait_started(
        &state,
        start(&state, &who.owner, target, body, key).await?,
    ))
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
#[utoipa::path(post, path = "/runs", tag = "stateless runs", request_body = RunRequest,
    params(("Idempotency-Key" = Option<String>, Header, description = "Retrying with the same key starts no second run: 409 names the first")),
    responses((status = 200, body = Run), (status = 404), (status = 409), (status = 422)))]
pub(super) async fn create_stateless(
    State(state): State<AppState>,
    who: Principal,
    key: IdempotencyKey,
    Body(body): Body<RunRequest>,
) -> ApiResult<Response> {
    let started = start(&state, &who.owner, Target::Stateless, body, key).await?;
    Ok(created(started.run, true))
}

/// Creates a stateless run and streams it.
#[utoipa::path(post, path = "/runs/stream", tag = "stateless runs", request_body = RunRequest,
    params(("Idempotency-Key" = Option<String>, Header, description = "Retrying with the same key starts no second run: 409 names the first")),
    responses((status = 200, content_type = "text/event-stream"), (status = 404), (status = 409), (status = 422)))]
pub(super) async fn stream_stateless(
    State(state): State<AppState>,
    who: Principal,
    key: IdempotencyKey,
    Body(body): Body<RunRequest>,
) -> ApiResult<Response> {
    let started = start(&state, &who.owner, Target::Stateless, body, key).await?;
    Ok(stream_started(&state, started))
}

/// Creates a stateless run and returns its final values.
#[utoipa::path(post, path = "/runs/wait", tag = "stateless runs", request_body = RunRequest,
    params(("Idempotency-Key" = Option<String>, Header, description = "Retrying with the same key starts no second run: 409 names the first")),
    responses((status = 200), (status = 404), (status = 409), (status = 422)))]
pub(super) async fn wait_stateless(
    State(state): State<AppState>,
    who: Principal,
    key: IdempotencyKey,
    Body(body): Body<RunRequest>,
) -> ApiResult<Response> {
    Ok(wait_started(
        &state,
        start(&state, &who.owner, Target::Stateless, body, key).await?,
    ))
}

/// Creates several stateless runs.
#[utoipa::path(post, path = "/runs/batch", tag = "stateless runs", request_body = Vec<RunRequest>,
    responses((status = 200, body = Vec<Run>), (status = 422)))]
pub(super) async fn batch(
    State(state): State<AppState>,
    who: Principal,
    key: IdempotencyKey,
    BodyList(bodies): BodyList<RunRequest>,
) -> ApiResult<Json<Vec<Run>>> {
    if key.0.is_some() {
        return Err(AppError::Invalid(
            "Idempotency-Key names one run; /runs/batch creates several (send them one by one)"
                .into(),
        ));
    }
    if bodies.len() > 100 {
        return Err(AppError::Invalid("a batch holds at most 100 runs".into()));
    }
    for body in &bodies {
        body.validate(true)?;
    }
    let mut runs = Vec::with_capacity(bodies.len());
    for body in bodies {
        runs.push(
            start(
                &state,
                &who.owner,
                Target::Stateless,
                body,
                IdempotencyKey(None),
            )
            .await?
            .run,
        );
    }
    Ok(Json(runs))
}

/// A thread's runs, newest first.
#[utoipa::path(get, path = "/threads/{thread_id}/runs", tag = "runs", params(("thread_id" = String, Path)),
    responses((status = 200, body = Vec<Run>), (status = 404), (status = 422)))]
pub(super) async fn list(
    State(state): State<AppState>,
    who: Principal,
    Ids(tid): Ids<ThreadId>,
    RawQuery(q): RawQuery,
) -> ApiResult<Json<Vec<Value>>> {
    let thread = super::lookups::thread(&state, tid, &who).await?;
    let pairs = query_pairs(q.as_deref());
    let limit = query_int(&pairs, "limit", 10)?;
    let offset = query_int(&pairs, "offset", 0)?;
    super::check_paging(limit, offset)?;
    let raw_status = query_values(&pairs, "status")
        .pop()
        .filter(|s| !s.is_empty());
    let status = optional_enum::<RunStatus>(raw_status.as_deref(), "status")?;
    let select = query_values(&pairs, "select");
    super::check_select(&select, &RUN_FIELDS)?;
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

async fn load_run(
    state: &AppState,
    thread_id: ThreadId,
    run_id: RunId,
    who: &Principal,
) -> ApiResult<Run> {
    super::lookups::thread(state, thread_id, who).await?;
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
    who: Principal,
    Ids((tid, rid)): Ids<(ThreadId, RunId)>,
) -> ApiResult<Json<Run>> {
    Ok(Json(load_run(&state, tid, rid, &who).await?))
}

/// Deletes a run (cancelling it first if it is in flight).
#[utoipa::path(delete, path = "/threads/{thread_id}/runs/{run_id}", tag = "runs",
    params(("thread_id" = String, Path), ("run_id" = String, Path)), responses((status = 204), (status = 404), (status = 422)))]
pub(super) async fn remove(
    State(state): State<AppState>,
    who: Principal,
    Ids((tid, rid)): Ids<(ThreadId, RunId)>,
) -> ApiResult<StatusCode> {
    let run = load_run(&state, tid, rid, &who).await?;
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

/// Waits for a run to end and returns its final values.
#[utoipa::path(get, path = "/threads/{thread_id}/runs/{run_id}/join", tag = "runs",
    params(("thread_id" = String, Path), ("run_id" = String, Path)), responses((status = 200), (status = 404), (status = 422)))]
pub(super) async fn join(
    State(state): State<AppState>,
    who: Principal,
    Ids((tid, rid)): Ids<(ThreadId, RunId)>,
) -> ApiResult<Response> {
    let run = load_run(&state, tid, rid, &who).await?;
    Ok(json_response(result_body(&state, &run), None))
}

/// Cancels a run; with `wait=1` answers with its final values once it stopped.
#[utoipa::path(post, path = "/threads/{thread_id}/runs/{run_id}/cancel", tag = "runs",
    params(("thread_id" = String, Path), ("run_id" = String, Path)), responses((status = 202), (status = 200), (status = 404), (status = 422)))]
pub(super) async fn cancel(
    State(state): State<AppState>,
    who: Principal,
    Ids((tid, rid)): Ids<(ThreadId, RunId)>,
    RawQuery(q): RawQuery,
) -> ApiResult<Response> {
    let pairs = query_pairs(q.as_deref());
    let wait = query_flag(&pairs, "wait")?;
    let action_raw = query_values(&pairs, "action").last().cloned();
    let action = parse_enum(action_raw.as_deref(), "action", CancelAction::Interrupt)?;
    let run = load_run(&state, tid, rid, &who)
        .await
        .map_err(|e| match e {
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
    who: Principal,
    RawQuery(q): RawQuery,
    Body(body): Body<CancelMany>,
) -> ApiResult<StatusCode> {
    let pairs = query_pairs(q.as_deref());
    let action_raw = query_values(&pairs, "action").last().cloned();
    let action = parse_enum(action_raw.as_deref(), "action", CancelAction::Interrupt)?;
    let ids: Vec<RunId> = match (&body.run_ids, &body.status) {
        (Some(ids), None) => {
            super::check_ids("run_ids", ids.len())?;
            ids.iter()
                .map(|r| parse_id::<RunId>(r))
                .collect::<ApiResult<_>>()?
        }
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
    let ids = owned_runs(&state, &who, body.thread_id.as_deref(), ids).await?;
    let affected = state.store.cancel_runs(&ids, action).await?;
    if affected.is_empty() {
        return Err(AppError::NotFound("No runs found to cancel.".into()));
    }
    state.runner.cancelled(&affected, action).await;
    Ok(StatusCode::NO_CONTENT)
}

/// The runs among `ids` on the caller's threads (on `thread_id` when given); others are left
/// out as if they did not exist.
async fn owned_runs(
    state: &AppState,
    who: &Principal,
    thread_id: Option<&str>,
    ids: Vec<RunId>,
) -> ApiResult<Vec<RunId>> {
    if let Some(tid) = thread_id {
        let thread = super::lookups::thread(state, parse_id(tid)?, who).await?;
        let inflight = state.store.inflight_runs(thread.thread_id).await?;
        return Ok(ids
            .into_iter()
            .filter(|id| inflight.iter().any(|r| r.run_id == *id))
            .collect());
    }
    let mut mine = Vec::with_capacity(ids.len());
    let mut threads: std::collections::HashMap<ThreadId, bool> = Default::default();
    for id in ids {
        let Some(run) = state.store.get_run(id).await? else {
            continue;
        };
        let owned = match threads.get(&run.thread_id) {
            Some(owned) => *owned,
            None => {
                let thread = state.store.get_thread(run.thread_id).await?;
                let owned = thread.is_some_and(|t| t.owner == who.owner);
                threads.insert(run.thread_id, owned);
                owned
            }
        };
        if owned {
            mine.push(id);
        }
    }
    Ok(mine)
}

/// Streams a run's events: a replay after `Last-Event-ID` (`-1` = all), then live ones.
#[utoipa::path(get, path = "/threads/{thread_id}/runs/{run_id}/stream", tag = "runs",
    params(("thread_id" = String, Path), ("run_id" = String, Path)),
    responses((status = 200, content_type = "text/event-stream"), (status = 404), (status = 422)))]
pub(super) async fn join_stream(
    State(state): State<AppState>,
    who: Principal,
    Ids((tid, rid)): Ids<(ThreadId, RunId)>,
    headers: HeaderMap,
    RawQuery(q): RawQuery,
) -> ApiResult<Response> {
    let run = load_run(&state, tid, rid, &who).await?;
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
    let kwargs = RunKwargs::decode(&run.kwargs)?;
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
