//! The Store API (`/store/...`): JSON documents under a namespace and key, shared across
//! threads — what a deployment remembers between conversations (preferences, past findings).

use super::AppState;
use super::auth::Principal;
use super::error::{ApiResult, AppError, Body};
use super::query::{query_flag, query_pairs, query_values};
use crate::store::{Comparison, FieldMatch, Item, ItemQuery, JsonMap, Namespace, NamespaceQuery};
use crate::time::Timestamp;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::routing::{post, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/store/items",
            put(put_item).get(get_item).delete(delete_item),
        )
        .route("/store/items/search", post(search))
        .route("/store/namespaces", post(namespaces))
}

/// Keys longer than this (in characters) are refused: they are part of the primary key.
const MAX_KEY_CHARS: usize = 256;
/// Filters per search.
const MAX_FILTERS: usize = 32;

/// Semantic search needs an embeddings index, which this server is not configured with.
const NO_INDEX: &str = "semantic search is not available: this server has no embeddings \
    index for the store; find items by namespace_prefix and filter instead";

fn namespace(labels: Vec<String>) -> ApiResult<Namespace> {
    Namespace::new(labels).map_err(|e| AppError::Invalid(format!("namespace: {e}")))
}

fn key(raw: String) -> ApiResult<String> {
    if raw.is_empty() || raw.chars().count() > MAX_KEY_CHARS {
        return Err(AppError::Invalid(format!(
            "key must be 1 to {MAX_KEY_CHARS} characters"
        )));
    }
    Ok(raw)
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PutItem {
    namespace: Vec<String>,
    key: String,
    #[schema(value_type = Object)]
    value: JsonMap,
    /// `false` (or absent): not indexed. A list of paths would need an embeddings index.
    #[schema(value_type = Option<Object>)]
    index: Option<Value>,
    /// Minutes until the item expires (restarted by reads that refresh it).
    ttl: Option<f64>,
}

/// Stores an item (replacing one with the same namespace and key).
#[utoipa::path(put, path = "/store/items", tag = "store", request_body = PutItem,
    responses((status = 204), (status = 422)))]
pub(super) async fn put_item(
    State(state): State<AppState>,
    who: Principal,
    Body(body): Body<PutItem>,
) -> ApiResult<StatusCode> {
    let ns = namespace(body.namespace)?;
    let key = key(body.key)?;
    match body.index {
        None | Some(Value::Null) | Some(Value::Bool(false)) => {}
        Some(_) => return Err(AppError::Invalid(format!("index: {NO_INDEX}"))),
    }
    if let Some(ttl) = body
        .ttl
        .filter(|t| !(t.is_finite() && *t > 0.0 && *t <= super::MAX_TTL_MINUTES))
    {
        return Err(AppError::Invalid(format!(
            "ttl must be a positive number of minutes, at most ten years; got {ttl}"
        )));
    }
    state
        .store
        .put_item(
            &who.owner,
            &ns,
            &key,
            &body.value,
            body.ttl,
            Timestamp::now(),
        )
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// One item, or `null` when there is none (as the reference answers).
#[utoipa::path(get, path = "/store/items", tag = "store",
    params(("namespace" = String, Query, description = "Labels joined by '.'"),
        ("key" = String, Query), ("refresh_ttl" = Option<bool>, Query)),
    responses((status = 200, body = Option<Item>), (status = 422)))]
pub(super) async fn get_item(
    State(state): State<AppState>,
    who: Principal,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Option<Item>>> {
    let pairs = query_pairs(raw.as_deref());
    let one = |name: &str| {
        query_values(&pairs, name)
            .pop()
            .ok_or_else(|| AppError::Invalid(format!("{name} is required")))
    };
    let ns = Namespace::from_dotted(&one("namespace")?)
        .map_err(|e| AppError::Invalid(format!("namespace: {e}")))?;
    let key = key(one("key")?)?;
    let refresh =
        query_values(&pairs, "refresh_ttl").is_empty() || query_flag(&pairs, "refresh_ttl")?;
    let item = state
        .store
        .get_item(&who.owner, &ns, &key, refresh, Timestamp::now())
        .await?;
    Ok(Json(item))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ItemRef {
    namespace: Vec<String>,
    key: String,
}

/// Deletes an item (204 whether or not it existed).
#[utoipa::path(delete, path = "/store/items", tag = "store", request_body = ItemRef,
    responses((status = 204), (status = 422)))]
