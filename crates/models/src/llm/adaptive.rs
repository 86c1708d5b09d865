//! The tool-calling and structured-output ladder every provider's model is wrapped in, so that
//! endpoints with brittle tool calling (small local models behind llama.cpp, Ollama, vLLM, LM
//! Studio) still work:
//!
//! - tools: native `tools` first; calls the model wrote into its text are recovered; when the
//!   server's own parser fails on what the model wrote (HTTP 500) or refuses tools, the call is
//!   asked again with the tools described in the prompt ("prompted tools"), and that is
//!   remembered for the model, so later calls go straight to what works;
//! - structured output: `json_schema` first; when the server refuses it, the schema goes into
//!   the prompt (repair of what comes back is `structured`'s part);
//! - output bounds: a provider's `max_output_tokens` caps every call, and calls to a local
//!   server always stream so that a runaway answer can be stopped early (see `loop_guard`).
//!
//! The provider setting `tool_calling = "auto" | "native" | "prompted"` overrides what is
//! learned. Each answer lists the fallbacks it needed, for the run's counts.

use super::endpoint::EndpointSettings;
use super::endpoint::ToolCalling;
use super::text_calls;
use super::{
    ChatMessage, ChatModel, ChatRequest, ChatResponse, Delta, Fallback, FinishReason, LlmError,
    ModelName, ModelTurn, OnDelta, ToolChoice, ToolSpec,
};
use async_trait::async_trait;
use serde_json::{Value, json};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

const TOOLS_PROMPT: &str = include_str!("../../../../prompts/tools_in_prompt.txt");
const JSON_PROMPT: &str = include_str!("../../../../prompts/json_in_prompt.txt");

/// What a model was found to need, shared by every run of the process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Learned {
    /// Its server could not parse its native tool calls: describe tools in the prompt.
    prompted_tools: bool,
    /// It failed when it made several calls in one turn: ask for one call per turn.
    single_call: bool,
    /// Its server refused `json_schema`: ask for the JSON in the prompt.
    json_in_text: bool,
}

/// Per-model memory of what works, keyed by `provider:model`.
#[derive(Default)]
pub(super) struct ToolMemory(Mutex<HashMap<ModelName, Learned>>);

impl ToolMemory {
    fn get(&self, model: &ModelName) -> Learned {
        let map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.get(model).copied().unwrap_or_default()
    }

    fn learn(&self, model: &ModelName, change: impl FnOnce(&mut Learned)) {
        let mut map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        change(map.entry(model.clone()).or_default());
    }
}

/// A provider's model behind the ladder.
pub(super) struct Adaptive {
    inner: Arc<dyn ChatModel>,
    name: ModelName,
    settings: EndpointSettings,
    memory: Arc<ToolMemory>,
}

#[async_trait]
impl ChatModel for Adaptive {
    async fn chat(
        &self,
        req: &ChatRequest,
        on_delta: Option<OnDelta<'_>>,
    ) -> Result<ChatResponse, LlmError> {
        let mut req = Cow::Borrowed(req);
        if let Some(cap) = self
            .settings
            .max_output_tokens
            .filter(|c| req.max_tokens > *c)
        {
            req.to_mut().max_tokens = cap.max(1);
        }
        // A local server streams every call, so a runaway can be cut off (nobody listens).
        let discard = |_: Delta| {};
        let on_delta = match on_delta.filter(|_| req.stream) {
            Some(f) => Some(f),
            None if self.settings.local => {
                req.to_mut().stream = true;
                Some(&discard as OnDelta<'_>)
            }
            None => None,
        };
        let answer = if !req.tools.is_empty() {
            self.with_tools(&req, on_delta).await
        } else if req.response_schema.is_some() {
            self.with_schema(&req, on_delta).await
        } else {
            self.inner.chat(&req, on_delta).await
        };
        match answer {
            // A request without tools can still fail in the server's tool-call parser: it
            // renders the earlier calls of the history. Asked again with them as text.
            Err(LlmError::ToolFormat { .. })
                if req.tools.is_empty() && has_calls(&req.messages) =>
            {
                let plain = ChatRequest {
                    messages: flatten_history(&req.messages),
                    ..req.into_owned()
                };
                let mut answer = if plain.response_schema.is_some() {
                    self.with_schema(&plain, on_delta).await?
                } else {
                    self.inner.chat(&plain, on_delta).await?
                };
                answer.fallbacks.insert(0, Fallback::ToolFormatRetry);
                Ok(answer)
            }
            other => other,
        }
    }
}

impl Adaptive {
    pub fn new(
        inner: Arc<dyn ChatModel>,
        name: ModelName,
        settings: EndpointSettings,
        memory: Arc<ToolMemory>,
    ) -> Self {
        Self {
            inner,
            name,
            settings,
            memory,
        }
    }

