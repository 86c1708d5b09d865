//! Assistants: named configuration presets of a registered graph. Each graph also has a system
//! assistant whose id is derived from the graph id, and the graph id works wherever an assistant
//! id does.

use super::auth::Principal;
use super::error::{ApiResult, AppError, Body, Params};
use super::params::parse_id;
use super::params::{check_recursion_limit, parse_enum};
use super::{AppState, SearchParams, paged, project};
use crate::graph::Graph;
use crate::graph::interrupts::Breakpoints;
use crate::ids::AssistantId;
use crate::store::Owner;
use crate::store::{
    Assistant, AssistantPatch, AssistantQuery, AssistantVersion, IfExists, JsonMap,
};
use crate::store::{AssistantSort, SortOrder};
use crate::time::Timestamp;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/assistants", post(create))
        .route("/assistants/search", post(search))
        .route("/assistants/count", post(count))
        .route(
            "/assistants/{assistant_id}",
            get(fetch).patch(update).delete(remove),
        )
        .route("/assistants/{assistant_id}/versions", post(versions))
        .route("/assistants/{assistant_id}/latest", post(set_latest))
        .route("/assistants/{assistant_id}/graph", get(graph))
        .route("/assistants/{assistant_id}/schemas", get(schemas))
        .route("/assistants/{assistant_id}/subgraphs", get(subgraphs))
        .route(
            "/assistants/{assistant_id}/subgraphs/{namespace}",
            get(subgraphs_ns),
        )
}

/// The system assistant of a graph.
pub fn system_assistant(graph_id: &str, now: Timestamp) -> Assistant {
    Assistant {
        assistant_id: AssistantId::default_for(graph_id),
        graph_id: graph_id.to_owned(),
        config: json!({}),
        context: json!({}),
        metadata: [("created_by".to_owned(), json!("system"))]
            .into_iter()
            .collect(),
        name: graph_id.to_owned(),
        description: None,
        version: 1,
        created_at: now,
        updated_at: now,
        owner: None,
    }
}

/// Finds the assistant an id names: an assistant UUID, or a registered graph id (its system
/// assistant). Unknown names get the reference's 422 message listing the graphs.
pub(crate) async fn resolve(state: &AppState, raw: &str, who: &Owner) -> ApiResult<Assistant> {
    let id = match raw.parse::<AssistantId>() {
        Ok(id) => id,
        Err(_) if state.registry.get(raw).is_some() => AssistantId::default_for(raw),
        Err(_) => {
            let graphs: Vec<&str> = state.registry.ids().collect();
            return Err(AppError::Invalid(format!(
                "Invalid assistant: '{raw}'. Must be either:\n- A valid assistant UUID, or\n- One of \
                 the registered graphs: {}",
                graphs.join(", ")
            )));
        }
    };
    state
        .store
        .get_assistant(id)
        .await?
        .filter(|a| a.visible_to(who))
        .ok_or_else(|| AppError::NotFound(format!("Assistant '{raw}' not found")))
}

fn graph_of(state: &AppState, assistant: &Assistant) -> ApiResult<Arc<Graph>> {
    state.registry.get(&assistant.graph_id).ok_or_else(|| {
        AppError::NotFound(format!("Graph '{}' is not registered", assistant.graph_id))
    })
}

#[derive(Deserialize, utoipa::ToSchema)]
pub(super) struct NewAssistant {
    graph_id: String,
    assistant_id: Option<String>,
    #[schema(value_type = Option<Object>)]
    config: Option<Value>,
    #[schema(value_type = Option<Object>)]
    context: Option<Value>,
    #[schema(value_type = Option<Object>)]
    metadata: Option<JsonMap>,
    if_exists: Option<String>,
    name: Option<String>,
    description: Option<String>,
}

fn object_or_empty(v: Option<Value>, field: &str) -> ApiResult<Value> {
    match v {
        None | Some(Value::Null) => Ok(json!({})),
        Some(v @ Value::Object(_)) => Ok(v),
        Some(_) => Err(AppError::Invalid(format!("{field} must be an object"))),
    }
}

/// An assistant's settings as a run on it starts from: its `config`, with its `context` merged
/// into `configurable` (LangGraph mirrors one into the other).
pub(crate) fn settings_of(config: &Value, context: &Value) -> JsonMap {
    let mut settings = config.as_object().cloned().unwrap_or_default();
    let mut configurable = settings
        .get("configurable")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    configurable.extend(context.as_object().cloned().unwrap_or_default());
    settings.insert("configurable".into(), Value::Object(configurable));
    settings
}

