//! Google's Gemini API (`models/{model}:generateContent`, and `:streamGenerateContent?alt=sse`
//! when streaming): system instruction, contents of parts, function declarations and calls,
//! JSON-schema output, and Google Search grounding as the model's own web search (its grounding
//! chunks become the message's `web_search_results`, like Anthropic's and OpenAI's).

use super::coalesce::Coalescer;
use super::endpoint::{Endpoint, ErrorContext, exact_body};
use super::history::{AiTurn, RawToolCall, search_metadata};
use super::{
    ChatMessage, ChatModel, ChatRequest, ChatResponse, Delta, FinishReason, LlmError, ModelTurn,
    NativeTool, OnDelta, ToolChoice, Usage,
};
use crate::sse_decoder::SseStream;
use async_trait::async_trait;
use reqwest::header::CONTENT_TYPE;
use secrecy::ExposeSecret;
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;

pub(super) struct GeminiModel {
    endpoint: Arc<Endpoint>,
    model: String,
}

#[async_trait]
impl ChatModel for GeminiModel {
    async fn chat(
        &self,
        req: &ChatRequest,
        on_delta: Option<OnDelta<'_>>,
    ) -> Result<ChatResponse, LlmError> {
        let on_delta = on_delta.filter(|_| req.stream);
        let key = self
            .endpoint
            .api_key(req.api_key.as_ref().map(|k| k.expose_secret()));
        let call = self.call(req, key, on_delta);
        self.endpoint.attempt(req.timeout, call).await
    }
}

impl GeminiModel {
    pub fn new(endpoint: Arc<Endpoint>, model: &str) -> Self {
        Self {
            endpoint,
            model: model.to_owned(),
        }
    }

    async fn call(
        &self,
        req: &ChatRequest,
        key: Option<&str>,
        on_delta: Option<OnDelta<'_>>,
    ) -> Result<ChatResponse, LlmError> {
        let body = body(req);
        let bytes = serde_json::to_vec(&body).map_err(|e| LlmError::BadRequest {
            provider: self.endpoint.name.clone(),
            message: format!("cannot encode the request: {e}"),
        })?;
        let base = format!("{}/v1beta/models/{}", self.endpoint.base_url(), self.model);
        let url = if on_delta.is_some() {
            format!("{base}:streamGenerateContent")
        } else {
            format!("{base}:generateContent")
        };
        let mut request = self
            .endpoint
            .post(&url)
            .header(CONTENT_TYPE, "application/json")
            .body(exact_body(bytes));
        if on_delta.is_some() {
            request = request.query(&[("alt", "sse")]);
        }
        if let Some(key) = key {
            request = request.header("x-goog-api-key", key);
        }
        let cx = ErrorContext {
            provider: &self.endpoint.name,
            model: &self.model,
            secret: key,
        };
        let response = self.endpoint.send(request, &cx).await?;
        match on_delta {
            Some(on_delta) => self.read_stream(response, on_delta).await,
            None => {
                let body = self.endpoint.read_json(response).await?;
                let mut turn = Turn::default();
                turn.absorb(&body);
                self.finish(turn)
            }
        }
    }

    /// Each event is a partial `GenerateContentResponse`: its parts add to the answer, the last
    /// one carries the finish reason and the usage.
    async fn read_stream(
        &self,
        response: reqwest::Response,
        on_delta: OnDelta<'_>,
    ) -> Result<ChatResponse, LlmError> {
        let mut events = SseStream::new(response.bytes_stream());
        let mut batch = Coalescer::new(on_delta);
        let mut turn = Turn::default();
        while let Some(event) = batch.next(&mut events).await {
            let event = event.map_err(|e| self.endpoint.sse_error(e))?;
            if event.data.trim().is_empty() {
                continue;
            }
            let chunk: Value = serde_json::from_str(&event.data).map_err(|e| {
                self.endpoint
                    .invalid(format!("stream chunk is not JSON: {e}"))
            })?;
            if let Some(error) = chunk.get("error") {
                batch.flush();
                return Err(LlmError::Transient {
                    provider: self.endpoint.name.clone(),
                    message: error["message"]
                        .as_str()
                        .unwrap_or("stream error")
                        .to_owned(),
                });
            }
            let (text, calls) = turn.absorb(&chunk);
            if !text.is_empty() || !calls.is_empty() {
                batch.push(Delta {
                    id: turn.id.clone().unwrap_or_default(),
                    content: text,
                    tool_call_chunks: calls,
                });
            }
        }
        batch.flush();
        if turn.finish.is_none() {
            return Err(LlmError::Transient {
                provider: self.endpoint.name.clone(),
                message: "the stream ended before the answer was complete".into(),
            });
        }
        self.finish(turn)
    }