    async fn with_tools(
        &self,
        req: &ChatRequest,
        on_delta: Option<OnDelta<'_>>,
    ) -> Result<ChatResponse, LlmError> {
        let learned = self.memory.get(&self.name);
        let prompted = match self.settings.tool_calling {
            ToolCalling::Prompted => true,
            ToolCalling::Native => false,
            ToolCalling::Auto => learned.prompted_tools,
        };
        if prompted {
            return self
                .prompted(
                    req,
                    on_delta,
                    learned.single_call,
                    &[Fallback::PromptedTools],
                )
                .await;
        }
        let native = if learned.single_call && req.parallel_tool_calls {
            Cow::Owned(ChatRequest {
                parallel_tool_calls: false,
                ..req.clone()
            })
        } else {
            Cow::Borrowed(req)
        };
        match self.inner.chat(&native, on_delta).await {
            Ok(answer) => Ok(recover_text_calls(answer, &req.tools, &[])),
            Err(e) if refuses_tools(&e) => self.after_tool_failure(req, on_delta, e).await,
            Err(e) => Err(e),
        }
    }

    /// The server could not parse the model's call (or takes no tools): ask once more another
    /// way. With `native` forced, the other way is one call per turn; else prompted tools.
    async fn after_tool_failure(
        &self,
        req: &ChatRequest,
        on_delta: Option<OnDelta<'_>>,
        error: LlmError,
    ) -> Result<ChatResponse, LlmError> {
        tracing::warn!(
            model = %self.name,
            error = %error,
            "the model server failed on a tool call; asking again with another strategy"
        );
        self.memory.learn(&self.name, |l| {
            l.single_call = true;
            l.prompted_tools = true;
        });
        if self.settings.tool_calling == ToolCalling::Native {
            let single = ChatRequest {
                parallel_tool_calls: false,
                ..req.clone()
            };
            let answer = self.inner.chat(&single, on_delta).await?;
            let answer = recover_text_calls(answer, &req.tools, &[Fallback::ToolFormatRetry]);
            return Ok(answer);
        }
        let fallbacks = [Fallback::ToolFormatRetry, Fallback::PromptedTools];
        match self.prompted(req, on_delta, true, &fallbacks).await {
            // llama.cpp closes the connection after its 500; a pooled one may be dead already.
            Err(e) if e.is_retryable() => self.prompted(req, on_delta, true, &fallbacks).await,
            other => other,
        }
    }

    /// The call with its tools described in the prompt and the calls read from the text.
    async fn prompted(
        &self,
        req: &ChatRequest,
        on_delta: Option<OnDelta<'_>>,
        single_call: bool,
        fallbacks: &[Fallback],
    ) -> Result<ChatResponse, LlmError> {
        let plain = ChatRequest {
            messages: prompted_messages(req, single_call),
            tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
            parallel_tool_calls: false,
            ..req.clone()
        };
        let answer = self.inner.chat(&plain, on_delta).await?;
        Ok(recover_text_calls(answer, &req.tools, fallbacks))
    }

