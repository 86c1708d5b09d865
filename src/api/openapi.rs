//! The OpenAPI document, generated from the handlers' annotations, served at `/openapi.json`
//! with Swagger UI (bundled, works offline) at `/docs`.

use super::{AppState, assistants, crons, meta, protocol, runs, store_items, threads};
use crate::store::{Assistant, Cron, MultitaskStrategy, Run, RunStatus, Thread, ThreadStatus};
use axum::Router;
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
        protocol::command,
        protocol::events,
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

/// The document as pretty JSON (what `deep-research openapi` prints).
pub fn document() -> String {
    ApiDoc::openapi()
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

pub(super) fn router() -> Router<AppState> {
    Router::new().merge(SwaggerUi::new("/docs").url("/openapi.json", ApiDoc::openapi()))
}
