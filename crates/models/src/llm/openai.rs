//! OpenAI chat completions (and compatible endpoints: Ollama, vLLM, Groq, DeepSeek, …).

use super::coalesce::Coalescer;
use super::endpoint::{Endpoint, ErrorContext, ProviderKind, classify, exact_body};
use super::history::{AiTurn, RawToolCall, content_text, identifier, runaway_limit};
use super::loop_guard;
use super::{
    CallArgs, ChatMessage, ChatModel, ChatRequest, ChatResponse, Delta, Fallback, FinishReason,
    LlmError, ModelTurn, OnDelta, ToolChoice, ToolSpec, Usage,
};
use crate::sse_decoder::SseStream;
use async_trait::async_trait;
use bytes::Bytes;
use reqwest::header::CONTENT_TYPE;
use secrecy::ExposeSecret;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One model on an OpenAI-compatible endpoint.
pub(super) struct OpenAiModel {
    endpoint: Arc<Endpoint>,
    model: String,
}

#[async_trait]
impl ChatModel for OpenAiModel {
    async fn chat(
        &self,
        req: &ChatRequest,
        on_delta: Option<OnDelta<'_>>,
    ) -> Result<ChatResponse, LlmError> {
        let on_delta = on_delta.filter(|_| req.stream);
        let key = self
            .endpoint
            .api_key(req.api_key.as_ref().map(|k| k.expose_secret()));
        if !req.native_tools.is_empty() && self.endpoint.kind == ProviderKind::AzureOpenai {
            return Err(LlmError::Config(format!(
                "provider '{}': OpenAI's web search is not available through Azure here; use \
                 another search_api",
                self.endpoint.name
            )));
        }
        if self.endpoint.kind == ProviderKind::OpenaiResponses || !req.native_tools.is_empty() {
            let call = super::responses::call(&self.endpoint, &self.model, req, key, on_delta);
            return self.endpoint.attempt(req.timeout, call).await;
        }
        let body = self.body(req, on_delta.is_some())?;
        let call = self.call(body, key, on_delta, req.max_tokens);
        self.endpoint.attempt(req.timeout, call).await
    }
}

