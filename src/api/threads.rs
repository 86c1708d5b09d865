//! Threads and their state: create, read, search, copy, delete; state at any checkpoint,
//! history, state updates, and the thread-wide event stream.

use super::auth::Principal;
use super::error::{ApiResult, AppError, Body, Params};
use super::lookups::{self, checkpoint_id_of};
use super::params::parse_enum;
use super::params::{Ids, parse_id};
use super::query::{query_pairs, query_values};
use super::response_bodies::sse_response;
use super::{AppState, SearchParams, paged, project};
use crate::graph::channels::writes_to_json;
use crate::graph::state::{StateBuilder, View, empty_state};
use crate::graph::{Graph, NullSink, RunScope, Start, update_state};
use crate::ids::{CheckpointId, RunId, ThreadId};
use crate::store::{
    CancelAction, Checkpoint, CheckpointQuery, EventId, IfExists, JsonMap, Thread, ThreadQuery,
    ThreadStatus, ThreadSummary,
};
use crate::store::{SortOrder, ThreadSort};
use crate::stream::{ThreadFollow, ThreadIdentity, ThreadModes, thread_sse_body};
use crate::time::Timestamp;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/threads", post(create))
        .route("/threads/search", post(search))
        .route("/threads/count", post(count))
        .route("/threads/prune", post(prune))
        .route(
            "/threads/{thread_id}",
            get(fetch).patch(update).delete(remove),
        )
        .route("/threads/{thread_id}/copy", post(copy))
        .route(
            "/threads/{thread_id}/state",
            get(get_state).post(post_state),
        )
        .route("/threads/{thread_id}/state/checkpoint", post(state_at_body))
        .route("/threads/{thread_id}/state/{checkpoint_id}", get(state_at))
        .route(
            "/threads/{thread_id}/history",
            get(history_get).post(history_post),
        )
        .route("/threads/{thread_id}/stream", get(stream))
}

/// The graph that last ran on the thread (its metadata `graph_id`).
fn graph_of(state: &AppState, thread: &Thread) -> Option<Arc<Graph>> {
    let id = thread.metadata.get("graph_id")?.as_str()?;
    state.registry.get(id)
}

#[derive(Deserialize, utoipa::ToSchema)]
pub(super) struct NewThread {
    thread_id: Option<String>,
    #[schema(value_type = Option<Object>)]
    metadata: Option<JsonMap>,
    if_exists: Option<String>,
    /// Minutes after the last update when the thread is deleted: a number, or
    /// `{"ttl": minutes, "strategy": "delete"}`.
    #[schema(value_type = Option<Object>)]
    ttl: Option<Value>,
    #[schema(value_type = Option<Vec<Object>>)]
    supersteps: Option<Vec<Value>>,
    /// Some SDK versions send the graph id here; it is kept in metadata.
    graph_id: Option<String>,
}

/// Creates a thread.
#[utoipa::path(post, path = "/threads", tag = "threads", request_body = NewThread,
    responses((status = 200, body = Thread), (status = 409), (status = 422)))]
pub(super) async fn create(
    State(state): State<AppState>,
    who: Principal,
    Body(body): Body<NewThread>,
) -> ApiResult<Json<Thread>> {
    if body.supersteps.as_ref().is_some_and(|s| !s.is_empty()) {
        return Err(AppError::Invalid(
            "supersteps is not supported by this server".into(),
        ));
    }
    let if_exists = parse_enum(body.if_exists.as_deref(), "if_exists", IfExists::Raise)?;
    let thread_id = match body.thread_id.as_deref() {
        Some(raw) => parse_id::<ThreadId>(raw)?,
        None => ThreadId::new(),
    };
    let mut metadata = body.metadata.unwrap_or_default();
    if let Some(g) = body.graph_id {
        metadata.insert("graph_id".into(), json!(g));
    }
    let now = Timestamp::now();
    let thread = Thread {
        thread_id,
        created_at: now,
        updated_at: now,
        state_updated_at: now,
        metadata,
        status: ThreadStatus::Idle,
        config: json!({}),
        values: None,
        error: None,
        interrupts: json!({}),
        ttl_minutes: parse_ttl(body.ttl.as_ref())?,
        owner: who.owner.clone(),
    };
    let stored = state.store.create_thread(&thread, if_exists).await?;
    // `do_nothing` on an id another owner holds must not hand their thread over.
    if stored.owner != who.owner {
        return Err(AppError::Conflict("Thread already exists".into()));
    }
    Ok(Json(stored))
}

