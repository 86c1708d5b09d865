//! The service as an MCP server at `/mcp` (streamable HTTP, stateless). Every assistant the
//! caller can use is a tool: its argument is the question, a call runs the assistant to the end
//! on the caller's thread and returns the report, with the sources it cites. A clarifying
//! question (or a plan to review) comes back as the result, with the `thread_id` to answer on.
//! Progress notifications follow the run when the caller sends a progress token; cancelling
//! the call interrupts the run. Authentication, owners and run limits are the API's: this is a
//! nested service behind the same layers, and the caller's `Principal` is read from the HTTP
//! request rmcp hands each handler.

use super::AppState;
use super::auth::Principal;
use super::error::AppError;
use super::turns::{self, Outcome, Turn};
use crate::ids::{AssistantId, RunId, ThreadId};
use crate::research::progress::{LineId, RunProgress};
use crate::store::{Assistant, AssistantQuery, CancelAction, JsonMap, Run, SortOrder};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ProgressNotificationParam,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};
use std::collections::HashSet;
use std::sync::Arc;

/// Tools listed per caller: the first hundred assistants, oldest first (the graphs' own first).
const MAX_TOOLS: i64 = 100;

/// `/mcp`, served by rmcp. Host, origin, body size and credentials are checked by the API's
/// own layers around it, so rmcp's copies of those checks are off here.
pub(super) fn router(state: AppState) -> Router<AppState> {
    // Answers are SSE, never plain JSON: a research call takes minutes, and only a stream
    // carries keep-alive comments through proxies and client read timeouts meanwhile.
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(false)
        .with_sse_keep_alive(Some(state.settings.heartbeat))
        .with_max_request_body_bytes(state.settings.max_body_bytes)
        .with_cancellation_token(state.shutdown.child_token())
        .disable_allowed_hosts()
        .disable_allowed_origins();
    let tools = ResearchTools { state };
    let service: StreamableHttpService<ResearchTools, LocalSessionManager> =
        StreamableHttpService::new(move || Ok(tools.clone()), Arc::default(), config);
    Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn(read_call_context))
        .layer(axum::middleware::map_response(json_errors))
}

/// `params.context` of a `tools/call`, which LangGraph's server makes the run's context.
/// rmcp's typed params have no such field and drop it, so it is read here, from the body the
/// API's guard has already buffered and counted, and handed to `call_tool` on the request.
#[derive(Clone)]
struct CallContext(Value);

async fn read_call_context(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let (mut parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return AppError::BadRequest("The request body could not be read".into()).into_response();
    };
    if let Ok(message) = serde_json::from_slice::<Value>(&bytes)
        && message["method"] == "tools/call"
        && let Some(context) = message["params"].get("context")
    {
        parts.extensions.insert(CallContext(context.clone()));
    }
    next.run(axum::extract::Request::from_parts(
        parts,
        axum::body::Body::from(bytes),
    ))
    .await
}

/// The call's context: an object, or none.
fn call_context(context: &RequestContext<RoleServer>) -> Result<Option<JsonMap>, String> {
    let sent = context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<CallContext>());
    match sent.map(|c| &c.0) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(c)) => Ok(Some(c.clone())),
        Some(_) => Err("params.context must be an object (the run's context)".into()),
    }
}

/// rmcp answers what it refuses with plain text, and a body that is not JSON-RPC with 415.
/// Here every refusal is JSON: `{"detail"}` like the rest of the API, plus a JSON-RPC error
/// (`-32700`, status 400) for a body that is not a JSON-RPC message.
async fn json_errors(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, 64 * 1024)
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes).trim().to_owned();
    let not_json_rpc = status == StatusCode::UNSUPPORTED_MEDIA_TYPE
        && text.starts_with("fail to deserialize request body");
    let mut reply = if not_json_rpc {
        let detail = format!(
            "The body is not a JSON-RPC 2.0 message: {}",
            text.trim_start_matches("fail to deserialize request body")
                .trim()
        );
        (
            StatusCode::BAD_REQUEST,
            Json(json!({"jsonrpc": "2.0", "id": null,
            "error": {"code": -32700, "message": detail}, "detail": detail})),
        )
            .into_response()
    } else {
        let detail = if text.is_empty() {
            status.to_string()
        } else {
            text
        };
        (status, Json(json!({ "detail": detail }))).into_response()
    };
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            reply.headers_mut().insert(name.clone(), value.clone());
        }
    }
    reply
}

