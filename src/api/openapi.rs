//! The OpenAPI document, generated from the handlers' annotations, served at `/openapi.json`
//! with Swagger UI (bundled, works offline) at `/docs`.

mod refine;

use super::{
    AppState, a2a, ag_ui, assistants, crons, mcp, meta, runs, store_items, thread_protocol,
    thread_report, threads,
};
use crate::store::{Assistant, Cron, MultitaskStrategy, Run, RunStatus, Thread, ThreadStatus};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};
use std::sync::Arc;
use utoipa::OpenApi;
use utoipa_swagger_ui::SwaggerUi;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "deep-research",
        description = "Open Deep Research served over the LangGraph Server API (assistants, threads, runs, SSE streams)."
    ),
    paths(
        meta::ok,
        meta::info,
        meta::prometheus,
        assistants::create,
        assistants::search,
        assistants::count,
        assistants::fetch,
        assistants::update,
        assistants::remove,
        assistants::versions,
        assistants::set_latest,
        assistants::graph,
        assistants::schemas,
        assistants::subgraphs,
        threads::create,
        threads::search,
        threads::count,
        threads::prune,
        threads::fetch,
        threads::update,
        threads::remove,
        threads::copy,
        threads::get_state,
        threads::state_at,
        threads::state_at_body,
        threads::post_state,
        threads::history_post,
        threads::history_get,
        threads::stream,
        thread_report::thread_report,
        runs::create,
        runs::stream,
        runs::wait,
        runs::create_stateless,
        runs::stream_stateless,
        runs::wait_stateless,
        runs::batch,
        runs::list,
        runs::fetch,
        runs::remove,
        runs::join,
        runs::cancel,
        runs::cancel_many,
        runs::join_stream,
        crons::create_stateless,
        crons::create_for_thread,
        crons::search,
        crons::count,
        crons::fetch,
        crons::update,
        crons::remove,
        store_items::put_item,
        store_items::get_item,
        store_items::delete_item,
        store_items::search,
        store_items::namespaces,
        thread_protocol::command,
        thread_protocol::events,
        a2a::rpc,
        a2a::card::well_known,
        a2a::card::of_assistant,
        mcp::mcp_doc,
        ag_ui::run_agent,
    ),
    components(schemas(
        Assistant,
        Cron,
        Thread,
        Run,
        RunStatus,
        ThreadStatus,
        MultitaskStrategy
    ))
)]
pub struct ApiDoc;

/// The document as pretty JSON (what `deep-research openapi` prints), for a server whose
/// graphs are `graphs`.
pub fn document(graphs: &[&str]) -> String {
    serde_json::to_string_pretty(&finalized(graphs))
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

pub(super) fn router(graphs: &[&str]) -> Router<AppState> {
    // Served as JSON directly: the refined document uses JSON Schema that utoipa's own types
    // cannot hold (type lists with null, anyOf on parameters).
    let doc = Arc::new(finalized(graphs));
    Router::new()
        .route(
            "/openapi.json",
            get(move || {
                let doc = doc.clone();
                async move { Json(doc.as_ref().clone()) }
            }),
        )
        .merge(SwaggerUi::new("/docs").config(utoipa_swagger_ui::Config::from("/openapi.json")))
}

/// The annotations' document, refined with what the server enforces everywhere.
fn finalized(graphs: &[&str]) -> Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_else(|_| json!({}));
    refine::refine(&mut doc, graphs);
    doc
}