#[derive(Deserialize, utoipa::ToSchema)]
pub(super) struct ThreadSearch {
    #[schema(value_type = Option<Object>)]
    metadata: Option<JsonMap>,
    #[schema(value_type = Option<Object>)]
    values: Option<JsonMap>,
    #[schema(value_type = Option<Vec<String>>)]
    ids: Option<Vec<ThreadId>>,
    status: Option<ThreadStatus>,
    #[serde(default, deserialize_with = "super::numbers::opt_whole")]
    limit: Option<i64>,
    #[serde(default, deserialize_with = "super::numbers::opt_whole")]
    offset: Option<i64>,
    sort_by: Option<ThreadSort>,
    sort_order: Option<SortOrder>,
    #[serde(default)]
    select: Vec<String>,
}

fn thread_query(body: ThreadSearch, who: &Principal) -> ApiResult<(ThreadQuery, Vec<String>)> {
    let p = SearchParams::check(body.limit, body.offset)?;
    let metadata = body.metadata.unwrap_or_default();
    let values = body.values.unwrap_or_default();
    super::check_filter("metadata", &metadata)?;
    super::check_filter("values", &values)?;
    if !values.is_empty() && crate::store::crypt::enabled() {
        return Err(AppError::Invalid(
            "values: thread values are encrypted at rest on this server, so they cannot be \
             searched; filter by metadata instead"
                .into(),
        ));
    }
    super::check_ids("ids", body.ids.as_ref().map_or(0, Vec::len))?;
    let ids = body.ids.unwrap_or_default();
    let q = ThreadQuery {
        owner: who.owner.clone(),
        metadata,
        values,
        ids,
        status: body.status,
        limit: p.limit,
        offset: p.offset,
        sort_by: body.sort_by,
        sort_order: body.sort_order,
    };
    super::check_select(&body.select, &super::THREAD_FIELDS)?;
    Ok((q, body.select))
}

/// Searches threads (metadata/values containment, status, ids), newest update first.
#[utoipa::path(post, path = "/threads/search", tag = "threads", request_body = ThreadSearch,
    responses((status = 200, body = Vec<Thread>), (status = 422)))]
pub(super) async fn search(
    State(state): State<AppState>,
    who: Principal,
    Body(body): Body<ThreadSearch>,
) -> ApiResult<Response> {
    let (q, select) = thread_query(body, &who)?;
    let page = state.store.search_threads(&q).await?;
    let items = page
        .items
        .into_iter()
        .map(|t| project(json!(t), &select))
        .collect();
    Ok(paged(items, page.total, q.offset, q.limit))
}

/// Counts threads matching the filters.
#[utoipa::path(post, path = "/threads/count", tag = "threads", request_body = ThreadSearch,
    responses((status = 200, body = i64)))]
pub(super) async fn count(
    State(state): State<AppState>,
    who: Principal,
    Body(body): Body<ThreadSearch>,
) -> ApiResult<Json<i64>> {
    // Counting ignores paging, but paging fields sent must still be valid.
    super::check_paging(body.limit.unwrap_or(10), body.offset.unwrap_or(0))?;
    let (q, _) = thread_query(
        ThreadSearch {
            limit: Some(1),
            offset: Some(0),
            ..body
        },
        &who,
    )?;
    Ok(Json(state.store.search_threads(&q).await?.total))
}

#[derive(Deserialize, utoipa::ToSchema)]
pub(super) struct Prune {
    thread_ids: Vec<String>,
    strategy: Option<String>,
}

