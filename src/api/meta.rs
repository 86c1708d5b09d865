//! Health and server information.

use super::AppState;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/ok", get(ok))
        .route("/info", get(info))
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
