//! Anthropic messages API: system prompt at the top level, tool use as content blocks,
//! structured output through a forced tool, native web search, and SSE streaming.

use super::coalesce::Coalescer;
use super::endpoint::{Endpoint, ErrorContext, classify, exact_body};
use super::history::{AiTurn, RawToolCall, identifier, runaway_limit};
use super::{
    ChatMessage, ChatModel, ChatRequest, ChatResponse, Delta, FinishReason, LlmError, ModelTurn,
    NativeTool, OnDelta, ToolChoice, Usage,
};
use crate::sse_decoder::SseStream;
use async_trait::async_trait;
use bytes::Bytes;
use secrecy::ExposeSecret;
use serde::Serialize;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

const API_VERSION: &str = "2023-06-01";

/// One Claude model.
pub(super) struct AnthropicModel {
    endpoint: Arc<Endpoint>,
    model: String,
}

#[async_trait]
impl ChatModel for AnthropicModel {
    async fn chat(
        &self,
        req: &ChatRequest,
        on_delta: Option<OnDelta<'_>>,
    ) -> Result<ChatResponse, LlmError> {
        let on_delta = on_delta.filter(|_| req.stream);
        // Serialized at once: the `Value` tree (a copy of every message) is not kept while the
        // call waits on the network.
        let body = exact_body(self.body(req, on_delta.is_some())?.to_string().into_bytes());
        let key = self
            .endpoint
            .api_key(req.api_key.as_ref().map(|k| k.expose_secret()));
        let schema_tool = req.response_schema.as_ref().map(|s| identifier(&s.name));
        let call = self.call(body, key, on_delta, schema_tool.as_deref(), req.max_tokens);
        self.endpoint.attempt(req.timeout, call).await
    }
}

impl AnthropicModel {
    pub fn new(endpoint: Arc<Endpoint>, model: &str) -> Self {
        Self {
            endpoint,
            model: model.to_owned(),
        }
    }

    async fn call(
        &self,
        body: Bytes,
        key: Option<&str>,
        on_delta: Option<OnDelta<'_>>,
        schema_tool: Option<&str>,
        max_tokens: u32,
    ) -> Result<ChatResponse, LlmError> {
        // Accept base URLs given with or without the version segment.
        let base = self.endpoint.base_url().trim_end_matches("/v1");
        let mut request = self
            .endpoint
            .post(&format!("{base}/v1/messages"))
            .header("anthropic-version", API_VERSION)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(key) = key {
            request = request.header("x-api-key", key);
        }
        let cx = ErrorContext {
            provider: &self.endpoint.name,
            model: &self.model,
            secret: key,
        };
        let response = self.endpoint.send(request, &cx).await?;
        let mut answer = Answer::new(&self.model, schema_tool);
        match on_delta {
            Some(on_delta) => {
                let limit = runaway_limit(max_tokens);
                self.read_stream(response, &mut answer, on_delta, limit, &cx)
                    .await?;
            }
            None => {
                answer.absorb_message(&self.endpoint.read_json(response).await?, &self.endpoint)?
            }
        }
        Ok(answer.finish())
    }

    fn body(&self, req: &ChatRequest, stream: bool) -> Result<Value, LlmError> {
        let (system, messages) = convert_messages(&req.messages);
        let mut body =
            json!({"model": self.model, "max_tokens": req.max_tokens, "messages": messages});
        if !system.is_empty() {
            body["system"] = json!(system);
        }
        let (tools, choice) = tools_and_choice(req);
        if !tools.is_empty() {
            body["tools"] = json!(tools);
        }
        if let Some(choice) = choice {
            body["tool_choice"] = choice;
        }
        if stream {
            body["stream"] = json!(true);
        }
        Ok(body)
    }