/// Checks an assistant's settings as every run on it would be checked, so a bad value is a
/// 422 now (naming the field, as a run gets) rather than a failed run later.
fn check_settings(graph: &Graph, config: &Value, context: &Value) -> ApiResult<()> {
    let settings = settings_of(config, context);
    let keys = &settings["configurable"]["apiKeys"];
    let holds_keys = keys.as_object().is_some_and(|m| {
        m.values()
            .any(|v| v.as_str().is_some_and(|k| !k.trim().is_empty()))
    });
    if holds_keys {
        return Err(AppError::Invalid(
            "apiKeys: an assistant is stored, and provider keys never are; send them with each \
             run (config.configurable.apiKeys)"
                .into(),
        ));
    }
    check_recursion_limit(&settings)?;
    graph
        .check_config(&Value::Object(settings))
        .map_err(AppError::Invalid)?;
    let key = |k: &str| config.get(k).cloned().unwrap_or(Value::Null);
    Breakpoints::parse(&key("interrupt_before"), &key("interrupt_after"), graph)
        .map_err(AppError::Invalid)?;
    Ok(())
}

/// Creates an assistant for a registered graph.
#[utoipa::path(post, path = "/assistants", tag = "assistants", request_body = NewAssistant,
    responses((status = 200, body = Assistant), (status = 404), (status = 409), (status = 422)))]
pub(super) async fn create(
    State(state): State<AppState>,
    who: Principal,
    Body(body): Body<NewAssistant>,
) -> ApiResult<Json<Assistant>> {
    let Some(graph) = state.registry.get(&body.graph_id) else {
        return Err(AppError::NotFound(format!(
            "Graph '{}' not found",
            body.graph_id
        )));
    };
    let if_exists: IfExists = parse_enum(body.if_exists.as_deref(), "if_exists", IfExists::Raise)?;
    let assistant_id = match body.assistant_id.as_deref() {
        Some(raw) => parse_id::<AssistantId>(raw)?,
        None => AssistantId::new(),
    };
    let now = Timestamp::now();
    let config = object_or_empty(body.config, "config")?;
    let context = object_or_empty(body.context, "context")?;
    check_settings(&graph, &config, &context)?;
    let assistant = Assistant {
        assistant_id,
        graph_id: body.graph_id,
        config,
        context,
        metadata: body.metadata.unwrap_or_default(),
        name: body.name.unwrap_or_else(|| "Untitled".into()),
        description: body.description,
        version: 1,
        created_at: now,
        updated_at: now,
        owner: Some(who.owner.clone()),
    };
    let stored = state.store.create_assistant(&assistant, if_exists).await?;
    // `do_nothing` on an id someone else holds must not hand their assistant over.
    if !stored.visible_to(&who.owner) {
        return Err(AppError::Conflict("Assistant already exists".into()));
    }
    Ok(Json(stored))
}

#[derive(Deserialize, utoipa::ToSchema)]
pub(super) struct AssistantSearch {
    #[schema(value_type = Option<Object>)]
    metadata: Option<JsonMap>,
    graph_id: Option<String>,
    name: Option<String>,
    #[serde(default, deserialize_with = "super::numbers::opt_whole")]
    limit: Option<i64>,
    #[serde(default, deserialize_with = "super::numbers::opt_whole")]
    offset: Option<i64>,
    sort_by: Option<AssistantSort>,
    sort_order: Option<SortOrder>,
    #[serde(default)]
    select: Vec<String>,
}

fn assistant_query(
    body: AssistantSearch,
    who: &Principal,
) -> ApiResult<(AssistantQuery, Vec<String>)> {
    let p = SearchParams::check(body.limit, body.offset)?;
    let metadata = body.metadata.unwrap_or_default();
    super::check_filter("metadata", &metadata)?;
    let q = AssistantQuery {
        owner: who.owner.clone(),
        metadata,
        graph_id: body.graph_id,
        name: body.name,
        limit: p.limit,
        offset: p.offset,
        sort_by: body.sort_by,
        sort_order: body.sort_order,
    };
    super::check_select(&body.select, &super::ASSISTANT_FIELDS)?;
    Ok((q, body.select))
}

/// Lists assistants, newest first by default.
#[utoipa::path(post, path = "/assistants/search", tag = "assistants", request_body = AssistantSearch,
    responses((status = 200, body = Vec<Assistant>), (status = 404), (status = 422)))]
