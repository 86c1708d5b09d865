//! OpenAI's Responses API (`POST /responses`): used for OpenAI models when a call needs OpenAI's
//! own web search (`search_api: "openai"`, ODR's `web_search_preview`), and for every call of a
//! provider of kind `openai_responses`. The pages the search read come back as the
//! `web_search_results` of the message, like Anthropic's, so citations are checked against them.

use super::coalesce::Coalescer;
use super::endpoint::{Endpoint, ErrorContext, classify, exact_body};
use super::history::{AiTurn, RawToolCall, identifier, search_metadata};
use super::{
    ChatMessage, ChatRequest, ChatResponse, Delta, FinishReason, LlmError, NativeTool, OnDelta,
    ToolChoice, Usage,
};
use crate::sse_decoder::SseStream;
use reqwest::header::CONTENT_TYPE;
use serde::Serialize;
use serde_json::{Value, json};

/// One call through the Responses API. `key` is the request's or the provider's.
pub(super) async fn call(
    endpoint: &Endpoint,
    model: &str,
    req: &ChatRequest,
    key: Option<&str>,
    on_delta: Option<OnDelta<'_>>,
) -> Result<ChatResponse, LlmError> {
    let body = body(model, req, on_delta.is_some());
    let bytes = serde_json::to_vec(&body).map_err(|e| LlmError::BadRequest {
        provider: endpoint.name.clone(),
        message: format!("cannot encode the request: {e}"),
    })?;
    let mut request = endpoint
        .post(&format!("{}/responses", endpoint.base_url()))
        .header(CONTENT_TYPE, "application/json")
        .body(exact_body(bytes));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let cx = ErrorContext {
        provider: &endpoint.name,
        model,
        secret: key,
    };
    let response = endpoint.send(request, &cx).await?;
    match on_delta {
        Some(on_delta) => read_stream(endpoint, model, response, on_delta, &cx).await,
        None => parse(endpoint, model, &endpoint.read_json(response).await?, &cx),
    }
}

/// The request body. `store: false`: nothing is kept at OpenAI between calls, so the whole
/// history is sent each time, as with chat completions.
fn body(model: &str, req: &ChatRequest, stream: bool) -> Value {
    let input: Vec<Item<'_>> = req.messages.iter().flat_map(items).collect();
    let mut tools: Vec<Value> = req
        .tools
        .iter()
        .map(|t| {
            json!({"type": "function", "name": t.name, "description": t.description,
                   "parameters": t.parameters, "strict": false})
        })
        .collect();
    for native in &req.native_tools {
        match native {
            NativeTool::WebSearch { .. } => tools.push(json!({"type": "web_search"})),
        }
    }
    let mut body = json!({
        "model": model,
        "input": input,
        "max_output_tokens": req.max_tokens,
        "store": false,
    });
    if !tools.is_empty() {
        body["tools"] = Value::Array(tools);
        body["tool_choice"] = match &req.tool_choice {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::None => json!("none"),
            ToolChoice::Required => json!("required"),
            ToolChoice::Named(name) => json!({"type": "function", "name": name}),
        };
        body["parallel_tool_calls"] = json!(req.parallel_tool_calls);
    }
    if let Some(schema) = &req.response_schema {
        body["text"] = json!({"format": {"type": "json_schema", "name": identifier(&schema.name),
            "description": schema.description, "schema": schema.schema, "strict": false}});
    }
    if stream {
        body["stream"] = json!(true);
    }
    body
}

/// One input item of a Responses request.
#[derive(Serialize)]
#[serde(untagged)]
enum Item<'a> {
    /// A message: `{"role", "content"}`.
    Said {
        role: &'static str,
        content: &'a str,
    },
    /// A call the model made or a call's output: `{"type", …}`.
    Tool(ToolItem<'a>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ToolItem<'a> {
    FunctionCall {
        call_id: &'a str,
        name: &'a str,
        arguments: String,
    },
    FunctionCallOutput {
        call_id: &'a str,
        output: &'a str,
    },
}

/// One message as Responses input items: a message, or an assistant's text and its function
/// calls, or a function call's output.
fn items(message: &ChatMessage) -> Vec<Item<'_>> {
    let said = |role, content| Item::Said { role, content };
    match message {
        ChatMessage::System(text) => vec![said("system", text)],
        ChatMessage::Human(text) => vec![said("user", text)],
        ChatMessage::Tool(result) => vec![Item::Tool(ToolItem::FunctionCallOutput {
            call_id: &result.call_id,
            output: &result.text,
        })],
        ChatMessage::Ai(turn) => {
            let mut out = Vec::new();
            if !turn.text.is_empty() {
                out.push(said("assistant", &turn.text));
            }
            out.extend(turn.calls.iter().map(|call| {
                Item::Tool(ToolItem::FunctionCall {
                    call_id: &call.id,
                    name: &call.name,
                    arguments: call.args.as_json_text(),
                })
            }));
            out
        }
    }
}