    fn finish(&self, turn: Turn) -> Result<ChatResponse, LlmError> {
        if turn.blocked.is_some() && turn.text.is_empty() && turn.calls.is_empty() {
            return Err(LlmError::BadRequest {
                provider: self.endpoint.name.clone(),
                message: format!(
                    "the prompt was blocked ({})",
                    turn.blocked.unwrap_or_default()
                ),
            });
        }
        let finish = match turn.finish.as_deref() {
            Some("MAX_TOKENS") => FinishReason::Length,
            Some("SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII") => {
                FinishReason::ContentFilter
            }
            _ if !turn.calls.is_empty() => FinishReason::ToolCalls,
            Some("STOP") | None => FinishReason::Stop,
            Some(_) => FinishReason::Other,
        };
        let metadata = search_metadata(turn.searches, turn.pages);
        Ok(AiTurn {
            id: turn.id,
            model: turn.model.unwrap_or_else(|| self.model.clone()),
            content: turn.text,
            calls: turn.calls,
            finish,
            usage: turn.usage,
            metadata,
        }
        .into_response())
    }
}

/// An answer being read, from one body or from stream chunks.
#[derive(Default)]
struct Turn {
    id: Option<String>,
    model: Option<String>,
    text: String,
    calls: Vec<RawToolCall>,
    finish: Option<String>,
    blocked: Option<String>,
    usage: Option<Usage>,
    searches: u64,
    pages: Vec<Value>,
}

impl Turn {
    /// Adds a (partial) response; returns the text and tool-call chunks it added.
    fn absorb(&mut self, body: &Value) -> (String, Vec<Value>) {
        if let Some(id) = body["responseId"].as_str() {
            self.id.get_or_insert_with(|| id.to_owned());
        }
        if let Some(model) = body["modelVersion"].as_str() {
            self.model.get_or_insert_with(|| model.to_owned());
        }
        if let Some(reason) = body["promptFeedback"]["blockReason"].as_str() {
            self.blocked = Some(reason.to_owned());
            self.finish.get_or_insert_with(|| "SAFETY".into());
        }
        let usage = &body["usageMetadata"];
        if usage.is_object() {
            self.usage = Some(Usage {
                input_tokens: usage["promptTokenCount"].as_u64().unwrap_or(0),
                output_tokens: usage["candidatesTokenCount"].as_u64().unwrap_or(0)
                    + usage["thoughtsTokenCount"].as_u64().unwrap_or(0),
            });
        }
        let candidate = &body["candidates"][0];
        if let Some(reason) = candidate["finishReason"].as_str() {
            self.finish = Some(reason.to_owned());
        }
        self.ground(&candidate["groundingMetadata"]);
        let mut text = String::new();
        let mut chunks = Vec::new();
        for part in candidate["content"]["parts"]
            .as_array()
            .into_iter()
            .flatten()
        {
            // Thought summaries are the model's, not the answer.
            if part["thought"] == true {
                continue;
            }
            if let Some(t) = part["text"].as_str() {
                text.push_str(t);
            }
            if let Some(call) = part.get("functionCall") {
                let index = self.calls.len();
                let id = call["id"]
                    .as_str()
                    .map_or_else(|| format!("call_{index}"), str::to_owned);
                let args = call.get("args").cloned().unwrap_or(json!({})).to_string();
                chunks.push(json!({"name": call["name"], "args": args, "id": id,
                                   "index": index, "type": "tool_call_chunk"}));
                self.calls.push(RawToolCall {
                    id: Some(id),
                    name: call["name"].as_str().unwrap_or_default().to_owned(),
                    args,
                });
            }
        }
        self.text.push_str(&text);
        (text, chunks)
    }

