//! LangChain-style chat messages as JSON, and the `add_messages` merge: coercion of client input
//! (roles, bare strings, tuples), default fields, ids, replace-by-id and removal. `Message` is
//! one such dict as a type: graphs build and read messages through it, never by key.

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use uuid::Uuid;

/// Message id that clears the whole list when sent as a `remove` message.
pub const REMOVE_ALL: &str = "__remove_all__";

/// Why a value could not be read as a message.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("invalid message: {0}")]
pub struct MessageError(pub String);

/// Turns one client-supplied message into the canonical dict, giving it an id if it has none.
pub fn coerce(value: Value) -> Result<Value, MessageError> {
    let mut msg = match value {
        Value::String(text) => obj(&[("type", json!("human")), ("content", json!(text))]),
        Value::Array(pair) if pair.len() == 2 => from_tuple(pair)?,
        Value::Object(map) => map,
        other => return Err(MessageError(format!("expected an object, got {other}"))),
    };
    let kind = message_type(&msg)?;
    msg.remove("role");
    msg.insert("type".into(), json!(kind));
    if !msg.contains_key("content") {
        if kind == "remove" {
            msg.insert("content".into(), json!(""));
        } else {
            return Err(MessageError("a message needs `content`".into()));
        }
    }
    fill_defaults(&mut msg, kind);
    Ok(Value::Object(msg))
}

fn obj(pairs: &[(&str, Value)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

fn from_tuple(pair: Vec<Value>) -> Result<Map<String, Value>, MessageError> {
    match (&pair[0], &pair[1]) {
        (Value::String(role), content) => {
            Ok(obj(&[("role", json!(role)), ("content", content.clone())]))
        }
        _ => Err(MessageError("a message tuple is [role, content]".into())),
    }
}

fn message_type(msg: &Map<String, Value>) -> Result<&'static str, MessageError> {
    let raw = msg
        .get("type")
        .or_else(|| msg.get("role"))
        .and_then(Value::as_str)
        .ok_or_else(|| MessageError("a message needs `type` or `role`".into()))?;
    Ok(match raw {
        "human" | "user" | "HumanMessage" | "HumanMessageChunk" => "human",
        "ai" | "assistant" | "AIMessage" | "AIMessageChunk" => "ai",
        "system" | "developer" | "SystemMessage" => "system",
        "tool" | "ToolMessage" => "tool",
        "function" => "function",
        "chat" => "chat",
        "remove" => "remove",
        other => return Err(MessageError(format!("unknown message type '{other}'"))),
    })
}

fn fill_defaults(msg: &mut Map<String, Value>, kind: &str) {
    let mut default = |key: &str, value: Value| {
        msg.entry(key.to_owned()).or_insert(value);
    };
    default("additional_kwargs", json!({}));
    default("response_metadata", json!({}));
    default("name", Value::Null);
    match kind {
        "ai" => {
            default("tool_calls", json!([]));
            default("invalid_tool_calls", json!([]));
            default("usage_metadata", Value::Null);
        }
        "tool" => {
            default("artifact", Value::Null);
            default("status", json!("success"));
        }
        _ => {}
    }
    let missing_id = !matches!(msg.get("id"), Some(Value::String(s)) if !s.is_empty());
    if missing_id {
        msg.insert("id".into(), json!(Uuid::new_v4().to_string()));
    }
}

/// Coerces a write to the messages channel: one message or a list of them.
pub fn coerce_list(value: Value) -> Result<Value, MessageError> {
    let items = match value {
        Value::Array(items) if !looks_like_tuple(&items) => items,
        single => vec![single],
    };
    items
        .into_iter()
        .map(coerce)
        .collect::<Result<Vec<_>, _>>()
        .map(Value::Array)
}

fn looks_like_tuple(items: &[Value]) -> bool {
    items.len() == 2
        && items[0].as_str().is_some_and(|r| {
            matches!(
                r,
                "user" | "human" | "assistant" | "ai" | "system" | "developer" | "tool"
            )
        })
}

/// The `add_messages` merge of already-coerced messages into `current`.
pub fn merge(current: Value, incoming: &Value) -> Value {
    let mut list = match current {
        Value::Array(list) => list,
        _ => Vec::new(),
    };
    let Some(incoming) = incoming.as_array() else {
        return Value::Array(list);
    };
    for msg in incoming {
        let id = message_id(msg);
        if msg.get("type").and_then(Value::as_str) == Some("remove") {
            if id == Some(REMOVE_ALL) {
                list.clear();
            } else {
                list.retain(|m| message_id(m) != id);
            }
            continue;
        }
        match list
            .iter_mut()
            .find(|m| id.is_some() && message_id(m) == id)
        {
            Some(slot) => *slot = msg.clone(),
            None => list.push(msg.clone()),
        }
    }
    Value::Array(list)
}

/// The message's `id`, if it has a string one.
pub fn message_id(msg: &Value) -> Option<&str> {
    msg.get("id").and_then(Value::as_str)
}

/// Whether a JSON value looks like a serialised message (for emitting node outputs).
pub fn is_message(value: &Value) -> bool {
    let Some(map) = value.as_object() else {
        return false;
    };
    map.contains_key("content")
        && map.contains_key("id")
        && map
            .get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| matches!(t, "human" | "ai" | "system" | "tool" | "function" | "chat"))
}