/// MCP over streamable HTTP, stateless: every assistant the caller can use is a tool that
/// researches a question (GET and DELETE are 405: there are no sessions).
#[utoipa::path(post, path = "/mcp", tag = "mcp",
    request_body(content = Object, description = "A JSON-RPC 2.0 MCP request (initialize, tools/list, tools/call, …)", content_type = "application/json"),
    responses(
        (status = 200, description = "The JSON-RPC response, as JSON or as an SSE stream (progress notifications, then the response)"),
        (status = 400, description = "The body is not a JSON-RPC 2.0 message (a JSON-RPC error -32700 and `detail`)"),
        (status = 401, description = "No valid credentials"),
        (status = 406, description = "The request must accept both application/json and text/event-stream"),
        (status = 413, description = "The body is too large"),
        (status = 415, description = "The body is not sent as application/json")))]
// Only documents the endpoint: rmcp answers it.
#[allow(dead_code)]
pub(super) async fn mcp_doc() {}

#[derive(Clone)]
struct ResearchTools {
    state: AppState,
}

impl ServerHandler for ResearchTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "deep-research",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                "Each tool is a research assistant: call it with a question and it returns a \
                 long report with numbered citations, after minutes rather than seconds. If it \
                 asks a clarifying question instead, call it again with your answer as the \
                 question and the thread_id it gave.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let who = principal(&context)?;
        let tools = self
            .catalogue(&who)
            .await?
            .iter()
            .map(|(name, assistant)| tool(name, assistant))
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let who = principal(&context)?;
        let catalogue = self.catalogue(&who).await?;
        let Some((_, assistant)) = catalogue.iter().find(|(name, _)| *name == request.name) else {
            return Err(ErrorData::invalid_params(
                format!("Unknown tool '{}': tools/list names them", request.name),
                None,
            ));
        };
        let arguments = request.arguments.unwrap_or_default();
        let turn = match parse_arguments(assistant.assistant_id, &arguments).and_then(|turn| {
            Ok(Turn {
                context: call_context(&context)?,
                ..turn
            })
        }) {
            Ok(turn) => turn,
            Err(why) => return Ok(failure(why, None).into()),
        };
        // The call stays open until the research ends: one of the owner's streams or waits.
        let _slot = match self.state.admission.hold_open(&who.owner) {
            Ok(slot) => slot,
            Err(e) => return tool_error(e).map(Into::into),
        };
        let run = match turns::start(&self.state, &who, turn).await {
            Ok(run) => run,
            Err(e) => return tool_error(e).map(Into::into),
        };
        let ended = self.run_to_end(&run, &context).await?;
        Ok(self.result(&run, ended).await?.into())
    }
}

impl ResearchTools {
    /// The caller's assistants under tool names: the assistant's name made safe (letters,
    /// digits, `_`, `-`, `.`; at most 64), with the start of its id added where two collide.
    async fn catalogue(&self, who: &Principal) -> Result<Vec<(String, Assistant)>, ErrorData> {
        let query = AssistantQuery {
            owner: who.owner.clone(),
            metadata: Map::new(),
            graph_id: None,
            name: None,
            limit: MAX_TOOLS,
            offset: 0,
            sort_by: Some(crate::store::AssistantSort::CreatedAt),
            sort_order: Some(SortOrder::Asc),
        };
        let page = self
            .state
            .store
            .search_assistants(&query)
            .await
            .map_err(|e| internal(&AppError::from(e)))?;
        let mut taken = HashSet::new();
        let mut named = Vec::with_capacity(page.items.len());
        for assistant in page.items {
            let mut name = tool_name(&assistant.name);
            if !taken.insert(name.clone()) {
                let id = assistant.assistant_id.uuid().simple().to_string();
                name = format!("{}_{}", truncate(&name, 55), &id[..8]);
                taken.insert(name.clone());
            }
            named.push((name, assistant));
        }
        Ok(named)
    }