    async fn with_schema(
        &self,
        req: &ChatRequest,
        on_delta: Option<OnDelta<'_>>,
    ) -> Result<ChatResponse, LlmError> {
        if self.memory.get(&self.name).json_in_text {
            return self.json_in_text(req, on_delta).await;
        }
        match self.inner.chat(req, on_delta).await {
            Err(e) if refuses_schema(&e) => {
                tracing::warn!(model = %self.name, error = %e,
                    "the model server refused the JSON schema; asking for JSON in the prompt");
                self.memory.learn(&self.name, |l| l.json_in_text = true);
                self.json_in_text(req, on_delta).await
            }
            other => other,
        }
    }

    async fn json_in_text(
        &self,
        req: &ChatRequest,
        on_delta: Option<OnDelta<'_>>,
    ) -> Result<ChatResponse, LlmError> {
        let Some(schema) = &req.response_schema else {
            return self.inner.chat(req, on_delta).await;
        };
        let instruction = JSON_PROMPT.replace("{schema}", &schema.schema.to_string());
        let mut messages = req.messages.clone();
        append_to_last_human(&mut messages, &instruction);
        let plain = ChatRequest {
            messages,
            response_schema: None,
            ..req.clone()
        };
        let mut answer = self.inner.chat(&plain, on_delta).await?;
        answer.fallbacks.push(Fallback::JsonInText);
        Ok(answer)
    }
}

/// A server failure that another way of offering tools can get around: its parser failed on
/// the model's call, or it does not take tools (or `tool_choice`) at all.
fn refuses_tools(e: &LlmError) -> bool {
    match e {
        LlmError::ToolFormat { .. } => true,
        // Ollama: "… does not support tools"; vLLM without its parser: "\"auto\" tool choice
        // requires --enable-auto-tool-choice …". A schema error in a tool stays an error.
        LlmError::BadRequest { message, .. } => {
            let m = message.to_lowercase();
            [
                "does not support tools",
                "tools are not supported",
                "tool calling is not supported",
                "tool use is not supported",
                "tool choice requires",
            ]
            .iter()
            .any(|sign| m.contains(sign))
        }
        _ => false,
    }
}

/// A server that does not take `response_format: json_schema` (or whose grammar for it failed).
fn refuses_schema(e: &LlmError) -> bool {
    match e {
        LlmError::ToolFormat { .. } => true,
        LlmError::BadRequest { message, .. } => {
            let m = message.to_lowercase();
            m.contains("response_format") || m.contains("json_schema") || m.contains("grammar")
        }
        _ => false,
    }
}

/// Turns calls written as text into real tool calls, when the answer has none of its own.
fn recover_text_calls(
    mut answer: ChatResponse,
    tools: &[ToolSpec],
    fallbacks: &[Fallback],
) -> ChatResponse {
    answer.fallbacks.extend_from_slice(fallbacks);
    let has_calls = ["tool_calls", "invalid_tool_calls"]
        .iter()
        .any(|k| answer.message[*k].as_array().is_some_and(|a| !a.is_empty()));
    if has_calls {
        return answer;
    }
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    let text = super::history::content_text(&answer.message["content"]);
    let Some(found) = text_calls::recover(&text, &names) else {
        return answer;
    };
    let calls: Vec<Value> = found
        .calls
        .into_iter()
        .map(|(name, args)| {
            let id = format!("call_{}", uuid::Uuid::new_v4().simple());
            json!({"name": name, "args": args, "id": id, "type": "tool_call"})
        })
        .collect();
    answer.message["tool_calls"] = Value::Array(calls);
    answer.message["content"] = json!(found.rest);
    answer.message["response_metadata"]["finish_reason"] = json!(FinishReason::ToolCalls);
    answer.finish_reason = FinishReason::ToolCalls;
    answer.fallbacks.push(Fallback::TextToolCalls);
    answer
}

/// The conversation for prompted tools: the tools described in the system message, earlier
/// calls written back as the JSON the model is asked to write, and tool results as user turns
/// (servers reject `tool` messages whose call is not in a `tool_calls` field).
fn prompted_messages(req: &ChatRequest, single_call: bool) -> Vec<ChatMessage> {
    let instructions = tools_prompt(req, single_call);
    let mut out = flatten_history(&req.messages);
    match out.first_mut() {
        Some(ChatMessage::System(text)) => *text = format!("{text}\n\n{instructions}"),
        _ => out.insert(0, ChatMessage::System(instructions)),
    }
    out
}

/// Whether any earlier assistant turn carries tool calls.
fn has_calls(messages: &[ChatMessage]) -> bool {
    messages
        .iter()
        .any(|m| matches!(m, ChatMessage::Ai(turn) if !turn.calls.is_empty()))
}

/// The history with earlier calls written as the JSON the model would write, and tool results
/// as user turns: nothing left for a server's tool-call parser to choke on.
fn flatten_history(messages: &[ChatMessage]) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = Vec::with_capacity(messages.len());
    // Results of one turn's calls share one user turn.
    let mut in_results = false;
    for message in messages {
        match message {
            ChatMessage::Ai(turn) => out.push(ChatMessage::ai_text(calls_as_text(turn))),
            ChatMessage::Tool(result) => {
                let said = format!(
                    "Result of your `{}` call:\n{}",
                    result.name.as_deref().unwrap_or("tool"),
                    result.text
                );
                match out.last_mut() {
                    Some(ChatMessage::Human(text)) if in_results => {
                        *text = format!("{text}\n\n{said}");
                    }
                    _ => out.push(ChatMessage::Human(said)),
                }
                in_results = true;
                continue;
            }
            other => out.push(other.clone()),
        }
        in_results = false;
    }
    out
}