/// Deletes the given threads.
#[utoipa::path(post, path = "/threads/prune", tag = "threads", request_body = Prune,
    responses((status = 200), (status = 422)))]
pub(super) async fn prune(
    State(state): State<AppState>,
    who: Principal,
    Body(body): Body<Prune>,
) -> ApiResult<Json<Value>> {
    let keep_latest = match body.strategy.as_deref() {
        None | Some("delete") => false,
        Some("keep_latest") => true,
        Some(other) => {
            return Err(AppError::Invalid(format!(
                "strategy: '{other}' is not supported (use 'delete' or 'keep_latest')"
            )));
        }
    };
    super::check_ids("thread_ids", body.thread_ids.len())?;
    let ids = body
        .thread_ids
        .iter()
        .map(|raw| parse_id::<ThreadId>(raw))
        .collect::<ApiResult<Vec<ThreadId>>>()?;
    let mut pruned = 0;
    for id in ids {
        // Another owner's thread is skipped as if it did not exist.
        if lookups::thread(&state, id, &who).await.is_err() {
            continue;
        }
        let done = if keep_latest {
            keep_latest_checkpoint(&state, id).await?
        } else {
            stop_runs(&state, id).await?;
            state.store.delete_thread(id).await?
        };
        if done {
            pruned += 1;
        }
    }
    Ok(Json(json!({"pruned_count": pruned})))
}

/// Keeps only the thread's latest root checkpoint, rewritten to hold the whole state (our
/// checkpoints store each step's writes, so the state is rebuilt first); subgraph checkpoints
/// go. Threads with a run in flight or no checkpoint are left as they are; returns whether it
/// pruned.
async fn keep_latest_checkpoint(state: &AppState, id: ThreadId) -> ApiResult<bool> {
    let Some(thread) = state.store.get_thread(id).await? else {
        return Ok(false);
    };
    if !state.store.inflight_runs(id).await?.is_empty() {
        return Ok(false);
    }
    let Some(head) = state.store.latest_checkpoint(id, "").await? else {
        return Ok(false);
    };
    let graph_id = thread
        .metadata
        .get("graph_id")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let Some(graph) = state.registry.get(graph_id) else {
        return Err(AppError::Invalid(format!(
            "thread {id}: its graph '{graph_id}' is not registered, so its state cannot be kept"
        )));
    };
    let values = StateBuilder::new(&*state.store, &graph, id)
        .values(&head)
        .await?;
    let writes: Vec<(String, Value)> = values.into_iter().collect();
    let compacted = Checkpoint {
        parent_checkpoint_id: None,
        writes: writes_to_json(&writes),
        ..head
    };
    state.store.keep_only_checkpoint(&compacted).await?;
    Ok(true)
}

/// One thread.
#[utoipa::path(get, path = "/threads/{thread_id}", tag = "threads", params(("thread_id" = String, Path)),
    responses((status = 200, body = Thread), (status = 404), (status = 422)))]
pub(super) async fn fetch(
    State(state): State<AppState>,
    who: Principal,
    Ids(id): Ids<ThreadId>,
) -> ApiResult<Json<Thread>> {
    Ok(Json(lookups::thread(&state, id, &who).await?))
}

#[derive(Deserialize, utoipa::ToSchema)]
pub(super) struct ThreadPatch {
    #[schema(value_type = Option<Object>)]
    metadata: Option<JsonMap>,
    /// As on create; replaces the thread's time-to-live.
    #[schema(value_type = Option<Object>)]
    ttl: Option<Value>,
}

