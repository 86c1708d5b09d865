//! Reading LangChain message dicts (roles, content) and turning a finished model turn into an
//! AI message dict, for both wire formats.

use super::{ChatResponse, FinishReason, Usage};
use serde_json::{Map, Value, json};
use std::borrow::Cow;

/// The roles the converters understand, from LangChain `type` or OpenAI-style `role`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Role {
    System,
    Human,
    Ai,
    Tool,
}

pub(super) fn role(message: &Value) -> Result<Role, String> {
    let raw = message
        .get("type")
        .or_else(|| message.get("role"))
        .and_then(Value::as_str)
        .ok_or_else(|| "a message needs `type` or `role`".to_owned())?;
    Ok(match raw {
        "system" | "developer" | "SystemMessage" => Role::System,
        "human" | "user" | "HumanMessage" | "HumanMessageChunk" => Role::Human,
        "ai" | "assistant" | "AIMessage" | "AIMessageChunk" => Role::Ai,
        "tool" | "ToolMessage" => Role::Tool,
        other => return Err(format!("cannot send a '{other}' message to a chat model")),
    })
}

/// The text of a message `content`: a string, or the `text` of a list of blocks (other
/// blocks, e.g. images, are dropped), or `null`.
pub(super) fn content_text(content: &Value) -> String {
    content_str(content).into_owned()
}

/// `content_text` without a copy when the content is one string (the common case: request
/// bodies borrow every message's text instead of copying it).
pub(super) fn content_str(content: &Value) -> Cow<'_, str> {
    match content {
        Value::String(s) => Cow::Borrowed(s),
        Value::Array(blocks) => Cow::Owned(
            blocks
                .iter()
                .filter_map(|b| match b {
                    Value::String(s) => Some(s.as_str()),
                    Value::Object(_) if b["type"] == "text" => b["text"].as_str(),
                    _ => None,
                })
                .collect(),
        ),
        Value::Null => Cow::Borrowed(""),
        other => Cow::Owned(other.to_string()),
    }
}

/// A tool call as the provider sent it: arguments still as text, since they may be malformed.
pub(super) struct RawToolCall {
    pub id: Option<String>,
    pub name: String,
    pub args: String,
}

/// The `response_metadata` a model's own web search leaves (OpenAI's, Gemini's; Anthropic's is
/// read from its usage): how many searches ran, and the pages they read, which the research
/// counts as sources.
pub(super) fn search_metadata(searches: u64, pages: Vec<Value>) -> Map<String, Value> {
    let mut metadata = Map::new();
    if searches > 0 {
        metadata.insert(
            "server_tool_use".into(),
            json!({"web_search_requests": searches}),
        );
        metadata.insert("web_search_results".into(), Value::Array(pages));
    }
    metadata
}

/// A finished assistant turn in provider-neutral form, before it becomes a LangChain dict.
pub(super) struct AiTurn {
    pub id: Option<String>,
    pub model: String,
    pub content: String,
    pub calls: Vec<RawToolCall>,
    pub finish: FinishReason,
    pub usage: Option<Usage>,
    /// Extra `response_metadata` entries (e.g. `server_tool_use`).
    pub metadata: Map<String, Value>,
}

impl AiTurn {
    pub fn into_response(self) -> ChatResponse {
        let (tool_calls, invalid): (Vec<_>, Vec<_>) = self
            .calls
            .into_iter()
            .map(parse_tool_call)
            .partition(Result::is_ok);
        let tool_calls: Vec<Value> = tool_calls.into_iter().flatten().collect();
        let invalid: Vec<Value> = invalid.into_iter().filter_map(Result::err).collect();
        let usage_metadata = self.usage.map_or(Value::Null, |u| {
            json!({
                "input_tokens": u.input_tokens,
                "output_tokens": u.output_tokens,
                "total_tokens": u.input_tokens + u.output_tokens,
            })
        });
        let mut metadata = self.metadata;
        metadata.insert("model_name".into(), json!(self.model));
        metadata.insert("finish_reason".into(), json!(self.finish));
        let message = json!({
            "type": "ai",
            "id": self.id.unwrap_or_else(|| format!("run-{}", uuid::Uuid::new_v4())),
            "content": self.content,
            "tool_calls": tool_calls,
            "invalid_tool_calls": invalid,
            "usage_metadata": usage_metadata,
            "response_metadata": metadata,
            "additional_kwargs": {},
            "name": null,
        });
        ChatResponse {
            message,
            usage: self.usage.unwrap_or_default(),
            finish_reason: self.finish,
            fallbacks: Vec::new(),
        }
    }
}