/// Builds an AI message dict with the canonical defaults.
pub fn ai_message(id: &str, content: &str) -> Value {
    let mut map = obj(&[
        ("content", json!(content)),
        ("type", json!("ai")),
        ("id", json!(id)),
    ]);
    fill_defaults(&mut map, "ai");
    Value::Object(map)
}

/// A streamed delta of a model's answer as the `AIMessageChunk` clients expect.
pub fn ai_chunk(id: &str, content: &str, tool_call_chunks: &[Value]) -> Value {
    json!({"content": content, "additional_kwargs": {}, "response_metadata": {},
           "type": "AIMessageChunk", "name": null, "id": id, "tool_calls": [],
           "invalid_tool_calls": [], "usage_metadata": null, "tool_call_chunks": tool_call_chunks,
           "chunk_position": null})
}

// ---------------------------------------------------------------------------------------------
// One message as a type

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
        Self(ai_message(id, content))
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

    /// The `type` as written (for a kind this code does not know).
    pub fn type_name(&self) -> &str {
        self.0["type"].as_str().unwrap_or_default()
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

    /// The entries of a list in `response_metadata` (a model's own web search leaves its
    /// pages in `web_search_results`) that read as `T`.
    pub fn metadata_list<T: DeserializeOwned>(&self, key: &str) -> Vec<T> {
        self.0["response_metadata"][key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|item| T::deserialize(item).ok())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coerces_roles_strings_and_tuples() {
        let m = coerce(json!({"role": "user", "content": "hi"})).unwrap();
        assert_eq!(m["type"], "human");
        assert!(m.get("role").is_none());
        assert_eq!(m["additional_kwargs"], json!({}));
        assert!(m["id"].as_str().is_some_and(|s| !s.is_empty()));
        assert_eq!(coerce(json!("yo")).unwrap()["type"], "human");
        assert_eq!(coerce(json!(["assistant", "ok"])).unwrap()["type"], "ai");
        let ai = coerce(json!({"type": "ai", "content": "x", "id": "a1"})).unwrap();
        assert_eq!(ai["tool_calls"], json!([]));
        assert_eq!(ai["id"], "a1");
        assert!(coerce(json!({"type": "alien", "content": ""})).is_err());
        assert!(coerce(json!(3)).is_err());
    }

    #[test]
    fn merge_appends_replaces_and_removes() {
        let a = coerce(json!({"type": "human", "content": "a", "id": "1"})).unwrap();
        let b = coerce(json!({"type": "ai", "content": "b", "id": "2"})).unwrap();
        let state = merge(Value::Null, &json!([a, b]));
        let b2 = coerce(json!({"type": "ai", "content": "b2", "id": "2"})).unwrap();
        let state = merge(state, &json!([b2]));
        assert_eq!(state[1]["content"], "b2");
        assert_eq!(state.as_array().map(Vec::len), Some(2));
        let rm = coerce(json!({"type": "remove", "id": "1"})).unwrap();
        let state = merge(state, &json!([rm]));
        assert_eq!(state.as_array().map(Vec::len), Some(1));
        let all = coerce(json!({"type": "remove", "id": REMOVE_ALL})).unwrap();
        assert_eq!(merge(state, &json!([all])), json!([]));
    }
}

#[cfg(test)]
mod message_tests {
    use super::*;

    #[test]
    fn acting() {
        let said = Message::from_model(
            json!({"type": "ai", "content": "I will search", "tool_calls": []}),
        );
        assert!(!said.acted());
        let mut m = Message::from_model(json!({"type": "ai", "content": "plan"}));
        m.add_call("tavily_search", json!({"queries": ["q"]}), "planned_search");
        assert!(m.acted());
        assert_eq!(m.tool_calls()[0].name, "tavily_search");
        assert_eq!(m.0["response_metadata"]["fallback"], "planned_search");
    }

    #[test]
    fn tool_results_say_whose_they_are_and_whether_they_failed() {
        let ok = Message::tool_result("found", "ConductResearch", "c1");
        let bad = Message::tool_error("failed", "ConductResearch", "c2");
        assert!(ok.is_result_of("ConductResearch") && !ok.failed());
        assert!(bad.is_result_of("ConductResearch") && bad.failed());
        assert!(!ok.is_result_of("think_tool"));
        assert_eq!(ok.kind(), Kind::Tool);
        assert_eq!(ok.tool_name(), Some("ConductResearch"));
    }
}