    /// Google Search grounding: the queries it ran and the pages it used.
    fn ground(&mut self, grounding: &Value) {
        if !grounding.is_object() {
            return;
        }
        let queries = grounding["webSearchQueries"].as_array().map_or(0, Vec::len);
        self.searches = self.searches.max(queries.max(1) as u64);
        for chunk in grounding["groundingChunks"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let web = &chunk["web"];
            let Some(uri) = web["uri"].as_str() else {
                continue;
            };
            if !self.pages.iter().any(|p| p["url"] == uri) {
                self.pages
                    .push(json!({"url": uri, "title": web["title"].as_str().unwrap_or_default()}));
            }
        }
    }
}

/// One content of a request: a role and its parts.
#[derive(Serialize)]
struct Content<'a> {
    role: &'static str,
    parts: Vec<Part<'a>>,
}

/// A part of a content sent (`{"text": …}`, `{"functionCall": …}`, `{"functionResponse": …}`).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum Part<'a> {
    Text(&'a str),
    FunctionCall {
        name: &'a str,
        args: Value,
    },
    FunctionResponse {
        name: &'a str,
        response: FunctionOutput<'a>,
    },
}

#[derive(Serialize)]
struct FunctionOutput<'a> {
    content: &'a str,
}

/// A model turn's parts: its text, then its calls (each call's name kept by id, for the
/// results that name only the id); at least one part, if only an empty text.
fn model_parts<'a>(
    turn: &'a ModelTurn,
    call_names: &mut HashMap<&'a str, &'a str>,
) -> Vec<Part<'a>> {
    let mut parts = Vec::new();
    if !turn.text.is_empty() {
        parts.push(Part::Text(&turn.text));
    }
    for call in &turn.calls {
        call_names.insert(&call.id, &call.name);
        parts.push(Part::FunctionCall {
            name: &call.name,
            args: call.args.as_object(),
        });
    }
    if parts.is_empty() {
        parts.push(Part::Text(""));
    }
    parts
}

/// The conversation as Gemini's system parts and contents; consecutive turns of one role are
/// one content (parallel results go together).
fn contents(messages: &[ChatMessage]) -> (Vec<Part<'_>>, Vec<Content<'_>>) {
    let mut system = Vec::new();
    let mut contents: Vec<Content<'_>> = Vec::new();
    // Tool results name their function; a call's id finds it when the message does not.
    let mut call_names: HashMap<&str, &str> = HashMap::new();
    for message in messages {
        let (role, parts) = match message {
            ChatMessage::System(text) => {
                system.push(Part::Text(text));
                continue;
            }
            ChatMessage::Human(text) => ("user", vec![Part::Text(text)]),
            ChatMessage::Ai(turn) => ("model", model_parts(turn, &mut call_names)),
            ChatMessage::Tool(result) => {
                let name = result
                    .name
                    .as_deref()
                    .or_else(|| call_names.get(result.call_id.as_str()).copied())
                    .unwrap_or("tool");
                let response = FunctionOutput {
                    content: &result.text,
                };
                ("user", vec![Part::FunctionResponse { name, response }])
            }
        };
        match contents.last_mut() {
            Some(last) if last.role == role => last.parts.extend(parts),
            _ => contents.push(Content { role, parts }),
        }
    }
    (system, contents)
}