    /// Waits for the run, sending progress when the caller asked for it; a cancelled call
    /// interrupts the run. `None`: the run goes on but the server is shutting down.
    async fn run_to_end(
        &self,
        run: &Run,
        context: &RequestContext<RoleServer>,
    ) -> Result<Option<Run>, ErrorData> {
        let state = &self.state;
        let progress = self.send_progress(run.run_id, context);
        tokio::select! {
            () = progress => {}
            () = context.ct.cancelled() => {
                let affected = state
                    .store
                    .cancel_runs(&[run.run_id], CancelAction::Interrupt)
                    .await
                    .map_err(|e| internal(&AppError::from(e)))?;
                state.runner.cancelled(&affected, CancelAction::Interrupt).await;
            }
        }
        turns::wait_for_end(state, run.run_id)
            .await
            .map_err(|e| internal(&AppError::from(e)))
    }

    /// Follows the run's stream to its end and reports each finished step and each
    /// researcher's searches as a progress notification (when the call carries a token).
    async fn send_progress(&self, run_id: RunId, context: &RequestContext<RoleServer>) {
        let state = &self.state;
        let token = context.meta.get_progress_token();
        let (mut frames, _following) = turns::follow(state, run_id);
        let mut progress = RunProgress::new();
        let mut sent = 0.0;
        while let Some(frame) = frames.recv().await {
            let Some(token) = &token else { continue };
            for change in progress.on_event(&frame.event, &frame.data) {
                if change.done || matches!(change.line, LineId::Researcher(_)) {
                    sent += 1.0;
                    let note = ProgressNotificationParam::new(token.clone(), sent)
                        .with_message(change.text);
                    // A caller that stopped listening still gets its result.
                    let _ = context.peer.notify_progress(note).await;
                }
            }
        }
    }

    /// The tool result for an ended run.
    async fn result(&self, run: &Run, ended: Option<Run>) -> Result<CallToolResult, ErrorData> {
        let thread_id = run.thread_id;
        let Some(ended) = ended else {
            return Ok(failure(
                format!(
                    "The server is shutting down; the research goes on on thread {thread_id} \
                     (run {})",
                    run.run_id
                ),
                Some(json!({"thread_id": thread_id, "run_id": run.run_id, "status": "running"})),
            ));
        };
        let reading = turns::read_run(&self.state, &ended)
            .await
            .map_err(|e| internal(&AppError::from(e)))?;
        let ids = json!({"thread_id": thread_id, "run_id": run.run_id});
        Ok(match reading.outcome {
            Outcome::Completed => {
                let text = reading.answer().unwrap_or_default();
                let sources = cited_sources(&self.state, thread_id, &text).await;
                let mut content = vec![ContentBlock::text(text.clone())];
                content.extend(sources.iter().filter_map(|s| {
                    let url = s["url"].as_str()?;
                    let title = s["title"].as_str().unwrap_or(url);
                    Some(ContentBlock::resource_link(rmcp::model::Resource::new(
                        url, title,
                    )))
                }));
                let mut result = CallToolResult::success(content);
                result.structured_content = Some(json!({"status": "completed",
                    "thread_id": thread_id, "run_id": run.run_id, "report": text,
                    "sources": sources}));
                result
            }
            Outcome::NeedsInput(question) => {
                let question = question.unwrap_or_else(|| "The agent waits for input.".into());
                let mut result = CallToolResult::success(vec![ContentBlock::text(format!(
                    "{question}\n\n(To answer, call this tool again with your answer as \
                     `question` and thread_id \"{thread_id}\".)"
                ))]);
                result.structured_content = Some(json!({"status": "needs_input",
                    "thread_id": thread_id, "run_id": run.run_id, "question": question}));
                result
            }
            Outcome::Failed(why) => failure(
                format!("The research failed: {why}"),
                Some(json!({"status": "failed", "thread_id": thread_id,
                            "run_id": run.run_id, "error": why})),
            ),
            Outcome::Cancelled | Outcome::Pending | Outcome::Running => failure(
                "The research was cancelled before it finished".into(),
                Some(merge(ids, json!({"status": "cancelled"}))),
            ),
        })
    }
}