/// A thread's `ttl` in minutes: a positive number, or `{"ttl": n, "strategy": "delete"}` (the
/// only strategy a thread has).
fn parse_ttl(value: Option<&Value>) -> ApiResult<Option<f64>> {
    let (minutes, strategy) = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(m)) => (m.get("ttl"), m.get("strategy")),
        Some(v) => (Some(v), None),
    };
    match strategy.map(|s| s.as_str()) {
        None | Some(Some("delete")) => {}
        _ => {
            return Err(AppError::Invalid(
                "ttl.strategy: only 'delete' is supported for threads".into(),
            ));
        }
    }
    match minutes.and_then(Value::as_f64) {
        Some(m) if m > 0.0 && m <= super::MAX_TTL_MINUTES => Ok(Some(m)),
        _ => Err(AppError::Invalid(
            "ttl: expected a positive number of minutes (at most ten years), or {\"ttl\": minutes, \"strategy\": \"delete\"}".into(),
        )),
    }
}

/// Merges metadata into a thread.
#[utoipa::path(patch, path = "/threads/{thread_id}", tag = "threads", request_body = ThreadPatch,
    params(("thread_id" = String, Path)), responses((status = 200, body = Thread), (status = 404), (status = 422)))]
pub(super) async fn update(
    State(state): State<AppState>,
    who: Principal,
    Ids(id): Ids<ThreadId>,
    headers: HeaderMap,
    Body(body): Body<ThreadPatch>,
) -> ApiResult<Response> {
    let id = lookups::thread(&state, id, &who).await?.thread_id;
    let ttl = parse_ttl(body.ttl.as_ref())?;
    let thread = state
        .store
        .patch_thread(
            id,
            &body.metadata.unwrap_or_default(),
            ttl,
            Timestamp::now(),
        )
        .await?
        .ok_or_else(|| AppError::NotFound(format!("Thread with ID {id} not found")))?;
    let minimal = headers
        .get("prefer")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("return=minimal"));
    Ok(if minimal {
        StatusCode::NO_CONTENT.into_response()
    } else {
        Json(thread).into_response()
    })
}

/// Cancels whatever runs on a thread that is about to disappear.
async fn stop_runs(state: &AppState, thread_id: ThreadId) -> ApiResult<()> {
    let inflight = state.store.inflight_runs(thread_id).await?;
    if inflight.is_empty() {
        return Ok(());
    }
    let ids: Vec<RunId> = inflight.iter().map(|r| r.run_id).collect();
    let affected = state
        .store
        .cancel_runs(&ids, CancelAction::Interrupt)
        .await?;
    state
        .runner
        .cancelled(&affected, CancelAction::Interrupt)
        .await;
    Ok(())
}

/// Deletes a thread with its runs and checkpoints.
#[utoipa::path(delete, path = "/threads/{thread_id}", tag = "threads", params(("thread_id" = String, Path)),
    responses((status = 204), (status = 404), (status = 422)))]
pub(super) async fn remove(
    State(state): State<AppState>,
    who: Principal,
    Ids(id): Ids<ThreadId>,
) -> ApiResult<StatusCode> {
    let thread = lookups::thread(&state, id, &who).await?;
    stop_runs(&state, thread.thread_id).await?;
    state.store.delete_thread(thread.thread_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Copies a thread and its checkpoints under a new id.
#[utoipa::path(post, path = "/threads/{thread_id}/copy", tag = "threads", params(("thread_id" = String, Path)),
    responses((status = 200, body = Thread), (status = 404), (status = 422)))]
pub(super) async fn copy(
    State(state): State<AppState>,
    who: Principal,
    Ids(id): Ids<ThreadId>,
) -> ApiResult<Json<Thread>> {
    let thread = lookups::thread(&state, id, &who).await?;
    state
        .store
        .copy_thread(thread.thread_id, ThreadId::new(), Timestamp::now())
        .await?
        .map(Json)
        .ok_or_else(|| AppError::NotFound(format!("Thread with ID {id} not found")))
}