    async fn read_stream(
        &self,
        response: reqwest::Response,
        answer: &mut Answer,
        on_delta: OnDelta<'_>,
        limit: usize,
        cx: &ErrorContext<'_>,
    ) -> Result<(), LlmError> {
        let mut events = SseStream::new(response.bytes_stream());
        let mut batch = Coalescer::new(on_delta);
        while let Some(event) = batch.next(&mut events).await {
            let event = event.map_err(|e| self.endpoint.sse_error(e))?;
            if event.data.trim().is_empty() {
                continue;
            }
            let data: Value = serde_json::from_str(&event.data).map_err(|e| {
                self.endpoint
                    .invalid(format!("stream event is not JSON: {e}"))
            })?;
            if data["type"] == "error" {
                return Err(stream_error(&data, cx));
            }
            if let Some(delta) = answer.apply_event(&data) {
                batch.push(delta);
            }
            if answer.stopped {
                batch.flush();
                return Ok(());
            }
            if answer.received > limit {
                answer.ran_away = true;
                batch.flush();
                return Ok(());
            }
        }
        Err(LlmError::Transient {
            provider: self.endpoint.name.clone(),
            message: "the stream ended before message_stop".into(),
        })
    }
}

/// Function tools, native tools and the structured-output tool, with the matching `tool_choice`.
fn tools_and_choice(req: &ChatRequest) -> (Vec<Value>, Option<Value>) {
    let mut tools: Vec<Value> = req
        .tools
        .iter()
        .map(
            |t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}),
        )
        .collect();
    tools.extend(req.native_tools.iter().map(|tool| match tool {
        NativeTool::WebSearch { max_uses } => {
            json!({"type": "web_search_20250305", "name": "web_search", "max_uses": max_uses})
        }
    }));
    let mut choice = (!req.tools.is_empty()).then(|| tool_choice(&req.tool_choice));
    // Structured output: a tool whose input schema is the answer schema, forced, so the tool
    // input is the answer.
    if let Some(schema) = &req.response_schema {
        let name = identifier(&schema.name);
        tools.push(
            json!({"name": name, "description": schema.description, "input_schema": schema.schema}),
        );
        choice = Some(json!({"type": "tool", "name": name}));
    }
    if !req.parallel_tool_calls
        && let Some(choice) = choice.as_mut().filter(|c| c["type"] != "none")
    {
        choice["disable_parallel_tool_use"] = json!(true);
    }
    (tools, choice)
}

fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!({"type": "auto"}),
        ToolChoice::None => json!({"type": "none"}),
        ToolChoice::Required => json!({"type": "any"}),
        ToolChoice::Named(name) => json!({"type": "tool", "name": name}),
    }
}

/// One turn of a Messages request.
#[derive(Serialize)]
struct Turn<'a> {
    role: &'static str,
    content: Vec<InBlock<'a>>,
}

/// A content block of a turn sent.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum InBlock<'a> {
    Text {
        text: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Value,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: &'a str,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
}

/// The conversation as Anthropic's system text and turns; consecutive messages of one role
/// share a turn (parallel tool results go together).
fn convert_messages(messages: &[ChatMessage]) -> (String, Vec<Turn<'_>>) {
    let mut system: Vec<&str> = Vec::new();
    let mut turns: Vec<Turn<'_>> = Vec::new();
    for message in messages {
        let (role, blocks) = match message {
            ChatMessage::System(text) => {
                system.push(text);
                continue;
            }
            ChatMessage::Human(text) => ("user", text_blocks(text)),
            ChatMessage::Ai(turn) => ("assistant", assistant_blocks(turn)),
            ChatMessage::Tool(result) => (
                "user",
                vec![InBlock::ToolResult {
                    tool_use_id: &result.call_id,
                    content: &result.text,
                    is_error: result.failed,
                }],
            ),
        };
        match turns.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => turns.push(Turn {
                role,
                content: blocks,
            }),
        }
    }
    // Anthropic rejects empty turns (e.g. an AI message with neither text nor calls).
    turns.retain(|turn| !turn.content.is_empty());
    (system.join("\n\n"), turns)
}

/// Anthropic rejects empty text blocks, so empty text gives no block.
fn text_blocks(text: &str) -> Vec<InBlock<'_>> {
    if text.is_empty() {
        Vec::new()
    } else {
        vec![InBlock::Text { text }]
    }
}

/// What the model said and the calls it made; invalid calls keep their ids (with no input) so
/// a tool result answering them still matches a call.
fn assistant_blocks(turn: &ModelTurn) -> Vec<InBlock<'_>> {
    let mut blocks = text_blocks(&turn.text);
    blocks.extend(turn.calls.iter().map(|call| InBlock::ToolUse {
        id: &call.id,
        name: &call.name,
        input: call.args.as_object(),
    }));
    blocks
}