impl OpenAiModel {
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
        max_tokens: u32,
    ) -> Result<ChatResponse, LlmError> {
        let azure = self.endpoint.kind == ProviderKind::AzureOpenai;
        let url = if azure {
            format!(
                "{}/openai/deployments/{}/chat/completions",
                self.endpoint.base_url(),
                self.model
            )
        } else {
            format!("{}/chat/completions", self.endpoint.base_url())
        };
        let mut request = self
            .endpoint
            .post(&url)
            .header(CONTENT_TYPE, "application/json")
            .body(body);
        if azure && let Some(version) = &self.endpoint.api_version {
            request = request.query(&[("api-version", version)]);
        }
        // Local servers (Ollama, LM Studio) take no key; sending an empty bearer can upset them.
        match key {
            Some(key) if azure => request = request.header("api-key", key),
            Some(key) => request = request.bearer_auth(key),
            None => {}
        }
        let cx = ErrorContext {
            provider: &self.endpoint.name,
            model: &self.model,
            secret: key,
        };
        let response = self.endpoint.send(request, &cx).await?;
        match on_delta {
            Some(on_delta) if is_event_stream(&response) => {
                self.read_stream(response, on_delta, max_tokens, &cx).await
            }
            // A server that ignored `stream: true` answered in one piece: pass it on as one delta.
            Some(on_delta) => {
                let answer = self.parse(&self.endpoint.read_json(response).await?, &cx)?;
                on_delta(whole_delta(&answer));
                Ok(answer)
            }
            None => self.parse(&self.endpoint.read_json(response).await?, &cx),
        }
    }

    /// The request body as JSON bytes, written straight from the request: no `Value` tree, and
    /// message text is borrowed, not copied (a burst of page summaries holds thousands of
    /// these at once).
    fn body(&self, req: &ChatRequest, stream: bool) -> Result<Bytes, LlmError> {
        let messages = convert_messages(&req.messages);
        let completion_field = self.uses_max_completion_tokens();
        let with_tools = !req.tools.is_empty();
        let body = Body {
            model: &self.model,
            messages,
            max_tokens: (!completion_field).then_some(req.max_tokens),
            max_completion_tokens: completion_field.then_some(req.max_tokens),
            tools: req.tools.iter().map(FunctionTool::new).collect(),
            tool_choice: with_tools.then(|| tool_choice(&req.tool_choice)),
            parallel_tool_calls: with_tools.then_some(req.parallel_tool_calls),
            response_format: req.response_schema.as_ref().map(|schema| ResponseFormat {
                kind: "json_schema",
                json_schema: JsonSchemaFormat {
                    name: identifier(&schema.name),
                    description: &schema.description,
                    schema: &schema.schema,
                    strict: false,
                },
            }),
            stream: stream.then_some(true),
            stream_options: stream.then_some(StreamOptions {
                include_usage: true,
            }),
        };
        serde_json::to_vec(&body)
            .map(exact_body)
            .map_err(|e| LlmError::BadRequest {
                provider: self.endpoint.name.clone(),
                message: format!("cannot encode the request: {e}"),
            })
    }

    /// OpenAI itself rejects `max_tokens` for its reasoning models and accepts
    /// `max_completion_tokens` for all; compatible servers mostly know only `max_tokens`.
    fn uses_max_completion_tokens(&self) -> bool {
        self.endpoint.base_url().contains("://api.openai.com")
            || self.endpoint.kind == ProviderKind::AzureOpenai
    }

    fn parse(&self, body: &Value, cx: &ErrorContext<'_>) -> Result<ChatResponse, LlmError> {
        if let Some(error) = in_band_error(body, cx) {
            return Err(error);
        }
        let choice = body["choices"]
            .get(0)
            .ok_or_else(|| self.endpoint.invalid("answer has no choices".into()))?;
        let message = &choice["message"];
        if !message.is_object() {
            return Err(self.endpoint.invalid("answer choice has no message".into()));
        }
        let calls: Vec<RawToolCall> = message["tool_calls"]
            .as_array()
            .map(|calls| calls.iter().map(raw_tool_call).collect())
            .unwrap_or_default();
        let finish = finish_reason(choice["finish_reason"].as_str(), !calls.is_empty());
        Ok(AiTurn {
            id: body["id"]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
            model: body["model"].as_str().unwrap_or(&self.model).to_owned(),
            content: content_text(&message["content"]),
            calls,
            finish,
            usage: usage(&body["usage"]),
            metadata: Map::new(),
        }
        .into_response())
    }

    async fn read_stream(
        &self,
        response: reqwest::Response,
        on_delta: OnDelta<'_>,
        max_tokens: u32,
        cx: &ErrorContext<'_>,
    ) -> Result<ChatResponse, LlmError> {
        let mut events = SseStream::new(response.bytes_stream());
        let mut state = StreamState::new(&self.model, runaway_limit(max_tokens));
        let mut done = false;
        let mut batch = Coalescer::new(on_delta);
        while let Some(event) = batch.next(&mut events).await {
            let event = event.map_err(|e| self.endpoint.sse_error(e))?;
            let data = event.data.trim();
            if data == "[DONE]" {
                done = true;
                break;
            }
            if data.is_empty() {
                continue;
            }
            let chunk: Chunk = serde_json::from_str(data).map_err(|e| {
                self.endpoint
                    .invalid(format!("stream chunk is not JSON: {e}"))
            })?;
            if let Some(error) = chunk.error.as_ref().filter(|e| !e.is_null())
                && chunk.choices.is_none()
            {
                return Err(gateway_error(error, data, cx));
            }
            if let Some(delta) = state.apply(&chunk) {
                batch.push(delta);
            }
            if state.ran_away() {
                break;
            }
        }
        batch.flush();
        if !done && !state.ran_away() && state.finish.is_none() {
            return Err(LlmError::Transient {
                provider: self.endpoint.name.clone(),
                message: "the stream ended before the answer was complete".into(),
            });
        }
        Ok(state.finish())
    }
}

fn is_event_stream(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// Some gateways (OpenRouter) answer 200 with `{"error":{…,"code":<status>}}`, also mid-stream.
fn in_band_error(body: &Value, cx: &ErrorContext<'_>) -> Option<LlmError> {
    let error = body.get("error").filter(|e| !e.is_null())?;
    if body.get("choices").is_some_and(|c| !c.is_null()) {
        return None;
    }
    Some(gateway_error(error, &body.to_string(), cx))
}

/// The error a gateway reported in a 200 body (`raw` is that body, for the message).
fn gateway_error(error: &Value, raw: &str, cx: &ErrorContext<'_>) -> LlmError {
    let status = error["code"]
        .as_u64()
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (400..=599).contains(c))
        .unwrap_or(500);
    classify(cx, status, &reqwest::header::HeaderMap::new(), raw)
}