pub(super) async fn state_of(
    state: &AppState,
    thread: &Thread,
    checkpoint: Option<CheckpointId>,
    view: View,
) -> ApiResult<Value> {
    let store = &*state.store;
    let cp = match checkpoint {
        Some(cid) => Some(
            store
                .get_checkpoint(thread.thread_id, "", cid)
                .await?
                .ok_or_else(|| AppError::NotFound(format!("Checkpoint {cid} not found")))?,
        ),
        None => store.latest_checkpoint(thread.thread_id, "").await?,
    };
    let (Some(cp), Some(graph)) = (cp, graph_of(state, thread)) else {
        return Ok(empty_state());
    };
    Ok(StateBuilder::new(store, &graph, thread.thread_id)
        .view(view)
        .thread_state(&cp)
        .await?)
}

#[derive(Deserialize)]
pub(super) struct StateQuery {
    #[allow(dead_code)]
    subgraphs: Option<String>,
    /// Also the values clients are not sent (the research graph's page texts): for a tool that
    /// re-reads what the research read, such as `deep-research eval`.
    include_hidden: Option<bool>,
}

impl StateQuery {
    fn view(&self) -> View {
        if self.include_hidden == Some(true) {
            View::Everything
        } else {
            View::Clients
        }
    }
}

/// The thread's current state.
///
/// Values a channel keeps from clients (the research graph's page texts) are left out unless
/// `include_hidden=true`.
#[utoipa::path(get, path = "/threads/{thread_id}/state", tag = "state",
    params(("thread_id" = String, Path), ("include_hidden" = Option<bool>, Query, description = "Also the values clients are not sent (the sources' page texts)")),
    responses((status = 200), (status = 404), (status = 422)))]
pub(super) async fn get_state(
    State(state): State<AppState>,
    who: Principal,
    Ids(id): Ids<ThreadId>,
    Params(q): Params<StateQuery>,
) -> ApiResult<Json<Value>> {
    let thread = lookups::thread(&state, id, &who).await?;
    Ok(Json(state_of(&state, &thread, None, q.view()).await?))
}

/// The thread's state at one checkpoint.
///
/// Hidden values as for the current state.
#[utoipa::path(get, path = "/threads/{thread_id}/state/{checkpoint_id}", tag = "state",
    params(("thread_id" = String, Path), ("checkpoint_id" = String, Path), ("include_hidden" = Option<bool>, Query, description = "Also the values clients are not sent (the sources' page texts)")),
    responses((status = 200), (status = 404), (status = 422)))]
pub(super) async fn state_at(
    State(state): State<AppState>,
    who: Principal,
    Ids((id, checkpoint)): Ids<(ThreadId, CheckpointId)>,
    Params(q): Params<StateQuery>,
) -> ApiResult<Json<Value>> {
    let thread = lookups::thread(&state, id, &who).await?;
    Ok(Json(
        state_of(&state, &thread, Some(checkpoint), q.view()).await?,
    ))
}

#[derive(Deserialize, utoipa::ToSchema)]
pub(super) struct CheckpointBody {
    #[schema(value_type = Option<Object>)]
    checkpoint: Option<Value>,
    #[allow(dead_code)]
    subgraphs: Option<bool>,
}

/// The thread's state at the checkpoint named in the body.
#[utoipa::path(post, path = "/threads/{thread_id}/state/checkpoint", tag = "state", request_body = CheckpointBody,
    params(("thread_id" = String, Path)), responses((status = 200), (status = 404), (status = 422)))]
pub(super) async fn state_at_body(
    State(state): State<AppState>,
    who: Principal,
    Ids(id): Ids<ThreadId>,
    Body(body): Body<CheckpointBody>,
) -> ApiResult<Json<Value>> {
    let thread = lookups::thread(&state, id, &who).await?;
    let cid = checkpoint_id_of(body.checkpoint.as_ref())?;
    Ok(Json(state_of(&state, &thread, cid, View::Clients).await?))
}

#[derive(Deserialize, utoipa::ToSchema)]
pub(super) struct StateUpdate {
    #[schema(value_type = Object)]
    values: Value,
    as_node: Option<String>,
    #[schema(value_type = Option<Object>)]
    checkpoint: Option<Value>,
    checkpoint_id: Option<String>,
}

