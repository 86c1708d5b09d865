//! The messages the research graphs keep in state. They stay LangChain message dicts on the wire
//! and in checkpoints (clients read them, and the model clients speak them), but the research
//! code reads and builds them only through `Message`, so no node indexes a dict by a string.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use uuid::Uuid;

/// Who wrote a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Human,
    Ai,
    System,
    /// A tool's result.
    Tool,
    /// A kind this code does not know (a client may add its own).
    Other,
}

/// One LangChain message dict.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct Message(#[schemars(with = "Map<String, Value>")] Value);

/// One parsed tool call of an AI message. Its arguments are the model's JSON, as it wrote them.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub args: Value,
}

impl ToolCall {
    /// A text argument (empty when missing or not text).
    pub fn text_arg(&self, name: &str) -> &str {
        self.args[name].as_str().unwrap_or_default()
    }
}

impl Message {
    /// Takes the content by value so a large prompt moves into the message instead of being
    /// copied. (`json!` would copy it.)
    fn with_defaults(kind: &str, content: impl Into<String>) -> Self {
        let mut msg = Map::new();
        msg.insert("content".into(), Value::String(content.into()));
        msg.insert("additional_kwargs".into(), json!({}));
        msg.insert("response_metadata".into(), json!({}));
        msg.insert("type".into(), json!(kind));
        msg.insert("name".into(), Value::Null);
        msg.insert("id".into(), json!(Uuid::new_v4().to_string()));
        Self(Value::Object(msg))
    }

    pub fn system(content: impl Into<String>) -> Self {
        Self::with_defaults("system", content)
    }

    pub fn human(content: impl Into<String>) -> Self {
        Self::with_defaults("human", content)
    }

    /// An AI message with the id its streamed tokens carried.
    pub fn ai(id: &str, content: &str) -> Self {
        Self(crate::graph::messages::ai_message(id, content))
    }

    /// An AI message as it is sent back to a model (a corrective turn quotes the answer).
    pub fn ai_text(content: impl Into<String>) -> Self {
        Self(json!({"type": "ai", "content": content.into()}))
    }

    /// A tool result answering the call `call_id`.
    pub fn tool_result(content: impl Into<String>, name: &str, call_id: &str) -> Self {
        let mut msg = Self::with_defaults("tool", content);
        if let Some(map) = msg.0.as_object_mut() {
            map.insert("name".into(), json!(name));
            map.insert("tool_call_id".into(), json!(call_id));
            map.insert("artifact".into(), Value::Null);
            map.insert("status".into(), json!("success"));
        }
        msg
    }

    /// A tool result that reports a failure (`status: "error"`).
    pub fn tool_error(content: impl Into<String>, name: &str, call_id: &str) -> Self {
        let mut msg = Self::tool_result(content, name, call_id);
        msg.0["status"] = json!("error");
        msg
    }

    /// A model's answer, as the model client returned it.
    pub fn from_model(message: Value) -> Self {
        Self(message)
    }

    /// The dict, for the model clients and the graph runtime.
    pub fn into_value(self) -> Value {
        self.0
    }

    pub fn kind(&self) -> Kind {
        match self.0["type"].as_str() {
            Some("human") => Kind::Human,
            Some("ai") => Kind::Ai,
            Some("system") => Kind::System,
            Some("tool") => Kind::Tool,
            _ => Kind::Other,
        }
    }

    /// The text: a string `content`, or the text blocks of a list joined.
    pub fn text(&self) -> String {
        content_text(&self.0["content"])
    }

    /// Replaces the text, keeping the id and everything else.
    pub fn set_text(&mut self, text: &str) {
        self.0["content"] = json!(text);
    }

    /// The tool a tool result answers.
    pub fn tool_name(&self) -> Option<&str> {
        (self.kind() == Kind::Tool)
            .then(|| self.0["name"].as_str())
            .flatten()
    }

    /// Whether this is a result of the tool `name`.
    pub fn is_result_of(&self, name: &str) -> bool {
        self.kind() == Kind::Tool && self.0["name"] == name
    }

    /// A tool result that reports a failure.
    pub fn failed(&self) -> bool {
        self.0["status"] == "error"
    }

    /// The tool calls of an AI message.
    pub fn tool_calls(&self) -> Vec<ToolCall> {
        self.calls("tool_calls", |c| c["args"].clone())
    }

    /// Calls whose arguments were not valid JSON; each still needs an answer.
    pub fn invalid_tool_calls(&self) -> Vec<ToolCall> {
        self.calls(
            "invalid_tool_calls",
            |c| json!({"error": c["error"], "raw": c["args"]}),
        )
    }