pub(super) async fn search(
    State(state): State<AppState>,
    who: Principal,
    Body(body): Body<AssistantSearch>,
) -> ApiResult<Response> {
    if let Some(g) = body
        .graph_id
        .as_deref()
        .filter(|g| state.registry.get(g).is_none())
    {
        return Err(AppError::NotFound(format!("Graph '{g}' not found")));
    }
    let (q, select) = assistant_query(body, &who)?;
    let page = state.store.search_assistants(&q).await?;
    let items = page
        .items
        .into_iter()
        .map(|a| project(json!(a), &select))
        .collect();
    Ok(paged(items, page.total, q.offset, q.limit))
}

/// Counts assistants matching the filters.
#[utoipa::path(post, path = "/assistants/count", tag = "assistants", request_body = AssistantSearch,
    responses((status = 200, body = i64)))]
pub(super) async fn count(
    State(state): State<AppState>,
    who: Principal,
    Body(body): Body<AssistantSearch>,
) -> ApiResult<Json<i64>> {
    // Counting ignores paging, but paging fields sent must still be valid.
    super::check_paging(body.limit.unwrap_or(10), body.offset.unwrap_or(0))?;
    let (mut q, _) = assistant_query(
        AssistantSearch {
            limit: Some(1),
            offset: Some(0),
            ..body
        },
        &who,
    )?;
    q.limit = 1;
    Ok(Json(state.store.search_assistants(&q).await?.total))
}

async fn by_path(state: &AppState, raw: &str, who: &Principal) -> ApiResult<Assistant> {
    resolve(state, raw, &who.owner).await.map_err(|e| match e {
        AppError::Invalid(_) => AppError::Invalid(
            "Invalid assistant ID: must be a UUID or a registered graph id".into(),
        ),
        other => other,
    })
}

/// An assistant the caller may change: their own (system assistants are read-only to all).
async fn owned(state: &AppState, raw: &str, who: &Principal) -> ApiResult<Assistant> {
    let assistant = by_path(state, raw, who).await?;
    if assistant.owner.is_none() {
        return Err(AppError::Forbidden(
            "System assistants are read-only: create your own with POST /assistants".into(),
        ));
    }
    Ok(assistant)
}

/// One assistant.
#[utoipa::path(get, path = "/assistants/{assistant_id}", tag = "assistants",
    params(("assistant_id" = String, Path, description = "Assistant UUID or graph id")),
    responses((status = 200, body = Assistant), (status = 404), (status = 422)))]
pub(super) async fn fetch(
    State(state): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<Assistant>> {
    Ok(Json(by_path(&state, &id, &who).await?))
}

#[derive(Deserialize, utoipa::ToSchema)]
pub(super) struct AssistantUpdate {
    graph_id: Option<String>,
    #[schema(value_type = Option<Object>)]
    config: Option<Value>,
    #[schema(value_type = Option<Object>)]
    context: Option<Value>,
    #[schema(value_type = Option<Object>)]
    metadata: Option<JsonMap>,
    name: Option<String>,
    description: Option<String>,
}

/// Changes an assistant; metadata is merged and the version goes up.
#[utoipa::path(patch, path = "/assistants/{assistant_id}", tag = "assistants", request_body = AssistantUpdate,
    params(("assistant_id" = String, Path)), responses((status = 200, body = Assistant), (status = 404), (status = 422)))]
pub(super) async fn update(
    State(state): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
    Body(body): Body<AssistantUpdate>,
) -> ApiResult<Json<Assistant>> {
    let current = owned(&state, &id, &who).await?;
    let graph_id = body.graph_id.as_deref().unwrap_or(&current.graph_id);
    let Some(graph) = state.registry.get(graph_id) else {
        return Err(AppError::NotFound(format!("Graph '{graph_id}' not found")));
    };
    let patch = AssistantPatch {
        graph_id: body.graph_id,
        config: body
            .config
            .map(|c| object_or_empty(Some(c), "config"))
            .transpose()?,
        context: body
            .context
            .map(|c| object_or_empty(Some(c), "context"))
            .transpose()?,
        metadata: body.metadata,
        name: body.name,
        description: body.description,
    };
    // What the assistant would be after the patch (config and context are replaced whole).
    check_settings(
        &graph,
        patch.config.as_ref().unwrap_or(&current.config),
        patch.context.as_ref().unwrap_or(&current.context),
    )?;
    state
        .store
        .update_assistant(current.assistant_id, &patch, Timestamp::now())
        .await?
        .map(Json)
        .ok_or_else(|| AppError::NotFound(format!("Assistant '{id}' not found")))
}

/// Deletes an assistant.
#[utoipa::path(delete, path = "/assistants/{assistant_id}", tag = "assistants",
    params(("assistant_id" = String, Path)), responses((status = 204), (status = 404), (status = 422)))]
