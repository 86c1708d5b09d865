//! The agent card of an assistant: who it is, what it does, and where to talk to it, for A2A
//! v1.0 clients (`supportedInterfaces`) and v0.3 ones (`url`, `protocolVersion`) at once. At
//! `/.well-known/agent-card.json?assistant_id=…` (the research graph when none is named) and
//! `/a2a/{assistant_id}/.well-known/agent-card.json`. The card needs the same credentials as
//! the rest of the API.

use super::super::AppState;
use super::super::assistants::resolve;
use super::super::auth::Principal;
use super::super::error::ApiResult;
use super::super::error::AppError;
use super::super::query::{query_pairs, query_values};
use axum::Json;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, header};
use serde_json::{Value, json};

/// The card at the well-known path.
#[utoipa::path(get, path = "/.well-known/agent-card.json", tag = "a2a",
    params(("assistant_id" = Option<String>, Query, description = "The assistant (default: the research graph)")),
    responses((status = 200, description = "An A2A agent card (v1.0 and v0.3 fields)"), (status = 404), (status = 422)))]
pub(super) async fn well_known(
    State(state): State<AppState>,
    who: Principal,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> ApiResult<Json<Value>> {
    let named = query_values(&query_pairs(query.as_deref()), "assistant_id");
    let raw = match named.as_slice() {
        // The research graph by default, where this server has it.
        [] if state.registry.get(crate::research::GRAPH_ID).is_some() => {
            crate::research::GRAPH_ID.to_owned()
        }
        [] => {
            return Err(AppError::NotFound(
                "Name the assistant: ?assistant_id=… (this server has no research graph)".into(),
            ));
        }
        [one] => one.clone(),
        _ => return Err(AppError::Invalid("assistant_id: give one".into())),
    };
    card(&state, &who, &headers, &raw).await
}

/// The card beside the assistant's endpoint.
#[utoipa::path(get, path = "/a2a/{assistant_id}/.well-known/agent-card.json", tag = "a2a",
    params(("assistant_id" = String, Path)),
    responses((status = 200, description = "An A2A agent card (v1.0 and v0.3 fields)"), (status = 404), (status = 422)))]
pub(super) async fn of_assistant(
    State(state): State<AppState>,
    who: Principal,
    headers: HeaderMap,
    Path(raw): Path<String>,
) -> ApiResult<Json<Value>> {
    card(&state, &who, &headers, &raw).await
}

async fn card(
    state: &AppState,
    who: &Principal,
    headers: &HeaderMap,
    raw: &str,
) -> ApiResult<Json<Value>> {
    let assistant = resolve(state, raw, &who.owner).await?;
    // The address the client used (the Host check has vetted it); behind a TLS proxy, the
    // scheme it forwards.
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    let scheme = headers
        .get("x-forwarded-proto")
        .and_then(|h| h.to_str().ok())
        .filter(|p| matches!(*p, "http" | "https"))
        .unwrap_or("http");
    let url = format!("{scheme}://{host}/a2a/{}", assistant.assistant_id);
    let research = assistant.graph_id == crate::research::GRAPH_ID
        || assistant.graph_id == crate::research::ODR_GRAPH_ID;
    let description = assistant.description.clone().unwrap_or_else(|| {
        if research {
            "Researches a question on the web or in the operator's documents with parallel \
             researchers and writes a long report whose citations are checked against the pages \
             it retrieved."
                .to_owned()
        } else {
            format!("The '{}' graph.", assistant.graph_id)
        }
    });
    let skill = if research {
        json!({"id": "deep_research", "name": "Deep research",
               "description": "A cited research report on a question. It may ask one clarifying \
                               question first (the task is then input-required: answer on the same \
                               contextId). Research settings go in the message's \
                               metadata.configurable.",
               "tags": ["research", "report", "citations"],
               "examples": ["How do sodium-ion batteries compare with LFP for home storage?"],
               "inputModes": ["text/plain"], "outputModes": ["text/markdown"]})
    } else {
        json!({"id": assistant.graph_id, "name": assistant.name, "description": description,
               "tags": [assistant.graph_id], "inputModes": ["text/plain"],
               "outputModes": ["text/plain"]})
    };
    Ok(Json(json!({
        "name": assistant.name,
        "description": description,
        "version": env!("CARGO_PKG_VERSION"),
        "supportedInterfaces": [
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        ],
        // v0.3 clients read these.
        "url": url,
        "protocolVersion": "0.3.0",
        "preferredTransport": "JSONRPC",
        "capabilities": {"streaming": true, "pushNotifications": false},
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain", "text/markdown"],
        "skills": [skill],
    })))
}
