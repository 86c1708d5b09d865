//! Chat models: one trait over OpenAI (and every OpenAI-compatible endpoint) and Anthropic, with
//! tool calls, structured output, token streaming, usage, classified errors and retries.
//! A request's conversation is typed (`ChatMessage`, read once from the LangChain-style dicts
//! graph state stores); an answer comes back as such a dict (`{"type": "ai", …}`), ready for
//! the state. Knows nothing about graphs or research.

mod adaptive;
mod anthropic;
mod chat;
mod coalesce;
mod context;
mod endpoint;
mod gemini;
mod history;
mod loop_guard;
mod observed;
mod openai;
mod providers;
mod responses;
mod retry;
mod structured;
pub mod text_calls;

pub use chat::{CallArgs, ChatMessage, ModelTurn, SentCall, ToolResult, prompt_chars};
pub use endpoint::http_client;
pub use providers::{ProviderConfig, ProviderKind, Providers, ToolCalling};
pub use retry::{RetryPolicy, chat_with_retry};
pub use structured::structured;

use async_trait::async_trait;
use secrecy::SecretString;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;

/// A `provider:model` string split in two, e.g. `openai:gpt-4.1` or `ollama:llama3.1`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ModelName {
    pub provider: String,
    pub model: String,
}

impl ModelName {
    /// Parses `provider:model`; both parts must be non-empty. The model part may itself contain
    /// colons (`ollama:llama3.1:8b`).
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.split_once(':') {
            Some((provider, model)) if !provider.trim().is_empty() && !model.trim().is_empty() => {
                Ok(Self {
                    provider: provider.trim().to_ascii_lowercase(),
                    model: model.trim().to_owned(),
                })
            }
            _ => Err(format!(
                "invalid model '{text}': expected 'provider:model', e.g. 'openai:gpt-4.1'"
            )),
        }
    }
}

impl std::fmt::Display for ModelName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.provider, self.model)
    }
}

/// A function tool the model may call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
}

impl ToolSpec {
    /// A tool whose arguments are the fields of `T` (their doc comments describe them).
    pub fn of<T: schemars::JsonSchema>(name: &str, description: &str) -> Self {
        let mut parameters = serde_json::to_value(schemars::schema_for!(T)).unwrap_or_default();
        if let Some(map) = parameters.as_object_mut() {
            // Providers want the arguments' schema, not a schema document.
            // (The struct's doc comment is for the reader; the tool has its own description.)
            map.remove("$schema");
            map.remove("title");
            map.remove("description");
            map.entry("properties")
                .or_insert_with(|| serde_json::json!({}));
            map.entry("required")
                .or_insert_with(|| serde_json::json!([]));
        }
        Self {
            name: name.to_owned(),
            description: description.to_owned(),
            parameters,
        }
    }
}

/// Which tools the model must or may call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ToolChoice {
    #[default]
    Auto,
    None,
    /// At least one tool call.
    Required,
    /// Exactly this tool.
    Named(String),
}

/// A provider-side tool (the provider runs it), e.g. Anthropic's web search.
#[derive(Clone, Debug, PartialEq)]
pub enum NativeTool {
    /// Anthropic `web_search_20250305` / OpenAI `web_search` where the endpoint supports it.
    WebSearch { max_uses: u32 },
}

/// Ask for a JSON object matching `schema` (the answer's `content` is that JSON as text).
#[derive(Clone, Debug, PartialEq)]
pub struct ResponseSchema {
    pub name: String,
    pub description: String,
    pub schema: Value,
}

/// One model call.
#[derive(Clone, Debug)]
pub struct ChatRequest {
    pub model: ModelName,
    /// The conversation; `system` messages may appear first.
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<ToolSpec>,
    pub native_tools: Vec<NativeTool>,
    pub tool_choice: ToolChoice,
    /// Let the model call several tools in one turn.
    pub parallel_tool_calls: bool,
    pub response_schema: Option<ResponseSchema>,
    /// Hard cap on output tokens; every call has one.
    pub max_tokens: u32,
    /// Stream tokens to the `on_delta` callback as they arrive.
    pub stream: bool,
    /// Give up on a single attempt after this long.
    pub timeout: Duration,
    /// A per-request key (when the operator allows keys in run config); else the provider's.
    pub api_key: Option<SecretString>,
}

impl ChatRequest {
    /// A plain request with defaults: no tools, no streaming, 120 s timeout.
    pub fn new(model: ModelName, messages: Vec<ChatMessage>, max_tokens: u32) -> Self {
        Self {
            model,
            messages,
            tools: Vec::new(),
            native_tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
            parallel_tool_calls: true,
            response_schema: None,
            max_tokens,
            stream: false,
            timeout: Duration::from_secs(120),
            api_key: None,
        }
    }
}

/// Tokens of one call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// Why the model stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    Stop,
    ToolCalls,
    /// Hit `max_tokens`.
    Length,
    ContentFilter,
    Other,
}

impl FinishReason {
    /// The OpenAI-style name (`stop`, `tool_calls`, `length`, `content_filter`, `other`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::ToolCalls => "tool_calls",
            Self::Length => "length",
            Self::ContentFilter => "content_filter",
            Self::Other => "other",
        }
    }
}