/// A finished response object (the body, or the `response` of `response.completed`).
fn parse(
    endpoint: &Endpoint,
    model: &str,
    response: &Value,
    cx: &ErrorContext<'_>,
) -> Result<ChatResponse, LlmError> {
    if let Some(error) = response.get("error").filter(|e| !e.is_null()) {
        return Err(failed(error, cx));
    }
    let Some(output) = response["output"].as_array() else {
        return Err(endpoint.invalid("the response has no `output`".into()));
    };
    let mut text = String::new();
    let mut calls = Vec::new();
    let mut searches = 0u64;
    let mut pages: Vec<Value> = Vec::new();
    // A page may be listed by the search and cited in the text: once, with its title.
    let mut add_page = |url: &str, title: &str| {
        if url.is_empty() {
            return;
        }
        match pages.iter_mut().find(|p| p["url"] == url) {
            Some(page) if page["title"] == "" => page["title"] = json!(title),
            Some(_) => {}
            None => pages.push(json!({"url": url, "title": title})),
        }
    };
    for item in output {
        match item["type"].as_str() {
            Some("message") => {
                for part in item["content"].as_array().into_iter().flatten() {
                    if part["type"] == "output_text" {
                        text.push_str(part["text"].as_str().unwrap_or_default());
                        for note in part["annotations"].as_array().into_iter().flatten() {
                            if note["type"] == "url_citation" {
                                add_page(
                                    note["url"].as_str().unwrap_or_default(),
                                    note["title"].as_str().unwrap_or_default(),
                                );
                            }
                        }
                    }
                }
            }
            Some("function_call") => calls.push(RawToolCall {
                id: item["call_id"].as_str().map(str::to_owned),
                name: item["name"].as_str().unwrap_or_default().to_owned(),
                args: item["arguments"].as_str().unwrap_or_default().to_owned(),
            }),
            Some("web_search_call") => {
                searches += 1;
                for source in item["action"]["sources"].as_array().into_iter().flatten() {
                    add_page(source["url"].as_str().unwrap_or_default(), "");
                }
            }
            _ => {}
        }
    }
    let finish = finish_reason(response, !calls.is_empty());
    let metadata = search_metadata(searches, pages);
    let usage = &response["usage"];
    Ok(AiTurn {
        id: response["id"].as_str().map(str::to_owned),
        model: response["model"].as_str().unwrap_or(model).to_owned(),
        content: text,
        calls,
        finish,
        usage: usage.is_object().then(|| Usage {
            input_tokens: usage["input_tokens"].as_u64().unwrap_or(0),
            output_tokens: usage["output_tokens"].as_u64().unwrap_or(0),
        }),
        metadata,
    }
    .into_response())
}

/// Why the response ended: cut short by its token cap or a filter, or done (with calls or not).
fn finish_reason(response: &Value, has_calls: bool) -> FinishReason {
    match (
        response["status"].as_str(),
        response["incomplete_details"]["reason"].as_str(),
    ) {
        (Some("incomplete"), Some("max_output_tokens")) => FinishReason::Length,
        (Some("incomplete"), Some("content_filter")) => FinishReason::ContentFilter,
        _ if has_calls => FinishReason::ToolCalls,
        _ => FinishReason::Stop,
    }
}

/// A `failed` response's or an `error` event's `{code, message}`, classified like an HTTP error.
fn failed(error: &Value, cx: &ErrorContext<'_>) -> LlmError {
    let status = match error["code"].as_str().unwrap_or_default() {
        "rate_limit_exceeded" => 429,
        "server_error" | "" => 500,
        "context_length_exceeded" | "invalid_prompt" => 400,
        _ => 400,
    };
    classify(
        cx,
        status,
        &reqwest::header::HeaderMap::new(),
        &json!({"error": error}).to_string(),
    )
}

