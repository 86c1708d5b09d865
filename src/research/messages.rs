//! Building and reading the LangChain-style message dicts the research graphs keep in state.

use serde_json::{Map, Value, json};
use uuid::Uuid;

/// Takes the content by value so a large prompt moves into the message instead of being copied.
/// (`json!` would copy it.)
fn with_defaults(kind: &str, content: impl Into<String>) -> Value {
    let mut msg = Map::new();
    msg.insert("content".into(), Value::String(content.into()));
    msg.insert("additional_kwargs".into(), json!({}));
    msg.insert("response_metadata".into(), json!({}));
    msg.insert("type".into(), json!(kind));
    msg.insert("name".into(), Value::Null);
    msg.insert("id".into(), json!(Uuid::new_v4().to_string()));
    Value::Object(msg)
}

pub fn system(content: impl Into<String>) -> Value {
    with_defaults("system", content)
}

pub fn human(content: impl Into<String>) -> Value {
    with_defaults("human", content)
}

/// A tool result answering the call `call_id`.
pub fn tool(content: impl Into<String>, name: &str, call_id: &str) -> Value {
    let mut msg = with_defaults("tool", content);
    if let Some(map) = msg.as_object_mut() {
        map.insert("name".into(), json!(name));
        map.insert("tool_call_id".into(), json!(call_id));
        map.insert("artifact".into(), Value::Null);
        map.insert("status".into(), json!("success"));
    }
    msg
}

/// A message's text: a string `content`, or the text blocks of a list joined.
pub fn text(msg: &Value) -> String {
    match &msg["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str).or_else(|| b.as_str()))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

pub fn kind(msg: &Value) -> &str {
    msg["type"].as_str().unwrap_or_default()
}

/// The conversation as `Human: …` / `AI: …` lines, as prompts quote it.
pub fn buffer_string(messages: &[Value]) -> String {
    messages
        .iter()
        .map(|m| {
            let role = match kind(m) {
                "human" => "Human",
                "ai" => "AI",
                "system" => "System",
                "tool" => "Tool",
                other => other,
            };
            format!("{role}: {}", text(m))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// One parsed tool call of an AI message.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub args: Value,
}

pub fn tool_calls(msg: &Value) -> Vec<ToolCall> {
    msg["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| ToolCall {
            id: c["id"].as_str().unwrap_or_default().to_owned(),
            name: c["name"].as_str().unwrap_or_default().to_owned(),
            args: c["args"].clone(),
        })
        .collect()
}

/// Calls whose arguments were not valid JSON; each still needs an answer.
pub fn invalid_tool_calls(msg: &Value) -> Vec<ToolCall> {
    msg["invalid_tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| ToolCall {
            id: c["id"].as_str().unwrap_or_default().to_owned(),
            name: c["name"].as_str().unwrap_or_default().to_owned(),
            args: json!({"error": c["error"], "raw": c["args"]}),
        })
        .collect()
}

/// Whether an AI message acted: called a tool (even with bad arguments) or used the provider's
/// own web search.
pub fn acted(msg: &Value) -> bool {
    let any = |key: &str| msg[key].as_array().is_some_and(|a| !a.is_empty());
    any("tool_calls") || any("invalid_tool_calls") || used_native_search(msg)
}

pub fn used_native_search(message: &Value) -> bool {
    message["response_metadata"]["server_tool_use"]["web_search_requests"]
        .as_u64()
        .unwrap_or(0)
        > 0
}

/// Whether a history holds a result of the tool `name`.
pub fn has_result_of(history: &[Value], name: &str) -> bool {
    history
        .iter()
        .any(|m| kind(m) == "tool" && m["name"] == name)
}

/// At most `max` characters of a text, on one line, for events and error messages.
pub fn excerpt(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &flat[..at]),
        None => flat,
    }
}

/// Adds a synthesized tool call to an AI message that made none (an agent fallback); the
/// message says which fallback wrote it.
pub fn add_call(message: &mut Value, name: &str, args: Value, fallback: &str) {
    let id = format!("call_{}", Uuid::new_v4().simple());
    message["tool_calls"] = json!([{"name": name, "args": args, "id": id, "type": "tool_call"}]);
    message["response_metadata"]["fallback"] = json!(fallback);
}

/// The messages of a state list (a missing key is an empty list).
/// A list field of the state, borrowed (empty when absent): most readers need one message or
/// a scan, not a copy of a history that holds every search result.
pub fn slice<'a>(state: &'a crate::store::JsonMap, key: &str) -> &'a [Value] {
    state
        .get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

pub fn list(state: &crate::store::JsonMap, key: &str) -> Vec<Value> {
    state
        .get(key)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// A text field of the state.
pub fn string(state: &crate::store::JsonMap, key: &str) -> String {
    state
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// Today's date the way the prompts show it, e.g. `Mon Jan 15, 2024`.
pub fn today() -> String {
    chrono::Utc::now().format("%a %b %-d, %Y").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_string_renders_roles_and_block_content() {
        let msgs = vec![
            json!({"type": "human", "content": [{"type": "text", "text": "hi"}]}),
            json!({"type": "ai", "content": "hello"}),
        ];
        assert_eq!(buffer_string(&msgs), "Human: hi\nAI: hello");
    }

    #[test]
    fn acting_and_excerpts() {
        assert!(!acted(
            &json!({"type": "ai", "content": "I will search", "tool_calls": []})
        ));
        let mut m = json!({"type": "ai", "content": "plan"});
        add_call(
            &mut m,
            "tavily_search",
            json!({"queries": ["q"]}),
            "planned_search",
        );
        assert!(acted(&m));
        assert_eq!(tool_calls(&m)[0].name, "tavily_search");
        assert_eq!(m["response_metadata"]["fallback"], "planned_search");
        assert_eq!(excerpt("a\n  b   c", 10), "a b c");
        assert_eq!(excerpt("abcdef", 3), "abc…");
    }

    #[test]
    fn today_has_no_leading_zero() {
        let d = today();
        let day = d.split(' ').nth(2).unwrap().trim_end_matches(',');
        assert!(!day.starts_with('0'), "{d}");
    }
}