/// An earlier assistant turn as text: what it said, then its calls as JSON.
fn calls_as_text(turn: &ModelTurn) -> String {
    let calls: Vec<Value> = turn
        .calls
        .iter()
        .map(|c| json!({"name": c.name, "arguments": c.args.as_written()}))
        .collect();
    let written = match calls.len() {
        0 => return turn.text.clone(),
        1 => calls[0].to_string(),
        _ => Value::Array(calls).to_string(),
    };
    if turn.text.trim().is_empty() {
        written
    } else {
        format!("{}\n{written}", turn.text.trim())
    }
}

fn tools_prompt(req: &ChatRequest, single_call: bool) -> String {
    let tools: Vec<String> = req
        .tools
        .iter()
        .map(|t| {
            format!(
                "- {}: {}\n  arguments: {}",
                t.name, t.description, t.parameters
            )
        })
        .collect();
    let multiple = if single_call || !req.parallel_tool_calls {
        "Call one tool per reply; you will see its result and can then call the next."
    } else {
        "To call several tools at once, reply with a JSON list of such objects."
    };
    let required = match &req.tool_choice {
        ToolChoice::Required => "In this reply you must call a tool.".to_owned(),
        ToolChoice::Named(name) => format!("In this reply you must call the tool `{name}`."),
        ToolChoice::Auto | ToolChoice::None => String::new(),
    };
    TOOLS_PROMPT
        .replace("{multiple}", multiple)
        .replace("{required}", &required)
        .replace("{tools}", &tools.join("\n"))
}