/// The sources of the thread's state whose address the report cites, in the state's order.
async fn cited_sources(state: &AppState, thread_id: ThreadId, report: &str) -> Vec<Value> {
    let Ok(Some(thread)) = state.store.get_thread(thread_id).await else {
        return Vec::new();
    };
    let mut seen = HashSet::new();
    thread
        .values
        .as_ref()
        .and_then(|v| v["sources"].as_array())
        .into_iter()
        .flatten()
        .filter_map(|s| {
            let url = s["url"].as_str()?;
            (report.contains(url) && seen.insert(url.to_owned()))
                .then(|| json!({"url": url, "title": s["title"]}))
        })
        .collect()
}

fn merge(mut a: Value, b: Value) -> Value {
    if let (Some(a), Value::Object(b)) = (a.as_object_mut(), b) {
        a.extend(b);
    }
    a
}

/// The tool's arguments as a turn: `question` (required), `thread_id` (to continue a thread or
/// answer its question) and `configurable` (research settings). Anything else is refused.
fn parse_arguments(assistant_id: AssistantId, arguments: &JsonObject) -> Result<Turn, String> {
    if let Some(key) = arguments
        .keys()
        .find(|k| !matches!(k.as_str(), "question" | "thread_id" | "configurable"))
    {
        return Err(format!(
            "Unknown argument '{key}': the arguments are question, thread_id and configurable"
        ));
    }
    let text = match arguments.get("question") {
        Some(Value::String(q)) if !q.trim().is_empty() => q.clone(),
        Some(Value::String(_)) => return Err("question is empty".into()),
        Some(_) => return Err("question must be a string".into()),
        None => return Err("question is required".into()),
    };
    let thread_id = match arguments.get("thread_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(
            s.parse::<ThreadId>()
                .map_err(|_| format!("thread_id '{s}' is not a UUID"))?,
        ),
        Some(_) => return Err("thread_id must be a string (a UUID)".into()),
    };
    let configurable = match arguments.get("configurable") {
        None | Some(Value::Null) => None,
        Some(Value::Object(c)) => Some(c.clone()),
        Some(_) => return Err("configurable must be an object of research settings".into()),
    };
    Ok(Turn {
        assistant_id,
        thread_id,
        text,
        data: None,
        configurable,
        context: None,
        protocol: "mcp",
    })
}

/// An assistant as a tool.
fn tool(name: &str, assistant: &Assistant) -> Tool {
    let research = assistant.graph_id == crate::research::GRAPH_ID
        || assistant.graph_id == crate::research::ODR_GRAPH_ID;
    let description = assistant.description.clone().unwrap_or_else(|| {
        if research {
            "Researches a question on the web (or in the operator's documents) with parallel \
             researchers and returns a long report whose numbered citations were checked \
             against the pages retrieved. Takes minutes. It may ask one clarifying question \
             first: answer it by calling again with the thread_id it returns."
                .to_owned()
        } else {
            format!("Runs the '{}' graph on a question.", assistant.graph_id)
        }
    });
    let schema = json!({
        "type": "object",
        "properties": {
            "question": {"type": "string",
                "description": "The research question; with thread_id, the answer to the \
                                agent's question or a follow-up"},
            "thread_id": {"type": "string", "format": "uuid",
                "description": "Continue this thread (one a previous call returned)"},
            "configurable": {"type": "object",
                "description": "Research settings, as in the assistant's config schema \
                                (GET /assistants/{assistant_id}/schemas)"}
        },
        "required": ["question"],
        "additionalProperties": false
    });
    let schema: JsonObject = match schema {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    Tool::new(name.to_owned(), description, Arc::new(schema))
}

/// A tool name clients accept: `[A-Za-z0-9_.-]{1,64}`.
fn tool_name(name: &str) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let safe = truncate(&safe, 64);
    if safe.is_empty() {
        "assistant".into()
    } else {
        safe.to_owned()
    }
}