/// A finished call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// A LangChain AI message dict: `type: "ai"`, `id`, `content` (text), `tool_calls`
    /// (`[{"name","args","id","type":"tool_call"}]`), `invalid_tool_calls` (calls whose arguments
    /// were not valid JSON: `{"name","args"(raw text),"id","error","type":"invalid_tool_call"}`),
    /// `usage_metadata` (`{"input_tokens","output_tokens","total_tokens"}`), `response_metadata`
    /// (`model_name`, `finish_reason`, and for native search `server_tool_use` counts).
    pub message: Value,
    pub usage: Usage,
    pub finish_reason: FinishReason,
    /// What the client had to do to get a usable answer from this endpoint (empty for a model
    /// that followed the API): counted per run and shown to its clients.
    pub fallbacks: Vec<Fallback>,
}

/// A way around an endpoint that did not follow the API, used for one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fallback {
    /// Tool calls were read from the answer's text (bare JSON, a fence, `<tool_call>` tags).
    TextToolCalls,
    /// The server's own tool-call parser failed (HTTP 500): the call was asked again another way.
    ToolFormatRetry,
    /// Tools were described in the prompt instead of the `tools` field.
    PromptedTools,
    /// The JSON answer was asked for in the prompt instead of with a `json_schema`.
    JsonInText,
    /// The JSON answer needed repair (a wrapper object, a cut-off end, trailing commas, prose).
    JsonRepaired,
    /// The answer started repeating itself and was stopped early; what came before is kept.
    RunawayStopped,
}

impl Fallback {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TextToolCalls => "text_tool_calls",
            Self::ToolFormatRetry => "tool_format_retry",
            Self::PromptedTools => "prompted_tools",
            Self::JsonInText => "json_in_text",
            Self::JsonRepaired => "json_repaired",
            Self::RunawayStopped => "runaway_stopped",
        }
    }
}

/// One streamed piece of a response.
#[derive(Clone, Debug, PartialEq)]
pub struct Delta {
    /// The message id (the same on every delta of one response).
    pub id: String,
    /// New text only.
    pub content: String,
    /// LangChain `tool_call_chunks`: `[{"name","args"(partial text),"id","index","type":"tool_call_chunk"}]`.
    pub tool_call_chunks: Vec<Value>,
}

/// Receives deltas while a streaming call runs.
pub type OnDelta<'a> = &'a (dyn Fn(Delta) + Send + Sync);

/// Classified model errors: each class has one retry decision.
#[derive(Clone, Debug, thiserror::Error, PartialEq)]
pub enum LlmError {
    /// 429: retry after the given delay (from `Retry-After`) or with backoff.
    #[error("rate limited by {provider}: {message}")]
    RateLimited {
        provider: String,
        retry_after: Option<Duration>,
        message: String,
    },
    /// The prompt does not fit the context window: retrying the same request cannot help.
    #[error("context window exceeded for {model}: {message}")]
    ContextOverflow { model: String, message: String },
    /// 401/403: wrong or missing key.
    #[error("authentication failed for {provider}: {message}")]
    Auth { provider: String, message: String },
    /// Any other 4xx: the request is wrong.
    #[error("{provider} rejected the request: {message}")]
    BadRequest { provider: String, message: String },
    /// The model server's own tool-call (or grammar) parser could not read what the model wrote
    /// (llama.cpp and Ollama answer HTTP 500). Sending the same request again usually fails the
    /// same way, so it is not retried as is: the adaptive client asks again another way.
    #[error("{provider} could not parse the model's tool call: {message}")]
    ToolFormat { provider: String, message: String },
    /// 5xx, timeouts, dropped connections: worth retrying.
    #[error("{provider} failed transiently: {message}")]
    Transient { provider: String, message: String },
    /// The answer could not be read (malformed JSON, schema mismatch after all retries).
    #[error("invalid response from {provider}: {message}")]
    InvalidResponse { provider: String, message: String },
    /// The model string names a provider that is not configured.
    #[error("{0}")]
    Config(String),
    /// The run was cancelled while waiting.
    #[error("cancelled")]
    Cancelled,
}

impl LlmError {
    /// Whether the same request may succeed if sent again.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::RateLimited { .. } | Self::Transient { .. })
    }

    /// The client-facing error type name.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::RateLimited { .. } => "RateLimitError",
            Self::ContextOverflow { .. } => "ContextOverflowError",
            Self::Auth { .. } => "AuthenticationError",
            Self::BadRequest { .. } => "BadRequestError",
            Self::Transient { .. } => "APIError",
            Self::ToolFormat { .. } => "ToolCallFormatError",
            Self::InvalidResponse { .. } => "OutputParserException",
            Self::Config(_) => "ConfigurationError",
            Self::Cancelled => "CancelledError",
        }
    }
}

/// A chat model endpoint.
#[async_trait]
pub trait ChatModel: Send + Sync {
    /// One attempt (no retries here; see `chat_with_retry`). Streams deltas to `on_delta` when
    /// `req.stream` is set and the callback is given.
    async fn chat(
        &self,
        req: &ChatRequest,
        on_delta: Option<OnDelta<'_>>,
    ) -> Result<ChatResponse, LlmError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_names_need_a_provider_and_a_model() {
        let m = ModelName::parse("ollama:llama3.1:8b").unwrap();
        assert_eq!(
            (m.provider.as_str(), m.model.as_str()),
            ("ollama", "llama3.1:8b")
        );
        assert_eq!(m.to_string(), "ollama:llama3.1:8b");
        assert!(ModelName::parse("gpt-4.1").is_err());
        assert!(ModelName::parse(":x").is_err());
        assert!(ModelName::parse("openai:").is_err());
    }
}