pub(super) async fn remove(
    State(state): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let current = owned(&state, &id, &who).await?;
    state.store.delete_assistant(current.assistant_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct VersionSearch {
    #[schema(value_type = Option<Object>)]
    metadata: Option<JsonMap>,
    #[serde(default, deserialize_with = "super::numbers::opt_whole")]
    limit: Option<i64>,
    #[serde(default, deserialize_with = "super::numbers::opt_whole")]
    offset: Option<i64>,
}

/// The assistant's versions, newest first; `metadata` keeps those whose metadata contains it.
#[utoipa::path(post, path = "/assistants/{assistant_id}/versions", tag = "assistants",
    request_body = VersionSearch, params(("assistant_id" = String, Path)),
    responses((status = 200, body = Vec<AssistantVersion>), (status = 404), (status = 422)))]
pub(super) async fn versions(
    State(state): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
    Body(body): Body<VersionSearch>,
) -> ApiResult<Json<Vec<AssistantVersion>>> {
    let current = by_path(&state, &id, &who).await?;
    let p = SearchParams::check(body.limit, body.offset)?;
    let metadata = body.metadata.unwrap_or_default();
    super::check_filter("metadata", &metadata)?;
    state
        .store
        .assistant_versions(current.assistant_id, &metadata, p.limit, p.offset)
        .await?
        .map(Json)
        .ok_or_else(|| AppError::NotFound(format!("Assistant '{id}' not found")))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct LatestVersion {
    #[serde(deserialize_with = "super::numbers::whole_i64")]
    version: i64,
}

/// Makes one of the assistant's versions its current one (runs use it from now on).
#[utoipa::path(post, path = "/assistants/{assistant_id}/latest", tag = "assistants",
    request_body = LatestVersion, params(("assistant_id" = String, Path)),
    responses((status = 200, body = Assistant), (status = 404), (status = 422)))]
pub(super) async fn set_latest(
    State(state): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
    Body(body): Body<LatestVersion>,
) -> ApiResult<Json<Assistant>> {
    let current = owned(&state, &id, &who).await?;
    let result = state
        .store
        .set_latest_assistant(current.assistant_id, body.version, Timestamp::now())
        .await;
    match result {
        Ok(a) => Ok(Json(a)),
        Err(crate::store::StoreError::NotFound("assistant version")) => Err(AppError::NotFound(
            format!("Assistant '{id}' has no version {}", body.version),
        )),
        Err(e) => Err(e.into()),
    }
}

/// The graph's nodes and edges.
#[utoipa::path(get, path = "/assistants/{assistant_id}/graph", tag = "assistants",
    params(("assistant_id" = String, Path)), responses((status = 200), (status = 404), (status = 422)))]
pub(super) async fn graph(
    State(state): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let assistant = by_path(&state, &id, &who).await?;
    Ok(Json(graph_of(&state, &assistant)?.drawing()))
}

/// The graph's input, output, state and config JSON Schemas.
#[utoipa::path(get, path = "/assistants/{assistant_id}/schemas", tag = "assistants",
    params(("assistant_id" = String, Path)), responses((status = 200), (status = 404), (status = 422)))]
pub(super) async fn schemas(
    State(state): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let assistant = by_path(&state, &id, &who).await?;
    let graph = graph_of(&state, &assistant)?;
    let s = &graph.schemas;
    Ok(Json(json!({
        "graph_id": graph.id,
        "input_schema": s.input,
        "output_schema": s.output,
        "state_schema": s.state,
        "config_schema": s.config,
        "context_schema": null,
    })))
}

#[derive(Deserialize)]
pub(super) struct SubgraphQuery {
    #[allow(dead_code)]
    recurse: Option<String>,
}

/// Subgraph schemas (none are published yet: `{}`).
#[utoipa::path(get, path = "/assistants/{assistant_id}/subgraphs", tag = "assistants",
    params(("assistant_id" = String, Path)), responses((status = 200), (status = 404)))]
pub(super) async fn subgraphs(
    State(state): State<AppState>,
    who: Principal,
    Path(id): Path<String>,
    Params(_q): Params<SubgraphQuery>,
) -> ApiResult<impl IntoResponse> {
    by_path(&state, &id, &who).await?;
    Ok(Json(json!({})))
}

async fn subgraphs_ns(
    State(state): State<AppState>,
    who: Principal,
    Path((id, _ns)): Path<(String, String)>,
) -> ApiResult<impl IntoResponse> {
    by_path(&state, &id, &who).await?;
    Ok(Json(json!({})))
}