/// A mid-stream `error` event, classified like the HTTP status it stands for.
fn stream_error(data: &Value, cx: &ErrorContext<'_>) -> LlmError {
    let status = match data["error"]["type"].as_str() {
        Some("invalid_request_error") => 400,
        Some("authentication_error") => 401,
        Some("permission_error") => 403,
        Some("not_found_error") => 404,
        Some("request_too_large") => 413,
        Some("rate_limit_error") => 429,
        Some("overloaded_error") => 529,
        _ => 500,
    };
    classify(
        cx,
        status,
        &reqwest::header::HeaderMap::new(),
        &data.to_string(),
    )
}

/// A content block being received.
enum Block {
    Text(String),
    Tool {
        id: String,
        name: String,
        json: String,
    },
    /// Pages a server-side web search returned.
    SearchResults(Vec<Value>),
    /// Server tool use: run by the provider, not reported as a call.
    Other,
}

/// An answer assembled from a whole message or from stream events.
struct Answer {
    id: Option<String>,
    model: String,
    schema_tool: Option<String>,
    blocks: BTreeMap<u64, Block>,
    stop_reason: Option<String>,
    usage: Map<String, Value>,
    stopped: bool,
    ran_away: bool,
    /// Characters received (text and tool input), for the runaway guard.
    received: usize,
}

impl Answer {
    fn new(model: &str, schema_tool: Option<&str>) -> Self {
        Self {
            id: None,
            model: model.to_owned(),
            schema_tool: schema_tool.map(str::to_owned),
            blocks: BTreeMap::new(),
            stop_reason: None,
            usage: Map::new(),
            stopped: false,
            ran_away: false,
            received: 0,
        }
    }

    /// Takes a whole (non-streamed) message.
    fn absorb_message(&mut self, message: &Value, endpoint: &Endpoint) -> Result<(), LlmError> {
        let blocks = message["content"]
            .as_array()
            .ok_or_else(|| endpoint.invalid("answer has no content list".into()))?;
        self.absorb_meta(message);
        for (index, raw) in (0u64..).zip(blocks) {
            let mut block = start_block(raw);
            if let Block::Tool { json, .. } = &mut block {
                // Whole messages carry the input as an object; streams as text. Keep text.
                *json = raw["input"].to_string();
            }
            self.blocks.insert(index, block);
        }
        self.stop_reason = message["stop_reason"].as_str().map(str::to_owned);
        Ok(())
    }