fn truncate(s: &str, max: usize) -> &str {
    // Only ASCII reaches here, so any index is a char boundary.
    &s[..s.len().min(max)]
}

/// A result the calling model reads as a failure (`isError`), not a protocol error.
fn failure(text: String, structured: Option<Value>) -> CallToolResult {
    let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
    result.structured_content = structured;
    result
}

/// An API error as the tool's answer: what the caller can fix is a tool error it reads; what
/// it cannot (the store is down) a protocol error.
fn tool_error(error: AppError) -> Result<CallToolResult, ErrorData> {
    match error.status().as_u16() {
        400..=499 => Ok(failure(error.detail(), None)),
        _ => Err(internal(&error)),
    }
}

/// A failure the caller cannot fix, said as REST says it: the full text goes to the log only.
fn internal(error: &AppError) -> ErrorData {
    tracing::error!(error = ?error, "MCP call failed");
    ErrorData::internal_error(error.public_detail(), None)
}

/// The caller, as the API's authentication layer put it on the HTTP request.
fn principal(context: &RequestContext<RoleServer>) -> Result<Principal, ErrorData> {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Principal>())
        .cloned()
        .ok_or_else(|| ErrorData::invalid_request("Authentication required", None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    /// A stored value that cannot be opened is an internal error to the caller, worded as REST
    /// words it: which key sealed it, or what the row held, is for the log.
    #[test]
    fn internal_errors_do_not_show_their_text() {
        let corrupt = AppError::Store(crate::store::StoreError::Corrupt {
            what: "state_values",
            detail: "a stored value was sealed with key deadbeef".into(),
        });
        let Err(error) = tool_error(corrupt) else {
            panic!("a corrupt row is not the caller's to fix");
        };
        assert_eq!(error.message, "internal error");
        let refused = tool_error(AppError::Invalid("question is empty".into())).unwrap();
        assert_eq!(refused.is_error, Some(true));
    }

    #[test]
    fn tool_names_are_safe_and_bounded() {
        assert_eq!(tool_name("deep_research"), "deep_research");
        assert_eq!(tool_name("My research: v2"), "My_research__v2");
        assert_eq!(tool_name(""), "assistant");
        assert_eq!(tool_name(&"x".repeat(80)).len(), 64);
        assert_eq!(tool_name("é"), "_");
    }

    #[test]
    fn arguments_are_checked() {
        let id = AssistantId::from_uuid(Uuid::nil());
        let args = |v: Value| v.as_object().cloned().unwrap_or_default();
        assert!(parse_arguments(id, &args(json!({}))).is_err());
        assert!(parse_arguments(id, &args(json!({"question": " "}))).is_err());
        assert!(parse_arguments(id, &args(json!({"question": "q", "extra": 1}))).is_err());
        assert!(parse_arguments(id, &args(json!({"question": "q", "thread_id": "x"}))).is_err());
        let turn = parse_arguments(
            id,
            &args(
                json!({"question": "q", "thread_id": Uuid::nil().to_string(),
                         "configurable": {"max_researcher_iterations": 1}}),
            ),
        );
        assert!(
            turn.is_ok_and(|t| t.thread_id == Some(ThreadId::from_uuid(Uuid::nil()))
                && t.configurable.is_some())
        );
    }
}
