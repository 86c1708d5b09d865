//! Health and server information.

use super::AppState;
use super::error::{ApiResult, AppError};
use crate::store::RunStatus;
use crate::telemetry::metrics;
use axum::extract::State;
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

/// Liveness: the process answers.
#[utoipa::path(get, path = "/ok", tag = "meta", responses((status = 200, description = "Alive")))]
pub(super) async fn ok() -> Json<Value> {
    Json(json!({"ok": true}))
}

/// Server version and feature flags, as the SDKs read them.
#[utoipa::path(get, path = "/info", tag = "meta", responses((status = 200, description = "Server info")))]
pub(super) async fn info() -> Json<Value> {
    Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "langgraph_py_version": "1.2.22",
        "flags": {"assistants": true, "crons": false, "langsmith": false,
                  "langsmith_tracing_replicas": false, "langsmith_tracing_session_on_runs": false},
        "host": {"kind": "self-hosted", "project_id": null, "host_revision_id": null,
                 "revision_id": null, "tenant_id": null},
    }))
}