/// One streamed chunk, read into just the fields used: parsing thousands of chunks per report
/// into `Value` trees was the largest CPU cost of a run. Unknown fields are skipped.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Chunk<'a> {
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow)]
    choices: Option<Vec<ChunkChoice<'a>>>,
    usage: Option<Value>,
    error: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ChunkChoice<'a> {
    #[serde(borrow)]
    delta: Option<ChunkDelta<'a>>,
    #[serde(borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ChunkDelta<'a> {
    #[serde(borrow)]
    content: Option<Cow<'a, str>>,
    tool_calls: Option<Vec<Value>>,
}

/// The whole answer as one delta, for servers that ignore `stream: true`.
fn whole_delta(answer: &ChatResponse) -> Delta {
    let calls = answer.message["tool_calls"]
        .as_array()
        .into_iter()
        .flatten();
    let invalid = answer.message["invalid_tool_calls"]
        .as_array()
        .into_iter()
        .flatten();
    let tool_call_chunks = calls
        .chain(invalid)
        .enumerate()
        .map(|(index, call)| {
            let args = match &call["args"] {
                Value::String(raw) => raw.clone(),
                args => args.to_string(),
            };
            json!({"name": call["name"], "args": args, "id": call["id"], "index": index,
                   "type": "tool_call_chunk"})
        })
        .collect();
    Delta {
        id: answer.message["id"].as_str().unwrap_or_default().to_owned(),
        content: content_text(&answer.message["content"]),
        tool_call_chunks,
    }
}

/// A chat-completions request body; fields in the order OpenAI documents them, absent ones left
/// out.
#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    messages: Vec<OutMessage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<FunctionTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<ResponseFormat<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

#[derive(Serialize)]
struct FunctionTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: FunctionSpec<'a>,
}

#[derive(Serialize)]
struct FunctionSpec<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

impl<'a> FunctionTool<'a> {
    fn new(tool: &'a ToolSpec) -> Self {
        Self {
            kind: "function",
            function: FunctionSpec {
                name: &tool.name,
                description: &tool.description,
                parameters: &tool.parameters,
            },
        }
    }
}

#[derive(Serialize)]
struct ResponseFormat<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    json_schema: JsonSchemaFormat<'a>,
}

#[derive(Serialize)]
struct JsonSchemaFormat<'a> {
    name: String,
    description: &'a str,
    schema: &'a Value,
    strict: bool,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

/// One OpenAI chat message. `content` is `null` only on an assistant turn that calls tools and
/// says nothing.
#[derive(Serialize)]
struct OutMessage<'a> {
    role: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<OutCall<'a>>,
}

#[derive(Serialize)]
struct OutCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: OutFunction<'a>,
}

#[derive(Serialize)]
struct OutFunction<'a> {
    name: &'a str,
    arguments: String,
}

/// The conversation as OpenAI chat messages.
fn convert_messages(messages: &[ChatMessage]) -> Vec<OutMessage<'_>> {
    messages.iter().map(convert_message).collect()
}

fn convert_message(message: &ChatMessage) -> OutMessage<'_> {
    let plain = |role, text| OutMessage {
        role,
        tool_call_id: None,
        content: Some(text),
        tool_calls: Vec::new(),
    };
    match message {
        ChatMessage::System(text) => plain("system", text),
        ChatMessage::Human(text) => plain("user", text),
        ChatMessage::Ai(turn) => assistant_message(turn),
        ChatMessage::Tool(result) => OutMessage {
            tool_call_id: Some(&result.call_id),
            ..plain("tool", &result.text)
        },
    }
}

fn assistant_message(turn: &ModelTurn) -> OutMessage<'_> {
    // Invalid calls go back too: a tool message may answer them, and its id must match a call.
    // Their text is wrapped in valid JSON: llama.cpp parses the arguments of every earlier call
    // to render its template, and answers 500 for the whole request when one is malformed.
    let tool_calls: Vec<OutCall<'_>> = turn
        .calls
        .iter()
        .map(|call| OutCall {
            id: &call.id,
            kind: "function",
            function: OutFunction {
                name: &call.name,
                arguments: match &call.args {
                    CallArgs::Invalid(raw) => json!({ "invalid_arguments": raw }).to_string(),
                    parsed => parsed.as_json_text(),
                },
            },
        })
        .collect();
    let content = if !tool_calls.is_empty() && turn.text.is_empty() {
        None
    } else {
        Some(turn.text.as_str())
    };
    OutMessage {
        role: "assistant",
        tool_call_id: None,
        content,
        tool_calls,
    }
}

fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!("auto"),
        ToolChoice::None => json!("none"),
        ToolChoice::Required => json!("required"),
        ToolChoice::Named(name) => json!({"type": "function", "function": {"name": name}}),
    }
}

fn raw_tool_call(call: &Value) -> RawToolCall {
    let function = &call["function"];
    RawToolCall {
        id: call["id"].as_str().map(str::to_owned),
        name: function["name"].as_str().unwrap_or_default().to_owned(),
        // The spec says a JSON string; a few servers send the object itself.
        args: match &function["arguments"] {
            Value::String(text) => text.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        },
    }
}

fn finish_reason(raw: Option<&str>, has_calls: bool) -> FinishReason {
    match raw {
        Some("stop") => FinishReason::Stop,
        Some("tool_calls" | "function_call") => FinishReason::ToolCalls,
        Some("length") => FinishReason::Length,
        Some("content_filter") => FinishReason::ContentFilter,
        Some(_) => FinishReason::Other,
        None if has_calls => FinishReason::ToolCalls,
        None => FinishReason::Stop,
    }
}

fn usage(value: &Value) -> Option<Usage> {
    let input = value["prompt_tokens"].as_u64();
    let output = value["completion_tokens"].as_u64();
    (input.is_some() || output.is_some()).then(|| Usage {
        input_tokens: input.unwrap_or(0),
        output_tokens: output.unwrap_or(0),
    })
}

/// A tool call being assembled from stream fragments.
#[derive(Default)]
struct PartialCall {
    id: Option<String>,
    name: String,
    args: String,
}

/// Everything a stream has said so far.
struct StreamState {
    id: Option<String>,
    model: String,
    content: String,
    calls: BTreeMap<u64, PartialCall>,
    finish: Option<String>,
    usage: Option<Usage>,
    /// Characters received (content and tool arguments), for the runaway guard.
    received: usize,
    limit: usize,
    /// Content length when the loop guard last looked.
    guarded_at: usize,
    /// The content started repeating itself and was cut.
    looped: bool,
}

impl StreamState {
    fn new(model: &str, limit: usize) -> Self {
        Self {
            id: None,
            model: model.to_owned(),
            content: String::new(),
            calls: BTreeMap::new(),
            finish: None,
            usage: None,
            received: 0,
            limit,
            guarded_at: 0,
            looped: false,
        }
    }

    fn ran_away(&self) -> bool {
        self.received > self.limit || self.looped
    }

    /// Cuts the content after the first copy of a repeated tail (see `loop_guard`).
    fn guard_loops(&mut self) {
        if self.content.len() < self.guarded_at + loop_guard::CHECK_EVERY {
            return;
        }
        self.guarded_at = self.content.len();
        if let Some(cut) = loop_guard::cut_point(&self.content) {
            self.content.truncate(cut);
            self.looped = true;
        }
    }

    /// Folds one chunk in; returns the delta to report, if it carried anything new.
    fn apply(&mut self, chunk: &Chunk) -> Option<Delta> {
        // Every delta of one answer carries the same id, fixed by the first chunk.
        let id = self
            .id
            .get_or_insert_with(|| match chunk.id.as_deref() {
                Some(id) if !id.is_empty() => id.to_owned(),
                _ => format!("run-{}", uuid::Uuid::new_v4()),
            })
            .clone();
        if let Some(model) = chunk.model.as_deref()
            && model != self.model
        {
            model.clone_into(&mut self.model);
        }
        if let Some(usage) = chunk.usage.as_ref().and_then(usage) {
            self.usage = Some(usage);
        }
        let choice = chunk.choices.as_deref().and_then(<[ChunkChoice]>::first)?;
        if let Some(reason) = choice.finish_reason.as_deref() {
            self.finish = Some(reason.to_owned());
        }
        let delta = choice.delta.as_ref()?;
        let content = delta.content.as_deref().unwrap_or_default().to_owned();
        self.received += content.chars().count();
        self.content.push_str(&content);
        self.guard_loops();
        let tool_call_chunks: Vec<Value> = delta
            .tool_calls
            .as_ref()
            .map(|calls| {
                calls
                    .iter()
                    .enumerate()
                    .map(|(i, c)| self.apply_call(i, c))
                    .collect()
            })
            .unwrap_or_default();
        (!content.is_empty() || !tool_call_chunks.is_empty()).then_some(Delta {
            id,
            content,
            tool_call_chunks,
        })
    }