/// Reads the event stream: text and function-call arguments go out as deltas as they come; the
/// answer is the `response` of the closing `response.completed` (or `.incomplete`) event.
async fn read_stream(
    endpoint: &Endpoint,
    model: &str,
    response: reqwest::Response,
    on_delta: OnDelta<'_>,
    cx: &ErrorContext<'_>,
) -> Result<ChatResponse, LlmError> {
    let mut events = SseStream::new(response.bytes_stream());
    let mut batch = Coalescer::new(on_delta);
    let mut id = String::new();
    while let Some(event) = batch.next(&mut events).await {
        let event = event.map_err(|e| endpoint.sse_error(e))?;
        if event.data.trim().is_empty() {
            continue;
        }
        let data: Value = serde_json::from_str(&event.data)
            .map_err(|e| endpoint.invalid(format!("stream event is not JSON: {e}")))?;
        let kind = data["type"].as_str().unwrap_or(event.event.as_str());
        match kind {
            "response.created" => {
                id = data["response"]["id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
            }
            "response.output_text.delta" => batch.push(Delta {
                id: id.clone(),
                content: data["delta"].as_str().unwrap_or_default().to_owned(),
                tool_call_chunks: vec![],
            }),
            "response.output_item.added" if data["item"]["type"] == "function_call" => {
                batch.push(Delta {
                    id: id.clone(),
                    content: String::new(),
                    tool_call_chunks: vec![json!({"name": data["item"]["name"],
                        "args": "", "id": data["item"]["call_id"],
                        "index": data["output_index"], "type": "tool_call_chunk"})],
                });
            }
            "response.function_call_arguments.delta" => batch.push(Delta {
                id: id.clone(),
                content: String::new(),
                tool_call_chunks: vec![json!({"name": null, "args": data["delta"], "id": null,
                    "index": data["output_index"], "type": "tool_call_chunk"})],
            }),
            "response.completed" | "response.incomplete" => {
                batch.flush();
                return parse(endpoint, model, &data["response"], cx);
            }
            "response.failed" => {
                batch.flush();
                return Err(failed(&data["response"]["error"], cx));
            }
            "error" => {
                batch.flush();
                return Err(failed(&data, cx));
            }
            _ => {}
        }
    }
    batch.flush();
    Err(LlmError::Transient {
        provider: endpoint.name.clone(),
        message: "the stream ended before the response was complete".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{ModelName, ToolSpec};

    #[test]
    fn history_becomes_input_items() {
        let messages = vec![
            json!({"type": "system", "content": "be brief"}),
            json!({"type": "human", "content": "q"}),
            json!({"type": "ai", "content": "", "tool_calls": [
                {"name": "think_tool", "args": {"reflection": "r"}, "id": "c1", "type": "tool_call"}]}),
            json!({"type": "tool", "content": "Reflection recorded", "tool_call_id": "c1"}),
        ];
        let messages = messages
            .into_iter()
            .map(|m| ChatMessage::from_langchain(m).unwrap())
            .collect();
        let mut req = ChatRequest::new(ModelName::parse("openai:gpt-4.1").unwrap(), messages, 100);
        req.tools = vec![ToolSpec {
            name: "think_tool".into(),
            description: "d".into(),
            parameters: json!({"type": "object"}),
        }];
        req.native_tools = vec![NativeTool::WebSearch { max_uses: 5 }];
        let b = body("gpt-4.1", &req, false);
        assert_eq!(
            b["input"][0],
            json!({"role": "system", "content": "be brief"})
        );
        assert_eq!(b["input"][2]["type"], "function_call");
        assert_eq!(b["input"][2]["arguments"], "{\"reflection\":\"r\"}");
        assert_eq!(
            b["input"][3],
            json!({"type": "function_call_output", "call_id": "c1", "output": "Reflection recorded"})
        );
        assert_eq!(b["tools"][1], json!({"type": "web_search"}));
        assert_eq!(b["max_output_tokens"], 100);
        assert_eq!(b["store"], false);
    }
}