/// Writes a checkpoint as if `as_node` had returned `values` (reducers apply).
#[utoipa::path(post, path = "/threads/{thread_id}/state", tag = "state", request_body = StateUpdate,
    params(("thread_id" = String, Path)), responses((status = 200), (status = 400), (status = 404), (status = 409), (status = 422)))]
pub(super) async fn post_state(
    State(state): State<AppState>,
    who: Principal,
    Ids(id): Ids<ThreadId>,
    Body(body): Body<StateUpdate>,
) -> ApiResult<Json<Value>> {
    let thread = lookups::thread(&state, id, &who).await?;
    let graph = graph_of(&state, &thread).ok_or_else(|| {
        AppError::BadRequest(
            "Thread has no graph yet: start a run on it before updating its state".into(),
        )
    })?;
    if let Some(node) = body
        .as_node
        .as_deref()
        .filter(|n| graph.node_names().all(|g| g != *n))
    {
        return Err(AppError::Invalid(format!("as_node: unknown node '{node}'")));
    }
    if !state
        .store
        .inflight_runs(thread.thread_id)
        .await?
        .is_empty()
    {
        return Err(AppError::Conflict(
            "Thread is busy: wait for its run to finish before updating its state".into(),
        ));
    }
    let cid = match body.checkpoint_id.as_deref() {
        Some(raw) => Some(parse_id::<CheckpointId>(raw)?),
        None => checkpoint_id_of(body.checkpoint.as_ref())?,
    };
    let scope = Arc::new(RunScope::new(
        state.store.clone(),
        thread.thread_id,
        None,
        json!({}),
        thread.metadata.clone(),
        Arc::new(NullSink),
        CancellationToken::new(),
    ));
    let start = cid.map_or(Start::Head, Start::From);
    let cp = update_state(&scope, &graph, start, body.values, body.as_node.as_deref())
        .await
        .map_err(|e| match e {
            crate::graph::RunError::Store(s) => AppError::Store(s),
            crate::graph::RunError::CheckpointNotFound(c) => {
                AppError::NotFound(format!("Checkpoint {c} not found"))
            }
            other => AppError::Invalid(other.to_string()),
        })?;
    let mut values = StateBuilder::new(&*state.store, &graph, thread.thread_id)
        .values(&cp)
        .await?;
    graph.channels.hide_in(&mut values);
    let status = if cp.next.is_empty() {
        ThreadStatus::Idle
    } else {
        ThreadStatus::Interrupted
    };
    let summary = ThreadSummary {
        status,
        values: Some(Value::Object(values)),
        error: None,
        interrupts: json!({}),
    };
    state
        .store
        .set_thread_summary(thread.thread_id, &summary, Timestamp::now())
        .await?;
    let reference = json!({"thread_id": thread.thread_id, "checkpoint_ns": "", "checkpoint_id": cp.checkpoint_id});
    Ok(Json(
        json!({"checkpoint": reference, "configurable": reference, "checkpoint_id": cp.checkpoint_id}),
    ))
}

#[derive(Deserialize, utoipa::ToSchema)]
pub(super) struct HistoryBody {
    #[serde(default, deserialize_with = "super::numbers::opt_whole")]
    limit: Option<i64>,
    #[schema(value_type = Option<Object>)]
    before: Option<Value>,
    #[schema(value_type = Option<Object>)]
    metadata: Option<JsonMap>,
    #[schema(value_type = Option<Object>)]
    checkpoint: Option<Value>,
}