    fn apply_call(&mut self, position: usize, fragment: &Value) -> Value {
        let index = fragment["index"].as_u64().unwrap_or(position as u64);
        let entry = self.calls.entry(index).or_default();
        let id = fragment["id"].as_str().filter(|s| !s.is_empty());
        let name = fragment["function"]["name"]
            .as_str()
            .filter(|s| !s.is_empty());
        let args = fragment["function"]["arguments"]
            .as_str()
            .unwrap_or_default();
        if let (Some(id), None) = (id, &entry.id) {
            entry.id = Some(id.to_owned());
        }
        // Some servers repeat the name on every fragment: keep the first.
        if let (Some(name), true) = (name, entry.name.is_empty()) {
            name.clone_into(&mut entry.name);
        }
        entry.args.push_str(args);
        self.received += args.chars().count();
        json!({"name": name, "args": args, "id": id, "index": index, "type": "tool_call_chunk"})
    }

    fn finish(self) -> ChatResponse {
        let calls: Vec<RawToolCall> = self
            .calls
            .into_values()
            .map(|c| RawToolCall {
                id: c.id,
                name: c.name,
                args: c.args,
            })
            .collect();
        let finish = if self.received > self.limit || self.looped {
            FinishReason::Length
        } else {
            finish_reason(self.finish.as_deref(), !calls.is_empty())
        };
        let looped = self.looped;
        let mut answer = AiTurn {
            id: self.id,
            model: self.model,
            content: self.content,
            calls,
            finish,
            usage: self.usage,
            metadata: Map::new(),
        }
        .into_response();
        if looped {
            answer.fallbacks.push(Fallback::RunawayStopped);
        }
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn langchain_messages_become_openai_messages() {
        let messages = vec![
            json!({"type": "system", "content": "be brief"}),
            json!({"type": "human", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]}),
            json!({"type": "ai", "content": "", "tool_calls": [{"name": "search", "args": {"q": "x"}, "id": "c1", "type": "tool_call"}]}),
            json!({"type": "tool", "content": "found", "tool_call_id": "c1"}),
            json!({"role": "assistant", "content": "done"}),
            json!({"type": "ai", "content": "", "invalid_tool_calls": [
                {"name": "search", "args": "{\"q\": \"cut", "id": "c2", "type": "invalid_tool_call"}]}),
        ];
        let messages: Vec<ChatMessage> = messages
            .into_iter()
            .map(|m| ChatMessage::from_langchain(m).unwrap())
            .collect();
        let out = serde_json::to_value(convert_messages(&messages)).unwrap();
        assert_eq!(out[0], json!({"role": "system", "content": "be brief"}));
        assert_eq!(out[1], json!({"role": "user", "content": "hi there"}));
        assert_eq!(out[2]["content"], Value::Null);
        assert_eq!(
            out[2]["tool_calls"][0]["function"]["arguments"],
            r#"{"q":"x"}"#
        );
        assert_eq!(
            out[3],
            json!({"role": "tool", "tool_call_id": "c1", "content": "found"})
        );
        assert_eq!(out[4], json!({"role": "assistant", "content": "done"}));
        let malformed = out[5]["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(malformed).unwrap(),
            json!({"invalid_arguments": "{\"q\": \"cut"}),
            "sent as valid JSON"
        );
    }

    #[test]
    fn stream_fragments_reassemble() {
        let mut state = StreamState::new("m", 1000);
        let chunks = [
            json!({"id": "x1", "choices": [{"delta": {"role": "assistant", "content": ""}}]}),
            json!({"id": "x1", "choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": ""}}]}}]}),
            json!({"id": "x1", "choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"a\":"}}]}}]}),
            json!({"id": "x1", "choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}, "finish_reason": "tool_calls"}]}),
            json!({"id": "x1", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}),
        ];
        let texts: Vec<String> = chunks.iter().map(Value::to_string).collect();
        let deltas: Vec<Delta> = texts
            .iter()
            .filter_map(|t| state.apply(&serde_json::from_str(t).unwrap()))
            .collect();
        assert_eq!(deltas.len(), 3);
        let answer = state.finish();
        assert_eq!(answer.message["tool_calls"][0]["args"], json!({"a": 1}));
        assert_eq!(answer.finish_reason, FinishReason::ToolCalls);
        assert_eq!(
            answer.usage,
            Usage {
                input_tokens: 3,
                output_tokens: 4
            }
        );
        assert_eq!(answer.message["id"], "x1");
    }
}