/// The request's functions with the choice among them, and its native tools (Google Search).
fn add_tools(req: &ChatRequest, body: &mut Value) {
    let mut tools = Vec::new();
    if !req.tools.is_empty() {
        let declarations: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                json!({"name": t.name, "description": t.description,
                       "parametersJsonSchema": t.parameters})
            })
            .collect();
        tools.push(json!({"functionDeclarations": declarations}));
        body["toolConfig"] = json!({"functionCallingConfig": match &req.tool_choice {
            ToolChoice::Auto => json!({"mode": "AUTO"}),
            ToolChoice::None => json!({"mode": "NONE"}),
            ToolChoice::Required => json!({"mode": "ANY"}),
            ToolChoice::Named(name) => json!({"mode": "ANY", "allowedFunctionNames": [name]}),
        }});
    }
    for native in &req.native_tools {
        match native {
            NativeTool::WebSearch { .. } => tools.push(json!({"googleSearch": {}})),
        }
    }
    if !tools.is_empty() {
        body["tools"] = Value::Array(tools);
    }
}

/// The request body.
fn body(req: &ChatRequest) -> Value {
    let (system, contents) = contents(&req.messages);
    let mut body = json!({"contents": contents,
                          "generationConfig": {"maxOutputTokens": req.max_tokens}});
    if !system.is_empty() {
        body["systemInstruction"] = json!({"parts": system});
    }
    add_tools(req, &mut body);
    if let Some(schema) = &req.response_schema {
        body["generationConfig"]["responseMimeType"] = json!("application/json");
        body["generationConfig"]["responseJsonSchema"] = schema.schema.clone();
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{ModelName, ResponseSchema, ToolSpec};

    #[test]
    fn history_becomes_contents_with_function_parts() {
        let messages = vec![
            json!({"type": "system", "content": "be brief"}),
            json!({"type": "human", "content": "q"}),
            json!({"type": "ai", "content": "", "tool_calls": [
                {"name": "think_tool", "args": {"reflection": "r"}, "id": "c1", "type": "tool_call"},
                {"name": "lookup", "args": {"q": "x"}, "id": "c2", "type": "tool_call"}]}),
            json!({"type": "tool", "content": "noted", "tool_call_id": "c1", "name": "think_tool"}),
            json!({"type": "tool", "content": "found", "tool_call_id": "c2"}),
        ];
        let messages = messages
            .into_iter()
            .map(|m| ChatMessage::from_langchain(m).unwrap())
            .collect();
        let mut req = ChatRequest::new(ModelName::parse("gemini:g").unwrap(), messages, 64);
        req.tools = vec![ToolSpec {
            name: "lookup".into(),
            description: "d".into(),
            parameters: json!({"type": "object"}),
        }];
        req.tool_choice = ToolChoice::Named("lookup".into());
        req.native_tools = vec![NativeTool::WebSearch { max_uses: 5 }];
        req.response_schema = Some(ResponseSchema {
            name: "S".into(),
            description: "s".into(),
            schema: json!({"type": "object"}),
        });
        let b = body(&req);
        assert_eq!(
            b["systemInstruction"],
            json!({"parts": [{"text": "be brief"}]})
        );
        assert_eq!(b["contents"].as_array().unwrap().len(), 3, "{b}");
        assert_eq!(b["contents"][1]["role"], "model");
        assert_eq!(
            b["contents"][1]["parts"][1]["functionCall"]["args"],
            json!({"q": "x"})
        );
        // Both results in one user content; the second found its name by the call's id.
        assert_eq!(
            b["contents"][2]["parts"][1]["functionResponse"]["name"],
            "lookup"
        );
        assert_eq!(
            b["toolConfig"]["functionCallingConfig"],
            json!({"mode": "ANY", "allowedFunctionNames": ["lookup"]})
        );
        assert_eq!(b["tools"][1], json!({"googleSearch": {}}));
        assert_eq!(
            b["generationConfig"]["responseMimeType"],
            "application/json"
        );
        assert_eq!(b["generationConfig"]["maxOutputTokens"], 64);
    }
}