    fn absorb_meta(&mut self, message: &Value) {
        self.id = message["id"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        if let Some(model) = message["model"].as_str() {
            model.clone_into(&mut self.model);
        }
        self.merge_usage(&message["usage"]);
    }

    /// Later usage reports (message_delta) update earlier ones (message_start) key by key.
    fn merge_usage(&mut self, usage: &Value) {
        if let Some(fields) = usage.as_object() {
            for (key, value) in fields.iter().filter(|(_, v)| !v.is_null()) {
                self.usage.insert(key.clone(), value.clone());
            }
        }
    }

    /// Folds one stream event in; returns the delta to report, if any.
    fn apply_event(&mut self, event: &Value) -> Option<Delta> {
        match event["type"].as_str()? {
            "message_start" => {
                self.absorb_meta(&event["message"]);
                if self.id.is_none() {
                    self.id = Some(format!("run-{}", uuid::Uuid::new_v4()));
                }
                None
            }
            "content_block_start" => self.start(event),
            "content_block_delta" => self.grow(event),
            "message_delta" => {
                if let Some(reason) = event["delta"]["stop_reason"].as_str() {
                    self.stop_reason = Some(reason.to_owned());
                }
                self.merge_usage(&event["usage"]);
                None
            }
            "message_stop" => {
                self.stopped = true;
                None
            }
            // ping, content_block_stop, and event types added later.
            _ => None,
        }
    }

    fn start(&mut self, event: &Value) -> Option<Delta> {
        let index = event["index"].as_u64()?;
        let block = start_block(&event["content_block"]);
        let delta = match &block {
            Block::Tool { id, name, .. } if !self.is_schema_tool(name) => Some(self.delta(
                String::new(),
                vec![tool_chunk(Some(name), Some(id), "", index)],
            )),
            _ => None,
        };
        self.blocks.insert(index, block);
        delta
    }

    fn grow(&mut self, event: &Value) -> Option<Delta> {
        let index = event["index"].as_u64()?;
        let delta = &event["delta"];
        let schema_tool = self.schema_tool.clone();
        let piece = match (self.blocks.get_mut(&index)?, delta["type"].as_str()?) {
            (Block::Text(text), "text_delta") => {
                let piece = delta["text"].as_str().unwrap_or_default();
                text.push_str(piece);
                Piece::Text(piece.to_owned())
            }
            (Block::Tool { json, name, .. }, "input_json_delta") => {
                let piece = delta["partial_json"].as_str().unwrap_or_default();
                json.push_str(piece);
                // The structured answer is the schema tool's input: stream it as content.
                if schema_tool.as_deref() == Some(name.as_str()) {
                    Piece::Text(piece.to_owned())
                } else {
                    Piece::Args(piece.to_owned())
                }
            }
            _ => return None,
        };
        match piece {
            Piece::Text(text) if !text.is_empty() => {
                self.received += text.chars().count();
                Some(self.delta(text, Vec::new()))
            }
            Piece::Args(args) if !args.is_empty() => {
                self.received += args.chars().count();
                Some(self.delta(String::new(), vec![tool_chunk(None, None, &args, index)]))
            }
            _ => None,
        }
    }

    fn is_schema_tool(&self, name: &str) -> bool {
        self.schema_tool.as_deref() == Some(name)
    }

    fn delta(&self, content: String, tool_call_chunks: Vec<Value>) -> Delta {
        Delta {
            id: self.id.clone().unwrap_or_default(),
            content,
            tool_call_chunks,
        }
    }

    fn finish(self) -> ChatResponse {
        let mut text = String::new();
        let mut calls = Vec::new();
        let mut structured = None;
        let mut searched = Vec::new();
        for block in self.blocks.into_values() {
            match block {
                Block::Text(piece) => text.push_str(&piece),
                Block::Tool { name, json, .. }
                    if structured.is_none() && self.schema_tool.as_deref() == Some(&name) =>
                {
                    structured = Some(json);
                }
                Block::Tool { id, name, json } => calls.push(RawToolCall {
                    id: Some(id),
                    name,
                    args: json,
                }),
                Block::SearchResults(found) => searched.extend(found),
                Block::Other => {}
            }
        }
        let is_structured = structured.is_some();
        if is_structured {
            // The forced tool is how we asked for JSON, not a call for the caller to run.
            calls.clear();
        }
        let finish = if self.ran_away {
            FinishReason::Length
        } else {
            finish_reason(self.stop_reason.as_deref(), !calls.is_empty())
        };
        let mut metadata = server_tool_use(&self.usage);
        if !searched.is_empty() {
            metadata.insert("web_search_results".into(), Value::Array(searched));
        }
        AiTurn {
            id: self.id,
            model: self.model,
            content: structured.unwrap_or(text),
            calls,
            finish,
            usage: usage(&self.usage),
            metadata,
        }
        .into_response()
    }
}

enum Piece {
    Text(String),
    Args(String),
}

fn start_block(block: &Value) -> Block {
    match block["type"].as_str() {
        Some("text") => Block::Text(block["text"].as_str().unwrap_or_default().to_owned()),
        Some("tool_use") => Block::Tool {
            id: block["id"].as_str().unwrap_or_default().to_owned(),
            name: block["name"].as_str().unwrap_or_default().to_owned(),
            // Streams start with `input: {}` and send the real input as text fragments.
            json: String::new(),
        },
        Some("web_search_tool_result") => Block::SearchResults(search_results(block)),
        _ => Block::Other,
    }
}

/// The pages a server-side web search returned (`{url, title}` each), so callers can check
/// citations against them.
fn search_results(block: &Value) -> Vec<Value> {
    block["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["type"] == "web_search_result")
        .filter_map(|r| Some(json!({"url": r["url"].as_str()?, "title": r["title"].as_str().unwrap_or_default()})))
        .collect()
}

fn tool_chunk(name: Option<&str>, id: Option<&str>, args: &str, index: u64) -> Value {
    json!({"name": name, "args": args, "id": id, "index": index, "type": "tool_call_chunk"})
}

fn finish_reason(raw: Option<&str>, has_calls: bool) -> FinishReason {
    match raw {
        Some("end_turn" | "stop_sequence") => FinishReason::Stop,
        Some("tool_use") if has_calls => FinishReason::ToolCalls,
        // The structured-output tool was the answer, so the turn is complete.
        Some("tool_use") => FinishReason::Stop,
        Some("max_tokens" | "model_context_window_exceeded") => FinishReason::Length,
        Some("refusal") => FinishReason::ContentFilter,
        Some(_) => FinishReason::Other,
        None if has_calls => FinishReason::ToolCalls,
        None => FinishReason::Stop,
    }
}

/// Input tokens include cache reads and writes: they all count against the context window.
fn usage(usage: &Map<String, Value>) -> Option<Usage> {
    if usage.is_empty() {
        return None;
    }
    let field = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
    Some(Usage {
        input_tokens: field("input_tokens")
            + field("cache_creation_input_tokens")
            + field("cache_read_input_tokens"),
        output_tokens: field("output_tokens"),
    })
}

fn server_tool_use(usage: &Map<String, Value>) -> Map<String, Value> {
    let mut metadata = Map::new();
    if let Some(counts) = usage.get("server_tool_use").filter(|v| v.is_object()) {
        metadata.insert("server_tool_use".into(), counts.clone());
    }
    metadata
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_results_merge_into_one_user_turn() {
        let messages = vec![
            json!({"type": "system", "content": "rules"}),
            json!({"type": "human", "content": "go"}),
            json!({"type": "ai", "content": "", "tool_calls": [
                {"name": "a", "args": {"x": 1}, "id": "t1", "type": "tool_call"},
                {"name": "b", "args": {}, "id": "t2", "type": "tool_call"}]}),
            json!({"type": "tool", "content": "A", "tool_call_id": "t1"}),
            json!({"type": "tool", "content": "B", "tool_call_id": "t2", "status": "error"}),
        ];
        let messages: Vec<ChatMessage> = messages
            .into_iter()
            .map(|m| ChatMessage::from_langchain(m).unwrap())
            .collect();
        let (system, turns) = convert_messages(&messages);
        let turns = serde_json::to_value(turns).unwrap();
        assert_eq!(system, "rules");
        assert_eq!(turns.as_array().unwrap().len(), 3);
        assert_eq!(turns[1]["content"][0]["type"], "tool_use");
        assert_eq!(turns[1]["content"].as_array().unwrap().len(), 2);
        assert_eq!(turns[2]["role"], "user");
        assert_eq!(
            turns[2]["content"][1],
            json!({"type": "tool_result", "tool_use_id": "t2", "content": "B", "is_error": true})
        );
    }

    #[test]
    fn stream_events_assemble_an_answer() {
        let mut answer = Answer::new("claude", None);
        let events = [
            json!({"type": "message_start", "message": {"id": "msg_1", "model": "claude", "usage": {"input_tokens": 9, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "lo"}}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t1", "name": "f", "input": {}}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"a\""}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": ":2}"}}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 12}}),
            json!({"type": "message_stop"}),
        ];
        let deltas: Vec<Delta> = events
            .iter()
            .filter_map(|e| answer.apply_event(e))
            .collect();
        assert_eq!(deltas.len(), 5);
        assert!(deltas.iter().all(|d| d.id == "msg_1"));
        assert!(answer.stopped);
        let done = answer.finish();
        assert_eq!(done.message["content"], "Hello");
        assert_eq!(done.message["tool_calls"][0]["args"], json!({"a": 2}));
        assert_eq!(
            done.usage,
            Usage {
                input_tokens: 9,
                output_tokens: 12
            }
        );
        assert_eq!(done.finish_reason, FinishReason::ToolCalls);
    }
}
