//! HTTP surface: the LangGraph Server API (assistants, threads, runs, streams) plus health and
//! OpenAPI. Handlers validate, call the store and the runner, and shape responses.

mod a2a;
mod ag_ui;
mod assistants;
pub mod auth;
pub mod body_shape;
pub(crate) mod crons;
pub mod error;
mod guard;
mod lookups;
mod mcp;
mod meta;
mod numbers;
pub mod openapi;
mod params;
mod query;
mod response_bodies;
mod runs;
mod store_items;
mod thread_protocol;
mod thread_report;
mod thread_socket;
mod threads;
mod turns;
mod web;

use crate::config::Settings;
use crate::graph::Registry;
use crate::runs::Runner;
use crate::store::Store;
use crate::stream::Bus;
use crate::telemetry::metrics;
use axum::Router;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request};
use axum::http::{HeaderName, HeaderValue, Method, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use error::AppError;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tower_http::cors::{AllowHeaders, AllowOrigin, CorsLayer};
use tracing::Instrument;

/// What every handler can reach; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub bus: Bus,
    pub registry: Registry,
    pub runner: Arc<Runner>,
    pub settings: Arc<Settings>,
    pub auth: Arc<auth::Authenticator>,
    pub admission: Arc<runs::admission::Admission>,
    pub shutdown: CancellationToken,
}

/// The whole application router with its layers.
pub fn router(state: AppState) -> Router {
    let limit = state.settings.max_body_bytes;
    let graphs: Vec<&str> = state.registry.ids().collect();
    let docs = openapi::router(&graphs);
    let web = if state.settings.web_app {
        web::router()
    } else {
        Router::new()
    };
    let a2a = if state.settings.a2a {
        a2a::router()
    } else {
        Router::new()
    };
    let mcp = if state.settings.mcp {
        mcp::router(state.clone())
    } else {
        Router::new()
    };
    let ag_ui = if state.settings.ag_ui {
        ag_ui::router()
    } else {
        Router::new()
    };
    Router::new()
        .merge(web)
        .merge(a2a)
        .merge(mcp)
        .merge(ag_ui)
        .merge(meta::router())
        .merge(assistants::router())
        .merge(threads::router())
        .merge(runs::router())
        .merge(thread_protocol::router())
        .merge(thread_socket::router())
        .merge(thread_report::router())
        .merge(store_items::router())
        .merge(crons::router())
        .merge(docs)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            runs::admission::limit_open_responses,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            runs::admission::limit_storage,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            guard::read_body_in_time,
        ))
        // Outside the body reader: nobody unauthenticated gets a body buffered.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ))
        // Inside CORS, so preflights are answered before it; outside authentication, so a
        // refused page learns nothing about keys.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            guard::refuse_cross_site_writes,
        ))
        .layer(DefaultBodyLimit::max(limit))
        .layer(cors(&state.settings))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            guard::check_host,
        ))
        .layer(middleware::from_fn(observe))
        .with_state(state)
}

/// A span per request named by its route (`POST /threads/{thread_id}/runs`, never the raw
/// path), and the request count and latency metrics.
async fn observe(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
        .to_owned();
    let method = req.method().clone();
    let span = tracing::info_span!("request", otel.name = %format!("{method} {route}"),
        otel.kind = "server", http.request.method = %method, http.route = %route,
        http.response.status_code = tracing::field::Empty);
    let started = Instant::now();
    let response = next.run(req).instrument(span.clone()).await;
    let status = response.status().as_u16();
    span.record("http.response.status_code", status);
    let took = started.elapsed();
    metrics::http_request(method.as_str(), &route, status, took);
    let ms = took.as_secs_f64() * 1000.0;
    if status >= 500 {
        tracing::warn!(parent: &span, status, ms, "request failed");
    } else {
        tracing::debug!(parent: &span, status, ms, "request");
    }
    response
}

/// CORS for the configured origins (none: no CORS headers at all, so browsers keep pages of
/// other origins out). `location` is exposed so browser clients can reconnect to a stream.
fn cors(settings: &Settings) -> CorsLayer {
    let origins = &settings.cors_origins;
    if origins.is_empty() {
        return CorsLayer::new();
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(
            origins
                .iter()
                .filter_map(|o| HeaderValue::from_str(o.trim_end_matches('/')).ok()),
        )
    };
    CorsLayer::new()
        .allow_origin(allow)
        .allow_methods([
            Method::DELETE,
            Method::GET,
            Method::HEAD,
            Method::OPTIONS,
            Method::PATCH,
            Method::POST,
            Method::PUT,
        ])
        .allow_headers(AllowHeaders::mirror_request())
        .expose_headers([
            HeaderName::from_static("x-pagination-total"),
            HeaderName::from_static("x-pagination-next"),
            header::CONTENT_LOCATION,
            header::LOCATION,
        ])
        .allow_private_network(settings.cors_private_network)
        .max_age(Duration::from_secs(600))
}

/// A search response: the page as JSON plus the pagination headers the SDKs read.
pub(crate) fn paged(
    items: Vec<serde_json::Value>,
    total: i64,
    offset: i64,
    limit: i64,
) -> Response {
    let mut response = axum::Json(items).into_response();
    let headers = response.headers_mut();
    let next = offset.saturating_add(limit);
    let total = if next < total {
        if let Ok(v) = HeaderValue::from_str(&next.to_string()) {
            headers.insert("x-pagination-next", v);
        }
        total.max(next.saturating_add(1))
    } else {
        total
    };
    if let Ok(v) = HeaderValue::from_str(&total.to_string()) {
        headers.insert("x-pagination-total", v);
    }
    response
}