pub(super) async fn delete_item(
    State(state): State<AppState>,
    who: Principal,
    Body(body): Body<ItemRef>,
) -> ApiResult<StatusCode> {
    let ns = namespace(body.namespace)?;
    state
        .store
        .delete_item(&who.owner, &ns, &key(body.key)?)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct ItemSearch {
    #[serde(default)]
    namespace_prefix: Vec<String>,
    /// Value fields: a plain value matches like a metadata filter; `{"$gt": 3}` and the like
    /// (`$eq`, `$ne`, `$gt`, `$gte`, `$lt`, `$lte`) compare.
    #[schema(value_type = Option<Object>)]
    filter: Option<JsonMap>,
    #[serde(default, deserialize_with = "super::numbers::opt_whole")]
    limit: Option<i64>,
    #[serde(default, deserialize_with = "super::numbers::opt_whole")]
    offset: Option<i64>,
    query: Option<String>,
    refresh_ttl: Option<bool>,
}

fn field_match(field: &str, want: Value) -> ApiResult<Vec<FieldMatch>> {
    let Value::Object(ops) = &want else {
        return Ok(vec![FieldMatch::Contains(want)]);
    };
    if ops.is_empty() || !ops.keys().all(|k| k.starts_with('$')) {
        return Ok(vec![FieldMatch::Contains(want)]);
    }
    ops.iter()
        .map(|(op, v)| {
            let compare = |c| {
                if v.is_number() || v.is_string() {
                    Ok(FieldMatch::Compare(c, v.clone()))
                } else {
                    Err(AppError::Invalid(format!(
                        "filter.{field}.{op}: compares numbers or strings, got {v}"
                    )))
                }
            };
            match op.as_str() {
                "$eq" => Ok(FieldMatch::Contains(v.clone())),
                "$ne" => Ok(FieldMatch::NotContains(v.clone())),
                "$gt" => compare(Comparison::Gt),
                "$gte" => compare(Comparison::Gte),
                "$lt" => compare(Comparison::Lt),
                "$lte" => compare(Comparison::Lte),
                other => Err(AppError::Invalid(format!(
                    "filter.{field}: unknown operator '{other}' (expected $eq, $ne, $gt, $gte, \
                     $lt or $lte)"
                ))),
            }
        })
        .collect()
}

/// Items under a namespace prefix whose values match the filter, by namespace then key.
#[utoipa::path(post, path = "/store/items/search", tag = "store", request_body = ItemSearch,
    responses((status = 200, description = "`{\"items\": [Item + score]}`"), (status = 422)))]
pub(super) async fn search(
    State(state): State<AppState>,
    who: Principal,
    Body(body): Body<ItemSearch>,
) -> ApiResult<Json<Value>> {
    if body.query.as_deref().is_some_and(|q| !q.trim().is_empty()) {
        return Err(AppError::Invalid(format!("query: {NO_INDEX}")));
    }
    let prefix = Namespace::prefix(body.namespace_prefix)
        .map_err(|e| AppError::Invalid(format!("namespace_prefix: {e}")))?;
    let filter = body.filter.unwrap_or_default();
    super::check_filter("filter", &filter)?;
    if !filter.is_empty() && crate::store::crypt::enabled() {
        return Err(AppError::Invalid(
            "filter: item values are encrypted at rest on this server, so they cannot be \
             searched; find items by namespace_prefix instead"
                .into(),
        ));
    }
    if filter.len() > MAX_FILTERS {
        return Err(AppError::Invalid(format!(
            "filter has {} fields; at most {MAX_FILTERS} are allowed",
            filter.len()
        )));
    }
    let mut matches = Vec::new();
    for (field, want) in filter {
        for m in field_match(&field, want)? {
            matches.push((field.clone(), m));
        }
    }
    let (limit, offset) = (body.limit.unwrap_or(10), body.offset.unwrap_or(0));
    super::check_paging(limit, offset)?;
    let q = ItemQuery {
        owner: who.owner.clone(),
        prefix,
        filter: matches,
        limit,
        offset,
        refresh_ttl: body.refresh_ttl.unwrap_or(true),
    };
    let items = state.store.search_items(&q, Timestamp::now()).await?;
    let items: Vec<Value> = items
        .into_iter()
        .map(|item| {
            let mut v = json!(item);
            if let Some(o) = v.as_object_mut() {
                o.insert("score".into(), Value::Null);
            }
            v
        })
        .collect();
    Ok(Json(json!({ "items": items })))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct NamespaceSearch {
    #[serde(default)]
    prefix: Vec<String>,
    #[serde(default)]
    suffix: Vec<String>,
    #[serde(default, deserialize_with = "super::numbers::opt_whole")]
    max_depth: Option<i64>,
    #[serde(default, deserialize_with = "super::numbers::opt_whole")]
    limit: Option<i64>,
    #[serde(default, deserialize_with = "super::numbers::opt_whole")]
    offset: Option<i64>,
}

/// The namespaces that hold items, optionally under a prefix, ending with a suffix, and cut
/// to `max_depth` labels.
#[utoipa::path(post, path = "/store/namespaces", tag = "store", request_body = NamespaceSearch,
    responses((status = 200, description = "`{\"namespaces\": [[label, ...]]}`"), (status = 422)))]
pub(super) async fn namespaces(
    State(state): State<AppState>,
    who: Principal,
    Body(body): Body<NamespaceSearch>,
) -> ApiResult<Json<Value>> {
    let prefix =
        Namespace::prefix(body.prefix).map_err(|e| AppError::Invalid(format!("prefix: {e}")))?;
    let suffix =
        Namespace::prefix(body.suffix).map_err(|e| AppError::Invalid(format!("suffix: {e}")))?;
    let max_depth = match body.max_depth {
        None => None,
        Some(d) if d >= 1 => Some(usize::try_from(d).unwrap_or(usize::MAX)),
        Some(d) => {
            return Err(AppError::Invalid(format!(
                "max_depth must be at least 1, got {d}"
            )));
        }
    };
    let (limit, offset) = (body.limit.unwrap_or(100), body.offset.unwrap_or(0));
    super::check_paging(limit, offset)?;
    let q = NamespaceQuery {
        owner: who.owner.clone(),
        prefix,
        suffix: suffix.labels().to_vec(),
        max_depth,
        limit: usize::try_from(limit).unwrap_or(0),
        offset: usize::try_from(offset).unwrap_or(0),
    };
    let found = state.store.list_namespaces(&q, Timestamp::now()).await?;
    Ok(Json(json!({ "namespaces": found })))
}