/// Adds `text` to the last user message (or appends one).
fn append_to_last_human(messages: &mut Vec<ChatMessage>, text: &str) {
    let last_human = messages.iter_mut().rev().find_map(|m| match m {
        ChatMessage::Human(said) => Some(said),
        _ => None,
    });
    match last_human {
        Some(said) => said.push_str(text),
        None => messages.push(ChatMessage::human(text.trim())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn search_tool() -> ToolSpec {
        ToolSpec {
            name: "tavily_search".into(),
            description: "Search the web.".into(),
            parameters: json!({"type": "object", "properties": {"queries": {"type": "array"}}}),
        }
    }

    fn request(messages: Vec<Value>) -> ChatRequest {
        let messages = messages
            .into_iter()
            .map(|m| ChatMessage::from_langchain(m).unwrap())
            .collect();
        let mut req = ChatRequest::new(ModelName::parse("local:m").unwrap(), messages, 100);
        req.tools = vec![search_tool()];
        req
    }

    #[test]
    fn prompted_messages_describe_tools_and_replay_calls_as_text() {
        let req = request(vec![
            json!({"type": "system", "content": "You research."}),
            json!({"type": "human", "content": "topic"}),
            json!({"type": "ai", "content": "", "tool_calls": [
                {"name": "tavily_search", "args": {"queries": ["q"]}, "id": "c1", "type": "tool_call"}]}),
            json!({"type": "tool", "name": "tavily_search", "tool_call_id": "c1", "content": "found A"}),
            json!({"type": "tool", "name": "think_tool", "tool_call_id": "c2", "content": "noted"}),
        ]);
        let out = prompted_messages(&req, true);
        assert_eq!(out.len(), 4, "{out:#?}");
        let ChatMessage::System(system) = &out[0] else {
            panic!("the tools are described in the system message: {out:#?}");
        };
        assert!(system.starts_with("You research."));
        assert!(system.contains("- tavily_search: Search the web."));
        assert!(system.contains("one tool per reply"));
        assert_eq!(
            out[2],
            ChatMessage::ai_text(r#"{"name":"tavily_search","arguments":{"queries":["q"]}}"#)
        );
        let ChatMessage::Human(results) = &out[3] else {
            panic!("tool results are one user turn: {out:#?}");
        };
        assert!(results.contains("found A") && results.contains("noted"));
    }

    #[test]
    fn a_required_call_is_asked_for_in_the_prompt() {
        let mut req = request(vec![json!({"type": "human", "content": "go"})]);
        req.tool_choice = ToolChoice::Required;
        let out = prompted_messages(&req, false);
        let ChatMessage::System(text) = &out[0] else {
            panic!("a system message first: {out:#?}");
        };
        assert!(text.contains("you must call a tool"));
        assert!(text.contains("JSON list"));
    }

    #[test]
    fn calls_in_text_become_tool_calls() {
        let answer = super::super::history::AiTurn {
            id: Some("x".into()),
            model: "m".into(),
            content:
                "Searching.\n{\"name\": \"tavily_search\", \"arguments\": {\"queries\": [\"q\"]}}"
                    .into(),
            calls: vec![],
            finish: FinishReason::Stop,
            usage: None,
            metadata: serde_json::Map::new(),
        }
        .into_response();
        let out = recover_text_calls(answer, &[search_tool()], &[]);
        assert_eq!(
            out.message["tool_calls"][0]["args"],
            json!({"queries": ["q"]})
        );
        assert_eq!(out.message["content"], "Searching.");
        assert_eq!(out.finish_reason, FinishReason::ToolCalls);
        assert_eq!(out.fallbacks, vec![Fallback::TextToolCalls]);
    }

    #[test]
    fn failures_that_another_strategy_can_fix_are_told_apart() {
        let bad = |m: &str| LlmError::BadRequest {
            provider: "p".into(),
            message: m.into(),
        };
        assert!(refuses_tools(&bad(
            "HTTP 400: registry/gemma does not support tools"
        )));
        assert!(!refuses_tools(&bad("HTTP 400: messages must not be empty")));
        assert!(refuses_tools(&bad(
            "HTTP 400: \"auto\" tool choice requires --enable-auto-tool-choice"
        )));
        assert!(!refuses_tools(&bad(
            "HTTP 400: Invalid schema for function 'x': tools[0] uses a keyword that is not supported"
        )));
        assert!(refuses_schema(&bad(
            "HTTP 400: response_format is not supported"
        )));
        assert!(!refuses_schema(&LlmError::Transient {
            provider: "p".into(),
            message: "HTTP 503".into()
        }));
    }
}