async fn history(
    state: &AppState,
    who: &Principal,
    id: ThreadId,
    body: HistoryBody,
) -> ApiResult<Json<Vec<Value>>> {
    let thread = lookups::thread(state, id, who).await?;
    let limit = body.limit.unwrap_or(1);
    if !(1..=1000).contains(&limit) {
        return Err(AppError::Invalid(format!(
            "limit must be between 1 and 1000, got {limit}"
        )));
    }
    if body
        .checkpoint
        .as_ref()
        .is_some_and(|c| !c.is_object() && !c.is_null())
    {
        return Err(AppError::Invalid(
            "checkpoint must be an object ({\"checkpoint_ns\": ...})".into(),
        ));
    }
    let ns = body
        .checkpoint
        .as_ref()
        .and_then(|c| c.get("checkpoint_ns"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let q = CheckpointQuery {
        checkpoint_ns: ns,
        before: checkpoint_id_of(body.before.as_ref())?,
        limit,
        metadata: body.metadata.unwrap_or_default(),
    };
    let Some(graph) = graph_of(state, &thread) else {
        return Ok(Json(Vec::new()));
    };
    let items = StateBuilder::new(&*state.store, &graph, thread.thread_id)
        .history(&q)
        .await?;
    Ok(Json(items))
}

/// Checkpoints of the thread, newest first, with their states.
#[utoipa::path(post, path = "/threads/{thread_id}/history", tag = "state", request_body = HistoryBody,
    params(("thread_id" = String, Path)), responses((status = 200), (status = 404), (status = 422)))]
pub(super) async fn history_post(
    State(state): State<AppState>,
    who: Principal,
    Ids(id): Ids<ThreadId>,
    Body(body): Body<HistoryBody>,
) -> ApiResult<Json<Vec<Value>>> {
    history(&state, &who, id, body).await
}

#[derive(Deserialize)]
pub(super) struct HistoryQuery {
    limit: Option<i64>,
    before: Option<String>,
}

/// Checkpoints of the thread (query-string form).
#[utoipa::path(get, path = "/threads/{thread_id}/history", tag = "state", params(("thread_id" = String, Path)),
    responses((status = 200), (status = 404), (status = 422)))]
pub(super) async fn history_get(
    State(state): State<AppState>,
    who: Principal,
    Ids(id): Ids<ThreadId>,
    Params(q): Params<HistoryQuery>,
) -> ApiResult<Json<Vec<Value>>> {
    let body = HistoryBody {
        limit: q.limit,
        before: q.before.map(Value::String),
        metadata: None,
        checkpoint: None,
    };
    history(&state, &who, id, body).await
}

/// Every event of every run on the thread, run after run, each followed by a `run_done`
/// marker: from now on, or after `Last-Event-ID`. Runs on other replicas are followed through
/// the store (their frames when they stream resumably, else their start and end).
#[utoipa::path(get, path = "/threads/{thread_id}/stream", tag = "threads",
    params(("thread_id" = Uuid, Path),
        ("stream_mode" = Option<String>, Query, description = "run_modes (default), lifecycle, or run stream modes to narrow run_modes"),
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event")),
    responses((status = 200, content_type = "text/event-stream"), (status = 404), (status = 422)))]
pub(super) async fn stream(
    State(state): State<AppState>,
    who: Principal,
    Ids(id): Ids<ThreadId>,
    headers: HeaderMap,
    RawQuery(q): RawQuery,
) -> ApiResult<Response> {
    let thread = lookups::thread(&state, id, &who).await?;
    let pairs = query_pairs(q.as_deref());
    let mut names = query_values(&pairs, "stream_mode");
    names.extend(query_values(&pairs, "stream_modes"));
    let modes = ThreadModes::parse(&names).map_err(AppError::Invalid)?;
    let after = match headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
    {
        None | Some("") => EventId {
            ms: Timestamp::now().millis(),
            seq: -1,
        },
        Some("-1") => EventId { ms: -1, seq: -1 },
        Some(raw) => raw
            .parse::<EventId>()
            .map_err(|e| AppError::Invalid(format!("Last-Event-ID: {e}")))?,
    };
    let body = thread_sse_body(ThreadFollow {
        store: state.store.clone(),
        bus: state.bus.clone(),
        thread_id: thread.thread_id,
        opened: ThreadIdentity {
            owner: thread.owner.clone(),
            created_at: thread.created_at,
        },
        modes,
        after,
        heartbeat: state.settings.heartbeat,
        shutdown: state.shutdown.clone(),
    });
    Ok(sse_response(body, None))
}