/// Fields an assistant, a thread and a cron have (what `select` may name).
pub(crate) const ASSISTANT_FIELDS: [&str; 10] = [
    "assistant_id",
    "graph_id",
    "config",
    "context",
    "metadata",
    "name",
    "description",
    "version",
    "created_at",
    "updated_at",
];
pub(crate) const THREAD_FIELDS: [&str; 10] = [
    "thread_id",
    "created_at",
    "updated_at",
    "state_updated_at",
    "metadata",
    "status",
    "config",
    "values",
    "error",
    "interrupts",
];
pub(crate) const CRON_FIELDS: [&str; 14] = [
    "cron_id",
    "assistant_id",
    "thread_id",
    "user_id",
    "schedule",
    "timezone",
    "payload",
    "metadata",
    "on_run_completed",
    "enabled",
    "end_time",
    "next_run_date",
    "created_at",
    "updated_at",
];

/// The longest time-to-live a thread or store item may have: ten years, in minutes.
pub(crate) const MAX_TTL_MINUTES: f64 = 10.0 * 365.0 * 24.0 * 60.0;

/// Ids one request may name (`ids`, `thread_ids`, `run_ids`): each becomes a SQL parameter, and
/// SQLite allows a few thousand per statement.
pub(crate) const MAX_IDS: usize = 1000;
/// Members a filter may have in all (each becomes SQL), and how deep it may nest.
const MAX_FILTER_MEMBERS: usize = 100;
const MAX_FILTER_DEPTH: usize = 8;

/// Refuses more than `MAX_IDS` ids before the database sees them.
pub(crate) fn check_ids(field: &str, count: usize) -> Result<(), AppError> {
    if count > MAX_IDS {
        return Err(AppError::Invalid(format!(
            "{field}: at most {MAX_IDS} ids per request, got {count}"
        )));
    }
    Ok(())
}

/// Refuses a metadata/values/store filter too large or too deep to turn into SQL (a 422, where
/// SQLite would fail with "Expression tree is too large").
pub(crate) fn check_filter(field: &str, filter: &crate::store::JsonMap) -> Result<(), AppError> {
    fn walk(v: &serde_json::Value, depth: usize, members: &mut usize) -> Option<usize> {
        let mut deepest = depth;
        let children: Box<dyn Iterator<Item = &serde_json::Value>> = match v {
            serde_json::Value::Object(m) => Box::new(m.values()),
            serde_json::Value::Array(a) => Box::new(a.iter()),
            _ => return Some(depth),
        };
        for child in children {
            *members += 1;
            if *members > MAX_FILTER_MEMBERS || depth >= MAX_FILTER_DEPTH {
                return None;
            }
            deepest = deepest.max(walk(child, depth + 1, members)?);
        }
        Some(deepest)
    }
    let mut members = 0;
    let root = serde_json::Value::Object(filter.clone());
    match walk(&root, 0, &mut members) {
        Some(_) => Ok(()),
        None => Err(AppError::Invalid(format!(
            "{field}: filters may have at most {MAX_FILTER_MEMBERS} members, nested at most \
             {MAX_FILTER_DEPTH} deep"
        ))),
    }
}

/// A `select` may only name fields the objects have.
pub(crate) fn check_select(select: &[String], fields: &[&str]) -> Result<(), AppError> {
    match select.iter().find(|f| !fields.contains(&f.as_str())) {
        None => Ok(()),
        Some(bad) => Err(AppError::Invalid(format!(
            "select: unknown field '{bad}' (expected some of {})",
            fields.join(", ")
        ))),
    }
}

/// Keeps only the `select`ed keys of each object (all when `select` is empty).
pub(crate) fn project(value: serde_json::Value, select: &[String]) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) if !select.is_empty() => serde_json::Value::Object(
            map.into_iter()
                .filter(|(k, _)| select.contains(k))
                .collect(),
        ),
        other => other,
    }
}

/// Checks `limit`/`offset` of a search body.
pub(crate) fn check_paging(limit: i64, offset: i64) -> Result<(), AppError> {
    if !(1..=1000).contains(&limit) {
        return Err(AppError::Invalid(format!(
            "limit must be between 1 and 1000, got {limit}"
        )));
    }
    if offset < 0 {
        return Err(AppError::Invalid(format!(
            "offset must not be negative, got {offset}"
        )));
    }
    Ok(())
}

pub use assistants::system_assistant;
pub(crate) use crons::run_scheduler;
pub use meta::metrics_router;
pub use runs::admission::Admission;

/// The paging and sorting fields every search body has, checked.
pub(crate) struct SearchParams {
    pub limit: i64,
    pub offset: i64,
}

impl SearchParams {
    /// A page of a search: 10 from the start unless said; errors name the field. (Its
    /// ordering is typed in each search body.)
    pub fn check(limit: Option<i64>, offset: Option<i64>) -> Result<Self, AppError> {
        let (limit, offset) = (limit.unwrap_or(10), offset.unwrap_or(0));
        check_paging(limit, offset)?;
        Ok(Self { limit, offset })
    }
}