    fn calls(&self, key: &str, args: impl Fn(&Value) -> Value) -> Vec<ToolCall> {
        self.0[key]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| ToolCall {
                id: c["id"].as_str().unwrap_or_default().to_owned(),
                name: c["name"].as_str().unwrap_or_default().to_owned(),
                args: args(c),
            })
            .collect()
    }

    /// Whether an AI message acted: called a tool (even with bad arguments) or used the
    /// provider's own web search.
    pub fn acted(&self) -> bool {
        let any = |key: &str| self.0[key].as_array().is_some_and(|a| !a.is_empty());
        any("tool_calls") || any("invalid_tool_calls") || self.used_native_search()
    }

    pub fn used_native_search(&self) -> bool {
        self.0["response_metadata"]["server_tool_use"]["web_search_requests"]
            .as_u64()
            .unwrap_or(0)
            > 0
    }

    /// The pages the provider's own web search returned (`{url, title}` each).
    pub fn web_search_results(&self) -> Vec<super::state::Source> {
        self.0["response_metadata"]["web_search_results"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|page| super::state::Source::deserialize(page).ok())
            .collect()
    }

    /// Adds a synthesized tool call to an AI message that made none (an agent fallback); the
    /// message says which fallback wrote it.
    pub fn add_call(&mut self, name: &str, args: impl Serialize, fallback: &str) {
        self.set_calls(name, [args]);
        self.0["response_metadata"]["fallback"] = json!(fallback);
    }

    /// Sets the tool calls of an AI message: one call of `name` per set of arguments, each
    /// with a fresh id.
    pub fn set_calls<A: Serialize>(&mut self, name: &str, args: impl IntoIterator<Item = A>) {
        let calls = args
            .into_iter()
            .map(|a| {
                let id = format!("call_{}", Uuid::new_v4().simple());
                json!({"name": name, "args": a, "id": id, "type": "tool_call"})
            })
            .collect();
        self.0["tool_calls"] = Value::Array(calls);
    }
}

fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str).or_else(|| b.as_str()))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// The characters of a request's prompt (what an abandoned call is charged for).
pub fn prompt_chars(messages: &[Value]) -> usize {
    messages
        .iter()
        .map(|m| content_text(&m["content"]).chars().count())
        .sum()
}

/// The values for a model request.
pub fn to_values(messages: Vec<Message>) -> Vec<Value> {
    messages.into_iter().map(Message::into_value).collect()
}

/// The conversation as `Human: …` / `AI: …` lines, as prompts quote it.
pub fn buffer_string(messages: &[Message]) -> String {
    messages
        .iter()
        .map(|m| {
            let role = match m.kind() {
                Kind::Human => "Human",
                Kind::Ai => "AI",
                Kind::System => "System",
                Kind::Tool => "Tool",
                Kind::Other => m.0["type"].as_str().unwrap_or_default(),
            };
            format!("{role}: {}", m.text())
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether a history holds a result of the tool `name`.
pub fn has_result_of(history: &[Message], name: &str) -> bool {
    history.iter().any(|m| m.is_result_of(name))
}

/// At most `max` characters of a text, on one line, for events and error messages.
pub fn excerpt(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &flat[..at]),
        None => flat,
    }
}

/// Today's date the way the prompts show it, e.g. `Mon Jan 15, 2024`.
pub fn today() -> String {
    chrono::Utc::now().format("%a %b %-d, %Y").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(v: Value) -> Message {
        Message::from_model(v)
    }

    #[test]
    fn buffer_string_renders_roles_and_block_content() {
        let msgs = vec![
            message(json!({"type": "human", "content": [{"type": "text", "text": "hi"}]})),
            message(json!({"type": "ai", "content": "hello"})),
        ];
        assert_eq!(buffer_string(&msgs), "Human: hi\nAI: hello");
    }

    #[test]
    fn acting_and_excerpts() {
        assert!(
            !message(json!({"type": "ai", "content": "I will search", "tool_calls": []})).acted()
        );
        let mut m = message(json!({"type": "ai", "content": "plan"}));
        m.add_call("tavily_search", json!({"queries": ["q"]}), "planned_search");
        assert!(m.acted());
        assert_eq!(m.tool_calls()[0].name, "tavily_search");
        assert_eq!(m.0["response_metadata"]["fallback"], "planned_search");
        assert_eq!(excerpt("a\n  b   c", 10), "a b c");
        assert_eq!(excerpt("abcdef", 3), "abc…");
    }

    #[test]
    fn tool_results_say_whose_they_are_and_whether_they_failed() {
        let ok = Message::tool_result("found", "ConductResearch", "c1");
        let bad = Message::tool_error("failed", "ConductResearch", "c2");
        assert!(ok.is_result_of("ConductResearch") && !ok.failed());
        assert!(bad.is_result_of("ConductResearch") && bad.failed());
        assert!(!ok.is_result_of("think_tool"));
        assert_eq!(ok.kind(), Kind::Tool);
    }

    #[test]
    fn today_has_no_leading_zero() {
        let d = today();
        let day = d.split(' ').nth(2).unwrap().trim_end_matches(',');
        assert!(!day.starts_with('0'), "{d}");
    }
}