/// A LangChain `tool_call`, or an `invalid_tool_call` carrying the raw text and the reason.
fn parse_tool_call(call: RawToolCall) -> Result<Value, Value> {
    let id = call
        .id
        .filter(|id| !id.is_empty())
        .unwrap_or_else(|| format!("call_{}", uuid::Uuid::new_v4().simple()));
    let text = call.args.trim();
    // Some servers send "" for a tool without parameters.
    let parsed = if text.is_empty() {
        Ok(json!({}))
    } else {
        serde_json::from_str::<Value>(text)
            .map_err(|e| format!("arguments are not valid JSON: {e}"))
    };
    match parsed {
        Ok(args @ Value::Object(_)) => {
            Ok(json!({"name": call.name, "args": args, "id": id, "type": "tool_call"}))
        }
        Ok(_) => Err(invalid_call(
            call.name,
            call.args,
            id,
            "arguments must be a JSON object".into(),
        )),
        Err(error) => Err(invalid_call(call.name, call.args, id, error)),
    }
}

fn invalid_call(name: String, args: String, id: String, error: String) -> Value {
    json!({"name": name, "args": args, "id": id, "error": error, "type": "invalid_tool_call"})
}

/// `name` as an identifier providers accept for tools and schemas (`[A-Za-z0-9_-]{1,64}`).
pub(super) fn identifier(name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if clean.is_empty() {
        "response".to_owned()
    } else {
        clean
    }
}

/// The runaway guard: a server that ignores `max_tokens` must not stream forever. Eight
/// characters per token is far above any real tokenizer, so honest answers never trip it.
pub(super) fn runaway_limit(max_tokens: u32) -> usize {
    usize::try_from(max_tokens)
        .unwrap_or(usize::MAX)
        .saturating_mul(8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::endpoint::truncate;

    #[test]
    fn tool_calls_with_bad_arguments_become_invalid_tool_calls() {
        let call = |args: &str| RawToolCall {
            id: Some("c1".into()),
            name: "f".into(),
            args: args.into(),
        };
        let turn = AiTurn {
            id: None,
            model: "m".into(),
            content: String::new(),
            calls: vec![call(r#"{"q":1}"#), call("{oops"), call("[1]"), call("")],
            finish: FinishReason::ToolCalls,
            usage: None,
            metadata: Map::new(),
        };
        let message = turn.into_response().message;
        assert_eq!(message["tool_calls"].as_array().unwrap().len(), 2);
        assert_eq!(message["tool_calls"][0]["args"], json!({"q": 1}));
        assert_eq!(message["invalid_tool_calls"][0]["args"], "{oops");
        assert_eq!(
            message["invalid_tool_calls"][1]["type"],
            "invalid_tool_call"
        );
        assert!(message["id"].as_str().unwrap().starts_with("run-"));
        assert_eq!(message["usage_metadata"], Value::Null);
    }

    #[test]
    fn content_text_joins_text_blocks() {
        let blocks = json!([{"type": "text", "text": "a"}, {"type": "image_url"}, "b"]);
        assert_eq!(content_text(&blocks), "ab");
        assert_eq!(content_text(&Value::Null), "");
        assert_eq!(truncate("abcdef", 3), "abc…");
        assert_eq!(identifier("My Schema!"), "My_Schema_");
    }
}
