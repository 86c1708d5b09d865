//! Health and server information.

use super::AppState;
use super::error::{ApiResult, AppError};
use super::query::{query_flag, query_pairs};
use crate::store::RunStatus;
use crate::telemetry::metrics;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/ok", get(ok))
        .route("/info", get(info))
        .route("/metrics", get(prometheus))
}

/// Prometheus metrics (text exposition format); the names are listed in
/// `telemetry::metrics`.
#[utoipa::path(get, path = "/metrics", tag = "meta",
    responses((status = 200, content_type = "text/plain", description = "Prometheus metrics"),
              (status = 404, description = "Metrics are turned off"), (status = 503)))]
pub(super) async fn prometheus(State(state): State<AppState>) -> ApiResult<Response> {
    if state.settings.telemetry.metrics_address.is_some() {
        return Err(AppError::NotFound(
            "metrics are served on their own address ([telemetry] metrics_address)".into(),
        ));
    }
    render(&state).await
}

/// `/metrics` alone, for the listener of `[telemetry] metrics_address`.
pub fn metrics_router(state: AppState) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|State(state): State<AppState>| async move { render(&state).await }),
        )
        .with_state(state)
}

async fn render(state: &AppState) -> ApiResult<Response> {
    if !state.settings.telemetry.metrics {
        return Err(AppError::NotFound(
            "metrics are turned off ([telemetry] metrics = false)".into(),
        ));
    }
    metrics::runs_pending(state.store.count_runs(RunStatus::Pending).await?);
    let Some(text) = metrics::render() else {
        return Err(AppError::NotFound(
            "metrics are unavailable: another metrics recorder was installed first".into(),
        ));
    };
    let mut response = text.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    Ok(response)
}

/// How long the readiness check waits for the database.
const READINESS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // Read by hand (`query_flag`); declared for the spec.
pub(super) struct OkQuery {
    /// `1` / `true`: also check that the database answers (readiness).
    check_db: Option<String>,
}

/// Liveness, or with `check_db=1` readiness (the database answers too; 503 while it does not).
#[utoipa::path(get, path = "/ok", tag = "meta", params(OkQuery),
    responses((status = 200, description = "Alive (and ready)"),
              (status = 422, description = "Invalid check_db"),
              (status = 503, description = "The database does not answer")))]
pub(super) async fn ok(
    State(state): State<AppState>,
    RawQuery(raw): RawQuery,
) -> ApiResult<Json<Value>> {
    if query_flag(&query_pairs(raw.as_deref()), "check_db")? {
        // A readiness probe wants an answer within its own timeout, not the pool's.
        let ping = tokio::time::timeout(READINESS_TIMEOUT, state.store.ping()).await;
        if let Err(error) = ping
            .map_err(|_| "no answer within 2 s".to_owned())
            .and_then(|r| r.map_err(|e| e.to_string()))
        {
            tracing::warn!(%error, "readiness check: the database does not answer");
            return Err(AppError::Unavailable("the database does not answer".into()));
        }
    }
    Ok(Json(json!({"ok": true})))
}

/// Server version and feature flags, as the SDKs read them.
#[utoipa::path(get, path = "/info", tag = "meta", responses((status = 200, description = "Server info")))]
pub(super) async fn info() -> Json<Value> {
    Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "langgraph_py_version": "1.2.22",
        "flags": {"assistants": true, "crons": true, "langsmith": false,
                  "langsmith_tracing_replicas": false, "langsmith_tracing_session_on_runs": false},
        "host": {"kind": "self-hosted", "project_id": null, "host_revision_id": null,
                 "revision_id": null, "tenant_id": null},
    }))
}
